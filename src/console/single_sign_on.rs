//! Signing in with an OpenID Connect identity provider: the authorization code flow with PKCE
//! (S256), a nonce, and the `state` bound to the browser by a cookie; the ID token's signature,
//! issuer, audience, expiry and nonce checked (the `openidconnect` crate) before its name and
//! groups claims are read; the provider's sign-out (RP-initiated logout) when it has one.
//!
//! The provider's discovery document and keys are fetched when first needed and again after an
//! hour, or at once when an ID token is signed with a key they do not hold (a key rotated).
//! Manual: `docs/console.md`, "Single sign-on".

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use openidconnect::core::{CoreClient, CoreResponseType};
use openidconnect::{
    AuthenticationFlow, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndSessionUrl,
    IssuerUrl, LogoutRequest, Nonce, PkceCodeChallenge, PkceCodeVerifier, PostLogoutRedirectUrl,
    ProviderMetadataWithLogout, RedirectUrl,
};

/// The client `openidconnect` makes from discovered metadata (its endpoints' typestates).
type Client = openidconnect::Client<
    openidconnect::EmptyAdditionalClaims,
    openidconnect::core::CoreAuthDisplay,
    openidconnect::core::CoreGenderClaim,
    openidconnect::core::CoreJweContentEncryptionAlgorithm,
    openidconnect::core::CoreJsonWebKey,
    openidconnect::core::CoreAuthPrompt,
    openidconnect::StandardErrorResponse<openidconnect::core::CoreErrorResponseType>,
    openidconnect::core::CoreTokenResponse,
    openidconnect::core::CoreTokenIntrospectionResponse,
    openidconnect::core::CoreRevocableToken,
    openidconnect::core::CoreRevocationErrorResponse,
    openidconnect::EndpointSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointMaybeSet,
    openidconnect::EndpointMaybeSet,
>;

/// How an identity provider is used.
#[derive(Clone)]
pub struct SsoConfig {
    /// The issuer (`https://login.example.com/realms/ops`): its
    /// `/.well-known/openid-configuration` is read. `http://` only on a loopback address.
    pub issuer: String,
    /// The console's client id at the provider.
    pub client_id: String,
    /// Its secret (`None`: a public client, PKCE alone).
    pub client_secret: Option<String>,
    /// The console's public address, ending in `/` (`https://ops.example.com/dlq/`): the
    /// provider sends the browser back to `{public_url}auth/callback`, and after signing out
    /// to `{public_url}`.
    pub public_url: String,
    /// The scopes asked for beside `openid`.
    pub scopes: Vec<String>,
    /// The claim holding the groups (a dotted path into nested objects, e.g.
    /// `realm_access.roles`): a list of strings, or one string.
    pub groups_claim: String,
    /// The claim naming the person (`email`); `preferred_username` and then `sub` when it is
    /// missing.
    pub name_claim: String,
    /// A CA certificate (PEM) the provider's certificate is checked against, beside the
    /// system's.
    pub ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for SsoConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SsoConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("public_url", &self.public_url)
            .field("scopes", &self.scopes)
            .field("groups_claim", &self.groups_claim)
            .field("name_claim", &self.name_claim)
            .finish()
    }
}

/// Why a sign-in did not finish.
#[derive(Debug, thiserror::Error)]
pub enum SsoError {
    /// The provider could not be asked (discovery, keys or the token endpoint): 502.
    #[error("the identity provider `{issuer}` did not answer as expected: {why}")]
    Provider {
        /// Its issuer.
        issuer: String,
        /// What failed.
        why: String,
    },
    /// The callback does not belong to a sign-in this browser started (an unknown or expired
    /// `state`, or another browser's): 400.
    #[error("this sign-in was not started here, or took longer than {} minutes: start again", PENDING_LIFETIME.as_secs() / 60)]
    UnknownState,
    /// The provider answered the sign-in with an error (the person refused, for example): 401.
    #[error("the identity provider refused the sign-in: {0}")]
    Refused(String),
    /// The ID token did not verify (signature, issuer, audience, expiry or nonce): 401.
    #[error("the identity provider's ID token did not verify: {0}")]
    Token(String),
}

/// Someone the provider vouched for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Their name (the name claim).
    pub name: String,
    /// Their groups (the groups claim).
    pub groups: Vec<String>,
    /// The ID token, kept as the hint the provider's sign-out wants.
    pub id_token: String,
}

