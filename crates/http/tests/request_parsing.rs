//! Property tests of enqueue request parsing (RELIABILITY.md, guarantee 15): whatever bytes or JSON a client
//! sends to `POST /v1/jobs` or `POST /v1/jobs/batch`, `extract::parse_json` followed by
//! `EnqueueRequest::into_valid_job` never panics, and every refusal is a 400 (or a 403 for a
//! tenant or kind the token may not use) whose body has the one error shape and names the
//! offending field.

use drover_core::{SizeLimits, TenantId};
use drover_http::dto::{BatchEnqueueRequest, EnqueueRequest};
use drover_http::extract::parse_json;
use drover_http::{ApiError, Principal, Role, TenantScope};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// The request fields of `EnqueueRequest`.
const FIELDS: [&str; 12] = [
    "kind",
    "args",
    "queue",
    "tenant",
    "priority",
    "run_at",
    "delay_ms",
    "max_attempts",
    "unique_key",
    "limit_keys",
    "meta",
    "idempotency_key",
];

/// Callers: a producer of one tenant, an operator of one tenant, an operator of every tenant.
fn principals() -> Vec<Principal> {
    let acme = TenantId::parse("acme").unwrap();
    vec![
        Principal {
            scope: TenantScope::One(acme.clone()),
            role: Role::Producer,
            name: "token:00000001".to_owned(),
        },
        Principal {
            scope: TenantScope::One(acme),
            role: Role::Operator,
            name: "token:00000002".to_owned(),
        },
        Principal::insecure(),
    ]
}

/// Small sizes, so the size rules are reachable by generated values.
fn sizes() -> SizeLimits {
    SizeLimits {
        max_args_bytes: 200,
        max_meta_bytes: 200,
        max_result_bytes: 200,
    }
}

/// True when `field` names a request field, an element of `limit_keys` or of a batch's `jobs`,
/// the whole `body`, or (for an unknown field) a key the request object holds.
fn names_a_field(field: &str, keys: &[String]) -> bool {
    let base = field.split('[').next().unwrap_or(field);
    field == "body"
        || FIELDS.contains(&field)
        || ((base == "limit_keys" || base == "jobs") && field.ends_with(']'))
        || keys.iter().any(|k| k == field)
}

/// Asserts the shape of a refusal: 400 `invalid_input` or 403 `forbidden`, a message, and a
/// field that `names_a_field` (after removing `prefix`, e.g. `jobs[0].`).
fn check_refusal(e: &ApiError, prefix: &str, keys: &[String]) {
    let status = e.status().as_u16();
    assert!(
        status == 400 || status == 403,
        "unexpected status {status}: {}",
        e.message()
    );
    let body = serde_json::to_value(e.body()).unwrap();
    let error = body["error"].as_object().expect("error object");
    assert_eq!(
        error["code"],
        if status == 400 {
            "invalid_input"
        } else {
            "forbidden"
        }
    );
    assert!(!error["message"].as_str().unwrap().is_empty());
    let field = error
        .get("field")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no field in {body}"));
    assert_eq!(Some(field), e.field());
    let field = field.strip_prefix(prefix).unwrap_or(field);
    assert!(
        names_a_field(field, keys),
        "field {field:?} names nothing in the request ({body})"
    );
}

