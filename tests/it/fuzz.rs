//! Robustness fuzzing with proptest (bounded, in process; cargo-fuzz is not used in CI):
//! arbitrary requests sent to every route of the REST server must answer a 2xx or a 4xx in the
//! contract's JSON error shape and create nothing on disk unless a write succeeded, and
//! corrupted cold segments must read back as truncation, never as different data.
//!
//! Proptest persistence files are off (`failure_persistence: None`); a failing case found by
//! a run is kept below as an explicit regression test. Runs are reproducible: the seed is
//! fixed unless `DURABILITY_FUZZ_SEED` names another, and `DURABILITY_FUZZ_CASES` sets the
//! number of cases of each fuzz test for a longer exploration.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::App;
use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::Method;
use actix_web::test as actix_test;
use durability::cold::{ColdStore, MemoryColdStore, SegmentKey};
use durability::config::{LeaseSettings, TopicSettings};
use durability::store::{
    AppendOutcome, ColdTier, NewRecord, Record, Retention, StoreError, SyncMode,
};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{
    Config as ProptestConfig, RngAlgorithm, TestCaseError, TestRng, TestRunner,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::common::{ReadNow, TestLog, TestStore, block_on, respond, stored_partitions};

/// The seed of the fuzz runs when `DURABILITY_FUZZ_SEED` does not name one: a fixed seed keeps
/// a CI run reproducible; set the variable to explore further.
const DEFAULT_SEED: u64 = 20_240_601;

/// The fuzz runs' seed: `DURABILITY_FUZZ_SEED` (an integer) or [`DEFAULT_SEED`].
fn fuzz_seed() -> u64 {
    std::env::var("DURABILITY_FUZZ_SEED")
        .ok()
        .and_then(|seed| seed.trim().parse().ok())
        .unwrap_or(DEFAULT_SEED)
}

/// `default` cases, or `DURABILITY_FUZZ_CASES` (an integer) for a longer exploration.
fn fuzz_cases(default: u32) -> u32 {
    std::env::var("DURABILITY_FUZZ_CASES")
        .ok()
        .and_then(|cases| cases.trim().parse().ok())
        .unwrap_or(default)
}

/// A proptest runner for `cases` cases from [`fuzz_seed`], with no persistence files.
fn runner(cases: u32) -> TestRunner {
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        max_global_rejects: cases * 4,
        ..ProptestConfig::default()
    };
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&fuzz_seed().to_le_bytes());
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed))
}

// =============================================================================================
// a. Request decoding
// =============================================================================================

/// Every error code of the contract, with the status it promises (`unavailable`, a 503, is
/// left out: bad input is never a server failure).
const ERROR_CODES: &[(&str, u16)] = &[
    ("invalid_request", 400),
    ("invalid_name", 400),
    ("batch_too_large", 400),
    ("record_too_large", 400),
    ("invalid_offset", 400),
    ("unauthorized", 401),
    ("unknown_partition", 404),
    ("not_found", 404),
    ("lease_not_held", 409),
    ("leases_disabled", 409),
    ("log_truncated", 410),
    ("payload_too_large", 413),
];

/// The partition count of every topic in the fuzzed server (the default).
const PARTITIONS: u32 = 8;
/// The server's body limit in the fuzz runs (small, so `413` is reachable).
const MAX_BODY_BYTES: usize = 2048;
/// The record limit in the fuzz runs.
const MAX_RECORD_BYTES: usize = 128;
/// The batch limit in the fuzz runs.
const MAX_BATCH_SIZE: usize = 4;
/// Longest `waitMs` a case may carry, so that no request waits for long.
const MAX_FUZZ_WAIT_MS: i64 = 20;

/// Which route a fuzz request targets (its method and path template).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
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

const ROUTES: &[Route] = &[
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
    fn method(self) -> Method {
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

    fn has_partition(self) -> bool {
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

    fn has_group(self) -> bool {
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
    fn path(self, t: &str, p: &str, g: &str, b: &str, raw: &str) -> String {
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
struct Segment {
    text: String,
    encode_all: bool,
}

impl Segment {
    fn encoded(&self) -> String {
        percent_encode(&self.text, self.encode_all)
    }
}

/// The query string of a fuzz request.
#[derive(Debug, Clone)]
enum Query {
    /// No `?` at all.
    Absent,
    /// `key=value` pairs, each side percent-encoded.
    Pairs(Vec<(String, String)>),
    /// A raw query string of URI-safe characters (malformed escapes included).
    Raw(String),
}

impl Query {
    fn encoded(&self) -> Option<String> {
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
struct Body(Vec<u8>);

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Body({:?})", String::from_utf8_lossy(&self.0))
    }
}

/// One fuzz request.
#[derive(Debug, Clone)]
struct FuzzRequest {
    route: Route,
    topic: Segment,
    partition: Segment,
    group: Segment,
    batch: Segment,
    raw_path: String,
    query: Query,
    body: Option<Body>,
    /// Targets one of the leases that the server handed out so far (this one of them, when
    /// there is any): its topic, partition, group and batch id replace the generated ones.
    held: Option<Index>,
}

/// A lease the server handed out: topic, partition, group, batch id.
type Held = (String, u32, String, String);

impl FuzzRequest {
    /// This request with the held lease it targets (if any) substituted.
    fn resolve(&self, held: &[Held]) -> Self {
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
    fn uri(&self) -> String {
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
fn percent_encode(text: &str, all: bool) -> String {
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
fn valid_topic(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The contract's group rule: 1 to 256 of `A-Z a-z 0-9 . _ - :`.
fn valid_group(name: &str) -> bool {
    (1..=256).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b))
}

/// A `{partition}` segment the contract accepts: a non-negative integer below the count.
fn valid_partition(segment: &str) -> Option<u32> {
    if segment.is_empty() || !segment.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    segment.parse::<u32>().ok().filter(|&p| p < PARTITIONS)
}

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// Strings that tend to break decoders.
const SPECIAL_TEXT: &[&str] = &[
    "",
    ".",
    "..",
    "../..",
    "/",
    "a/b",
    "../etc/passwd",
    "\0",
    "a\0b",
    "%",
    "%00",
    "%2F",
    "%%",
    " ",
    "+",
    "é",
    "日本語",
    "\u{feff}",
    "\u{10ffff}",
    "\u{202e}",
    "-",
    "_",
    ".hidden",
    "events/..",
    "null",
    "0",
    "-1",
    "\\",
    "\"",
    "?",
    "#",
    "&",
    "=",
];

/// Arbitrary text: unicode (NUL and controls included), special strings, very long strings.
fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => any::<String>(),
        2 => "[\\x00-\\x7f]{0,24}",
        3 => prop::sample::select(SPECIAL_TEXT).prop_map(str::to_owned),
        1 => "[a-z]{120,700}",
        1 => prop::collection::vec(any::<char>(), 100..400)
            .prop_map(|chars| chars.into_iter().collect()),
    ]
}

fn segment(text: impl Strategy<Value = String>) -> impl Strategy<Value = Segment> {
    (text, prop::bool::weighted(0.1)).prop_map(|(text, encode_all)| Segment { text, encode_all })
}

fn topic() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(&["events", "fresh", "noleases"][..]).prop_map(str::to_owned),
        2 => "[A-Za-z0-9_-][A-Za-z0-9._-]{0,16}",
        1 => "[a-z]{127,130}",
        4 => any_text(),
    ]
}

fn partition() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (0u32..10).prop_map(|p| p.to_string()),
        1 => any::<u32>().prop_map(|p| p.to_string()),
        2 => prop::sample::select(
            &[
                "", "-1", "+1", "01", "00", " 1", "1 ", "1e3", "0x1", "1.0", "4294967295",
                "4294967296", "99999999999999999999999", "\u{663}", "0\0",
            ][..]
        )
        .prop_map(str::to_owned),
        2 => any_text(),
    ]
}

fn group() -> impl Strategy<Value = String> {
    prop_oneof![
        5 => prop::sample::select(&["g1", "billing", "search:v2"][..]).prop_map(str::to_owned),
        2 => "[A-Za-z0-9._:-]{1,20}",
        1 => "[a-z]{255,258}",
        3 => any_text(),
    ]
}

fn batch() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
        3 => any_text(),
    ]
}

