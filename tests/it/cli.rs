//! The client commands of the binary (`produce`, `consume`, `topics`) against a real server
//! over real sockets: what is piped in comes back out in order, a group's second run prints
//! nothing, a server killed mid-`produce` loses and duplicates nothing, and refusals exit with
//! their documented codes without showing the token.

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::cluster::free_port;
use crate::common::process::Server;

/// The binary as a client of the server at `addr`, with `args`.
fn durability(addr: SocketAddr, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_durability"));
    command
        .args(args)
        .env("DURABILITY_URL", format!("http://{addr}"))
        .env_remove("DURABILITY_TOKEN");
    command
}

/// Runs `command` with `input` on its standard input: its output once it exited.
fn run_with_input(mut command: Command, input: &[u8]) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the binary");
    let mut stdin = child.stdin.take().expect("piped");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().expect("the command's output");
    writer.join().unwrap();
    output
}

/// `count` JSON lines, each naming its number.
fn lines(count: usize) -> String {
    (0..count).map(|n| format!("{{\"n\":{n}}}\n")).collect()
}

/// The `n` of each record `consume` printed (as JSON lines), in order.
fn numbers(output: &Output) -> Vec<u64> {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            record["payload"]["n"].as_u64().expect("a number")
        })
        .collect()
}

/// 100,000 lines piped into `produce` come back in order from `consume -e -o beginning`.
/// As group `g`, `consume -e` prints them all and commits; its second run prints nothing.
#[test]
fn lines_piped_in_come_back_in_order_and_a_group_reads_them_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), [("DURABILITY__STORAGE__SYNC", "normal")]);
    let count = 100_000;
    let produced = run_with_input(
        durability(
            server.addr,
            &["produce", "-t", "lines", "-p", "0", "--quiet"],
        ),
        lines(count).as_bytes(),
    );
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    assert!(produced.stdout.is_empty(), "--quiet prints no offsets");
    let expected: Vec<u64> = (0..count as u64).collect();
    let read = durability(
        server.addr,
        &["consume", "-t", "lines", "-p", "0", "-e", "-o", "beginning"],
    )
    .output()
    .unwrap();
    assert_eq!(numbers(&read), expected);

    let as_group = || {
        durability(server.addr, &["consume", "-t", "lines", "-g", "g", "-e"])
            .output()
            .unwrap()
    };
    let first = numbers(&as_group());
    assert_eq!(
        first.len(),
        count,
        "the group's first run prints every record"
    );
    assert_eq!(
        numbers(&as_group()),
        Vec::<u64>::new(),
        "its second run prints nothing"
    );
}

/// A line that is not JSON stops `produce` with its line number (exit 2): the lines before it
/// are sent, none after it. With `--skip-bad` it is skipped, and the rest are sent.
#[test]
fn a_bad_line_stops_produce_before_anything_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), std::iter::empty::<(&str, &str)>());
    let input = b"{\"n\":0}\n{\"n\":1}\nnot json\n{\"n\":3}\n";
    let stopped = run_with_input(
        durability(server.addr, &["produce", "-t", "bad", "-p", "0"]),
        input,
    );
    assert_eq!(stopped.status.code(), Some(2));
    let said = String::from_utf8_lossy(&stopped.stderr);
    assert!(said.contains("stdin:3"), "the line number: {said}");
    let read = || {
        durability(server.addr, &["consume", "-t", "bad", "-p", "0", "-e"])
            .output()
            .unwrap()
    };
    assert_eq!(numbers(&read()), [0, 1]);

    let skipped = run_with_input(
        durability(
            server.addr,
            &["produce", "-t", "bad", "-p", "0", "--skip-bad"],
        ),
        input,
    );
    assert!(skipped.status.success());
    assert_eq!(numbers(&read()), [0, 1, 0, 1, 3]);
}

/// A wrong token exits 1, and no output shows it; no server at all exits 3.
#[test]
fn refusals_exit_with_their_codes_and_never_show_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        [("DURABILITY__SERVER__AUTH_TOKEN", "the-right-token")],
    );
    let wrong = "a-wrong-token-0123456789";
    for args in [&["topics"][..], &["consume", "-t", "x", "-p", "0", "-e"]] {
        let refused = durability(server.addr, args)
            .env("DURABILITY_TOKEN", wrong)
            .output()
            .unwrap();
        assert_eq!(refused.status.code(), Some(1), "{args:?}");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&refused.stdout),
            String::from_utf8_lossy(&refused.stderr)
        );
        assert!(said.contains("unauthorized"), "{said}");
        assert!(!said.contains(wrong), "the token is never shown: {said}");
    }
    let served = durability(server.addr, &["topics"])
        .env("DURABILITY_TOKEN", "the-right-token")
        .output()
        .unwrap();
    assert!(served.status.success());
    let nobody = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let unreachable = durability(nobody, &["topics"]).output().unwrap();
    assert_eq!(unreachable.status.code(), Some(3));
}

