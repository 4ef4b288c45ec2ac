//! Settings: the embedded `config/default.toml`, overlaid by a file (`--config FILE`) and by
//! environment variables (`DURABILITY__SECTION__KEY`), then validated.
//!
//! The default file is also the schema: a key that it does not have is unknown and refused.
//! Every error names the offending key as its TOML path (`retention.max_records`).

use std::collections::BTreeMap;
use std::fmt;
use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use toml::{Table, Value};

use crate::cold::{ColdStore, ColdStoreError, FsColdStore, S3ColdStore, S3Settings};
use crate::names::validate_topic;
use crate::store::{LeaseOptions, Retention, SyncMode};

/// The longest `waitMs` the REST contract allows: `server.max_wait_ms` may only shorten it.
pub const MAX_WAIT_MS: u64 = 30_000;

/// The defaults, built into the binary so it starts the same from any working directory.
pub const DEFAULTS: &str = include_str!("../config/default.toml");
/// Prefix of the environment variables that override settings.
pub const ENV_PREFIX: &str = "DURABILITY__";
/// Largest `retention.max_bytes`: 1 GiB.
pub const MAX_LOG_BYTES: u64 = 1 << 30;
/// Largest `log.max_batch_size`.
pub const MAX_BATCH_SIZE: usize = 10_000;
/// Largest `log.partitions_per_topic`.
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 4096;
/// Longest `storage.scrub_interval_ms`: a year (a longer one is taken for a mistaken unit).
pub const MAX_SCRUB_INTERVAL_MS: u64 = 365 * 24 * 3_600_000;
/// Other names of keys, each with the key it stands for: accepted in a file and in the
/// environment as the key itself.
const ALIASES: [(&str, &str); 1] = [("storage.scrub_interval", "storage.scrub_interval_ms")];
/// Sections a `[topics.<name>]` table may override.
const TOPIC_SECTIONS: [&str; 3] = ["log", "retention", "leases"];

/// The settings whose values are secrets: no error message shows them (and the logged
/// configuration redacts the token and the secret key).
pub const SECRET_KEYS: [&str; 3] = [
    "server.auth_token",
    "cold.s3_access_key",
    "cold.s3_secret_key",
];

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        message: String,
    },
    /// The file is not valid TOML. The message never quotes the file's text, which may hold a
    /// secret: the line and column say where the parser stopped.
    #[error("{source_name} is not valid TOML{}: {message}", position(*.line, *.column))]
    Syntax {
        /// The file or variable that failed to parse.
        source_name: String,
        /// The line (from 1) where the parser stopped, when it says.
        line: Option<usize>,
        /// The column (from 1, in characters) where the parser stopped, when it says.
        column: Option<usize>,
        /// The parser's message (what it found and expected, without the text).
        message: String,
    },
    /// A key that does not exist.
    #[error("{key}: unknown key (from {source_name})")]
    UnknownKey {
        /// The key's TOML path.
        key: String,
        /// Where it came from.
        source_name: String,
    },
    /// A key with a value it cannot take.
    #[error("{key}: {message}")]
    InvalidValue {
        /// The key's TOML path.
        key: String,
        /// What is wrong with the value.
        message: String,
    },
}

/// `" at line L, column C"` for a syntax error's position, or nothing when it is unknown.
fn position(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(" at line {line}, column {column}"),
        (Some(line), None) => format!(" at line {line}"),
        _ => String::new(),
    }
}

impl ConfigError {
    fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidValue {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// The whole configuration. [`Config::default`] is `config/default.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[must_use]
pub struct Config {
    /// `[server]`: the HTTP listener.
    pub server: ServerSettings,
    /// `[storage]`: where and how partitions are stored.
    pub storage: StorageSettings,
    /// `[log]`: partitions and batch limits.
    pub log: LogSettings,
    /// `[retention]`: how long records stay in the hot window.
    pub retention: RetentionSettings,
    /// `[cold]`: where expired records go.
    pub cold: ColdSettings,
    /// `[leases]`: parallel consumers sharing a group.
    pub leases: LeaseSettings,
    /// `[partitions]`: partition actor lifecycle.
    pub partitions: PartitionSettings,
    /// `[metrics]`: what `GET /metrics` shows.
    pub metrics: MetricsSettings,
    /// `[replication]`: where an acknowledged write is kept besides this machine's disk.
    pub replication: ReplicationSettings,
    /// `[cluster]`: the nodes that share the volumes through etcd.
    pub cluster: ClusterSettings,
    /// `[topics.<name>]`: per-topic settings, already merged over the global sections.
    pub topics: BTreeMap<String, TopicSettings>,
}

/// `[server]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Listen address; port 0 picks a free one. Default: `127.0.0.1:8080`.
    pub bind: String,
    /// Bearer token for every endpoint but `/healthz`; empty: no auth. Default: empty.
    pub auth_token: String,
    /// Largest request body. Default: 16 MiB.
    pub max_body_bytes: usize,
    /// Longest wait for a request's body. Default: 5,000.
    pub request_timeout_ms: u64,
    /// Longest wait of a long-poll read (`waitMs`); a longer one is cut to it. At most
    /// [`MAX_WAIT_MS`]. Default: 30,000.
    pub max_wait_ms: u64,
}

/// `[storage]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSettings {
    /// Folder holding the volumes (SQLite databases shared by many partitions). Default:
    /// `./data`.
    pub data_dir: PathBuf,
    /// Commit durability. Default: `full`.
    pub sync: SyncMode,
    /// Volumes new partitions are spread over, each with one committer. Default: 1.
    pub volumes: usize,
    /// Most threads running the committers of the volumes this node holds (one runs a volume
    /// at a time). Default: 4.
    pub committers: usize,
    /// Threads running partitions' blocking work other than appends (cursor commits, leases,
    /// retention). Default: 2.
    pub workers: usize,
    /// How often the scrub checks every volume in the background (one pass per volume per
    /// interval, at most a fifth of one core); 0 turns it off. At most [`MAX_SCRUB_INTERVAL_MS`].
    /// Also read as `scrub_interval`. Default: one day.
    #[serde(alias = "scrub_interval")]
    pub scrub_interval_ms: u64,
}

