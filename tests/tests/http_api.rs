//! The HTTP API (docs/http-api.md) over real HTTP: a reqwest client (and raw HTTP/1.1 where a client
//! library hides the detail) against `drover_http::serve` on a bound port, on the memory store
//! and on PostgreSQL.
//!
//! Each case is one `async fn(&Env)` in a module of `http_api/` by issue item (`enqueue`,
//! `jobs`, `auth`, `input`, `shutdown`); [`http_cases!`] stamps it once per store
//! (`memory::<case>` and `postgres::<case>`), so the same assertions hold on both. Cases that
//! need SQL (an unmigrated database, an unreachable one, jsonb `@>`) run on PostgreSQL only
//! (`postgres_only`).
//! PostgreSQL tests need `DROVER_TEST_DATABASE_URL`; see `http_api/harness.rs` for isolation
//! (a database per test) and the skip rule.
//!
//! The audit log (`audit`): `GET /v1/audit` after operator actions, tenant scoping, filters.
//!
//! Workflows (`workflows`): graphs by name, their reads, cancel and retry, dependencies on
//! `POST /v1/jobs`, tenant isolation.
//!
//! Every status code of the API is answered here: 200, 202, 400, 401, 403, 404, 405, 409, 413,
//! 415, 429 and 503.

#[path = "http_api/harness.rs"]
mod harness;

#[path = "http_api/audit.rs"]
mod audit;
#[path = "http_api/auth.rs"]
mod auth;
#[path = "http_api/enqueue.rs"]
mod enqueue;
#[path = "http_api/input.rs"]
mod input;
#[path = "http_api/jobs.rs"]
mod jobs;
#[path = "http_api/postgres_only.rs"]
mod postgres_only;
#[path = "http_api/shutdown.rs"]
mod shutdown;
#[path = "http_api/workflows.rs"]
mod workflows;

use audit::*;
use auth::*;
use enqueue::*;
use input::*;
use jobs::*;
use postgres_only::*;
use shutdown::*;
use workflows::*;

// ------------------------------------------------------------------------------------------
// One test per case and store.

/// Stamps `memory::<case>` and `postgres::<case>` for each case of `both`, and
/// `postgres::<case>` for each of `postgres_only`.
macro_rules! http_cases {
    (both: [$($case:ident),* $(,)?], postgres_only: [$($pg:ident),* $(,)?] $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    crate::harness::run_memory(|env| Box::pin(crate::$case(env))).await;
                }
            )*

            #[tokio::test(flavor = "current_thread")]
            async fn tokens_never_appear_in_logs() {
                let (logs, _guard) = crate::capture_logs();
                crate::harness::run_memory(move |env| {
                    Box::pin(async move { crate::tokens_never_appear_in_logs(env, &logs).await })
                })
                .await;
            }
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    crate::harness::run_postgres(stringify!($case), |env| {
                        Box::pin(crate::$case(env))
                    })
                    .await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $pg() {
                    crate::harness::run_postgres(stringify!($pg), |env| {
                        Box::pin(crate::$pg(env))
                    })
                    .await;
                }
            )*

            #[tokio::test(flavor = "current_thread")]
            async fn tokens_never_appear_in_logs() {
                let (logs, _guard) = crate::capture_logs();
                crate::harness::run_postgres("tokens_never_appear_in_logs", move |env| {
                    Box::pin(async move { crate::tokens_never_appear_in_logs(env, &logs).await })
                })
                .await;
            }
        }
    };
}

http_cases!(
    both: [
        enqueue_returns_202_with_the_committed_job,
        trace_headers_are_stored_and_malformed_ones_ignored,
        idempotency_key_replays_and_conflicts,
        idempotency_replay_shows_terminal_states,
        concurrent_posts_with_one_key_create_one_job,
        unique_key_duplicate_answers_200,
        batch_enqueue,
        list_filters_and_paginates,
        list_answers_summaries_unless_include_asks,
        get_cancel_and_retry,
        requeue_makes_a_waiting_job_ready_now,
        delete_is_for_operators_and_refuses_jobs_still_needed,
        bulk_actions_preview_then_act_within_the_tokens_tenant,
        queues_pause_resume_and_list,
        a_job_claimed_ahead_shows_as_waiting_for_a_slot,
        workers_are_listed,
        ready_and_openapi_need_no_token,
        metrics_need_a_token_of_every_tenant,
        metrics_label_sets_do_not_grow_with_what_producers_enqueue,
        global_quota_answers_429,
        tenant_quota_answers_429,
        retry_rechecks_quotas,
        missing_or_wrong_token_answers_401,
        authentication_comes_before_request_validation,
        producer_is_forbidden_operator_actions,
        tenants_are_isolated,
        invalid_input_answers_400_naming_the_field,
        integer_fields_name_their_rule,
        query_parameters_are_refused_where_none_are_taken,
        bodies_are_refused_where_none_are_taken,
        bodies_in_another_charset_answer_415,
        job_ids_in_any_uuid_form_answer_with_the_canonical_form,
        body_over_the_limit_answers_413,
        unknown_routes_and_methods_answer_in_the_error_shape,
        openapi_document_matches_the_routes,
        documented_statuses_are_the_answered_ones,
        shutdown_finishes_the_request_in_flight,
        server_and_worker_shut_down_together,
        workflows_enqueue_get_list_cancel_and_retry,
        workflow_errors_name_the_field,
        workflows_are_isolated_by_tenant,
        jobs_depend_on_ids_and_list_by_parent,
        operator_actions_are_audited_with_their_token_and_tenant,
        the_audit_log_filters_pages_and_names_bad_parameters,
    ],
    postgres_only: [
        ready_is_503_until_migrated,
        ready_is_503_when_the_database_is_down,
        meta_containment_agrees_with_postgres,
    ],
);
