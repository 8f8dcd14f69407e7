-- Drover schema, version 10: job counts per queue and state, maintained as jobs change
-- (docs/design.md, "Counts"; ADR 0015).
--
-- The queue overview (the dashboard, `drover queues`, the metrics) read its counts with
-- count(*) over every job, which grows with the table. Now:
--
-- - drover.job_count_changes: one row per (queue, state) a statement on drover.jobs changed,
--   with the change in jobs (+n, -n), written by the statement triggers below in the
--   statement's own transaction, so a change is counted exactly when it commits. Insert-only:
--   concurrent job writes never wait on each other for it.
-- - drover.job_counts: the totals, into which drover.job_counts_fold() moves the changes
--   (under an advisory lock, one fold at a time). A count is its row plus its changes not yet
--   folded; the overview reads both in one statement (queue_snapshot.sql).
--
-- TRUNCATE of drover.jobs empties both (it fires no row change).
--
-- The triggers are created first, in a locking step: job writes committed after it are
-- counted as changes. The online step then counts the table once, and in the same statement
-- (one snapshot) deletes the changes that count already includes. Nothing folds before the
-- migration is recorded (only binaries of this version call the fold), and a repeated run
-- empties the totals and counts again.

-- drover:step locking
CREATE TABLE IF NOT EXISTS drover.job_counts (
    queue  text   NOT NULL,
    state  text   NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (queue, state)
);

CREATE TABLE IF NOT EXISTS drover.job_count_changes (
    queue  text   NOT NULL,
    state  text   NOT NULL,
    n      bigint NOT NULL
);

CREATE OR REPLACE FUNCTION drover.job_counts_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO drover.job_count_changes (queue, state, n)
    SELECT queue, state, count(*) FROM inserted_jobs GROUP BY queue, state;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION drover.job_counts_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Most updates keep queue and state (heartbeats, progress): their +1 and -1 cancel out
    -- and write nothing.
    INSERT INTO drover.job_count_changes (queue, state, n)
    SELECT queue, state, sum(n)
    FROM (SELECT queue, state, 1::bigint AS n FROM updated_jobs_after
          UNION ALL
          SELECT queue, state, -1::bigint FROM updated_jobs_before) c
    GROUP BY queue, state
    HAVING sum(n) <> 0;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION drover.job_counts_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO drover.job_count_changes (queue, state, n)
    SELECT queue, state, -count(*) FROM deleted_jobs GROUP BY queue, state;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION drover.job_counts_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM drover.job_count_changes;
    DELETE FROM drover.job_counts;
    RETURN NULL;
END
$$;

-- Folds the committed changes into the totals; skips (returns false) while another fold
-- runs. Called by the overview read and by the workers' lease rescue.
CREATE OR REPLACE FUNCTION drover.job_counts_fold() RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    -- The ASCII bytes of `drovercn`.
    IF NOT pg_try_advisory_xact_lock(7237954696497935214) THEN
        RETURN false;
    END IF;
    WITH moved AS (
        DELETE FROM drover.job_count_changes RETURNING queue, state, n
    ), summed AS (
        SELECT queue, state, sum(n)::bigint AS n FROM moved GROUP BY queue, state
    )
    INSERT INTO drover.job_counts AS c (queue, state, n)
    SELECT queue, state, n FROM summed
    ORDER BY queue, state
    ON CONFLICT (queue, state) DO UPDATE SET n = c.n + excluded.n;
    DELETE FROM drover.job_counts WHERE n = 0;
    RETURN true;
END
$$;

DROP TRIGGER IF EXISTS job_counts_inserted ON drover.jobs;
CREATE TRIGGER job_counts_inserted AFTER INSERT ON drover.jobs
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION drover.job_counts_inserted();

DROP TRIGGER IF EXISTS job_counts_updated ON drover.jobs;
CREATE TRIGGER job_counts_updated AFTER UPDATE ON drover.jobs
    REFERENCING OLD TABLE AS updated_jobs_before NEW TABLE AS updated_jobs_after
    FOR EACH STATEMENT EXECUTE FUNCTION drover.job_counts_updated();

DROP TRIGGER IF EXISTS job_counts_deleted ON drover.jobs;
CREATE TRIGGER job_counts_deleted AFTER DELETE ON drover.jobs
    REFERENCING OLD TABLE AS deleted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION drover.job_counts_deleted();

DROP TRIGGER IF EXISTS job_counts_truncated ON drover.jobs;
CREATE TRIGGER job_counts_truncated AFTER TRUNCATE ON drover.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION drover.job_counts_truncated();

-- A run cut short before the online step is recorded starts again from empty totals.
DELETE FROM drover.job_counts;

-- drover:step online
WITH included AS (
    DELETE FROM drover.job_count_changes RETURNING 1
)
INSERT INTO drover.job_counts (queue, state, n)
SELECT queue, state, count(*) FROM drover.jobs GROUP BY queue, state
