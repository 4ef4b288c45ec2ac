//! The REST server over a real socket on 127.0.0.1 (API.md): every endpoint family answered
//! with the contract's paths, fields and status codes, by an in-process `HttpServer` serving
//! `durability::http::service`, talked to with a hand-written HTTP/1.1 client.

use std::time::{Duration, Instant};

use durability::config::ColdKind;
use serde_json::{Value, json};

use crate::common::TestServer;

/// Milliseconds since the Unix epoch, now.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The offsets of a page's (or lease's) `records`.
fn offsets_of(body: &Value) -> Vec<u64> {
    body["records"]
        .as_array()
        .unwrap_or_else(|| panic!("no records in {body}"))
        .iter()
        .map(|record| record["offset"].as_u64().unwrap())
        .collect()
}

/// Appends keyless records with these payloads to one partition; panics unless `202`.
async fn append(server: &TestServer, topic: &str, partition: u32, payloads: &[Value]) -> Vec<u64> {
    let records: Vec<Value> = payloads
        .iter()
        .map(|payload| json!({ "payload": payload }))
        .collect();
    let (status, body) = server
        .post(
            &format!("/topics/{topic}/partitions/{partition}/records"),
            Value::Array(records),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    body["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|offset| offset.as_u64().unwrap())
        .collect()
}

/// A partition's bounds as `(oldestOffset, hotOffset, nextOffset)`.
async fn bounds(server: &TestServer, topic: &str, partition: u32) -> (u64, u64, u64) {
    let (status, body) = server
        .get(&format!("/topics/{topic}/partitions/{partition}/bounds"))
        .await;
    assert_eq!(status, 200, "{body}");
    (
        body["oldestOffset"].as_u64().unwrap(),
        body["hotOffset"].as_u64().unwrap(),
        body["nextOffset"].as_u64().unwrap(),
    )
}

/// Checks that `body` is a load snapshot with every field of the contract.
fn assert_load_shape(load: &Value) {
    assert!(load["observedAt"].is_i64(), "{load}");
    assert_eq!(load["windowMs"], json!(60_000), "{load}");
    for direction in ["inbound", "outbound"] {
        let pressure = &load[direction];
        assert!(pressure["inFlight"].is_u64(), "{load}");
        assert!(pressure["completed"].is_u64(), "{load}");
        assert!(
            pressure["averageProcessingMs"].is_null() || pressure["averageProcessingMs"].is_f64(),
            "{load}"
        );
    }
    assert!(load["outbound"]["pendingDeliveries"].is_u64(), "{load}");
    assert!(load["inbound"].get("pendingDeliveries").is_none(), "{load}");
}

/// `GET /healthz` answers `200 {"status": "ok"}`.
#[actix::test]
async fn healthz_answers_ok() {
    let server = TestServer::start(|_| {});
    let (status, body) = server.get("/healthz").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"status": "ok"}));
    server.stop().await;
}

/// Keyed events go to the FNV-1a partition of their `partitionKey` ("user-1" → 4, "user-2" →
/// 3 of 8), answer one `{partition, offset}` per event in input order, and a re-sent
/// deduplication key answers its original partition and offset and writes nothing.
#[actix::test]
async fn keyed_events_are_routed_and_deduplicated() {
    let server = TestServer::start(|_| {});
    let events = json!([
        {"partitionKey": "user-1", "payload": {"n": 1}, "key": "order-1"},
        {"partitionKey": "user-2", "payload": "two", "key": "order-2"},
        {"partitionKey": "user-1", "payload": [1, 2, 3]},
    ]);
    let (status, body) = server.post("/topics/events/records", events).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        body,
        json!({"records": [
            {"partition": 4, "offset": 0},
            {"partition": 3, "offset": 0},
            {"partition": 4, "offset": 1},
        ]})
    );

    // The same keys again, with other payloads and in another order: the originals answer.
    let again = json!([
        {"partitionKey": "user-2", "payload": "changed", "key": "order-2"},
        {"partitionKey": "user-1", "payload": {"n": 99}, "key": "order-1"},
    ]);
    let (status, body) = server.post("/topics/events/records", again).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        body,
        json!({"records": [{"partition": 3, "offset": 0}, {"partition": 4, "offset": 0}]})
    );
    assert_eq!(bounds(&server, "events", 4).await, (0, 0, 2));
    assert_eq!(bounds(&server, "events", 3).await, (0, 0, 1));
    let (_, page) = server.get("/topics/events/partitions/4/records").await;
    assert_eq!(page["records"][0]["payload"], json!({"n": 1}));
    assert_eq!(page["records"][0]["key"], json!("order-1"));
    assert_eq!(page["records"][1]["payload"], json!([1, 2, 3]));

    // A key repeated inside one request is written once; both events answer its offset.
    let repeated = json!([
        {"partitionKey": "user-1", "payload": "first", "key": "twice"},
        {"partitionKey": "user-1", "payload": "second", "key": "twice"},
    ]);
    let (status, body) = server.post("/topics/events/records", repeated).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        body,
        json!({"records": [{"partition": 4, "offset": 2}, {"partition": 4, "offset": 2}]})
    );
    assert_eq!(bounds(&server, "events", 4).await, (0, 0, 3));
    server.stop().await;
}

