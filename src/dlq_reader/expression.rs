//! The filter language: a [CEL](https://cel.dev) expression over one dead letter, the same in
//! `dlq list / show / replay --where`, the console's filter and the monitor's alert scope.
//!
//! An expression sees these variables (docs/tools.md, "Filter expressions", gives examples):
//!
//! | variable | type | value |
//! |---|---|---|
//! | `id` | string | the record id |
//! | `dlq` | map | `topic`, `partition`, `offset` of the dead letter in its DLT |
//! | `kind` | string | `permanent`, `retries_exhausted`, `deserialization`, … |
//! | `error` | string | the last failure's message |
//! | `attempts` | int | handler calls |
//! | `group` | string | the consumer group that gave up on it |
//! | `topic`, `partition`, `offset` | string, int, int | where the record came from |
//! | `timestamp` | string | when it was dead-lettered, RFC 3339 UTC (compares as text) |
//! | `key` | string or null | the key: its text, or its base64 when it is not UTF-8 |
//! | `headers` | map | each header's value (text, or base64 when not UTF-8; the last of a name wins) |
//! | `payload` | any | the value as JSON when it is JSON, else its text (or base64); null for a tombstone |
//! | `decoded` | any | the value decoded with a schema registry, when one is configured; else null |
//!
//! A record that is not a dead-letter envelope has `id` and `dlq`, the rest null.
//!
//! What an expression may cost is bounded before it runs: at most [`MAX_LENGTH`] bytes,
//! brackets nested at most [`MAX_NESTING`] deep, a syntax tree at most [`MAX_DEPTH`] deep, and
//! no macro (`all`, `exists`, `map`, `filter`) inside another, so one evaluation is linear in
//! the dead letter's size. CEL has no loops, assignments or calls out of the expression.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value as Json;

use super::reader::DlqEntry;
use crate::dlq::Encoding;

/// The longest expression taken, in bytes.
pub const MAX_LENGTH: usize = 2_000;
/// The most brackets (`(`, `[`, `{`) open at once.
pub const MAX_NESTING: usize = 24;
/// The deepest syntax tree taken (an operator chain of N terms is N deep).
pub const MAX_DEPTH: usize = 64;

/// The parser is recursive and its stack use in a debug build reaches megabytes for a
/// dozen nested brackets, more than a tokio worker's stack: it runs on a thread of its own
/// with this much (reserved, not committed).
const PARSER_STACK_BYTES: usize = 64 << 20;

/// Why an expression is refused: the message, and the column (1-based, in characters) it
/// points at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {message}")]
pub struct ExpressionError {
    /// The column the error points at, 1 for the first character.
    pub column: usize,
    /// What is wrong there.
    pub message: String,
}

/// A compiled filter expression. Equal when their text is; serialized as its text.
#[derive(Clone)]
pub struct Expression {
    source: String,
    program: Arc<cel::Program>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expression").field(&self.source).finish()
    }
}

