//! The Kafka listener's frame decoding, fuzzed: valid requests of every API key and version
//! it serves (a produce carrying real record batches), mutated (bytes flipped, cut short,
//! lengths and counts made huge, bytes added), sent over a socket to a listener in this
//! process. Whatever comes, the listener answers or closes that connection, and keeps serving
//! the next one: no panic, and no allocation sized by a count the frame cannot hold (before
//! kafka-protocol was patched, a request stating 2^31 array elements aborted the process,
//! which here is the test's own).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::BytesMut;
use durability::kafka::{SUPPORTED, batch};
use durability::log::{Header, Payload, Record};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, CreateTopicsRequest, DeleteGroupsRequest, DeleteTopicsRequest,
    DescribeClusterRequest, DescribeConfigsRequest, DescribeGroupsRequest, FetchRequest,
    FindCoordinatorRequest, GroupId, HeartbeatRequest, InitProducerIdRequest, JoinGroupRequest,
    LeaveGroupRequest, ListGroupsRequest, ListOffsetsRequest, MetadataRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, ProduceRequest, RequestHeader,
    SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use proptest::prelude::*;

use super::{fuzz_cases, runner};

/// A listener over a fresh log, served by a thread of its own for the test's life.
fn listener() -> (tempfile::TempDir, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = durability::Config::for_tests(dir.path());
    config.kafka.bind = "127.0.0.1:0".into();
    config.kafka.max_request_bytes = 1 << 20;
    config.server.request_timeout_ms = 2_000;
    let (found, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix::System::new().block_on(async move {
            let log = durability::Log::open(config).expect("open the log");
            let metrics = durability::http::metrics::Metrics::for_log(&log);
            let kafka = durability::kafka::listen(log, metrics, None, 1)
                .await
                .expect("listen");
            found.send(kafka.address()).unwrap();
            std::future::pending::<()>().await;
        });
    });
    (dir, address.recv().unwrap())
}

/// A produce's records field: one batch of records with every part.
fn records() -> Vec<u8> {
    let record = |offset: u64, payload: Payload| Record {
        offset,
        key: None,
        payload,
        message_key: Some(b"k".to_vec()),
        headers: vec![Header::new("h", "v")],
        appended_at: 1_800_000_000_000,
    };
    let mut bytes = Vec::new();
    batch::encode_records(
        &[
            record(0, Payload::json("{\"a\":1}")),
            record(1, Payload::Binary(vec![0, 1])),
        ],
        &mut bytes,
    );
    bytes
}

