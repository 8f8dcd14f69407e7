//! Bulk actions (docs/design.md section 7): cancel, retry or delete every job of a selection,
//! either a list of ids (at most [`BULK_IDS_MAX`]) or every job a jobs-list filter
//! ([`ListJobs`]) matches. A bulk action is one [`crate::Operation::JobsBulk`] with one audit
//! record; it applies the action job by job through the job's own operation (cancel, retry,
//! delete: the same rules, the same answers), [`BulkAction::step`] jobs a step, read by keyset over
//! the filter, so no step is unbounded. A job the action does not apply to (a retry of a
//! running job, a delete a live job refuses, a retry over a quota) is skipped, not an error.
//!
//! Scope: an actor of one tenant acts on its tenant's jobs only ([`BulkJobs::scoped`]); an id
//! of another tenant's job counts as not found.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::audit::Actor;
use crate::bounds::{BULK_CHUNK, BULK_IDS_MAX, BULK_RETRY_CHUNK};
use crate::error::{Error, Result};
use crate::job::{Job, JobId};
use crate::names::TenantId;
use crate::store::{JobDetails, JobStore, ListJobs};

/// What a bulk action does to each job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// [`JobStore::job_cancel`]: waiting, queued, running and reconciling jobs.
    Cancel,
    /// [`JobStore::job_retry`]: succeeded, failed and cancelled jobs.
    Retry,
    /// [`JobStore::job_delete`]: jobs not running or reconciling that no live job needs.
    Delete,
}

impl BulkAction {
    /// Every action, in order.
    pub const ALL: [BulkAction; 3] = [BulkAction::Cancel, BulkAction::Retry, BulkAction::Delete];

    /// `cancel`, `retry` or `delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Cancel => "cancel",
            BulkAction::Retry => "retry",
            BulkAction::Delete => "delete",
        }
    }

    /// Jobs a step of this action reads and changes: [`BULK_RETRY_CHUNK`] for a retry (its
    /// step may hold the global quota lock), [`BULK_CHUNK`] otherwise.
    pub fn step(self) -> u32 {
        match self {
            BulkAction::Retry => BULK_RETRY_CHUNK,
            BulkAction::Cancel | BulkAction::Delete => BULK_CHUNK,
        }
    }
}

impl fmt::Display for BulkAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BulkAction {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        BulkAction::ALL
            .into_iter()
            .find(|a| a.as_str() == text)
            .ok_or_else(|| Error::invalid("action", "must be cancel, retry or delete"))
    }
}

/// Which jobs a bulk action acts on.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// These jobs, 1..=[`BULK_IDS_MAX`], none repeated.
    Ids(Vec<JobId>),
    /// Every job the filter matches (its `before`, `limit` and `details` unset, `details`
    /// left at its default: the action pages through it itself).
    Filter(ListJobs),
}

/// A bulk action: what, on which jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkJobs {
    /// What to do to each job.
    pub action: BulkAction,
    /// Which jobs.
    pub selection: Selection,
    /// Only this tenant's jobs (set by [`BulkJobs::scoped`] from the actor; `None`: every
    /// tenant, or the filter's own `tenant`).
    pub tenant: Option<TenantId>,
    /// For a selection by ids: the one tenant of the stored jobs it names, when they all share
    /// one (set by the store from the jobs before it acts, [`BulkJobs::with_ids_tenant`]); the
    /// tenant the audit record names ([`BulkJobs::record_tenant`]).
    pub ids_tenant: Option<TenantId>,
}

impl BulkJobs {
    /// `action` on the jobs `ids`.
    pub fn ids(action: BulkAction, ids: Vec<JobId>) -> Self {
        BulkJobs {
            action,
            selection: Selection::Ids(ids),
            tenant: None,
            ids_tenant: None,
        }
    }

    /// `action` on every job `filter` matches.
    pub fn filter(action: BulkAction, filter: ListJobs) -> Self {
        BulkJobs {
            action,
            selection: Selection::Filter(filter),
            tenant: None,
            ids_tenant: None,
        }
    }

