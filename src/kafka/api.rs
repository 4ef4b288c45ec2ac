//! What each request of the Kafka protocol does, as `Log` calls, and the protocol's error
//! codes for the log's errors.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{LocalBoxFuture, join_all};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, FetchRequest, FetchResponse,
    InitProducerIdRequest, InitProducerIdResponse, ListOffsetsRequest, ListOffsetsResponse,
    MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, ProducerId, RequestHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
    TopicName,
};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeClusterRequest, DescribeConfigsRequest, DescribeGroupsRequest,
    FindCoordinatorRequest, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
    ListGroupsRequest, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest,
    SyncGroupRequest,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::batch::{BatchError, decode_batches, encode_records, encoded_size};
use super::group_api;
use super::producers::{Batch, Check, Producers};
use super::{Answer, Broker, Frame, Session};
use crate::auth::{Permission, Principal};
use crate::error::{Error, ErrorCode};
use crate::log::{AppendOutcome, AppendRejection, NewRecord, Page, Submitted};

/// Every API key served, with the versions served: what ApiVersions answers.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 6),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, API_VERSIONS_MAX),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 5),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::ListGroups, 0, 4),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::DescribeCluster, 0, 1),
];

/// The highest ApiVersions version served.
pub(super) const API_VERSIONS_MAX: i16 = 3;

/// The name of an API in the metrics.
pub(super) fn name(api: ApiKey) -> &'static str {
    match api {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::DeleteTopics => "DeleteTopics",
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::SaslHandshake => "SaslHandshake",
        ApiKey::SaslAuthenticate => "SaslAuthenticate",
        ApiKey::FindCoordinator => "FindCoordinator",
        ApiKey::JoinGroup => "JoinGroup",
        ApiKey::SyncGroup => "SyncGroup",
        ApiKey::Heartbeat => "Heartbeat",
        ApiKey::LeaveGroup => "LeaveGroup",
        ApiKey::OffsetCommit => "OffsetCommit",
        ApiKey::OffsetFetch => "OffsetFetch",
        ApiKey::ListGroups => "ListGroups",
        ApiKey::DescribeGroups => "DescribeGroups",
        ApiKey::DeleteGroups => "DeleteGroups",
        ApiKey::OffsetDelete => "OffsetDelete",
        ApiKey::DescribeConfigs => "DescribeConfigs",
        ApiKey::DescribeCluster => "DescribeCluster",
        _ => "other",
    }
}

/// The one mechanism served: PLAIN, whose password is a token of `[auth]`.
const PLAIN: &str = "PLAIN";

/// The protocol's code for no error.
pub(super) const NONE: i16 = 0;

