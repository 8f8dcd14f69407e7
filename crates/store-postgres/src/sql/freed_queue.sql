-- Fragment, not a statement: the last column of the finish statements' RETURNING (finish.sql,
-- finish_succeeded.sql, finish_succeeded_delete.sql), written against the finished row as `j`;
-- sql.rs appends it to each of them, so the rule is written once.
--
    -- Whom the finish wakes when the job ran under a limit policy with a max_running bound,
    -- whose place it frees (the store sends it after commit through its notifier, not as a
    -- NOTIFY here, which would serialise commits: notify.rs): the job's queue when only the
    -- policy queue:<queue> bounds it (only that queue's jobs can wait for the place); '*',
    -- every claim loop (StoreEvent::LimitsChanged), when a kind:<kind> or explicit key's
    -- policy does (jobs of any queue may wait for those); NULL otherwise. The first test is
    -- an InitPlan, run once per statement: without such policies no row looks further.
    CASE
        WHEN NOT (SELECT EXISTS (SELECT 1 FROM drover.limits WHERE max_running IS NOT NULL))
            THEN NULL
        WHEN EXISTS (
            SELECT 1
            FROM drover.limits l
            WHERE l.max_running IS NOT NULL
              AND l.key = ANY (j.limit_keys || ('kind:' || j.kind))
              AND l.key <> 'queue:' || j.queue
        ) THEN '*'
        WHEN EXISTS (
            SELECT 1
            FROM drover.limits l
            WHERE l.max_running IS NOT NULL AND l.key = 'queue:' || j.queue
        ) THEN j.queue
    END AS freed_queue
