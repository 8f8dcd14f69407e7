//! The search of jobs by their args ([`ListJobs::args`]), the same for every store.
//!
//! No index covers args, so a search reads the jobs the other filters select, newest first,
//! and keeps those whose args contain the filter ([`crate::json::contains`], PostgreSQL's
//! `@>`). One search reads at most [`ARGS_SEARCH_WINDOW`] jobs, in pages of the store's own
//! list; a store drives an [`ArgsSearch`] with them (it does no I/O itself):
//!
//! | the search found | `jobs` | `next` |
//! |---|---|---|
//! | more matches than the page | the page's matches | the last one's id |
//! | fewer, having read the whole window | the matches (maybe none) | the last job read: the search goes on from there |
//! | fewer, having read every selected job | the matches | `None` |

use crate::bounds::LIST_LIMIT_MAX;
use crate::error::Result;
use crate::job::{Job, JobId};
use crate::store::{JobDetails, JobPage, ListJobs};

/// Most jobs one args search reads.
pub const ARGS_SEARCH_WINDOW: u32 = 10_000;

/// One args search in progress: [`ArgsSearch::next_read`] names the list to read next (the
/// query without its args filter, with args), [`ArgsSearch::take`] takes its answer, and
/// [`ArgsSearch::finish`] gives the page once `next_read` answers `None`.
#[derive(Debug)]
pub struct ArgsSearch {
    query: ListJobs,
    needle: serde_json::Value,
    found: Vec<Job>,
    examined: u32,
    last_read: Option<JobId>,
    done: Option<Option<JobId>>,
}

impl ArgsSearch {
    /// A search for `query`, or `None` when it has no args filter (a plain list).
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] from [`ListJobs::validate`].
    pub fn new(query: &ListJobs) -> Result<Option<ArgsSearch>> {
        query.validate()?;
        Ok(query.args.clone().map(|needle| ArgsSearch {
            last_read: query.before,
            query: query.clone(),
            needle,
            found: Vec::new(),
            examined: 0,
            done: None,
        }))
    }

    /// The next list to read, `None` when the search is over.
    pub fn next_read(&self) -> Option<ListJobs> {
        if self.done.is_some() {
            return None;
        }
        Some(ListJobs {
            args: None,
            before: self.last_read,
            limit: LIST_LIMIT_MAX.min(ARGS_SEARCH_WINDOW - self.examined),
            details: JobDetails {
                args: true,
                ..self.query.details
            },
            ..self.query.clone()
        })
    }

    /// Takes the answer to the last [`ArgsSearch::next_read`].
    pub fn take(&mut self, read: JobPage) {
        let page = self.query.page_size() as usize;
        for job in read.jobs {
            self.examined += 1;
            self.last_read = Some(job.id);
            if crate::json::contains(&job.args, &self.needle) {
                self.found.push(job);
                if self.found.len() > page {
                    self.found.truncate(page);
                    self.done = Some(self.found.last().map(|j| j.id));
                    return;
                }
            }
        }
        if read.next.is_none() {
            self.done = Some(None);
        } else if self.examined >= ARGS_SEARCH_WINDOW {
            self.done = Some(self.last_read);
        }
    }

    /// The page: the matches with the fields the query asked for, and where to go on.
    pub fn finish(self) -> JobPage {
        let details = self.query.details;
        let mut jobs = self.found;
        for job in &mut jobs {
            details.strip(job);
        }
        JobPage {
            jobs,
            next: self.done.flatten(),
        }
    }
}
