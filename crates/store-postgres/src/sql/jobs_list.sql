-- A page of jobs, newest first (id descending, UUID v7 sorts by creation), with optional
-- filters (NULL: no filter) and a keyset cursor. The caller asks for one row more than the page
-- to learn whether a next page exists.
--
-- $1 queue text, $2 state text, $3 kind text, $4 tenant text, $5 meta jsonb (containment),
-- $6 before uuid, $7 limit integer.
SELECT j.*
FROM drover.jobs j
WHERE ($1::text IS NULL OR j.queue = $1)
  AND ($2::text IS NULL OR j.state = $2)
  AND ($3::text IS NULL OR j.kind = $3)
  AND ($4::text IS NULL OR j.tenant = $4)
  AND ($5::jsonb IS NULL OR j.meta @> $5)
  AND ($6::uuid IS NULL OR j.id < $6)
ORDER BY j.id DESC
LIMIT $7
