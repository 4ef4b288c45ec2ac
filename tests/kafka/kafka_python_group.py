"""A consumer group of two kafka-python (a pure-Python implementation of the protocol)
KafkaConsumers, each in a thread of this process: both subscribe to TOPIC in GROUP
(`enable_auto_commit=False`, `auto_offset_reset='earliest'`, `session_timeout_ms=6000`,
`heartbeat_interval_ms=1000`) and poll until the group gave each of them a share of the
partitions (the shares disjoint, together every partition); a KafkaProducer (`acks='all'`) then
sends COUNT records, `n-<i>` to partition i mod the partition count, and the two consumers read
them, each committing synchronously (`commit(offsets)`) what every poll gave it.

Usage: kafka_python_group.py BOOTSTRAP TOPIC GROUP COUNT

Prints JSON lines, consumers numbered 0 and 1:
  {"kind": "ready", "assignments": {"0": [P, ...], "1": [P, ...]}}    (the split, before producing)
  {"kind": "produced", "count": N, "partitions": {"P": {"records": N, "end": NEXT}, ...}}
  {"kind": "processed", "consumer": C, "partition": P, "offset": O, "value": TEXT}
  {"kind": "committed", "consumer": C, "partition": P, "offset": NEXT}
  {"kind": "commit_failed", "consumer": C, "partition": P, "offset": NEXT, "error": TEXT}
  {"kind": "assignment", "consumer": C, "partitions": [P, ...]}   (its last one, before closing)
  {"kind": "done", "produced": N, "read": DISTINCT}
Exits non-zero when the group did not split the partitions, or the records were not all read,
within 60 s.
"""

import json
import sys
import threading
import time

from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

MEMBERS = 2
printing = threading.Lock()


def emit(**fields):
    with printing:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


class Group:
    """What the member threads share with the main one."""

    def __init__(self):
        self.lock = threading.Lock()
        self.assignments = {}
        self.read = set()
        self.stop = threading.Event()

    def assignment(self, index, partitions):
        with self.lock:
            self.assignments[index] = partitions

    def split(self, every):
        """The assignments, when each member has a share and the shares split `every`."""
        with self.lock:
            shares = [self.assignments.get(index, []) for index in range(MEMBERS)]
        seen = [p for share in shares for p in share]
        if all(shares) and len(seen) == len(set(seen)) and set(seen) == set(every):
            return {str(index): share for index, share in enumerate(shares)}
        return None


def member(index, bootstrap, topic, group_id, group):
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group_id,
        client_id=f"kafka-python-group-{index}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    try:
        while not group.stop.is_set():
            batches = consumer.poll(timeout_ms=300)
            group.assignment(index, sorted(tp.partition for tp in consumer.assignment()))
            offsets = {}
            for tp, messages in sorted(batches.items(), key=lambda item: item[0].partition):
                for message in messages:
                    emit(
                        kind="processed",
                        consumer=index,
                        partition=message.partition,
                        offset=message.offset,
                        value=message.value.decode("utf-8"),
                    )
                    with group.lock:
                        group.read.add((message.partition, message.offset))
                offsets[tp] = OffsetAndMetadata(messages[-1].offset + 1, None, -1)
            if not offsets:
                continue
            try:
                consumer.commit(offsets)
            except KafkaError as err:
                for tp, meta in offsets.items():
                    emit(kind="commit_failed", consumer=index, partition=tp.partition,
                         offset=meta.offset, error=repr(err))
            else:
                for tp, meta in offsets.items():
                    emit(kind="committed", consumer=index, partition=tp.partition,
                         offset=meta.offset)
    finally:
        consumer.close()


def produce(producer, topic, partitions, count):
    futures = [
        producer.send(topic, value=f"n-{i}".encode(), partition=partitions[i % len(partitions)])
        for i in range(count)
    ]
    producer.flush(timeout=30)
    shown = {}
    for future in futures:
        sent = future.get(timeout=30)
        entry = shown.setdefault(str(sent.partition), {"records": 0, "end": 0})
        entry["records"] += 1
        entry["end"] = max(entry["end"], sent.offset + 1)
    emit(kind="produced", count=len(futures), partitions=shown)


def main():
    bootstrap, topic, group_id, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    deadline = time.monotonic() + 60
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    partitions = sorted(producer.partitions_for(topic))

    group = Group()
    threads = [
        threading.Thread(target=member, args=(index, bootstrap, topic, group_id, group))
        for index in range(MEMBERS)
    ]
    for thread in threads:
        thread.start()
    try:
        split = None
        while split is None and time.monotonic() < deadline:
            time.sleep(0.1)
            split = group.split(partitions)
        if split is not None:
            emit(kind="ready", assignments=split)
            produce(producer, topic, partitions, count)
            while time.monotonic() < deadline:
                with group.lock:
                    if len(group.read) >= count:
                        break
                time.sleep(0.1)
    finally:
        # Each one's last assignment, before either leaves the group (which hands the other
        # every partition).
        with group.lock:
            last = dict(group.assignments)
        group.stop.set()
        for index in range(MEMBERS):
            emit(kind="assignment", consumer=index, partitions=last.get(index, []))
        for thread in threads:
            thread.join()
        producer.close()
        with group.lock:
            read = len(group.read)
        emit(kind="done", produced=count, read=read)
    if split is None:
        print(f"the group did not split the partitions: {group.assignments}", file=sys.stderr)
        sys.exit(1)
    if read < count:
        print(f"read {read} of {count} records", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
