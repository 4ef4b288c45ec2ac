//! The proptest strategies of the request fuzzing: arbitrary text, segments, queries and JSON
//! bodies, shaped like each route's or not, mutated, and well-formed requests.

use durability::store::MAX_KEY_BYTES;
use proptest::prelude::*;
use proptest::sample::Index;

use super::model::*;
use super::{MAX_BATCH_SIZE, MAX_BODY_BYTES, MAX_FUZZ_WAIT_MS, MAX_RECORD_BYTES, PARTITIONS};

/// Strings that tend to break decoders.
pub(super) const SPECIAL_TEXT: &[&str] = &[
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
pub(super) fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => any::<String>(),
        2 => "[\\x00-\\x7f]{0,24}",
        3 => prop::sample::select(SPECIAL_TEXT).prop_map(str::to_owned),
        1 => "[a-z]{120,700}",
        1 => prop::collection::vec(any::<char>(), 100..400)
            .prop_map(|chars| chars.into_iter().collect()),
    ]
}

pub(super) fn segment(text: impl Strategy<Value = String>) -> impl Strategy<Value = Segment> {
    (text, prop::bool::weighted(0.1)).prop_map(|(text, encode_all)| Segment { text, encode_all })
}

pub(super) fn topic() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(&["events", "fresh", "noleases", "letters"][..]).prop_map(str::to_owned),
        2 => "[A-Za-z0-9_-][A-Za-z0-9._-]{0,16}",
        1 => "[a-z]{127,130}",
        4 => any_text(),
    ]
}

pub(super) fn partition() -> impl Strategy<Value = String> {
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

pub(super) fn group() -> impl Strategy<Value = String> {
    prop_oneof![
        5 => prop::sample::select(&["g1", "billing", "search:v2"][..]).prop_map(str::to_owned),
        2 => "[A-Za-z0-9._:-]{1,20}",
        1 => "[a-z]{255,258}",
        3 => any_text(),
    ]
}

pub(super) fn batch() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
        3 => any_text(),
    ]
}

/// Huge integers (far beyond 64 bits), possibly negative.
pub(super) fn huge_digits() -> impl Strategy<Value = String> {
    "-?[1-9][0-9]{18,40}"
}

