//! The group and lease commands of the binary (`groups`, `lease`) against a real server over
//! real sockets: `groups` shows a group's lag, `--reset-to earliest --yes` replays what the group
//! had read, and without `--yes` off a terminal it refuses and changes nothing; a claimed range
//! acked moves the cursor, and one nacked comes back as the same range, attempt 2.

use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::common::process::{Server, request};

/// The binary as a client of the server at `addr`, with `args`, standard input not a terminal:
/// its output once it exited.
fn durability(addr: SocketAddr, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_durability"))
        .args(args)
        .env("DURABILITY_URL", format!("http://{addr}"))
        .env_remove("DURABILITY_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run the binary")
}

/// The standard output of a run that succeeded.
fn succeeded(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

/// The one JSON document a successful run printed.
fn json_of(output: &Output) -> Value {
    serde_json::from_str(&succeeded(output)).expect("one JSON document")
}

/// Appends `count` records `{"n": first..}` to partition 0 of `topic`.
fn append(addr: SocketAddr, topic: &str, first: u64, count: u64) {
    let records: Vec<Value> = (first..first + count)
        .map(|n| json!({ "payload": { "n": n } }))
        .collect();
    let path = format!("/topics/{topic}/partitions/0/records");
    let (status, body) = request(addr, "POST", &path, Some(&json!(records))).unwrap();
    assert_eq!(status, 202, "{body}");
}

/// Group `group`'s cursor and lag on partition 0 of `topic`, as `groups --output json` shows.
fn cursor_and_lag(addr: SocketAddr, topic: &str, group: &str) -> (Value, Value) {
    let shown = json_of(&durability(
        addr,
        &["groups", "-t", topic, group, "-p", "0", "--output", "json"],
    ));
    let position = &shown["positions"][0];
    assert!(matches!(&position["group"], Value::String(name) if name == group));
    (position["cursor"].clone(), position["lag"].clone())
}

/// The `n` of each record a group's `consume -e` printed, in order.
fn consumed_as(addr: SocketAddr, topic: &str, group: &str) -> Vec<u64> {
    let printed = succeeded(&durability(
        addr,
        &["consume", "-t", topic, "-g", group, "-e"],
    ));
    printed
        .lines()
        .map(|line| {
            let record: Value = serde_json::from_str(line).expect("a JSON line");
            record["payload"]["n"].as_u64().expect("a number")
        })
        .collect()
}

/// `durability lease -t jobs -g workers` with `args`.
fn lease(addr: SocketAddr, args: &[&str]) -> Output {
    let all: Vec<&str> = ["lease", "-t", "jobs", "-g", "workers"]
        .iter()
        .chain(args)
        .copied()
        .collect();
    durability(addr, &all)
}

/// A group that read 5 records shows lag 3 once 3 more came, in the table and in JSON;
/// `--reset-to earliest --yes` moves its cursor back to 0, and its next `consume` prints all 8.
#[test]
fn groups_show_the_lag_and_a_reset_to_earliest_replays_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), std::iter::empty::<(&str, &str)>());
    let addr = server.addr;
    append(addr, "orders", 0, 5);
    assert_eq!(consumed_as(addr, "orders", "billing"), [0, 1, 2, 3, 4]);
    append(addr, "orders", 5, 3);

    assert_eq!(
        cursor_and_lag(addr, "orders", "billing"),
        (json!(5), json!(3))
    );
    let table = succeeded(&durability(addr, &["groups", "-t", "orders"]));
    let row: Vec<&str> = table
        .lines()
        .find(|line| line.starts_with("billing ") && line.split_whitespace().nth(1) == Some("0"))
        .expect("billing's row of partition 0")
        .split_whitespace()
        .collect();
    assert_eq!(row, ["billing", "0", "5", "8", "3"], "{table}");

    let reset = durability(
        addr,
        &[
            "groups",
            "-t",
            "orders",
            "billing",
            "--reset-to",
            "earliest",
            "--yes",
        ],
    );
    let said = succeeded(&reset);
    assert!(
        said.contains("partition 0: 5 → 0"),
        "the move is shown: {said}"
    );
    assert_eq!(
        cursor_and_lag(addr, "orders", "billing"),
        (json!(0), json!(8))
    );
    assert_eq!(
        consumed_as(addr, "orders", "billing"),
        [0, 1, 2, 3, 4, 5, 6, 7]
    );
}

