//! The registry's REST API (Confluent's, which Confluent Schema Registry, Redpanda,
//! Karapace and Apicurio's compatibility API serve): a schema by id or GUID, with the schemas
//! its references name, and the subject and version it is registered under.
//!
//! Every failure here is the registry's, never the record's: unreachable, refusing the
//! credentials, not knowing the schema (yet: a producer may have registered it on a registry
//! replica this one has not caught up with) — so a record whose schema cannot be fetched is
//! retried, never dead-lettered as undecodable.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::framing::{guid_text, SchemaRef};
use crate::config::{shown_url, ConfigError};

/// The registry's media type, which it answers with and asks for.
const MEDIA_TYPE: &str = "application/vnd.schemaregistry.v1+json";
/// How deep references may nest (a cycle would otherwise never end).
const MAX_REFERENCE_DEPTH: usize = 32;

/// Where the registry is and how to reach it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RegistrySettings {
    /// `http://` or `https://`, with the registry's path prefix if any (`schema_registry_url`).
    /// User info in it (`https://user:password@host`) is basic auth.
    pub url: String,
    /// Basic auth's user (`schema_registry_username`).
    pub username: Option<String>,
    /// Basic auth's password (`schema_registry_password`). A secret.
    pub password: Option<String>,
    /// A bearer token instead (`schema_registry_token`). A secret.
    pub token: Option<String>,
    /// A PEM file of the CAs that sign the registry's certificate, trusted instead of the
    /// system's (`schema_registry_ca_location`).
    pub ca_location: Option<PathBuf>,
    /// How long one request may take (a timeout is the registry being unreachable).
    pub timeout: Duration,
}

/// Never shows the secrets, nor credentials in the URL.
impl fmt::Debug for RegistrySettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistrySettings")
            .field("url", &shown_url::redacted(&self.url))
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca_location", &self.ca_location)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Why a schema could not be fetched. Every kind is transient for a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// No answer: refused connection, DNS, TLS, timeout.
    #[error("the schema registry at {url} cannot be reached: {reason}")]
    Unreachable {
        /// The registry's URL, redacted.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// It does not know the schema (HTTP 404).
    #[error("the schema registry at {url} has no schema {schema}: {message}")]
    NotFound {
        /// The registry's URL, redacted.
        url: String,
        /// The schema asked for (`id 7`, `guid …`, `subject orders-value version 2`).
        schema: String,
        /// The registry's message.
        message: String,
    },
    /// Any other answer that is not the schema: 401/403 (credentials), 5xx, a body that is
    /// not the API's.
    #[error("the schema registry at {url} answered {status} for schema {schema}: {message}")]
    Refused {
        /// The registry's URL, redacted.
        url: String,
        /// The schema asked for.
        schema: String,
        /// The HTTP status (0: the body was not the API's).
        status: u16,
        /// The registry's message, or what was wrong with its body.
        message: String,
    },
}

/// A schema as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SchemaBody {
    /// Its text: Avro or JSON Schema JSON, `.proto` source (or a base64 descriptor).
    pub schema: String,
    /// `AVRO` (when absent), `PROTOBUF` or `JSON`.
    #[serde(rename = "schemaType", default)]
    pub schema_type: Option<String>,
    /// The schemas it imports or uses, by subject and version.
    #[serde(default)]
    pub references: Vec<Reference>,
    /// Its id, when the answer says.
    #[serde(default)]
    pub id: Option<u32>,
    /// Its GUID, when the answer says (Confluent Schema Registry 8).
    #[serde(default)]
    pub guid: Option<String>,
    /// The subject, when asked by subject.
    #[serde(default)]
    pub subject: Option<String>,
    /// The version under it, when asked by subject.
    #[serde(default)]
    pub version: Option<i32>,
}

/// A schema reference: `name` is how the schema names it (a Protobuf import, an Avro type's
/// full name, a JSON Schema `$ref`), `subject` and `version` where the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Reference {
    /// The name the referring schema uses.
    pub name: String,
    /// The subject it is registered under.
    pub subject: String,
    /// Its version there.
    pub version: i32,
}

/// A subject and version a schema is registered under.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SubjectVersion {
    /// The subject (`orders-value`).
    pub subject: String,
    /// The version under it.
    pub version: i32,
}

/// A schema fetched with everything needed to compile it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The schema.
    pub body: SchemaBody,
    /// Every schema it references, directly or not: `(name, text)`, each once.
    pub references: Vec<(String, String)>,
    /// Where it is registered, if the registry says (the first of its subjects).
    pub registered: Option<SubjectVersion>,
}

