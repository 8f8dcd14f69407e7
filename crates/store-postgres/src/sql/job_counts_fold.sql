-- Fold the committed changes of the job counts into their totals (0010_job_counts.sql); a
-- no-op while another fold runs.
SELECT drover.job_counts_fold()
