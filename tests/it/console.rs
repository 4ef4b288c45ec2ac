//! The browser console (`/console/`), driven in headless Chromium by
//! `tests/console/console_test.py` (Selenium, with Debian's chromium and chromedriver; all
//! installed by `scripts/install-browser`) against the server binary over a real socket. Each
//! test runs one scenario of that program, which checks what the page shows, what it sent the
//! server and that the browser logged no error, and saves screenshots of the views to
//! `target/console-screenshots`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

use crate::common::cluster::{Node, one_cluster_at_a_time, start_etcd, wait_for_owners};
use crate::common::process::Server;
use crate::common::{block_on, fresh_s3_bucket};

/// The server's `auth_token`: the console is tested behind a token, as it is deployed.
const TOKEN: &str = "console-test-token";

/// One browser at a time: a scenario times what the page shows, and several Chromiums on a
/// two-core machine would measure each other.
static BROWSER: Mutex<()> = Mutex::new(());

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The Python of `.venv-browser`, once Chromium and its driver are known to be there.
fn python() -> PathBuf {
    let python = root().join(".venv-browser/bin/python");
    for (path, what) in [
        (python.as_path(), "Selenium's venv (.venv-browser)"),
        (Path::new("/usr/bin/chromium"), "chromium"),
        (Path::new("/usr/bin/chromedriver"), "chromedriver"),
    ] {
        if !path.exists() {
            panic!("{what} is missing: run scripts/install-browser");
        }
    }
    python
}

/// The server binary over a fresh data folder, configured as the scenarios expect: a token,
/// pages of 1,000 records, a range dead-lettered after one delivery, and the lag sampled every
/// 200 ms so a chart has history within seconds.
fn start() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        [
            ("DURABILITY__SERVER__AUTH_TOKEN", TOKEN),
            ("DURABILITY__LOG__MAX_BATCH_SIZE", "1000"),
            ("DURABILITY__LEASES__MAX_ATTEMPTS", "1"),
            ("DURABILITY__LEASES__DEAD_LETTER_TOPIC", "dead-letters"),
            ("DURABILITY__METRICS__LAG_SAMPLE_MS", "200"),
            ("RUST_LOG", "warn"),
        ],
    );
    (dir, server)
}

/// Runs `scenario` of `console_test.py` against a fresh server; fails with its output.
fn scenario(scenario: &str) {
    let _browser = BROWSER.lock().unwrap_or_else(PoisonError::into_inner);
    let (_dir, server) = start();
    run(scenario, server.addr, TOKEN, &[]);
}

/// Runs `scenario` of `console_test.py` against the server at `addr` with `token` and `env`;
/// fails with its output. The caller holds [`BROWSER`].
fn run(scenario: &str, addr: SocketAddr, token: &str, env: &[(&str, &str)]) {
    let shots = root().join("target/console-screenshots");
    std::fs::create_dir_all(&shots).expect("create target/console-screenshots");
    let output = Command::new(python())
        .arg(root().join("tests/console/console_test.py"))
        .arg(format!("http://{addr}"))
        .arg(token)
        .arg(&shots)
        .arg(scenario)
        .envs(env.iter().copied())
        .output()
        .expect("run tests/console/console_test.py");
    assert!(
        output.status.success(),
        "console scenario {scenario} failed ({})\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Three records produced to a partition: the topic list finds the topic, and its view shows
/// nextOffset 3 and every partition's load snapshot.
#[test]
fn topic_view_shows_the_offsets_of_produced_records() {
    scenario("partitions");
}

/// A burst of 1,000 records and 2 more show as 1,002 rows of the live tail within 3 s, newest
/// first; records arriving while paused are held and drawn on resume; a topic of 8 partitions
/// is tailed whole.
#[test]
fn live_tail_shows_a_burst_newest_first_and_holds_records_while_paused() {
    scenario("tail");
}

/// A group committing at two lags over time: the groups view charts its lag history.
#[test]
fn groups_view_charts_the_lag_history_of_a_group() {
    scenario("lag-chart");
}

/// A range nacked past `max_attempts` is shown as a dead letter with its source; redriven
/// twice and then in bulk, its payload is back in the source partition exactly once.
#[test]
fn dead_letters_show_their_source_and_are_redriven_once() {
    scenario("dead-letters");
}

/// A wrong token shows the server's message over the token form, never a blank page, and a
/// token refused later returns the console to the form.
#[test]
fn a_wrong_token_shows_the_servers_message_not_a_blank_page() {
    scenario("wrong-token");
}

/// The cluster view of a server outside a cluster says it is a single node, with its numbers
/// from `/metrics`.
#[test]
fn cluster_view_of_a_single_node_says_so() {
    scenario("cluster");
}

/// Two nodes of a cluster (etcd, a bucket): the cluster view lists both, marks the node that
/// answered, and shows takeovers and forwards.
#[test]
fn cluster_view_lists_every_member_and_the_node_that_answered() {
    let _alone = one_cluster_at_a_time();
    let _browser = BROWSER.lock().unwrap_or_else(PoisonError::into_inner);
    let etcd = start_etcd(1);
    let s3 = block_on(fresh_s3_bucket());
    let nodes: Vec<Node> = ["a", "b"]
        .into_iter()
        .map(|name| Node::start(name, &etcd, &s3))
        .collect();
    wait_for_owners(nodes[0].addr(), 2);
    run(
        "cluster-members",
        nodes[1].addr(),
        "",
        &[("CLUSTER_MEMBERS", "2")],
    );
}

/// At 375 px every view fits the screen's width: only tables scroll, inside their boxes.
#[test]
fn every_view_fits_a_phone_screen() {
    scenario("phone");
}

/// The keyboard alone reaches a topic from the topic list (Tab, a visible focus, Enter).
#[test]
fn keyboard_alone_opens_a_topic_from_the_list() {
    scenario("keyboard");
}
