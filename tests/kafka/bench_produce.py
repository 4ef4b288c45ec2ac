"""The Kafka section of the benchmark suite (benches/suite/kafka.rs): a confluent-kafka
(librdkafka) producer sending COUNT records to the PARTITIONS partitions of TOPIC, round-robin.

    bench_produce.py BOOTSTRAP TOPIC COUNT PARTITIONS VALUE

Every record's value is VALUE (the bench passes a 100-byte JSON text), with no key and no
headers; `acks=all`, `linger.ms=5`, every other setting librdkafka's default (no idempotence).
The producer connects and reads the topic's metadata before the timing starts, as the bench's
REST loops open their connections first. No delivery callback: the bench checks afterwards,
over REST, that every partition holds its share of the records, and any error librdkafka
reports (error_cb) fails the run.

Prints one JSON line: `records`, `seconds` (from the first produce() to the end of flush()),
`cpu_seconds` (this process's user and system CPU over that span: the Python loop and
librdkafka's threads), `left` (records still queued: 0) and `errors` (error_cb's, by name).
"""

import json
import resource
import sys
import time

from confluent_kafka import Producer


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main():
    bootstrap, topic, count, partitions, value = sys.argv[1:6]
    count, partitions, value = int(count), int(partitions), value.encode()
    errors = {}

    def on_error(err):
        name = ("FATAL " if err.fatal() else "") + err.name()
        errors[name] = errors.get(name, 0) + 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "error_cb": on_error,
        }
    )
    # Connects, and learns the topic's partitions and their leader.
    metadata = producer.list_topics(topic, timeout=30)
    assert len(metadata.topics[topic].partitions) >= partitions, metadata.topics[topic]

    produce, poll = producer.produce, producer.poll
    started, cpu = time.monotonic(), cpu_seconds()
    for n in range(count):
        while True:
            try:
                produce(topic, value, partition=n % partitions)
                break
            except BufferError:
                # librdkafka's queue is full (queue.buffering.max.messages): wait for answers.
                poll(0.001)
    left = producer.flush(120)
    seconds, cpu = time.monotonic() - started, cpu_seconds() - cpu
    print(
        json.dumps(
            {
                "records": count,
                "seconds": seconds,
                "cpu_seconds": cpu,
                "left": left,
                "errors": errors,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
