//! Amazon MSK's IAM access control (`sasl_mechanism = "AWS_MSK_IAM"`, feature `msk-iam`): an
//! OAUTHBEARER token that is a SigV4-presigned `kafka-cluster:Connect` request, signed with
//! the AWS credentials of the default chain, as AWS's own signers make it.
//!
//! One [`Signer`] per region for the process, its credentials provider built once (the
//! default chain, which caches and refreshes what it fetched). A token lives 15 minutes, or
//! less when the credentials it was signed with expire first. librdkafka asks for a token when
//! a client starts and again at 80 % of the last one's life: the clients' contexts answer with
//! [`token_for`], whose question names the region ([`MARKER`] in `sasl.oauthbearer.config`);
//! a client that never polls its main queue (the admin client) gets its first token handed
//! over when it is created ([`hand_over`]). A share group's krafka client takes
//! [`Signer::token`] as its token provider.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_config::BehaviorVersion;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;

/// What `sasl.oauthbearer.config` holds for a client whose tokens are MSK IAM's, followed by
/// ` region=<region>` when a region is set.
pub const MARKER: &str = "kafka-dlq:aws-msk-iam";

/// How long a signed request is valid: AWS's signers use 15 minutes.
const EXPIRES: Duration = Duration::from_secs(900);

/// The service the request is signed for.
const SERVICE: &str = "kafka-cluster";

/// How long a client waits for a token (the first one may ask an instance's metadata
/// service or STS).
const WAIT: Duration = Duration::from_secs(20);

/// A token: the value, when it expires (milliseconds since the epoch), and whose it is.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    /// The base64url of the presigned URL.
    pub value: String,
    /// Milliseconds since the epoch: the request's expiry or the credentials', the earlier.
    pub expires_ms: i64,
    /// The principal librdkafka names: the access key id.
    pub principal: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("value", &"<redacted>")
            .field("expires_ms", &self.expires_ms)
            .field("principal", &self.principal)
            .finish()
    }
}

/// Signs MSK IAM tokens for one region.
pub struct Signer {
    region: String,
    credentials: SharedCredentialsProvider,
}

impl Signer {
    /// The process's signer for `region` (the default chain's region when `None`), built on
    /// first use; the error says what is missing (no region, no credentials provider).
    pub fn for_region(region: Option<&str>) -> Result<Arc<Signer>, String> {
        static SIGNERS: OnceLock<Mutex<HashMap<Option<String>, Arc<Signer>>>> = OnceLock::new();
        let key = region.map(str::to_string);
        let mut signers = SIGNERS
            .get_or_init(Mutex::default)
            .lock()
            .expect("signers lock");
        if let Some(signer) = signers.get(&key) {
            return Ok(signer.clone());
        }
        let asked = key.clone();
        let loaded = on_runtime(async move {
            use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
            let https = aws_smithy_http_client::Builder::new()
                .tls_provider(Provider::Rustls(CryptoMode::Ring))
                .build_https();
            let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(https);
            if let Some(region) = asked {
                loader = loader.region(aws_config::Region::new(region));
            }
            let config = loader.load().await;
            let region = config.region().map(|r| r.to_string()).ok_or_else(|| {
                "AWS_MSK_IAM needs the cluster's region: set aws_region (or AWS_REGION)".to_string()
            })?;
            let credentials = config.credentials_provider().ok_or_else(|| {
                "AWS_MSK_IAM found no AWS credentials provider in the default chain".to_string()
            })?;
            Ok::<Signer, String>(Signer {
                region,
                credentials,
            })
        })??;
        let signer = Arc::new(loaded);
        signers.insert(key, signer.clone());
        Ok(signer)
    }

    /// The region it signs for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// A fresh token, signed now with the provider's credentials.
    pub async fn token(&self) -> Result<Token, String> {
        let credentials = self
            .credentials
            .provide_credentials()
            .await
            .map_err(|e| format!("AWS_MSK_IAM could not get AWS credentials: {e}"))?;
        sign(&self.region, &credentials, SystemTime::now())
    }

    /// [`Signer::token`] from synchronous code (librdkafka's callbacks), on a runtime of its
    /// own, waiting at most 20 s.
    pub fn token_blocking(self: &Arc<Self>) -> Result<Token, String> {
        let signer = self.clone();
        on_runtime(async move { signer.token().await })?
    }
}

/// Runs `future` on the signers' own runtime and waits for it, from any thread (an async
/// one too: it does not block on the caller's runtime).
fn on_runtime<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kafka-dlq-msk-iam")
            .enable_all()
            .build()
            .expect("the MSK IAM signer's runtime")
    });
    let (tx, rx) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv_timeout(WAIT)
        .map_err(|_| format!("AWS_MSK_IAM: no token within {} s", WAIT.as_secs()))
}

