//! `drover-bench otlp-sink`: the local OTLP/HTTP receiver of the OpenTelemetry export
//! measurement (BENCHMARKS.md, "OpenTelemetry export"). It answers every export at once and
//! keeps the trace bodies undecoded, so that receiving costs the machine next to nothing
//! while the bench runs; `GET /stats` decodes what arrived since the last call and answers
//! with the number of spans, so a run can show that no attempt span was dropped. The bodies
//! stay in memory until then (about 350 bytes a span): ask between runs. Only OTLP/HTTP
//! protobuf without compression is counted (anything else is `malformed`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde::Serialize;

use drover_core::Error;

use crate::options::OtlpSinkArgs;

/// What arrived since the last `GET /stats`.
#[derive(Default)]
struct Arrived {
    traces: Vec<Bytes>,
    metric_exports: u64,
}

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Arrived>>);

impl Sink {
    fn arrived(&self) -> std::sync::MutexGuard<'_, Arrived> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The answer of `GET /stats`.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct Stats {
    trace_exports: usize,
    spans: usize,
    /// Spans per name (`process <queue>` for attempts).
    by_name: std::collections::BTreeMap<String, usize>,
    metric_exports: u64,
    /// Trace bodies that were not OTLP protobuf.
    malformed: usize,
}

async fn traces(State(sink): State<Sink>, body: Bytes) -> &'static str {
    sink.arrived().traces.push(body);
    ""
}

async fn metrics(State(sink): State<Sink>) -> &'static str {
    sink.arrived().metric_exports += 1;
    ""
}

async fn stats(State(sink): State<Sink>) -> Json<Stats> {
    let arrived = std::mem::take(&mut *sink.arrived());
    Json(count(&arrived))
}

fn count(arrived: &Arrived) -> Stats {
    let mut stats = Stats {
        trace_exports: arrived.traces.len(),
        spans: 0,
        by_name: Default::default(),
        metric_exports: arrived.metric_exports,
        malformed: 0,
    };
    for body in &arrived.traces {
        let Ok(request) = ExportTraceServiceRequest::decode(body.clone()) else {
            stats.malformed += 1;
            continue;
        };
        let spans = request
            .resource_spans
            .iter()
            .flat_map(|resource| &resource.scope_spans)
            .flat_map(|scope| &scope.spans);
        for span in spans {
            stats.spans += 1;
            *stats.by_name.entry(span.name.clone()).or_default() += 1;
        }
    }
    stats
}

fn router() -> Router {
    Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/metrics", post(metrics))
        .route("/stats", get(stats))
        // An exporter's batch may exceed axum's default limit of 2 MB.
        .layer(DefaultBodyLimit::disable())
        .with_state(Sink::default())
}

/// Serves until the process is stopped.
pub async fn run(args: OtlpSinkArgs) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Error::fatal(format!("cannot listen on {}: {e}", args.listen)))?;
    let address: SocketAddr = listener
        .local_addr()
        .map_err(|e| Error::fatal(e.to_string()))?;
    println!("listening on http://{address}");
    axum::serve(listener, router())
        .await
        .map_err(|e| Error::fatal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    use super::*;

    fn body(names: &[&str]) -> Bytes {
        let spans = names
            .iter()
            .map(|name| Span {
                name: (*name).to_owned(),
                ..Default::default()
            })
            .collect();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        Bytes::from(request.encode_to_vec())
    }

    #[test]
    fn stats_count_the_spans_of_every_export_by_name() {
        let arrived = Arrived {
            traces: vec![
                body(&["process default", "process default"]),
                body(&["process mail"]),
                Bytes::from_static(b"\xff\xff not protobuf"),
            ],
            metric_exports: 2,
        };
        let stats = count(&arrived);
        assert_eq!(stats.trace_exports, 3);
        assert_eq!(stats.spans, 3);
        assert_eq!(stats.by_name["process default"], 2);
        assert_eq!(stats.by_name["process mail"], 1);
        assert_eq!(stats.malformed, 1);
        assert_eq!(stats.metric_exports, 2);
    }
}
