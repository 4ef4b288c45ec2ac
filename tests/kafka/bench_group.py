"""The consumer-group part of the benchmark suite's Kafka section (benches/suite/kafka.rs):
confluent-kafka (librdkafka) consumers sharing a group, each in a thread of this process.

    bench_group.py BOOTSTRAP read TOPIC COUNT MEMBERS
    bench_group.py BOOTSTRAP assigned TOPIC COUNT MEMBERS
    bench_group.py BOOTSTRAP rebalance TOPIC MEMBERS

`read`: MEMBERS consumers subscribe to TOPIC in a new group and read its COUNT records from the
beginning (no commits, fetch defaults, as bench_fetch.py's assigned consumer does). The group
has committed offset 0 of every partition beforehand, as a group that resumes has offsets: a
group without them waits for librdkafka's offset reset (a 100 ms timer) after its assignment. Prints one
JSON line: `records` read, `value_bytes`, `join_seconds` (from the subscriptions until every
member had its assignment), `seconds` (from the first assignment until COUNT records were
read), `cpu_seconds` (this process's user and system CPU over that span), `errors`.

`assigned`: the same, without a group: consumer i `assign()`s partitions i, i + MEMBERS, ...
from their beginning (the baseline of `read`: the same threads and clients, no group protocol).

`rebalance`: MEMBERS consumers subscribe to TOPIC (which holds records) in a new group, with
`max.poll.interval.ms` (the rebalance timeout it joins with) and `session.timeout.ms` both
REBALANCE_TIMEOUT_MS, 10,000 by default (heartbeats every 3 s, librdkafka's default); once every member has its assignment and each member with partitions has read a
record, a member with partitions leaves (close(): LeaveGroup). Prints one JSON line:
`rebalance_seconds` (from the leave until every remaining member had its new assignment and
each with partitions had read a record of it), `rebalance_timeout_seconds`, `join_seconds`,
`errors`.
"""

import json
import os
import resource
import sys
import threading
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Member:
    """One consumer of the group, polled by a thread of its own until told to stop."""

    def __init__(self, bootstrap, topic, group, errors, settings, partitions=None):
        self.lock = threading.Lock()
        self.generation = 0  # assignments received
        self.assigned = None  # the partitions of the last assignment
        self.read_since_assigned = 0
        self.read = 0
        self.value_bytes = 0
        self.first_assigned_at = None
        self.stop = threading.Event()
        self.errors = errors
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "error_cb": self.on_error,
        }
        config.update(settings)
        self.consumer = Consumer(config)
        self.thread = threading.Thread(target=self.poll, daemon=True)
        if partitions is None:
            self.consumer.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke)
            self.thread.start()
        else:
            # Connected, and the metadata read, before the reading starts (assign()), as a
            # member of a group is once it has its assignment.
            self.consumer.list_topics(topic, timeout=30)
            self.partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions]

    def assign(self):
        """Starts reading the partitions given (no group)."""
        self.consumer.assign(self.partitions)
        self.on_assign(self.consumer, self.partitions)
        self.thread.start()

    def on_error(self, err):
        name = ("FATAL " if err.fatal() else "") + err.name()
        self.errors[name] = self.errors.get(name, 0) + 1

    def on_assign(self, consumer, partitions):
        with self.lock:
            self.generation += 1
            self.assigned = sorted(tp.partition for tp in partitions)
            self.read_since_assigned = 0
            if self.first_assigned_at is None:
                self.first_assigned_at = time.monotonic()

    def on_revoke(self, consumer, partitions):
        with self.lock:
            self.assigned = None

    def poll(self):
        while not self.stop.is_set():
            for msg in self.consumer.consume(num_messages=10000, timeout=0.05):
                err = msg.error()
                if err is not None:
                    if not err.name().endswith("PARTITION_EOF"):
                        self.errors[err.name()] = self.errors.get(err.name(), 0) + 1
                    continue
                with self.lock:
                    self.read += 1
                    self.read_since_assigned += 1
                    self.value_bytes += len(msg.value())

    def close(self):
        self.stop.set()
        self.thread.join()
        self.consumer.close()


    def snapshot(self):
        with self.lock:
            return self.generation, self.assigned, self.read_since_assigned


