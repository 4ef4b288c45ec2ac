//! `durability::client` (feature `client`) against the real server binary over real sockets:
//! the README's quick-start flow, typed refusals, the retry rules (against a scripted server
//! that counts requests, and a list of nodes whose first is down), writes that survive a
//! server killed mid-way exactly once, and the consumer and lease-worker helpers.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use durability::ErrorCode;
use durability::client::{Client, ClientError, Event, Record, RetryPolicy, Settled};
use serde_json::{Value, json};

use crate::common::block_on;
use crate::common::process::Server;

/// No environment beyond what [`Server::start`] sets.
const NO_ENV: [(&str, &str); 0] = [];

/// A server over a fresh data folder, with `env`; the folder lives as long as the returned
/// guard.
fn start(env: &[(&str, &str)]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), env.iter().copied());
    (dir, server)
}

/// The URL of a server at `addr`.
fn url(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

/// A client of `server` with the default settings.
fn client_of(server: &Server) -> Client {
    Client::builder([url(server.addr)])
        .build()
        .expect("a client")
}

/// Retries at once, so tests that count them do not wait.
fn quick_retries(attempts: u32) -> RetryPolicy {
    RetryPolicy::default()
        .attempts(attempts)
        .backoff(Duration::from_millis(1), Duration::from_millis(5))
}

/// An address nothing listens on (a port just released).
fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}

/// A payload as the JSON value it holds.
fn value(payload: &Option<Box<serde_json::value::RawValue>>) -> Value {
    serde_json::from_str(payload.as_ref().expect("a JSON payload").get()).expect("JSON")
}

