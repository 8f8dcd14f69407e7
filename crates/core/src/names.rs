//! Validated names: [`JobKind`], [`QueueName`], [`TenantId`], [`WorkerId`], [`LimitKey`],
//! [`ScheduleName`].
//!
//! Each newtype checks its rule once, on construction ([`JobKind::parse`], `FromStr`, serde), so a
//! value of the type is always valid and stores never see a bad name. A rejected value gives
//! [`Error::InvalidInput`] naming the field and the rule.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The queue a job goes to when none is given.
pub const DEFAULT_QUEUE: &str = "default";
/// The tenant a job belongs to when none is given.
pub const DEFAULT_TENANT: &str = "default";

/// Which characters a name may hold.
#[derive(Clone, Copy)]
enum Charset {
    /// ASCII letters, digits and `_ . : -`.
    Identifier,
    /// ASCII letters, digits and `_ . : - /`.
    Kind,
    /// ASCII letters, digits and `_ . : - @ / = +`.
    Key,
    /// Visible ASCII (`!` to `~`).
    Visible,
}

impl Charset {
    fn allows(self, c: char) -> bool {
        match self {
            Charset::Identifier => c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'),
            Charset::Kind => c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-' | '/'),
            Charset::Key => {
                c.is_ascii_alphanumeric()
                    || matches!(c, '_' | '.' | ':' | '-' | '@' | '/' | '=' | '+')
            }
            Charset::Visible => c.is_ascii_graphic(),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Charset::Identifier => "ASCII letters, digits, '_', '.', ':' and '-'",
            Charset::Kind => "ASCII letters, digits, '_', '.', ':', '-' and '/'",
            Charset::Key => "ASCII letters, digits, '_', '.', ':', '-', '@', '/', '=' and '+'",
            Charset::Visible => "visible ASCII characters (no spaces or control characters)",
        }
    }
}

fn check(field: &str, value: &str, max_len: usize, charset: Charset) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if value.len() > max_len {
        return Err(Error::invalid(
            field,
            format!("must be at most {max_len} characters, got {}", value.len()),
        ));
    }
    if let Some(bad) = value.chars().find(|c| !charset.allows(*c)) {
        return Err(Error::invalid(
            field,
            format!("may contain only {}; found {:?}", charset.describe(), bad),
        ));
    }
    Ok(())
}