/// A direct append to one partition answers `202 {"offsets", "load"}` with offsets in input
/// order and a load snapshot of that partition.
#[actix::test]
async fn direct_append_answers_offsets_and_load() {
    let server = TestServer::start(|_| {});
    let (status, body) = server
        .post(
            "/topics/events/partitions/2/records",
            json!([{"payload": {"a": 1}, "key": "k-1"}, {"payload": null}, {"payload": 3.5}]),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["offsets"], json!([0, 1, 2]));
    assert_load_shape(&body["load"]);
    let object = body.as_object().unwrap();
    assert_eq!(object.len(), 2, "{body}");

    let (status, body) = server
        .post(
            "/topics/events/partitions/2/records",
            json!([{"payload": "x"}, {"payload": "k-1 again", "key": "k-1"}]),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["offsets"], json!([3, 0]));
    assert_eq!(bounds(&server, "events", 2).await, (0, 0, 4));
    server.stop().await;
}

/// A read pages with `from` and `limit`: `nextOffset` after the page, `lag` to the end of the
/// log, each record's `offset`, `key` (`null` without one), `payload` (the JSON value sent) and
/// `appendedAt`; a read of a partition never written answers an empty page and creates nothing.
#[actix::test]
async fn read_pages_with_from_and_limit() {
    let server = TestServer::start(|_| {});
    let before = now_ms();
    let (status, _) = server
        .post(
            "/topics/events/partitions/1/records",
            json!([
                {"payload": {"nested": {"list": [1, "two", null]}}, "key": "first"},
                {"payload": "b"},
                {"payload": {"text": "h\u{e9}llo \"q\"\n\ttab \u{1F600}", "n": -1.25e-3}},
                {"payload": true, "key": "fourth"},
                {"payload": "e"},
            ]),
        )
        .await;
    assert_eq!(status, 202);

    let (status, page) = server
        .get("/topics/events/partitions/1/records?from=1&limit=2")
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(offsets_of(&page), vec![1, 2]);
    assert_eq!(page["nextOffset"], json!(3));
    assert_eq!(page["lag"], json!(2));
    let record = &page["records"][0];
    assert_eq!(record["key"], Value::Null);
    assert_eq!(record["payload"], json!("b"));
    let appended_at = record["appendedAt"].as_i64().unwrap();
    assert!(appended_at >= before - 1_000 && appended_at <= now_ms() + 1_000);
    assert_eq!(record.as_object().unwrap().len(), 4, "{record}");

    // Default `from`: the oldest readable offset; default `limit`: maxBatchSize.
    let (status, page) = server.get("/topics/events/partitions/1/records").await;
    assert_eq!(status, 200);
    assert_eq!(offsets_of(&page), vec![0, 1, 2, 3, 4]);
    assert_eq!(
        page["records"][0]["payload"],
        json!({"nested": {"list": [1, "two", null]}})
    );
    assert_eq!(page["records"][0]["key"], json!("first"));
    assert_eq!(page["records"][3]["key"], json!("fourth"));
    assert_eq!(
        page["records"][2]["payload"],
        json!({"text": "h\u{e9}llo \"q\"\n\ttab \u{1F600}", "n": -1.25e-3})
    );
    assert_eq!(
        (page["nextOffset"].clone(), page["lag"].clone()),
        (json!(5), json!(0))
    );

    // From the end: an empty page.
    let (status, page) = server
        .get("/topics/events/partitions/1/records?from=5")
        .await;
    assert_eq!(status, 200);
    assert_eq!(page, json!({"records": [], "nextOffset": 5, "lag": 0}));

    // Never written: empty, and not created.
    let (status, page) = server.get("/topics/events/partitions/6/records").await;
    assert_eq!(status, 200);
    assert_eq!(page, json!({"records": [], "nextOffset": 0, "lag": 0}));
    assert!(!server.log.stores("events", 6));
    server.stop().await;
}

/// A read with `waitMs` on an empty position answers as soon as a concurrent request appends
/// a record, well before the wait ends, with that record.
#[actix::test]
async fn long_poll_read_answers_when_a_record_arrives() {
    let server = TestServer::start(|_| {});
    append(&server, "events", 0, &[json!("old")]).await;
    let started = Instant::now();
    let waiting = server.get("/topics/events/partitions/0/records?from=1&waitMs=20000");
    let producing = async {
        actix::clock::sleep(Duration::from_millis(300)).await;
        append(&server, "events", 0, &[json!("new")]).await
    };
    let ((status, page), offsets) = futures_util::future::join(waiting, producing).await;
    let elapsed = started.elapsed();
    assert_eq!(offsets, vec![1]);
    assert_eq!(status, 200, "{page}");
    assert_eq!(offsets_of(&page), vec![1]);
    assert_eq!(page["records"][0]["payload"], json!("new"));
    assert_eq!(page["nextOffset"], json!(2));
    assert!(
        elapsed < Duration::from_secs(5),
        "the read answered after {elapsed:?}"
    );
    server.stop().await;
}

