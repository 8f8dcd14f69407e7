//! Large batches of ready jobs without keys: `COPY drover.jobs FROM STDIN (FORMAT binary)`
//! instead of enqueue_insert_keyless.sql (the store's own enqueue decides which:
//! `Lane::choose`, enqueue/mod.rs).
//!
//! Why: a 1,000-job INSERT from parameter arrays costs the backend a plan, a ProjectSet node
//! unnesting fourteen arrays, a tuplestore for the RETURNING rows and one heap insertion (and
//! WAL record) per row. COPY parses each row straight into a tuple and inserts them with
//! `heap_multi_insert`: one WAL record per heap page, no plan, no answer rows. Index
//! insertions, check constraints and the JSON parse of each job's args are the same in both.
//!
//! Times: COPY cannot compute a value per row and answers no rows, so the store's clock is read
//! first (db_now.sql, on the same connection) and every job of the batch is created and ready
//! at that instant: `created_at = run_at = T`. The INSERT dates its jobs at its own
//! transaction's start; T is likewise an instant of the store's clock taken during the call,
//! before the jobs exist, so a job is ready when it becomes visible, as every job enqueued
//! without run_at is. `meta` and `limit_keys` travel only when some job of the batch has one
//! (an omitted column takes its default, `{}` and `{}`); the lease and outcome columns take
//! their defaults.
//!
//! Round trips: `SELECT now()`, the COPY statement, then the data (one statement in
//! autocommit: all or nothing): three, against one for the INSERT, which is why small batches
//! keep the INSERT ([`COPY_MIN_JOBS`]). The first two wait on the client's work instead of
//! adding to it: the clock is read while the batch is validated (`jobs_enqueue`,
//! enqueue/mod.rs), and the COPY statement travels while the first rows are encoded ([`copy`]).
//!
//! The binary format: PostgreSQL documentation, "COPY", section "Binary Format" (a header, one
//! tuple per row as a field count and length-prefixed fields in each type's binary send format,
//! then a trailer).

use chrono::{DateTime, Utc};
use drover_core::{Error, NewJob};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use super::insert::{is_empty_object, Batch, Enqueue};
use crate::connections::Conn;
use crate::error::SqlxResultExt;

/// Smallest batch the store's own enqueue stores with COPY (`Lane::Copy`); smaller ones
/// take the INSERT (insert.rs), whose single round trip costs less than COPY's extra ones.
/// Measured on the bench machine (BENCHMARKS.md, 2026-12-04 23:30 UTC; the `enqueue-batch`
/// workload with `--batch`, one producer, 20,000-30,000 jobs, medians of 3, INSERT against
/// COPY): 20-job batches 33,600-34,000 jobs/s against 29,000-29,900, 30 jobs 40,300-41,200
/// against 35,300-39,000, 50 and 64 jobs even (53,200-63,900 against 54,100-61,400), 80 jobs
/// 64,900-65,100 against 69,600-74,200, 100 jobs 73,900 against 84,100, 150 jobs 81,200
/// against 95,100.
pub const COPY_MIN_JOBS: usize = 64;

/// The columns every row carries, in the order [`encode`] writes them; `meta` and then
/// `limit_keys` follow when some job of the batch has one. Four fixed statements (no SQL is
/// built at run time; ARCHITECTURE.md, Decisions).
///
/// `WHERE random() >= 0` keeps every row (random() is in [0, 1)); being volatile, it makes the
/// server insert row by row instead of buffering rows for `heap_multi_insert`
/// (copyfrom.c: a volatile WHERE clause selects `CIM_SINGLE`). The buffered way costs more here:
/// binary COPY counts no bytes toward its buffer's limit, so a 1,000-job batch fills 1,000
/// tuple slots, each registered with the transaction's resource owner, whose lookup of the
/// identical entries is linear (PostgreSQL 15: quadratic in the batch), and the slots are made,
/// materialized and dropped once per statement. Measured (BENCHMARKS.md, 2026-12-04,
/// PostgreSQL 15, 100 COPYs of 1,000 jobs): 5.2-5.5 ms per statement row by row against
/// 5.6-6.4 ms buffered, for 11 % more WAL (455 against 408 bytes a job).
macro_rules! copy_jobs {
    ($($extra:literal),*) => {
        concat!(
            "COPY drover.jobs (id, kind, queue, tenant, args, priority, run_at, state, ",
            "max_attempts, created_at", $(", ", $extra,)* ") FROM STDIN (FORMAT binary) ",
            "WHERE random() >= 0"
        )
    };
}
const COPY_JOBS: &str = copy_jobs!();
const COPY_JOBS_META: &str = copy_jobs!("meta");
const COPY_JOBS_LIMIT_KEYS: &str = copy_jobs!("limit_keys");
const COPY_JOBS_META_LIMIT_KEYS: &str = copy_jobs!("meta", "limit_keys");

