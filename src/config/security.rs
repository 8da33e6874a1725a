//! The named connection settings of every Kafka client: [`Security`].
//!
//! Managed clusters (Confluent Cloud, Amazon MSK, Aiven, Redpanda Cloud, Azure Event Hubs) are
//! reached over TLS, most with SASL. These settings say so in a dozen names that are the same
//! in the config file, on the command line and in the environment, and apply to every client
//! of a command: the consumer, the dead-letter and retry producers, the admin client that
//! creates topics, the tools' readers and producers, the monitor, and a share group's krafka
//! client. [`Security::options`] turns them into librdkafka properties, which the `[librdkafka]`
//! table may add to (and must not contradict); the share consumer reads the same properties.

use std::fmt;
use std::str::FromStr;

use super::ConfigError;
use crate::kafka::ClientOptions;

/// How a client talks to the brokers: `security_protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
#[non_exhaustive]
pub enum SecurityProtocol {
    /// No encryption, no authentication (the default).
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL without TLS: the credentials cross the network as they are.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Its name, as librdkafka and Kafka write it.
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether it encrypts with TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether it authenticates with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl FromStr for SecurityProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Ok(SecurityProtocol::Plaintext),
            "SSL" => Ok(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Ok(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Ok(SecurityProtocol::SaslSsl),
            _ => Err("expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL".to_string()),
        }
    }
}

impl TryFrom<String> for SecurityProtocol {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a SASL client authenticates: `sasl_mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
#[non_exhaustive]
pub enum SaslMechanism {
    /// A user name and password, sent as they are (so only over TLS).
    Plain,
    /// SCRAM-SHA-256: a user name and password, proven without sending the password.
    ScramSha256,
    /// SCRAM-SHA-512.
    ScramSha512,
    /// An OAuth 2.0 bearer token from an OpenID Connect token endpoint (client credentials:
    /// `oauth_token_endpoint`, `oauth_client_id`, `oauth_client_secret`, `oauth_scope`),
    /// fetched again before it expires.
    OAuthBearer,
    /// Amazon MSK's IAM access control: a token signed with the AWS credentials of the default
    /// chain (environment, profile, web identity, container or instance role), for the
    /// region `aws_region`. A build with the `msk-iam` feature.
    AwsMskIam,
}

impl SaslMechanism {
    /// Its name, as Kafka writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
            SaslMechanism::AwsMskIam => "AWS_MSK_IAM",
        }
    }

    /// Whether it authenticates with `sasl_username` and `sasl_password`.
    pub fn uses_password(self) -> bool {
        matches!(
            self,
            SaslMechanism::Plain | SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512
        )
    }
}

impl FromStr for SaslMechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_uppercase().as_str() {
            "PLAIN" => Ok(SaslMechanism::Plain),
            "SCRAM-SHA-256" => Ok(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Ok(SaslMechanism::ScramSha512),
            "OAUTHBEARER" => Ok(SaslMechanism::OAuthBearer),
            "AWS_MSK_IAM" => Ok(SaslMechanism::AwsMskIam),
            "GSSAPI" => Err(KERBEROS.to_string()),
            _ => Err(
                "expected PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM"
                    .to_string(),
            ),
        }
    }
}

impl TryFrom<String> for SaslMechanism {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `sasl.oauthbearer.config` says for an MSK IAM client (`kafka::msk_iam::MARKER`; the
/// settings layer cannot name the feature-gated module).
const MSK_MARKER: &str = "kafka-dlq:aws-msk-iam";

/// Why Kerberos is refused.
const KERBEROS: &str = "Kerberos (GSSAPI) is not supported by kafka-dlq: it needs the Cyrus \
    SASL library and a keytab on every host; use SCRAM-SHA-512, OAUTHBEARER or mutual TLS";

/// The named connection settings, the same for every Kafka client of a command (see the
/// [module docs](self)). Every field is optional; none set is a plaintext connection.
/// `Debug` shows which secrets are set, never their values.
///
/// ```
/// use kafka_dlq::config::{SaslMechanism, Security, SecurityProtocol};
/// let security = Security {
///     security_protocol: Some(SecurityProtocol::SaslSsl),
///     sasl_mechanism: Some(SaslMechanism::ScramSha512),
///     sasl_username: Some("svc-deliveries".into()),
///     sasl_password: Some("…".into()),
///     ..Security::default()
/// };
/// let options = security.options().unwrap();
/// assert_eq!(options.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
/// ```
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Security {
    /// `PLAINTEXT` (default), `SSL`, `SASL_PLAINTEXT` or `SASL_SSL` (librdkafka's
    /// `security.protocol`).
    pub security_protocol: Option<SecurityProtocol>,
    /// With a `SASL_` protocol: `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`, `OAUTHBEARER` or
    /// `AWS_MSK_IAM` (`sasl.mechanism`). Kerberos (`GSSAPI`) is refused.
    pub sasl_mechanism: Option<SaslMechanism>,
    /// The user of `PLAIN` and SCRAM (`sasl.username`).
    pub sasl_username: Option<String>,
    /// Its password (`sasl.password`). A secret: never printed.
    pub sasl_password: Option<String>,
    /// A PEM file of the CAs that sign the brokers' certificates (`ssl.ca.location`); without
    /// it, the system's CA store (OpenSSL's default paths, `SSL_CERT_FILE`/`SSL_CERT_DIR`
    /// honoured).
    pub ssl_ca_location: Option<String>,
    /// Mutual TLS: the client's certificate, a PEM file (`ssl.certificate.location`).
    pub ssl_certificate_location: Option<String>,
    /// Mutual TLS: the client's private key, a PEM file (`ssl.key.location`).
    pub ssl_key_location: Option<String>,
    /// The password of an encrypted private key (`ssl.key.password`). A secret.
    pub ssl_key_password: Option<String>,
    /// `OAUTHBEARER`: the OpenID Connect token endpoint (`sasl.oauthbearer.token.endpoint.url`).
    pub oauth_token_endpoint: Option<String>,
    /// `OAUTHBEARER`: the client id of the client credentials grant.
    pub oauth_client_id: Option<String>,
    /// `OAUTHBEARER`: its secret. A secret.
    pub oauth_client_secret: Option<String>,
    /// `OAUTHBEARER`: the scope asked for, if the provider wants one.
    pub oauth_scope: Option<String>,
    /// `AWS_MSK_IAM`: the cluster's AWS region (default: the AWS default chain's, e.g.
    /// `AWS_REGION`).
    pub aws_region: Option<String>,
}

impl Security {
    /// The settings' names, as in the config file (a flag is the name with `-` for `_`).
    pub const KEYS: [&'static str; 16] = [
        "security_protocol",
        "sasl_mechanism",
        "sasl_username",
        "sasl_password",
        "sasl_password_file",
        "ssl_ca_location",
        "ssl_certificate_location",
        "ssl_key_location",
        "ssl_key_password",
        "ssl_key_password_file",
        "oauth_token_endpoint",
        "oauth_client_id",
        "oauth_client_secret",
        "oauth_client_secret_file",
        "oauth_scope",
        "aws_region",
    ];

