//! The HTTP sidecar: a [`Handler`] that delivers each record to a service over HTTP, so a
//! service in any language gets retries, backoff and the dead-letter topic.
//!
//! Each record is `POST`ed to the target URL. The body is the record value (empty for a
//! tombstone); these headers describe it:
//!
//! | header | value |
//! |---|---|
//! | `X-Record-Id` | the record id, when it is a valid header value |
//! | `X-Record-Id-Base64` | the id's bytes in standard base64, otherwise (an `--id-header` value that is not one) |
//! | `X-Kafka-Topic` | source topic |
//! | `X-Kafka-Partition` | partition (decimal) |
//! | `X-Kafka-Offset` | offset (decimal) |
//! | `X-Kafka-Key` | the key, when it is printable ASCII text |
//! | `X-Kafka-Key-Base64` | the key in standard base64, otherwise |
//! | `traceparent`, `tracestate` | the record's W3C trace context, when it has a valid one |
//! | `X-Kafka-Retry-Tier` | with retry topics, for a record delivered from one: its tier (decimal, 0 for `<topic>-retry-0`); topic, partition, offset and id stay the original's |
//! | `X-Kafka-Delivery-Count` | in a share group (`--share-group`): the delivery, 1 for the first (decimal); a record whose retries are used up is released and comes again with a higher count, and the last delivery's failure is dead-lettered |
//! | `X-Kafka-Retry-Attempts` | for a record delivered from a retry topic or, after `dlq replay`, from the group's redrive topic (then without `X-Kafka-Retry-Tier`): the handler calls before this delivery, in every stage (decimal) |
//! | `X-Kafka-Headers` | the record's own headers, every one ([`record_headers`]; off with [`HttpTarget::without_record_headers`]) |
//! | `ce-*` | a CloudEvent's attributes, in the HTTP binding's binary mode ([`cloud_events`]) |
//! | `X-Kafka-Value-Schema-*`, `X-Kafka-Key-Schema-*` | with [`HttpTarget::decoding`]: the schema a decoded value or key was written with; the body is then the value as JSON ([`decoding`]) |
//!
//! The answer decides the record's fate ([`classify_response`]): 2xx is success; 408, 429, 5xx,
//! connection errors and timeouts are transient (a `Retry-After` header, in seconds or as an
//! HTTP date, replaces the next backoff delay, bounded by `backoff_initial_ms` and
//! `backoff_max_ms`); a redirect (3xx) is not followed and is transient ([`redirected`]: a
//! followed 301/302/303 would turn the POST into a bodiless GET whose 2xx settles nothing);
//! any other status is permanent.
//!
//! In batch mode ([`HttpBatchTarget`], `kafka-dlq run --batch-size N`) one `POST` carries up to
//! N records of one partition as a JSON array, in offset order:
//! `[{"id": "...", "offset": 41, "key": "..." | null, "payload": ..., "payload_encoding": "json", "traceparent": "..."}, …]`
//! (a key that is not UTF-8 comes as `"key": null, "key_base64": "..."`)
//! (`traceparent` and `tracestate` only for records that have them; `retry_tier` and
//! `retry_attempts` only for a record from a retry topic, `retry_attempts` alone for one from
//! the redrive topic; either always comes alone)
//! (`payload` embedded as JSON when it is JSON, else a string, else base64, as in the
//! dead-letter envelope), with `X-Kafka-Topic`, `X-Kafka-Partition`, `X-Kafka-First-Offset`
//! and `X-Kafka-Last-Offset` headers. The answer is classified as above, for the whole batch;
//! a failed batch is split to find the records that fail (see
//! [`BatchHandler`](crate::handler::BatchHandler)), unless a 2xx answer names them itself in
//! AWS Lambda's partial batch response shape ([`batch_response`]).
//!
//! With `--exactly-once` ([`HttpTarget::producing_to`]), a 2xx answer may carry records to
//! produce in the record's transaction ([`produce`]).
//!
//! The target URL is never shown with its credentials: logs, failure messages (and so dead
//! letters and alerts) and setting errors show `http://***@host/…` ([`shown_url`](crate::config::shown_url)).