/// Without `--yes`, and with standard input not a terminal to ask on, `--reset-to` exits 2,
/// says why, and leaves the cursor where it was.
#[test]
fn a_reset_without_yes_off_a_terminal_exits_2_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), std::iter::empty::<(&str, &str)>());
    let addr = server.addr;
    append(addr, "orders", 0, 4);
    assert_eq!(consumed_as(addr, "orders", "billing"), [0, 1, 2, 3]);

    for target in [&["earliest"][..], &["1", "-p", "0"]] {
        let args = ["groups", "-t", "orders", "billing", "--reset-to"];
        let refused = durability(addr, &[&args[..], target].concat());
        assert_eq!(refused.status.code(), Some(2), "--reset-to {target:?}");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains("--yes"), "{said}");
        assert_eq!(
            cursor_and_lag(addr, "orders", "billing"),
            (json!(4), json!(0))
        );
    }
    assert_eq!(consumed_as(addr, "orders", "billing"), Vec::<u64>::new());
}

/// A claimed range, acked by the batch id `claim` printed, moves the group's cursor past it;
/// then nothing is left to claim (exit 0, nothing printed), and a second ack exits 1.
#[test]
fn a_lease_claimed_then_acked_moves_the_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), std::iter::empty::<(&str, &str)>());
    let addr = server.addr;
    append(addr, "jobs", 0, 3);

    let claimed = json_of(&lease(addr, &["claim", "-p", "0"]));
    let place = |lease: &Value| {
        let field = |name: &str| lease[name].clone();
        (
            field("partition"),
            field("firstOffset"),
            field("lastOffset"),
        )
    };
    assert_eq!(place(&claimed), (json!(0), json!(0), json!(2)));
    assert_eq!(claimed["records"].as_array().map(Vec::len), Some(3));
    let batch = claimed["batchId"].as_str().expect("a batch id");

    let acked = json_of(&lease(addr, &["ack", "-p", "0", batch]));
    assert_eq!(acked, json!({ "cursor": 3 }));
    assert_eq!(
        cursor_and_lag(addr, "jobs", "workers"),
        (json!(3), json!(0))
    );

    let nothing = lease(addr, &["claim", "-p", "0"]);
    assert!(succeeded(&nothing).is_empty(), "nothing is printed");
    let said = String::from_utf8_lossy(&nothing.stderr);
    assert!(said.contains("nothing to claim"), "{said}");
    let again = lease(addr, &["ack", "-p", "0", batch]);
    assert_eq!(again.status.code(), Some(1), "a settled batch is not held");
}

/// A range claimed (of whichever partition has one) and nacked is claimed again as the same
/// range, under a new batch id, at attempt 2.
#[test]
fn a_lease_nacked_is_claimed_again_as_the_same_range_at_attempt_2() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), std::iter::empty::<(&str, &str)>());
    let addr = server.addr;
    append(addr, "jobs", 0, 2);

    let first = json_of(&lease(addr, &["claim"]));
    assert_eq!(first["attempt"], json!(1));
    let partition = first["partition"].to_string();
    let batch = first["batchId"].as_str().expect("a batch id");
    let nacked = lease(addr, &["nack", "-p", &partition, batch, "--delay-ms", "0"]);
    assert!(succeeded(&nacked).is_empty(), "a nack's answer has no body");

    let second = json_of(&lease(addr, &["claim", "-p", &partition]));
    let range = |lease: &Value| (lease["firstOffset"].clone(), lease["lastOffset"].clone());
    assert_eq!(range(&second), range(&first));
    assert_eq!(range(&second), (json!(0), json!(1)));
    assert_eq!(second["attempt"], json!(2));
    assert_ne!(second["batchId"], first["batchId"]);
}
