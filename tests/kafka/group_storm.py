"""A rebalance storm: MEMBERS confluent-kafka (librdkafka) consumers of one group, each in a
thread of this process, replaced at random moments for SECONDS, then watched until the group
settles.

Usage: group_storm.py BOOTSTRAP TOPIC GROUP SECONDS MEMBERS

Each member: `session.timeout.ms=6000`, `heartbeat.interval.ms=500`, `max.poll.interval.ms=6000`
(the rebalance timeout it joins with), the eager assignors librdkafka uses by default (range,
roundrobin), `enable.auto.commit=false`: it commits what it read synchronously after each batch,
and a commit refused because of a rebalance is counted, not retried. Its client id is
`storm-<slot>-<incarnation>`.

For SECONDS, a change comes every 0.4 s on average (exponential waits; STORM_RATE, changes a
second, in the environment): a random member is either closed (close(): LeaveGroup) or killed
(it stops polling and its Consumer is dropped without close(), so no LeaveGroup is sent and its
session times out on the coordinator after 6 s), and a fresh Consumer takes its slot. The waits,
members and kinds of change come from the seed STORM_SEED (environment; the clock's when unset),
printed first.

Then no more changes, and the group is watched, at most 60 s, until it settles: every live
member received an assignment (on_assign, possibly empty: 8 partitions, 20 members) in one
generation (read from the member's consumer group metadata in on_assign), none revoked or lost
since, and together their assignments cover each partition of TOPIC exactly once; and that
held for a session timeout and a half, 9 s: a killed member still in that generation (one that
had joined before it was killed, with partitions or none) times out within a session of the
generation's start, and the rebalance that follows would revoke every assignment, so the
verdict waits it out. `seconds_to_settle` is from the end of the storm to the last on_assign of
the settled state, the moment it began (the 9 s of confirmation come on top).

Prints JSON lines, each flushed at once:
  {"kind": "seed", "seed": N, "seconds": S, "members": M, "rate": R}
  {"kind": "change", "at": T, "action": "closed"|"killed", "slot": I, "old": ID, "new": ID}
  {"kind": "storm_over", "changes": C, "closed": N, "killed": N}
  {"kind": "settled", "seconds_to_settle": S, "members": N, "partitions_covered": [P, ...],
   "changes": C, "generation": G, "assignments": {CLIENT_ID: [P, ...], ...},
   "member_ids": {CLIENT_ID: MEMBER_ID, ...}, "errors": {NAME: COUNT, ...},
   "commit_errors": {NAME: COUNT, ...}, "commits": N}
  {"kind": "unsettled", "seconds_waited": S, "changes": C, "members": [{"client_id", "member_id",
   "assigned", "generation", "assignments_received"}, ...], "lacking": [CLIENT_ID, ...],
   "generations": [G, ...], "partitions": {P: [CLIENT_ID, ...]}, "errors": {...},
   "commit_errors": {...}}
  {"kind": "closed", "stayed_settled": BOOL, "seconds_to_close": S, "errors": {...},
   "commit_errors": {...}}
`errors` counts the errors librdkafka reported (error_cb, and errors consume() returned) by
name, `commit_errors` the commits refused, by name. After the verdict every live member is
closed (LeaveGroup) and the program exits 0 when the group settled, 1 when not. HOLD_SECONDS
(environment, 0 by default) keeps the settled members polling that long before they close, or
until SIGTERM, so that a test can look at the group meanwhile; `stayed_settled` says whether
the group stayed settled, in the same generation, until then.
"""

import json
import os
import random
import signal
import struct
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

SESSION_MS = 6000
# Settled must hold this long: past a session timeout, so that a dead member of the settling
# generation is timed out (and the group rebalances again) before the verdict.
CONFIRM_SECONDS = 1.5 * SESSION_MS / 1000
SETTLE_LIMIT_SECONDS = 60


def emit(**fields):
    print(json.dumps(fields), flush=True)


