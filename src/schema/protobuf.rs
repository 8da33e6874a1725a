//! Protobuf bodies: the schema's file compiled in-process (protox, no `protoc`) with the files
//! its references name and Google's well-known types, the message picked by the body's
//! message indexes, and printed in protobuf's JSON mapping with the names of the `.proto`
//! file and every field present (a zero or empty field too: a service should not have to know
//! proto3's defaults to read a record). 64-bit integers are JSON text, as the mapping says.
//!
//! A registry returns a Protobuf schema as `.proto` text; the serializers of some clients
//! register it as a base64 `FileDescriptorProto` (confluent-kafka's Python client does), which
//! a registry that does not convert it returns as it was: both are read.

use std::collections::HashMap;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use prost_reflect::prost::Message as _;
use prost_reflect::{
    DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor, SerializeOptions,
};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use serde_json::Value as Json;

/// The name a schema without one of its own is compiled under.
const UNNAMED: &str = "kafka-dlq-registry-schema.proto";

/// A Protobuf schema ready to read bodies with: the compiled files and the schema's own.
#[derive(Debug)]
pub struct ProtobufSchema {
    pool: DescriptorPool,
    file: String,
}

/// Compiles `text` with the files its references name (`(import name, text)`).
pub fn compile(text: &str, references: &[(&str, &str)]) -> Result<ProtobufSchema, String> {
    let mut files = HashMap::new();
    for (name, text) in references {
        let file = open(name, text)?;
        files.insert(file.name().to_string(), file);
    }
    let main = open(UNNAMED, text)?;
    let name = main.name().to_string();
    files.insert(name.clone(), main);
    let mut resolver = ChainFileResolver::new();
    resolver.add(Files(files));
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler.open_file(&name).map_err(|e| e.to_string())?;
    Ok(ProtobufSchema {
        pool: compiler.descriptor_pool(),
        file: name,
    })
}

/// `text` as a file named `name`: `.proto` source, or a base64 `FileDescriptorProto` (under
/// its own name when it has one).
fn open(name: &str, text: &str) -> Result<File, String> {
    let descriptor = BASE64
        .decode(text.trim())
        .ok()
        .and_then(|bytes| File::decode_file_descriptor_proto(bytes.as_slice()).ok());
    match descriptor {
        Some(file) if !file.name().is_empty() => Ok(file),
        Some(file) => {
            let mut proto = file.file_descriptor_proto().clone();
            proto.name = Some(name.to_string());
            Ok(File::from_file_descriptor_proto(proto))
        }
        None => File::from_source(name, text).map_err(|e| e.to_string()),
    }
}

/// The files of a schema and its references, by name.
struct Files(HashMap<String, File>);

impl FileResolver for Files {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        self.0
            .get(name)
            .cloned()
            .ok_or_else(|| protox::Error::file_not_found(name))
    }
}

/// The message the `indexes` name: the first a top-level message of the schema's file, each
/// next one nested in the one before.
pub fn message(schema: &ProtobufSchema, indexes: &[usize]) -> Result<MessageDescriptor, String> {
    let file = schema
        .pool
        .get_file_by_name(&schema.file)
        .ok_or("the schema's file is not compiled")?;
    let (first, nested) = indexes.split_first().ok_or("no message index")?;
    let mut message = file.messages().nth(*first).ok_or_else(|| {
        format!(
            "message index {first} is past the schema's {} messages",
            file.messages().len()
        )
    })?;
    for index in nested {
        let parent = message.full_name().to_string();
        let child = message.child_messages().nth(*index);
        message = child.ok_or_else(|| {
            format!("message index {index} is past the messages nested in {parent}")
        })?;
    }
    Ok(message)
}

/// Reads `body` as the message `indexes` name, to JSON.
pub fn decode(schema: &ProtobufSchema, indexes: &[usize], body: &[u8]) -> Result<Json, String> {
    let descriptor = message(schema, indexes)?;
    let name = descriptor.full_name().to_string();
    let message = DynamicMessage::decode(descriptor, body)
        .map_err(|e| format!("not a Protobuf {name}: {e}"))?;
    let options = SerializeOptions::new()
        .use_proto_field_name(true)
        .skip_default_fields(false);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| format!("the {name} cannot be printed as JSON: {e}"))
}

