//! The requests of consumer groups and of the admin tools: FindCoordinator, JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup (answered by [`Coordinator`](super::groups::Coordinator)),
//! OffsetCommit and OffsetFetch (the log's cursors: a Kafka commit sets a group's cursor, back
//! too, as a seek does, and a REST commit is what a Kafka consumer resumes from), ListGroups,
//! DescribeGroups, DeleteGroups, OffsetDelete, DescribeConfigs and DescribeCluster.
//!
//! A group is coordinated by the node holding the volume its name maps to, as a partition is
//! served by the node holding its volume; the others answer `NOT_COORDINATOR`, and clients ask
//! FindCoordinator again.

use futures_util::future::join_all;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator as Found;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeClusterRequest,
    DescribeClusterResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::api::{NONE, brokers, code_of};
use super::groups::{Join, State};
use super::{Answer, Broker};
use crate::auth::{Permission, Principal};
use crate::names::validate_group;

/// The longest metadata string kept with a committed offset (Kafka's
/// `offset.metadata.max.bytes`).
const MAX_COMMIT_METADATA: usize = 4096;

/// The offsets a commit may name for the end and the beginning of a partition (kafkajs's
/// `resetOffsets` commits them), as ListOffsets names them.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;

/// `key_type` of FindCoordinator for a consumer group (1 is a transaction).
const GROUP_KEY: i8 = 0;

/// DescribeConfigs' resource types.
const TOPIC_RESOURCE: i8 = 2;
const BROKER_RESOURCE: i8 = 4;

/// Kafka's "not asked for" authorized operations.
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;

fn text(value: impl Into<String>) -> StrBytes {
    StrBytes::from_string(value.into())
}

/// The broker coordinating `group`: its id, host and port; `None` while no node serves the
/// volume its name maps to.
fn coordinator_of(broker: &Broker, group: &str) -> Option<(i32, String, i32)> {
    let Some(cluster) = broker.log.cluster() else {
        return Some((broker.node_id, broker.host.clone(), broker.port));
    };
    let volume = crate::routing::volume_of_key(group, cluster.volume_count());
    let node = cluster.server_of(volume)?;
    if node == cluster.node() {
        return Some((broker.node_id, broker.host.clone(), broker.port));
    }
    let (_, address) = cluster
        .kafka_brokers()
        .into_iter()
        .find(|(known, _)| *known == node)?;
    let (host, port) = address.rsplit_once(':')?;
    Some((
        super::broker_id_of(&node),
        host.to_owned(),
        port.parse().ok()?,
    ))
}

/// Whether this node coordinates `group` now.
fn coordinates(broker: &Broker, group: &str) -> bool {
    coordinator_of(broker, group).is_some_and(|(id, _, _)| id == broker.node_id)
}

/// The error a group request gets before the coordinator sees it: an invalid name, or a node
/// that does not coordinate the group.
fn group_refusal(broker: &Broker, group: &str) -> Option<i16> {
    if validate_group(group).is_err() {
        Some(ResponseError::InvalidGroupId.code())
    } else if !coordinates(broker, group) {
        Some(ResponseError::NotCoordinator.code())
    } else {
        None
    }
}

pub(super) fn find_coordinator(
    broker: &Broker,
    request: FindCoordinatorRequest,
    version: i16,
) -> Option<Answer> {
    let keys = if version >= 4 {
        request.coordinator_keys.clone()
    } else {
        vec![request.key.clone()]
    };
    let mut response = FindCoordinatorResponse::default();
    let mut worst = NONE;
    for key in keys {
        let mut found = Found::default();
        let located = if request.key_type != GROUP_KEY {
            Err((
                ResponseError::CoordinatorNotAvailable,
                "transactions are not served here",
            ))
        } else if validate_group(&key).is_err() {
            Err((ResponseError::InvalidGroupId, "not a group name here"))
        } else {
            coordinator_of(broker, &key).ok_or((
                ResponseError::CoordinatorNotAvailable,
                "no node serves the group's volume now",
            ))
        };
        match located {
            Ok((id, host, port)) => {
                found.node_id = BrokerId(id);
                found.host = text(host);
                found.port = port;
            }
            Err((error, why)) => {
                found.error_code = error.code();
                found.error_message = Some(StrBytes::from_static_str(why));
                found.node_id = BrokerId(-1);
                found.port = -1;
                worst = error.code();
            }
        }
        found.key = key;
        response.coordinators.push(found);
    }
    if version < 4
        && let Some(found) = response.coordinators.pop()
    {
        response.error_code = found.error_code;
        response.error_message = found.error_message;
        response.node_id = found.node_id;
        response.host = found.host;
        response.port = found.port;
    }
    Answer::of(&response, version, worst)
}

