-- A page of jobs, newest first (id descending; UUID v7 sorts by creation), with optional
-- filters (NULL: no filter) and a keyset cursor. The caller asks for one row more than the page
-- to learn whether a next page exists.
--
-- The jobs are read in four branches that each use an index (see 0001_initial.sql): live jobs
-- through jobs_pending_idx (few: bounded by the quotas), and each terminal state through the
-- partial list indexes, which give id order for a queue, kind or tenant filter. Branches whose
-- state the filter excludes are folded away when the statement is planned for the given
-- values; the newest rows of the four branches are merged. A meta filter with keys is stated
-- beside `meta <> '{}'` in the terminal branches (it implies it) so that the partial GIN index
-- jobs_done_meta_set_idx (terminal jobs with meta, 0002_meta_index_nonempty.sql) applies.
--
-- $1 queue text, $2 state text, $3 kind text, $4 tenant text, $5 meta jsonb (containment),
-- $6 before uuid, $7 limit bigint.
SELECT page.*
FROM (
    (SELECT j.*
     FROM drover.jobs j
     WHERE j.state IN ('queued', 'running', 'reconciling')
       AND ($2::text IS NULL OR j.state = $2)
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.kind = $3)
       AND ($4::text IS NULL OR j.tenant = $4)
       AND ($5::jsonb IS NULL OR j.meta @> $5)
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT j.*
     FROM drover.jobs j
     WHERE j.state = 'succeeded'
       AND ($2::text IS NULL OR $2 = 'succeeded')
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.kind = $3)
       AND ($4::text IS NULL OR j.tenant = $4)
       AND ($5::jsonb IS NULL OR $5 = '{}'::jsonb OR (j.meta @> $5 AND j.meta <> '{}'::jsonb))
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT j.*
     FROM drover.jobs j
     WHERE j.state = 'failed'
       AND ($2::text IS NULL OR $2 = 'failed')
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.kind = $3)
       AND ($4::text IS NULL OR j.tenant = $4)
       AND ($5::jsonb IS NULL OR $5 = '{}'::jsonb OR (j.meta @> $5 AND j.meta <> '{}'::jsonb))
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
    UNION ALL
    (SELECT j.*
     FROM drover.jobs j
     WHERE j.state = 'cancelled'
       AND ($2::text IS NULL OR $2 = 'cancelled')
       AND ($1::text IS NULL OR j.queue = $1)
       AND ($3::text IS NULL OR j.kind = $3)
       AND ($4::text IS NULL OR j.tenant = $4)
       AND ($5::jsonb IS NULL OR $5 = '{}'::jsonb OR (j.meta @> $5 AND j.meta <> '{}'::jsonb))
       AND ($6::uuid IS NULL OR j.id < $6)
     ORDER BY j.id DESC
     LIMIT $7)
) AS page
ORDER BY page.id DESC
LIMIT $7
