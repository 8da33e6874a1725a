//! Why a broker's certificate is refused. librdkafka says only that it "could not be
//! verified" (OpenSSL's handshake error has no reason in it), whether the CA is unknown, the
//! certificate expired or it names another host. [`diagnose`] asks OpenSSL itself, with the
//! client's CA settings: one TLS handshake with the broker, its verification result read.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use openssl::ssl::{HandshakeError, SslConnector, SslMethod, SslVerifyMode};
use openssl::x509::X509VerifyResult;
use rdkafka::ClientConfig;

use super::refusal::Refusal;

/// How long the handshake may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Why the first broker of `config` presents a certificate this client refuses, when it does:
/// its CA is not trusted, it has expired, or it is for another host name. `None` when the
/// handshake succeeds, fails for another reason, or cannot be made.
pub(super) fn diagnose(config: &ClientConfig) -> Option<Refusal> {
    let broker = config.get("bootstrap.servers")?.split(',').next()?.trim();
    let (host, port) = broker.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let address = (host, port.parse::<u16>().ok()?)
        .to_socket_addrs()
        .ok()?
        .next()?;
    let mut builder = SslConnector::builder(SslMethod::tls_client()).ok()?;
    match config.get("ssl.ca.location") {
        Some(ca) if ca != "probe" => builder.set_ca_file(ca).ok()?,
        _ => builder.set_default_verify_paths().ok()?,
    }
    builder.set_verify(SslVerifyMode::PEER);
    let connector = builder.build();
    let mut ssl = connector.configure().ok()?;
    let verify_host = config
        .get("ssl.endpoint.identification.algorithm")
        .is_none_or(|a| a.eq_ignore_ascii_case("https"));
    ssl.set_verify_hostname(verify_host);
    let stream = TcpStream::connect_timeout(&address, TIMEOUT).ok()?;
    stream.set_read_timeout(Some(TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(TIMEOUT)).ok()?;
    match ssl.connect(host, stream) {
        Ok(_) => None,
        Err(HandshakeError::Failure(handshake)) => {
            let verified: X509VerifyResult = handshake.ssl().verify_result();
            of_verify_code(verified.as_raw())
        }
        Err(_) => None,
    }
}

/// The refusal OpenSSL's verification result `code` (an `X509_V_ERR_*` of
/// `openssl/x509_vfy.h`) stands for.
fn of_verify_code(code: i32) -> Option<Refusal> {
    Some(match code {
        0 => return None,
        9 | 10 => Refusal::ExpiredCertificate,
        62 | 64 => Refusal::HostnameMismatch,
        2 | 18 | 19 | 20 | 21 => Refusal::UnknownCa,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssls_verification_results_name_the_refusal() {
        for (code, refusal) in [
            (10, Some(Refusal::ExpiredCertificate)),
            (9, Some(Refusal::ExpiredCertificate)),
            (62, Some(Refusal::HostnameMismatch)),
            (20, Some(Refusal::UnknownCa)),
            (19, Some(Refusal::UnknownCa)),
            (0, None),
        ] {
            assert_eq!(of_verify_code(code), refusal, "{code}");
        }
    }
}
