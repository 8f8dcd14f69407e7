//! The audit log of operator actions (docs/audit.md): records in id order, appended by
//! `JobStore::operate` right after the action it records, listed newest first by keyset and
//! pruned by age.
//!
//! The memory store keeps its log beside the jobs under a lock of its own. An action and its
//! record are two steps with nothing between them that can fail, so neither is ever stored
//! without the other; a reader may, for an instant, see the action before its record.

use chrono::{DateTime, Utc};
use drover_core::{AuditEntry, AuditPage, ListAudit, NewAuditEntry};

/// The records, ids increasing from 1.
#[derive(Debug, Default)]
pub(crate) struct AuditLog {
    entries: Vec<AuditEntry>,
    last_id: i64,
}

impl AuditLog {
    /// Stores `entry` at `at` with the next id.
    pub(crate) fn append(&mut self, at: DateTime<Utc>, entry: NewAuditEntry) {
        self.last_id += 1;
        self.entries
            .push(AuditEntry::stored(self.last_id, at, entry));
    }

    /// A page newest first: the records below the cursor that pass the filters.
    pub(crate) fn list(&self, query: &ListAudit) -> AuditPage {
        let size = usize::try_from(query.page_size()).unwrap_or(usize::MAX);
        let end = match query.before {
            Some(before) => self.entries.partition_point(|e| e.id < before),
            None => self.entries.len(),
        };
        let mut entries: Vec<AuditEntry> = self.entries[..end]
            .iter()
            .rev()
            .filter(|e| e.matches(query))
            .take(size + 1)
            .cloned()
            .collect();
        let next = if entries.len() > size {
            entries.truncate(size);
            entries.last().map(|e| e.id)
        } else {
            None
        };
        AuditPage { entries, next }
    }

    /// Deletes at most `limit` records dated before `cutoff`, oldest first; answers how many.
    pub(crate) fn prune(&mut self, cutoff: DateTime<Utc>, limit: usize) -> u64 {
        let mut deleted = 0usize;
        self.entries.retain(|e| {
            if deleted < limit && e.at < cutoff {
                deleted += 1;
                false
            } else {
                true
            }
        });
        deleted as u64
    }
}
