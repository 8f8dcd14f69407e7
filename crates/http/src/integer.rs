//! Integer request fields (`priority`, `delay_ms`, `max_attempts` in bodies, `limit` in the
//! query): read exactly from the number as written, so an answer names the field's rule and
//! the value sent, never a parser's idea of it ("floating point `1.8446744073709552e19`,
//! expected i64").
//!
//! The rule is JSON Schema's `integer`, which the OpenAPI document declares: any JSON number
//! whose value is a whole number. `-0` is 0; `1e3` and `1000.0` are 1000; `2.5`, `1e-400` and
//! `1e40` are not integers in range and are refused with the field's bounds. The value is
//! computed from the literal's digits, never through a double, so `1.0000000000000001` is not
//! taken for 1.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// Longest literal an answer quotes back; a longer one is described by its length.
const QUOTED_MAX: usize = 40;

/// Magnitude (in decimal digits) beyond which a whole number is only "huge": far beyond every
/// bound here, and still exact in an `i128`.
const DIGITS_MAX: usize = 30;

/// What a number literal is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Literal {
    /// A whole number, exactly.
    Integer(i128),
    /// A number with a non-zero fraction.
    Fraction,
    /// A whole number of more than 30 digits.
    Huge,
}

/// Reads `text` as a number in JSON's syntax (`-`, digits, optional `.digits`, optional
/// exponent; leading zeros are allowed, for query text). `None` when it is not a number.
pub fn read(text: &str) -> Option<Literal> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let negative = bytes.first() == Some(&b'-');
    if negative {
        i += 1;
    }
    let digits_from = |i: usize| {
        bytes[i..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .map_or(bytes.len(), |n| i + n)
    };
    let int_end = digits_from(i);
    if int_end == i {
        return None;
    }
    let int_part = &text[i..int_end];
    i = int_end;
    let mut frac_part = "";
    if bytes.get(i) == Some(&b'.') {
        let end = digits_from(i + 1);
        if end == i + 1 {
            return None;
        }
        frac_part = &text[i + 1..end];
        i = end;
    }
    let mut exponent: i64 = 0;
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        let exponent_negative = bytes.get(i) == Some(&b'-');
        if matches!(bytes.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        let end = digits_from(i);
        if end == i {
            return None;
        }
        for b in &bytes[i..end] {
            exponent = exponent
                .saturating_mul(10)
                .saturating_add(i64::from(b - b'0'));
        }
        if exponent_negative {
            exponent = -exponent;
        }
        i = end;
    }
    if i != bytes.len() {
        return None;
    }
    // value = digits × 10^scale, digits = int_part followed by frac_part.
    let digits = format!("{int_part}{frac_part}");
    let frac_len = i64::try_from(frac_part.len()).unwrap_or(i64::MAX);
    let mut scale = exponent.saturating_sub(frac_len);
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some(Literal::Integer(0));
    }
    let significant = digits.trim_end_matches('0');
    let zeros = i64::try_from(digits.len() - significant.len()).unwrap_or(i64::MAX);
    scale = scale.saturating_add(zeros);
    if scale < 0 {
        return Some(Literal::Fraction);
    }
    let scale = usize::try_from(scale).unwrap_or(usize::MAX);
    if significant.len().saturating_add(scale) > DIGITS_MAX {
        return Some(Literal::Huge);
    }
    // At most 30 digits: exact in an i128.
    let mut value: i128 = significant.parse().ok()?;
    for _ in 0..scale {
        value *= 10;
    }
    Some(Literal::Integer(if negative { -value } else { value }))
}

/// The rule of an integer field, for answers: "must be an integer between 1 and 1000, got 2.5"
/// (`got` quotes the value when it is short, else gives its length).
pub fn rule(min: i64, max: i64, got: &str) -> String {
    format!("must be an integer between {min} and {max}, got {got}")
}

fn quoted(text: &str) -> String {
    if text.is_empty() {
        "an empty value".to_owned()
    } else if text.len() <= QUOTED_MAX {
        text.to_owned()
    } else {
        format!("a number of {} characters", text.len())
    }
}