/// Checks a free-form key (idempotency or unique key): 1 to 255 bytes, no control characters.
///
/// # Errors
/// [`Error::InvalidInput`] naming `field` when the key is empty, longer than 255 bytes or holds a
/// control character (including NUL).
pub fn check_free_key(field: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if value.len() > 255 {
        return Err(Error::invalid(
            field,
            format!("must be at most 255 bytes, got {}", value.len()),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(
            field,
            "must not contain control characters (including NUL)",
        ));
    }
    Ok(())
}

/// Checks a job's name within its workflow: a free key ([`check_free_key`]) that also reads the
/// same to everyone who sees it in a tree, a table or a log: not blank, no whitespace at either
/// end, and none of the invisible formatting characters that reorder or hide text (bidirectional
/// overrides and isolates, zero-width characters, the byte order mark).
///
/// # Errors
/// [`Error::InvalidInput`] naming `field` and the rule broken.
pub fn check_job_name(field: &str, value: &str) -> Result<(), Error> {
    check_free_key(field, value)?;
    if value.trim().is_empty() {
        return Err(Error::invalid(field, "must not be blank"));
    }
    if value.trim() != value {
        return Err(Error::invalid(
            field,
            "must not start or end with whitespace",
        ));
    }
    if let Some(bad) = value.chars().find(|c| is_invisible_format(*c)) {
        return Err(Error::invalid(
            field,
            format!(
                "must not contain invisible formatting characters (bidirectional controls, \
                 zero-width characters); found U+{:04X}",
                u32::from(bad)
            ),
        ));
    }
    Ok(())
}

/// Formatting characters that reorder or hide text without being control characters.
fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// A limit key that names a kind or a queue (`kind:<kind>`, `queue:<queue>`, the implicit keys
/// of docs/design.md section 4, Limits) must name a valid one: `kind:` alone, or a queue name longer
/// than a queue can be, would be a policy no job is ever subject to.
fn check_limit_key_target(value: &str) -> Result<(), Error> {
    let reason = |what: &str, e: Error| {
        let detail = match e {
            Error::InvalidInput { reason, .. } => reason,
            other => other.to_string(),
        };
        Error::invalid(
            "limit_key",
            format!("{value:?} names a {what} after the prefix, and that {what} {detail}"),
        )
    };
    if let Some(kind) = value.strip_prefix("kind:") {
        check("kind", kind, 128, Charset::Kind).map_err(|e| reason("kind", e))?;
    } else if let Some(queue) = value.strip_prefix("queue:") {
        check("queue", queue, 64, Charset::Identifier).map_err(|e| reason("queue", e))?;
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, field = $field:literal, max = $max:literal, charset = $charset:expr $(, extra = $extra:path)?) => {
        $(#[$doc])*
        ///
        /// Shared, immutable text: a clone costs a reference count, not an allocation (jobs
        /// and their names are cloned on every claim of the memory store and by the runner).
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(Arc<str>);

        impl $name {
            /// The longest accepted value, in bytes.
            pub const MAX_LEN: usize = $max;

            /// Validates and wraps a name.
            ///
            /// # Errors
            #[doc = concat!("[`Error::InvalidInput`] with field `", $field, "` when the value is empty, longer than ")]
            #[doc = concat!(stringify!($max), " bytes, or holds a character outside the allowed set.")]
            pub fn parse(value: impl Into<String>) -> Result<Self, Error> {
                let value = value.into();
                check($field, &value, $max, $charset)?;
                $($extra(&value)?;)?
                Ok(Self(Arc::from(value)))
            }

            /// The name as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The field name used in errors about this kind of name.
            pub const FIELD: &'static str = $field;
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                Self::parse(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = Error;
            fn try_from(s: String) -> Result<Self, Error> {
                Self::parse(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = Error;
            fn try_from(s: &str) -> Result<Self, Error> {
                Self::parse(s)
            }
        }

        impl From<$name> for String {
            fn from(n: $name) -> String {
                String::from(&*n.0)
            }
        }

        /// The name's shared text: a reference count, no copy.
        impl From<&$name> for Arc<str> {
            fn from(n: &$name) -> Arc<str> {
                Arc::clone(&n.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }
    };
}

name_type!(
    /// A job kind: the stable name of the handler, e.g. `email.send`. 1 to 128 ASCII letters,
    /// digits and `_ . : - /`.
    JobKind, field = "kind", max = 128, charset = Charset::Kind
);
name_type!(
    /// A queue name, e.g. `default` or `mail`. 1 to 64 ASCII letters, digits and `_ . : -`.
    QueueName, field = "queue", max = 64, charset = Charset::Identifier
);
name_type!(
    /// A tenant: the owner of a job for quotas and API isolation. 1 to 128 ASCII letters,
    /// digits and `_ . : -`.
    TenantId, field = "tenant", max = 128, charset = Charset::Identifier
);
name_type!(
    /// A worker process's id, written as the lease owner of the jobs it runs. 1 to 255 visible
    /// ASCII characters.
    WorkerId, field = "worker_id", max = 255, charset = Charset::Visible
);
name_type!(
    /// The key of a limit policy, e.g. `kind:email.send`, `queue:mail` or `customer:42`
    /// (docs/design.md section 4, Limits). 1 to 255 ASCII letters, digits and `_ . : - @ / = +`;
    /// a key starting `kind:` or `queue:` must go on with a valid kind or queue name.
    LimitKey, field = "limit_key", max = 255, charset = Charset::Key,
    extra = check_limit_key_target
);
name_type!(
    /// The name of a cron schedule. 1 to 128 ASCII letters, digits and `_ . : -`.
    ScheduleName, field = "schedule", max = 128, charset = Charset::Identifier
);

impl QueueName {
    /// The `default` queue.
    pub fn default_queue() -> Self {
        static DEFAULT: OnceLock<Arc<str>> = OnceLock::new();
        QueueName(Arc::clone(DEFAULT.get_or_init(|| Arc::from(DEFAULT_QUEUE))))
    }
}

impl Default for QueueName {
    fn default() -> Self {
        Self::default_queue()
    }
}

impl TenantId {
    /// The `default` tenant.
    pub fn default_tenant() -> Self {
        static DEFAULT: OnceLock<Arc<str>> = OnceLock::new();
        TenantId(Arc::clone(
            DEFAULT.get_or_init(|| Arc::from(DEFAULT_TENANT)),
        ))
    }
}

impl Default for TenantId {
    fn default() -> Self {
        Self::default_tenant()
    }
}

impl LimitKey {
    /// The implicit limit key every job of `kind` is subject to: `kind:<kind>`.
    pub fn for_kind(kind: &JobKind) -> Self {
        LimitKey(Arc::from(format!("kind:{kind}")))
    }

    /// The implicit limit key every job of `queue` is subject to: `queue:<queue>`.
    pub fn for_queue(queue: &QueueName) -> Self {
        LimitKey(Arc::from(format!("queue:{queue}")))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bad_character_is_shown_once_escaped() {
        for (text, shown) in [
            ("café", "found 'é'"),
            ("a\nb", "found '\\n'"),
            ("a b", "found ' '"),
        ] {
            match JobKind::parse(text) {
                Err(Error::InvalidInput { reason, .. }) => {
                    assert!(reason.ends_with(shown), "{text:?}: {reason}")
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn limit_keys_naming_a_kind_or_queue_must_name_a_valid_one() {
        for ok in [
            "kind:email.send",
            "queue:mail",
            "customer:42",
            "kindly:x",
            "kind:a/b",
        ] {
            assert!(LimitKey::parse(ok).is_ok(), "{ok}");
        }
        let long_queue = format!("queue:{}", "q".repeat(65));
        for bad in ["kind:", "queue:", "queue:a/b", long_queue.as_str()] {
            match LimitKey::parse(bad) {
                Err(Error::InvalidInput { field, .. }) => assert_eq!(field, "limit_key", "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    use super::*;

    #[test]
    fn names_accept_their_charset_and_reject_the_rest() {
        assert!(JobKind::parse("email.send").is_ok());
        assert!(JobKind::parse("reports/daily-v2").is_ok());
        assert!(QueueName::parse("mail").is_ok());
        for bad in ["", "has space", "nul\0", "semi;colon", "quote'", "ünï"] {
            let err = QueueName::parse(bad).unwrap_err();
            match err {
                Error::InvalidInput { field, .. } => assert_eq!(field, "queue"),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(QueueName::parse("q".repeat(64)).is_ok());
        assert!(QueueName::parse("q".repeat(65)).is_err());
    }

    #[test]
    fn serde_validates() {
        let ok: Result<JobKind, _> = serde_json::from_str("\"a.b\"");
        assert!(ok.is_ok());
        let bad: Result<JobKind, _> = serde_json::from_str("\"a b\"");
        assert!(bad.is_err());
    }

    #[test]
    fn free_keys_reject_control_characters() {
        assert!(check_free_key("unique_key", "order:ü-42").is_ok());
        assert!(check_free_key("unique_key", "a\u{0}b").is_err());
        assert!(check_free_key("unique_key", "a\nb").is_err());
        assert!(check_free_key("unique_key", "").is_err());
        assert!(check_free_key("unique_key", &"k".repeat(256)).is_err());
    }

    #[test]
    fn job_names_read_the_same_to_everyone() {
        assert!(check_job_name("name", "copy ü files").is_ok());
        for (bad, rule) in [
            ("", "empty"),
            ("   ", "blank"),
            (" copy", "whitespace"),
            ("copy\u{3000}", "whitespace"),
            ("copy\t", "control"),
            ("abc\u{202E}fdp.exe", "U+202E"),
            ("a\u{2066}b", "U+2066"),
            ("a\u{200B}b", "U+200B"),
            ("\u{FEFF}a", "U+FEFF"),
        ] {
            let error = check_job_name("name", bad).unwrap_err().to_string();
            assert!(
                error.contains("name") && error.contains(rule),
                "{bad:?}: {error}"
            );
        }
    }
}
