//! The cron scheduler: for each schedule, the tick due at the STORE's clock
//! ([`drover_core::Schedule::due_tick`]) is fired with `schedule_fire`, which advances the
//! schedule and enqueues [`drover_core::Schedule::job_for_tick`] atomically, so each tick
//! enqueues exactly one job however many workers compete (docs/design.md sections 6 and 9).
//!
//! A pass fires every due tick of a schedule, oldest first: ticks missed by at most
//! [`drover_core::schedule::CATCH_UP_GRACE`] (a pass that ran late) each get their job; older
//! ones collapse into one catch-up.

use std::sync::Arc;

use drover_core::{EnqueueStatus, Error};
use tokio_util::sync::CancellationToken;

use crate::health::{classify, ErrorClass};
use crate::runtime::{bump, Runtime};

/// Most ticks of one schedule a pass fires: more than the grace holds (one a second at most).
const FIRES_PER_PASS_MAX: usize = 64;

/// One scheduler pass.
pub(crate) async fn schedule_pass(rt: Arc<Runtime>, stop: CancellationToken) -> Result<(), Error> {
    let now = rt.store.now().await?;
    let schedules = rt.store.schedules_list().await?;
    for mut schedule in schedules {
        for _ in 0..FIRES_PER_PASS_MAX {
            if stop.is_cancelled() {
                return Ok(());
            }
            let Some(tick) = schedule.due_tick(now) else {
                break;
            };
            match rt.store.schedule_fire(schedule.fire(tick)).await {
                Ok(Some(enqueued)) => {
                    bump(&rt.counters.schedules_fired, 1);
                    tracing::info!(schedule = %schedule.name, tick = %tick, job_id = %enqueued.job.id, "schedule fired");
                    if enqueued.status == EnqueueStatus::Created {
                        rt.metrics
                            .job_enqueued(&enqueued.job.kind, &enqueued.job.queue);
                    }
                    schedule.last_tick_at = Some(tick);
                }
                // Another worker consumed this tick or a later one (it fires the rest), or the
                // schedule's timing changed since this pass read it (the next pass reads it
                // again).
                Ok(None) => break,
                Err(error) => match classify(&error) {
                    ErrorClass::Transient | ErrorClass::Fatal => return Err(error),
                    ErrorClass::Other => {
                        tracing::warn!(schedule = %schedule.name, tick = %tick, error = %error, "firing a schedule tick failed; retrying at the next pass");
                        break;
                    }
                },
            }
        }
    }
    Ok(())
}
