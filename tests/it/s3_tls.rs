//! The cold tier over TLS with a private CA (`cold.s3_ca_file`): the real `durability` binary,
//! as a child process, over moto's S3 server speaking TLS with a certificate of the tests' CA
//! (`common::pki`), which no public root vouches for.
//!
//! - with that CA, records flush to the bucket over TLS and read back from the cold tier;
//! - with another CA, the flush fails, the records stay hot and the bucket stays empty;
//! - `--check-config --check-bucket` reaches the bucket with that CA, and not with another CA
//!   or none.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::block_on;
use crate::common::pki::Pki;
use crate::common::process::{Server, request};

/// How long moto has to listen once started.
const MOTO_START_TIMEOUT: Duration = Duration::from_secs(60);

/// The bucket in each test's S3 server.
const BUCKET: &str = "cold";

/// With `cold.s3_ca_file` naming the CA of the S3 server's certificate, a trim flushes the
/// records beyond the hot window to the bucket over TLS, the segment is there, and a read from
/// offset 0 serves them back from the cold tier.
#[test]
fn a_private_ca_lets_records_flush_over_tls_and_read_back() {
    let s3 = TlsS3::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), server_env(&s3, Some(&s3.pki.path("ca.pem"))));
    append_three(&server);

    let (status, trimmed) = request(server.addr, "POST", &format!("{PARTITION}/trim"), None)
        .expect("the server answers the trim");
    assert_eq!(status, 200, "{trimmed}");
    assert_eq!(
        bounds(&server),
        json!({"oldestOffset": 0, "hotOffset": 2, "nextOffset": 3}),
        "two records left the hot window"
    );
    assert!(
        s3.list().contains("<Key>segments/events/0/"),
        "the segment is in the bucket: {}",
        s3.list()
    );
    let (status, page) = request(
        server.addr,
        "GET",
        &format!("{PARTITION}/records?from=0"),
        None,
    )
    .expect("the server answers the read");
    assert_eq!(status, 200, "{page}");
    assert_eq!(payloads(&page), [json!(1), json!(2), json!(3)]);
}

/// With `cold.s3_ca_file` naming another CA, the S3 server's certificate is refused: the trim
/// answers `503 unavailable`, every record stays in the hot window and the bucket stays empty.
#[test]
fn another_ca_keeps_records_out_of_the_bucket() {
    let s3 = TlsS3::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(
        dir.path(),
        server_env(&s3, Some(&s3.pki.path("other-ca.pem"))),
    );
    append_three(&server);

    let (status, refused) = request(server.addr, "POST", &format!("{PARTITION}/trim"), None)
        .expect("the server answers the trim");
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (503, Some("unavailable")),
        "{refused}"
    );
    assert_eq!(
        bounds(&server),
        json!({"oldestOffset": 0, "hotOffset": 0, "nextOffset": 3}),
        "nothing left the hot window"
    );
    assert!(!s3.list().contains("<Key>"), "{}", s3.list());
}

/// `--check-config --check-bucket` over TLS: exits 0 with the S3 server's CA, and 2 with
/// another CA or with none (the public roots and the system's store do not hold it).
#[test]
fn check_bucket_trusts_only_the_given_ca() {
    let s3 = TlsS3::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let check = |ca_file: Option<PathBuf>| {
        Command::new(env!("CARGO_BIN_EXE_durability"))
            .args(["--check-config", "--check-bucket"])
            .env("DURABILITY__STORAGE__DATA_DIR", dir.path().join("data"))
            // The test's own environment lends the binary no CA.
            .env_remove("SSL_CERT_FILE")
            .env_remove("SSL_CERT_DIR")
            .envs(server_env(&s3, ca_file.as_deref()))
            .stdin(Stdio::null())
            .output()
            .expect("run the binary")
    };

    let trusted = check(Some(s3.pki.path("ca.pem")));
    assert_eq!(trusted.status.code(), Some(0), "{trusted:?}");
    for ca_file in [Some(s3.pki.path("other-ca.pem")), None] {
        let refused = check(ca_file.clone());
        assert_eq!(refused.status.code(), Some(2), "{ca_file:?}: {refused:?}");
    }
}