/// `[log]` (also per topic).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    /// Partitions of a topic. Default: 8.
    pub partitions_per_topic: u32,
    /// Most records per append to one partition, and the largest page. Default: 100.
    pub max_batch_size: usize,
    /// Largest payload (stored JSON text) of one record. Default: 1 MiB.
    pub max_record_bytes: usize,
}

/// `[retention]` (also per topic). 0 means "no limit" for each of the three limits.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    /// Oldest age a hot record may reach. Default: 7 days.
    pub max_age_ms: u64,
    /// Most hot records. Default: 0 (no limit).
    pub max_records: u64,
    /// Most hot payload bytes, at most 1 GiB. Default: 256 MiB.
    pub max_bytes: u64,
    /// How often the partitions whose retention is due are looked for: a partition's
    /// retention runs within one interval of its oldest record breaking a limit (two at
    /// most). Default: 60 s.
    pub sweep_interval_ms: u64,
}

/// Where expired records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColdKind {
    /// A local folder.
    Fs,
    /// S3-compatible object storage.
    S3,
    /// Nowhere: expired records are deleted.
    None,
}

/// `[cold]`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColdSettings {
    /// Backend. Default: `fs`.
    pub kind: ColdKind,
    /// Folder for `fs`. Default: empty, which is the folder `cold` under `storage.data_dir`
    /// wherever that is (see [`Config::cold_dir`]).
    pub dir: PathBuf,
    /// Prefix of every segment's key. Default: `segments`.
    pub prefix: String,
    /// Endpoint with scheme for `s3`; empty means AWS S3. Default: empty.
    pub s3_endpoint: String,
    /// Bucket for `s3`. Default: empty.
    pub s3_bucket: String,
    /// Region for `s3`. Default: `us-east-1`.
    pub s3_region: String,
    /// Access key for `s3`. Default: empty.
    pub s3_access_key: String,
    /// Secret key for `s3`. Default: empty.
    pub s3_secret_key: String,
    /// Path-style requests. Default: true.
    pub s3_path_style: bool,
}

impl fmt::Debug for ColdSettings {
    /// Like a derived `Debug`, with the secret key redacted so configs can be logged.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ColdSettings")
            .field("kind", &self.kind)
            .field("dir", &self.dir)
            .field("prefix", &self.prefix)
            .field("s3_endpoint", &self.s3_endpoint)
            .field("s3_bucket", &self.s3_bucket)
            .field("s3_region", &self.s3_region)
            .field("s3_access_key", &redacted(&self.s3_access_key))
            .field("s3_secret_key", &redacted(&self.s3_secret_key))
            .field("s3_path_style", &self.s3_path_style)
            .finish()
    }
}

/// `[leases]` (also per topic).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseSettings {
    /// Whether groups may lease ranges. Default: true.
    pub enabled: bool,
    /// How long a lease holds. Default: 30 s.
    pub lease_ms: u64,
    /// Most ranges a group holds per partition. Default: 1.
    pub max_parallelism: u32,
    /// Deliveries before a range is dead-lettered; 0: unbounded. Default: 0.
    pub max_attempts: u32,
    /// Topic receiving exhausted ranges; empty: none. Default: empty.
    pub dead_letter_topic: String,
}

/// `[partitions]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionSettings {
    /// Stop a partition's actor after this long without messages. Default: 5 min.
    pub idle_stop_ms: u64,
    /// Most partitions open at once; opening one more first closes the least recently used
    /// one with nothing in flight. 0: derived from the machine's memory at start. Default: 0.
    pub max_open: usize,
}

/// `[metrics]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSettings {
    /// Topics with series of their own, the first seen since the server started; the counts
    /// of later ones are summed under `topic="(other)"`. Default: 1,000.
    pub max_topics: usize,
}

