//! Cases that need SQL: an unmigrated database, an unreachable one, and core's jsonb
//! containment against PostgreSQL's `@>`.

use std::sync::Arc;
use std::time::Duration;

use drover_http::ApiConfig;
use serde_json::{json, Value};

use crate::harness::*;

// ------------------------------------------------------------------------------------------
// PostgreSQL only

/// `/v1/ready` answers 503 on a database whose schema is not migrated, with a reason naming
/// `drover migrate`, and 200 once it is migrated.
pub(crate) async fn ready_is_503_until_migrated(env: &Env) {
    let db = env.database().expect("postgres");
    let fresh = db.server().database(Schema::Empty).await;
    let result = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        let store = drover_store_postgres::PgStore::connect_with(
            fresh.connect.clone(),
            drover_store_postgres::PgOptions::default(),
        )
        .await
        .expect("connect");
        let api = env
            .serve(Arc::new(store.clone()), ApiConfig::default())
            .await;
        let ready = api.get(None, "/v1/ready").await;
        assert_eq!(ready.status, 503, "{}", ready.text);
        assert_error_shape(&ready.json, &ready.text);
        assert!(ready.message().contains("drover migrate"), "{}", ready.text);
        let enqueue = api
            .post(Some(OPERATOR_ALL), "/v1/jobs", &json!({"kind": "k"}))
            .await;
        assert_eq!(enqueue.status, 503, "{}", enqueue.text);
        assert_eq!(enqueue.json["error"]["code"], "fatal", "{}", enqueue.text);
        assert!(
            enqueue.message().contains("drover migrate"),
            "{}",
            enqueue.text
        );

        drover_store_postgres::migrate(store.pool()).await.unwrap();
        let ready = api.get(None, "/v1/ready").await;
        assert_eq!(ready.status, 200, "{}", ready.text);
        api.stop().await;
        store.close().await;
    }))
    .await;
    fresh.drop_database().await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// `/v1/ready` and reads answer 503 (with `Retry-After`) when the database does not answer;
/// readiness answers within its own bound even when the pool would wait longer.
pub(crate) async fn ready_is_503_when_the_database_is_down(env: &Env) {
    let db = env.database().expect("postgres");
    // Port 1 on this host: nothing listens there.
    let down = |acquire: Duration| {
        let pool = drover_store_postgres::sqlx::postgres::PgPoolOptions::new()
            .acquire_timeout(acquire)
            .connect_lazy_with(db.connect.clone().port(1));
        Arc::new(drover_store_postgres::PgStore::from_pool(
            pool,
            Default::default(),
        ))
    };
    let api = env
        .serve(down(Duration::from_millis(500)), ApiConfig::default())
        .await;
    let ready = api.get(None, "/v1/ready").await;
    ready.assert_error(503, "unavailable", None);
    assert!(ready.headers.contains_key("retry-after"));
    let list = api.get(Some(OPERATOR_ALL), "/v1/jobs").await;
    list.assert_error(503, "unavailable", None);
    let enqueue = api
        .post(Some(OPERATOR_ALL), "/v1/jobs", &json!({"kind": "k"}))
        .await;
    enqueue.assert_error(503, "unavailable", None);

    let slow = env
        .serve(
            down(Duration::from_secs(60)),
            ApiConfig {
                ready_timeout: Duration::from_millis(300),
                ..ApiConfig::default()
            },
        )
        .await;
    let ready = slow.get(None, "/v1/ready").await;
    ready.assert_error(503, "unavailable", None);
    assert!(ready.message().contains("within 300 ms"), "{}", ready.text);
}

