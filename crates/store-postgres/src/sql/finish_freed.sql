-- Whom the jobs a transactional finish recorded wake (outcome.rs, the path that propagates):
-- the freed_queue column of the one-statement finishes, for these ids.
--
-- $1 id uuid[].
SELECT j.id,
    -- freed_queue: sql/freed_queue.sql, appended here by sql.rs.