/// `[replication]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicationSettings {
    /// Where writes land before their answer. Default: `none`.
    pub kind: ReplicationKind,
    /// Prefix of every replica object. Default: `replica`.
    pub prefix: String,
    /// This node's name in the bucket; empty: the host name. Default: empty.
    pub node_id: String,
    /// How long a window waits for more writes. Default: 2 ms.
    pub commit_linger_ms: u64,
    /// Largest window in bytes. Default: 8 MiB.
    pub max_window_bytes: usize,
    /// Most windows being stored at once, 1 to 16. Default: 2.
    pub max_puts_in_flight: usize,
    /// How long a write waits for its window before it is answered `unavailable`. Default: 10 s.
    pub put_retry_ms: u64,
    /// A volume is snapshotted once it landed this many bytes since its last snapshot.
    /// Default: 64 MiB.
    pub snapshot_bytes: u64,
    /// ... or once this long passed since its last snapshot with something landed. Default:
    /// 10 min.
    pub snapshot_interval_ms: u64,
    /// ... or once its history reaches this many windows of the node's stream back (what a
    /// node taking it over replays at most). Default: 4096.
    pub snapshot_windows: u64,
    /// How long an object no volume's history needs is kept before it is deleted. Default: 1 h.
    pub gc_grace_ms: u64,
}

/// `replication.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplicationKind {
    /// Writes are on this machine's disk only.
    None,
    /// Every write is in the `[cold]` S3 bucket before its answer.
    S3,
}

impl ReplicationSettings {
    /// `node_id`, or the host name when it is empty.
    pub fn node(&self) -> String {
        if !self.node_id.is_empty() {
            return self.node_id.clone();
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|name| name.trim().to_owned())
            .filter(|name| is_key_component(name))
            .unwrap_or_else(|| "node".to_owned())
    }

    fn validate(&self, cold: ColdKind) -> Result<(), ConfigError> {
        if self.kind == ReplicationKind::None {
            return Ok(());
        }
        if cold != ColdKind::S3 {
            return Err(ConfigError::invalid(
                "replication.kind",
                "\"s3\" uses the [cold] S3 connection: cold.kind must be \"s3\" too",
            ));
        }
        if !self.node_id.is_empty() && !is_key_component(&self.node_id) {
            return Err(ConfigError::invalid(
                "replication.node_id",
                "must be letters, digits, '.', '_' or '-'",
            ));
        }
        if self.prefix.is_empty() || self.prefix.split('/').any(|part| !is_key_component(part)) {
            return Err(ConfigError::invalid(
                "replication.prefix",
                "must be '/'-separated parts of letters, digits, '.', '_' or '-'",
            ));
        }
        positive("replication.max_window_bytes", self.max_window_bytes as u64)?;
        if !(1..=crate::replica::MAX_PUTS_IN_FLIGHT).contains(&self.max_puts_in_flight) {
            return Err(ConfigError::invalid(
                "replication.max_puts_in_flight",
                format!("must be 1 to {}", crate::replica::MAX_PUTS_IN_FLIGHT),
            ));
        }
        positive("replication.snapshot_bytes", self.snapshot_bytes)?;
        positive(
            "replication.snapshot_interval_ms",
            self.snapshot_interval_ms,
        )?;
        positive("replication.snapshot_windows", self.snapshot_windows)?;
        positive("replication.put_retry_ms", self.put_retry_ms)
    }
}

/// `[cluster]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSettings {
    /// etcd endpoints, comma-separated; empty: a single node. Default: empty.
    pub etcd_endpoints: String,
    /// How other nodes reach this one. Default: empty (required in a cluster).
    pub advertise_url: String,
    /// The node's etcd lease: its volumes go to the others once it stopped renewing it for
    /// this long. Default: 5,000.
    pub lease_ttl_ms: u64,
    /// The cluster's name, under which its etcd keys are. Default: `default`.
    pub name: String,
    /// Volumes the cluster's data is spread over, fixed by the first node. Default: 256.
    pub volumes: usize,
}

/// Longest `cluster.volumes`.
const MAX_CLUSTER_VOLUMES: usize = 4096;

impl ClusterSettings {
    /// Whether this node is part of a cluster.
    pub fn enabled(&self) -> bool {
        !self.etcd_endpoints.trim().is_empty()
    }

    /// The etcd endpoints, each a base URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.etcd_endpoints
            .split(',')
            .map(|endpoint| endpoint.trim().trim_end_matches('/').to_owned())
            .filter(|endpoint| !endpoint.is_empty())
            .collect()
    }

    fn validate(&self, replication: ReplicationKind) -> Result<(), ConfigError> {
        if !self.enabled() {
            return Ok(());
        }
        if replication != ReplicationKind::S3 {
            return Err(ConfigError::invalid(
                "cluster.etcd_endpoints",
                "a cluster shares its volumes through the bucket: replication.kind must be \"s3\"",
            ));
        }
        let is_url = |url: &str| url.starts_with("http://") || url.starts_with("https://");
        if let Some(bad) = self
            .endpoints()
            .into_iter()
            .find(|endpoint| !is_url(endpoint))
        {
            return Err(ConfigError::invalid(
                "cluster.etcd_endpoints",
                format!("{bad} is not an http:// or https:// URL"),
            ));
        }
        if !is_url(&self.advertise_url) {
            return Err(ConfigError::invalid(
                "cluster.advertise_url",
                "must be the http:// or https:// URL other nodes reach this one at",
            ));
        }
        if self.lease_ttl_ms < 1000 {
            return Err(ConfigError::invalid(
                "cluster.lease_ttl_ms",
                "must be at least 1000 (etcd counts leases in seconds)",
            ));
        }
        if !is_key_component(&self.name) {
            return Err(ConfigError::invalid(
                "cluster.name",
                "must be letters, digits, '.', '_' or '-'",
            ));
        }
        if !(1..=MAX_CLUSTER_VOLUMES).contains(&self.volumes) {
            return Err(ConfigError::invalid(
                "cluster.volumes",
                format!("must be 1 to {MAX_CLUSTER_VOLUMES}"),
            ));
        }
        Ok(())
    }
}