/// A request's answer to come.
pub(super) enum Next<'b, 's, T = Option<Answer>> {
    /// What had to happen in the order the requests came has happened (a produce's appends
    /// were handed over), and the answer needs nothing of the connection's session: the next
    /// request may be read before this one is answered.
    Pipelined(LocalBoxFuture<'b, T>),
    /// To be answered before the next request is read.
    InTurn(LocalBoxFuture<'s, T>),
}

/// The answer of one request (its header read; `body` is the rest of the frame).
pub(super) fn answer<'b: 's, 's>(
    broker: &'b Broker,
    session: &'s mut Session,
    api: ApiKey,
    header: &RequestHeader,
    mut body: Bytes,
) -> Next<'b, 's> {
    let now = |answer: Option<Answer>| Next::InTurn(Box::pin(std::future::ready(answer)));
    let version = header.request_api_version;
    if api == ApiKey::ApiVersions {
        return now(api_versions(&mut body, version));
    }
    // Before a client with credentials to show authenticates, it may only do that.
    let principal = session.principal(broker);
    if principal.is_none() && !matches!(api, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) {
        log::debug!("kafka: {} before authenticating", name(api));
        session.closing = true;
        return now(None);
    }
    macro_rules! decoded {
        ($request:ty) => {
            match <$request>::decode(&mut body, version) {
                Ok(request) => request,
                Err(err) => {
                    log::debug!("kafka: an unreadable {} request: {err}", name(api));
                    session.closing = true;
                    return now(None);
                }
            }
        };
    }
    let principal =
        principal.unwrap_or_else(|| Arc::new(Principal::new("unauthenticated", vec![])));
    let later = |answer: Answering<'b>| Next::InTurn(answer);
    match api {
        ApiKey::SaslHandshake => now(sasl_handshake(
            session,
            decoded!(SaslHandshakeRequest),
            version,
        )),
        ApiKey::SaslAuthenticate => now(sasl_authenticate(
            broker,
            session,
            decoded!(SaslAuthenticateRequest),
            version,
        )),
        ApiKey::Produce => match produce(broker, &principal, decoded!(ProduceRequest), version) {
            (answer, true) => Next::Pipelined(answer),
            (answer, false) => Next::InTurn(answer),
        },
        ApiKey::Metadata => {
            let request = decoded!(MetadataRequest);
            later(Box::pin(async move {
                metadata(broker, &principal, request, version).await
            }))
        }
        ApiKey::Fetch => {
            let request = decoded!(FetchRequest);
            later(Box::pin(async move {
                fetch(broker, &principal, request, version).await
            }))
        }
        ApiKey::ListOffsets => {
            let request = decoded!(ListOffsetsRequest);
            later(Box::pin(async move {
                list_offsets(broker, &principal, request, version).await
            }))
        }
        ApiKey::InitProducerId => now(init_producer_id(decoded!(InitProducerIdRequest), version)),
        ApiKey::CreateTopics => {
            let request = decoded!(CreateTopicsRequest);
            later(Box::pin(async move {
                create_topics(broker, &principal, request, version).await
            }))
        }
        ApiKey::DeleteTopics => now(delete_topics(
            &principal,
            decoded!(DeleteTopicsRequest),
            version,
        )),
        ApiKey::FindCoordinator => now(group_api::find_coordinator(
            broker,
            decoded!(FindCoordinatorRequest),
            version,
        )),
        ApiKey::JoinGroup => {
            let request = decoded!(JoinGroupRequest);
            let client_id = header
                .client_id
                .as_ref()
                .map(|id| id.to_string())
                .unwrap_or_default();
            let client_host = session
                .peer
                .map(|peer| format!("/{}", peer.ip()))
                .unwrap_or_default();
            later(Box::pin(group_api::join_group(
                broker,
                (client_id, client_host),
                request,
                version,
            )))
        }
        ApiKey::SyncGroup => {
            let request = decoded!(SyncGroupRequest);
            later(Box::pin(group_api::sync_group(broker, request, version)))
        }
        ApiKey::Heartbeat => now(group_api::heartbeat(
            broker,
            decoded!(HeartbeatRequest),
            version,
        )),
        ApiKey::LeaveGroup => now(group_api::leave_group(
            broker,
            decoded!(LeaveGroupRequest),
            version,
        )),
        ApiKey::OffsetCommit => {
            let request = decoded!(OffsetCommitRequest);
            later(Box::pin(async move {
                group_api::offset_commit(broker, &principal, request, version).await
            }))
        }
        ApiKey::OffsetFetch => {
            let request = decoded!(OffsetFetchRequest);
            later(Box::pin(async move {
                group_api::offset_fetch(broker, &principal, request, version).await
            }))
        }
        ApiKey::ListGroups => now(group_api::list_groups(
            broker,
            decoded!(ListGroupsRequest),
            version,
        )),
        ApiKey::DescribeGroups => now(group_api::describe_groups(
            broker,
            decoded!(DescribeGroupsRequest),
            version,
        )),
        ApiKey::DeleteGroups => {
            let request = decoded!(DeleteGroupsRequest);
            later(Box::pin(async move {
                group_api::delete_groups(broker, &principal, request, version).await
            }))
        }
        ApiKey::OffsetDelete => {
            let request = decoded!(OffsetDeleteRequest);
            later(Box::pin(async move {
                group_api::offset_delete(broker, &principal, request, version).await
            }))
        }
        ApiKey::DescribeConfigs => now(group_api::describe_configs(
            broker,
            &principal,
            decoded!(DescribeConfigsRequest),
            version,
        )),
        ApiKey::DescribeCluster => now(group_api::describe_cluster(
            broker,
            decoded!(DescribeClusterRequest),
            version,
        )),
        _ => now(None),
    }
}

/// ApiVersions, in whatever version it is asked (KIP-511): a version above those served gets
/// `UNSUPPORTED_VERSION` in v0, with the versions served, so the client asks again lower.
fn api_versions(body: &mut Bytes, version: i16) -> Option<Answer> {
    let (answered, error_code) = if !(0..=API_VERSIONS_MAX).contains(&version) {
        (0, ResponseError::UnsupportedVersion.code())
    } else {
        // The request carries only the client's name; a body that does not read is no reason
        // to refuse the answer every client needs first.
        let _ = ApiVersionsRequest::decode(body, version);
        (version, NONE)
    };
    let mut response = ApiVersionsResponse::default();
    response.error_code = error_code;
    response.api_keys = SUPPORTED
        .iter()
        .map(|&(api, min, max)| {
            let mut entry = ApiVersion::default();
            entry.api_key = api as i16;
            entry.min_version = min;
            entry.max_version = max;
            entry
        })
        .collect();
    Answer::of(&response, answered, error_code)
}

fn sasl_handshake(
    session: &mut Session,
    request: SaslHandshakeRequest,
    version: i16,
) -> Option<Answer> {
    let mut response = SaslHandshakeResponse::default();
    response.mechanisms = vec![StrBytes::from_static_str(PLAIN)];
    if request.mechanism.as_str() == PLAIN {
        // Version 0 sends the SASL token next as a bare frame, not in a SaslAuthenticate.
        session.bare_sasl_next = version == 0;
    } else {
        response.error_code = ResponseError::UnsupportedSaslMechanism.code();
    }
    Answer::of(&response, version, response.error_code)
}

fn sasl_authenticate(
    broker: &Broker,
    session: &mut Session,
    request: SaslAuthenticateRequest,
    version: i16,
) -> Option<Answer> {
    let mut response = SaslAuthenticateResponse::default();
    if let Err(why) = authenticate(broker, session, &request.auth_bytes) {
        response.error_code = ResponseError::SaslAuthenticationFailed.code();
        response.error_message = Some(StrBytes::from_string(why));
        session.closing = true;
    }
    Answer::of(&response, version, response.error_code)
}

/// The token of a SaslHandshake v0: a bare frame, answered with an empty one, or the
/// connection closes.
pub(super) fn bare_sasl(broker: &Broker, session: &mut Session, token: &[u8]) -> Option<Frame> {
    match authenticate(broker, session, token) {
        Ok(()) => Some(Frame::whole(&[], Bytes::new())),
        Err(why) => {
            log::debug!("kafka: {why}");
            session.closing = true;
            None
        }
    }
}

/// Checks a SASL/PLAIN token (`authzid NUL user NUL password`): the password must be one of
/// the server's tokens, and the session takes its principal.
fn authenticate(broker: &Broker, session: &mut Session, token: &[u8]) -> Result<(), String> {
    let mut parts = token.split(|&byte| byte == 0);
    let (Some(_authzid), Some(_user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("a PLAIN token is authzid, user and password, NUL-separated".into());
    };
    let password = std::str::from_utf8(password).map_err(|_| "a password that is not UTF-8")?;
    match broker.log.credentials().authenticate(password) {
        Some(principal) => {
            session.principal = Some(principal);
            Ok(())
        }
        None => {
            broker
                .metrics
                .count_auth_failure(crate::http::auth::Refusal::Unknown);
            Err("no token of this server is that password".into())
        }
    }
}

/// The error code of a log error.
pub(super) fn code_of(err: &Error) -> i16 {
    let error = match err.code() {
        ErrorCode::InvalidName => ResponseError::InvalidTopicException,
        ErrorCode::UnknownPartition => ResponseError::UnknownTopicOrPartition,
        ErrorCode::LogTruncated | ErrorCode::InvalidOffset => ResponseError::OffsetOutOfRange,
        ErrorCode::BatchTooLarge => ResponseError::RecordListTooLarge,
        ErrorCode::RecordTooLarge => ResponseError::MessageTooLarge,
        ErrorCode::InvalidRequest => ResponseError::InvalidRecord,
        ErrorCode::Overloaded => ResponseError::ThrottlingQuotaExceeded,
        ErrorCode::NotOwner => ResponseError::NotLeaderOrFollower,
        // The outcome is unknown: the client retries (its sequence numbers, if idempotent,
        // keep a retry from writing twice).
        _ => ResponseError::KafkaStorageError,
    };
    error.code()
}

/// The error code of an append's refusal.
fn rejection_code(rejection: &AppendRejection) -> i16 {
    match rejection {
        AppendRejection::RecordTooLarge { .. } => ResponseError::MessageTooLarge.code(),
        AppendRejection::BatchTooLarge { .. } => ResponseError::RecordListTooLarge.code(),
        _ => ResponseError::InvalidRecord.code(),
    }
}

/// Metadata: this node as the one broker outside a cluster; the topics asked for (all that
/// exist, when none are named), each with its partition count. A topic exists for Kafka
/// clients as soon as it is named, as it does for REST: its partitions are created by their
/// first append.
async fn metadata(
    broker: &Broker,
    principal: &Principal,
    request: MetadataRequest,
    version: i16,
) -> Option<Answer> {
    let mut response = MetadataResponse::default();
    response.brokers = brokers(broker);
    response.cluster_id = Some(StrBytes::from_string(
        broker.log.config().cluster.name.clone(),
    ));
    response.controller_id = BrokerId(broker.node_id);
    let names: Vec<String> = match request.topics {
        Some(topics) => topics
            .into_iter()
            .filter_map(|topic| topic.name.map(|name| name.0.to_string()))
            .collect(),
        None => match broker.log.topics().await {
            Ok(topics) => topics
                .into_iter()
                .map(|topic| topic.name)
                .filter(|name| principal.sees(name))
                .collect(),
            Err(err) => {
                log::debug!("kafka: listing the topics: {err}");
                Vec::new()
            }
        },
    };
    let mut worst = NONE;
    for name in names {
        let mut topic = MetadataResponseTopic::default();
        topic.name = Some(TopicName(StrBytes::from_string(name.clone())));
        if !principal.sees(&name) {
            topic.error_code = ResponseError::TopicAuthorizationFailed.code();
        } else {
            match broker.log.partitions(&name) {
                Err(err) => topic.error_code = code_of(&err),
                Ok(count) => {
                    topic.partitions = (0..count)
                        .map(|index| {
                            let mut partition = MetadataResponsePartition::default();
                            partition.partition_index = index as i32;
                            match leader(broker, &response.brokers, &name, index) {
                                Some(leader) => {
                                    partition.leader_id = BrokerId(leader);
                                    partition.replica_nodes = vec![BrokerId(leader)];
                                    partition.isr_nodes = vec![BrokerId(leader)];
                                }
                                None => {
                                    partition.error_code = ResponseError::LeaderNotAvailable.code();
                                    partition.leader_id = BrokerId(-1);
                                }
                            }
                            partition
                        })
                        .collect();
                }
            }
        }
        if topic.error_code != NONE {
            worst = topic.error_code;
        }
        response.topics.push(topic);
    }
    Answer::of(&response, version, worst)
}

/// The brokers Metadata names: this node outside a cluster; every live node with a Kafka
/// listener in one.
pub(super) fn brokers(broker: &Broker) -> Vec<MetadataResponseBroker> {
    let entry = |id: i32, host: &str, port: i32| {
        let mut entry = MetadataResponseBroker::default();
        entry.node_id = BrokerId(id);
        entry.host = StrBytes::from_string(host.to_owned());
        entry.port = port;
        entry
    };
    let Some(cluster) = broker.log.cluster() else {
        return vec![entry(broker.node_id, &broker.host, broker.port)];
    };
    let mut brokers: Vec<MetadataResponseBroker> = cluster
        .kafka_brokers()
        .into_iter()
        .filter_map(|(node, address)| {
            let (host, port) = address.rsplit_once(':')?;
            Some(entry(super::broker_id_of(&node), host, port.parse().ok()?))
        })
        .collect();
    if !brokers
        .iter()
        .any(|known| known.node_id.0 == broker.node_id)
    {
        brokers.push(entry(broker.node_id, &broker.host, broker.port));
    }
    brokers
}

/// The broker id of the node serving `topic`'s partition `index` now, if one does and is
/// among the `listed` brokers (those with a Kafka listener).
fn leader(
    broker: &Broker,
    listed: &[MetadataResponseBroker],
    topic: &str,
    index: u32,
) -> Option<i32> {
    let Some(cluster) = broker.log.cluster() else {
        return Some(broker.node_id);
    };
    let id = crate::names::PartitionId::new(topic, index).ok()?;
    let volume = crate::routing::volume_of(&id, cluster.volume_count());
    let leader = super::broker_id_of(&cluster.server_of(volume)?);
    listed
        .iter()
        .any(|known| known.node_id.0 == leader)
        .then_some(leader)
}

/// A request's answer to come.
pub(super) type Answering<'a> = LocalBoxFuture<'a, Option<Answer>>;

/// Produce: each partition's batches decoded whole (or refused whole, `CORRUPT_MESSAGE`) and
/// handed to its committer here, in the order the requests came; the partitions of one
/// request are appended together. The answer comes once the records are durable, as `sync`
/// and replication say; `acks=0` is not answered at all.
///
/// Also answers whether every append was handed over: then a later request may be prepared
/// before this one is answered, its appends still after these. Otherwise the answer must be
/// awaited first.
fn produce<'b>(
    broker: &'b Broker,
    principal: &Principal,
    request: ProduceRequest,
    version: i16,
) -> (Answering<'b>, bool) {
    let transactional = request.transactional_id.is_some();
    let mut handed_all = true;
    let mut later: Vec<(String, i32)> = Vec::new();
    let mut writes = Vec::new();
    for topic in request.topic_data {
        let name = topic.name.0.to_string();
        for partition in topic.partition_data {
            let index = partition.index;
            let written: Written<'_> = if transactional {
                ready(Err(ResponseError::TransactionalIdAuthorizationFailed.code()))
            } else if !principal.may(Permission::Produce, Some(&name)) {
                ready(Err(ResponseError::TopicAuthorizationFailed.code()))
            } else {
                // A partition named twice keeps its order: after one that could not be handed
                // over, the next goes the slow way too.
                let keep_order = later.contains(&(name.clone(), index));
                let records = partition.records.unwrap_or_default();
                let (written, handed) =
                    prepare_partition(broker, name.clone(), index, records, keep_order);
                if !handed {
                    handed_all = false;
                    later.push((name.clone(), index));
                }
                written
            };
            writes.push((name.clone(), index, written));
        }
    }
    let acks = request.acks;
    let answer = async move {
        let (places, written): (Vec<_>, Vec<_>) = writes
            .into_iter()
            .map(|(topic, index, written)| ((topic, index), written))
            .unzip();
        let results = join_all(written).await;
        if acks == 0 {
            return None;
        }
        let mut by_topic: BTreeMap<String, Vec<PartitionProduceResponse>> = BTreeMap::new();
        let mut worst = NONE;
        for ((topic, index), result) in places.into_iter().zip(results) {
            let mut answer = PartitionProduceResponse::default();
            answer.index = index;
            match result {
                Ok((base_offset, appended_at)) => {
                    answer.base_offset = base_offset as i64;
                    answer.log_append_time_ms = appended_at;
                }
                Err(code) => {
                    answer.error_code = code;
                    answer.base_offset = -1;
                    worst = code;
                }
            }
            by_topic.entry(topic).or_default().push(answer);
        }
        let mut response = ProduceResponse::default();
        response.responses = by_topic
            .into_iter()
            .map(|(name, partitions)| {
                let mut topic = TopicProduceResponse::default();
                topic.name = TopicName(StrBytes::from_string(name));
                topic.partition_responses = partitions;
                topic
            })
            .collect();
        Answer::of(&response, version, worst)
    };
    (Box::pin(answer), handed_all)
}

