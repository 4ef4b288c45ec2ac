//! The scrub: every volume of the node is checked in the background, whether or not anyone
//! reads it, so that damage is found before a reader meets it.
//!
//! One thread per node (per [`Volumes`]) visits each open volume in turn: SQLite's own
//! `integrity_check`, then every record's checksum and the contiguity of every partition's
//! offsets, then the lookup index against the records (what one volume's check does is told in
//! `volume/scrub.rs`). Damage found is handed to the volume as a read meeting it would: the
//! volume is marked damaged, refuses writes, and remembers it across restarts.
//!
//! The scrub takes a bounded share of the machine: after each step (a chunk of rows, or
//! SQLite's check) it rests four times as long as the step took, so it runs at most a fifth of
//! the time on one core, and its reads are spread out as much. A pass over every volume starts
//! one interval (`storage.scrub_interval_ms`) after the previous one started, or at once when
//! the previous one took longer; the first starts one interval after the volumes open, or a
//! minute after if the interval is longer (so a restart's own work comes first, and a node that
//! restarts more often than the interval is still scrubbed).
//!
//! Lock order: [`Stop`]'s two locks are never held together.

use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use super::volume::ScrubCounters;
use super::volume::{Pace, Scrubbed, Stop};
use super::{StoreError, Volume, Volumes, lock};

/// The longest wait before the first pass after the volumes open.
const FIRST_PASS_AFTER: Duration = Duration::from_secs(60);

/// The scrub of a data folder's volumes, owned by its [`Volumes`]: its counters, and its thread
/// once started.
pub(super) struct Scrubber {
    counters: Arc<ScrubCounters>,
    stop: Arc<Stop>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Scrubber {
    /// A scrub, not started.
    pub(super) fn new() -> Self {
        Self {
            counters: Arc::default(),
            stop: Arc::default(),
            thread: Mutex::new(None),
        }
    }

    /// What the scrub did so far.
    pub(super) fn counters(&self) -> Arc<ScrubCounters> {
        self.counters.clone()
    }

    /// Starts the scrub's thread over `volumes`, one pass every `interval`, unless it runs
    /// already or was stopped.
    ///
    /// # Errors
    /// When the thread cannot be had.
    pub(super) fn start(&self, volumes: Weak<Volumes>, interval: Duration) -> std::io::Result<()> {
        let mut thread = lock(&self.thread);
        if thread.is_some() || self.stop.is_stopped() {
            return Ok(());
        }
        let (stop, counters) = (self.stop.clone(), self.counters.clone());
        *thread = Some(
            std::thread::Builder::new()
                .name("durability-scrub".to_owned())
                .spawn(move || run(&volumes, &stop, &counters, interval))?,
        );
        Ok(())
    }

    /// Stops the scrub and waits for its thread to end: at most the step it runs (SQLite's
    /// check is interrupted).
    pub(super) fn stop(&self) {
        self.stop.stop();
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            log::error!("the scrub's thread panicked");
        }
    }

    /// Tells the scrub to stop, without waiting (from a drop, which may run on its thread).
    pub(super) fn signal_stop(&self) {
        self.stop.stop();
    }
}

/// The scrub's thread: a pass over every open volume each `interval`, until told to stop or
/// the volumes are gone.
fn run(volumes: &Weak<Volumes>, stop: &Stop, counters: &ScrubCounters, interval: Duration) {
    let pace = Pace::paced(stop);
    let mut next = Instant::now().checked_add(interval.min(FIRST_PASS_AFTER));
    loop {
        let Some(at) = next else {
            return; // the interval reaches past the end of time
        };
        if !stop.wait_until(at) {
            return;
        }
        let started = Instant::now();
        // The list is taken at the start of a pass: a volume opened meanwhile waits for the
        // next. Held weakly (see `Volume::scrub_paced`): a volume closed meanwhile is let go.
        let Some(open) = volumes.upgrade().map(|volumes| volumes.open_volumes()) else {
            return;
        };
        let open: Vec<Weak<Volume>> = open.into_iter().map(|v| Arc::downgrade(&v)).collect();
        for volume in open {
            if pace.stopped() {
                return;
            }
            let undamaged = volume.upgrade().filter(|volume| volume.damage().is_none());
            let Some(path) = undamaged.map(|volume| volume.path().to_owned()) else {
                continue;
            };
            match Volume::scrub_paced(&volume, &pace, counters) {
                Ok(Scrubbed::Clean | Scrubbed::Cut) => {}
                // Marking the volume logged it (and started its rebuild, if it is replicated).
                Err(StoreError::Corrupted { .. } | StoreError::Healing { .. }) => {
                    counters.count_damage();
                }
                Err(err) => log::warn!(
                    "{}: the scrub could not check it, it tries again next pass: {err}",
                    path.display()
                ),
            }
        }
        counters.pass_ended();
        next = started.checked_add(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{CommitterPool, LogStore, NewRecord, StoreOptions, SyncMode};

    /// The scrub of a data folder runs passes over its volumes, counted in its counters, and
    /// closing the volumes stops it for good.
    #[test]
    fn the_scrub_passes_over_the_volumes_until_they_close() {
        let dir = tempfile::tempdir().expect("temp dir");
        let volumes = Volumes::open(dir.path(), 2, SyncMode::Normal, None, CommitterPool::new(1))
            .expect("open the volumes");
        let volumes = Arc::new(volumes);
        for volume in volumes.open_volumes() {
            let options = StoreOptions::default().sync(SyncMode::Normal);
            let store = LogStore::open_in(&volume, "events", 0, options, true)
                .expect("open a partition")
                .expect("created");
            let batch = vec![NewRecord::new("{}"); 10];
            assert!(store.append(&batch).expect("append").is_appended());
        }
        volumes.start_scrub(Some(Duration::from_millis(1)));
        let counters = volumes.scrub_counters();
        let deadline = Instant::now() + Duration::from_secs(10);
        while counters.last_pass() == 0 {
            assert!(Instant::now() < deadline, "no pass ended");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(counters.records_checked() >= 20, "both volumes checked");
        assert_eq!(counters.damage_found(), 0);

        volumes.close();
        let checked = counters.records_checked();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            counters.records_checked(),
            checked,
            "no pass after the close"
        );
        volumes.start_scrub(Some(Duration::from_millis(1)));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            counters.records_checked(),
            checked,
            "a stopped scrub stays stopped"
        );
    }
}
