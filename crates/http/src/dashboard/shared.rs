//! Reads shared by every open dashboard (docs/dashboard.md, "Live updates"): the
//! queue overview and each jobs list are read once for all the tabs showing them, and again
//! only after [`FRESH_FOR`] or [`REST_FACTOR`] times as long as the last read took, whichever
//! is longer.
//!
//! | rule | why |
//! |---|---|
//! | one read per key at a time; requests arriving meanwhile wait for it | ten tabs refreshing together cost one read |
//! | a read serves for `max(FRESH_FOR, REST_FACTOR x its time)` | the dashboards keep the database busy a fifth of the time at most, however large the table |
//! | a failed read is not kept | the next request tries again |
//! | [`SharedReads::forget`] drops every kept read | a dashboard action shows its result on the next page |
//! | a new key drops the expired reads; at most [`KEYS`] keys are kept | pages read once (a filter typed by hand, a later page) do not stay in memory |

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use drover_core::Error;

/// How long one read serves every dashboard at least: pages that refresh every two seconds in
/// any number of tabs cost the database one read of each a second at most.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

/// A read that took `d` serves for `d` times this factor when that is longer than
/// [`FRESH_FOR`] (BENCHMARKS.md, "Dashboard").
pub const REST_FACTOR: u32 = 4;

/// Most keys kept at once.
pub const KEYS: usize = 1_000;

/// One key's last read and until when it serves; locked across a read, so requests for the
/// same key wait for it instead of reading too.
type Slot<V> = Arc<tokio::sync::Mutex<Option<(Instant, V)>>>;

/// Reads of one kind, by key.
pub struct SharedReads<V> {
    slots: Mutex<HashMap<String, Slot<V>>>,
}