use std::time::Duration;

pub mod batch_response;
pub mod cloud_events;
pub mod decoding;
pub mod produce;
pub mod record_headers;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chrono::{DateTime, Utc};
use reqwest::header::{HeaderValue, CONTENT_TYPE, LOCATION, RETRY_AFTER};

use crate::config::{shown_url, ConfigError};
use crate::failure::{error_chain, HandlerError};
use crate::handler::Handler;
use crate::record::Record;

/// How much of an error response's body goes into the failure message.
const ERROR_BODY_BYTES: usize = 512;

/// Delivers records to an HTTP endpoint.
#[derive(Clone)]
pub struct HttpTarget {
    client: reqwest::Client,
    /// The proxy the client goes through, if any ([`HttpTarget::through_proxy`]).
    proxy: Option<reqwest::Proxy>,
    /// The TLS of an `https://` target ([`HttpTarget::with_tls`]).
    tls: TargetTls,
    url: reqwest::Url,
    /// `url` with its credentials redacted, for every message that shows it.
    shown: String,
    content_type: HeaderValue,
    timeout: Duration,
    /// With `--exactly-once`: the topics an answer may produce to ([`produce`]).
    output_topics: Option<std::sync::Arc<[String]>>,
    /// Whether the record's own headers go too ([`record_headers`]).
    forward_headers: bool,
    /// Values and keys decoded with a schema registry first ([`decoding`]).
    decoding: Option<crate::schema::Decoder>,
}

/// Shows the target URL redacted, never its credentials.
impl std::fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTarget")
            .field("url", &self.shown)
            .field("content_type", &self.content_type)
            .finish()
    }
}

impl HttpTarget {
    /// Checks the URL (`http://` or `https://`, with the system's CAs until
    /// [`HttpTarget::with_tls`] says otherwise) and builds a client whose requests time out
    /// after `timeout` (a timeout is a transient failure).
    pub fn new(url: &str, timeout: Duration, content_type: &str) -> Result<Self, ConfigError> {
        let shown = shown_url::redacted(url);
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| ConfigError::new("target_url", &shown, format!("not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ConfigError::new(
                "target_url",
                &shown,
                "only http:// and https:// are supported",
            ));
        }
        if timeout.is_zero() {
            return Err(ConfigError::new(
                "request_timeout_ms",
                0,
                "must be greater than 0",
            ));
        }
        let content_type = HeaderValue::from_str(content_type)
            .map_err(|e| ConfigError::new("content_type", content_type, e))?;
        // No proxy from HTTP_PROXY and the like: the target is a service beside the sidecar, and
        // a proxy would see every record and the URL's credentials ([`HttpTarget::through_proxy`]
        // when one is meant).
        let client = build_client(timeout, None, &TargetTls::default())
            .map_err(|e| ConfigError::new("target_url", &shown, e))?;
        Ok(Self {
            client,
            proxy: None,
            tls: TargetTls::default(),
            url: parsed,
            shown,
            content_type,
            timeout,
            output_topics: None,
            forward_headers: true,
            decoding: None,
        })
    }

    /// The same target, for a consumer with `exactly_once`: each 2xx answer is read for the
    /// records it asks to produce to `topics` ([`produce::outputs`]), which the consumer
    /// writes in the record's transaction.
    pub fn producing_to(self, topics: Vec<String>) -> Self {
        Self {
            output_topics: Some(topics.into()),
            ..self
        }
    }

    /// The same target without the records' own headers (`--forward-headers false`): only
    /// the id, the coordinates, the key and the trace context go.
    pub fn without_record_headers(self) -> Self {
        Self {
            forward_headers: false,
            ..self
        }
    }

    /// The same target getting values and keys decoded with a schema registry, as
    /// `decoding` says: a decoded value is the body, as JSON (`application/json`, `null` for a
    /// null value), its schema in `X-Kafka-Value-Schema-*` headers; a decoded key is
    /// `X-Kafka-Key` as compact JSON (`X-Kafka-Key-Base64` of it when it is not printable
    /// ASCII), its schema in `X-Kafka-Key-Schema-*`. See [`decoding`] for the failures.
    pub fn decoding(self, decoding: crate::schema::Decoder) -> Self {
        Self {
            decoding: Some(decoding),
            ..self
        }
    }

    /// The same target reached through the HTTP proxy at `proxy` (`http://host:port`,
    /// `--target-proxy`), for a target that is not beside the sidecar.
    pub fn through_proxy(self, proxy: &str) -> Result<Self, ConfigError> {
        let shown = shown_url::redacted(proxy);
        let proxy = reqwest::Proxy::all(proxy).map_err(|e| {
            ConfigError::new("target_proxy", &shown, format!("not a proxy URL: {e}"))
        })?;
        let client = build_client(self.timeout, Some(&proxy), &self.tls)
            .map_err(|e| ConfigError::new("target_proxy", &shown, e))?;
        Ok(Self {
            client,
            proxy: Some(proxy),
            ..self
        })
    }

    /// The same target trusting `tls`'s CAs instead of the system's, and presenting its
    /// client certificate when the target asks for one (mutual TLS). A file that cannot be
    /// read or is not PEM is an error naming its setting.
    pub fn with_tls(self, tls: TargetTls) -> Result<Self, ConfigError> {
        let client = build_client(self.timeout, self.proxy.as_ref(), &tls)?;
        Ok(Self {
            client,
            tls,
            ..self
        })
    }
}

