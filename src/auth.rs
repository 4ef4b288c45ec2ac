//! Who may do what: the credentials a server knows, each a token's SHA-256 with a name and the
//! grants it holds (`[[auth.tokens]]`), and the questions every request asks of them. The
//! configuration never holds a token, only its hash; a token given by a client is hashed once
//! and looked up, so the check costs the same with ten tokens configured or ten thousand.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

/// What a grant allows on the topics it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Appends: records of one partition, keyed events of a topic.
    Produce,
    /// Reads, polls, bounds and loads, commits of a group's cursors, and leases.
    Consume,
    /// Trims, forgetting cold data, deleting a group's cursor; `GET /cluster` (on `*`).
    Admin,
    /// `GET /metrics` (on `*`).
    Metrics,
}

impl Permission {
    const ALL: [Self; 4] = [Self::Produce, Self::Consume, Self::Admin, Self::Metrics];

    /// Its name in a grant and in a `403 forbidden` answer.
    pub fn name(self) -> &'static str {
        match self {
            Self::Produce => "produce",
            Self::Consume => "consume",
            Self::Admin => "admin",
            Self::Metrics => "metrics",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The topics a grant names: one topic, or every topic whose name starts with a prefix
/// (written with a `*` after it; `*` alone names every topic).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Topics {
    Named(String),
    Prefixed(String),
}

impl Topics {
    fn cover(&self, topic: &str) -> bool {
        match self {
            Self::Named(name) => name == topic,
            Self::Prefixed(prefix) => topic.starts_with(prefix.as_str()),
        }
    }

    fn are_all(&self) -> bool {
        matches!(self, Self::Prefixed(prefix) if prefix.is_empty())
    }
}

/// One `"PATTERN:PERMISSION,..."` of a token's grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    topics: Topics,
    /// One bit per [`Permission`].
    permissions: u8,
}

impl std::str::FromStr for Grant {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (pattern, permissions) = text.rsplit_once(':').ok_or_else(|| {
            format!("{text:?} is not \"PATTERN:PERMISSION,...\" (for example \"orders.*:produce\")")
        })?;
        let topics = match pattern.strip_suffix('*') {
            Some(prefix) if !prefix.contains('*') => Topics::Prefixed(prefix.to_owned()),
            None if !pattern.is_empty() && !pattern.contains('*') => {
                Topics::Named(pattern.to_owned())
            }
            _ => {
                return Err(format!(
                    "{pattern:?} in {text:?} is neither a topic name nor a prefix ending in *"
                ));
            }
        };
        let mut bits = 0;
        for name in permissions.split(',').map(str::trim) {
            let permission = Permission::ALL
                .into_iter()
                .find(|permission| permission.name() == name)
                .ok_or_else(|| {
                    format!(
                        "{name:?} in {text:?} is no permission (produce, consume, admin, metrics)"
                    )
                })?;
            bits |= permission.bit();
        }
        Ok(Self {
            topics,
            permissions: bits,
        })
    }
}

/// Who a request comes from, as its token says: a name (for logs and metrics, never the
/// token) and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    name: String,
    grants: Vec<Grant>,
}

impl Principal {
    /// `name`, allowed what `grants` allow.
    pub fn new(name: impl Into<String>, grants: Vec<Grant>) -> Self {
        Self {
            name: name.into(),
            grants,
        }
    }

    /// `name`, allowed everything on every topic (the single `server.auth_token`).
    pub fn with_every_permission(name: impl Into<String>) -> Self {
        let every = Permission::ALL.into_iter().map(Permission::bit).sum();
        Self::new(
            name,
            vec![Grant {
                topics: Topics::Prefixed(String::new()),
                permissions: every,
            }],
        )
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it may do what needs `permission` on `topic`; with no topic (the metrics, the
    /// cluster's view), only a grant of every topic (`*`) counts.
    pub fn may(&self, permission: Permission, topic: Option<&str>) -> bool {
        self.grants.iter().any(|grant| {
            grant.permissions & permission.bit() != 0
                && topic.map_or_else(|| grant.topics.are_all(), |topic| grant.topics.cover(topic))
        })
    }

    /// Whether it may see `topic` at all: in a topic list, say.
    pub fn sees(&self, topic: &str) -> bool {
        [Permission::Produce, Permission::Consume, Permission::Admin]
            .into_iter()
            .any(|permission| self.may(permission, Some(topic)))
    }
}

/// The SHA-256 of a token.
pub type TokenHash = [u8; 32];

/// The hash a token is known by.
pub fn token_hash(token: &str) -> TokenHash {
    Sha256::digest(token.as_bytes()).into()
}

/// Every credential the server knows, by the hash of its token.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    by_hash: HashMap<TokenHash, Arc<Principal>>,
}

impl Credentials {
    /// No credential: every request is let through.
    pub fn none() -> Self {
        Self::default()
    }

    /// Adds the principal a token hashing to `hash` stands for; answers false if another
    /// credential has that hash already (one token cannot be two principals).
    pub fn add(&mut self, hash: TokenHash, principal: Principal) -> bool {
        match self.by_hash.entry(hash) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(Arc::new(principal));
                true
            }
        }
    }

    /// Whether requests need a token at all.
    pub fn required(&self) -> bool {
        !self.by_hash.is_empty()
    }

    /// How many credentials are known.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// The principal `token` stands for, if it is known. The token is hashed and looked up,
    /// never compared: how long the check takes tells nothing of how close a guess came.
    pub fn authenticate(&self, token: &str) -> Option<Arc<Principal>> {
        self.by_hash.get(&token_hash(token)).cloned()
    }
}

/// Makes the credentials anew from their sources (the configuration and its tokens file).
pub type Loader = Box<dyn Fn() -> Result<Credentials, String> + Send + Sync>;