/// A valid body of `api`'s request in `version`.
fn body(api: ApiKey, version: i16) -> Vec<u8> {
    let mut out = BytesMut::new();
    let topic = || TopicName(StrBytes::from_static_str("fuzz"));
    let group = || GroupId(StrBytes::from_static_str("fuzz"));
    match api {
        ApiKey::ApiVersions => {
            let mut request = ApiVersionsRequest::default();
            request.client_software_name = StrBytes::from_static_str("fuzz");
            request.client_software_version = StrBytes::from_static_str("1");
            request.encode(&mut out, version)
        }
        ApiKey::Metadata => MetadataRequest::default().encode(&mut out, version),
        ApiKey::Produce => {
            let mut partition = PartitionProduceData::default();
            partition.index = 1;
            partition.records = Some(records().into());
            let mut data = TopicProduceData::default();
            data.name = topic();
            data.partition_data = vec![partition];
            let mut request = ProduceRequest::default();
            request.acks = -1;
            request.timeout_ms = 1_000;
            request.topic_data = vec![data];
            request.encode(&mut out, version)
        }
        ApiKey::Fetch => {
            let mut request = FetchRequest::default();
            request.max_bytes = 1 << 16;
            request.encode(&mut out, version)
        }
        ApiKey::ListOffsets => ListOffsetsRequest::default().encode(&mut out, version),
        ApiKey::InitProducerId => InitProducerIdRequest::default().encode(&mut out, version),
        ApiKey::CreateTopics => CreateTopicsRequest::default().encode(&mut out, version),
        ApiKey::DeleteTopics => DeleteTopicsRequest::default().encode(&mut out, version),
        ApiKey::SaslHandshake => {
            let mut request = SaslHandshakeRequest::default();
            request.mechanism = StrBytes::from_static_str("PLAIN");
            request.encode(&mut out, version)
        }
        ApiKey::SaslAuthenticate => SaslAuthenticateRequest::default().encode(&mut out, version),
        ApiKey::FindCoordinator => {
            let mut request = FindCoordinatorRequest::default();
            if version < 4 {
                request.key = StrBytes::from_static_str("fuzz");
            } else {
                request.coordinator_keys = vec![StrBytes::from_static_str("fuzz")];
            }
            request.encode(&mut out, version)
        }
        ApiKey::JoinGroup => {
            let mut protocol = JoinGroupRequestProtocol::default();
            protocol.name = StrBytes::from_static_str("range");
            protocol.metadata = vec![0, 1, 0, 0, 0, 1, 0, 4, b'f', b'u', b'z', b'z'].into();
            let mut request = JoinGroupRequest::default();
            request.group_id = group();
            request.session_timeout_ms = 6_000;
            request.rebalance_timeout_ms = 1_000;
            request.protocol_type = StrBytes::from_static_str("consumer");
            request.protocols = vec![protocol];
            request.encode(&mut out, version)
        }
        ApiKey::SyncGroup => {
            let mut request = SyncGroupRequest::default();
            request.group_id = group();
            request.member_id = StrBytes::from_static_str("fuzz-member");
            request.encode(&mut out, version)
        }
        ApiKey::Heartbeat => {
            let mut request = HeartbeatRequest::default();
            request.group_id = group();
            request.encode(&mut out, version)
        }
        ApiKey::LeaveGroup => {
            let mut request = LeaveGroupRequest::default();
            request.group_id = group();
            if version >= 3 {
                request.members = vec![MemberIdentity::default()];
            }
            request.encode(&mut out, version)
        }
        ApiKey::OffsetCommit => {
            let mut partition = OffsetCommitRequestPartition::default();
            partition.committed_offset = 0;
            partition.committed_metadata = Some(StrBytes::from_static_str("m"));
            let mut committed = OffsetCommitRequestTopic::default();
            committed.name = topic();
            committed.partitions = vec![partition];
            let mut request = OffsetCommitRequest::default();
            request.group_id = group();
            request.generation_id_or_member_epoch = -1;
            request.topics = vec![committed];
            request.encode(&mut out, version)
        }
        ApiKey::OffsetFetch => {
            let mut request = OffsetFetchRequest::default();
            if version < 8 {
                request.group_id = group();
            } else {
                request.groups = vec![OffsetFetchRequestGroup::default().with_group_id(group())];
            }
            request.encode(&mut out, version)
        }
        ApiKey::ListGroups => ListGroupsRequest::default().encode(&mut out, version),
        ApiKey::DescribeGroups => {
            let mut request = DescribeGroupsRequest::default();
            request.groups = vec![group()];
            request.encode(&mut out, version)
        }
        ApiKey::DeleteGroups => {
            let mut request = DeleteGroupsRequest::default();
            request.groups_names = vec![group()];
            request.encode(&mut out, version)
        }
        ApiKey::OffsetDelete => {
            let mut request = OffsetDeleteRequest::default();
            request.group_id = group();
            request.encode(&mut out, version)
        }
        ApiKey::DescribeConfigs => {
            let mut resource = DescribeConfigsResource::default();
            resource.resource_type = 2;
            resource.resource_name = StrBytes::from_static_str("fuzz");
            let mut request = DescribeConfigsRequest::default();
            request.resources = vec![resource];
            request.encode(&mut out, version)
        }
        ApiKey::DescribeCluster => DescribeClusterRequest::default().encode(&mut out, version),
        other => panic!("no body for {other:?}"),
    }
    .expect("a default request encodes");
    out.to_vec()
}

/// A whole frame of `api`'s request in `version`: its header and `body`.
fn frame(api: ApiKey, version: i16, body: &[u8]) -> Vec<u8> {
    let mut header = BytesMut::new();
    let mut fields = RequestHeader::default();
    fields.request_api_key = api as i16;
    fields.request_api_version = version;
    fields.correlation_id = 7;
    fields.client_id = Some(StrBytes::from_static_str("fuzz"));
    fields
        .encode(&mut header, api.request_header_version(version))
        .unwrap();
    let mut frame = ((header.len() + body.len()) as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&header);
    frame.extend_from_slice(body);
    frame
}

/// Sends `bytes` on a fresh connection and reads until the listener answers, closes, or a
/// fifth of a second passes.
fn exchange(address: SocketAddr, bytes: &[u8]) {
    let mut stream = TcpStream::connect(address).expect("the listener accepts");
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let _ = stream.write_all(bytes);
    let mut answer = [0u8; 4096];
    let _ = stream.read(&mut answer);
}

/// Whether the listener answers an ApiVersions request, as a client's first.
fn answers(address: SocketAddr) -> bool {
    let mut stream = TcpStream::connect(address).expect("the listener accepts");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(&frame(
            ApiKey::ApiVersions,
            0,
            &body(ApiKey::ApiVersions, 0),
        ))
        .unwrap();
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).is_ok() && i32::from_be_bytes(size) > 6
}

/// The answer's correlation id to `frame`, sent on a fresh connection; `None` when the
/// connection closed without one.
fn answered(address: SocketAddr, frame: &[u8]) -> Option<i32> {
    let mut stream = TcpStream::connect(address).expect("the listener accepts");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(frame).unwrap();
    let mut head = [0u8; 8];
    stream.read_exact(&mut head).ok()?;
    Some(i32::from_be_bytes(head[4..8].try_into().unwrap()))
}

