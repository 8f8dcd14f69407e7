-- What keeps vacuum from removing dead row versions of drover.jobs, from the statistics
-- views: the open transaction holding back the horizon of this database the most (a session's
-- transaction id or snapshot, oldest first by transaction age; or a prepared transaction),
-- with how long ago it began; the replication slot with the oldest xmin (a standby's horizon);
-- the table's dead and live row estimates and its last vacuum. Left out: this session, and
-- autovacuum workers (other vacuums ignore their horizon). Never any query text.
WITH holders AS (
    SELECT a.pid,
           a.xact_start AS began,
           greatest(age(a.backend_xid), age(a.backend_xmin)) AS xid_age
    FROM pg_stat_activity a
    WHERE a.datname = current_database()
      AND a.pid <> pg_backend_pid()
      AND a.backend_type <> 'autovacuum worker'
      AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
    UNION ALL
    SELECT NULL, p.prepared, age(p.transaction)
    FROM pg_prepared_xacts p
    WHERE p.database = current_database()
),
oldest AS (
    SELECT pid, began FROM holders ORDER BY xid_age DESC, began LIMIT 1
),
slot AS (
    SELECT slot_name::text AS name, age(xmin)::bigint AS xmin_age
    FROM pg_replication_slots
    WHERE xmin IS NOT NULL
    ORDER BY age(xmin) DESC
    LIMIT 1
),
jobs_stats AS (
    SELECT n_dead_tup, n_live_tup, greatest(last_vacuum, last_autovacuum) AS last_vacuum_at
    FROM pg_stat_user_tables
    WHERE relid = 'drover.jobs'::regclass
)
SELECT CASE WHEN o.began IS NOT NULL
            THEN greatest(floor(EXTRACT(EPOCH FROM (now() - o.began)) * 1000), 0)::bigint
       END AS oldest_transaction_age_ms,
       o.pid AS oldest_transaction_pid,
       s.name AS replication_slot,
       s.xmin_age AS replication_slot_xmin_age,
       COALESCE(j.n_dead_tup, 0)::bigint AS jobs_dead_rows,
       COALESCE(j.n_live_tup, 0)::bigint AS jobs_live_rows,
       j.last_vacuum_at AS jobs_last_vacuum_at
FROM (SELECT 1) AS one
LEFT JOIN oldest o ON true
LEFT JOIN slot s ON true
LEFT JOIN jobs_stats j ON true
