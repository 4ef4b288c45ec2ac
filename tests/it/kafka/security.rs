//! The Kafka listener with credentials and TLS, through kcat (librdkafka): SASL/PLAIN with a
//! token as its password, the token's grants as over REST, and the REST listener's
//! certificate.

use super::{bootstrap, kcat, start};
use crate::common::pki::Pki;
use crate::common::process::exchange;

/// The admin token, and a token that may only consume topics starting with `read-`.
const ADMIN: &str = "admin-token-0123456789";
const READER: &str = "reader-token-0123456789";

fn tokens() -> String {
    let hash = |token: &str| hex::encode(durability::auth::token_hash(token));
    format!(
        "[{{name=\"reader\", sha256=\"{}\", grants=[\"read-*:consume\"]}}]",
        hash(READER)
    )
}

/// kcat's options for SASL/PLAIN with `token`, over `protocol`.
fn sasl(protocol: &str, token: &str) -> Vec<String> {
    [
        format!("security.protocol={protocol}"),
        "sasl.mechanisms=PLAIN".into(),
        "sasl.username=anyone".into(),
        format!("sasl.password={token}"),
    ]
    .into_iter()
    .flat_map(|setting| ["-X".to_owned(), setting])
    .collect()
}

/// kcat, with `options`, reading partition 0 of `topic` from its start to its end, a
/// payload a line.
fn read_all(options: &[&str], topic: &str) -> std::process::Output {
    let read = [
        "-C",
        "-t",
        topic,
        "-p",
        "0",
        "-o",
        "beginning",
        "-e",
        "-f",
        "%s\\n",
    ];
    kcat(&[options, &read[..]].concat(), b"")
}

fn with<'a>(base: &'a [&'a str], extra: &'a [String]) -> Vec<&'a str> {
    base.iter()
        .copied()
        .chain(extra.iter().map(String::as_str))
        .collect()
}

/// Without a token a client gets nothing; with the server's token it produces and reads; a
/// token granted `consume` on `read-*` reads those topics, and is refused producing to them
/// and reading others, which stay unwritten.
#[test]
fn sasl_plain_takes_a_token_and_its_grants() {
    let tokens = tokens();
    let (_dir, server) = start(&[
        ("DURABILITY__SERVER__AUTH_TOKEN", ADMIN),
        ("DURABILITY__AUTH__TOKENS", tokens.as_str()),
    ]);
    let broker = bootstrap(&server);
    let b = ["-b", broker.as_str(), "-m", "5"];

    let anonymous = kcat(
        &with(&b, &[])
            .iter()
            .chain(&["-L"])
            .copied()
            .collect::<Vec<_>>(),
        b"",
    );
    assert!(!anonymous.status.success(), "no metadata without a token");
    let wrong = sasl("SASL_PLAINTEXT", "not-a-token");
    let refused = kcat(&[&with(&b, &wrong)[..], &["-L"]].concat(), b"");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("uthentication"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let admin = sasl("SASL_PLAINTEXT", ADMIN);
    let produced = kcat(
        &[&with(&b, &admin)[..], &["-P", "-t", "read-x", "-p", "0"]].concat(),
        b"{\"n\":1}\n",
    );
    assert!(produced.status.success(), "{produced:?}");

    let reader = sasl("SASL_PLAINTEXT", READER);
    let read = read_all(&with(&b, &reader), "read-x");
    assert_eq!(
        String::from_utf8_lossy(&read.stdout),
        "{\"n\":1}\n",
        "{read:?}"
    );

    let denied = kcat(
        &[&with(&b, &reader)[..], &["-P", "-t", "read-x", "-p", "0"]].concat(),
        b"{\"n\":2}\n",
    );
    assert!(!denied.status.success(), "the reader may not produce");
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("uthoriz"),
        "{}",
        String::from_utf8_lossy(&denied.stderr)
    );
    let elsewhere = kcat(
        &[
            &with(&b, &reader)[..],
            &["-C", "-t", "other", "-p", "0", "-o", "beginning", "-e"],
        ]
        .concat(),
        b"",
    );
    assert!(
        !elsewhere.status.success(),
        "the reader may not read `other`"
    );

    let (status, _, body) = exchange(
        server.addr,
        &format!(
            "GET /topics/read-x/partitions/0/bounds HTTP/1.1\r\nHost: x\r\n\
             Authorization: Bearer {ADMIN}\r\nConnection: close\r\n\r\n"
        ),
    )
    .expect("the REST listener answers");
    assert_eq!(status, 200);
    let bounds: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(bounds["nextOffset"], 1, "the refused produce wrote nothing");
}

/// With `[server.tls]` the Kafka listener speaks TLS with the same certificate: a client that
/// trusts the CA produces and reads; one that does not is refused at the handshake.
#[test]
fn the_kafka_listener_speaks_tls_with_the_servers_certificate() {
    let pki = Pki::new();
    pki.serve("server");
    let tls = format!(
        "{{cert_file=\"{}\", key_file=\"{}\"}}",
        pki.path("server-now.pem").display(),
        pki.path("server-now.key").display()
    );
    let (_dir, server) = start(&[("DURABILITY__SERVER__TLS", tls.as_str())]);
    let broker = bootstrap(&server);
    let trusting = |ca: &str| {
        vec![
            "-X".to_owned(),
            "security.protocol=SSL".to_owned(),
            "-X".to_owned(),
            format!("ssl.ca.location={}", pki.path(ca).display()),
        ]
    };
    let b = ["-b", broker.as_str(), "-m", "5"];
    let good = trusting("ca.pem");
    let produced = kcat(
        &[&with(&b, &good)[..], &["-P", "-t", "secure", "-p", "0"]].concat(),
        b"over tls\n",
    );
    assert!(produced.status.success(), "{produced:?}");
    let read = read_all(&with(&b, &good), "secure");
    assert_eq!(
        String::from_utf8_lossy(&read.stdout),
        "over tls\n",
        "{read:?}"
    );

    let bad = trusting("other-ca.pem");
    let refused = kcat(&[&with(&b, &bad)[..], &["-L"]].concat(), b"");
    assert!(
        !refused.status.success(),
        "a client not trusting the CA gets nothing"
    );
    let plain = kcat(&[&b[..], &["-L"]].concat(), b"");
    assert!(
        !plain.status.success(),
        "plaintext gets nothing from a TLS listener"
    );
}