/// The text of a JSON integer-ish value: small, negative, any 64-bit, huge, or not an
/// integer at all.
pub(super) fn int_text() -> impl Strategy<Value = String> {
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
pub(super) fn query_value() -> impl Strategy<Value = String> {
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
pub(super) fn short_wait(key: &str, value: String) -> String {
    match value.parse::<i64>() {
        Ok(wait) if key == "waitMs" && wait > MAX_FUZZ_WAIT_MS => {
            (wait % (MAX_FUZZ_WAIT_MS + 1)).to_string()
        }
        _ => value,
    }
}

pub(super) fn query() -> impl Strategy<Value = Query> {
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
pub(in crate::fuzz) const POISON: &[&str] = &["1E400", "-1e999", "\"\\ud800\"", "\"x\\udc00\""];

/// Field names that matter to some route, for random JSON objects.
pub(super) const FIELD_NAMES: &[&str] = &[
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

pub(super) fn json_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// The text of an arbitrary JSON value (nested arrays and objects, strings with any
/// character, integers of any size, floats, booleans, nulls).
///
/// Includes values that `serde_json::Value` cannot hold ([`POISON`]: a lone surrogate escape,
/// a number out of `f64` range); such payloads once made every later read of their partition
/// panic (pinned by `payload_that_json_values_cannot_hold_never_panics_a_reader`).
pub(super) fn json_text() -> impl Strategy<Value = String> {
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
pub(super) fn object(fields: Vec<(&'static str, BoxedStrategy<String>)>) -> BoxedStrategy<String> {
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
pub(super) fn or_any(good: impl Strategy<Value = String> + 'static) -> BoxedStrategy<String> {
    prop_oneof![8 => good, 2 => json_text()].boxed()
}

pub(super) fn dedup_key() -> BoxedStrategy<String> {
    or_any(prop_oneof![
        6 => (0u32..20).prop_map(|n| json_string(&format!("k-{n}"))),
        1 => Just(json_string("")),
        1 => Just(json_string(&"k".repeat(MAX_KEY_BYTES + 1))),
        1 => Just("null".to_owned()),
        2 => any_text().prop_map(|s| json_string(&s)),
    ])
}

pub(super) fn payload() -> BoxedStrategy<String> {
    prop_oneof![
        9 => json_text(),
        1 => Just(json_string(&"x".repeat(MAX_RECORD_BYTES + 10))),
    ]
    .boxed()
}

/// A body shaped like the route's (each field right or wrong), as JSON text.
pub(super) fn shaped_body(shape: Shape) -> BoxedStrategy<String> {
    let array = |item: BoxedStrategy<String>| {
        prop::collection::vec(item, 0..7)
            .prop_map(|items| format!("[{}]", items.join(",")))
            .boxed()
    };
    match shape {
        Shape::Events => array(object(vec![
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
        Shape::Records => array(object(vec![("payload", payload()), ("key", dedup_key())])),
        Shape::Commit => {
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
        Shape::Cursor => object(vec![("offset", or_any(int_text()))]),
        Shape::Nack => prop_oneof![
            1 => Just(String::new()),
            1 => Just("  \n".to_owned()),
            4 => object(vec![("delayMs", or_any(int_text()))]),
        ]
        .boxed(),
        Shape::Forget => object(vec![("before", or_any(int_text()))]),
        Shape::Redrive => object(vec![("offsets", or_any(array(int_text().boxed())))]),
        Shape::None => json_text().boxed(),
    }
}

/// A change to a body's bytes.
#[derive(Debug, Clone)]
pub(super) enum Mutation {
    Truncate(Index),
    InsertByte(Index, u8),
    FlipBits(Index, u8),
    DeleteRange(Index, usize),
    ReplaceDigits(Index, String),
    Concat,
    WrapInArray,
}

pub(super) fn mutation() -> impl Strategy<Value = Mutation> {
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

pub(super) fn mutate(mut bytes: Vec<u8>, mutation: &Mutation) -> Vec<u8> {
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

pub(super) fn body(shape: Shape) -> impl Strategy<Value = Option<Body>> {
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
        8 => shaped_body(shape).prop_map(|t| Some(Body(t.into_bytes()))),
        4 => (shaped_body(shape), prop::collection::vec(mutation(), 1..4)).prop_map(|(t, ms)| {
            Some(Body(ms.iter().fold(t.into_bytes(), mutate)))
        }),
        1 => big,
    ]
}

pub(super) fn raw_path() -> impl Strategy<Value = String> {
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
pub(super) fn arbitrary_request() -> impl Strategy<Value = FuzzRequest> {
    prop::sample::select(Target::all()).prop_flat_map(|target| {
        (
            segment(topic()),
            segment(partition()),
            segment(group()),
            segment(batch()),
            raw_path(),
            query(),
            body(target.shape()),
            prop::option::weighted(0.2, any::<Index>()),
        )
            .prop_map(
                move |(topic, partition, group, batch, raw_path, query, body, held)| FuzzRequest {
                    target,
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
pub(super) fn valid_body(shape: Shape) -> BoxedStrategy<String> {
    let key = prop::option::of((0u32..30).prop_map(|n| json_string(&format!("k-{n}"))));
    match shape {
        Shape::Events => prop::collection::vec(((0u32..50), json_text(), key), 1..=MAX_BATCH_SIZE)
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
            .boxed(),
        Shape::Records => prop::collection::vec((json_text(), key), 1..=MAX_BATCH_SIZE)
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
        Shape::Commit => prop::collection::btree_map(0..PARTITIONS, 0i64..6, 1..4)
            .prop_map(|offsets| {
                let offsets: Vec<_> = offsets
                    .iter()
                    .map(|(partition, offset)| format!(r#""{partition}":{offset}"#))
                    .collect();
                format!(r#"{{"offsets":{{{}}}}}"#, offsets.join(","))
            })
            .boxed(),
        Shape::Cursor => (0i64..6)
            .prop_map(|offset| format!(r#"{{"offset":{offset}}}"#))
            .boxed(),
        Shape::Nack => prop_oneof![
            Just(String::new()),
            Just("{}".to_owned()),
            (0i64..100).prop_map(|delay| format!(r#"{{"delayMs":{delay}}}"#)),
        ]
        .boxed(),
        Shape::Forget => (0i64..10)
            .prop_map(|before| format!(r#"{{"before":{before}}}"#))
            .boxed(),
        // Offset 0 of `letters:0` is a letter (see `seed_fuzz_log`).
        Shape::Redrive => prop::collection::vec(0i64..3, 1..4)
            .prop_map(|offsets| {
                let offsets: Vec<String> = offsets.iter().map(i64::to_string).collect();
                format!(r#"{{"offsets":[{}]}}"#, offsets.join(","))
            })
            .boxed(),
        Shape::None => Just(String::new()).boxed(),
    }
}

/// Query parameters in range.
pub(super) fn valid_query() -> impl Strategy<Value = Query> {
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
pub(super) fn well_formed_request() -> impl Strategy<Value = FuzzRequest> {
    let known = |names: &'static [&'static str]| {
        segment(prop::sample::select(names).prop_map(str::to_owned))
    };
    prop::sample::select(Target::all()).prop_flat_map(move |target| {
        let body = prop_oneof![
            3 => valid_body(target.shape()).prop_map(|t| Some(Body(t.into_bytes()))),
            1 => (valid_body(target.shape()), mutation())
                .prop_map(|(t, m)| Some(Body(mutate(t.into_bytes(), &m)))),
        ];
        (
            known(&["events", "fresh", "noleases", "letters"]),
            segment((0..PARTITIONS).prop_map(|p| p.to_string())),
            known(&["g1", "billing", "search:v2"]),
            segment(batch()),
            valid_query(),
            body,
            prop::option::weighted(0.8, any::<Index>()),
        )
            .prop_map(move |(topic, partition, group, batch, query, body, held)| {
                FuzzRequest {
                    target,
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

pub(super) fn fuzz_request() -> impl Strategy<Value = FuzzRequest> {
    prop_oneof![6 => arbitrary_request(), 4 => well_formed_request()]
}