/// The partition the tests write, as a path.
const PARTITION: &str = "/topics/events/partitions/0";

/// The environment of a server keeping its cold tier in `s3`'s bucket, trusting `ca_file` if
/// given, and keeping one record hot.
fn server_env(s3: &TlsS3, ca_file: Option<&Path>) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DURABILITY__COLD__KIND", "s3".into()),
        ("DURABILITY__COLD__S3_ENDPOINT", s3.endpoint.clone()),
        ("DURABILITY__COLD__S3_BUCKET", BUCKET.into()),
        ("DURABILITY__COLD__S3_ACCESS_KEY", "test".into()),
        ("DURABILITY__COLD__S3_SECRET_KEY", "test".into()),
        ("DURABILITY__RETENTION__MAX_RECORDS", "1".into()),
        ("RUST_LOG", "warn".into()),
    ];
    if let Some(ca_file) = ca_file {
        env.push((
            "DURABILITY__COLD__S3_CA_FILE",
            ca_file.display().to_string(),
        ));
    }
    env
}

/// Appends the payloads 1, 2 and 3 to [`PARTITION`].
fn append_three(server: &Server) {
    let records = json!([{"payload": 1}, {"payload": 2}, {"payload": 3}]);
    let (status, body) = request(
        server.addr,
        "POST",
        &format!("{PARTITION}/records"),
        Some(&records),
    )
    .expect("the server answers the append");
    assert_eq!(status, 202, "{body}");
}

/// [`PARTITION`]'s bounds.
fn bounds(server: &Server) -> Value {
    let (status, bounds) = request(server.addr, "GET", &format!("{PARTITION}/bounds"), None)
        .expect("the server answers");
    assert_eq!(status, 200, "{bounds}");
    bounds
}

/// The payloads of a page of records.
fn payloads(page: &Value) -> Vec<Value> {
    page["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|record| record["payload"].clone())
        .collect()
}

/// moto's S3 server on 127.0.0.1 speaking TLS with `server.pem` (signed by the tests' `ca.pem`,
/// for 127.0.0.1 and localhost), holding the empty bucket [`BUCKET`]; stopped when dropped.
struct TlsS3 {
    moto: Child,
    /// `https://127.0.0.1:PORT`.
    endpoint: String,
    /// A client trusting the tests' CA alone, to look into the bucket.
    client: reqwest::Client,
    pki: Pki,
}

impl TlsS3 {
    fn start() -> Self {
        // Makes sure moto is installed in .venv-s3 (the plain-HTTP server that starts it is
        // the one the other cold-tier tests share).
        crate::common::s3_endpoint();
        let pki = Pki::new();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let moto = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-s3/bin/moto_server");
        let mut child = Command::new(&moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .arg("--ssl-cert")
            .arg(pki.path("server.pem"))
            .arg("--ssl-key")
            .arg(pki.path("server.key"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {}: {err}", moto.display()));
        let deadline = Instant::now() + MOTO_START_TIMEOUT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("moto_server stopped ({status}) before listening");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("moto_server did not listen within {MOTO_START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let ca = std::fs::read(pki.path("ca.pem")).expect("the CA");
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("the CA"))
            .build()
            .expect("a client");
        let s3 = Self {
            moto: child,
            endpoint: format!("https://127.0.0.1:{port}"),
            client,
            pki,
        };
        // moto asks for no signature: a plain PUT creates the bucket (in us-east-1).
        let created = block_on(s3.client.put(s3.bucket_url()).send()).expect("PUT the bucket");
        assert!(created.status().is_success(), "{created:?}");
        s3
    }

    fn bucket_url(&self) -> String {
        format!("{}/{BUCKET}", self.endpoint)
    }

    /// The bucket's listing (S3's XML).
    fn list(&self) -> String {
        block_on(async {
            let listed = self
                .client
                .get(format!("{}?list-type=2", self.bucket_url()))
                .send()
                .await
                .expect("list the bucket");
            assert!(listed.status().is_success(), "{listed:?}");
            listed.text().await.expect("the listing")
        })
    }
}

impl Drop for TlsS3 {
    fn drop(&mut self) {
        let _ = self.moto.kill();
        let _ = self.moto.wait();
    }
}
