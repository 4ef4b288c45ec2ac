//! Records beyond a JSON payload (API.md, "Records: headers, message keys, binary payloads"):
//! binary payloads, tombstones, message keys and headers written over a real socket read back
//! in the forms the contract names, absent parts stay absent, bad parts are refused whole, the
//! parts survive the cold tier, and the record checksum covers them.

use std::time::{Duration, Instant};

use durability::config::ColdKind;
use durability::store::{AppendOutcome, Header, NewRecord, Payload};
use durability::{Config, Log};
use serde_json::{Value, json};

use crate::common::{TestServer, files_under};
use crate::damage::{mark, volume};

const TOPIC: &str = "parts";
/// Where the tests append: partition 0 of [`TOPIC`].
const RECORDS: &str = "/topics/parts/partitions/0/records";

/// Appends `records` (a JSON array of record bodies) to partition 0; panics unless `202`.
async fn append(server: &TestServer, records: Value) -> Vec<u64> {
    let (status, body) = server.post(RECORDS, records).await;
    assert_eq!(status, 202, "{body}");
    body["offsets"]
        .as_array()
        .unwrap_or_else(|| panic!("no offsets in {body}"))
        .iter()
        .map(|offset| offset.as_u64().unwrap())
        .collect()
}

/// Every record of partition 0 from offset 0, as the server shows them.
async fn read_all(server: &TestServer) -> Vec<Value> {
    let (status, page) = server.get(&format!("{RECORDS}?from=0")).await;
    assert_eq!(status, 200, "{page}");
    page["records"]
        .as_array()
        .unwrap_or_else(|| panic!("no records in {page}"))
        .clone()
}

/// `record` without its `appendedAt` (which must be there, an integer), to compare the rest
/// exactly: a part that should be absent makes the comparison fail.
#[track_caller]
fn shown(record: &Value) -> Value {
    let mut record = record.clone();
    let fields = record
        .as_object_mut()
        .unwrap_or_else(|| panic!("a record is an object"));
    let appended_at = fields.remove("appendedAt");
    assert!(
        appended_at.as_ref().is_some_and(Value::is_i64),
        "appendedAt {appended_at:?}"
    );
    record
}

/// The records of partition 0, each without its `appendedAt` (see [`shown`]).
async fn shown_all(server: &TestServer) -> Vec<Value> {
    read_all(server).await.iter().map(shown).collect()
}

/// `nextOffset` of `topic`'s `partition`.
async fn next_offset(server: &TestServer, topic: &str, partition: u32) -> u64 {
    let (status, body) = server
        .get(&format!("/topics/{topic}/partitions/{partition}/bounds"))
        .await;
    assert_eq!(status, 200, "{body}");
    body["nextOffset"].as_u64().unwrap()
}

/// Posts `body` to `path`, expects `400 invalid_request` whose message starts with
/// `message_start`, and that `topic`'s `partition` still ends where it did.
async fn refused(
    server: &TestServer,
    path: &str,
    body: Value,
    (topic, partition): (&str, u32),
    message_start: &str,
) {
    let before = next_offset(server, topic, partition).await;
    let (status, answer) = server.post(path, body.clone()).await;
    assert_eq!(status, 400, "{body} answered {answer}");
    assert_eq!(answer["error"]["code"], json!("invalid_request"), "{body}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(message_start),
        "{body}: {message:?} should start with {message_start:?}"
    );
    assert_eq!(
        next_offset(server, topic, partition).await,
        before,
        "{body} wrote something"
    );
}

// ---------------------------------------------------------------------------------------------
// The REST round trip
// ---------------------------------------------------------------------------------------------

/// A record without parts is written and shown exactly as before parts existed: `offset`,
/// `key`, `payload` and `appendedAt`, and no `payloadBase64`, `tombstone`, `messageKey*` or
/// `headers` (not even `null` or empty); `"headers": []` adds none.
#[actix::test]
async fn a_record_without_parts_shows_only_the_old_fields() {
    let server = TestServer::start(|_| {});
    let offsets = append(
        &server,
        json!([
            {"payload": {"n": 1, "s": "x"}},
            {"payload": [1, 2], "key": "dedup-1"},
            {"payload": "text", "headers": []},
        ]),
    )
    .await;
    assert_eq!(offsets, vec![0, 1, 2]);
    let records = read_all(&server).await;
    for record in &records {
        let mut fields: Vec<&str> = record
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort_unstable();
        assert_eq!(
            fields,
            ["appendedAt", "key", "offset", "payload"],
            "{record}"
        );
    }
    assert_eq!(
        records.iter().map(shown).collect::<Vec<_>>(),
        [
            json!({"offset": 0, "key": null, "payload": {"n": 1, "s": "x"}}),
            json!({"offset": 1, "key": "dedup-1", "payload": [1, 2]}),
            json!({"offset": 2, "key": null, "payload": "text"}),
        ]
    );
    server.stop().await;
}

