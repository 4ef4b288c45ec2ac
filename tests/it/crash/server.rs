//! The server under test: the `durability` binary on an ephemeral port, killed with SIGKILL at
//! will, and a minimal HTTP/1.1 client that reports every failure instead of panicking, since
//! a request cut short by a kill has an unknown outcome.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::Value;

use super::{LEASE_MS, MAX_RECORDS, PARTITIONS};

// ---------------------------------------------------------------------------------------------
// The server process
// ---------------------------------------------------------------------------------------------

/// The `durability` binary on an ephemeral port over `dir/data` and `dir/cold`; killed (SIGKILL)
/// when dropped.
pub(super) struct Server {
    child: Child,
    pub(super) addr: SocketAddr,
}

impl Server {
    pub(super) fn start(dir: &Path) -> Self {
        Self::start_with(dir, &[])
    }

    /// Started with these environment variables on top of (and overriding) the usual ones.
    pub(super) fn start_with(dir: &Path, overrides: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_durability"));
        command
            .env("DURABILITY__SERVER__BIND", "127.0.0.1:0")
            .env("DURABILITY__STORAGE__DATA_DIR", dir.join("data"))
            .env("DURABILITY__STORAGE__SYNC", "full")
            .env("DURABILITY__COLD__KIND", "fs")
            .env("DURABILITY__COLD__DIR", dir.join("cold"))
            .env(
                "DURABILITY__LOG__PARTITIONS_PER_TOPIC",
                PARTITIONS.to_string(),
            )
            .env(
                "DURABILITY__RETENTION__MAX_RECORDS",
                MAX_RECORDS.to_string(),
            )
            .env("DURABILITY__RETENTION__SWEEP_INTERVAL_MS", "50")
            .env("DURABILITY__LEASES__ENABLED", "true")
            .env("DURABILITY__LEASES__LEASE_MS", LEASE_MS.to_string())
            .env("RUST_LOG", "error");
        let mut child = command
            .envs(overrides.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the server binary");
        let stdout = child.stdout.take().expect("piped stdout");
        let (announce, announced) = mpsc::channel();
        // Reads the address, then keeps draining stdout until the process dies.
        thread::spawn(move || {
            let mut announce = Some(announce);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some((_, addr)) = line.split_once("listening on http://")
                    && let Some(announce) = announce.take()
                {
                    let _ = announce.send(addr.trim().to_owned());
                }
            }
        });
        let addr = match announced.recv_timeout(Duration::from_secs(20)) {
            Ok(addr) => addr,
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server did not announce its address within 20 s ({err})");
            }
        };
        let addr = addr
            .parse()
            .expect("the announced address is a socket address");
        Self { child, addr }
    }

    /// SIGKILL, and reap the process.
    pub(super) fn kill(&mut self) {
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

// ---------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client: one request per connection, every failure reported, never a panic
// ---------------------------------------------------------------------------------------------

/// Sends one request; `Err` when the exchange failed (refused, reset, timed out, cut short), in
/// which case the outcome of the request is unknown.
pub(super) fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
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
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|err| format!("connect: {err}"))?;
    let timeout = Some(Duration::from_secs(15));
    stream
        .set_read_timeout(timeout)
        .and_then(|()| stream.set_write_timeout(timeout))
        .map_err(|err| format!("socket options: {err}"))?;
    stream
        .write_all(text.as_bytes())
        .map_err(|err| format!("send: {err}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|err| format!("receive: {err}"))?;
    parse_response(&response)
}

fn parse_response(response: &[u8]) -> Result<(u16, Value), String> {
    let split = response
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or("no complete HTTP head")?;
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let mut body = response[split + 4..].to_vec();
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or("no status line")?;
    let header = |name: &str| {
        head.lines()
            .find_map(|line| line.strip_prefix(name).map(|value| value.trim().to_owned()))
    };
    if header("transfer-encoding:").is_some_and(|value| value.contains("chunked")) {
        body = dechunk(&body).ok_or("chunked body cut short")?;
    } else if let Some(length) = header("content-length:") {
        let length: usize = length.parse().map_err(|_| "bad content-length")?;
        if body.len() < length {
            return Err(format!("body cut short: {} of {length} bytes", body.len()));
        }
        body.truncate(length);
    }
    let value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(&body).map_err(|err| format!("body is not JSON: {err}"))?
    };
    Ok((status, value))
}

/// Decodes a chunked body; `None` when it is incomplete.
fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let end = data.windows(2).position(|window| window == b"\r\n")?;
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