/// The README's quick start through the client: keyed events, a group poll and its commit, a
/// lease acked, then appends to one partition read back, bounds, the topic's description and
/// the topic list.
#[actix::test]
async fn quick_start_flow_through_the_client() {
    let (_dir, server) = start(&NO_ENV);
    let client = client_of(&server);

    let produced = client
        .produce(
            "clicks",
            [
                Event::new("user-1", Record::new(json!({"page": "home"})).key("evt-1")),
                Event::new("user-2", json!({"page": "cart"})),
            ],
        )
        .await
        .unwrap();
    let places: Vec<(u32, u64)> = produced
        .records
        .iter()
        .map(|placed| (placed.partition, placed.offset))
        .collect();
    assert_eq!(places, [(4, 0), (3, 0)], "the README's partitions");
    // A re-sent deduplication key returns its original place and writes nothing.
    let again = client
        .produce(
            "clicks",
            [Event::new(
                "user-1",
                Record::new(json!({"page": "home"})).key("evt-1"),
            )],
        )
        .await
        .unwrap();
    assert_eq!(again.records[0].partition, 4);
    assert_eq!(again.records[0].offset, 0);

    let polled = client
        .poll("clicks", "analytics", Some(100), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(polled.partitions.len(), 8);
    let pages: BTreeMap<u32, Vec<Value>> = polled
        .partitions
        .iter()
        .filter(|page| !page.page.records.is_empty())
        .map(|page| {
            let payloads = page
                .page
                .records
                .iter()
                .map(|r| value(&r.payload))
                .collect();
            (page.partition, payloads)
        })
        .collect();
    assert_eq!(
        pages,
        BTreeMap::from([
            (3, vec![json!({"page": "cart"})]),
            (4, vec![json!({"page": "home"})])
        ])
    );
    let committed = client
        .commit("clicks", "analytics", BTreeMap::from([(3, 1), (4, 1)]))
        .await
        .unwrap();
    assert_eq!(committed.cursors, BTreeMap::from([(3, 1), (4, 1)]));

    let lease = client
        .claim("clicks", 4, "workers", Some(10))
        .await
        .unwrap()
        .expect("a range to lease");
    assert_eq!((lease.first_offset, lease.last_offset), (0, 0));
    let acked = client
        .ack("clicks", 4, "workers", &lease.batch_id)
        .await
        .unwrap();
    assert_eq!(acked.cursor, Some(1));

    let appended = client
        .append(
            "orders",
            0,
            [
                Record::new(json!({"total": 42})),
                Record::new(json!({"total": 7})).key("order-2"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(appended.offsets, [0, 1]);
    let page = client.read("orders", 0, Some(0), None).await.unwrap();
    assert_eq!(page.next_offset, 2);
    let payloads: Vec<Value> = page.records.iter().map(|r| value(&r.payload)).collect();
    assert_eq!(payloads, [json!({"total": 42}), json!({"total": 7})]);
    // The record sent without a key carries the one the client made for it.
    assert!(
        page.records[0]
            .key
            .as_deref()
            .is_some_and(|key| key.len() == 36)
    );
    assert_eq!(page.records[1].key.as_deref(), Some("order-2"));

    let bounds = client.bounds("clicks", 4).await.unwrap();
    assert_eq!(
        (bounds.oldest_offset, bounds.hot_offset, bounds.next_offset),
        (0, 0, 1)
    );
    let described = client.describe("clicks").await.unwrap();
    assert_eq!(described.name, "clicks");
    assert_eq!(described.partitions.len(), 8);
    assert_eq!(described.partitions[4].cursors["analytics"], 1);
    assert_eq!(described.partitions[4].cursors["workers"], 1);

    let first = client.topics(None, Some(1)).await.unwrap();
    let names: Vec<&str> = first.topics.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["clicks"]);
    assert_eq!(first.next.as_deref(), Some("clicks"));
    let second = client.topics(first.next.as_deref(), Some(1)).await.unwrap();
    let names: Vec<&str> = second.topics.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["orders"]);
    assert_eq!(second.topics[0].partitions, 8);
}

/// Refusals come back typed, with the API's code and details, and the token shows in no error
/// and no `Debug`; settings that cannot make a client, and a server that cannot be reached,
/// are told apart.
#[actix::test]
async fn refusals_are_typed_and_the_token_stays_secret() {
    let (_dir, server) = start(&[("DURABILITY__SERVER__AUTH_TOKEN", "secret-token")]);
    let stranger = Client::builder([url(server.addr)])
        .token("wrong-token")
        .build()
        .unwrap();
    let refused = stranger
        .append("orders", 0, [Record::new(json!(1))])
        .await
        .unwrap_err();
    assert!(matches!(refused, ClientError::Refused { status: 401, .. }));
    assert_eq!(refused.code(), Some(ErrorCode::Unauthorized));
    let shown = format!("{refused} {refused:?} {stranger:?}");
    assert!(!shown.contains("wrong-token"), "{shown}");

    let client = Client::builder([url(server.addr)])
        .token("secret-token")
        .build()
        .unwrap();
    let bad_group = client
        .poll("orders", "no spaces allowed", None, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(
        bad_group,
        ClientError::Refused { status: 400, .. }
    ));
    assert_eq!(bad_group.code(), Some(ErrorCode::InvalidName));
    let past_the_count = client.bounds("orders", 99).await.unwrap_err();
    assert!(matches!(
        &past_the_count,
        ClientError::Refused { status: 404, detail } if detail.partitions == Some(8)
    ));
    let not_held = client
        .ack("orders", 0, "workers", "no-such-batch")
        .await
        .unwrap_err();
    assert!(matches!(
        &not_held,
        ClientError::Refused { status: 409, detail }
            if detail.batch_id.as_deref() == Some("no-such-batch")
    ));

    for urls in [vec![], vec!["localhost:8080".to_owned()]] {
        let invalid = Client::builder(urls).build().unwrap_err();
        assert!(matches!(invalid, ClientError::Invalid(_)), "{invalid}");
    }
    let nobody = Client::builder([url(closed_port())])
        .retry(RetryPolicy::never())
        .build()
        .unwrap();
    let unreachable = nobody.bounds("orders", 0).await.unwrap_err();
    assert!(matches!(unreachable, ClientError::Unreachable { .. }));
}

/// A scripted HTTP server on 127.0.0.1: answers every request with one status, body and extra
/// head lines, one request per connection, and counts the requests. Stops when dropped.
struct Scripted {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Scripted {
    /// On a free port.
    fn start(status: u16, body: Value, head: &'static str) -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap(), status, body, head)
    }

    /// On `addr`.
    fn start_on(addr: SocketAddr, status: u16, body: Value, head: &'static str) -> Self {
        let listener = TcpListener::bind(addr).expect("bind the scripted server");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let addr = listener.local_addr().expect("its address");
        let (requests, stop) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let thread = {
            let (requests, stop) = (requests.clone(), stop.clone());
            let body = body.to_string();
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok((mut stream, _)) = listener.accept() else {
                        thread::sleep(Duration::from_millis(2));
                        continue;
                    };
                    stream.set_nonblocking(false).expect("a blocking stream");
                    if read_request(&mut stream).is_none() {
                        continue;
                    }
                    requests.fetch_add(1, Ordering::Relaxed);
                    let answer = format!(
                        "HTTP/1.1 {status} Scripted\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\nConnection: close\r\n{head}\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes());
                }
            })
        };
        Self {
            addr,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    /// Requests answered so far.
    fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads one whole request (head and `Content-Length` body) from `stream`; `None` if it ends
/// first.
fn read_request(stream: &mut impl Read) -> Option<()> {
    let mut data = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        if let Some(end) = crate::common::process::find(&data, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let length: usize = crate::common::process::header(&head, "content-length")
                .and_then(|length| length.parse().ok())
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                return Some(());
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(read) => data.extend_from_slice(&chunk[..read]),
        }
    }
}

/// The body of a refusal with `code`.
fn error_body(code: &str) -> Value {
    json!({"error": {"code": code, "message": "scripted"}})
}

/// A 4xx is never retried; a `503 unavailable` is retried for a read but not for an ack
/// (which it may have applied); a `503 overloaded` (refused at admission) is retried for an
/// ack too; each counted in requests the server received.
#[actix::test]
async fn retries_follow_what_each_operation_risks() {
    let attempts = 4;
    let client_of = |scripted: &Scripted| {
        Client::builder([url(scripted.addr)])
            .retry(quick_retries(attempts))
            .build()
            .unwrap()
    };

    let invalid = Scripted::start(400, error_body("invalid_name"), "");
    let refused = client_of(&invalid)
        .read("orders", 0, None, None)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::InvalidName));
    assert_eq!(invalid.requests(), 1, "a 400 is not retried");

    let unavailable = Scripted::start(503, error_body("unavailable"), "");
    let client = client_of(&unavailable);
    let read = client.read("orders", 0, None, None).await.unwrap_err();
    assert_eq!(read.code(), Some(ErrorCode::Unavailable));
    assert_eq!(
        unavailable.requests(),
        attempts as usize,
        "a read is retried"
    );
    let ack = client
        .ack("orders", 0, "workers", "batch")
        .await
        .unwrap_err();
    assert_eq!(ack.code(), Some(ErrorCode::Unavailable));
    assert_eq!(
        unavailable.requests(),
        attempts as usize + 1,
        "an ack that may have been applied is not retried"
    );

    let overloaded = Scripted::start(503, error_body("overloaded"), "Retry-After: 0\r\n");
    let ack = client_of(&overloaded)
        .ack("orders", 0, "workers", "batch")
        .await
        .unwrap_err();
    assert!(matches!(
        &ack,
        ClientError::Refused { status: 503, detail } if detail.retry_after
    ));
    assert_eq!(
        overloaded.requests(),
        attempts as usize,
        "an ack refused at admission is retried"
    );
}

/// With several nodes, a connection that cannot be made moves on to the next node, where the
/// call succeeds within its attempts; the next call goes straight to the node that answered.
#[actix::test]
async fn a_connection_failure_moves_to_the_next_node() {
    let (_dir, server) = start(&NO_ENV);
    let down = closed_port();
    let client = Client::builder([url(down), url(server.addr)])
        .retry(quick_retries(5))
        .build()
        .unwrap();
    let appended = client
        .append("orders", 0, [Record::new(json!({"total": 42}))])
        .await
        .unwrap();
    assert_eq!(appended.offsets, [0]);

    // The first node comes back, answering everything 503: the client stays where it was
    // answered.
    let back = Scripted::start_on(down, 503, error_body("unavailable"), "");
    let bounds = client.bounds("orders", 0).await.unwrap();
    assert_eq!(bounds.next_offset, 1);
    assert_eq!(back.requests(), 0);
}

/// What the producer threads acknowledged, and what failed.
#[derive(Default)]
struct Produced {
    /// Sequence number → offset, of every acknowledged record.
    acked: BTreeMap<u64, u64>,
    /// Appends that failed once their retries were spent.
    failed: Vec<String>,
}

/// Appends batches of records numbered from `first` to partition 0 of `orders` until `stop`,
/// noting each outcome in `produced`.
fn produce_until(client: &Client, first: u64, produced: &Mutex<Produced>, stop: &AtomicBool) {
    const BATCH: u64 = 3;
    block_on(async {
        for first in (first..).step_by(BATCH as usize) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let records = (first..first + BATCH).map(|seq| Record::new(json!({"seq": seq})));
            let appended = client.append("orders", 0, records).await;
            let mut produced = produced.lock().unwrap();
            match appended {
                Ok(appended) => produced.acked.extend((first..).zip(appended.offsets)),
                Err(err) => produced.failed.push(format!("{first}: {err}")),
            }
        }
    });
}

