    -- claim_fast.sql, continued.
    FROM candidates c
    WHERE j.id = c.id
      AND NOT c.limited
      AND NOT EXISTS (
          SELECT 1 FROM first_limited f
          WHERE (f.priority, f.run_at, f.id) < (c.priority, c.run_at, c.id)
      )
    RETURNING j.*
)
SELECT EXISTS (SELECT 1 FROM first_limited) AS blocked, claimed.*
FROM (SELECT 1) AS one
LEFT JOIN claimed ON true