pub(super) async fn join_group(
    broker: &Broker,
    (client_id, client_host): (String, String),
    request: JoinGroupRequest,
    version: i16,
) -> Option<Answer> {
    let group = request.group_id.0.to_string();
    let joined = match group_refusal(broker, &group) {
        Some(code) => super::groups::Joined {
            error: code,
            generation: -1,
            member_id: request.member_id.to_string(),
            ..Default::default()
        },
        None => {
            broker
                .groups
                .join(Join {
                    group,
                    member_id: request.member_id.to_string(),
                    instance_id: request.group_instance_id.map(|id| id.to_string()),
                    client_id,
                    client_host,
                    session_timeout_ms: request.session_timeout_ms,
                    // Version 0 has no rebalance timeout: the session timeout is both.
                    rebalance_timeout_ms: if version >= 1 {
                        request.rebalance_timeout_ms
                    } else {
                        request.session_timeout_ms
                    },
                    protocol_type: request.protocol_type.to_string(),
                    protocols: request
                        .protocols
                        .into_iter()
                        .map(|protocol| (protocol.name.to_string(), protocol.metadata))
                        .collect(),
                    member_id_required: version >= 4,
                })
                .await
        }
    };
    let mut response = JoinGroupResponse::default();
    response.error_code = joined.error;
    response.generation_id = joined.generation;
    response.protocol_type = joined.protocol_type.map(text);
    response.protocol_name = Some(text(joined.protocol.unwrap_or_default()));
    response.leader = text(joined.leader);
    response.member_id = text(joined.member_id);
    response.members = joined
        .members
        .into_iter()
        .map(|(id, instance, metadata)| {
            let mut member =
                kafka_protocol::messages::join_group_response::JoinGroupResponseMember::default();
            member.member_id = text(id);
            member.group_instance_id = instance.map(text);
            member.metadata = metadata;
            member
        })
        .collect();
    Answer::of(&response, version, response.error_code)
}

pub(super) async fn sync_group(
    broker: &Broker,
    request: SyncGroupRequest,
    version: i16,
) -> Option<Answer> {
    let group = request.group_id.0.to_string();
    let synced = match group_refusal(broker, &group) {
        Some(code) => Err(code),
        None => {
            let assignments = request
                .assignments
                .into_iter()
                .map(
                    |SyncGroupRequestAssignment {
                         member_id,
                         assignment,
                         ..
                     }| { (member_id.to_string(), assignment) },
                )
                .collect();
            broker
                .groups
                .sync(
                    &group,
                    request.generation_id,
                    &request.member_id,
                    request.group_instance_id.as_deref(),
                    assignments,
                )
                .await
        }
    };
    let mut response = SyncGroupResponse::default();
    match synced {
        Ok((protocol_type, protocol, assignment)) => {
            response.protocol_type = protocol_type.map(text);
            response.protocol_name = protocol.map(text);
            response.assignment = assignment;
        }
        Err(code) => response.error_code = code,
    }
    Answer::of(&response, version, response.error_code)
}

pub(super) fn heartbeat(
    broker: &Broker,
    request: HeartbeatRequest,
    version: i16,
) -> Option<Answer> {
    let group = request.group_id.0.to_string();
    let mut response = HeartbeatResponse::default();
    response.error_code = group_refusal(broker, &group).unwrap_or_else(|| {
        broker.groups.heartbeat(
            &group,
            request.generation_id,
            &request.member_id,
            request.group_instance_id.as_deref(),
        )
    });
    Answer::of(&response, version, response.error_code)
}

pub(super) fn leave_group(
    broker: &Broker,
    request: LeaveGroupRequest,
    version: i16,
) -> Option<Answer> {
    let group = request.group_id.0.to_string();
    let mut response = LeaveGroupResponse::default();
    if let Some(code) = group_refusal(broker, &group) {
        response.error_code = code;
        return Answer::of(&response, version, code);
    }
    if version < 3 {
        response.error_code = broker.groups.leave(&group, &request.member_id, None);
    } else {
        for identity in request.members {
            let mut answer = MemberResponse::default();
            answer.error_code = broker.groups.leave(
                &group,
                &identity.member_id,
                identity.group_instance_id.as_deref(),
            );
            answer.member_id = identity.member_id;
            answer.group_instance_id = identity.group_instance_id;
            response.members.push(answer);
        }
    }
    let worst = response
        .members
        .iter()
        .map(|member| member.error_code)
        .find(|&code| code != NONE)
        .unwrap_or(response.error_code);
    Answer::of(&response, version, worst)
}

