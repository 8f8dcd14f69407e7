-- Mark jobs that now have a dependent not yet resolved (the caller holds them locked): their
-- finish leaves the one-statement path for the one that propagates (outcome.rs).
--
-- $1 ids uuid[].
UPDATE drover.jobs j
SET has_dependents = true
WHERE j.id = ANY($1::uuid[]) AND NOT j.has_dependents