/// `text` (a number in JSON's syntax) as an integer within `min..=max`.
///
/// # Errors
/// The field's [`rule`], for anything else.
pub fn within(text: &str, min: i64, max: i64) -> Result<i64, String> {
    match read(text) {
        Some(Literal::Integer(v)) if (i128::from(min)..=i128::from(max)).contains(&v) => {
            i64::try_from(v).map_err(|_| rule(min, max, &quoted(text)))
        }
        _ => Err(rule(min, max, &quoted(text))),
    }
}

/// Serde helper for an optional integer field of a request body within `MIN..=MAX`
/// (`#[serde(default, deserialize_with = "crate::integer::optional::<_, 1, 1000>")]`): `null`
/// or absent is `None`; any other value must be a JSON number that [`within`] accepts, else
/// the error is the field's [`rule`] (serde_path_to_error names the field). Reads the number's
/// literal, so it needs serde_json's deserializer (text, or a `Value`).
///
/// # Errors
/// The field's rule.
pub fn optional<'de, D, const MIN: i64, const MAX: i64>(
    deserializer: D,
) -> Result<Option<i64>, D::Error>
where
    D: Deserializer<'de>,
{
    let Some(raw) = Option::<Box<RawValue>>::deserialize(deserializer)? else {
        return Ok(None);
    };
    let text = raw.get().trim();
    let got = match text.as_bytes().first() {
        Some(b'"') => Some("a string"),
        Some(b'[') => Some("an array"),
        Some(b'{') => Some("an object"),
        Some(b't') => Some("true"),
        Some(b'f') => Some("false"),
        _ => None,
    };
    if let Some(got) = got {
        return Err(D::Error::custom(rule(MIN, MAX, got)));
    }
    within(text, MIN, MAX).map(Some).map_err(D::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_value_as_written() {
        for (text, expected) in [
            ("0", Literal::Integer(0)),
            ("-0", Literal::Integer(0)),
            ("-0.0", Literal::Integer(0)),
            ("0e-999999999999999999999", Literal::Integer(0)),
            ("1e3", Literal::Integer(1000)),
            ("1E+3", Literal::Integer(1000)),
            ("1000.000", Literal::Integer(1000)),
            ("12.5e1", Literal::Integer(125)),
            ("1500e-1", Literal::Integer(150)),
            ("-32768", Literal::Integer(-32768)),
            ("007", Literal::Integer(7)),
            ("2.5", Literal::Fraction),
            ("1e-400", Literal::Fraction),
            ("1.0000000000000001", Literal::Fraction),
            ("-0.5", Literal::Fraction),
            ("1e40", Literal::Huge),
            ("1e99999999999999999999999", Literal::Huge),
            (
                "18446744073709551616",
                Literal::Integer(18_446_744_073_709_551_616),
            ),
            (
                "123456789012345678901234567890",
                Literal::Integer(123_456_789_012_345_678_901_234_567_890),
            ),
            ("1234567890123456789012345678901", Literal::Huge),
        ] {
            assert_eq!(read(text), Some(expected), "{text}");
        }
        for text in [
            "", "-", "+1", "1.", ".5", "1e", "1e+", "0x10", " 1", "1 ", "--1", "NaN",
        ] {
            assert_eq!(read(text), None, "{text:?}");
        }
    }

    #[test]
    fn within_names_the_rule_and_the_value() {
        assert_eq!(within("-0", 1, 1000), Err(rule(1, 1000, "-0")));
        assert_eq!(within("-0", -5, 5), Ok(0));
        assert_eq!(within("1e3", 1, 1000), Ok(1000));
        assert_eq!(
            within("18446744073709551616", 1, 1000).unwrap_err(),
            "must be an integer between 1 and 1000, got 18446744073709551616"
        );
        let long = "9".repeat(500);
        assert_eq!(
            within(&long, 1, 1000).unwrap_err(),
            "must be an integer between 1 and 1000, got a number of 500 characters"
        );
        assert_eq!(
            within(&i64::MAX.to_string(), i64::MIN, i64::MAX),
            Ok(i64::MAX)
        );
    }
}
