-- Link the children just enqueued to their parent (0009_job_children.sql), in the enqueue's
-- transaction: the lookups of a parent's children read this table.
--
-- $1 parent uuid, $2 child ids uuid[].
INSERT INTO drover.job_children (parent_id, child_id)
SELECT $1::uuid, c.id
FROM unnest($2::uuid[]) AS c(id)
ON CONFLICT DO NOTHING
