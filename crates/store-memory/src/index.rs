//! The indexes the memory store keeps beside its jobs, so that claim, finish, rescue and prune
//! cost O(batch · log n) instead of a scan of every job.
//!
//! A job's identity fields (queue, kind, tenant, priority, keys) never change after enqueue;
//! only its [`Placement`] does (state, `run_at`, lease end, `finished_at`). Every transition
//! takes the placement before, applies `drover_core::apply`, and calls [`Indexes::moved`],
//! which updates exactly the indexes the change touches.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;

use chrono::{DateTime, Utc};
use drover_core::{Job, JobId, JobKind, JobState, LimitKey, QueueName, TenantId};

/// A hash map with foldhash's fast, per-process seeded hasher (SipHash dominates otherwise).
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A hash set with the same hasher as [`FastMap`].
pub(crate) type FastSet<K> = HashSet<K, foldhash::fast::RandomState>;

/// The stored jobs. Boxed, so that growing the table moves pointers, not whole jobs.
pub(crate) type JobTable = FastMap<JobId, Box<Job>>;

/// An instant in an index key: whole microseconds since the Unix epoch. The store truncates
/// every time to microseconds, so this is exact, and it compares as one integer (comparing
/// `DateTime`s and UUIDs dominated the cost of the ordered indexes).
pub(crate) type KeyTime = i64;

/// A job id in an index key: the UUID's 128 bits read big-endian, which order like the UUID.
pub(crate) type KeyId = u128;

/// `at` as an index key.
pub(crate) fn key_time(at: DateTime<Utc>) -> KeyTime {
    at.timestamp_micros()
}

/// `id` as an index key.
pub(crate) fn key_id(id: JobId) -> KeyId {
    id.0.as_u128()
}

/// The instant of an index key (every key was made from a valid instant).
pub(crate) fn time_of(key: KeyTime) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(key).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The job id of an index key.
pub(crate) fn id_of(key: KeyId) -> JobId {
    JobId(uuid::Uuid::from_u128(key))
}

/// Claim order of a ready job: priority (smaller first), then `run_at`, then id.
pub(crate) type ReadyKey = (i16, KeyTime, KeyId);

/// An index entry ordered by an instant, then by id.
pub(crate) type TimeKey = (KeyTime, KeyId);

/// The ids of one [`TimeIndex`] instant: one inline (an instant of a single job), more in a
/// hash set.
#[derive(Debug)]
enum Ids {
    One(KeyId),
    Many(FastSet<KeyId>),
}

/// Entries `(instant, id)` in order, for lease ends (rescue) and finish times (retention).
///
/// Both arrive in batches that share an instant (a claim leases all its jobs until the same
/// `now + lease`; a finish batch records one `now`), nearly always at the latest instant so
/// far. A `BTreeSet<(KeyTime, KeyId)>` pays for such an append with a linear scan of every
/// 32-byte key on its rightmost path (about 650 instructions an insert in callgrind, the
/// largest single cost of a no-op job on the memory store). Here the ordered map holds one
/// integer key per instant, the latest instant is reached without a search, and the ids of an
/// instant sit in a hash set. Reads give the set's order, by instant then by id (the ids of an
/// instant are sorted when read, which only rescue and prune do).
#[derive(Debug, Default)]
pub(crate) struct TimeIndex {
    groups: BTreeMap<KeyTime, Ids>,
}

impl TimeIndex {
    /// Adds `(at, id)` (nothing when it is there already).
    pub fn insert(&mut self, at: KeyTime, id: KeyId) {
        let group = match self.groups.last_entry() {
            Some(last) if *last.key() == at => last.into_mut(),
            _ => match self.groups.entry(at) {
                Entry::Vacant(slot) => {
                    slot.insert(Ids::One(id));
                    return;
                }
                Entry::Occupied(slot) => slot.into_mut(),
            },
        };
        match group {
            Ids::Many(ids) => {
                ids.insert(id);
            }
            Ids::One(existing) if *existing == id => {}
            Ids::One(existing) => {
                let ids: FastSet<KeyId> = [*existing, id].into_iter().collect();
                *group = Ids::Many(ids);
            }
        }
    }

    /// Removes `(at, id)`; false when it was not there.
    pub fn remove(&mut self, at: KeyTime, id: KeyId) -> bool {
        let Entry::Occupied(mut slot) = self.groups.entry(at) else {
            return false;
        };
        let (removed, emptied) = match slot.get_mut() {
            Ids::One(existing) => (*existing == id, *existing == id),
            Ids::Many(ids) => (ids.remove(&id), ids.is_empty()),
        };
        if emptied {
            slot.remove();
        }
        removed
    }

