"""An idempotent confluent-kafka (librdkafka) producer that feeds a consumer group's tests:
COUNT records with the values `n-<i>` (UTF-8 text), record i to partition i mod the topic's
partition count, so that every partition gets its share, with `acks=all`.

Usage: confluent_group_producer.py BOOTSTRAP TOPIC COUNT [FIRST]

i runs from FIRST (0 by default) to FIRST + COUNT - 1, so that a second run writes other values.
RATE (environment) paces the records at about that many a second; as fast as they go by
default.

Prints one JSON line per failed delivery, {"kind": "failed", "value": "n-<i>", "error": TEXT}, then
  {"kind": "done", "count": DELIVERED, "partitions": {"P": {"records": N, "end": NEXT}, ...}}
where `end` is one past the highest offset a delivery report gave in partition P. Exits
non-zero when a record was not delivered.
"""

import json
import os
import sys
import time

from confluent_kafka import Producer


def main():
    bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    rate = float(os.environ.get("RATE", "0"))
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60000,
        }
    )
    metadata = producer.list_topics(topic, timeout=30)
    partitions = sorted(metadata.topics[topic].partitions)
    if not partitions:
        raise SystemExit(f"no partitions for {topic}: {metadata.topics[topic].error}")

    delivered = 0
    failed = 0
    per_partition = {}

    def report(err, message):
        nonlocal delivered, failed
        if err is not None:
            failed += 1
            value = message.value().decode("utf-8")
            print(json.dumps({"kind": "failed", "value": value, "error": str(err)}), flush=True)
            return
        delivered += 1
        shown = per_partition.setdefault(str(message.partition()), {"records": 0, "end": 0})
        shown["records"] += 1
        shown["end"] = max(shown["end"], message.offset() + 1)

    started = time.monotonic()
    for i in range(first, first + count):
        if rate > 0:
            ahead = started + (i - first) / rate - time.monotonic()
            if ahead > 0:
                producer.poll(ahead)
        partition = partitions[i % len(partitions)]
        while True:
            try:
                producer.produce(topic, f"n-{i}".encode(), partition=partition,
                                 on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(60)
    print(json.dumps({"kind": "done", "count": delivered, "partitions": per_partition}),
          flush=True)
    if left or failed or delivered != count:
        print(f"{left} undelivered, {failed} failed of {count}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
