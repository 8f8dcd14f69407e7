-- Drover schema, version 11: the workers' activity per minute and queue (docs/design.md,
-- "Activity").
--
-- Each worker adds up the runs it ends per minute and queue (outcome counts, queue wait and
-- run time histograms with the bucket bounds of drover_core::activity) and adds them here with
-- its registration heartbeat (activity_record.sql): one row per minute and queue, whatever
-- the number of jobs, and no job's own write touches the table. Rows older than a day are
-- deleted by the same statement. The dashboard's charts read the last hour.

-- drover:step locking
CREATE TABLE IF NOT EXISTS drover.activity (
    minute          timestamptz NOT NULL,
    queue           text        NOT NULL,
    succeeded       bigint      NOT NULL,
    retried         bigint      NOT NULL,
    failed          bigint      NOT NULL,
    cancelled       bigint      NOT NULL,
    snoozed         bigint      NOT NULL,
    wait_counts     bigint[]    NOT NULL,
    wait_sum_ms     bigint      NOT NULL,
    duration_counts bigint[]    NOT NULL,
    duration_sum_ms bigint      NOT NULL,
    PRIMARY KEY (minute, queue)
);