    /// Checks the selection.
    ///
    /// # Errors
    /// `InvalidInput` naming `ids` (none, more than [`BULK_IDS_MAX`], one repeated), or
    /// `filter.<field>` (`meta` not an object; `filter.before`, `filter.limit` or
    /// `filter.details` set).
    pub fn validate(&self) -> Result<()> {
        match &self.selection {
            Selection::Ids(ids) => {
                if ids.is_empty() {
                    return Err(Error::invalid(
                        "ids",
                        "must name at least one job (or select jobs with a filter)",
                    ));
                }
                if ids.len() > BULK_IDS_MAX {
                    return Err(Error::invalid(
                        "ids",
                        format!(
                            "names {} jobs; at most {BULK_IDS_MAX} a request (select more with a filter)",
                            ids.len()
                        ),
                    ));
                }
                let mut seen = std::collections::HashSet::with_capacity(ids.len());
                if let Some(repeated) = ids.iter().find(|id| !seen.insert(**id)) {
                    return Err(Error::invalid("ids", format!("names job {repeated} twice")));
                }
                Ok(())
            }
            Selection::Filter(filter) => {
                filter.validate().map_err(|e| e.in_field("filter"))?;
                if filter.before.is_some() {
                    return Err(Error::invalid(
                        "filter.before",
                        "takes no cursor: a bulk action reads every matching job",
                    ));
                }
                if filter.limit != 0 {
                    return Err(Error::invalid(
                        "filter.limit",
                        "takes no page size: a bulk action reads every matching job",
                    ));
                }
                if filter.details != JobDetails::default() {
                    return Err(Error::invalid(
                        "filter.details",
                        "takes no details: a bulk action reads only its jobs' ids",
                    ));
                }
                Ok(())
            }
        }
    }

    /// Limits the action to the tenant of `actor`, when it has one: a filter naming another
    /// tenant is refused, and a filter naming none gets the actor's.
    ///
    /// # Errors
    /// `InvalidInput` naming `filter.tenant`; then those of [`BulkJobs::validate`].
    pub fn scoped(mut self, actor: &Actor) -> Result<Self> {
        self.validate()?;
        if let Some(own) = &actor.tenant {
            if let Selection::Filter(filter) = &mut self.selection {
                match &filter.tenant {
                    Some(named) if named != own => {
                        return Err(Error::invalid(
                            "filter.tenant",
                            format!("an actor of tenant {own} acts on its own tenant's jobs only"),
                        ))
                    }
                    _ => filter.tenant = Some(own.clone()),
                }
            }
            self.tenant = Some(own.clone());
        }
        Ok(self)
    }

    /// Sets [`BulkJobs::ids_tenant`] from the tenants of the stored jobs the ids name: the
    /// tenant they all share, else (several, or none stored) `None`.
    pub fn with_ids_tenant<'a>(mut self, tenants: impl IntoIterator<Item = &'a TenantId>) -> Self {
        let mut tenants = tenants.into_iter();
        let first = tenants.next();
        self.ids_tenant = match first {
            Some(first) if tenants.all(|t| t == first) => Some(first.clone()),
            _ => None,
        };
        self
    }

    /// The tenant the audit record names, for an actor of every tenant: the filter's
    /// `tenant` when it names one; for ids, the tenant all their jobs share
    /// ([`BulkJobs::ids_tenant`]); else `None`.
    pub fn record_tenant(&self) -> Option<TenantId> {
        self.tenant.clone().or_else(|| match &self.selection {
            Selection::Filter(filter) => filter.tenant.clone(),
            Selection::Ids(_) => self.ids_tenant.clone(),
        })
    }

    /// True when `job` is in the action's tenant scope.
    pub fn in_scope(&self, job: &Job) -> bool {
        self.in_scope_tenant(&job.tenant)
    }

    /// True when a job of `tenant` is in the action's tenant scope.
    pub fn in_scope_tenant(&self, tenant: &TenantId) -> bool {
        self.tenant.as_ref().is_none_or(|t| t == tenant)
    }

    /// The page of the filter after `before` (keyset, newest first), [`BulkAction::step`] summaries,
    /// in the action's tenant scope; `None` for a selection by ids.
    pub fn page(&self, before: Option<JobId>) -> Option<ListJobs> {
        let Selection::Filter(filter) = &self.selection else {
            return None;
        };
        Some(ListJobs {
            before,
            limit: self.action.step(),
            details: JobDetails::NONE,
            tenant: self.tenant.clone().or_else(|| filter.tenant.clone()),
            ..filter.clone()
        })
    }

    /// What the audit record names: the ids, or the filter's fields that are set.
    pub fn target(&self) -> Value {
        match &self.selection {
            Selection::Ids(ids) => {
                json!({ "ids": ids.iter().map(ToString::to_string).collect::<Vec<_>>() })
            }
            Selection::Filter(filter) => {
                let mut fields = Map::new();
                let mut put = |name: &str, value: Option<String>| {
                    if let Some(value) = value {
                        fields.insert(name.to_owned(), Value::String(value));
                    }
                };
                put("state", filter.state.map(|s| s.to_string()));
                put("queue", filter.queue.as_ref().map(ToString::to_string));
                put("kind", filter.kind.as_ref().map(ToString::to_string));
                put(
                    "tenant",
                    self.tenant
                        .as_ref()
                        .or(filter.tenant.as_ref())
                        .map(ToString::to_string),
                );
                put("workflow", filter.workflow.map(|w| w.to_string()));
                put("parent", filter.parent.map(|p| p.to_string()));
                if let Some(meta) = &filter.meta {
                    fields.insert("meta".to_owned(), meta.clone());
                }
                if let Some(args) = &filter.args {
                    fields.insert("args".to_owned(), args.clone());
                }
                json!({ "filter": fields })
            }
        }
    }
}

