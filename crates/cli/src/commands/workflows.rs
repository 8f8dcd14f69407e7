//! `drover workflows list|get|cancel|retry` (docs/design.md section 10). `get` draws the
//! workflow as a tree: each job under the job it waits for (its first dependency in the
//! workflow) or, for a child, under its parent; a job that waits for more than one names the
//! others. `--json` prints what the HTTP API answers (`GET /v1/workflows`, `GET
//! /v1/workflows/{id}`).

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;
use drover_core::{Job, JobId, ListWorkflows, Workflow};
use drover_http::dto::{WorkflowSummaryView, WorkflowView};
use serde::Serialize;

use crate::args::{WorkflowListArgs, WorkflowsCommand};
use crate::context::{call, Ctx};
use crate::output::{self, outln, print_json, table};

/// A page of `workflows list --json`.
#[derive(Serialize)]
struct PageJson {
    workflows: Vec<WorkflowSummaryView>,
    next: Option<String>,
}

/// Runs a `workflows` subcommand.
pub async fn run(ctx: &Ctx, command: WorkflowsCommand) -> Result<()> {
    let client = ctx.client().await?;
    match command {
        WorkflowsCommand::List(args) => {
            let page = call(ctx, client.workflows(list_query(&args))).await?;
            if ctx.json {
                return print_json(&PageJson {
                    next: page.next.map(|id| id.to_string()),
                    workflows: page.workflows.into_iter().map(Into::into).collect(),
                });
            }
            let mut t = table(&["id", "tenant", "state", "jobs", "created"]);
            for w in &page.workflows {
                t.add_row(vec![
                    w.id.to_string(),
                    w.tenant.to_string(),
                    w.overall().to_string(),
                    counts(&w.states),
                    output::time(w.created_at),
                ]);
            }
            outln!("{t}")?;
            match page.next {
                Some(next) => outln!("more: --before {next}")?,
                None => outln!("{} workflow(s)", page.workflows.len())?,
            }
        }
        WorkflowsCommand::Get { id } => {
            let workflow = call(ctx, client.workflow(id)).await?;
            if ctx.json {
                return print_json(&WorkflowView::from(workflow));
            }
            let view = WorkflowView::from(workflow.clone());
            outln!(
                "workflow {} (tenant {}, created {}): {}, {}",
                workflow.id,
                workflow.tenant,
                output::time(workflow.created_at),
                view.state,
                view.counts
                    .iter()
                    .map(|(state, n)| format!("{n} {state}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
            for line in tree(&workflow) {
                outln!("{line}")?;
            }
        }
        WorkflowsCommand::Cancel { id } => {
            let change = call(ctx, client.cancel_workflow(id)).await?;
            if ctx.json {
                return print_json(&change);
            }
            outln!(
                "workflow {}: {} job(s) cancelled or asked to stop",
                change.id,
                change.jobs
            )?;
        }
        WorkflowsCommand::Retry { id } => {
            let change = call(ctx, client.retry_workflow(id)).await?;
            if ctx.json {
                return print_json(&change);
            }
            outln!("workflow {}: {} job(s) run again", change.id, change.jobs)?;
        }
    }
    Ok(())
}

fn list_query(args: &WorkflowListArgs) -> ListWorkflows {
    ListWorkflows {
        tenant: args.tenant.clone(),
        before: args.before,
        limit: args.limit,
    }
}

/// `3 succeeded, 1 waiting`.
fn counts(states: &BTreeMap<drover_core::JobState, u64>) -> String {
    states
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Indentation stops growing at this depth (a chain 1,000 deep stays readable); deeper lines
/// say their depth.
const INDENT_MAX: usize = 32;

/// The lines of the tree of `workflow` (see the module documentation), in creation order
/// among siblings.
pub fn tree(workflow: &Workflow) -> Vec<String> {
    let by_id: HashMap<JobId, &Job> = workflow.jobs.iter().map(|j| (j.id, j)).collect();
    let label = |id: &JobId| match by_id.get(id).and_then(|j| j.name.clone()) {
        Some(name) => name,
        None => id.to_string(),
    };
    // Each job hangs under its parent, else its first dependency in the workflow.
    let mut under: HashMap<Option<JobId>, Vec<&Job>> = HashMap::new();
    for job in &workflow.jobs {
        let anchor = job.parent_id.filter(|p| by_id.contains_key(p)).or_else(|| {
            job.depends_on
                .iter()
                .copied()
                .find(|d| by_id.contains_key(d))
        });
        under.entry(anchor).or_default().push(job);
    }
    let mut lines = Vec::with_capacity(workflow.jobs.len());
    let mut shown: std::collections::HashSet<JobId> = std::collections::HashSet::new();
    // Depth-first without recursion: a chain may be 1,000 deep.
    let mut stack: Vec<(&Job, usize)> = under
        .get(&None)
        .map(|roots| roots.iter().rev().map(|j| (*j, 0)).collect())
        .unwrap_or_default();
    loop {
        let Some((job, depth)) = stack.pop() else {
            // Jobs no root reaches (cannot happen for a stored graph): shown at the top.
            match workflow.jobs.iter().find(|j| !shown.contains(&j.id)) {
                Some(job) => {
                    stack.push((job, 0));
                    continue;
                }
                None => break,
            }
        };
        if !shown.insert(job.id) {
            continue;
        }
        let mut line = "  ".repeat(depth.min(INDENT_MAX));
        if depth > INDENT_MAX {
            line.push_str(&format!("[depth {depth}] "));
        }
        if job.parent_id.is_some_and(|p| by_id.contains_key(&p)) {
            line.push_str("child ");
        }
        line.push_str(&label(&job.id));
        line.push_str(&format!(" [{}] {}", job.kind, job.state));
        if job.cancel_requested {
            line.push_str(" (cancel requested)");
        }
        // The dependency the job hangs under is not repeated; the others are named.
        let under_parent = job.parent_id.is_some_and(|p| by_id.contains_key(&p));
        let first_local = if under_parent {
            None
        } else {
            job.depends_on.iter().position(|d| by_id.contains_key(d))
        };
        let others: Vec<String> = job
            .depends_on
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != first_local)
            .map(|(_, d)| label(d))
            .collect();
        if !others.is_empty() {
            line.push_str(&format!(" (also waits for {})", name_some(&others)));
        }
        if job.run_regardless {
            line.push_str(" (runs regardless)");
        }
        if job.name.is_some() {
            line.push_str(&format!("  {}", job.id));
        }
        lines.push(line);
        if let Some(next) = under.get(&Some(job.id)) {
            for child in next.iter().rev() {
                stack.push((child, depth + 1));
            }
        }
    }
    lines
}

/// How many dependencies a tree line names before it counts the rest: a job may wait for up to
/// 1,000, and one line must stay readable.
const NAMED_DEPENDENCIES_MAX: usize = 5;

/// `labels` joined with ", ", the first [`NAMED_DEPENDENCIES_MAX`] of them, then "and N more".
fn name_some(labels: &[String]) -> String {
    if labels.len() <= NAMED_DEPENDENCIES_MAX {
        return labels.join(", ");
    }
    format!(
        "{} and {} more",
        labels[..NAMED_DEPENDENCIES_MAX].join(", "),
        labels.len() - NAMED_DEPENDENCIES_MAX
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use drover_core::{JobKind, JobState, NewJob, TenantId, WorkflowId};
    use serde_json::json;

    #[test]
    fn a_tree_line_names_five_dependencies_and_counts_the_rest() {
        let labels: Vec<String> = (0..1_000).map(|i| format!("j{i}")).collect();
        assert_eq!(name_some(&labels[..2]), "j0, j1");
        assert_eq!(name_some(&labels[..5]), "j0, j1, j2, j3, j4");
        assert_eq!(name_some(&labels), "j0, j1, j2, j3, j4 and 995 more");
    }

    fn job(name: Option<&str>, state: JobState, depends_on: &[JobId]) -> Job {
        let mut job = NewJob::new(JobKind::parse("k").unwrap(), json!({}))
            .into_job(JobId::new_v7(), Utc::now());
        job.name = name.map(str::to_owned);
        job.state = state;
        job.depends_on = depends_on.to_vec();
        job
    }

    fn workflow(jobs: Vec<Job>) -> Workflow {
        Workflow {
            id: WorkflowId::new_v7(),
            tenant: TenantId::default(),
            created_at: Utc::now(),
            jobs,
        }
    }

    /// A diamond a -> (b, c) -> d, a stored dependency outside the workflow, and a child of c:
    /// each job once, under its first dependency or its parent, naming the other dependencies.
    #[test]
    fn the_tree_hangs_each_job_under_its_first_dependency_or_its_parent() {
        let outside = JobId::new_v7();
        let a = job(Some("a"), JobState::Succeeded, &[]);
        let b = job(Some("b"), JobState::Running, &[a.id]);
        let c = job(Some("c"), JobState::Waiting, &[a.id, outside]);
        let d = job(Some("d"), JobState::Waiting, &[b.id, c.id]);
        let mut child = job(None, JobState::Queued, &[]);
        child.parent_id = Some(c.id);
        let mut last = d.clone();
        last.run_regardless = true;
        let jobs = vec![a.clone(), b.clone(), c.clone(), last, child.clone()];
        let ids: Vec<String> = jobs.iter().map(|j| format!("  {}", j.id)).collect();
        let lines = tree(&workflow(jobs));
        // Named jobs end with their id.
        let trimmed: Vec<String> = lines
            .iter()
            .map(|l| {
                ids.iter()
                    .find_map(|id| l.strip_suffix(id.as_str()))
                    .unwrap_or(l)
                    .to_owned()
            })
            .collect();
        assert_eq!(
            trimmed,
            [
                "a [k] succeeded".to_owned(),
                "  b [k] running".to_owned(),
                "    d [k] waiting (also waits for c) (runs regardless)".to_owned(),
                format!("  c [k] waiting (also waits for {outside})"),
                format!("    child {} [k] queued", child.id),
            ],
            "{lines:#?}"
        );
        assert!(lines[0].ends_with(&a.id.to_string()));
    }

    /// A chain 1,000 deep draws without recursion and its indentation stops growing.
    #[test]
    fn a_deep_chain_draws_with_bounded_indentation() {
        let mut jobs = vec![job(Some("j0"), JobState::Succeeded, &[])];
        for i in 1..1_000 {
            let previous = jobs[i - 1].id;
            jobs.push(job(Some(&format!("j{i}")), JobState::Waiting, &[previous]));
        }
        let lines = tree(&workflow(jobs));
        assert_eq!(lines.len(), 1_000);
        assert!(lines[999].starts_with(&format!("{}[depth 999] j999 ", "  ".repeat(INDENT_MAX))));
    }
}