impl<V: Clone> SharedReads<V> {
    /// Nothing read yet.
    pub fn new() -> Self {
        SharedReads {
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The value of `key`: the kept one while it serves, else what `read` returns (kept when
    /// it succeeds).
    ///
    /// # Errors
    /// `read`'s error.
    pub async fn get<F, Fut>(&self, key: &str, read: F) -> Result<V, Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, Error>>,
    {
        let Some(slot) = self.slot(key) else {
            return read().await;
        };
        let mut last = slot.lock().await;
        if let Some((until, value)) = last.as_ref() {
            if Instant::now() < *until {
                return Ok(value.clone());
            }
        }
        let started = Instant::now();
        let value = read().await?;
        let serves_for = FRESH_FOR.max(started.elapsed() * REST_FACTOR);
        *last = Some((Instant::now() + serves_for, value.clone()));
        Ok(value)
    }

    /// Drops every kept read: the next request for any key reads again (a read under way
    /// finishes for the requests waiting on it, and is not kept for later ones).
    pub fn forget(&self) {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// The slot of `key`, made when missing (after dropping the expired ones, so only reads
    /// that still serve are kept); none when [`KEYS`] keys still serve (then the caller reads
    /// on its own).
    fn slot(&self, key: &str) -> Option<Slot<V>> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get(key) {
            return Some(Arc::clone(slot));
        }
        let now = Instant::now();
        // A slot a request holds (reading it, or about to) stays; so does one that serves.
        slots.retain(|_, slot| {
            Arc::strong_count(slot) > 1
                || slot.try_lock().map_or(true, |last| {
                    last.as_ref().is_some_and(|(until, _)| now < *until)
                })
        });
        if slots.len() >= KEYS {
            return None;
        }
        let slot: Slot<V> = Arc::new(tokio::sync::Mutex::new(None));
        slots.insert(key.to_owned(), Arc::clone(&slot));
        Some(slot)
    }

    #[cfg(test)]
    fn kept(&self) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn counted(reads: &AtomicUsize, value: u32) -> Result<u32, Error> {
        reads.fetch_add(1, Ordering::SeqCst);
        Ok(value)
    }

    #[tokio::test]
    async fn a_read_serves_its_key_until_it_expires() {
        let shared = SharedReads::new();
        let reads = AtomicUsize::new(0);
        assert_eq!(shared.get("a", || counted(&reads, 1)).await.unwrap(), 1);
        assert_eq!(shared.get("a", || counted(&reads, 2)).await.unwrap(), 1);
        // Another key reads on its own.
        assert_eq!(shared.get("b", || counted(&reads, 3)).await.unwrap(), 3);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_expired_read_is_read_again() {
        let shared = SharedReads::new();
        let reads = AtomicUsize::new(0);
        shared.get("a", || counted(&reads, 1)).await.unwrap();
        // Expire it by hand rather than by waiting.
        let slot = shared.slot("a").unwrap();
        slot.lock().await.as_mut().unwrap().0 = Instant::now();
        assert_eq!(shared.get("a", || counted(&reads, 2)).await.unwrap(), 2);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn requests_arriving_during_a_read_wait_for_it() {
        let shared = Arc::new(SharedReads::new());
        let reads = Arc::new(AtomicUsize::new(0));
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let (shared, reads) = (Arc::clone(&shared), Arc::clone(&reads));
            tokio::spawn(async move {
                shared
                    .get("a", || async {
                        reads.fetch_add(1, Ordering::SeqCst);
                        released.await.unwrap();
                        Ok(7)
                    })
                    .await
            })
        };
        // Wait until the first read holds the slot.
        while reads.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let second = {
            let (shared, reads) = (Arc::clone(&shared), Arc::clone(&reads));
            tokio::spawn(async move { shared.get("a", || counted(&reads, 8)).await })
        };
        // On this one-thread runtime the second request runs until it waits for the slot.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!second.is_finished());
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap().unwrap(), 7);
        assert_eq!(second.await.unwrap().unwrap(), 7);
        assert_eq!(reads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_failed_read_is_not_kept_and_forget_drops_every_read() {
        let shared = SharedReads::new();
        let reads = AtomicUsize::new(0);
        let failed = shared
            .get("a", || async { Err::<u32, _>(Error::unavailable("down")) })
            .await;
        assert!(failed.is_err());
        assert_eq!(shared.get("a", || counted(&reads, 1)).await.unwrap(), 1);
        shared.forget();
        assert_eq!(shared.kept(), 0);
        assert_eq!(shared.get("a", || counted(&reads, 2)).await.unwrap(), 2);
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn the_keys_kept_are_bounded_and_expired_ones_make_room() {
        let shared = SharedReads::new();
        let reads = AtomicUsize::new(0);
        for key in 0..KEYS {
            shared
                .get(&key.to_string(), || counted(&reads, 0))
                .await
                .unwrap();
        }
        // Full of reads that serve: a new key is read but not kept.
        shared.get("new", || counted(&reads, 1)).await.unwrap();
        assert_eq!(shared.kept(), KEYS);
        shared.get("new", || counted(&reads, 1)).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), KEYS + 2);
        // Two expire: the next new key drops both and takes the room of one.
        for key in ["0", "1"] {
            shared.slot(key).unwrap().lock().await.as_mut().unwrap().0 = Instant::now();
        }
        shared.get("new", || counted(&reads, 1)).await.unwrap();
        assert_eq!(shared.kept(), KEYS - 1);
        shared.get("new", || counted(&reads, 1)).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), KEYS + 3);
    }

    #[tokio::test]
    async fn a_new_key_drops_the_reads_that_expired() {
        let shared = SharedReads::new();
        let reads = AtomicUsize::new(0);
        shared.get("a", || counted(&reads, 1)).await.unwrap();
        shared.get("b", || counted(&reads, 2)).await.unwrap();
        shared.slot("a").unwrap().lock().await.as_mut().unwrap().0 = Instant::now();
        shared.get("c", || counted(&reads, 3)).await.unwrap();
        assert_eq!(shared.kept(), 2, "b and c serve; a is gone");
    }
}
