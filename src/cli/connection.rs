//! The connection settings every command that talks to Kafka takes: the named ones of
//! [`Security`] and raw librdkafka properties ([`ConnectionArgs`]).

use clap::Args;
use kafka_dlq::config::Security;
use kafka_dlq::kafka::ClientOptions;
use kafka_dlq::ConfigError;

/// How a command reaches the cluster: TLS, SASL and raw librdkafka properties, for each of
/// its Kafka clients. See docs/connecting.md.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection (TLS, SASL; see docs/connecting.md)")]
pub(super) struct ConnectionArgs {
    /// PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL.
    #[arg(long, env = "KAFKA_SECURITY_PROTOCOL", value_name = "PROTOCOL")]
    security_protocol: Option<String>,
    /// PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM.
    #[arg(long, env = "KAFKA_SASL_MECHANISM", value_name = "MECHANISM")]
    sasl_mechanism: Option<String>,
    /// The SASL user (PLAIN, SCRAM).
    #[arg(long, env = "KAFKA_SASL_USERNAME", value_name = "USER")]
    sasl_username: Option<String>,
    /// The SASL password (secret: never printed).
    #[arg(long, env = "KAFKA_SASL_PASSWORD", value_name = "PASSWORD")]
    sasl_password: Option<String>,
    /// A file holding the SASL password (a mounted Secret); wins over --sasl-password.
    #[arg(long, env = "KAFKA_SASL_PASSWORD_FILE", value_name = "FILE")]
    sasl_password_file: Option<String>,
    /// A PEM file of the CAs that sign the brokers' certificates [default: the system's].
    #[arg(long, env = "KAFKA_SSL_CA_LOCATION", value_name = "FILE")]
    ssl_ca_location: Option<String>,
    /// Mutual TLS: the client's certificate (PEM).
    #[arg(long, env = "KAFKA_SSL_CERTIFICATE_LOCATION", value_name = "FILE")]
    ssl_certificate_location: Option<String>,
    /// Mutual TLS: the client's private key (PEM).
    #[arg(long, env = "KAFKA_SSL_KEY_LOCATION", value_name = "FILE")]
    ssl_key_location: Option<String>,
    /// The password of an encrypted private key (secret: never printed).
    #[arg(long, env = "KAFKA_SSL_KEY_PASSWORD", value_name = "PASSWORD")]
    ssl_key_password: Option<String>,
    /// A file holding the private key's password; wins over --ssl-key-password.
    #[arg(long, env = "KAFKA_SSL_KEY_PASSWORD_FILE", value_name = "FILE")]
    ssl_key_password_file: Option<String>,
    /// OAUTHBEARER: the OpenID Connect token endpoint (https://).
    #[arg(long, env = "KAFKA_OAUTH_TOKEN_ENDPOINT", value_name = "URL")]
    oauth_token_endpoint: Option<String>,
    /// OAUTHBEARER: the client id.
    #[arg(long, env = "KAFKA_OAUTH_CLIENT_ID", value_name = "ID")]
    oauth_client_id: Option<String>,
    /// OAUTHBEARER: the client secret (secret: never printed).
    #[arg(long, env = "KAFKA_OAUTH_CLIENT_SECRET", value_name = "SECRET")]
    oauth_client_secret: Option<String>,
    /// OAUTHBEARER: a file holding the client secret; wins over --oauth-client-secret.
    #[arg(long, env = "KAFKA_OAUTH_CLIENT_SECRET_FILE", value_name = "FILE")]
    oauth_client_secret_file: Option<String>,
    /// OAUTHBEARER: the scope to ask for.
    #[arg(long, env = "KAFKA_OAUTH_SCOPE", value_name = "SCOPE")]
    oauth_scope: Option<String>,
    /// AWS_MSK_IAM: the cluster's region [default: the AWS default chain's].
    #[arg(long, env = "AWS_REGION", value_name = "REGION")]
    aws_region: Option<String>,
    /// A raw librdkafka property KEY=VALUE, applied last (repeatable; the variable takes a
    /// comma-separated list, a comma before the next KEY= separating them).
    #[arg(long = "kafka-option", value_name = "KEY=VALUE", env = "KAFKA_OPTIONS")]
    kafka_options: Vec<String>,
    /// The config file's `[librdkafka]` table (set after parsing: never a clap default, so
    /// that `--help` cannot show it).
    #[arg(skip)]
    file_options: ClientOptions,
}

impl ConnectionArgs {
    /// The named settings given, by their names as in the config file.
    fn named(&self) -> [(&'static str, &Option<String>); 16] {
        [
            ("security_protocol", &self.security_protocol),
            ("sasl_mechanism", &self.sasl_mechanism),
            ("sasl_username", &self.sasl_username),
            ("sasl_password", &self.sasl_password),
            ("sasl_password_file", &self.sasl_password_file),
            ("ssl_ca_location", &self.ssl_ca_location),
            ("ssl_certificate_location", &self.ssl_certificate_location),
            ("ssl_key_location", &self.ssl_key_location),
            ("ssl_key_password", &self.ssl_key_password),
            ("ssl_key_password_file", &self.ssl_key_password_file),
            ("oauth_token_endpoint", &self.oauth_token_endpoint),
            ("oauth_client_id", &self.oauth_client_id),
            ("oauth_client_secret", &self.oauth_client_secret),
            ("oauth_client_secret_file", &self.oauth_client_secret_file),
            ("oauth_scope", &self.oauth_scope),
            ("aws_region", &self.aws_region),
        ]
    }

    /// Takes the config file's `[librdkafka]` table: under the `--kafka-option`s, which win
    /// key by key.
    pub(super) fn set_file_options(&mut self, options: ClientOptions) {
        self.file_options = options;
    }

    /// The client options of every Kafka client of the command: the named settings checked
    /// and turned into librdkafka properties, the file's `[librdkafka]` table and the
    /// `--kafka-option`s beside them (see [`kafka_dlq::config::merge_options`]).
    pub(super) fn client_options(&self) -> Result<ClientOptions, ConfigError> {
        let mut security = Security::default();
        for (key, value) in self.named() {
            if let Some(value) = value {
                security.set(key, value)?;
            }
        }
        let mut raw = self.file_options.clone();
        for (key, value) in kafka_dlq::config::parse_kafka_options(&self.kafka_options)?.iter() {
            raw.insert(key, value);
        }
        kafka_dlq::config::merge_options(security.options()?, &raw)
    }
}

/// How long a tool waits for the cluster before it gives up (a refusal ends it at once).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// Connects to `brokers` with `options` and authenticates, as a tool does before its work: a
/// refusal (a wrong password, an untrusted CA, …) is a runtime error at once, one line
/// naming the cluster and what was refused; a cluster that does not answer, after 15 s.
pub(super) async fn admitted(
    brokers: &str,
    options: &ClientOptions,
) -> Result<(), super::CliError> {
    let mut config = rdkafka::ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    options.apply(&mut config);
    tokio::task::spawn_blocking(move || kafka_dlq::kafka::connect::check(&config, CONNECT_TIMEOUT))
        .await
        .expect("the connection check does not panic")
        .map(drop)
        .map_err(|failure| super::CliError::Runtime(failure.into()))
}