impl PartialEq for Expression {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Serialize for Expression {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

impl<'de> Deserialize<'de> for Expression {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Expression::compile(&text).map_err(serde::de::Error::custom)
    }
}

impl Expression {
    /// Compiles `text`, refusing what is over the bounds above or does not parse, with the
    /// column it points at.
    pub fn compile(text: &str) -> Result<Expression, ExpressionError> {
        check_text(text)?;
        let owned = text.to_string();
        let parsed = std::thread::Builder::new()
            .name("filter-parser".into())
            .stack_size(PARSER_STACK_BYTES)
            .spawn(move || cel::Program::compile(&owned).map_err(|e| parse_error(&e)))
            .map_err(|e| ExpressionError {
                column: 1,
                message: format!("no thread to parse it on: {e}"),
            })?
            .join()
            .map_err(|_| ExpressionError {
                column: 1,
                message: "the parser failed on it".into(),
            })??;
        check_tree(&parsed)?;
        Ok(Expression {
            source: text.to_string(),
            program: Arc::new(parsed),
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether it reads `decoded`, which only a schema registry gives.
    pub fn reads_decoded(&self) -> bool {
        self.program.references().has_variable("decoded")
    }

    /// Whether `entry` (with its payload `decoded` by a registry, when there is one) is
    /// meant: `Ok(true)` or `Ok(false)`, or why the expression could not say — a field the
    /// dead letter does not have, an operator on the wrong types, or a result that is not a
    /// boolean. Callers count such a dead letter as not meant.
    pub fn matches(&self, entry: &DlqEntry, decoded: Option<&Json>) -> Result<bool, String> {
        let context = context(entry, decoded);
        match self.program.execute(&context) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!(
                "the expression gave {:?}, not true or false",
                other.type_of()
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Expression {
    /// What the expression gives for `entry`, as JSON (a bulk transformation's new payload):
    /// an error when it fails or gives a value JSON has no form for (bytes, a duration).
    pub fn evaluate(&self, entry: &DlqEntry) -> Result<Json, String> {
        let context = context(entry, None);
        let value = self.program.execute(&context).map_err(|e| e.to_string())?;
        value.json().map_err(|e| e.to_string())
    }
}

/// The parser's first error, with its column.
fn parse_error(errors: &cel::ParseErrors) -> ExpressionError {
    match errors.errors.first() {
        Some(e) => ExpressionError {
            column: usize::try_from(e.pos.1).unwrap_or(0).max(1),
            message: e.msg.clone(),
        },
        None => ExpressionError {
            column: 1,
            message: errors.to_string(),
        },
    }
}

/// Length and bracket nesting, before the parser sees the text.
fn check_text(text: &str) -> Result<(), ExpressionError> {
    if text.trim().is_empty() {
        return Err(ExpressionError {
            column: 1,
            message: "the expression is empty".into(),
        });
    }
    if text.len() > MAX_LENGTH {
        let column = text
            .char_indices()
            .take_while(|(i, _)| *i < MAX_LENGTH)
            .count();
        return Err(ExpressionError {
            column,
            message: format!("the expression is longer than {MAX_LENGTH} bytes"),
        });
    }
    // Brackets inside string literals are text. CEL's strings: '…' or "…", triple-quoted
    // ('''…''' or """…"""), with a backslash escaping the next character unless the literal
    // is raw (an `r` or `R` before the quote, `b` allowed beside it).
    let chars: Vec<char> = text.chars().collect();
    let mut depth = 0usize;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' || c == '"' {
            let raw = chars[..i]
                .iter()
                .rev()
                .take_while(|p| matches!(p, 'r' | 'R' | 'b' | 'B'))
                .any(|p| matches!(p, 'r' | 'R'));
            let triple = chars.get(i + 1) == Some(&c) && chars.get(i + 2) == Some(&c);
            let quote_len = if triple { 3 } else { 1 };
            i += quote_len;
            while i < chars.len() {
                if chars[i] == '\\' && !raw {
                    i += 2;
                    continue;
                }
                if chars[i] == c && (!triple || chars[i..].starts_with(&[c, c, c])) {
                    i += quote_len;
                    break;
                }
                i += 1;
            }
            continue;
        }
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(ExpressionError {
                        column: i + 1,
                        message: format!("brackets are nested deeper than {MAX_NESTING} here"),
                    });
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// The tree's depth, and no macro inside another, walked without recursion.
fn check_tree(program: &cel::Program) -> Result<(), ExpressionError> {
    use cel::common::ast::{EntryExpr, Expr};
    let column_of = |id: u64| {
        program
            .source_info()
            .offset_for(id)
            .map(|(_, column)| usize::try_from(column).unwrap_or(0).max(1))
            .unwrap_or(1)
    };
    // (node, its depth, macros around it)
    let mut stack = vec![(program.expression(), 1usize, 0usize)];
    while let Some((node, depth, macros)) = stack.pop() {
        if depth > MAX_DEPTH {
            return Err(ExpressionError {
                column: column_of(node.id),
                message: format!("the expression nests deeper than {MAX_DEPTH} operations"),
            });
        }
        let next = depth + 1;
        match &node.expr {
            Expr::Call(call) => {
                stack.extend(call.target.iter().map(|t| (t.as_ref(), next, macros)));
                stack.extend(call.args.iter().map(|a| (a, next, macros)));
            }
            Expr::Comprehension(c) => {
                if macros > 0 {
                    return Err(ExpressionError {
                        column: column_of(node.id),
                        message: "a macro (all, exists, exists_one, map, filter) inside \
                                  another is not taken: its cost would grow with the square \
                                  of the dead letter's size"
                            .into(),
                    });
                }
                stack.push((&c.iter_range, next, macros));
                stack.push((&c.accu_init, next, macros));
                for inner in [&c.loop_cond, &c.loop_step, &c.result] {
                    stack.push((inner, next, macros + 1));
                }
            }
            Expr::List(list) => stack.extend(list.elements.iter().map(|e| (e, next, macros))),
            Expr::Map(map) => {
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(e) = &entry.expr {
                        stack.push((&e.key, next, macros));
                        stack.push((&e.value, next, macros));
                    }
                }
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    match &entry.expr {
                        EntryExpr::StructField(f) => stack.push((&f.value, next, macros)),
                        EntryExpr::MapEntry(e) => {
                            stack.push((&e.key, next, macros));
                            stack.push((&e.value, next, macros));
                        }
                    }
                }
            }
            Expr::Select(select) => stack.push((&select.operand, next, macros)),
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
    Ok(())
}

/// The variables an expression sees for `entry`.
fn context(entry: &DlqEntry, decoded: Option<&Json>) -> cel::Context<'static, 'static> {
    let mut context = cel::Context::default();
    let mut set = |name: &str, value: Json| {
        context
            .add_variable(name.to_string(), value)
            .expect("JSON is a CEL value");
    };
    set("id", Json::String(entry.id()));
    set(
        "dlq",
        serde_json::json!({"topic": entry.topic, "partition": entry.partition, "offset": entry.offset}),
    );
    set("decoded", decoded.cloned().unwrap_or(Json::Null));
    let Some(e) = entry.content.envelope() else {
        for name in [
            "kind",
            "error",
            "attempts",
            "group",
            "topic",
            "partition",
            "offset",
            "timestamp",
            "key",
            "headers",
            "payload",
        ] {
            set(name, Json::Null);
        }
        return context;
    };
    let source = &e.source;
    set("kind", Json::String(e.error.kind.as_str().to_string()));
    set("error", Json::String(e.error.message.clone()));
    set("attempts", Json::from(e.error.attempts));
    set("group", Json::String(source.group.clone()));
    set("topic", Json::String(source.topic.clone()));
    set("partition", Json::from(source.partition));
    set("offset", Json::from(source.offset));
    set(
        "timestamp",
        Json::String(
            e.timestamp
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        ),
    );
    set("key", source.key.clone().map_or(Json::Null, Json::String));
    let headers: serde_json::Map<String, Json> = source
        .headers
        .iter()
        .map(|h| {
            (
                h.key.clone(),
                h.value.clone().map_or(Json::Null, Json::String),
            )
        })
        .collect();
    set("headers", Json::Object(headers));
    // JSON as it is; text and base64 are JSON strings already.
    let payload = match e.payload_encoding {
        Encoding::Json | Encoding::Utf8 | Encoding::Base64 => {
            serde_json::from_str(e.payload.get()).unwrap_or(Json::Null)
        }
        _ => Json::Null,
    };
    set("payload", payload);
    context
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::Envelope;
    use crate::dlq_reader::DlqContent;
    use crate::failure::DeadLetterKind;
    use crate::record::Record;

    fn entry(payload: &[u8], message: &str) -> DlqEntry {
        let record = Record::new("orders".to_string(), 3, 41)
            .with_id("orders-3-41".to_string())
            .with_key(b"order-42".to_vec())
            .with_payload(payload.to_vec());
        let envelope = Envelope::new(&record, DeadLetterKind::Permanent, message, 2, "billing");
        DlqEntry {
            topic: "orders-dlt".into(),
            partition: 0,
            offset: 7,
            timestamp: None,
            content: DlqContent::Envelope(Box::new(envelope)),
            unresolved: None,
        }
    }

    fn matches(text: &str, entry: &DlqEntry) -> Result<bool, String> {
        Expression::compile(text).unwrap().matches(entry, None)
    }

    #[test]
    fn an_expression_sees_the_envelope_the_key_and_the_json_payload() {
        let e = entry(br#"{"customer": {"id": 42}, "total": 9.5}"#, "db timeout");
        for (text, meant) in [
            ("payload.customer.id == 42", true),
            ("payload.total > 10.0", false),
            ("kind == 'permanent' && error.contains('timeout')", true),
            (
                "group == 'billing' && topic == 'orders' && partition == 3",
                true,
            ),
            ("offset == 41 && attempts == 2 && key == 'order-42'", true),
            ("dlq.topic == 'orders-dlt' && dlq.offset == 7", true),
            ("error.matches('^db [a-z]+$')", true),
            ("id.startsWith('orders-')", true),
            ("timestamp > '2000-01-01'", true),
            ("decoded == null", true),
        ] {
            assert_eq!(matches(text, &e), Ok(meant), "{text}");
        }
    }

    #[test]
    fn a_missing_field_or_a_result_that_is_no_boolean_is_said_not_meant() {
        let e = entry(b"not json", "x");
        assert_eq!(matches("payload == 'not json'", &e), Ok(true));
        assert!(matches("payload.customer.id == 42", &e).is_err());
        let error = matches("error + '!'", &e).unwrap_err();
        assert!(error.contains("not true or false"), "{error}");
    }

    #[test]
    fn a_syntax_error_names_its_column() {
        let error = Expression::compile("kind == 'permanent' &&& x").unwrap_err();
        assert_eq!(error.column, 23, "{error}");
        let error = Expression::compile("  ").unwrap_err();
        assert!(error.message.contains("empty"));
    }

    #[test]
    fn hostile_expressions_are_refused_before_they_run() {
        let deep = format!("{}1{} == 1", "(".repeat(100), ")".repeat(100));
        let error = Expression::compile(&deep).unwrap_err();
        assert_eq!(error.column, MAX_NESTING + 1, "{error}");
        let long = format!("error == '{}'", "x".repeat(MAX_LENGTH));
        assert!(Expression::compile(&long)
            .unwrap_err()
            .message
            .contains("longer"));
        let chain = vec!["a"; 200].join("+") + " > 0";
        let error = Expression::compile(&chain).unwrap_err();
        assert!(error.message.contains("deeper"), "{error}");
        let nested = "payload.lines.all(l, payload.lines.exists(m, m == l))";
        let error = Expression::compile(nested).unwrap_err();
        assert!(error.message.contains("inside"), "{error}");
        // Brackets inside a string are text, not nesting, whatever the string's form; a raw
        // string's backslash does not hide its closing quote.
        for quoted in [
            format!("error == '{}'", "(".repeat(100)),
            format!("error == \"{}\\\"\"", "[".repeat(100)),
            format!("error == '''{}'''", "{".repeat(100)),
        ] {
            assert!(Expression::compile(&quoted).is_ok(), "{quoted}");
        }
        let hidden = format!(
            "error == r'\\' || {}1{} == 1",
            "(".repeat(100),
            ")".repeat(100)
        );
        let error = Expression::compile(&hidden).unwrap_err();
        assert!(error.message.contains("nested"), "{error}");
        // One macro is fine.
        assert!(Expression::compile("payload.lines.exists(l, l.sku == 'a')").is_ok());
    }

    #[test]
    fn an_expression_round_trips_as_its_text() {
        let e = Expression::compile("kind == 'permanent'").unwrap();
        assert!(!e.reads_decoded());
        assert!(Expression::compile("decoded.id == 1")
            .unwrap()
            .reads_decoded());
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(json, r#""kind == 'permanent'""#);
        let back: Expression = serde_json::from_str(&json).unwrap();
        assert_eq!(back, e);
        assert!(serde_json::from_str::<Expression>(r#""kind =="""#).is_err());
    }
}