/// `drover_core::json::contains` agrees with PostgreSQL's `jsonb @>` on generated meta
/// documents and filters (the memory store filters with the first, PostgreSQL with the
/// second, and `GET /v1/jobs?meta=` must not depend on the store).
pub(crate) async fn meta_containment_agrees_with_postgres(env: &Env) {
    const CASES: usize = 600;
    let mut pairs = meta_pairs(CASES);
    // Every pair of edge scalars, inside an object and inside an array.
    let scalars = meta_scalars();
    for x in &scalars {
        for y in &scalars {
            pairs.push((json!({"a": x}), json!({"a": y})));
            pairs.push((json!({"a": [x, "other"]}), json!({"a": [y]})));
        }
    }
    let total = pairs.len();
    let docs: Vec<String> = pairs.iter().map(|(d, _)| d.to_string()).collect();
    let filters: Vec<String> = pairs.iter().map(|(_, f)| f.to_string()).collect();
    let pool = env.database().expect("postgres").pool(2).await;
    let verdicts = containment_in_postgres(&pool, docs, filters).await;
    pool.close().await;
    assert_eq!(verdicts.len(), total);
    let mut mismatches = Vec::new();
    let mut contained = 0;
    for (i, ((doc, filter), postgres)) in pairs.iter().zip(verdicts).enumerate() {
        let rust = drover_core::json::contains(doc, filter);
        if i < CASES {
            contained += usize::from(postgres);
        }
        if rust != postgres {
            mismatches.push(format!(
                "{doc} @> {filter}: postgres {postgres}, core {rust}"
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {total} disagree:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(
        contained > CASES / 5 && contained < CASES * 4 / 5,
        "the generator covers both answers ({contained} of {CASES} contained)"
    );
}

/// `count` (document, filter) pairs from a fixed seed: mostly filters derived from their
/// document, some independent.
fn meta_pairs(count: usize) -> Vec<(Value, Value)> {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let strategy = (meta_document(), proptest::prelude::any::<u64>(), 0u8..10);
    let mut pairs: Vec<(Value, Value)> = Vec::with_capacity(count);
    while pairs.len() < count {
        let (doc, seed, mode) = strategy.new_tree(&mut runner).unwrap().current();
        let mut rng = Lcg(seed | 1);
        let filter = if mode < 7 {
            derive_filter(&doc, &mut rng)
        } else {
            meta_document().new_tree(&mut runner).unwrap().current()
        };
        pairs.push((doc, filter));
    }
    pairs
}

/// `a @> b` for each pair, in one statement (boxed so the case future stays `Send`).
fn containment_in_postgres(
    pool: &drover_store_postgres::PgPool,
    docs: Vec<String>,
    filters: Vec<String>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<bool>> + Send + '_>> {
    Box::pin(async move {
        drover_store_postgres::sqlx::query_scalar(
            "SELECT a::jsonb @> b::jsonb FROM unnest($1::text[], $2::text[]) \
             WITH ORDINALITY AS t(a, b, n) ORDER BY n",
        )
        .bind(docs)
        .bind(filters)
        .fetch_all(pool)
        .await
        .expect("jsonb containment")
    })
}

/// A tiny deterministic generator for deriving filters from documents.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Scalars chosen to hit the edges of jsonb equality: integers against floats, `-0.0`,
/// integers beyond 2^53 and beyond i64, strings differing only in case or accents.
fn meta_scalars() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(1),
        json!(-1),
        json!(1.0),
        json!(-0.0),
        json!(0.5),
        json!(2.5e10),
        json!(9007199254740993i64),
        json!(9007199254740992.0),
        json!(u64::MAX),
        json!(1.8446744073709552e19),
        json!(""),
        json!("x"),
        json!("X"),
        json!("é"),
        json!("e\u{301}"),
    ]
}

/// A JSON object as stored in `meta`: few key names (so filters and documents overlap),
/// nested objects and arrays.
fn meta_document() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = proptest::sample::select(meta_scalars());
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(
                proptest::sample::select(vec!["a", "b", "c", "tags"]),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    });
    proptest::collection::btree_map(
        proptest::sample::select(vec!["a", "b", "c", "tags", "customer"]),
        value,
        0..5,
    )
    .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

/// A filter derived from `doc`: some of its keys and elements kept, some values changed, now
/// and then a key it lacks.
fn derive_filter(doc: &Value, rng: &mut Lcg) -> Value {
    let scalars = meta_scalars();
    fn go(v: &Value, rng: &mut Lcg, scalars: &[Value]) -> Value {
        match v {
            Value::Object(map) => {
                let mut out = serde_json::Map::new();
                for (k, child) in map {
                    if rng.chance(60) {
                        let value = if rng.chance(85) {
                            go(child, rng, scalars)
                        } else {
                            scalars[(rng.next() as usize) % scalars.len()].clone()
                        };
                        out.insert(k.clone(), value);
                    }
                }
                if rng.chance(10) {
                    out.insert("zz".to_owned(), json!(1));
                }
                Value::Object(out)
            }
            Value::Array(items) => {
                let mut out = Vec::new();
                for item in items {
                    if rng.chance(50) {
                        out.push(go(item, rng, scalars));
                    }
                }
                if rng.chance(15) && !items.is_empty() {
                    // Repeats and order do not matter to containment.
                    out.insert(0, items[items.len() - 1].clone());
                }
                if rng.chance(10) {
                    out.push(scalars[(rng.next() as usize) % scalars.len()].clone());
                }
                Value::Array(out)
            }
            scalar => {
                if rng.chance(90) {
                    scalar.clone()
                } else {
                    scalars[(rng.next() as usize) % scalars.len()].clone()
                }
            }
        }
    }
    go(doc, rng, &scalars)
}
