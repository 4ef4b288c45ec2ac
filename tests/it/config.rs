//! The configuration contract: defaults, file, environment, per-topic overrides, validation.

use std::path::Path;

use durability::config::{ColdKind, Config, ConfigError};
use durability::store::SyncMode;

fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
    vars.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn invalid_key(result: Result<Config, ConfigError>) -> String {
    match result {
        Err(ConfigError::InvalidValue { key, .. } | ConfigError::UnknownKey { key, .. }) => key,
        other => panic!("expected a key error, got {other:?}"),
    }
}

/// A file overrides the defaults it names and leaves the others alone.
#[test]
fn file_overrides_defaults() {
    let file = "[retention]\nmax_records = 5\n[storage]\nsync = \"normal\"\n";
    let config = Config::from_sources(Some(("test.toml", file)), env(&[])).unwrap();
    assert_eq!(config.retention.max_records, 5);
    assert_eq!(config.retention.max_age_ms, 604_800_000);
    assert_eq!(config.storage.sync, SyncMode::Normal);
}

/// An environment variable wins over the file, and its value is typed by the key.
#[test]
fn environment_overrides_file() {
    let file = "[retention]\nmax_records = 5\n";
    let config = Config::from_sources(
        Some(("test.toml", file)),
        env(&[
            ("DURABILITY__RETENTION__MAX_RECORDS", "1"),
            ("DURABILITY__SERVER__BIND", "127.0.0.1:0"),
            ("DURABILITY__COLD__KIND", "none"),
            ("DURABILITY__LEASES__ENABLED", "false"),
            ("UNRELATED", "ignored"),
        ]),
    )
    .unwrap();
    assert_eq!(config.retention.max_records, 1);
    assert_eq!(config.server.bind, "127.0.0.1:0");
    assert_eq!(config.cold.kind, ColdKind::None);
    assert!(!config.leases.enabled);
}

/// Unknown keys are refused with their TOML path, from a file and from the environment.
#[test]
fn unknown_keys_are_refused_by_name() {
    let file = "[retention]\nmax_recordz = 5\n";
    assert_eq!(
        invalid_key(Config::from_sources(Some(("f.toml", file)), env(&[]))),
        "retention.max_recordz"
    );
    assert_eq!(
        invalid_key(Config::from_sources(
            Some(("f.toml", "[bogus]\nx = 1\n")),
            env(&[])
        )),
        "bogus"
    );
    assert_eq!(
        invalid_key(Config::from_sources(
            None,
            env(&[("DURABILITY__RETENTION__NOPE", "1")])
        )),
        "retention.nope"
    );
    assert_eq!(
        invalid_key(Config::from_sources(
            None,
            env(&[("DURABILITY__TOPICS__AUDIT__LOG__MAX_BATCH_SIZE", "1")])
        )),
        "topics.audit.log.max_batch_size"
    );
}

/// Values of the wrong type or outside their range are refused with the key's path.
#[test]
fn bad_values_are_refused_by_name() {
    let cases = [
        (
            "DURABILITY__RETENTION__MAX_RECORDS",
            "-1",
            "retention.max_records",
        ),
        (
            "DURABILITY__RETENTION__MAX_RECORDS",
            "many",
            "retention.max_records",
        ),
        ("DURABILITY__STORAGE__SYNC", "sometimes", "storage.sync"),
        ("DURABILITY__COLD__KIND", "tape", "cold.kind"),
        ("DURABILITY__LOG__MAX_BATCH_SIZE", "0", "log.max_batch_size"),
        (
            "DURABILITY__LOG__MAX_BATCH_SIZE",
            "10001",
            "log.max_batch_size",
        ),
        (
            "DURABILITY__LOG__PARTITIONS_PER_TOPIC",
            "0",
            "log.partitions_per_topic",
        ),
        ("DURABILITY__SERVER__BIND", "not an address", "server.bind"),
        ("DURABILITY__LEASES__LEASE_MS", "0", "leases.lease_ms"),
        (
            "DURABILITY__SERVER__MAX_WAIT_MS",
            "30001",
            "server.max_wait_ms",
        ),
        (
            "DURABILITY__LEASES__DEAD_LETTER_TOPIC",
            "../x",
            "leases.dead_letter_topic",
        ),
    ];
    for (var, value, key) in cases {
        assert_eq!(
            invalid_key(Config::from_sources(None, env(&[(var, value)]))),
            key,
            "{var}={value}"
        );
    }
}