/// A client of one registry.
#[derive(Clone)]
pub struct Registry {
    client: reqwest::Client,
    base: String,
    shown: String,
    username: Option<String>,
    password: Option<String>,
    token: Option<String>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("url", &self.shown)
            .finish()
    }
}

impl Registry {
    /// A client of the registry `settings` name. A URL that is not `http(s)://`, a CA file
    /// that cannot be read, or both basic auth and a token are errors naming the setting.
    pub fn new(settings: &RegistrySettings) -> Result<Self, ConfigError> {
        let shown = shown_url::redacted(&settings.url);
        let mut url = reqwest::Url::parse(settings.url.trim()).map_err(|e| {
            ConfigError::new("schema_registry_url", &shown, format!("not a URL: {e}"))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ConfigError::new(
                "schema_registry_url",
                &shown,
                "only http:// and https:// are supported",
            ));
        }
        let mut username = settings.username.clone();
        let mut password = settings.password.clone();
        if !url.username().is_empty() {
            let decode = |s: &str| {
                url::form_urlencoded::parse(format!("x={s}").as_bytes())
                    .next()
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default()
            };
            username = Some(decode(url.username()));
            password = url.password().map(decode);
            let _ = url.set_username("");
            let _ = url.set_password(None);
        }
        if username.is_some() && settings.token.is_some() {
            return Err(ConfigError::new(
                "schema_registry_token",
                "<redacted>",
                "give basic auth (schema_registry_username) or a token, not both",
            ));
        }
        if settings.timeout.is_zero() {
            return Err(ConfigError::new(
                "schema_registry_timeout_ms",
                0,
                "must be greater than 0",
            ));
        }
        // No redirects: a registry that redirects would take the credentials elsewhere.
        let mut builder = reqwest::Client::builder()
            .timeout(settings.timeout)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none());
        if let Some(path) = &settings.ca_location {
            let pem = std::fs::read(path).map_err(|e| {
                ConfigError::new(
                    "schema_registry_ca_location",
                    path.display(),
                    format!("cannot read it: {e}"),
                )
            })?;
            let cas = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                ConfigError::new(
                    "schema_registry_ca_location",
                    path.display(),
                    format!("not PEM certificates: {e}"),
                )
            })?;
            if cas.is_empty() {
                return Err(ConfigError::new(
                    "schema_registry_ca_location",
                    path.display(),
                    "holds no certificate",
                ));
            }
            builder = builder.tls_built_in_root_certs(false);
            for ca in cas {
                builder = builder.add_root_certificate(ca);
            }
        }
        let client = builder.build().map_err(|e| {
            ConfigError::new(
                "schema_registry_url",
                &shown,
                format!(
                    "the HTTP client cannot be built: {}",
                    crate::failure::error_chain(&e)
                ),
            )
        })?;
        Ok(Self {
            client,
            base: url.as_str().trim_end_matches('/').to_string(),
            shown: shown.trim_end_matches('/').to_string(),
            username,
            password,
            token: settings.token.clone(),
        })
    }

    /// The registry's URL, redacted.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Fetches the schema `schema` names, every schema it references, and where it is
    /// registered.
    pub async fn fetch(&self, schema: SchemaRef) -> Result<Fetched, RegistryError> {
        let (path, asked) = match schema {
            SchemaRef::Id(id) => (format!("schemas/ids/{id}"), schema.to_string()),
            SchemaRef::Guid(guid) => (
                format!("schemas/guids/{}", guid_text(&guid)),
                schema.to_string(),
            ),
        };
        let body: SchemaBody = self.get(&path, &asked).await?;
        let mut references = Vec::new();
        self.references(&body.references, &mut references, 0)
            .await?;
        let id = match schema {
            SchemaRef::Id(id) => Some(id),
            SchemaRef::Guid(_) => body.id,
        };
        // Where it is registered is for the service's information: a registry that does not
        // serve it (or fails here) still decodes.
        let registered = match id {
            Some(id) => self
                .get::<Vec<SubjectVersion>>(&format!("schemas/ids/{id}/versions"), &asked)
                .await
                .ok()
                .and_then(|all| all.into_iter().next()),
            None => None,
        };
        Ok(Fetched {
            body,
            references,
            registered,
        })
    }

    /// Fetches the schema registered under `subject` at `version` (`None`: the latest), with
    /// every schema it references; its id is in the answer.
    pub async fn fetch_version(
        &self,
        subject: &str,
        version: Option<i32>,
    ) -> Result<Fetched, RegistryError> {
        let shown_version = version.map_or("latest".to_string(), |v| v.to_string());
        let asked = format!("subject {subject} version {shown_version}");
        let path = format!(
            "subjects/{}/versions/{shown_version}",
            encode_segment(subject)
        );
        let body: SchemaBody = self.get(&path, &asked).await?;
        let mut references = Vec::new();
        self.references(&body.references, &mut references, 0)
            .await?;
        let registered = Some(SubjectVersion {
            subject: subject.to_string(),
            version: body.version.or(version).unwrap_or_default(),
        });
        Ok(Fetched {
            body,
            references,
            registered,
        })
    }

    /// Adds `references` and theirs (depth first, each name once) to `out`.
    fn references<'a>(
        &'a self,
        references: &'a [Reference],
        out: &'a mut Vec<(String, String)>,
        depth: usize,
    ) -> futures_util::future::BoxFuture<'a, Result<(), RegistryError>> {
        Box::pin(async move {
            for reference in references {
                if out.iter().any(|(name, _)| *name == reference.name) {
                    continue;
                }
                let asked = format!(
                    "subject {} version {}",
                    reference.subject, reference.version
                );
                if depth >= MAX_REFERENCE_DEPTH {
                    return Err(RegistryError::Refused {
                        url: self.shown.clone(),
                        schema: asked,
                        status: 0,
                        message: format!("references nest deeper than {MAX_REFERENCE_DEPTH}"),
                    });
                }
                let path = format!(
                    "subjects/{}/versions/{}",
                    encode_segment(&reference.subject),
                    reference.version
                );
                let body: SchemaBody = self.get(&path, &asked).await?;
                self.references(&body.references, out, depth + 1).await?;
                out.push((reference.name.clone(), body.schema));
            }
            Ok(())
        })
    }

    /// GETs `path` under the registry's URL and reads the answer as `T`.
    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        asked: &str,
    ) -> Result<T, RegistryError> {
        let mut request = self
            .client
            .get(format!("{}/{path}", self.base))
            .header(reqwest::header::ACCEPT, MEDIA_TYPE);
        if let Some(user) = &self.username {
            request = request.basic_auth(user, self.password.as_deref());
        } else if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| RegistryError::Unreachable {
                url: self.shown.clone(),
                reason: shown_url::redacted(&crate::failure::error_chain(&e)),
            })?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| RegistryError::Unreachable {
                url: self.shown.clone(),
                reason: crate::failure::error_chain(&e),
            })?;
        if status.is_success() {
            return serde_json::from_str(&text).map_err(|e| RegistryError::Refused {
                url: self.shown.clone(),
                schema: asked.to_string(),
                status: 0,
                message: format!("the answer is not the registry API's: {e}"),
            });
        }
        let message = serde_json::from_str::<ErrorBody>(&text)
            .map(|e| format!("{} (error code {})", e.message, e.error_code))
            .unwrap_or_else(|_| text.chars().take(200).collect());
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(RegistryError::NotFound {
                url: self.shown.clone(),
                schema: asked.to_string(),
                message,
            });
        }
        Err(RegistryError::Refused {
            url: self.shown.clone(),
            schema: asked.to_string(),
            status: status.as_u16(),
            message,
        })
    }
}