/// A read with `waitMs` and nothing arriving answers an empty page after about the wait.
#[actix::test]
async fn long_poll_read_without_records_answers_empty_after_the_wait() {
    let server = TestServer::start(|_| {});
    append(&server, "events", 0, &[json!("a")]).await;
    let started = Instant::now();
    let (status, page) = server
        .get("/topics/events/partitions/0/records?from=1&waitMs=600")
        .await;
    let elapsed = started.elapsed();
    assert_eq!(status, 200);
    assert_eq!(page, json!({"records": [], "nextOffset": 1, "lag": 0}));
    assert!(
        elapsed >= Duration::from_millis(550) && elapsed < Duration::from_secs(5),
        "answered after {elapsed:?}"
    );

    // A partition never written waits too, and is still not created.
    let started = Instant::now();
    let (status, page) = server
        .get("/topics/events/partitions/5/records?waitMs=300")
        .await;
    assert_eq!(status, 200);
    assert_eq!(page, json!({"records": [], "nextOffset": 0, "lag": 0}));
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(!server.log.stores("events", 5));
    server.stop().await;
}

/// The end-to-end flow: events for several partition keys, a group poll sees them all (one
/// entry per partition, in order), committing the polled `nextOffset`s leaves nothing new for
/// that group, and a second group still sees everything.
#[actix::test]
async fn group_poll_commit_and_poll_again() {
    let server = TestServer::start(|_| {});
    let events: Vec<Value> = (1..=6)
        .map(|n| json!({"partitionKey": format!("user-{n}"), "payload": {"n": n}}))
        .collect();
    let (status, produced) = server
        .post("/topics/orders/records", Value::Array(events))
        .await;
    assert_eq!(status, 202, "{produced}");

    let (status, polled) = server.get("/topics/orders/groups/billing/poll").await;
    assert_eq!(status, 200, "{polled}");
    let partitions = polled["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 8);
    let mut seen = Vec::new();
    let mut offsets = serde_json::Map::new();
    for (index, entry) in partitions.iter().enumerate() {
        assert_eq!(entry["partition"], json!(index));
        assert_eq!(entry["lag"], json!(0));
        for record in entry["records"].as_array().unwrap() {
            seen.push(record["payload"]["n"].as_u64().unwrap());
        }
        let next = entry["nextOffset"].as_u64().unwrap();
        assert_eq!(next as usize, entry["records"].as_array().unwrap().len());
        offsets.insert(index.to_string(), json!(next));
    }
    seen.sort_unstable();
    assert_eq!(seen, vec![1, 2, 3, 4, 5, 6]);
    for (placed, n) in produced["records"].as_array().unwrap().iter().zip(1..) {
        let partition = placed["partition"].as_u64().unwrap() as usize;
        let found = partitions[partition]["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|record| {
                record["payload"]["n"] == json!(n) && record["offset"] == placed["offset"]
            });
        assert!(found, "event {n} not at {placed}");
    }

    let (status, committed) = server
        .post(
            "/topics/orders/groups/billing/commit",
            json!({ "offsets": offsets }),
        )
        .await;
    assert_eq!(status, 200, "{committed}");
    assert_eq!(committed, json!({ "cursors": offsets }));

    let (status, again) = server.get("/topics/orders/groups/billing/poll").await;
    assert_eq!(status, 200);
    for (index, entry) in again["partitions"].as_array().unwrap().iter().enumerate() {
        assert_eq!(entry["records"], json!([]), "partition {index}");
        assert_eq!(entry["nextOffset"], offsets[&index.to_string()]);
    }

    let (status, other) = server
        .get("/topics/orders/groups/search/poll?limit=100")
        .await;
    assert_eq!(status, 200);
    let total: usize = other["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["records"].as_array().unwrap().len())
        .sum();
    assert_eq!(total, 6);

    // A commit at or below the cursor changes nothing.
    let (status, lower) = server
        .post(
            "/topics/orders/groups/billing/commit",
            json!({"offsets": {"4": 0}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(lower, json!({"cursors": {"4": offsets["4"]}}));
    server.stop().await;
}

/// A group poll with `waitMs` answers as soon as any partition gets a record.
#[actix::test]
async fn long_poll_group_answers_when_any_partition_gets_a_record() {
    let server = TestServer::start(|_| {});
    let started = Instant::now();
    let waiting = server.get("/topics/orders/groups/billing/poll?waitMs=20000");
    let producing = async {
        actix::clock::sleep(Duration::from_millis(300)).await;
        server
            .post(
                "/topics/orders/records",
                json!([{"partitionKey": "user-2", "payload": "hello"}]),
            )
            .await
    };
    let ((status, polled), (produced, _)) = futures_util::future::join(waiting, producing).await;
    assert_eq!(produced, 202);
    assert_eq!(status, 200, "{polled}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        polled["partitions"][3]["records"][0]["payload"],
        json!("hello")
    );
    server.stop().await;
}

/// Cursors: `PUT` commits one partition (forward only) and answers `{"cursor"}`, `GET` lists
/// every group's cursor, `DELETE` removes one and answers `204` (also when there is none).
#[actix::test]
async fn cursors_put_get_delete() {
    let server = TestServer::start(|_| {});
    append(&server, "events", 0, &[json!(1), json!(2), json!(3)]).await;
    let (status, body) = server
        .put(
            "/topics/events/partitions/0/cursors/billing",
            json!({"offset": 2}),
        )
        .await;
    assert_eq!((status, body), (200, json!({"cursor": 2})));
    let (status, body) = server
        .put(
            "/topics/events/partitions/0/cursors/billing",
            json!({"offset": 1}),
        )
        .await;
    assert_eq!((status, body), (200, json!({"cursor": 2})));
    let (status, body) = server
        .put(
            "/topics/events/partitions/0/cursors/search:v2",
            json!({"offset": 3}),
        )
        .await;
    assert_eq!((status, body), (200, json!({"cursor": 3})));

    let (status, body) = server.get("/topics/events/partitions/0/cursors").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"cursors": {"billing": 2, "search:v2": 3}}));

    // The group poll starts from the committed cursor.
    let (_, polled) = server.get("/topics/events/groups/billing/poll").await;
    assert_eq!(offsets_of(&polled["partitions"][0]), vec![2]);

    let (status, body) = server
        .delete("/topics/events/partitions/0/cursors/billing")
        .await;
    assert_eq!((status, body), (204, Value::Null));
    let (_, body) = server.get("/topics/events/partitions/0/cursors").await;
    assert_eq!(body, json!({"cursors": {"search:v2": 3}}));
    let (status, _) = server
        .delete("/topics/events/partitions/0/cursors/billing")
        .await;
    assert_eq!(status, 204);
    // After the delete, a commit may start lower.
    let (_, body) = server
        .put(
            "/topics/events/partitions/0/cursors/billing",
            json!({"offset": 1}),
        )
        .await;
    assert_eq!(body, json!({"cursor": 1}));

    // A partition never written has no cursors, and is not created.
    let (status, body) = server.get("/topics/events/partitions/7/cursors").await;
    assert_eq!((status, body), (200, json!({"cursors": {}})));
    assert!(!server.log.stores("events", 7));
    server.stop().await;
}

/// Leases: a claim answers the range with every field, a second claim at `maxParallelism`
/// answers `204`, the list shows states, extend answers `expiresAt`, nack answers `204` and
/// redelivers under a new `batchId`, ack answers `{"cursor"}`, a per-topic claim carries
/// `"partition"`, and nothing left answers `204`.
#[actix::test]
async fn leases_claim_list_extend_nack_ack() {
    let server = TestServer::start(|_| {});
    // Nothing written yet: nothing to lease, and nothing created.
    let (status, body) = server
        .post(
            "/topics/jobs/partitions/5/groups/workers/leases",
            Value::Null,
        )
        .await;
    assert_eq!((status, body), (204, Value::Null));
    let (status, _) = server
        .post("/topics/jobs/groups/workers/leases", Value::Null)
        .await;
    assert_eq!(status, 204);
    assert!(!server.log.config.storage.data_dir.join("jobs").exists());

    append(&server, "jobs", 0, &[json!("a"), json!("b"), json!("c")]).await;
    let base = "/topics/jobs/partitions/0/groups/workers/leases";

    let before = now_ms();
    let (status, first) = server.post(&format!("{base}?limit=2"), Value::Null).await;
    assert_eq!(status, 200, "{first}");
    let batch = first["batchId"].as_str().unwrap().to_owned();
    assert!(!batch.is_empty());
    assert_eq!(first["group"], json!("workers"));
    assert_eq!(first["firstOffset"], json!(0));
    assert_eq!(first["lastOffset"], json!(1));
    assert_eq!(first["attempt"], json!(1));
    let expires_at = first["expiresAt"].as_i64().unwrap();
    assert!(expires_at >= before + 29_000, "{first}");
    assert_eq!(offsets_of(&first), vec![0, 1]);
    assert_eq!(first["records"][1]["payload"], json!("b"));
    assert!(first.get("partition").is_none(), "{first}");

    // At maxParallelism (1): nothing available now.
    let (status, body) = server.post(base, Value::Null).await;
    assert_eq!((status, body), (204, Value::Null));

    let (status, list) = server.get(base).await;
    assert_eq!(status, 200);
    assert_eq!(
        list,
        json!({"leases": [{
            "batchId": batch, "firstOffset": 0, "lastOffset": 1, "state": "active",
            "attempt": 1, "expiresAt": expires_at,
        }]})
    );

    let (status, extended) = server
        .post(&format!("{base}/{batch}/extend"), Value::Null)
        .await;
    assert_eq!(status, 200, "{extended}");
    assert!(extended["expiresAt"].as_i64().unwrap() >= expires_at);
    assert_eq!(extended.as_object().unwrap().len(), 1);

    let (status, body) = server
        .post(&format!("{base}/{batch}/nack"), json!({"delayMs": 0}))
        .await;
    assert_eq!((status, body), (204, Value::Null));

    let (status, second) = server.post(&format!("{base}?limit=2"), Value::Null).await;
    assert_eq!(status, 200, "{second}");
    assert_ne!(second["batchId"], json!(batch));
    assert_eq!(
        (second["firstOffset"].clone(), second["attempt"].clone()),
        (json!(0), json!(2))
    );
    let second_batch = second["batchId"].as_str().unwrap().to_owned();
    let (status, acked) = server
        .post(&format!("{base}/{second_batch}/ack"), Value::Null)
        .await;
    assert_eq!((status, acked), (200, json!({"cursor": 2})));

    // Per topic: the next range, wherever it is, says which partition.
    let (status, any) = server
        .post("/topics/jobs/groups/workers/leases", Value::Null)
        .await;
    assert_eq!(status, 200, "{any}");
    assert_eq!(any["partition"], json!(0));
    assert_eq!(any["firstOffset"], json!(2));
    assert_eq!(any["group"], json!("workers"));
    let any_batch = any["batchId"].as_str().unwrap().to_owned();
    let (status, acked) = server
        .post(&format!("{base}/{any_batch}/ack"), Value::Null)
        .await;
    assert_eq!((status, acked), (200, json!({"cursor": 3})));
    let (status, _) = server
        .post("/topics/jobs/groups/workers/leases", Value::Null)
        .await;
    assert_eq!(status, 204);
    let (_, cursors) = server.get("/topics/jobs/partitions/0/cursors").await;
    assert_eq!(cursors, json!({"cursors": {"workers": 3}}));

    // A nack with a delay leaves the range pending, and pending ranges count toward
    // maxParallelism; a nack without a body is accepted too.
    let slow = "/topics/jobs/partitions/0/groups/slow/leases";
    let (_, held) = server.post(slow, Value::Null).await;
    let held_batch = held["batchId"].as_str().unwrap().to_owned();
    let (status, _) = server
        .post(
            &format!("{slow}/{held_batch}/nack"),
            json!({"delayMs": 60_000}),
        )
        .await;
    assert_eq!(status, 204);
    let (_, list) = server.get(slow).await;
    assert_eq!(list["leases"][0]["state"], json!("pending"), "{list}");
    let (status, _) = server.post(slow, Value::Null).await;
    assert_eq!(status, 204);
    let (_, fresh) = server
        .post("/topics/jobs/partitions/0/groups/other/leases", Value::Null)
        .await;
    let fresh_batch = fresh["batchId"].as_str().unwrap().to_owned();
    let (status, _) = server
        .send(
            "POST",
            &format!("/topics/jobs/partitions/0/groups/other/leases/{fresh_batch}/nack"),
            None,
            None,
        )
        .await;
    assert_eq!(status, 204);
    server.stop().await;
}

/// Bounds and load: `{"oldestOffset", "hotOffset", "nextOffset"}`, and a load snapshot whose
/// `pendingDeliveries` is `nextOffset` minus the slowest cursor (0 with no cursors).
#[actix::test]
async fn bounds_and_load() {
    let server = TestServer::start(|_| {});
    let (status, body) = server.get("/topics/events/partitions/0/bounds").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"oldestOffset": 0, "hotOffset": 0, "nextOffset": 0})
    );
    let (status, load) = server.get("/topics/events/partitions/0/load").await;
    assert_eq!(status, 200, "{load}");
    assert_load_shape(&load);
    assert_eq!(load["outbound"]["pendingDeliveries"], json!(0));
    assert_eq!(load["inbound"]["averageProcessingMs"], Value::Null);
    assert_eq!(load["outbound"]["averageProcessingMs"], Value::Null);
    assert!(!server.log.stores("events", 0));

    append(
        &server,
        "events",
        0,
        &[json!(1), json!(2), json!(3), json!(4)],
    )
    .await;
    let (_, body) = server.get("/topics/events/partitions/0/bounds").await;
    assert_eq!(
        body,
        json!({"oldestOffset": 0, "hotOffset": 0, "nextOffset": 4})
    );
    let (_, load) = server.get("/topics/events/partitions/0/load").await;
    assert_load_shape(&load);
    assert_eq!(load["outbound"]["pendingDeliveries"], json!(0));
    assert!(
        load["inbound"]["completed"].as_u64().unwrap() >= 1,
        "{load}"
    );

    server
        .put(
            "/topics/events/partitions/0/cursors/fast",
            json!({"offset": 3}),
        )
        .await;
    server
        .put(
            "/topics/events/partitions/0/cursors/slow",
            json!({"offset": 1}),
        )
        .await;
    let (_, load) = server.get("/topics/events/partitions/0/load").await;
    assert_eq!(load["outbound"]["pendingDeliveries"], json!(3), "{load}");
    server.stop().await;
}

