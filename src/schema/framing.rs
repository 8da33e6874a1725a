//! Where a Schema Registry client put the schema's identity: in front of the bytes (a zero
//! magic byte and the schema's 4-byte id, big-endian) or, since Confluent Schema Registry 8,
//! in a `__value_schema_id` / `__key_schema_id` header (a magic byte 1 and the schema's
//! 16-byte GUID) with the bytes left bare. A header wins over a prefix, as in Confluent's own
//! deserializers. A Protobuf schema's message indexes ([`message_indexes`]) follow the id:
//! at the front of the body with the prefix, after the GUID in the header with the header.

use std::fmt;

/// The header Confluent Schema Registry 8's serializers put a value's schema GUID in.
pub const VALUE_SCHEMA_ID_HEADER: &str = "__value_schema_id";
/// The header for a key's schema GUID.
pub const KEY_SCHEMA_ID_HEADER: &str = "__key_schema_id";

/// A schema as a record names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaRef {
    /// The registry's numeric id (the 5-byte prefix).
    Id(u32),
    /// The registry's GUID (the header framing).
    Guid([u8; 16]),
}

impl fmt::Display for SchemaRef {
    /// `id 7` or `guid 0b3c…-…` (the GUID in its usual 8-4-4-4-12 form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaRef::Id(id) => write!(f, "id {id}"),
            SchemaRef::Guid(guid) => write!(f, "guid {}", guid_text(guid)),
        }
    }
}

/// A GUID in the 8-4-4-4-12 hex form the registry's REST API takes.
pub fn guid_text(guid: &[u8; 16]) -> String {
    let hex: String = guid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Bytes framed for a registry: the schema they name and what follows the framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framed<'a> {
    /// The schema the bytes were written with.
    pub schema: SchemaRef,
    /// The bytes after the prefix (all of them with the header framing).
    pub body: &'a [u8],
    /// With the header framing: the header's bytes after the GUID (a Protobuf schema's
    /// message indexes); `None` with the prefix, where they start the body.
    pub header_rest: Option<&'a [u8]>,
}

/// Finds the schema of `bytes`, given the value of the record's schema-id header for this
/// field (`__value_schema_id` or `__key_schema_id`), if it has one. The error says why the
/// bytes are not framed for a registry; it is the record's fault, never the registry's.
pub fn locate<'a>(bytes: &'a [u8], header: Option<&'a [u8]>) -> Result<Framed<'a>, String> {
    if let Some(header) = header {
        return match header {
            [1, guid @ ..] if guid.len() >= 16 => Ok(Framed {
                schema: SchemaRef::Guid(guid[..16].try_into().expect("16 bytes")),
                body: bytes,
                header_rest: Some(&guid[16..]),
            }),
            [0, id @ ..] if id.len() >= 4 => Ok(Framed {
                schema: SchemaRef::Id(u32::from_be_bytes(id[..4].try_into().expect("4 bytes"))),
                body: bytes,
                header_rest: Some(&id[4..]),
            }),
            _ => Err(format!(
                "its schema id header ({} bytes) is neither a magic byte 1 and a 16-byte GUID \
                 nor a magic byte 0 and a 4-byte id",
                header.len()
            )),
        };
    }
    match bytes {
        [0, a, b, c, d, body @ ..] => Ok(Framed {
            schema: SchemaRef::Id(u32::from_be_bytes([*a, *b, *c, *d])),
            body,
            header_rest: None,
        }),
        [] => Err("it is empty: no schema id prefix".into()),
        [first, ..] if *first != 0 => Err(format!(
            "it does not start with the schema registry's magic byte 0 (it starts with \
             0x{first:02x}) and has no schema id header"
        )),
        _ => Err(format!(
            "it is {} bytes, shorter than the 5-byte schema id prefix",
            bytes.len()
        )),
    }
}