/// Whether `part` can name an object key's part as it is: not empty, and only letters, digits,
/// `.`, `_` and `-`.
fn is_key_component(part: &str) -> bool {
    !part.is_empty()
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Open partitions allowed per MiB of the machine's memory when `partitions.max_open` is 0.
const OPEN_PARTITIONS_PER_MIB: usize = 1;
/// Bounds of the derived `partitions.max_open`.
const DERIVED_MAX_OPEN: std::ops::RangeInclusive<usize> = 1_000..=100_000;

impl PartitionSettings {
    /// The limit in force: `max_open`, or when it is 0, one partition per MiB of the machine's
    /// memory (an open partition costs a few KiB; the rest is headroom for its caches and
    /// callers), between 1,000 and 100,000. File descriptors do not bound it: partitions hold
    /// none of their own (they share the volumes' connections).
    pub fn max_open(&self) -> usize {
        if self.max_open > 0 {
            return self.max_open;
        }
        let memory_mib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|line| line.strip_prefix("MemTotal:"))
                    .and_then(|rest| {
                        rest.trim()
                            .trim_end_matches("kB")
                            .trim()
                            .parse::<usize>()
                            .ok()
                    })
            })
            .map_or(4096, |kib| kib / 1024);
        (memory_mib * OPEN_PARTITIONS_PER_MIB)
            .clamp(*DERIVED_MAX_OPEN.start(), *DERIVED_MAX_OPEN.end())
    }
}

/// The settings of one topic: the global `[log]`, `[retention]` and `[leases]` with that
/// topic's overrides applied.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicSettings {
    /// `[topics.<name>.log]` over `[log]`.
    pub log: LogSettings,
    /// `[topics.<name>.retention]` over `[retention]`.
    pub retention: RetentionSettings,
    /// `[topics.<name>.leases]` over `[leases]`.
    pub leases: LeaseSettings,
}

impl Default for Config {
    fn default() -> Self {
        Self::from_sources(None, std::iter::empty()).expect("config/default.toml is valid")
    }
}

