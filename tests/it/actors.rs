//! The actor layer through `Log` and typed messages: lazy start, idle stop and restart,
//! recovery after a failed commit, many partitions in parallel, group commit, and the
//! retention timer.

use std::time::Duration;

use durability::partition::{Append, Read};
use durability::store::{AppendOutcome, NewRecord, SyncMode};
use durability::{Error, Event, EventsOutcome};

use crate::common::{TestLog, eventually, stored_partitions};

fn record(text: &str) -> NewRecord {
    NewRecord::new(serde_json::to_string(text).unwrap())
}

fn offsets(outcome: AppendOutcome) -> Vec<u64> {
    match outcome {
        AppendOutcome::Appended { offsets } => offsets,
        AppendOutcome::Rejected(rejection) => panic!("rejected: {rejection}"),
    }
}

/// Reads, bounds and cursor queries of a partition never written answer empty and create no
/// file; the first append creates it.
#[actix::test]
async fn partitions_start_on_their_first_write_only() {
    let t = TestLog::with(|_| {});
    let page = t.log.read("events", 3, None, None).await.unwrap();
    assert!(page.records.is_empty() && page.next_offset == 0 && page.lag == 0);
    assert_eq!(t.log.bounds("events", 3).await.unwrap().next_offset, 0);
    assert_eq!(t.log.cursor("events", 3, "search").await.unwrap(), None);
    assert!(t.log.cursors("events", 3).await.unwrap().is_empty());
    assert_eq!(t.log.trim("events", 3).await.unwrap(), 0);
    assert!(
        t.log
            .lease("events", 3, "search", None)
            .await
            .unwrap()
            .is_none()
    );
    assert!(!t.stores("events", 3));
    assert!(t.log.running_partitions().await.unwrap().is_empty());
    assert!(t.log.topics().await.unwrap().is_empty());

    let appended = t.log.append("events", 3, vec![record("a")]).await.unwrap();
    assert_eq!(offsets(appended.outcome), vec![0]);
    assert!(t.stores("events", 3));
    let topics = t.log.topics().await.unwrap();
    assert_eq!(topics.len(), 1);
    assert_eq!(
        (topics[0].name.as_str(), topics[0].partitions),
        ("events", 8)
    );
}

/// Bad names and partition indexes are refused before anything touches the disk.
#[actix::test]
async fn names_and_partitions_are_checked_first() {
    let t = TestLog::with(|_| {});
    let err = t
        .log
        .append("../etc", 0, vec![record("a")])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidName(_)), "{err:?}");
    let err = t
        .log
        .append("events", 8, vec![record("a")])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnknownPartition {
                partition: 8,
                partitions: 8,
                ..
            }
        ),
        "{err:?}"
    );
    let err = t.log.commit("events", 0, "bad group", 0).await.unwrap_err();
    assert_eq!(err.code(), "invalid_name");
    assert!(stored_partitions(&t.config.storage.data_dir).is_empty());
}

/// A partition idle for `idle_stop_ms` stops by itself, and the next message restarts it
/// transparently with everything it held.
#[actix::test]
async fn idle_partitions_stop_and_restart_transparently() {
    let t = TestLog::with(|config| config.partitions.idle_stop_ms = 50);
    t.log
        .append("events", 0, vec![record("a"), record("b")])
        .await
        .unwrap();
    t.log.commit("events", 0, "search", 1).await.unwrap();
    let stopped = eventually(Duration::from_secs(10), async || {
        t.log.running_partitions().await.unwrap().is_empty()
    })
    .await;
    assert!(stopped, "the idle partition stopped");

    let page = t.log.read("events", 0, Some(0), None).await.unwrap();
    assert_eq!(page.records.len(), 2);
    assert_eq!(t.log.cursor("events", 0, "search").await.unwrap(), Some(1));
    assert_eq!(
        offsets(
            t.log
                .append("events", 0, vec![record("c")])
                .await
                .unwrap()
                .outcome
        ),
        vec![2]
    );
}

