"""Reads records with confluent-kafka's reference Schema Registry deserializers and prints each
value as one JSON line, for the tests of what kafka-dlq encodes: what Confluent's own clients
read back is the proof that the bytes are right.

    read.py REGISTRY_URL BROKERS TOPIC FORMAT COUNT

FORMAT is avro or json (the deserializer to use); waits up to 60 s for COUNT committed records.
"""

import json
import sys
import time
import uuid

from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext


def main():
    registry_url, brokers, topic, fmt, count = sys.argv[1:6]
    client = SchemaRegistryClient({"url": registry_url})
    if fmt == "avro":
        deserializer = AvroDeserializer(client)
    elif fmt == "json":
        deserializer = JSONDeserializer(None, schema_registry_client=client)
    else:
        raise SystemExit(f"unknown format {fmt}")
    consumer = Consumer({
        "bootstrap.servers": brokers,
        "group.id": f"read-{uuid.uuid4()}",
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    seen, deadline = 0, time.time() + 60
    while seen < int(count) and time.time() < deadline:
        message = consumer.poll(1.0)
        if message is None or message.error():
            continue
        ctx = SerializationContext(topic, MessageField.VALUE, message.headers())
        print(json.dumps(deserializer(message.value(), ctx)), flush=True)
        seen += 1
    consumer.close()
    if seen < int(count):
        raise SystemExit(f"only {seen} of {count} records arrived")


if __name__ == "__main__":
    main()