impl Config {
    /// Loads the configuration as the server does: defaults, then `file` if given, then the
    /// process environment.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file or key at fault.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let file = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
                    path: path.to_path_buf(),
                    message: err.to_string(),
                })?;
                Some((path.display().to_string(), text))
            }
            None => None,
        };
        let file = file
            .as_ref()
            .map(|(name, text)| (name.as_str(), text.as_str()));
        Self::from_sources(file, std::env::vars())
    }

    /// Builds the configuration from the defaults, an optional file (its name, for messages,
    /// and its text) and environment variables (only those starting with [`ENV_PREFIX`] are
    /// read).
    ///
    /// # Errors
    /// [`ConfigError`] naming the file or key at fault.
    pub fn from_sources(
        file: Option<(&str, &str)>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let schema = parse_toml("config/default.toml", DEFAULTS)?;
        let mut merged = schema.clone();
        if let Some((name, text)) = file {
            overlay(
                &mut merged,
                parse_toml(name, text)?,
                &schema,
                &schema,
                "",
                name,
            )?;
        }
        for (var, raw) in env {
            if let Some(path) = var.strip_prefix(ENV_PREFIX) {
                let table = env_entry(&var, path, &raw, &schema)?;
                overlay(&mut merged, table, &schema, &schema, "", &var)?;
            }
        }
        resolve_topics(&mut merged)?;
        let config: Self =
            serde_path_to_error::deserialize(Value::Table(merged)).map_err(type_error)?;
        config.validate()?;
        Ok(config)
    }

    /// The `[log]` settings of `topic`, borrowed (read on every append).
    pub fn topic_log(&self, topic: &str) -> &LogSettings {
        self.topics
            .get(topic)
            .map_or(&self.log, |settings| &settings.log)
    }

    /// The `[leases]` settings of `topic`, borrowed.
    pub fn topic_leases(&self, topic: &str) -> &LeaseSettings {
        self.topics
            .get(topic)
            .map_or(&self.leases, |settings| &settings.leases)
    }

    /// The settings of `topic`: its `[topics.<name>]` overrides, or the global sections.
    pub fn topic(&self, topic: &str) -> TopicSettings {
        self.topics
            .get(topic)
            .cloned()
            .unwrap_or_else(|| TopicSettings {
                log: self.log.clone(),
                retention: self.retention.clone(),
                leases: self.leases.clone(),
            })
    }

    /// The retention limits of every topic, as one text that changes when any of them does
    /// (how often they are enforced aside): due times computed under other limits are
    /// reviewed.
    pub fn retention_limits(&self) -> String {
        let limits = |retention: &RetentionSettings| {
            let RetentionSettings {
                max_age_ms,
                max_records,
                max_bytes,
                sweep_interval_ms: _,
            } = retention;
            format!("{max_age_ms}/{max_records}/{max_bytes}")
        };
        let mut text = format!("*={}", limits(&self.retention));
        for (topic, settings) in &self.topics {
            text.push_str(&format!(" {topic}={}", limits(&settings.retention)));
        }
        text
    }

    /// How often retention sweeps look for due partitions: the shortest `sweep_interval_ms` of
    /// the global section and every topic's.
    pub fn sweep_interval(&self) -> std::time::Duration {
        let shortest = self
            .topics
            .values()
            .map(|topic| topic.retention.sweep_interval_ms)
            .fold(self.retention.sweep_interval_ms, u64::min);
        std::time::Duration::from_millis(shortest)
    }

    /// How often the scrub checks every volume, or `None` when it is off
    /// (`storage.scrub_interval_ms` is 0).
    pub fn scrub_interval(&self) -> Option<std::time::Duration> {
        let every = self.storage.scrub_interval_ms;
        (every > 0).then(|| std::time::Duration::from_millis(every))
    }

    /// This configuration with every secret replaced, for logging.
    pub fn redacted(&self) -> Self {
        let mut config = self.clone();
        config.server.auth_token = redacted(&config.server.auth_token).to_owned();
        config.cold.s3_access_key = redacted(&config.cold.s3_access_key).to_owned();
        config.cold.s3_secret_key = redacted(&config.cold.s3_secret_key).to_owned();
        config
    }

    /// A configuration for tests: data under `dir`, an ephemeral port, no cold tier.
    #[cfg(any(test, feature = "test-util"))]
    pub fn for_tests(dir: &Path) -> Self {
        let mut config = Self::default();
        config.server.bind = "127.0.0.1:0".into();
        config.storage.data_dir = dir.join("data");
        config.cold.kind = ColdKind::None;
        config.cold.dir = dir.join("cold");
        config
    }

    /// The folder of a `fs` cold tier: `cold.dir`, or when that is empty the folder `cold`
    /// under `storage.data_dir`.
    pub fn cold_dir(&self) -> PathBuf {
        if self.cold.dir.as_os_str().is_empty() {
            self.storage.data_dir.join("cold")
        } else {
            self.cold.dir.clone()
        }
    }

    /// The configured cold store, or `None` for kind `none`. Nothing is contacted yet.
    ///
    /// # Errors
    /// [`ColdStoreError::Config`] when the S3 settings cannot make a client.
    pub fn cold_store(&self) -> Result<Option<Arc<dyn ColdStore>>, ColdStoreError> {
        Ok(match self.cold.kind {
            ColdKind::None => None,
            ColdKind::Fs => Some(Arc::new(FsColdStore::new(self.cold_dir()))),
            ColdKind::S3 => Some(Arc::new(S3ColdStore::new(&self.cold.s3())?)),
        })
    }

    /// Checks that the folders the server writes can be created and written: `storage.data_dir`,
    /// and `cold.dir` when the cold tier is a folder. Each is either a folder this process may
    /// write, or missing under one (with no regular file in between). Creates nothing, so
    /// `--check-config` can run it; the server runs it before opening the log.
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] naming the key, the folder and why.
    pub fn check_folders(&self) -> Result<(), ConfigError> {
        writable_folder("storage.data_dir", &self.storage.data_dir)?;
        if self.cold.kind == ColdKind::Fs {
            writable_folder("cold.dir", &self.cold_dir())?;
        }
        Ok(())
    }

    /// Checks that the `[cold]` S3 bucket can be reached and honours the conditional writes
    /// replication relies on (`If-None-Match: *` and `If-Match` on PUT), the check a replicated
    /// server makes at every start: writes, rewrites and deletes a probe object under
    /// `replication.prefix`. `--check-config --check-bucket` runs it. Blocks on the network, a
    /// few requests each waited for at most 5 s.
    ///
    /// # Errors
    /// A sentence saying why the bucket is unfit: there is none (`cold.kind` is not `"s3"`), it
    /// makes no client, cannot be reached or answers a failure (naming the operation), or does
    /// not honour a condition (naming which).
    pub fn check_bucket(&self) -> Result<(), String> {
        if self.cold.kind != ColdKind::S3 {
            return Err(format!(
                "there is no bucket to check: cold.kind is {:?}, not \"s3\"",
                format!("{:?}", self.cold.kind).to_lowercase()
            ));
        }
        crate::replica::probe::check_bucket(&self.cold.s3(), &self.replication)
            .map_err(|err| err.to_string())
    }

    /// Checks every rule the types cannot express.
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] naming the first key at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let server = &self.server;
        if server
            .bind
            .to_socket_addrs()
            .map(|mut addrs| addrs.next().is_none())
            .unwrap_or(true)
        {
            return Err(ConfigError::invalid(
                "server.bind",
                format!("{:?} is not a host:port address", server.bind),
            ));
        }
        positive("server.max_body_bytes", server.max_body_bytes as u64)?;
        positive("server.request_timeout_ms", server.request_timeout_ms)?;
        if server.max_wait_ms > MAX_WAIT_MS {
            return Err(ConfigError::invalid(
                "server.max_wait_ms",
                format!("must be at most {MAX_WAIT_MS}"),
            ));
        }
        if self.storage.data_dir.as_os_str().is_empty() {
            return Err(ConfigError::invalid(
                "storage.data_dir",
                "must not be empty",
            ));
        }
        self.cold.validate()?;
        self.replication.validate(self.cold.kind)?;
        self.cluster.validate(self.replication.kind)?;
        positive("partitions.idle_stop_ms", self.partitions.idle_stop_ms)?;
        positive("storage.volumes", self.storage.volumes as u64)?;
        positive("storage.workers", self.storage.workers as u64)?;
        positive("storage.committers", self.storage.committers as u64)?;
        if self.storage.scrub_interval_ms > MAX_SCRUB_INTERVAL_MS {
            return Err(ConfigError::invalid(
                "storage.scrub_interval_ms",
                format!("must be at most {MAX_SCRUB_INTERVAL_MS} (a year); 0 turns the scrub off"),
            ));
        }
        self.topic_settings_validate("", &self.topic(""))?;
        for (name, topic) in &self.topics {
            validate_topic(name)
                .map_err(|err| ConfigError::invalid(format!("topics.{name}"), err.to_string()))?;
            self.topic_settings_validate(&format!("topics.{name}."), topic)?;
        }
        Ok(())
    }

    fn topic_settings_validate(
        &self,
        prefix: &str,
        topic: &TopicSettings,
    ) -> Result<(), ConfigError> {
        let log = &topic.log;
        let key = |name: &str| format!("{prefix}{name}");
        if !(1..=MAX_PARTITIONS_PER_TOPIC).contains(&log.partitions_per_topic) {
            return Err(ConfigError::invalid(
                key("log.partitions_per_topic"),
                format!("must be 1 to {MAX_PARTITIONS_PER_TOPIC}"),
            ));
        }
        if !(1..=MAX_BATCH_SIZE).contains(&log.max_batch_size) {
            return Err(ConfigError::invalid(
                key("log.max_batch_size"),
                format!("must be 1 to {MAX_BATCH_SIZE}"),
            ));
        }
        // Over HTTP a record is also limited by `server.max_body_bytes`, whichever is smaller.
        positive(&key("log.max_record_bytes"), log.max_record_bytes as u64)?;
        let retention = &topic.retention;
        if retention.max_bytes > MAX_LOG_BYTES {
            return Err(ConfigError::invalid(
                key("retention.max_bytes"),
                format!("must be at most {MAX_LOG_BYTES} (1 GiB)"),
            ));
        }
        positive(
            &key("retention.sweep_interval_ms"),
            retention.sweep_interval_ms,
        )?;
        let leases = &topic.leases;
        positive(&key("leases.lease_ms"), leases.lease_ms)?;
        positive(
            &key("leases.max_parallelism"),
            u64::from(leases.max_parallelism),
        )?;
        if !leases.dead_letter_topic.is_empty() {
            validate_topic(&leases.dead_letter_topic).map_err(|err| {
                ConfigError::invalid(key("leases.dead_letter_topic"), err.to_string())
            })?;
        }
        Ok(())
    }
}

