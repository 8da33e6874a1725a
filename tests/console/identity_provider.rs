//! A real OpenID Connect provider for the console's single sign-on: Ory Hydra (built by
//! ./scripts/test.sh, `HYDRA_BIN`) in memory on loopback, and the login, consent and logout app
//! every Hydra deployment brings (Hydra signs nobody in itself): a page where a person types
//! their name, a consent given for what was asked with the person's groups in the ID token,
//! and sign-out accepted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};

/// Hydra and its login app; both stop when dropped.
pub struct IdentityProvider {
    /// The issuer (`http://127.0.0.1:<port>`).
    pub issuer: String,
    /// The console's client id.
    pub client_id: String,
    /// Its secret.
    pub client_secret: String,
    /// Sign-outs the provider asked its app to accept.
    pub logouts: Arc<AtomicUsize>,
    _hydra: tokio::process::Child,
    app: tokio::task::JoinHandle<()>,
}

impl Drop for IdentityProvider {
    fn drop(&mut self) {
        self.app.abort();
    }
}

#[derive(Clone)]
struct App {
    admin: String,
    http: reqwest::Client,
    /// Each person's groups.
    users: Arc<HashMap<String, Vec<String>>>,
    logouts: Arc<AtomicUsize>,
}

#[derive(Deserialize)]
struct Challenge {
    login_challenge: Option<String>,
    consent_challenge: Option<String>,
    logout_challenge: Option<String>,
}

impl IdentityProvider {
    /// Hydra on free loopback ports, whose people are `users` (name, groups); a client for a
    /// console whose public address is `public_url` (ending in `/`).
    pub async fn start(users: &[(&str, &[&str])], public_url: &str) -> IdentityProvider {
        let hydra_bin = std::env::var("HYDRA_BIN")
            .expect("HYDRA_BIN: Ory Hydra, which ./scripts/test.sh builds");
        let (public, admin, app_port) =
            (super::free_port(), super::free_port(), super::free_port());
        let issuer = format!("http://127.0.0.1:{public}");
        let app_url = format!("http://127.0.0.1:{app_port}");
        let hydra = tokio::process::Command::new(hydra_bin)
            .args(["serve", "all", "--dev", "--sqa-opt-out"])
            .env("DSN", "memory")
            .env("URLS_SELF_ISSUER", &issuer)
            .env("URLS_LOGIN", format!("{app_url}/login"))
            .env("URLS_CONSENT", format!("{app_url}/consent"))
            .env("URLS_LOGOUT", format!("{app_url}/logout"))
            .env(
                "SECRETS_SYSTEM",
                "a-system-secret-for-tests-only-0123456789",
            )
            .env("SERVE_PUBLIC_HOST", "127.0.0.1")
            .env("SERVE_PUBLIC_PORT", public.to_string())
            .env("SERVE_ADMIN_HOST", "127.0.0.1")
            .env("SERVE_ADMIN_PORT", admin.to_string())
            .env("LOG_LEVEL", "warn")
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("Ory Hydra");
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let admin_url = format!("http://127.0.0.1:{admin}");
        let ready = format!("{admin_url}/health/ready");
        assert!(
            super::eventually_async(Duration::from_secs(60), || async {
                http.get(&ready)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            })
            .await,
            "Ory Hydra is ready"
        );
        let client: Value = http
            .post(format!("{admin_url}/admin/clients"))
            .json(&json!({
                "client_name": "kafka-dlq console",
                "grant_types": ["authorization_code"],
                "response_types": ["code"],
                "scope": "openid profile email",
                "redirect_uris": [format!("{public_url}auth/callback")],
                "post_logout_redirect_uris": [public_url],
                "token_endpoint_auth_method": "client_secret_basic",
            }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let users = users
            .iter()
            .map(|(u, g)| (u.to_string(), g.iter().map(|g| g.to_string()).collect()))
            .collect();
        let logouts = Arc::new(AtomicUsize::new(0));
        let state = App {
            admin: admin_url,
            http,
            users: Arc::new(users),
            logouts: logouts.clone(),
        };
        let routes = Router::new()
            .route("/login", get(login_page).post(login))
            .route("/consent", get(consent))
            .route("/logout", get(logout))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", app_port))
            .await
            .unwrap();
        let app = tokio::spawn(async move {
            axum::serve(listener, routes).await.unwrap();
        });
        IdentityProvider {
            issuer,
            client_id: client["client_id"].as_str().expect("a client id").into(),
            client_secret: client["client_secret"].as_str().expect("a secret").into(),
            logouts,
            _hydra: hydra,
            app,
        }
    }
}

impl App {
    /// Accepts a login, consent or logout request: where Hydra sends the browser next.
    async fn accept(&self, flow: &str, challenge: &str, body: Value) -> Response {
        let url = format!(
            "{}/admin/oauth2/auth/requests/{flow}/accept?{flow}_challenge={challenge}",
            self.admin
        );
        let answer: Value = self
            .http
            .put(url)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let to = answer["redirect_to"]
            .as_str()
            .unwrap_or_else(|| panic!("Hydra accepted the {flow}: {answer}"));
        Redirect::to(to).into_response()
    }
}

async fn login_page(Query(q): Query<Challenge>) -> Html<String> {
    let challenge = q.login_challenge.unwrap_or_default();
    Html(format!(
        "<!doctype html><title>Sign in</title><form method=post action=/login>\
         <input type=hidden name=challenge value=\"{challenge}\">\
         <input id=user name=user aria-label=user><button id=login type=submit>Sign in</button></form>"
    ))
}

async fn login(State(app): State<App>, form: String) -> Response {
    let fields: HashMap<String, String> = url::form_urlencoded::parse(form.as_bytes())
        .into_owned()
        .collect();
    // Remembered: the provider keeps a session of its own, which the console's sign-out ends.
    let accept = json!({ "subject": fields["user"], "remember": true, "remember_for": 3600 });
    app.accept("login", &fields["challenge"], accept).await
}

async fn consent(State(app): State<App>, Query(q): Query<Challenge>) -> Response {
    let challenge = q.consent_challenge.unwrap_or_default();
    let request: Value = app
        .http
        .get(format!(
            "{}/admin/oauth2/auth/requests/consent?consent_challenge={challenge}",
            app.admin
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let subject = request["subject"].as_str().unwrap_or_default().to_string();
    let groups = app.users.get(&subject).cloned().unwrap_or_default();
    app.accept(
        "consent",
        &challenge,
        json!({
            "grant_scope": request["requested_scope"],
            "grant_access_token_audience": request["requested_access_token_audience"],
            "session": { "id_token": { "email": format!("{subject}@example.com"), "groups": groups } },
        }),
    )
    .await
}

async fn logout(State(app): State<App>, Query(q): Query<Challenge>) -> Response {
    let challenge = q.logout_challenge.unwrap_or_default();
    app.logouts.fetch_add(1, Ordering::SeqCst);
    app.accept("logout", &challenge, json!({})).await
}
