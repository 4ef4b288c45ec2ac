//! Long-polls: waiting for records until they come, the wait ends, or a shutdown releases
//! the wait.

use std::time::{Duration, Instant};

use crate::error::Error;

/// Calls `read` until its answer holds records (`found`) or `wait` has passed, sleeping on
/// `signals` in between (any of them wakes it): the one long-poll rule for reads, group polls
/// and the Kafka listener's fetches. The wake-ups are registered before each read, so a commit
/// between the read and the wait still wakes it.
pub(super) async fn until_records<T>(
    signals: &[&tokio::sync::Notify],
    released: &WaitsReleased,
    wait: Duration,
    mut read: impl AsyncFnMut() -> Result<T, Error>,
    found: impl Fn(&T) -> bool,
) -> Result<T, Error> {
    let deadline = Instant::now() + wait;
    loop {
        let mut appended: Vec<_> = signals
            .iter()
            .map(|signal| Box::pin(signal.notified()))
            .collect();
        let stopping = released.notify.notified();
        tokio::pin!(stopping);
        for notified in &mut appended {
            notified.as_mut().enable();
        }
        stopping.as_mut().enable();
        let answer = read().await?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if found(&answer) || remaining.is_zero() || released.is_set() {
            return Ok(answer);
        }
        // Woken or timed out, read again: after the deadline that read is the answer.
        let _ = actix::clock::timeout(remaining, async {
            tokio::select! {
                () = any(appended) => {}
                () = stopping => {}
            }
        })
        .await;
    }
}

/// Resolves when any of `notified` does; never, for none.
async fn any<F: std::future::Future<Output = ()> + Unpin>(notified: Vec<F>) {
    if notified.is_empty() {
        std::future::pending::<()>().await;
    }
    futures_util::future::select_all(notified).await;
}

/// Whether long-polls must answer at once, and their wake-up when that starts.
#[derive(Default)]
pub(super) struct WaitsReleased {
    released: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl WaitsReleased {
    pub(super) fn is_set(&self) -> bool {
        self.released.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(super) fn release(&self) {
        self.released
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}