/// The TLS of an `https://` target, each a PEM file: the CAs to trust instead of the
/// system's, and the client certificate and its key for a target that asks for one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetTls {
    /// CAs that sign the target's certificate (`--target-ca-location`); none: the system's.
    pub ca_location: Option<std::path::PathBuf>,
    /// The client's certificate (`--target-certificate-location`).
    pub certificate_location: Option<std::path::PathBuf>,
    /// The client's private key, not encrypted (`--target-key-location`).
    pub key_location: Option<std::path::PathBuf>,
}

/// A client that follows no redirect and times a request out after `timeout`: a redirect is
/// never a delivery — following one would turn the POST into a GET without the body
/// (301/302/303), and the GET's 2xx would settle the record. Through `proxy` only when one is
/// given; with `tls`'s CAs and client certificate.
fn build_client(
    timeout: Duration,
    proxy: Option<&reqwest::Proxy>,
    tls: &TargetTls,
) -> Result<reqwest::Client, ConfigError> {
    let read = |key: &str, path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| ConfigError::new(key, path.display(), format!("cannot read it: {e}")))
    };
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .use_rustls_tls();
    builder = match proxy {
        Some(proxy) => builder.proxy(proxy.clone()),
        None => builder.no_proxy(),
    };
    if let Some(path) = &tls.ca_location {
        let certificates =
            reqwest::Certificate::from_pem_bundle(&read("target_ca_location", path)?)
                .ok()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| {
                    ConfigError::new(
                        "target_ca_location",
                        path.display(),
                        "holds no PEM certificate",
                    )
                })?;
        builder = builder.tls_built_in_root_certs(false);
        for certificate in certificates {
            builder = builder.add_root_certificate(certificate);
        }
    }
    match (&tls.certificate_location, &tls.key_location) {
        (Some(certificate), Some(key)) => {
            let mut pem = read("target_certificate_location", certificate)?;
            pem.push(b'\n');
            pem.extend(read("target_key_location", key)?);
            let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                ConfigError::new(
                    "target_key_location",
                    key.display(),
                    format!("the certificate and key are not a PEM pair it can use (an unencrypted PKCS#8, RSA or EC key): {e}"),
                )
            })?;
            builder = builder.identity(identity);
        }
        (Some(_), None) => {
            return Err(ConfigError::new(
                "target_key_location",
                "",
                "is required with target_certificate_location",
            ))
        }
        (None, Some(_)) => {
            return Err(ConfigError::new(
                "target_certificate_location",
                "",
                "is required with target_key_location",
            ))
        }
        (None, None) => {}
    }
    builder.build().map_err(|e| {
        ConfigError::new(
            "target_url",
            "",
            format!("the HTTP client cannot be built: {}", error_chain(&e)),
        )
    })
}