/// The COPY statements, for the check against the schema.
pub fn statements() -> [&'static str; 4] {
    [
        COPY_JOBS,
        COPY_JOBS_META,
        COPY_JOBS_LIMIT_KEYS,
        COPY_JOBS_META_LIMIT_KEYS,
    ]
}

/// The data of a COPY of no rows: the header, then the trailer.
pub fn empty_data() -> Vec<u8> {
    [HEADER, TRAILER].concat()
}

/// How many bytes of rows are encoded while the COPY statement is on its way, before any is
/// sent: about 1,000 small jobs (`{"seq": n}` args take about 115 bytes a row), encoded in
/// about the time of the statement's round trip on a local connection (~0.1 ms); a larger
/// batch sends the rest [`SEND_BYTES`] at a time.
const EARLY_BYTES: usize = 128 * 1024;

/// How many bytes of rows are encoded before they are sent after the first piece: small
/// enough that the server works on one piece while the next is encoded, large enough that a
/// send (one write to the socket) carries about a hundred small jobs.
const SEND_BYTES: usize = 16 * 1024;

/// How many columns [`COPY_JOBS`] names.
const COLUMNS: usize = 10;

/// The binary COPY header: signature, flags (no OIDs), header extension length 0.
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// The binary COPY trailer: a field count of -1.
const TRAILER: &[u8] = &(-1i16).to_be_bytes();

/// `text`'s type OID, the element type of `limit_keys text[]`.
const TEXT_OID: u32 = 25;

/// jsonb's binary format version (jsonb_send / jsonb_recv).
const JSONB_VERSION: u8 = 1;

/// How the rows of one batch are written: the statement (which columns travel) and the
/// values every row shares.
struct Rows {
    statement: &'static str,
    /// The field count each tuple starts with.
    fields: i16,
    with_meta: bool,
    with_limit_keys: bool,
    /// `now` in timestamptz's binary form: every job's `run_at` and `created_at`.
    now: [u8; 8],
}

impl Rows {
    /// The statement and shared values for `batch`, every job created and ready at `now`.
    ///
    /// # Errors
    /// `Fatal` when `now` is outside timestamptz's range (never for the store's own clock).
    fn new(batch: &Batch, now: DateTime<Utc>) -> Result<Rows, Error> {
        let jobs = batch.jobs();
        let with_meta = jobs.iter().any(|job| !is_empty_object(&job.meta));
        let with_limit_keys = jobs.iter().any(|job| !job.limit_keys.is_empty());
        let statement = match (with_meta, with_limit_keys) {
            (false, false) => COPY_JOBS,
            (true, false) => COPY_JOBS_META,
            (false, true) => COPY_JOBS_LIMIT_KEYS,
            (true, true) => COPY_JOBS_META_LIMIT_KEYS,
        };
        let columns = COLUMNS + usize::from(with_meta) + usize::from(with_limit_keys);
        Ok(Rows {
            statement,
            fields: i16::try_from(columns).map_err(|_| Error::fatal("too many columns"))?,
            with_meta,
            with_limit_keys,
            now: timestamptz(now)?,
        })
    }