/// Trim runs retention now (`retention.max_records` 2, no cold tier): `{"removed": 2}` of 4
/// records, the bounds move, and a second trim removes nothing.
#[actix::test]
async fn trim_applies_retention_now() {
    let server = TestServer::start(|config| {
        config.retention.max_records = 2;
        config.retention.sweep_interval_ms = 3_600_000;
    });
    append(
        &server,
        "events",
        0,
        &[json!(1), json!(2), json!(3), json!(4)],
    )
    .await;
    let (status, body) = server
        .post("/topics/events/partitions/0/trim", Value::Null)
        .await;
    assert_eq!((status, body), (200, json!({"removed": 2})));
    assert_eq!(bounds(&server, "events", 0).await, (2, 2, 4));
    let (_, page) = server.get("/topics/events/partitions/0/records").await;
    assert_eq!(offsets_of(&page), vec![2, 3]);
    let (status, body) = server
        .post("/topics/events/partitions/0/trim", Value::Null)
        .await;
    assert_eq!((status, body), (200, json!({"removed": 0})));
    // Trimming a partition never written removes nothing and creates nothing.
    let (status, body) = server
        .post("/topics/events/partitions/3/trim", Value::Null)
        .await;
    assert_eq!((status, body), (200, json!({"removed": 0})));
    assert!(!server.log.stores("events", 3));
    server.stop().await;
}