/// OffsetCommit: each partition's offset becomes the group's cursor there (a seek: back too),
/// with its metadata, once the member is found to be of the group's generation (or the group
/// has no member and the commit names none, as a consumer assigned its partitions does).
pub(super) async fn offset_commit(
    broker: &Broker,
    principal: &Principal,
    request: OffsetCommitRequest,
    version: i16,
) -> Option<Answer> {
    let group = request.group_id.0.to_string();
    let refusal = group_refusal(broker, &group).map(Err).unwrap_or_else(|| {
        broker.groups.may_commit(
            &group,
            request.generation_id_or_member_epoch,
            &request.member_id,
            request.group_instance_id.as_deref(),
        )
    });
    if refusal.is_ok() {
        broker.groups.note_topics(
            &group,
            request.topics.iter().map(|topic| topic.name.0.as_str()),
        );
    }
    let log = &broker.log;
    let mut response = OffsetCommitResponse::default();
    let mut worst = NONE;
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let commits = topic.partitions.iter().map(|partition| {
            let (name, group) = (&name, &group);
            async move {
                refusal?;
                if !principal.may(Permission::Consume, Some(name)) {
                    return Err(ResponseError::TopicAuthorizationFailed.code());
                }
                let metadata = partition.committed_metadata.as_deref();
                if metadata.is_some_and(|metadata| metadata.len() > MAX_COMMIT_METADATA) {
                    return Err(ResponseError::OffsetMetadataTooLarge.code());
                }
                let index = u32::try_from(partition.partition_index)
                    .map_err(|_| ResponseError::UnknownTopicOrPartition.code())?;
                let offset = match partition.committed_offset {
                    // What tools commit to reset a group: the end, or the beginning.
                    LATEST | EARLIEST => {
                        let bounds = log.bounds(name, index).await.map_err(|err| code_of(&err))?;
                        if partition.committed_offset == LATEST {
                            bounds.next_offset
                        } else {
                            bounds.oldest_offset
                        }
                    }
                    offset => {
                        u64::try_from(offset).map_err(|_| ResponseError::OffsetOutOfRange.code())?
                    }
                };
                log.seek(name, index, group, offset, metadata)
                    .await
                    .map(|_| ())
                    .map_err(|err| code_of(&err))
            }
        });
        let results = join_all(commits).await;
        let mut answer = OffsetCommitResponseTopic::default();
        for (partition, result) in topic.partitions.iter().zip(results) {
            let mut entry = OffsetCommitResponsePartition::default();
            entry.partition_index = partition.partition_index;
            if let Err(code) = result {
                entry.error_code = code;
                worst = code;
            }
            answer.partitions.push(entry);
        }
        answer.name = topic.name;
        response.topics.push(answer);
    }
    Answer::of(&response, version, worst)
}

/// One partition's committed offset as OffsetFetch answers it: offset, metadata, error.
type Fetched = (i32, i64, Option<StrBytes>, i16);

/// The committed offsets of `group` in `topics` (each with its partitions; none named: every
/// partition, answering only those with an offset).
async fn committed_offsets(
    broker: &Broker,
    principal: &Principal,
    group: &str,
    topics: Vec<(String, Option<Vec<i32>>)>,
) -> Vec<(String, Vec<Fetched>)> {
    let log = &broker.log;
    let mut answers = Vec::with_capacity(topics.len());
    for (name, partitions) in topics {
        let only_committed = partitions.is_none();
        let partitions = match partitions {
            Some(partitions) => partitions,
            None => match log.partitions(&name) {
                Ok(count) => (0..count as i32).collect(),
                Err(_) => Vec::new(),
            },
        };
        let fetches = partitions.iter().map(|&index| {
            let name = &name;
            async move {
                if !principal.may(Permission::Consume, Some(name)) {
                    return (
                        index,
                        -1,
                        None,
                        ResponseError::TopicAuthorizationFailed.code(),
                    );
                }
                let Ok(partition) = u32::try_from(index) else {
                    return (
                        index,
                        -1,
                        None,
                        ResponseError::UnknownTopicOrPartition.code(),
                    );
                };
                match log.committed(name, partition, group).await {
                    Ok(Some(committed)) => (
                        index,
                        committed.offset as i64,
                        Some(text(committed.metadata.unwrap_or_default())),
                        NONE,
                    ),
                    Ok(None) => (index, -1, Some(text("")), NONE),
                    Err(err) => (index, -1, None, code_of(&err)),
                }
            }
        });
        let mut fetched = join_all(fetches).await;
        if only_committed {
            fetched.retain(|&(_, offset, _, code)| offset >= 0 || code != NONE);
        }
        answers.push((name, fetched));
    }
    answers
}

