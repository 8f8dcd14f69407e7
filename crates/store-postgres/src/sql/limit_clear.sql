-- Remove a limit policy.
--
-- $1 key text.
DELETE FROM drover.limits WHERE key = $1
