//! What the security features cost, each figure next to a baseline measured in the same run:
//! the server's CPU per single-record POST over TLS against plaintext (keep-alive), new
//! connections per second when every request opens one (a TLS handshake each) against
//! plaintext ones, and the server's CPU per POST with 10,000 scoped tokens configured against
//! none, with the in-process cost of one credential check. The certificate is made with
//! `openssl` (EC P-256, self-signed for 127.0.0.1); `wrk` speaks https without verifying it.
//! wrk resumes its TLS session when it reconnects, which a relay counts; full handshakes, a new
//! session each, are measured apart with `openssl s_time -new`.
//!
//! Each pair of servers runs side by side and the runs alternate between them, so that a slow
//! stretch of this shared machine weighs on a figure and its baseline alike.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use durability::auth::{Credentials, Grant, Permission, Principal, token_hash};

use crate::external::{self, Running};

/// Scoped tokens configured for the credential figures, the client's among them.
pub const TOKENS: usize = 10_000;
/// wrk connections of every measurement.
pub const CONNECTIONS: usize = 64;
/// What each token may do: what the client's requests need, on the bench topic alone.
const GRANT: &str = "bench:produce,consume";
const RECORDS: &str = "/topics/bench/partitions/0/records";

/// One kind of request against one server: the run of median figure out of three.
#[derive(Debug, Clone, Copy, Default)]
pub struct Load {
    pub requests_per_second: f64,
    /// The server's CPU (user and system) per request answered, in µs.
    pub cpu_us: f64,
    /// How far apart the three runs' `cpu_us` were, in µs: what a difference can be told from.
    pub cpu_spread_us: f64,
    /// The load generator's CPU (wrk's, or the `openssl s_time` processes') per request, in
    /// µs: it shares the cores with the server.
    pub client_cpu_us: f64,
    /// TCP connections accepted per request answered: about 1 when every request came on a
    /// connection of its own, near 0 with keep-alive.
    pub connections_per_request: f64,
}

impl Load {
    /// New connections accepted per second.
    pub fn connections_per_second(&self) -> f64 {
        self.requests_per_second * self.connections_per_request
    }

    /// The server's CPU per connection accepted, in µs.
    pub fn cpu_per_connection_us(&self) -> f64 {
        self.cpu_us / self.connections_per_request.max(f64::MIN_POSITIVE)
    }
}

/// The section; each pair is (baseline, figure).
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// What wrk's OpenSSL and the server agreed on, as `openssl s_client` reports it.
    pub negotiated: String,
    /// Single-record POSTs on keep-alive connections: plaintext, then TLS.
    pub appends: (Load, Load),
    /// `GET /healthz` with `Connection: close`: plaintext, then TLS.
    pub handshakes: (Load, Load),
    /// Share of wrk's TLS handshakes that resumed an earlier session (no certificate, no
    /// signature), as a relay between wrk and the server counted them.
    pub resumed_share: f64,
    /// Full TLS handshakes, a new session every time (`openssl s_time -new`, which never
    /// resumes), each with its `GET /healthz`: the run of median rate out of three.
    pub full_handshakes: Load,
    /// `openssl s_time` processes of `full_handshakes`.
    pub full_handshake_clients: usize,
    /// Single-record POSTs with a bearer token: no token configured, then [`TOKENS`].
    pub tokens: (Load, Load),
    /// ns per credential check in this process (hash the token, look it up, ask its grants):
    /// among 1 credential, then among [`TOKENS`].
    pub check_ns: (f64, f64),
}

