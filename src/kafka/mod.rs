//! A listener that speaks Kafka's wire protocol over the same [`Log`] as the REST API, so that
//! existing Kafka producers and consumers read and write the log: a record produced by a Kafka
//! client reads back over REST, and the reverse (`spec/API.md`, "Records: headers, message
//! keys, binary payloads", is the one record model of both).
//!
//! Requests and responses are decoded and encoded with the `kafka-protocol` crate; record
//! batches with [`batch`]. Each connection is served by one task that answers its requests in
//! the order they came; connections are spread over a few threads of their own, as the HTTP
//! server's are over its workers. What each request does is in `api.rs`; the listener holds no
//! log rule: it translates requests into `Log` calls and errors into the protocol's codes.
//!
//! Limits: a frame over `kafka.max_request_bytes` closes its connection before it is read; a
//! frame cut short is dropped after `server.request_timeout_ms`; at most
//! `kafka.max_connections` connections are open at once. With credentials configured, a
//! connection authenticates with SASL/PLAIN (the password is a token of `[auth]`), and what it
//! may do is what that token may do over REST.

mod api;
pub mod batch;
mod group_api;
mod groups;
mod producers;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::future::LocalBoxFuture;
use futures_util::stream::FuturesOrdered;
use futures_util::{FutureExt, StreamExt};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::auth::Principal;
use crate::http::metrics::Metrics;
use crate::log::Log;

pub use api::SUPPORTED;

/// A running Kafka listener.
#[derive(Debug)]
pub struct KafkaListener {
    address: SocketAddr,
    advertised: String,
}

impl KafkaListener {
    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The `host:port` that clients are told to connect to.
    pub fn advertised(&self) -> &str {
        &self.advertised
    }
}

/// What every connection shares.
pub(crate) struct Broker {
    log: Log,
    metrics: Metrics,
    /// This node's broker id.
    node_id: i32,
    host: String,
    port: i32,
    max_request_bytes: usize,
    request_timeout: Duration,
    producers: producers::Producers,
    /// The consumer groups this node coordinates.
    groups: groups::Coordinator,
    /// Who a client is when the server needs no credentials.
    anonymous: Arc<Principal>,
}

/// Starts the listener of `log`'s `[kafka]` settings on the current actix system, serving
/// connections on `threads` threads of their own; `tls`, when given, is the server's TLS
/// configuration ([`tls::server_config`](crate::tls::server_config)), which the listener
/// speaks too.
///
/// # Errors
/// The address cannot be bound.
pub async fn listen(
    log: Log,
    metrics: Metrics,
    tls: Option<Arc<rustls::ServerConfig>>,
    threads: usize,
) -> io::Result<KafkaListener> {
    let config = log.config();
    let settings = &config.kafka;
    let listener = TcpListener::bind(&settings.bind).await.map_err(|err| {
        io::Error::new(
            err.kind(),
            format!("cannot listen on {} (kafka.bind): {err}", settings.bind),
        )
    })?;
    let address = listener.local_addr()?;
    let advertised = if settings.advertised.is_empty() {
        let host = if address.ip().is_unspecified() {
            "127.0.0.1".to_owned()
        } else {
            address.ip().to_string()
        };
        format!("{host}:{}", address.port())
    } else {
        settings.advertised.clone()
    };
    let (host, port) = advertised
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)))
        .ok_or_else(|| io::Error::other(format!("{advertised:?} is not host:port")))?;
    let broker = Arc::new(Broker {
        node_id: node_id(&log),
        host,
        port: i32::from(port),
        max_request_bytes: settings.max_request_bytes,
        request_timeout: Duration::from_millis(config.server.request_timeout_ms),
        producers: producers::Producers::default(),
        groups: groups::Coordinator::default(),
        anonymous: Arc::new(Principal::with_every_permission("anonymous")),
        metrics,
        log: log.clone(),
    });
    let tls = tls.map(|config| {
        let mut config = (*config).clone();
        // The REST listener asks for HTTP/1.1; Kafka clients ask for nothing.
        config.alpn_protocols.clear();
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    });
    actix::spawn(end_group_sessions(Arc::downgrade(&broker)));
    let workers: Vec<actix::Arbiter> = (0..threads.max(1)).map(|_| actix::Arbiter::new()).collect();
    let open = Arc::new(AtomicUsize::new(0));
    let max_connections = settings.max_connections;
    actix::spawn(async move {
        let mut next = 0;
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors, say: wait rather than spin.
                    log::warn!("kafka: accepting a connection: {err}");
                    actix::clock::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if open.load(Ordering::Relaxed) >= max_connections {
                log::warn!("kafka: {peer} refused: {max_connections} connections open");
                continue;
            }
            let Ok(stream) = stream.into_std() else {
                continue;
            };
            let (broker, tls, open) = (broker.clone(), tls.clone(), open.clone());
            open.fetch_add(1, Ordering::Relaxed);
            let worker = &workers[next % workers.len()];
            next += 1;
            worker.spawn_fn(move || {
                actix::spawn(async move {
                    if let Err(err) = connection(&broker, stream, tls, peer).await {
                        log::debug!("kafka: {peer}: {err}");
                    }
                    open.fetch_sub(1, Ordering::Relaxed);
                });
            });
        }
    });
    Ok(KafkaListener {
        address,
        advertised,
    })
}

