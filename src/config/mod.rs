//! Settings: the embedded `config/default.toml`, overlaid by a file (`--config FILE`) and by
//! environment variables (`DURABILITY__SECTION__KEY`), then validated.
//!
//! The default file is also the schema: a key that it does not have is unknown and refused.
//! Every error names the offending key as its TOML path (`retention.max_records`).
//!
//! Each section is a file of its own, with its settings (documented with their defaults), its
//! bounds and its checks; small `[metrics]` shares `server`'s. This file holds [`Config`], the
//! loading, and [`Config::validate`], which runs the sections' checks.

mod auth;
mod cluster;
mod cold;
mod error;
mod folders;
mod kafka;
mod leases;
mod log;
mod partitions;
mod replication;
mod retention;
mod server;
mod storage;
mod topics;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use toml::{Table, Value};

pub use auth::{AuthSettings, TokenSettings};
pub use cluster::{ClusterSettings, NodeTlsSettings};
pub use cold::{ColdKind, ColdSettings};
pub use error::ConfigError;
pub use kafka::KafkaSettings;
pub use leases::LeaseSettings;
// `self::`, because the `log` crate has the same name.
pub use self::log::{LogSettings, MAX_BATCH_SIZE, MAX_PARTITIONS_PER_TOPIC};
pub use partitions::PartitionSettings;
pub use replication::{MAX_PUTS_IN_FLIGHT, ReplicationKind, ReplicationSettings};
pub use retention::{MAX_LOG_BYTES, RetentionSettings};
pub use server::{MAX_WAIT_MS, MetricsSettings, ServerSettings, TlsSettings};
pub use storage::{MAX_SCRUB_INTERVAL_MS, StorageSettings};
pub use topics::TopicSettings;

use crate::cold::{ColdStore, ColdStoreError, FsColdStore, S3ColdStore};
use crate::names::validate_topic;
use folders::writable_folder;

/// The defaults, built into the binary so it starts the same from any working directory.
pub const DEFAULTS: &str = include_str!("../../config/default.toml");
/// Prefix of the environment variables that override settings.
pub const ENV_PREFIX: &str = "DURABILITY__";
/// Other names of keys, each with the key it stands for: accepted in a file and in the
/// environment as the key itself.
const ALIASES: [(&str, &str); 1] = [("storage.scrub_interval", "storage.scrub_interval_ms")];
/// Sections a `[topics.<name>]` table may override.
const TOPIC_SECTIONS: [&str; 3] = ["log", "retention", "leases"];

/// The settings whose values are secrets: no error message shows them (and the logged
/// configuration redacts the token and the secret key).
pub const SECRET_KEYS: [&str; 5] = [
    "server.auth_token",
    "cold.s3_access_key",
    "cold.s3_secret_key",
    "cluster.secret",
    "cluster.etcd_password",
];

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
    /// `[auth]`: the scoped credentials, besides `server.auth_token`.
    pub auth: AuthSettings,
    /// `[kafka]`: the Kafka protocol listener.
    pub kafka: KafkaSettings,
    /// `[topics.<name>]`: per-topic settings, already merged over the global sections.
    pub topics: BTreeMap<String, TopicSettings>,
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
        let mut config: Self =
            serde_path_to_error::deserialize(Value::Table(merged)).map_err(type_error)?;
        config.read_secret_files()?;
        config.validate()?;
        Ok(config)
    }

    /// Reads each secret given as a file (`server.auth_token_file`, `cold.s3_access_key_file`,
    /// `cold.s3_secret_key_file`, `cluster.secret_file`, `cluster.etcd_password_file`) into its setting, without its trailing newline. A secret
    /// given both ways, or a file that cannot be read or is empty, is refused by the file's
    /// key; no message says what a file holds.
    fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        let secrets = [
            (
                &self.server.auth_token_file,
                &mut self.server.auth_token,
                "server.auth_token",
            ),
            (
                &self.cold.s3_access_key_file,
                &mut self.cold.s3_access_key,
                "cold.s3_access_key",
            ),
            (
                &self.cold.s3_secret_key_file,
                &mut self.cold.s3_secret_key,
                "cold.s3_secret_key",
            ),
            (
                &self.cluster.secret_file,
                &mut self.cluster.secret,
                "cluster.secret",
            ),
            (
                &self.cluster.etcd_password_file,
                &mut self.cluster.etcd_password,
                "cluster.etcd_password",
            ),
        ];
        for (file, value, key) in secrets {
            if file.as_os_str().is_empty() {
                continue;
            }
            let file_key = format!("{key}_file");
            if !value.is_empty() {
                return Err(ConfigError::invalid(
                    file_key,
                    format!("give {key} or this, not both"),
                ));
            }
            let read = std::fs::read_to_string(file).map_err(|err| {
                ConfigError::invalid(&file_key, format!("{}: {err}", file.display()))
            })?;
            let secret = read.trim_end_matches(['\n', '\r']);
            if secret.is_empty() {
                return Err(ConfigError::invalid(
                    file_key,
                    format!("{} is empty", file.display()),
                ));
            }
            *value = secret.to_owned();
        }
        Ok(())
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
        // A hash says nothing of its token; the grants are not secret.
        config.cold.s3_access_key = redacted(&config.cold.s3_access_key).to_owned();
        config.cold.s3_secret_key = redacted(&config.cold.s3_secret_key).to_owned();
        config.cluster.secret = redacted(&config.cluster.secret).to_owned();
        config.cluster.etcd_password = redacted(&config.cluster.etcd_password).to_owned();
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
        // The order decides which key a configuration with several faults is refused for, and
        // stays stable: hence `[storage]` in two steps, its folder first and its counts after
        // the sections that depend on one another.
        self.server.validate()?;
        self.kafka.validate()?;
        self.auth.validate(&self.server.auth_token)?;
        self.storage.validate_data_dir()?;
        self.cold.validate()?;
        self.replication.validate(self.cold.kind)?;
        self.cluster.validate(self.replication.kind)?;
        if self.cluster.enabled() && self.server.tls.enabled() != self.cluster.tls.enabled() {
            // Nodes forward to one another at their advertised URLs: in clear to a TLS
            // listener, or over TLS to a plain one, they would not understand one another.
            return Err(ConfigError::invalid(
                "cluster.tls.ca_file",
                "a cluster's nodes speak TLS to one another exactly when their listener does: \
                 give [server.tls] and [cluster.tls] together",
            ));
        }
        if self.cluster.enabled()
            && self.cluster.node_secret(&self.server.auth_token).is_empty()
            && (!self.auth.tokens.is_empty() || !self.auth.tokens_file.as_os_str().is_empty())
        {
            // Without it, a node could not tell another node's request from a client's.
            return Err(ConfigError::invalid(
                "cluster.secret",
                "a cluster whose server needs tokens needs a secret its nodes prove themselves \
                 with (cluster.secret, or server.auth_token)",
            ));
        }
        if self.cluster.enabled()
            && self.kafka.enabled()
            && self.kafka.advertised_in(&self.cluster).is_none()
        {
            // Each node tells Kafka clients where the others are: it must know its own.
            return Err(ConfigError::invalid(
                "kafka.advertised",
                "a cluster's node with a Kafka listener on port 0 needs the host:port its \
                 clients reach it at",
            ));
        }
        self.partitions.validate()?;
        self.storage.validate()?;
        self.topic("").validate("")?;
        for (name, topic) in &self.topics {
            validate_topic(name)
                .map_err(|err| ConfigError::invalid(format!("topics.{name}"), err.to_string()))?;
            topic.validate(&format!("topics.{name}."))?;
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
    use crate::store::SyncMode;

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
}