/// One partition's share of a Produce to come: its first offset and append time, or why not.
type Written<'a> = LocalBoxFuture<'a, Result<(u64, i64), i16>>;

fn ready<'a>(result: Result<(u64, i64), i16>) -> Written<'a> {
    Box::pin(std::future::ready(result))
}

/// Decodes one partition's share of a Produce and hands its records to the partition's
/// committer now when it can (`slow`: it may not, to keep a partition's order); answers the
/// write to come and whether it was handed over (or refused, which is as final).
fn prepare_partition(
    broker: &Broker,
    topic: String,
    index: i32,
    records: Bytes,
    slow: bool,
) -> (Written<'_>, bool) {
    let log = &broker.log;
    let Ok(partition) = u32::try_from(index) else {
        return (
            ready(Err(ResponseError::UnknownTopicOrPartition.code())),
            true,
        );
    };
    match log.holds(&topic, partition) {
        Ok(true) => {}
        Ok(false) => return (ready(Err(ResponseError::NotLeaderOrFollower.code())), true),
        Err(err) => return (ready(Err(code_of(&err))), true),
    }
    let chunks = match decoded_chunks(broker, &topic, partition, &records) {
        Ok(chunks) => chunks,
        Err(code) => return (ready(Err(code)), true),
    };
    let count: u64 = chunks.iter().map(|chunk| chunk.len() as u64).sum();
    let bytes: u64 = chunks
        .iter()
        .flatten()
        .map(|record| record.payload.len() as u64)
        .sum();
    let submitted = if slow {
        Ok(Submitted::NotNow(chunks))
    } else {
        log.submit_batches(&topic, partition, chunks)
    };
    let (appended, handed): (LocalBoxFuture<'_, _>, bool) = match submitted {
        Err(err) => return (ready(Err(code_of(&err))), true),
        Ok(Submitted::Handed(appended)) => (Box::pin(appended), true),
        Ok(Submitted::NotNow(chunks)) => {
            let topic = topic.clone();
            let appended = async move { log.append_batches(&topic, partition, chunks).await };
            (Box::pin(appended), false)
        }
    };
    let written = async move {
        let appended = appended.await.map_err(|err| code_of(&err))?;
        let mut first = None;
        for appended in appended {
            match appended.outcome {
                AppendOutcome::Appended { offsets } => first = first.or(offsets.first().copied()),
                AppendOutcome::Rejected(rejection) => return Err(rejection_code(&rejection)),
            }
        }
        broker.metrics.appended(&topic, count, bytes);
        let first = first.ok_or_else(|| ResponseError::InvalidRecord.code())?;
        Ok((first, log.now_ms()))
    };
    (Box::pin(written), handed)
}