/// Two producers append batches in a loop while the server is killed with SIGKILL, and
/// started again on the same port and data folder, three times: every append is acknowledged
/// (its retries span the outages), and every record is in the log at most once, each
/// acknowledged one at its acknowledged offset, because the client gave each record a
/// deduplication key before its first attempt (without them, an append applied just before a
/// kill is appended again by its retry).
#[test]
fn writes_survive_a_server_killed_midway_exactly_once() {
    const PRODUCERS: u64 = 2;
    const KILLS: usize = 3;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut server = Server::start(dir.path(), NO_ENV);
    let addr = server.addr;
    let client = Client::builder([url(addr)])
        .retry(
            RetryPolicy::default()
                .attempts(1000)
                .deadline(Duration::from_secs(60))
                .backoff(Duration::from_millis(20), Duration::from_millis(200)),
        )
        .build()
        .unwrap();
    let produced = Arc::new(Mutex::new(Produced::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            let (client, produced, stop) = (client.clone(), produced.clone(), stop.clone());
            thread::spawn(move || produce_until(&client, producer << 32, &produced, &stop))
        })
        .collect();
    let acked = || produced.lock().unwrap().acked.len();
    let more_acked = |count: usize| {
        let target = acked() + count;
        while acked() < target {
            assert!(
                producers.iter().all(|producer| !producer.is_finished()),
                "a producer stopped"
            );
            thread::sleep(Duration::from_millis(5));
        }
    };
    for _ in 0..KILLS {
        more_acked(30);
        server.kill();
        server = Server::start(dir.path(), [("DURABILITY__SERVER__BIND", addr.to_string())]);
    }
    more_acked(30);
    stop.store(true, Ordering::Relaxed);
    for producer in producers {
        producer.join().expect("a producer thread");
    }
    let produced = std::mem::take(&mut *produced.lock().unwrap());
    assert!(produced.failed.is_empty(), "{:?}", produced.failed);

    let stored = block_on(async {
        let mut stored = Vec::new();
        let mut from = 0;
        loop {
            let page = client.read("orders", 0, Some(from), None).await.unwrap();
            if page.records.is_empty() {
                break stored;
            }
            from = page.next_offset;
            stored.extend(page.records);
        }
    });
    let mut seen = BTreeMap::new();
    for record in &stored {
        let seq = value(&record.payload)["seq"]
            .as_u64()
            .expect("a sequence number");
        let earlier = seen.insert(seq, record.offset);
        assert!(
            earlier.is_none(),
            "record {seq} at {earlier:?} and {}",
            record.offset
        );
    }
    for (seq, offset) in &produced.acked {
        assert_eq!(seen.get(seq), Some(offset), "acknowledged record {seq}");
    }
    drop(server);
}