/// With a filesystem cold tier, trim flushes old records to a cold segment (still readable),
/// and `cold/forget` with `{"before"}` forgets the segments ending below it:
/// `{"forgotten": n}`.
#[actix::test]
async fn trim_to_cold_then_forget() {
    let server = TestServer::start(|config| {
        config.cold.kind = ColdKind::Fs;
        config.retention.max_records = 2;
        config.retention.sweep_interval_ms = 3_600_000;
    });
    let payloads: Vec<Value> = (0..6).map(|n| json!({"n": n})).collect();
    append(&server, "events", 0, &payloads).await;
    let (status, body) = server
        .post("/topics/events/partitions/0/trim", Value::Null)
        .await;
    assert_eq!((status, body), (200, json!({"removed": 4})));
    assert_eq!(bounds(&server, "events", 0).await, (0, 4, 6));
    let (status, page) = server
        .get("/topics/events/partitions/0/records?from=0")
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(offsets_of(&page), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(page["records"][1]["payload"], json!({"n": 1}));

    let (status, body) = server
        .post(
            "/topics/events/partitions/0/cold/forget",
            json!({"before": 4}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let forgotten = body["forgotten"].as_u64().unwrap();
    assert!(forgotten >= 1, "{body}");
    assert_eq!(body.as_object().unwrap().len(), 1);
    assert_eq!(bounds(&server, "events", 0).await, (4, 4, 6));
    let (status, body) = server
        .post(
            "/topics/events/partitions/0/cold/forget",
            json!({"before": 4}),
        )
        .await;
    assert_eq!((status, body), (200, json!({"forgotten": 0})));
    server.stop().await;
}

/// `GET /topics` lists written topics by name with their partition count (a read creates
/// none), and `GET /topics/{topic}` details every partition in order, never-written ones at
/// zero.
#[actix::test]
async fn topics_and_topic_detail() {
    let server = TestServer::start(|_| {});
    let (status, body) = server.get("/topics").await;
    assert_eq!((status, body), (200, json!({"topics": [], "next": null})));

    append(&server, "beta", 1, &[json!("b")]).await;
    append(
        &server,
        "alpha",
        2,
        &[json!("a1"), json!("a2"), json!("a3")],
    )
    .await;
    let (status, _) = server.get("/topics/gamma/partitions/0/records").await;
    assert_eq!(status, 200);
    let (status, polled) = server.get("/topics/gamma/groups/billing/poll").await;
    assert_eq!(status, 200);
    assert_eq!(polled["partitions"].as_array().unwrap().len(), 8);
    server
        .put(
            "/topics/alpha/partitions/2/cursors/billing",
            json!({"offset": 1}),
        )
        .await;

    let (status, body) = server.get("/topics").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"topics": [{"name": "alpha", "partitions": 8}, {"name": "beta", "partitions": 8}], "next": null})
    );

    let (status, detail) = server.get("/topics/alpha").await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["name"], json!("alpha"));
    let partitions = detail["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 8);
    for (index, entry) in partitions.iter().enumerate() {
        assert_eq!(entry["partition"], json!(index));
        if index == 2 {
            assert_eq!(
                entry,
                &json!({"partition": 2, "oldestOffset": 0, "hotOffset": 0, "nextOffset": 3,
                        "cursors": {"billing": 1}, "pendingDeliveries": 2})
            );
        } else {
            assert_eq!(
                entry,
                &json!({"partition": index, "oldestOffset": 0, "hotOffset": 0, "nextOffset": 0,
                        "cursors": {}, "pendingDeliveries": 0})
            );
        }
    }

    // A topic never written: every partition at zero, and nothing created.
    let (status, detail) = server.get("/topics/delta").await;
    assert_eq!(status, 200);
    assert_eq!(detail["partitions"].as_array().unwrap().len(), 8);
    assert!(!server.log.config.storage.data_dir.join("delta").exists());
    server.stop().await;
}

