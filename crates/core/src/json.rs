//! JSON rules shared by every store: size and NUL checks on stored JSON, the canonical form used
//! for request hashes, and the containment test behind meta filters (PostgreSQL's `jsonb @>`).

use std::io;

use serde_json::Value;

use crate::error::Error;

/// Checks that `value` serializes to at most `max_bytes` of JSON text and holds no NUL
/// character (`\u0000`) in any string or object key: PostgreSQL's `jsonb` cannot store one,
/// so every store refuses it the same way (DESIGN.md section 9).
///
/// # Errors
/// [`Error::InvalidInput`] naming `field` when the value is too large or holds a NUL.
pub fn check_value(field: &str, value: &Value, max_bytes: usize) -> Result<(), Error> {
    let size = json_len(value);
    if size > max_bytes {
        return Err(Error::invalid(
            field,
            format!("is {size} bytes of JSON; the limit is {max_bytes} bytes"),
        ));
    }
    if has_nul(value) {
        return Err(Error::invalid(
            field,
            "must not contain the NUL character (\\u0000) in any string or key",
        ));
    }
    Ok(())
}

/// The length in bytes of `value`'s compact JSON text, computed without building the text.
pub fn json_len(value: &Value) -> usize {
    struct Counter(usize);
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a `Value` to an in-memory sink cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// True when any string or object key inside `value` contains U+0000.
pub fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// The canonical JSON text of `value`: compact, object keys sorted bytewise at every depth,
/// whatever order the map kept them in. Used for request hashes.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Checks a meta filter: it must be a JSON object without NUL characters, at most 64 KiB.
///
/// # Errors
/// [`Error::InvalidInput`] with field `meta` otherwise.
pub fn check_meta_filter(filter: &Value) -> Result<(), Error> {
    if !filter.is_object() {
        return Err(Error::invalid(
            "meta",
            "a meta filter must be a JSON object, e.g. {\"customer\": \"acme\"}",
        ));
    }
    check_value("meta", filter, 64 * 1024)
}

/// PostgreSQL `jsonb` containment (`container @> contained`) for the shapes Drover filters on:
/// an object contains another when every key of the second is present with a contained value;
/// an array contains another when every element of the second is contained in some element of
/// the first (order and repeats ignored); scalars must be equal (numbers compared by value, so
/// `1` equals `1.0`); values of different types never contain each other.
pub fn contains(container: &Value, contained: &Value) -> bool {
    match (container, contained) {
        (Value::Object(a), Value::Object(b)) => b
            .iter()
            .all(|(k, vb)| a.get(k).is_some_and(|va| contains(va, vb))),
        (Value::Array(a), Value::Array(b)) => {
            b.iter().all(|eb| a.iter().any(|ea| contains(ea, eb)))
        }
        (Value::Number(a), Value::Number(b)) => numbers_equal(a, b),
        (a, b) => a == b,
    }
}

/// Numeric equality as PostgreSQL's `numeric` decides it for the decimal text serde_json
/// writes: exact, so an integer beyond 2^53 never equals the float it rounds to
/// (`9007199254740993` versus `9007199254740992.0`), while `1` equals `1.0` and `0` equals
/// `-0.0`.
fn numbers_equal(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    match (exact_integer(a), exact_integer(b)) {
        (Some(x), Some(y)) => x == y,
        // An integral value never equals a float with a fraction or beyond i128.
        (Some(_), None) | (None, Some(_)) => false,
        (None, None) => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
    }
}

/// The exact integer value of `n`: its i64 or u64, or a float without a fraction inside the
/// i128 range (converted exactly); `None` for other floats.
fn exact_integer(n: &serde_json::Number) -> Option<i128> {
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    let f = n.as_f64()?;
    // 2^127 is exactly representable; integral floats below it convert exactly.
    const LIMIT: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;
    if f.fract() == 0.0 && f.abs() < LIMIT {
        Some(f as i128)
    } else {
        None
    }
}

/// Checks that every integer literal in the JSON text `text` fits in 64 bits (i64 or u64).
/// Drover's JSON values hold integers exactly only in that range; a longer integer literal
/// would be read as the nearest double (`123456789012345678901234567890` as
/// `1.2345678901234568e29`) and stored altered, so it is refused instead. Numbers written with
/// a fraction or an exponent are doubles by their writer's choice and pass. Call it on text
/// that already parsed as JSON (it does not validate the syntax).
///
/// `prefix` names the field the text is (`args`, `meta`; `""` for a whole request body): the
/// error names the path of the literal inside it (`args.order.total`, `jobs[1].meta.n`).
///
/// # Errors
/// [`Error::InvalidInput`] naming the path of the first such literal.
pub fn check_integer_literals(text: &str, prefix: &str) -> Result<(), Error> {
    enum Frame {
        Object(Option<String>),
        Array(usize),
    }
    let bytes = text.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut expect_key = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                stack.push(Frame::Object(None));
                expect_key = true;
                i += 1;
            }
            b'[' => {
                stack.push(Frame::Array(0));
                expect_key = false;
                i += 1;
            }
            b'}' | b']' => {
                stack.pop();
                i += 1;
            }
            b',' => {
                match stack.last_mut() {
                    Some(Frame::Object(_)) => expect_key = true,
                    Some(Frame::Array(index)) => *index += 1,
                    None => {}
                }
                i += 1;
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
                if expect_key {
                    let key: String = serde_json::from_str(&text[start..i]).unwrap_or_default();
                    if let Some(Frame::Object(slot)) = stack.last_mut() {
                        *slot = Some(key);
                    }
                    expect_key = false;
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len()
                    && matches!(bytes[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                let literal = &text[start..i];
                let integer = !literal.contains(['.', 'e', 'E']);
                if integer && literal.parse::<i64>().is_err() && literal.parse::<u64>().is_err() {
                    let mut path = prefix.to_owned();
                    for frame in &stack {
                        match frame {
                            Frame::Object(Some(key)) => {
                                if !path.is_empty() {
                                    path.push('.');
                                }
                                path.push_str(key);
                            }
                            Frame::Object(None) => {}
                            Frame::Array(index) => path.push_str(&format!("[{index}]")),
                        }
                    }
                    if path.is_empty() {
                        path.push_str("body");
                    }
                    return Err(Error::invalid(
                        path,
                        format!(
                            "the integer {literal} does not fit in 64 bits \
                             ({}..={}) and would not be kept exactly; send it as a string",
                            i64::MIN,
                            u64::MAX
                        ),
                    ));
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containment_follows_jsonb() {
        let doc = json!({"a": 1, "tags": ["x", "y", {"k": 2}], "o": {"p": true, "q": null}});
        assert!(contains(&doc, &json!({})));
        assert!(contains(&doc, &json!({"a": 1})));
        assert!(contains(&doc, &json!({"a": 1.0})));
        assert!(contains(&doc, &json!({"tags": ["y"]})));
        assert!(contains(&doc, &json!({"tags": ["y", "x", "y"]})));
        assert!(contains(&doc, &json!({"tags": [{}]})));
        assert!(contains(&doc, &json!({"o": {"q": null}})));
        assert!(!contains(&doc, &json!({"a": "1"})));
        assert!(!contains(&doc, &json!({"tags": "x"})));
        assert!(!contains(&doc, &json!({"o": {"r": null}})));
        assert!(!contains(&doc, &json!({"missing": 1})));
    }

    #[test]
    fn containment_compares_numbers_exactly_like_jsonb() {
        // Found by the HTTP suite's comparison with PostgreSQL's `@>`.
        assert!(!contains(
            &json!({"n": 9007199254740993i64}),
            &json!({"n": 9007199254740992.0})
        ));
        assert!(!contains(
            &json!({"n": u64::MAX}),
            &json!({"n": 1.8446744073709552e19})
        ));
        assert!(contains(
            &json!({"n": 9007199254740992i64}),
            &json!({"n": 9007199254740992.0})
        ));
        assert!(contains(&json!({"n": 0}), &json!({"n": -0.0})));
        assert!(contains(&json!({"n": -3}), &json!({"n": -3.0})));
        assert!(contains(&json!({"n": 2.5}), &json!({"n": 2.5})));
        assert!(!contains(&json!({"n": 2}), &json!({"n": 2.5})));
        assert!(contains(&json!({"n": 1e300}), &json!({"n": 1e300})));
        assert!(!contains(&json!({"n": u64::MAX}), &json!({"n": 1e300})));
    }

    #[test]
    fn integer_literals_beyond_64_bits_are_refused_with_their_path() {
        let field = |text: &str, prefix: &str| match check_integer_literals(text, prefix) {
            Err(Error::InvalidInput { field, .. }) => Some(field),
            _ => None,
        };
        assert_eq!(
            field(r#"{"a": 1, "b": -9223372036854775808}"#, "args"),
            None
        );
        assert_eq!(
            field(r#"[18446744073709551615, 1e400, 1.5, -0]"#, "args"),
            None
        );
        assert_eq!(
            field(r#"{"a": 123456789012345678901234567890}"#, "args").as_deref(),
            Some("args.a")
        );
        assert_eq!(
            field(
                r#"{"x": "9999999999999999999999", "y": [0, {"z": 18446744073709551616}]}"#,
                "meta"
            )
            .as_deref(),
            Some("meta.y[1].z")
        );
        assert_eq!(
            field(
                r#"{"jobs": [{"kind": "k"}, {"args": {"n\"x": -9223372036854775809}}]}"#,
                ""
            )
            .as_deref(),
            Some("jobs[1].args.n\"x")
        );
        assert_eq!(field("99999999999999999999", "").as_deref(), Some("body"));
        assert_eq!(
            field("99999999999999999999", "args").as_deref(),
            Some("args")
        );
    }

    #[test]
    fn canonical_sorts_keys() {
        let a = json!({"b": [1, {"d": 1, "c": 2}], "a": "x"});
        assert_eq!(canonical(&a), r#"{"a":"x","b":[1,{"c":2,"d":1}]}"#);
    }

    #[test]
    fn nul_and_size_are_checked() {
        assert!(check_value("args", &json!({"k\u{0}": 1}), 100).is_err());
        assert!(check_value("args", &json!("ok"), 100).is_ok());
        assert!(check_value("args", &json!("toolong"), 5).is_err());
        assert_eq!(json_len(&json!({"a": [1, 2]})), r#"{"a":[1,2]}"#.len());
    }
}
