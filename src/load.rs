//! Load snapshots: how busy a partition is, so a router can steer producers toward the
//! partition that will serve them soonest.
//!
//! A [`LoadObserver`] brackets each request with [`LoadObserver::begin_inbound`] (or
//! [`LoadObserver::begin_outbound`]) and [`LoadObserver::finish`]. In-flight counts are
//! instantaneous; completions and their durations are kept in one-second buckets covering the
//! last [`WINDOW_MS`], so a burst an hour ago does not make a partition look slow now. The
//! backlog (`pendingDeliveries`) is not observed here: it comes from durable cursors and is
//! passed in when the snapshot is taken.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use utoipa::ToSchema;

use crate::clock::Clock;

/// How far back completions are counted, in ms. A snapshot reports it as `windowMs` so a reader
/// knows how long the numbers stay meaningful (the router forgets a snapshot after it).
pub const WINDOW_MS: u64 = 60_000;

/// Width of one completion bucket: completions age out of the window one second at a time.
const BUCKET_MS: i64 = 1_000;

/// Buckets in the window (60).
const BUCKETS: i64 = WINDOW_MS as i64 / BUCKET_MS;

/// Request ids, unique in the process, so a token finished on the wrong observer matches
/// nothing there and is ignored instead of ending someone else's request.
static NEXT_REQUEST_ID: AtomicU64 = AtomicU64::new(0);

/// A partition's load at one moment: what a router compares to pick where to send work.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadSnapshot {
    /// When the snapshot was taken, in ms since the Unix epoch; a newer snapshot replaces an
    /// older one, never the reverse.
    pub observed_at: i64,
    /// How long the snapshot stays meaningful, in ms: the window over which `completed` and
    /// `averageProcessingMs` are measured.
    pub window_ms: u64,
    /// Requests into the partition (appends).
    pub inbound: Pressure,
    /// Work going out of the partition (deliveries), plus the consumers' backlog.
    pub outbound: OutboundPressure,
}

/// Pressure in one direction: how much is running now and how long recent work took.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pressure {
    /// Requests begun and not yet finished, right now.
    pub in_flight: u64,
    /// Requests finished within the window.
    pub completed: u64,
    /// Mean duration of the requests finished within the window, in ms; `None` (JSON `null`)
    /// when none finished, because "no data" is not "instant".
    #[schema(required = true)]
    pub average_processing_ms: Option<f64>,
}

/// Outbound pressure and the backlog consumers have yet to read.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutboundPressure {
    /// The outbound requests, serialized inline (`inFlight`, `completed`,
    /// `averageProcessingMs`) next to `pendingDeliveries`.
    #[serde(flatten)]
    pub pressure: Pressure,
    /// Records the slowest consumer has not committed yet (0 without consumers): the number
    /// routing weighs first, since it is what a new record would wait behind.
    pub pending_deliveries: u64,
}

/// Which way a request flows; each direction has its own window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Inbound,
    Outbound,
}

/// A request begun on a [`LoadObserver`], to hand back to [`LoadObserver::finish`].
///
/// Not `Clone`: one token stands for one request, so it cannot be counted twice by accident
/// (finishing the same token twice is ignored).
#[derive(Debug)]
#[must_use = "a request that is never finished stays in flight forever"]
pub struct Request {
    direction: Direction,
    started_at: i64,
    id: u64,
}

/// Counts a partition's requests and produces [`LoadSnapshot`]s.
///
/// Shareable across threads (`Send + Sync`); every method takes a short in-memory lock and
/// never blocks otherwise. Telemetry lives in memory only and starts empty when the observer
/// is created.
#[derive(Debug)]
pub struct LoadObserver {
    clock: Arc<dyn Clock>,
    windows: Mutex<Windows>,
}

