    -- claim_queue.sql, continued.
    WHERE j.ctid = ANY (ARRAY(SELECT c.ctid FROM candidates c))
    RETURNING j.*
)
SELECT EXISTS (SELECT 1 FROM drover.limits) AS blocked, claimed.*
FROM (SELECT 1) AS one
LEFT JOIN claimed ON true
