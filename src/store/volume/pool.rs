//! `CommitterPool`: the threads that run the committers of a node's volumes, so a node's thread
//! count follows its pool size, not the volumes it holds.
//!
//! A volume's committer runs in steps (`Shared::committer_step`): one group commit, one
//! landing settled, one idle pass, or the final drain. The volume's commit queue schedules a
//! step when a share or a landing's outcome arrives, or the volume closes; a step that finds
//! nothing more to do asks for a timer instead, for its idle work (indexing, the high-water
//! mark, the deadline of a window in flight). A volume runs on one thread at a time, so its
//! commits keep their order; different volumes commit, and fsync, on different threads at once,
//! up to the pool's size.
//!
//! Threads start when work arrives and none is free, up to the pool's size, and stop once no
//! volume is registered. Lock order: the pool's lock is never held while taking a volume's.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Instant;

use super::Shared;
use crate::store::{StoreError, lock};

/// What a committer step leaves for the pool to do.
pub(in crate::store) enum After {
    /// More work is queued: run the volume again (after the volumes already waiting).
    Again,
    /// Nothing queued: run the volume's idle step at this time.
    IdleAt(Instant),
    /// Nothing queued, and no idle work due.
    Rest,
    /// The volume closed and its committer stopped for good.
    Stopped,
}

/// Threads that run volumes' committers. See the module docs. Cloning shares the pool.
#[derive(Clone)]
pub struct CommitterPool {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// Signalled when a volume is ready, a timer is set, or the last volume left.
    work: Condvar,
    max_threads: usize,
}

#[derive(Default)]
struct State {
    /// Volumes whose committer has a step to run, in arrival order.
    ready: VecDeque<Arc<Shared>>,
    timers: BinaryHeap<Reverse<Timer>>,
    threads: usize,
    /// Threads waiting for work.
    waiting: usize,
    /// Volumes whose committer has not stopped.
    volumes: usize,
    /// Numbers the threads' names.
    started: usize,
}

/// A volume's idle step, due at `at`; dropped unrun when the volume is gone or set a newer
/// timer since (see `CommitQueue::timer_fired`).
struct Timer {
    at: Instant,
    volume: Weak<Shared>,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Timer {}

impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timer {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.at.cmp(&other.at)
    }
}

impl CommitterPool {
    /// A pool of at most `max_threads` threads (at least one).
    pub fn new(max_threads: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::default(),
                work: Condvar::new(),
                max_threads: max_threads.max(1),
            }),
        }
    }

    /// Threads running now.
    pub fn threads(&self) -> usize {
        lock(&self.inner.state).threads
    }

    /// Threads running a committer's step now (the others wait for work).
    pub fn busy(&self) -> usize {
        let state = lock(&self.inner.state);
        state.threads - state.waiting
    }

    /// Counts a volume whose committer runs here until it stops, and makes sure a thread runs
    /// to serve it.
    ///
    /// # Errors
    /// [`StoreError::Thread`] when no thread runs and none can start.
    pub(super) fn register(&self) -> Result<(), StoreError> {
        let mut state = lock(&self.inner.state);
        if state.threads == 0 {
            self.inner.spawn(&mut state)?;
        }
        state.volumes += 1;
        Ok(())
    }

    /// Runs a step of `volume`'s committer on a free thread.
    pub(super) fn run(&self, volume: Arc<Shared>) {
        self.inner.run(volume);
    }
}

impl Inner {
    fn run(self: &Arc<Self>, volume: Arc<Shared>) {
        let mut state = lock(&self.state);
        state.ready.push_back(volume);
        self.wake_or_spawn(&mut state);
    }

    /// Queues `volume` from a thread of the pool, which runs the next ready volume itself
    /// right after: another thread is woken (or started) only when more volumes wait.
    fn run_next(self: &Arc<Self>, volume: Arc<Shared>) {
        let mut state = lock(&self.state);
        state.ready.push_back(volume);
        if state.ready.len() > 1 {
            self.wake_or_spawn(&mut state);
        }
    }

    fn set_timer(self: &Arc<Self>, at: Instant, volume: Weak<Shared>) {
        let mut state = lock(&self.state);
        state.timers.push(Reverse(Timer { at, volume }));
        // A waiting thread recomputes how long it sleeps.
        if state.waiting > 0 {
            self.work.notify_one();
        }
    }

