//! What a fuzz request is: a route, path segments, a query and a body; and the contract's
//! rules for names and partitions, to tell a bad request from a good one.

use std::fmt;

use actix_web::http::Method;
use proptest::sample::Index;

use super::PARTITIONS;

/// Which route a fuzz request targets (its method and path template).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    ProduceKeyed,
    ProduceDirect,
    Read,
    Poll,
    Commit,
    PutCursor,
    DeleteCursor,
    Cursors,
    ClaimAny,
    Claim,
    ListLeases,
    Ack,
    Nack,
    Extend,
    Bounds,
    Load,
    Trim,
    Forget,
    Topic,
    Topics,
    /// A random path (mostly matching no route).
    Raw,
}

pub(super) const ROUTES: &[Route] = &[
    Route::ProduceKeyed,
    Route::ProduceDirect,
    Route::Read,
    Route::Poll,
    Route::Commit,
    Route::PutCursor,
    Route::DeleteCursor,
    Route::Cursors,
    Route::ClaimAny,
    Route::Claim,
    Route::ListLeases,
    Route::Ack,
    Route::Nack,
    Route::Extend,
    Route::Bounds,
    Route::Load,
    Route::Trim,
    Route::Forget,
    Route::Topic,
    Route::Topics,
    Route::Raw,
];

impl Route {
    pub(super) fn method(self) -> Method {
        match self {
            Self::Read
            | Self::Poll
            | Self::Cursors
            | Self::ListLeases
            | Self::Bounds
            | Self::Load
            | Self::Topic
            | Self::Topics => Method::GET,
            Self::PutCursor => Method::PUT,
            Self::DeleteCursor => Method::DELETE,
            _ => Method::POST,
        }
    }

    pub(super) fn has_partition(self) -> bool {
        !matches!(
            self,
            Self::ProduceKeyed
                | Self::Poll
                | Self::Commit
                | Self::ClaimAny
                | Self::Topic
                | Self::Topics
                | Self::Raw
        )
    }

    pub(super) fn has_group(self) -> bool {
        matches!(
            self,
            Self::Poll
                | Self::Commit
                | Self::PutCursor
                | Self::DeleteCursor
                | Self::ClaimAny
                | Self::Claim
                | Self::ListLeases
                | Self::Ack
                | Self::Nack
                | Self::Extend
        )
    }

    /// The path, with every segment already percent-encoded.
    pub(super) fn path(self, t: &str, p: &str, g: &str, b: &str, raw: &str) -> String {
        match self {
            Self::ProduceKeyed => format!("/topics/{t}/records"),
            Self::ProduceDirect | Self::Read => format!("/topics/{t}/partitions/{p}/records"),
            Self::Poll => format!("/topics/{t}/groups/{g}/poll"),
            Self::Commit => format!("/topics/{t}/groups/{g}/commit"),
            Self::PutCursor | Self::DeleteCursor => {
                format!("/topics/{t}/partitions/{p}/cursors/{g}")
            }
            Self::Cursors => format!("/topics/{t}/partitions/{p}/cursors"),
            Self::ClaimAny => format!("/topics/{t}/groups/{g}/leases"),
            Self::Claim | Self::ListLeases => {
                format!("/topics/{t}/partitions/{p}/groups/{g}/leases")
            }
            Self::Ack => format!("/topics/{t}/partitions/{p}/groups/{g}/leases/{b}/ack"),
            Self::Nack => format!("/topics/{t}/partitions/{p}/groups/{g}/leases/{b}/nack"),
            Self::Extend => format!("/topics/{t}/partitions/{p}/groups/{g}/leases/{b}/extend"),
            Self::Bounds => format!("/topics/{t}/partitions/{p}/bounds"),
            Self::Load => format!("/topics/{t}/partitions/{p}/load"),
            Self::Trim => format!("/topics/{t}/partitions/{p}/trim"),
            Self::Forget => format!("/topics/{t}/partitions/{p}/cold/forget"),
            Self::Topic => format!("/topics/{t}"),
            Self::Topics => "/topics".to_owned(),
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
    pub(super) route: Route,
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
        let path = self.route.path(
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
