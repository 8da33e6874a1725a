//! A share group's connection: the consumer's client options (the named connection settings
//! and the raw librdkafka properties, the same as every other client's) as krafka's
//! [`AuthConfig`]. A property that would secure or reach the cluster and that krafka cannot
//! honour is refused by name rather than left out.

use krafka::auth::{AuthConfig, TlsConfig};

use crate::config::ConfigError;
use crate::kafka::ClientOptions;

/// The librdkafka properties this translates; another one starting with a prefix of
/// [`REFUSED_PREFIXES`] is refused.
const TRANSLATED: &[&str] = &[
    "security.protocol",
    "sasl.oauthbearer.config",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification",
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.scope",
    "https.ca.location",
];

/// Properties of these kinds change how the cluster is reached or trusted.
const REFUSED_PREFIXES: &[&str] = &[
    "security.",
    "sasl.",
    "ssl.",
    "enable.ssl",
    "https.",
    "client.dns",
    "socket.",
];

/// krafka's authentication for `options`; a property it cannot honour is a [`ConfigError`]
/// naming it (or the named setting that set it).
pub fn auth_config(options: &ClientOptions) -> Result<AuthConfig, ConfigError> {
    if let Some((key, _)) = options.iter().find(|(key, _)| {
        !TRANSLATED.contains(key) && REFUSED_PREFIXES.iter().any(|p| key.starts_with(p))
    }) {
        return Err(ConfigError::new(
            &options.name_of(key),
            "<not shown>",
            "is not applied to a share group's consumer (krafka), which takes the connection \
             settings of docs/connecting.md only",
        ));
    }
    let refuse = |key: &str, value: &str, reason: &str| {
        Err(ConfigError::new(
            &options.name_of(key),
            if crate::kafka::is_secret_property(key) {
                crate::kafka::REDACTED
            } else {
                value
            },
            reason,
        ))
    };
    let protocol = options
        .get("security.protocol")
        .unwrap_or("PLAINTEXT")
        .trim()
        .to_ascii_uppercase();
    let (tls, sasl) = match protocol.as_str() {
        "PLAINTEXT" => (false, false),
        "SSL" => (true, false),
        "SASL_PLAINTEXT" => (false, true),
        "SASL_SSL" => (true, true),
        other => {
            return refuse(
                "security.protocol",
                other,
                "expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
            )
        }
    };
    let text = |key: &str| options.get(key).unwrap_or_default().to_string();
    let mut auth = if sasl {
        let mechanism = options
            .get("sasl.mechanism")
            .or(options.get("sasl.mechanisms"))
            .unwrap_or_default()
            .trim()
            .to_ascii_uppercase();
        let (user, password) = (text("sasl.username"), text("sasl.password"));
        match mechanism.as_str() {
            "PLAIN" => AuthConfig::sasl_plain(user, password),
            "SCRAM-SHA-256" => AuthConfig::sasl_scram_sha256(user, password),
            "SCRAM-SHA-512" => AuthConfig::sasl_scram_sha512(user, password),
            "OAUTHBEARER" => oauthbearer(options)?,
            other => {
                return refuse(
                    "sasl.mechanism",
                    other,
                    "expected PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER",
                )
            }
        }
    } else {
        AuthConfig::plaintext()
    };
    if tls {
        auth = auth.with_tls(tls_config(options)?);
    }
    Ok(auth)
}

/// The TLS settings: the CA (or the system's store), the client's certificate and key.
fn tls_config(options: &ClientOptions) -> Result<TlsConfig, ConfigError> {
    let verify = options
        .get("enable.ssl.certificate.verification")
        .is_none_or(|v| v.trim() != "false");
    if let Some(algorithm) = options.get("ssl.endpoint.identification.algorithm") {
        if !algorithm.trim().eq_ignore_ascii_case("https") {
            return Err(ConfigError::new(
                &options.name_of("ssl.endpoint.identification.algorithm"),
                algorithm,
                "krafka always checks the broker's host name: only `https` is taken",
            ));
        }
    }
    let mut tls = if verify {
        TlsConfig::new()
    } else {
        TlsConfig::insecure()
    };
    tls = match options.get("ssl.ca.location") {
        Some(ca) if ca != "probe" => tls.with_ca_cert(ca),
        _ => tls.with_native_roots(),
    };
    match (
        options.get("ssl.certificate.location"),
        options.get("ssl.key.location"),
    ) {
        (Some(cert), Some(key)) => tls = tls.with_client_cert(cert, key),
        (None, None) => {}
        (Some(_), None) | (None, Some(_)) => {
            return Err(ConfigError::new(
                &options.name_of("ssl.key.location"),
                options.get("ssl.key.location").unwrap_or_default(),
                "mutual TLS needs both ssl.certificate.location and ssl.key.location",
            ))
        }
    }
    if let Some(password) = options.get("ssl.key.password") {
        tls = tls.with_client_key_password(password);
    }
    Ok(tls)
}

