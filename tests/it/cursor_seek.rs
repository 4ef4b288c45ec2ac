//! Seeking a group's cursor (moving it back as well as forward) with the metadata a Kafka offset
//! commit carries: over REST (`PUT .../cursors/{group}` with `"seek"` and `"metadata"`,
//! `GET .../cursors/{group}`) against a real socket, through the typed `Log`, and on a
//! cluster's node for a partition another node holds.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use durability::log::{Committed, MAX_CURSOR_METADATA_BYTES};
use durability::{ErrorCode, Log};
use serde_json::{Value, json};

use crate::common::cluster::{
    Node, PARTITIONS, TOPIC, append, free_port, one_cluster_at_a_time, owners, start_etcd,
    volume_of, wait_for_balance,
};
use crate::common::process::request;
use crate::common::{TestLog, TestServer, block_on, fresh_s3_bucket};
use crate::embedded_cluster::embedded_config;

const CURSOR: &str = "/topics/events/partitions/0/cursors/billing";

/// Appends `count` keyless records to partition 0 of `events`; panics unless `202`.
async fn seed(server: &TestServer, count: usize) {
    let records: Vec<Value> = (0..count).map(|n| json!({ "payload": n })).collect();
    let (status, body) = server
        .post("/topics/events/partitions/0/records", Value::Array(records))
        .await;
    assert_eq!(status, 202, "{body}");
}

