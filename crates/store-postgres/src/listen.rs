//! Wake-up events over LISTEN/NOTIFY (docs/design.md section 5; `JobStore::subscribe`).
//!
//! Channels: `drover_jobs` (payload: a queue name; sent by enqueue, retry, release, rescue and
//! resume when jobs become ready) and `drover_cancel` (payload: a job id; sent when a cancel is
//! requested for a running job). Payloads never carry args, so they stay far below
//! PostgreSQL's 8000-byte limit; NOTIFY inside one transaction is coalesced per distinct payload.
//!
//! Each subscription runs a `PgListener` on its own connection (a one-connection pool with the
//! store's connect options, so it never takes a slot of the store's pool). `subscribe` returns
//! once LISTEN is active, so every event committed afterwards is delivered. After the connection
//! is lost the task reconnects with backoff and emits [`StoreEvent::Resync`] once listening
//! again; a subscriber that falls more than [`EVENT_BUFFER`] events behind also gets a `Resync`
//! instead of the events it missed. The task ends when the stream is dropped or the store is
//! closed.

use std::time::Duration;

use drover_core::{Error, EventStream, JobId, QueueName, StoreEvent};
use sqlx::postgres::{PgListener, PgNotification, PgPoolOptions};
use sqlx::PgPool;
use tokio::sync::mpsc;

use crate::error::SqlxResultExt;

/// Channel of "jobs became ready in this queue" notifications.
pub const JOBS_CHANNEL: &str = "drover_jobs";

/// The payload on [`JOBS_CHANNEL`] that limit_set.sql and limit_clear.sql send: no queue name
/// can be `*`, so it is read as [`StoreEvent::LimitsChanged`].
pub const LIMITS_CHANGED_PAYLOAD: &str = "*";
/// Channel of "cancel requested for this running job" notifications.
pub const CANCEL_CHANNEL: &str = "drover_cancel";
/// Events buffered per subscriber before it is sent a `Resync` instead.
pub use drover_core::bounds::EVENT_BUFFER;

const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(100);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Opens a listener on its own connection and starts listening on both channels.
async fn open(listen_pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(listen_pool).await?;
    listener.listen_all([JOBS_CHANNEL, CANCEL_CHANNEL]).await?;
    Ok(listener)
}

/// Subscribes; see the module docs.
///
/// # Errors
/// `Unavailable` when the first LISTEN cannot be set up.
pub(crate) async fn subscribe(pool: &PgPool) -> Result<EventStream, Error> {
    let listen_pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .max_lifetime(None)
        .idle_timeout(None)
        .acquire_timeout(pool.options().get_acquire_timeout())
        .connect_lazy_with(pool.connect_options().as_ref().clone());
    let listener = open(&listen_pool).await.store_err()?;
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    tokio::spawn(run(pool.clone(), listen_pool, listener, tx));
    Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|event| (event, rx))
    })))
}

/// Maps a notification to an event; unknown channels and bad payloads are ignored.
fn event(notification: &PgNotification) -> Option<StoreEvent> {
    match notification.channel() {
        JOBS_CHANNEL if notification.payload() == LIMITS_CHANGED_PAYLOAD => {
            Some(StoreEvent::LimitsChanged)
        }
        JOBS_CHANNEL => QueueName::parse(notification.payload())
            .ok()
            .map(|queue| StoreEvent::JobsAvailable { queue }),
        CANCEL_CHANNEL => notification
            .payload()
            .parse::<JobId>()
            .ok()
            .map(|id| StoreEvent::CancelRequested { id }),
        _ => None,
    }
}

/// Delivers events without ever blocking the listener: when the subscriber's buffer is full,
/// remembers that events were dropped and sends a `Resync` as soon as there is room.
struct Delivery {
    tx: mpsc::Sender<StoreEvent>,
    missed: bool,
}

impl Delivery {
    /// Sends `event`; returns false when the subscriber is gone.
    fn send(&mut self, event: StoreEvent) -> bool {
        if self.missed {
            match self.tx.try_send(StoreEvent::Resync) {
                Ok(()) => self.missed = false,
                Err(mpsc::error::TrySendError::Full(_)) => return true,
                Err(mpsc::error::TrySendError::Closed(_)) => return false,
            }
        }
        match self.tx.try_send(event) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.missed = true;
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

async fn run(
    pool: PgPool,
    listen_pool: PgPool,
    mut listener: PgListener,
    tx: mpsc::Sender<StoreEvent>,
) {
    let mut delivery = Delivery { tx, missed: false };
    'outer: loop {
        let received = tokio::select! {
            () = delivery.tx.closed() => break 'outer,
            () = pool.close_event() => break 'outer,
            received = listener.try_recv() => received,
        };
        match received {
            Ok(Some(notification)) => {
                if let Some(event) = event(&notification) {
                    if !delivery.send(event) {
                        break 'outer;
                    }
                }
            }
            // The connection was lost and the listener reconnected (it re-listens on its
            // channels before answering): anything sent meanwhile was missed.
            Ok(None) => {
                if !delivery.send(StoreEvent::Resync) {
                    break 'outer;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "lost the LISTEN connection; reconnecting");
                drop(listener);
                let mut backoff = RECONNECT_BACKOFF_MIN;
                listener = loop {
                    tokio::select! {
                        () = delivery.tx.closed() => break 'outer,
                        () = pool.close_event() => break 'outer,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    match open(&listen_pool).await {
                        Ok(listener) => break listener,
                        Err(error) => {
                            tracing::debug!(%error, "LISTEN reconnect failed");
                            backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
                        }
                    }
                };
                if !delivery.send(StoreEvent::Resync) {
                    break 'outer;
                }
            }
        }
    }
    listen_pool.close().await;
}
