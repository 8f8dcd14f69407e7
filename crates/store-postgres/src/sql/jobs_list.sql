-- A page of jobs, newest first (id descending; UUID v7 sorts by creation), with optional
-- filters (NULL: no filter) and a keyset cursor. The caller asks for one row more than the page
-- to learn whether a next page exists.
--
-- The jobs are read in six branches that each match a partial index (see the migrations):
-- jobs waiting for other jobs through jobs_blocked_idx (0006_workflows.sql), jobs waiting for
-- a worker through jobs_waiting_idx and running ones through
-- jobs_running_lease_idx (few: bounded by the quotas and the slots), and each terminal state
-- on its own, in id order through jobs_done_state_idx or, with a queue filter,
-- jobs_done_queue_idx. In a terminal branch the kind and tenant filters are one containment
-- test on the job's facets, written exactly as jobs_done_facets_idx's expression
-- (0003_fewer_index_writes.sql), so the planner can answer a rare value from that index (a
-- bitmap, then sorted) and a common one by walking a state index newest first, choosing from
-- the statistics jobs_facets_stats keeps on that expression. Branches whose state the filter
-- excludes are folded away when the statement is planned for the given values (a branch of
-- two states says so with a test of $2 alone: PostgreSQL does not see `state IN (a, b) AND
-- state = c` as false, and would scan for it); the newest rows
-- of the branches are merged. A meta filter with keys is stated beside `meta <> '{}'` in the
-- queued and terminal branches (it implies it) so that the partial GIN indexes of jobs with
-- meta apply: jobs_queued_meta_set_idx (0013_queued_meta_index.sql) and jobs_done_meta_set_idx
-- (0002_meta_index_nonempty.sql).
--
-- The page's large fields (args, result, errors, progress) are sent only when asked for ($9 to
-- $12): a summary leaves them empty, and PostgreSQL then never reads their out-of-line (TOAST)
-- values. The columns are listed one by one for that reason: a new column of drover.jobs must
-- be added here too.
--
-- $1 queue text, $2 state text, $3 kind text, $4 tenant text, $5 meta jsonb (containment),
-- $6 before uuid, $7 limit bigint, $8 facets text[] (the kind and tenant filters as
-- 'k:<kind>' and 't:<tenant>'; empty without them), $9 args, $10 result, $11 errors,
-- $12 progress boolean (send the field).
SELECT page.id, page.kind, page.queue, page.tenant,
       CASE WHEN $9::boolean THEN page.args ELSE 'null'::jsonb END AS args,
       page.meta, page.priority, page.run_at, page.state, page.attempt, page.max_attempts,
       page.fencing_token, page.lease_owner, page.lease_expires_at, page.cancel_requested,
       CASE WHEN $10::boolean THEN page.result END AS result,
       CASE WHEN $11::boolean THEN page.errors ELSE '[]'::jsonb END AS errors,
       CASE WHEN $12::boolean THEN page.progress END AS progress,
       page.idempotency_key, page.request_hash, page.unique_key, page.limit_keys,
       page.created_at, page.attempted_at, page.started_at, page.finished_at,
       page.workflow_id, page.name, page.parent_id, page.depends_on, page.run_regardless,
       page.pending_dependencies, page.live_children, page.trace_context
FROM (
    (SELECT j.*
     FROM drover.jobs j
     WHERE j.state = 'waiting'
       AND ($2::text IS NULL OR j.state = $2)
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.kind = $3)
       AND ($4::text IS NULL OR j.tenant = $4)
       AND ($5::jsonb IS NULL OR j.meta @> $5)
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT j.*
     FROM drover.jobs j
     WHERE j.state IN ('queued', 'reconciling')
       AND ($2::text IS NULL OR $2 IN ('queued', 'reconciling'))
       AND ($2::text IS NULL OR j.state = $2)
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.kind = $3)
       AND ($4::text IS NULL OR j.tenant = $4)
       AND ($5::jsonb IS NULL OR $5 = '{}'::jsonb OR (j.meta @> $5 AND j.meta <> '{}'::jsonb))
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT j.*
     FROM drover.jobs j
     WHERE j.state = 'running'
       AND ($2::text IS NULL OR j.state = $2)
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.kind = $3)
       AND ($4::text IS NULL OR j.tenant = $4)
       AND ($5::jsonb IS NULL OR j.meta @> $5)
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT j.*
     FROM drover.jobs j
     WHERE j.state = 'succeeded'
       AND ($2::text IS NULL OR $2 = 'succeeded')
       AND ($1::text IS NULL OR j.queue = $1)
       AND (cardinality($8::text[]) = 0
            OR ARRAY['k:' || j.kind, 't:' || j.tenant] @> $8::text[])
       AND ($5::jsonb IS NULL OR $5 = '{}'::jsonb OR (j.meta @> $5 AND j.meta <> '{}'::jsonb))
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT j.*
     FROM drover.jobs j
     WHERE j.state = 'failed'
       AND ($2::text IS NULL OR $2 = 'failed')
       AND ($1::text IS NULL OR j.queue = $1)
       AND (cardinality($8::text[]) = 0
            OR ARRAY['k:' || j.kind, 't:' || j.tenant] @> $8::text[])
       AND ($5::jsonb IS NULL OR $5 = '{}'::jsonb OR (j.meta @> $5 AND j.meta <> '{}'::jsonb))
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT j.*
     FROM drover.jobs j
     WHERE j.state = 'cancelled'
       AND ($2::text IS NULL OR $2 = 'cancelled')
       AND ($1::text IS NULL OR j.queue = $1)
       AND (cardinality($8::text[]) = 0
            OR ARRAY['k:' || j.kind, 't:' || j.tenant] @> $8::text[])
       AND ($5::jsonb IS NULL OR $5 = '{}'::jsonb OR (j.meta @> $5 AND j.meta <> '{}'::jsonb))
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
) AS page
ORDER BY page.id DESC
LIMIT $7