/// A partition's records of a Produce, decoded and checked (an idempotent producer's
/// sequences accepted, each record given its deduplication key), in batches of at most
/// `log.max_batch_size` records.
fn decoded_chunks(
    broker: &Broker,
    topic: &str,
    partition: u32,
    records: &[u8],
) -> Result<Vec<Vec<NewRecord>>, i16> {
    let batches = decode_batches(records, broker.max_request_bytes).map_err(|err| {
        log::debug!("kafka: produce to {topic}:{partition}: {err}");
        match err {
            BatchError::Corrupt(_) => ResponseError::CorruptMessage.code(),
            BatchError::Unsupported(_) => ResponseError::UnsupportedForMessageFormat.code(),
        }
    })?;
    let max_batch_size = broker.log.config().topic_log(topic).max_batch_size;
    let mut chunks: Vec<Vec<NewRecord>> = Vec::new();
    for batch in batches {
        broker.metrics.kafka_batch(batch.codec);
        let mut records = batch.records;
        if batch.producer_id >= 0 {
            let sent = Batch {
                producer: batch.producer_id,
                epoch: batch.producer_epoch,
                topic,
                partition,
                sequence: batch.base_sequence,
            };
            match broker.producers.accept(&sent, records.len()) {
                Check::Write => {}
                Check::OutOfOrder => return Err(ResponseError::OutOfOrderSequenceNumber.code()),
                Check::StaleEpoch => return Err(ResponseError::InvalidProducerEpoch.code()),
            }
            for (at, record) in records.iter_mut().enumerate() {
                record.key = Some(sent.dedup_key(at));
            }
        }
        // A batch of more records than a REST batch may hold goes as several, in order.
        let mut records = records.into_iter().peekable();
        while records.peek().is_some() {
            chunks.push(records.by_ref().take(max_batch_size).collect());
        }
    }
    if chunks.is_empty() {
        return Err(ResponseError::InvalidRecord.code());
    }
    Ok(chunks)
}

