//! JSON rules shared by every store: size and NUL checks on stored JSON, the numbers as
//! PostgreSQL's `jsonb` gives them back ([`normalize_numbers`]), the canonical form used for
//! request hashes, and the containment test behind meta filters (PostgreSQL's `jsonb @>`).

use std::io;

use serde_json::{Number, Value};

use crate::error::Error;

/// Deepest nesting of arrays and objects allowed in stored JSON (args, meta, progress,
/// result): `[[1]]` is nested 2 deep, a scalar 0. serde_json, which reads every stored document
/// back (sqlx's `jsonb` decoding, the HTTP API's request bodies), refuses documents nested 128
/// deep or more; a job it could store but not read back would fail every claim that met it.
pub const JSON_DEPTH_MAX: usize = 100;

/// Checks that `value` is nested at most [`JSON_DEPTH_MAX`] deep, serializes to at most
/// `max_bytes` of JSON text, both as sent and in its stored form ([`normalize_numbers`]: the
/// longer of the two counts), and holds no NUL character (`\u0000`) in any string or object
/// key: PostgreSQL's `jsonb` cannot store one, so every store refuses it the same way
/// (docs/design.md section 9).
///
/// # Errors
/// [`Error::InvalidInput`] naming `field` when the value is nested too deep, too large or
/// holds a NUL.
pub fn check_value(field: &str, value: &Value, max_bytes: usize) -> Result<(), Error> {
    // First: the checks below walk the value recursively, and so would a deeper one's drop.
    if nested_deeper_than(value, JSON_DEPTH_MAX) {
        return Err(Error::invalid(
            field,
            format!(
                "nests arrays and objects more than {JSON_DEPTH_MAX} deep; the limit is \
                 {JSON_DEPTH_MAX}"
            ),
        ));
    }
    let size = json_len(value);
    if size > max_bytes {
        return Err(Error::invalid(
            field,
            format!("is {size} bytes of JSON; the limit is {max_bytes} bytes"),
        ));
    }
    // The bound holds for the stored form too: a float written with an exponent can come back
    // longer (`1e19` is stored as `10000000000000000000`), so a value under the bound as sent
    // could otherwise be kept, and served, several times over it.
    if has_float(value) {
        let stored = json_len(&normalized(value.clone()));
        if stored > max_bytes {
            return Err(Error::invalid(
                field,
                format!(
                    "is {stored} bytes of JSON as stored (numbers written out as PostgreSQL's \
                     jsonb keeps them: 1e19 as 10000000000000000000; {size} bytes as sent); \
                     the limit is {max_bytes} bytes"
                ),
            ));
        }
    }
    if has_nul(value) {
        return Err(Error::invalid(
            field,
            "must not contain the NUL character (\\u0000) in any string or key",
        ));
    }
    Ok(())
}

/// True when `value` nests arrays and objects more than `limit` deep; looks no deeper than
/// `limit + 1` levels, so its own recursion stays bounded whatever the value.
fn nested_deeper_than(value: &Value, limit: usize) -> bool {
    match value {
        Value::Array(items) => match limit.checked_sub(1) {
            None => true,
            Some(rest) => items.iter().any(|item| nested_deeper_than(item, rest)),
        },
        Value::Object(map) => match limit.checked_sub(1) {
            None => true,
            Some(rest) => map.values().any(|item| nested_deeper_than(item, rest)),
        },
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => false,
    }
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

/// True when any number inside `value` is held as a float (the only numbers
/// [`normalize_numbers`] can rewrite).
fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        Value::Null | Value::Bool(_) | Value::String(_) => false,
    }
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

