"""A round trip through the Kafka listener with kafka-python (a pure-Python implementation of
the protocol): a KafkaProducer (acks='all') sends records with keys (some not UTF-8), headers
(repeated names, binary values) and values (JSON text, binary, empty, none) over every
partition of a topic; a KafkaConsumer without a group, assigned every partition from the
beginning, reads them back.

Usage: kafka_python_roundtrip.py BOOTSTRAP TOPIC COUNT [CODEC]

CODEC (gzip, snappy, lz4, zstd) compresses the batches; none by default.

Prints one JSON line per record produced, in the order sent, then one per record consumed, in
the order read, bytes in standard base64:
  {"kind": "produced"|"consumed", "partition": P, "offset": O, "key": B64|null,
   "value": B64|null, "headers": [[NAME, B64|null], ...]}
and last {"kind": "done", "produced": N, "consumed": M}. Exits non-zero when a send fails or
the records do not all come back within a minute.
"""

import base64
import json
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def b64(data):
    return None if data is None else base64.b64encode(data).decode("ascii")


def line(kind, partition, offset, key, value, headers):
    print(
        json.dumps(
            {
                "kind": kind,
                "partition": partition,
                "offset": offset,
                "key": b64(key),
                "value": b64(value),
                "headers": [[name, b64(value)] for name, value in headers],
            }
        ),
        flush=True,
    )


def record(n):
    """The key, value and headers of the n-th record: every kind of each, in turn."""
    if n % 5 == 3:
        key = bytes([0xFF, 0xFE, n % 256, 0x00, 0x80])  # not UTF-8
    else:
        key = f"key-{n}".encode()
    kind = n % 4
    if kind == 0:
        document = {"n": n, "text": f"caf\u00e9 \u2713 #{n}", "list": [1, 2, 3]}
        value = json.dumps(document, ensure_ascii=False).encode()
    elif kind == 1:
        value = bytes([n % 256, 0x00, 0xFF, 0xC3, 0x28]) + b"binary"  # not UTF-8
    elif kind == 2:
        value = f"plain text {n}, not JSON".encode()
    else:
        value = b"" if n % 8 == 3 else f'  [{n}, "x"]  '.encode()
    if n % 25 == 12:
        value = None  # a tombstone
    headers = [("trace", f"t-{n}".encode()), ("h", b"1"), ("h", bytes([0xFF, n % 256]))]
    if n % 7 == 0:
        headers = []
    return key, value, headers


def main():
    bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    codec = sys.argv[4] if len(sys.argv) > 4 else None
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=codec,
        acks="all",
        linger_ms=5,
        retries=0,
        max_in_flight_requests_per_connection=1,
    )
    futures = []
    for n in range(count):
        key, value, headers = record(n)
        future = producer.send(topic, key=key, value=value, headers=headers)
        futures.append((key, value, headers, future))
    producer.flush(timeout=60)
    produced = []
    for key, value, headers, future in futures:
        metadata = future.get(timeout=60)
        produced.append((metadata.partition, metadata.offset))
        line("produced", metadata.partition, metadata.offset, key, value, headers)
    producer.close()

    partitions = sorted(partitions_of(bootstrap, topic))
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=1000,
    )
    assigned = [TopicPartition(topic, p) for p in partitions]
    consumer.assign(assigned)
    consumer.seek_to_beginning(*assigned)
    consumed = 0
    deadline = time.monotonic() + 60
    while consumed < len(produced) and time.monotonic() < deadline:
        batches = consumer.poll(timeout_ms=500)
        for tp in sorted(batches, key=lambda tp: tp.partition):
            for message in batches[tp]:
                consumed += 1
                line(
                    "consumed",
                    message.partition,
                    message.offset,
                    message.key,
                    message.value,
                    message.headers or [],
                )
    consumer.close()
    print(json.dumps({"kind": "done", "produced": len(produced), "consumed": consumed}), flush=True)
    if consumed < len(produced):
        print(f"only {consumed} of {len(produced)} records came back", file=sys.stderr)
        sys.exit(1)


def partitions_of(bootstrap, topic):
    """The partitions of `topic`, as the cluster's metadata says."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        partitions = consumer.partitions_for_topic(topic)
    finally:
        consumer.close()
    if not partitions:
        raise SystemExit(f"no partitions for {topic}")
    return partitions


if __name__ == "__main__":
    main()