/// Huge integers (far beyond 64 bits), possibly negative.
fn huge_digits() -> impl Strategy<Value = String> {
    "-?[1-9][0-9]{18,40}"
}

/// The text of a JSON integer-ish value: small, negative, any 64-bit, huge, or not an
/// integer at all.
fn int_text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0i64..20).prop_map(|n| n.to_string()),
        2 => (-5i64..0).prop_map(|n| n.to_string()),
        2 => any::<i64>().prop_map(|n| n.to_string()),
        1 => any::<u64>().prop_map(|n| n.to_string()),
        2 => huge_digits(),
        2 => prop::sample::select(
            &[
                "1.5", "1e2", "-0", "0.0", "\"3\"", "null", "true", "[]", "{}",
                "9223372036854775807", "9223372036854775808", "-9223372036854775808",
                "-9223372036854775809", "18446744073709551615", "18446744073709551616",
            ][..]
        )
        .prop_map(str::to_owned),
    ]
}

/// The text of a query parameter value.
fn query_value() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (-5i64..200).prop_map(|n| n.to_string()),
        2 => any::<i64>().prop_map(|n| n.to_string()),
        2 => huge_digits(),
        2 => prop::sample::select(
            &[
                "", "1.5", "1e3", "-0", "+5", " 5", "5 ", "0x10", "NaN", "true", "null",
                "9223372036854775807", "9223372036854775808", "-9223372036854775808",
                "18446744073709551616",
            ][..]
        )
        .prop_map(str::to_owned),
        2 => any_text(),
    ]
}

/// A value that is `waitMs` and fits `i64` is brought into `0..=MAX_FUZZ_WAIT_MS` when
/// positive, so that no case waits for long.
fn short_wait(key: &str, value: String) -> String {
    match value.parse::<i64>() {
        Ok(wait) if key == "waitMs" && wait > MAX_FUZZ_WAIT_MS => {
            (wait % (MAX_FUZZ_WAIT_MS + 1)).to_string()
        }
        _ => value,
    }
}

fn query() -> impl Strategy<Value = Query> {
    let key = prop_oneof![
        6 => prop::sample::select(&["from", "limit", "waitMs"][..]).prop_map(str::to_owned),
        1 => "[a-zA-Z]{1,8}",
        1 => any_text(),
    ];
    let pair = (key, query_value()).prop_map(|(key, value)| {
        let value = short_wait(&key, value);
        (key, value)
    });
    prop_oneof![
        2 => Just(Query::Absent),
        6 => prop::collection::vec(pair, 0..5).prop_map(Query::Pairs),
        2 => "[A-Za-z0-9=&%+;._~,:!*()'$/?@-]{0,60}".prop_map(Query::Raw),
    ]
}

/// JSON texts that `serde_json::Value` cannot hold (see [`json_text`]).
const POISON: &[&str] = &["1E400", "-1e999", "\"\\ud800\"", "\"x\\udc00\""];

/// Field names that matter to some route, for random JSON objects.
const FIELD_NAMES: &[&str] = &[
    "partitionKey",
    "payload",
    "key",
    "offset",
    "offsets",
    "delayMs",
    "before",
    "0",
    "1",
    "7",
    "8",
    "-1",
    "",
    "x",
];

fn json_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// The text of an arbitrary JSON value (nested arrays and objects, strings with any
/// character, integers of any size, floats, booleans, nulls).
///
/// Includes values that `serde_json::Value` cannot hold ([`POISON`]: a lone surrogate escape,
/// a number out of `f64` range); such payloads once made every later read of their partition
/// panic (pinned by `payload_that_json_values_cannot_hold_never_panics_a_reader`).
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        huge_digits(),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| format!("{x:?}")),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| format!("{x:e}")),
        any::<String>().prop_map(|s| json_string(&s)),
        prop::sample::select(FIELD_NAMES).prop_map(json_string),
        prop::sample::select(POISON).prop_map(str::to_owned),
        prop::sample::select(
            &[
                "-0",
                "1.0",
                "1E300",
                "-1e-300",
                "\"\\u0000\"",
                "\"\\ud83d\\ude00\""
            ][..]
        )
        .prop_map(str::to_owned),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        let key = prop_oneof![
            3 => prop::sample::select(FIELD_NAMES).prop_map(json_string),
            1 => any::<String>().prop_map(|s| json_string(&s)),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5)
                .prop_map(|items| format!("[{}]", items.join(","))),
            prop::collection::vec((key, inner), 0..5).prop_map(|entries| {
                let entries: Vec<_> = entries.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", entries.join(","))
            }),
        ]
    })
}

