//! The queue between a volume's partitions and its committer: the shares of the next
//! group commit, which the committer takes all at once ([`CommitQueue::next_group`]).
//! `docs/append-pipeline.md` tells where it sits in an append's path and why the committer
//! waits for as many batches as its last commit answered.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

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
/// Where a group commit's answer goes (called on the committer's thread).
pub type AppendReply = Box<dyn FnOnce(AppendResult) + Send>;
/// Called on the committer's thread once a share committed locally and waits for its landing.
pub type Committed = Box<dyn FnOnce() + Send>;

/// Shares of the next group commit. See the module docs.
pub(super) struct CommitQueue {
    state: Mutex<State>,
    arrived: Condvar,
    /// Signalled when the committer stopped.
    stopped: Condvar,
    /// Schedules a step of the committer (on its pool, see `volume/pool.rs`).
    schedule: Box<dyn Fn() + Send + Sync>,
}

#[derive(Default)]
struct State {
    shares: Vec<AppendRequest>,
    /// Batches in `shares`.
    batches: usize,
    /// Batches that make a push wake the committer (0: the committer is not gathering).
    wanted: usize,
    /// A landing's outcome arrived (see [`CommitQueue::wake`]).
    woken: bool,
    closed: bool,
    /// A step of the committer is scheduled or running: arrivals need not schedule another.
    scheduled: bool,
    /// The committer's idle step is due then (see [`CommitQueue::set_timer`]).
    idle_at: Option<Instant>,
    /// The committer drained the closed queue and stopped for good.
    stopped: bool,
}

/// What the committer gets from [`CommitQueue::next_group`].
pub(super) enum Next {
    /// Shares to commit together.
    Group(Vec<AppendRequest>),
    /// Nothing queued.
    Idle,
    /// No share, but the outcome of a landing the committer waits for.
    Landed,
    /// The queue is closed and empty: the committer stops.
    Closed,
}

