//! Drover's store contract suite (docs/design.md sections 4 and 8), and the runner suite that drives
//! `drover-runner` workers against every store.
//!
//! Every case is one `pub async fn(&dyn StoreFactory)` in [`cases`] (store contract) or
//! [`runner_cases`] (runner behaviour); [`contract_suite!`] and [`runner_suite!`] stamp one
//! `#[tokio::test]` per case for a store, so running a whole suite against a store takes one
//! line (see `tests/memory.rs` and `tests/postgres.rs`). When a store behaviour changes, extend
//! the contract suite, not one store's tests; when a runner behaviour touches the store, add a
//! runner case.

pub mod cases;
pub mod harness;
pub mod leftovers;
pub mod postgres;
pub mod process;
pub mod runner_cases;

pub use harness::{run_case, Harness, StoreFactory};

/// Runs every contract case against one store: `contract_suite!("memory", Some(factory))`.
/// The one list of contract cases: a new case in [`cases`] goes here, and the test
/// `every_case_runs_against_every_store` fails until it does. `contract_suite!(@list m (a))`
/// hands the list to macro `m` as `m!(a; case, ...)`.
#[macro_export]
macro_rules! contract_suite {
    ($store:literal, $factory:expr) => {
        $crate::contract_suite!(@list contract_cases ($store, $factory));
    };
    (@list $then:ident ($($arguments:tt)*)) => {
        $crate::$then! {$($arguments)*;
            enqueue_defaults,
            enqueue_round_trips_every_field,
            enqueue_batch_answers_in_order,
            enqueue_large_batch_stores_every_field,
            enqueue_deeply_nested_args_round_trip,
            enqueue_batch_mixes_run_at_and_delays,
            enqueue_concurrent_single_jobs_each_get_their_own,
            enqueue_concurrent_single_jobs_under_quotas,
            enqueue_batch_with_invalid_job_stores_nothing,
            enqueue_rejects_bad_max_attempts,
            enqueue_rejects_nul_characters,
            enqueue_rejects_oversized_args_and_meta,
            enqueue_run_at_in_the_past_is_claimable_at_once,
            enqueue_delay_uses_store_clock,
            enqueue_rejects_run_at_out_of_range,
            enqueue_idempotency_replay_returns_current_state,
            enqueue_idempotency_other_request_conflicts,
            enqueue_idempotency_legacy_row_conflicts,
            enqueue_batch_conflict_names_the_item,
            enqueue_idempotency_keys_scoped_per_tenant,
            enqueue_unique_key_returns_live_duplicate,
            enqueue_unique_key_free_once_terminal,
            enqueue_unique_key_scoped_per_tenant,
            enqueue_batch_repeated_keys_resolve_to_first,
            enqueue_global_quota,
            enqueue_tenant_quota,
            enqueue_quota_refuses_whole_batch,
            enqueue_quota_counts_running_and_reconciling,
            enqueue_replay_and_duplicate_pass_a_full_quota,
            enqueue_concurrent_same_idempotency_key_creates_one,
            enqueue_concurrent_enqueuers_respect_quota,
            enqueue_replay_after_failure_shows_failed,
            claim_orders_by_priority_then_run_at_then_id,
            claim_skips_jobs_not_ready_until_time_passes,
            claim_skips_paused_queue,
            claim_only_registered_kinds,
            claim_filters_by_queue,
            claim_respects_limit,
            claim_fencing_token_strictly_increases,
            claim_sets_lease,
            claim_rejects_bad_limit_and_lease,
            claim_concurrent_claimers_take_each_job_once,
            lease_heartbeat_extends_lease,
            lease_heartbeat_saves_meta_and_progress,
            lease_heartbeat_reports_cancel_requested,
            lease_heartbeat_stale_token_is_lease_lost_per_item,
            lease_heartbeat_after_expiry_is_lease_lost,
            lease_heartbeat_rejects_bad_input,
            lease_heartbeat_bounds_meta_and_progress_by_the_meta_bound,
            outcome_complete_stores_result,
            outcome_fail_with_retry_requeues_after_delay,
            outcome_fail_on_last_attempt_fails,
            outcome_fail_without_retry_fails_at_once,
            outcome_message_with_nul_is_stored_with_replacement,
            outcome_snooze_does_not_spend_attempt,
            outcome_release_does_not_spend_attempt,
            outcome_cancelled_records_cancelled,
            outcome_stale_token_changes_nothing,
            outcome_expired_lease_changes_nothing,
            outcome_batch_answers_per_item,
            outcome_result_over_size_is_refused,
            outcome_delete_succeeded_deletes_only_successes,
            outcome_delete_succeeded_frees_idempotency_key,
            cancel_queued_job,
            cancel_running_then_fail_ends_cancelled,
            cancel_running_then_complete_ends_succeeded,
            cancel_running_then_release_ends_cancelled,
            cancel_reconciling_job,
            cancel_finished_job_is_invalid_transition,
            cancel_unknown_is_not_found,
            retry_from_each_terminal_state,
            trace_context_survives_retries_and_operator_retry,
            trace_context_stored_by_every_enqueue_path,
            retry_of_live_job_is_invalid_transition,
            retry_rechecks_quota,
            retry_quota_counts_running_jobs,
            retry_conflicts_with_live_unique_holder,
            retry_keeps_its_own_unique_key,
            retry_unknown_is_not_found,
            delete_removes_a_job_that_is_not_running,
            delete_of_a_running_or_reconciling_job_is_refused,
            delete_keeps_the_jobs_live_jobs_need,
            delete_of_a_parent_or_dependency_agrees_across_stores,
            bulk_by_ids_changes_what_applies_and_skips_the_rest,
            bulk_by_filter_reaches_every_match_in_steps,
            bulk_is_scoped_to_the_actors_tenant,
            bulk_rejects_a_bad_selection,
            bulk_cancel_counts_the_jobs_it_cascades_to,
            bulk_of_one_tenants_jobs_is_recorded_with_that_tenant,
            bulk_scope_reads_only_ids_and_tenants,
            requeue_makes_a_scheduled_job_ready_now,
            requeue_of_a_job_waiting_for_a_retry_or_snooze_keeps_its_attempts,
            requeue_of_a_ready_job_changes_nothing,
            requeue_of_a_job_that_is_not_queued_is_invalid_transition,
            rescue_expired_requeues_with_attempt_spent,
            rescue_spent_attempts_fail,
            rescue_reconciler_kind_goes_reconciling,
            rescue_cancel_requested_goes_cancelled,
            rescue_leaves_unexpired_leases,
            rescue_respects_limit,
            rescue_is_exactly_once_under_concurrency,
            rescue_late_write_of_old_worker_is_lease_lost,
            rescue_of_a_job_that_never_started_gives_the_attempt_back,
            rescue_gives_an_attempt_back_a_bounded_number_of_times,
            started_claim_starts_the_first_jobs_and_claims_the_rest_ahead,
            started_claim_under_a_limit_policy_starts_the_first_jobs,
            started_claim_refuses_a_start_above_the_limit,
            started_heartbeat_records_the_start_of_a_job_claimed_ahead,
            started_finish_records_the_start_with_the_outcome,
            started_snapshot_counts_claimed_ahead_apart_from_running,
            reconcile_claim_sets_lease_and_token,
            reconcile_resolve_succeeded,
            reconcile_resolve_failed_stores_message,
            reconcile_inconclusive_stays_reconciling,
            reconcile_stale_token_is_lease_lost,
            reconcile_expired_lease_lets_another_sweep_take_it,
            reconcile_rejects_unknown_and_bad_input,
            prune_deletes_only_old_terminal_jobs,
            prune_uses_finished_at,
            prune_is_bounded_by_limit,
            prune_never_touches_future_scheduled_jobs,
            prune_frees_idempotency_key,
            prune_rejects_bad_limit,
            list_filters_by_queue_state_kind_tenant,
            list_filters_by_meta_containment,
            list_filters_finished_jobs_by_meta,
            list_filters_finished_jobs_by_kind_and_tenant,
            list_paginates_newest_first,
            list_default_page_size,
            list_summaries_leave_out_args_result_errors_and_progress,
            list_rejects_bad_filter,
            list_searches_args_by_containment_in_bounded_pages,
            list_get_unknown_is_not_found,
            queues_pause_resume_idempotent,
            queues_racing_pauses_and_resumes_change_it_once,
            queues_list_shows_queues_with_jobs_or_pause,
            queues_resume_of_an_empty_queue_leaves_no_entry,
            snapshot_counts_per_state,
            snapshot_vacuum_status_is_none_without_vacuum,
            snapshot_oldest_ready_age,
            snapshot_includes_paused_empty_queue,
            snapshot_counts_follow_every_change,
            snapshot_ready_beyond_the_count_bound,
            workers_register_heartbeat_list_deregister,
            activity_adds_up_per_minute_and_queue,
            activity_rejects_bad_entries_keeping_nothing,
            activity_keeps_the_retention_only,
            workers_host_name_is_stored_sanitized,
            workers_prune_stale,
            workers_heartbeat_unknown_is_not_found,
            limits_max_running_explicit_key,
            limits_max_running_implicit_kind_key,
            limits_max_running_implicit_queue_key,
            limits_backlog_behind_a_full_policy_hides_no_other_job,
            limits_rate_spaces_claims_period_over_count_apart,
            limits_claim_answer_says_when_a_rate_admits_the_next_job,
            limits_skipped_jobs_keep_order_and_spend_nothing,
            limits_refused_claim_spends_no_other_rate,
            limits_replace_keeps_rate_state,
            limits_changed_rate_spaces_the_next_claim_from_the_last_one,
            limits_new_policy_counts_jobs_already_running,
            limits_set_list_replace_clear,
            limits_rate_period_is_kept_in_whole_milliseconds,
            limits_clear_unknown_is_not_found,
            limits_set_rejects_policy_without_bound,
            limits_concurrent_claimers_respect_max_running,
            schedules_upsert_list_remove,
            schedules_reject_bad_input,
            schedules_fire_enqueues_once,
            schedules_fire_concurrently_enqueues_exactly_one,
            schedules_older_tick_after_newer_is_none,
            schedules_fire_missing_is_not_found,
            schedules_quota_failure_leaves_tick_unconsumed,
            schedules_writing_the_stored_schedule_again_changes_nothing,
            schedules_new_job_keeps_ticks_and_new_timing_starts_after_the_change,
            schedules_no_write_makes_a_fired_tick_fire_again,
            schedules_writes_racing_fires_fire_each_tick_once,
            schedules_concurrent_first_writes_create_it_once,
            events_jobs_available_after_enqueue,
            events_jobs_available_after_batch_enqueue,
            events_jobs_available_after_resume,
            events_limits_changed_after_limit_set_and_clear,
            events_jobs_available_when_a_job_under_max_running_finishes,
            events_cancel_requested_after_cancel_of_running_job,
            events_jobs_available_after_release,
            events_jobs_available_after_retry,
            events_jobs_available_after_requeue,
            stored_json_numbers_of_args_and_meta,
            stored_json_numbers_of_heartbeat_and_result,
            stored_json_numbers_of_schedule_args,
            stored_run_at_folds_leap_seconds_and_floors_to_microseconds,
            stored_schedule_tick_folds_leap_seconds_and_floors,
            transitions_every_state_and_event_match_apply,
            workflows_dependency_on_a_finished_job_resolves_at_enqueue,
            workflows_waiting_job_is_never_claimed_nor_rescued,
            workflows_waiting_jobs_count_in_snapshot_and_quotas,
            workflows_last_dependency_finish_queues_the_dependent_at_once,
            workflows_failed_dependency_cancels_the_chain_but_not_run_regardless,
            workflows_concurrent_finishes_of_the_last_two_dependencies_queue_once,
            workflows_unknown_or_foreign_dependency_is_invalid_and_stores_nothing,
            workflows_graph_enqueue_stores_names_ids_and_dependencies,
            workflows_bad_graph_is_invalid_and_stores_nothing,
            workflows_graph_is_all_or_nothing,
            workflows_duplicate_in_a_graph_is_waited_for,
            workflows_children_are_fenced_by_the_parent_lease,
            workflows_parent_waits_for_children_and_resumes_after_the_last,
            workflows_empty_fan_out_resumes_at_once,
            workflows_parent_reads_its_children_outcomes,
            workflows_cancel_of_a_parent_cascades_to_its_children,
            workflows_cancel_of_a_dependency_propagates,
            workflows_prune_keeps_jobs_live_jobs_need,
            workflows_delete_succeeded_keeps_a_dependency_and_a_child,
            workflows_get_and_list,
            workflows_cancel_and_retry_as_a_whole,
            workflows_retry_of_a_child_counts_it_live_again,
            workflows_paused_queue_holds_children,
            workflows_crash_between_children_and_wait_is_rescued,
            workflows_chain_of_a_thousand_completes,
            workflows_fan_out_of_ten_thousand_children_completes,
            workflows_jobs_get_answers_in_the_order_asked,
            workflows_retry_waits_for_live_dependencies_and_retried_children,
            workflows_resent_graph_answers_the_first_workflow,
            workflows_rescue_and_reconcile_ends_propagate,
            audit_every_operation_is_recorded_with_its_write,
            audit_a_refused_operation_records_nothing,
            audit_list_filters_and_pages,
            audit_prune_deletes_only_old_records,
            workflows_batched_finish_answers_the_state_its_propagation_left,
            workflows_rescue_answers_the_state_its_propagation_left,
        }
    };
}

