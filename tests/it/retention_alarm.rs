//! The partition's retention alarm: an open partition runs its own retention when it falls
//! due, on its idle-check tick, without waiting for the registry's sweep; a partition that is
//! not open is still trimmed by the sweep; and the alarm and a sweep never run one partition's
//! retention at the same time. Time is a manual clock, so a due time passes when a test says;
//! a cold store that holds its writes keeps a run going for as long as a test needs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use durability::clock::ManualClock;
use durability::cold::{ColdFuture, ColdStore, MemoryColdStore, PutOutcome, SegmentKey};
use durability::partition::RunRetention;
use durability::store::NewRecord;
use durability::{Config, Log};

use crate::common::{START_MS, eventually};

/// A sweep interval far longer than any test: the registry's sweep never comes.
const NO_SWEEP_MS: u64 = 3_600_000;
/// How long a test waits for what it expects.
const WITHIN: Duration = Duration::from_secs(20);

fn record(text: &str) -> NewRecord {
    NewRecord::new(serde_json::to_string(text).unwrap())
}

/// A log on a manual clock, with `cold` as its cold tier.
struct AlarmLog {
    log: Log,
    clock: ManualClock,
    _dir: tempfile::TempDir,
}

impl AlarmLog {
    fn open(tune: impl FnOnce(&mut Config), cold: Option<Arc<dyn ColdStore>>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = Config::for_tests(dir.path());
        tune(&mut config);
        let clock = ManualClock::new(START_MS);
        let log = Log::builder(config)
            .clock(Arc::new(clock.clone()))
            .cold_store(cold)
            .open()
            .expect("open the log");
        Self {
            log,
            clock,
            _dir: dir,
        }
    }

    /// The first offset of the hot window of `events`/0.
    async fn hot_offset(&self) -> u64 {
        self.log.bounds("events", 0).await.unwrap().hot_offset
    }
}

/// A cold store whose writes wait at a gate until the test opens it, so a retention run can
/// be held in the middle of its flush.
#[derive(Debug)]
struct GatedColdStore {
    inner: MemoryColdStore,
    /// Closed (no permit) until [`GatedColdStore::open_gate`]; then every write goes through.
    gate: tokio::sync::Semaphore,
    /// Writes begun: waiting at the gate or past it.
    puts: AtomicUsize,
}

impl GatedColdStore {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryColdStore::new(),
            gate: tokio::sync::Semaphore::new(0),
            puts: AtomicUsize::new(0),
        })
    }

    fn open_gate(&self) {
        // A closed semaphore answers every wait at once.
        self.gate.close();
    }

    fn puts(&self) -> usize {
        self.puts.load(Ordering::SeqCst)
    }
}

impl ColdStore for GatedColdStore {
    fn put<'a>(&'a self, key: &'a SegmentKey, bytes: &'a [u8]) -> ColdFuture<'a, PutOutcome> {
        Box::pin(async move {
            self.puts.fetch_add(1, Ordering::SeqCst);
            let _ = self.gate.acquire().await;
            self.inner.put(key, bytes).await
        })
    }

    fn get<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, Option<Vec<u8>>> {
        self.inner.get(key)
    }

    fn list<'a>(&'a self, prefix: &'a str) -> ColdFuture<'a, Vec<SegmentKey>> {
        self.inner.list(prefix)
    }

    fn delete<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, ()> {
        self.inner.delete(key)
    }
}

/// An open partition trims itself when its retention falls due, on its own tick, while the
/// registry's sweep is an hour away: first when an append breaks the count limit (due at
/// once), then when the age limit of what that run left passes (the due time the run
/// settled). Neither the sweep nor a reopening did it: the partition opened once, and the
/// sweep ran nothing. Before the alarm, retention reached an open partition only through the
/// sweep, so nothing was trimmed here.
#[actix::test]
async fn an_open_partition_runs_its_retention_on_its_own_alarm() {
    let t = AlarmLog::open(
        |config| {
            config.retention.max_records = 2;
            config.retention.max_age_ms = 60_000;
            config.retention.sweep_interval_ms = NO_SWEEP_MS;
            // A tick every 500 ms; the test's reads keep the partition open.
            config.partitions.idle_stop_ms = 2_000;
        },
        None,
    );
    let counters = t.log.partition_counters();
    let records = vec![record("a"), record("b"), record("c")];
    t.log.append("events", 0, records).await.unwrap();
    let trimmed = eventually(WITHIN, async || t.hot_offset().await == 1).await;
    assert!(
        trimmed,
        "over the count limit: hot from {}",
        t.hot_offset().await
    );
    assert_eq!(counters.alarm_retention_runs(), 1);

    // What is left, "b" and "c", is due when "b" is 60 s old.
    t.clock.advance(120_000);
    let trimmed = eventually(WITHIN, async || t.hot_offset().await == 3).await;
    assert!(
        trimmed,
        "past the age limit: hot from {}",
        t.hot_offset().await
    );
    assert_eq!(counters.alarm_retention_runs(), 2);
    assert_eq!(counters.retention_runs(), 0, "the sweep ran nothing");
    assert_eq!(counters.opened(), 1, "the partition was never reopened");
}