/// With an auth token, every endpoint but `/healthz` (GET or HEAD) needs `Authorization:
/// Bearer <token>` (the scheme in any case): none or a wrong one is `401 unauthorized` in the
/// JSON error shape with `WWW-Authenticate: Bearer` (and writes nothing), the right one is
/// served.
#[actix::test]
async fn bearer_token_is_required_except_for_healthz() {
    let mut server = TestServer::start(|config| config.server.auth_token = "s3cret".into());
    let (status, body) = server.get("/healthz").await;
    assert_eq!((status, body), (200, json!({"status": "ok"})));

    for token in [None, Some("wrong"), Some("s3cret2"), Some("")] {
        let (status, body) = server.send("GET", "/topics", None, token).await;
        assert_eq!(status, 401, "token {token:?}: {body}");
        assert_eq!(body["error"]["code"], json!("unauthorized"), "{body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
    let (status, body) = server
        .send(
            "POST",
            "/topics/events/partitions/0/records",
            Some(r#"[{"payload": 1}]"#),
            None,
        )
        .await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], json!("unauthorized"));
    assert!(!server.log.stores("events", 0));
    // Raw requests: the whole answer, head included.
    let addr = server.addr;
    let raw = move |request: String| {
        actix_web::rt::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream.write_all(request.as_bytes()).unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).unwrap();
            response
        })
    };
    let request = |method: &str, path: &str, authorization: &str| {
        format!("{method} {path} HTTP/1.1\r\nHost: x\r\n{authorization}Connection: close\r\n\r\n")
    };
    // Not the Bearer scheme: 401, which names the scheme that would do.
    let response = raw(request("GET", "/topics", "Authorization: Basic s3cret\r\n"))
        .await
        .unwrap();
    assert!(response.starts_with("HTTP/1.1 401"), "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("\r\nwww-authenticate: bearer\r\n"),
        "{response}"
    );
    // The scheme's case does not matter.
    let response = raw(request(
        "GET",
        "/topics",
        "Authorization: bearer s3cret\r\n",
    ))
    .await
    .unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    // HEAD /healthz needs no token either.
    let response = raw(request("HEAD", "/healthz", "")).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");

    server.token = Some("s3cret".into());
    let (status, body) = server.get("/topics").await;
    assert_eq!((status, body), (200, json!({"topics": [], "next": null})));
    append(&server, "events", 0, &[json!(1)]).await;
    let (status, _) = server.get("/topics/events/partitions/0/records").await;
    assert_eq!(status, 200);
    server.stop().await;
}