/// The registry's error body.
#[derive(Deserialize)]
struct ErrorBody {
    error_code: i64,
    message: String,
}

/// A subject as one path segment (subjects may hold `/`, `:` and the like).
fn encode_segment(segment: &str) -> String {
    url::form_urlencoded::byte_serialize(segment.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str) -> RegistrySettings {
        RegistrySettings {
            url: url.into(),
            timeout: Duration::from_secs(1),
            ..Default::default()
        }
    }

    #[test]
    fn settings_errors_name_the_setting_and_never_the_secrets() {
        let e = Registry::new(&settings("ftp://reg")).unwrap_err();
        assert_eq!(e.key, "schema_registry_url");
        let e = Registry::new(&settings("http://u:hunter2@reg:8081")).unwrap();
        assert_eq!(e.shown(), "http://***@reg:8081");
        assert!(!format!("{e:?}").contains("hunter2"));
        let both = RegistrySettings {
            username: Some("u".into()),
            token: Some("t0ken".into()),
            ..settings("http://reg")
        };
        let e = Registry::new(&both).unwrap_err();
        assert!(!e.to_string().contains("t0ken"));
        assert!(!format!("{both:?}").contains("t0ken"));
        let ca = RegistrySettings {
            ca_location: Some("/nonexistent/ca.pem".into()),
            ..settings("https://reg")
        };
        assert_eq!(
            Registry::new(&ca).unwrap_err().key,
            "schema_registry_ca_location"
        );
    }

    #[test]
    fn subjects_are_one_path_segment() {
        assert_eq!(encode_segment("a/b c:d"), "a%2Fb%20c%3Ad");
    }
}