/// The whole section: needs wrk and openssl.
pub fn run(binary: &Path, dir: &Path, payload: &str, budget: Duration) -> Security {
    eprintln!("security");
    std::fs::create_dir_all(dir).unwrap();
    let (cert, key) = certificate(dir);
    let (single, _) = external::append_scripts(dir, payload);
    let mut section = Security::default();

    let plain = Server::start(binary, &dir.join("plain"), &[]);
    let tls = Server::tls(binary, &dir.join("tls"), &cert, &key);
    section.negotiated = negotiated(&tls);
    let cpu_us = |load: &Load| load.cpu_us;
    let (servers, what) = ([&plain, &tls], "single-record POST, keep-alive");
    section.appends = in_turn(what, servers, RECORDS, &single, budget, cpu_us);
    let healthz = dir.join("healthz-close.lua");
    std::fs::write(&healthz, "wrk.headers[\"Connection\"] = \"close\"\n").unwrap();
    let what = "GET /healthz, Connection: close";
    let per_second = Load::connections_per_second;
    section.handshakes = in_turn(what, servers, "/healthz", &healthz, budget, per_second);
    drop(plain);
    section.resumed_share = resumed_share(&tls, &healthz);
    section.full_handshake_clients =
        2 * std::thread::available_parallelism().map_or(1, usize::from);
    section.full_handshakes = full_handshakes(&tls, section.full_handshake_clients, budget);
    drop(tls);

    let tokens = dir.join("tokens.toml");
    let client = tokens_file(&tokens, TOKENS);
    // The same requests to both servers, token included: the one without tokens ignores it.
    let script =
        external::post_script(dir, "single-token", &format!("[{{\"payload\":{payload}}}]"));
    let mut text = std::fs::read_to_string(&script).unwrap();
    text.push_str(&format!(
        "wrk.headers[\"Authorization\"] = \"Bearer {client}\"\n"
    ));
    std::fs::write(&script, text).unwrap();
    let open = Server::start(binary, &dir.join("open"), &[]);
    let scoped = Server::start(
        binary,
        &dir.join("scoped"),
        &[("DURABILITY__AUTH__TOKENS_FILE", tokens.as_os_str())],
    );
    let what = "single-record POST with a bearer token";
    section.tokens = in_turn(what, [&open, &scoped], RECORDS, &script, budget, cpu_us);
    drop((open, scoped));

    section.check_ns = (check_ns(1), check_ns(TOKENS));
    eprintln!(
        "  credential check in process: {:.0} ns among 1, {:.0} ns among {TOKENS}",
        section.check_ns.0, section.check_ns.1
    );
    section
}

/// A server of the suite (see [`external::server`]), and where it listens.
struct Server {
    running: Running,
    address: std::net::SocketAddr,
    https: bool,
}

impl Server {
    /// A plaintext server, with `env` set after the suite's own.
    fn start(binary: &Path, dir: &Path, env: &[(&str, &OsStr)]) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let (running, address) = external::server_with(binary, dir, env);
        Self {
            running,
            address,
            https: false,
        }
    }

    /// A server speaking TLS with `cert` and `key` on its listener.
    fn tls(binary: &Path, dir: &Path, cert: &Path, key: &Path) -> Self {
        // An inline TOML table: the environment takes one as a section.
        let table = format!(
            "{{cert_file = {:?}, key_file = {:?}}}",
            cert.display().to_string(),
            key.display().to_string()
        );
        // wrk names the server by its IP address in its hello, which rustls warns about on
        // every handshake: a line of log per connection would be counted as TLS's cost.
        let env = [
            ("DURABILITY__SERVER__TLS", OsStr::new(&table)),
            ("RUST_LOG", OsStr::new("warn,rustls=error")),
        ];
        Self {
            https: true,
            ..Self::start(binary, dir, &env)
        }
    }

    fn pid(&self) -> u32 {
        self.running.0.id()
    }

    fn url(&self, path: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.address)
    }
}

/// A self-signed EC P-256 certificate for 127.0.0.1 and its key, in `dir`.
fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl (scripts/bench installs it)");
    assert!(made.status.success(), "openssl req: {made:?}");
    (cert, key)
}

