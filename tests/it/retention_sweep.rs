//! The retention sweep: retention reaches every stored partition when it is due (open, closed
//! as idle, closed for room, untouched since a restart), and nothing is done for the
//! partitions that are not due.

use std::time::Duration;

use durability::config::{ColdKind, TopicSettings};
use durability::store::NewRecord;

use crate::common::{TestLog, eventually};

fn record(text: &str) -> NewRecord {
    NewRecord::new(serde_json::to_string(text).unwrap())
}

/// 50 topics, one record each, at most 10 open: 40 partitions are closed for room and never
/// touched again, and still every record leaves the hot window (for the cold tier) once it is
/// due, with no restart and no read meanwhile. Before the sweep, only partitions closed as
/// idle were woken: those closed for room kept their records until a restart.
#[actix::test]
async fn retention_reaches_partitions_closed_for_room() {
    const TOPICS: usize = 50;
    const SWEEP_MS: u64 = 200;
    const MAX_AGE_MS: u64 = 1_000;
    let t = TestLog::with(|config| {
        config.cold.kind = ColdKind::Fs;
        config.partitions.max_open = 10;
        config.retention.max_age_ms = MAX_AGE_MS;
        config.retention.sweep_interval_ms = SWEEP_MS;
    });
    for topic in 0..TOPICS {
        t.log
            .append(&format!("tenant-{topic}"), 0, vec![record("old")])
            .await
            .unwrap();
    }
    let counters = t.log.partition_counters();
    assert!(
        counters.closed_for_room() >= (TOPICS - 10) as u64,
        "closed for room: {}",
        counters.closed_for_room()
    );

    // Only counters are looked at until every record is flushed: no request reaches a
    // partition.
    let flushes = t.log.cold_flushes();
    let flushed = eventually(Duration::from_secs(30), async || {
        flushes.flushed() >= TOPICS as u64
    })
    .await;
    assert!(flushed, "flushed {} of {TOPICS}", flushes.flushed());
    for topic in 0..TOPICS {
        let bounds = t.log.bounds(&format!("tenant-{topic}"), 0).await.unwrap();
        assert_eq!(bounds.hot_offset, 1, "tenant-{topic}: {bounds:?}");
        assert_eq!(
            bounds.oldest_offset, 0,
            "tenant-{topic} is served from cold"
        );
    }
    assert!(counters.retention_runs() >= TOPICS as u64);
}

/// A restart over 10⁴ stored partitions of which none is due opens none of them and runs no
/// retention over several sweeps; of the partitions of a topic with a short age limit, exactly
/// those are opened and trimmed. (The registry used to schedule a wake-up for every stored
/// partition at start, and open each of them within one sweep interval.)
#[actix::test]
async fn a_restart_runs_retention_only_where_it_is_due() {
    const STORED: usize = 10_000;
    const DUE: u32 = 5;
    let mut t = TestLog::with(|config| {
        config.retention.max_age_ms = 3_600_000;
        config.retention.sweep_interval_ms = 50;
        let mut soon = TopicSettings {
            log: config.log.clone(),
            retention: config.retention.clone(),
            leases: config.leases.clone(),
        };
        soon.retention.max_age_ms = 300;
        config.topics.insert("soon".into(), soon);
    });
    for topic in 0..STORED / 8 {
        for partition in 0..8 {
            t.log
                .append(&format!("kept-{topic}"), partition, vec![record("x")])
                .await
                .unwrap();
        }
    }
    for partition in 0..DUE {
        t.log
            .append("soon", partition, vec![record("x")])
            .await
            .unwrap();
    }
    t.log.shutdown().await.unwrap();

    t.log = durability::Log::open(t.config.clone()).unwrap();
    let counters = t.log.partition_counters();
    let trimmed = eventually(Duration::from_secs(10), async || {
        counters.retention_runs() >= u64::from(DUE)
    })
    .await;
    assert!(trimmed, "retention runs: {}", counters.retention_runs());
    // Several more sweeps: nothing else is opened.
    actix::clock::sleep(Duration::from_millis(500)).await;
    assert_eq!(counters.retention_runs(), u64::from(DUE));
    assert_eq!(
        counters.opened(),
        u64::from(DUE),
        "only the due partitions opened"
    );
    for partition in 0..DUE {
        let bounds = t.log.bounds("soon", partition).await.unwrap();
        assert_eq!(bounds.hot_offset, 1, "soon/{partition}: {bounds:?}");
    }
    assert_eq!(t.log.bounds("kept-0", 0).await.unwrap().hot_offset, 0);
    t.log.shutdown().await.unwrap();
}