/// After a failed commit the partition refuses nothing for long: its supervisor restarts it,
/// the database is reopened, and appends continue from the durable state.
#[actix::test]
async fn a_failed_commit_restarts_the_partition() {
    let t = TestLog::with(|_| {});
    t.log.append("events", 0, vec![record("a")]).await.unwrap();
    t.log.fail_next_commit("events", 0).await.unwrap();
    let err = t
        .log
        .append("events", 0, vec![record("lost")])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "unavailable");

    let appended = t.log.append("events", 0, vec![record("b")]).await.unwrap();
    assert_eq!(
        offsets(appended.outcome),
        vec![1],
        "the failed batch left nothing behind"
    );
    let page = t.log.read("events", 0, Some(0), None).await.unwrap();
    let payloads: Vec<&str> = page
        .records
        .iter()
        .map(|r| r.payload.as_json().unwrap())
        .collect();
    assert_eq!(payloads, vec!["\"a\"", "\"b\""]);
}

/// 64 partitions, each with 4 concurrent producers: every partition's offsets are contiguous
/// and every record is read back exactly once.
#[actix::test]
async fn many_partitions_in_parallel_keep_offsets_contiguous() {
    const PARTITIONS: u32 = 64;
    const PRODUCERS: usize = 4;
    const APPENDS: usize = 10;
    let t = TestLog::with(|config| config.log.partitions_per_topic = PARTITIONS);
    let mut tasks = Vec::new();
    for partition in 0..PARTITIONS {
        for producer in 0..PRODUCERS {
            let log = t.log.clone();
            tasks.push(actix::spawn(async move {
                let mut offsets = Vec::new();
                for n in 0..APPENDS {
                    let appended = log
                        .append("wide", partition, vec![record(&format!("{producer}-{n}"))])
                        .await
                        .unwrap();
                    offsets.extend(self::offsets(appended.outcome));
                }
                (partition, offsets)
            }));
        }
    }
    let mut per_partition = vec![Vec::new(); PARTITIONS as usize];
    for task in tasks {
        let (partition, offsets) = task.await.unwrap();
        per_partition[partition as usize].extend(offsets);
    }
    for (partition, mut offsets) in per_partition.into_iter().enumerate() {
        offsets.sort_unstable();
        let expected: Vec<u64> = (0..(PRODUCERS * APPENDS) as u64).collect();
        assert_eq!(offsets, expected, "partition {partition}");
        let page = t
            .log
            .read("wide", partition as u32, Some(0), None)
            .await
            .unwrap();
        assert_eq!(page.records.len(), PRODUCERS * APPENDS);
    }
}

