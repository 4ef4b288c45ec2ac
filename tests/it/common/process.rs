//! The `durability` binary as a child process, for the tests that run the real server (crash
//! safety, replication): the process on an ephemeral port, configured by environment variables
//! (those that put its cold tier and its replication in a bucket included) and killed with
//! SIGKILL at will; a minimal HTTP/1.1 client that reports every failure instead of panicking,
//! since a request cut short by a kill or an outage has an unknown outcome; and the seed of a
//! randomized run.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::Duration;

use durability::cold::S3Settings;
use serde_json::Value;

/// How long a started server has to announce its address.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`request`] waits for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`exchange`] waits on each read and write: past the longest long-poll
/// (`MAX_WAIT_MS`, 30 s) and a loaded machine's answer.
const IO_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The server process
// ---------------------------------------------------------------------------------------------

/// The `durability` binary listening on an ephemeral port of 127.0.0.1 over a data folder;
/// killed (SIGKILL) when dropped.
pub struct Server {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where its Kafka listener listens, when `DURABILITY__KAFKA__BIND` started one.
    pub kafka: Option<SocketAddr>,
}

impl Server {
    /// Starts the binary over `data_dir` (`storage.data_dir`) with the environment variables
    /// `env` (`DURABILITY__…`, `RUST_LOG`; a later one overrides an earlier one of the same
    /// name) and waits until it announces `listening on http://ADDR` on its standard output.
    /// Its standard error is the test's.
    pub fn start<K, V>(data_dir: &Path, env: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        Self::start_in(None, data_dir, env)
    }

    /// [`Server::start`], in network namespace `namespace` when one is given (through
    /// `ip netns exec`, which runs the binary in its own process).
    pub fn start_in<K, V>(
        namespace: Option<&str>,
        data_dir: &Path,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Self
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let env: Vec<(OsString, OsString)> = env
            .into_iter()
            .map(|(name, value)| (name.as_ref().to_owned(), value.as_ref().to_owned()))
            .collect();
        let binary = env!("CARGO_BIN_EXE_durability");
        let mut command = match namespace {
            Some(namespace) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", namespace, binary]);
                command
            }
            None => Command::new(binary),
        };
        let mut child = command
            .env("DURABILITY__SERVER__BIND", "127.0.0.1:0")
            .env("DURABILITY__STORAGE__DATA_DIR", data_dir)
            .envs(env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the server binary");
        let stdout = child.stdout.take().expect("piped stdout");
        let kafka = env
            .iter()
            .any(|(name, value)| name == "DURABILITY__KAFKA__BIND" && !value.is_empty());
        let (announce, announced) = mpsc::channel();
        // Reads the addresses (the Kafka listener's after the HTTP one), then keeps draining
        // stdout until the process dies.
        thread::spawn(move || {
            let mut http = None;
            let mut announce = Some(announce);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let addr = line
                    .split_once("listening on http://")
                    .or_else(|| line.split_once("listening on https://"))
                    .map(|(_, addr)| addr.trim().to_owned());
                let kafka_addr = line
                    .strip_prefix("kafka listening on ")
                    .and_then(|rest| rest.split_whitespace().next())
                    .map(str::to_owned);
                if line.starts_with("kafka listening on ") {
                    if let Some(announce) = announce.take() {
                        let _ = announce.send((http.take().unwrap_or_default(), kafka_addr));
                    }
                } else if let Some(addr) = addr
                    && http.is_none()
                {
                    if kafka {
                        http = Some(addr);
                    } else if let Some(announce) = announce.take() {
                        let _ = announce.send((addr, None));
                    }
                }
            }
        });
        let (addr, kafka) = match announced.recv_timeout(START_TIMEOUT) {
            Ok(addr) => addr,
            Err(err) => {
                let _ = child.kill();
                let status = child.wait();
                panic!(
                    "the server over {} did not announce its address within {START_TIMEOUT:?} \
                     ({err}; {status:?}); its environment: {env:?}",
                    data_dir.display()
                );
            }
        };
        let addr = addr
            .parse()
            .expect("the announced address is a socket address");
        if !env
            .iter()
            .any(|(name, _)| name == "DURABILITY__SERVER__TLS")
        {
            speak_plain_to(addr);
        }
        let kafka = kafka.map(|kafka| kafka.parse().expect("a socket address"));
        Self { child, addr, kafka }
    }

    /// Sends signal `name` (`STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, name: &str) {
        let sent = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{name} {}", self.child.id());
    }

    /// The process's exit status, once it exited by itself within `within` (looked at once at
    /// least, so `Duration::ZERO` asks whether it has exited already).
    pub fn wait_for_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let started = std::time::Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if started.elapsed() >= within {
                return None;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, and reap the process.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the server");
        self.child.wait().expect("reap the server");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The environment variables of node `node` keeping its cold tier in `s3`'s bucket and
/// replicating every write to it, the bucket reached at `endpoint` (`s3.endpoint`, or a proxy in
/// front of it).
pub fn replication_env<'a>(
    s3: &'a S3Settings,
    endpoint: &'a str,
    node: &'a str,
) -> [(&'static str, &'a str); 9] {
    [
        ("DURABILITY__COLD__KIND", "s3"),
        ("DURABILITY__COLD__S3_ENDPOINT", endpoint),
        ("DURABILITY__COLD__S3_BUCKET", &s3.bucket),
        ("DURABILITY__COLD__S3_REGION", &s3.region),
        ("DURABILITY__COLD__S3_ACCESS_KEY", &s3.access_key),
        ("DURABILITY__COLD__S3_SECRET_KEY", &s3.secret_key),
        ("DURABILITY__COLD__S3_PATH_STYLE", "true"),
        ("DURABILITY__REPLICATION__KIND", "s3"),
        ("DURABILITY__REPLICATION__NODE_ID", node),
    ]
}