/// How often the tokens file's modification time is looked at.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The credentials in force, shared by every front end, reloaded from their sources on demand
/// ([`Live::reload`], on SIGHUP) and whenever the tokens file changes: a token is added or
/// removed without a restart. A reload that fails keeps the credentials in force.
pub struct Live {
    current: RwLock<Arc<Credentials>>,
    load: Loader,
}

impl fmt::Debug for Live {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Live")
            .field("credentials", &self.current().len())
            .finish_non_exhaustive()
    }
}

impl Live {
    /// The credentials `load` makes now, watching `file` (if any) for changes from a thread of
    /// its own, which ends with the last handle.
    ///
    /// # Errors
    /// What `load` answers, when it fails.
    pub fn start(load: Loader, file: Option<PathBuf>) -> Result<Arc<Self>, String> {
        let live = Arc::new(Self {
            current: RwLock::new(Arc::new(load()?)),
            load,
        });
        if let Some(file) = file {
            let watched = Arc::downgrade(&live);
            std::thread::Builder::new()
                .name("durability-tokens".into())
                .spawn(move || watch(&watched, &file))
                .map_err(|err| format!("the tokens file's watcher: {err}"))?;
        }
        Ok(live)
    }

    /// The credentials in force.
    pub fn current(&self) -> Arc<Credentials> {
        crate::sync::read_lock(&self.current).clone()
    }

    /// Makes the credentials anew from their sources; answers how many there are now. On
    /// failure the credentials in force stay, and the error says why.
    ///
    /// # Errors
    /// Why the sources could not be read.
    pub fn reload(&self) -> Result<usize, String> {
        let fresh = (self.load)()?;
        let count = fresh.len();
        *crate::sync::write_lock(&self.current) = Arc::new(fresh);
        Ok(count)
    }
}

/// Reloads `live` whenever `file`'s modification time changes, until `live` is gone.
fn watch(live: &Weak<Live>, file: &std::path::Path) {
    let stamp = || {
        std::fs::metadata(file)
            .and_then(|meta| meta.modified())
            .ok()
    };
    let mut seen: Option<SystemTime> = stamp();
    loop {
        std::thread::sleep(WATCH_EVERY);
        let Some(live) = live.upgrade() else { return };
        let now = stamp();
        if now == seen {
            continue;
        }
        seen = now;
        match live.reload() {
            Ok(count) => log::info!("{}: reloaded, {count} credentials", file.display()),
            Err(why) => log::warn!(
                "{}: not reloaded, the credentials stay: {why}",
                file.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(texts: &[&str]) -> Vec<Grant> {
        texts.iter().map(|text| text.parse().unwrap()).collect()
    }

    /// A prefix grant covers the topics that start with it, a named one its topic only, and
    /// each only for its permissions.
    #[test]
    fn a_grant_covers_its_topics_for_its_permissions() {
        let tenant = Principal::new(
            "tenant",
            grants(&["orders.*:produce,consume", "audit:consume"]),
        );
        assert!(tenant.may(Permission::Produce, Some("orders.eu")));
        assert!(tenant.may(Permission::Consume, Some("orders.")));
        assert!(!tenant.may(Permission::Admin, Some("orders.eu")));
        assert!(!tenant.may(Permission::Produce, Some("orders")));
        assert!(tenant.may(Permission::Consume, Some("audit")));
        assert!(!tenant.may(Permission::Produce, Some("audit")));
        assert!(!tenant.may(Permission::Consume, Some("audit.old")));
        assert!(tenant.sees("audit") && !tenant.sees("billing"));
    }

    /// What names no topic (the metrics, the cluster's view) needs the permission on every
    /// topic: a grant of some topics does not reach it.
    #[test]
    fn what_names_no_topic_needs_a_grant_of_every_topic() {
        let scoped = Principal::new("scoped", grants(&["orders.*:admin,metrics"]));
        assert!(!scoped.may(Permission::Metrics, None));
        assert!(!scoped.may(Permission::Admin, None));
        let watcher = Principal::new("watcher", grants(&["*:metrics"]));
        assert!(watcher.may(Permission::Metrics, None));
        assert!(!watcher.sees("orders"), "metrics alone sees no topic");
        let root = Principal::with_every_permission("server.auth_token");
        assert!(
            Permission::ALL
                .iter()
                .all(|&p| root.may(p, None) && root.may(p, Some("t")))
        );
    }

    /// A grant that is not `PATTERN:PERMISSION,...` is refused, saying why.
    #[test]
    fn a_malformed_grant_is_refused_saying_why() {
        for (text, why) in [
            ("orders", "is not \"PATTERN:PERMISSION"),
            ("orders:write", "is no permission"),
            (":produce", "neither a topic name nor a prefix"),
            ("ord*ers:produce", "neither a topic name nor a prefix"),
            ("*a*:produce", "neither a topic name nor a prefix"),
        ] {
            let refused = text.parse::<Grant>().unwrap_err();
            assert!(refused.contains(why), "{text}: {refused}");
        }
    }

    /// A token is known by its hash: the right token finds its principal, any other finds
    /// none, and one hash cannot stand for two principals.
    #[test]
    fn a_token_is_found_by_its_hash_only() {
        let mut credentials = Credentials::none();
        assert!(!credentials.required());
        assert_eq!(
            hex::encode(token_hash("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let hash = token_hash("s3cret");
        assert!(credentials.add(hash, Principal::new("a", grants(&["t:produce"]))));
        assert!(!credentials.add(hash, Principal::new("b", Vec::new())));
        assert!(credentials.required());
        assert_eq!(credentials.authenticate("s3cret").unwrap().name(), "a");
        assert!(credentials.authenticate("s3cret ").is_none());
        assert!(credentials.authenticate("").is_none());
    }
}