/// Rewrites every number inside `value` as it comes back from a PostgreSQL `jsonb` column, so
/// that every store gives back the same JSON for the same input (docs/design.md section 4).
///
/// `jsonb` keeps numbers as `numeric`, an exact decimal without exponent and without negative
/// zero. A float travels to PostgreSQL as serde_json writes it (`1e+16`, `-0.0`, `1.5e-7`),
/// `numeric` reads it and writes it back as a plain decimal with
/// `max(0, fraction digits - exponent)` fraction digits (`10000000000000000`, `0.0`,
/// `0.00000015`), and serde_json reads that text: as an integer when it has no `.` and fits
/// i64 or u64, else as a float. So a float written with a positive exponent whose decimal is
/// an integer in the 64-bit range comes back as an integer (`1e16` -> `10000000000000000`,
/// `1.2345678e17` -> `123456780000000000`), `-0.0` comes back as `0.0`, and every other float
/// keeps its value and kind. Integers never change. The function applies exactly that round
/// trip to each float; it is idempotent, and PostgreSQL gives a normalized value back
/// unchanged, so applying it before sending to PostgreSQL changes nothing there.
///
/// Exactness needs serde_json's `float_roundtrip` feature (set in the workspace): without it
/// serde_json reads long decimals such as `f64::MAX` written out in full (309 digits)
/// inexactly, or not at all ("number out of range").
pub fn normalize_numbers(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if n.is_f64() {
                if let Some(stored) = stored_number(n) {
                    *n = stored;
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_numbers),
        Value::Object(map) => map.values_mut().for_each(normalize_numbers),
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

/// `value` with [`normalize_numbers`] applied.
pub fn normalized(mut value: Value) -> Value {
    normalize_numbers(&mut value);
    value
}

/// The number PostgreSQL's `jsonb` gives back for `n` (see [`normalize_numbers`]); `None` when
/// it is unchanged or its text is not a JSON number literal.
fn stored_number(n: &Number) -> Option<Number> {
    let sent = serde_json::to_string(n).ok()?;
    let back = numeric_text(&sent)?;
    if back == sent {
        return None;
    }
    serde_json::from_str::<Number>(&back).ok()
}

/// PostgreSQL's `numeric_in` then `numeric_out` on the JSON number literal `text`: the exact
/// decimal value without exponent, with `max(0, fraction digits - exponent)` fraction digits
/// (trailing zeros kept), no leading zeros, and no sign on zero. `None` for text that is not a
/// number literal or whose exponent is beyond `numeric`'s ±1000 (no f64 comes near it).
fn numeric_text(text: &str) -> Option<String> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => {
            let exp = &unsigned[at + 1..];
            let exp = exp.strip_prefix('+').unwrap_or(exp);
            (&unsigned[..at], exp.parse::<i64>().ok()?)
        }
        None => (unsigned, 0),
    };
    if !(-1000..=1000).contains(&exponent) {
        return None;
    }
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int_part.is_empty() || !all_digits(int_part) || !all_digits(frac_part) {
        return None;
    }
    let digits = format!("{int_part}{frac_part}");
    // The value is digits x 10^-scale.
    let scale = i64::try_from(frac_part.len()).ok()? - exponent;
    let (int_digits, frac_digits) = if scale <= 0 {
        let zeros = usize::try_from(-scale).ok()?;
        (format!("{digits}{}", "0".repeat(zeros)), String::new())
    } else {
        let scale = usize::try_from(scale).ok()?;
        let padded = if digits.len() <= scale {
            format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
        } else {
            digits
        };
        let (i, f) = padded.split_at(padded.len() - scale);
        (i.to_owned(), f.to_owned())
    };
    let int_digits = match int_digits.trim_start_matches('0') {
        "" => "0",
        trimmed => trimmed,
    };
    let zero = int_digits == "0" && frac_digits.bytes().all(|b| b == b'0');
    let mut out = String::with_capacity(int_digits.len() + frac_digits.len() + 2);
    if negative && !zero {
        out.push('-');
    }
    out.push_str(int_digits);
    if !frac_digits.is_empty() {
        out.push('.');
        out.push_str(&frac_digits);
    }
    Some(out)
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
    check_object_filter("meta", filter)
}

/// Checks an args filter of a jobs list ([`crate::ListJobs::args`]): as a meta filter.
///
/// # Errors
/// [`Error::InvalidInput`] naming `args`.
pub fn check_args_filter(filter: &Value) -> Result<(), Error> {
    check_object_filter("args", filter)
}