/// The topics of an OffsetFetch answer, of types `$topic` and `$partition` (those of version
/// 8 and later have other names, and the same fields), from what [`committed_offsets`]
/// answered; `$worst` takes the last error code.
macro_rules! fetched_topics {
    ($topic:ty, $partition:ty, $fetched:expr, $worst:ident) => {
        $fetched
            .into_iter()
            .map(|(name, partitions)| {
                let mut topic = <$topic>::default();
                topic.name = TopicName(text(name));
                for (index, offset, metadata, code) in partitions {
                    let mut partition = <$partition>::default();
                    partition.partition_index = index;
                    partition.committed_offset = offset;
                    partition.committed_leader_epoch = -1;
                    partition.metadata = metadata;
                    partition.error_code = code;
                    if code != NONE {
                        $worst = code;
                    }
                    topic.partitions.push(partition);
                }
                topic
            })
            .collect()
    };
}

/// OffsetFetch: the group's cursors (`-1` where it has none), with their metadata; every
/// topic the group committed to through this node when no topic is named.
pub(super) async fn offset_fetch(
    broker: &Broker,
    principal: &Principal,
    request: OffsetFetchRequest,
    version: i16,
) -> Option<Answer> {
    let mut response = OffsetFetchResponse::default();
    let mut worst = NONE;
    let topics_of = |group: &str, named: Option<Vec<(String, Option<Vec<i32>>)>>| {
        named.unwrap_or_else(|| {
            broker
                .groups
                .topics(group)
                .into_iter()
                .map(|topic| (topic, None))
                .collect()
        })
    };
    if version >= 8 {
        for asked in request.groups {
            let group = asked.group_id.0.to_string();
            let mut answer = OffsetFetchResponseGroup::default();
            if let Some(code) = group_refusal(broker, &group) {
                answer.error_code = code;
                worst = code;
            } else {
                let named = asked.topics.map(|topics| {
                    topics
                        .into_iter()
                        .map(|topic| (topic.name.0.to_string(), Some(topic.partition_indexes)))
                        .collect()
                });
                let topics = topics_of(&group, named);
                let fetched = committed_offsets(broker, principal, &group, topics).await;
                answer.topics = fetched_topics!(
                    OffsetFetchResponseTopics,
                    OffsetFetchResponsePartitions,
                    fetched,
                    worst
                );
            }
            answer.group_id = asked.group_id;
            response.groups.push(answer);
        }
        return Answer::of(&response, version, worst);
    }
    let group = request.group_id.0.to_string();
    if let Some(code) = group_refusal(broker, &group) {
        response.error_code = code;
        return Answer::of(&response, version, code);
    }
    let named = request.topics.map(|topics| {
        topics
            .into_iter()
            .map(|topic| (topic.name.0.to_string(), Some(topic.partition_indexes)))
            .collect()
    });
    let topics = topics_of(&group, named);
    let fetched = committed_offsets(broker, principal, &group, topics).await;
    response.topics = fetched_topics!(
        OffsetFetchResponseTopic,
        OffsetFetchResponsePartition,
        fetched,
        worst
    );
    Answer::of(&response, version, worst)
}

pub(super) fn list_groups(
    broker: &Broker,
    request: ListGroupsRequest,
    version: i16,
) -> Option<Answer> {
    let wanted: Vec<String> = request
        .states_filter
        .iter()
        .map(|state| state.to_lowercase())
        .collect();
    let mut response = ListGroupsResponse::default();
    for (id, state, protocol_type) in broker.groups.list() {
        if !wanted.is_empty() && !wanted.contains(&state.name().to_lowercase()) {
            continue;
        }
        let mut group = ListedGroup::default();
        group.group_id = GroupId(text(id));
        group.protocol_type = text(protocol_type);
        group.group_state = StrBytes::from_static_str(state.name());
        group.group_type = StrBytes::from_static_str("classic");
        response.groups.push(group);
    }
    Answer::of(&response, version, NONE)
}