/// Reads the message indexes in front of a Protobuf body: which message of the schema's
/// file (the first index a top-level message, each next one a message nested in it) and the
/// bytes after them. A single zero byte is the common `[0]`: the file's first message.
pub fn message_indexes(body: &[u8]) -> Result<(Vec<usize>, &[u8]), String> {
    let mut rest = body;
    let count = zigzag(&mut rest)?;
    if count == 0 {
        return Ok((vec![0], rest));
    }
    if !(1..=100).contains(&count) {
        return Err(format!("{count} message indexes is not a valid count"));
    }
    let mut indexes = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let index = zigzag(&mut rest)?;
        if index < 0 {
            return Err(format!("a negative message index ({index})"));
        }
        indexes.push(index as usize);
    }
    Ok((indexes, rest))
}

/// The prefix framing of a body written with schema `id`: the magic byte 0, the id, and a
/// Protobuf schema's message `indexes` (`[0]` as the single byte 0, as Confluent writes it).
pub fn prefix(id: u32, indexes: Option<&[usize]>) -> Vec<u8> {
    let mut out = vec![0];
    out.extend(id.to_be_bytes());
    match indexes {
        None => {}
        Some([0]) => out.push(0),
        Some(indexes) => {
            write_zigzag(&mut out, indexes.len() as i64);
            for index in indexes {
                write_zigzag(&mut out, *index as i64);
            }
        }
    }
    out
}

fn write_zigzag(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One zigzag varint from the front of `bytes`.
fn zigzag(bytes: &mut &[u8]) -> Result<i64, String> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let Some((&byte, rest)) = bytes.split_first() else {
            return Err("the message indexes end before their last byte".into());
        };
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
        }
    }
    Err("a message index longer than 10 bytes".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_names_the_schema_id_and_the_body_follows() {
        let bytes = [0, 0, 0, 1, 2, b'x', b'y'];
        let framed = locate(&bytes, None).unwrap();
        assert_eq!(framed.schema, SchemaRef::Id(258));
        assert_eq!(framed.body, b"xy");
    }

    #[test]
    fn a_guid_header_wins_and_leaves_the_bytes_whole() {
        let mut header = vec![1];
        header.extend(0u8..16);
        header.push(0);
        let framed = locate(&[0, 0, 0, 0, 9, 1], Some(&header)).unwrap();
        assert_eq!(
            framed.header_rest,
            Some(&[0u8][..]),
            "a Protobuf schema's indexes"
        );
        assert_eq!(
            framed.schema,
            SchemaRef::Guid(core::array::from_fn(|i| i as u8))
        );
        assert_eq!(framed.body, &[0, 0, 0, 0, 9, 1]);
        assert_eq!(
            framed.schema.to_string(),
            "guid 00010203-0405-0607-0809-0a0b0c0d0e0f"
        );
    }

    #[test]
    fn bytes_without_framing_say_why() {
        assert!(locate(b"{\"a\":1}", None).unwrap_err().contains("0x7b"));
        assert!(locate(&[0, 0, 1], None).unwrap_err().contains("shorter"));
        assert!(locate(&[], None).unwrap_err().contains("empty"));
        assert!(locate(b"x", Some(&[2, 0])).unwrap_err().contains("header"));
    }

    #[test]
    fn message_indexes_read_as_confluent_writes_them() {
        // [0] is the single byte 0; [1, 2] is the count 2 then 1 and 2, all zigzag.
        assert_eq!(message_indexes(&[0, 7]).unwrap(), (vec![0], &[7u8][..]));
        assert_eq!(
            message_indexes(&[4, 2, 4, 9]).unwrap(),
            (vec![1, 2], &[9u8][..])
        );
        assert!(message_indexes(&[4, 2]).unwrap_err().contains("end"));
        assert!(message_indexes(&[3, 2]).unwrap_err().contains("count"));
    }

    #[test]
    fn a_prefix_written_reads_back() {
        assert_eq!(prefix(258, None), [0, 0, 0, 1, 2]);
        let framed = prefix(7, Some(&[1, 2]));
        let located = locate(&framed, None).unwrap();
        assert_eq!(located.schema, SchemaRef::Id(7));
        assert_eq!(message_indexes(located.body).unwrap().0, vec![1, 2]);
        assert_eq!(prefix(7, Some(&[0])), [0, 0, 0, 0, 7, 0]);
    }
}