/// Fetch: each partition read from its offset, up to `partition_max_bytes` (at least one
/// record, as Kafka does) and `max_bytes` in all; when less than `min_bytes` came, the
/// fetch waits up to `max_wait_ms` for appends (woken by them, as REST long-polls are).
async fn fetch(
    broker: &Broker,
    principal: &Principal,
    request: FetchRequest,
    version: i16,
) -> Option<Answer> {
    let mut response = FetchResponse::default();
    if request.session_id != 0 || request.session_epoch > 0 {
        // No fetch sessions: the client goes back to full fetches.
        response.error_code = ResponseError::FetchSessionIdNotFound.code();
        return Answer::of(&response, version, response.error_code);
    }
    let wanted: Vec<(String, i32, i64, i32)> = request
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|partition| {
                (
                    topic.topic.0.to_string(),
                    partition.partition,
                    partition.fetch_offset,
                    partition.partition_max_bytes,
                )
            })
        })
        .collect();
    let max_bytes = usize::try_from(request.max_bytes).unwrap_or(0).max(1);
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    let wait = Duration::from_millis(
        u64::try_from(request.max_wait_ms)
            .unwrap_or(0)
            .min(broker.log.config().server.max_wait_ms),
    );
    let mut topics: Vec<&str> = wanted.iter().map(|(topic, ..)| topic.as_str()).collect();
    topics.dedup();
    let read_all = async || Ok(read_partitions(broker, principal, &wanted, max_bytes).await);
    let read = broker
        .log
        .read_until(&topics, wait, read_all, |read: &Vec<FetchedPartition>| {
            let bytes: usize = read.iter().map(|fetched| fetched.bytes).sum();
            bytes >= min_bytes.max(1) || read.iter().any(|fetched| fetched.data.error_code != NONE)
        })
        .await
        .unwrap_or_default();
    let mut worst = NONE;
    let mut by_topic: Vec<FetchableTopicResponse> = Vec::new();
    for (fetched, (topic, ..)) in read.into_iter().zip(&wanted) {
        if fetched.data.error_code != NONE {
            worst = fetched.data.error_code;
        }
        match by_topic.last_mut() {
            Some(last) if last.topic.0.as_str() == topic => last.partitions.push(fetched.data),
            _ => {
                let mut entry = FetchableTopicResponse::default();
                entry.topic = TopicName(StrBytes::from_string(topic.clone()));
                entry.partitions = vec![fetched.data];
                by_topic.push(entry);
            }
        }
    }
    response.responses = by_topic;
    Answer::of(&response, version, worst)
}