    /// Whether the setting `key` holds a secret.
    pub fn is_secret(key: &str) -> bool {
        matches!(
            key,
            "sasl_password" | "ssl_key_password" | "oauth_client_secret"
        )
    }

    /// Sets the setting `key` (one of [`Security::KEYS`]) from its text; an empty text unsets
    /// it. An unknown key or a bad value is an error naming it.
    pub fn set(&mut self, key: &str, text: &str) -> Result<(), ConfigError> {
        let value = (!text.trim().is_empty()).then(|| text.trim().to_string());
        let shown = if Self::is_secret(key) {
            "<redacted>"
        } else {
            text
        };
        let slot = match key {
            "security_protocol" => {
                self.security_protocol = value
                    .map(|v| v.parse())
                    .transpose()
                    .map_err(|r| ConfigError::new(key, shown, r))?;
                return Ok(());
            }
            "sasl_mechanism" => {
                self.sasl_mechanism = value
                    .map(|v| v.parse())
                    .transpose()
                    .map_err(|r| ConfigError::new(key, shown, r))?;
                return Ok(());
            }
            // A secret in a file (a mounted Kubernetes Secret, a Docker secret): its content,
            // less one final line break, as if given itself; it wins over the secret given
            // inline when both are.
            "sasl_password_file" | "ssl_key_password_file" | "oauth_client_secret_file" => {
                if text.trim().is_empty() {
                    return Ok(());
                }
                let secret = super::read_secret_file(key, std::path::Path::new(text.trim()))?;
                let inline = key.strip_suffix("_file").expect("a _file key");
                return self.set(inline, &secret);
            }
            // A password is taken as it is: its spaces may be its own.
            "sasl_password" | "ssl_key_password" | "oauth_client_secret" => {
                let value = (!text.is_empty()).then(|| text.to_string());
                match key {
                    "sasl_password" => self.sasl_password = value,
                    "ssl_key_password" => self.ssl_key_password = value,
                    _ => self.oauth_client_secret = value,
                }
                return Ok(());
            }
            "sasl_username" => &mut self.sasl_username,
            "ssl_ca_location" => &mut self.ssl_ca_location,
            "ssl_certificate_location" => &mut self.ssl_certificate_location,
            "ssl_key_location" => &mut self.ssl_key_location,
            "oauth_token_endpoint" => &mut self.oauth_token_endpoint,
            "oauth_client_id" => &mut self.oauth_client_id,
            "oauth_scope" => &mut self.oauth_scope,
            "aws_region" => &mut self.aws_region,
            _ => return Err(ConfigError::new(key, shown, "is not a connection setting")),
        };
        *slot = value;
        Ok(())
    }

