//! The Kafka listener, tested with real Kafka clients (installed by
//! `scripts/install-kafka-clients`): kcat, confluent-kafka (librdkafka), kafka-python and
//! kafkajs, against the server binary over real sockets. The client programs are in
//! `tests/kafka/`.

mod clients;
mod cluster;
mod groups;
mod idempotence;
mod limits;
mod security;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::process::Server;

/// The server binary over a fresh data folder with its Kafka listener on a free port, with
/// `env` besides.
pub fn start(env: &[(&str, &str)]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec![
        ("DURABILITY__KAFKA__BIND", "127.0.0.1:0"),
        ("RUST_LOG", "warn"),
    ];
    all.extend_from_slice(env);
    let server = Server::start(dir.path(), all);
    assert!(
        server.kafka.is_some(),
        "the Kafka listener announced itself"
    );
    (dir, server)
}

/// The Kafka address of `server`, as clients take it (`host:port`).
pub fn bootstrap(server: &Server) -> String {
    server.kafka.expect("a Kafka listener").to_string()
}

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A client program of `tests/kafka/`.
pub fn program(name: &str) -> PathBuf {
    root().join("tests/kafka").join(name)
}

fn missing(what: &str) -> ! {
    panic!("{what} is not installed: run scripts/install-kafka-clients")
}

/// `kcat` with `args`, fed `input`; its output, whatever its exit status.
pub fn kcat(args: &[&str], input: &[u8]) -> Output {
    run(Command::new("kcat").args(args), input, "kcat")
}

/// The Python of `.venv-kafka` (confluent-kafka, kafka-python) running `script` with `args`.
pub fn python(script: &str, args: &[&str]) -> Output {
    let python = root().join(".venv-kafka/bin/python");
    if !python.exists() {
        missing("the Python Kafka clients' venv (.venv-kafka)");
    }
    run(
        Command::new(python).arg(program(script)).args(args),
        b"",
        "python",
    )
}

/// Node with `.node-kafka`'s modules (kafkajs) running `script` with `args`.
pub fn node(script: &str, args: &[&str]) -> Output {
    let modules = root().join(".node-kafka/node_modules");
    if !modules.join("kafkajs").exists() {
        missing("kafkajs (.node-kafka)");
    }
    run(
        Command::new("node")
            .env("NODE_PATH", modules)
            .arg(program(script))
            .args(args),
        b"",
        "node",
    )
}

fn run(command: &mut Command, input: &[u8], what: &str) -> Output {
    use std::io::Write;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| match err.kind() {
            std::io::ErrorKind::NotFound => missing(what),
            _ => panic!("starting {what}: {err}"),
        });
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().expect("the client ran");
    let _ = feeder.join();
    output
}

/// `output`'s standard output, checked to be a success.
pub fn success(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