    fn wake_or_spawn(self: &Arc<Self>, state: &mut State) {
        if state.waiting > 0 {
            self.work.notify_one();
        } else if state.threads < self.max_threads
            && let Err(err) = self.spawn(state)
        {
            // The threads running serve the volume once free.
            log::warn!("cannot start another committer thread: {err}");
        }
    }

    fn spawn(self: &Arc<Self>, state: &mut State) -> Result<(), StoreError> {
        let inner = self.clone();
        std::thread::Builder::new()
            .name(format!("durability-commit-{}", state.started))
            .spawn(move || inner.serve())
            .map_err(StoreError::Thread)?;
        state.started += 1;
        state.threads += 1;
        Ok(())
    }

    /// A thread of the pool: runs ready volumes' steps and due timers, until no volume is
    /// registered.
    fn serve(self: Arc<Self>) {
        let mut state = lock(&self.state);
        loop {
            if let Some(volume) = state.ready.pop_front() {
                drop(state);
                let after = volume.committer_step();
                match after {
                    After::Again => self.run_next(volume.clone()),
                    After::IdleAt(at) => {
                        if volume.queue.set_timer(at) {
                            self.set_timer(at, Arc::downgrade(&volume));
                        }
                    }
                    After::Rest => {}
                    After::Stopped => {
                        let mut state = lock(&self.state);
                        state.volumes -= 1;
                        if state.volumes == 0 {
                            self.work.notify_all();
                        }
                    }
                }
                drop(volume);
                state = lock(&self.state);
                continue;
            }
            let now = Instant::now();
            let mut due = Vec::new();
            while let Some(Reverse(timer)) = state.timers.peek()
                && timer.at <= now
            {
                due.push(state.timers.pop().expect("a timer was peeked").0);
            }
            if !due.is_empty() {
                drop(state);
                for timer in due {
                    if let Some(volume) = timer.volume.upgrade()
                        && volume.queue.timer_fired(timer.at)
                    {
                        self.run_next(volume);
                    }
                }
                state = lock(&self.state);
                continue;
            }
            if state.volumes == 0 {
                state.timers.clear();
                state.threads -= 1;
                return;
            }
            state.waiting += 1;
            state = match state.timers.peek() {
                Some(Reverse(timer)) => {
                    let timeout = timer.at.saturating_duration_since(now);
                    self.work
                        .wait_timeout(state, timeout)
                        .map_or_else(|poison| poison.into_inner().0, |(state, _)| state)
                }
                None => self
                    .work
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            };
            state.waiting -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::CommitterPool;
    use crate::store::volume::Volume;
    use crate::store::{AppendOutcome, LogStore, NewRecord, StoreOptions, SyncMode};

    /// Polls `done` for up to a minute.
    fn eventually(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn many_volumes_commit_on_no_more_threads_than_the_pool_has() {
        let dir = tempfile::tempdir().unwrap();
        let pool = CommitterPool::new(2);
        let volumes: Vec<Arc<Volume>> = (0..12)
            .map(|index| {
                Volume::open_in(
                    dir.path().join(format!("v{index}.sqlite")),
                    SyncMode::Normal,
                    None,
                    &pool,
                )
                .unwrap()
            })
            .collect();
        let appenders: Vec<_> = volumes
            .iter()
            .map(|volume| {
                let volume = volume.clone();
                std::thread::spawn(move || {
                    let store =
                        LogStore::open_in(&volume, "events", 0, StoreOptions::default(), true)
                            .unwrap()
                            .unwrap();
                    for round in 0..20 {
                        let appended = store.append(&[NewRecord::new("r")]).unwrap();
                        assert!(
                            matches!(appended, AppendOutcome::Appended { ref offsets } if offsets == &[round]),
                            "{appended:?}"
                        );
                    }
                })
            })
            .collect();
        for appender in appenders {
            appender.join().unwrap();
        }
        assert!(pool.threads() <= 2, "{} threads", pool.threads());
        for volume in &volumes {
            volume.close().unwrap();
        }
        drop(volumes);
        eventually("the threads stop once no volume is left", || {
            pool.threads() == 0
        });
    }
}