/// How long a started sign-in waits for its callback.
pub const PENDING_LIFETIME: Duration = Duration::from_secs(600);
/// Sign-ins waiting at most; the oldest goes first.
const MAX_PENDING: usize = 10_000;
/// How long the discovery document and keys are used before they are fetched again.
const METADATA_LIFETIME: Duration = Duration::from_secs(3600);

struct Pending {
    verifier: String,
    nonce: String,
    started: Instant,
}

/// The identity provider, its metadata, and the sign-ins started.
pub struct SingleSignOn {
    config: SsoConfig,
    http: reqwest::Client,
    metadata: tokio::sync::Mutex<Option<(ProviderMetadataWithLogout, Instant)>>,
    pending: Mutex<HashMap<String, Pending>>,
}

impl SingleSignOn {
    /// The provider of `config` (nothing is fetched yet). Its HTTP client follows no redirect
    /// (a provider's endpoints answer where they are) and gives up after 10 s.
    pub fn new(config: SsoConfig) -> Result<SingleSignOn, String> {
        let mut http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10));
        if let Some(pem) = &config.ca_pem {
            let ca = reqwest::Certificate::from_pem(pem)
                .map_err(|e| format!("oidc_ca_location: not a PEM certificate: {e}"))?;
            http = http.add_root_certificate(ca);
        }
        let http = http
            .build()
            .map_err(|e| format!("cannot make the HTTP client: {e}"))?;
        Ok(SingleSignOn {
            config,
            http,
            metadata: tokio::sync::Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
        })
    }

    /// Where the provider sends the browser back.
    pub fn callback_url(&self) -> String {
        format!("{}auth/callback", self.config.public_url)
    }

    fn provider(&self, why: impl std::fmt::Display) -> SsoError {
        SsoError::Provider {
            issuer: self.config.issuer.clone(),
            why: why.to_string(),
        }
    }

    async fn metadata(&self, fresh: bool) -> Result<ProviderMetadataWithLogout, SsoError> {
        let mut cached = self.metadata.lock().await;
        if let Some((metadata, at)) = cached.as_ref() {
            if !fresh && at.elapsed() < METADATA_LIFETIME {
                return Ok(metadata.clone());
            }
        }
        let issuer = IssuerUrl::new(self.config.issuer.clone()).map_err(|e| self.provider(e))?;
        let metadata = ProviderMetadataWithLogout::discover_async(issuer, &self.http)
            .await
            .map_err(|e| self.provider(chain(&e)))?;
        *cached = Some((metadata.clone(), Instant::now()));
        Ok(metadata)
    }

    fn client(&self, metadata: ProviderMetadataWithLogout) -> Result<Client, SsoError> {
        let redirect = RedirectUrl::new(self.callback_url()).map_err(|e| self.provider(e))?;
        Ok(CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(self.config.client_id.clone()),
            self.config.client_secret.clone().map(ClientSecret::new),
        )
        .set_redirect_uri(redirect))
    }

    /// Starts a sign-in: the provider's URL to send the browser to, and the `state` the
    /// browser must come back with (kept in its cookie).
    pub async fn start(&self) -> Result<(String, String), SsoError> {
        let client = self.client(self.metadata(false).await?)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client
            .authorize_url(
                AuthenticationFlow::<CoreResponseType>::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .set_pkce_challenge(challenge);
        for scope in &self.config.scopes {
            request = request.add_scope(openidconnect::Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.url();
        let mut pending = self.pending.lock().expect("pending");
        pending.retain(|_, p| p.started.elapsed() < PENDING_LIFETIME);
        if pending.len() >= MAX_PENDING {
            if let Some(oldest) = pending
                .iter()
                .min_by_key(|(_, p)| p.started)
                .map(|(k, _)| k.clone())
            {
                pending.remove(&oldest);
            }
        }
        pending.insert(
            state.secret().clone(),
            Pending {
                verifier: verifier.secret().clone(),
                nonce: nonce.secret().clone(),
                started: Instant::now(),
            },
        );
        Ok((url.to_string(), state.secret().clone()))
    }

    /// Finishes the sign-in `state` (the callback's, which must equal `cookie_state`, the
    /// browser's): the code exchanged, the ID token verified, the person it names.
    pub async fn finish(
        &self,
        state: &str,
        cookie_state: Option<&str>,
        code: &str,
    ) -> Result<Identity, SsoError> {
        if cookie_state != Some(state) {
            return Err(SsoError::UnknownState);
        }
        let pending = self
            .pending
            .lock()
            .expect("pending")
            .remove(state)
            .filter(|p| p.started.elapsed() < PENDING_LIFETIME)
            .ok_or(SsoError::UnknownState)?;
        let client = self.client(self.metadata(false).await?)?;
        let response = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| self.provider(e))?
            .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier))
            .request_async(&self.http)
            .await
            .map_err(|e| match &e {
                openidconnect::RequestTokenError::ServerResponse(r) => {
                    SsoError::Refused(r.to_string())
                }
                _ => self.provider(chain(&e)),
            })?;
        let id_token = openidconnect::TokenResponse::id_token(&response)
            .ok_or_else(|| SsoError::Token("the token endpoint answered no ID token".into()))?;
        let nonce = Nonce::new(pending.nonce);
        if let Err(first) = id_token.claims(&client.id_token_verifier(), &nonce) {
            // Perhaps signed with a key published since: fetch the keys once more.
            let client = self.client(self.metadata(true).await?)?;
            id_token
                .claims(&client.id_token_verifier(), &nonce)
                .map_err(|e| {
                    SsoError::Token(format!("{first}; with the keys fetched again: {e}"))
                })?;
        }
        let raw = id_token.to_string();
        let claims = payload(&raw).map_err(SsoError::Token)?;
        let name = [self.config.name_claim.as_str(), "preferred_username", "sub"]
            .iter()
            .find_map(|c| claim(&claims, c).and_then(|v| v.as_str().map(str::to_string)))
            .filter(|n| !n.is_empty())
            .ok_or_else(|| SsoError::Token("the ID token names nobody (no sub)".into()))?;
        Ok(Identity {
            name,
            groups: groups(&claims, &self.config.groups_claim),
            id_token: raw,
        })
    }

    /// Where the browser goes to sign out at the provider too, when it has an end-session
    /// endpoint: back to the console afterwards.
    pub async fn sign_out_url(&self, id_token: &str) -> Option<String> {
        let metadata = self.metadata(false).await.ok()?;
        let end: EndSessionUrl = metadata
            .additional_metadata()
            .end_session_endpoint
            .clone()?;
        let mut request =
            LogoutRequest::from(end).set_client_id(ClientId::new(self.config.client_id.clone()));
        if let Ok(back) = PostLogoutRedirectUrl::new(self.config.public_url.clone()) {
            request = request.set_post_logout_redirect_uri(back);
        }
        let mut url = request.http_get_url();
        // The hint is the raw ID token (the crate's setter wants it parsed again).
        url.query_pairs_mut().append_pair("id_token_hint", id_token);
        Some(url.to_string())
    }
}

