//! Damage met across SIGKILL, as an operator meets it: the real server killed, its files
//! altered or lost while it is down, then restarted. Damage found once is still refused after
//! every restart until `durability accept-damage` clears it; a volume that lost acknowledged
//! commits serves only what intact cold segments hold.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::records::bounds;
use super::{TOPIC, start_server};
use crate::common::process::request;

/// Appends `payloads` to `partition`: the status and the answer's error code, if any.
fn append(addr: SocketAddr, partition: u32, payloads: &[Value]) -> (u16, String) {
    let body = Value::Array(payloads.iter().map(|p| json!({ "payload": p })).collect());
    let path = format!("/topics/{TOPIC}/partitions/{partition}/records");
    let (status, answer) = request(addr, "POST", &path, Some(&body)).expect("an answer");
    (status, code(&answer))
}

fn code(answer: &Value) -> String {
    answer["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `durability accept-damage` over the server's data folder: its exit status and output.
fn accept_damage(dir: &Path, by: &str) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_durability"))
        .env("DURABILITY__STORAGE__DATA_DIR", dir.join("data"))
        .env("RUST_LOG", "warn")
        .args(["accept-damage", "--volume", "0", "--by", by])
        .output()
        .expect("run accept-damage");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// A payload altered in place while the server was down fails its checksum when read; the
/// volume then refuses writes after every restart (it took them again before), until the
/// operator accepts the damage.
#[test]
fn an_altered_record_stays_refused_across_kills_until_accepted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let unlimited = [("DURABILITY__RETENTION__MAX_RECORDS", "0")];
    let mut server = start_server(dir.path(), &unlimited);
    assert_eq!(
        append(server.addr, 0, &[json!("hello"), json!("world")]).0,
        202
    );
    server.kill();
    let volume = dir.path().join("data/volume-0.sqlite");
    let conn = rusqlite::Connection::open(&volume).expect("open the volume");
    let altered = conn
        .execute(
            "UPDATE records SET payload = '\"HELLO\"' WHERE payload = '\"hello\"'",
            [],
        )
        .expect("alter a payload");
    assert_eq!(altered, 1);
    drop(conn);

    let mut server = start_server(dir.path(), &unlimited);
    let path = format!("/topics/{TOPIC}/partitions/0/records?from=0");
    let (status, answer) = request(server.addr, "GET", &path, None).expect("an answer");
    assert_eq!(
        (status, code(&answer).as_str()),
        (500, "corrupted"),
        "{answer}"
    );
    server.kill();

    for restart in 0..2 {
        let mut server = start_server(dir.path(), &unlimited);
        for partition in [0, 1] {
            let answer = append(server.addr, partition, &[json!("after")]);
            assert_eq!(answer, (500, "corrupted".into()), "restart {restart}");
        }
        server.kill();
    }

    let (accepted, output) = accept_damage(dir.path(), "ops: record 0 checked by hand");
    assert!(accepted, "{output}");
    assert!(
        output.contains("accepted by ops: record 0 checked by hand"),
        "{output}"
    );
    let recorded = std::fs::read_to_string(dir.path().join("data/volume-0.sqlite-accepted"))
        .expect("the acceptance is recorded");
    assert!(recorded.contains("record 0"), "{recorded}");
    let (again, output) = accept_damage(dir.path(), "ops");
    assert!(!again, "nothing left to accept: {output}");

    let server = start_server(dir.path(), &unlimited);
    assert_eq!(append(server.addr, 1, &[json!("after")]).0, 202);
}

/// The newest seq the volume recorded as durable beside itself (0 when none yet).
fn high_water(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("data/volume-0.sqlite-hwm"))
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

/// The write-ahead log deleted after a SIGKILL: the volume opens holding fewer commits than it
/// acknowledged. Reads, bounds, polls, leases and the topic list answer `corrupted` (they
/// answered a shorter log before, or nothing at all), while ranges that intact cold segments
/// hold are still served.
#[test]
fn a_write_ahead_log_lost_after_a_kill_is_reported_not_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut server = start_server(dir.path(), &[]);
    let addr = server.addr;
    for batch in 0..10 {
        let payloads: Vec<Value> = (0..100).map(|n| json!({ "n": batch * 100 + n })).collect();
        assert_eq!(append(addr, 0, &payloads).0, 202);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while bounds(addr, 0).expect("bounds").1 < 800 || high_water(dir.path()) < 1_000 {
        assert!(
            Instant::now() < deadline,
            "retention and the high-water mark keep up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill();
    let wal = dir.path().join("data/volume-0.sqlite-wal");
    assert!(wal.exists(), "the commits are in the write-ahead log");
    std::fs::remove_file(wal).expect("lose the write-ahead log");

    let server = start_server(dir.path(), &[]);
    let addr = server.addr;
    let path = format!("/topics/{TOPIC}/partitions/0/records?from=0&limit=100");
    let (status, page) = request(addr, "GET", &path, None).expect("an answer");
    assert_eq!(status, 200, "cold segments are still served: {page}");
    assert_eq!(page["records"][99]["payload"]["n"], 99);
    for (method, path) in [
        (
            "GET",
            format!("/topics/{TOPIC}/partitions/0/records?from=900"),
        ),
        ("GET", format!("/topics/{TOPIC}/partitions/0/bounds")),
        ("GET", format!("/topics/{TOPIC}/groups/readers/poll")),
        (
            "POST",
            format!("/topics/{TOPIC}/partitions/0/groups/workers/leases"),
        ),
        ("GET", "/topics".to_owned()),
        ("POST", format!("/topics/{TOPIC}/partitions/0/records")),
    ] {
        let body = (method == "POST").then(|| json!([{ "payload": 1 }]));
        let (status, answer) = request(addr, method, &path, body.as_ref()).expect("an answer");
        assert_eq!(
            (status, code(&answer).as_str()),
            (500, "corrupted"),
            "{method} {path}"
        );
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("volume-0.sqlite"),
            "{method} {path}: {message}"
        );
    }
}
