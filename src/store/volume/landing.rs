//! A volume's side of its landings: each write door hands its transaction's changes to the
//! stream, commits at once and joins the committer's groups in flight, answering once they
//! landed, and what waits for the stream is settled before any other write (the rules are
//! told in `store/replication.rs`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, Transaction, TransactionBehavior};

use super::committer::InFlight;
use super::{Shared, Writer};
use crate::store::replication::{Landed, Position, StreamError, record_position};
use crate::store::{StoreError, lock, redo};

/// A write's changes handed to the stream, waiting for their landing.
pub(in crate::store) struct Submitted {
    outcome: Receiver<Landed>,
    /// The outcome, once received.
    known: Option<Landed>,
    redo: Arc<[u8]>,
    /// When the write's callers are answered unavailable if it has not landed.
    deadline: Instant,
}

impl Submitted {
    /// The landing's outcome if it is known, waiting for it until `until` if given.
    pub(in crate::store) fn outcome(&mut self, until: Option<Instant>) -> Option<&Landed> {
        if self.known.is_none() {
            let received = match until {
                Some(until) => self
                    .outcome
                    .recv_timeout(until.saturating_duration_since(Instant::now()))
                    .map_err(|err| matches!(err, RecvTimeoutError::Disconnected)),
                None => self
                    .outcome
                    .try_recv()
                    .map_err(|err| matches!(err, TryRecvError::Disconnected)),
            };
            self.known = match received {
                Ok(landed) => Some(landed),
                Err(true) => Some(Err(StreamError::Stopped {
                    reason: "its thread ended".into(),
                })),
                Err(false) => None,
            };
        }
        self.known.as_ref()
    }

    pub(in crate::store) fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// A write that joined the groups in flight, until its window settles (see
/// [`Shared::commit_in_flight`]).
pub(in crate::store) struct Settling {
    settled: Receiver<Result<(), StoreError>>,
    deadline: Instant,
}

impl Settling {
    /// Waits, holding nothing, until the write's window landed and the groups before it were
    /// published, or it failed: the committer settles the groups in flight as their landings
    /// arrive. Past the deadline, with no answer yet, it settles them itself (the committer
    /// may be resting), which fails them `unavailable`.
    pub(in crate::store) fn wait(self, shared: &Shared) -> Result<(), StoreError> {
        let mut until = self.deadline;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.settled.recv_timeout(left) {
                Ok(settled) => return settled,
                Err(RecvTimeoutError::Timeout) => {
                    let _ = shared.settle_in_flight(&mut shared.door());
                    until = Instant::now() + SETTLE_AGAIN;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(StreamError::Stopped {
                        reason: "the volume closed before the write's window settled".into(),
                    }
                    .into());
                }
            }
        }
    }
}

/// How long a write past its deadline waits between settlings of the groups in flight.
const SETTLE_AGAIN: Duration = Duration::from_millis(50);

/// A landing the volume settles before any other write: its outcome was not known in time, or
/// its transaction did not commit locally.
pub(in crate::store) struct PendingLanding {
    submitted: Submitted,
    /// Whether the local file lacks the changes (its transaction rolled back or failed), so
    /// they are applied once landed.
    apply: bool,
}

impl PendingLanding {
    /// A landing whose transaction did not commit here: its changes are applied once landed.
    pub(in crate::store) fn to_apply(submitted: Submitted) -> Self {
        Self {
            submitted,
            apply: true,
        }
    }

    /// A landing of changes the file holds already (committed, not answered).
    pub(in crate::store) fn committed(submitted: Submitted) -> Self {
        Self {
            submitted,
            apply: false,
        }
    }
}

impl Shared {
    /// Makes the writing connection capture its changes, when the volume is replicated.
    pub(in crate::store) fn capture(&self, conn: &Connection) -> Result<(), StoreError> {
        match &self.replica {
            Some(_) => redo::install(conn),
            None => Ok(()),
        }
    }

    /// Hands what `tx` changed to the stream, and records in `tx` the window it goes to;
    /// `None` when the volume is not replicated or `tx` changed nothing. The landing's outcome
    /// wakes the committer. An error leaves `tx` to roll back.
    pub(in crate::store) fn submit(
        &self,
        tx: &Transaction<'_>,
    ) -> Result<Option<Submitted>, StoreError> {
        let Some(replica) = &self.replica else {
            return Ok(None);
        };
        let redo: Arc<[u8]> = redo::take(tx)?.into();
        if redo.is_empty() {
            return Ok(None);
        }
        let (landed, outcome) = std::sync::mpsc::sync_channel(1);
        let queue = self.queue.clone();
        let position = replica
            .stream
            .submit(
                replica.volume,
                redo.clone(),
                Box::new(move |outcome| {
                    let _ = landed.send(outcome);
                    queue.wake();
                }),
            )
            .map_err(|reason| self.fence(reason))?;
        record_position(tx, &position)?;
        Ok(Some(Submitted {
            outcome,
            known: None,
            redo,
            deadline: Instant::now() + replica.stream.put_retry(),
        }))
    }

