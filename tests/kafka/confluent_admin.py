"""Admin calls with confluent-kafka's AdminClient (librdkafka), one JSON line each.

Usage: confluent_admin.py BOOTSTRAP COMMAND [ARG] [COMMAND [ARG] ...]

Runs the commands in order, with one client, and prints one line for each:
  topics         list_topics()            {"kind": "topics", "topics": {"T": PARTITIONS, ...}}
  cluster        describe_cluster()       {"kind": "cluster", "cluster_id": ID, "controller": N,
                                           "nodes": [{"id": N, "host": H, "port": P}, ...]}
  groups         list_consumer_groups()   {"kind": "groups", "groups": [{"group_id": G,
                                           "state": STATE, "simple": BOOL}, ...], "errors": [...]}
  describe GROUP describe_consumer_groups {"kind": "group", "group_id": G, "state": STATE,
                                           "simple": BOOL, "assignor": NAME, "coordinator": N,
                                           "members": [{"member_id", "client_id", "host",
                                           "instance_id", "partitions": [[T, P], ...]}, ...]}
  configs TOPIC  describe_configs         {"kind": "configs", "configs": {NAME: VALUE, ...}}
  offsets GROUP  list_consumer_group_offsets
                                          {"kind": "offsets", "offsets": {"T": {"P": O, ...}}}
  delete GROUP   delete_consumer_groups   {"kind": "deleted", "group_id": G}
STATE is librdkafka's name (STABLE, EMPTY, ...). A call the broker (or the client) refuses
prints {"kind": "error", "command": COMMAND, "code": NAME, "error": TEXT} instead, and the
commands go on. Exits non-zero only on a usage error.
"""

import json
import sys

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

TIMEOUT = 30
ARGUMENTS = {
    "topics": 0,
    "cluster": 0,
    "groups": 0,
    "describe": 1,
    "configs": 1,
    "offsets": 1,
    "delete": 1,
}


def emit(**fields):
    print(json.dumps(fields), flush=True)


def topics(admin):
    metadata = admin.list_topics(timeout=TIMEOUT)
    return {
        "kind": "topics",
        "topics": {name: len(topic.partitions) for name, topic in metadata.topics.items()},
    }


def cluster(admin):
    described = admin.describe_cluster(request_timeout=TIMEOUT).result()
    return {
        "kind": "cluster",
        "cluster_id": described.cluster_id,
        "controller": described.controller.id if described.controller else None,
        "nodes": [{"id": n.id, "host": n.host, "port": n.port} for n in described.nodes],
    }


def groups(admin):
    listed = admin.list_consumer_groups(request_timeout=TIMEOUT).result()
    return {
        "kind": "groups",
        "groups": [
            {
                "group_id": group.group_id,
                "state": group.state.name if group.state is not None else None,
                "simple": group.is_simple_consumer_group,
            }
            for group in sorted(listed.valid, key=lambda group: group.group_id)
        ],
        "errors": [str(error) for error in listed.errors],
    }


def describe(admin, group_id):
    described = admin.describe_consumer_groups([group_id], request_timeout=TIMEOUT)
    group = described[group_id].result()
    return {
        "kind": "group",
        "group_id": group.group_id,
        "state": group.state.name if group.state is not None else None,
        "simple": group.is_simple_consumer_group,
        "assignor": group.partition_assignor,
        "coordinator": group.coordinator.id if group.coordinator else None,
        "members": [
            {
                "member_id": member.member_id,
                "client_id": member.client_id,
                "host": member.host,
                "instance_id": member.group_instance_id,
                "partitions": sorted(
                    [tp.topic, tp.partition] for tp in member.assignment.topic_partitions
                ),
            }
            for member in group.members
        ],
    }


def configs(admin, topic):
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result()
    return {"kind": "configs", "configs": {name: entry.value for name, entry in entries.items()}}


def offsets(admin, group_id):
    request = [ConsumerGroupTopicPartitions(group_id)]
    listed = admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT)
    answer = listed[group_id].result()
    shown = {}
    for tp in answer.topic_partitions:
        if tp.error is not None:
            raise KafkaException(tp.error)
        shown.setdefault(tp.topic, {})[str(tp.partition)] = tp.offset
    return {"kind": "offsets", "offsets": shown}


def delete(admin, group_id):
    admin.delete_consumer_groups([group_id], request_timeout=TIMEOUT)[group_id].result()
    return {"kind": "deleted", "group_id": group_id}


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    admin = AdminClient({"bootstrap.servers": sys.argv[1]})
    commands = sys.argv[2:]
    while commands:
        command = commands.pop(0)
        if command not in ARGUMENTS or len(commands) < ARGUMENTS[command]:
            raise SystemExit(f"unknown command or missing argument: {command}\n{__doc__}")
        arguments = [commands.pop(0) for _ in range(ARGUMENTS[command])]
        try:
            emit(**globals()[command](admin, *arguments))
        except KafkaException as err:
            error = err.args[0] if err.args else None
            code = error.name() if hasattr(error, "name") else None
            emit(kind="error", command=command, code=code, error=str(err))


if __name__ == "__main__":
    main()
