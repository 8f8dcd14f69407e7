//! The cron scheduler: for each schedule, the tick due at the STORE's clock
//! ([`drover_core::Schedule::due_tick`]) is fired with `schedule_fire`, which advances the
//! schedule and enqueues [`drover_core::Schedule::job_for_tick`] atomically, so each tick
//! enqueues exactly one job however many workers compete (DESIGN.md sections 6 and 9).

use std::sync::Arc;

use drover_core::{EnqueueStatus, Error, FireSchedule};
use tokio_util::sync::CancellationToken;

use crate::health::{classify, ErrorClass};
use crate::runtime::{bump, Runtime};

/// One scheduler pass.
pub(crate) async fn schedule_pass(rt: Arc<Runtime>, stop: CancellationToken) -> Result<(), Error> {
    let now = rt.store.now().await?;
    let schedules = rt.store.schedules_list().await?;
    for schedule in schedules {
        if stop.is_cancelled() {
            break;
        }
        let Some(tick) = schedule.due_tick(now) else {
            continue;
        };
        let fire = FireSchedule {
            name: schedule.name.clone(),
            tick,
            job: schedule.job_for_tick(tick),
        };
        match rt.store.schedule_fire(fire).await {
            Ok(Some(enqueued)) => {
                bump(&rt.counters.schedules_fired, 1);
                tracing::info!(schedule = %schedule.name, tick = %tick, job_id = %enqueued.job.id, "schedule fired");
                if enqueued.status == EnqueueStatus::Created {
                    rt.metrics
                        .job_enqueued(&enqueued.job.kind, &enqueued.job.queue);
                }
            }
            Ok(None) => {}
            Err(error) => match classify(&error) {
                ErrorClass::Transient | ErrorClass::Fatal => return Err(error),
                ErrorClass::Other => {
                    tracing::warn!(schedule = %schedule.name, tick = %tick, error = %error, "firing a schedule tick failed; retrying at the next pass");
                }
            },
        }
    }
    Ok(())
}