class Counts:
    """Error names and how often each came, from every member's thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_name = {}

    def add(self, name):
        with self.lock:
            self.by_name[name] = self.by_name.get(name, 0) + 1

    def snapshot(self):
        with self.lock:
            return dict(self.by_name)


def generation_of(consumer):
    """The generation of the member's group membership, from its serialized consumer group
    metadata (librdkafka's `CGMDv2:` then the generation id, a native int32)."""
    metadata = consumer.consumer_group_metadata()
    if not isinstance(metadata, bytes) or not metadata.startswith(b"CGMDv2:"):
        raise SystemExit(f"unexpected consumer group metadata: {metadata!r}")
    return struct.unpack_from("=i", metadata, len(b"CGMDv2:"))[0]


class Member:
    """One consumer of the group, polled by a thread of its own until it is closed or killed;
    what it was assigned, under its lock."""

    def __init__(self, bootstrap, topic, group, client_id, errors, commit_errors, commits):
        self.client_id = client_id
        self.topic = topic
        self.errors = errors
        self.commit_errors = commit_errors
        self.commits = commits
        self.lock = threading.Lock()
        self.assigned = None  # the partitions of the assignment in force, None once revoked
        self.generation = None  # the generation of that assignment
        self.member_id = None
        self.assignments = 0  # on_assign calls
        self.changed_at = time.monotonic()  # the last on_assign, on_revoke or on_lost
        self.ending = None  # "close" or "kill", once told
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": client_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": 500,
                "max.poll.interval.ms": SESSION_MS,
                "error_cb": self.on_error,
            }
        )
        self.consumer.subscribe(
            [topic], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost
        )
        self.thread = threading.Thread(target=self.run, name=client_id, daemon=True)
        self.thread.start()

    def on_error(self, err):
        self.errors.add(("FATAL " if err.fatal() else "") + err.name())

    def on_assign(self, consumer, partitions):
        generation = generation_of(consumer)
        member_id = consumer.memberid()
        with self.lock:
            self.assigned = sorted(tp.partition for tp in partitions)
            self.generation = generation
            self.member_id = member_id
            self.assignments += 1
            self.changed_at = time.monotonic()

    def on_revoke(self, consumer, partitions):
        with self.lock:
            self.assigned = None
            self.changed_at = time.monotonic()

    def on_lost(self, consumer, partitions):
        with self.lock:
            self.assigned = None
            self.changed_at = time.monotonic()

    def run(self):
        consumer = self.consumer
        while self.ending is None:
            messages = consumer.consume(num_messages=100, timeout=0.1)
            next_offsets = {}
            for message in messages:
                error = message.error()
                if error is not None:
                    self.errors.add(("FATAL " if error.fatal() else "") + error.name())
                    continue
                next_offsets[message.partition()] = message.offset() + 1
            if next_offsets and self.ending is None:
                self.commit(consumer, next_offsets)
        self.consumer = None
        if self.ending == "close":
            consumer.close()
        # Killed: the Consumer is dropped with its last reference, here, without close():
        # confluent-kafka then destroys it without leaving the group.
        del consumer

    def commit(self, consumer, next_offsets):
        offsets = [TopicPartition(self.topic, p, o) for p, o in sorted(next_offsets.items())]
        try:
            answered = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as err:
            error = err.args[0] if err.args else None
            self.commit_errors.add(error.name() if hasattr(error, "name") else str(err))
            return
        for tp in answered:
            if tp.error is not None:
                self.commit_errors.add(tp.error.name())
            else:
                self.commits.add("ok")

    def end(self, how):
        """Tells its thread to close or kill it (without waiting)."""
        self.ending = how

    def snapshot(self):
        with self.lock:
            return {
                "client_id": self.client_id,
                "member_id": self.member_id,
                "assigned": self.assigned,
                "generation": self.generation,
                "assignments_received": self.assignments,
                "changed_at": self.changed_at,
            }


def settled_state(members, partitions):
    """The generation and assignments of `members` when they are settled (each assigned in one
    generation, together covering each of `partitions` once), else None; with their snapshots."""
    shown = [member.snapshot() for member in members]
    if any(one["assigned"] is None for one in shown):
        return None, shown
    generations = {one["generation"] for one in shown}
    if len(generations) != 1:
        return None, shown
    covered = sorted(p for one in shown for p in one["assigned"])
    if covered != partitions:
        return None, shown
    return generations.pop(), shown


def topic_partitions(bootstrap, topic):
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    described = metadata.topics.get(topic)
    if described is None or described.error is not None or not described.partitions:
        raise SystemExit(f"no partitions for {topic}: {described and described.error}")
    return sorted(described.partitions)