/// Keys of a JSON object (empty for anything else).
fn keys_of(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// Runs one single-job body through parsing and conversion for every principal.
fn check_single(bytes: &[u8], header_key: Option<&str>) {
    let parsed_value: Option<Value> = serde_json::from_slice(bytes).ok();
    let keys = keys_of(parsed_value.as_ref());
    for principal in principals() {
        match parse_json::<EnqueueRequest>(bytes) {
            Err(e) => {
                assert_eq!(e.status().as_u16(), 400);
                check_refusal(&e, "", &keys);
            }
            Ok(request) => {
                match request.into_valid_job(&principal, header_key.map(str::to_owned), &sizes()) {
                    Ok(job) => {
                        assert!(job.validate(&sizes()).is_ok());
                        assert!(principal.scope.allows(&job.tenant));
                        if job.kind.as_str() == "exec" {
                            assert_eq!(principal.role, Role::Operator);
                        }
                    }
                    Err(e) => check_refusal(&e, "", &keys),
                }
            }
        }
    }
}

/// Runs one batch body through parsing and conversion, prefixing fields as the route does.
fn check_batch(bytes: &[u8]) {
    let parsed_value: Option<Value> = serde_json::from_slice(bytes).ok();
    let mut keys = keys_of(parsed_value.as_ref());
    if let Some(Value::Array(items)) = parsed_value.as_ref().and_then(|v| v.get("jobs")) {
        for item in items {
            keys.extend(keys_of(Some(item)));
        }
    }
    match parse_json::<BatchEnqueueRequest>(bytes) {
        Err(e) => {
            assert_eq!(e.status().as_u16(), 400);
            let field = e.field().unwrap_or_default().to_owned();
            // `jobs[3].bogus` -> `bogus`.
            let prefix = match field.find("].") {
                Some(i) if field.starts_with("jobs[") => field[..i + 2].to_owned(),
                _ => String::new(),
            };
            check_refusal(
                &e,
                &prefix,
                &[keys.clone(), vec!["jobs".to_owned()]].concat(),
            );
        }
        Ok(batch) => {
            for (i, request) in batch.jobs.into_iter().enumerate() {
                if let Err(e) = request
                    .into_valid_job(&Principal::insecure(), None, &sizes())
                    .map_err(|e| e.in_field(&format!("jobs[{i}]")))
                {
                    check_refusal(&e, &format!("jobs[{i}]."), &keys);
                }
            }
        }
    }
}

/// Any JSON value, nested a few levels, with strings that may hold NUL and other control
/// characters and numbers of every JSON shape.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(Value::from),
        "[a-z.:/_-]{0,12}".prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::from),
        "[a\u{0}\u{1}\n ]{0,4}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map("[a-z\u{0}]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A value for one request field: usually of the right type and plausible, sometimes not.
fn field_value(field: &'static str) -> BoxedStrategy<Value> {
    let plausible: BoxedStrategy<Value> = match field {
        "kind" => prop_oneof![
            Just(Value::from("exec")),
            "[a-z][a-z._:/-]{0,20}".prop_map(Value::from),
            Just(Value::from("")),
            Just(Value::from("a".repeat(129))),
        ]
        .boxed(),
        "queue" | "tenant" => prop_oneof![
            Just(Value::from("acme")),
            Just(Value::from("default")),
            "[a-z][a-z._:-]{0,10}".prop_map(Value::from),
            Just(Value::from("bad name")),
            Just(Value::from("nul\u{0}")),
        ]
        .boxed(),
        "priority" | "delay_ms" | "max_attempts" => prop_oneof![
            (-5i64..1500).prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            Just(Value::from(u64::MAX)),
            Just(Value::from(1.5)),
            Just(serde_json::from_str::<Value>("1e40").unwrap()),
        ]
        .boxed(),
        "run_at" => prop_oneof![
            Just(Value::from("2030-01-01T00:00:00Z")),
            Just(Value::from("0001-01-01T00:00:00Z")),
            Just(Value::from("1969-12-31T23:59:59Z")),
            Just(Value::from("not a time")),
            (0i64..10_000).prop_map(|y| Value::from(format!("{y:04}-06-01T12:00:00+05:00"))),
        ]
        .boxed(),
        "unique_key" | "idempotency_key" => prop_oneof![
            "[a-z0-9:-]{1,20}".prop_map(Value::from),
            Just(Value::from("")),
            Just(Value::from("k\u{0}")),
            Just(Value::from("k".repeat(256))),
        ]
        .boxed(),
        "limit_keys" => vec(
            prop_oneof![
                "[a-z]{1,5}:[0-9]{1,3}".prop_map(Value::from),
                Just(Value::from("bad key")),
                Just(Value::from(3)),
            ],
            0..20,
        )
        .prop_map(Value::Array)
        .boxed(),
        _ => any_json().boxed(),
    };
    prop_oneof![4 => plausible, 1 => any_json()].boxed()
}