/// A partition that is not open is still trimmed by the sweep: it closed for idleness before
/// its record came due, and nobody touches it until the sweep has opened it and run its
/// retention. Its alarm, once it is open, finds nothing more to do.
#[actix::test]
async fn a_partition_that_is_not_open_is_trimmed_by_the_sweep() {
    let t = AlarmLog::open(
        |config| {
            config.retention.max_age_ms = 60_000;
            config.retention.sweep_interval_ms = 50;
            config.partitions.idle_stop_ms = 40;
        },
        None,
    );
    let counters = t.log.partition_counters();
    t.log
        .append("events", 0, vec![record("old")])
        .await
        .unwrap();
    let closed = eventually(WITHIN, async || {
        t.log.running_partitions().await.unwrap().is_empty()
    })
    .await;
    assert!(closed, "the idle partition closed");
    let opened_before = counters.opened();

    t.clock.advance(120_000);
    // Only counters are looked at until the sweep ran: no request reaches the partition.
    let swept = eventually(WITHIN, async || counters.retention_runs() >= 1).await;
    assert!(swept, "the sweep ran its retention");
    assert!(counters.opened() > opened_before, "the sweep opened it");
    assert_eq!(t.hot_offset().await, 1, "the due record was trimmed");
    assert_eq!(counters.retention_runs(), 1);
    assert_eq!(counters.alarm_retention_runs(), 0);
}

/// While the partition's alarm runs its retention, held in the middle of its cold flush, the
/// sweep's request for the same partition (`RunRetention`, as the registry sends it) is
/// skipped at once instead of running a second retention beside it. Once the flush goes on,
/// that one run wrote one segment and trimmed the partition.
#[actix::test]
async fn a_sweeps_request_is_skipped_while_the_alarm_runs_retention() {
    let cold = GatedColdStore::new();
    let t = AlarmLog::open(
        |config| {
            config.retention.max_records = 1;
            config.retention.sweep_interval_ms = NO_SWEEP_MS;
            // A tick every 100 ms.
            config.partitions.idle_stop_ms = 400;
        },
        Some(cold.clone()),
    );
    let counters = t.log.partition_counters();
    let partition = t.log.partition_actor("events", 0).await.unwrap();
    let records = vec![record("a"), record("b")];
    t.log.append("events", 0, records).await.unwrap();
    let flushing = eventually(WITHIN, async || cold.puts() == 1).await;
    assert!(flushing, "the alarm's run reached its flush");
    assert_eq!(counters.alarm_retention_runs(), 1);

    let asked = actix::spawn(partition.send(RunRetention));
    let answered = eventually(WITHIN, async || asked.is_finished()).await;
    cold.open_gate();
    assert!(answered, "the sweep's request waited for the alarm's run");
    let ran = asked.await.unwrap().unwrap();
    assert!(!ran, "the sweep's request was skipped");
    assert!(counters.retention_runs_skipped() >= 1);

    let trimmed = eventually(WITHIN, async || t.hot_offset().await == 1).await;
    assert!(trimmed, "hot from {}", t.hot_offset().await);
    assert_eq!(cold.puts(), 1, "one flush");
    assert_eq!(t.log.cold_flushes().flushed(), 1);
    assert_eq!(counters.alarm_retention_runs(), 1);
    assert_eq!(counters.retention_runs(), 0);
}

/// While the sweep runs the retention of a partition it opened for it, held in the middle of
/// its cold flush, the partition's alarm finds the same retention due at every tick and starts
/// no second run beside it: its rings are skipped. Once the flush goes on, the sweep's one run
/// wrote one segment and trimmed the partition, and the alarm never ran.
#[actix::test]
async fn the_alarm_starts_no_run_while_a_sweeps_run_lasts() {
    let cold = GatedColdStore::new();
    let t = AlarmLog::open(
        |config| {
            config.retention.max_age_ms = 60_000;
            config.retention.sweep_interval_ms = 50;
            // A tick every 10 ms.
            config.partitions.idle_stop_ms = 40;
        },
        Some(cold.clone()),
    );
    let counters = t.log.partition_counters();
    t.log
        .append("events", 0, vec![record("old")])
        .await
        .unwrap();
    let closed = eventually(WITHIN, async || {
        t.log.running_partitions().await.unwrap().is_empty()
    })
    .await;
    assert!(closed, "the idle partition closed");

    // Only the sweep can start this run: the partition is not open.
    t.clock.advance(120_000);
    let flushing = eventually(WITHIN, async || cold.puts() == 1).await;
    assert!(flushing, "the sweep's run reached its flush");
    // The sweep waits for this run, so no other sweep asks meanwhile: the skipped rings are
    // the alarm's, three ticks of it.
    let rang = eventually(WITHIN, async || counters.retention_runs_skipped() >= 3).await;
    let alarm_runs = counters.alarm_retention_runs();
    cold.open_gate();
    assert!(rang, "skipped: {}", counters.retention_runs_skipped());
    assert_eq!(alarm_runs, 0, "the alarm started a run beside the sweep's");

    let swept = eventually(WITHIN, async || counters.retention_runs() == 1).await;
    assert!(swept, "the sweep's run ended");
    assert_eq!(t.hot_offset().await, 1, "the due record was trimmed");
    assert_eq!(cold.puts(), 1, "one flush");
    assert_eq!(t.log.cold_flushes().flushed(), 1);
    assert_eq!(counters.alarm_retention_runs(), 0);
}
