//! Typed args without leaking them: decoding a job's args into a handler's type, and an error
//! message that says where and why they do not fit without quoting any value from them
//! (docs/design.md section 9: job args never appear in error messages, which are stored with the job,
//! logged and shown by the API).

use drover_core::Error;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_path_to_error::Segment;

/// Longest object key or field name a message shows (see [`decode`]).
const NAME_MAX_BYTES: usize = 64;

/// Deserializes `args` into `A`.
///
/// # Errors
/// [`Error::InvalidInput`] with field `args` and a reason such as
/// `do not match SleepArgs: at ms: invalid type: string, expected u64`, built so that no value
/// of `args` appears in it:
///
/// - the path to the offending place (`at order.items[2].qty`) and the problem: `invalid type`
///   or `invalid value` with the kind of JSON found (`string`, `integer`, `map`, ...) but never
///   the value itself, `invalid length N`, `unknown variant` (without the variant, which is a
///   value), `unknown field`, `missing field`, `duplicate field`;
/// - `expected ...`, which the type writes (`u64`, ``one of `fast`, `slow` ``), never the input;
/// - any other message (a type's own `Deserialize` check, which may quote what it was given)
///   is withheld, leaving the path and the type.
///
/// Field names are shown: they are the schema of the args, named by the handler's type, not
/// data. Only keys that look like field names are shown, though (at most 64 bytes of ASCII
/// letters, digits, `_` and `-`): keys of free-form maps are data, and one that does not look
/// like a field name (an e-mail address, a sentence) is shown as `<key>`.
pub(crate) fn decode<A: DeserializeOwned>(args: &Value) -> Result<A, Error> {
    serde_path_to_error::deserialize(args).map_err(|error| {
        let type_name = short_type_name(std::any::type_name::<A>());
        let problem = describe(&error.inner().to_string());
        let reason = match path_text(error.path()) {
            Some(path) => format!("do not match {type_name}: at {path}: {problem}"),
            None => format!("do not match {type_name}: {problem}"),
        };
        Error::invalid("args", reason)
    })
}

/// True for a key or name that may be shown: 1 to 64 bytes of ASCII letters, digits, `_`, `-`.
fn shown_name(name: &str) -> bool {
    (1..=NAME_MAX_BYTES).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The path as `a.b[2].c` (keys that may not be shown as `<key>`); `None` at the top level.
fn path_text(path: &serde_path_to_error::Path) -> Option<String> {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key: name } | Segment::Enum { variant: name } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(if shown_name(name) { name } else { "<key>" });
            }
            Segment::Unknown => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push('?');
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The kind of value an `Unexpected` names at the start of `text` (serde's wording for it,
/// without the value that follows), when it is one of the known kinds.
fn unexpected_kind(text: &str) -> Option<&'static str> {
    const WITH_VALUE: [(&str, &str); 6] = [
        ("string ", "string"),
        ("integer ", "integer"),
        ("floating point ", "floating point"),
        ("boolean ", "boolean"),
        ("character ", "character"),
        ("byte array", "byte array"),
    ];
    const WHOLE: [&str; 12] = [
        "null",
        "unit value",
        "Option value",
        "newtype struct",
        "sequence",
        "map",
        "enum",
        "unit variant",
        "newtype variant",
        "tuple variant",
        "struct variant",
        "unit",
    ];
    WITH_VALUE
        .iter()
        .find(|(prefix, _)| text.starts_with(prefix))
        .map(|(_, kind)| *kind)
        .or_else(|| WHOLE.iter().find(|kind| text == **kind).copied())
}

/// A serde message `UNEXPECTED, expected EXP` split at the last `, expected ` (EXP is text the
/// type writes; any value quoted before it may itself contain those words).
fn split_expected(message: &str) -> Option<(&str, &str)> {
    message
        .rfind(", expected ")
        .map(|at| (&message[..at], &message[at + ", expected ".len()..]))
}

/// The expected part of a serde message `..., expected EXP` (see [`split_expected`]).
fn expected_part(message: &str) -> Option<&str> {
    split_expected(message).map(|(_, expected)| expected)
}