/// A request object: `kind` usually present, a random subset of the other fields, sometimes an
/// unknown field.
fn request_like() -> impl Strategy<Value = Value> {
    let fields: Vec<BoxedStrategy<Option<Value>>> = FIELDS
        .iter()
        .map(|f| {
            let weight_present = if *f == "kind" { 9 } else { 3 };
            prop_oneof![
                weight_present => field_value(f).prop_map(Some),
                4 => Just(None),
            ]
            .boxed()
        })
        .collect();
    (
        fields,
        proptest::option::weighted(0.1, ("[a-z_]{1,8}", any_json())),
    )
        .prop_map(|(values, unknown)| {
            let mut map = Map::new();
            for (name, value) in FIELDS.iter().zip(values) {
                if let Some(v) = value {
                    map.insert((*name).to_owned(), v);
                }
            }
            if let Some((k, v)) = unknown {
                map.insert(k, v);
            }
            Value::Object(map)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_and_errors_name_a_field(bytes in vec(any::<u8>(), 0..256)) {
        check_single(&bytes, None);
        check_batch(&bytes);
    }

    #[test]
    fn arbitrary_json_never_panics_and_errors_name_a_field(value in any_json()) {
        let bytes = serde_json::to_vec(&value).unwrap();
        check_single(&bytes, None);
        check_batch(&bytes);
    }

    #[test]
    fn request_like_bodies_never_panic_and_errors_name_a_field(
        value in request_like(),
        header in proptest::option::of(prop_oneof![
            Just("key-1".to_owned()),
            "[a-z0-9-]{1,12}",
            Just(String::new()),
        ]),
    ) {
        let bytes = serde_json::to_vec(&value).unwrap();
        check_single(&bytes, header.as_deref());
    }

    #[test]
    fn request_like_batches_never_panic_and_errors_name_a_field(
        jobs in vec(request_like(), 0..5),
    ) {
        let bytes = serde_json::to_vec(&serde_json::json!({ "jobs": jobs })).unwrap();
        check_batch(&bytes);
    }

    #[test]
    fn truncated_requests_are_refused_naming_a_field(value in request_like(), cut in 0usize..200) {
        let bytes = serde_json::to_vec(&value).unwrap();
        let cut = cut.min(bytes.len().saturating_sub(1));
        // Usually `body` (the JSON ends early), unless a field read before the cut is already
        // of the wrong type.
        let e = parse_json::<EnqueueRequest>(&bytes[..cut]).unwrap_err();
        prop_assert_eq!(e.status().as_u16(), 400);
        check_refusal(&e, "", &keys_of(Some(&value)));
    }
}

#[test]
fn nul_in_any_string_is_refused_naming_its_field() {
    let cases = [
        (r#"{"kind": "a", "args": {"x": "a\u0000b"}}"#, "args"),
        (r#"{"kind": "a", "args": {"x\u0000": 1}}"#, "args"),
        (r#"{"kind": "a", "meta": {"x": ["\u0000"]}}"#, "meta"),
        (r#"{"kind": "a\u0000"}"#, "kind"),
        (r#"{"kind": "a", "queue": "q\u0000"}"#, "queue"),
        (r#"{"kind": "a", "unique_key": "u\u0000"}"#, "unique_key"),
        (
            r#"{"kind": "a", "idempotency_key": "i\u0000"}"#,
            "idempotency_key",
        ),
        (
            r#"{"kind": "a", "limit_keys": ["ok:1", "l\u0000"]}"#,
            "limit_keys[1]",
        ),
        (r#"{"kind": "a", "tenant": "t\u0000"}"#, "tenant"),
    ];
    for (body, field) in cases {
        let e = parse_json::<EnqueueRequest>(body.as_bytes())
            .and_then(|r| r.into_valid_job(&Principal::insecure(), None, &sizes()))
            .unwrap_err();
        assert_eq!(e.status().as_u16(), 400, "{body}");
        assert_eq!(e.field(), Some(field), "{body}: {}", e.message());
    }
}

#[test]
fn max_attempts_bounds_are_named() {
    for value in [
        "0",
        "-1",
        "1001",
        "9223372036854775807",
        "99999999999999999999",
        "1e40",
        "2.5",
        "\"3\"",
    ] {
        let body = format!(r#"{{"kind": "a", "max_attempts": {value}}}"#);
        let e = parse_json::<EnqueueRequest>(body.as_bytes())
            .and_then(|r| r.into_valid_job(&Principal::insecure(), None, &sizes()))
            .unwrap_err();
        assert_eq!(e.status().as_u16(), 400, "{body}");
        assert_eq!(e.field(), Some("max_attempts"), "{body}: {}", e.message());
    }
}