pub(super) fn describe_groups(
    broker: &Broker,
    request: DescribeGroupsRequest,
    version: i16,
) -> Option<Answer> {
    let mut response = DescribeGroupsResponse::default();
    let mut worst = NONE;
    for id in request.groups {
        let mut described = DescribedGroup::default();
        described.authorized_operations = OPERATIONS_NOT_ASKED;
        if let Some(code) = group_refusal(broker, &id) {
            described.error_code = code;
            worst = code;
        } else {
            match broker.groups.describe(&id) {
                // Kafka's answer for a group it does not know.
                None => described.group_state = StrBytes::from_static_str("Dead"),
                Some(view) => {
                    described.group_state = StrBytes::from_static_str(view.state.name());
                    described.protocol_type = text(view.protocol_type);
                    if view.state == State::Stable {
                        described.protocol_data = text(view.protocol);
                    }
                    described.members = view
                        .members
                        .into_iter()
                        .map(|member| {
                            let mut entry = DescribedGroupMember::default();
                            entry.member_id = text(member.member_id);
                            entry.group_instance_id = member.instance_id.map(text);
                            entry.client_id = text(member.client_id);
                            entry.client_host = text(member.client_host);
                            entry.member_metadata = member.metadata;
                            entry.member_assignment = member.assignment;
                            entry
                        })
                        .collect();
                }
            }
        }
        described.group_id = id;
        response.groups.push(described);
    }
    Answer::of(&response, version, worst)
}

/// DeleteGroups: a group without members is forgotten, and its cursors deleted from every
/// partition of the topics it committed to.
pub(super) async fn delete_groups(
    broker: &Broker,
    principal: &Principal,
    request: DeleteGroupsRequest,
    version: i16,
) -> Option<Answer> {
    let mut response = DeleteGroupsResponse::default();
    let mut worst = NONE;
    for id in request.groups_names {
        let group = id.0.to_string();
        let deleted = async {
            if let Some(code) = group_refusal(broker, &group) {
                return Err(code);
            }
            let topics = broker.groups.topics(&group);
            if topics
                .iter()
                .any(|topic| !principal.may(Permission::Admin, Some(topic)))
            {
                return Err(ResponseError::GroupAuthorizationFailed.code());
            }
            let topics = broker.groups.delete(&group)?;
            for topic in topics {
                let count = broker.log.partitions(&topic).map_err(|err| code_of(&err))?;
                for partition in 0..count {
                    broker
                        .log
                        .delete_cursor(&topic, partition, &group)
                        .await
                        .map_err(|err| code_of(&err))?;
                }
            }
            Ok(())
        }
        .await;
        let mut result =
            kafka_protocol::messages::delete_groups_response::DeletableGroupResult::default();
        if let Err(code) = deleted {
            result.error_code = code;
            worst = code;
        }
        result.group_id = id;
        response.results.push(result);
    }
    Answer::of(&response, version, worst)
}

/// OffsetDelete: the group's cursors of the partitions named, unless members of the group
/// consume the topic now.
pub(super) async fn offset_delete(
    broker: &Broker,
    principal: &Principal,
    request: OffsetDeleteRequest,
    version: i16,
) -> Option<Answer> {
    let group = request.group_id.0.to_string();
    let mut response = OffsetDeleteResponse::default();
    if let Some(code) = group_refusal(broker, &group) {
        response.error_code = code;
        return Answer::of(&response, version, code);
    }
    let mut worst = NONE;
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let mut answer = OffsetDeleteResponseTopic::default();
        for partition in topic.partitions {
            let deleted = async {
                if !principal.may(Permission::Admin, Some(&name)) {
                    return Err(ResponseError::TopicAuthorizationFailed.code());
                }
                if broker.groups.active_on(&group, &name) {
                    return Err(ResponseError::GroupSubscribedToTopic.code());
                }
                let index = u32::try_from(partition.partition_index)
                    .map_err(|_| ResponseError::UnknownTopicOrPartition.code())?;
                broker
                    .log
                    .delete_cursor(&name, index, &group)
                    .await
                    .map(|_| ())
                    .map_err(|err| code_of(&err))
            }
            .await;
            let mut entry = OffsetDeleteResponsePartition::default();
            entry.partition_index = partition.partition_index;
            if let Err(code) = deleted {
                entry.error_code = code;
                worst = code;
            }
            answer.partitions.push(entry);
        }
        answer.name = topic.name;
        response.topics.push(answer);
    }
    Answer::of(&response, version, worst)
}