/// How often the groups' sessions and rebalances are looked at for their end.
const GROUP_TICK: Duration = Duration::from_millis(100);

/// Ends the groups' sessions and rebalances whose time is up, as long as the listener lives.
async fn end_group_sessions(broker: std::sync::Weak<Broker>) {
    let mut ticks = actix::clock::interval(GROUP_TICK);
    loop {
        ticks.tick().await;
        let Some(broker) = broker.upgrade() else {
            return;
        };
        broker.groups.tick(Instant::now());
    }
}

/// This node's broker id: 0 outside a cluster; in one, a number of its node's name, the same
/// on every node and across restarts.
fn node_id(log: &Log) -> i32 {
    log.cluster()
        .map_or(0, |cluster| broker_id_of(cluster.node()))
}

/// The broker id of the node named `node` (FNV-1a, 31 bits).
pub(crate) fn broker_id_of(node: &str) -> i32 {
    let hash = node.bytes().fold(0x811c_9dc5u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    (hash & 0x7fff_ffff) as i32
}

async fn connection(
    broker: &Broker,
    stream: std::net::TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    peer: SocketAddr,
) -> io::Result<()> {
    let stream = TcpStream::from_std(stream)?;
    stream.set_nodelay(true)?;
    match tls {
        None => serve(broker, stream, peer).await,
        Some(acceptor) => {
            let handshake = acceptor.accept(stream);
            let stream = actix::clock::timeout(broker.request_timeout, handshake)
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake"))??;
            serve(broker, stream, peer).await
        }
    }
}

/// What a connection knows of its client.
#[derive(Default)]
pub(crate) struct Session {
    /// Who it authenticated as; `None` before (and always, without credentials).
    principal: Option<Arc<Principal>>,
    /// A SaslHandshake v0 was answered: the next frame is a bare SASL token.
    bare_sasl_next: bool,
    /// The connection ends after this answer.
    closing: bool,
    /// The client's address, which DescribeGroups shows of its members.
    peer: Option<SocketAddr>,
}

impl Session {
    /// Who the client is, when the listener needs no credentials or it authenticated.
    fn principal(&self, broker: &Broker) -> Option<Arc<Principal>> {
        match &self.principal {
            Some(principal) => Some(principal.clone()),
            None if !broker.log.credentials().required() => Some(broker.anonymous.clone()),
            None => None,
        }
    }
}

/// Requests of a connection read ahead of their answers at most: produces whose appends
/// were handed over, waiting for their commits.
const PIPELINED: usize = 16;

/// Serves one connection until the client leaves: a task reads its frames as they come; each
/// is answered in order. A produce whose appends were handed to the committers in arrival
/// order is answered once committed while the next requests are read (clients keep several
/// in flight, and their batches then share commits); any other request is answered before
/// the next is read.
async fn serve<S: AsyncRead + AsyncWrite + Unpin + 'static>(
    broker: &Broker,
    stream: S,
    peer: SocketAddr,
) -> io::Result<()> {
    let (reader, mut writer) = tokio::io::split(stream);
    let (frames_in, mut frames) = tokio::sync::mpsc::channel(PIPELINED);
    let reading = actix::spawn(read_frames(
        reader,
        broker.max_request_bytes,
        broker.request_timeout,
        frames_in,
    ));
    let answered = answer_frames(broker, &mut frames, &mut writer, peer).await;
    reading.abort();
    answered?;
    writer.flush().await
}

