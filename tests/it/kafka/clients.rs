//! Real Kafka clients against the listener: kcat (librdkafka) for metadata, produce (plain and
//! compressed), consume, tombstones and offsets by time; kafka-python and kafkajs for whole
//! round trips; and the REST API on the other side of each, so that what one front end writes
//! the other reads byte for byte.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::thread::sleep;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::{bootstrap, kcat, node, python, start, success};
use crate::common::process::{Server, exchange};

/// The partitions of every topic.
const PARTITIONS: i32 = 8;

/// One Kafka record as bytes: what a client sent or what a reader got back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

/// A record of a REST page, each field as its raw JSON text (so a payload is seen byte for
/// byte, and `"payload": null` is told apart from no `payload`).
type RawRecord = BTreeMap<String, Box<RawValue>>;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64
}

fn base64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

fn unbase64(text: &str) -> Vec<u8> {
    BASE64.decode(text).expect("standard base64")
}

/// A base64 field of a client program's line: bytes, or none for `null`.
fn bytes_field(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::Null => None,
        Value::String(text) => Some(unbase64(text)),
        other => panic!("not base64 or null: {other}"),
    }
}

/// A record as a client program of `tests/kafka/` prints it.
fn record_of_line(line: &Value) -> Record {
    Record {
        partition: line["partition"].as_i64().expect("a partition") as i32,
        offset: line["offset"].as_i64().expect("an offset"),
        key: bytes_field(&line["key"]),
        value: bytes_field(&line["value"]),
        headers: line["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .map(|pair| {
                (
                    pair[0].as_str().expect("a header name").to_owned(),
                    bytes_field(&pair[1]),
                )
            })
            .collect(),
    }
}

/// The JSON lines of a client program's standard output.
fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: not JSON: {line}"))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// REST
// ---------------------------------------------------------------------------------------------

/// `POST path` with `body` sent as is (its spaces and escapes kept): status and JSON answer.
fn post_raw(addr: SocketAddr, path: &str, body: &str) -> (u16, Value) {
    let text = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (status, _, answer) = exchange(addr, &text).expect("the POST was answered");
    let answer = serde_json::from_slice(&answer).expect("a JSON answer");
    (status, answer)
}

/// Every record of `topic`'s `partition` over REST (one page from offset 0), each field raw.
fn rest_records(addr: SocketAddr, topic: &str, partition: i32) -> Vec<RawRecord> {
    let path = format!("/topics/{topic}/partitions/{partition}/records?from=0&limit=100");
    let text = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let (status, _, body) = exchange(addr, &text).expect("the GET was answered");
    assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
    #[derive(serde::Deserialize)]
    struct RawPage {
        records: Vec<RawRecord>,
        #[serde(rename = "nextOffset")]
        next_offset: u64,
        lag: u64,
    }
    let page: RawPage = serde_json::from_slice(&body).expect("a page of records");
    assert_eq!(page.lag, 0, "{path}: the whole partition in one page");
    assert_eq!(page.next_offset, page.records.len() as u64, "{path}");
    page.records
}

/// A raw field as a JSON value.
fn field(record: &RawRecord, name: &str) -> Option<Value> {
    record
        .get(name)
        .map(|raw| serde_json::from_str(raw.get()).expect("JSON"))
}

