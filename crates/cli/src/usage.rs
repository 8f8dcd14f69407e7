//! Usage errors: a command line that asks for something it cannot have (a flag value that
//! breaks its rule, flags that contradict each other or do not apply), found after clap has
//! parsed it. They exit with code 2, as clap's own usage errors do, and are found before
//! anything is built or connected; every other failure exits with 1 (see [`crate::run_with`]).
//!
//! A rule that looks at one value alone is a clap value parser in [`crate::args`], so clap
//! reports it; a value that may be a secret (the JSON of `--args`, a database URL) or a rule
//! across flags is checked in the command and reported as a [`UsageError`], which never
//! quotes the value.

use std::fmt;

/// A usage error: the message names the flag and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A usage error with `message` (exit code 2).
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// True when `e` (or one of its causes) is a usage error.
pub fn is_usage(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<UsageError>())
}

/// The rule a `drover_core` error states, without its `invalid FIELD: ` prefix (clap or the
/// caller names the flag instead of the field).
pub fn rule(e: &drover_core::Error) -> String {
    match e {
        drover_core::Error::InvalidInput { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

/// Rewrites an `InvalidInput` error about `field` as a usage error about the flag `flags`
/// maps it to (`("max_attempts", "--max-attempts")`; a mapped field also covers its indexed
/// and dotted forms, which the message keeps: `limit_keys[1]` becomes `--limit-key
/// (limit_keys[1])`). Any other error is returned as it is (exit code 1).
pub fn flag_error(e: drover_core::Error, flags: &[(&str, &str)]) -> anyhow::Error {
    if let drover_core::Error::InvalidInput { field, reason } = &e {
        if let Some(flag) = flag_of(field, flags) {
            let at = if flags.iter().any(|(name, _)| name == field) {
                String::new()
            } else {
                format!(" ({field})")
            };
            return usage(format!("invalid {flag}{at}: {reason}"));
        }
    }
    anyhow::anyhow!("{e}")
}

/// The flag `flags` maps `field` to.
pub fn flag_of<'a>(field: &str, flags: &[(&str, &'a str)]) -> Option<&'a str> {
    flags.iter().find_map(|(name, flag)| {
        let rest = field.strip_prefix(name)?;
        (rest.is_empty() || rest.starts_with('[') || rest.starts_with('.')).then_some(*flag)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_map_to_flags_with_their_indexed_forms() {
        let flags = [
            ("limit_keys", "--limit-key"),
            ("max_attempts", "--max-attempts"),
        ];
        assert_eq!(flag_of("limit_keys[2]", &flags), Some("--limit-key"));
        let e = flag_error(
            drover_core::Error::invalid("limit_keys[2]", "empty"),
            &flags,
        );
        assert_eq!(e.to_string(), "invalid --limit-key (limit_keys[2]): empty");
        assert_eq!(flag_of("max_attempts", &flags), Some("--max-attempts"));
        assert_eq!(flag_of("max_attempts_x", &flags), None);
        let e = flag_error(
            drover_core::Error::invalid("max_attempts", "must be at most 1000"),
            &flags,
        );
        assert!(is_usage(&e));
        assert_eq!(
            e.to_string(),
            "invalid --max-attempts: must be at most 1000"
        );
        let e = flag_error(drover_core::Error::invalid("other", "no"), &flags);
        assert!(!is_usage(&e));
    }
}