/// A configuration entry: Kafka's name, its value, whether the topic overrides it, and its
/// Kafka type (3 INT, 5 LONG, 7 LIST).
type ConfigEntry = (&'static str, String, bool, i8);

/// A topic's settings under Kafka's names: retention by age and by size, the cleanup
/// policy, the largest record.
fn topic_configs(broker: &Broker, topic: &str) -> Vec<ConfigEntry> {
    let config = broker.log.config();
    let settings = config.topic(topic);
    let overridden = config.topics.contains_key(topic);
    let unlimited_if_zero = |value: u64| {
        if value == 0 {
            "-1".to_owned()
        } else {
            value.to_string()
        }
    };
    vec![
        (
            "retention.ms",
            unlimited_if_zero(settings.retention.max_age_ms),
            overridden,
            5,
        ),
        (
            "retention.bytes",
            unlimited_if_zero(settings.retention.max_bytes),
            overridden,
            5,
        ),
        ("cleanup.policy", "delete".to_owned(), false, 7),
        (
            "max.message.bytes",
            settings.log.max_record_bytes.to_string(),
            overridden,
            3,
        ),
    ]
}

/// DescribeConfigs: a topic's settings (read-only here: they come from the configuration
/// file); a broker has none to show.
pub(super) fn describe_configs(
    broker: &Broker,
    principal: &Principal,
    request: DescribeConfigsRequest,
    version: i16,
) -> Option<Answer> {
    /// Kafka's config sources: set for the topic, or the server's default.
    const TOPIC_SOURCE: i8 = 1;
    const SERVER_SOURCE: i8 = 4;
    let mut response = DescribeConfigsResponse::default();
    let mut worst = NONE;
    for resource in request.resources {
        let mut result = DescribeConfigsResult::default();
        let name = resource.resource_name.to_string();
        let entries = match resource.resource_type {
            TOPIC_RESOURCE if !principal.sees(&name) => {
                Err(ResponseError::TopicAuthorizationFailed.code())
            }
            TOPIC_RESOURCE => broker
                .log
                .partitions(&name)
                .map(|_| topic_configs(broker, &name))
                .map_err(|err| code_of(&err)),
            BROKER_RESOURCE => Ok(Vec::new()),
            _ => Err(ResponseError::InvalidRequest.code()),
        };
        match entries {
            Ok(entries) => {
                for (key, value, overridden, kind) in entries {
                    let wanted = resource
                        .configuration_keys
                        .as_ref()
                        .is_none_or(|keys| keys.iter().any(|asked| asked.as_str() == key));
                    if !wanted {
                        continue;
                    }
                    let mut entry = DescribeConfigsResourceResult::default();
                    entry.name = StrBytes::from_static_str(key);
                    entry.value = Some(text(value));
                    entry.read_only = true;
                    entry.config_source = if overridden {
                        TOPIC_SOURCE
                    } else {
                        SERVER_SOURCE
                    };
                    entry.config_type = kind;
                    result.configs.push(entry);
                }
            }
            Err(code) => {
                result.error_code = code;
                worst = code;
            }
        }
        result.resource_type = resource.resource_type;
        result.resource_name = resource.resource_name;
        response.results.push(result);
    }
    Answer::of(&response, version, worst)
}

/// DescribeCluster: the brokers Metadata names, and the cluster's name as its id.
pub(super) fn describe_cluster(
    broker: &Broker,
    request: DescribeClusterRequest,
    version: i16,
) -> Option<Answer> {
    let mut response = DescribeClusterResponse::default();
    response.endpoint_type = request.endpoint_type.max(1);
    response.cluster_id = text(broker.log.config().cluster.name.clone());
    response.controller_id = BrokerId(broker.node_id);
    response.cluster_authorized_operations = OPERATIONS_NOT_ASKED;
    response.brokers = brokers(broker)
        .into_iter()
        .map(|known| {
            let mut entry = DescribeClusterBroker::default();
            entry.broker_id = known.node_id;
            entry.host = known.host;
            entry.port = known.port;
            entry
        })
        .collect();
    Answer::of(&response, version, NONE)
}
