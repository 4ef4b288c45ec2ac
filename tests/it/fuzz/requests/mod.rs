//! Request decoding: arbitrary requests sent to every route of the REST server, as its OpenAPI
//! document lists them, must answer a 2xx that the document lists or a 4xx in the contract's
//! JSON error shape, and create nothing on disk unless a write succeeded.
//!
//! - [`model`]: what a fuzz request is, and the contract's rules for names;
//! - [`strategies`]: how proptest generates them, shaped or not.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use actix_web::App;
use actix_web::test as actix_test;
use durability::config::{LeaseSettings, TopicSettings};
use durability::store::{AppendOutcome, NewRecord, SyncMode};
use proptest::test_runner::TestCaseError;
use serde_json::Value;

use crate::common::{TestLog, respond, stored_partitions};

use super::{fuzz_cases, fuzz_seed, runner};
use model::*;
pub(super) use strategies::POISON;
use strategies::*;

mod model;
mod strategies;

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

/// The partitions that 2xx writes have created (or that setup wrote), by topic.
#[derive(Debug, Default)]
struct Written(BTreeSet<(String, u32)>);

impl Written {
    /// Notes what a 2xx answer to `request` may have created: the partitions that a produce,
    /// an append, a cursor or a commit wrote (the routes whose bodies say what to write).
    fn note(&mut self, request: &FuzzRequest, answer: &Value) {
        let topic = &request.topic.text;
        match request.target.shape() {
            Shape::Events => {
                for record in answer["records"].as_array().into_iter().flatten() {
                    if let Some(p) = record["partition"].as_u64() {
                        self.0.insert((topic.clone(), p as u32));
                    }
                }
            }
            Shape::Records | Shape::Cursor => {
                if let Ok(p) = request.partition.text.parse::<u32>() {
                    self.0.insert((topic.clone(), p));
                }
            }
            Shape::Commit => {
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
            Shape::Redrive => {
                for letter in answer["redriven"].as_array().into_iter().flatten() {
                    if let (Some(topic), Some(p)) =
                        (letter["topic"].as_str(), letter["partition"].as_u64())
                    {
                        self.0.insert((topic.to_owned(), p as u32));
                    }
                }
            }
            Shape::Nack | Shape::Forget | Shape::None => {}
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

/// Checks one answer against the contract: a 2xx that the document lists for the route, with a
/// JSON object when the document says JSON; or a 4xx whose body is exactly
/// `{"error": {"code", "message", ...}}` with a contract code matching the status; never a
/// 2xx for a bad name or partition.
fn check_answer(request: &FuzzRequest, status: u16, answer: &Value) -> Result<(), String> {
    match status {
        200..=299 => {
            let target = request.target;
            let json = match target {
                Target::Route(route, _) => match route.response(status) {
                    Some(content) => content == Some("application/json"),
                    None => return Err(format!("{status}, which {route} does not list: {answer}")),
                },
                Target::Raw => status != 204,
            };
            if json && !answer.is_object() {
                return Err(format!(
                    "{status} with a body that is not a JSON object: {answer}"
                ));
            }
            let bad_name = (target.has("topic") && !valid_topic(&request.topic.text))
                || (target.has("group") && !valid_group(&request.group.text))
                || (target.has("partition") && valid_partition(&request.partition.text).is_none());
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
pub(super) fn fuzz_log() -> TestLog {
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
/// cursor, a dead letter in `letters:0`, and a lease held by `g1` on `events:0` (its batch id
/// is returned).
async fn seed_fuzz_log(t: &TestLog) -> String {
    for partition in [0, 1] {
        let records = (0..3)
            .map(|n| NewRecord::keyed(format!("seed-{n}"), format!("{{\"n\":{n}}}")))
            .collect();
        let appended = t.log.append("events", partition, records).await.unwrap();
        assert!(matches!(appended.outcome, AppendOutcome::Appended { .. }));
    }
    t.log.commit("events", 1, "billing", 1).await.unwrap();
    // A dead letter of `events:0` (its key names its source), for the redrive to succeed.
    let letter = NewRecord::keyed("events:0:0", "{\"n\":0}");
    t.log.append("letters", 0, vec![letter]).await.unwrap();
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
        .method(request.target.method())
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
    let method = request.target.method();
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
    written.0.insert(("letters".into(), 0));
    let written = RefCell::new(written);
    let sent = Cell::new(0u64);
    let statuses: RefCell<BTreeMap<(&str, u16), u64>> = RefCell::default();
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
            // A claim on any partition says which one it leased from.
            let partition = if request.target.has("partition") {
                request.partition.text.parse().ok()
            } else {
                body["partition"].as_u64().map(|p| p as u32)
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
                .entry((request.target.name(), *status))
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
    let mut summary: BTreeMap<&str, Vec<String>> = BTreeMap::new();
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
/// (`..`, encoded `/`, NUL, unicode, very long) sent to every route of the OpenAPI document and
/// to random paths: the server never panics or hangs, answers a 2xx that the document lists or
/// a 4xx in the contract's JSON error shape with a contract code, never 5xx, never 2xx for a
/// bad name, and creates no partition that no successful write created. A route of the document
/// whose body or path parameters the fuzzer does not know fails it.
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
