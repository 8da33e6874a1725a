//! A small schema registry that follows Confluent's REST API reference (paths, media type,
//! error codes and bodies, schema references, GUIDs), for the tests and the benchmark (which
//! includes this file): no registry server installs here (docs/testing.md says what was
//! tried). It is checked by the reference clients: confluent-kafka's Python
//! `SchemaRegistryClient` and its serializers register schemas through it and write the
//! records our decoder reads (tests/schemas/write.py).
//!
//! A schema is refused (422, 42201) when the library's own compiler refuses it, or a
//! reference does not resolve; the same text under the same type and references gets the
//! same id and GUID in every subject, as Confluent's does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};

const MEDIA_TYPE: &str = "application/vnd.schemaregistry.v1+json";

#[derive(Clone, Debug, PartialEq, Deserialize)]
struct Reference {
    name: String,
    subject: String,
    version: i32,
}

#[derive(Clone, Debug)]
struct Stored {
    id: u32,
    guid: String,
    schema: String,
    schema_type: String,
    references: Vec<Reference>,
}

#[derive(Default)]
struct Store {
    schemas: Vec<Stored>,
    /// Each subject's versions, as schema ids (version n at index n - 1).
    subjects: BTreeMap<String, Vec<u32>>,
}

#[derive(Deserialize)]
struct Register {
    schema: String,
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<Reference>,
}

/// A registry on a loopback port that can be stopped and started again on the same port
/// (its schemas kept), for an outage.
pub struct TestRegistry {
    store: Arc<Mutex<Store>>,
    addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestRegistry {
    /// Starts one on a free loopback port.
    pub async fn start() -> TestRegistry {
        let store = Arc::new(Mutex::new(Store::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut registry = TestRegistry {
            store,
            addr,
            stop: None,
        };
        registry.serve(listener);
        registry
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let app = router(self.store.clone());
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .unwrap()
        });
        self.stop = Some(tx);
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving: connections are refused until [`TestRegistry::restart`].
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Until the port is free again.
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(self.addr).await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Registers `schema` (`AVRO`, `PROTOBUF` or `JSON`, no references) under `subject`, as a
    /// client's POST would; returns its id. The benchmark fills its registry this way.
    pub fn register(&self, subject: &str, schema_type: &str, schema: &str) -> Result<u32, String> {
        let mut store = self.store.lock().unwrap();
        let request = Register {
            schema: schema.to_string(),
            schema_type: Some(schema_type.to_string()),
            references: Vec::new(),
        };
        let version = store_schema(&mut store, subject, request)?;
        Ok(store.subjects[subject][version - 1])
    }

    /// Serves again on the same port, with the same schemas.
    pub async fn restart(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }
}

fn router(store: Arc<Mutex<Store>>) -> Router {
    Router::new()
        .route("/subjects", get(subjects))
        .route("/subjects/{subject}", post(lookup))
        .route("/subjects/{subject}/versions", get(versions).post(register))
        .route("/subjects/{subject}/versions/{version}", get(version))
        .route("/schemas/ids/{id}", get(by_id))
        .route("/schemas/ids/{id}/versions", get(id_versions))
        .route("/schemas/guids/{guid}", get(by_guid))
        .route(
            "/schemas/types",
            get(|| async { answer(json!(["JSON", "PROTOBUF", "AVRO"])) }),
        )
        .route(
            "/config",
            get(|| async { answer(json!({"compatibilityLevel": "BACKWARD"})) }),
        )
        .with_state(store)
}

fn answer(body: Value) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, MEDIA_TYPE)],
        body.to_string(),
    )
        .into_response()
}

fn error(status: StatusCode, code: u32, message: String) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, MEDIA_TYPE)],
        json!({"error_code": code, "message": message}).to_string(),
    )
        .into_response()
}

/// 40401, as Confluent's registry answers a subject it does not have.
fn subject_not_found(subject: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        40401,
        format!("Subject '{subject}' not found."),
    )
}