/// One partition's part of a fetch, and the record bytes it holds.
#[derive(Default)]
struct FetchedPartition {
    data: PartitionData,
    bytes: usize,
}

/// Reads every partition of a fetch once, together: each up to its own byte limit (at least
/// one record when it has one), then, in order, as many as fit `max_bytes` in all (the first
/// with records whatever its size).
async fn read_partitions(
    broker: &Broker,
    principal: &Principal,
    wanted: &[(String, i32, i64, i32)],
    max_bytes: usize,
) -> Vec<FetchedPartition> {
    let reads = wanted.iter().map(|(topic, index, offset, partition_max)| {
        let limit = usize::try_from(*partition_max).unwrap_or(0).min(max_bytes);
        read_partition(broker, principal, topic, *index, *offset, limit)
    });
    let mut total = 0;
    join_all(reads)
        .await
        .into_iter()
        .zip(wanted)
        .map(|(result, (topic, index, ..))| {
            let mut fetched = FetchedPartition::default();
            fetched.data.partition_index = *index;
            match result {
                Ok((records, bytes, bounds)) => {
                    fetched.data.high_watermark = bounds.next_offset as i64;
                    fetched.data.last_stable_offset = bounds.next_offset as i64;
                    fetched.data.log_start_offset = bounds.oldest_offset as i64;
                    if total == 0 || total + bytes <= max_bytes {
                        total += bytes;
                        broker.metrics.records_read(topic, records.1);
                        fetched.data.records = Some(records.0);
                        fetched.bytes = bytes;
                    }
                }
                Err(code) => {
                    fetched.data.error_code = code;
                    fetched.data.high_watermark = -1;
                }
            }
            fetched
        })
        .collect()
}

