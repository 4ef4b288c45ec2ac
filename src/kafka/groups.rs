//! The coordinator of Kafka's classic consumer-group protocol: who is in a group, its
//! generations and its rebalances. The broker only relays: the group's leader (a client)
//! computes the assignment, so every assignor a client has works (range, round-robin,
//! cooperative-sticky). Offsets are not kept here: they are the log's cursors (`group_api.rs`).
//!
//! A group moves through Kafka's states:
//! - `Empty`: no member (its offsets may live on);
//! - `PreparingRebalance`: a member joined, left or timed out; every member must join again
//!   within the rebalance timeout (the longest of its members'), and those that do not are
//!   removed;
//! - `CompletingRebalance`: the new generation's members are answered, the leader with every
//!   member's subscription; the group waits for the leader's assignment (SyncGroup);
//! - `Stable`: every member has its assignment and heartbeats; one that stops for its session
//!   timeout is removed, and a rebalance follows.
//!
//! Requests that wait (JoinGroup for the rebalance to complete, SyncGroup for the leader's
//! assignment) wait on the group's change signal; [`Coordinator::tick`], called often, ends
//! sessions and rebalances whose time is up. A group's state lives in memory on the node that
//! coordinates it: when another node takes over, members find it, are told their ids are
//! unknown, and join again; their offsets, being cursors, are where they were.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::ResponseError;
use tokio::sync::watch;

/// How long a new group waits for more members after its first one joins, so that consumers
/// started together share one rebalance (Kafka's `group.initial.rebalance.delay.ms`, 3 s
/// there).
const INITIAL_REBALANCE_DELAY: Duration = Duration::from_millis(300);

/// The session timeouts a member may ask for (Kafka's `group.min.session.timeout.ms` and
/// `group.max.session.timeout.ms` are 6 s and 30 min; a shorter minimum lets tests fail over
/// fast).
const SESSION_TIMEOUTS: std::ops::RangeInclusive<i32> = 1_000..=1_800_000;

/// How long a member id handed out with `MEMBER_ID_REQUIRED` may wait for its join.
const PENDING_MEMBER_TTL: Duration = Duration::from_secs(60);

/// The longest a waiting request waits before it is answered `REBALANCE_IN_PROGRESS` and
/// asked to join again, beyond its rebalance timeout.
const WAIT_MARGIN: Duration = Duration::from_secs(5);

/// A group's state, as DescribeGroups and ListGroups name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl State {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::PreparingRebalance => "PreparingRebalance",
            Self::CompletingRebalance => "CompletingRebalance",
            Self::Stable => "Stable",
        }
    }
}

/// A JoinGroup request, as the coordinator needs it.
#[derive(Debug, Clone)]
pub(super) struct Join {
    pub group: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// The protocols (assignors) the member supports, in its order of preference, with its
    /// subscription for each.
    pub protocols: Vec<(String, Bytes)>,
    /// Version 4 and later: a member without an id is given one and must join again with it
    /// (`MEMBER_ID_REQUIRED`), so that a lost answer leaves no unknown member behind.
    pub member_id_required: bool,
}

/// A JoinGroup answer.
#[derive(Debug, Clone, Default)]
pub(super) struct Joined {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// For the leader: every member with its subscription in the chosen protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl Joined {
    fn error(code: i16, member_id: &str) -> Self {
        Self {
            error: code,
            generation: -1,
            member_id: member_id.to_owned(),
            ..Self::default()
        }
    }
}

/// A SyncGroup answer: the protocol type and name, and the member's assignment.
pub(super) type Synced = Result<(Option<String>, Option<String>, Bytes), i16>;

/// A member as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub(super) struct MemberView {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub(super) struct GroupView {
    pub state: State,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberView>,
}

#[derive(Debug)]
struct Member {
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    /// When it last showed itself (a join, sync or heartbeat).
    last_seen: Instant,
    /// It joined the rebalance under way and waits for its answer.
    joining: bool,
    /// Its JoinGroup answer, ready for the waiting request to take.
    joined: Option<Joined>,
    assignment: Bytes,
}

impl Member {
    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    fn subscription(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }
}

