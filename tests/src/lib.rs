//! Drover's store contract suite (DESIGN.md sections 4 and 8), and the runner suite that drives
//! `drover-runner` workers against every store (issue #4).
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
pub mod runner_cases;

pub use harness::{run_case, Harness, StoreFactory};

/// Runs every contract case against one store: `contract_suite!("memory", Some(factory))`.
/// Keep this list in step with [`cases`].
#[macro_export]
macro_rules! contract_suite {
    ($store:literal, $factory:expr) => {
        $crate::contract_cases!($store, $factory;
            enqueue_defaults,
            enqueue_round_trips_every_field,
            enqueue_batch_answers_in_order,
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
            outcome_complete_stores_result,
            outcome_fail_with_retry_requeues_after_delay,
            outcome_fail_on_last_attempt_fails,
            outcome_fail_without_retry_fails_at_once,
            outcome_snooze_does_not_spend_attempt,
            outcome_release_does_not_spend_attempt,
            outcome_cancelled_records_cancelled,
            outcome_stale_token_changes_nothing,
            outcome_expired_lease_changes_nothing,
            outcome_batch_answers_per_item,
            outcome_result_over_size_is_refused,
            cancel_queued_job,
            cancel_running_then_fail_ends_cancelled,
            cancel_running_then_complete_ends_succeeded,
            cancel_running_then_release_ends_cancelled,
            cancel_reconciling_job,
            cancel_finished_job_is_invalid_transition,
            cancel_unknown_is_not_found,
            retry_from_each_terminal_state,
            retry_of_live_job_is_invalid_transition,
            retry_rechecks_quota,
            retry_conflicts_with_live_unique_holder,
            retry_keeps_its_own_unique_key,
            retry_unknown_is_not_found,
            rescue_expired_requeues_with_attempt_spent,
            rescue_spent_attempts_fail,
            rescue_reconciler_kind_goes_reconciling,
            rescue_cancel_requested_goes_cancelled,
            rescue_leaves_unexpired_leases,
            rescue_respects_limit,
            rescue_is_exactly_once_under_concurrency,
            rescue_late_write_of_old_worker_is_lease_lost,
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
            list_paginates_newest_first,
            list_default_page_size,
            list_rejects_bad_filter,
            list_get_unknown_is_not_found,
            queues_pause_resume_idempotent,
            queues_list_shows_queues_with_jobs_or_pause,
            snapshot_counts_per_state,
            snapshot_oldest_ready_age,
            snapshot_includes_paused_empty_queue,
            workers_register_heartbeat_list_deregister,
            workers_prune_stale,
            workers_heartbeat_unknown_is_not_found,
            limits_max_running_explicit_key,
            limits_max_running_implicit_kind_key,
            limits_max_running_implicit_queue_key,
            limits_rate_burst_then_spacing,
            limits_skipped_jobs_keep_order_and_spend_nothing,
            limits_refused_claim_spends_no_other_rate,
            limits_replace_keeps_rate_state,
            limits_new_policy_counts_jobs_already_running,
            limits_set_list_replace_clear,
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
            events_jobs_available_after_enqueue,
            events_jobs_available_after_resume,
            events_cancel_requested_after_cancel_of_running_job,
            events_jobs_available_after_release,
            events_jobs_available_after_retry,
        );
    };
}

/// Runs every runner case against one store: `runner_suite!("memory", Some(factory))`.
/// Keep this list in step with [`runner_cases`].
#[macro_export]
macro_rules! runner_suite {
    ($store:literal, $factory:expr) => {
        $crate::runner_cases!($store, $factory;
            runner_jobs_run_and_succeed,
            runner_typed_args_run_and_bad_args_fail_without_retry,
            runner_only_registered_kinds_are_claimed,
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
            runner_max_concurrent_caps_executions_over_all_pools,
            runner_retention_prunes_old_terminal_jobs_and_never_live_ones,
            runner_reconcile_sweep_resolves_a_rescued_reconciling_job,
            runner_schedule_fires_once_per_tick_across_three_workers,
            runner_claimed_ahead_jobs_wait_for_a_slot_and_are_released_at_shutdown,
            runner_cancel_of_a_claimed_ahead_job_cancels_it_before_it_starts,
            runner_long_jobs_are_not_claimed_ahead,
        );
    };
}