/// Reads one partition from `offset`, up to `limit` bytes (at least one record when there is
/// one): its records encoded as batches and their count, their size, and the partition's
/// bounds.
async fn read_partition(
    broker: &Broker,
    principal: &Principal,
    topic: &str,
    index: i32,
    offset: i64,
    limit: usize,
) -> Result<((Bytes, u64), usize, crate::log::Bounds), i16> {
    let log = &broker.log;
    if !principal.may(Permission::Consume, Some(topic)) {
        return Err(ResponseError::TopicAuthorizationFailed.code());
    }
    let partition =
        u32::try_from(index).map_err(|_| ResponseError::UnknownTopicOrPartition.code())?;
    if !log.holds(topic, partition).map_err(|err| code_of(&err))? {
        return Err(ResponseError::NotLeaderOrFollower.code());
    }
    let from = u64::try_from(offset).map_err(|_| ResponseError::OffsetOutOfRange.code())?;
    let bounds = log
        .bounds(topic, partition)
        .await
        .map_err(|err| code_of(&err))?;
    if from < bounds.oldest_offset || from > bounds.next_offset {
        return Err(ResponseError::OffsetOutOfRange.code());
    }
    let mut records = Vec::new();
    let (mut bytes, mut next) = (0, from);
    'pages: while next < bounds.next_offset {
        let page: Page = log
            .read(topic, partition, Some(next), None)
            .await
            .map_err(|err| code_of(&err))?;
        if page.records.is_empty() {
            break;
        }
        for record in page.records {
            let size = encoded_size(&record);
            if bytes + size > limit && !records.is_empty() {
                break 'pages;
            }
            bytes += size;
            next = record.offset + 1;
            records.push(record);
        }
    }
    let mut encoded = Vec::with_capacity(bytes + 64);
    encode_records(&records, &mut encoded);
    Ok(((Bytes::from(encoded), records.len() as u64), bytes, bounds))
}

/// ListOffsets: the oldest offset (-2), the next offset (-1), or the first offset appended
/// at or after a time.
async fn list_offsets(
    broker: &Broker,
    principal: &Principal,
    request: ListOffsetsRequest,
    version: i16,
) -> Option<Answer> {
    let log = &broker.log;
    let mut worst = NONE;
    let mut response = ListOffsetsResponse::default();
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let mut answer = ListOffsetsTopicResponse::default();
        answer.name = topic.name;
        for partition in topic.partitions {
            let mut entry = ListOffsetsPartitionResponse::default();
            entry.partition_index = partition.partition_index;
            let found = async {
                if !principal.may(Permission::Consume, Some(&name)) {
                    return Err(ResponseError::TopicAuthorizationFailed.code());
                }
                let index = u32::try_from(partition.partition_index)
                    .map_err(|_| ResponseError::UnknownTopicOrPartition.code())?;
                if !log.holds(&name, index).map_err(|err| code_of(&err))? {
                    return Err(ResponseError::NotLeaderOrFollower.code());
                }
                let bounds = log
                    .bounds(&name, index)
                    .await
                    .map_err(|err| code_of(&err))?;
                Ok(match partition.timestamp {
                    -2 => (bounds.oldest_offset as i64, -1),
                    -1 => (bounds.next_offset as i64, -1),
                    at if at >= 0 => log
                        .offset_at_time(&name, index, at)
                        .await
                        .map_err(|err| code_of(&err))?
                        .map_or((-1, -1), |(offset, time)| (offset as i64, time)),
                    _ => return Err(ResponseError::InvalidRequest.code()),
                })
            }
            .await;
            match found {
                Ok((offset, timestamp)) => {
                    entry.offset = offset;
                    entry.timestamp = timestamp;
                    // Version 0 answered a list of offsets; this is v1 and later.
                }
                Err(code) => {
                    entry.error_code = code;
                    entry.offset = -1;
                    worst = code;
                }
            }
            answer.partitions.push(entry);
        }
        response.topics.push(answer);
    }
    Answer::of(&response, version, worst)
}