/// Runs every runner case against one store: `runner_suite!("memory", Some(factory))`.
/// The one list of runner cases, kept like [`contract_suite!`]'s.
#[macro_export]
macro_rules! runner_suite {
    ($store:literal, $factory:expr) => {
        $crate::runner_suite!(@list runner_cases ($store, $factory));
    };
    (@list $then:ident ($($arguments:tt)*)) => {
        $crate::$then! {$($arguments)*;
            runner_jobs_run_and_succeed,
            runner_ended_runs_reach_the_activity_with_the_heartbeat,
            runner_typed_args_run_and_bad_args_fail_without_retry,
            runner_only_registered_kinds_are_claimed,
            runner_jobs_held_by_a_rate_run_without_waiting_for_the_poll,
            runner_jobs_held_by_max_running_start_when_the_holder_finishes,
            runner_an_event_does_not_leave_rate_held_jobs_to_the_poll,
            runner_failures_retry_with_backoff_until_failed,
            runner_snooze_runs_again_later_without_spending_an_attempt,
            runner_panic_is_a_retryable_failure,
            runner_timeout_cancels_the_handler_and_records_a_retryable_failure,
            runner_shutdown_releases_a_running_job_without_spending_an_attempt,
            runner_job_finishing_within_the_grace_period_succeeds,
            runner_cancel_of_a_running_job_reaches_the_handler_and_ends_cancelled,
            runner_late_completion_after_lease_loss_is_rejected,
            runner_progress_and_meta_are_saved_by_heartbeats,
            runner_long_kind_in_its_own_pool_cannot_starve_the_others,
            runner_a_kind_reserved_by_a_pool_is_left_to_it_by_the_general_pool,
            runner_max_concurrent_caps_executions_over_all_pools,
            runner_retention_prunes_old_terminal_jobs_and_never_live_ones,
            runner_retention_pass_deletes_at_most_the_prune_limit,
            runner_reconcile_sweep_resolves_a_rescued_reconciling_job,
            runner_maintenance_waits_its_start_delay,
            runner_schedule_fires_once_per_tick_across_three_workers,
            runner_schedule_fires_each_tick_a_late_pass_finds,
            runner_rewritten_schedule_fires_the_ticks_missed_while_down,
            runner_claimed_ahead_jobs_wait_for_a_slot_and_are_released_at_shutdown,
            runner_cancel_of_a_claimed_ahead_job_cancels_it_before_it_starts,
            runner_claimed_ahead_jobs_show_as_waiting_until_they_start,
            runner_the_start_of_a_claimed_ahead_job_is_recorded_while_it_runs,
            runner_long_jobs_are_not_claimed_ahead,
            runner_a_parent_waits_for_its_children_without_a_slot_and_reads_them,
            runner_a_failed_child_runs_the_rollback_hook_instead_of_the_handler,
            runner_a_dependent_reads_the_results_of_its_dependencies,
        }
    };
}