/// The token presigned for `region` with `credentials` at `now`: `GET
/// https://kafka.<region>.amazonaws.com/?Action=kafka-cluster:Connect` signed with SigV4 in
/// the query (an empty body, valid 15 minutes), a `User-Agent` added after signing, the URL in
/// base64url without padding. It expires with the request or the credentials, the earlier.
pub fn sign(region: &str, credentials: &Credentials, now: SystemTime) -> Result<Token, String> {
    use aws_sigv4::http_request::{
        sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
    };
    use aws_sigv4::sign::v4;
    use base64::Engine as _;

    let mut url = url::Url::parse(&format!("https://kafka.{region}.amazonaws.com/"))
        .map_err(|e| format!("AWS_MSK_IAM: region `{region}` makes no host name: {e}"))?;
    url.query_pairs_mut()
        .append_pair("Action", "kafka-cluster:Connect");
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(EXPIRES);
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| format!("AWS_MSK_IAM: signing parameters: {e}"))?;
    let request = SignableRequest::new(
        "GET",
        url.as_str(),
        std::iter::empty(),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| format!("AWS_MSK_IAM: request to sign: {e}"))?;
    let (instructions, _) = sign(request, &params.into())
        .map_err(|e| format!("AWS_MSK_IAM: signing: {e}"))?
        .into_parts();
    {
        let mut query = url.query_pairs_mut();
        for (name, value) in instructions.params() {
            query.append_pair(name, value);
        }
        query.append_pair(
            "User-Agent",
            concat!("kafka-dlq/", env!("CARGO_PKG_VERSION")),
        );
    }
    let signed_ms = millis(now);
    let mut expires_ms = signed_ms + EXPIRES.as_millis() as i64;
    if let Some(expiry) = credentials.expiry() {
        expires_ms = expires_ms.min(millis(expiry));
    }
    Ok(Token {
        value: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url.as_str()),
        expires_ms,
        principal: credentials.access_key_id().to_string(),
    })
}

fn millis(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The region librdkafka's question (`sasl.oauthbearer.config`) names, when it is one of
/// ours: `Some(None)` for the default chain's region.
pub fn marked_region(config: &str) -> Option<Option<&str>> {
    let rest = config.trim().strip_prefix(MARKER)?;
    Some(rest.trim().strip_prefix("region=").map(str::trim))
}

/// The answer to librdkafka's request for a token of a client whose `sasl.oauthbearer.config`
/// is `config`: an MSK IAM token when it carries the [`MARKER`].
pub fn token_for(config: Option<&str>) -> Result<Token, String> {
    let region = config.and_then(marked_region).ok_or_else(|| {
        "no OAUTHBEARER token source: set oauth_token_endpoint, oauth_client_id and \
         oauth_client_secret (OpenID Connect), or sasl_mechanism = AWS_MSK_IAM"
            .to_string()
    })?;
    Signer::for_region(region)?.token_blocking()
}

/// Hands a client of `config` its first MSK IAM token, when its tokens are MSK IAM's: the
/// admin client never asks for one (it does not poll its main queue).
pub fn hand_over<C: rdkafka::client::ClientContext>(
    config: &rdkafka::ClientConfig,
    client: &rdkafka::client::Client<C>,
) -> Result<(), String> {
    let Some(region) = config
        .get("sasl.oauthbearer.config")
        .and_then(marked_region)
    else {
        return Ok(());
    };
    // A client without brokers connects nowhere (`config check` creates such clients): no
    // token, and no call to AWS.
    if config.get("bootstrap.servers").is_none_or(str::is_empty) {
        return Ok(());
    }
    let token = Signer::for_region(region)?.token_blocking()?;
    rdkafka_oauth_token::set_token(client, &token.value, token.expires_ms, &token.principal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn decode(token: &Token) -> url::Url {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&token.value)
            .unwrap();
        url::Url::parse(std::str::from_utf8(&bytes).unwrap()).unwrap()
    }

    #[test]
    fn a_token_is_a_presigned_connect_request_for_the_regions_cluster() {
        let credentials = Credentials::new("AKIDEXAMPLE", "secret", None, None, "test");
        let at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let token = sign("eu-west-1", &credentials, at).unwrap();
        let url = decode(&token);
        assert_eq!(url.host_str(), Some("kafka.eu-west-1.amazonaws.com"));
        let query: HashMap<String, String> = url.query_pairs().into_owned().collect();
        assert_eq!(query["Action"], "kafka-cluster:Connect");
        assert_eq!(query["X-Amz-Algorithm"], "AWS4-HMAC-SHA256");
        assert_eq!(query["X-Amz-Expires"], "900");
        assert_eq!(query["X-Amz-SignedHeaders"], "host");
        assert!(query["X-Amz-Credential"]
            .starts_with("AKIDEXAMPLE/20270115/eu-west-1/kafka-cluster/aws4_request"));
        assert_eq!(query["X-Amz-Signature"].len(), 64);
        assert!(query["User-Agent"].starts_with("kafka-dlq/"));
        assert_eq!(token.expires_ms, 1_800_000_900_000);
        assert_eq!(token.principal, "AKIDEXAMPLE");
        assert!(!format!("{token:?}").contains(&token.value));
        // The same request at the same time signs the same.
        assert_eq!(sign("eu-west-1", &credentials, at).unwrap(), token);
    }

    #[test]
    fn a_token_expires_no_later_than_its_credentials() {
        let at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let expiring = Credentials::new(
            "ASIAEXAMPLE",
            "secret",
            Some("session".into()),
            Some(at + Duration::from_secs(120)),
            "test",
        );
        let token = sign("us-east-1", &expiring, at).unwrap();
        assert_eq!(token.expires_ms, 1_800_000_120_000);
        let query: HashMap<String, String> = decode(&token).query_pairs().into_owned().collect();
        assert_eq!(query["X-Amz-Security-Token"], "session");
    }

    #[test]
    fn only_our_marker_names_a_region() {
        assert_eq!(
            marked_region("kafka-dlq:aws-msk-iam region=eu-west-1"),
            Some(Some("eu-west-1"))
        );
        assert_eq!(marked_region("kafka-dlq:aws-msk-iam"), Some(None));
        assert_eq!(marked_region("principal=admin"), None);
        assert!(token_for(Some("principal=admin"))
            .unwrap_err()
            .contains("oauth_token_endpoint"));
    }
}
