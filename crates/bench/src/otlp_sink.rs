//! `drover-bench otlp-sink`: the local OTLP/HTTP receiver of the OpenTelemetry export
//! measurement (BENCHMARKS.md, "OpenTelemetry export"). It answers every export at once and
//! counts its spans by name, reading only their names (a walk of each span's fields that stops
//! at the name, read in place), so receiving costs the machine little and keeps nothing;
//! `GET /stats` answers with what arrived since the last call, so a run can show that no
//! attempt span was dropped.
//! Only OTLP/HTTP protobuf without compression is counted (anything else is `malformed`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use drover_core::Error;
use prost::Message;
use serde::Serialize;

use crate::options::OtlpSinkArgs;

/// The parts of OTLP's `ExportTraceServiceRequest` the sink reads: prost skips every other
/// field, so counting costs little and keeps nothing.
#[derive(Clone, PartialEq, Message)]
struct TraceExport {
    #[prost(message, repeated, tag = "1")]
    resource_spans: Vec<ResourceSpans>,
}

#[derive(Clone, PartialEq, Message)]
struct ResourceSpans {
    #[prost(message, repeated, tag = "2")]
    scope_spans: Vec<ScopeSpans>,
}

/// Each span is kept as its slice of the body (no copy); only its name is read from it.
#[derive(Clone, PartialEq, Message)]
struct ScopeSpans {
    #[prost(bytes = "bytes", repeated, tag = "2")]
    spans: Vec<Bytes>,
}

/// A span that is not OTLP protobuf.
struct Malformed;

impl From<prost::DecodeError> for Malformed {
    fn from(_: prost::DecodeError) -> Self {
        Malformed
    }
}

/// The name of an encoded OTLP `Span` (field 5): the walk skips the ids before it and stops
/// there, leaving the attributes and the rest unread. `Ok(None)` for a span without a name
/// (an empty one is not encoded), `Err` for a malformed span.
fn span_name(mut span: &[u8]) -> Result<Option<&[u8]>, Malformed> {
    use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
    while !span.is_empty() {
        let (tag, wire_type) = decode_key(&mut span)?;
        if tag == 5 && wire_type == WireType::LengthDelimited {
            let len = usize::try_from(decode_varint(&mut span)?).unwrap_or(usize::MAX);
            return match span.get(..len) {
                Some(name) => Ok(Some(name)),
                None => Err(Malformed),
            };
        }
        skip_field(wire_type, tag, &mut span, DecodeContext::default())?;
    }
    Ok(None)
}

/// What arrived since the last `GET /stats`.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
struct Stats {
    trace_exports: usize,
    spans: usize,
    /// Spans per name (`process <queue>` for attempts).
    by_name: BTreeMap<String, usize>,
    metric_exports: u64,
    /// Trace bodies that were not OTLP protobuf (or were compressed), and malformed spans.
    malformed: usize,
}

impl Stats {
    fn add_traces(&mut self, body: Bytes) {
        self.trace_exports += 1;
        let Ok(export) = TraceExport::decode(body) else {
            self.malformed += 1;
            return;
        };
        let spans = export
            .resource_spans
            .into_iter()
            .flat_map(|resource| resource.scope_spans)
            .flat_map(|scope| scope.spans);
        for span in spans {
            let name = match span_name(&span) {
                Ok(Some(name)) => std::str::from_utf8(name).unwrap_or("(not UTF-8)"),
                Ok(None) => "(no name)",
                Err(_) => {
                    self.malformed += 1;
                    continue;
                }
            };
            self.spans += 1;
            match self.by_name.get_mut(name) {
                Some(count) => *count += 1,
                None => {
                    self.by_name.insert(name.to_owned(), 1);
                }
            }
        }
    }
}

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Stats>>);

impl Sink {
    fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn traces(State(sink): State<Sink>, body: Bytes) -> &'static str {
    sink.stats().add_traces(body);
    ""
}

async fn metrics(State(sink): State<Sink>) -> &'static str {
    sink.stats().metric_exports += 1;
    ""
}

async fn stats(State(sink): State<Sink>) -> Json<Stats> {
    Json(std::mem::take(&mut *sink.stats()))
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
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1 as proto;

    use super::*;

    fn body(names: &[&str]) -> Bytes {
        // Real OTLP messages, with fields around the name the sink skips.
        let spans = names
            .iter()
            .map(|name| proto::Span {
                trace_id: vec![1; 16],
                span_id: vec![2; 8],
                name: (*name).to_owned(),
                attributes: vec![KeyValue {
                    key: "messaging.system".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("drover".into())),
                    }),
                    ..Default::default()
                }],
                start_time_unix_nano: 1,
                ..Default::default()
            })
            .collect();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![proto::ResourceSpans {
                scope_spans: vec![proto::ScopeSpans {
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
        let mut stats = Stats::default();
        stats.add_traces(body(&["process default", "process default"]));
        stats.add_traces(body(&["process mail", ""]));
        stats.add_traces(Bytes::from_static(b"\xff\xff not protobuf"));
        // A well-formed request whose one span is cut short inside its name.
        let span = proto::Span {
            name: "process cut".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let cut = ScopeSpans {
            spans: vec![Bytes::copy_from_slice(&span[..span.len() - 3])],
        };
        let cut = TraceExport {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![cut],
            }],
        };
        stats.add_traces(Bytes::from(cut.encode_to_vec()));
        assert_eq!(stats.trace_exports, 4);
        assert_eq!(stats.spans, 4);
        assert_eq!(stats.by_name["process default"], 2);
        assert_eq!(stats.by_name["process mail"], 1);
        assert_eq!(
            stats.by_name["(no name)"], 1,
            "an empty name is not encoded"
        );
        assert_eq!(
            stats.malformed, 2,
            "the body that is not protobuf, the cut span"
        );
    }
}