/// Sends `head` and then `body` over a fresh connection without finishing the body, and reads
/// whatever the server answers (the status line's code and the JSON after the head).
fn answer_to_unfinished_body(addr: std::net::SocketAddr, head: &str, body: &str) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut response = Vec::new();
    let mut buffer = [0; 4096];
    // Until the head and a complete JSON body arrived (the server may keep the socket open).
    loop {
        let read = stream.read(&mut buffer).unwrap_or(0);
        response.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&response).into_owned();
        if let Some((head, json)) = text.split_once("\r\n\r\n")
            && let Ok(json) = serde_json::from_str::<Value>(json)
        {
            let status = head.split(' ').nth(1).unwrap().parse().unwrap();
            return (status, json);
        }
        assert!(read > 0, "the connection closed without an answer: {text}");
    }
}

/// A body that stops arriving (4 of 1,000 declared bytes) is answered `400 invalid_request`
/// once `server.request_timeout_ms` passed, instead of holding the connection; a declared
/// `Content-Length` over `server.max_body_bytes` is answered `413` before any byte is sent.
/// Neither appends anything.
#[actix::test]
async fn slow_and_oversized_bodies_are_refused_without_waiting_for_them() {
    let server = TestServer::start(|config| {
        config.server.request_timeout_ms = 200;
        config.server.max_body_bytes = 4096;
        config.log.max_record_bytes = 1024;
    });
    let addr = server.addr;
    // A POST of `body` to a partition's records, declaring `declared` bytes.
    let post = |declared: usize, body: &'static str| {
        actix_web::rt::task::spawn_blocking(move || {
            let head = format!(
                "POST /topics/slow/partitions/0/records HTTP/1.1\r\nHost: x\r\n\
                 Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
            );
            answer_to_unfinished_body(addr, &head, body)
        })
    };
    let (status, body) = post(1000, "[{\"p").await.unwrap();
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request");

    let (status, body) = post(100_000_000, "").await.unwrap();
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "payload_too_large");

    assert!(!server.log.stores("slow", 0), "nothing was appended");
    server.stop().await;
}