fn schema_json(s: &Stored) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    out.insert("schema".into(), s.schema.clone().into());
    if s.schema_type != "AVRO" {
        out.insert("schemaType".into(), s.schema_type.clone().into());
    }
    if !s.references.is_empty() {
        let refs: Vec<Value> = s
            .references
            .iter()
            .map(|r| json!({"name": r.name, "subject": r.subject, "version": r.version}))
            .collect();
        out.insert("references".into(), refs.into());
    }
    out.insert("guid".into(), s.guid.clone().into());
    out
}

fn registered(store: &Store, subject: &str, version: usize) -> Value {
    let id = store.subjects[subject][version - 1];
    let stored = &store.schemas[id as usize - 1];
    let mut out = schema_json(stored);
    out.insert("subject".into(), subject.into());
    out.insert("version".into(), version.into());
    out.insert("id".into(), id.into());
    Value::Object(out)
}

async fn subjects(State(store): State<Arc<Mutex<Store>>>) -> Response {
    let store = store.lock().unwrap();
    answer(json!(store.subjects.keys().collect::<Vec<_>>()))
}

async fn versions(State(store): State<Arc<Mutex<Store>>>, Path(subject): Path<String>) -> Response {
    let store = store.lock().unwrap();
    match store.subjects.get(&subject) {
        Some(ids) => answer(json!((1..=ids.len()).collect::<Vec<_>>())),
        None => subject_not_found(&subject),
    }
}

async fn version(
    State(store): State<Arc<Mutex<Store>>>,
    Path((subject, version)): Path<(String, String)>,
) -> Response {
    let store = store.lock().unwrap();
    let Some(ids) = store.subjects.get(&subject) else {
        return subject_not_found(&subject);
    };
    let number = match version.as_str() {
        "latest" | "-1" => Some(ids.len()),
        v => v.parse::<usize>().ok(),
    };
    match number {
        Some(n) if (1..=ids.len()).contains(&n) => answer(registered(&store, &subject, n)),
        Some(_) => error(StatusCode::NOT_FOUND, 40402, format!("Version {version} not found.")),
        None => error(
            StatusCode::UNPROCESSABLE_ENTITY,
            42202,
            format!("The specified version '{version}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""),
        ),
    }
}

/// The texts of `references` and theirs, `(name, text)`, or why one does not resolve.
fn resolve(
    store: &Store,
    references: &[Reference],
    out: &mut Vec<(String, String)>,
) -> Result<(), String> {
    for r in references {
        let id = store
            .subjects
            .get(&r.subject)
            .and_then(|ids| ids.get((r.version as usize).wrapping_sub(1)))
            .ok_or_else(|| {
                format!(
                    "reference {} (subject {} version {}) is not registered",
                    r.name, r.subject, r.version
                )
            })?;
        let stored = &store.schemas[*id as usize - 1];
        resolve(store, &stored.references, out)?;
        if !out.iter().any(|(n, _)| *n == r.name) {
            out.push((r.name.clone(), stored.schema.clone()));
        }
    }
    Ok(())
}

async fn register(
    State(store): State<Arc<Mutex<Store>>>,
    Path(subject): Path<String>,
    body: String,
) -> Response {
    let request: Register = match serde_json::from_str(&body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                42201,
                format!("Invalid schema: {e}"),
            )
        }
    };
    let mut store = store.lock().unwrap();
    match store_schema(&mut store, &subject, request) {
        Ok(version) => answer(registered(&store, &subject, version)),
        Err(why) => error(
            StatusCode::UNPROCESSABLE_ENTITY,
            42201,
            format!("Invalid schema: {why}"),
        ),
    }
}