    /// Appends the tuples of the next jobs of `jobs` until `data` holds at least `bytes`
    /// bytes or the jobs run out; returns whether it stopped for the size (jobs may remain).
    ///
    /// # Errors
    /// As [`Rows::append`].
    fn append_until<'a>(
        &self,
        data: &mut Vec<u8>,
        jobs: &mut impl Iterator<Item = (&'a NewJob, &'a Uuid)>,
        bytes: usize,
    ) -> Result<bool, Error> {
        for (job, id) in jobs {
            self.append(data, job, id)?;
            if data.len() >= bytes {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Appends the tuple of `job`, stored under `id`.
    ///
    /// # Errors
    /// `Fatal` when a field does not fit the format's 32-bit lengths (never for a job that
    /// passed validation: its documents are bounded far below 1 GiB).
    fn append(&self, data: &mut Vec<u8>, job: &NewJob, id: &Uuid) -> Result<(), Error> {
        data.extend_from_slice(&self.fields.to_be_bytes());
        field(data, id.as_bytes())?;
        field(data, job.kind.as_str().as_bytes())?;
        field(data, job.queue.as_str().as_bytes())?;
        field(data, job.tenant.as_str().as_bytes())?;
        jsonb(data, &job.args)?;
        field(data, &job.priority.to_be_bytes())?;
        field(data, &self.now)?;
        field(data, b"queued")?;
        field(data, &job.max_attempts.to_be_bytes())?;
        field(data, &self.now)?;
        if self.with_meta {
            jsonb(data, &job.meta)?;
        }
        if self.with_limit_keys {
            text_array(data, job.limit_keys.iter().map(|k| k.as_str()))?;
        }
        Ok(())
    }
}

/// The COPY statement and all its data for `batch`, every job created and ready at `now`: the
/// bytes [`copy`] sends in pieces.
///
/// # Errors
/// As [`Rows::append`].
#[cfg(test)]
fn encode(batch: &Batch, now: DateTime<Utc>) -> Result<(&'static str, Vec<u8>), Error> {
    let rows = Rows::new(batch, now)?;
    let mut data = Vec::new();
    data.extend_from_slice(HEADER);
    rows.append_until(
        &mut data,
        &mut batch.jobs().iter().zip(batch.ids()),
        usize::MAX,
    )?;
    data.extend_from_slice(TRAILER);
    Ok((rows.statement, data))
}

/// Appends one field: its length (i32) and bytes.
fn field(data: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Error> {
    data.extend_from_slice(&length(bytes.len())?.to_be_bytes());
    data.extend_from_slice(bytes);
    Ok(())
}

/// Appends a field whose bytes `write` appends: reserves the length, lets `write` fill the
/// field in place, then sets the length to what it wrote.
fn framed(
    data: &mut Vec<u8>,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
) -> Result<(), Error> {
    let at = data.len();
    data.extend_from_slice(&[0; 4]);
    write(data)?;
    let len = length(data.len() - at - 4)?;
    data[at..at + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// Appends a jsonb field: version 1, then the document as JSON text, serialized in place.
fn jsonb(data: &mut Vec<u8>, value: &Value) -> Result<(), Error> {
    framed(data, |data| {
        data.push(JSONB_VERSION);
        serde_json::to_writer(&mut *data, value)
            .map_err(|e| Error::fatal(format!("could not serialize a JSON document: {e}")))
    })
}

/// Appends a one-dimensional `text[]` field (array_send: dimensions, has-nulls flag, element
/// type, then per dimension its size and lower bound 1, then the elements); an empty array has
/// no dimensions.
fn text_array<'a>(
    data: &mut Vec<u8>,
    items: impl ExactSizeIterator<Item = &'a str>,
) -> Result<(), Error> {
    framed(data, |data| {
        let n = items.len();
        let dimensions: i32 = if n == 0 { 0 } else { 1 };
        data.extend_from_slice(&dimensions.to_be_bytes());
        data.extend_from_slice(&0i32.to_be_bytes());
        data.extend_from_slice(&TEXT_OID.to_be_bytes());
        if n > 0 {
            data.extend_from_slice(&length(n)?.to_be_bytes());
            data.extend_from_slice(&1i32.to_be_bytes());
            for item in items {
                field(data, item.as_bytes())?;
            }
        }
        Ok(())
    })
}

/// A timestamptz's binary form: microseconds since 2000-01-01 00:00:00 UTC, big-endian i64
/// (timestamp_send with integer datetimes, the only kind PostgreSQL 10 and later builds).
fn timestamptz(at: DateTime<Utc>) -> Result<[u8; 8], Error> {
    let micros = (at - postgres_epoch())
        .num_microseconds()
        .ok_or_else(|| Error::fatal("a time out of timestamptz's range"))?;
    Ok(micros.to_be_bytes())
}

/// PostgreSQL's epoch, 2000-01-01 00:00:00 UTC.
fn postgres_epoch() -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(946_684_800, 0).unwrap_or_default()
}

fn length(n: usize) -> Result<i32, Error> {
    i32::try_from(n).map_err(|_| Error::fatal("a field is too large for COPY's 32-bit length"))
}

/// Stores a validated `batch` with COPY on `conn` ([`copy`]), every job dated `now`, an
/// instant of the store's clock read during the call (`Lane::Copy`). From the COPY on,
/// `conn` is closed unless the call succeeds ([`Conn::close_unless_done`]).
///
/// # Errors
/// As [`copy`].
pub(crate) async fn enqueue(
    conn: &mut Conn<'_>,
    batch: Batch,
    now: DateTime<Utc>,
) -> Result<Enqueue, Error> {
    conn.close_unless_done();
    copy(conn, batch, now).await
}

/// Stores `batch` with COPY on `conn` (autocommit: the COPY is one statement, so all or
/// nothing); returns its answers, every job dated `now`, an instant of the store's clock
/// (`run_at` and `created_at`).
///
/// The first rows (up to [`EARLY_BYTES`]) are encoded while the COPY statement makes its round
/// trip; the rest are encoded and sent [`SEND_BYTES`] at a time, so the server parses and
/// inserts one piece while the next is encoded; the answers are built while the server
/// finishes and commits: the client's work overlaps the server's instead of preceding or
/// following it.
///
/// A failed or cancelled call stores nothing: the server aborts an unfinished COPY (a connection
/// left mid-COPY by a cancellation or an error is closed: `Conn::close_unless_done`).
///
/// # Errors
/// `Unavailable` or `Fatal` from the connection (as every statement); `Fatal` when a field does
/// not fit the format (never after validation), or when the server reports another number of
/// rows than the batch holds.
async fn copy(conn: &mut PgConnection, batch: Batch, now: DateTime<Utc>) -> Result<Enqueue, Error> {
    let rows = Rows::new(&batch, now)?;
    let mut jobs = batch.jobs().iter().zip(batch.ids());
    let mut data = Vec::with_capacity(EARLY_BYTES + EARLY_BYTES / 8);
    data.extend_from_slice(HEADER);
    // join! polls in order: the COPY statement is written to the socket before the encoding
    // (synchronous) runs.
    let (copy, more) = tokio::join!(conn.copy_in_raw(rows.statement), async {
        rows.append_until(&mut data, &mut jobs, EARLY_BYTES)
    });
    let mut copy = copy.store_err()?;
    let mut more = more?;
    while more {
        // A send fails only on I/O: the connection is broken, nothing more to tell the
        // server (the COPY dropped unfinished queues a CopyFail; the connection is closed).
        copy.send(data.as_slice()).await.store_err()?;
        data.clear();
        more = rows.append_until(&mut data, &mut jobs, SEND_BYTES)?;
    }
    data.extend_from_slice(TRAILER);
    copy.send(data).await.store_err()?;
    let jobs = batch.jobs().len();
    // finish() sends CopyDone and then waits for the commit; the answers are built meanwhile.
    let (rows, enqueue) = tokio::join!(copy.finish(), async move { batch.copied(now) });
    let rows = rows.store_err()?;
    if usize::try_from(rows).ok() != Some(jobs) {
        return Err(Error::fatal(format!(
            "COPY stored {rows} jobs of a batch of {jobs}"
        )));
    }
    Ok(enqueue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_core::{JobKind, LimitKey, NewJob, StoreConfig};
    use serde_json::json;

    fn batch(jobs: Vec<NewJob>) -> Batch {
        Batch::prepare(jobs, &StoreConfig::default()).unwrap()
    }

    fn i32_at(data: &[u8], at: usize) -> i32 {
        i32::from_be_bytes(data[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn encodes_header_tuples_and_trailer() {
        let kind = JobKind::parse("k").unwrap();
        let b = batch(vec![NewJob::new(kind, json!({"a": 1})).with_priority(-2)]);
        // 2000-01-02 00:00:00.000001 UTC: one day and one microsecond after PostgreSQL's epoch.
        let now = DateTime::<Utc>::from_timestamp(946_684_800 + 86_400, 1_000).unwrap();
        let (statement, data) = encode(&b, now).unwrap();
        assert_eq!(
            statement,
            "COPY drover.jobs (id, kind, queue, tenant, args, priority, run_at, state, \
             max_attempts, created_at) FROM STDIN (FORMAT binary) WHERE random() >= 0"
        );
        let day_and_a_micro = (86_400_000_000i64 + 1).to_be_bytes();
        assert!(data.starts_with(b"PGCOPY\n\xff\r\n\0"));
        assert!(data.ends_with(&[0xff, 0xff]));
        let mut at = HEADER.len();
        assert_eq!(i16::from_be_bytes([data[at], data[at + 1]]), 10);
        at += 2;
        assert_eq!(i32_at(&data, at), 16, "uuid");
        assert_eq!(&data[at + 4..at + 20], b.ids()[0].as_bytes());
        at += 20;
        assert_eq!(i32_at(&data, at), 1);
        assert_eq!(&data[at + 4..at + 5], b"k");
        at += 5;
        assert_eq!(i32_at(&data, at), 7);
        assert_eq!(&data[at + 4..at + 11], b"default", "queue");
        at += 11 + 11; // queue, then tenant
        let args = br#"{"a":1}"#;
        assert_eq!(i32_at(&data, at), 1 + args.len() as i32);
        assert_eq!(data[at + 4], JSONB_VERSION);
        assert_eq!(&data[at + 5..at + 5 + args.len()], args);
        at += 5 + args.len();
        assert_eq!(i32_at(&data, at), 2);
        assert_eq!(&data[at + 4..at + 6], &(-2i16).to_be_bytes());
        at += 6;
        assert_eq!(i32_at(&data, at), 8, "run_at");
        assert_eq!(&data[at + 4..at + 12], &day_and_a_micro);
        at += 12;
        assert_eq!(&data[at + 4..at + 10], b"queued");
        at += 10;
        assert_eq!(i32_at(&data, at), 4);
        assert_eq!(i32_at(&data, at + 4), 3, "max_attempts default");
        at += 8;
        assert_eq!(i32_at(&data, at), 8, "created_at");
        assert_eq!(&data[at + 4..at + 12], &day_and_a_micro);
        at += 12;
        assert_eq!(at + 2, data.len(), "then only the trailer");
    }

    #[test]
    fn meta_and_limit_keys_travel_only_when_some_job_has_them() {
        let kind = JobKind::parse("k").unwrap();
        let plain = NewJob::new(kind, json!(null));
        let keyed = plain
            .clone()
            .with_limit_key(LimitKey::parse("a:b").unwrap())
            .with_limit_key(LimitKey::parse("c").unwrap())
            .with_meta(json!({"m": true}));
        let now = Utc::now();
        let (statement, data) = encode(&batch(vec![plain.clone(), keyed]), now).unwrap();
        assert!(
            statement.contains("created_at, meta, limit_keys)"),
            "{statement}"
        );
        // The first job's empty array: 12 bytes (no dimensions, no nulls, element type text).
        let empty: Vec<u8> = [12i32, 0, 0, TEXT_OID as i32]
            .iter()
            .flat_map(|n| n.to_be_bytes())
            .collect();
        assert!(data.windows(empty.len()).any(|w| w == empty.as_slice()));
        // The second's: one dimension of 2 from 1, then "a:b" and "c".
        let mut two: Vec<u8> = [1i32, 0, TEXT_OID as i32, 2, 1, 3]
            .iter()
            .flat_map(|n| n.to_be_bytes())
            .collect();
        two.extend_from_slice(b"a:b");
        two.extend_from_slice(&1i32.to_be_bytes());
        two.extend_from_slice(b"c");
        assert!(data.windows(two.len()).any(|w| w == two.as_slice()));
        let (statement, _) = encode(&batch(vec![plain]), now).unwrap();
        assert!(statement.contains("created_at) FROM"), "{statement}");
        assert!(statement.ends_with("WHERE random() >= 0"), "{statement}");
    }
}
