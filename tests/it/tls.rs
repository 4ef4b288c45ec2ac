//! TLS on the REST listener, with real clients: the server binary with `[server.tls]`,
//! certificates made by `openssl`, and `curl` (and Python's `ssl` for a connection kept open
//! across a reload). See `scripts/install-tls-tools`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::pki::Pki;

/// The server binary over TLS with the certificate `pki.serve` last chose; killed on drop.
struct TlsServer {
    child: Child,
    port: u16,
    _data: tempfile::TempDir,
}

impl TlsServer {
    fn start(pki: &Pki, client_ca: Option<&Path>) -> Self {
        let data = tempfile::tempdir().unwrap();
        let mut config = format!(
            "[server]\nbind = \"127.0.0.1:0\"\n[server.tls]\ncert_file = {:?}\nkey_file = {:?}\n",
            pki.path("server-now.pem"),
            pki.path("server-now.key"),
        );
        if let Some(ca) = client_ca {
            config.push_str(&format!("client_ca_file = {ca:?}\n"));
        }
        let file = data.path().join("durability.toml");
        std::fs::write(&file, config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_durability"))
            .arg("--config")
            .arg(&file)
            .env("DURABILITY__STORAGE__DATA_DIR", data.path().join("data"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the server binary");
        let announced = BufReader::new(child.stdout.take().unwrap())
            .lines()
            .map_while(Result::ok)
            .find_map(|line| {
                line.split_once("listening on https://")
                    .map(|(_, a)| a.to_owned())
            })
            .expect("the server announces an https address");
        let port = announced.rsplit_once(':').unwrap().1.parse().unwrap();
        Self {
            child,
            port,
            _data: data,
        }
    }

    /// `curl`'s exit code and the status it got for `/healthz` at `host`, trusting `ca`, with
    /// a client certificate when `client` is given.
    fn curl(&self, host: &str, ca: &Path, client: Option<(&Path, &Path)>) -> (i32, String) {
        let mut curl = Command::new("curl");
        curl.args(["--silent", "--max-time", "10", "--output", "/dev/null"])
            .args(["--write-out", "%{http_code}", "--cacert"])
            .arg(ca)
            .arg(format!("https://{host}:{}/healthz", self.port));
        if let Some((cert, key)) = client {
            curl.arg("--cert").arg(cert).arg("--key").arg(key);
        }
        let out = curl.output().expect("curl (scripts/install-tls-tools)");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `done` every 100 ms for up to 15 s.
fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `curl --cacert` reaches the server over TLS; a wrong CA, a certificate for another name
/// and an expired one fail the handshake (`curl` exits 60: the peer's certificate is not
/// trusted), each served after a reload of the files; a plaintext request to the TLS port is
/// answered at once with a TLS alert, never left hanging.
#[test]
fn curl_trusts_the_server_only_with_its_ca_its_name_and_a_valid_certificate() {
    let pki = Pki::new();
    pki.serve("server");
    let server = TlsServer::start(&pki, None);
    let ca = pki.path("ca.pem");
    assert_eq!(server.curl("localhost", &ca, None), (0, "200".into()));
    assert_eq!(server.curl("127.0.0.1", &ca, None), (0, "200".into()));
    assert_eq!(
        server.curl("localhost", &pki.path("other-ca.pem"), None).0,
        60
    );

    for (served, refused) in [
        ("misnamed", "a certificate for another name"),
        ("expired", "an expired certificate"),
    ] {
        pki.serve(served);
        until(&format!("{refused} is refused once reloaded"), || {
            server.curl("localhost", &ca, None).0 == 60
        });
    }
    pki.serve("server");
    until("the valid certificate is taken again", || {
        server.curl("localhost", &ca, None) == (0, "200".into())
    });

    use std::io::{Read, Write};
    let mut plain = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert_eq!(
        answer.first(),
        Some(&0x15),
        "a TLS alert, then the end: {answer:?}"
    );
}

/// A reload (SIGHUP) swaps the certificate while a keep-alive connection made before it stays
/// up and keeps being served; new connections get the new certificate.
#[test]
fn a_reload_swaps_the_certificate_and_keeps_open_connections() {
    let pki = Pki::new();
    pki.serve("server");
    let server = TlsServer::start(&pki, None);
    // One connection, two requests, with a signal to swap the certificate between them.
    let script = r#"
import socket, ssl, sys
port, ca = int(sys.argv[1]), sys.argv[2]
context = ssl.create_default_context(cafile=ca)
connection = context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
def get():
    connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    answer = b""
    while b'{"status":"ok"}' not in answer:
        chunk = connection.recv(4096)
        if not chunk:
            raise SystemExit("closed: " + repr(answer))
        answer += chunk
    return answer.split(b" ")[1].decode()
print(get())
sys.stdin.readline()
print(get())
"#;
    let mut python = Command::new("python3")
        .args(["-c", script])
        .arg(server.port.to_string())
        .arg(pki.path("ca.pem"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut answers = BufReader::new(python.stdout.take().unwrap()).lines();
    assert_eq!(answers.next().unwrap().unwrap(), "200");

    // Swapped without the watcher seeing it first: the same modification times.
    let stamps = ["pem", "key"].map(|kind| {
        std::fs::metadata(pki.path(&format!("server-now.{kind}")))
            .unwrap()
            .modified()
            .unwrap()
    });
    pki.serve("other-server");
    for (kind, stamp) in ["pem", "key"].into_iter().zip(stamps) {
        let file = std::fs::File::options()
            .write(true)
            .open(pki.path(&format!("server-now.{kind}")));
        file.unwrap().set_modified(stamp).unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    let other_ca = pki.path("other-ca.pem");
    assert_eq!(
        server.curl("localhost", &other_ca, None).0,
        60,
        "not before the signal"
    );
    let sent = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status();
    assert!(sent.unwrap().success());
    until("new connections get the new certificate", || {
        server.curl("localhost", &other_ca, None) == (0, "200".into())
    });
    assert_eq!(server.curl("localhost", &pki.path("ca.pem"), None).0, 60);

    use std::io::Write;
    python.stdin.take().unwrap().write_all(b"\n").unwrap();
    assert_eq!(
        answers.next().unwrap().unwrap(),
        "200",
        "the connection made before is served"
    );
    assert!(python.wait().unwrap().success());
}

/// With `client_ca_file`, a client without a certificate, or with one another CA signed, is
/// refused in the handshake; one with a certificate the CA signed is served.
#[test]
fn a_client_ca_lets_in_only_the_clients_it_signed() {
    let pki = Pki::new();
    pki.serve("server");
    let server = TlsServer::start(&pki, Some(&pki.path("ca.pem")));
    let ca = pki.path("ca.pem");
    let (code, status) = server.curl("localhost", &ca, None);
    assert_ne!((code, status.as_str()), (0, "200"), "no client certificate");
    let foreign = (pki.path("other-server.pem"), pki.path("other-server.key"));
    let (code, status) = server.curl("localhost", &ca, Some((&foreign.0, &foreign.1)));
    assert_ne!(
        (code, status.as_str()),
        (0, "200"),
        "a client certificate of another CA"
    );
    let client = (pki.path("client.pem"), pki.path("client.key"));
    assert_eq!(
        server.curl("localhost", &ca, Some((&client.0, &client.1))),
        (0, "200".into())
    );
}

/// Python's `requests`, a client people use: with `verify=` the CA it appends, reads back
/// and is refused (wrong CA, missing client certificate) as curl is.
#[test]
fn python_requests_appends_and_reads_with_verify_and_a_client_certificate() {
    let pki = Pki::new();
    pki.serve("server");
    let server = TlsServer::start(&pki, Some(&pki.path("ca.pem")));
    let script = r#"
import sys, requests
base, ca, other_ca, cert, key = sys.argv[1:6]
client = (cert, key)
url = base + "/topics/orders/partitions/0/records"
sent = requests.post(url, json=[{"payload": {"total": 42}}], verify=ca, cert=client, timeout=10)
assert sent.status_code == 202, sent.text
read = requests.get(url, params={"from": 0}, verify=ca, cert=client, timeout=10).json()
assert [r["payload"] for r in read["records"]] == [{"total": 42}], read
for refused, kwargs in [("another CA", dict(verify=other_ca, cert=client)),
                        ("no client certificate", dict(verify=ca))]:
    try:
        requests.get(base + "/healthz", timeout=10, **kwargs)
    except requests.exceptions.SSLError:
        continue
    except requests.exceptions.ConnectionError:
        # A refused client certificate may end the connection rather than the handshake.
        continue
    sys.exit("served with " + refused)
print("ok")
"#;
    let ran = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(format!("https://localhost:{}", server.port))
        .args(["ca.pem", "other-ca.pem", "client.pem", "client.key"].map(|name| pki.path(name)))
        .output()
        .expect("python3 (scripts/install-tls-tools installs requests)");
    assert!(
        ran.status.success(),
        "{}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
}

/// The project's own client, the binary's `produce` and `consume`, speaks TLS with
/// `--ca-file`: it appends and reads back; trusting another CA, it reaches no server (exit 3).
#[test]
fn the_command_line_client_trusts_the_ca_it_is_given() {
    let pki = Pki::new();
    pki.serve("server");
    let server = TlsServer::start(&pki, None);
    let url = format!("https://localhost:{}", server.port);
    let client = |ca: &str, args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_durability"));
        command
            .args(args)
            .args(["--url", &url, "--ca-file"])
            .arg(pki.path(ca))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    };
    let mut produce = client("ca.pem", &["produce", "-t", "secure", "-p", "0"])
        .spawn()
        .unwrap();
    use std::io::Write;
    produce
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"n\":1}\n{\"n\":2}\n")
        .unwrap();
    let produced = produce.wait_with_output().unwrap();
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&produced.stdout), "0:0\n0:1\n");
    let consumed = client(
        "ca.pem",
        &["consume", "-t", "secure", "-p", "0", "-e", "-f", "%s\\n"],
    )
    .output()
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&consumed.stdout),
        "{\"n\":1}\n{\"n\":2}\n"
    );
    let distrusted = client("other-ca.pem", &["topics"]).output().unwrap();
    assert_eq!(
        distrusted.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&distrusted.stderr)
    );
}