/// The server is killed (SIGKILL) and started again while `produce` sends 20,000 lines: the
/// command retries with the same deduplication keys and finishes, and every line is in the
/// partition exactly once, in order.
#[test]
fn a_server_killed_mid_produce_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bind = format!("127.0.0.1:{}", free_port());
    let env = [("DURABILITY__SERVER__BIND", bind.as_str())];
    let mut server = Server::start(dir.path(), env);
    let addr = server.addr;
    let count = 20_000;
    let producer = Producer::start(
        durability(addr, &["produce", "-t", "kept", "-p", "0"]),
        count,
    );
    // Killed once some of the lines are in.
    wait_until_written(addr, "kept");
    server.kill();
    std::thread::sleep(Duration::from_millis(500));
    let _server = Server::start(dir.path(), env);
    producer.finish();
    every_line_once(addr, "kept", count);
}

/// `completions bash` is a script bash reads without error and that completes every client
/// command; `man` is a manual page naming them.
#[test]
fn completions_and_the_manual_come_from_the_command_line() {
    let binary = env!("CARGO_BIN_EXE_durability");
    let completions = Command::new(binary)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(completions.status.success());
    let script = String::from_utf8(completions.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("durability.bash");
    std::fs::write(&file, &script).unwrap();
    let checked = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(checked.status.success(), "{checked:?}");
    let manual = Command::new(binary).arg("man").output().unwrap();
    assert!(manual.status.success());
    let manual = String::from_utf8(manual.stdout).unwrap();
    assert!(manual.contains(".TH durability"), "{manual}");
    for command in ["produce", "consume", "topics", "cluster"] {
        assert!(script.contains(command), "bash completes {command}");
        assert!(manual.contains(command), "the manual names {command}");
    }
}

/// `produce` given a three-node cluster's URLs keeps going when the node it talks to is
/// killed (SIGKILL) midway: it moves to the next node, waits out the volume's move through its
/// retries, and every one of 20,000 lines is in the partition exactly once, in order.
#[test]
fn produce_through_a_clusters_nodes_survives_a_node_killed_under_it() {
    use crate::common::cluster::{
        Node, one_cluster_at_a_time, start_etcd, three_nodes, wait_for_owners,
    };
    use crate::common::{block_on, fresh_s3_bucket};

    let _alone = one_cluster_at_a_time();
    let etcd = start_etcd(1);
    let s3 = block_on(fresh_s3_bucket());
    let mut nodes = three_nodes(|name| Node::start(name, &etcd, &s3));
    wait_for_owners(nodes[0].addr(), 3);
    let urls: Vec<String> = nodes
        .iter()
        .map(|node| format!("http://{}", node.addr()))
        .collect();
    let count = 20_000;
    let mut command = Command::new(env!("CARGO_BIN_EXE_durability"));
    command
        .args([
            "produce",
            "-t",
            "spread",
            "-p",
            "0",
            "--quiet",
            "--url",
            &urls.join(","),
        ])
        .env_remove("DURABILITY_URL");
    let producer = Producer::start(command, count);
    // The first node, which the command talks to, dies once some lines are in.
    let survivor = nodes[1].addr();
    wait_until_written(survivor, "spread");
    nodes[0].kill();
    producer.finish();
    every_line_once(survivor, "spread", count);
}

/// A `produce` command being fed lines.
struct Producer {
    child: Child,
    writer: std::thread::JoinHandle<()>,
}

impl Producer {
    /// Starts `command`, writing [`lines`]`(count)` to its standard input.
    fn start(mut command: Command, count: usize) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let input = lines(count);
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        });
        Self { child, writer }
    }

    /// Waits for the command to end; it must have succeeded.
    fn finish(self) {
        let output = self.child.wait_with_output().unwrap();
        self.writer.join().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Waits until partition 0 of `topic` holds more than 2,000 records, as `node` says.
fn wait_until_written(node: SocketAddr, topic: &str) {
    let path = format!("/topics/{topic}/partitions/0/bounds");
    let started = Instant::now();
    loop {
        let bounds = crate::common::process::request(node, "GET", &path, None);
        if matches!(&bounds, Ok((200, b)) if b["nextOffset"].as_u64() > Some(2_000)) {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{bounds:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every one of [`lines`]`(count)` is in partition 0 of `topic` once, in order.
fn every_line_once(node: SocketAddr, topic: &str, count: usize) {
    let read = durability(node, &["consume", "-t", topic, "-p", "0", "-e"])
        .output()
        .unwrap();
    assert_eq!(numbers(&read), (0..count as u64).collect::<Vec<_>>());
}