/// The Kafka record a REST record is, by `API.md`'s rules: a JSON payload is its JSON text
/// (byte for byte), a binary one its bytes, a tombstone no value; a message key or header
/// value is its text or its base64 form's bytes.
fn record_of_rest(partition: i32, rest: &RawRecord) -> Record {
    let tombstone = field(rest, "tombstone") == Some(json!(true));
    let value = match (rest.get("payload"), rest.get("payloadBase64")) {
        (Some(payload), None) if tombstone => {
            assert_eq!(payload.get(), "null", "a tombstone shows a null payload");
            None
        }
        (Some(payload), None) => Some(payload.get().as_bytes().to_vec()),
        (None, Some(base64)) if !tombstone => Some(unbase64(
            &serde_json::from_str::<String>(base64.get()).unwrap(),
        )),
        _ => panic!("payload or payloadBase64, one of them: {rest:?}"),
    };
    let text_or_base64 = |text: Option<Value>, base64: Option<Value>| match (text, base64) {
        (None, None) => None,
        (Some(Value::String(text)), None) => Some(text.into_bytes()),
        (None, Some(Value::String(base64))) => {
            let bytes = unbase64(&base64);
            assert!(
                String::from_utf8(bytes.clone()).is_err(),
                "base64 only for bytes that are not UTF-8: {base64}"
            );
            Some(bytes)
        }
        other => panic!("text or base64, one of them: {other:?}"),
    };
    let key = text_or_base64(field(rest, "messageKey"), field(rest, "messageKeyBase64"));
    let headers = match field(rest, "headers") {
        None => Vec::new(),
        Some(Value::Array(headers)) => {
            assert!(!headers.is_empty(), "no headers are absent, not []");
            headers
                .into_iter()
                .map(|header| {
                    let name = header["name"].as_str().expect("a header name").to_owned();
                    let value = text_or_base64(
                        header.get("value").cloned(),
                        header.get("valueBase64").cloned(),
                    );
                    (name, value)
                })
                .collect()
        }
        Some(other) => panic!("headers are an array: {other}"),
    };
    Record {
        partition,
        offset: field(rest, "offset")
            .and_then(|offset| offset.as_i64())
            .expect("an offset"),
        key,
        value,
        headers,
    }
}

/// `value` as REST shows a JSON payload: without the whitespace around it (insignificant in
/// the JSON of a page), every other byte kept.
fn trimmed_json(value: &[u8]) -> Vec<u8> {
    let json_space = |byte: &u8| matches!(byte, b' ' | b'\t' | b'\n' | b'\r');
    let start = value
        .iter()
        .position(|byte| !json_space(byte))
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|byte| !json_space(byte))
        .map_or(start, |end| end + 1);
    value[start..end].to_vec()
}

/// Whether Kafka value `value` is one JSON value, as the listener tells JSON from binary.
fn is_json(value: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(value).is_ok()
}