def main():
    if len(sys.argv) != 6:
        raise SystemExit(__doc__)
    bootstrap, topic, group = sys.argv[1:4]
    seconds, size = float(sys.argv[4]), int(sys.argv[5])
    seed = int(os.environ.get("STORM_SEED") or time.time_ns() % 2**32)
    rate = float(os.environ.get("STORM_RATE", "2.5"))
    hold = float(os.environ.get("HOLD_SECONDS", "0"))
    emit(kind="seed", seed=seed, seconds=seconds, members=size, rate=rate)
    chance = random.Random(seed)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    partitions = topic_partitions(bootstrap, topic)
    errors, commit_errors, commits = Counts(), Counts(), Counts()
    incarnations = [0] * size

    def new_member(slot):
        incarnations[slot] += 1
        client_id = f"storm-{slot}-{incarnations[slot]}"
        return Member(bootstrap, topic, group, client_id, errors, commit_errors, commits)

    members = [new_member(slot) for slot in range(size)]
    ending = []  # members told to close or die, whose threads are joined at the end

    started = time.monotonic()
    storm_end = started + seconds
    changes = {"closed": 0, "killed": 0}
    next_change = started + chance.expovariate(rate)
    while not stopping.is_set():
        now = time.monotonic()
        if next_change >= storm_end:
            stopping.wait(max(0.0, storm_end - now))
            break
        if now < next_change:
            stopping.wait(next_change - now)
            continue
        slot = chance.randrange(size)
        action = chance.choice(["closed", "killed"])
        old = members[slot]
        old.end("close" if action == "closed" else "kill")
        ending.append(old)
        members[slot] = new_member(slot)
        changes[action] += 1
        emit(kind="change", at=round(now - started, 3), action=action, slot=slot,
             old=old.client_id, new=members[slot].client_id)
        next_change += chance.expovariate(rate)
    storm_over = time.monotonic()
    total = changes["closed"] + changes["killed"]
    emit(kind="storm_over", changes=total, **changes)

    # Watch until settled for CONFIRM_SECONDS, or the limit.
    deadline = storm_over + SETTLE_LIMIT_SECONDS
    since, since_generation = None, None
    verdict = None
    while True:
        now = time.monotonic()
        generation, shown = settled_state(members, partitions)
        if generation is None:
            since = None
        elif since is None or generation != since_generation:
            since = max(one["changed_at"] for one in shown)
            since_generation = generation
        if since is not None and now - since >= CONFIRM_SECONDS:
            verdict = True
            emit(
                kind="settled",
                seconds_to_settle=round(max(0.0, since - storm_over), 3),
                members=len(shown),
                partitions_covered=sorted(p for one in shown for p in one["assigned"]),
                changes=total,
                generation=generation,
                assignments={one["client_id"]: one["assigned"] for one in shown},
                member_ids={one["client_id"]: one["member_id"] for one in shown},
                errors=errors.snapshot(),
                commit_errors=commit_errors.snapshot(),
                commits=commits.snapshot().get("ok", 0),
            )
            break
        if now >= deadline:
            verdict = False
            by_partition = {}
            for one in shown:
                for p in one["assigned"] or []:
                    by_partition.setdefault(str(p), []).append(one["client_id"])
            emit(
                kind="unsettled",
                seconds_waited=round(now - storm_over, 3),
                changes=total,
                members=[
                    {key: value for key, value in one.items() if key != "changed_at"}
                    for one in shown
                ],
                lacking=[one["client_id"] for one in shown if one["assigned"] is None],
                generations=sorted({g for one in shown if (g := one["generation"]) is not None}),
                partitions=by_partition,
                errors=errors.snapshot(),
                commit_errors=commit_errors.snapshot(),
            )
            break
        time.sleep(0.05)

    stayed = verdict
    if verdict and hold > 0:
        held_until = time.monotonic() + hold
        while not stopping.is_set() and time.monotonic() < held_until:
            generation, _ = settled_state(members, partitions)
            stayed = stayed and generation == since_generation
            stopping.wait(0.05)
        generation, _ = settled_state(members, partitions)
        stayed = stayed and generation == since_generation

    closing = time.monotonic()
    for member in members:
        member.end("close")
    for member in members + ending:
        member.thread.join()
    emit(
        kind="closed",
        stayed_settled=bool(stayed),
        seconds_to_close=round(time.monotonic() - closing, 3),
        errors=errors.snapshot(),
        commit_errors=commit_errors.snapshot(),
    )
    sys.exit(0 if verdict else 1)


if __name__ == "__main__":
    main()