/// A serde error message rewritten without any value from the input (see [`decode`]).
fn describe(message: &str) -> String {
    const WITHHELD: &str =
        "the value does not fit the type (its own message is withheld, as it may quote the value)";
    for (prefix, what) in [
        ("invalid type: ", "invalid type"),
        ("invalid value: ", "invalid value"),
    ] {
        if let Some(rest) = message.strip_prefix(prefix) {
            let Some((unexpected, expected)) = split_expected(rest) else {
                return what.to_owned();
            };
            return match unexpected_kind(unexpected) {
                Some(kind) => format!("{what}: {kind}, expected {expected}"),
                None => format!("{what}, expected {expected}"),
            };
        }
    }
    if let Some(rest) = message.strip_prefix("invalid length ") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        return match (digits.is_empty(), expected_part(rest)) {
            (false, Some(expected)) => format!("invalid length {digits}, expected {expected}"),
            _ => "invalid length".to_owned(),
        };
    }
    if message.starts_with("unknown variant `") {
        if message.ends_with(", there are no variants") {
            return "unknown variant, there are no variants".to_owned();
        }
        return match expected_part(message) {
            Some(expected) => format!("unknown variant, expected {expected}"),
            None => "unknown variant".to_owned(),
        };
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (name, tail) = if let Some(name) = rest.strip_suffix("`, there are no fields") {
            (name, "there are no fields".to_owned())
        } else if let Some(at) = rest.rfind("`, expected ") {
            (
                &rest[..at],
                format!("expected {}", &rest[at + "`, expected ".len()..]),
            )
        } else {
            return "unknown field".to_owned();
        };
        return if shown_name(name) {
            format!("unknown field `{name}`, {tail}")
        } else {
            format!("unknown field, {tail}")
        };
    }
    for prefix in ["missing field `", "duplicate field `"] {
        if let Some(name) = message
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix('`'))
        {
            let what = &prefix[..prefix.len() - 2];
            return if shown_name(name) {
                format!("{what} `{name}`")
            } else {
                what.to_owned()
            };
        }
    }
    if let Some(name) = message.strip_prefix("data did not match any variant of untagged enum ") {
        if shown_name(name) {
            return format!("data did not match any variant of untagged enum {name}");
        }
    }
    WITHHELD.to_owned()
}