/// A seek moves the cursor back (where a commit would not), keeping its metadata, which the
/// GET answers; a group poll then reads from the sought cursor again.
#[actix::test]
async fn a_seek_moves_the_cursor_back_and_the_get_shows_it_with_its_metadata() {
    let server = TestServer::start(|_| {});
    seed(&server, 5).await;
    let (status, body) = server.put(CURSOR, json!({"offset": 4})).await;
    assert_eq!((status, body), (200, json!({"cursor": 4})));
    assert_eq!(server.get(CURSOR).await, (200, json!({"cursor": 4})));

    let seek = json!({"offset": 1, "seek": true, "metadata": "generation 7"});
    assert_eq!(server.put(CURSOR, seek).await, (200, json!({"cursor": 1})));
    assert_eq!(
        server.get(CURSOR).await,
        (200, json!({"cursor": 1, "metadata": "generation 7"}))
    );
    let (status, polled) = server.get("/topics/events/groups/billing/poll").await;
    assert_eq!(status, 200, "{polled}");
    let offsets: Vec<u64> = polled["partitions"][0]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| record["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(offsets, [1, 2, 3, 4], "read again from the sought cursor");

    // A seek forward, without metadata, clears it.
    let seek = json!({"offset": 5, "seek": true});
    assert_eq!(server.put(CURSOR, seek).await, (200, json!({"cursor": 5})));
    assert_eq!(server.get(CURSOR).await, (200, json!({"cursor": 5})));
    server.stop().await;
}

/// A PUT without `seek` is today's forward-only commit: a lower offset changes nothing, the
/// metadata of the seek that set the cursor included; one that moves the cursor keeps its own
/// metadata, or clears the earlier one. A group without a cursor, on a partition written or
/// never written, is answered `null` (and the partition is not created).
#[actix::test]
async fn a_put_without_seek_only_moves_forward() {
    let server = TestServer::start(|_| {});
    seed(&server, 5).await;
    let seek = json!({"offset": 3, "seek": true, "metadata": "m"});
    assert_eq!(server.put(CURSOR, seek).await, (200, json!({"cursor": 3})));

    let lower = json!({"offset": 1, "metadata": "ignored"});
    assert_eq!(server.put(CURSOR, lower).await, (200, json!({"cursor": 3})));
    let lower = json!({"offset": 2, "seek": false});
    assert_eq!(server.put(CURSOR, lower).await, (200, json!({"cursor": 3})));
    assert_eq!(
        server.get(CURSOR).await,
        (200, json!({"cursor": 3, "metadata": "m"}))
    );

    let forward = json!({"offset": 4, "metadata": "n"});
    assert_eq!(
        server.put(CURSOR, forward).await,
        (200, json!({"cursor": 4}))
    );
    assert_eq!(
        server.get(CURSOR).await,
        (200, json!({"cursor": 4, "metadata": "n"}))
    );
    assert_eq!(
        server.put(CURSOR, json!({"offset": 5})).await,
        (200, json!({"cursor": 5}))
    );
    assert_eq!(server.get(CURSOR).await, (200, json!({"cursor": 5})));

    let others = "/topics/events/partitions/0/cursors/others";
    assert_eq!(server.get(others).await, (200, json!({"cursor": null})));
    let unwritten = "/topics/events/partitions/1/cursors/billing";
    assert_eq!(server.get(unwritten).await, (200, json!({"cursor": null})));
    assert!(!server.log.stores("events", 1), "a GET creates nothing");
    server.stop().await;
}

/// A seek beyond the next offset is `400 invalid_offset`, metadata of more than
/// `MAX_CURSOR_METADATA_BYTES` bytes (in fewer characters too) `400 invalid_request`, a bad
/// group or partition its error: each changes nothing. Metadata of exactly the most bytes is
/// kept.
#[actix::test]
async fn a_refused_seek_changes_nothing() {
    let server = TestServer::start(|_| {});
    seed(&server, 3).await;
    let seek = json!({"offset": 2, "seek": true, "metadata": "m"});
    assert_eq!(server.put(CURSOR, seek).await, (200, json!({"cursor": 2})));
    let kept = (200, json!({"cursor": 2, "metadata": "m"}));

    let (status, body) = server.put(CURSOR, json!({"offset": 4, "seek": true})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_offset", "{body}");
    let too_long = "é".repeat(MAX_CURSOR_METADATA_BYTES / 2 + 1);
    for body in [
        json!({"offset": 0, "seek": true, "metadata": too_long}),
        json!({"offset": 3, "metadata": too_long}),
        json!({"offset": 0, "seek": true, "metadata": null}),
        json!({"offset": 0, "seek": "yes"}),
    ] {
        let (status, answer) = server.put(CURSOR, body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(
            answer["error"]["code"], "invalid_request",
            "{body}: {answer}"
        );
    }
    let (status, body) = server
        .put(
            "/topics/events/partitions/0/cursors/bad%20group",
            json!({"offset": 0, "seek": true}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_name", "{body}");
    let (status, body) = server
        .put(
            "/topics/events/partitions/99/cursors/billing",
            json!({"offset": 0, "seek": true}),
        )
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(server.get(CURSOR).await, kept);

    let most = "m".repeat(MAX_CURSOR_METADATA_BYTES);
    let seek = json!({"offset": 0, "seek": true, "metadata": most});
    assert_eq!(server.put(CURSOR, seek).await, (200, json!({"cursor": 0})));
    assert_eq!(
        server.get(CURSOR).await,
        (200, json!({"cursor": 0, "metadata": most}))
    );
    server.stop().await;
}

/// The typed `Log`: a seek moves the cursor back or forward with its metadata, `committed`
/// answers both, `cursor` the offset; a seek to 0 creates a partition never written (as a
/// commit of 0 does), one beyond its next offset refuses and creates nothing; a deleted
/// cursor is gone.
#[actix::test]
async fn the_log_seeks_and_answers_the_committed_position() {
    let t = TestLog::with(|_| {});
    let records = (0..4)
        .map(|n| durability::log::NewRecord::new(n.to_string()))
        .collect();
    t.log.append("events", 0, records).await.unwrap();
    assert_eq!(t.log.committed("events", 0, "g").await.unwrap(), None);
    assert_eq!(t.log.commit("events", 0, "g", 3).await.unwrap(), 3);
    assert_eq!(
        t.log.committed("events", 0, "g").await.unwrap(),
        Some(Committed {
            offset: 3,
            metadata: None
        })
    );

    assert_eq!(t.log.seek("events", 0, "g", 1, Some("m")).await.unwrap(), 1);
    assert_eq!(t.log.cursor("events", 0, "g").await.unwrap(), Some(1));
    assert_eq!(
        t.log.committed("events", 0, "g").await.unwrap(),
        Some(Committed {
            offset: 1,
            metadata: Some("m".into())
        })
    );
    assert_eq!(t.log.commit("events", 0, "g", 0).await.unwrap(), 1);
    assert_eq!(t.log.seek("events", 0, "g", 4, None).await.unwrap(), 4);

    let err = t.log.seek("events", 0, "g", 5, None).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidOffset, "{err}");
    let too_long = "m".repeat(MAX_CURSOR_METADATA_BYTES + 1);
    let err = t
        .log
        .seek("events", 0, "g", 0, Some(&too_long))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidRequest, "{err}");
    let err = t.log.seek("events", 9, "g", 0, None).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::UnknownPartition, "{err}");
    assert_eq!(t.log.cursor("events", 0, "g").await.unwrap(), Some(4));

    let err = t.log.seek("events", 1, "g", 1, None).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidOffset, "{err}");
    assert!(!t.stores("events", 1), "a refused seek creates nothing");
    assert_eq!(
        t.log.seek("events", 1, "g", 0, Some("new")).await.unwrap(),
        0
    );
    assert!(t.stores("events", 1), "a seek to 0 creates the partition");
    assert_eq!(
        t.log.committed("events", 1, "g").await.unwrap(),
        Some(Committed {
            offset: 0,
            metadata: Some("new".into())
        })
    );

    assert!(t.log.delete_cursor("events", 0, "g").await.unwrap());
    assert_eq!(t.log.committed("events", 0, "g").await.unwrap(), None);
    assert!(!t.log.delete_cursor("events", 0, "g").await.unwrap());
    t.log.shutdown().await.unwrap();
}

/// What the embedded node's typed calls answered, in order.
#[derive(Debug)]
struct Answers {
    /// The seeks forward then back: the cursors.
    seeks: Vec<Result<u64, String>>,
    /// `committed` after the seek back.
    committed: Result<Option<Committed>, String>,
    /// The other node's `GET` of the cursor after the seek back.
    rest: (u16, Value),
    /// The code of a seek beyond the next offset.
    beyond: Option<ErrorCode>,
    /// The deletion: whether there was a cursor; then `committed` again.
    deleted: Result<bool, String>,
    after_delete: Result<Option<Committed>, String>,
}

/// An application embeds node `a` of a two-node cluster (`b` is a server process): its typed
/// `Log::seek`, `committed` and `delete_cursor` on a partition that `b` holds reach `b`, which
/// serves the sought cursor and its metadata to REST clients as the typed calls answered it.
#[test]
fn an_embedded_node_seeks_a_cursor_on_a_partition_another_node_holds() {
    let _cluster = one_cluster_at_a_time();
    let s3 = block_on(fresh_s3_bucket());
    let etcd = start_etcd(1);
    let dir = tempfile::tempdir().expect("temp dir");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("an address");
    let config = embedded_config(dir.path(), &s3, &s3.endpoint, &etcd.endpoint, "a", addr);
    let (go, going) = tokio::sync::oneshot::channel::<(u32, SocketAddr)>();
    let (answers, answered) = mpsc::channel();
    let application = thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let log = Log::open(config).expect("the embedded node opens");
            let routes = log.clone();
            let server = actix_web::HttpServer::new(move || {
                actix_web::App::new().configure(durability::http::service(routes.clone()))
            })
            .workers(1)
            .bind(addr)
            .expect("bind the application")
            .run();
            let handle = server.handle();
            actix_web::rt::spawn(server);
            let Ok((partition, b)) = going.await else {
                return;
            };
            let text = |err: durability::Error| err.to_string();
            let mut seeks = Vec::new();
            for (offset, metadata) in [(3, Some("forward")), (1, Some("back"))] {
                let seek = log.seek(TOPIC, partition, "kafka", offset, metadata).await;
                seeks.push(seek.map_err(text));
            }
            let committed = log.committed(TOPIC, partition, "kafka").await.map_err(text);
            let path = format!("/topics/{TOPIC}/partitions/{partition}/cursors/kafka");
            let rest = actix_web::rt::task::spawn_blocking(move || {
                request(b, "GET", &path, None).expect("b's GET")
            })
            .await
            .expect("the GET's task");
            let beyond = log
                .seek(TOPIC, partition, "kafka", 1_000_000, None)
                .await
                .err()
                .map(|err| err.code());
            let deleted = log
                .delete_cursor(TOPIC, partition, "kafka")
                .await
                .map_err(text);
            let after_delete = log.committed(TOPIC, partition, "kafka").await.map_err(text);
            let _ = answers.send(Answers {
                seeks,
                committed,
                rest,
                beyond,
                deleted,
                after_delete,
            });
            handle.stop(false).await;
            log.shutdown().await.expect("the log shuts down");
        });
    });
    let b = Node::start("b", &etcd, &s3);
    let view = wait_for_balance(b.addr(), 2);
    let owned = owners(&view);
    let partition = (0..PARTITIONS)
        .find(|&partition| owned.get(&volume_of(partition)).map(String::as_str) == Some("b"))
        .unwrap_or_else(|| panic!("b holds none of the partitions: {view}"));
    // Records through the embedded node, once both serve: it reaches b for them.
    let started = Instant::now();
    let mut written = 0;
    while written < 3 {
        match append(addr, partition, &format!("r-{written}")) {
            Ok(_) => written += 1,
            Err(err) => {
                assert!(started.elapsed() < Duration::from_secs(30), "{err}");
                thread::sleep(Duration::from_millis(100));
            }
        }
    }
    let _ = go.send((partition, b.addr()));

    let answers = answered
        .recv_timeout(Duration::from_secs(60))
        .expect("the embedded node's answers");
    assert_eq!(answers.seeks, [Ok(3), Ok(1)], "{answers:?}");
    assert_eq!(
        answers.committed,
        Ok(Some(Committed {
            offset: 1,
            metadata: Some("back".into())
        })),
        "{answers:?}"
    );
    assert_eq!(
        answers.rest,
        (200, json!({"cursor": 1, "metadata": "back"})),
        "b holds the cursor the embedded node sought"
    );
    assert_eq!(
        answers.beyond,
        Some(ErrorCode::InvalidOffset),
        "{answers:?}"
    );
    assert_eq!(answers.deleted, Ok(true), "{answers:?}");
    assert_eq!(answers.after_delete, Ok(None), "{answers:?}");
    let path = format!("/topics/{TOPIC}/partitions/{partition}/cursors/kafka");
    assert_eq!(
        request(b.addr(), "GET", &path, None).expect("b's GET"),
        (200, json!({"cursor": null}))
    );
    application.join().expect("the application ends");
    assert!(
        !crate::common::stored_partitions(dir.path()).contains(&(TOPIC.to_owned(), partition)),
        "the embedded node stored nothing of b's partition"
    );
    drop(b);
}