impl Handler for HttpTarget {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        let decoded = match &self.decoding {
            Some(decoding) => decoding.decode(record).await?,
            None => crate::schema::DecodedRecord::default(),
        };
        let values_decoded = self.decoding.as_ref().is_some_and(|d| d.values);
        let event = cloud_events::http_event(&record.headers);
        let content_type = if values_decoded {
            HeaderValue::from_static("application/json")
        } else {
            event
                .as_ref()
                .and_then(|e| e.content_type.as_deref())
                .and_then(|t| HeaderValue::from_str(t).ok())
                .unwrap_or_else(|| self.content_type.clone())
        };
        let body = if values_decoded {
            let json = decoded.value.as_ref().map(|d| &d.json);
            serde_json::to_vec(&json).expect("JSON serializes")
        } else {
            record.payload.clone().unwrap_or_default()
        };
        let mut request = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, content_type)
            .header("X-Kafka-Topic", &record.topic)
            .header("X-Kafka-Partition", record.partition.to_string())
            .header("X-Kafka-Offset", record.offset.to_string())
            .body(body);
        for (prefix, part) in [
            ("X-Kafka-Value-Schema", &decoded.value),
            ("X-Kafka-Key-Schema", &decoded.key),
        ] {
            if let Some(part) = part {
                for (name, value) in decoding::schema_headers(prefix, part) {
                    if let Ok(value) = HeaderValue::from_str(&value) {
                        request = request.header(name, value);
                    }
                }
            }
        }
        if let Some(delivery) = record.delivery_count {
            request = request.header("X-Kafka-Delivery-Count", delivery.to_string());
        }
        request = match HeaderValue::from_str(&record.id) {
            Ok(id) => request.header("X-Record-Id", id),
            Err(_) => request.header("X-Record-Id-Base64", BASE64.encode(&record.id)),
        };
        if let Some(trace) = record.trace_context() {
            request = request.header(crate::record::TRACEPARENT, &trace.traceparent);
            if let Some(state) = trace
                .tracestate
                .as_deref()
                .and_then(|s| HeaderValue::from_str(s).ok())
            {
                request = request.header(crate::record::TRACESTATE, state);
            }
        }
        if let Some(retry) = &record.retry {
            if let Some(tier) = retry.tier {
                request = request.header("X-Kafka-Retry-Tier", tier.to_string());
            }
            request = request.header("X-Kafka-Retry-Attempts", retry.attempts.to_string());
        }
        // A CloudEvent in the Kafka binding's binary mode goes in the HTTP binding's (its
        // content type from the record; structured mode keeps its own).
        if let Some(event) = &event {
            for (name, value) in &event.headers {
                request = request.header(name.as_str(), value.as_str());
            }
        }
        if self.forward_headers {
            match record_headers::encode(&record.headers) {
                Ok(Some(text)) => {
                    request = request.header(record_headers::HTTP_HEADER, text);
                }
                Ok(None) => {}
                Err(why) => {
                    return Err(HandlerError::permanent(format!(
                        "the record cannot be delivered: {why}"
                    )))
                }
            }
        }
        let key_json = decoded
            .key
            .as_ref()
            .map(|k| serde_json::to_vec(&k.json).expect("JSON serializes"));
        if let Some(key) = key_json.as_deref().or(record.key.as_deref()) {
            let printable = std::str::from_utf8(key)
                .ok()
                .and_then(|k| HeaderValue::from_str(k).ok())
                .filter(|_| key.iter().all(|b| (0x20..0x7f).contains(b)));
            request = match printable {
                Some(value) => request.header("X-Kafka-Key", value),
                None => request.header("X-Kafka-Key-Base64", BASE64.encode(key)),
            };
        }
        match &self.output_topics {
            Some(topics) => {
                let answer = self.exchange(request, true).await?;
                let mut outputs = produce::outputs(&answer, topics)?;
                for (i, encoding) in produce::encodings(&answer) {
                    outputs[i].value = Some(self.encode(i, &encoding).await?);
                }
                crate::handler::output::set(outputs);
                Ok(())
            }
            None => self.send(request).await,
        }
    }
}