/// Protocol, cipher suite and key exchange a default OpenSSL client (wrk's library) agrees on
/// with `server`.
fn negotiated(server: &Server) -> String {
    let output = Command::new("openssl")
        .args([
            "s_client",
            "-brief",
            "-connect",
            &server.address.to_string(),
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&output.stderr);
    let field = |label: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(label))
            .map(|value| value.trim().to_owned())
    };
    [
        field("Protocol version:"),
        field("Ciphersuite:"),
        // `X25519, 253 bits`: the group alone.
        field("Server Temp Key:")
            .map(|key| format!("key exchange {}", key.split(',').next().unwrap_or_default())),
        field("Signature type:").map(|kind| format!("{kind} signature")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ")
}

/// TCP connections this network namespace has accepted so far (`PassiveOpens` of
/// `/proc/net/snmp`): what tells a request on a connection of its own from one on a kept one.
fn accepted_connections() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap();
    let mut tcp = snmp.lines().filter(|line| line.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap(), tcp.next().unwrap());
    let at = names
        .split_whitespace()
        .position(|name| name == "PassiveOpens")
        .expect("PassiveOpens in /proc/net/snmp");
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

/// CPU time (user and system, in seconds) of the child processes this one has waited for:
/// the load generators'.
fn children_cpu() -> f64 {
    // SAFETY: an all-zero `rusage` is a valid value, which getrusage overwrites.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable `rusage`.
    let status = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(status, 0, "getrusage");
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// One wrk run of `script` against `url`, measured on `server`.
fn once(server: &Server, url: &str, script: &Path, budget: Duration) -> Load {
    let (cpu, accepted) = (external::cpu(server.pid()), accepted_connections());
    let client = children_cpu();
    let wrk = external::wrk(url, CONNECTIONS, script, budget);
    let spent = external::cpu(server.pid()).since(cpu).total();
    let requests = wrk.requests.max(1) as f64;
    Load {
        requests_per_second: wrk.requests_per_second,
        cpu_us: spent * 1e6 / requests,
        cpu_spread_us: 0.0,
        client_cpu_us: (children_cpu() - client) * 1e6 / requests,
        connections_per_request: (accepted_connections() - accepted) as f64 / requests,
    }
}

/// Three wrk runs of `script` on `path` of each of the two servers, alternating (AB, BA, AB);
/// of each, the run of median `key`.
fn in_turn(
    what: &str,
    servers: [&Server; 2],
    path: &str,
    script: &Path,
    budget: Duration,
    key: fn(&Load) -> f64,
) -> (Load, Load) {
    let mut runs: [Vec<Load>; 2] = Default::default();
    for round in 0..3 {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let server = servers[side];
            runs[side].push(once(server, &server.url(path), script, budget));
        }
    }
    let [baseline, measured] = runs.map(|mut runs| {
        let cpu = runs.iter().map(|load| load.cpu_us);
        let spread = cpu.clone().fold(f64::MIN, f64::max) - cpu.fold(f64::MAX, f64::min);
        runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
        Load {
            cpu_spread_us: spread,
            ..runs[1]
        }
    });
    for (name, load) in [("baseline", baseline), ("measured", measured)] {
        eprintln!(
            "  {what}, {name}: {:.0} requests/s, {:.1} µs CPU each, {:.3} connections each",
            load.requests_per_second, load.cpu_us, load.connections_per_request
        );
    }
    (baseline, measured)
}

/// Full TLS handshakes against `server`: of three runs, the one of median rate.
fn full_handshakes(server: &Server, clients: usize, budget: Duration) -> Load {
    let mut runs: Vec<Load> = (0..3).map(|_| s_time(server, clients, budget)).collect();
    runs.sort_by(|a, b| {
        a.connections_per_second()
            .total_cmp(&b.connections_per_second())
    });
    let load = runs[1];
    eprintln!(
        "  full TLS handshakes (openssl s_time -new): {:.0} connections/s, {:.0} µs CPU each",
        load.connections_per_second(),
        load.cpu_per_connection_us()
    );
    load
}

/// `clients` processes of `openssl s_time -new` against `server` (a new session on every
/// connection, `GET /healthz` on each, one at a time) for about `budget`. They block on every
/// answer: two per core keep the cores busy.
fn s_time(server: &Server, clients: usize, budget: Duration) -> Load {
    let seconds = budget.as_secs_f64().ceil().max(1.0).to_string();
    let address = server.address.to_string();
    let (cpu, accepted) = (external::cpu(server.pid()), accepted_connections());
    let client = children_cpu();
    let start = Instant::now();
    let clients: Vec<_> = (0..clients)
        .map(|_| {
            Command::new("openssl")
                .args(["s_time", "-new", "-connect", &address, "-www", "/healthz"])
                .args(["-time", &seconds])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("openssl s_time")
        })
        .collect();
    // `1234 connections in 0.82s; ...`: the first count is of the connections made.
    let requests: u64 = clients
        .into_iter()
        .map(|client| {
            let output = client.wait_with_output().expect("openssl s_time");
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.lines()
                .find(|line| line.contains(" connections in "))
                .and_then(|line| line.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("unexpected openssl s_time output:\n{text}"))
        })
        .sum();
    // s_time counts its time in whole seconds: the rate is over the clock of this process.
    let elapsed = start.elapsed().as_secs_f64();
    let spent = external::cpu(server.pid()).since(cpu).total();
    Load {
        requests_per_second: requests as f64 / elapsed,
        cpu_us: spent * 1e6 / requests.max(1) as f64,
        cpu_spread_us: 0.0,
        client_cpu_us: (children_cpu() - client) * 1e6 / requests.max(1) as f64,
        connections_per_request: (accepted_connections() - accepted) as f64
            / requests.max(1) as f64,
    }
}

/// Share of wrk's TLS handshakes that resume a session, when every request has a connection
/// of its own (`script`): wrk keeps its TLS session when it reconnects, and offers it. Counted
/// by a relay between wrk and `server` that reads each server hello: a resumed TLS 1.3
/// handshake's carries the `pre_shared_key` extension.
fn resumed_share(server: &Server, script: &Path) -> f64 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let relay = listener.local_addr().unwrap();
    let counts = Arc::new(Mutex::new((0u64, 0u64)));
    let done = Arc::new(AtomicBool::new(false));
    let upstream = server.address;
    let accepting = {
        let (counts, done) = (counts.clone(), done.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                let (Ok(client), Ok(server)) = (client, TcpStream::connect(upstream)) else {
                    continue;
                };
                let counts = counts.clone();
                std::thread::spawn(move || relay_counting(client, server, &counts));
            }
        })
    };
    let url = format!("https://{relay}/healthz");
    external::wrk_output(&url, 8, script, Duration::from_secs(1));
    done.store(true, Ordering::Relaxed);
    // Wakes the accepting thread, which then sees `done`.
    let _ = TcpStream::connect(relay);
    accepting.join().unwrap();
    let (full, resumed) = *counts.lock().unwrap();
    let share = resumed as f64 / (full + resumed).max(1) as f64;
    eprintln!("  wrk's TLS handshakes: {full} full, {resumed} resumed");
    share
}