    /// Whether no setting is given.
    pub fn is_empty(&self) -> bool {
        *self == Security::default()
    }

    /// The librdkafka properties these settings stand for, each remembering the setting it
    /// came from (so that librdkafka's complaints name it). Checks them against each other
    /// and that the files they name can be read; the error names the setting.
    pub fn options(&self) -> Result<ClientOptions, ConfigError> {
        let protocol = self.security_protocol;
        let tls = protocol.is_some_and(SecurityProtocol::uses_tls);
        let sasl = protocol.is_some_and(SecurityProtocol::uses_sasl);
        let mut options = ClientOptions::new();
        let mut set = |key: &'static str, property: &str, value: &str| {
            options.insert_named(property, value, key);
        };
        if let Some(p) = protocol {
            set("security_protocol", "security.protocol", p.as_str());
        }
        // TLS settings without TLS would be left out silently: refused instead.
        for (key, value) in [
            ("ssl_ca_location", &self.ssl_ca_location),
            ("ssl_certificate_location", &self.ssl_certificate_location),
            ("ssl_key_location", &self.ssl_key_location),
            ("ssl_key_password", &self.ssl_key_password),
        ] {
            let Some(value) = value else { continue };
            if !tls {
                return Err(ConfigError::new(
                    key,
                    shown(key, value),
                    format!(
                        "is a TLS setting, and security_protocol = {} does not use TLS: set \
                         security_protocol = SSL or SASL_SSL",
                        protocol.unwrap_or(SecurityProtocol::Plaintext)
                    ),
                ));
            }
        }
        if let Some(ca) = &self.ssl_ca_location {
            // librdkafka's `probe` looks in the usual places of the usual distributions.
            if ca != "probe" {
                readable("ssl_ca_location", ca)?;
            }
            set("ssl_ca_location", "ssl.ca.location", ca);
        }
        match (&self.ssl_certificate_location, &self.ssl_key_location) {
            (Some(cert), Some(key)) => {
                readable("ssl_certificate_location", cert)?;
                readable("ssl_key_location", key)?;
                set("ssl_certificate_location", "ssl.certificate.location", cert);
                set("ssl_key_location", "ssl.key.location", key);
            }
            (Some(cert), None) => {
                return Err(ConfigError::new(
                    "ssl_certificate_location",
                    cert,
                    "mutual TLS needs the client's private key too: set ssl_key_location",
                ))
            }
            (None, Some(key)) => {
                return Err(ConfigError::new(
                    "ssl_key_location",
                    key,
                    "mutual TLS needs the client's certificate too: set ssl_certificate_location",
                ))
            }
            (None, None) => {}
        }
        if let Some(password) = &self.ssl_key_password {
            if self.ssl_key_location.is_none() {
                return Err(ConfigError::new(
                    "ssl_key_password",
                    "<redacted>",
                    "is the password of ssl_key_location, which is not set",
                ));
            }
            set("ssl_key_password", "ssl.key.password", password);
        }
        let mechanism = self.sasl_mechanism;
        if let Some(m) = mechanism {
            if !sasl {
                return Err(ConfigError::new(
                    "sasl_mechanism",
                    m,
                    format!(
                        "needs a SASL protocol, and security_protocol = {}: set \
                         security_protocol = SASL_SSL",
                        protocol.unwrap_or(SecurityProtocol::Plaintext)
                    ),
                ));
            }
        }
        let password_set = [
            ("sasl_username", self.sasl_username.is_some()),
            ("sasl_password", self.sasl_password.is_some()),
        ];
        match mechanism {
            Some(m) if m.uses_password() => {
                for (key, given) in password_set {
                    if !given {
                        return Err(ConfigError::new(
                            key,
                            "",
                            format!("is required with sasl_mechanism = {m}"),
                        ));
                    }
                }
            }
            _ => {
                if let Some((key, _)) = password_set.iter().find(|(_, given)| *given) {
                    return Err(ConfigError::new(
                        key,
                        if *key == "sasl_password" {
                            "<redacted>"
                        } else {
                            self.sasl_username.as_deref().unwrap_or_default()
                        },
                        "is for sasl_mechanism = PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
                    ));
                }
            }
        }
        if let Some(m) = mechanism {
            let name = match m {
                // librdkafka signs nothing for MSK itself: it takes the token kafka-dlq makes.
                SaslMechanism::AwsMskIam => "OAUTHBEARER",
                other => other.as_str(),
            };
            set("sasl_mechanism", "sasl.mechanism", name);
        }
        // An MSK IAM client asks kafka-dlq for its tokens, naming the region
        // (`kafka::msk_iam`).
        let msk_question =
            mechanism
                .filter(|m| *m == SaslMechanism::AwsMskIam)
                .map(|_| match &self.aws_region {
                    Some(region) => format!("{MSK_MARKER} region={region}"),
                    None => MSK_MARKER.to_string(),
                });
        if let (Some(user), Some(password)) = (&self.sasl_username, &self.sasl_password) {
            set("sasl_username", "sasl.username", user);
            set("sasl_password", "sasl.password", password);
        }
        let oauth = [
            ("oauth_token_endpoint", &self.oauth_token_endpoint),
            ("oauth_client_id", &self.oauth_client_id),
            ("oauth_client_secret", &self.oauth_client_secret),
            ("oauth_scope", &self.oauth_scope),
        ];
        if mechanism == Some(SaslMechanism::OAuthBearer) {
            for (key, value) in &oauth[..3] {
                if value.is_none() {
                    return Err(ConfigError::new(
                        key,
                        "",
                        "is required with sasl_mechanism = OAUTHBEARER (the client credentials \
                         of the OpenID Connect provider)",
                    ));
                }
            }
            let endpoint = self.oauth_token_endpoint.as_deref().unwrap_or_default();
            // The client secret goes to the endpoint: in clear only to this machine.
            let loopback = ["http://localhost", "http://127.0.0.1", "http://[::1]"]
                .iter()
                .any(|host| {
                    endpoint
                        .strip_prefix(host)
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with([':', '/']))
                });
            if !(endpoint.starts_with("https://") || loopback) {
                return Err(ConfigError::new(
                    "oauth_token_endpoint",
                    without_credentials(endpoint),
                    "expected an https:// URL (http:// only to this machine: the client secret is sent to it)",
                ));
            }
            set("oauth_token_endpoint", "sasl.oauthbearer.method", "oidc");
            set(
                "oauth_token_endpoint",
                "sasl.oauthbearer.token.endpoint.url",
                endpoint,
            );
            set(
                "oauth_client_id",
                "sasl.oauthbearer.client.id",
                self.oauth_client_id.as_deref().unwrap_or_default(),
            );
            set(
                "oauth_client_secret",
                "sasl.oauthbearer.client.secret",
                self.oauth_client_secret.as_deref().unwrap_or_default(),
            );
            if let Some(scope) = &self.oauth_scope {
                set("oauth_scope", "sasl.oauthbearer.scope", scope);
            }
        } else if let Some((key, value)) = oauth.iter().find(|(_, v)| v.is_some()) {
            return Err(ConfigError::new(
                key,
                shown(key, value.as_deref().unwrap_or_default()),
                "is for sasl_mechanism = OAUTHBEARER",
            ));
        }
        match (mechanism, &self.aws_region) {
            (Some(SaslMechanism::AwsMskIam), _) => {
                if !cfg!(feature = "msk-iam") {
                    return Err(ConfigError::new(
                        "sasl_mechanism",
                        "AWS_MSK_IAM",
                        "this kafka-dlq was built without Amazon MSK's IAM access control: \
                         build it with the `msk-iam` feature",
                    ));
                }
                if let Some(question) = &msk_question {
                    options.insert_named("sasl.oauthbearer.config", question, "sasl_mechanism");
                }
            }
            (_, Some(region)) => {
                return Err(ConfigError::new(
                    "aws_region",
                    region,
                    "is for sasl_mechanism = AWS_MSK_IAM",
                ))
            }
            (_, None) => {}
        }
        Ok(options)
    }
}

