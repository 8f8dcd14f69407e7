-- Fragment, not a statement: the CTEs that follow a one-statement finish's `updated` CTE
-- (finish.sql, finish_succeeded.sql), which returns `state` and `parent_id` of every job it
-- recorded. sql.rs joins it after them, so the rule is written once.
--
-- A child that ended counts as finished for its parent in the same statement (core's
-- ChildFinished, docs/design.md section 10): one fewer live child; a parent waiting for its
-- children with none left and no pending dependency is queued, ready now (`parents.woken`, which
-- the end of each statement notifies). The parents are locked in id order first
-- (parents_locked), so finishes of children of the same parents never deadlock on each other.
-- A child with dependents or live children of its own never comes here (the statements leave it
-- to the transactional finish), and neither does its parent: a parent has a live child.
),
finished_children AS (
    SELECT u.parent_id, count(*)::integer AS n
    FROM updated u
    WHERE u.parent_id IS NOT NULL AND u.state IN ('succeeded', 'failed', 'cancelled')
    GROUP BY u.parent_id
),
parents_locked AS (
    SELECT p.id
    FROM drover.jobs p
    WHERE p.id IN (SELECT c.parent_id FROM finished_children c)
    ORDER BY p.id
    FOR UPDATE OF p
),
parents AS (
    UPDATE drover.jobs p
    SET live_children = GREATEST(p.live_children - c.n, 0),
        state = CASE
            WHEN p.state = 'waiting' AND p.live_children <= c.n AND p.pending_dependencies = 0
                THEN 'queued'
            ELSE p.state
        END,
        run_at = CASE
            WHEN p.state = 'waiting' AND p.live_children <= c.n AND p.pending_dependencies = 0
                THEN now()
            ELSE p.run_at
        END
    FROM finished_children c
    JOIN parents_locked l ON l.id = c.parent_id
    WHERE p.id = c.parent_id
    -- A parent queued by this statement is the only queued one whose run_at is the statement's
    -- now() with no live child left.
    RETURNING p.queue, (p.state = 'queued' AND p.live_children = 0 AND p.run_at = now()) AS woken
)