    /// Number of entries.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.groups
            .values()
            .map(|group| match group {
                Ids::One(_) => 1,
                Ids::Many(ids) => ids.len(),
            })
            .sum()
    }

    /// Up to `limit` entries with an instant up to `last` (inclusive), in order (instant, id).
    pub fn up_to(&self, last: KeyTime, limit: usize) -> Vec<TimeKey> {
        let mut out = Vec::new();
        for (&at, group) in self.groups.range(..=last) {
            if out.len() >= limit {
                break;
            }
            match group {
                Ids::One(id) => out.push((at, *id)),
                Ids::Many(ids) => {
                    let mut sorted: Vec<KeyId> = ids.iter().copied().collect();
                    sorted.sort_unstable();
                    let room = limit - out.len();
                    out.extend(sorted.into_iter().take(room).map(|id| (at, id)));
                }
            }
        }
        out
    }

    /// Calls `visit` with the entries up to `last` (inclusive), in order (instant, id), until
    /// it answers false.
    pub fn scan_up_to(&self, last: KeyTime, mut visit: impl FnMut(TimeKey) -> bool) {
        for (&at, group) in self.groups.range(..=last) {
            match group {
                Ids::One(id) => {
                    if !visit((at, *id)) {
                        return;
                    }
                }
                Ids::Many(ids) => {
                    let mut sorted: Vec<KeyId> = ids.iter().copied().collect();
                    sorted.sort_unstable();
                    for id in sorted {
                        if !visit((at, id)) {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Every id, in no particular order.
    pub fn ids(&self) -> impl Iterator<Item = KeyId> + '_ {
        self.groups.values().flat_map(|group| {
            let (one, many) = match group {
                Ids::One(id) => (Some(*id), None),
                Ids::Many(ids) => (None, Some(ids.iter().copied())),
            };
            one.into_iter().chain(many.into_iter().flatten())
        })
    }
}

/// The fields of a job that decide where it sits in the indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    /// State.
    pub state: JobState,
    /// When a queued job becomes ready.
    pub run_at: DateTime<Utc>,
    /// Lease end of a running job.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// When a terminal job finished.
    pub finished_at: Option<DateTime<Utc>>,
    /// A running job whose handler has not started ([`Job::is_waiting_for_slot`]).
    pub waiting: bool,
}

impl Placement {
    /// The placement of `job` now.
    pub fn of(job: &Job) -> Self {
        Placement {
            state: job.state,
            run_at: job.run_at,
            lease_expires_at: job.lease_expires_at,
            finished_at: job.finished_at,
            waiting: job.is_waiting_for_slot(),
        }
    }
}

/// Position in per-queue count arrays of the running jobs that wait for a slot (claimed
/// ahead, not started); they are counted in the running slot too.
pub(crate) const WAITING_SLOT: usize = 7;

/// Per-queue counts: jobs per state (slots from [`state_slot`]), then [`WAITING_SLOT`].
pub(crate) type QueueCounts = [u64; 8];

/// Position of a state in per-queue count arrays (the order of `JobState::ALL`).
pub(crate) fn state_slot(state: JobState) -> usize {
    match state {
        JobState::Waiting => 0,
        JobState::Queued => 1,
        JobState::Running => 2,
        JobState::Reconciling => 3,
        JobState::Succeeded => 4,
        JobState::Failed => 5,
        JobState::Cancelled => 6,
    }
}

/// Every index over the stored jobs.
#[derive(Debug, Default)]
pub(crate) struct Indexes {
    /// Queued jobs whose `run_at` had passed when last looked at, per queue and kind, in claim
    /// order.
    pub ready: FastMap<QueueName, FastMap<JobKind, BTreeSet<ReadyKey>>>,
    /// Queued jobs not ready yet, by `run_at`; [`Indexes::promote`] moves them to `ready`.
    pub scheduled: BTreeSet<TimeKey>,
    /// Running jobs by lease end, for rescue.
    pub leases: TimeIndex,
    /// Reconciling jobs, for reconcile sweeps.
    pub reconciling: BTreeSet<JobId>,
    /// Terminal jobs by `finished_at`, for retention.
    pub finished: TimeIndex,
    /// Unique keys of non-terminal jobs, per tenant.
    pub unique: FastMap<TenantId, FastMap<String, JobId>>,
    /// Pending (waiting, queued, running, reconciling) jobs of the cluster.
    pub pending: u64,
    /// Pending jobs per tenant.
    pub pending_by_tenant: FastMap<TenantId, u64>,
    /// Running jobs per limit key that has a policy (tracked keys only, so that a store
    /// without policies never computes a job's effective keys).
    pub running_by_key: FastMap<LimitKey, u64>,
    /// Jobs per queue and state (slots from [`state_slot`]), and of them the running jobs
    /// that wait for a slot ([`WAITING_SLOT`]).
    pub counts: FastMap<QueueName, QueueCounts>,
}

fn bump<K: Hash + Eq + Clone>(map: &mut FastMap<K, u64>, key: &K) {
    match map.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            map.insert(key.clone(), 1);
        }
    }
}

fn drop_one<K: Hash + Eq>(map: &mut FastMap<K, u64>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Indexes {
    /// The live job holding `key` for `tenant`, if any.
    pub fn unique_holder(&self, tenant: &TenantId, key: &str) -> Option<JobId> {
        self.unique.get(tenant)?.get(key).copied()
    }

    /// Pending jobs of `tenant`.
    pub fn tenant_pending(&self, tenant: &TenantId) -> u64 {
        self.pending_by_tenant.get(tenant).copied().unwrap_or(0)
    }

    /// Jobs running now under limit key `key`.
    pub fn running_under(&self, key: &LimitKey) -> u64 {
        self.running_by_key.get(key).copied().unwrap_or(0)
    }

    /// Indexes a job that was not stored before (enqueue).
    pub fn inserted(&mut self, job: &Job, now: DateTime<Utc>) {
        self.place(job, Placement::of(job), now);
        if !job.state.is_terminal() {
            self.became_live(job);
        }
        if job.state == JobState::Running {
            self.started_running(job);
        }
    }

    /// Removes a job from every index (prune).
    pub fn removed(&mut self, job: &Job) {
        let placement = Placement::of(job);
        self.unplace(job, placement);
        if !job.state.is_terminal() {
            self.became_finished(job);
        }
        if job.state == JobState::Running {
            self.stopped_running(job);
        }
    }

    /// Re-indexes `job` after a transition from placement `before`.
    pub fn moved(&mut self, job: &Job, before: Placement, now: DateTime<Utc>) {
        let after = Placement::of(job);
        if before == after {
            return;
        }
        if before.state != after.state || before.waiting != after.waiting {
            if let Some(counts) = self.counts.get_mut(&job.queue) {
                let from = &mut counts[state_slot(before.state)];
                *from = from.saturating_sub(1);
                counts[state_slot(after.state)] += 1;
                let waiting = &mut counts[WAITING_SLOT];
                *waiting =
                    (*waiting + u64::from(after.waiting)).saturating_sub(u64::from(before.waiting));
            }
            let same_otherwise = Placement {
                waiting: after.waiting,
                ..before
            } == after;
            if same_otherwise {
                // Only a start recorded: no index moves.
                return;
            }
        }
        self.unindex(job, before);
        self.index(job, after, now);
        match (before.state.is_terminal(), after.state.is_terminal()) {
            (false, true) => self.became_finished(job),
            (true, false) => self.became_live(job),
            _ => {}
        }
        match (
            before.state == JobState::Running,
            after.state == JobState::Running,
        ) {
            (false, true) => self.started_running(job),
            (true, false) => self.stopped_running(job),
            _ => {}
        }
    }

    /// Moves scheduled jobs whose `run_at` has come into the ready index.
    pub fn promote(&mut self, jobs: &JobTable, now: DateTime<Utc>) {
        let now = key_time(now);
        while let Some(&(at, id)) = self.scheduled.first() {
            if at > now {
                break;
            }
            self.scheduled.pop_first();
            if let Some(job) = jobs.get(&id_of(id)) {
                self.ready_set(job)
                    .insert((job.priority, key_time(job.run_at), id));
            }
        }
    }

    fn ready_set(&mut self, job: &Job) -> &mut BTreeSet<ReadyKey> {
        if !self.ready.contains_key(&job.queue) {
            self.ready.insert(job.queue.clone(), FastMap::default());
        }
        let by_kind = self
            .ready
            .get_mut(&job.queue)
            .expect("the queue's ready map was just ensured");
        if !by_kind.contains_key(&job.kind) {
            by_kind.insert(job.kind.clone(), BTreeSet::new());
        }
        by_kind
            .get_mut(&job.kind)
            .expect("the kind's ready set was just ensured")
    }

    /// Counts a job at `placement` and adds its state-dependent entries.
    fn place(&mut self, job: &Job, placement: Placement, now: DateTime<Utc>) {
        let waiting = u64::from(placement.waiting);
        match self.counts.get_mut(&job.queue) {
            Some(counts) => {
                counts[state_slot(placement.state)] += 1;
                counts[WAITING_SLOT] += waiting;
            }
            None => {
                let mut counts = [0; 8];
                counts[state_slot(placement.state)] = 1;
                counts[WAITING_SLOT] = waiting;
                self.counts.insert(job.queue.clone(), counts);
            }
        }
        self.index(job, placement, now);
    }

    /// Adds the state-dependent index entries of a job at `placement`.
    fn index(&mut self, job: &Job, placement: Placement, now: DateTime<Utc>) {
        match placement.state {
            JobState::Queued => {
                let run_at = key_time(placement.run_at);
                if placement.run_at <= now {
                    self.ready_set(job)
                        .insert((job.priority, run_at, key_id(job.id)));
                } else {
                    self.scheduled.insert((run_at, key_id(job.id)));
                }
            }
            JobState::Running => {
                if let Some(at) = placement.lease_expires_at {
                    self.leases.insert(key_time(at), key_id(job.id));
                }
            }
            JobState::Reconciling => {
                self.reconciling.insert(job.id);
            }
            JobState::Waiting => {}
            JobState::Succeeded | JobState::Failed | JobState::Cancelled => {
                let at = placement.finished_at.unwrap_or(now);
                self.finished.insert(key_time(at), key_id(job.id));
            }
        }
    }

    /// Uncounts a job at `placement` and removes its state-dependent entries.
    fn unplace(&mut self, job: &Job, placement: Placement) {
        if let Some(counts) = self.counts.get_mut(&job.queue) {
            let slot = &mut counts[state_slot(placement.state)];
            *slot = slot.saturating_sub(1);
            let waiting = &mut counts[WAITING_SLOT];
            *waiting = waiting.saturating_sub(u64::from(placement.waiting));
            if counts.iter().all(|n| *n == 0) {
                self.counts.remove(&job.queue);
            }
        }
        self.unindex(job, placement);
    }

    /// Removes the state-dependent index entries of a job at `placement`.
    fn unindex(&mut self, job: &Job, placement: Placement) {
        match placement.state {
            JobState::Queued => {
                let run_at = key_time(placement.run_at);
                let key = (job.priority, run_at, key_id(job.id));
                let in_ready = self
                    .ready
                    .get_mut(&job.queue)
                    .and_then(|by_kind| by_kind.get_mut(&job.kind))
                    .is_some_and(|set| set.remove(&key));
                if !in_ready {
                    self.scheduled.remove(&(run_at, key_id(job.id)));
                }
            }
            JobState::Running => {
                if let Some(at) = placement.lease_expires_at {
                    self.leases.remove(key_time(at), key_id(job.id));
                }
            }
            JobState::Reconciling => {
                self.reconciling.remove(&job.id);
            }
            JobState::Waiting => {}
            JobState::Succeeded | JobState::Failed | JobState::Cancelled => {
                if let Some(at) = placement.finished_at {
                    self.finished.remove(key_time(at), key_id(job.id));
                }
            }
        }
    }

    fn became_live(&mut self, job: &Job) {
        self.pending += 1;
        bump(&mut self.pending_by_tenant, &job.tenant);
        if let Some(key) = &job.unique_key {
            if !self.unique.contains_key(&job.tenant) {
                self.unique.insert(job.tenant.clone(), FastMap::default());
            }
            if let Some(keys) = self.unique.get_mut(&job.tenant) {
                keys.insert(key.clone(), job.id);
            }
        }
    }

    fn became_finished(&mut self, job: &Job) {
        self.pending = self.pending.saturating_sub(1);
        drop_one(&mut self.pending_by_tenant, &job.tenant);
        if let Some(key) = &job.unique_key {
            if let Some(keys) = self.unique.get_mut(&job.tenant) {
                if keys.get(key) == Some(&job.id) {
                    keys.remove(key);
                }
                if keys.is_empty() {
                    self.unique.remove(&job.tenant);
                }
            }
        }
    }

    /// Starts counting running jobs under `key` (a policy was created for it).
    pub fn track_limit_key(&mut self, key: &LimitKey, jobs: &JobTable) {
        let running = self
            .leases
            .ids()
            .filter_map(|id| jobs.get(&id_of(id)))
            .filter(|job| job.effective_limit_keys().contains(key))
            .count();
        self.running_by_key.insert(key.clone(), running as u64);
    }

    /// Stops counting running jobs under `key` (its policy was removed).
    pub fn untrack_limit_key(&mut self, key: &LimitKey) {
        self.running_by_key.remove(key);
    }

    fn started_running(&mut self, job: &Job) {
        if self.running_by_key.is_empty() {
            return;
        }
        for key in job.effective_limit_keys() {
            if let Some(n) = self.running_by_key.get_mut(&key) {
                *n += 1;
            }
        }
    }

    fn stopped_running(&mut self, job: &Job) {
        if self.running_by_key.is_empty() {
            return;
        }
        for key in job.effective_limit_keys() {
            if let Some(n) = self.running_by_key.get_mut(&key) {
                *n = n.saturating_sub(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift64*), so a failure replays.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Checks a `TimeIndex` against a `BTreeSet` of the same entries.
    fn agree(index: &TimeIndex, model: &BTreeSet<TimeKey>, rng: &mut Rng) {
        assert_eq!(index.len(), model.len());
        let mut ids: Vec<KeyId> = index.ids().collect();
        ids.sort_unstable();
        let mut expected: Vec<KeyId> = model.iter().map(|k| k.1).collect();
        expected.sort_unstable();
        assert_eq!(ids, expected);
        let last = i64::try_from(rng.below(1_200)).unwrap() - 100;
        let limit = usize::try_from(rng.below(40)).unwrap();
        let want: Vec<TimeKey> = model
            .iter()
            .take_while(|k| k.0 <= last)
            .take(limit)
            .copied()
            .collect();
        assert_eq!(index.up_to(last, limit), want, "up_to({last}, {limit})");
        assert_eq!(
            index.up_to(KeyTime::MAX, usize::MAX),
            model.iter().copied().collect::<Vec<_>>()
        );
    }

    #[test]
    fn time_index_behaves_like_an_ordered_set() {
        // Mostly in-order inserts (claims and finishes as they happen) with some out of order
        // (a clock set back), removals anywhere, mostly oldest first (leases ending in the
        // order they began), re-inserts of removed entries, and repeats.
        for seed in 1..=20u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut index = TimeIndex::default();
            let mut model = BTreeSet::new();
            let mut clock: i64 = 0;
            let mut next_id: KeyId = 1;
            for step in 0..3_000 {
                match rng.below(10) {
                    0..=4 => {
                        clock += i64::try_from(rng.below(3)).unwrap();
                        let at = if rng.below(8) == 0 {
                            clock - i64::try_from(rng.below(50)).unwrap()
                        } else {
                            clock
                        };
                        let id = if rng.below(4) == 0 {
                            KeyId::from(rng.below(100))
                        } else {
                            next_id += 1;
                            next_id
                        };
                        index.insert(at, id);
                        model.insert((at, id));
                    }
                    5..=8 if !model.is_empty() => {
                        let position = if rng.below(2) == 0 {
                            0
                        } else {
                            usize::try_from(rng.below(model.len() as u64)).unwrap()
                        };
                        let key = *model.iter().nth(position).unwrap();
                        assert!(index.remove(key.0, key.1), "remove {key:?}");
                        model.remove(&key);
                    }
                    _ => {
                        let key = (
                            i64::try_from(rng.below(1_000)).unwrap(),
                            KeyId::from(rng.below(200)),
                        );
                        assert_eq!(index.remove(key.0, key.1), model.remove(&key), "{key:?}");
                    }
                }
                if step % 50 == 0 {
                    agree(&index, &model, &mut rng);
                }
            }
            agree(&index, &model, &mut rng);
            // Emptying it leaves nothing behind.
            for key in model.clone() {
                assert!(index.remove(key.0, key.1));
            }
            assert_eq!(index.len(), 0);
            assert!(index.groups.is_empty());
        }
    }

    #[test]
    fn time_index_reads_an_instant_in_id_order_whatever_the_insert_order() {
        let mut index = TimeIndex::default();
        // One finish batch: one instant, ids in completion order.
        for id in [5u64, 3, 9, 1, 7] {
            index.insert(100, KeyId::from(id));
        }
        index.insert(50, 8);
        index.insert(100, 3);
        assert_eq!(index.len(), 6);
        assert_eq!(
            index.up_to(100, 4),
            vec![(50, 8), (100, 1), (100, 3), (100, 5)]
        );
        assert_eq!(index.up_to(99, 10), vec![(50, 8)]);
        assert!(index.remove(100, 3));
        assert!(!index.remove(100, 3));
        assert!(!index.remove(101, 5));
        assert_eq!(index.len(), 5);
        for id in [1u64, 5, 7, 9] {
            assert!(index.remove(100, KeyId::from(id)));
        }
        assert!(index.remove(50, 8));
        assert!(index.groups.is_empty());
    }
}