/// An error and its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The claims of a (verified) JWT, as JSON.
fn payload(jwt: &str) -> Result<serde_json::Value, String> {
    let part = jwt.split('.').nth(1).ok_or("the ID token is not a JWT")?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|e| format!("the ID token's claims are not base64url: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("the ID token's claims are not JSON: {e}"))
}

/// The claim at a dotted `path` (a claim whose own name holds the dots wins).
fn claim<'a>(claims: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    if let Some(v) = claims.get(path) {
        return Some(v);
    }
    path.split('.').try_fold(claims, |v, part| v.get(part))
}

/// The groups a claim holds: its strings (a list, or one string).
fn groups(claims: &serde_json::Value, path: &str) -> Vec<String> {
    match claim(claims, path) {
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect(),
        Some(serde_json::Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn groups_come_from_a_list_a_string_or_a_nested_claim() {
        let claims = json!({
            "groups": ["billing", 7, "ops"],
            "realm_access": {"roles": ["operator"]},
            "team": "payments",
            "cognito:groups": ["a"],
            "https://example.com/groups": ["b"],
        });
        assert_eq!(groups(&claims, "groups"), ["billing", "ops"]);
        assert_eq!(groups(&claims, "realm_access.roles"), ["operator"]);
        assert_eq!(groups(&claims, "team"), ["payments"]);
        assert_eq!(groups(&claims, "cognito:groups"), ["a"]);
        assert_eq!(groups(&claims, "https://example.com/groups"), ["b"]);
        assert!(groups(&claims, "missing.path").is_empty());
    }

    #[test]
    fn a_jwt_payload_reads_as_json() {
        let body = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"x"}"#);
        assert_eq!(payload(&format!("h.{body}.s")).unwrap()["sub"], "x");
        assert!(payload("nodots").is_err());
    }
}
