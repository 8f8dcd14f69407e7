-- Consume a schedule tick: advance last_tick_at to $2 only if the schedule exists with the
-- timing the tick was computed from (created_at $3), the tick is after that timing was set,
-- and its last tick is before $2. A
-- concurrent firer of the same tick, or one racing an upsert that changed the timing, waits on
-- the row lock, re-checks and finds nothing to do, so each tick is consumed once. Answers
-- whether the schedule exists (from the statement's snapshot) and whether this call consumed
-- the tick.
--
-- $1 name text, $2 tick timestamptz, $3 created_at timestamptz.
WITH fired AS (
    UPDATE drover.schedules s
    SET last_tick_at = $2
    WHERE s.name = $1
      AND s.created_at = $3
      AND $2 > s.created_at
      AND (s.last_tick_at IS NULL OR s.last_tick_at < $2)
    RETURNING s.name
)
SELECT EXISTS (SELECT 1 FROM drover.schedules WHERE name = $1) AS schedule_exists,
       EXISTS (SELECT 1 FROM fired) AS fired