impl RetentionSettings {
    /// The limits as the store takes them (0 means no limit).
    pub fn limits(&self) -> Retention {
        let limit = |value: u64| (value > 0).then_some(value);
        Retention {
            max_age_ms: limit(self.max_age_ms),
            max_records: limit(self.max_records),
            max_bytes: limit(self.max_bytes),
        }
    }
}

impl LeaseSettings {
    /// The options as the store takes them (`max_attempts` 0 means unbounded; a dead-letter
    /// topic is a destination for exhausted ranges).
    pub fn options(&self) -> LeaseOptions {
        LeaseOptions {
            enabled: self.enabled,
            lease_ms: self.lease_ms,
            max_parallelism: self.max_parallelism,
            max_attempts: (self.max_attempts > 0).then_some(self.max_attempts),
            dead_letter: !self.dead_letter_topic.is_empty(),
        }
    }
}

impl ColdSettings {
    /// The `s3_*` keys as S3 client settings.
    pub fn s3(&self) -> S3Settings {
        S3Settings {
            endpoint: self.s3_endpoint.clone(),
            bucket: self.s3_bucket.clone(),
            region: self.s3_region.clone(),
            access_key: self.s3_access_key.clone(),
            secret_key: self.s3_secret_key.clone(),
            path_style: self.s3_path_style,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        match self.kind {
            ColdKind::S3 if self.s3_bucket.is_empty() => Err(ConfigError::invalid(
                "cold.s3_bucket",
                "must not be empty when cold.kind is \"s3\"",
            )),
            ColdKind::S3
                if !self.s3_endpoint.is_empty()
                    && !self.s3_endpoint.starts_with("http://")
                    && !self.s3_endpoint.starts_with("https://") =>
            {
                Err(ConfigError::invalid(
                    "cold.s3_endpoint",
                    "must start with http:// or https://",
                ))
            }
            _ => Ok(()),
        }
    }
}

/// Checks that `folder` is a folder this process may write, or can be created as one: the
/// nearest of its ancestors that exists is a folder this process may write.
fn writable_folder(key: &str, folder: &Path) -> Result<(), ConfigError> {
    let refuse = |at: &Path, why: String| {
        let message = if at == folder {
            format!("{} {why}", folder.display())
        } else {
            format!("cannot create {}: {} {why}", folder.display(), at.display())
        };
        Err(ConfigError::invalid(key, message))
    };
    for at in folder.ancestors() {
        // The ancestors of a relative path end with "": the working folder.
        let at = if at.as_os_str().is_empty() {
            Path::new(".")
        } else {
            at
        };
        match std::fs::metadata(at) {
            Ok(metadata) if metadata.is_dir() => {
                return match may_write(at) {
                    Ok(()) => Ok(()),
                    Err(err) => refuse(at, format!("is not writable ({err})")),
                };
            }
            Ok(_) => return refuse(at, "is not a folder".to_owned()),
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) => {}
            Err(err) => return refuse(at, format!("cannot be read ({err})")),
        }
    }
    refuse(folder, "has no existing folder above it".to_owned())
}