/// Concurrent single-record appends to one partition share transactions: fewer commits than
/// appends, each caller still getting its own offset.
#[actix::test]
async fn group_commit_groups_concurrent_appends() {
    let t = TestLog::with(|_| {});
    let tasks: Vec<_> = (0..200)
        .map(|n| {
            let log = t.log.clone();
            actix::spawn(async move {
                offsets(
                    log.append("events", 0, vec![record(&n.to_string())])
                        .await
                        .unwrap()
                        .outcome,
                )
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort_unstable();
    assert_eq!(all, (0..200).collect::<Vec<u64>>());
    let stats = t.log.stats("events", 0).await.unwrap();
    assert_eq!(stats.appends, 200);
    assert!(stats.commits < stats.appends, "{stats:?}");
}

/// Producers that append again as soon as they are answered end up in one group: each commit
/// holds every producer's record. Here half of them start while the other half's first commit
/// is already running; without merging, the halves would alternate for ever, each paying its
/// own fsync.
#[actix::test]
async fn a_closed_loop_of_producers_merges_into_one_group() {
    const PRODUCERS: usize = 50;
    const ROUNDS: usize = 20;
    let t = TestLog::with(|config| config.storage.sync = SyncMode::Full);
    let partition = t.log.partition_actor("events", 0).await.unwrap();
    let producer = |partition: actix::Addr<durability::partition::PartitionActor>| {
        actix::spawn(async move {
            for _ in 0..ROUNDS {
                let appended = partition
                    .send(Append {
                        records: vec![record("x")],
                    })
                    .await
                    .unwrap()
                    .unwrap();
                assert!(appended.outcome.is_appended());
            }
        })
    };
    let mut producers: Vec<_> = (0..PRODUCERS / 2)
        .map(|_| producer(partition.clone()))
        .collect();
    // Let the first half send and their commit start on the volume's committer thread.
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    producers.extend((0..PRODUCERS / 2).map(|_| producer(partition.clone())));
    for producer in producers {
        producer.await.unwrap();
    }
    let stats = t.log.stats("events", 0).await.unwrap();
    assert_eq!(stats.appends, (PRODUCERS * ROUNDS) as u64);
    // About one commit per round once merged; alternating halves need two per round.
    assert!(
        stats.commits <= (ROUNDS as u64) * 3 / 2,
        "{} commits for {ROUNDS} rounds of {PRODUCERS} producers",
        stats.commits
    );
}

/// Once a partition is open, `Log` appends and reads take its shortcut: they run on the
/// caller's thread and the volume's committer, not on the partition actor's event loop. Here
/// that event loop is blocked while another thread appends and reads back.
#[actix::test]
async fn appends_and_reads_do_not_wait_for_the_actors_event_loop() {
    let t = TestLog::with(|_| {});
    t.log
        .append("events", 0, vec![record("first")])
        .await
        .unwrap();
    let log = t.log.clone();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let result = runtime.block_on(async move {
            let appended = log.append("events", 0, vec![record("second")]).await?;
            let page = log.read("events", 0, Some(0), None).await?;
            Ok::<_, Error>((appended.outcome, page.records.len()))
        });
        let _ = done.send(result);
    });
    // Blocks this thread, which runs the registry and every partition actor.
    let (outcome, read) = finished
        .recv_timeout(Duration::from_secs(10))
        .expect("the append and the read were answered without the actors' event loop")
        .unwrap();
    assert_eq!(offsets(outcome), vec![1]);
    assert_eq!(read, 2);
}

/// `Log` appends from threads outside the actors' system go straight to the volume's
/// committer, while the registry keeps closing partitions to make room (`max_open = 1`, four
/// partitions): a partition closes only once the appends that went around its actor are
/// answered, so the store it opens next starts where they left it. Every acknowledged record
/// reads back at its offset, and each partition's offsets are contiguous.
#[actix::test]
async fn appends_from_other_threads_race_partitions_closing_for_room() {
    const PARTITIONS: u32 = 4;
    const THREADS: usize = 4;
    const APPENDS: usize = 150;
    let t = TestLog::with(|config| config.partitions.max_open = 1);
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let log = t.log.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let mut acknowledged = Vec::new();
                    for n in 0..APPENDS {
                        let partition = ((thread + n) % PARTITIONS as usize) as u32;
                        let text = format!("{thread}-{n}");
                        // Keyed, so that a retry after `unavailable` cannot write twice.
                        let keyed =
                            NewRecord::keyed(text.clone(), serde_json::to_string(&text).unwrap());
                        loop {
                            match log.append("events", partition, vec![keyed.clone()]).await {
                                Ok(appended) => {
                                    let offset = offsets(appended.outcome)[0];
                                    acknowledged.push((partition, offset, text));
                                    break;
                                }
                                // Every partition open is busy, or this one kept closing.
                                Err(Error::Overloaded { .. } | Error::Unavailable { .. }) => {
                                    tokio::time::sleep(Duration::from_millis(1)).await;
                                }
                                Err(err) => panic!("append {text}: {err}"),
                            }
                        }
                    }
                    acknowledged
                })
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for thread in threads {
        // Joined off this event loop, which runs the registry and the partitions' actors.
        let joined = tokio::task::spawn_blocking(move || thread.join())
            .await
            .unwrap();
        acknowledged.extend(joined.expect("an appending thread"));
    }
    assert!(
        t.log.partition_counters().closed() > 0,
        "no partition closed"
    );
    for partition in 0..PARTITIONS {
        let mut expected: Vec<(u64, String)> = acknowledged
            .iter()
            .filter(|(p, _, _)| *p == partition)
            .map(|(_, offset, text)| (*offset, serde_json::to_string(text).unwrap()))
            .collect();
        expected.sort();
        let mut stored: Vec<(u64, String)> = Vec::new();
        loop {
            let from = stored.len() as u64;
            let page = t.log.read("events", partition, Some(from), None).await;
            let records = page.unwrap().records;
            if records.is_empty() {
                break;
            }
            stored.extend(
                records
                    .into_iter()
                    .map(|record| (record.offset, record.payload.as_json().unwrap().to_owned())),
            );
        }
        assert_eq!(stored, expected, "partition {partition}");
        let contiguous: Vec<u64> = (0..expected.len() as u64).collect();
        let offsets: Vec<u64> = stored.iter().map(|(offset, _)| *offset).collect();
        assert_eq!(offsets, contiguous, "partition {partition}");
    }
}