/// A binary payload (`payloadBase64`) reads back as the same base64 and no `payload`: bytes
/// that are not UTF-8, no bytes at all, and bytes that happen to be JSON text (a payload keeps
/// the form it was stored in).
#[actix::test]
async fn a_binary_payload_reads_back_as_the_same_base64() {
    let server = TestServer::start(|_| {});
    append(
        &server,
        json!([
            {"payloadBase64": "/wD+gA=="},
            {"payloadBase64": ""},
            {"payloadBase64": "eyJuIjoxfQ==", "key": "dedup-2"},
        ]),
    )
    .await;
    assert_eq!(
        shown_all(&server).await,
        [
            json!({"offset": 0, "key": null, "payloadBase64": "/wD+gA=="}),
            json!({"offset": 1, "key": null, "payloadBase64": ""}),
            json!({"offset": 2, "key": "dedup-2", "payloadBase64": "eyJuIjoxfQ=="}),
        ]
    );
    server.stop().await;
}

/// A message key reads back as text where its bytes are UTF-8 (whichever form it was sent in)
/// and as base64 otherwise; an empty one is still there; it is not the deduplication key and
/// deduplicates nothing (the same message key twice is two records).
#[actix::test]
async fn a_message_key_reads_back_as_text_where_utf8_else_base64() {
    let server = TestServer::start(|_| {});
    let offsets = append(
        &server,
        json!([
            {"payload": 1, "messageKey": "user-1"},
            {"payload": 2, "messageKey": "clé ✓"},
            {"payload": 3, "messageKeyBase64": "a/8="},
            {"payload": 4, "messageKeyBase64": "dXNlci0x"},
            {"payload": 5, "messageKey": ""},
            {"payload": 6, "messageKey": "user-1", "key": "dedup-6"},
        ]),
    )
    .await;
    assert_eq!(offsets, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(
        shown_all(&server).await,
        [
            json!({"offset": 0, "key": null, "payload": 1, "messageKey": "user-1"}),
            json!({"offset": 1, "key": null, "payload": 2, "messageKey": "clé ✓"}),
            json!({"offset": 2, "key": null, "payload": 3, "messageKeyBase64": "a/8="}),
            json!({"offset": 3, "key": null, "payload": 4, "messageKey": "user-1"}),
            json!({"offset": 4, "key": null, "payload": 5, "messageKey": ""}),
            json!({"offset": 5, "key": "dedup-6", "payload": 6, "messageKey": "user-1"}),
        ]
    );
    server.stop().await;
}

/// Headers read back in order, a repeated name twice, each value as text where it is UTF-8
/// (also when sent as `valueBase64`) and as `valueBase64` otherwise, an empty value as `""`,
/// and a header without a value with neither field.
#[actix::test]
async fn headers_read_back_in_order_in_their_forms() {
    let server = TestServer::start(|_| {});
    append(
        &server,
        json!([{"payload": {"n": 1}, "headers": [
            {"name": "trace", "value": "abc"},
            {"name": "trace", "value": "def"},
            {"name": "bin", "valueBase64": "wyg="},
            {"name": "utf8", "valueBase64": "YWJj"},
            {"name": "empty", "value": ""},
            {"name": "none"},
        ]}]),
    )
    .await;
    assert_eq!(
        shown_all(&server).await,
        [
            json!({"offset": 0, "key": null, "payload": {"n": 1}, "headers": [
                {"name": "trace", "value": "abc"},
                {"name": "trace", "value": "def"},
                {"name": "bin", "valueBase64": "wyg="},
                {"name": "utf8", "value": "abc"},
                {"name": "empty", "value": ""},
                {"name": "none"},
            ]})
        ]
    );
    server.stop().await;
}

/// A tombstone (`"tombstone": true`, and no payload) reads back as `"payload": null,
/// "tombstone": true`; the JSON value `null` reads back as `"payload": null` with no
/// `tombstone`. A tombstone with a payload, even `null`, or a part given as `null` is refused.
#[actix::test]
async fn a_tombstone_is_not_the_json_null() {
    let server = TestServer::start(|_| {});
    append(
        &server,
        json!([
            {"tombstone": true},
            {"payload": null},
            {"tombstone": true, "key": "dedup-3", "messageKey": "user-1"},
        ]),
    )
    .await;
    assert_eq!(
        shown_all(&server).await,
        [
            json!({"offset": 0, "key": null, "payload": null, "tombstone": true}),
            json!({"offset": 1, "key": null, "payload": null}),
            json!({"offset": 2, "key": "dedup-3", "payload": null, "tombstone": true,
                   "messageKey": "user-1"}),
        ]
    );
    for refused in [
        json!({"payload": null, "tombstone": true}),
        json!({"payload": 1, "payloadBase64": null}),
        json!({"payload": 1, "messageKey": null}),
        json!({"payload": 1, "headers": [{"name": "h", "value": null}]}),
    ] {
        let (status, body) = server
            .post(
                "/topics/parts/partitions/0/records",
                Value::Array(vec![refused.clone()]),
            )
            .await;
        assert_eq!(status, 400, "{refused}: {body}");
    }
    assert_eq!(shown_all(&server).await.len(), 3, "nothing more written");
    server.stop().await;
}

/// Group polls and leases show a record's parts as the partition read does.
#[actix::test]
async fn polls_and_leases_show_the_parts_too() {
    let server = TestServer::start(|_| {});
    append(
        &server,
        json!([
            {"payloadBase64": "/wD+gA==", "messageKeyBase64": "a/8=",
             "headers": [{"name": "h", "value": "v"}, {"name": "none"}]},
            {"tombstone": true, "messageKey": "user-1"},
        ]),
    )
    .await;
    let records = read_all(&server).await;
    assert_eq!(records.len(), 2);

    let (status, polled) = server.get("/topics/parts/groups/g/poll").await;
    assert_eq!(status, 200, "{polled}");
    assert_eq!(
        polled["partitions"][0]["records"],
        Value::Array(records.clone())
    );

    let (status, lease) = server
        .post(
            "/topics/parts/partitions/0/groups/g/leases?limit=2",
            Value::Null,
        )
        .await;
    assert_eq!(status, 200, "{lease}");
    assert_eq!(lease["records"], Value::Array(records));
    server.stop().await;
}

/// A keyed event's `partitionKey` is stored as its message key, beside its deduplication key,
/// headers and binary payload.
#[actix::test]
async fn a_keyed_event_stores_its_partition_key_as_message_key() {
    let server = TestServer::start(|_| {});
    let (status, body) = server
        .post(
            "/topics/parts/records",
            json!([
                {"partitionKey": "user-1", "payload": {"n": 1}},
                {"partitionKey": "user-1", "payloadBase64": "/wD+gA==", "key": "order-1",
                 "headers": [{"name": "h", "valueBase64": "wyg="}]},
            ]),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    // "user-1" routes to partition 4 of 8 (FNV-1a; see `http.rs`).
    assert_eq!(
        body,
        json!({"records": [{"partition": 4, "offset": 0}, {"partition": 4, "offset": 1}]})
    );
    let (status, page) = server.get("/topics/parts/partitions/4/records").await;
    assert_eq!(status, 200, "{page}");
    let records: Vec<Value> = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(shown)
        .collect();
    assert_eq!(
        records,
        [
            json!({"offset": 0, "key": null, "payload": {"n": 1}, "messageKey": "user-1"}),
            json!({"offset": 1, "key": "order-1", "payloadBase64": "/wD+gA==",
                   "messageKey": "user-1", "headers": [{"name": "h", "valueBase64": "wyg="}]}),
        ]
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Refusals and limits
// ---------------------------------------------------------------------------------------------

/// Each malformed or oversized record is `400 invalid_request`, names its place in the batch
/// and writes nothing: sent after a valid record in one batch, that record is not written
/// either.
#[actix::test]
async fn bad_parts_are_refused_and_the_batch_writes_nothing() {
    let server = TestServer::start(|_| {});
    append(&server, json!([{"payload": 0}])).await;
    let header = json!({"name": "h", "value": "v"});
    // With `{half}x`: 1 + 8191 + 1 + 8192 bytes, one over 16 KiB.
    let half = "x".repeat(8_191);
    let cases = [
        json!({"payload": 1, "payloadBase64": "AQ=="}),
        json!({"key": "no-payload"}),
        json!({"tombstone": false}),
        json!({"payload": 1, "tombstone": true}),
        json!({"payloadBase64": "", "tombstone": true}),
        json!({"payloadBase64": "not base64!"}),
        json!({"payloadBase64": "/wD+gA"}),
        json!({"payload": 1, "messageKey": "k", "messageKeyBase64": "aw=="}),
        json!({"payload": 1, "messageKeyBase64": "%%%"}),
        json!({"payload": 1, "messageKey": "a".repeat(1_025)}),
        // 1024 characters, 1025 bytes: the limit counts bytes.
        json!({"payload": 1, "messageKey": format!("{}é", "a".repeat(1_023))}),
        // 1025 bytes 0xff.
        json!({"payload": 1, "messageKeyBase64": format!("{}//8=", "////".repeat(341))}),
        json!({"payload": 1, "headers": vec![header.clone(); 65]}),
        json!({"payload": 1, "headers": [
            {"name": "a", "value": half},
            {"name": "b", "value": format!("{half}x")},
        ]}),
        json!({"payload": 1, "headers": [{"name": "h", "value": "v", "valueBase64": "dg=="}]}),
        json!({"payload": 1, "headers": [{"name": "h", "valueBase64": "v"}]}),
    ];
    for bad in cases {
        refused(
            &server,
            RECORDS,
            json!([{"payload": "good"}, bad]),
            (TOPIC, 0),
            "record 1",
        )
        .await;
    }
    assert_eq!(
        shown_all(&server).await,
        [json!({"offset": 0, "key": null, "payload": 0})]
    );
    server.stop().await;
}

/// The limits hold exactly at their bounds: a message key of 1024 bytes (as text or as base64),
/// 64 headers and headers of 16 KiB in all (names and values) are accepted; a binary payload counts its
/// decoded bytes against `max_record_bytes` (`/wD+gA==` is 8 characters but 4 bytes).
#[actix::test]
async fn limits_hold_at_their_bounds() {
    let server = TestServer::start(|config| config.log.max_record_bytes = 4);
    let header = json!({"name": "h", "value": "v"});
    // 1 + 8191 + 1 + 8191 bytes: 16 KiB.
    let half = "x".repeat(8_191);
    // 1024 bytes 0xff.
    let max_key_base64 = format!("{}/w==", "////".repeat(341));
    let offsets = append(
        &server,
        json!([
            {"payload": 1, "messageKey": "a".repeat(1_024)},
            {"payload": 2, "messageKeyBase64": max_key_base64},
            {"payload": 3, "headers": vec![header; 64]},
            {"payload": 4, "headers": [{"name": "a", "value": half}, {"name": "b", "value": half}]},
            {"payloadBase64": "/wD+gA=="},
        ]),
    )
    .await;
    assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
    let records = read_all(&server).await;
    assert_eq!(records[0]["messageKey"].as_str().unwrap().len(), 1_024);
    assert_eq!(records[1]["messageKeyBase64"], json!(max_key_base64));
    assert_eq!(records[2]["headers"].as_array().unwrap().len(), 64);
    assert_eq!(
        records[3]["headers"][1]["value"].as_str().unwrap().len(),
        8_191
    );

    let (status, body) = server
        .post(RECORDS, json!([{"payloadBase64": "/wD+gAE="}]))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], json!("record_too_large"), "{body}");
    assert_eq!(next_offset(&server, TOPIC, 0).await, 5);
    server.stop().await;
}

/// A keyed event with malformed or oversized parts is `400 invalid_request` and writes
/// nothing, not even the valid event beside it.
#[actix::test]
async fn bad_events_are_refused_and_write_nothing() {
    let server = TestServer::start(|_| {});
    let path = "/topics/parts/records";
    let (status, body) = server
        .post(path, json!([{"partitionKey": "user-1", "payload": 0}]))
        .await;
    assert_eq!(status, 202, "{body}");
    let header = json!({"name": "h", "value": "v"});
    let cases = [
        json!({"partitionKey": "user-1", "payload": 1, "payloadBase64": "AQ=="}),
        json!({"partitionKey": "user-1"}),
        json!({"partitionKey": "user-1", "payloadBase64": "not base64!"}),
        json!({"partitionKey": "a".repeat(1_025), "payload": 1}),
        json!({"partitionKey": "user-1", "payload": 1, "headers": vec![header; 65]}),
    ];
    for bad in cases {
        // Partition 4 holds "user-1"'s events; the valid event goes there.
        let batch = json!([{"partitionKey": "user-1", "payload": "good"}, bad]);
        refused(&server, path, batch, (TOPIC, 4), "record").await;
    }
    assert_eq!(next_offset(&server, TOPIC, 4).await, 1);
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// The cold tier
// ---------------------------------------------------------------------------------------------

/// Records with every kind of part, flushed to a folder cold tier by a trim, read back over
/// REST exactly as they did from the hot window.
#[actix::test]
async fn parts_survive_the_cold_tier() {
    let server = TestServer::start(|config| {
        config.cold.kind = ColdKind::Fs;
        config.retention.max_records = 1;
        config.retention.sweep_interval_ms = 3_600_000;
    });
    append(
        &server,
        json!([
            {"payload": {"n": 0}, "key": "dedup-0", "messageKey": "user-1",
             "headers": [{"name": "trace", "value": "abc"}, {"name": "trace", "value": "def"}]},
            {"payloadBase64": "/wD+gA==", "messageKeyBase64": "a/8="},
            {"payloadBase64": ""},
            {"tombstone": true, "messageKey": "user-1"},
            {"payload": null},
            {"payload": 5, "headers": [
                {"name": "bin", "valueBase64": "wyg="},
                {"name": "empty", "value": ""},
                {"name": "none"},
            ]},
            {"payload": "last, stays hot"},
        ]),
    )
    .await;
    let hot = read_all(&server).await;
    assert_eq!(hot.len(), 7);

    let (status, body) = server
        .post("/topics/parts/partitions/0/trim", Value::Null)
        .await;
    assert_eq!((status, body), (200, json!({"removed": 6})));
    let (status, bounds) = server.get("/topics/parts/partitions/0/bounds").await;
    assert_eq!(status, 200);
    assert_eq!(
        bounds,
        json!({"oldestOffset": 0, "hotOffset": 6, "nextOffset": 7})
    );
    let cold_dir = server.log.config.cold_dir();
    assert!(
        files_under(&cold_dir).iter().any(|path| path.is_file()),
        "no segment in {}",
        cold_dir.display()
    );

    assert_eq!(read_all(&server).await, hot);
    assert_eq!(
        shown(&hot[0]),
        json!({"offset": 0, "key": "dedup-0", "payload": {"n": 0}, "messageKey": "user-1",
               "headers": [{"name": "trace", "value": "abc"}, {"name": "trace", "value": "def"}]})
    );
    assert_eq!(
        hot[1..6].iter().map(shown).collect::<Vec<_>>(),
        [
            json!({"offset": 1, "key": null, "payloadBase64": "/wD+gA==",
                   "messageKeyBase64": "a/8="}),
            json!({"offset": 2, "key": null, "payloadBase64": ""}),
            json!({"offset": 3, "key": null, "payload": null, "tombstone": true,
                   "messageKey": "user-1"}),
            json!({"offset": 4, "key": null, "payload": null}),
            json!({"offset": 5, "key": null, "payload": 5, "headers": [
                {"name": "bin", "valueBase64": "wyg="},
                {"name": "empty", "value": ""},
                {"name": "none"},
            ]}),
        ]
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// The record checksum covers the parts
// ---------------------------------------------------------------------------------------------

/// A change to a stored `meta` value: the new value (`None`: NULL) given the stored one.
type Alteration = fn(Vec<u8>) -> Option<Vec<u8>>;

/// The records [`altered_read`] stores in partition 0 of [`TOPIC`]: offset 0 with a message
/// key and headers, offset 1 a tombstone, offset 2 plain.
fn records_with_parts() -> Vec<NewRecord> {
    vec![
        NewRecord::new("{\"n\":0}")
            .with_message_key("user-1")
            .with_headers(vec![
                Header::new("trace", "abc"),
                Header {
                    name: "none".into(),
                    value: None,
                },
            ]),
        NewRecord::new(Payload::Null).with_message_key("user-2"),
        NewRecord::new("{\"n\":2}"),
    ]
}

/// Stores [`records_with_parts`] in a log in `dir`, closes it, replaces the `meta` of the
/// record at `offset` with `alter`'s answer (given the stored one) behind the log's back, and
/// answers the configuration of that log.
async fn altered(dir: &std::path::Path, offset: u64, alter: Alteration) -> Config {
    let config = Config::for_tests(dir);
    let log = Log::open(config.clone()).unwrap();
    let appended = log.append(TOPIC, 0, records_with_parts()).await.unwrap();
    assert_eq!(
        appended.outcome,
        AppendOutcome::Appended {
            offsets: vec![0, 1, 2]
        }
    );
    log.shutdown().await.unwrap();
    let conn = rusqlite::Connection::open(volume(&config.storage.data_dir, 0)).unwrap();
    let row = "partition = (SELECT id FROM partitions WHERE topic = 'parts' AND partition = 0) \
               AND offset = ?1";
    let meta: Option<Vec<u8>> = conn
        .query_row(
            &format!("SELECT meta FROM records WHERE {row}"),
            [offset],
            |row| row.get(0),
        )
        .unwrap();
    let changed = conn
        .execute(
            &format!("UPDATE records SET meta = ?2 WHERE {row}"),
            rusqlite::params![offset, alter(meta.expect("the record has parts"))],
        )
        .unwrap();
    assert_eq!(changed, 1);
    config
}

/// Reads the record at `offset` after [`altered`] changed its parts with `alter`, having first
/// read the untouched plain record 2 (which must read fine).
async fn altered_read(
    offset: u64,
    alter: Alteration,
) -> Result<durability::store::Page, durability::Error> {
    let dir = tempfile::tempdir().unwrap();
    let config = altered(dir.path(), offset, alter).await;
    let log = Log::open(config).unwrap();
    let untouched = log.read(TOPIC, 0, Some(2), Some(1)).await.unwrap();
    assert_eq!(untouched.records[0].payload, Payload::json("{\"n\":2}"));
    let read = log.read(TOPIC, 0, Some(offset), Some(1)).await;
    log.shutdown().await.ok();
    read
}

/// Flips bit 5 of the byte at `index`.
fn flip(mut meta: Vec<u8>, index: usize) -> Vec<u8> {
    meta[index] ^= 0x20;
    meta
}

/// Altering a record's parts in the database (which SQLite cannot notice) fails the read of
/// that record as `corrupted`, naming its checksum: a message key's byte, a header value's
/// byte, the tombstone flag, or all of the parts dropped. Writing the same parts back changes
/// nothing (the alteration alone fails the read).
#[actix::test]
async fn an_altered_part_fails_the_record_checksum() {
    // `meta` is: version 1, flags (1: tombstone, 2: message key), key length, key, header
    // count, headers (see `record.rs`).
    for (offset, expected) in records_with_parts().into_iter().take(2).enumerate() {
        let same = altered_read(offset as u64, Some)
            .await
            .expect("the unaltered record reads");
        let record = &same.records[0];
        assert_eq!(
            (&record.payload, &record.message_key, &record.headers),
            (&expected.payload, &expected.message_key, &expected.headers)
        );
    }
    let alterations: [(&str, u64, Alteration); 4] = [
        ("a message key byte", 0, |meta| Some(flip(meta, 3))),
        ("a header value byte", 0, |meta| {
            let at = meta.windows(3).position(|w| w == b"abc").unwrap();
            Some(flip(meta, at))
        }),
        ("the tombstone flag", 1, |mut meta| {
            meta[1] &= !1;
            Some(meta)
        }),
        ("every part", 0, |_| None),
    ];
    for (what, offset, alter) in alterations {
        let err = altered_read(offset, alter)
            .await
            .expect_err(&format!("{what} altered"));
        assert_eq!(err.code(), "corrupted", "{what}: {err}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("record {offset} of "))
                && message.contains("fails its checksum"),
            "{what}: {err}"
        );
    }
}

/// The background scrub finds an altered message key with no read: it checks the parts
/// against the record checksum too.
#[actix::test]
async fn the_scrub_finds_an_altered_message_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = altered(dir.path(), 0, |meta| Some(flip(meta, 3))).await;
    config.storage.scrub_interval_ms = 50;
    let data_dir = config.storage.data_dir.clone();
    let log = Log::open(config).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !mark(&data_dir, 0).exists() {
        assert!(Instant::now() < deadline, "the scrub marks the volume");
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    let recorded = std::fs::read_to_string(mark(&data_dir, 0)).unwrap();
    assert!(
        recorded.contains("record 0 of partition parts:0 failing its checksum"),
        "{recorded}"
    );
    log.shutdown().await.ok();
}