/// `expected` (sent through Kafka) against `rest` (read over REST): the same record, a JSON
/// value shown as a JSON payload and anything else in `payloadBase64`.
fn assert_rest_is(rest: &RawRecord, expected: &Record) {
    let json = expected.value.as_deref().is_some_and(is_json);
    assert_eq!(
        rest.contains_key("payloadBase64"),
        !json && expected.value.is_some(),
        "{rest:?}"
    );
    let mut expected = expected.clone();
    if json {
        expected.value = expected.value.as_deref().map(trimmed_json);
    }
    assert_eq!(
        record_of_rest(expected.partition, rest),
        expected,
        "{rest:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// kcat
// ---------------------------------------------------------------------------------------------

/// Every record of `topic`'s `partition` as `kcat -C -J` prints them (from the beginning to
/// the end): one JSON object each.
fn kcat_consume(bootstrap: &str, topic: &str, partition: i32) -> Vec<Value> {
    let partition = partition.to_string();
    let out = kcat(
        &[
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            &partition,
            "-o",
            "beginning",
            "-e",
            "-J",
        ],
        b"",
    );
    json_lines(&success(&out))
}

/// The key and value of the record at `offset` of `topic`'s `partition`, as kcat gets them,
/// byte for byte, and its headers as kcat prints them (`name=value,...`).
fn kcat_record(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) -> (Option<Vec<u8>>, Option<Vec<u8>>, Vec<u8>) {
    let (partition, offset) = (partition.to_string(), offset.to_string());
    let out = kcat(
        &[
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            &partition,
            "-o",
            &offset,
            "-c",
            "1",
            "-f",
            "%K %S|%k%s|%h",
        ],
        b"",
    );
    success(&out);
    let bytes = out.stdout;
    let bar = bytes.iter().position(|&byte| byte == b'|').expect("%K %S|");
    let lengths = std::str::from_utf8(&bytes[..bar]).unwrap();
    let (key_length, value_length) = lengths.split_once(' ').expect("two lengths");
    let (key_length, value_length): (i64, i64) =
        (key_length.parse().unwrap(), value_length.parse().unwrap());
    let mut rest = &bytes[bar + 1..];
    let mut take = |length: i64| {
        let length = usize::try_from(length).ok()?;
        let (taken, left) = rest.split_at(length);
        rest = left;
        Some(taken.to_vec())
    };
    let key = take(key_length);
    let value = take(value_length);
    assert_eq!(
        rest.first(),
        Some(&b'|'),
        "{:?}",
        String::from_utf8_lossy(&bytes)
    );
    let headers = rest[1..].to_vec();
    (key, value, headers)
}

/// A kcat JSON line's headers (`["h", "1", "h", "2"]`) as (name, value) pairs.
fn kcat_headers(line: &Value) -> Vec<(String, String)> {
    let Some(flat) = line.get("headers") else {
        return Vec::new();
    };
    flat.as_array()
        .expect("headers are an array")
        .chunks(2)
        .map(|pair| {
            (
                pair[0].as_str().expect("a name").to_owned(),
                pair[1].as_str().expect("a value").to_owned(),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------

/// `kcat -L` sees every topic with the configured 8 partitions, each led by broker 0 (this
/// node), its one replica and in-sync replica.
#[test]
fn kcat_lists_a_topic_with_its_partitions() {
    let (_dir, server) = start(&[]);
    let bootstrap = bootstrap(&server);
    let out = kcat(&["-L", "-J", "-b", &bootstrap, "-t", "t"], b"");
    let metadata: Value = serde_json::from_str(&success(&out)).expect("kcat's JSON");
    assert_eq!(metadata["controllerid"], json!(0));
    assert_eq!(
        metadata["brokers"],
        json!([{"id": 0, "name": bootstrap}]),
        "the one broker, at the address the listener advertises"
    );
    let topics = metadata["topics"].as_array().expect("topics");
    assert_eq!(topics.len(), 1, "{metadata}");
    assert_eq!(topics[0]["topic"], json!("t"));
    assert!(topics[0].get("error").is_none(), "{metadata}");
    let partitions: Vec<Value> = (0..PARTITIONS)
        .map(|partition| {
            json!({"partition": partition, "leader": 0, "replicas": [{"id": 0}], "isrs": [{"id": 0}]})
        })
        .collect();
    assert_eq!(topics[0]["partitions"], json!(partitions), "{metadata}");
}

/// Lines produced by `kcat -P` to one partition read back with `kcat -C` at offsets 0 and 1
/// with their bytes and their `LogAppendTime`, and over REST as binary payloads (`a` and `b`
/// are not JSON) appended at that same time.
#[test]
fn kcat_produces_and_consumes_plain_lines() {
    let (_dir, server) = start(&[]);
    let bootstrap = bootstrap(&server);
    let before = now_ms();
    success(&kcat(
        &["-P", "-b", &bootstrap, "-t", "t", "-p", "0"],
        b"a\nb\n",
    ));
    let after = now_ms();

    let lines = kcat_consume(&bootstrap, "t", 0);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (offset, (line, payload)) in lines.iter().zip(["a", "b"]).enumerate() {
        assert_eq!(line["topic"], json!("t"));
        assert_eq!(line["partition"], json!(0));
        assert_eq!(line["offset"], json!(offset), "{line}");
        assert_eq!(line["payload"], json!(payload), "{line}");
        assert_eq!(line["key"], Value::Null, "{line}");
        assert_eq!(line["tstype"], json!("logappend"), "{line}");
        assert!(line.get("headers").is_none(), "{line}");
        let ts = line["ts"].as_i64().expect("a timestamp");
        assert!((before..=after).contains(&ts), "{ts} in {before}..={after}");
    }

    let rest = rest_records(server.addr, "t", 0);
    let shown: Vec<Value> = rest
        .iter()
        .map(|record| serde_json::to_value(record).unwrap())
        .collect();
    assert_eq!(
        shown,
        vec![
            json!({"offset": 0, "key": null, "payloadBase64": "YQ==", "appendedAt": lines[0]["ts"]}),
            json!({"offset": 1, "key": null, "payloadBase64": "Yg==", "appendedAt": lines[1]["ts"]}),
        ],
        "binary payloads, no payload field, the Kafka timestamp as appendedAt"
    );
}

/// Batches kcat sends with each codec it has (gzip, snappy, lz4, zstd), their records keyed
/// and with a header name repeated, read back by kcat and over REST with the same value bytes
/// (JSON text with spaces and non-ASCII characters), key and headers in order. Whether kcat
/// compresses is its own choice (its librdkafka 2.0 compresses gzip and snappy only for a
/// broker that advertises Produce v0, lz4 only for one that serves FindCoordinator:
/// librdkafka issue #4956); zstd it does, and the listener counts the batch so.
/// [`kafka_python_compresses_with_each_codec`] covers every codec compressed.
#[test]
fn kcat_compressed_batches_read_back_whole() {
    let (_dir, server) = start(&[]);
    let bootstrap = bootstrap(&server);
    for (partition, codec) in ["gzip", "snappy", "lz4", "zstd"].into_iter().enumerate() {
        let partition = partition as i32;
        let values: Vec<String> = (0..3)
            .map(|n| {
                format!(
                    r#"{{"codec": "{codec}", "n": {n},  "text": "grüße ✓", "pad": "{}"}}"#,
                    "a".repeat(400)
                )
            })
            .collect();
        let input = values.join("\n") + "\n";
        let partition_arg = partition.to_string();
        let out = kcat(
            &[
                "-P",
                "-b",
                &bootstrap,
                "-t",
                "z",
                "-p",
                &partition_arg,
                "-z",
                codec,
                "-k",
                "k-1",
                "-H",
                "h=1",
                "-H",
                "h=2",
                "-X",
                "linger.ms=200",
            ],
            input.as_bytes(),
        );
        success(&out);
        let lines = kcat_consume(&bootstrap, "z", partition);
        assert_eq!(lines.len(), values.len(), "{codec}: {lines:?}");
        for (offset, (line, value)) in lines.iter().zip(&values).enumerate() {
            assert_eq!(line["offset"], json!(offset), "{codec}: {line}");
            assert_eq!(line["payload"], json!(value), "{codec}: the value's bytes");
            assert_eq!(line["key"], json!("k-1"), "{codec}: {line}");
            assert_eq!(
                kcat_headers(line),
                [
                    ("h".to_owned(), "1".to_owned()),
                    ("h".to_owned(), "2".to_owned())
                ],
                "{codec}: both headers, in order"
            );
        }

        let rest = rest_records(server.addr, "z", partition);
        assert_eq!(rest.len(), values.len(), "{codec}");
        for (offset, (record, value)) in rest.iter().zip(&values).enumerate() {
            assert_eq!(
                record["payload"].get(),
                value,
                "{codec}: the JSON text as sent"
            );
            assert!(!record.contains_key("payloadBase64"), "{codec}: {record:?}");
            assert!(!record.contains_key("tombstone"), "{codec}: {record:?}");
            assert_eq!(field(record, "offset"), Some(json!(offset)));
            assert_eq!(
                field(record, "key"),
                Some(Value::Null),
                "no deduplication key"
            );
            assert_eq!(field(record, "messageKey"), Some(json!("k-1")));
            assert_eq!(
                field(record, "headers"),
                Some(json!([{"name": "h", "value": "1"}, {"name": "h", "value": "2"}])),
                "{codec}"
            );
        }
    }
    assert!(
        batches(&server, "zstd") > 0,
        "kcat's zstd batches arrived compressed"
    );
}

/// The batches of `codec` the listener decoded, from `GET /metrics`.
fn batches(server: &Server, codec: &str) -> u64 {
    let (status, _, body) = exchange(
        server.addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .expect("metrics");
    assert_eq!(status, 200);
    let series = format!("durability_kafka_batches_total{{codec=\"{codec}\"}} ");
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .map_or(0, |count| count.trim().parse().expect("a count"))
}

/// kafka-python compresses its batches with each codec (gzip, snappy, lz4 and zstd): the
/// listener decodes them (it counts each codec's batches) and the records read back
/// byte-exact, through Kafka and over REST.
#[test]
fn kafka_python_compresses_with_each_codec() {
    let (_dir, server) = start(&[]);
    let bootstrap = bootstrap(&server);
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("kp-{codec}");
        let out = python(
            "kafka_python_roundtrip.py",
            &[&bootstrap, &topic, "40", codec],
        );
        let lines = json_lines(&success(&out));
        assert_eq!(
            lines.last(),
            Some(&json!({"kind": "done", "produced": 40, "consumed": 40})),
            "{codec}"
        );
        let produced: Vec<Record> = lines
            .iter()
            .filter(|line| line["kind"] == json!("produced"))
            .map(record_of_line)
            .collect();
        let consumed: Vec<Record> = lines
            .iter()
            .filter(|line| line["kind"] == json!("consumed"))
            .map(record_of_line)
            .collect();
        let sorted = |records: &[Record]| {
            let mut records = records.to_vec();
            records.sort_by_key(|record| (record.partition, record.offset));
            records
        };
        assert_eq!(sorted(&produced), sorted(&consumed), "{codec}");
        assert!(batches(&server, codec) > 0, "{codec} batches decoded");
    }
}

/// Records written over REST read back through Kafka: a JSON payload with spaces and
/// non-ASCII characters keeps its exact bytes (its deduplication key is not a Kafka key); a
/// keyed event's `partitionKey` is its Kafka key, in the partition the POST answered; a record
/// with a message key, repeated headers and a binary payload keeps them all.
#[test]
fn rest_records_read_back_through_kafka() {
    let (_dir, server) = start(&[]);
    let bootstrap = bootstrap(&server);
    let payload = r#"{"msg":  "héllo wörld ✓", "n": [1, 2,   3], "nested": {"a": null}}"#;
    let binary = "plain text ✓, not JSON";
    let body = format!(
        r#"[{{"payload": {payload}, "key": "dedup-1"}},
            {{"payloadBase64": "{}", "messageKey": "mk-1",
              "headers": [{{"name": "h", "value": "1"}}, {{"name": "h", "value": "2"}},
                          {{"name": "trace", "value": "é"}}]}}]"#,
        base64(binary.as_bytes())
    );
    let (status, answer) = post_raw(server.addr, "/topics/x/partitions/2/records", &body);
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["offsets"], json!([0, 1]));

    let event = r#"{"event": "signup",  "user": "ünï"}"#;
    let body = format!(r#"[{{"partitionKey": "user-1", "payload": {event}}}]"#);
    let (status, answer) = post_raw(server.addr, "/topics/x/records", &body);
    assert_eq!(status, 202, "{answer}");
    let partition = answer["records"][0]["partition"]
        .as_i64()
        .expect("a partition") as i32;
    let offset = answer["records"][0]["offset"].as_i64().expect("an offset");
    assert!((0..PARTITIONS).contains(&partition), "{answer}");

    let lines = kcat_consume(&bootstrap, "x", 2);
    let first = lines
        .iter()
        .find(|line| line["offset"] == json!(0))
        .expect("offset 0");
    assert_eq!(
        first["payload"],
        json!(payload),
        "the JSON text, byte for byte"
    );
    assert_eq!(
        first["key"],
        Value::Null,
        "the deduplication key is not a Kafka key"
    );
    assert!(first.get("headers").is_none(), "{first}");
    assert_eq!(first["tstype"], json!("logappend"));
    let second = lines
        .iter()
        .find(|line| line["offset"] == json!(1))
        .expect("offset 1");
    assert_eq!(
        second["payload"],
        json!(binary),
        "the binary payload's bytes"
    );
    assert_eq!(second["key"], json!("mk-1"));
    assert_eq!(
        kcat_headers(second),
        [
            ("h".to_owned(), "1".to_owned()),
            ("h".to_owned(), "2".to_owned()),
            ("trace".to_owned(), "é".to_owned()),
        ]
    );

    let lines = kcat_consume(&bootstrap, "x", partition);
    let keyed = lines
        .iter()
        .find(|line| line["offset"] == json!(offset))
        .unwrap_or_else(|| panic!("offset {offset} of partition {partition}: {lines:?}"));
    assert_eq!(
        keyed["payload"],
        json!(event),
        "the event's JSON text, byte for byte"
    );
    assert_eq!(
        keyed["key"],
        json!("user-1"),
        "the partition key is the Kafka key"
    );
}

/// A Kafka tombstone (a null value: kcat `-Z` sends an empty value as null) reads back over
/// REST as `"payload": null, "tombstone": true` and through kcat as a null payload; the four
/// bytes `null` are a JSON payload, not a tombstone, and an empty value (kcat without `-Z`) an
/// empty binary payload.
#[test]
fn kcat_tombstones_are_null_values() {
    let (_dir, server) = start(&[]);
    let bootstrap = bootstrap(&server);
    success(&kcat(
        &[
            "-P", "-Z", "-K", ":", "-b", &bootstrap, "-t", "t", "-p", "3",
        ],
        b"k1:x\nk2:\nk3:null\n",
    ));
    success(&kcat(
        &["-P", "-K", ":", "-b", &bootstrap, "-t", "t", "-p", "4"],
        b"k4:\n",
    ));

    let rest = rest_records(server.addr, "t", 3);
    assert_eq!(rest.len(), 3, "{rest:?}");
    let shown = |record: &RawRecord| -> Value {
        let mut value = serde_json::to_value(record).unwrap();
        value.as_object_mut().unwrap().remove("appendedAt");
        value
    };
    assert_eq!(
        shown(&rest[0]),
        json!({"offset": 0, "key": null, "payloadBase64": "eA==", "messageKey": "k1"})
    );
    assert_eq!(
        shown(&rest[1]),
        json!({"offset": 1, "key": null, "payload": null, "tombstone": true, "messageKey": "k2"}),
        "a null value is a tombstone"
    );
    assert_eq!(rest[1]["payload"].get(), "null");
    assert_eq!(
        shown(&rest[2]),
        json!({"offset": 2, "key": null, "payload": null, "messageKey": "k3"}),
        "the JSON text null is no tombstone"
    );
    assert_eq!(rest[2]["payload"].get(), "null");

    let lines = kcat_consume(&bootstrap, "t", 3);
    let payloads: Vec<(&Value, &Value)> = lines
        .iter()
        .map(|line| (&line["key"], &line["payload"]))
        .collect();
    assert_eq!(
        payloads,
        [
            (&json!("k1"), &json!("x")),
            (&json!("k2"), &Value::Null),
            (&json!("k3"), &json!("null")),
        ]
    );
    assert_eq!(
        kcat_record(&bootstrap, "t", 3, 1),
        (Some(b"k2".to_vec()), None, Vec::new()),
        "a null value, not an empty one"
    );
    assert_eq!(kcat_record(&bootstrap, "t", 3, 2).1, Some(b"null".to_vec()));

    let rest = rest_records(server.addr, "t", 4);
    assert_eq!(
        shown(&rest[0]),
        json!({"offset": 0, "key": null, "payloadBase64": "", "messageKey": "k4"}),
        "an empty value is an empty binary payload, not a tombstone"
    );
    assert_eq!(kcat_record(&bootstrap, "t", 4, 0).1, Some(Vec::new()));
}

/// ListOffsets by time (`kcat -Q -t topic:partition:ms`): the first offset appended at or
/// after the time; 0 for a time before every record; -1 (the end) for a time after them all.
#[test]
fn kcat_finds_offsets_by_time() {
    let (_dir, server) = start(&[]);
    let bootstrap = bootstrap(&server);
    let produce = |lines: &[u8]| {
        success(&kcat(
            &["-P", "-b", &bootstrap, "-t", "t", "-p", "5"],
            lines,
        ));
    };
    let query = |at: i64| -> i64 {
        let spec = format!("t:5:{at}");
        let out = success(&kcat(&["-Q", "-b", &bootstrap, "-t", &spec], b""));
        let line = out
            .lines()
            .find(|line| line.starts_with("t [5] offset "))
            .unwrap_or_else(|| panic!("no offset for {spec}: {out}"));
        line["t [5] offset ".len()..]
            .trim()
            .parse()
            .expect("an offset")
    };
    let start_time = now_ms() - 1;
    produce(b"a1\na2\na3\n");
    sleep(Duration::from_millis(50));
    let middle = now_ms();
    sleep(Duration::from_millis(50));
    produce(b"b1\nb2\n");
    sleep(Duration::from_millis(50));
    let end = now_ms();

    let rest = rest_records(server.addr, "t", 5);
    let times: Vec<i64> = rest
        .iter()
        .map(|record| {
            field(record, "appendedAt")
                .and_then(|at| at.as_i64())
                .unwrap()
        })
        .collect();
    assert!(
        times[2] < middle && middle <= times[3],
        "{times:?} around {middle}"
    );

    assert_eq!(query(start_time), 0, "before every record");
    assert_eq!(query(middle), 3, "the first record of the second produce");
    assert_eq!(query(end), -1, "after every record: none");
    // A record's own time finds the first record appended at that time.
    for at in times.clone() {
        let first = times.iter().position(|&time| time >= at).unwrap() as i64;
        assert_eq!(query(at), first, "at {at}, appended at {times:?}");
    }
}

/// kafka-python, both ways: ~200 records with keys (some not UTF-8), repeated and binary
/// headers and JSON, binary, empty and null values, sent with `acks='all'` over the 8 partitions,
/// read back by a consumer assigned every partition (no group), each exactly once, in order
/// per partition, byte for byte; and each read over REST as the same record.
#[test]
fn kafka_python_round_trip() {
    let (_dir, server) = start(&[]);
    let bootstrap = bootstrap(&server);
    let count = 200;
    let out = python(
        "kafka_python_roundtrip.py",
        &[&bootstrap, "kp", &count.to_string()],
    );
    let lines = json_lines(&success(&out));
    let kind = |kind: &str| -> Vec<Record> {
        lines
            .iter()
            .filter(|line| line["kind"] == json!(kind))
            .map(record_of_line)
            .collect()
    };
    let (produced, consumed) = (kind("produced"), kind("consumed"));
    assert_eq!(
        lines.last(),
        Some(&json!({"kind": "done", "produced": count, "consumed": count}))
    );
    assert_eq!(produced.len(), count);

    // Sent in order by one producer: each partition's offsets count up from 0.
    let mut by_partition: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
    for record in &produced {
        by_partition
            .entry(record.partition)
            .or_default()
            .push(record.clone());
    }
    assert_eq!(
        by_partition.keys().copied().collect::<Vec<_>>(),
        (0..PARTITIONS).collect::<Vec<_>>(),
        "keys spread over every partition"
    );
    for (partition, records) in &by_partition {
        let offsets: Vec<i64> = records.iter().map(|record| record.offset).collect();
        assert_eq!(
            offsets,
            (0..records.len() as i64).collect::<Vec<_>>(),
            "partition {partition}"
        );
    }

    // Read back: per partition, the same records in the same order, each once.
    let mut read: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
    for record in consumed {
        read.entry(record.partition).or_default().push(record);
    }
    for (partition, records) in &by_partition {
        let got = read.get(partition).map_or(&[][..], Vec::as_slice);
        assert_eq!(
            got.len(),
            records.len(),
            "partition {partition}: each record once"
        );
        for (got, sent) in got.iter().zip(records) {
            assert_eq!(got, sent, "partition {partition}");
        }
    }
    assert_eq!(read.len(), by_partition.len());

    // Over REST: every record, a JSON value as a JSON payload, anything else in base64.
    for (partition, records) in &by_partition {
        let rest = rest_records(server.addr, "kp", *partition);
        assert_eq!(rest.len(), records.len(), "partition {partition}");
        for (rest, sent) in rest.iter().zip(records) {
            assert_rest_is(rest, sent);
        }
    }
    // The record kinds the round trip is meant to cover were sent.
    let key_not_utf8 = |record: &&Record| {
        record
            .key
            .as_ref()
            .is_some_and(|key| std::str::from_utf8(key).is_err())
    };
    assert!(produced.iter().any(|record| key_not_utf8(&record)));
    assert!(
        produced
            .iter()
            .any(|record| record.value.as_deref().is_some_and(is_json))
    );
    assert!(
        produced
            .iter()
            .any(|record| record.value.as_deref() == Some(b""))
    );
    assert!(produced.iter().any(|record| record.value.is_none()));
    assert!(produced.iter().any(|record| {
        record
            .value
            .as_ref()
            .is_some_and(|value| std::str::from_utf8(value).is_err())
    }));
}

/// kafkajs (its admin client and producer, default settings): CreateTopics with the broker's
/// partition count, Metadata (8 partitions led by broker 0), Produce with keys, repeated
/// headers, JSON, binary and null values, and ListOffsets; its records read back byte for
/// byte through kcat and over REST. (kafkajs reads only through consumer groups: see
/// `groups.rs`.)
#[test]
fn kafkajs_round_trip() {
    let (_dir, server) = start(&[]);
    let bootstrap = bootstrap(&server);
    let out = node("kafkajs_roundtrip.js", &[&bootstrap, "kj"]);
    let lines = json_lines(&success(&out));
    let kind = |kind: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|line| line["kind"] == json!(kind))
            .collect()
    };
    assert_eq!(
        kind("created"),
        [&json!({"kind": "created", "created": true})]
    );
    let partitions: Vec<Value> = (0..PARTITIONS)
        .map(|partition| json!({"partition": partition, "leader": 0}))
        .collect();
    assert_eq!(
        kind("metadata"),
        [&json!({"kind": "metadata", "partitions": partitions})]
    );
    let produced: Vec<Record> = kind("produced").into_iter().map(record_of_line).collect();
    assert_eq!(produced.len(), 6, "{lines:?}");

    let mut by_partition: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
    for record in &produced {
        by_partition
            .entry(record.partition)
            .or_default()
            .push(record.clone());
    }
    for (partition, records) in &by_partition {
        let offsets: Vec<i64> = records.iter().map(|record| record.offset).collect();
        assert_eq!(
            offsets,
            (0..records.len() as i64).collect::<Vec<_>>(),
            "partition {partition}"
        );
    }
    let offsets: Vec<Value> = (0..PARTITIONS)
        .map(|partition| {
            let high = by_partition.get(&partition).map_or(0, Vec::len);
            json!({"partition": partition, "low": 0, "high": high})
        })
        .collect();
    assert_eq!(
        kind("offsets"),
        [&json!({"kind": "offsets", "partitions": offsets})]
    );

    for (partition, records) in &by_partition {
        let rest = rest_records(server.addr, "kj", *partition);
        assert_eq!(rest.len(), records.len(), "partition {partition}");
        for (rest, sent) in rest.iter().zip(records) {
            assert_rest_is(rest, sent);
        }
        for sent in records {
            let (key, value, headers) = kcat_record(&bootstrap, "kj", *partition, sent.offset);
            assert_eq!((&key, &value), (&sent.key, &sent.value), "{sent:?}");
            let mut shown = Vec::new();
            for (at, (name, value)) in sent.headers.iter().enumerate() {
                if at > 0 {
                    shown.push(b',');
                }
                shown.extend_from_slice(name.as_bytes());
                shown.push(b'=');
                shown.extend_from_slice(value.as_deref().unwrap_or_default());
            }
            assert_eq!(
                String::from_utf8_lossy(&headers),
                String::from_utf8_lossy(&shown),
                "{sent:?}"
            );
            assert_eq!(headers, shown, "{sent:?}");
        }
    }
}