/// Retention limits lowered across a restart reach the partitions nobody touches: their due
/// times were computed under the old limits, so the restart makes every partition with hot
/// records due once, and the sweep trims them to the new limits.
#[actix::test]
async fn lowered_limits_reach_untouched_partitions_after_a_restart() {
    const TOPICS: usize = 20;
    let mut t = TestLog::with(|config| {
        config.retention.max_records = 100;
        config.retention.sweep_interval_ms = 50;
    });
    for topic in 0..TOPICS {
        let records = vec![record("a"), record("b"), record("c")];
        t.log
            .append(&format!("tenant-{topic}"), 0, records)
            .await
            .unwrap();
    }
    t.log.shutdown().await.unwrap();

    t.config.retention.max_records = 1;
    t.log = durability::Log::open(t.config.clone()).unwrap();
    let counters = t.log.partition_counters();
    let trimmed = eventually(Duration::from_secs(20), async || {
        counters.retention_runs() >= TOPICS as u64
    })
    .await;
    assert!(trimmed, "retention runs: {}", counters.retention_runs());
    for topic in 0..TOPICS {
        let bounds = t.log.bounds(&format!("tenant-{topic}"), 0).await.unwrap();
        assert_eq!(bounds.hot_offset, 2, "tenant-{topic}: {bounds:?}");
    }
    t.log.shutdown().await.unwrap();
}

/// Partitions opened only for their retention are the first to close for room: with 10 open
/// at most, 10 partitions in use and 20 closed ones coming due, the sweep trims all 20 while
/// the partitions in use stay open but for as many as retention runs at once (5 here). When
/// opening for retention counted as a use, the sweep closed every partition in use for them.
#[actix::test]
async fn partitions_opened_for_retention_close_first() {
    const MAX_OPEN: usize = 10;
    const DUE: usize = 20;
    // min(4 × storage.workers, max_open / 2)
    const AT_ONCE: usize = MAX_OPEN / 2;
    let in_use: Vec<String> = (0..MAX_OPEN).map(|n| format!("in-use-{n}")).collect();
    let t = TestLog::with(|config| {
        config.partitions.max_open = MAX_OPEN;
        config.retention.max_age_ms = 500;
        config.retention.sweep_interval_ms = 100;
        for topic in &in_use {
            let mut kept = TopicSettings {
                log: config.log.clone(),
                retention: config.retention.clone(),
                leases: config.leases.clone(),
            };
            kept.retention.max_age_ms = 3_600_000;
            config.topics.insert(topic.clone(), kept);
        }
    });
    for topic in 0..DUE {
        let topic = format!("due-{topic}");
        t.log.append(&topic, 0, vec![record("x")]).await.unwrap();
    }
    for topic in &in_use {
        t.log.append(topic, 0, vec![record("x")]).await.unwrap();
    }

    let counters = t.log.partition_counters();
    let trimmed = eventually(Duration::from_secs(20), async || {
        counters.retention_runs() >= DUE as u64
    })
    .await;
    assert!(trimmed, "retention runs: {}", counters.retention_runs());
    let open = t.log.running_partitions().await.unwrap();
    let in_use_open = open
        .iter()
        .filter(|id| id.topic().starts_with("in-use-"))
        .count();
    assert!(
        in_use_open >= MAX_OPEN - AT_ONCE,
        "{in_use_open} of {MAX_OPEN} partitions in use are open: {open:?}"
    );
    for topic in 0..DUE {
        let bounds = t.log.bounds(&format!("due-{topic}"), 0).await.unwrap();
        assert_eq!(bounds.hot_offset, 1, "due-{topic}: {bounds:?}");
    }
}