/// InitProducerId: a fresh producer id at epoch 0 for an idempotent producer, or the next
/// epoch of the id it names (KIP-360); transactions are not served.
fn init_producer_id(request: InitProducerIdRequest, version: i16) -> Option<Answer> {
    let mut response = InitProducerIdResponse::default();
    if request.transactional_id.is_some() {
        response.error_code = ResponseError::TransactionalIdAuthorizationFailed.code();
        response.producer_id = ProducerId(-1);
        response.producer_epoch = -1;
    } else if request.producer_id.0 >= 0 && request.producer_epoch >= 0 {
        // A producer bumping its epoch (KIP-360) keeps its id: its sequences start again.
        response.producer_id = request.producer_id;
        response.producer_epoch = request.producer_epoch.wrapping_add(1).max(0);
    } else {
        response.producer_id = ProducerId(Producers::new_id());
        response.producer_epoch = 0;
    }
    Answer::of(&response, version, response.error_code)
}

/// CreateTopics: a topic exists once named, with the configured partition count: creating
/// one checks its name and count (`INVALID_PARTITIONS` for another count) and answers
/// `TOPIC_ALREADY_EXISTS` once it holds records.
async fn create_topics(
    broker: &Broker,
    principal: &Principal,
    request: CreateTopicsRequest,
    version: i16,
) -> Option<Answer> {
    let log = &broker.log;
    let mut worst = NONE;
    let mut response = CreateTopicsResponse::default();
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let mut result = CreatableTopicResult::default();
        result.name = topic.name;
        let checked = async {
            if !principal.may(Permission::Admin, Some(&name)) {
                return Err((ResponseError::TopicAuthorizationFailed.code(), None));
            }
            let count = log.partitions(&name).map_err(|err| (code_of(&err), None))?;
            if topic.num_partitions != -1 && topic.num_partitions != count as i32 {
                return Err((
                    ResponseError::InvalidPartitions.code(),
                    Some(format!(
                        "topics here have {count} partitions (log.partitions_per_topic)"
                    )),
                ));
            }
            for index in 0..count {
                let bounds = log
                    .bounds(&name, index)
                    .await
                    .map_err(|err| (code_of(&err), None))?;
                if bounds.next_offset > 0 {
                    return Err((ResponseError::TopicAlreadyExists.code(), None));
                }
            }
            Ok(count)
        }
        .await;
        match checked {
            Ok(count) => {
                result.num_partitions = count as i32;
                result.replication_factor = 1;
            }
            Err((code, message)) => {
                result.error_code = code;
                result.error_message = message.map(StrBytes::from_string);
                worst = code;
            }
        }
        response.topics.push(result);
    }
    Answer::of(&response, version, worst)
}

/// DeleteTopics: the log deletes no topic (retention removes records), and says so.
fn delete_topics(
    principal: &Principal,
    request: DeleteTopicsRequest,
    version: i16,
) -> Option<Answer> {
    let names = request
        .topic_names
        .into_iter()
        .map(Some)
        .chain(request.topics.into_iter().map(|topic| topic.name));
    let mut response = DeleteTopicsResponse::default();
    for name in names {
        let mut result = DeletableTopicResult::default();
        let allowed = name
            .as_ref()
            .is_some_and(|name| principal.may(Permission::Admin, Some(name.0.as_str())));
        result.error_code = if allowed {
            ResponseError::TopicDeletionDisabled.code()
        } else {
            ResponseError::TopicAuthorizationFailed.code()
        };
        result.error_message = Some(StrBytes::from_static_str(
            "topics are not deleted here: retention removes their records",
        ));
        result.name = name;
        response.responses.push(result);
    }
    Answer::of(
        &response,
        version,
        ResponseError::TopicDeletionDisabled.code(),
    )
}