/// `alloc::string::String` -> `String`, `my_app::EmailArgs` -> `EmailArgs` (generic parameters
/// are kept as they are).
pub(crate) fn short_type_name(full: &str) -> &str {
    let head = full.split('<').next().unwrap_or(full);
    match head.rfind("::") {
        Some(at) => &full[at + 2..],
        None => full,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    const SECRET: &str = "ARGSECRET_VALUE";

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct SleepArgs {
        ms: u64,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Speed {
        Fast,
        Slow,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Order {
        id: String,
        speed: Speed,
        items: Vec<Item>,
        #[serde(default)]
        labels: HashMap<String, u8>,
        #[serde(default)]
        pair: Option<(u8, u8)>,
        #[serde(default)]
        when: Option<chrono::DateTime<chrono::Utc>>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Item {
        qty: u32,
        flag: bool,
    }

    #[derive(Debug, Deserialize)]
    #[serde(untagged)]
    #[allow(dead_code)]
    enum Either {
        Number(u8),
        Flag(bool),
    }

    /// The reason `args` do not decode as `A`, asserting that no secret made it into it.
    fn reason<A: DeserializeOwned + std::fmt::Debug>(args: Value) -> String {
        let error = decode::<A>(&args).expect_err("args do not decode");
        let text = error.to_string();
        for secret in [SECRET, "1234567", "secret@example.com", "hunter2", "8.5"] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        assert!(
            matches!(&error, Error::InvalidInput { field, .. } if field == "args"),
            "{error:?}"
        );
        text
    }

    fn order(overrides: Value) -> Value {
        let mut base = json!({
            "id": "o-1",
            "speed": "fast",
            "items": [{"qty": 1, "flag": true}],
        });
        for (k, v) in overrides.as_object().unwrap() {
            base[k.as_str()] = v.clone();
        }
        base
    }

    #[test]
    fn wrong_types_name_the_path_and_kind_never_the_value() {
        assert_eq!(
            reason::<SleepArgs>(json!({"ms": SECRET})),
            "invalid args: do not match SleepArgs: at ms: invalid type: string, expected u64"
        );
        assert_eq!(
            reason::<SleepArgs>(json!({"ms": -1234567})),
            "invalid args: do not match SleepArgs: at ms: invalid value: integer, expected u64"
        );
        assert_eq!(
            reason::<SleepArgs>(json!({"ms": 8.5})),
            "invalid args: do not match SleepArgs: at ms: invalid type: floating point, expected u64"
        );
        assert_eq!(
            reason::<SleepArgs>(json!({"ms": true})),
            "invalid args: do not match SleepArgs: at ms: invalid type: boolean, expected u64"
        );
        assert_eq!(
            reason::<SleepArgs>(json!({"ms": {"hunter2": SECRET}})),
            "invalid args: do not match SleepArgs: at ms: invalid type: map, expected u64"
        );
        assert_eq!(
            reason::<SleepArgs>(json!([SECRET])),
            "invalid args: do not match SleepArgs: at [0]: invalid type: string, expected u64"
        );
        assert_eq!(
            reason::<SleepArgs>(json!(true)),
            "invalid args: do not match SleepArgs: invalid type: boolean, expected struct SleepArgs"
        );
        assert_eq!(
            reason::<SleepArgs>(json!(SECRET)),
            "invalid args: do not match SleepArgs: invalid type: string, expected struct SleepArgs"
        );
        // A value that repeats serde's own wording cannot push text past the expected part.
        let sneaky = format!("x, expected {SECRET}");
        let text = reason::<SleepArgs>(json!({"ms": sneaky}));
        assert!(
            text.ends_with("invalid type: string, expected u64"),
            "{text}"
        );
        let text = reason::<Order>(order(
            json!({"items": [{"qty": 1, "flag": true}, {"qty": 2, "flag": SECRET}]}),
        ));
        assert!(
            text.ends_with("at items[1].flag: invalid type: string, expected a boolean"),
            "{text}"
        );
        let text = reason::<Order>(order(json!({"pair": [1, 2, 3]})));
        assert!(
            text.contains("at pair: invalid length 3, expected"),
            "{text}"
        );
    }

    #[test]
    fn enums_missing_and_unknown_fields_never_quote_values() {
        let text = reason::<Order>(order(json!({"speed": SECRET})));
        assert!(
            text.ends_with("at speed: unknown variant, expected `fast` or `slow`"),
            "{text}"
        );
        let sneaky = format!("a`, expected {SECRET}");
        let text = reason::<Order>(order(json!({"speed": sneaky})));
        assert!(
            text.ends_with("unknown variant, expected `fast` or `slow`"),
            "{text}"
        );
        let text = reason::<Order>(json!({"speed": "fast", "items": []}));
        assert!(text.ends_with("missing field `id`"), "{text}");
        // Unknown field names are shown (field names are schema, not data); their values never.
        let text = reason::<Order>(order(json!({"password": SECRET})));
        assert!(
            text.contains("unknown field `password`, expected one of `id`, `speed`"),
            "{text}"
        );
        // A key that does not look like a field name is data: not shown.
        let text = reason::<Order>(order(json!({"secret@example.com": 1})));
        assert!(
            text.contains("unknown field, expected one of `id`"),
            "{text}"
        );
        let text = reason::<Order>(order(json!({"labels": {"secret@example.com": SECRET}})));
        assert!(
            text.ends_with("at labels.<key>: invalid type: string, expected u8"),
            "{text}"
        );
        let text = reason::<Either>(json!(SECRET));
        assert!(
            text.ends_with("data did not match any variant of untagged enum Either"),
            "{text}"
        );
    }

    #[test]
    fn a_types_own_messages_are_withheld() {
        // chrono's and other types' messages may quote the input: only the path is kept.
        let text = reason::<Order>(order(json!({"when": format!("2026-13-01 {SECRET}")})));
        assert!(
            text.contains("at when: the value does not fit the type"),
            "{text}"
        );
        assert_eq!(
            describe("invalid type: Other text 1234567, expected u64"),
            "invalid type, expected u64"
        );
        assert_eq!(describe("something custom: 1234567"), describe("x"));
        assert_eq!(describe("missing field `a b`"), "missing field");
        assert_eq!(describe("invalid length x, expected 2"), "invalid length");
        assert_eq!(
            describe("unknown variant `1234567`, there are no variants"),
            "unknown variant, there are no variants"
        );
        assert_eq!(
            describe("unknown field `a`, there are no fields"),
            "unknown field `a`, there are no fields"
        );
    }

    #[test]
    fn short_type_names() {
        assert_eq!(short_type_name("alloc::string::String"), "String");
        assert_eq!(short_type_name("my_app::EmailArgs"), "EmailArgs");
        assert_eq!(short_type_name("u64"), "u64");
    }
}
