//! Open-loop latency: requests are issued on a fixed schedule whether or not earlier ones have
//! been answered, and each latency counts from the moment its request was due, so a stall
//! shows up in every request it delayed instead of being hidden by a waiting client.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use durability::Log;
use durability::partition::Append;
use durability::store::NewRecord;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Latency percentiles, in milliseconds.
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub requests: usize,
}

impl Percentiles {
    fn of(mut micros: Vec<u64>) -> Self {
        micros.sort_unstable();
        let at = |q: f64| {
            let index = ((micros.len() as f64 * q) as usize).min(micros.len().saturating_sub(1));
            micros.get(index).map_or(0.0, |&us| us as f64 / 1000.0)
        };
        Self {
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            requests: micros.len(),
        }
    }
}

/// How often the schedule is checked; requests due in between go out together.
const TICK: Duration = Duration::from_micros(500);

/// Calls `issue(due)` for every request due at `rate` per second during `budget`.
async fn schedule(rate: f64, budget: Duration, mut issue: impl FnMut(Instant)) {
    let start = Instant::now();
    let mut issued: u64 = 0;
    while start.elapsed() < budget {
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        while issued < due {
            issue(start + Duration::from_secs_f64(issued as f64 / rate));
            issued += 1;
        }
        actix_rt::time::sleep(TICK).await;
    }
}

/// Single-record appends through typed messages to one partition at `rate` per second.
pub fn embedded(dir: PathBuf, payload: &str, rate: f64, budget: Duration) -> Percentiles {
    let record = NewRecord::new(payload);
    actix::System::new().block_on(async move {
        let log = Log::open(super::embedded::config(&dir, 1)).unwrap();
        let actor = log
            .partition_actor(super::embedded::TOPIC, 0)
            .await
            .unwrap();
        let latencies = Rc::new(RefCell::new(Vec::new()));
        let mut requests = Vec::new();
        schedule(rate, budget, |due| {
            let answer = actor.send(Append {
                records: vec![record.clone()],
            });
            let latencies = latencies.clone();
            requests.push(actix::spawn(async move {
                assert!(answer.await.unwrap().unwrap().outcome.is_appended());
                latencies
                    .borrow_mut()
                    .push(due.elapsed().as_micros() as u64);
            }));
        })
        .await;
        for request in requests {
            request.await.unwrap();
        }
        log.shutdown().await.unwrap();
        Percentiles::of(latencies.take())
    })
}

/// POSTs of `body` to `path` over `connections` keep-alive connections at `rate` per second.
/// A request due while every connection is busy waits for one, and that wait counts.
pub fn http(
    server: SocketAddr,
    path: &str,
    body: &str,
    connections: usize,
    rate: f64,
    budget: Duration,
) -> Percentiles {
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {server}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    actix::System::new().block_on(async move {
        let latencies = Rc::new(RefCell::new(Vec::new()));
        let (due_tx, due_rx) = async_channel();
        let workers: Vec<_> = (0..connections)
            .map(|_| {
                let (request, latencies, due_rx) =
                    (request.clone(), latencies.clone(), due_rx.clone());
                actix::spawn(async move {
                    let mut stream = TcpStream::connect(server).await.unwrap();
                    stream.set_nodelay(true).unwrap();
                    let mut buffer = Vec::with_capacity(4096);
                    while let Some(due) = recv(&due_rx).await {
                        stream.write_all(request.as_bytes()).await.unwrap();
                        read_response(&mut stream, &mut buffer).await;
                        latencies
                            .borrow_mut()
                            .push(due.elapsed().as_micros() as u64);
                    }
                })
            })
            .collect();
        schedule(rate, budget, |due| {
            let _ = due_tx.send(due);
        })
        .await;
        drop(due_tx);
        for worker in workers {
            worker.await.unwrap();
        }
        Percentiles::of(latencies.take())
    })
}

/// A queue of due times shared by the connections: whichever is free takes the next one.
type DueQueue = Rc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Instant>>>;

fn async_channel() -> (mpsc::UnboundedSender<Instant>, DueQueue) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, Rc::new(tokio::sync::Mutex::new(rx)))
}

async fn recv(queue: &DueQueue) -> Option<Instant> {
    queue.lock().await.recv().await
}

/// Reads one HTTP/1.1 response with a `Content-Length` body and checks that it is a 2xx.
async fn read_response(stream: &mut TcpStream, buffer: &mut Vec<u8>) {
    buffer.clear();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = find(buffer, b"\r\n\r\n") {
            let head = std::str::from_utf8(&buffer[..end]).unwrap();
            assert!(
                head.starts_with("HTTP/1.1 2"),
                "the server answered {}",
                head.lines().next().unwrap_or_default()
            );
            let length: usize = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buffer.len() < end + 4 + length {
                let read = stream.read(&mut chunk).await.unwrap();
                assert!(read > 0, "the server closed the connection");
                buffer.extend_from_slice(&chunk[..read]);
            }
            return;
        }
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "the server closed the connection");
        buffer.extend_from_slice(&chunk[..read]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}
