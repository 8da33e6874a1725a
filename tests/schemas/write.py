"""Writes records with confluent-kafka's reference Schema Registry serializers, for the
decoding tests: they register the schemas (and their references) with the registry given and
frame each value as Confluent's clients do, so what kafka-dlq decodes is what real producers
write.

    write.py REGISTRY_URL BROKERS TOPIC FORMAT FRAMING COUNT

FORMAT is avro, avro-references, protobuf or json; FRAMING is prefix (a magic byte and the
schema id before the bytes) or header (Confluent Schema Registry 8: the schema GUID in the
`__value_schema_id` header). Record i has key `k<i>` and the value the test expects:
{"id": i, "customer": {"name": "c<i>"}, ...} (protobuf writes the nested Order.Line message,
{"sku": "s<i>", "quantity": i}, and imports customer.proto by reference).
"""

import json
import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import (
    Schema,
    SchemaReference,
    SchemaRegistryClient,
    header_schema_id_serializer,
    prefix_schema_id_serializer,
)
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

CUSTOMER_AVRO = {
    "type": "record",
    "name": "Customer",
    "namespace": "shop",
    "fields": [{"name": "name", "type": "string"}],
}
ORDER_AVRO = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": CUSTOMER_AVRO},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
ORDER_WITH_REFERENCE = dict(ORDER_AVRO, fields=[
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "shop.Customer"},
    {"name": "note", "type": ["null", "string"], "default": None},
])
ORDER_JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "customer": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
    "required": ["id"],
}


def protobuf_line_class():
    """Order.Line, nested in Order, in order.proto, which imports customer.proto: built from
    descriptors, so that no protoc is needed."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    pool = descriptor_pool.Default()
    customer = descriptor_pb2.FileDescriptorProto(name="customer.proto", package="shop", syntax="proto3")
    c = customer.message_type.add(name="Customer")
    c.field.add(name="name", number=1, type=9, label=1)
    pool.Add(customer)
    order = descriptor_pb2.FileDescriptorProto(
        name="order.proto", package="shop", syntax="proto3", dependency=["customer.proto"]
    )
    o = order.message_type.add(name="Order")
    o.field.add(name="id", number=1, type=3, label=1)
    o.field.add(name="customer", number=2, type=11, label=1, type_name=".shop.Customer")
    line = o.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=9, label=1)
    line.field.add(name="quantity", number=2, type=5, label=1)
    pool.Add(order)
    return GetMessageClass(pool.FindMessageTypeByName("shop.Order.Line"))


def main():
    registry_url, brokers, topic, fmt, framing, count = sys.argv[1:7]
    client = SchemaRegistryClient({"url": registry_url})
    framer = header_schema_id_serializer if framing == "header" else prefix_schema_id_serializer
    conf = {"schema.id.serializer": framer}
    if fmt == "avro":
        serializer = AvroSerializer(client, json.dumps(ORDER_AVRO), conf=conf)
        values = lambda i: {"id": i, "customer": {"name": f"c{i}"}, "note": None}
    elif fmt == "avro-references":
        client.register_schema("shop.Customer", Schema(json.dumps(CUSTOMER_AVRO), "AVRO"))
        schema = Schema(
            json.dumps(ORDER_WITH_REFERENCE),
            "AVRO",
            [SchemaReference("shop.Customer", "shop.Customer", 1)],
        )
        serializer = AvroSerializer(client, schema, conf=conf)
        values = lambda i: {"id": i, "customer": {"name": f"c{i}"}, "note": f"n{i}"}
    elif fmt == "protobuf":
        line = protobuf_line_class()
        serializer = ProtobufSerializer(line, client, dict(conf, **{"use.deprecated.format": False}))
        values = lambda i: line(sku=f"s{i}", quantity=i)
    elif fmt == "json":
        serializer = JSONSerializer(json.dumps(ORDER_JSON_SCHEMA), client, conf=conf)
        values = lambda i: {"id": i, "customer": {"name": f"c{i}"}}
    else:
        raise SystemExit(f"unknown format {fmt}")
    producer = Producer({"bootstrap.servers": brokers})
    for i in range(int(count)):
        headers = []
        ctx = SerializationContext(topic, MessageField.VALUE, headers)
        value = serializer(values(i), ctx)
        producer.produce(topic, key=f"k{i}".encode(), value=value, headers=headers)
    if producer.flush(30) != 0:
        raise SystemExit("records were not delivered")


if __name__ == "__main__":
    main()
