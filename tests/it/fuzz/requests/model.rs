//! What a fuzz request is: a route of the server's OpenAPI document (or a random path), path
//! segments, a query and a body; and the contract's rules for names and partitions, to tell a
//! bad request from a good one.

use std::fmt;

use actix_web::http::Method;
use proptest::sample::Index;

use super::PARTITIONS;
use crate::common::{Route, routes};

/// The shape of a route's request body: the document states it as a schema, the fuzzer needs
/// it as generators (see `strategies`), so it knows each by operationId.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// The route takes no body (bytes are sent anyway).
    None,
    /// `produceEvents`: events with a partition key.
    Events,
    /// `appendRecords`: the records of one partition.
    Records,
    /// `commitGroup`: offsets by partition.
    Commit,
    /// `putCursor`: one offset.
    Cursor,
    /// `nackLease`: an optional delay.
    Nack,
    /// `forgetCold`: the offset to forget before.
    Forget,
    /// `redriveLetters`: the offsets of dead letters.
    Redrive,
}

impl Shape {
    /// The shape of `route`'s body. Panics on an operation whose body the fuzzer does not know,
    /// so that a route added with a body fails the fuzzing instead of being skipped.
    fn of(route: &Route) -> Self {
        let shape = match route.operation_id.as_str() {
            "produceEvents" => Self::Events,
            "appendRecords" => Self::Records,
            "commitGroup" => Self::Commit,
            "putCursor" => Self::Cursor,
            "nackLease" => Self::Nack,
            "forgetCold" => Self::Forget,
            "redriveLetters" => Self::Redrive,
            _ => Self::None,
        };
        assert_eq!(
            shape != Self::None,
            route.has_body,
            "{route}: the fuzzer does not know the shape of its body"
        );
        shape
    }
}

/// The path parameters that the fuzzer fills (see [`Target::path`]).
const PATH_PARAMETERS: &[&str] = &["topic", "partition", "group", "batchId"];

/// Which route a fuzz request targets.
#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    /// A route of the server's OpenAPI document, and the shape of its body.
    Route(&'static Route, Shape),
    /// A random path (mostly matching no route).
    Raw,
}

impl Target {
    /// Every route of the document, and the random path. Panics on a route that the fuzzer
    /// cannot exercise: a body or a path parameter it does not know.
    pub(super) fn all() -> Vec<Self> {
        let routes = routes().iter().map(|route| {
            for name in route.path_parameters() {
                assert!(
                    PATH_PARAMETERS.contains(&name),
                    "{route}: the fuzzer does not know how to fill {{{name}}}"
                );
            }
            Self::Route(route, Shape::of(route))
        });
        routes.chain([Self::Raw]).collect()
    }

    pub(super) fn method(self) -> Method {
        match self {
            Self::Route(route, _) => route.method.clone(),
            Self::Raw => Method::POST,
        }
    }

    /// The shape of the route's body.
    pub(super) fn shape(self) -> Shape {
        match self {
            Self::Route(_, shape) => shape,
            Self::Raw => Shape::None,
        }
    }

    /// Whether the path template has the parameter `{name}`.
    pub(super) fn has(self, name: &str) -> bool {
        match self {
            Self::Route(route, _) => route.has(name),
            Self::Raw => false,
        }
    }

    /// How the status summary names it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Route(route, _) => &route.operation_id,
            Self::Raw => "raw",
        }
    }

    /// The path, with every segment already percent-encoded.
    pub(super) fn path(self, t: &str, p: &str, g: &str, b: &str, raw: &str) -> String {
        match self {
            Self::Route(route, _) => route.uri(|name| {
                match name {
                    "topic" => t,
                    "partition" => p,
                    "group" => g,
                    "batchId" => b,
                    other => unreachable!("{route}: {{{other}}} (see Target::all)"),
                }
                .to_owned()
            }),
            Self::Raw => raw.to_owned(),
        }
    }
}