impl LoadObserver {
    /// An observer with nothing in flight and nothing completed, reading time from `clock` so
    /// tests can move it.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            windows: Mutex::default(),
        }
    }

    /// Starts timing a request into the partition (an append). It counts as in flight until
    /// [`finish`](Self::finish)ed.
    pub fn begin_inbound(&self) -> Request {
        self.begin(Direction::Inbound)
    }

    /// Starts timing a request out of the partition (a delivery: a read, a poll's read, or a
    /// lease). It counts as in flight until [`finish`](Self::finish)ed.
    pub fn begin_outbound(&self) -> Request {
        self.begin(Direction::Outbound)
    }

    /// Ends `request`: it leaves the in-flight count and its duration joins the current
    /// second's bucket. A request already finished (or begun on another observer) is ignored,
    /// so a retried cleanup path cannot count a request twice.
    pub fn finish(&self, request: &Request) {
        let now = self.clock.now_ms();
        // A clock stepped backwards would give a negative duration; count it as instant.
        let elapsed_ms = u64::try_from(now.saturating_sub(request.started_at)).unwrap_or(0);
        let mut windows = self.lock();
        let window = windows.get_mut(request.direction);
        if window.in_flight.remove(&request.id) {
            window.record(now, elapsed_ms);
        }
    }

    /// The load right now, with `pending_deliveries` (the log's backlog, computed by the
    /// caller from durable cursors) reported as `outbound.pendingDeliveries`.
    pub fn snapshot(&self, pending_deliveries: u64) -> LoadSnapshot {
        let now = self.clock.now_ms();
        let windows = self.lock();
        LoadSnapshot {
            observed_at: now,
            window_ms: WINDOW_MS,
            inbound: windows.inbound.pressure(now),
            outbound: OutboundPressure {
                pressure: windows.outbound.pressure(now),
                pending_deliveries,
            },
        }
    }

    fn begin(&self, direction: Direction) -> Request {
        let request = Request {
            direction,
            started_at: self.clock.now_ms(),
            id: NEXT_REQUEST_ID.fetch_add(1, Ordering::Relaxed),
        };
        self.lock().get_mut(direction).in_flight.insert(request.id);
        request
    }

    /// The counters stay consistent even if a holder panicked (every update is a few plain
    /// field writes), so a poisoned lock is used as is rather than taking the partition down.
    fn lock(&self) -> MutexGuard<'_, Windows> {
        self.windows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Both directions' windows.
#[derive(Debug, Default)]
struct Windows {
    inbound: Window,
    outbound: Window,
}

impl Windows {
    fn get_mut(&mut self, direction: Direction) -> &mut Window {
        match direction {
            Direction::Inbound => &mut self.inbound,
            Direction::Outbound => &mut self.outbound,
        }
    }
}

/// One direction: the requests in flight and a ring of per-second completion buckets.
#[derive(Debug)]
struct Window {
    in_flight: HashSet<u64>,
    buckets: [Bucket; BUCKETS as usize],
}

/// Completions during one second.
#[derive(Debug, Default, Clone, Copy)]
struct Bucket {
    /// The second (ms / 1000) these counts belong to; a slot holding an older second is stale
    /// and is reset before reuse.
    second: i64,
    completed: u64,
    total_ms: u64,
}

impl Default for Window {
    fn default() -> Self {
        Self {
            in_flight: HashSet::new(),
            buckets: [Bucket::default(); BUCKETS as usize],
        }
    }
}

impl Window {
    /// Adds one completion of `elapsed_ms` to the bucket of the second containing `now`.
    fn record(&mut self, now: i64, elapsed_ms: u64) {
        let second = now.div_euclid(BUCKET_MS);
        let bucket = &mut self.buckets[second.rem_euclid(BUCKETS) as usize];
        if bucket.second != second {
            *bucket = Bucket {
                second,
                ..Bucket::default()
            };
        }
        bucket.completed += 1;
        bucket.total_ms = bucket.total_ms.saturating_add(elapsed_ms);
    }

