-- Lock the parents of these jobs first (outcome.rs, the transactional finish), in id order: a
-- parent's cancel locks the parent, then its children, so a child's finish that locked the
-- child first would wait for the parent the other way round (a deadlock PostgreSQL breaks only
-- after deadlock_timeout). parent_id never changes, so reading it unlocked is safe.
--
-- $1 job ids uuid[].
SELECT p.id
FROM drover.jobs p
WHERE p.id IN (SELECT c.parent_id FROM drover.jobs c
               WHERE c.id = ANY($1::uuid[]) AND c.parent_id IS NOT NULL)
ORDER BY p.id
FOR UPDATE OF p