impl HttpTarget {
    /// The value of the answer's `produce[i]`, encoded with the registry's schema it names: a
    /// registry that cannot give the schema fails the record transiently (the target is
    /// called again), a schema that refuses the value (or none to ask) permanently.
    async fn encode(
        &self,
        i: usize,
        encoding: &produce::Encoding,
    ) -> Result<Vec<u8>, HandlerError> {
        let Some(decoding) = &self.decoding else {
            return Err(HandlerError::permanent(format!(
                "the target's answer asks to encode produce[{i}] with a schema registry's schema, and no --schema-registry-url is set"
            )));
        };
        decoding
            .codec
            .encode(&encoding.schema, encoding.message.as_deref(), &encoding.value)
            .await
            .map_err(|e| match e {
                crate::schema::EncodeError::Unavailable(e) => {
                    HandlerError::transient(format!("produce[{i}] cannot be encoded yet: {e}"))
                }
                crate::schema::EncodeError::Refused(why) => HandlerError::permanent(format!(
                    "the target's answer asks to produce a value its schema refuses (produce[{i}]): {why}"
                )),
            })
    }

    /// Sends `request` and classifies the answer.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<(), HandlerError> {
        self.exchange(request, false).await.map(|_| ())
    }

    /// Sends `request` and classifies the answer; a 2xx answer's body is read (up to
    /// [`batch_response::MAX_BODY_BYTES`]) when `read_body`.
    async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
        read_body: bool,
    ) -> Result<Vec<u8>, HandlerError> {
        let mut response = request.send().await.map_err(|e| {
            // reqwest's error shows the URL whole, query included: left out.
            let e = e.without_url();
            HandlerError::transient(format!("POST {} failed: {}", self.shown, error_chain(&e)))
        })?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            let mut body = Vec::new();
            while read_body && body.len() < batch_response::MAX_BODY_BYTES {
                match response.chunk().await {
                    Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                    Ok(None) => break,
                    Err(e) => {
                        return Err(HandlerError::transient(format!(
                            "reading the answer of {} failed: {}",
                            self.shown,
                            error_chain(&e.without_url())
                        )))
                    }
                }
            }
            // Cut, it would be taken for an answer that is not JSON: said as what it is.
            if read_body
                && body.len() >= batch_response::MAX_BODY_BYTES
                && matches!(response.chunk().await, Ok(Some(_)))
            {
                return Err(HandlerError::permanent(format!(
                    "the answer of {} is larger than {} bytes, the most an answer may be",
                    self.shown,
                    batch_response::MAX_BODY_BYTES
                )));
            }
            return Ok(body);
        }
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
                .map(str::to_string)
        };
        let (retry_after, location) = (header(RETRY_AFTER), header(LOCATION));
        let mut body = Vec::new();
        while body.len() < ERROR_BODY_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
        body.truncate(ERROR_BODY_BYTES);
        classify_response(
            status,
            retry_after.as_deref(),
            location.as_deref(),
            &String::from_utf8_lossy(&body),
            Utc::now(),
        )
        .map(|()| Vec::new())
    }
}

/// Delivers batches of records to an HTTP endpoint as one JSON array per call.
#[derive(Debug, Clone)]
pub struct HttpBatchTarget {
    single: HttpTarget,
}