/// The value of `key` as an error shows it.
fn shown<'a>(key: &str, value: &'a str) -> &'a str {
    if Security::is_secret(key) {
        "<redacted>"
    } else {
        value
    }
}

/// Checks that the file a setting names can be read, now rather than at the first connection.
fn readable(key: &str, path: &str) -> Result<(), ConfigError> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|e| ConfigError::new(key, path, format!("cannot read it: {e}")))
}

/// Merges the named settings' properties with the raw ones (`[librdkafka]`, `--kafka-option`):
/// both may be given, but a property set by both to different values is an error naming
/// both, and Kerberos is refused whichever way it is asked for.
pub fn merge_options(
    named: ClientOptions,
    raw: &ClientOptions,
) -> Result<ClientOptions, ConfigError> {
    let mut merged = named;
    for (key, value) in raw.iter() {
        if let Some(setting) = merged.setting_of(key) {
            if merged.get(key) != Some(value) {
                return Err(ConfigError::new(
                    &format!("librdkafka.{key}"),
                    if crate::kafka::is_secret_property(key) {
                        "<redacted>"
                    } else {
                        value
                    },
                    format!("contradicts the setting `{setting}`; give one of them"),
                ));
            }
            continue;
        }
        merged.insert(key, value);
    }
    check_options(&merged)?;
    Ok(merged)
}

