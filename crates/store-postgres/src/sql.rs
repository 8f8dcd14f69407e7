//! The SQL statements of the store, one `.sql` file each under `src/sql/` (or several joined in
//! order where statements share a part: the batch enqueues' counts and INSERT, the one-statement
//! claims' update, the finishes' `freed_queue` column and parent counts), compiled in with `include_str!`, so a
//! shared part is written once and costs nothing at run time. Every statement takes bind parameters only (never text built from user
//! data), so SQL injection is impossible; sqlx prepares and caches each one per connection
//! unless the statement cache is off (PgBouncer).

macro_rules! statements {
    ($($(#[$doc:meta])* $name:ident = $file:literal $(+ $part:literal)*;)*) => {
        $(
            $(#[$doc])*
            pub(crate) const $name: &str = concat!(
                include_str!(concat!("sql/", $file))
                $(, include_str!(concat!("sql/", $part)))*
            );
        )*

        /// Every statement with the files it is joined from (`a.sql + b.sql`), for the check
        /// against the schema.
        pub const ALL: &[(&str, &str)] = &[$(
            (concat!($file $(, " + ", $part)*), $name)
        ),*];
    };
}

statements! {
    /// Batch insert of new jobs (UNNEST arrays, ON CONFLICT DO NOTHING, NOTIFY).
    ENQUEUE_INSERT = "enqueue_insert.sql" + "enqueue_insert_rows.sql" + "enqueue_insert_end.sql";
    /// Batch insert of jobs without keys (no ON CONFLICT).
    ENQUEUE_INSERT_KEYLESS = "enqueue_insert_keyless.sql" + "enqueue_insert_rows.sql"
        + "enqueue_insert_keyless_end.sql";
    /// Insert of one job without quota counts (a plain INSERT ... VALUES).
    ENQUEUE_ONE = "enqueue_one.sql";
    /// Holders of the keys that made an insert skip jobs.
    ENQUEUE_LOOKUP = "enqueue_lookup.sql";
    /// Quota advisory locks.
    QUOTA_LOCK = "quota_lock.sql";
    /// Claim from one queue in one statement while no limit policy exists.
    CLAIM_QUEUE = "claim_queue.sql" + "claim_start.sql" + "claim_queue_end.sql";
    /// Claim in one statement, up to the first job subject to a limit policy.
    CLAIM_FAST = "claim_fast.sql" + "claim_start.sql" + "claim_fast_end.sql";
    /// Slow claim: lock the policies.
    CLAIM_POLICIES = "claim_policies.sql";
    /// Running jobs per limit key.
    LIMITS_RUNNING = "limits_running.sql";
    /// Slow claim: a page of candidates.
    CLAIM_CANDIDATES = "claim_candidates.sql";
    /// Slow claim: start the admitted jobs.
    CLAIM_IDS = "claim_ids.sql";
    /// Batch heartbeat.
    HEARTBEAT = "heartbeat.sql";
    /// Batch finish.
    FINISH = "finish.sql" + "freed_queue.sql" + "finish_parents.sql" + "finish_end.sql";
    /// Batch finish of successes only, distinct ids.
    FINISH_SUCCEEDED = "finish_succeeded.sql" + "freed_queue.sql" + "finish_parents.sql"
        + "finish_succeeded_end.sql";
    /// Batch finish of successes only, distinct ids, deleting the jobs (`SucceededJobs::Delete`).
    FINISH_SUCCEEDED_DELETE = "finish_succeeded_delete.sql" + "freed_queue.sql";
    /// Write back jobs changed by `apply`.
    JOBS_WRITE = "jobs_write.sql";
    /// Lock one job.
    JOB_LOCK = "job_lock.sql";
    /// Read one job, unlocked, with the database clock.
    JOB_READ = "job_read.sql";
    /// Lock expired leases.
    RESCUE_LOCK = "rescue_lock.sql";
    /// Reconcile claim.
    RECONCILE_CLAIM = "reconcile_claim.sql";
    /// Operator retry checks.
    RETRY_CHECK = "retry_check.sql";
    /// Prune terminal jobs.
    JOBS_PRUNE = "jobs_prune.sql" + "deleted_relations.sql";
    /// The relations an operator delete checks.
    JOB_DELETE_LINKS = "job_delete_links.sql";
    /// Delete one job with its edges and parent link.
    JOB_DELETE = "job_delete.sql" + "deleted_relations.sql";
    /// Record one operator write in its transaction.
    AUDIT_INSERT = "audit_insert.sql";
    /// Count a later step of a bulk action in its record.
    AUDIT_ADD_JOBS = "audit_add_jobs.sql";
    /// The tenants of a bulk action's slice of ids.
    JOBS_TENANTS = "jobs_tenants.sql";
    /// A page of audit records.
    AUDIT_LIST = "audit_list.sql";
    /// Prune audit records past their retention.
    AUDIT_PRUNE = "audit_prune.sql";
    /// One job.
    JOB_GET = "job_get.sql";
    /// Jobs by id.
    JOBS_GET = "jobs_get.sql";
    /// A page of jobs.
    JOBS_LIST = "jobs_list.sql";
    /// A page of the jobs of one workflow or the children of one job.
    JOBS_LIST_MEMBERS = "jobs_list_members.sql";
    /// Queue snapshot.
    QUEUE_SNAPSHOT = "queue_snapshot.sql" + "job_counts_current.sql" + "queue_snapshot_end.sql";
    /// Fold the job counts' changes into their totals.
    JOB_COUNTS_FOLD = "job_counts_fold.sql";
    /// No JIT compilation in this transaction.
    JIT_OFF = "jit_off.sql";
    /// What keeps vacuum from cleaning the jobs table.
    VACUUM_STATUS = "vacuum_status.sql";
    /// The database clock.
    DB_NOW = "db_now.sql";
    /// Pause a queue.
    QUEUE_PAUSE = "queue_pause.sql";
    /// Resume a queue.
    QUEUE_RESUME = "queue_resume.sql";
    /// One queue's stored pause.
    QUEUE_GET = "queue_get.sql";
    /// List queues.
    QUEUES_LIST = "queues_list.sql" + "job_counts_current.sql" + "queues_list_end.sql";
    /// Register a worker.
    WORKER_REGISTER = "worker_register.sql";
    /// Worker heartbeat.
    WORKER_HEARTBEAT = "worker_heartbeat.sql";
    /// Add a worker's activity.
    ACTIVITY_RECORD = "activity_record.sql";
    /// Read the activity from a minute on.
    ACTIVITY_LIST = "activity_list.sql";
    /// Deregister a worker.
    WORKER_DEREGISTER = "worker_deregister.sql";
    /// List workers.
    WORKERS_LIST = "workers_list.sql";
    /// Prune stale workers.
    WORKERS_PRUNE = "workers_prune.sql";
    /// List limit policies.
    LIMITS_LIST = "limits_list.sql";
    /// Create or replace a limit policy.
    LIMIT_SET = "limit_set.sql";
    /// Remove a limit policy.
    LIMIT_CLEAR = "limit_clear.sql";
    /// List schedules.
    SCHEDULES_LIST = "schedules_list.sql";
    /// Lock a schedule for an upsert.
    SCHEDULE_LOCK = "schedule_lock.sql";
    /// Create a schedule unless one has the name.
    SCHEDULE_INSERT = "schedule_insert.sql";
    /// Replace a locked schedule's definition.
    SCHEDULE_UPDATE = "schedule_update.sql";
    /// Remove a schedule.
    SCHEDULE_REMOVE = "schedule_remove.sql";
    /// Consume a schedule tick.
    SCHEDULE_FIRE = "schedule_fire.sql";
    /// Lock jobs by id, in id order.
    JOBS_LOCK = "jobs_lock.sql";
    /// Lock the parents of jobs, in id order.
    PARENTS_LOCK = "parents_lock.sql";
    /// Propagation: the unresolved edges of jobs that ended.
    PROPAGATE_EDGES = "propagate_edges.sql";
    /// Propagation: lock dependents, parents and live children.
    PROPAGATE_LOCK = "propagate_lock.sql";
    /// Mark edges resolved.
    EDGES_RESOLVE = "edges_resolve.sql";
    /// Store the edges of new jobs.
    EDGES_INSERT = "edges_insert.sql";
    /// Edges that wait again after a workflow retry.
    EDGES_REOPEN = "edges_reopen.sql";
    /// Mark jobs that have dependents.
    DEPENDENTS_MARK = "dependents_mark.sql";
    /// Settle new jobs of a workflow path.
    ENQUEUE_SETTLE = "enqueue_settle.sql";
    /// Link new children to their parent.
    CHILDREN_LINK = "children_link.sql";
    /// Whom jobs recorded by the transactional finish wake.
    FINISH_FREED = "finish_freed.sql" + "freed_queue.sql" + "finish_freed_end.sql";
    /// Store a workflow.
    WORKFLOW_INSERT = "workflow_insert.sql";
    WORKFLOW_FORGET = "workflow_forget.sql";
    /// One workflow.
    WORKFLOW_GET = "workflow_get.sql";
    /// Every job of a workflow.
    WORKFLOW_JOBS = "workflow_jobs.sql";
    /// Lock every job of a workflow.
    WORKFLOW_LOCK = "workflow_lock.sql";
    /// The edges of some jobs.
    /// A page of workflows with their counts.
    WORKFLOWS_LIST = "workflows_list.sql";
    /// Sessions that may hold a lock a migration step waited for.
    MIGRATE_BLOCKERS = "migrate_blockers.sql";
}

#[cfg(test)]
mod tests {
    #[test]
    fn statements_use_the_drover_schema_only() {
        for (file, text) in super::ALL {
            assert!(!text.contains("public."), "{file} names schema public");
            for table in [
                "jobs",
                "queues",
                "workers",
                "limits",
                "schedules",
                "job_dependencies",
                "workflows",
            ] {
                for clause in ["FROM ", "JOIN ", "UPDATE ", "INTO "] {
                    let bare = format!("{clause}{table} ");
                    assert!(!text.contains(&bare), "{file}: `{bare}` without schema");
                }
            }
        }
    }
}