/// Whether this process may create entries in the folder `dir`, asked of the operating system
/// without writing anything.
#[cfg(unix)]
fn may_write(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("the path holds a NUL byte"))?;
    // SAFETY: `access` only reads the NUL-terminated path, which outlives the call.
    if unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether this process may create entries in the folder `dir`: its read-only flag.
#[cfg(not(unix))]
fn may_write(dir: &Path) -> std::io::Result<()> {
    if std::fs::metadata(dir)?.permissions().readonly() {
        Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
    } else {
        Ok(())
    }
}

fn positive(key: &str, value: u64) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::invalid(key, "must be greater than 0"));
    }
    Ok(())
}

fn redacted(secret: &str) -> &'static str {
    if secret.is_empty() { "" } else { "<redacted>" }
}

/// Parses `text`. A syntax error keeps the parser's message and position but not its quote
/// of the offending line, which may be a secret's (`auth_token = "unterminated`), or a line
/// inside a secret's multi-line string.
fn parse_toml(source_name: &str, text: &str) -> Result<Table, ConfigError> {
    text.parse::<Table>().map_err(|err| {
        let (line, column) = err
            .span()
            .map(|span| line_and_column(text, span.start))
            .unzip();
        ConfigError::Syntax {
            source_name: source_name.to_owned(),
            line,
            column,
            message: err.message().to_owned(),
        }
    })
}

/// The line and column, both from 1, of the byte `offset` of `text` (the column counts
/// characters).
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let line = before.matches('\n').count() + 1;
    (line, before[line_start..].chars().count() + 1)
}

/// A value that does not fit its key's type, named by the key. serde's message quotes the
/// value (``invalid type: integer `1234`, expected a string``), so a secret's gets a message
/// of its own: every secret is a string, so a wrong type is all it can be refused for.
fn type_error(err: serde_path_to_error::Error<toml::de::Error>) -> ConfigError {
    let key = err.path().to_string();
    let message = if SECRET_KEYS.contains(&key.as_str()) {
        "expected a string (the value of a secret is not shown)".to_owned()
    } else {
        err.inner().message().to_owned()
    };
    ConfigError::invalid(key, message)
}

/// Writes `over` into `base`, refusing keys that `schema` (a table of the defaults) does not
/// have. `root` is the whole defaults table: under `topics`, any topic name may appear, holding
/// the keys of the sections a topic may override.
fn overlay(
    base: &mut Table,
    over: Table,
    schema: &Table,
    root: &Table,
    prefix: &str,
    source_name: &str,
) -> Result<(), ConfigError> {
    // Each key as `over` named it, to refuse a key given under two names.
    let mut given: BTreeMap<String, String> = BTreeMap::new();
    for (key, value) in over {
        let named = format!("{prefix}{key}");
        let key = match ALIASES.iter().find(|(alias, _)| *alias == named) {
            Some((_, stands_for)) => stands_for[prefix.len()..].to_owned(),
            None => key,
        };
        let path = format!("{prefix}{key}");
        if let Some(first) = given.insert(key.clone(), named.clone()) {
            return Err(ConfigError::invalid(
                path,
                format!("given twice by {source_name}, as {first} and as {named}"),
            ));
        }
        let sub_schema = if prefix == "topics." {
            Value::Table(
                TOPIC_SECTIONS
                    .iter()
                    .map(|section| (section.to_string(), root[*section].clone()))
                    .collect(),
            )
        } else {
            match schema.get(&key) {
                Some(sub_schema) => sub_schema.clone(),
                None => {
                    return Err(ConfigError::UnknownKey {
                        key: path,
                        source_name: source_name.to_owned(),
                    });
                }
            }
        };
        match (value, sub_schema) {
            (Value::Table(over), Value::Table(sub_schema)) => {
                let entry = base
                    .entry(key)
                    .or_insert_with(|| Value::Table(Table::new()));
                if let Value::Table(entry) = entry {
                    overlay(
                        entry,
                        over,
                        &sub_schema,
                        root,
                        &format!("{path}."),
                        source_name,
                    )?;
                }
            }
            (Value::Table(_), _) => {
                return Err(ConfigError::invalid(
                    path,
                    "expected a value, found a table",
                ));
            }
            (_, Value::Table(_)) => return Err(ConfigError::invalid(path, "expected a table")),
            (value, _) => {
                base.insert(key, value);
            }
        }
    }
    Ok(())
}