/// `retention.max_bytes` may be exactly 1 GiB and no more.
#[test]
fn max_bytes_is_capped_at_one_gib() {
    let at_cap = Config::from_sources(
        None,
        env(&[("DURABILITY__RETENTION__MAX_BYTES", "1073741824")]),
    );
    assert_eq!(at_cap.unwrap().retention.max_bytes, 1 << 30);
    let over = Config::from_sources(
        None,
        env(&[("DURABILITY__RETENTION__MAX_BYTES", "1073741825")]),
    );
    assert_eq!(invalid_key(over), "retention.max_bytes");
}

/// S3 needs a bucket.
#[test]
fn s3_without_bucket_is_refused() {
    let result = Config::from_sources(None, env(&[("DURABILITY__COLD__KIND", "s3")]));
    assert_eq!(invalid_key(result), "cold.s3_bucket");
}

/// A topic's overrides apply over the global sections; other topics get the globals.
#[test]
fn per_topic_overrides_merge_over_globals() {
    let file = "
        [retention]
        max_records = 10
        [topics.audit.retention]
        max_age_ms = 0
        [topics.audit.log]
        partitions_per_topic = 2
    ";
    let config = Config::from_sources(Some(("f.toml", file)), env(&[])).unwrap();
    let audit = config.topic("audit");
    assert_eq!(audit.retention.max_age_ms, 0);
    assert_eq!(audit.retention.max_records, 10);
    assert_eq!(audit.log.partitions_per_topic, 2);
    assert_eq!(audit.log.max_batch_size, 100);
    let other = config.topic("events");
    assert_eq!(other.retention.max_age_ms, 604_800_000);
    assert_eq!(other.log.partitions_per_topic, 8);
}

/// Per-topic sections are checked like the global ones, and topic names like any topic name.
#[test]
fn per_topic_overrides_are_validated() {
    let bad_value = "[topics.audit.log]\nmax_batch_size = 0\n";
    assert_eq!(
        invalid_key(Config::from_sources(Some(("f.toml", bad_value)), env(&[]))),
        "topics.audit.log.max_batch_size"
    );
    let bad_section = "[topics.audit.server]\nbind = \"x\"\n";
    assert_eq!(
        invalid_key(Config::from_sources(
            Some(("f.toml", bad_section)),
            env(&[])
        )),
        "topics.audit.server"
    );
    let bad_name = "[topics.\".hidden\".log]\nmax_batch_size = 5\n";
    assert_eq!(
        invalid_key(Config::from_sources(Some(("f.toml", bad_name)), env(&[]))),
        "topics..hidden"
    );
}

/// A file that is not TOML is refused naming the file.
#[test]
fn syntax_errors_name_the_file() {
    let result = Config::from_sources(Some(("broken.toml", "[server\n")), env(&[]));
    assert!(
        matches!(result, Err(ConfigError::Syntax { source_name, .. }) if source_name == "broken.toml")
    );
}

/// Logged configurations never show secrets: the token and both S3 keys (the same keys whose
/// values configuration errors never quote).
#[test]
fn redacted_hides_secrets() {
    let config = Config::from_sources(
        None,
        env(&[
            ("DURABILITY__SERVER__AUTH_TOKEN", "hunter2"),
            ("DURABILITY__COLD__S3_ACCESS_KEY", "AKIDKEY"),
            ("DURABILITY__COLD__S3_SECRET_KEY", "s3cret"),
        ]),
    )
    .unwrap();
    let shown = format!("{:?}", config.redacted());
    for secret in ["hunter2", "AKIDKEY", "s3cret"] {
        assert!(!shown.contains(secret), "{shown}");
        assert!(!format!("{:?}", config.cold).contains(secret));
    }
}