def close_all(members):
    """Stops every member's reading before any leaves: a member leaving makes the others
    rebalance, and a member still polling would read its new partitions again."""
    for member in members:
        member.stop.set()
    for member in members:
        member.close()


def wait_until(condition, deadline):
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.005)


def read(bootstrap, topic, count, members, assigned=False):
    errors = {}
    group = f"bench-read-{uuid.uuid4()}"
    # Without a group, each consumer is assigned its share of the partitions.
    # Without subscribe(), the probe joins no group: it reads the partitions, and commits the
    # group's offsets (generation -1, as a tool does) when there is a group.
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    partitions = len(probe.list_topics(topic, timeout=30).topics[topic].partitions)
    if not assigned:
        start = [TopicPartition(topic, p, 0) for p in range(partitions)]
        probe.commit(offsets=start, asynchronous=False)
    probe.close()
    shares = [list(range(i, partitions, members)) if assigned else None for i in range(members)]
    group_members = [Member(bootstrap, topic, group, errors, {}, share) for share in shares]
    started, cpu = time.monotonic(), cpu_seconds()
    if assigned:
        for member in group_members:
            member.assign()
    deadline = started + 600
    wait_until(lambda: all(m.snapshot()[1] is not None for m in group_members), deadline)
    joined = time.monotonic()
    wait_until(lambda: sum(m.read for m in group_members) >= count, deadline)
    ended, cpu = time.monotonic(), cpu_seconds() - cpu
    first = min(m.first_assigned_at for m in group_members)
    close_all(group_members)
    return {
        "records": sum(m.read for m in group_members),
        "value_bytes": sum(m.value_bytes for m in group_members),
        "join_seconds": joined - started,
        "seconds": ended - first,
        "cpu_seconds": cpu,
        "errors": errors,
    }


def rebalance(bootstrap, topic, members):
    errors = {}
    timeout_ms = int(os.environ.get("REBALANCE_TIMEOUT_MS", "10000"))
    group = f"bench-rebalance-{uuid.uuid4()}"
    # librdkafka's session may not be longer than the rebalance timeout.
    settings = {"max.poll.interval.ms": timeout_ms, "session.timeout.ms": timeout_ms}
    started = time.monotonic()
    group_members = [Member(bootstrap, topic, group, errors, settings) for _ in range(members)]
    deadline = started + 120

    def settled(among, since):
        """Every member of `among` has an assignment newer than `since` (its generation
        then), and each with partitions read a record of it."""
        for member in among:
            generation, assigned, read_since = member.snapshot()
            if assigned is None or generation <= since.get(member, 0):
                return False
            if assigned and read_since == 0:
                return False
        return True

    wait_until(lambda: settled(group_members, {}), deadline)
    joined = time.monotonic() - started
    leaving = next(m for m in group_members if m.snapshot()[1])
    remaining = [m for m in group_members if m is not leaving]
    generations = {m: m.snapshot()[0] for m in remaining}
    left = time.monotonic()
    leaving.close()
    wait_until(lambda: settled(remaining, generations), left + 120)
    rebalanced = time.monotonic() - left
    close_all(remaining)
    return {
        "rebalance_seconds": rebalanced,
        "rebalance_timeout_seconds": timeout_ms / 1000,
        "join_seconds": joined,
        "errors": errors,
    }


def main():
    bootstrap, mode, topic = sys.argv[1:4]
    if mode in ("read", "assigned"):
        summary = read(bootstrap, topic, int(sys.argv[4]), int(sys.argv[5]), mode == "assigned")
    else:
        summary = rebalance(bootstrap, topic, int(sys.argv[4]))
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