/// Registers `request` under `subject`: its version there (the version it already has when
/// the same schema was registered before), or why the schema is refused.
fn store_schema(store: &mut Store, subject: &str, request: Register) -> Result<usize, String> {
    let schema_type = request.schema_type.unwrap_or_else(|| "AVRO".into());
    let mut texts = Vec::new();
    resolve(store, &request.references, &mut texts)?;
    kafka_dlq::schema::SchemaType::from_registry(Some(&schema_type)).and_then(|t| {
        let refs: Vec<(&str, &str)> = texts
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        kafka_dlq::schema::compiled::compile(t, &request.schema, &refs).map(|_| ())
    })?;
    let existing = store
        .schemas
        .iter()
        .find(|s| {
            s.schema == request.schema
                && s.schema_type == schema_type
                && s.references == request.references
        })
        .map(|s| s.id);
    let id = existing.unwrap_or_else(|| {
        let id = store.schemas.len() as u32 + 1;
        store.schemas.push(Stored {
            id,
            guid: guid(),
            schema: request.schema.clone(),
            schema_type: schema_type.clone(),
            references: request.references.clone(),
        });
        id
    });
    let ids = store.subjects.entry(subject.to_string()).or_default();
    Ok(match ids.iter().position(|i| *i == id) {
        Some(at) => at + 1,
        None => {
            ids.push(id);
            ids.len()
        }
    })
}

async fn lookup(
    State(store): State<Arc<Mutex<Store>>>,
    Path(subject): Path<String>,
    body: String,
) -> Response {
    let Ok(request) = serde_json::from_str::<Register>(&body) else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            42201,
            "Invalid schema".into(),
        );
    };
    let schema_type = request.schema_type.unwrap_or_else(|| "AVRO".into());
    let store = store.lock().unwrap();
    let Some(ids) = store.subjects.get(&subject) else {
        return subject_not_found(&subject);
    };
    for (at, id) in ids.iter().enumerate() {
        let s = &store.schemas[*id as usize - 1];
        if s.schema == request.schema
            && s.schema_type == schema_type
            && s.references == request.references
        {
            return answer(registered(&store, &subject, at + 1));
        }
    }
    error(StatusCode::NOT_FOUND, 40403, "Schema not found".into())
}

async fn by_id(State(store): State<Arc<Mutex<Store>>>, Path(id): Path<u32>) -> Response {
    let store = store.lock().unwrap();
    match id
        .checked_sub(1)
        .and_then(|i| store.schemas.get(i as usize))
    {
        Some(s) => answer(Value::Object(schema_json(s))),
        None => error(
            StatusCode::NOT_FOUND,
            40403,
            format!("Schema {id} not found"),
        ),
    }
}

async fn id_versions(State(store): State<Arc<Mutex<Store>>>, Path(id): Path<u32>) -> Response {
    let store = store.lock().unwrap();
    if id == 0 || id as usize > store.schemas.len() {
        return error(
            StatusCode::NOT_FOUND,
            40403,
            format!("Schema {id} not found"),
        );
    }
    let mut out = Vec::new();
    for (subject, ids) in &store.subjects {
        for (at, i) in ids.iter().enumerate() {
            if *i == id {
                out.push(json!({"subject": subject, "version": at + 1}));
            }
        }
    }
    answer(json!(out))
}

async fn by_guid(State(store): State<Arc<Mutex<Store>>>, Path(guid): Path<String>) -> Response {
    let store = store.lock().unwrap();
    match store.schemas.iter().find(|s| s.guid == guid) {
        Some(s) => {
            let mut out = schema_json(s);
            out.insert("id".into(), s.id.into());
            answer(Value::Object(out))
        }
        None => error(
            StatusCode::NOT_FOUND,
            40403,
            format!("Schema {guid} not found"),
        ),
    }
}

/// A random version-4 UUID in its 8-4-4-4-12 form.
pub fn guid() -> String {
    let mut bytes = fastrand::u128(..).to_be_bytes();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    kafka_dlq::schema::framing::guid_text(&bytes)
}