/// A known path with a method it does not serve answers `405 method_not_allowed` with `Allow`
/// naming the methods it does serve, `/healthz` included; an unknown path stays
/// `404 not_found`.
#[actix::test]
async fn a_wrong_method_on_a_known_path_is_405_with_allow() {
    let server = TestServer::start(|_| {});
    let addr = server.addr;
    let exchange = move |method: &'static str, path: &'static str| {
        actix_web::rt::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            let request = format!(
                "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).unwrap();
            let (head, body) = response.split_once("\r\n\r\n").unwrap();
            let allow = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("allow")
                        .then(|| value.trim().to_owned())
                })
                .unwrap_or_default();
            let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
            (
                status,
                allow,
                serde_json::from_str::<Value>(body).unwrap_or(Value::Null),
            )
        })
    };
    let (status, allow, body) = exchange("DELETE", "/topics/t/partitions/0/records")
        .await
        .unwrap();
    assert_eq!(status, 405, "{body}");
    assert_eq!(body["error"]["code"], json!("method_not_allowed"), "{body}");
    let mut methods: Vec<&str> = allow.split(',').map(str::trim).collect();
    methods.sort_unstable();
    assert_eq!(methods, ["GET", "POST"]);

    let (status, allow, _) = exchange("GET", "/topics/t/records").await.unwrap();
    assert_eq!((status, allow.as_str()), (405, "POST"));

    // `/healthz` sits outside the routes that need a token, and answers the same way.
    let (status, allow, body) = exchange("TRACE", "/healthz").await.unwrap();
    assert_eq!(status, 405, "{body}");
    assert_eq!(body["error"]["code"], json!("method_not_allowed"), "{body}");
    assert_eq!(allow, "GET, HEAD");

    let (status, _, body) = exchange("GET", "/no/such/path").await.unwrap();
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], json!("not_found"));
    assert!(!server.log.stores("t", 0));
    server.stop().await;
}

/// Reads and leases are the partition's outbound load: each counts in flight while it runs,
/// then in `completed` and `averageProcessingMs` of the window.
#[actix::test]
async fn load_measures_reads_and_leases_as_outbound() {
    let server = TestServer::start(|config| config.leases.enabled = true);
    append(&server, "events", 0, &[json!(1), json!(2)]).await;
    let (_, load) = server.get("/topics/events/partitions/0/load").await;
    assert_eq!(load["outbound"]["completed"], json!(0), "{load}");
    assert_eq!(load["outbound"]["averageProcessingMs"], Value::Null);

    let (status, _) = server
        .get("/topics/events/partitions/0/records?from=0")
        .await;
    assert_eq!(status, 200);
    let (status, _) = server
        .post(
            "/topics/events/partitions/0/groups/workers/leases",
            json!(null),
        )
        .await;
    assert_eq!(status, 200);
    let (_, load) = server.get("/topics/events/partitions/0/load").await;
    assert_eq!(load["outbound"]["completed"], json!(2), "{load}");
    assert_eq!(load["outbound"]["inFlight"], json!(0), "{load}");
    assert!(
        load["outbound"]["averageProcessingMs"].is_number(),
        "{load}"
    );
    server.stop().await;
}

/// `GET /topics` in pages: every topic exactly once and in name order, over several volumes
/// and topics of several partitions; `next` continues and is `null` at the end; a bad `limit`
/// or `after` is `400 invalid_request`.
#[actix::test]
async fn topics_are_listed_in_pages() {
    let server = TestServer::start(|config| config.storage.volumes = 3);
    let names: Vec<String> = (0..25).map(|n| format!("t{n:02}")).collect();
    for name in &names {
        append(&server, name, 0, &[json!(1)]).await;
    }
    append(&server, "t03", 5, &[json!(1)]).await;

    let (mut seen, mut after, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let uri = match &after {
            Some(after) => format!("/topics?limit=10&after={after}"),
            None => "/topics?limit=10".to_owned(),
        };
        let (status, body) = server.get(&uri).await;
        assert_eq!(status, 200, "{body}");
        pages += 1;
        for topic in body["topics"].as_array().unwrap() {
            seen.push(topic["name"].as_str().unwrap().to_owned());
            assert_eq!(topic["partitions"], json!(8), "{topic}");
        }
        match body["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => {
                assert!(body["next"].is_null(), "{body}");
                break;
            }
        }
    }
    assert_eq!(seen, names);
    assert_eq!(pages, 3);
    let (_, all) = server.get("/topics").await;
    assert_eq!(all["topics"].as_array().unwrap().len(), 25, "{all}");
    assert!(all["next"].is_null(), "{all}");

    for bad in [
        "/topics?limit=0",
        "/topics?limit=10001",
        "/topics?limit=-1",
        "/topics?limit=x",
        "/topics?after=.hidden",
        "/topics?after=a%2Fb",
    ] {
        let (status, body) = server.get(bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(
            body["error"]["code"],
            json!("invalid_request"),
            "{bad}: {body}"
        );
    }
    server.stop().await;
}