/// Retention limits of 0 mean "no limit" for the store; other values pass through.
#[test]
fn zero_retention_limits_mean_unlimited() {
    let config = Config::from_sources(
        None,
        env(&[
            ("DURABILITY__RETENTION__MAX_AGE_MS", "0"),
            ("DURABILITY__RETENTION__MAX_RECORDS", "7"),
        ]),
    )
    .unwrap();
    let limits = config.retention.limits();
    assert_eq!(limits.max_age_ms, None);
    assert_eq!(limits.max_records, Some(7));
    assert_eq!(limits.max_bytes, Some(268_435_456));
}

/// Each cold kind opens its store without contacting it; `none` opens nothing.
#[test]
fn cold_kinds_open_their_stores() {
    let open = |vars: &[(&str, &str)]| {
        Config::from_sources(None, env(vars))
            .unwrap()
            .cold_store()
            .unwrap()
    };
    assert!(open(&[("DURABILITY__COLD__KIND", "none")]).is_none());
    assert!(open(&[("DURABILITY__COLD__KIND", "fs")]).is_some());
    let s3 = open(&[
        ("DURABILITY__COLD__KIND", "s3"),
        ("DURABILITY__COLD__S3_BUCKET", "segments"),
        ("DURABILITY__COLD__S3_ENDPOINT", "http://127.0.0.1:9"),
    ]);
    assert!(s3.is_some());
}

/// A setting that is a string takes an environment variable's text as it is, whatever TOML
/// would make of it, so a numeric token or bucket name starts the server.
#[test]
fn string_settings_take_environment_text_as_is() {
    for token in ["123456", "true", "inf", "1.5", "[1]"] {
        let config = Config::from_sources(
            None,
            env(&[
                ("DURABILITY__SERVER__AUTH_TOKEN", token),
                ("DURABILITY__COLD__S3_BUCKET", "2024"),
                ("DURABILITY__COLD__S3_SECRET_KEY", token),
            ]),
        )
        .unwrap_or_else(|err| panic!("{token}: {err}"));
        assert_eq!(config.server.auth_token, token);
        assert_eq!(config.cold.s3_secret_key, token);
        assert_eq!(config.cold.s3_bucket, "2024");
    }
}