    /// Runs `work` in one transaction of `writer` and commits it at once. On a replicated
    /// volume the window of what it changed joins the committer's groups in flight, to be
    /// published after them, in the stream's order: the answer's [`Settling`] tells how it
    /// ended, without the writer (`None` when nothing is to land). A transaction that fails
    /// after its changes were handed to the stream leaves them to apply once landed.
    pub(in crate::store) fn commit_in_flight<T>(
        &self,
        writer: &mut Writer,
        work: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<(T, Option<Settling>), StoreError> {
        let Writer {
            conn,
            in_flight,
            last_seq,
            ..
        } = writer;
        // Set once the changes are handed to the stream: they may land even if the commit fails.
        let mut landing = None;
        let committed = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let value = work(&tx)?;
            landing = self.submit(&tx)?;
            tx.commit()?;
            Ok::<_, StoreError>(value)
        })();
        match (committed, landing) {
            (Ok(value), None) => Ok((value, None)),
            (Ok(value), Some(landing)) => {
                let deadline = landing.deadline();
                let (waiter, settled) = std::sync::mpsc::sync_channel(1);
                in_flight.push_back(InFlight::beside_groups(landing, *last_seq, Some(waiter)));
                Ok((value, Some(Settling { settled, deadline })))
            }
            (Err(err), landing) => {
                if let Some(landing) = landing {
                    *lock(&self.pending) = Some(PendingLanding::to_apply(landing));
                }
                Err(err)
            }
        }
    }

    /// Refuses writes for good when the stream answered a final `reason` (fenced by another
    /// owner, or stopped); answers the error for the write.
    pub(in crate::store) fn fence(&self, reason: StreamError) -> StoreError {
        if !reason.is_final() {
            return reason.into();
        }
        let reason = self.fenced.get_or_init(|| {
            log::error!("{}: refusing writes: {reason}", self.path.display());
            reason
        });
        reason.clone().into()
    }

    /// Settles what waits for the stream before any other write of the volume: publishes the
    /// committer's groups that landed (see `volume/committer.rs`), then a landing that was
    /// not known in time or did not commit here: once it landed, applies its changes if the
    /// file lacks them and reloads what memory holds of the volume (a recovery: stores opened
    /// before refuse writes and reopen, seeing the landed changes); until its outcome is
    /// known, refuses writes. Called by every write door under the writer lock, and by the
    /// committer when a landing's outcome arrives or it is idle.
    pub(in crate::store) fn settle_landing(&self, writer: &mut Writer) -> Result<(), StoreError> {
        // First: groups in flight are answered even once the volume is fenced (the stream
        // answers every window it will not store).
        self.settle_in_flight(writer)?;
        if let Some(reason) = self.fenced.get() {
            return Err(reason.clone().into());
        }
        // Taken out of its lock: the recovery below runs the write doors again.
        let Some(mut landing) = lock(&self.pending).take() else {
            return Ok(());
        };
        match landing.submitted.outcome(None).cloned() {
            // Earlier windows landed first; their groups are published before the reload.
            Some(Ok(position)) if writer.in_flight_is_empty() => {
                if landing.apply
                    && let Err(err) = self.apply_landed(writer, &landing.submitted.redo, &position)
                {
                    return Err(self.write_failed(err));
                }
                self.recover(writer)
            }
            Some(Err(reason)) => Err(self.fence(reason)),
            _ => {
                *lock(&self.pending) = Some(landing);
                Err(StreamError::Unsettled.into())
            }
        }
    }

    /// Applies the landed changes `redo` the file lacks, at `position`, on a writer reopened
    /// if a failure poisoned it.
    fn apply_landed(
        &self,
        writer: &mut Writer,
        redo: &[u8],
        position: &Position,
    ) -> Result<(), StoreError> {
        if self.poisoned.load(Ordering::SeqCst) {
            self.recover(writer)?;
        }
        let tx = writer
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        redo::apply(&tx, redo)?;
        // The replay was captured like any write; it is in the stream already.
        redo::take(&tx)?;
        record_position(&tx, position)?;
        tx.commit()?;
        Ok(())
    }
}
