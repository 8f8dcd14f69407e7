//! The W3C trace context a job carries from its enqueue to every attempt (docs/opentelemetry.md,
//! docs/adr/0013-trace-context.md): the `traceparent` and `tracestate` values exactly as the
//! W3C Trace Context specification writes them. Core only checks their form; the runner turns
//! them into spans.

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Longest accepted `tracestate`, in bytes (the W3C limit: 32 members of up to 256 bytes
/// need not be kept, 512 bytes must).
pub const TRACESTATE_MAX_BYTES: usize = 512;

/// A W3C trace context: the span a job's attempts descend from (or link to).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TraceContext {
    /// `version-trace_id-parent_id-flags`: `00-` then 32 and 16 lowercase hex digits (neither
    /// all zero), then 2 (`01`: sampled).
    pub traceparent: String,
    /// Vendor entries (`key=value` pairs separated by commas), at most
    /// [`TRACESTATE_MAX_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// A checked trace context; an empty `tracestate` counts as none.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `traceparent` or `tracestate` and the rule broken.
    pub fn new(traceparent: impl Into<String>, tracestate: Option<String>) -> Result<Self, Error> {
        let context = TraceContext {
            traceparent: traceparent.into(),
            tracestate: tracestate.filter(|s| !s.trim().is_empty()),
        };
        context.validate()?;
        Ok(context)
    }

    /// Checks the form of both values.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `traceparent` or `tracestate`.
    pub fn validate(&self) -> Result<(), Error> {
        if parse_traceparent(&self.traceparent).is_none() {
            return Err(Error::invalid(
                "traceparent",
                "must be 00-<32 lowercase hex digits, not all 0>-<16 lowercase hex digits, not all 0>-<2 hex digits>",
            ));
        }
        if let Some(state) = &self.tracestate {
            if state.len() > TRACESTATE_MAX_BYTES {
                return Err(Error::invalid(
                    "tracestate",
                    format!("must be at most {TRACESTATE_MAX_BYTES} bytes"),
                ));
            }
            if !state.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
                return Err(Error::invalid(
                    "tracestate",
                    "must hold printable ASCII characters only",
                ));
            }
        }
        Ok(())
    }

    /// The trace id, span id and flags of `traceparent`, as hex text; `None` when it is
    /// malformed.
    pub fn parts(&self) -> Option<(&str, &str, &str)> {
        parse_traceparent(&self.traceparent)
    }

    /// The 32-digit trace id.
    pub fn trace_id(&self) -> Option<&str> {
        self.parts().map(|(trace, _, _)| trace)
    }
}

fn parse_traceparent(value: &str) -> Option<(&str, &str, &str)> {
    let mut parts = value.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    (parts.next().is_none()
        && version == "00"
        && hex(trace, 32)
        && nonzero(trace)
        && hex(span, 16)
        && nonzero(span)
        && hex(flags, 2))
    .then_some((trace, span, flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_well_formed_traceparent_is_accepted_and_split() {
        let context = TraceContext::new(GOOD, Some("congo=t61rcWkgMzE".into())).unwrap();
        assert_eq!(
            context.parts(),
            Some(("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "01"))
        );
        assert_eq!(
            TraceContext::new(GOOD, Some(" ".into()))
                .unwrap()
                .tracestate,
            None
        );
    }

    #[test]
    fn a_malformed_traceparent_is_refused_naming_the_field() {
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            let error = TraceContext::new(bad, None).unwrap_err();
            assert!(error.to_string().contains("traceparent"), "{bad}: {error}");
        }
    }

    #[test]
    fn a_long_or_binary_tracestate_is_refused_naming_the_field() {
        let long = "a=".to_owned() + &"b".repeat(TRACESTATE_MAX_BYTES);
        for bad in [long, "a=b\nc=d".to_owned()] {
            let error = TraceContext::new(GOOD, Some(bad)).unwrap_err();
            assert!(error.to_string().contains("tracestate"), "{error}");
        }
    }
}