/// Reads frames from `reader` into `frames` until the connection ends: waiting for a
/// request has no limit; once its first byte came, the rest must come within
/// `request_timeout`. A frame over `max_request_bytes` ends the connection unread.
async fn read_frames<R: AsyncRead + Unpin>(
    mut reader: R,
    max_request_bytes: usize,
    request_timeout: Duration,
    frames: tokio::sync::mpsc::Sender<io::Result<Bytes>>,
) {
    loop {
        let mut size = [0u8; 4];
        match reader.read(&mut size[..1]).await {
            Ok(0) => return,
            Ok(_) => {}
            Err(err) => {
                let _ = frames.send(Err(err)).await;
                return;
            }
        }
        let frame = actix::clock::timeout(request_timeout, async {
            reader.read_exact(&mut size[1..]).await?;
            let size = i32::from_be_bytes(size);
            let size = usize::try_from(size)
                .ok()
                .filter(|&size| size <= max_request_bytes)
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "a frame of {size} bytes (kafka.max_request_bytes is \
                             {max_request_bytes})"
                        ),
                    )
                })?;
            let mut frame = BytesMut::zeroed(size);
            reader.read_exact(&mut frame).await?;
            Ok(frame.freeze())
        })
        .await
        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "a frame cut short")));
        let failed = frame.is_err();
        if frames.send(frame).await.is_err() || failed {
            return;
        }
    }
}

/// Answers the frames of a connection, in order, until they end or the session closes.
async fn answer_frames<W: AsyncWrite + Unpin>(
    broker: &Broker,
    frames: &mut tokio::sync::mpsc::Receiver<io::Result<Bytes>>,
    writer: &mut W,
    peer: SocketAddr,
) -> io::Result<()> {
    let mut session = Session {
        peer: Some(peer),
        ..Session::default()
    };
    let mut pipelined: FuturesOrdered<LocalBoxFuture<'_, Option<Frame>>> = FuturesOrdered::new();
    loop {
        tokio::select! {
            Some(answer) = pipelined.next(), if !pipelined.is_empty() => {
                write(writer, answer).await?;
            }
            frame = frames.recv(), if pipelined.len() < PIPELINED => {
                let Some(frame) = frame else {
                    break;
                };
                let frame = frame?;
                if session.bare_sasl_next {
                    session.bare_sasl_next = false;
                    let answer = api::bare_sasl(broker, &mut session, &frame);
                    while let Some(earlier) = pipelined.next().await {
                        write(writer, earlier).await?;
                    }
                    write(writer, answer).await?;
                } else {
                    match request(broker, &mut session, frame) {
                        Next::Pipelined(answer) => pipelined.push_back(answer),
                        Next::InTurn(answer) => {
                            while let Some(earlier) = pipelined.next().await {
                                write(writer, earlier).await?;
                            }
                            write(writer, answer.await).await?;
                        }
                    }
                }
                if session.closing {
                    break;
                }
            }
        }
    }
    while let Some(answer) = pipelined.next().await {
        write(writer, answer).await?;
    }
    Ok(())
}

/// Writes `answer`, if there is one.
async fn write<W: AsyncWrite + Unpin>(writer: &mut W, answer: Option<Frame>) -> io::Result<()> {
    if let Some(answer) = answer {
        writer.write_all(&answer.head).await?;
        writer.write_all(&answer.body).await?;
    }
    Ok(())
}

/// A request frame's answer to come (a whole frame), `None` when none is due (a Produce with
/// `acks=0`).
type Next<'b, 's> = api::Next<'b, 's, Option<Frame>>;

