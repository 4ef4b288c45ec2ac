"""An idempotent confluent-kafka producer for the cluster test: sends COUNT records {"n": i}
to TOPIC at about RATE a second through BOOTSTRAP, and prints one JSON line per delivery
report ({"n", "partition", "offset"} or {"n", "error"}), then {"done": true}."""

import json
import sys
import time

from confluent_kafka import Producer

bootstrap, topic, count, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
producer = Producer({
    "bootstrap.servers": bootstrap,
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "message.timeout.ms": 120000,
    "topic.metadata.refresh.interval.ms": 1000,
})


def report(err, msg):
    n = json.loads(msg.value())["n"]
    if err is not None:
        print(json.dumps({"n": n, "error": str(err)}), flush=True)
    else:
        print(json.dumps({"n": n, "partition": msg.partition(), "offset": msg.offset()}), flush=True)


started = time.monotonic()
for n in range(count):
    while True:
        try:
            producer.produce(topic, json.dumps({"n": n}).encode(), key=str(n).encode(),
                             on_delivery=report)
            break
        except BufferError:
            producer.poll(0.05)
    producer.poll(0)
    ahead = started + n / rate - time.monotonic()
    if ahead > 0:
        time.sleep(ahead)
left = producer.flush(150)
print(json.dumps({"done": True, "undelivered": left}), flush=True)