/// The text of a JSON object with these fields, each present with probability 0.9, and
/// sometimes an unknown field.
fn object(fields: Vec<(&'static str, BoxedStrategy<String>)>) -> BoxedStrategy<String> {
    let present: Vec<_> = fields
        .into_iter()
        .map(|(name, value)| prop::option::weighted(0.9, value.prop_map(move |v| (name, v))))
        .collect();
    let extra = prop::option::weighted(0.1, json_text());
    (present, extra)
        .prop_map(|(present, extra)| {
            let mut entries: Vec<String> = present
                .into_iter()
                .flatten()
                .map(|(name, value)| format!("{}:{value}", json_string(name)))
                .collect();
            if let Some(extra) = extra {
                entries.push(format!("\"unknownField\":{extra}"));
            }
            format!("{{{}}}", entries.join(","))
        })
        .boxed()
}

/// A value of the right type most of the time, any JSON value otherwise.
fn or_any(good: impl Strategy<Value = String> + 'static) -> BoxedStrategy<String> {
    prop_oneof![8 => good, 2 => json_text()].boxed()
}

fn dedup_key() -> BoxedStrategy<String> {
    or_any(prop_oneof![
        6 => (0u32..20).prop_map(|n| json_string(&format!("k-{n}"))),
        1 => Just(json_string("")),
        1 => Just(json_string(&"k".repeat(1025))),
        1 => Just("null".to_owned()),
        2 => any_text().prop_map(|s| json_string(&s)),
    ])
}

fn payload() -> BoxedStrategy<String> {
    prop_oneof![
        9 => json_text(),
        1 => Just(json_string(&"x".repeat(MAX_RECORD_BYTES + 10))),
    ]
    .boxed()
}

/// A body shaped like the route's (each field right or wrong), as JSON text.
fn shaped_body(route: Route) -> BoxedStrategy<String> {
    let array = |item: BoxedStrategy<String>| {
        prop::collection::vec(item, 0..7)
            .prop_map(|items| format!("[{}]", items.join(",")))
            .boxed()
    };
    match route {
        Route::ProduceKeyed => array(object(vec![
            (
                "partitionKey",
                or_any(prop_oneof![
                    (0u32..50).prop_map(|n| json_string(&format!("user-{n}"))),
                    any_text().prop_map(|s| json_string(&s)),
                ]),
            ),
            ("payload", payload()),
            ("key", dedup_key()),
        ])),
        Route::ProduceDirect => array(object(vec![("payload", payload()), ("key", dedup_key())])),
        Route::Commit => {
            let partition_key = prop_oneof![
                4 => prop::sample::select(&["0", "1", "7", "8", "-1", "01", "x", "", "4294967296"][..])
                    .prop_map(str::to_owned),
                1 => any_text(),
            ];
            let offsets = prop::collection::vec((partition_key, or_any(int_text())), 0..4)
                .prop_map(|entries| {
                    let entries: Vec<_> = entries
                        .iter()
                        .map(|(k, v)| format!("{}:{v}", json_string(k)))
                        .collect();
                    format!("{{{}}}", entries.join(","))
                });
            object(vec![("offsets", or_any(offsets))])
        }
        Route::PutCursor => object(vec![("offset", or_any(int_text()))]),
        Route::Nack => prop_oneof![
            1 => Just(String::new()),
            1 => Just("  \n".to_owned()),
            4 => object(vec![("delayMs", or_any(int_text()))]),
        ]
        .boxed(),
        Route::Forget => object(vec![("before", or_any(int_text()))]),
        _ => json_text().boxed(),
    }
}

/// A change to a body's bytes.
#[derive(Debug, Clone)]
enum Mutation {
    Truncate(Index),
    InsertByte(Index, u8),
    FlipBits(Index, u8),
    DeleteRange(Index, usize),
    ReplaceDigits(Index, String),
    Concat,
    WrapInArray,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::InsertByte(i, b)),
        (any::<Index>(), 1u8..=255).prop_map(|(i, b)| Mutation::FlipBits(i, b)),
        (any::<Index>(), 1usize..8).prop_map(|(i, n)| Mutation::DeleteRange(i, n)),
        (
            any::<Index>(),
            prop_oneof![huge_digits(), any::<i64>().prop_map(|n| n.to_string())]
        )
            .prop_map(|(i, d)| Mutation::ReplaceDigits(i, d)),
        Just(Mutation::Concat),
        Just(Mutation::WrapInArray),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutation: &Mutation) -> Vec<u8> {
    let len = bytes.len();
    match mutation {
        Mutation::Truncate(at) => {
            if len > 0 {
                bytes.truncate(at.index(len));
            }
        }
        Mutation::InsertByte(at, byte) => bytes.insert(at.index(len + 1), *byte),
        Mutation::FlipBits(at, mask) => {
            if len > 0 {
                bytes[at.index(len)] ^= mask;
            }
        }
        Mutation::DeleteRange(at, count) => {
            if len > 0 {
                let start = at.index(len);
                bytes.drain(start..(start + count).min(len));
            }
        }
        Mutation::ReplaceDigits(which, digits) => {
            let mut runs = Vec::new();
            let mut i = 0;
            while i < len {
                if bytes[i].is_ascii_digit() {
                    let start = i;
                    while i < len && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                    runs.push((start, i));
                } else {
                    i += 1;
                }
            }
            if !runs.is_empty() {
                let (start, end) = runs[which.index(runs.len())];
                bytes.splice(start..end, digits.bytes());
            }
        }
        Mutation::Concat => bytes.extend(bytes.clone()),
        Mutation::WrapInArray => {
            bytes.insert(0, b'[');
            bytes.push(b']');
        }
    }
    bytes
}

fn body(route: Route) -> impl Strategy<Value = Option<Body>> {
    let big = (0usize..3).prop_map(|kind| {
        let bytes = match kind {
            0 => format!("[{}{{\"payload\":1}}]", "{\"payload\":1},".repeat(200)),
            1 => format!(
                "{{\"offset\":1,\"pad\":\"{}\"}}",
                "x".repeat(MAX_BODY_BYTES)
            ),
            _ => " ".repeat(MAX_BODY_BYTES + 1),
        };
        Some(Body(bytes.into_bytes()))
    });
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(Body(Vec::new()))),
        2 => prop::collection::vec(any::<u8>(), 0..200).prop_map(|b| Some(Body(b))),
        2 => json_text().prop_map(|t| Some(Body(t.into_bytes()))),
        8 => shaped_body(route).prop_map(|t| Some(Body(t.into_bytes()))),
        4 => (shaped_body(route), prop::collection::vec(mutation(), 1..4)).prop_map(|(t, ms)| {
            Some(Body(ms.iter().fold(t.into_bytes(), mutate)))
        }),
        1 => big,
    ]
}

fn raw_path() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(
            &[
                "/",
                "//",
                "/topics/",
                "/topics//records",
                "/topics/events/partitions//records",
                "/topics/events/partitions/0/records/",
                "/topics/events/partitions/0",
                "/topics/events/groups//poll",
                "/TOPICS",
                "/topics/events/../events/partitions/0/bounds",
                "/topics/events/partitions/0/groups/g1/leases/",
                "/nope",
            ][..]
        )
        .prop_map(str::to_owned),
        "/[a-z0-9/%._-]{0,40}",
    ]
}