/// The consumer reads every record of every partition in order; a commit moves over what was
/// marked done only, so the rest comes again; once all is committed, another consumer of the
/// group gets nothing.
#[actix::test]
async fn consumer_reads_in_order_and_commits_what_was_marked() {
    let (_dir, server) = start(&NO_ENV);
    let client = client_of(&server);
    let users = ["ann", "bob", "cy", "dee", "eve"];
    let events = (0..30).map(|n| {
        let user = users[n % users.len()];
        Event::new(user, json!({"user": user, "n": n}))
    });
    client.produce("clicks", events).await.unwrap();

    let mut consumer = client
        .consumer("clicks", "analytics")
        .wait(Duration::from_millis(200))
        .limit(4);
    let first = consumer.next_batch().await.unwrap();
    let partitions: BTreeSet<u32> = first.iter().map(|d| d.partition).collect();
    // Only the first record of each partition is marked done: the others come again.
    let firsts: Vec<_> = first.iter().filter(|d| d.record.offset == 0).collect();
    consumer.commit(firsts).await.unwrap();
    let mut seen: Vec<(u32, u64, Value)> = Vec::new();
    for delivery in first.iter().filter(|d| d.record.offset == 0) {
        seen.push((delivery.partition, 0, delivery.payload().unwrap()));
    }
    for _ in 0..30 {
        let batch = consumer.next_batch().await.unwrap();
        if batch.is_empty() {
            break;
        }
        for delivery in &batch {
            let payload = delivery.payload().unwrap();
            seen.push((delivery.partition, delivery.record.offset, payload));
        }
        consumer.commit(&batch).await.unwrap();
    }
    assert_eq!(seen.len(), 30, "every record once: {seen:?}");
    for partition in partitions {
        let offsets: Vec<u64> = seen
            .iter()
            .filter(|(p, ..)| *p == partition)
            .map(|(_, offset, _)| *offset)
            .collect();
        assert_eq!(offsets, (0..offsets.len() as u64).collect::<Vec<_>>());
    }
    for user in users {
        let order: Vec<u64> = seen
            .iter()
            .filter(|(.., payload)| payload["user"] == user)
            .map(|(.., payload)| payload["n"].as_u64().unwrap())
            .collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(order, sorted, "{user}'s events in the order produced");
        assert_eq!(order.len(), 6);
    }

    let mut another = client
        .consumer("clicks", "analytics")
        .wait(Duration::from_millis(200));
    assert!(another.next_batch().await.unwrap().is_empty());
}