/// An error about another setting never shows a secret's value.
#[test]
fn configuration_errors_do_not_echo_secrets() {
    let err = Config::from_sources(
        None,
        env(&[
            ("DURABILITY__SERVER__AUTH_TOKEN", "s3cr3t-t0ken"),
            ("DURABILITY__COLD__S3_SECRET_KEY", "s3cr3t-key"),
            ("DURABILITY__SERVER__MAX_BODY_BYTES", "lots"),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("server.max_body_bytes"), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");
}

/// A body limit below the record limit starts: over HTTP, records are limited by whichever
/// is smaller.
#[test]
fn a_body_limit_below_the_record_limit_starts() {
    let config =
        Config::from_sources(None, env(&[("DURABILITY__SERVER__MAX_BODY_BYTES", "1024")])).unwrap();
    assert_eq!(config.server.max_body_bytes, 1024);
    assert!(config.log.max_record_bytes > 1024);
}

/// No error shows a secret's value: a secret of the wrong type in the file is refused naming
/// its key, and a syntax error on a secret's line (or inside its multi-line string) gives the
/// line and column, never the text of that line.
#[test]
fn errors_on_a_secret_never_show_its_value() {
    let wrong_types = [
        ("[server]\nauth_token = 12345678\n", "server.auth_token"),
        ("[cold]\ns3_secret_key = 987654321\n", "cold.s3_secret_key"),
        ("[cold]\ns3_access_key = 24681357\n", "cold.s3_access_key"),
        ("[cold]\ns3_secret_key = 31415.9265\n", "cold.s3_secret_key"),
    ];
    for (file, secret_key) in wrong_types {
        let value = file.lines().nth(1).unwrap().split(" = ").nth(1).unwrap();
        let err = Config::from_sources(Some(("f.toml", file)), env(&[])).unwrap_err();
        assert!(
            matches!(&err, ConfigError::InvalidValue { key, .. } if key == secret_key),
            "{err:?}"
        );
        let shown = err.to_string();
        assert!(shown.contains(secret_key), "{shown}");
        assert!(!shown.contains(value), "{shown}");
        assert!(!format!("{err:?}").contains(value), "{err:?}");
    }

    let syntax_errors = [
        ("[server]\nauth_token = \"s3cr3t-open\n", 2),
        ("[server]\nauth_token = s3cr3t-bare\n", 2),
        ("[cold]\ns3_secret_key = 's3cr3t' s3cr3t-after\n", 2),
        ("[cold]\ns3_access_key = \"s3cr3t\\q\"\n", 2),
        (
            "[server]\nauth_token = \"s3cr3t-1\"\nauth_token = \"s3cr3t-2\"\n",
            3,
        ),
        (
            "[server]\nbind = \"127.0.0.1:0\"\nauth_token = { s3cr3t = 1 \n",
            3,
        ),
    ];
    for (file, line) in syntax_errors {
        let err = Config::from_sources(Some(("f.toml", file)), env(&[])).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Syntax { source_name, line: Some(at), .. }
                if source_name == "f.toml" && *at == line),
            "{file:?}: {err:?}"
        );
        let shown = err.to_string();
        assert!(shown.contains(&format!("line {line}")), "{shown}");
        assert!(!shown.contains("s3cr3t"), "{file:?}: {shown}");
        assert!(!format!("{err:?}").contains("s3cr3t"), "{err:?}");
    }
    // A multi-line string left open: the parser stops past the secret's first line.
    let open = "[server]\nauth_token = \"\"\"s3cr3t-first\ns3cr3t-second\n";
    let err = Config::from_sources(Some(("f.toml", open)), env(&[])).unwrap_err();
    assert!(matches!(&err, ConfigError::Syntax { .. }), "{err:?}");
    assert!(!err.to_string().contains("s3cr3t"), "{err}");
}

/// `cold.dir` not set is the folder `cold` under `storage.data_dir`, wherever that is set (file
/// or environment); a `cold.dir` that is set stays as given.
#[test]
fn cold_dir_defaults_under_the_data_dir() {
    let cold_dir = |file: &str, vars: &[(&str, &str)]| {
        Config::from_sources(Some(("f.toml", file)), env(vars))
            .unwrap()
            .cold_dir()
    };
    assert_eq!(Config::default().cold_dir(), Path::new("./data/cold"));
    let mut in_code = Config::default();
    in_code.storage.data_dir = "/opt/log".into();
    assert_eq!(
        in_code.cold_dir(),
        Path::new("/opt/log/cold"),
        "set in code too"
    );
    let moved = "[storage]\ndata_dir = \"/srv/log\"\n";
    assert_eq!(cold_dir(moved, &[]), Path::new("/srv/log/cold"));
    assert_eq!(
        cold_dir("", &[("DURABILITY__STORAGE__DATA_DIR", "/var/lib/log")]),
        Path::new("/var/lib/log/cold")
    );
    let both = "[storage]\ndata_dir = \"/srv/log\"\n[cold]\ndir = \"/mnt/cold\"\n";
    assert_eq!(cold_dir(both, &[]), Path::new("/mnt/cold"));
    assert_eq!(
        cold_dir(moved, &[("DURABILITY__COLD__DIR", "relative/cold")]),
        Path::new("relative/cold")
    );
}

/// `[[auth.tokens]]` from a file: each token's hash and grants are read, and a hash that is not
/// 64 hex digits, a grant that does not parse, a name or a hash given twice, or the hash of
/// `server.auth_token` itself are refused naming the token's key.
#[test]
fn scoped_tokens_are_read_and_bad_ones_refused_by_name() {
    let hash = "a".repeat(64);
    let other = "b".repeat(64);
    let token = |name: &str, sha256: &str, grant: &str| {
        format!(
            "[[auth.tokens]]\nname = \"{name}\"\nsha256 = \"{sha256}\"\ngrants = [\"{grant}\"]\n"
        )
    };
    let good = token("orders", &hash, "orders.*:produce,consume");
    let config = Config::from_sources(Some(("good.toml", &good)), env(&[])).unwrap();
    assert_eq!(config.auth.tokens.len(), 1);
    assert_eq!(config.auth.tokens[0].grants, ["orders.*:produce,consume"]);
    assert!(!config.auth.metrics_public);

    let cases = [
        (token("a", "abc", "t:produce"), "auth.tokens[0].sha256"),
        (token("a", &hash, "t:write"), "auth.tokens[0].grants"),
        (token("a", &hash, "t*x:produce"), "auth.tokens[0].grants"),
        (
            token("a", &hash, "t:produce") + &token("a", &other, "t:produce"),
            "auth.tokens[1].name",
        ),
        (
            token("a", &hash, "t:produce") + &token("b", &hash, "t:produce"),
            "auth.tokens[1].sha256",
        ),
    ];
    for (text, key) in cases {
        let refused = Config::from_sources(Some(("auth.toml", &text)), env(&[]));
        assert_eq!(invalid_key(refused), key, "{text}");
    }
    // The single token is one credential too: a scoped token cannot be it.
    let sha256_of_token = durability::auth::token_hash("hunter2");
    let same = token("a", &hex::encode(sha256_of_token), "t:produce");
    let refused = Config::from_sources(
        Some(("same.toml", &same)),
        env(&[("DURABILITY__SERVER__AUTH_TOKEN", "hunter2")]),
    );
    assert_eq!(invalid_key(refused), "server.auth_token");
    // A tokens file that cannot be read is refused too.
    let missing = Config::from_sources(
        None,
        env(&[("DURABILITY__AUTH__TOKENS_FILE", "/nonexistent/tokens.toml")]),
    );
    assert_eq!(invalid_key(missing), "auth.tokens_file");
}

/// The TOML of a cluster node's settings (over the bucket `b`), with `more` after them.
fn cluster_toml(more: &str) -> String {
    format!(
        "[replication]\nkind = \"s3\"\n[cold]\nkind = \"s3\"\ns3_bucket = \"b\"\n\
         [cluster]\netcd_endpoints = \"http://127.0.0.1:2379\"\n\
         advertise_url = \"http://127.0.0.1:8080\"\n{more}"
    )
}

/// A cluster's nodes prove themselves to one another with `cluster.secret`, or else
/// `server.auth_token`: scoped tokens (inline or in a file) with neither are refused.
#[test]
fn a_cluster_with_scoped_tokens_needs_the_nodes_secret() {
    let text = cluster_toml(&format!(
        "[[auth.tokens]]\nname = \"a\"\nsha256 = \"{}\"\ngrants = [\"t:produce\"]\n",
        "a".repeat(64)
    ));
    let refused = Config::from_sources(Some(("cluster.toml", &text)), env(&[]));
    assert_eq!(invalid_key(refused), "cluster.secret");
    for secret in [
        "DURABILITY__SERVER__AUTH_TOKEN",
        "DURABILITY__CLUSTER__SECRET",
    ] {
        let accepted =
            Config::from_sources(Some(("cluster.toml", &text)), env(&[(secret, "nodes")]));
        assert!(accepted.is_ok(), "{secret}: {accepted:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, "").unwrap();
    let in_a_file = cluster_toml(&format!("[auth]\ntokens_file = {:?}\n", tokens));
    let refused = Config::from_sources(Some(("cluster.toml", &in_a_file)), env(&[]));
    assert_eq!(invalid_key(refused), "cluster.secret");
}

/// `[cluster.tls]` and etcd's access are checked by key: the nodes speak TLS exactly when
/// their listener does, at https:// URLs, with files that hold certificates; etcd's
/// certificate and key, and its user and password, come together, and its CA only with
/// https:// endpoints. Settings that hold together, with real certificates, are taken.
#[test]
fn cluster_tls_and_etcd_access_are_checked_by_key() {
    let pki = crate::common::pki::Pki::new();
    let file = |name: &str| format!("{:?}", pki.path(name).display().to_string());
    let (ca, cert, key) = (file("ca.pem"), file("node-a.pem"), file("node-a.key"));
    let server_tls = format!("[server.tls]\ncert_file = {cert}\nkey_file = {key}\n");
    let https = |text: String| text.replace("http://127.0.0.1:8080", "https://127.0.0.1:8080");
    let cases = [
        (cluster_toml(&server_tls), "cluster.tls.ca_file"),
        (
            cluster_toml(&format!("[cluster.tls]\nca_file = {ca}\n")),
            "cluster.advertise_url",
        ),
        (
            https(cluster_toml(&format!(
                "{server_tls}[cluster.tls]\nca_file = {ca}\ncert_file = {cert}\n"
            ))),
            "cluster.tls.key_file",
        ),
        (
            https(cluster_toml(&format!(
                "{server_tls}[cluster.tls]\nca_file = \"/nonexistent/ca.pem\"\n"
            ))),
            "cluster.tls",
        ),
        (
            cluster_toml(&format!("etcd_cert_file = {cert}\n")),
            "cluster.etcd_key_file",
        ),
        (
            cluster_toml(&format!("etcd_ca_file = {ca}\n")),
            "cluster.etcd_endpoints",
        ),
        (
            cluster_toml("etcd_user = \"root\"\n"),
            "cluster.etcd_password",
        ),
    ];
    for (text, key) in cases {
        let refused = Config::from_sources(Some(("cluster.toml", &text)), env(&[]));
        assert_eq!(invalid_key(refused), key, "{text}");
    }
    let secured = https(cluster_toml(&format!(
        "etcd_ca_file = {ca}\netcd_user = \"root\"\netcd_password = \"pw\"\n\
         {server_tls}client_ca_file = {ca}\n[cluster.tls]\nca_file = {ca}\n\
         cert_file = {cert}\nkey_file = {key}\n"
    )))
    .replace("http://127.0.0.1:2379", "https://127.0.0.1:2379");
    let accepted = Config::from_sources(Some(("secured.toml", &secured)), env(&[]));
    assert!(accepted.is_ok(), "{secured}: {accepted:?}");
}

/// `[server.tls]` needs its certificate and key together, and files that hold them; each
/// fault is refused by key.
#[test]
fn tls_settings_are_checked_by_key() {
    let tls = |lines: &str| format!("[server.tls]\n{lines}");
    let cases = [
        (tls("key_file = \"/k.pem\"\n"), "server.tls.cert_file"),
        (
            tls("client_ca_file = \"/ca.pem\"\n"),
            "server.tls.cert_file",
        ),
        (tls("cert_file = \"/c.pem\"\n"), "server.tls.key_file"),
        (
            tls("cert_file = \"/nonexistent/c.pem\"\nkey_file = \"/nonexistent/k.pem\"\n"),
            "server.tls",
        ),
    ];
    for (text, key) in cases {
        let refused = Config::from_sources(Some(("tls.toml", &text)), env(&[]));
        assert_eq!(invalid_key(refused), key, "{text}");
    }
}

/// Secrets may come from files, as containers mount them: `server.auth_token_file`,
/// `cold.s3_access_key_file` and `cold.s3_secret_key_file` are read without their trailing
/// newline. A secret given both ways, a missing file or an empty one is refused by the file's
/// key, and neither an error nor the configuration's `Debug` shows a secret.
#[test]
fn secrets_are_read_from_files_and_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (token, access, secret) = (
        file("token", "s3cr3t-token\n"),
        file("access", "s3cr3t-access"),
        file("secret", "s3cr3t-secret\r\n"),
    );
    let (cluster_secret, etcd_password) = (
        file("cluster-secret", "s3cr3t-cluster\n"),
        file("etcd-password", "s3cr3t-etcd\n"),
    );
    let config = Config::from_sources(
        Some(("cluster.toml", &cluster_toml(""))),
        env(&[
            ("DURABILITY__SERVER__AUTH_TOKEN_FILE", &token),
            ("DURABILITY__COLD__S3_ACCESS_KEY_FILE", &access),
            ("DURABILITY__COLD__S3_SECRET_KEY_FILE", &secret),
            ("DURABILITY__CLUSTER__SECRET_FILE", &cluster_secret),
            ("DURABILITY__CLUSTER__ETCD_USER", "root"),
            ("DURABILITY__CLUSTER__ETCD_PASSWORD_FILE", &etcd_password),
        ]),
    )
    .unwrap();
    assert_eq!(config.server.auth_token, "s3cr3t-token");
    assert_eq!(config.cold.s3_access_key, "s3cr3t-access");
    assert_eq!(config.cold.s3_secret_key, "s3cr3t-secret");
    assert_eq!(config.cluster.secret, "s3cr3t-cluster");
    assert_eq!(config.cluster.etcd_password, "s3cr3t-etcd");
    assert!(!format!("{config:?}").contains("s3cr3t"), "{config:?}");
    let redacted = format!("{:?}", config.redacted());
    assert!(!redacted.contains("s3cr3t"), "{redacted}");

    let empty = file("empty", "\n");
    let cases = [
        (
            vec![
                ("DURABILITY__SERVER__AUTH_TOKEN_FILE", token.as_str()),
                ("DURABILITY__SERVER__AUTH_TOKEN", "s3cr3t-inline"),
            ],
            "server.auth_token_file",
        ),
        (
            vec![(
                "DURABILITY__COLD__S3_SECRET_KEY_FILE",
                "/nonexistent/secret",
            )],
            "cold.s3_secret_key_file",
        ),
        (
            vec![("DURABILITY__COLD__S3_ACCESS_KEY_FILE", empty.as_str())],
            "cold.s3_access_key_file",
        ),
        (
            vec![
                (
                    "DURABILITY__CLUSTER__ETCD_PASSWORD_FILE",
                    etcd_password.as_str(),
                ),
                ("DURABILITY__CLUSTER__ETCD_PASSWORD", "s3cr3t-inline"),
            ],
            "cluster.etcd_password_file",
        ),
        (
            vec![("DURABILITY__CLUSTER__SECRET_FILE", empty.as_str())],
            "cluster.secret_file",
        ),
    ];
    for (vars, key) in cases {
        let refused = Config::from_sources(None, env(&vars));
        let message = format!("{:?}", refused.as_ref().err());
        assert!(!message.contains("s3cr3t"), "{message}");
        assert_eq!(invalid_key(refused), key, "{vars:?}");
    }
}

/// `cold.s3_ca_file` goes with an https:// `cold.s3_endpoint` only, and must hold a
/// certificate rustls takes as a root (not a missing file, a key, nor a malformed one); each
/// fault is refused by key, and the tests' CA with an https:// endpoint is taken.
#[test]
fn s3_ca_file_is_checked_by_key() {
    let pki = crate::common::pki::Pki::new();
    let malformed = pki.path("malformed.pem");
    std::fs::write(
        &malformed,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let cold = |endpoint: &str, ca_file: &Path| {
        format!(
            "[cold]\nkind = \"s3\"\ns3_bucket = \"b\"\ns3_endpoint = \"{endpoint}\"\n\
             s3_ca_file = {:?}\n",
            ca_file.display().to_string()
        )
    };
    let https = "https://127.0.0.1:9000";
    let ca = pki.path("ca.pem");
    let cases = [
        ("http://127.0.0.1:9000", ca.clone()),
        ("", ca.clone()),
        (https, pki.path("missing.pem")),
        (https, pki.path("server.key")),
        (https, malformed),
    ];
    for (endpoint, ca_file) in cases {
        let text = cold(endpoint, &ca_file);
        let refused = Config::from_sources(Some(("cold.toml", &text)), env(&[]));
        assert_eq!(invalid_key(refused), "cold.s3_ca_file", "{text}");
    }
    let accepted = Config::from_sources(Some(("cold.toml", &cold(https, &ca))), env(&[]));
    assert_eq!(accepted.map(|config| config.cold.s3_ca_file), Ok(ca));
}