/// The answer of one request frame.
fn request<'b: 's, 's>(
    broker: &'b Broker,
    session: &'s mut Session,
    mut frame: Bytes,
) -> Next<'b, 's> {
    let now = |frame: Option<Frame>| Next::InTurn(Box::pin(std::future::ready(frame)));
    if frame.len() < 8 {
        session.closing = true;
        return now(None);
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let Ok(api) = ApiKey::try_from(key) else {
        return now(Some(unsupported(correlation_id, key)));
    };
    let started = Instant::now();
    let supported = SUPPORTED
        .iter()
        .any(|&(known, min, max)| known == api && (min..=max).contains(&version));
    if !supported && api != ApiKey::ApiVersions {
        let error = error_name(kafka_protocol::ResponseError::UnsupportedVersion.code());
        broker
            .metrics
            .kafka_request(api_name(api), &error, started.elapsed());
        return now(Some(unsupported(correlation_id, key)));
    }
    // ApiVersions is answered in whatever version it is asked (KIP-511): a version above those
    // known is read with the header of the highest.
    let header_version = match api {
        ApiKey::ApiVersions => api.request_header_version(version.min(api::API_VERSIONS_MAX)),
        _ => api.request_header_version(version),
    };
    let header = match RequestHeader::decode(&mut frame, header_version) {
        Ok(header) => header,
        Err(err) => {
            log::debug!("kafka: an unreadable request header: {err}");
            session.closing = true;
            return now(None);
        }
    };
    let framed = move |answer: Option<Answer>| {
        let error = answer.as_ref().map_or(0, |answer| answer.error);
        broker
            .metrics
            .kafka_request(api_name(api), &error_name(error), started.elapsed());
        let answer = answer?;
        Some(Frame::of(api, answer.version, correlation_id, answer.body))
    };
    match api::answer(broker, session, api, &header, frame) {
        api::Next::Pipelined(answer) => Next::Pipelined(Box::pin(answer.map(framed))),
        api::Next::InTurn(answer) => Next::InTurn(Box::pin(answer.map(framed))),
    }
}

/// An answer to a request: its encoded body, the version it is encoded in, and the error
/// code the metrics count it under (the worst of its parts; 0 for none).
pub(crate) struct Answer {
    body: Bytes,
    version: i16,
    error: i16,
}

impl Answer {
    /// `response` encoded in `version`.
    fn of<R: Encodable>(response: &R, version: i16, error: i16) -> Option<Self> {
        let mut body = BytesMut::new();
        match response.encode(&mut body, version) {
            Ok(()) => Some(Self {
                body: body.freeze(),
                version,
                error,
            }),
            Err(err) => {
                log::error!("kafka: a response that does not encode: {err}");
                None
            }
        }
    }
}

/// A response frame: its size and header, then its body, written as they are (a fetch's body
/// is most of what the listener sends: it is not copied again).
pub(crate) struct Frame {
    head: Vec<u8>,
    body: Bytes,
}

impl Frame {
    /// The frame of `body`, an answer of `api` in `version` to request `correlation_id`.
    fn of(api: ApiKey, version: i16, correlation_id: i32, body: Bytes) -> Self {
        let mut header = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut header, api.response_header_version(version))
            .expect("a response header encodes");
        Self::whole(&header, body)
    }

    /// A frame of `head` (after the size) and `body`.
    fn whole(head: &[u8], body: Bytes) -> Self {
        let size = (head.len() + body.len()) as i32;
        let mut frame = size.to_be_bytes().to_vec();
        frame.extend_from_slice(head);
        Self { head: frame, body }
    }
}

/// The answer to a request of an API key or version this listener does not serve: its
/// correlation id and `UNSUPPORTED_VERSION`. Clients ask ApiVersions first and never send one;
/// a client that does learns why instead of losing its connection.
fn unsupported(correlation_id: i32, key: i16) -> Frame {
    log::debug!("kafka: a request of API key {key} in a version not served");
    let code = kafka_protocol::ResponseError::UnsupportedVersion.code();
    let mut head = correlation_id.to_be_bytes().to_vec();
    head.extend_from_slice(&code.to_be_bytes());
    Frame::whole(&head, Bytes::new())
}

/// An error code's name in the metrics: `none`, or the protocol's (`CorruptMessage`, ...).
fn error_name(code: i16) -> String {
    kafka_protocol::ResponseError::try_from_code(code).map_or("none".into(), |err| err.to_string())
}

/// An API's name in the metrics: `Produce`, `Fetch`, ...
fn api_name(api: ApiKey) -> &'static str {
    SUPPORTED
        .iter()
        .find(|(known, ..)| *known == api)
        .map_or("other", |&(known, ..)| api::name(known))
}