/// What a bulk action did: `changed` jobs it applied to, `skipped` ones it does not apply to
/// (their state, a live job that needs them, a quota, a unique key), `not_found` ids of no
/// job of the scope (or gone meanwhile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BulkOutcome {
    /// Jobs the action changed (a cancel requested of a running job counts).
    pub changed: u64,
    /// Jobs it did not apply to.
    pub skipped: u64,
    /// Jobs not found (ids of none, another tenant's, or deleted meanwhile).
    pub not_found: u64,
    /// Other jobs the changed jobs' cancels reached (children, dependents:
    /// [`crate::CancelOutcome::cascaded`]); 0 for a retry or a delete.
    #[serde(default)]
    pub cascaded: u64,
}

impl BulkOutcome {
    /// Counts one job's answer: a success is a change (its value the other jobs it reached,
    /// a cancel's `cascaded`), a refusal of the job's own rules a skip, `NotFound` a job not
    /// found.
    ///
    /// # Errors
    /// Any other error (`Unavailable`, `Fatal`, `InvalidInput`): the action stops there.
    pub fn count(&mut self, answer: Result<u64>) -> Result<()> {
        match answer {
            Ok(cascaded) => {
                self.changed += 1;
                self.cascaded += cascaded;
            }
            Err(
                Error::InvalidTransition { .. }
                | Error::Conflict { .. }
                | Error::QuotaExceeded { .. },
            ) => self.skipped += 1,
            Err(Error::NotFound { .. }) => self.not_found += 1,
            Err(other) => return Err(other),
        }
        Ok(())
    }

    /// Adds the counts of a later step.
    pub fn add(&mut self, step: BulkOutcome) {
        self.changed += step.changed;
        self.skipped += step.skipped;
        self.not_found += step.not_found;
        self.cascaded += step.cascaded;
    }

    /// The jobs the action touched, as the audit record counts them: those changed and those
    /// their cancels reached (as a single `job.cancel` counts 1 + cascaded).
    pub fn jobs(&self) -> u64 {
        self.changed + self.cascaded
    }
}

/// Runs `bulk` on `store` step by step through the store's own job methods (the memory store,
/// and views that pass operations on); no audit record. A store that keeps the record in its
/// steps' transactions runs its own loop (PostgreSQL).
///
/// # Errors
/// Those of [`BulkJobs::validate`]; the first error [`BulkOutcome::count`] does not count.
pub async fn run(store: &dyn JobStore, bulk: &BulkJobs) -> Result<BulkOutcome> {
    bulk.validate()?;
    let mut outcome = BulkOutcome::default();
    match &bulk.selection {
        Selection::Ids(ids) => {
            for chunk in ids.chunks(bulk.action.step() as usize) {
                let found: std::collections::HashMap<JobId, TenantId> = store
                    .jobs_tenants(chunk.to_vec())
                    .await?
                    .into_iter()
                    .collect();
                let visible: Vec<JobId> = chunk
                    .iter()
                    .copied()
                    .filter(|id| found.get(id).is_some_and(|t| bulk.in_scope_tenant(t)))
                    .collect();
                outcome.not_found += (chunk.len() - visible.len()) as u64;
                apply_each(store, bulk.action, visible, &mut outcome).await?;
            }
        }
        Selection::Filter(_) => {
            let mut before = None;
            while let Some(query) = bulk.page(before) {
                let page = store.jobs_list(query).await?;
                let ids = page.jobs.iter().map(|j| j.id).collect();
                apply_each(store, bulk.action, ids, &mut outcome).await?;
                match page.next {
                    Some(next) => before = Some(next),
                    None => break,
                }
            }
        }
    }
    Ok(outcome)
}