/// Checks librdkafka properties for what kafka-dlq refuses whatever sets them: Kerberos, and
/// a SASL protocol without a mechanism (librdkafka would pick Kerberos).
pub fn check_options(options: &ClientOptions) -> Result<(), ConfigError> {
    for key in ["sasl.mechanism", "sasl.mechanisms"] {
        if let Some(value) = options.get(key) {
            if value.trim().eq_ignore_ascii_case("GSSAPI") {
                return Err(ConfigError::new(
                    &options
                        .setting_of(key)
                        .map_or(format!("librdkafka.{key}"), str::to_string),
                    value,
                    KERBEROS,
                ));
            }
        }
    }
    let protocol = options.get("security.protocol").unwrap_or("PLAINTEXT");
    let sasl = protocol.trim().to_ascii_uppercase().starts_with("SASL_");
    if sasl
        && options
            .get("sasl.mechanism")
            .or(options.get("sasl.mechanisms"))
            .is_none()
    {
        return Err(ConfigError::new(
            &options
                .setting_of("security.protocol")
                .map_or("librdkafka.security.protocol".to_string(), str::to_string),
            protocol,
            format!(
                "needs a SASL mechanism: set sasl_mechanism (PLAIN, SCRAM-SHA-256, \
                 SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM); {KERBEROS}"
            ),
        ));
    }
    Ok(())
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secret = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("Security")
            .field("security_protocol", &self.security_protocol)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("sasl_username", &self.sasl_username)
            .field("sasl_password", &secret(&self.sasl_password))
            .field("ssl_ca_location", &self.ssl_ca_location)
            .field("ssl_certificate_location", &self.ssl_certificate_location)
            .field("ssl_key_location", &self.ssl_key_location)
            .field("ssl_key_password", &secret(&self.ssl_key_password))
            .field("oauth_token_endpoint", &self.oauth_token_endpoint)
            .field("oauth_client_id", &self.oauth_client_id)
            .field("oauth_client_secret", &secret(&self.oauth_client_secret))
            .field("oauth_scope", &self.oauth_scope)
            .field("aws_region", &self.aws_region)
            .finish()
    }
}

/// `url` without what may be a secret in it: its user info and its query.
fn without_credentials(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}{path}"),
        None => url.to_string(),
    }
}

