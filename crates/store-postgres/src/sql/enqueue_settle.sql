-- Settle new jobs of a workflow path after the insert stored them queued (workflow.rs): the
-- state core's `workflow::settle_new` decided (waiting, queued, or cancelled by a failed
-- dependency) and the workflow columns, in the inserting transaction, so no other transaction
-- ever sees them queued (the insert's wake-up of a job that now waits is a harmless spurious
-- one).
--
-- $1 id uuid[], $2 state text[], $3 pending_dependencies integer[], $4 run_at timestamptz[],
-- $5 finished_at timestamptz[], $6 errors jsonb[], $7 workflow_id uuid[], $8 name text[],
-- $9 parent_id uuid[], $10 depends_on text[] (comma-joined uuids; '' for none),
-- $11 run_regardless boolean[], $12 has_dependents boolean[].
UPDATE drover.jobs j
SET state = u.state,
    pending_dependencies = u.pending_dependencies,
    run_at = u.run_at,
    finished_at = u.finished_at,
    errors = u.errors,
    workflow_id = u.workflow_id,
    name = u.name,
    parent_id = u.parent_id,
    depends_on = CASE WHEN u.depends_on = '' THEN NULL
                      ELSE string_to_array(u.depends_on, ',')::uuid[] END,
    run_regardless = u.run_regardless,
    has_dependents = j.has_dependents OR u.has_dependents
FROM unnest($1::uuid[], $2::text[], $3::integer[], $4::timestamptz[], $5::timestamptz[],
            $6::jsonb[], $7::uuid[], $8::text[], $9::uuid[], $10::text[], $11::boolean[],
            $12::boolean[])
     AS u(id, state, pending_dependencies, run_at, finished_at, errors, workflow_id, name,
          parent_id, depends_on, run_regardless, has_dependents)
WHERE j.id = u.id
