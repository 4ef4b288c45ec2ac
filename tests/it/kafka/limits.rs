//! The Kafka listener's limits and what it reports: a frame over `kafka.max_request_bytes` is
//! refused before it is read, a frame cut short is dropped after the request timeout, the
//! connections have a bound, each API's requests are counted in `/metrics`, records flushed
//! to the cold tier are fetched back as over REST, and a request not served is answered
//! `UNSUPPORTED_VERSION`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{bootstrap, kcat, start, success};
use crate::common::process::{Server, exchange, request};

/// An ApiVersions v0 request: what every client sends first.
const API_VERSIONS: [u8; 14] = [0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 9, 0xff, 0xff];

/// Whether `stream` answers an ApiVersions request.
fn answers(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    if stream.write_all(&API_VERSIONS).is_err() {
        return false;
    }
    let mut head = [0u8; 8];
    stream.read_exact(&mut head).is_ok() && head[4..8] == [0, 0, 0, 9]
}

/// Whether the listener closes `stream` within `within` (a read ends without data).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(read) => read == 0,
        Err(err) => !matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

fn metrics(server: &Server) -> String {
    let (status, _, body) = exchange(
        server.addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .expect("metrics");
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body).into_owned()
}

/// A frame stating more than `kafka.max_request_bytes` closes its connection at once, its
/// body unread; a frame cut short is dropped after `server.request_timeout_ms`; the listener
/// serves the next client either way.
#[test]
fn oversized_and_cut_short_frames_are_dropped() {
    let (_dir, server) = start(&[
        ("DURABILITY__KAFKA__MAX_REQUEST_BYTES", "1024"),
        ("DURABILITY__SERVER__REQUEST_TIMEOUT_MS", "1000"),
    ]);
    let address: SocketAddr = server.kafka.unwrap();

    let mut oversized = TcpStream::connect(address).unwrap();
    oversized.write_all(&2048i32.to_be_bytes()).unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut oversized, Duration::from_secs(5)));
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "closed before any of the body came, not after the request timeout"
    );

    let mut cut = TcpStream::connect(address).unwrap();
    cut.write_all(&API_VERSIONS[..9]).unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut cut, Duration::from_secs(10)));
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "dropped after the request timeout, not before: {:?}",
        started.elapsed()
    );

    assert!(answers(&mut TcpStream::connect(address).unwrap()));
}

/// Connections past `kafka.max_connections` are closed as they arrive; once one closes, a new
/// one is served.
#[test]
fn connections_are_bounded() {
    let (_dir, server) = start(&[("DURABILITY__KAFKA__MAX_CONNECTIONS", "2")]);
    let address = server.kafka.unwrap();
    let mut first = TcpStream::connect(address).unwrap();
    let mut second = TcpStream::connect(address).unwrap();
    assert!(answers(&mut first) && answers(&mut second));
    let mut third = TcpStream::connect(address).unwrap();
    assert!(!answers(&mut third), "a third connection is refused");
    drop(first);
    let served = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        answers(&mut TcpStream::connect(address).unwrap())
    });
    assert!(served, "a connection is served again once one closed");
}

/// `/metrics` counts each API's requests and their errors: after kcat lists, produces and
/// consumes, Metadata, Produce and Fetch have series, a refused produce (a topic name that is
/// not valid) is counted under its error, and the log line printed at start names the
/// listener.
#[test]
fn requests_are_counted_per_api_and_error() {
    let (_dir, server) = start(&[]);
    let broker = bootstrap(&server);
    success(&kcat(
        &["-b", &broker, "-P", "-t", "m", "-p", "0"],
        b"one\n",
    ));
    success(&kcat(
        &[
            "-b",
            &broker,
            "-C",
            "-t",
            "m",
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
        ],
        b"",
    ));
    let refused = kcat(
        &[
            "-b",
            &broker,
            "-P",
            "-t",
            "bad name!",
            "-p",
            "0",
            "-X",
            "message.timeout.ms=3000",
        ],
        b"x\n",
    );
    assert!(!refused.status.success());
    let text = metrics(&server);
    let count = |api: &str, error: &str| -> u64 {
        let series = format!(
            "durability_kafka_request_duration_seconds_count{{api=\"{api}\",error=\"{error}\"}} "
        );
        text.lines()
            .find_map(|line| line.strip_prefix(series.as_str()))
            .map_or(0, |count| count.trim().parse().unwrap())
    };
    for api in ["ApiVersions", "Metadata", "Produce", "Fetch"] {
        assert!(count(api, "none") > 0, "{api} requests counted:\n{text}");
    }
    let invalid_topic = text.lines().any(|line| {
        line.starts_with("durability_kafka_request_duration_seconds_count{api=\"Metadata\"")
            && line.contains("InvalidTopicException")
    });
    assert!(
        invalid_topic,
        "the invalid topic is counted under its error:\n{text}"
    );
    assert!(
        text.contains("durability_kafka_batches_total{codec=\"none\"} 1"),
        "{text}"
    );
}