/// A path segment: its text (what the handler sees) and whether every byte is
/// percent-encoded (otherwise only the bytes that need it).
#[derive(Debug, Clone)]
pub(super) struct Segment {
    pub(super) text: String,
    pub(super) encode_all: bool,
}

impl Segment {
    pub(super) fn encoded(&self) -> String {
        percent_encode(&self.text, self.encode_all)
    }
}

/// The query string of a fuzz request.
#[derive(Debug, Clone)]
pub(super) enum Query {
    /// No `?` at all.
    Absent,
    /// `key=value` pairs, each side percent-encoded.
    Pairs(Vec<(String, String)>),
    /// A raw query string of URI-safe characters (malformed escapes included).
    Raw(String),
}

impl Query {
    pub(super) fn encoded(&self) -> Option<String> {
        match self {
            Self::Absent => None,
            Self::Pairs(pairs) => Some(
                pairs
                    .iter()
                    .map(|(k, v)| {
                        format!("{}={}", percent_encode(k, false), percent_encode(v, false))
                    })
                    .collect::<Vec<_>>()
                    .join("&"),
            ),
            Self::Raw(raw) => Some(raw.clone()),
        }
    }
}

/// A request body, shown as text in failure reports.
#[derive(Clone)]
pub(super) struct Body(pub(super) Vec<u8>);

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Body({:?})", String::from_utf8_lossy(&self.0))
    }
}

/// One fuzz request.
#[derive(Debug, Clone)]
pub(super) struct FuzzRequest {
    pub(super) target: Target,
    pub(super) topic: Segment,
    pub(super) partition: Segment,
    pub(super) group: Segment,
    pub(super) batch: Segment,
    pub(super) raw_path: String,
    pub(super) query: Query,
    pub(super) body: Option<Body>,
    /// Targets one of the leases that the server handed out so far (this one of them, when
    /// there is any): its topic, partition, group and batch id replace the generated ones.
    pub(super) held: Option<Index>,
}

/// A lease the server handed out: topic, partition, group, batch id.
pub(super) type Held = (String, u32, String, String);

impl FuzzRequest {
    /// This request with the held lease it targets (if any) substituted.
    pub(super) fn resolve(&self, held: &[Held]) -> Self {
        let mut request = self.clone();
        if let Some(index) = &self.held
            && !held.is_empty()
        {
            let (topic, partition, group, batch) = index.get(held).clone();
            request.topic.text = topic;
            request.partition.text = partition.to_string();
            request.group.text = group;
            request.batch.text = batch;
        }
        request
    }

    /// The request URI.
    pub(super) fn uri(&self) -> String {
        let path = self.target.path(
            &self.topic.encoded(),
            &self.partition.encoded(),
            &self.group.encoded(),
            &self.batch.encoded(),
            &self.raw_path,
        );
        match self.query.encoded() {
            Some(query) => format!("{path}?{query}"),
            None => path,
        }
    }
}

/// Percent-encodes `text` byte by byte: every byte but `A-Z a-z 0-9 - . _ ~`, or every byte.
pub(super) fn percent_encode(text: &str, all: bool) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for &byte in text.as_bytes() {
        if !all && (byte.is_ascii_alphanumeric() || b"-._~".contains(&byte)) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The contract's topic rule: 1 to 128 of `A-Z a-z 0-9 . _ -`, not starting with `.`.
pub(super) fn valid_topic(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The contract's group rule: 1 to 256 of `A-Z a-z 0-9 . _ - :`.
pub(super) fn valid_group(name: &str) -> bool {
    (1..=256).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b))
}

/// A `{partition}` segment the contract accepts: a non-negative integer below the count.
pub(super) fn valid_partition(segment: &str) -> Option<u32> {
    if segment.is_empty() || !segment.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    segment.parse::<u32>().ok().filter(|&p| p < PARTITIONS)
}