impl HttpBatchTarget {
    /// Checks the URL (`http://` only) and builds a client whose requests time out after
    /// `timeout`. The body is always `application/json`.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, ConfigError> {
        Ok(Self {
            single: HttpTarget::new(url, timeout, "application/json")?,
        })
    }

    /// The same target reached through the HTTP proxy at `proxy`
    /// ([`HttpTarget::through_proxy`]).
    pub fn through_proxy(self, proxy: &str) -> Result<Self, ConfigError> {
        Ok(Self {
            single: self.single.through_proxy(proxy)?,
        })
    }

    /// The same target with `tls` ([`HttpTarget::with_tls`]).
    pub fn with_tls(self, tls: TargetTls) -> Result<Self, ConfigError> {
        Ok(Self {
            single: self.single.with_tls(tls)?,
        })
    }

    /// The same target without the records' own headers in its items.
    pub fn without_record_headers(self) -> Self {
        Self {
            single: self.single.without_record_headers(),
        }
    }

    /// The same target getting values and keys decoded ([`decoding`]): a decoded value is
    /// the item's `payload` (`payload_encoding` `json`) with its schema in `value_schema`; a
    /// decoded key is `key_json`, its schema in `key_schema`. A record that does not decode
    /// is left out of the call and fails alone (dead-lettered, kind `deserialization`); one
    /// whose schema cannot be fetched fails the batch transiently.
    pub fn decoding(self, decoding: crate::schema::Decoder) -> Self {
        Self {
            single: self.single.decoding(decoding),
        }
    }
}

#[derive(serde::Serialize)]
struct BatchItem<'a> {
    id: &'a str,
    offset: i64,
    key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_base64: Option<String>,
    payload: Box<serde_json::value::RawValue>,
    payload_encoding: crate::dlq::Encoding,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_tier: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_attempts: Option<u32>,
    /// The record's own headers ([`record_headers::json`]), unless turned off.
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<serde_json::Value>,
    /// The decoded value's schema ([`Decoded::schema_json`](crate::schema::Decoded::schema_json)).
    #[serde(skip_serializing_if = "Option::is_none")]
    value_schema: Option<serde_json::Value>,
    /// The decoded key.
    #[serde(skip_serializing_if = "Option::is_none")]
    key_json: Option<serde_json::Value>,
    /// The decoded key's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    key_schema: Option<serde_json::Value>,
}