/// The message indexes of the message named `full_name` (`shop.Order.Line`) in the schema's
/// file; `None` when the file has no such message.
pub fn indexes_of(schema: &ProtobufSchema, full_name: &str) -> Option<Vec<usize>> {
    let file = schema.pool.get_file_by_name(&schema.file)?;
    fn find(messages: Vec<MessageDescriptor>, name: &str, path: &mut Vec<usize>) -> bool {
        for (i, message) in messages.into_iter().enumerate() {
            path.push(i);
            if message.full_name() == name || find(message.child_messages().collect(), name, path) {
                return true;
            }
            path.pop();
        }
        false
    }
    let mut path = Vec::new();
    find(file.messages().collect(), full_name, &mut path).then_some(path)
}

/// Writes `json` (protobuf's JSON mapping; the `.proto` names or the JSON names) as the
/// message `indexes` name. A field the message does not have, or a value of the wrong type,
/// is refused saying which.
pub fn encode(schema: &ProtobufSchema, indexes: &[usize], json: &Json) -> Result<Vec<u8>, String> {
    let descriptor = message(schema, indexes)?;
    let name = descriptor.full_name().to_string();
    let message =
        DynamicMessage::deserialize_with_options(descriptor, json, &DeserializeOptions::new())
            .map_err(|e| format!("the value is not a {name}: {e}"))?;
    Ok(message.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORDER: &str = r#"syntax = "proto3";
        package shop;
        import "customer.proto";
        import "google/protobuf/timestamp.proto";
        message Order {
            int64 id = 1;
            Customer customer = 2;
            google.protobuf.Timestamp at = 3;
            message Line { string sku = 1; int32 quantity = 2; }
        }"#;
    const CUSTOMER: &str =
        r#"syntax = "proto3"; package shop; message Customer { string name = 1; }"#;

    #[test]
    fn a_nested_message_with_references_reads_as_json_with_every_field() {
        let schema = compile(ORDER, &[("customer.proto", CUSTOMER)]).unwrap();
        // Order.Line {sku: "a", quantity: 0}: field 1, length 1, "a".
        let line = decode(&schema, &[0, 0], &[10, 1, b'a']).unwrap();
        assert_eq!(line, serde_json::json!({"sku": "a", "quantity": 0}));
        // Order {id: 7, customer {name: "Ann"}}
        let order = decode(&schema, &[0], &[8, 7, 18, 5, 10, 3, b'A', b'n', b'n']).unwrap();
        assert_eq!(order["id"], "7");
        assert_eq!(order["customer"]["name"], "Ann");
    }

    #[test]
    fn a_base64_file_descriptor_is_read_as_the_file() {
        let compiled = compile(CUSTOMER, &[]).unwrap();
        let file = compiled.pool.get_file_by_name(UNNAMED).unwrap();
        let mut proto = file.file_descriptor_proto().clone();
        proto.name = Some("customer.proto".into());
        let text = BASE64.encode(prost_reflect::prost::Message::encode_to_vec(&proto));
        let schema = compile(&text, &[]).unwrap();
        assert_eq!(
            decode(&schema, &[0], &[10, 1, b'x']).unwrap(),
            serde_json::json!({"name": "x"})
        );
    }

    #[test]
    fn decoded_json_encodes_back_to_the_same_message() {
        let schema = compile(ORDER, &[("customer.proto", CUSTOMER)]).unwrap();
        assert_eq!(indexes_of(&schema, "shop.Order.Line"), Some(vec![0, 0]));
        assert_eq!(indexes_of(&schema, "shop.Nope"), None);
        let body = [8, 7, 18, 5, 10, 3, b'A', b'n', b'n'];
        let json = decode(&schema, &[0], &body).unwrap();
        assert_eq!(encode(&schema, &[0], &json).unwrap(), body);
        let why = encode(&schema, &[0], &serde_json::json!({"id": "x"})).unwrap_err();
        assert!(why.contains("not a shop.Order"), "{why}");
    }

    #[test]
    fn indexes_past_the_messages_and_foreign_bytes_say_why() {
        let schema = compile(CUSTOMER, &[]).unwrap();
        assert!(decode(&schema, &[3], &[]).unwrap_err().contains("past"));
        assert!(decode(&schema, &[0], &[0xff, 0xff])
            .unwrap_err()
            .contains("not a Protobuf shop.Customer"));
    }
}