#[derive(Debug)]
struct Group {
    state: State,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Member ids handed out with `MEMBER_ID_REQUIRED`, until they join with them.
    pending: HashMap<String, Instant>,
    /// When the rebalance under way ends, whoever has joined by then.
    rebalance_deadline: Instant,
    /// Before when it does not end even if every member joined: a new group's initial delay.
    rebalance_not_before: Instant,
    /// The topics the group committed offsets of, or subscribed to, since this node
    /// coordinates it: what OffsetFetch of every topic and DeleteGroups reach.
    topics: BTreeSet<String>,
    changed: watch::Sender<()>,
}

impl Group {
    fn new(now: Instant) -> Self {
        Self {
            state: State::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: HashMap::new(),
            rebalance_deadline: now,
            rebalance_not_before: now,
            topics: BTreeSet::new(),
            changed: watch::channel(()).0,
        }
    }

    fn notify(&self) {
        self.changed.send_replace(());
    }

    fn member_of_instance(&self, instance: &str) -> Option<&String> {
        self.members
            .iter()
            .find(|(_, member)| member.instance_id.as_deref() == Some(instance))
            .map(|(id, _)| id)
    }

    /// Starts a rebalance (if none is under way): every member must join again.
    fn prepare_rebalance(&mut self, now: Instant) {
        if self.state == State::PreparingRebalance {
            return;
        }
        let longest = self
            .members
            .values()
            .map(|member| member.rebalance_timeout)
            .max()
            .unwrap_or_default();
        let delay = if self.state == State::Empty {
            INITIAL_REBALANCE_DELAY
        } else {
            Duration::ZERO
        };
        self.state = State::PreparingRebalance;
        self.rebalance_not_before = now + delay;
        self.rebalance_deadline = now + longest.max(delay);
        self.notify();
    }

    /// Ends the rebalance under way if every member joined, or its time is up: members that
    /// did not join are removed, and the others are answered with the next generation.
    fn complete_rebalance_if_due(&mut self, now: Instant) {
        if self.state != State::PreparingRebalance {
            return;
        }
        let all_joined = self.members.values().all(|member| member.joining);
        if now < self.rebalance_deadline && !(all_joined && now >= self.rebalance_not_before) {
            return;
        }
        self.members.retain(|_, member| member.joining);
        self.generation += 1;
        if self.members.is_empty() {
            self.state = State::Empty;
            self.protocol = None;
            self.protocol_type = None;
            self.leader = None;
            self.notify();
            return;
        }
        if !self
            .leader
            .as_ref()
            .is_some_and(|leader| self.members.contains_key(leader))
        {
            self.leader = self.members.keys().next().cloned();
        }
        let leader = self
            .leader
            .clone()
            .expect("a group with members has a leader");
        let protocol = self.choose_protocol();
        self.protocol = Some(protocol.clone());
        self.protocol_type = self
            .members
            .values()
            .next()
            .map(|member| member.protocol_type.clone());
        self.state = State::CompletingRebalance;
        let everyone: Vec<(String, Option<String>, Bytes)> = self
            .members
            .iter()
            .map(|(id, member)| {
                (
                    id.clone(),
                    member.instance_id.clone(),
                    member.subscription(&protocol),
                )
            })
            .collect();
        for (id, member) in &mut self.members {
            member.joining = false;
            member.last_seen = now;
            member.joined = Some(Joined {
                error: super::api::NONE,
                generation: self.generation,
                protocol_type: self.protocol_type.clone(),
                protocol: Some(protocol.clone()),
                leader: leader.clone(),
                member_id: id.clone(),
                members: if *id == leader {
                    everyone.clone()
                } else {
                    Vec::new()
                },
            });
        }
        self.notify();
    }

