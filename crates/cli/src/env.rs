//! Environment settings (only this crate reads environment variables; ARCHITECTURE.md):
//! `DROVER_MAX_PENDING`, `DROVER_MAX_TENANT_PENDING` (quotas, docs/design.md section 4),
//! `DROVER_API_TOKENS` (HTTP auth), `DROVER_ACTOR` (the audit log's actor), whether OTLP
//! export is asked for by the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT`/`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the OpenTelemetry SDK
//! reads the rest of the `OTEL_*` variables itself, in `drover-telemetry`), and the caller's
//! trace of `drover enqueue` in `TRACEPARENT`/`TRACESTATE`. `DROVER_DATABASE_URL` and
//! `DROVER_MAX_CONCURRENT` are read by clap (see [`crate::args`]).

use anyhow::Result;
use drover_core::audit::ACTOR_NAME_MAX;
use drover_core::store::{MAX_PENDING_DEFAULT, MAX_TENANT_PENDING_DEFAULT};
use drover_core::{Actor, AuditSource, Quotas, StoreConfig, SucceededJobs, TraceContext};

use crate::usage::usage;

/// Reads a quota variable: unset means `default`; `0`, `none` or `unlimited` mean no quota.
/// A value that is none of these is a usage error (exit code 2), as a bad value of
/// `DROVER_MAX_CONCURRENT` (read by clap) is.
fn quota(name: &str, default: u64) -> Result<Option<u64>> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(Some(default)),
        Err(std::env::VarError::NotUnicode(_)) => Err(usage(format!(
            "invalid {name}: must be a whole number (or 0 for no quota)"
        ))),
        Ok(v) => {
            let v = v.trim();
            if v == "0" || v.eq_ignore_ascii_case("none") || v.eq_ignore_ascii_case("unlimited") {
                return Ok(None);
            }
            v.parse::<u64>().map(Some).map_err(|e| {
                usage(format!(
                    "invalid {name}: must be a whole number (or 0 for no quota), got {v:?}: {e}"
                ))
            })
        }
    }
}

/// The store configuration from the environment: quotas from `DROVER_MAX_PENDING` (default
/// 10,000) and `DROVER_MAX_TENANT_PENDING` (default 1,000); `0` turns a quota off.
///
/// # Errors
/// A usage error: a variable that is not a whole number.
pub fn store_config() -> Result<StoreConfig> {
    store_config_with(SucceededJobs::Keep)
}

/// [`store_config`] for a worker's store, which keeps or deletes succeeded jobs as
/// `succeeded_jobs` says (`--delete-succeeded`).
///
/// # Errors
/// As [`store_config`].
pub fn store_config_with(succeeded_jobs: SucceededJobs) -> Result<StoreConfig> {
    Ok(StoreConfig {
        quotas: Quotas {
            max_pending: quota("DROVER_MAX_PENDING", MAX_PENDING_DEFAULT)?,
            max_tenant_pending: quota("DROVER_MAX_TENANT_PENDING", MAX_TENANT_PENDING_DEFAULT)?,
        },
        succeeded_jobs,
        ..StoreConfig::default()
    })
}

/// `DROVER_API_TOKENS`, if set and not blank.
pub fn api_tokens() -> Option<String> {
    std::env::var("DROVER_API_TOKENS")
        .ok()
        .filter(|v| !v.trim().is_empty())
}

/// Who runs the command line, for the audit records of its operator writes: `DROVER_ACTOR`,
/// else the login name (`USER`, `LOGNAME`), else `cli`.
///
/// # Errors
/// A usage error: a `DROVER_ACTOR` that is no actor name (1 to 200 bytes, no control
/// characters), which the first operator write would refuse after connecting.
pub fn actor_name() -> Result<String> {
    actor_from(|name| std::env::var(name).ok())
}

/// [`actor_name`] with the variables `var` gives. A login name that is no actor name is passed
/// over: it is not a Drover setting.
fn actor_from(var: impl Fn(&str) -> Option<String>) -> Result<String> {
    let valid = |name: &str| Actor::new(name, AuditSource::Cli).validate().is_ok();
    let set = |name: &str| {
        var(name)
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty())
    };
    if let Some(actor) = set("DROVER_ACTOR") {
        if !valid(&actor) {
            return Err(usage(format!(
                "invalid DROVER_ACTOR: must be 1 to {ACTOR_NAME_MAX} bytes without control characters, got {} bytes",
                actor.len()
            )));
        }
        return Ok(actor);
    }
    Ok(["USER", "LOGNAME"]
        .into_iter()
        .filter_map(set)
        .find(|name| valid(name))
        .unwrap_or_else(|| "cli".to_owned()))
}

/// The caller's trace for `drover enqueue`: `TRACEPARENT` and `TRACESTATE`, OpenTelemetry's
/// environment-variable carriers of the W3C headers, read as the HTTP API reads the headers:
/// a malformed `TRACEPARENT` is ignored (the jobs start a trace of their own) and a malformed
/// `TRACESTATE` dropped.
pub fn trace_context() -> Option<TraceContext> {
    let traceparent = std::env::var("TRACEPARENT").ok()?;
    let traceparent = traceparent.trim();
    let tracestate = std::env::var("TRACESTATE").ok();
    TraceContext::new(traceparent, tracestate)
        .or_else(|_| TraceContext::new(traceparent, None))
        .ok()
}

/// Whether to export over OTLP: `flag` (`--otlp`, `DROVER_OTLP`) when given, else whether an
/// OTLP endpoint variable is set and not blank.
pub fn otlp_wanted(flag: Option<bool>) -> bool {
    flag.unwrap_or_else(|| {
        [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ]
        .iter()
        .any(|name| std::env::var(name).is_ok_and(|v| !v.trim().is_empty()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(vars: &[(&str, &str)]) -> Result<String> {
        actor_from(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, value)| (*value).to_owned())
        })
    }

    #[test]
    fn the_actor_is_drover_actor_else_the_login_name_else_cli() {
        assert_eq!(
            actor(&[("DROVER_ACTOR", " alice "), ("USER", "bob")]).unwrap(),
            "alice"
        );
        assert_eq!(
            actor(&[("DROVER_ACTOR", " "), ("USER", "bob")]).unwrap(),
            "bob"
        );
        assert_eq!(actor(&[("LOGNAME", "carol")]).unwrap(), "carol");
        let long = "x".repeat(ACTOR_NAME_MAX + 1);
        assert_eq!(
            actor(&[("USER", &long), ("LOGNAME", "carol")]).unwrap(),
            "carol"
        );
        assert_eq!(actor(&[]).unwrap(), "cli");
        assert_eq!(
            actor(&[("DROVER_ACTOR", &long[1..])]).unwrap().len(),
            ACTOR_NAME_MAX
        );
    }

    #[test]
    fn a_drover_actor_that_is_no_actor_name_is_a_usage_error() {
        let long = "x".repeat(ACTOR_NAME_MAX + 1);
        for bad in [long.as_str(), "al\u{7}ice"] {
            let e = actor(&[("DROVER_ACTOR", bad), ("USER", "bob")]).expect_err(bad);
            assert!(crate::usage::is_usage(&e), "{e}");
            assert!(
                e.to_string()
                    .starts_with("invalid DROVER_ACTOR: must be 1 to 200 bytes"),
                "{e}"
            );
        }
    }
}