/// Relays one connection both ways, counting its handshake in `counts` (full, resumed) from
/// the server's first record, its hello.
fn relay_counting(client: TcpStream, server: TcpStream, counts: &Mutex<(u64, u64)>) {
    let (mut client_read, mut server_write) =
        (client.try_clone().unwrap(), server.try_clone().unwrap());
    let upstream = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_read, &mut server_write);
        let _ = server_write.shutdown(std::net::Shutdown::Write);
    });
    let (mut server_read, mut client_write) = (server, client);
    let mut header = [0u8; 5];
    if server_read.read_exact(&mut header).is_ok() {
        let mut record = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
        if server_read.read_exact(&mut record).is_ok() {
            if let Some(resumed) = offers_resumption(&record) {
                let mut counts = counts.lock().unwrap();
                if resumed {
                    counts.1 += 1
                } else {
                    counts.0 += 1
                }
            }
            let _ = client_write
                .write_all(&header)
                .and_then(|()| client_write.write_all(&record));
            let _ = std::io::copy(&mut server_read, &mut client_write);
        }
    }
    let _ = client_write.shutdown(std::net::Shutdown::Write);
    let _ = upstream.join();
}

/// Whether the handshake record `record` is a server hello accepting a pre-shared key (a
/// resumed session); `None` when it is no server hello.
fn offers_resumption(record: &[u8]) -> Option<bool> {
    // Handshake type 2 and a 3-byte length; then the version (2), the random (32), the
    // session id (1 + its length), the cipher suite (2), the compression (1), the extensions
    // (2 + their length), each a type (2), a length (2) and its data.
    let hello = record.strip_prefix(&[2])?.get(3..)?;
    let session_id = usize::from(*hello.get(34)?);
    let mut at = 35 + session_id + 3;
    let end = at + 2 + usize::from(u16::from_be_bytes([*hello.get(at)?, *hello.get(at + 1)?]));
    at += 2;
    while at + 4 <= end.min(hello.len()) {
        let kind = u16::from_be_bytes([hello[at], hello[at + 1]]);
        if kind == PRE_SHARED_KEY {
            return Some(true);
        }
        at += 4 + usize::from(u16::from_be_bytes([hello[at + 2], hello[at + 3]]));
    }
    Some(false)
}

/// The `pre_shared_key` extension of TLS 1.3 (RFC 8446, 4.2).
const PRE_SHARED_KEY: u16 = 41;

/// The `n`th bench token: 64 hex digits, as long as those `durability token new` makes.
fn token(n: usize) -> String {
    hex::encode(token_hash(&format!("bench token {n}")))
}

/// Writes a tokens file of `count` tokens, each granted [`GRANT`], and answers the client's:
/// the one in the middle.
fn tokens_file(path: &Path, count: usize) -> String {
    let mut text = String::new();
    for n in 0..count {
        text.push_str(&format!(
            "[[auth.tokens]]\nname = \"bench-{n}\"\nsha256 = \"{}\"\ngrants = [\"{GRANT}\"]\n\n",
            hex::encode(token_hash(&token(n)))
        ));
    }
    std::fs::write(path, text).unwrap();
    token(count / 2)
}

/// ns per check of a token among `count` credentials, as the server's middleware makes it:
/// hash and look up the token, then ask its grants for `produce` on the bench topic. The
/// median of three rounds of a million checks.
fn check_ns(count: usize) -> f64 {
    let mut credentials = Credentials::none();
    for n in 0..count {
        let grants = vec![GRANT.parse::<Grant>().unwrap()];
        assert!(credentials.add(
            token_hash(&token(n)),
            Principal::new(format!("bench-{n}"), grants)
        ));
    }
    let client = token(count / 2);
    let checks = 1_000_000;
    let round = || {
        let start = Instant::now();
        for _ in 0..checks {
            let principal = credentials
                .authenticate(std::hint::black_box(&client))
                .expect("the client's token is known");
            assert!(principal.may(Permission::Produce, Some(std::hint::black_box("bench"))));
        }
        start.elapsed().as_nanos() as f64 / checks as f64
    };
    crate::report::median(vec![round(), round(), round()])
}