/// The names of the cases of a suite's list, as `&[&str]`: `contract_suite!(@list case_names ())`.
#[doc(hidden)]
#[macro_export]
macro_rules! case_names {
    (; $($case:ident),* $(,)?) => {
        &[$(stringify!($case)),*]
    };
}

/// The contract cases [`contract_suite!`] runs, by name.
pub const CONTRACT_CASES: &[&str] = contract_suite!(@list case_names ());
/// The runner cases [`runner_suite!`] runs, by name.
pub const RUNNER_CASES: &[&str] = runner_suite!(@list case_names ());

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    /// The cases defined in the modules of `folder` (under `src/`): every free `pub async fn`
    /// that takes a `StoreFactory`, the shape of a case (helpers take stores, not factories).
    fn defined_cases(folder: &str) -> BTreeSet<String> {
        let folder = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src")
            .join(folder);
        let mut cases = BTreeSet::new();
        for entry in std::fs::read_dir(&folder).expect("the case folder") {
            let path = entry.expect("a case file").path();
            if path.extension().is_none_or(|extension| extension != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a readable case file");
            // Cases are free functions: the signature starts a line (not a method, not a comment).
            const SIGNATURE: &str = "\npub async fn ";
            for (at, _) in text.match_indices(SIGNATURE) {
                let rest = &text[at + SIGNATURE.len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let parameters = rest
                    .split_once('(')
                    .and_then(|(_, after)| after.split_once(')'))
                    .map_or("", |(parameters, _)| parameters);
                if parameters.contains("StoreFactory") {
                    assert!(cases.insert(name.clone()), "case {name} is defined twice");
                }
            }
        }
        cases
    }

    /// Compares the cases a suite runs with the cases its modules define.
    fn assert_all_listed(suite: &str, folder: &str, listed: &[&str]) {
        let defined = defined_cases(folder);
        assert!(!defined.is_empty(), "no cases found in src/{folder}");
        let listed: BTreeSet<String> = listed.iter().map(|name| (*name).to_owned()).collect();
        let missing: Vec<&String> = defined.difference(&listed).collect();
        assert!(
            missing.is_empty(),
            "cases of src/{folder} missing from the list of {suite}! in src/lib.rs, so no store runs them: {missing:?}"
        );
        // Names listed but not defined do not compile; a listed case that does not take a
        // factory would not either.
        assert_eq!(defined.len(), listed.len());
    }

    #[test]
    fn every_case_runs_against_every_store() {
        assert_all_listed("contract_suite", "cases", super::CONTRACT_CASES);
        assert_all_listed("runner_suite", "runner_cases", super::RUNNER_CASES);
        for store in ["memory", "postgres"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests")
                .join(format!("{store}.rs"));
            let text = std::fs::read_to_string(&path).expect("the store's test file");
            for suite in ["contract_suite", "runner_suite"] {
                let call = format!("drover_tests::{suite}!(\"{store}\", ");
                assert_eq!(
                    text.matches(&call).count(),
                    1,
                    "tests/{store}.rs must run the whole {suite} once: `{call}...);`"
                );
            }
        }
    }
}