/// Turns `DURABILITY__SECTION__KEY=raw` into a one-key table. The
/// value is read as a TOML value (`1`, `true`) when it parses as one, else as a string.
fn env_entry(var: &str, path: &str, raw: &str, schema: &Table) -> Result<Table, ConfigError> {
    let parts: Vec<String> = path.split("__").map(str::to_ascii_lowercase).collect();
    let [section, key] = parts.as_slice() else {
        return Err(ConfigError::UnknownKey {
            key: parts.join("."),
            source_name: format!(
                "{var} (environment variables take the form {ENV_PREFIX}SECTION__KEY; per-topic settings come from the --config file)"
            ),
        });
    };
    // A setting that is a string takes the text as it is (a token `123456` or a bucket `2024`
    // stays a string); any other is read as a TOML value, and as a string if it is not one.
    let is_string = matches!(
        schema.get(section).and_then(|keys| keys.get(key)),
        Some(Value::String(_))
    );
    let value = if is_string {
        Value::String(raw.to_owned())
    } else {
        format!("v = {raw}")
            .parse::<Table>()
            .ok()
            .and_then(|mut table| table.remove("v"))
            .unwrap_or_else(|| Value::String(raw.to_owned()))
    };
    let mut inner = Table::new();
    inner.insert(key.clone(), value);
    let mut table = Table::new();
    table.insert(section.clone(), Value::Table(inner));
    Ok(table)
}

/// Replaces each `[topics.<name>]` table with the global overridable sections overlaid by that
/// topic's keys, so every topic deserializes into complete [`TopicSettings`].
fn resolve_topics(merged: &mut Table) -> Result<(), ConfigError> {
    let globals: Table = TOPIC_SECTIONS
        .iter()
        .map(|section| (section.to_string(), merged[*section].clone()))
        .collect();
    let Some(Value::Table(topics)) = merged.get_mut("topics") else {
        return Err(ConfigError::invalid(
            "topics",
            "must be a table of topic names",
        ));
    };
    for (_, topic) in topics.iter_mut() {
        // `overlay` admitted only tables of known sections here, so every pair matches.
        let mut resolved = globals.clone();
        if let Value::Table(overrides) = topic {
            for (section, keys) in std::mem::take(overrides) {
                if let (Some(Value::Table(target)), Value::Table(keys)) =
                    (resolved.get_mut(&section), keys)
                {
                    target.extend(keys);
                }
            }
        }
        *topic = Value::Table(resolved);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded defaults parse, validate, and say what the contract says they are.
    #[test]
    fn default_file_parses_and_validates() {
        let config = Config::default();
        assert_eq!(config.server.bind, "127.0.0.1:8080");
        assert_eq!(config.storage.sync, SyncMode::Full);
        assert_eq!(config.log.max_batch_size, 100);
        assert_eq!(config.retention.max_bytes, 268_435_456);
        assert_eq!(config.cold.kind, ColdKind::Fs);
        assert_eq!(config.leases.lease_ms, 30_000);
        assert!(config.topics.is_empty());
        assert_eq!(config.storage.scrub_interval_ms, 86_400_000);
        assert!(config.validate().is_ok());
    }

    /// `storage.scrub_interval` is another name of `storage.scrub_interval_ms`, in a file and
    /// in the environment; giving both is refused, and 0 turns the scrub off.
    #[test]
    fn the_scrub_interval_has_two_names() {
        let file = |text| Config::from_sources(Some(("my.toml", text)), std::iter::empty());
        let config = file("[storage]\nscrub_interval = 5000").unwrap();
        assert_eq!(config.storage.scrub_interval_ms, 5_000);
        let env = [("DURABILITY__STORAGE__SCRUB_INTERVAL".into(), "0".into())];
        let config = Config::from_sources(None, env).unwrap();
        assert_eq!(config.scrub_interval(), None);
        let err = file("[storage]\nscrub_interval = 1\nscrub_interval_ms = 2").unwrap_err();
        assert!(
            matches!(&err, ConfigError::InvalidValue { key, .. } if key == "storage.scrub_interval_ms"),
            "{err}"
        );
        assert!(
            err.to_string().contains("storage.scrub_interval and"),
            "{err}"
        );
    }

    /// An interval beyond a year is refused, naming the key.
    #[test]
    fn a_scrub_interval_beyond_a_year_is_refused() {
        let text = format!(
            "[storage]\nscrub_interval_ms = {}",
            MAX_SCRUB_INTERVAL_MS + 1
        );
        let err = Config::from_sources(Some(("my.toml", &text)), std::iter::empty()).unwrap_err();
        assert!(
            matches!(&err, ConfigError::InvalidValue { key, .. } if key == "storage.scrub_interval_ms"),
            "{err}"
        );
    }
}
