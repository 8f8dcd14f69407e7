-- Add a worker's activity to the stored minutes and queues, and forget minutes older than the
-- retention (drover_core::ACTIVITY_RETENTION). Rows go in by minute and queue, so workers
-- adding to the same rows lock them in the same order. Histograms add bucket by bucket.
--
-- $1 minute timestamptz[], $2 queue text[], $3 succeeded bigint[], $4 retried bigint[],
-- $5 failed bigint[], $6 cancelled bigint[], $7 snoozed bigint[], $8 wait_counts text[] (each
-- a bigint array literal, '{0,3,1}'), $9 wait_sum_ms bigint[], $10 duration_counts text[],
-- $11 duration_sum_ms bigint[], $12 the retention in seconds, double precision.
WITH forgotten AS (
    DELETE FROM drover.activity
    WHERE minute < date_trunc('minute', now() - make_interval(secs => $12))
)
INSERT INTO drover.activity AS a (
    minute, queue, succeeded, retried, failed, cancelled, snoozed,
    wait_counts, wait_sum_ms, duration_counts, duration_sum_ms
)
SELECT r.minute, r.queue, r.succeeded, r.retried, r.failed, r.cancelled, r.snoozed,
       r.wait_counts::bigint[], r.wait_sum_ms,
       r.duration_counts::bigint[], r.duration_sum_ms
FROM unnest($1::timestamptz[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[],
            $6::bigint[], $7::bigint[], $8::text[], $9::bigint[], $10::text[], $11::bigint[])
     AS r (minute, queue, succeeded, retried, failed, cancelled, snoozed,
           wait_counts, wait_sum_ms, duration_counts, duration_sum_ms)
WHERE r.minute >= date_trunc('minute', now() - make_interval(secs => $12))
ORDER BY r.minute, r.queue
ON CONFLICT (minute, queue) DO UPDATE SET
    succeeded = a.succeeded + excluded.succeeded,
    retried = a.retried + excluded.retried,
    failed = a.failed + excluded.failed,
    cancelled = a.cancelled + excluded.cancelled,
    snoozed = a.snoozed + excluded.snoozed,
    wait_counts = ARRAY(SELECT x + y FROM unnest(a.wait_counts, excluded.wait_counts) AS u (x, y)),
    wait_sum_ms = a.wait_sum_ms + excluded.wait_sum_ms,
    duration_counts =
        ARRAY(SELECT x + y FROM unnest(a.duration_counts, excluded.duration_counts) AS u (x, y)),
    duration_sum_ms = a.duration_sum_ms + excluded.duration_sum_ms