/// Typed messages straight to a partition's actor, as an embedding application sends them.
#[actix::test]
async fn typed_messages_reach_the_partition() {
    let t = TestLog::with(|_| {});
    let partition = t.log.partition_actor("events", 2).await.unwrap();
    let appended = partition
        .send(Append {
            records: vec![record("x"), record("y")],
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(offsets(appended.outcome), vec![0, 1]);
    assert_eq!(
        appended.load.inbound.in_flight, 1,
        "the snapshot counts this append as in flight"
    );
    let page = partition
        .send(Read {
            from: Some(1),
            limit: None,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.records[0].payload, "\"y\"");
}

/// Retention runs by itself: with a short sweep interval, records over the count limit leave
/// the hot window of an open partition without anyone calling trim.
#[actix::test]
async fn retention_runs_by_itself_when_due() {
    let t = TestLog::with(|config| {
        config.retention.max_records = 2;
        config.retention.sweep_interval_ms = 20;
    });
    t.log
        .append(
            "events",
            0,
            vec![
                record("a"),
                record("b"),
                record("c"),
                record("d"),
                record("e"),
            ],
        )
        .await
        .unwrap();
    let trimmed = eventually(Duration::from_secs(10), async || {
        t.log.bounds("events", 0).await.unwrap().hot_offset == 3
    })
    .await;
    assert!(
        trimmed,
        "bounds: {:?}",
        t.log.bounds("events", 0).await.unwrap()
    );
}

/// Keyed events go to the partition the FNV-1a function picks, in input order, and a request
/// with one oversized partition batch writes nothing anywhere.
#[actix::test]
async fn keyed_events_are_routed_and_validated_whole() {
    let t = TestLog::with(|config| config.log.max_batch_size = 2);
    let event = |key: &str, text: &str| Event {
        partition_key: key.into(),
        key: None,
        payload: serde_json::to_string(text).unwrap().into(),
        headers: Vec::new(),
    };
    // "user-1" → partition 4 and "user-2" → partition 3 of 8 (as in the README's Quick start).
    let outcome = t
        .log
        .append_events(
            "events",
            vec![
                event("user-1", "a"),
                event("user-2", "b"),
                event("user-1", "c"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        EventsOutcome::Appended(vec![(4, 0), (3, 0), (4, 1)])
    );

    let too_many = vec![
        event("user-2", "x"),
        event("user-1", "y"),
        event("user-2", "z"),
        event("user-2", "w"),
    ];
    let outcome = t.log.append_events("events", too_many).await.unwrap();
    assert!(
        matches!(outcome, EventsOutcome::Rejected { partition: 3, .. }),
        "{outcome:?}"
    );
    assert_eq!(
        t.log.bounds("events", 4).await.unwrap().next_offset,
        2,
        "nothing written to partition 4"
    );
    assert_eq!(t.log.bounds("events", 3).await.unwrap().next_offset, 1);
}

/// A partition stopped for idleness is opened by the sweep when its oldest hot record becomes
/// due for age retention, and trims it, although nobody touches it.
#[actix::test]
async fn a_stopped_partition_wakes_when_retention_is_due() {
    let t = TestLog::with(|config| {
        config.partitions.idle_stop_ms = 30;
        config.retention.max_age_ms = 600;
        config.retention.sweep_interval_ms = 100;
    });
    t.log
        .append("events", 0, vec![record("old")])
        .await
        .unwrap();
    let counters = t.log.partition_counters();
    let opened_before = counters.opened();
    let stopped = eventually(Duration::from_secs(10), async || {
        t.log.running_partitions().await.unwrap().is_empty()
    })
    .await;
    assert!(stopped, "the idle partition stopped");
    // Nothing is sent to the partition from here on until it has opened again by itself (the
    // count of opens, not a glimpse of it running, which a loaded machine may miss).
    let woke = eventually(Duration::from_secs(10), async || {
        counters.opened() > opened_before
    })
    .await;
    assert!(woke, "the partition was woken for retention");
    let trimmed = eventually(Duration::from_secs(10), async || {
        t.log.bounds("events", 0).await.unwrap().hot_offset == 1
    })
    .await;
    assert!(trimmed, "the due record was trimmed");
}

/// After a restart, retention runs on partitions nobody touches: a record that came due while
/// the log was down is trimmed within a sweep interval, without any request to its partition.
#[actix::test]
async fn stored_partitions_are_woken_for_retention_after_a_restart() {
    let t = TestLog::with(|config| {
        config.retention.max_age_ms = 100;
        config.retention.sweep_interval_ms = 200;
    });
    t.log
        .append("events", 0, vec![record("old")])
        .await
        .unwrap();
    t.log.shutdown().await.unwrap();
    actix_rt::time::sleep(Duration::from_millis(200)).await;

    let log = durability::Log::open(t.config.clone()).unwrap();
    let counters = log.partition_counters();
    // Nothing is sent to the partition until it has opened by itself.
    let woke = eventually(Duration::from_secs(10), async || counters.opened() > 0).await;
    assert!(woke, "the stored partition was woken after the restart");
    let trimmed = eventually(Duration::from_secs(10), async || {
        log.bounds("events", 0).await.unwrap().hot_offset == 1
    })
    .await;
    assert!(
        trimmed,
        "the record that came due while the log was down was trimmed"
    );
    log.shutdown().await.unwrap();
}

/// A range past `max_attempts` goes to the dead-letter topic (same payload, key
/// `{topic}:{partition}:{offset}`, routed by that key), is skipped, and the group moves on;
/// the lease call that sent it answers `None`.
#[actix::test]
async fn exhausted_ranges_go_to_the_dead_letter_topic() {
    let t = TestLog::with(|config| {
        config.leases.max_attempts = 1;
        config.leases.dead_letter_topic = "dead-letters".into();
    });
    t.log
        .append("jobs", 0, vec![record("poison"), record("fine")])
        .await
        .unwrap();
    let first = t
        .log
        .lease("jobs", 0, "workers", Some(1))
        .await
        .unwrap()
        .unwrap();
    t.log
        .nack("jobs", 0, "workers", &first.batch_id, 0)
        .await
        .unwrap();
    assert!(
        t.log
            .lease("jobs", 0, "workers", Some(1))
            .await
            .unwrap()
            .is_none(),
        "sent to the dead letters"
    );

    let key = "jobs:0:0";
    let partition = durability::routing::partition_for(key, 8);
    let page = t
        .log
        .read("dead-letters", partition, Some(0), None)
        .await
        .unwrap();
    assert_eq!(page.records.len(), 1);
    assert_eq!(page.records[0].key.as_deref(), Some(key));
    assert_eq!(page.records[0].payload, "\"poison\"");

    let next = t
        .log
        .lease("jobs", 0, "workers", Some(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.first_offset, 1);
    assert_eq!(
        t.log
            .ack("jobs", 0, "workers", &next.batch_id)
            .await
            .unwrap(),
        Some(2)
    );
}