/// The lease worker nacks a range whose work failed, which is delivered again (a new batch,
/// the next attempt), acks it once the work succeeds, and then finds nothing more.
#[actix::test]
async fn lease_worker_acks_on_ok_and_nacks_on_err() {
    let (_dir, server) = start(&NO_ENV);
    let client = client_of(&server);
    let records = (0..3).map(|n| Record::new(json!({"job": n})));
    client.append("jobs", 2, records).await.unwrap();
    let worker = client.lease_worker("jobs", "workers");

    let mut deliveries = Vec::new();
    let failed = worker
        .run_once(|lease| {
            deliveries.push(lease);
            async { Err::<(), _>("the work failed") }
        })
        .await
        .unwrap();
    assert!(matches!(
        failed,
        Some(Settled::Nacked {
            partition: 2,
            error: "the work failed"
        })
    ));
    let succeeded = worker
        .run_once(|lease| {
            deliveries.push(lease);
            async { Ok::<(), String>(()) }
        })
        .await
        .unwrap();
    assert!(matches!(
        succeeded,
        Some(Settled::Acked {
            partition: 2,
            cursor: Some(3)
        })
    ));
    let [first, second] = &deliveries[..] else {
        panic!("two deliveries: {deliveries:?}");
    };
    assert_eq!((first.lease.first_offset, first.lease.last_offset), (0, 2));
    assert_eq!(
        (second.lease.first_offset, second.lease.last_offset),
        (0, 2)
    );
    assert_eq!((first.lease.attempt, second.lease.attempt), (1, 2));
    assert_ne!(first.lease.batch_id, second.lease.batch_id);
    let payloads: Vec<Value> = second
        .lease
        .records
        .iter()
        .map(|r| value(&r.payload))
        .collect();
    assert_eq!(
        payloads,
        [json!({"job": 0}), json!({"job": 1}), json!({"job": 2})]
    );

    let idle = worker.run_once(|_| async { Ok::<(), String>(()) }).await;
    assert!(matches!(idle, Ok(None)));
}

/// Work that runs longer than two holds of its lease keeps the range: the worker extends it, so
/// another worker of the group finds nothing to claim meanwhile, and the ack succeeds.
#[actix::test]
async fn lease_worker_extends_the_lease_while_work_runs() {
    let (_dir, server) = start(&[("DURABILITY__LEASES__LEASE_MS", "2000")]);
    let client = client_of(&server);
    client
        .append("slow", 0, [Record::new(json!({"job": "long"}))])
        .await
        .unwrap();
    let other = client.clone();
    let settled = client
        .lease_worker("slow", "workers")
        .run_once(|_| async move {
            tokio::time::sleep(Duration::from_millis(4500)).await;
            match other.claim_any("slow", "workers", None).await {
                Ok(None) => Ok(()),
                taken => Err(format!("the range was free to claim again: {taken:?}")),
            }
        })
        .await
        .unwrap();
    assert!(
        matches!(
            settled,
            Some(Settled::Acked {
                partition: 0,
                cursor: Some(1)
            })
        ),
        "{settled:?}"
    );
}
