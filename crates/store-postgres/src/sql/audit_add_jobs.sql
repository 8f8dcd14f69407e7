-- Adds the jobs a later step of a bulk action changed to the record its first step inserted,
-- in that step's transaction, so the record counts exactly the jobs committed.
--
-- $1 id bigint, $2 jobs bigint.
UPDATE drover.audit_log SET jobs = jobs + $2 WHERE id = $1