/// Applies `action` to each of `ids` by the store's own method, counting the answers.
async fn apply_each(
    store: &dyn JobStore,
    action: BulkAction,
    ids: Vec<JobId>,
    outcome: &mut BulkOutcome,
) -> Result<()> {
    for id in ids {
        let answer = match action {
            BulkAction::Cancel => store.job_cancel(id).await.map(|o| o.cascaded),
            BulkAction::Retry => store.job_retry(id).await.map(|_| 0),
            BulkAction::Delete => store.job_delete(id).await.map(|_| 0),
        };
        outcome.count(answer)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::AuditSource;
    use crate::state::JobState;

    fn ids(n: usize) -> Vec<JobId> {
        (0..n)
            .map(|i| JobId(uuid::Uuid::from_u128(i as u128 + 1)))
            .collect()
    }

    #[test]
    fn a_retry_steps_in_fewer_jobs_than_cancel_and_delete() {
        assert_eq!(BulkAction::Retry.step(), BULK_RETRY_CHUNK);
        const { assert!(BULK_RETRY_CHUNK < BULK_CHUNK) };
        for action in [BulkAction::Cancel, BulkAction::Delete] {
            assert_eq!(action.step(), BULK_CHUNK);
            let page = BulkJobs::filter(action, ListJobs::default())
                .page(None)
                .unwrap();
            assert_eq!(page.limit, BULK_CHUNK);
        }
    }

    #[test]
    fn a_selection_by_ids_is_bounded_and_names_each_job_once() {
        BulkJobs::ids(BulkAction::Cancel, ids(BULK_IDS_MAX))
            .validate()
            .unwrap();
        for bad in [ids(0), ids(BULK_IDS_MAX + 1), [ids(2), ids(1)].concat()] {
            let err = BulkJobs::ids(BulkAction::Retry, bad)
                .validate()
                .unwrap_err();
            assert!(
                matches!(&err, Error::InvalidInput { field, .. } if field == "ids"),
                "{err}"
            );
        }
        let err = BulkJobs::ids(BulkAction::Retry, ids(BULK_IDS_MAX + 1))
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("at most 1000"), "{err}");
    }

    #[test]
    fn a_filter_is_checked_and_scoped_to_the_actors_tenant() {
        let bad = ListJobs {
            meta: Some(json!([1])),
            ..ListJobs::default()
        };
        let err = BulkJobs::filter(BulkAction::Delete, bad)
            .validate()
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput { field, .. } if field == "filter.meta"),
            "{err}"
        );
        let paged = ListJobs {
            limit: 5,
            ..ListJobs::default()
        };
        let err = BulkJobs::filter(BulkAction::Delete, paged)
            .validate()
            .unwrap_err();
        assert!(matches!(&err, Error::InvalidInput { field, .. } if field == "filter.limit"));
        for (bad, named) in [
            (
                ListJobs {
                    before: Some(ids(1)[0]),
                    ..ListJobs::default()
                },
                "filter.before",
            ),
            (
                ListJobs {
                    details: JobDetails::NONE,
                    ..ListJobs::default()
                },
                "filter.details",
            ),
        ] {
            let err = BulkJobs::filter(BulkAction::Cancel, bad)
                .validate()
                .unwrap_err();
            assert!(
                matches!(&err, Error::InvalidInput { field, .. } if field == named),
                "{err}"
            );
        }

        let acme = TenantId::parse("acme").unwrap();
        let actor = Actor::new("t", AuditSource::Api).for_tenant(acme.clone());
        let failed = ListJobs {
            state: Some(JobState::Failed),
            ..ListJobs::default()
        };
        let scoped = BulkJobs::filter(BulkAction::Retry, failed.clone())
            .scoped(&actor)
            .unwrap();
        let page = scoped.page(None).unwrap();
        assert_eq!(page.tenant.as_ref(), Some(&acme));
        assert_eq!(
            (page.limit, page.details),
            (BULK_RETRY_CHUNK, JobDetails::NONE)
        );
        assert_eq!(
            scoped.target(),
            json!({"filter": {"state": "failed", "tenant": "acme"}})
        );
        let searched = ListJobs {
            meta: Some(json!({"customer": "acme"})),
            args: Some(json!({"order": 7})),
            ..failed.clone()
        };
        assert_eq!(
            BulkJobs::filter(BulkAction::Retry, searched).target(),
            json!({"filter": {"state": "failed", "meta": {"customer": "acme"}, "args": {"order": 7}}}),
            "the audit record names every filter, args too"
        );
        let other = ListJobs {
            tenant: Some(TenantId::parse("other").unwrap()),
            ..failed
        };
        let err = BulkJobs::filter(BulkAction::Retry, other)
            .scoped(&actor)
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput { field, .. } if field == "filter.tenant"),
            "{err}"
        );
    }

    #[test]
    fn refusals_are_skips_and_failures_stop() {
        let mut outcome = BulkOutcome::default();
        outcome.count(Ok(2)).unwrap();
        outcome
            .count(Err(Error::InvalidTransition {
                from: JobState::Running,
                event: crate::EventName::Retry,
            }))
            .unwrap();
        outcome.count(Err(Error::job_not_found(ids(1)[0]))).unwrap();
        assert_eq!(
            outcome,
            BulkOutcome {
                changed: 1,
                skipped: 1,
                not_found: 1,
                cascaded: 2
            }
        );
        assert!(outcome.count(Err(Error::unavailable("down"))).is_err());
    }
}
