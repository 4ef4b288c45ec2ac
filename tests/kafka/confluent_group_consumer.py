"""A member of a Kafka consumer group with confluent-kafka (librdkafka): subscribes to a topic
in a group and processes its records, committing what it processed synchronously after each
batch it got (never automatically), so that a test that kills it (SIGKILL) knows from its output
what the group had committed for it and what it had processed beyond.

Usage: confluent_group_consumer.py BOOTSTRAP TOPIC GROUP [IDLE_SECONDS]

Settings: `enable.auto.commit=false`, `auto.offset.reset=earliest`, `session.timeout.ms=6000`,
`heartbeat.interval.ms=1000`, the eager assignors librdkafka uses by default (range,
roundrobin). IDLE_SECONDS (an argument, or the environment variable of that name; 10 by
default) is how long it goes on without a record, once it processed one, before it leaves the
group and exits. BATCH (environment, 100 by default) is the most records taken, processed and
committed at once; PAUSE_MS (environment, 0 by default) is how long processing a batch takes
before its commit, so that a kill is likely to find a batch processed and not committed.
INSTANCE_ID (environment), when set, makes it a static member: its `group.instance.id`.
SIGTERM makes it finish its batch, leave the group (a static member stays in it until its
session times out: librdkafka sends no LeaveGroup for one) and exit as well.

Prints JSON lines, each flushed at once:
  {"kind": "assigned", "partitions": [P, ...]}      (each assignment, on_assign)
  {"kind": "revoked", "partitions": [P, ...]}       (on_revoke)
  {"kind": "lost", "partitions": [P, ...]}          (on_lost: the group moved on without it)
  {"kind": "processed", "partition": P, "offset": O, "value": TEXT}
  {"kind": "committed", "partition": P, "offset": NEXT}   (the commit answered success)
  {"kind": "commit_failed", "partition": P, "offset": NEXT, "error": TEXT}
  {"kind": "error", "error": TEXT}                  (a consumer error, not fatal)
  {"kind": "done", "processed": N}                  (last, when it left the group)
Exits non-zero on a fatal client error.
"""

import json
import os
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition


def emit(**fields):
    print(json.dumps(fields), flush=True)


def numbers(partitions):
    return sorted(tp.partition for tp in partitions)


def main():
    bootstrap, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
    idle = float(sys.argv[4] if len(sys.argv) > 4 else os.environ.get("IDLE_SECONDS", "10"))
    batch = int(os.environ.get("BATCH", "100"))
    pause = float(os.environ.get("PAUSE_MS", "0")) / 1000
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))

    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": f"group-consumer-{os.getpid()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
    }
    if os.environ.get("INSTANCE_ID"):
        settings["group.instance.id"] = os.environ["INSTANCE_ID"]
    consumer = Consumer(settings)
    consumer.subscribe(
        [topic],
        on_assign=lambda _, partitions: emit(kind="assigned", partitions=numbers(partitions)),
        on_revoke=lambda _, partitions: emit(kind="revoked", partitions=numbers(partitions)),
        on_lost=lambda _, partitions: emit(kind="lost", partitions=numbers(partitions)),
    )

    processed = 0
    last_record = None
    while not stopping:
        messages = consumer.consume(num_messages=batch, timeout=0.5)
        next_offsets = {}
        for message in messages:
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise KafkaException(error)
                emit(kind="error", error=str(error))
                continue
            emit(
                kind="processed",
                partition=message.partition(),
                offset=message.offset(),
                value=message.value().decode("utf-8"),
            )
            next_offsets[message.partition()] = message.offset() + 1
            processed += 1
        if next_offsets:
            time.sleep(pause)
            last_record = time.monotonic()
            commit(consumer, topic, next_offsets)
        elif last_record is not None and time.monotonic() - last_record >= idle:
            break
    consumer.close()
    emit(kind="done", processed=processed)


def commit(consumer, topic, next_offsets):
    """Commits `next_offsets` (partition -> the next offset to read) and waits for the answer."""
    offsets = [TopicPartition(topic, p, o) for p, o in sorted(next_offsets.items())]
    try:
        answered = consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as err:
        for tp in offsets:
            emit(kind="commit_failed", partition=tp.partition, offset=tp.offset, error=str(err))
        return
    for tp in answered:
        if tp.error is not None:
            emit(kind="commit_failed", partition=tp.partition, offset=tp.offset,
                 error=str(tp.error))
        else:
            emit(kind="committed", partition=tp.partition, offset=tp.offset)


if __name__ == "__main__":
    main()