impl crate::handler::BatchHandler for HttpBatchTarget {
    async fn handle_batch(&self, records: &[Record]) -> Result<(), HandlerError> {
        // Decoded first: a record that does not decode stays out of the call.
        let mut undecodable = Vec::new();
        let mut decoded = Vec::with_capacity(records.len());
        for record in records {
            let parts = match &self.single.decoding {
                Some(decoding) => decoding.decode(record).await,
                None => Ok(crate::schema::DecodedRecord::default()),
            };
            match parts {
                Ok(parts) => decoded.push((record, parts)),
                Err(e) if e.is_undecodable() => undecodable.push((record.offset, e)),
                Err(e) => return Err(e),
            }
        }
        if decoded.is_empty() {
            return Err(HandlerError::partial(undecodable));
        }
        let values_decoded = self.single.decoding.as_ref().is_some_and(|d| d.values);
        let items: Vec<BatchItem<'_>> = decoded
            .iter()
            .map(|(r, parts)| {
                let (payload, payload_encoding) = if values_decoded {
                    let json = parts.value.as_ref().map(|d| &d.json);
                    let raw = serde_json::value::to_raw_value(&json).expect("JSON serializes");
                    (raw, crate::dlq::Encoding::Json)
                } else {
                    crate::dlq::encode_payload(r.payload.as_deref())
                };
                let trace = r.trace_context();
                BatchItem {
                    id: &r.id,
                    offset: r.offset,
                    // A key that is not UTF-8 is sent as base64, never mangled.
                    key: r.key.as_deref().and_then(|k| std::str::from_utf8(k).ok()),
                    key_base64: r
                        .key
                        .as_deref()
                        .filter(|k| std::str::from_utf8(k).is_err())
                        .map(|k| BASE64.encode(k)),
                    payload,
                    payload_encoding,
                    traceparent: trace.as_ref().map(|t| t.traceparent.clone()),
                    tracestate: trace.and_then(|t| t.tracestate),
                    retry_tier: r.retry.as_ref().and_then(|retry| retry.tier),
                    retry_attempts: r.retry.as_ref().map(|retry| retry.attempts),
                    headers: self
                        .single
                        .forward_headers
                        .then(|| record_headers::json(&r.headers)),
                    value_schema: parts.value.as_ref().map(|v| v.schema_json()),
                    key_json: parts.key.as_ref().map(|k| k.json.clone()),
                    key_schema: parts.key.as_ref().map(|k| k.schema_json()),
                }
            })
            .collect();
        let body = serde_json::to_vec(&items).expect("a batch serializes");
        let sent: std::borrow::Cow<'_, [Record]> = if undecodable.is_empty() {
            std::borrow::Cow::Borrowed(records)
        } else {
            std::borrow::Cow::Owned(decoded.iter().map(|(r, _)| (*r).clone()).collect())
        };
        let first = &sent[0];
        let request = self
            .single
            .client
            .post(self.single.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header("X-Kafka-Topic", &first.topic)
            .header("X-Kafka-Partition", first.partition.to_string())
            .header("X-Kafka-First-Offset", first.offset.to_string())
            .header(
                "X-Kafka-Last-Offset",
                sent[sent.len() - 1].offset.to_string(),
            )
            .body(body);
        let answer = self.single.exchange(request, true).await?;
        let outcome = batch_response::outcome(&answer, &sent);
        if undecodable.is_empty() {
            return outcome;
        }
        match outcome {
            Ok(()) => Err(HandlerError::partial(undecodable)),
            Err(e) => match e.failed_records() {
                Some(failed) => {
                    undecodable.extend(failed.iter().cloned());
                    Err(HandlerError::partial(undecodable))
                }
                // The call failed as a whole: the batch is tried again, and its undecodable
                // records fail again then.
                None => Err(e),
            },
        }
    }
}

/// Classifies the target's answer: 2xx → `Ok`; 3xx → transient, naming the `location`
/// ([`redirected`]); 408, 429 and 5xx → transient, with `Retry-After` (delta seconds or HTTP
/// date, relative to `now`) as the next delay; any other status → permanent. The failure
/// message holds the status and the start of the body.
pub fn classify_response(
    status: u16,
    retry_after: Option<&str>,
    location: Option<&str>,
    body: &str,
    now: DateTime<Utc>,
) -> Result<(), HandlerError> {
    if (200..300).contains(&status) {
        return Ok(());
    }
    if (300..400).contains(&status) {
        return Err(redirected(status, location));
    }
    let body = body.trim();
    let message = if body.is_empty() {
        format!("target answered HTTP {status}")
    } else {
        format!("target answered HTTP {status}: {body}")
    };
    if status == 408 || status == 429 || (500..600).contains(&status) {
        let mut error = HandlerError::transient(message);
        if let Some(delay) = retry_after.and_then(|v| parse_retry_after(v, now)) {
            error = error.with_retry_after(delay);
        }
        Err(error)
    } else {
        Err(HandlerError::permanent(message))
    }
}

/// A 3xx answer: a transient failure (the record is retried, and a target that redirects
/// every record opens the outage breaker instead of draining the topic into the DLQ) whose
/// message names the redirect's target.
pub fn redirected(status: u16, location: Option<&str>) -> HandlerError {
    HandlerError::transient(format!(
        "target answered HTTP {status} (redirect to {}); redirects are not followed, since a \
         POST would be replayed as a GET without the record: point target_url at the final \
         address",
        location.map_or_else(|| "no Location".to_string(), shown_url::redacted)
    ))
}

