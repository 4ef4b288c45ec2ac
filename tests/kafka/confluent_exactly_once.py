"""Exactly once through lost answers: an idempotent confluent-kafka (librdkafka) producer, then a
consumer that reads every partition back from offset 0.

    confluent_exactly_once.py BOOTSTRAP TOPIC COUNT OUT_DIR

Produces COUNT records with `enable.idempotence=true` and `acks=all`, waits for every delivery
report, then assigns the topic's partitions at OFFSET_BEGINNING (no group API: `assign()` and no
commit) and reads until every partition reached its end. Writes two files of JSON lines to
OUT_DIR:

- produced.jsonl, one line per record in production order: `n` (its sequence number), the
  `partition` and `offset` its delivery report gave (or `error`), and what was sent: `key`,
  `headers` (`[name, value]`, values base64, `null` for none) and `value`, base64;
- consumed.jsonl, one line per record read, in the order read: `partition`, `offset`, `key`,
  `headers`, `value`, as above.

Prints one JSON summary line: delivered and failed counts (with the errors), the errors the
clients reported (a fatal one included), how many records were read, each partition's
watermarks, and timings.

Record n: its value encodes n whatever its partition (`{"seq": n, ...}`, `[n, ...]`,
`seq=n ...` or the bytes `\\xffBIN` + n as 8 big-endian bytes); its key and headers derive from
n, some of them not UTF-8.
"""

import base64
import functools
import hashlib
import json
import os
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

PARTITIONS = 8


def b64(data):
    return None if data is None else base64.b64encode(data).decode("ascii")


def key_of(n):
    kind = n % 5
    if kind == 0:
        return f"key-{n}".encode()
    if kind == 1:
        return b"\xff\xfe" + n.to_bytes(4, "big")  # never UTF-8
    if kind == 2:
        return f"clé-{n % 1000}".encode()  # repeats; UTF-8 beyond ASCII
    if kind == 3:
        return b""  # an empty key, not a missing one
    return b"\x00k" + n.to_bytes(4, "little")


def headers_of(n):
    headers = [("seq", str(n).encode())]
    if n % 3 == 0:
        headers.append(("bin", b"\x00\x80\xff" + n.to_bytes(4, "big")))  # not UTF-8
    if n % 7 == 0:
        headers += [("dup", b"first"), ("dup", b"second")]  # a name repeated, in order
    if n % 11 == 0:
        headers.append(("none", None))  # a header without a value
    if n % 13 == 0:
        headers.append(("naïve", "ünïcödé".encode()))
    if n % 17 == 0:
        headers.append(("empty", b""))
    return headers


def value_of(n):
    kind = n % 4
    if kind == 0:
        # JSON, its spacing kept byte for byte.
        return ('{"seq": %d,  "kind":"object", "pad" : "%s"}' % (n, "x" * (n % 50))).encode()
    if kind == 1:
        # Binary, larger now and then.
        tail = hashlib.sha256(n.to_bytes(8, "big")).digest() * (1 + (n % 7))
        if n % 1000 == 1:
            tail *= 40
        return b"\xffBIN" + n.to_bytes(8, "big") + tail
    if kind == 2:
        return ('[%d, "array", null, 1.5e3, {"é": true}]' % n).encode()
    return b"seq=%d plain text, not JSON" % n


def produce(bootstrap, topic, count, out_dir):
    errors = {}

    def on_error(err):
        name = ("FATAL " if err.fatal() else "") + err.name()
        errors[name] = errors.get(name, 0) + 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            # Batches of at most 100 records: a thousand Produce requests and more, so that
            # many of their answers are lost on the way (a batch is sent again after each).
            "batch.num.messages": 100,
            "message.timeout.ms": 120000,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "log.connection.close": False,
            "error_cb": on_error,
        }
    )
    reports = [None] * count

    def report(n, err, msg):
        if err is not None:
            reports[n] = {"error": str(err)}
        else:
            reports[n] = {"partition": msg.partition(), "offset": msg.offset()}

    started = time.monotonic()
    for n in range(count):
        while True:
            try:
                producer.produce(
                    topic,
                    value=value_of(n),
                    key=key_of(n),
                    headers=headers_of(n),
                    on_delivery=functools.partial(report, n),
                )
                break
            except BufferError:
                producer.poll(0.05)
        if n % 1000 == 0:
            producer.poll(0)
    deadline = time.monotonic() + 300
    while producer.flush(1) > 0 and time.monotonic() < deadline:
        pass
    left = len(producer)
    produce_seconds = time.monotonic() - started

    delivered, failed, failures = 0, 0, {}
    with open(os.path.join(out_dir, "produced.jsonl"), "w") as out:
        for n in range(count):
            line = {
                "n": n,
                "key": b64(key_of(n)),
                "headers": [[name, b64(value)] for name, value in headers_of(n)],
                "value": b64(value_of(n)),
            }
            got = reports[n] or {"error": "no delivery report"}
            line.update(got)
            if "error" in got:
                failed += 1
                failures[got["error"]] = failures.get(got["error"], 0) + 1
            else:
                delivered += 1
            out.write(json.dumps(line) + "\n")
    return {
        "delivered": delivered,
        "failed": failed,
        "failures": failures,
        "undelivered_in_queue": left,
        "producer_errors": errors,
        "produce_seconds": round(produce_seconds, 2),
    }


def consume(bootstrap, topic, expected, out_dir):
    errors = {}

    def on_error(err):
        name = ("FATAL " if err.fatal() else "") + err.name()
        errors[name] = errors.get(name, 0) + 1

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "exactly-once-check",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 100,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "log.connection.close": False,
            "error_cb": on_error,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    started = time.monotonic()
    deadline = started + 180
    read = 0
    # The next offset of each partition once it reported its end (cleared by a later record).
    at_end = {}
    message_errors = {}
    with open(os.path.join(out_dir, "consumed.jsonl"), "w") as out:
        while time.monotonic() < deadline:
            if read >= expected and len(at_end) == PARTITIONS:
                break
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        at_end[msg.partition()] = msg.offset()
                    else:
                        name = msg.error().name()
                        message_errors[name] = message_errors.get(name, 0) + 1
                    continue
                at_end.pop(msg.partition(), None)
                read += 1
                out.write(
                    json.dumps(
                        {
                            "partition": msg.partition(),
                            "offset": msg.offset(),
                            "key": b64(msg.key()),
                            "headers": [[name, b64(value)] for name, value in msg.headers() or []],
                            "value": b64(msg.value()),
                        }
                    )
                    + "\n"
                )
    consume_seconds = time.monotonic() - started
    watermarks = []
    for p in range(PARTITIONS):
        for _ in range(5):
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=5, cached=False
                )
                watermarks.append([low, high])
                break
            except Exception as err:  # a lost answer: ask again
                last = str(err)
        else:
            watermarks.append(last)
    consumer.close()
    return {
        "consumed": read,
        "ends": {str(p): offset for p, offset in sorted(at_end.items())},
        "watermarks": watermarks,
        "consumer_errors": errors,
        "message_errors": message_errors,
        "consume_seconds": round(consume_seconds, 2),
    }


def main():
    bootstrap, topic, count, out_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    summary = produce(bootstrap, topic, count, out_dir)
    summary.update(consume(bootstrap, topic, summary["delivered"], out_dir))
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
