-- The activity of the minutes from $1 on, by minute and queue.
--
-- $1 since timestamptz.
SELECT minute, queue, succeeded, retried, failed, cancelled, snoozed,
       wait_counts, wait_sum_ms, duration_counts, duration_sum_ms
FROM drover.activity
WHERE minute >= $1
ORDER BY minute, queue
