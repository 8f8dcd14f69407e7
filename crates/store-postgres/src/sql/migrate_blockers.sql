-- Sessions that may hold a lock a migration step waited for: the other sessions of this
-- database (autovacuum included) whose transaction has been open longer than $1 milliseconds,
-- those holding a lock on a table of schema drover first, then oldest first; at most $2.
-- A role without pg_read_all_stats sees no transaction start for other roles' sessions, so
-- those are left out. Never the query text: it may hold job data.
SELECT a.pid,
       a.usename::text AS user_name,
       a.application_name,
       a.backend_type,
       a.state,
       floor(EXTRACT(EPOCH FROM (now() - a.xact_start)) * 1000)::bigint AS transaction_age_ms,
       EXISTS (
           SELECT 1
           FROM pg_locks l
           JOIN pg_class c ON c.oid = l.relation
           JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE l.pid = a.pid AND l.granted AND n.nspname = 'drover'
       ) AS holds_drover_lock
FROM pg_stat_activity a
WHERE a.datname = current_database()
  AND a.pid <> pg_backend_pid()
  AND a.xact_start IS NOT NULL
  AND a.xact_start <= now() - $1 * interval '1 millisecond'
ORDER BY holds_drover_lock DESC, a.xact_start
LIMIT $2