fn check_object_filter(field: &str, filter: &Value) -> Result<(), Error> {
    if !filter.is_object() {
        return Err(Error::invalid(
            field,
            format!("the {field} filter must be a JSON object, e.g. {{\"customer\": \"acme\"}}"),
        ));
    }
    check_value(field, filter, 64 * 1024)
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

    fn nested(depth: usize) -> Value {
        let mut value = json!("leaf");
        for level in 0..depth {
            value = if level % 2 == 0 {
                json!([value])
            } else {
                json!({ "k": value })
            };
        }
        value
    }

    #[test]
    fn nesting_is_bounded_at_json_depth_max() {
        assert!(check_value("args", &nested(JSON_DEPTH_MAX), 1 << 20).is_ok());
        assert!(check_value("args", &json!({"a": [1, {"b": 2}]}), 1 << 20).is_ok());
        for depth in [JSON_DEPTH_MAX + 1, 128, 1000] {
            match check_value("meta", &nested(depth), 1 << 20) {
                Err(Error::InvalidInput { field, reason }) => {
                    assert_eq!(field, "meta");
                    assert!(reason.contains("more than 100 deep"), "{reason}");
                }
                other => panic!("depth {depth}: {other:?}"),
            }
        }
        // A deep branch beside shallow ones is found too.
        let wide = json!({"a": 1, "b": [2, 3], "c": nested(JSON_DEPTH_MAX)});
        assert!(check_value("args", &wide, 1 << 20).is_err());
        assert_eq!(nested(3), json!([{"k": ["leaf"]}]));
    }
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

    /// The serialized text of `value` after [`normalize_numbers`].
    fn stored(value: Value) -> String {
        normalized(value).to_string()
    }

    #[test]
    fn size_bound_holds_for_the_stored_form() {
        // 16 x `1e19` is 97 bytes as serde_json writes it (`1e+19`, 5 bytes each) and 337 as
        // stored (each the 20-digit integer 10000000000000000000).
        let sent = serde_json::json!(vec![1e19; 16]);
        assert_eq!(
            sent.to_string(),
            format!("[{}]", vec!["1e+19"; 16].join(","))
        );
        assert_eq!(json_len(&sent), 97);
        match check_value("result", &sent, 100) {
            Err(Error::InvalidInput { field, reason }) => {
                assert_eq!(field, "result");
                assert!(reason.contains("337 bytes of JSON as stored"), "{reason}");
                assert!(reason.contains("97 bytes as sent"), "{reason}");
            }
            other => panic!("expected InvalidInput, got {other:?}"),
        }
        assert!(check_value("result", &sent, 337).is_ok());
        // Floats that keep their form cost nothing extra.
        assert!(check_value("result", &serde_json::json!([1.5, 1e300]), 12).is_ok());
    }

    #[test]
    fn numeric_text_follows_numeric_in_and_out() {
        let cases = [
            ("1e+16", "10000000000000000"),
            ("1e16", "10000000000000000"),
            ("1.5e1", "15"),
            ("1.50e2", "150"),
            ("1.0", "1.0"),
            ("-0.0", "0.0"),
            ("-0", "0"),
            ("0.0", "0.0"),
            ("1e-7", "0.0000001"),
            ("1.5E-7", "0.00000015"),
            ("-1.2345678e17", "-123456780000000000"),
            ("123.456", "123.456"),
            ("1.25e1", "12.5"),
            ("12.5e-1", "1.25"),
            ("5e-324", &format!("0.{}5", "0".repeat(323))),
            ("1e300", &format!("1{}", "0".repeat(300))),
        ];
        for (sent, back) in cases {
            assert_eq!(numeric_text(sent).as_deref(), Some(back), "{sent}");
        }
        assert_eq!(numeric_text("1e1001"), None);
        assert_eq!(numeric_text("x"), None);
        assert_eq!(numeric_text(".5"), None);
    }

    #[test]
    fn numbers_come_back_as_jsonb_gives_them() {
        // A float with a positive exponent whose decimal is a 64-bit integer becomes that
        // integer; beyond 64 bits it stays a float.
        assert_eq!(stored(json!(1e16)), "10000000000000000");
        assert_eq!(stored(json!(-1e16)), "-10000000000000000");
        assert_eq!(stored(json!(1.2345678e17)), "123456780000000000");
        // The decimal PostgreSQL keeps is the shortest text, not the binary value: 2^63 as a
        // float is written 9.223372036854776e18 and comes back as that integer.
        assert_eq!(stored(json!(9.223372036854776e18)), "9223372036854776000");
        assert!(normalized(json!(9.223372036854776e18)).is_u64());
        assert!(normalized(json!(-9.223372036854776e18)).is_f64());
        assert!(normalized(json!(1.8446744073709552e19)).is_f64());
        assert_eq!(normalized(json!(1e22)), json!(1e22));
        assert!(normalized(json!(1e22)).is_f64());
        // No negative zero.
        assert_eq!(stored(json!(-0.0)), "0.0");
        assert_eq!(stored(json!([-0.0, {"z": -0.0}])), "[0.0,{\"z\":0.0}]");
        // Everything else keeps value and kind.
        for x in [
            1.0,
            15.0,
            1e15,
            123.456,
            1e-7,
            -2.5e-300,
            5e-324,
            1e300,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
        ] {
            let back = normalized(json!(x));
            assert!(back.is_f64(), "{x}");
            assert_eq!(back.as_f64(), Some(x), "{x}");
        }
        for n in [json!(0), json!(i64::MIN), json!(i64::MAX), json!(u64::MAX)] {
            assert_eq!(stored(n.clone()), n.to_string());
        }
        // Strings, keys and other values are untouched.
        let doc = json!({"1e16": "1e16", "a": [true, null, {"b": 1e16}]});
        assert_eq!(
            stored(doc),
            r#"{"1e16":"1e16","a":[true,null,{"b":10000000000000000}]}"#
        );
    }

    #[test]
    fn normalizing_is_idempotent() {
        // A spread of doubles over the whole range (a fixed xorshift sequence of bit patterns),
        // plus the integral ones around the 64-bit bounds.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut values: Vec<f64> = Vec::new();
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = f64::from_bits(state);
            if x.is_finite() {
                values.push(x);
            }
        }
        for e in 0..=20 {
            for m in [1.0, 1.5, 9.223372036854776, 1.8446744073709552, 9.99] {
                values.push(m * 10f64.powi(e));
                values.push(-m * 10f64.powi(e));
            }
        }
        for x in values {
            let once = normalized(json!(x));
            let twice = normalized(once.clone());
            assert_eq!(once.to_string(), twice.to_string(), "{x:e}");
            if let Some(back) = once.as_f64() {
                if once.is_f64() {
                    assert_eq!(back, if x == 0.0 { 0.0 } else { x }, "{x:e}");
                }
            }
        }
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
