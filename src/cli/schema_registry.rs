//! The schema registry settings of a command that decodes records (`run`'s
//! `--decode-values` / `--decode-keys`). See docs/schemas.md.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use kafka_dlq::schema::{Codec, Registry, RegistrySettings, DEFAULT_CACHE_BOUND};
use kafka_dlq::ConfigError;

/// How a record's value or key reaches the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub(super) enum Decode {
    /// As its bytes.
    #[default]
    None,
    /// Decoded to JSON with its schema from the schema registry (Avro, Protobuf, JSON Schema).
    SchemaRegistry,
}

/// Decoding and the registry it uses (`run`).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Schema Registry (see docs/schemas.md)")]
pub(super) struct SchemaRegistryArgs {
    /// Decode each record's value before it goes to the target.
    #[arg(long, env = "KAFKA_DLQ_DECODE_VALUES", value_enum, default_value_t = Decode::None)]
    decode_values: Decode,
    /// Decode each record's key before it goes to the target.
    #[arg(long, env = "KAFKA_DLQ_DECODE_KEYS", value_enum, default_value_t = Decode::None)]
    decode_keys: Decode,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// The schema registry (`run`, `console`).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Schema Registry (see docs/schemas.md)")]
pub(super) struct RegistryArgs {
    /// The schema registry's URL (Confluent's REST API), with its path prefix if any.
    #[arg(long, env = "KAFKA_DLQ_SCHEMA_REGISTRY_URL", value_name = "URL")]
    schema_registry_url: Option<String>,
    /// Basic auth's user.
    #[arg(long, env = "KAFKA_DLQ_SCHEMA_REGISTRY_USERNAME", value_name = "USER")]
    schema_registry_username: Option<String>,
    /// Basic auth's password (secret: never printed).
    #[arg(
        long,
        env = "KAFKA_DLQ_SCHEMA_REGISTRY_PASSWORD",
        value_name = "PASSWORD"
    )]
    schema_registry_password: Option<String>,
    /// A file holding the password; wins over --schema-registry-password.
    #[arg(
        long,
        env = "KAFKA_DLQ_SCHEMA_REGISTRY_PASSWORD_FILE",
        value_name = "FILE"
    )]
    schema_registry_password_file: Option<PathBuf>,
    /// A bearer token instead of basic auth (secret: never printed).
    #[arg(long, env = "KAFKA_DLQ_SCHEMA_REGISTRY_TOKEN", value_name = "TOKEN")]
    schema_registry_token: Option<String>,
    /// A file holding the token; wins over --schema-registry-token.
    #[arg(
        long,
        env = "KAFKA_DLQ_SCHEMA_REGISTRY_TOKEN_FILE",
        value_name = "FILE"
    )]
    schema_registry_token_file: Option<PathBuf>,
    /// A PEM file of the CAs that sign the registry's certificate [default: the system's].
    #[arg(
        long,
        env = "KAFKA_DLQ_SCHEMA_REGISTRY_CA_LOCATION",
        value_name = "FILE"
    )]
    schema_registry_ca_location: Option<PathBuf>,
    /// Timeout of one request to the registry in ms; a timeout is a transient failure.
    #[arg(
        long,
        env = "KAFKA_DLQ_SCHEMA_REGISTRY_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    schema_registry_timeout_ms: u64,
}

impl SchemaRegistryArgs {
    /// The codec and what it decodes (values, keys; with neither, the codec still encodes an
    /// exactly-once answer's outputs), or `None` without a registry. Decoding without a
    /// registry URL, or a registry setting that does not hold, is an error naming the setting.
    pub(super) fn decoding(&self) -> Result<Option<kafka_dlq::schema::Decoder>, ConfigError> {
        let values = self.decode_values == Decode::SchemaRegistry;
        let keys = self.decode_keys == Decode::SchemaRegistry;
        let Some(codec) = self.registry.codec()? else {
            if values || keys {
                return Err(ConfigError::new(
                    "schema_registry_url",
                    "",
                    "is required to decode with a schema registry (decode_values / decode_keys)",
                ));
            }
            return Ok(None);
        };
        Ok(Some(kafka_dlq::schema::Decoder {
            codec,
            values,
            keys,
        }))
    }
}

impl RegistryArgs {
    /// The registry's codec, or `None` without `schema_registry_url`; a setting that does not
    /// hold is an error naming it.
    pub(super) fn codec(&self) -> Result<Option<Arc<Codec>>, ConfigError> {
        let Some(url) = self.schema_registry_url.clone() else {
            return Ok(None);
        };
        let settings = RegistrySettings {
            url,
            username: self.schema_registry_username.clone(),
            password: secret(
                "schema_registry_password_file",
                &self.schema_registry_password_file,
                &self.schema_registry_password,
            )?,
            token: secret(
                "schema_registry_token_file",
                &self.schema_registry_token_file,
                &self.schema_registry_token,
            )?,
            ca_location: self.schema_registry_ca_location.clone(),
            timeout: Duration::from_millis(self.schema_registry_timeout_ms),
        };
        let registry = Registry::new(&settings)?;
        Ok(Some(Arc::new(Codec::new(registry, DEFAULT_CACHE_BOUND))))
    }
}

/// A secret from its file (less one final line break), which wins, or as given.
fn secret(
    key: &str,
    file: &Option<PathBuf>,
    inline: &Option<String>,
) -> Result<Option<String>, ConfigError> {
    match file {
        Some(path) => kafka_dlq::config::read_secret_file(key, path).map(Some),
        None => Ok(inline.clone().filter(|s| !s.is_empty())),
    }
}