// ---------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client: one request per connection, every failure reported, never a panic
// ---------------------------------------------------------------------------------------------

/// Sends one request on a fresh connection (`Connection: close`; a JSON `body`, if any): the
/// status and the JSON body of the answer (`Null` when empty). `Err` when the exchange failed
/// (refused, reset, timed out, cut short, not JSON), in which case the outcome of the request
/// is unknown.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    request_with_head(addr, method, path, body).map(|(status, _, body)| (status, body))
}

/// [`request`], answering the head of the answer too (lowercased, for [`header`]).
pub fn request_with_head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, String, Value), String> {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if method != "GET" {
        text.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    text.push_str("\r\n");
    text.push_str(&body);
    let (status, head, body) = exchange(addr, &text)?;
    let value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(&body).map_err(|err| format!("body is not JSON: {err}"))?
    };
    Ok((status, head, value))
}

/// The servers [`exchange`] speaks TLS to, each with the client settings it needs (see
/// [`speak_tls_to`]).
static TLS_TO: Mutex<BTreeMap<SocketAddr, Arc<rustls::ClientConfig>>> = Mutex::new(BTreeMap::new());

/// Makes every request of the tests to `addr` go over TLS with `config` (a server started
/// with `[server.tls]`).
pub fn speak_tls_to(addr: SocketAddr, config: Arc<rustls::ClientConfig>) {
    TLS_TO
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(addr, config);
}

/// Makes requests to `addr` plain again: a plain server now listens where an earlier server
/// of the run spoke TLS (ports are reused).
pub fn speak_plain_to(addr: SocketAddr) {
    TLS_TO
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&addr);
}

/// A TLS client's settings trusting only the CA in PEM file `ca`, showing the client
/// certificate `identity` (chain, key) when given.
pub fn tls_client(ca: &Path, identity: Option<(&Path, &Path)>) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("the CA's file") {
        roots.add(cert.expect("a CA certificate")).expect("a CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS 1.2 and 1.3")
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .expect("the client certificate's file")
                .collect::<Result<Vec<_>, _>>()
                .expect("a client certificate");
            let key = PrivateKeyDer::from_pem_file(key).expect("the client key");
            builder
                .with_client_auth_cert(chain, key)
                .expect("a client certificate with its key")
        }
    };
    Arc::new(config)
}

/// Sends `request`, a whole HTTP/1.1 request, on a fresh connection (over TLS to the servers
/// [`speak_tls_to`] named) and reads the whole answer: its status, lowercased head and body.
/// The one raw client of the tests.
pub fn exchange(addr: SocketAddr, request: &str) -> Result<(u16, String, Vec<u8>), String> {
    let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
        .map_err(|err| format!("connect: {err}"))?;
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(|err| format!("socket options: {err}"))?;
    let tls = TLS_TO
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&addr)
        .cloned();
    let mut response = Vec::new();
    match tls {
        None => send_and_receive(stream, request, &mut response),
        Some(config) => {
            let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
            let connection =
                rustls::ClientConnection::new(config, name).map_err(|err| format!("TLS: {err}"))?;
            let stream = rustls::StreamOwned::new(connection, stream);
            match send_and_receive(stream, request, &mut response) {
                // A server may close without TLS's closing message once its answer is out.
                Err(why) if why.contains("close_notify") && !response.is_empty() => Ok(()),
                sent => sent,
            }
        }
    }?;
    parse_response(&response)
}

/// Writes `request` on `stream` and reads until it ends into `response`.
fn send_and_receive(
    mut stream: impl Read + Write,
    request: &str,
    response: &mut Vec<u8>,
) -> Result<(), String> {
    stream
        .write_all(request.as_bytes())
        .map_err(|err| format!("send: {err}"))?;
    stream
        .read_to_end(response)
        .map(drop)
        .map_err(|err| format!("receive: {err}"))
}

/// The status, lowercased head and body of a whole HTTP/1.1 answer (chunked or with a
/// `Content-Length`).
fn parse_response(response: &[u8]) -> Result<(u16, String, Vec<u8>), String> {
    let split = find(response, b"\r\n\r\n").ok_or("no complete HTTP head")?;
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let mut body = response[split + 4..].to_vec();
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or("no status line")?;
    if header(&head, "transfer-encoding").is_some_and(|value| value.contains("chunked")) {
        body = dechunk(&body).ok_or("chunked body cut short")?;
    } else if let Some(length) = header(&head, "content-length") {
        let length: usize = length.parse().map_err(|_| "bad content-length")?;
        if body.len() < length {
            return Err(format!("body cut short: {} of {length} bytes", body.len()));
        }
        body.truncate(length);
    }
    Ok((status, head, body))
}

/// The value of header `name` (lowercase) in a lowercased HTTP head.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == name).then(|| value.trim())
    })
}

/// Where `needle` first occurs in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Decodes a chunked body; `None` when it is incomplete.
fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let end = find(data, b"\r\n")?;
        let line = std::str::from_utf8(&data[..end]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(body);
        }
        let start = end + 2;
        body.extend_from_slice(data.get(start..start + size)?);
        data = data.get(start + size + 2..)?;
    }
}

// ---------------------------------------------------------------------------------------------
// The seed of a randomized run
// ---------------------------------------------------------------------------------------------

/// The seed of a run: the integer in the environment variable `variable` (to replay a run),
/// or else the clock.
pub fn seed(variable: &str) -> u64 {
    match std::env::var(variable) {
        Ok(seed) => seed
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{variable} is an integer")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|time| time.as_nanos() as u64)
            .unwrap_or(1),
    }
}