/// Every version of every API served, sent well-formed, is answered (a request read with the
/// wrong header version would be misread, and its connection closed).
#[test]
fn every_version_served_is_answered() {
    let (_dir, address) = listener();
    for &(api, min, max) in SUPPORTED {
        for version in min..=max {
            let frame = frame(api, version, &body(api, version));
            assert_eq!(answered(address, &frame), Some(7), "{api:?} v{version}");
        }
    }
}

/// How a valid frame is damaged.
#[derive(Debug, Clone)]
enum Damage {
    Flip { at: usize, bits: u8 },
    Cut { at: usize },
    Huge { at: usize, value: i32 },
    Extend { bytes: Vec<u8> },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(at, bits)| Damage::Flip { at, bits }),
        any::<usize>().prop_map(|at| Damage::Cut { at }),
        (
            any::<usize>(),
            prop_oneof![Just(i32::MAX), Just(0x033c_0c00), Just(-2), Just(1 << 30)]
        )
            .prop_map(|(at, value)| Damage::Huge { at, value }),
        proptest::collection::vec(any::<u8>(), 1..64).prop_map(|bytes| Damage::Extend { bytes }),
    ]
}

/// Damages the part of `frame` after its size, keeping the size right unless the damage cuts.
fn damaged(mut frame: Vec<u8>, damages: &[Damage]) -> Vec<u8> {
    for damage in damages {
        let len = frame.len().max(5);
        match damage {
            Damage::Flip { at, bits } => {
                let at = 4 + at % (len - 4);
                if let Some(byte) = frame.get_mut(at) {
                    *byte ^= bits;
                }
            }
            Damage::Cut { at } => frame.truncate(4 + at % (len - 4)),
            Damage::Huge { at, value } => {
                let at = 4 + at % (len - 4);
                let end = (at + 4).min(frame.len());
                frame[at..end].copy_from_slice(&value.to_be_bytes()[..end - at]);
            }
            Damage::Extend { bytes } => {
                frame.extend_from_slice(bytes);
                let size = (frame.len() - 4) as i32;
                frame[..4].copy_from_slice(&size.to_be_bytes());
            }
        }
    }
    frame
}

/// Every API key and version served, as valid requests damaged at random: the listener
/// answers or drops each, and still answers the next client.
#[test]
fn damaged_requests_never_stop_the_listener() {
    let (_dir, address) = listener();
    assert!(answers(address));
    let requests: Vec<(ApiKey, i16)> = SUPPORTED
        .iter()
        .flat_map(|&(api, min, max)| (min..=max).map(move |version| (api, version)))
        .collect();
    let strategy = (0..requests.len(), proptest::collection::vec(damage(), 1..4));
    runner(fuzz_cases(300))
        .run(&strategy, |(which, damages)| {
            let (api, version) = requests[which];
            let frame = damaged(frame(api, version, &body(api, version)), &damages);
            exchange(address, &frame);
            prop_assert!(answers(address), "{api:?} v{version} {damages:?}");
            Ok(())
        })
        .unwrap();
}

/// The frames upstream fixes name: a Metadata v0 stating 54 million topics in 8 bytes, and an
/// i32::MAX count in every array position of a Produce. Each is refused; nothing is allocated
/// for the count.
#[test]
fn counts_larger_than_the_frame_are_refused() {
    let (_dir, address) = listener();
    // Size, Metadata, v0, correlation id 1, no client id, then the topic count alone.
    let metadata = [
        0, 0, 0, 14, 0, 3, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0x03, 0x3c, 0x0c, 0,
    ];
    exchange(address, &metadata);
    let produce = frame(ApiKey::Produce, 3, &body(ApiKey::Produce, 3));
    for at in 4..produce.len() - 4 {
        let mut huge = produce.clone();
        huge[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        exchange(address, &huge);
    }
    assert!(answers(address));
}

/// Arbitrary bytes as a produce's records never panic the batch decoder, and a valid batch
/// damaged anywhere but its free fields is refused whole.
#[test]
fn batch_decoding_survives_any_bytes() {
    let valid = records();
    let strategy = (
        proptest::collection::vec(any::<u8>(), 0..512),
        any::<usize>(),
        1u8..,
    );
    runner(fuzz_cases(3000))
        .run(&strategy, |(noise, at, bits)| {
            let _ = batch::decode_batches(&noise, 1 << 20);
            let mut damaged = valid.clone();
            let at = at % damaged.len();
            damaged[at] ^= bits;
            // The base offset and the leader epoch are not checked; everything else is.
            if !(at < 8 || (12..16).contains(&at)) {
                prop_assert!(batch::decode_batches(&damaged, 1 << 20).is_err(), "{at}");
            }
            Ok(())
        })
        .unwrap();
}
