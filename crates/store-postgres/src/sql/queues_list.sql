-- Queues that have jobs or a stored pause state, by name: those with a count in the maintained
-- job counts (job_counts_current.sql follows), so it costs the same at any table size.
WITH