/// An arbitrary request: every part random, shaped or not.
fn arbitrary_request() -> impl Strategy<Value = FuzzRequest> {
    prop::sample::select(ROUTES).prop_flat_map(|route| {
        (
            segment(topic()),
            segment(partition()),
            segment(group()),
            segment(batch()),
            raw_path(),
            query(),
            body(route),
            prop::option::weighted(0.2, any::<Index>()),
        )
            .prop_map(
                move |(topic, partition, group, batch, raw_path, query, body, held)| FuzzRequest {
                    route,
                    topic,
                    partition,
                    group,
                    batch,
                    raw_path,
                    query,
                    body,
                    held,
                },
            )
    })
}

/// A body the route accepts (when the offsets and limits fit the log's state), as JSON text.
fn valid_body(route: Route) -> BoxedStrategy<String> {
    let key = prop::option::of((0u32..30).prop_map(|n| json_string(&format!("k-{n}"))));
    match route {
        Route::ProduceKeyed => {
            prop::collection::vec(((0u32..50), json_text(), key), 1..=MAX_BATCH_SIZE)
                .prop_map(|events| {
                    let events: Vec<_> = events
                .into_iter()
                .map(|(user, payload, key)| match key {
                    Some(key) => format!(
                        r#"{{"partitionKey":"user-{user}","payload":{payload},"key":{key}}}"#
                    ),
                    None => format!(r#"{{"partitionKey":"user-{user}","payload":{payload}}}"#),
                })
                .collect();
                    format!("[{}]", events.join(","))
                })
                .boxed()
        }
        Route::ProduceDirect => prop::collection::vec((json_text(), key), 1..=MAX_BATCH_SIZE)
            .prop_map(|records| {
                let records: Vec<_> = records
                    .into_iter()
                    .map(|(payload, key)| match key {
                        Some(key) => format!(r#"{{"payload":{payload},"key":{key}}}"#),
                        None => format!(r#"{{"payload":{payload}}}"#),
                    })
                    .collect();
                format!("[{}]", records.join(","))
            })
            .boxed(),
        Route::Commit => prop::collection::btree_map(0..PARTITIONS, 0i64..6, 1..4)
            .prop_map(|offsets| {
                let offsets: Vec<_> = offsets
                    .iter()
                    .map(|(partition, offset)| format!(r#""{partition}":{offset}"#))
                    .collect();
                format!(r#"{{"offsets":{{{}}}}}"#, offsets.join(","))
            })
            .boxed(),
        Route::PutCursor => (0i64..6)
            .prop_map(|offset| format!(r#"{{"offset":{offset}}}"#))
            .boxed(),
        Route::Nack => prop_oneof![
            Just(String::new()),
            Just("{}".to_owned()),
            (0i64..100).prop_map(|delay| format!(r#"{{"delayMs":{delay}}}"#)),
        ]
        .boxed(),
        Route::Forget => (0i64..10)
            .prop_map(|before| format!(r#"{{"before":{before}}}"#))
            .boxed(),
        _ => Just(String::new()).boxed(),
    }
}

/// Query parameters in range.
fn valid_query() -> impl Strategy<Value = Query> {
    (
        prop::option::of(0u64..6),
        prop::option::of(1u64..6),
        prop::option::of(0..=MAX_FUZZ_WAIT_MS / 4),
    )
        .prop_map(|(from, limit, wait)| {
            let mut pairs = Vec::new();
            if let Some(from) = from {
                pairs.push(("from".to_owned(), from.to_string()));
            }
            if let Some(limit) = limit {
                pairs.push(("limit".to_owned(), limit.to_string()));
            }
            if let Some(wait) = wait {
                pairs.push(("waitMs".to_owned(), wait.to_string()));
            }
            Query::Pairs(pairs)
        })
}

/// A well-formed request: known names, an index in range, a valid body (mutated once in a
/// while), targeting a held lease most of the time, so that the success paths are fuzzed too.
fn well_formed_request() -> impl Strategy<Value = FuzzRequest> {
    let known = |names: &'static [&'static str]| {
        segment(prop::sample::select(names).prop_map(str::to_owned))
    };
    prop::sample::select(ROUTES).prop_flat_map(move |route| {
        let body = prop_oneof![
            3 => valid_body(route).prop_map(|t| Some(Body(t.into_bytes()))),
            1 => (valid_body(route), mutation())
                .prop_map(|(t, m)| Some(Body(mutate(t.into_bytes(), &m)))),
        ];
        (
            known(&["events", "fresh", "noleases"]),
            segment((0..PARTITIONS).prop_map(|p| p.to_string())),
            known(&["g1", "billing", "search:v2"]),
            segment(batch()),
            valid_query(),
            body,
            prop::option::weighted(0.8, any::<Index>()),
        )
            .prop_map(move |(topic, partition, group, batch, query, body, held)| {
                FuzzRequest {
                    route,
                    topic,
                    partition,
                    group,
                    batch,
                    raw_path: "/".to_owned(),
                    query,
                    body,
                    held,
                }
            })
    })
}

fn fuzz_request() -> impl Strategy<Value = FuzzRequest> {
    prop_oneof![6 => arbitrary_request(), 4 => well_formed_request()]
}

// ---------------------------------------------------------------------------------------------
// The server under fuzz
// ---------------------------------------------------------------------------------------------

/// The partitions that 2xx writes have created (or that setup wrote), by topic.
#[derive(Debug, Default)]
struct Written(BTreeSet<(String, u32)>);

impl Written {
    /// Notes what a 2xx answer to `request` may have created.
    fn note(&mut self, request: &FuzzRequest, answer: &Value) {
        let topic = &request.topic.text;
        match request.route {
            Route::ProduceKeyed => {
                for record in answer["records"].as_array().into_iter().flatten() {
                    if let Some(p) = record["partition"].as_u64() {
                        self.0.insert((topic.clone(), p as u32));
                    }
                }
            }
            Route::ProduceDirect | Route::PutCursor => {
                if let Ok(p) = request.partition.text.parse::<u32>() {
                    self.0.insert((topic.clone(), p));
                }
            }
            Route::Commit => {
                for key in answer["cursors"]
                    .as_object()
                    .into_iter()
                    .flat_map(|o| o.keys())
                {
                    if let Ok(p) = key.parse::<u32>() {
                        self.0.insert((topic.clone(), p));
                    }
                }
            }
            _ => {}
        }
    }

    /// Checks that every partition stored under `data_dir` is a written one.
    fn check_disk(&self, data_dir: &Path) -> Result<(), String> {
        for (topic, index) in stored_partitions(data_dir) {
            if !self.0.contains(&(topic.clone(), index)) {
                return Err(format!(
                    "partition {topic}:{index} is stored although no successful write created it \
                     (written: {:?})",
                    self.0
                ));
            }
        }
        Ok(())
    }
}

/// Checks one answer against the contract: a 2xx, or a 4xx whose body is exactly
/// `{"error": {"code", "message", ...}}` with a contract code matching the status; never a
/// 2xx for a bad name or partition.
fn check_answer(request: &FuzzRequest, status: u16, answer: &Value) -> Result<(), String> {
    match status {
        200..=299 => {
            if status != 204 && !(answer.is_object()) {
                return Err(format!(
                    "{status} with a body that is not a JSON object: {answer}"
                ));
            }
            let route = request.route;
            let bad_name = route != Route::Topics
                && route != Route::Raw
                && (!valid_topic(&request.topic.text)
                    || (route.has_group() && !valid_group(&request.group.text))
                    || (route.has_partition()
                        && valid_partition(&request.partition.text).is_none()));
            if bad_name {
                return Err(format!("{status} for a bad name or partition: {answer}"));
            }
            Ok(())
        }
        400..=499 => {
            let object = answer
                .as_object()
                .ok_or_else(|| format!("{status} with a body that is not JSON: {answer}"))?;
            if object.len() != 1 || !object.contains_key("error") {
                return Err(format!("{status} not in the error shape: {answer}"));
            }
            let error = &answer["error"];
            let code = error["code"]
                .as_str()
                .ok_or_else(|| format!("{status} without error.code: {answer}"))?;
            let Some(&(_, expected)) = ERROR_CODES.iter().find(|(c, _)| *c == code) else {
                return Err(format!(
                    "{status} with a code outside the contract: {answer}"
                ));
            };
            if expected != status {
                return Err(format!(
                    "{code} answered {status}, the contract says {expected}"
                ));
            }
            if error["message"].as_str().is_none_or(str::is_empty) {
                return Err(format!("{status} without a message: {answer}"));
            }
            Ok(())
        }
        _ => Err(format!("status {status} for a bad input: {answer}")),
    }
}

/// A test log for the request fuzzing: small limits, fast commits, and a topic with leases
/// disabled.
fn fuzz_log() -> TestLog {
    TestLog::with(|config| {
        config.server.max_body_bytes = MAX_BODY_BYTES;
        config.log.max_record_bytes = MAX_RECORD_BYTES;
        config.log.max_batch_size = MAX_BATCH_SIZE;
        config.leases.max_parallelism = 3;
        config.partitions.idle_stop_ms = 1000;
        config.storage.sync = SyncMode::Normal;
        let noleases = TopicSettings {
            log: config.log.clone(),
            retention: config.retention.clone(),
            leases: LeaseSettings {
                enabled: false,
                ..config.leases.clone()
            },
        };
        config.topics.insert("noleases".into(), noleases);
    })
}

/// Writes the state the fuzz requests start from: records in `events:0` and `events:1`, a
/// cursor, and a lease held by `g1` on `events:0` (its batch id is returned).
async fn seed_fuzz_log(t: &TestLog) -> String {
    for partition in [0, 1] {
        let records = (0..3)
            .map(|n| NewRecord::keyed(format!("seed-{n}"), format!("{{\"n\":{n}}}")))
            .collect();
        let appended = t.log.append("events", partition, records).await.unwrap();
        assert!(matches!(appended.outcome, AppendOutcome::Appended { .. }));
    }
    t.log.commit("events", 1, "billing", 1).await.unwrap();
    let lease = t.log.lease("events", 0, "g1", Some(2)).await.unwrap();
    lease.expect("a range to lease").batch_id
}

/// The URI of `request`, or why the case is not sent: a bad URI is a fuzzer bug, and a raw
/// query that still spells a long `waitMs` is not what this fuzzing is about.
fn prepare(request: &FuzzRequest) -> Result<String, TestCaseError> {
    let uri = request.uri();
    if actix_web::http::Uri::try_from(uri.as_str()).is_err() {
        return Err(TestCaseError::fail(format!(
            "the fuzzer built a bad URI {uri:?}"
        )));
    }
    if let Some(query) = uri.split_once('?').map(|(_, q)| q)
        && let Ok(parsed) = actix_web::web::Query::<HashMap<String, String>>::from_query(query)
        && parsed
            .get("waitMs")
            .and_then(|w| w.parse::<i64>().ok())
            .is_some_and(|w| w > MAX_FUZZ_WAIT_MS)
    {
        return Err(TestCaseError::reject("a long waitMs"));
    }
    Ok(uri)
}

/// The test request for `request` at `uri`.
fn build(request: &FuzzRequest, uri: &str) -> actix_test::TestRequest {
    let mut builder = actix_test::TestRequest::default()
        .method(request.route.method())
        .uri(uri);
    if let Some(body) = &request.body {
        builder = builder
            .insert_header(("content-type", "application/json"))
            .set_payload(body.0.clone());
    }
    builder
}

/// Checks the answer (if any came) and the data folder after `request`.
fn conclude(
    request: &FuzzRequest,
    uri: &str,
    answer: Option<(u16, Value)>,
    written: &RefCell<Written>,
    data_dir: &Path,
) -> Result<(), TestCaseError> {
    let method = request.route.method();
    let Some((status, answer)) = answer else {
        return Err(TestCaseError::fail(format!(
            "{method} {uri}: no answer within 10 s"
        )));
    };
    check_answer(request, status, &answer)
        .map_err(|why| TestCaseError::fail(format!("{method} {uri}: {why}")))?;
    if (200..300).contains(&status) {
        written.borrow_mut().note(request, &answer);
    }
    written
        .borrow()
        .check_disk(data_dir)
        .map_err(|why| TestCaseError::fail(format!("after {method} {uri}: {why}")))
}

/// Runs `cases` fuzz requests against a fresh server; returns
/// how many requests were sent.
fn fuzz_requests(cases: u32) -> u64 {
    let system = actix::System::new();
    let t = system.block_on(async { fuzz_log() });
    let seeded_batch = system.block_on(seed_fuzz_log(&t));
    let held: RefCell<Vec<Held>> =
        RefCell::new(vec![("events".into(), 0, "g1".into(), seeded_batch)]);
    let app = system.block_on(actix_test::init_service(
        App::new().configure(durability::http::service(t.log.clone())),
    ));
    let data_dir = t.config.storage.data_dir.clone();
    let mut written = Written::default();
    written.0.insert(("events".into(), 0));
    written.0.insert(("events".into(), 1));
    let written = RefCell::new(written);
    let sent = Cell::new(0u64);
    let statuses: RefCell<BTreeMap<(String, u16), u64>> = RefCell::default();
    let run_case = |request: &FuzzRequest| -> Result<(), TestCaseError> {
        let request = &request.resolve(&held.borrow());
        let uri = prepare(request)?;
        sent.set(sent.get() + 1);
        let answer = system.block_on(async {
            let call = respond(&app, build(request, &uri).to_request());
            actix::clock::timeout(Duration::from_secs(10), call)
                .await
                .ok()
        });
        if let Some((200, body)) = &answer
            && let Some(batch) = body["batchId"].as_str()
        {
            let partition = match request.route {
                Route::ClaimAny => body["partition"].as_u64().map(|p| p as u32),
                _ => request.partition.text.parse().ok(),
            };
            if let Some(partition) = partition {
                let mut held = held.borrow_mut();
                held.push((
                    request.topic.text.clone(),
                    partition,
                    request.group.text.clone(),
                    batch.to_owned(),
                ));
                if held.len() > 16 {
                    held.remove(0);
                }
            }
        }
        if let Some((status, _)) = &answer {
            *statuses
                .borrow_mut()
                .entry((format!("{:?}", request.route), *status))
                .or_default() += 1;
        }
        conclude(request, &uri, answer, &written, &data_dir)
    };
    let mut runner = runner(cases);
    if let Err(err) = runner.run(&fuzz_request(), |request| run_case(&request)) {
        panic!("{err}");
    }
    // Anything started lazily by the requests has had its chance to create files.
    system.block_on(async {
        t.log.shutdown().await.unwrap();
    });
    if let Err(why) = written.borrow().check_disk(&data_dir) {
        panic!("after the run: {why}");
    }
    let mut summary: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for ((route, status), count) in statuses.into_inner() {
        summary
            .entry(route)
            .or_default()
            .push(format!("{status}x{count}"));
    }
    for (route, counts) in summary {
        eprintln!("fuzz:   {route}: {}", counts.join(" "));
    }
    sent.get()
}

/// Arbitrary bodies (random bytes, random JSON with huge and negative integers, floats,
/// nulls, nesting, and mutations of well-shaped bodies), query strings and path segments
/// (`..`, encoded `/`, NUL, unicode, very long) sent to every route: the server never panics
/// or hangs, answers 2xx or 4xx in the contract's JSON error shape with a contract code,
/// never 5xx, never 2xx for a bad name, and creates no partition that no successful write
/// created.
#[test]
fn fuzz_every_route_with_arbitrary_requests() {
    let started = Instant::now();
    let sent = fuzz_requests(fuzz_cases(6000));
    eprintln!(
        "fuzz: {sent} HTTP requests (seed {}) in {:.1} s",
        fuzz_seed(),
        started.elapsed().as_secs_f64()
    );
}

// =============================================================================================
// b. Segment decoding
// =============================================================================================

/// Records per segment (the store's `max_batch_size`, so also its page size).
const SEGMENT_BATCH: usize = 4;
/// Records appended per case: with `max_records` 2, the 2 hot records left by the previous
/// case and the first 6 of these go cold as two fresh segments of 4.
const CASE_RECORDS: u64 = 8;

/// A cold segment: its key, its original bytes and the offsets it holds.
type ColdSegment = (SegmentKey, Vec<u8>, std::ops::RangeInclusive<u64>);

/// A partition flushing to a [`MemoryColdStore`], and every record it was given.
///
/// Each case works on two fresh segments made for it (never read before, so never in the
/// store's cache of decoded segments): no reopening, no state shared between cases.
struct Segmented {
    store: TestStore,
    cold: Arc<MemoryColdStore>,
    /// Every record appended, by offset, as first read back from the hot window.
    originals: BTreeMap<u64, Record>,
    appended: u64,
}

impl Segmented {
    fn new() -> Self {
        let cold = Arc::new(MemoryColdStore::new());
        let tier = ColdTier {
            store: cold.clone() as Arc<dyn ColdStore>,
            prefix: "segments".into(),
            topic: "events".into(),
            partition: 0,
        };
        let store = TestStore::with(|options| {
            options
                .max_batch_size(SEGMENT_BATCH)
                .sync(SyncMode::Normal)
                .retention(Retention {
                    max_records: Some(2),
                    ..Retention::default()
                })
                .cold(tier)
        });
        let mut segmented = Self {
            store,
            cold,
            originals: BTreeMap::new(),
            appended: 0,
        };
        segmented.append(2);
        segmented
    }

    /// Appends `count` records (every other one with a deduplication key) and notes them as
    /// read back from the hot window.
    fn append(&mut self, count: u64) {
        let batch: Vec<NewRecord> = (self.appended..self.appended + count)
            .map(|n| {
                let payload = serde_json::json!({"n": n, "text": format!("record \"{n}\" é")});
                if n % 2 == 0 {
                    NewRecord::keyed(format!("key-{n}"), payload.to_string())
                } else {
                    NewRecord::new(payload.to_string())
                }
            })
            .collect();
        self.appended += count;
        for chunk in batch.chunks(SEGMENT_BATCH) {
            crate::common::append_ok(&self.store.store, chunk);
        }
        let bounds = self.store.store.bounds().unwrap();
        let mut from = bounds.hot_offset;
        while from < bounds.next_offset {
            let page = self.store.store.read_now(Some(from), None).unwrap();
            from = page.next_offset;
            for record in page.records {
                self.originals.insert(record.offset, record);
            }
        }
    }

    /// Appends and trims: the two fresh segments that trim made, in offset order.
    fn fresh_segments(&mut self) -> [ColdSegment; 2] {
        self.append(CASE_RECORDS);
        let hot = self.store.store.bounds().unwrap().hot_offset;
        let objects = self.cold.len();
        assert_eq!(block_on(self.store.store.trim()).unwrap(), CASE_RECORDS);
        assert_eq!(self.cold.len(), objects + 2, "trim made two segments");
        let batch = SEGMENT_BATCH as u64;
        [hot, hot + batch].map(|first| {
            let last = first + batch - 1;
            let key = SegmentKey::new("segments", "events", 0, first, last);
            let bytes = block_on(self.cold.get(&key))
                .unwrap()
                .unwrap_or_else(|| panic!("no segment {key}"));
            (key, bytes, first..=last)
        })
    }

    /// Replaces the object under `key` with `bytes` (or removes it), through the trait.
    fn install(&self, key: &SegmentKey, bytes: Option<&[u8]>) {
        block_on(self.cold.delete(key)).unwrap();
        if let Some(bytes) = bytes {
            block_on(self.cold.put(key, bytes)).unwrap();
        }
    }

    /// Pages through the partition from `from` to its end: every record returned must be the
    /// original one at its offset, and the offsets that cannot be read (truncation) are
    /// returned. Any other error, or an empty page before the end, is a failure.
    fn read_through(&self, mut from: u64) -> Result<BTreeSet<u64>, String> {
        let store = &self.store.store;
        let end = store
            .bounds()
            .map_err(|err| format!("bounds: {err:?}"))?
            .next_offset;
        let mut lost = BTreeSet::new();
        while from < end {
            match store.read_now(Some(from), None) {
                Ok(page) => {
                    if page.records.is_empty() {
                        return Err(format!("an empty page at {from} before the end {end}"));
                    }
                    for (expected_offset, record) in (from..).zip(&page.records) {
                        let original = self.originals.get(&expected_offset);
                        if Some(record) != original {
                            return Err(format!(
                                "read from {from}: got {record:?}, the original at \
                                 {expected_offset} is {original:?}"
                            ));
                        }
                    }
                    if page.next_offset != from + page.records.len() as u64 {
                        return Err(format!("page from {from} has next {}", page.next_offset));
                    }
                    from = page.next_offset;
                }
                Err(StoreError::Truncated {
                    requested_offset,
                    oldest_offset,
                }) => {
                    if requested_offset != from || oldest_offset <= from {
                        return Err(format!(
                            "read from {from}: Truncated {{ {requested_offset}, {oldest_offset} }}"
                        ));
                    }
                    lost.extend(from..oldest_offset);
                    from = oldest_offset;
                }
                Err(err) => return Err(format!("read from {from}: {err:?}")),
            }
        }
        Ok(lost)
    }
}

/// A corruption of a segment object.
#[derive(Debug, Clone)]
enum Corruption {
    /// XORs bytes at these positions with these non-zero masks.
    Flip(Vec<(Index, u8)>),
    /// Keeps only the first bytes.
    Truncate(Index),
    /// Adds garbage at the end.
    Append(Vec<u8>),
    /// Replaces the whole object with random bytes.
    Replace(Vec<u8>),
    /// Puts the checksum of the (current) body in the header, as a writer that re-hashed a
    /// changed body would.
    RehashHeader,
    /// Puts the other segment's checksum in the header.
    OtherChecksum,
    /// Replaces the object with the other segment's bytes.
    OtherSegment,
    /// Changes a byte inside the JSON body, then re-hashes the header.
    EditBodyAndRehash(usize, u8),
    /// Removes the object.
    Missing,
}

fn corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        4 => prop::collection::vec((any::<Index>(), 1u8..=255), 1..4).prop_map(Corruption::Flip),
        3 => any::<Index>().prop_map(Corruption::Truncate),
        2 => prop::collection::vec(any::<u8>(), 1..64).prop_map(Corruption::Append),
        1 => prop::collection::vec(any::<u8>(), 0..300).prop_map(Corruption::Replace),
        1 => Just(Corruption::RehashHeader),
        1 => Just(Corruption::OtherChecksum),
        1 => Just(Corruption::OtherSegment),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Corruption::EditBodyAndRehash(i, b)),
        1 => Just(Corruption::Missing),
    ]
}

/// `header line` and `body` of segment bytes (the header without its newline).
fn split_segment(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    Some((&bytes[..newline], &bytes[newline + 1..]))
}

fn with_header_checksum(bytes: &[u8], checksum: &str) -> Vec<u8> {
    match split_segment(bytes) {
        Some((_, body)) => {
            let mut out = format!("durability-segment v1 {checksum}\n").into_bytes();
            out.extend_from_slice(body);
            out
        }
        None => bytes.to_vec(),
    }
}

fn sha256_of(body: &[u8]) -> String {
    format!("sha256={}", hex::encode(Sha256::digest(body)))
}

/// Applies `corruption` to `bytes` (`None`: the object is removed); `other` is the other
/// segment's original bytes.
fn corrupt(mut bytes: Vec<u8>, corruption: &Corruption, other: &[u8]) -> Option<Vec<u8>> {
    let len = bytes.len();
    match corruption {
        Corruption::Flip(flips) => {
            if len > 0 {
                for (at, mask) in flips {
                    bytes[at.index(len)] ^= mask;
                }
            }
        }
        Corruption::Truncate(at) => bytes.truncate(at.index(len.max(1))),
        Corruption::Append(garbage) => bytes.extend_from_slice(garbage),
        Corruption::Replace(random) => bytes = random.clone(),
        Corruption::RehashHeader => {
            if let Some((_, body)) = split_segment(&bytes) {
                let checksum = sha256_of(body);
                bytes = with_header_checksum(&bytes, &checksum);
            }
        }
        Corruption::OtherChecksum => {
            if let Some((header, _)) = split_segment(other) {
                let header = String::from_utf8_lossy(header).into_owned();
                let checksum = header.rsplit(' ').next().unwrap_or_default().to_owned();
                bytes = with_header_checksum(&bytes, &checksum);
            }
        }
        Corruption::OtherSegment => bytes = other.to_vec(),
        Corruption::EditBodyAndRehash(at, byte) => {
            if let Some((_, body)) = split_segment(&bytes) {
                let mut body = body.to_vec();
                if !body.is_empty() {
                    let i = at % body.len();
                    body[i] = *byte;
                }
                let checksum = sha256_of(&body);
                let mut out = format!("durability-segment v1 {checksum}\n").into_bytes();
                out.extend_from_slice(&body);
                bytes = out;
            }
        }
        Corruption::Missing => return None,
    }
    Some(bytes)
}

/// One corruption case: which of the two fresh segments, the corruptions applied in turn,
/// and where reading starts (relative to the first fresh segment).
#[derive(Debug, Clone)]
struct CorruptionCase {
    segment: usize,
    corruptions: Vec<Corruption>,
    from: u64,
}

fn corruption_case() -> impl Strategy<Value = CorruptionCase> {
    (
        0usize..2,
        prop::collection::vec(corruption(), 1..4),
        prop_oneof![3 => Just(0u64), 1 => 0..CASE_RECORDS + 2],
    )
        .prop_map(|(segment, corruptions, from)| CorruptionCase {
            segment,
            corruptions,
            from,
        })
}

/// Makes two fresh segments, corrupts one, and checks the reads from `from` on: the damaged
/// segment's offsets (and only those) read as truncation, every other offset (the other
/// segment, the hot window) reads back as the original record. Returns whether the
/// corruption changed the segment at all.
fn check_corruption(segmented: &mut Segmented, case: &CorruptionCase) -> Result<bool, String> {
    let fresh = segmented.fresh_segments();
    let (key, original, range) = fresh[case.segment].clone();
    let other = &fresh[1 - case.segment].1;
    let corrupted = case
        .corruptions
        .iter()
        .try_fold(original.clone(), |bytes, c| corrupt(bytes, c, other));
    let damaged = corrupted.as_deref() != Some(&original[..]);
    segmented.install(&key, corrupted.as_deref());
    let from = fresh[0].2.start() + case.from;
    let lost = segmented.read_through(from)?;
    let expected: BTreeSet<u64> = if damaged {
        range.filter(|offset| *offset >= from).collect()
    } else {
        BTreeSet::new()
    };
    if lost != expected {
        return Err(format!(
            "lost offsets {lost:?}, expected {expected:?} (segment damaged: {damaged})"
        ));
    }
    Ok(damaged)
}

/// Random corruptions of a real cold segment (flipped bytes, truncation, appended garbage,
/// random bytes, a swapped or re-hashed header checksum, a re-hashed edited body, the other
/// segment's bytes, a missing object): reading never panics and never returns a record that
/// differs from the original; the damaged segment reads as `StoreError::Truncated` and every
/// other offset (the other segment, the hot window) still reads back exactly.
#[test]
fn fuzz_corrupted_segments_read_as_truncation() {
    let started = Instant::now();
    let mut segmented = Segmented::new();
    // Untouched segments read back whole, from the first record on.
    segmented.fresh_segments();
    assert_eq!(segmented.read_through(0), Ok(BTreeSet::new()));

    let segmented = RefCell::new(segmented);
    let executions = Cell::new(0u64);
    let damaged = Cell::new(0u64);
    let mut runner = runner(fuzz_cases(3000));
    let result = runner.run(&corruption_case(), |case| {
        executions.set(executions.get() + 1);
        let changed =
            check_corruption(&mut segmented.borrow_mut(), &case).map_err(TestCaseError::fail)?;
        if changed {
            damaged.set(damaged.get() + 1);
        }
        Ok(())
    });
    if let Err(err) = result {
        panic!("{err}");
    }
    eprintln!(
        "fuzz: {} segment corruptions ({} changed the bytes; seed {}) in {:.1} s",
        executions.get(),
        damaged.get(),
        fuzz_seed(),
        started.elapsed().as_secs_f64()
    );
}

/// The corruptions most likely to be mistaken for data, each checked explicitly: a body
/// changed (trailing whitespace, an edited byte) under a header re-hashed to match it, the
/// other segment's checksum or bytes, trailing garbage, an empty object, and an object
/// removed.
#[test]
fn corrupted_segment_edge_cases_read_as_truncation() {
    let mut segmented = Segmented::new();
    let cases = [
        (
            0,
            vec![Corruption::Append(b" ".to_vec()), Corruption::RehashHeader],
        ),
        (
            1,
            vec![Corruption::Append(b"\n".to_vec()), Corruption::RehashHeader],
        ),
        (1, vec![Corruption::EditBodyAndRehash(40, b' ')]),
        (1, vec![Corruption::OtherChecksum]),
        (0, vec![Corruption::OtherSegment]),
        (1, vec![Corruption::OtherSegment]),
        (1, vec![Corruption::Append(b"\n".to_vec())]),
        (0, vec![Corruption::Replace(Vec::new())]),
        (0, vec![Corruption::Missing]),
    ];
    for (segment, corruptions) in cases {
        for from in [0, 2, 4, 6, 9] {
            let case = CorruptionCase {
                segment,
                corruptions: corruptions.clone(),
                from,
            };
            match check_corruption(&mut segmented, &case) {
                Ok(true) => {}
                Ok(false) => panic!("{case:?} left the segment as it was"),
                Err(why) => panic!("{case:?}: {why}"),
            }
        }
    }
}

// =============================================================================================
// Regressions found by the fuzzing above
// =============================================================================================

/// A test request `method uri` with an optional JSON body.
fn request_to(method: Method, uri: &str, body: Option<&str>) -> actix_test::TestRequest {
    let mut builder = actix_test::TestRequest::default().method(method).uri(uri);
    if let Some(body) = body {
        builder = builder
            .insert_header(("content-type", "application/json"))
            .set_payload(body.to_owned());
    }
    builder
}

/// Sends `request` to `app` on a task of its own, so that a handler panic is reported as
/// `Err` with the panic's message instead of unwinding through the test: status and body
/// text otherwise.
async fn send_catching<S, R, B>(app: &std::rc::Rc<S>, request: R) -> Result<(u16, String), String>
where
    S: Service<R, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    R: 'static,
    B: MessageBody + 'static,
{
    let app = app.clone();
    let task = actix::spawn(async move {
        let response = actix_test::call_service(&*app, request).await;
        let status = response.status().as_u16();
        let bytes = actix_test::read_body(response).await;
        (status, String::from_utf8_lossy(&bytes).into_owned())
    });
    task.await.map_err(|err| match err.try_into_panic() {
        Ok(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic without a message".to_owned()),
        Err(err) => err.to_string(),
    })
}

/// Regression (found by `fuzz_every_route_with_arbitrary_requests`): a payload that is valid
/// JSON grammar but that `serde_json::Value` cannot hold (a lone UTF-16 surrogate escape such
/// as `"\ud800"`, a number out of `f64` range such as `1E400`) must be refused with a 400 or
/// stored and read back; reading it back must never panic the handler. Checked on a direct
/// read, a group poll and a lease claim.
#[actix::test]
async fn payload_that_json_values_cannot_hold_never_panics_a_reader() {
    let mut failures = Vec::new();
    let nested = [
        r#"{"a":"x\udc00y"}"#,
        r#"["\ud800\u0041"]"#,
        r#"{"n":[-1e999]}"#,
    ];
    let payloads = POISON.iter().copied().chain(nested);
    for payload in payloads {
        let t = fuzz_log();
        let app = std::rc::Rc::new(
            actix_test::init_service(
                App::new().configure(durability::http::service(t.log.clone())),
            )
            .await,
        );
        let body = format!(r#"[{{"payload": {payload}}}]"#);
        let uri = "/topics/events/partitions/0/records";
        let produced = send_catching(
            &app,
            request_to(Method::POST, uri, Some(&body)).to_request(),
        )
        .await;
        match produced {
            Ok((202, _)) => {}
            Ok((400, answer)) if answer.contains("invalid_request") => continue,
            other => {
                failures.push(format!("POST {uri} with the payload {payload}: {other:?}"));
                continue;
            }
        }
        let reads = [
            (Method::GET, "/topics/events/partitions/0/records"),
            (Method::GET, "/topics/events/groups/g1/poll"),
            (Method::POST, "/topics/events/partitions/0/groups/g1/leases"),
        ];
        for (method, uri) in reads {
            match send_catching(&app, request_to(method.clone(), uri, None).to_request()).await {
                Ok((200, _)) => {}
                Ok(answer) => failures.push(format!("{method} {uri} after the payload {payload}: {answer:?}")),
                Err(panic) => failures.push(format!(
                    "{method} {uri} after the payload {payload} was accepted: the handler panicked: {panic}"
                )),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