/// OAUTHBEARER from an OpenID Connect token endpoint (client credentials): krafka fetches a
/// token for each new connection and keeps it until it nears its expiry.
fn oauthbearer(options: &ClientOptions) -> Result<AuthConfig, ConfigError> {
    use krafka::auth::{ClientCredentials, OidcTokenProvider};
    #[cfg(feature = "msk-iam")]
    if let Some(region) = options
        .get("sasl.oauthbearer.config")
        .and_then(crate::kafka::msk_iam::marked_region)
    {
        return msk_iam(region, options);
    }
    if options.get("sasl.oauthbearer.method") != Some("oidc") {
        return Err(ConfigError::new(
            &options.name_of("sasl.mechanism"),
            "OAUTHBEARER",
            "a share group's consumer takes its tokens from an OpenID Connect provider: set \
             oauth_token_endpoint, oauth_client_id and oauth_client_secret",
        ));
    }
    let field = |key: &str| {
        options.get(key).map(str::to_string).ok_or_else(|| {
            ConfigError::new(&options.name_of(key), "", "is required with OAUTHBEARER")
        })
    };
    let endpoint = field("sasl.oauthbearer.token.endpoint.url")?;
    let mut builder =
        OidcTokenProvider::builder(endpoint.clone()).credentials(ClientCredentials::secret(
            field("sasl.oauthbearer.client.id")?,
            field("sasl.oauthbearer.client.secret")?,
        ));
    if let Some(scope) = options.get("sasl.oauthbearer.scope") {
        builder = builder.scope(scope);
    }
    // As librdkafka: the token endpoint's own CA (`https.ca.location`), else the system's.
    builder = match options.get("https.ca.location") {
        Some(ca) if ca != "probe" => builder.ca_cert(ca),
        _ => builder.native_roots(),
    };
    let provider = builder.build().map_err(|e| {
        ConfigError::new(
            &options.name_of("sasl.oauthbearer.token.endpoint.url"),
            &endpoint,
            e,
        )
    })?;
    Ok(AuthConfig::sasl_oauthbearer_provider(provider))
}

/// Amazon MSK IAM: krafka asks kafka-dlq's signer for each token (the provider built once per
/// region, its credentials cached by the AWS default chain).
#[cfg(feature = "msk-iam")]
fn msk_iam(region: Option<&str>, options: &ClientOptions) -> Result<AuthConfig, ConfigError> {
    use std::sync::Arc;
    let signer = crate::kafka::msk_iam::Signer::for_region(region).map_err(|why| {
        ConfigError::new(
            &options.name_of("sasl.oauthbearer.config"),
            region.unwrap_or("(the default chain's)"),
            why,
        )
    })?;
    Ok(AuthConfig::sasl_oauthbearer_provider(move || {
        let signer: Arc<crate::kafka::msk_iam::Signer> = signer.clone();
        async move {
            let token = signer.token().await.map_err(krafka::KrafkaError::auth)?;
            Ok(krafka::auth::OAuthBearerToken::new(token.value).with_lifetime_ms(token.expires_ms))
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(pairs: &[(&str, &str)]) -> ClientOptions {
        let mut security = crate::config::Security::default();
        for (k, v) in pairs {
            security.set(k, v).unwrap();
        }
        security.options().unwrap()
    }

    #[test]
    fn the_named_settings_become_krafkas_authentication() {
        let ca = tempfile::NamedTempFile::new().unwrap();
        let ca = ca.path().to_str().unwrap();
        let auth = auth_config(&named(&[
            ("security_protocol", "SASL_SSL"),
            ("sasl_mechanism", "SCRAM-SHA-512"),
            ("sasl_username", "svc"),
            ("sasl_password", "pw"),
            ("ssl_ca_location", ca),
        ]))
        .unwrap();
        assert_eq!(
            auth.security_protocol(),
            &krafka::auth::SecurityProtocol::SaslSsl
        );
        assert_eq!(
            auth.sasl_mechanism(),
            Some(&krafka::auth::SaslMechanism::ScramSha512)
        );
        assert_eq!(auth.tls_config().and_then(|t| t.ca_cert_path()), Some(ca));
        let plain = auth_config(&ClientOptions::new()).unwrap();
        assert!(!plain.requires_tls() && !plain.requires_sasl());
        let oauth = auth_config(&named(&[
            ("security_protocol", "SASL_SSL"),
            ("sasl_mechanism", "OAUTHBEARER"),
            ("oauth_token_endpoint", "https://idp.example.com/token"),
            ("oauth_client_id", "svc"),
            ("oauth_client_secret", "s3cret"),
        ]))
        .unwrap();
        assert_eq!(
            oauth.sasl_mechanism(),
            Some(&krafka::auth::SaslMechanism::OAuthBearer)
        );
    }

    #[test]
    fn what_krafka_cannot_honour_is_refused_by_name() {
        for (key, value, named) in [
            ("socket.timeout.ms", "30000", "librdkafka.socket.timeout.ms"),
            (
                "ssl.endpoint.identification.algorithm",
                "none",
                "librdkafka.ssl.endpoint.identification.algorithm",
            ),
            (
                "sasl.kerberos.service.name",
                "kafka",
                "librdkafka.sasl.kerberos.service.name",
            ),
        ] {
            let mut options: ClientOptions = [("security.protocol", "SSL")].into_iter().collect();
            options.insert(key, value);
            let error = auth_config(&options).unwrap_err();
            assert_eq!(error.key, named, "{error}");
        }
        let mut raw: ClientOptions = [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "OAUTHBEARER"),
        ]
        .into_iter()
        .collect();
        raw.insert("enable.sasl.oauthbearer.unsecure.jwt", "true");
        assert!(
            auth_config(&raw).is_err(),
            "an unsecured token is not taken"
        );
    }
}
