-- Running jobs per limit key, for the keys in $1: a job counts once for each of its effective
-- keys (explicit limit_keys, kind:<kind>, queue:<queue>). Run after claim_policies.sql took the
-- policy locks, so it sees every job claimed under them.
--
-- One row: the keys with running jobs, their counts, and the database clock read after the
-- counts (`clock_timestamp()`, not the transaction's start `now()`), so a claim admitted by
-- these counts is dated after every finish they saw.
--
-- $1 keys text[].
WITH counts AS (
    SELECT k.key, count(DISTINCT j.id)::bigint AS running
    FROM drover.jobs j
    CROSS JOIN LATERAL unnest(j.limit_keys || ARRAY['kind:' || j.kind, 'queue:' || j.queue]) AS k(key)
    WHERE j.state = 'running' AND k.key = ANY($1::text[])
    GROUP BY k.key
)
SELECT COALESCE(array_agg(c.key), '{}'::text[]) AS keys,
       COALESCE(array_agg(c.running), '{}'::bigint[]) AS running,
       clock_timestamp() AS db_now
FROM counts c