    /// In flight now, and the completions of the last [`BUCKETS`] seconds up to `now`.
    fn pressure(&self, now: i64) -> Pressure {
        let current = now.div_euclid(BUCKET_MS);
        let (completed, total_ms) = self
            .buckets
            .iter()
            .filter(|bucket| current - BUCKETS < bucket.second && bucket.second <= current)
            .fold((0_u64, 0_u64), |(completed, total_ms), bucket| {
                (
                    completed + bucket.completed,
                    total_ms.saturating_add(bucket.total_ms),
                )
            });
        Pressure {
            in_flight: self.in_flight.len() as u64,
            completed,
            average_processing_ms: (completed > 0).then(|| total_ms as f64 / completed as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn observer_at(now_ms: i64) -> (ManualClock, LoadObserver) {
        let clock = ManualClock::new(now_ms);
        let observer = LoadObserver::new(Arc::new(clock.clone()));
        (clock, observer)
    }

    fn pressure(in_flight: u64, completed: u64, average: Option<f64>) -> Pressure {
        Pressure {
            in_flight,
            completed,
            average_processing_ms: average,
        }
    }

    /// Shared across threads by partition actors and HTTP handlers.
    #[test]
    fn observer_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<LoadObserver>();
    }

    /// In-flight is instantaneous, a second finish is ignored, and the
    /// average covers every completion in the window.
    #[test]
    fn counts_in_flight_and_averages_completions() {
        let (clock, observer) = observer_at(100_000);
        assert_eq!(observer.snapshot(0).inbound, pressure(0, 0, None));

        let a = observer.begin_inbound();
        clock.advance(10);
        let b = observer.begin_inbound();
        clock.advance(20);
        observer.finish(&a);
        observer.finish(&a);
        assert_eq!(observer.snapshot(0).inbound, pressure(1, 1, Some(30.0)));

        clock.advance(20);
        observer.finish(&b);
        let snapshot = observer.snapshot(3);
        assert_eq!(snapshot.inbound, pressure(0, 2, Some(35.0)));
        assert_eq!(snapshot.window_ms, 60_000);
        assert_eq!(snapshot.observed_at, 100_050);
        assert_eq!(
            snapshot.outbound,
            OutboundPressure {
                pressure: pressure(0, 0, None),
                pending_deliveries: 3,
            }
        );
    }

    /// A completion leaves the window after 60 s, while a request still
    /// running stays in flight and is timed in full when it finishes.
    #[test]
    fn completions_expire_after_the_window() {
        let (clock, observer) = observer_at(100_000);
        let quick = observer.begin_outbound();
        observer.finish(&quick);
        let slow = observer.begin_outbound();

        clock.advance(60_000);
        assert_eq!(
            observer.snapshot(2).outbound,
            OutboundPressure {
                pressure: pressure(1, 0, None),
                pending_deliveries: 2,
            }
        );

        observer.finish(&slow);
        assert_eq!(
            observer.snapshot(1).outbound,
            OutboundPressure {
                pressure: pressure(0, 1, Some(60_000.0)),
                pending_deliveries: 1,
            }
        );

        let (_, fresh) = observer_at(160_000);
        assert_eq!(
            fresh.snapshot(0).outbound.pressure.average_processing_ms,
            None
        );
    }

    /// A completion still counts one second before it would expire: the window is the last 60
    /// whole seconds including the current one.
    #[test]
    fn completion_counts_until_its_second_leaves_the_window() {
        let (clock, observer) = observer_at(100_999);
        let request = observer.begin_inbound();
        observer.finish(&request);
        clock.advance(59_000);
        assert_eq!(observer.snapshot(0).inbound.completed, 1);
        clock.advance(1);
        assert_eq!(observer.snapshot(0).inbound.completed, 0);
    }

    /// Inbound and outbound are counted separately, and a token from another observer finishes
    /// nothing here.
    #[test]
    fn directions_and_observers_are_independent() {
        let (_, observer) = observer_at(100_000);
        let (_, other) = observer_at(100_000);
        let inbound = observer.begin_inbound();
        let foreign = other.begin_outbound();
        observer.finish(&foreign);

        let snapshot = observer.snapshot(0);
        assert_eq!(snapshot.inbound, pressure(1, 0, None));
        assert_eq!(snapshot.outbound.pressure, pressure(0, 0, None));
        observer.finish(&inbound);
        assert_eq!(observer.snapshot(0).inbound, pressure(0, 1, Some(0.0)));
    }

    /// The JSON shape is the original's: camelCase names, outbound pressure inline next to
    /// `pendingDeliveries`, and `null` (not 0) for an average with no samples.
    #[test]
    fn serializes_with_the_original_field_names() {
        let snapshot = LoadSnapshot {
            observed_at: 100_000,
            window_ms: WINDOW_MS,
            inbound: pressure(2, 3, Some(12.5)),
            outbound: OutboundPressure {
                pressure: pressure(0, 0, None),
                pending_deliveries: 7,
            },
        };
        assert_eq!(
            serde_json::to_value(&snapshot).expect("a snapshot serializes"),
            serde_json::json!({
                "observedAt": 100_000,
                "windowMs": 60_000,
                "inbound": { "inFlight": 2, "completed": 3, "averageProcessingMs": 12.5 },
                "outbound": {
                    "inFlight": 0,
                    "completed": 0,
                    "averageProcessingMs": null,
                    "pendingDeliveries": 7
                }
            })
        );
    }
}