impl CommitQueue {
    /// A queue whose arrivals call `schedule` when no step of the committer is scheduled.
    pub fn new(schedule: Box<dyn Fn() + Send + Sync>) -> Self {
        Self {
            state: Mutex::default(),
            arrived: Condvar::new(),
            stopped: Condvar::new(),
            schedule,
        }
    }

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
        self.schedule_unless_scheduled(state);
        Ok(())
    }

    /// Wakes the committer: the outcome of a landing it waits for arrived.
    pub fn wake(&self) {
        let mut state = lock(&self.state);
        state.woken = true;
        if state.wanted != 0 {
            self.arrived.notify_one();
        }
        self.schedule_unless_scheduled(state);
    }

    /// Refuses further shares; the committer commits what is queued, then stops.
    pub fn close(&self) {
        let mut state = lock(&self.state);
        state.closed = true;
        self.arrived.notify_one();
        self.schedule_unless_scheduled(state);
    }

    /// Whether the queue was closed: its volume takes no more appends.
    pub fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    /// Schedules a step of the committer, outside the queue's lock, unless one is scheduled
    /// already or the committer stopped.
    fn schedule_unless_scheduled(&self, mut state: std::sync::MutexGuard<'_, State>) {
        if state.scheduled || state.stopped {
            return;
        }
        state.scheduled = true;
        drop(state);
        (self.schedule)();
    }

    /// Takes what is queued: if a share is, waits up to `gather` more until `expected`
    /// batches are queued, and takes them all. Never waits for a first share.
    pub fn next_group(&self, expected: usize, gather: Duration) -> Next {
        let mut state = lock(&self.state);
        let woken = std::mem::take(&mut state.woken);
        if state.shares.is_empty() {
            return if state.closed {
                Next::Closed
            } else if woken {
                Next::Landed
            } else {
                Next::Idle
            };
        }
        state.wanted = expected.max(1);
        state = self
            .arrived
            .wait_timeout_while(state, gather, |state| {
                state.batches < state.wanted && !state.closed && !state.woken
            })
            .map_or_else(|poison| poison.into_inner().0, |(state, _)| state);
        state.wanted = 0;
        state.batches = 0;
        Next::Group(std::mem::take(&mut state.shares))
    }

    /// Ends a step of the committer that found the volume's writer held by another write (see
    /// `volume/committer.rs`): the shares it took (`group`) go back to the front of the queue,
    /// and nothing is scheduled until [`CommitQueue::wake`] (which that write calls once it
    /// lets the writer go) or the next arrival.
    pub fn yield_step(&self, group: Option<Vec<AppendRequest>>) {
        let mut state = lock(&self.state);
        if let Some(mut group) = group {
            state.batches += group.iter().map(|share| share.batches.len()).sum::<usize>();
            group.append(&mut state.shares);
            state.shares = group;
        }
        // Whatever the step was to settle waits for the next one.
        state.woken = true;
        state.scheduled = false;
    }

    /// Ends a step of the committer: `true` when more is queued and it should run again at
    /// once (it stays scheduled); otherwise nothing is scheduled until the next arrival.
    pub fn step_done(&self) -> bool {
        let mut state = lock(&self.state);
        let more = !state.shares.is_empty() || state.woken || (state.closed && !state.stopped);
        state.scheduled = more;
        more
    }

    /// Asks for the committer's idle step at `at`: `true` when the caller must set that timer;
    /// `false` when an earlier one is set already (the idle step then sets the next).
    pub fn set_timer(&self, at: Instant) -> bool {
        let mut state = lock(&self.state);
        if state.idle_at.is_some_and(|set| set <= at) {
            return false;
        }
        state.idle_at = Some(at);
        true
    }

    /// A timer set for `at` fired: `true` when the idle step must run now (it is the timer
    /// set last, and no step is scheduled, which would set its own).
    pub fn timer_fired(&self, at: Instant) -> bool {
        let mut state = lock(&self.state);
        if state.idle_at != Some(at) {
            return false;
        }
        state.idle_at = None;
        if state.scheduled || state.stopped {
            return false;
        }
        state.scheduled = true;
        true
    }

    /// The committer drained the closed queue and stopped for good.
    pub fn stop(&self) {
        let mut state = lock(&self.state);
        state.stopped = true;
        state.scheduled = false;
        self.stopped.notify_all();
    }

    /// Waits until the committer stopped (see [`CommitQueue::close`]).
    pub fn wait_stopped(&self) {
        let state = lock(&self.state);
        drop(
            self.stopped
                .wait_while(state, |state| !state.stopped)
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
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

    fn queue() -> CommitQueue {
        CommitQueue::new(Box::new(|| {}))
    }

    /// A queue that counts the steps it schedules.
    fn counted() -> (CommitQueue, Arc<AtomicUsize>) {
        let scheduled = Arc::new(AtomicUsize::new(0));
        let queue = CommitQueue::new(Box::new({
            let scheduled = scheduled.clone();
            move || {
                scheduled.fetch_add(1, Ordering::SeqCst);
            }
        }));
        (queue, scheduled)
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
        let queue = Arc::new(queue());
        queue.push(share(2)).ok().unwrap();
        let late = std::thread::spawn({
            let queue = queue.clone();
            move || {
                std::thread::sleep(Duration::from_millis(50));
                queue.push(share(1)).ok().unwrap();
            }
        });
        let next = queue.next_group(3, Duration::from_secs(60));
        late.join().unwrap();
        assert_eq!(group(next).len(), 2, "the late share joins the group");
    }

    #[test]
    fn a_commit_waits_no_longer_than_its_bound_for_batches_that_do_not_come() {
        let queue = queue();
        queue.push(share(1)).ok().unwrap();
        let started = Instant::now();
        let next = queue.next_group(50, Duration::from_millis(20));
        assert_eq!(group(next).len(), 1);
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn nothing_queued_is_idle_and_a_closed_queue_refuses_shares_after_its_last_group() {
        let queue = queue();
        assert!(matches!(queue.next_group(1, Duration::ZERO), Next::Idle));
        queue.push(share(1)).ok().unwrap();
        queue.close();
        assert!(queue.push(share(1)).is_err());
        assert_eq!(group(queue.next_group(1, Duration::ZERO)).len(), 1);
        assert!(matches!(queue.next_group(1, Duration::ZERO), Next::Closed));
    }

    #[test]
    fn arrivals_schedule_one_step_until_the_step_finds_nothing_more() {
        let (queue, scheduled) = counted();
        queue.push(share(1)).ok().unwrap();
        queue.push(share(1)).ok().unwrap();
        queue.wake();
        assert_eq!(
            scheduled.load(Ordering::SeqCst),
            1,
            "one step for all three"
        );
        assert_eq!(group(queue.next_group(1, Duration::ZERO)).len(), 2);
        assert!(
            !queue.step_done(),
            "the group's commit settles the landing too"
        );
        queue.wake();
        assert_eq!(
            scheduled.load(Ordering::SeqCst),
            2,
            "the next arrival schedules again"
        );
        assert!(matches!(queue.next_group(1, Duration::ZERO), Next::Landed));
        queue.push(share(1)).ok().unwrap();
        assert!(queue.step_done(), "a share arrived during the step");
        assert_eq!(
            scheduled.load(Ordering::SeqCst),
            2,
            "the step runs again instead"
        );
        assert_eq!(group(queue.next_group(1, Duration::ZERO)).len(), 1);
        assert!(!queue.step_done());
    }

    #[test]
    fn only_the_earliest_timer_runs_the_idle_step_and_never_beside_a_scheduled_step() {
        let (queue, scheduled) = counted();
        let now = Instant::now();
        let (early, late) = (
            now + Duration::from_millis(20),
            now + Duration::from_secs(5),
        );
        assert!(queue.set_timer(late));
        assert!(queue.set_timer(early), "an earlier timer replaces it");
        assert!(
            !queue.set_timer(late),
            "a later one waits for the earlier one"
        );
        assert!(!queue.timer_fired(late), "replaced");
        assert!(queue.timer_fired(early));
        assert!(!queue.step_done());
        assert!(queue.set_timer(early));
        queue.push(share(1)).ok().unwrap();
        assert_eq!(scheduled.load(Ordering::SeqCst), 1);
        assert!(!queue.timer_fired(early), "the scheduled step runs instead");
    }

    #[test]
    fn a_closed_queue_schedules_its_last_step_and_reports_the_stop() {
        let (queue, scheduled) = counted();
        queue.close();
        assert_eq!(scheduled.load(Ordering::SeqCst), 1);
        assert!(matches!(queue.next_group(1, Duration::ZERO), Next::Closed));
        assert!(queue.step_done(), "not stopped yet");
        queue.stop();
        queue.wait_stopped();
        queue.wake();
        assert_eq!(
            scheduled.load(Ordering::SeqCst),
            1,
            "nothing runs after the stop"
        );
    }
}