/// Records flushed to the cold tier are fetched back through Kafka as over REST: kcat reads
/// from offset 0 after retention left one record hot, and ListOffsets' earliest is still 0.
#[test]
fn cold_records_are_fetched_back() {
    let cold = tempfile::tempdir().unwrap();
    let cold = cold.path().to_str().unwrap().to_owned();
    let (_dir, server) = start(&[
        ("DURABILITY__RETENTION__MAX_RECORDS", "1"),
        ("DURABILITY__COLD__DIR", cold.as_str()),
    ]);
    let broker = bootstrap(&server);
    success(&kcat(
        &["-b", &broker, "-P", "-t", "c", "-p", "0"],
        b"r0\nr1\nr2\nr3\n",
    ));
    let (status, trimmed) =
        request(server.addr, "POST", "/topics/c/partitions/0/trim", None).unwrap();
    assert_eq!(status, 200, "{trimmed}");
    let (_, bounds) = request(server.addr, "GET", "/topics/c/partitions/0/bounds", None).unwrap();
    assert_eq!(bounds["hotOffset"], 3, "three records went cold: {bounds}");
    let read = success(&kcat(
        &[
            "-b",
            &broker,
            "-C",
            "-t",
            "c",
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-J",
        ],
        b"",
    ));
    let lines: Vec<Value> = read
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let payloads: Vec<&str> = lines
        .iter()
        .map(|l| l["payload"].as_str().unwrap())
        .collect();
    assert_eq!(payloads, ["r0", "r1", "r2", "r3"]);
    let offsets: Vec<u64> = lines
        .iter()
        .map(|l| l["offset"].as_u64().unwrap())
        .collect();
    assert_eq!(offsets, [0, 1, 2, 3]);
    let earliest = success(&kcat(&["-b", &broker, "-Q", "-t", "c:0:-2"], b""));
    assert!(earliest.contains("offset 0"), "{earliest}");
}

/// A request of a key or version not served is answered `UNSUPPORTED_VERSION` under its
/// correlation id, and the connection serves on: KIP-848's ConsumerGroupHeartbeat (key 68),
/// which ApiVersions does not list, so clients keep to the classic group protocol, and a
/// Produce of version 2 (below the versions served).
#[test]
fn requests_not_served_are_answered_unsupported_version() {
    let (_dir, server) = start(&[]);
    let mut stream = TcpStream::connect(bootstrap(&server)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for (key, version, correlation) in [(68i16, 0i16, 41i32), (0, 2, 42)] {
        // A header (key, version, correlation id, no client id) and a body nobody reads.
        let mut frame = Vec::new();
        frame.extend_from_slice(&key.to_be_bytes());
        frame.extend_from_slice(&version.to_be_bytes());
        frame.extend_from_slice(&correlation.to_be_bytes());
        frame.extend_from_slice(&(-1i16).to_be_bytes());
        frame.extend_from_slice(&[0, 1, 2, 3]);
        let mut sized = (frame.len() as i32).to_be_bytes().to_vec();
        sized.extend_from_slice(&frame);
        stream.write_all(&sized).unwrap();
        let mut answer = [0u8; 10];
        stream.read_exact(&mut answer).unwrap();
        assert_eq!(
            answer,
            [0, 0, 0, 6, 0, 0, 0, correlation as u8, 0, 35],
            "key {key} v{version}: its correlation id and UNSUPPORTED_VERSION (35)"
        );
    }
    assert!(answers(&mut stream), "the connection serves on");
    assert!(
        !durability::kafka::SUPPORTED
            .iter()
            .any(|(api, ..)| *api as i16 == 68),
        "ApiVersions does not list ConsumerGroupHeartbeat"
    );
}