#[test]
fn an_endpoint_is_shown_without_its_user_info_or_query() {
    assert_eq!(
        without_credentials("http://id:s3cret@idp.example.com/token?secret=x"),
        "http://***@idp.example.com/token"
    );
    assert_eq!(
        without_credentials("https://idp.example.com/token"),
        "https://idp.example.com/token"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn security(pairs: &[(&str, &str)]) -> Result<ClientOptions, ConfigError> {
        let mut s = Security::default();
        for (k, v) in pairs {
            s.set(k, v)?;
        }
        s.options()
    }

    fn a_file() -> tempfile::NamedTempFile {
        tempfile::NamedTempFile::new().unwrap()
    }

    #[test]
    fn scram_over_tls_becomes_librdkafkas_properties_each_naming_its_setting() {
        let ca = a_file();
        let ca = ca.path().to_str().unwrap();
        let options = security(&[
            ("security_protocol", "sasl_ssl"),
            ("sasl_mechanism", "SCRAM-SHA-512"),
            ("sasl_username", "svc"),
            ("sasl_password", " pa,ss=word "),
            ("ssl_ca_location", ca),
        ])
        .unwrap();
        assert_eq!(options.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(options.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(options.get("sasl.username"), Some("svc"));
        assert_eq!(
            options.get("sasl.password"),
            Some(" pa,ss=word "),
            "a password is taken as it is"
        );
        assert_eq!(options.get("ssl.ca.location"), Some(ca));
        assert_eq!(options.setting_of("sasl.password"), Some("sasl_password"));
        assert_eq!(
            options.setting_of("ssl.ca.location"),
            Some("ssl_ca_location")
        );
    }

    #[test]
    fn oauthbearer_uses_librdkafkas_oidc_client_credentials() {
        let options = security(&[
            ("security_protocol", "SASL_SSL"),
            ("sasl_mechanism", "OAUTHBEARER"),
            (
                "oauth_token_endpoint",
                "https://idp.example.com/oauth2/token",
            ),
            ("oauth_client_id", "svc"),
            ("oauth_client_secret", "s3cret"),
            ("oauth_scope", "kafka"),
        ])
        .unwrap();
        assert_eq!(options.get("sasl.oauthbearer.method"), Some("oidc"));
        assert_eq!(
            options.get("sasl.oauthbearer.token.endpoint.url"),
            Some("https://idp.example.com/oauth2/token")
        );
        assert_eq!(options.get("sasl.oauthbearer.client.id"), Some("svc"));
        assert_eq!(
            options.get("sasl.oauthbearer.client.secret"),
            Some("s3cret")
        );
        assert_eq!(options.get("sasl.oauthbearer.scope"), Some("kafka"));
    }

    #[test]
    fn settings_that_would_be_left_out_or_cannot_work_are_refused_by_name() {
        let key = a_file();
        let key = key.path().to_str().unwrap();
        for (pairs, bad, reason) in [
            (
                vec![("ssl_ca_location", "/etc/ca.pem")],
                "ssl_ca_location",
                "does not use TLS",
            ),
            (
                vec![
                    ("security_protocol", "SSL"),
                    ("ssl_ca_location", "/nonexistent/ca.pem"),
                ],
                "ssl_ca_location",
                "cannot read it",
            ),
            (
                vec![("security_protocol", "SSL"), ("ssl_key_location", key)],
                "ssl_key_location",
                "set ssl_certificate_location",
            ),
            (
                vec![("sasl_mechanism", "PLAIN")],
                "sasl_mechanism",
                "needs a SASL protocol",
            ),
            (
                vec![
                    ("security_protocol", "SASL_SSL"),
                    ("sasl_mechanism", "SCRAM-SHA-256"),
                    ("sasl_username", "u"),
                ],
                "sasl_password",
                "is required with sasl_mechanism = SCRAM-SHA-256",
            ),
            (
                vec![
                    ("security_protocol", "SASL_SSL"),
                    ("sasl_mechanism", "GSSAPI"),
                ],
                "sasl_mechanism",
                "Kerberos (GSSAPI) is not supported",
            ),
            (
                vec![
                    ("security_protocol", "SASL_SSL"),
                    ("sasl_mechanism", "OAUTHBEARER"),
                    ("oauth_token_endpoint", "https://idp/token"),
                    ("oauth_client_id", "x"),
                ],
                "oauth_client_secret",
                "is required with sasl_mechanism = OAUTHBEARER",
            ),
            (
                vec![
                    ("security_protocol", "SASL_SSL"),
                    ("sasl_mechanism", "PLAIN"),
                    ("sasl_username", "u"),
                    ("sasl_password", "p"),
                    ("oauth_scope", "kafka"),
                ],
                "oauth_scope",
                "is for sasl_mechanism = OAUTHBEARER",
            ),
            (
                vec![("security_protocol", "TLS")],
                "security_protocol",
                "expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
            ),
        ] {
            let error = security(&pairs).unwrap_err();
            assert_eq!(error.key, bad, "{pairs:?}: {error}");
            assert!(error.reason.contains(reason), "{pairs:?}: {error}");
        }
    }

    #[test]
    fn aws_msk_iam_asks_kafka_dlq_for_its_tokens_naming_the_region() {
        let msk = security(&[
            ("security_protocol", "SASL_SSL"),
            ("sasl_mechanism", "AWS_MSK_IAM"),
            ("aws_region", "eu-west-1"),
        ]);
        if cfg!(feature = "msk-iam") {
            let options = msk.unwrap();
            assert_eq!(options.get("sasl.mechanism"), Some("OAUTHBEARER"));
            assert_eq!(
                options.get("sasl.oauthbearer.config"),
                Some("kafka-dlq:aws-msk-iam region=eu-west-1")
            );
        } else {
            let error = msk.unwrap_err();
            assert!(error.reason.contains("`msk-iam` feature"), "{error}");
        }
        let error = security(&[("aws_region", "eu-west-1")]).unwrap_err();
        assert_eq!(error.key, "aws_region");
    }

    #[test]
    fn secrets_never_appear_in_errors_or_debug() {
        let error = security(&[("sasl_password", "hunter2")]).unwrap_err();
        assert_eq!(error.key, "sasl_password");
        assert!(!error.to_string().contains("hunter2"), "{error}");
        let mut s = Security::default();
        s.set("sasl_password", "hunter2").unwrap();
        s.set("oauth_client_secret", "hunter3").unwrap();
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("hunter3"),
            "{shown}"
        );
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn a_secret_in_a_file_is_its_content_less_the_final_line_break() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, content: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, content).unwrap();
            path.display().to_string()
        };
        let mut s = Security::default();
        s.set("sasl_password", "inline").unwrap();
        s.set("sasl_password_file", &file("password", " pa ss\n"))
            .unwrap();
        s.set("oauth_client_secret_file", &file("secret", "s3cret\r\n"))
            .unwrap();
        s.set("ssl_key_password_file", &file("key", "k")).unwrap();
        assert_eq!(s.sasl_password.as_deref(), Some(" pa ss"), "the file wins");
        assert_eq!(s.oauth_client_secret.as_deref(), Some("s3cret"));
        assert_eq!(s.ssl_key_password.as_deref(), Some("k"));
        let missing = s.set("sasl_password_file", "/no/such/file").unwrap_err();
        assert_eq!(missing.key, "sasl_password_file");
        assert!(missing.to_string().contains("/no/such/file"), "{missing}");
        let empty = s
            .set("sasl_password_file", &file("empty", "\n"))
            .unwrap_err();
        assert!(empty.to_string().contains("empty"), "{empty}");
    }

    #[test]
    fn raw_options_may_add_to_the_named_settings_but_not_contradict_them() {
        let named = security(&[
            ("security_protocol", "SASL_SSL"),
            ("sasl_mechanism", "PLAIN"),
            ("sasl_username", "u"),
            ("sasl_password", "p"),
        ])
        .unwrap();
        let raw: ClientOptions = [
            ("security.protocol", "SASL_SSL"),
            ("socket.timeout.ms", "30000"),
        ]
        .into_iter()
        .collect();
        let merged = merge_options(named.clone(), &raw).unwrap();
        assert_eq!(merged.get("socket.timeout.ms"), Some("30000"));
        let raw: ClientOptions = [("sasl.password", "other")].into_iter().collect();
        let error = merge_options(named, &raw).unwrap_err();
        assert_eq!(error.key, "librdkafka.sasl.password");
        assert!(error.reason.contains("`sasl_password`"), "{error}");
        assert!(!error.to_string().contains("other"), "{error}");

        let raw: ClientOptions = [("security.protocol", "SASL_SSL")].into_iter().collect();
        let error = merge_options(ClientOptions::new(), &raw).unwrap_err();
        assert_eq!(error.key, "librdkafka.security.protocol");
        assert!(error.reason.contains("needs a SASL mechanism"), "{error}");
        let raw: ClientOptions = [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanisms", "GSSAPI"),
        ]
        .into_iter()
        .collect();
        let error = merge_options(ClientOptions::new(), &raw).unwrap_err();
        assert!(error.reason.contains("Kerberos"), "{error}");
    }
}