    /// The protocol every member supports that most members prefer (each votes for the first
    /// of its own list that all support).
    fn choose_protocol(&self) -> String {
        let common = |name: &str| self.members.values().all(|member| member.supports(name));
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for member in self.members.values() {
            if let Some((name, _)) = member.protocols.iter().find(|(name, _)| common(name)) {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|&(_, count)| count)
            .map(|(name, _)| name.to_owned())
            .unwrap_or_default()
    }

    /// Removes a member; a rebalance follows for the others.
    fn remove(&mut self, id: &str, now: Instant) {
        if self.members.remove(id).is_none() {
            return;
        }
        if self.leader.as_deref() == Some(id) {
            self.leader = None;
        }
        if self.members.is_empty() {
            self.state = State::PreparingRebalance;
            self.rebalance_deadline = now;
            self.rebalance_not_before = now;
        } else {
            self.prepare_rebalance(now);
        }
        self.complete_rebalance_if_due(now);
        self.notify();
    }

    /// A member's check before a heartbeat, sync or commit: the member is known, not
    /// fenced by a newer instance, and of the current generation.
    fn check_member(&self, id: &str, instance: Option<&str>, generation: i32) -> Result<(), i16> {
        if let Some(instance) = instance
            && let Some(known) = self.member_of_instance(instance)
            && known != id
        {
            return Err(ResponseError::FencedInstanceId.code());
        }
        if !self.members.contains_key(id) {
            return Err(ResponseError::UnknownMemberId.code());
        }
        if generation != self.generation {
            return Err(ResponseError::IllegalGeneration.code());
        }
        Ok(())
    }
}

/// Every group this node coordinates.
#[derive(Debug, Default)]
pub(super) struct Coordinator {
    groups: Mutex<HashMap<String, Group>>,
}

/// What a JoinGroup does once its member entered the group.
enum Entered {
    /// Waits for the rebalance's answer, as this member.
    Wait(String),
    /// Is answered at once.
    Answer(Joined),
}

/// What a waiting request does next.
enum Wait<T> {
    Done(T),
    Until(watch::Receiver<()>),
}

impl Coordinator {
    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|err| err.into_inner())
    }

    /// A fresh member id: the client's id and a random part, as Kafka makes them.
    fn member_id(client_id: &str) -> String {
        format!("{client_id}-{}", uuid::Uuid::new_v4())
    }

    /// JoinGroup: answered once the rebalance it starts (or joins) completes.
    pub async fn join(&self, join: Join) -> Joined {
        if !SESSION_TIMEOUTS.contains(&join.session_timeout_ms) {
            return Joined::error(ResponseError::InvalidSessionTimeout.code(), &join.member_id);
        }
        let member_id = match self.enter(&join) {
            Entered::Wait(member_id) => member_id,
            Entered::Answer(answer) => return answer,
        };
        let rebalance_timeout = Duration::from_millis(join.rebalance_timeout_ms.max(0) as u64);
        self.wait(rebalance_timeout + WAIT_MARGIN, |groups| {
            let Some(member) = groups
                .get_mut(&join.group)
                .and_then(|group| group.members.get_mut(&member_id))
            else {
                return Wait::Done(Joined::error(
                    ResponseError::UnknownMemberId.code(),
                    &member_id,
                ));
            };
            match member.joined.take() {
                Some(joined) => Wait::Done(joined),
                None => Wait::Until(groups[&join.group].changed.subscribe()),
            }
        })
        .await
        .unwrap_or_else(|| Joined::error(ResponseError::RebalanceInProgress.code(), &member_id))
    }

    /// Takes a member into the group's rebalance: its id to wait with, or an answer to give
    /// at once.
    fn enter(&self, join: &Join) -> Entered {
        let now = Instant::now();
        let mut groups = self.groups();
        let group = groups
            .entry(join.group.clone())
            .or_insert_with(|| Group::new(now));
        let refuse =
            |code: ResponseError| Entered::Answer(Joined::error(code.code(), &join.member_id));
        if let Some(protocol_type) = &group.protocol_type
            && !group.members.is_empty()
            && *protocol_type != join.protocol_type
        {
            return refuse(ResponseError::InconsistentGroupProtocol);
        }
        let others_support = |name: &str| {
            group
                .members
                .iter()
                .filter(|(id, _)| **id != join.member_id)
                .all(|(_, member)| member.supports(name))
        };
        if join.protocols.is_empty() || !join.protocols.iter().any(|(name, _)| others_support(name))
        {
            return refuse(ResponseError::InconsistentGroupProtocol);
        }
        let member_id = if join.member_id.is_empty() {
            match &join.instance_id {
                // A static member back under a new id takes its old place.
                Some(instance) => match group.member_of_instance(instance).cloned() {
                    Some(old) => {
                        let new = Self::member_id(&join.client_id);
                        let member = group.members.remove(&old).expect("found");
                        group.members.insert(new.clone(), member);
                        if group.leader.as_deref() == Some(old.as_str()) {
                            group.leader = Some(new.clone());
                        }
                        new
                    }
                    None => Self::member_id(&join.client_id),
                },
                None if join.member_id_required => {
                    let id = Self::member_id(&join.client_id);
                    group.pending.insert(id.clone(), now);
                    return Entered::Answer(Joined::error(
                        ResponseError::MemberIdRequired.code(),
                        &id,
                    ));
                }
                None => Self::member_id(&join.client_id),
            }
        } else {
            if let Some(instance) = &join.instance_id
                && group
                    .member_of_instance(instance)
                    .is_some_and(|known| *known != join.member_id)
            {
                return refuse(ResponseError::FencedInstanceId);
            }
            let known = group.members.contains_key(&join.member_id)
                || group.pending.remove(&join.member_id).is_some();
            if !known {
                return refuse(ResponseError::UnknownMemberId);
            }
            join.member_id.clone()
        };
        let session_timeout = Duration::from_millis(join.session_timeout_ms as u64);
        let rebalance_timeout = Duration::from_millis(join.rebalance_timeout_ms.max(0) as u64);
        // A member back with the subscriptions it had, in a stable group it does not lead, is
        // answered the current generation without a rebalance, and SyncGroup gives it its
        // assignment again: a static member restarted within its session (KIP-345), or a
        // follower that joined again for nothing.
        if group.state == State::Stable
            && group.leader.as_deref() != Some(member_id.as_str())
            && let Some(member) = group.members.get_mut(&member_id)
            && member.protocols == join.protocols
            && member.protocol_type == join.protocol_type
        {
            member.last_seen = now;
            member.session_timeout = session_timeout;
            member.rebalance_timeout = rebalance_timeout;
            return Entered::Answer(Joined {
                error: super::api::NONE,
                generation: group.generation,
                protocol_type: group.protocol_type.clone(),
                protocol: group.protocol.clone(),
                leader: group.leader.clone().unwrap_or_default(),
                member_id,
                members: Vec::new(),
            });
        }
        let member = group
            .members
            .entry(member_id.clone())
            .or_insert_with(|| Member {
                instance_id: join.instance_id.clone(),
                client_id: join.client_id.clone(),
                client_host: join.client_host.clone(),
                session_timeout,
                rebalance_timeout,
                protocol_type: join.protocol_type.clone(),
                protocols: Vec::new(),
                last_seen: now,
                joining: false,
                joined: None,
                assignment: Bytes::new(),
            });
        member.session_timeout = session_timeout;
        member.rebalance_timeout = rebalance_timeout;
        member.protocols = join.protocols.clone();
        member.last_seen = now;
        member.joining = true;
        member.joined = None;
        group.prepare_rebalance(now);
        group.complete_rebalance_if_due(now);
        group.notify();
        Entered::Wait(member_id)
    }

    /// SyncGroup: the leader hands in every member's assignment; each member is answered its
    /// own once the leader did.
    pub async fn sync(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> Synced {
        let rebalance_timeout = {
            let now = Instant::now();
            let mut groups = self.groups();
            let Some(group) = groups.get_mut(group_id) else {
                return Err(ResponseError::UnknownMemberId.code());
            };
            group.check_member(member_id, instance_id, generation)?;
            if group.state == State::PreparingRebalance {
                return Err(ResponseError::RebalanceInProgress.code());
            }
            let member = group.members.get_mut(member_id).expect("checked");
            member.last_seen = now;
            let timeout = member.rebalance_timeout;
            if group.state == State::CompletingRebalance
                && group.leader.as_deref() == Some(member_id)
            {
                let mut given: HashMap<String, Bytes> = assignments.into_iter().collect();
                for (id, member) in &mut group.members {
                    member.assignment = given.remove(id).unwrap_or_default();
                }
                group.state = State::Stable;
                group.notify();
            }
            timeout
        };
        self.wait(rebalance_timeout + WAIT_MARGIN, |groups| {
            let Some(group) = groups.get(group_id) else {
                return Wait::Done(Err(ResponseError::UnknownMemberId.code()));
            };
            if let Err(code) = group.check_member(member_id, instance_id, generation) {
                return Wait::Done(Err(code));
            }
            match group.state {
                State::Stable => Wait::Done(Ok((
                    group.protocol_type.clone(),
                    group.protocol.clone(),
                    group.members[member_id].assignment.clone(),
                ))),
                State::CompletingRebalance => Wait::Until(group.changed.subscribe()),
                _ => Wait::Done(Err(ResponseError::RebalanceInProgress.code())),
            }
        })
        .await
        .unwrap_or(Err(ResponseError::RebalanceInProgress.code()))
    }

    /// Heartbeat: keeps the member's session; tells it when a rebalance asks it to join.
    pub fn heartbeat(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> i16 {
        let mut groups = self.groups();
        let Some(group) = groups.get_mut(group_id) else {
            return ResponseError::UnknownMemberId.code();
        };
        if let Err(code) = group.check_member(member_id, instance_id, generation) {
            return code;
        }
        group.members.get_mut(member_id).expect("checked").last_seen = Instant::now();
        if group.state == State::PreparingRebalance {
            ResponseError::RebalanceInProgress.code()
        } else {
            super::api::NONE
        }
    }

    /// LeaveGroup of one member, by id or by static instance id: its code.
    pub fn leave(&self, group_id: &str, member_id: &str, instance_id: Option<&str>) -> i16 {
        let mut groups = self.groups();
        let Some(group) = groups.get_mut(group_id) else {
            return ResponseError::UnknownMemberId.code();
        };
        let id = match instance_id {
            Some(instance) => match group.member_of_instance(instance) {
                Some(known) if member_id.is_empty() || known == member_id => known.clone(),
                Some(_) => return ResponseError::FencedInstanceId.code(),
                None => return ResponseError::UnknownMemberId.code(),
            },
            None if group.members.contains_key(member_id) => member_id.to_owned(),
            None => return ResponseError::UnknownMemberId.code(),
        };
        group.remove(&id, Instant::now());
        super::api::NONE
    }

    /// Whether a member may commit offsets for the group: a member of its current
    /// generation, or anyone (generation -1) while the group has no member, as a consumer
    /// with assigned partitions or a tool does.
    pub fn may_commit(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), i16> {
        let mut groups = self.groups();
        let group = groups
            .entry(group_id.to_owned())
            .or_insert_with(|| Group::new(Instant::now()));
        if generation < 0 && member_id.is_empty() {
            return if group.members.is_empty() {
                Ok(())
            } else {
                Err(ResponseError::UnknownMemberId.code())
            };
        }
        group.check_member(member_id, instance_id, generation)?;
        if group.state == State::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress.code());
        }
        group.members.get_mut(member_id).expect("checked").last_seen = Instant::now();
        Ok(())
    }

    /// Records that `group` has offsets in `topics`.
    pub fn note_topics<'t>(&self, group_id: &str, topics: impl IntoIterator<Item = &'t str>) {
        let mut groups = self.groups();
        let group = groups
            .entry(group_id.to_owned())
            .or_insert_with(|| Group::new(Instant::now()));
        for topic in topics {
            if !group.topics.contains(topic) {
                group.topics.insert(topic.to_owned());
            }
        }
    }

    /// The topics `group` has offsets in, as far as this node knows.
    pub fn topics(&self, group_id: &str) -> Vec<String> {
        self.groups()
            .get(group_id)
            .map(|group| group.topics.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// DescribeGroups of one group: `None` when this node knows no such group.
    pub fn describe(&self, group_id: &str) -> Option<GroupView> {
        let groups = self.groups();
        let group = groups.get(group_id)?;
        let protocol = group.protocol.clone().unwrap_or_default();
        Some(GroupView {
            state: group.state,
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            members: group
                .members
                .iter()
                .map(|(id, member)| MemberView {
                    member_id: id.clone(),
                    instance_id: member.instance_id.clone(),
                    client_id: member.client_id.clone(),
                    client_host: member.client_host.clone(),
                    metadata: member.subscription(&protocol),
                    assignment: member.assignment.clone(),
                })
                .collect(),
            protocol,
        })
    }

    /// Every group this node coordinates, with its state and protocol type.
    pub fn list(&self) -> Vec<(String, State, String)> {
        let mut groups: Vec<_> = self
            .groups()
            .iter()
            .map(|(id, group)| {
                (
                    id.clone(),
                    group.state,
                    group
                        .protocol_type
                        .clone()
                        .unwrap_or_else(|| "consumer".into()),
                )
            })
            .collect();
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        groups
    }

    /// DeleteGroups of one group: forgets it when it has no member, answering the topics of
    /// its offsets (which the caller deletes); `NON_EMPTY_GROUP` while members remain.
    pub fn delete(&self, group_id: &str) -> Result<Vec<String>, i16> {
        let mut groups = self.groups();
        match groups.get(group_id) {
            None => Err(ResponseError::GroupIdNotFound.code()),
            Some(group) if !group.members.is_empty() => Err(ResponseError::NonEmptyGroup.code()),
            Some(_) => {
                let group = groups.remove(group_id).expect("found");
                group.notify();
                Ok(group.topics.into_iter().collect())
            }
        }
    }

    /// Whether `group` has members subscribed to `topic` (OffsetDelete refuses those).
    pub fn active_on(&self, group_id: &str, topic: &str) -> bool {
        self.groups()
            .get(group_id)
            .is_some_and(|group| !group.members.is_empty() && group.topics.contains(topic))
    }

    /// Ends what is due at `now`: sessions past their timeout (their members are removed,
    /// and a rebalance follows), rebalances past their deadline, member ids handed out and
    /// never used. Called often by the listener.
    pub fn tick(&self, now: Instant) {
        let mut groups = self.groups();
        for group in groups.values_mut() {
            let expired: Vec<String> = group
                .members
                .iter()
                .filter(|(_, member)| {
                    !member.joining && now.duration_since(member.last_seen) > member.session_timeout
                })
                .map(|(id, _)| id.clone())
                .collect();
            for id in expired {
                log::info!("kafka: group member {id} left: its session timed out");
                group.remove(&id, now);
            }
            group.complete_rebalance_if_due(now);
            group
                .pending
                .retain(|_, since| now.duration_since(*since) < PENDING_MEMBER_TTL);
        }
    }

    /// Runs `check` under the lock until it is done, waiting for the group's changes between
    /// runs, at most `limit`: `None` when the time ran out.
    async fn wait<T>(
        &self,
        limit: Duration,
        mut check: impl FnMut(&mut HashMap<String, Group>) -> Wait<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let mut changed = match check(&mut self.groups()) {
                Wait::Done(answer) => return Some(answer),
                Wait::Until(changed) => changed,
            };
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const SESSION_MS: i32 = 6_000;

    fn join(member_id: &str, instance: Option<&str>, subscription: &str) -> Join {
        Join {
            group: "g".into(),
            member_id: member_id.into(),
            instance_id: instance.map(str::to_owned),
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: SESSION_MS,
            rebalance_timeout_ms: 2_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from(subscription.to_owned()))],
            member_id_required: false,
        }
    }

    /// A coordinator whose time-outs are looked at every 10 ms, as the listener's are.
    fn ticking() -> Arc<Coordinator> {
        let coordinator = Arc::new(Coordinator::default());
        let ticked = Arc::downgrade(&coordinator);
        tokio::spawn(async move {
            while let Some(coordinator) = ticked.upgrade() {
                coordinator.tick(Instant::now());
                drop(coordinator);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        coordinator
    }

    /// Two members join together; both answers name one generation and one leader, and
    /// only the leader is given the subscriptions.
    async fn two_members(coordinator: &Coordinator) -> (Joined, Joined) {
        let (a, b) = tokio::join!(
            coordinator.join(join("", None, "a")),
            coordinator.join(join("", None, "b"))
        );
        assert_eq!((a.error, b.error), (0, 0));
        assert_eq!((a.generation, b.generation), (1, 1));
        assert_eq!(a.leader, b.leader);
        assert_eq!(a.protocol.as_deref(), Some("range"));
        (a, b)
    }

    fn leader_first(pair: (Joined, Joined)) -> (Joined, Joined) {
        if pair.0.member_id == pair.0.leader {
            pair
        } else {
            (pair.1, pair.0)
        }
    }

    #[tokio::test]
    async fn members_joining_together_share_a_generation_and_the_leader_assigns() {
        let coordinator = ticking();
        let (leader, follower) = leader_first(two_members(&coordinator).await);
        assert_eq!(
            leader.members.len(),
            2,
            "the leader sees every subscription"
        );
        assert!(follower.members.is_empty());
        let subscriptions: Vec<&[u8]> = leader.members.iter().map(|m| m.2.as_ref()).collect();
        assert!(
            subscriptions.contains(&b"a".as_slice()) && subscriptions.contains(&b"b".as_slice())
        );

        // The follower waits for the leader's assignment.
        let waiting = {
            let coordinator = coordinator.clone();
            let id = follower.member_id.clone();
            tokio::spawn(async move { coordinator.sync("g", 1, &id, None, Vec::new()).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "a follower's sync waits for the leader's"
        );
        let assignments = vec![
            (leader.member_id.clone(), Bytes::from_static(b"to-leader")),
            (
                follower.member_id.clone(),
                Bytes::from_static(b"to-follower"),
            ),
        ];
        let mine = coordinator
            .sync("g", 1, &leader.member_id, None, assignments)
            .await
            .unwrap();
        assert_eq!(mine.2.as_ref(), b"to-leader");
        let theirs = waiting.await.unwrap().unwrap();
        assert_eq!(theirs.2.as_ref(), b"to-follower");
        assert_eq!(coordinator.describe("g").unwrap().state, State::Stable);
        assert_eq!(coordinator.heartbeat("g", 1, &follower.member_id, None), 0);
        assert_eq!(
            coordinator.heartbeat("g", 0, &follower.member_id, None),
            ResponseError::IllegalGeneration.code()
        );
    }

    #[tokio::test]
    async fn a_member_without_an_id_is_given_one_to_join_with() {
        let coordinator = ticking();
        let mut first = join("", None, "a");
        first.member_id_required = true;
        let answer = coordinator.join(first.clone()).await;
        assert_eq!(answer.error, ResponseError::MemberIdRequired.code());
        assert!(answer.member_id.starts_with("client-"));
        assert!(coordinator.describe("g").unwrap().members.is_empty());
        first.member_id = answer.member_id.clone();
        let joined = coordinator.join(first).await;
        assert_eq!((joined.error, joined.generation), (0, 1));
        assert_eq!(joined.member_id, answer.member_id);
        let stranger = coordinator.join(join("someone-else", None, "a")).await;
        assert_eq!(stranger.error, ResponseError::UnknownMemberId.code());
    }

    #[tokio::test]
    async fn a_silent_member_is_removed_after_its_session_and_the_others_rebalance() {
        let coordinator = ticking();
        let (leader, follower) = leader_first(two_members(&coordinator).await);
        coordinator
            .sync("g", 1, &leader.member_id, None, Vec::new())
            .await
            .unwrap();
        // The follower alone heartbeats past the leader's session timeout.
        let later = Instant::now() + Duration::from_millis(SESSION_MS as u64 + 100);
        coordinator
            .groups()
            .get_mut("g")
            .unwrap()
            .members
            .get_mut(&follower.member_id)
            .unwrap()
            .last_seen = later;
        coordinator.tick(later);
        assert_eq!(
            coordinator.heartbeat("g", 1, &follower.member_id, None),
            ResponseError::RebalanceInProgress.code()
        );
        let mut again = join(&follower.member_id, None, "b");
        again.member_id_required = true;
        let rejoined = coordinator.join(again).await;
        assert_eq!((rejoined.error, rejoined.generation), (0, 2));
        assert_eq!(rejoined.leader, follower.member_id, "the one left leads");
        assert_eq!(rejoined.members.len(), 1);
        assert_eq!(
            coordinator.heartbeat("g", 2, &leader.member_id, None),
            ResponseError::UnknownMemberId.code()
        );
    }

    #[tokio::test]
    async fn the_last_member_leaving_empties_the_group_and_a_commit_without_one_is_taken() {
        let coordinator = ticking();
        let (leader, follower) = leader_first(two_members(&coordinator).await);
        assert_eq!(
            coordinator.may_commit("g", -1, "", None),
            Err(ResponseError::UnknownMemberId.code()),
            "a commit from outside a group with members"
        );
        assert_eq!(coordinator.leave("g", &follower.member_id, None), 0);
        assert_eq!(
            coordinator.describe("g").unwrap().state,
            State::PreparingRebalance
        );
        assert_eq!(
            coordinator.may_commit("g", 1, &leader.member_id, None),
            Ok(()),
            "a member of the generation commits during the rebalance"
        );
        assert_eq!(coordinator.leave("g", &leader.member_id, None), 0);
        let view = coordinator.describe("g").unwrap();
        assert_eq!((view.state, view.members.len()), (State::Empty, 0));
        assert_eq!(coordinator.may_commit("g", -1, "", None), Ok(()));
        assert_eq!(coordinator.delete("g"), Ok(Vec::new()));
        assert!(coordinator.describe("g").is_none());
    }

    #[tokio::test]
    async fn a_static_member_back_under_a_new_id_takes_its_place_and_fences_the_old() {
        let coordinator = ticking();
        let first = coordinator.join(join("", Some("worker-1"), "a")).await;
        assert_eq!((first.error, first.generation), (0, 1));
        let back = coordinator.join(join("", Some("worker-1"), "a")).await;
        assert_eq!(back.error, 0);
        assert_ne!(back.member_id, first.member_id);
        assert_eq!(coordinator.describe("g").unwrap().members.len(), 1);
        assert_eq!(
            coordinator.heartbeat("g", back.generation, &first.member_id, Some("worker-1")),
            ResponseError::FencedInstanceId.code()
        );
        assert_eq!(
            coordinator.heartbeat("g", back.generation, &back.member_id, Some("worker-1")),
            0
        );
    }

    #[tokio::test]
    async fn a_static_follower_back_in_a_stable_group_keeps_its_assignment_without_a_rebalance() {
        let coordinator = ticking();
        let (a, b) = tokio::join!(
            coordinator.join(join("", Some("a"), "a")),
            coordinator.join(join("", Some("b"), "b"))
        );
        let (leader, follower) = leader_first((a, b));
        let assignments = vec![
            (leader.member_id.clone(), Bytes::from_static(b"to-leader")),
            (
                follower.member_id.clone(),
                Bytes::from_static(b"to-follower"),
            ),
        ];
        let (ended, _) = tokio::join!(
            coordinator.sync("g", 1, &leader.member_id, None, assignments),
            coordinator.sync("g", 1, &follower.member_id, None, Vec::new())
        );
        ended.unwrap();
        let instance = coordinator
            .describe("g")
            .unwrap()
            .members
            .into_iter()
            .find(|member| member.member_id == follower.member_id)
            .unwrap()
            .instance_id;
        let back = coordinator
            .join(join(
                "",
                instance.as_deref(),
                if instance.as_deref() == Some("a") {
                    "a"
                } else {
                    "b"
                },
            ))
            .await;
        assert_eq!((back.error, back.generation), (0, 1), "the same generation");
        assert_eq!(back.leader, leader.member_id);
        assert_eq!(coordinator.describe("g").unwrap().state, State::Stable);
        assert_eq!(coordinator.heartbeat("g", 1, &leader.member_id, None), 0);
        let again = coordinator
            .sync("g", 1, &back.member_id, None, Vec::new())
            .await
            .unwrap();
        assert_eq!(again.2.as_ref(), b"to-follower");
    }

    #[tokio::test]
    async fn a_member_of_another_protocol_type_or_assignor_is_refused() {
        let coordinator = ticking();
        let joined = coordinator.join(join("", None, "a")).await;
        assert_eq!(joined.error, 0);
        let mut other = join("", None, "b");
        other.protocols = vec![("sticky-only".into(), Bytes::new())];
        assert_eq!(
            coordinator.join(other).await.error,
            ResponseError::InconsistentGroupProtocol.code()
        );
        assert_eq!(coordinator.describe("g").unwrap().members.len(), 1);
    }
}
