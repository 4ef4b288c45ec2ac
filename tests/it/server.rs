//! The `durability` binary over a real socket: it starts, announces its address, answers
//! `/healthz`, refuses a bad configuration by key, and stops cleanly on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server process on an ephemeral port, with its data in a temporary folder.
struct ServerProcess {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl ServerProcess {
    fn start() -> Self {
        Self::start_logging(Some("warn"), Stdio::inherit())
    }

    /// Starts the server with `RUST_LOG` set to `filter` (unset when `None`), its log going
    /// to `stderr`.
    fn start_logging(filter: Option<&str>, stderr: Stdio) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_durability"));
        match filter {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        let mut child = command
            .env("DURABILITY__SERVER__BIND", "127.0.0.1:0")
            .env("DURABILITY__STORAGE__DATA_DIR", dir.path().join("data"))
            .env("DURABILITY__COLD__DIR", dir.path().join("cold"))
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start the server binary");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let address = lines
            .find_map(|line| {
                line.ok()?
                    .split_once("listening on http://")
                    .map(|(_, addr)| addr.trim().to_owned())
            })
            .expect("the server announces its address");
        Self {
            child,
            address,
            _dir: dir,
        }
    }

    /// Sends `request` and returns the status code and body of the answer.
    fn request(&self, request: &str) -> (u16, String) {
        let addr = self.address.parse().expect("a socket address");
        let (status, _, body) = crate::common::process::exchange(addr, request)
            .unwrap_or_else(|err| panic!("an exchange with the server: {err}"));
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    fn terminate(self) -> std::process::ExitStatus {
        self.signal("TERM")
    }

    /// Sends the signal `name` (`TERM`, `INT`) and waits (bounded) for the exit status.
    fn signal(mut self, name: &str) -> std::process::ExitStatus {
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "server did not stop after SIG{name}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /healthz` answers `200 {"status":"ok"}` over a real socket, and SIGTERM stops the
/// server with a success status.
#[test]
fn binary_serves_healthz_and_stops_on_sigterm() {
    let server = ServerProcess::start();
    let (status, body) =
        server.request("GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    assert_eq!(status, 200);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body, serde_json::json!({"status": "ok"}));
    let status = server.terminate();
    assert!(status.success(), "exit status {status:?}");
}

/// SIGINT (Ctrl-C) and SIGTERM both stop the server gracefully: a long-poll waiting 30 s is
/// answered at once with an empty page instead of being cut off, and the process exits with
/// success before that long-poll's wait would have ended.
#[test]
fn a_shutdown_signal_answers_waiting_long_polls_and_exits() {
    for signal in ["INT", "TERM"] {
        let server = ServerProcess::start();
        let address = server.address.clone();
        let poll = std::thread::spawn(move || {
            let mut stream = TcpStream::connect(&address).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(60)))
                .unwrap();
            stream
                .write_all(
                    b"GET /topics/quiet/partitions/0/records?from=0&waitMs=30000 HTTP/1.1\r\n\
                      Host: test\r\nConnection: close\r\n\r\n",
                )
                .unwrap();
            let mut response = String::new();
            let _ = stream.read_to_string(&mut response);
            response
        });
        // Long enough for the poll to be waiting; it is answered either way, so not a race
        // that can make this pass wrongly.
        std::thread::sleep(Duration::from_millis(500));
        let started = Instant::now();
        let status = server.signal(signal);
        assert!(status.success(), "SIG{signal}: exit status {status:?}");
        assert!(
            started.elapsed() < Duration::from_secs(25),
            "SIG{signal} waited for the long-poll"
        );
        let response = poll.join().unwrap();
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "SIG{signal}: {response:?}"
        );
        let body: serde_json::Value =
            serde_json::from_str(response.split_once("\r\n\r\n").unwrap().1).unwrap();
        assert_eq!(body["records"], serde_json::json!([]), "SIG{signal}");
    }
}

/// A bad value in the environment stops the binary before it listens, naming the key.
#[test]
fn binary_refuses_bad_configuration_by_key() {
    let output = Command::new(env!("CARGO_BIN_EXE_durability"))
        .env("DURABILITY__RETENTION__MAX_BYTES", "1073741825")
        .env("DURABILITY__SERVER__BIND", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("retention.max_bytes"), "{stderr}");
    assert!(!String::from_utf8_lossy(&output.stdout).contains("listening on"));
}

/// `--config FILE` is read, and an unknown key in it is refused by name.
#[test]
fn binary_reads_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[log]\nmax_batch_sise = 5\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_durability"))
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("log.max_batch_sise"));
}

