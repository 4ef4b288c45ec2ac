//! The queue between a volume's partitions and its committer thread: the shares of the next
//! group commit, which the committer takes all at once ([`CommitQueue::next_group`]).
//! `docs/append-pipeline.md` tells where it sits in an append's path and why the committer
//! waits for as many batches as its last commit answered.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use std::sync::Arc;

use super::batch::{AppendOutcome, AppendRejection, NewRecord};
use super::tail::PartitionTail;
use super::{StoreError, lock};
use crate::clock::Clock;

/// A group commit's share of one caller: its batches, checked, and where the answer goes.
pub(super) struct AppendRequest {
    pub partition: Arc<PartitionTail>,
    /// The volume epoch the store was opened under: refused under any other.
    pub epoch: u64,
    pub clock: Arc<dyn Clock>,
    /// Each batch with its definite rejection, if any (rejected batches write nothing).
    pub batches: Vec<(Vec<NewRecord>, Option<AppendRejection>)>,
    pub reply: AppendReply,
    /// Told when the share committed locally but its answer waits for the replica's stream
    /// (never otherwise): the caller may send its next share meanwhile.
    pub committed: Option<Committed>,
}

/// What a group commit answers each caller: one outcome per batch, and the partition's
/// backlog after the commit.
pub type AppendResult = Result<(Vec<AppendOutcome>, u64), StoreError>;
/// Where a group commit's answer goes (called on the committer thread).
pub type AppendReply = Box<dyn FnOnce(AppendResult) + Send>;
/// Called on the committer thread once a share committed locally and waits for its landing.
pub type Committed = Box<dyn FnOnce() + Send>;

/// Shares of the next group commit. See the module docs.
#[derive(Default)]
pub(super) struct CommitQueue {
    state: Mutex<State>,
    arrived: Condvar,
}

#[derive(Default)]
struct State {
    shares: Vec<AppendRequest>,
    /// Batches in `shares`.
    batches: usize,
    /// Batches that make a push wake the committer (0: the committer is not waiting).
    wanted: usize,
    /// A landing's outcome arrived (see [`CommitQueue::wake`]).
    woken: bool,
    closed: bool,
}

/// What the committer gets from [`CommitQueue::next_group`].
pub(super) enum Next {
    /// Shares to commit together.
    Group(Vec<AppendRequest>),
    /// Nothing arrived for the idle time.
    Idle,
    /// No share, but the outcome of a landing the committer waits for.
    Landed,
    /// The queue is closed and empty: the committer stops.
    Closed,
}

impl CommitQueue {
    /// Queues a share, or gives it back if the queue is closed.
    pub fn push(&self, share: AppendRequest) -> Result<(), AppendRequest> {
        let mut state = lock(&self.state);
        if state.closed {
            return Err(share);
        }
        state.batches += share.batches.len();
        state.shares.push(share);
        if state.wanted != 0 && state.batches >= state.wanted {
            state.wanted = 0;
            self.arrived.notify_one();
        }
        Ok(())
    }

    /// Wakes the committer: the outcome of a landing it waits for arrived.
    pub fn wake(&self) {
        let mut state = lock(&self.state);
        state.woken = true;
        if state.wanted != 0 {
            self.arrived.notify_one();
        }
    }

    /// Refuses further shares; the committer commits what is queued, then stops.
    pub fn close(&self) {
        lock(&self.state).closed = true;
        self.arrived.notify_one();
    }

    /// Waits up to `idle` for a first share (or a landing's outcome), then up to `gather` more
    /// until `expected` batches are queued, and takes them all.
    pub fn next_group(&self, idle: Duration, expected: usize, gather: Duration) -> Next {
        let mut state = lock(&self.state);
        state.wanted = 1;
        state = self.wait(state, idle);
        let woken = std::mem::take(&mut state.woken);
        if state.shares.is_empty() {
            state.wanted = 0;
            return if state.closed {
                Next::Closed
            } else if woken {
                Next::Landed
            } else {
                Next::Idle
            };
        }
        state.wanted = expected.max(1);
        state = self.wait(state, gather);
        state.wanted = 0;
        state.batches = 0;
        Next::Group(std::mem::take(&mut state.shares))
    }

    /// Waits until `wanted` batches are queued, the queue is closed, or `timeout` passes.
    fn wait<'a>(
        &self,
        state: std::sync::MutexGuard<'a, State>,
        timeout: Duration,
    ) -> std::sync::MutexGuard<'a, State> {
        self.arrived
            .wait_timeout_while(state, timeout, |state| {
                state.batches < state.wanted && !state.closed && !state.woken
            })
            .map_or_else(|poison| poison.into_inner().0, |(state, _)| state)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::AppendRequest;
    use super::{CommitQueue, Next};
    use crate::clock::SystemClock;
    use crate::store::NewRecord;
    use crate::store::tail::PartitionTail;

    fn share(batches: usize) -> AppendRequest {
        AppendRequest {
            partition: Arc::new(PartitionTail::new(
                1,
                Default::default(),
                Default::default(),
                Default::default(),
            )),
            epoch: 0,
            clock: Arc::new(SystemClock),
            batches: (0..batches)
                .map(|_| (vec![NewRecord::new("1")], None))
                .collect(),
            reply: Box::new(|_| {}),
            committed: None,
        }
    }

    fn group(next: Next) -> Vec<AppendRequest> {
        match next {
            Next::Group(group) => group,
            Next::Idle => panic!("idle"),
            Next::Landed => panic!("landed"),
            Next::Closed => panic!("closed"),
        }
    }

    #[test]
    fn a_commit_waits_for_as_many_batches_as_the_last_one_answered() {
        let queue = Arc::new(CommitQueue::default());
        queue.push(share(2)).ok().unwrap();
        let late = std::thread::spawn({
            let queue = queue.clone();
            move || {
                std::thread::sleep(Duration::from_millis(50));
                queue.push(share(1)).ok().unwrap();
            }
        });
        let next = queue.next_group(Duration::from_secs(60), 3, Duration::from_secs(60));
        late.join().unwrap();
        assert_eq!(group(next).len(), 2, "the late share joins the group");
    }

    #[test]
    fn a_commit_waits_no_longer_than_its_bound_for_batches_that_do_not_come() {
        let queue = CommitQueue::default();
        queue.push(share(1)).ok().unwrap();
        let started = Instant::now();
        let next = queue.next_group(Duration::from_secs(60), 50, Duration::from_millis(20));
        assert_eq!(group(next).len(), 1);
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn nothing_queued_is_idle_and_a_closed_queue_refuses_shares_after_its_last_group() {
        let queue = CommitQueue::default();
        assert!(matches!(
            queue.next_group(Duration::from_millis(1), 1, Duration::ZERO),
            Next::Idle
        ));
        queue.push(share(1)).ok().unwrap();
        queue.close();
        assert!(queue.push(share(1)).is_err());
        assert_eq!(
            group(queue.next_group(Duration::from_secs(60), 1, Duration::ZERO)).len(),
            1
        );
        assert!(matches!(
            queue.next_group(Duration::from_secs(60), 1, Duration::ZERO),
            Next::Closed
        ));
    }
}