/// Parses a `Retry-After` value: delta seconds, or an HTTP date (a date in the past gives 0).
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let date = DateTime::parse_from_rfc2822(value).ok()?;
    Some(
        (date.with_timezone(&Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureKind;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-30T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn a_redirect_is_transient_and_names_where_it_points() {
        let e = classify_response(301, None, Some("http://new/"), "", now()).unwrap_err();
        assert_eq!(e.kind(), FailureKind::Transient);
        assert!(e.message().contains("redirect to http://new/"), "{e}");
    }

    #[test]
    fn statuses_are_classified() {
        let cases = [
            (200, None),
            (204, None),
            (400, Some(FailureKind::Permanent)),
            (404, Some(FailureKind::Permanent)),
            (409, Some(FailureKind::Permanent)),
            (422, Some(FailureKind::Permanent)),
            (408, Some(FailureKind::Transient)),
            (429, Some(FailureKind::Transient)),
            (500, Some(FailureKind::Transient)),
            (503, Some(FailureKind::Transient)),
            (599, Some(FailureKind::Transient)),
            (301, Some(FailureKind::Transient)),
            (302, Some(FailureKind::Transient)),
            (308, Some(FailureKind::Transient)),
        ];
        for (status, expected) in cases {
            let got = classify_response(status, None, None, "", now())
                .err()
                .map(|e| e.kind());
            assert_eq!(got, expected, "HTTP {status}");
        }
    }

    #[test]
    fn retry_after_replaces_the_next_delay() {
        let e = classify_response(429, Some("7"), None, "slow down", now()).unwrap_err();
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        assert_eq!(e.message(), "target answered HTTP 429: slow down");
        let e = classify_response(503, Some("Mon, 30 Nov 2026 10:00:30 GMT"), None, "", now())
            .unwrap_err();
        assert_eq!(e.retry_after(), Some(Duration::from_secs(30)));
        let e = classify_response(503, Some("soon"), None, "", now()).unwrap_err();
        assert_eq!(e.retry_after(), None);
    }

    #[test]
    fn past_retry_after_dates_mean_now() {
        assert_eq!(
            parse_retry_after("Mon, 30 Nov 2026 09:00:00 GMT", now()),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn target_url_must_be_http_or_https() {
        let t = Duration::from_secs(1);
        assert!(HttpTarget::new("http://localhost:8080/events", t, "application/json").is_ok());
        assert!(
            HttpTarget::new("https://orders.example.com/events", t, "application/json").is_ok()
        );
        let err = HttpTarget::new("ftp://x", t, "application/json").unwrap_err();
        assert_eq!(err.key, "target_url");
        let err = HttpTarget::new("not a url", t, "application/json").unwrap_err();
        assert_eq!(err.value, "not a url");
    }

    #[test]
    fn tls_files_that_cannot_serve_are_refused_by_name() {
        let t = Duration::from_secs(1);
        let target =
            || HttpTarget::new("https://orders.example.com/", t, "application/json").unwrap();
        let missing = TargetTls {
            ca_location: Some("/no/such/ca.pem".into()),
            ..TargetTls::default()
        };
        assert_eq!(
            target().with_tls(missing).unwrap_err().key,
            "target_ca_location"
        );
        let not_pem = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(not_pem.path(), "not a certificate").unwrap();
        let garbage = TargetTls {
            ca_location: Some(not_pem.path().into()),
            ..TargetTls::default()
        };
        let error = target().with_tls(garbage).unwrap_err();
        assert!(error.to_string().contains("no PEM certificate"), "{error}");
        let half = TargetTls {
            certificate_location: Some(not_pem.path().into()),
            ..TargetTls::default()
        };
        assert_eq!(
            target().with_tls(half).unwrap_err().key,
            "target_key_location"
        );
    }
}