/// `--check-config` validates the file, the environment and the defaults together and exits
/// without serving: 0 and "configuration is valid", or 2 and the offending key. `--version`
/// prints the version.
#[test]
fn binary_checks_its_configuration_without_serving() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("good.toml");
    std::fs::write(&file, "[log]\nmax_batch_size = 5\n").unwrap();
    let check = |env_value: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_durability"));
        command.args(["--check-config", "-c"]).arg(&file);
        command.current_dir(dir.path());
        if let Some(value) = env_value {
            command.env("DURABILITY__RETENTION__MAX_BYTES", value);
        }
        command.output().unwrap()
    };
    let valid = check(None);
    assert_eq!(valid.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&valid.stdout).contains("configuration is valid"));
    let invalid = check(Some("many"));
    assert_eq!(invalid.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&invalid.stderr).contains("retention.max_bytes"));
    assert!(
        !dir.path().join("data").exists(),
        "checking creates no data folder"
    );

    let version = Command::new(env!("CARGO_BIN_EXE_durability"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).contains(env!("CARGO_PKG_VERSION")));
}

/// Runs the binary with `args` and `vars` (over a bind to port 0 and folders in `dir`) until it
/// exits, at most 20 s (a server that starts is stopped): its exit code (`None` when it had to
/// be stopped) and what it wrote to stderr.
fn run_to_exit(
    dir: &std::path::Path,
    args: &[&str],
    vars: &[(&str, &std::path::Path)],
) -> (Option<i32>, String) {
    let stderr_path = dir.join(format!("stderr-{}", std::process::id()));
    let mut command = Command::new(env!("CARGO_BIN_EXE_durability"));
    command
        .args(args)
        .env("DURABILITY__SERVER__BIND", "127.0.0.1:0")
        .env("DURABILITY__STORAGE__DATA_DIR", dir.join("data"))
        .env("DURABILITY__COLD__DIR", dir.join("cold"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    for (var, value) in vars {
        command.env(var, value);
    }
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    std::fs::remove_file(&stderr_path).unwrap();
    (code, stderr)
}

/// A data folder or a cold folder that cannot be created (a regular file stands in its path,
/// or is its path) is a configuration error naming the key, the folder and why: both
/// `--check-config` and a server start exit 2 with it, and nothing is created.
#[test]
fn folders_that_cannot_be_created_are_configuration_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let under_file = file.join("data");
    let cases = [
        (
            "DURABILITY__STORAGE__DATA_DIR",
            &under_file,
            "storage.data_dir",
        ),
        ("DURABILITY__STORAGE__DATA_DIR", &file, "storage.data_dir"),
        ("DURABILITY__COLD__DIR", &under_file, "cold.dir"),
        ("DURABILITY__COLD__DIR", &file, "cold.dir"),
    ];
    for (var, folder, key) in cases {
        for args in [&["--check-config"][..], &[]] {
            let (code, stderr) = run_to_exit(dir.path(), args, &[(var, folder.as_path())]);
            let case = format!("{args:?} {var}={}: {stderr}", folder.display());
            assert_eq!(code, Some(2), "{case}");
            assert!(stderr.contains(key), "{case}");
            assert!(stderr.contains(&folder.display().to_string()), "{case}");
            assert!(
                stderr.contains(&format!("{} is not a folder", file.display())),
                "{case}"
            );
            assert!(!stderr.contains("unavailable"), "{case}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left, ["a-file"], "nothing is created");
}

/// Output nobody reads changes no exit code: a configuration error exits 2 when stderr is a
/// pipe whose reader is gone, or is closed, and `--check-config` exits 0 when stdout is such a
/// pipe (printing must not panic, which would exit 101).
#[test]
fn closed_output_changes_no_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[log]\nmax_batch_sise = 5\n").unwrap();
    let readerless_pipe = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        Stdio::from(writer)
    };
    let binary = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_durability"));
        command
            .env("DURABILITY__STORAGE__DATA_DIR", dir.path().join("data"))
            .env("DURABILITY__COLD__DIR", dir.path().join("cold"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    };
    let refused = binary()
        .arg("--config")
        .arg(&bad)
        .stderr(readerless_pipe())
        .status()
        .unwrap();
    assert_eq!(refused.code(), Some(2), "stderr without a reader");
    let closed = Command::new("sh")
        .arg("-c")
        .arg("exec \"$0\" --config \"$1\" 2>&-")
        .arg(env!("CARGO_BIN_EXE_durability"))
        .arg(&bad)
        .status()
        .unwrap();
    assert_eq!(closed.code(), Some(2), "stderr closed");
    let checked = binary()
        .arg("--check-config")
        .stdout(readerless_pipe())
        .status()
        .unwrap();
    assert_eq!(checked.code(), Some(0), "stdout without a reader");
}

/// The access log is off by default and on with `RUST_LOG=info`: one line per request with
/// the request line and the status.
#[test]
fn access_log_is_off_by_default_and_on_at_info() {
    let logs = tempfile::tempdir().unwrap();
    let lines_with = |filter: Option<&str>, name: &str| {
        let path = logs.path().join(name);
        let file = std::fs::File::create(&path).unwrap();
        let server = ServerProcess::start_logging(filter, Stdio::from(file));
        let request = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        assert_eq!(server.request(request).0, 200);
        assert!(server.terminate().success());
        std::fs::read_to_string(&path).unwrap()
    };
    let default = lines_with(None, "default.log");
    assert!(
        default.contains("stopped"),
        "the log itself is on: {default}"
    );
    assert!(!default.contains("GET /healthz"), "{default}");
    let info = lines_with(Some("info"), "info.log");
    assert!(
        info.lines().any(|line| line.contains("durability::access")
            && line.contains("\"GET /healthz HTTP/1.1\" 200")),
        "{info}"
    );
}

/// `durability token new` prints a fresh token on standard error and, on standard output, only
/// the `[[auth.tokens]]` lines with its hash: a server given those lines takes the token for
/// what its grant allows and refuses it elsewhere (`403`); two runs make two tokens; a bad
/// grant exits 2 printing no lines.
#[test]
fn a_token_made_by_the_command_line_is_taken_for_its_grants() {
    use crate::common::process::{Server, exchange};
    let make = |grant: &str| {
        Command::new(env!("CARGO_BIN_EXE_durability"))
            .args(["token", "new", "--name", "orders-service", "--grant", grant])
            .output()
            .expect("run the binary")
    };
    let made = make("orders.*:produce");
    assert!(made.status.success(), "{made:?}");
    let lines = String::from_utf8(made.stdout).unwrap();
    let stderr = String::from_utf8(made.stderr).unwrap();
    let token = stderr.lines().last().unwrap().trim().to_owned();
    assert_eq!(token.len(), 64, "{stderr}");
    assert!(!lines.contains(&token), "the lines hold no token: {lines}");
    let again = make("orders.*:produce");
    assert_ne!(String::from_utf8(again.stderr).unwrap(), stderr);
    let refused = make("orders:write");
    assert_eq!(refused.status.code(), Some(2));
    assert!(refused.stdout.is_empty());

    // The printed lines, as a server's configuration (given inline through the environment).
    let printed: toml::Table = lines.parse().expect("the lines are TOML");
    let tokens = printed["auth"]["tokens"].to_string();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), [("DURABILITY__AUTH__TOKENS", tokens)]);
    let append = |topic: &str, token: &str| {
        let body = r#"[{"payload": 1}]"#;
        let request = format!(
            "POST /topics/{topic}/partitions/0/records HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
             Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        exchange(server.addr, &request).expect("an answer").0
    };
    assert!([200, 202].contains(&append("orders.eu", &token)));
    assert_eq!(append("billing", &token), 403);
    assert_eq!(append("orders.eu", "not-the-token"), 401);
}

/// `auth.tokens_file` is read again whenever it changes and on SIGHUP: a token added to it is
/// taken without a restart and one removed is refused; a file that no longer parses keeps the
/// tokens in force.
#[test]
fn the_tokens_file_is_reloaded_when_it_changes_and_on_sighup() {
    use crate::common::process::{Server, exchange};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.toml");
    let write = |names: &[&str]| {
        let lines: String = names
            .iter()
            .map(|name| {
                let hash = hex::encode(durability::auth::token_hash(&format!("token-{name}")));
                format!("[[auth.tokens]]\nname = \"{name}\"\nsha256 = \"{hash}\"\ngrants = [\"orders:produce\"]\n")
            })
            .collect();
        std::fs::write(&file, lines).unwrap();
    };
    write(&["a"]);
    let server = Server::start(
        &dir.path().join("data"),
        [("DURABILITY__AUTH__TOKENS_FILE", file.as_os_str())],
    );
    let append = |name: &str| {
        let body = r#"[{"payload": 1}]"#;
        let request = format!(
            "POST /topics/orders/partitions/0/records HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
             Authorization: Bearer token-{name}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        exchange(server.addr, &request).expect("an answer").0
    };
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    assert_eq!((append("a"), append("b")), (202, 401));

    write(&["a", "b"]);
    until("b is taken once added to the file", &|| append("b") == 202);

    std::fs::write(&file, "[[auth.tokens]]\nname = \n").unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        (append("a"), append("b")),
        (202, 202),
        "the tokens in force stay"
    );

    // Changed without its modification time changing: only SIGHUP reads it.
    let stamp = std::fs::metadata(&file).unwrap().modified().unwrap();
    write(&["b"]);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(stamp)
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(append("a"), 202, "no reload before the signal");
    server.signal("HUP");
    until("a is refused once removed and the server hung up", &|| {
        append("a") == 401
    });
    assert_eq!(append("b"), 202);
}

/// 10,000 wrong tokens as fast as four clients can send them: every one is answered `401`
/// and counted, and a client with a valid token is served all along. Its p99 append latency
/// under the attack, against its own before it, is printed (measured, not asserted: the
/// machines are shared).
#[test]
fn wrong_tokens_at_full_speed_are_refused_and_others_served() {
    use crate::common::process::{Server, exchange};
    let hash = hex::encode(durability::auth::token_hash("token-valid"));
    let tokens =
        format!("[{{name = \"valid\", sha256 = \"{hash}\", grants = [\"*:produce,metrics\"]}}]");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        [
            ("DURABILITY__AUTH__TOKENS", tokens.as_str()),
            ("DURABILITY__STORAGE__SYNC", "normal"),
        ],
    );
    let addr = server.addr;
    let send = move |token: &str, path: &str| {
        let body = r#"[{"payload": 1}]"#;
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        exchange(addr, &request).expect("an answer").0
    };
    let valid_appends = |count: usize| -> Vec<Duration> {
        (0..count)
            .map(|_| {
                let asked = Instant::now();
                assert_eq!(
                    send("token-valid", "/topics/served/partitions/0/records"),
                    202
                );
                asked.elapsed()
            })
            .collect()
    };
    let p99 = |mut latencies: Vec<Duration>| {
        latencies.sort();
        latencies[latencies.len() * 99 / 100]
    };
    let baseline = p99(valid_appends(300));

    let attackers: Vec<_> = (0..4)
        .map(|attacker| {
            std::thread::spawn(move || {
                (0..2_500)
                    .filter(|n| {
                        send(
                            &format!("guess-{attacker}-{n}"),
                            "/topics/t/partitions/0/records",
                        ) != 401
                    })
                    .count()
            })
        })
        .collect();
    let mut under_attack = Vec::new();
    while attackers.iter().any(|attacker| !attacker.is_finished()) {
        under_attack.extend(valid_appends(10));
    }
    let not_refused: usize = attackers
        .into_iter()
        .map(|attacker| attacker.join().unwrap())
        .sum();
    assert_eq!(not_refused, 0, "every wrong token is refused");
    assert!(!under_attack.is_empty());
    let request = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer token-valid\r\n\r\n";
    let (status, _, metrics) = exchange(addr, request).unwrap();
    assert_eq!(status, 200);
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics
            .lines()
            .any(|line| line == r#"durability_auth_failures_total{reason="unknown"} 10000"#),
        "{metrics}"
    );
    let attacked = p99(under_attack.clone());
    println!(
        "p99 of a valid append: {baseline:?} before, {attacked:?} during 10,000 wrong tokens \
         ({} appends): {:.2}x",
        under_attack.len(),
        attacked.as_secs_f64() / baseline.as_secs_f64()
    );
}
