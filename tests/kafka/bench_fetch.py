"""The Kafka section of the benchmark suite (benches/suite/kafka.rs): a confluent-kafka
(librdkafka) consumer reading the PARTITIONS partitions of TOPIC from their beginning to their
end, COUNT records in all.

    bench_fetch.py BOOTSTRAP TOPIC COUNT PARTITIONS

The partitions are assign()ed at OFFSET_BEGINNING: no group protocol, no offset commits. Fetch
settings are librdkafka's defaults (`fetch.max.bytes`, `max.partition.fetch.bytes`,
`fetch.wait.max.ms`, ...); `enable.partition.eof` tells when a partition is read to its end.
The consumer connects and reads the topic's metadata before the timing starts. Each record's
value is touched (its length summed), as a consumer that uses its records would.

Prints one JSON line: `records` read, `value_bytes` (their values' lengths summed), `seconds`
(from assign() until COUNT records were read), `cpu_seconds` (this process's user and system
CPU over that span), `errors` (error_cb's and the messages' errors other than the ends of
partitions, by name). Then, untimed, it reads on until every partition reported its end, so
that `records` counts any record more than COUNT too.
"""

import json
import resource
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main():
    bootstrap, topic, count, partitions = sys.argv[1:5]
    count, partitions = int(count), int(partitions)
    errors = {}

    def on_error(err):
        name = ("FATAL " if err.fatal() else "") + err.name()
        errors[name] = errors.get(name, 0) + 1

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            # Required by the client; no group request is sent without subscribe() or commits.
            "group.id": "bench",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "error_cb": on_error,
        }
    )
    metadata = consumer.list_topics(topic, timeout=30)
    assert len(metadata.topics[topic].partitions) >= partitions, metadata.topics[topic]

    read, value_bytes, at_end = 0, 0, set()

    def consume(timeout):
        nonlocal read, value_bytes
        # Answers once it has 10,000 messages, or once the timeout has passed.
        for msg in consumer.consume(num_messages=10000, timeout=timeout):
            err = msg.error()
            if err is None:
                read += 1
                value_bytes += len(msg.value())
            elif err.code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
            else:
                errors[err.name()] = errors.get(err.name(), 0) + 1

    started, cpu = time.monotonic(), cpu_seconds()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    deadline = started + 600
    while read < count and time.monotonic() < deadline:
        consume(0.01)
    seconds, cpu = time.monotonic() - started, cpu_seconds() - cpu
    # Untimed: every partition read to its end, and no record more. librdkafka tells a
    # partition's end once a Fetch at its high watermark came back empty, which the server
    # answers after `fetch.wait.max.ms`.
    while len(at_end) < partitions and time.monotonic() < deadline:
        consume(0.1)
    consumer.close()
    print(
        json.dumps(
            {
                "records": read,
                "value_bytes": value_bytes,
                "seconds": seconds,
                "cpu_seconds": cpu,
                "errors": errors,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
