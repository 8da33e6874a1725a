//! What librdkafka's words about a failed connection mean: [`Refusal`], pure.
//!
//! librdkafka retries a connection that fails, whatever the reason, and says why in an error
//! event or a log line. [`Refusal::of`] reads those words; [`Refusal::is_lasting`] tells a
//! refusal retrying cannot mend (a wrong password) from one it can (a broker down), and
//! [`Refusal::advice`] says what to check.

/// Why a connection was refused, as librdkafka reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The broker refused the SASL user name or password.
    Credentials,
    /// The broker refused the OAuth token, or no token could be had from the token endpoint.
    Token,
    /// The broker's certificate could not be verified (librdkafka does not say why: an
    /// untrusted CA, an expired certificate or another host name; see
    /// `kafka::certificate::diagnose`).
    Unverified,
    /// The broker's certificate is signed by a CA this client does not trust.
    UnknownCa,
    /// The broker's certificate has expired (or is not valid yet).
    ExpiredCertificate,
    /// The broker's certificate is for another host name.
    HostnameMismatch,
    /// The broker wants a client certificate (mutual TLS), or refused the one given.
    ClientCertificate,
    /// The client's protocol is not the listener's (TLS against a plaintext listener, or the
    /// other way round).
    WrongProtocol,
    /// Another TLS failure.
    Tls,
    /// No broker answers at that address.
    Unreachable,
}

impl Refusal {
    /// The refusal librdkafka's error text `text` describes, if it is one.
    pub fn of(text: &str) -> Option<Refusal> {
        let t = text.to_ascii_lowercase();
        let has = |s: &str| t.contains(s);
        Some(
            if has("oauthbearer") || has("invalid_token") || has("oidc") || has("token endpoint") {
                Refusal::Token
            } else if has("sasl authentication error")
                || has("invalid credentials")
                || has("invalid username or password")
            {
                Refusal::Credentials
            } else if has("certificate has expired") || has("certificate is not yet valid") {
                Refusal::ExpiredCertificate
            } else if has("hostname mismatch") || has("ip address mismatch") {
                Refusal::HostnameMismatch
            } else if has("unable to get local issuer certificate")
                || has("self-signed certificate")
                || has("self signed certificate")
                || has("unable to get issuer certificate")
            {
                Refusal::UnknownCa
            } else if has("certificate verify failed") || has("could not be verified") {
                Refusal::Unverified
            } else if has("certificate required")
                || has("bad certificate")
                || has("unknown ca")
                || has("ssl.certificate.location")
                || has("ssl.key")
            {
                Refusal::ClientCertificate
            } else if has("incorrect security.protocol")
                || (has("disconnected") && has("apiversion_query"))
                || has("wrong version number")
                || has("packet length too long")
                || has("record layer failure")
            {
                Refusal::WrongProtocol
            } else if has("ssl handshake failed") || has("ssl:") {
                Refusal::Tls
            } else if has("connection refused")
                || has("brokers are down")
                || has("broker connections are down")
                || has("failed to resolve")
                || has("connect to")
            {
                Refusal::Unreachable
            } else {
                return None;
            },
        )
    }

    /// Whether retrying can help: a broker that is down may come up, a wrong password never
    /// turns right.
    pub fn is_lasting(self) -> bool {
        !matches!(self, Refusal::Unreachable)
    }

    /// What to check, in a few words.
    pub fn advice(self) -> &'static str {
        match self {
            Refusal::Credentials => "the broker refused the user name or password (check sasl_username, sasl_password and sasl_mechanism)",
            Refusal::Token => "no valid OAuth token: the broker refused it or none could be had (check oauth_token_endpoint, oauth_client_id, oauth_client_secret and oauth_scope; with AWS_MSK_IAM, the AWS credentials and aws_region)",
            Refusal::Unverified => "the broker's certificate could not be verified: its CA is not trusted (set ssl_ca_location), it has expired, or it is for another host name",
            Refusal::UnknownCa => "the broker's certificate is signed by a CA this client does not trust (set ssl_ca_location to the CA's PEM file)",
            Refusal::ExpiredCertificate => "the broker's certificate has expired (or is not valid yet)",
            Refusal::HostnameMismatch => "the broker's certificate is for another host name than the one connected to (use the name the certificate is for in brokers)",
            Refusal::ClientCertificate => "the broker wants a client certificate it trusts (set ssl_certificate_location and ssl_key_location)",
            Refusal::WrongProtocol => "the listener speaks another protocol (check security_protocol: SSL or SASL_SSL for a TLS listener)",
            Refusal::Tls => "the TLS handshake failed",
            Refusal::Unreachable => "no broker answers at that address",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn librdkafkas_words_for_each_refusal() {
        for (text, refusal) in [
            ("sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 3ms in state AUTH_REQ)", Refusal::Credentials),
            ("sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication failed: Invalid username or password (after 2ms in state AUTH_REQ)", Refusal::Credentials),
            ("ssl://127.0.0.1:9094/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified, verify that ssl.ca.location is correctly configured or root CA certificates are installed (install ca-certificates package) (after 4ms in state SSL_HANDSHAKE)", Refusal::Unverified),
            ("ssl://127.0.0.1:9094/bootstrap: Failed to verify broker certificate: unable to get local issuer certificate", Refusal::UnknownCa),
            ("ssl://127.0.0.1:9095/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: certificate has expired (after 3ms in state SSL_HANDSHAKE)", Refusal::ExpiredCertificate),
            ("ssl://127.0.0.1:9096/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: Hostname mismatch (after 3ms in state SSL_HANDSHAKE)", Refusal::HostnameMismatch),
            ("sasl_ssl://127.0.0.1:9097/bootstrap: SASL authentication error: {\"status\":\"invalid_token\"} (after 5ms in state AUTH_REQ)", Refusal::Token),
            ("Failed to acquire SASL OAUTHBEARER token: Must supply an unexpired token", Refusal::Token),
            ("127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)", Refusal::Unreachable),
            ("127.0.0.1:33169/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN (after 59ms in state APIVERSION_QUERY)", Refusal::WrongProtocol),
            ("127.0.0.1:9093/bootstrap: Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol configuration (connecting to a SSL listener?) or broker version is < 0.10 (see api.version.request) (after 2ms in state APIVERSION_QUERY)", Refusal::WrongProtocol),
            ("ssl://127.0.0.1:9098/bootstrap: SSL handshake failed: ssl/record/rec_layer_s3.c:1605: error:0A00045C:SSL routines::tlsv13 alert certificate required: SSL alert number 116 (after 3ms in state SSL_HANDSHAKE)", Refusal::ClientCertificate),
        ] {
            assert_eq!(Refusal::of(text), Some(refusal), "{text}");
        }
        assert_eq!(Refusal::of("Local: Broker transport failure"), None);
        assert!(!Refusal::Unreachable.is_lasting());
        assert!(Refusal::Credentials.is_lasting());
    }
}
