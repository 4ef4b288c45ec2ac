//! The naming rules for topics, consumer groups and partition numbers in paths: the one place
//! that decides which names are valid, checked before any name reaches the filesystem or a
//! database.

use std::sync::LazyLock;

/// Longest topic name, in characters.
pub const MAX_TOPIC_LEN: usize = 128;
/// Longest consumer group name, in characters.
pub const MAX_GROUP_LEN: usize = 256;
/// [`validate_topic`]'s character rules as a regular expression, for API documents.
pub const TOPIC_PATTERN: &str = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$";
/// [`validate_group`]'s character rules as a regular expression, for API documents.
pub const GROUP_PATTERN: &str = r"^[A-Za-z0-9._:-]+$";

/// A topic or group name that breaks the naming rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} name {name:?}: {reason}")]
pub struct NameError {
    /// `"topic"`, `"group"` or `"partition"`.
    pub kind: &'static str,
    /// The rejected name.
    pub name: String,
    /// Which rule it breaks.
    pub reason: &'static str,
}

/// Checks a topic name: 1 to [`MAX_TOPIC_LEN`] characters of `A-Z a-z 0-9 . _ -`, not starting
/// with `.`.
///
/// These rules make a topic name safe as a path segment (no separators, no `..`): cold
/// segments are stored under `{prefix}/{topic}/{partition}/`, folders in the folder cold
/// store.
///
/// # Errors
/// [`NameError`] naming the broken rule.
pub fn validate_topic(name: &str) -> Result<(), NameError> {
    let fail = |reason| {
        Err(NameError {
            kind: "topic",
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() || name.len() > MAX_TOPIC_LEN {
        // Formatted once from the limit, so that the reason stays a `&'static str`.
        static RULE: LazyLock<String> =
            LazyLock::new(|| format!("must be 1 to {MAX_TOPIC_LEN} characters"));
        return fail(RULE.as_str());
    }
    if name.starts_with('.') {
        return fail("must not start with '.'");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return fail("may only contain A-Z a-z 0-9 . _ -");
    }
    Ok(())
}

/// Checks a consumer group name: 1 to [`MAX_GROUP_LEN`] characters of `A-Z a-z 0-9 . _ - :`.
///
/// # Errors
/// [`NameError`] naming the broken rule.
pub fn validate_group(name: &str) -> Result<(), NameError> {
    let fail = |reason| {
        Err(NameError {
            kind: "group",
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() || name.len() > MAX_GROUP_LEN {
        static RULE: LazyLock<String> =
            LazyLock::new(|| format!("must be 1 to {MAX_GROUP_LEN} characters"));
        return fail(RULE.as_str());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b))
    {
        return fail("may only contain A-Z a-z 0-9 . _ - :");
    }
    Ok(())
}

/// Reads a partition index written as text (a path segment): decimal digits only. An index too
/// large for a `u32` is past every topic's partition count, so it reads as `u32::MAX`, which no
/// topic reaches, and is then refused as any index past the count is.
///
/// # Errors
/// [`NameError`] when the text is not a non-negative integer.
pub fn parse_partition(text: &str) -> Result<u32, NameError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NameError {
            kind: "partition",
            name: text.to_owned(),
            reason: "must be a non-negative integer",
        });
    }
    Ok(text.parse().unwrap_or(u32::MAX))
}

/// Reads a partition index written as a JSON object key (a group commit's offsets): digits as
/// [`parse_partition`] reads them, in canonical form only (no leading zero), so that two keys
/// of one object (`"0"` and `"00"`) can never name the same partition.
///
/// # Errors
/// [`NameError`] when the text is not a non-negative integer in canonical form.
pub fn parse_partition_key(text: &str) -> Result<u32, NameError> {
    if text.len() > 1 && text.starts_with('0') && text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NameError {
            kind: "partition",
            name: text.to_owned(),
            reason: "must be written without a leading zero",
        });
    }
    parse_partition(text)
}

/// A partition of a topic: `{topic}:{index}`. Constructing one checks the topic name, so a
/// `PartitionId` is always safe to turn into a path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId {
    topic: String,
    index: u32,
}

impl PartitionId {
    /// The partition `index` of `topic`.
    ///
    /// # Errors
    /// [`NameError`] when the topic name breaks the naming rules.
    pub fn new(topic: &str, index: u32) -> Result<Self, NameError> {
        validate_topic(topic)?;
        Ok(Self {
            topic: topic.to_owned(),
            index,
        })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition's index within its topic.
    pub fn index(&self) -> u32 {
        self.index
    }
}

impl std::fmt::Display for PartitionId {
    /// The shard name, `{topic}:{partition}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.topic, self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition's shard name, the one spelling every layer uses, is `{topic}:{partition}`.
    #[test]
    fn shard_names_join_topic_and_partition() {
        let id = PartitionId::new("orders", 3).unwrap();
        assert_eq!(id.to_string(), "orders:3");
    }

    /// A partition key of a body is canonical decimal: a leading zero is refused saying so,
    /// other bad keys as a path segment's are.
    #[test]
    fn partition_keys() {
        assert_eq!(parse_partition_key("0"), Ok(0));
        assert_eq!(parse_partition_key("10"), Ok(10));
        assert_eq!(parse_partition_key("4294967296"), Ok(u32::MAX));
        for text in ["00", "01", "007"] {
            let err = parse_partition_key(text).unwrap_err();
            assert_eq!(
                err.reason, "must be written without a leading zero",
                "{text:?}"
            );
        }
        for text in ["", "-1", "+1", "0x1", " 1"] {
            assert_eq!(parse_partition_key(text), parse_partition(text), "{text:?}");
        }
    }

    /// Names at the edges of the rules are accepted or refused as the contract says.
    #[test]
    fn topic_and_group_rules() {
        assert!(validate_topic("events").is_ok());
        assert!(validate_topic("a.b_c-1").is_ok());
        assert!(validate_topic(&"t".repeat(MAX_TOPIC_LEN)).is_ok());
        assert!(validate_topic(&"t".repeat(MAX_TOPIC_LEN + 1)).is_err());
        assert!(validate_topic("").is_err());
        assert!(validate_topic(".hidden").is_err());
        assert!(validate_topic("..").is_err());
        assert!(validate_topic("a/b").is_err());
        assert!(validate_topic("a:b").is_err());
        assert!(validate_topic("é").is_err());
        assert!(validate_group("search:v2").is_ok());
        assert!(validate_group(&"g".repeat(MAX_GROUP_LEN)).is_ok());
        assert!(validate_group(&"g".repeat(MAX_GROUP_LEN + 1)).is_err());
        assert!(validate_group("").is_err());
        assert!(validate_group("a b").is_err());
        assert!(validate_group("a/b").is_err());
    }

    /// A partition segment is digits; one too large for a `u32` reads as past every count.
    #[test]
    fn partition_segments() {
        assert_eq!(parse_partition("0"), Ok(0));
        assert_eq!(parse_partition("007"), Ok(7));
        assert_eq!(parse_partition("4294967296"), Ok(u32::MAX));
        assert_eq!(parse_partition("99999999999999999999999"), Ok(u32::MAX));
        for text in ["", "-1", "+1", "1.0", "a", " 1"] {
            assert_eq!(
                parse_partition(text).unwrap_err().kind,
                "partition",
                "{text:?}"
            );
        }
    }
}
