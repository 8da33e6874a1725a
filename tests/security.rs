//! Production clusters: the recipes of docs/connecting.md, run as a user runs them (the real
//! `kafka-dlq` binary, its config file or its variables) against an Apache Kafka broker with a
//! listener set up each way: TLS from a CA this test makes, mutual TLS with an encrypted key,
//! SASL/PLAIN and SCRAM over TLS (SCRAM users added when the storage is formatted), and
//! OAUTHBEARER validated against the JWKS of a token endpoint on loopback. And the ways a
//! connection is refused: each one line naming the cause, at once, and no secret in any output.

mod common;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use common::security::{self, Listener, Oidc, Pki};
use common::{
    committed, create_topic, eventually, produce, read_all, serve_on_loopback, unique, Kafka, Out,
};

const WAIT: Duration = Duration::from_secs(60);

/// The binary's secured broker and what its clients need.
struct Secured {
    kafka: Kafka,
    pki: Pki,
    oidc: &'static Oidc,
}

fn secured() -> &'static Secured {
    static SECURED: OnceLock<Secured> = OnceLock::new();
    SECURED.get_or_init(|| {
        common::init_logs();
        let fixture = security::fixture();
        let kafka = security::start_secured(&fixture.pki, fixture.oidc, false)
            .unwrap_or_else(|e| panic!("{e}"));
        kafka.keep_log_on_panic();
        Secured {
            kafka,
            pki: fixture.pki.clone(),
            oidc: fixture.oidc,
        }
    })
}

/// The plaintext listener: the test's own clients set up and check through it.
fn plain() -> String {
    secured().kafka.brokers()
}

/// A recipe of docs/connecting.md: its config file and its variables, as the page has them.
fn recipe(name: &str) -> (toml::Table, Vec<(String, String)>) {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/connecting.md"))
        .unwrap();
    let marker = format!("<!-- recipe: {name} -->");
    let mut file = None;
    let mut vars = Vec::new();
    for (i, _) in page.match_indices(&marker) {
        let rest = &page[i + marker.len()..];
        let start = rest.find("```").expect("a code block after the marker");
        let block = &rest[start..];
        let body_start = block.find('\n').unwrap() + 1;
        let body_end = block[body_start..].find("```").unwrap() + body_start;
        let body = &block[body_start..body_end];
        if block.starts_with("```toml") {
            file = Some(body.parse::<toml::Table>().expect("the recipe's TOML"));
        } else {
            for line in body.lines() {
                let line = line
                    .trim()
                    .strip_prefix("export ")
                    .expect("export NAME=value");
                let (name, value) = line.split_once('=').unwrap();
                let value = value
                    .strip_prefix('\'')
                    .and_then(|v| v.strip_suffix('\''))
                    .or_else(|| value.strip_prefix('"').and_then(|v| v.strip_suffix('"')))
                    .unwrap_or(value);
                vars.push((name.to_string(), value.to_string()));
            }
        }
    }
    (file.unwrap_or_else(|| panic!("no recipe {name}")), vars)
}

/// A recipe's listener on the test broker, and the secrets the test has for what the page
/// leaves to the reader.
struct Local {
    listener: Listener,
    user: &'static str,
    password: &'static str,
}

fn local(name: &str) -> Local {
    let (listener, user, password) = match name {
        "confluent-cloud" => (Listener::SaslSsl, security::USER, security::PASSWORD),
        "msk-scram" | "redpanda-cloud" => {
            (Listener::SaslSsl, security::USER, security::SCRAM_PASSWORD)
        }
        "event-hubs" => (
            Listener::SaslSsl,
            security::EVENT_HUBS_USER,
            security::EVENT_HUBS_PASSWORD,
        ),
        "aiven" => (Listener::Mtls, "", ""),
        "oidc" => (Listener::Oauth, "", ""),
        "private-ca" => (Listener::Ssl, "", ""),
        "msk-iam" => (Listener::MskIam, "", ""),
        other => panic!("no listener for {other}"),
    };
    Local {
        listener,
        user,
        password,
    }
}

/// The test's value for a setting the recipe gives (by its file key), or the recipe's own.
fn test_value(name: &str, key: &str, given: &str) -> String {
    let s = secured();
    let l = local(name);
    match key {
        "brokers" => s.kafka.listener(l.listener.name()),
        "sasl_username" => l.user.to_string(),
        "sasl_password" => l.password.to_string(),
        "ssl_ca_location" => s.pki.ca(),
        "ssl_certificate_location" => s.pki.client_certificate(),
        "ssl_key_location" => s.pki.client_key(),
        "ssl_key_password" => security::CLIENT_KEY_PASSWORD.to_string(),
        "oauth_token_endpoint" => s.oidc.token_endpoint(),
        "oauth_client_id" => security::OIDC_CLIENT_ID.to_string(),
        "oauth_client_secret" => security::OIDC_CLIENT_SECRET.to_string(),
        _ => given.to_string(),
    }
}

/// The recipe's config file with the test's values, written to a file of its own.
fn recipe_file(name: &str) -> tempfile::NamedTempFile {
    let (table, _) = recipe(name);
    let mut text = String::new();
    for (key, value) in table {
        let given = value.as_str().unwrap_or_default().to_string();
        // A JSON string is a TOML basic string.
        let value = serde_json::to_string(&test_value(name, &key, &given)).unwrap();
        text.push_str(&format!("{key} = {value}\n"));
    }
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

/// The recipe's variables with the test's values.
fn recipe_vars(name: &str) -> Vec<(String, String)> {
    let (_, vars) = recipe(name);
    let key_of = |var: &str| match var {
        "KAFKA_BROKERS" => "brokers".to_string(),
        "AWS_REGION" => "aws_region".to_string(),
        other => other
            .strip_prefix("KAFKA_")
            .unwrap_or(other)
            .to_ascii_lowercase(),
    };
    vars.into_iter()
        .map(|(var, value)| {
            let key = key_of(&var);
            (var, test_value(name, &key, &value))
        })
        .collect()
}

/// The system's CA store, as OpenSSL and rustls read it: the test CA (the recipes of public
/// clouds set no `ssl_ca_location`).
fn system_store() -> (&'static str, String) {
    ("SSL_CERT_FILE", secured().pki.ca())
}

/// What the processes of recipe `name` find in their environment: the system's CA store (the
/// test CA) and, for MSK IAM, the AWS credentials the default chain reads first (and nothing
/// of this machine's own AWS set-up).
fn recipe_env(name: &str) -> Vec<(String, String)> {
    let (store, ca) = system_store();
    let mut env = vec![(store.to_string(), ca)];
    if name == "msk-iam" {
        for (var, value) in [
            ("AWS_ACCESS_KEY_ID", security::AWS_ACCESS_KEY_ID),
            ("AWS_SECRET_ACCESS_KEY", security::AWS_SECRET_ACCESS_KEY),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("AWS_CONFIG_FILE", "/nonexistent/aws-config"),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                "/nonexistent/aws-credentials",
            ),
        ] {
            env.push((var.to_string(), value.to_string()));
        }
    }
    env
}

/// Fails when `text` holds any secret of the test.
fn assert_no_secret(what: &str, text: &str) {
    for secret in security::SECRETS {
        assert!(
            !text.contains(secret),
            "{what} shows a secret ({secret}):\n{text}"
        );
    }
}

#[derive(Clone, Default)]
struct Target {
    bodies: Arc<Mutex<Vec<String>>>,
}

impl Target {
    /// Serves the target on loopback: its URL.
    async fn serve(&self) -> String {
        let router = Router::new()
            .route("/events", post(answer))
            .with_state(self.clone());
        format!("http://{}/events", serve_on_loopback(router).await)
    }

    fn count(&self, body: &str) -> usize {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|b| *b == body)
            .count()
    }
}

/// `ok…` → 200, `bad…` → 400.
async fn answer(State(target): State<Target>, body: String) -> StatusCode {
    target.bodies.lock().unwrap().push(body.clone());
    if body.starts_with("bad") {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    }
}

/// A Slack incoming webhook on loopback: counts what is posted.
async fn slack(State(posted): State<Arc<Mutex<Vec<String>>>>, body: String) -> &'static str {
    posted.lock().unwrap().push(body);
    "ok"
}

/// Runs `kafka-dlq` with `args` and `env`: exit code, stdout, stderr.
fn cli(args: &[&str], env: &[(String, String)]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args(args)
        .envs(env.iter().cloned())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// The recipe `name`, end to end: `kafka-dlq run` (and the monitor in it) with the recipe's
/// config file handles the good records and dead-letters the bad one, its group commits to
/// the end, the monitor alerts, `dlq list` and `dlq replay` work through the same file, and
/// `config check --connect` with the recipe's variables connects and finds the topic. No
/// output carries a secret.
async fn recipe_runs_end_to_end(name: &str) {
    let topic = unique(name);
    let dlq = format!("{topic}-dlt");
    let group = unique("g");
    create_topic(&plain(), &topic, 2).await;
    produce(
        &plain(),
        &topic,
        vec![
            Out::new(0, "ok-1"),
            Out::new(1, "bad-2"),
            Out::new(1, "ok-3"),
        ],
    )
    .await;
    let target = Target::default();
    let url = target.serve().await;
    let posted = Arc::new(Mutex::new(Vec::new()));
    let webhook = format!(
        "http://{}/hook",
        serve_on_loopback(
            Router::new()
                .route("/hook", post(slack))
                .with_state(posted.clone())
        )
        .await
    );
    let file = recipe_file(name);
    let config = file.path().display().to_string();
    let log_path = std::env::temp_dir().join(format!("{group}.log"));
    let env = recipe_env(name);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args([
            "--config",
            &config,
            "run",
            "--group-id",
            &group,
            "--topics",
            &topic,
        ])
        .args([
            "--target-url",
            &url,
            "--metrics-addr",
            "127.0.0.1:0",
            "--max-retries",
            "0",
        ])
        .args([
            "--monitor",
            "--slack-webhook-url",
            &webhook,
            "--window-ms",
            "500",
        ])
        .args(["--check-interval-ms", "500", "--min-interval-ms", "0"])
        .args(["--monitor-group-id", &unique("monitor")])
        .envs(env.iter().cloned())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log_path).unwrap()))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let logs = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let settled = eventually(WAIT, || {
        committed(&plain(), &group, &topic, 2) == HashMap::from([(0, 1), (1, 2)])
    })
    .await;
    assert!(
        settled,
        "{name}: the group did not commit to the end; logs:\n{}",
        logs()
    );
    assert_eq!(target.count("ok-1"), 1, "{name}");
    assert_eq!(target.count("ok-3"), 1, "{name}");
    let dead = read_all(&plain(), &dlq);
    assert_eq!(dead.len(), 1, "{name}: one dead letter");
    assert!(
        eventually(WAIT, || !posted.lock().unwrap().is_empty()).await,
        "{name}: the monitor did not alert; logs:\n{}",
        logs()
    );

    let (code, listed, err) = cli(
        &[
            "--config",
            &config,
            "dlq",
            "list",
            "--dlq-topic",
            &dlq,
            "--json",
        ],
        &env,
    );
    assert_eq!(code, 0, "{name}: dlq list: {err}");
    assert_eq!(listed.lines().count(), 1, "{name}: {listed}");
    assert!(
        listed.contains("bad-2") || listed.contains(&format!("{topic}-1-0")),
        "{listed}"
    );
    let (code, replayed, err) = cli(
        &["--config", &config, "dlq", "replay", "--dlq-topic", &dlq],
        &env,
    );
    assert_eq!(code, 0, "{name}: dlq replay: {err}");
    // The group's redrive topic: the sidecar gets the dead letter again.
    assert!(
        eventually(WAIT, || target.count("bad-2") == 2).await,
        "{name}: the replayed record did not come back; logs:\n{}",
        logs()
    );

    let mut vars = recipe_vars(name);
    vars.extend(env.iter().cloned());
    let (code, checked, err) = cli(
        &[
            "config",
            "check",
            "--connect",
            "run",
            "--group-id",
            &group,
            "--topics",
            &topic,
            "--target-url",
            &url,
        ],
        &vars,
    );
    assert_eq!(
        code, 0,
        "{name}: config check --connect with the recipe's variables: {checked}{err}"
    );
    assert!(checked.contains("# connected to"), "{checked}");
    assert!(
        checked.contains(&format!("# topic `{topic}`: visible")),
        "{checked}"
    );

    let status = common::terminate(&mut child).await;
    let logs = logs();
    let _ = std::fs::remove_file(&log_path);
    assert_eq!(status.code(), Some(0), "{name}: clean exit; logs:\n{logs}");
    for (what, text) in [
        ("the sidecar's log", &logs),
        ("dlq list", &listed),
        ("dlq replay", &replayed),
        ("config check", &checked),
        ("errors", &err),
    ] {
        assert_no_secret(&format!("{name}: {what}"), text);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_cloud_recipe_sasl_plain_over_tls_with_the_system_ca_store() {
    recipe_runs_end_to_end("confluent-cloud").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msk_scram_recipe_scram_sha_512_over_tls() {
    recipe_runs_end_to_end("msk-scram").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redpanda_cloud_recipe_scram_sha_256_over_tls() {
    recipe_runs_end_to_end("redpanda-cloud").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_hubs_recipe_connection_string_as_the_plain_password() {
    recipe_runs_end_to_end("event-hubs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aiven_recipe_mutual_tls_with_an_encrypted_key() {
    recipe_runs_end_to_end("aiven").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msk_iam_recipe_tokens_signed_with_the_default_chains_credentials() {
    recipe_runs_end_to_end("msk-iam").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_ca_recipe_tls_with_the_companys_ca() {
    recipe_runs_end_to_end("private-ca").await;
}

/// OAUTHBEARER: the recipe end to end, while the broker re-authenticates every connection
/// every 10 s and the tokens live 12 s: the run outlives several tokens, so it only keeps
/// its connections by fetching new ones before the old expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oidc_recipe_fetches_tokens_and_refreshes_them_before_they_expire() {
    let s = secured();
    let before = s.oidc.issued();
    let started = Instant::now();
    recipe_runs_end_to_end("oidc").await;
    // Long enough for a refresh: a token lifetime and a half, the sidecar still running.
    let topic = unique("oidc-long");
    let group = unique("g");
    create_topic(&plain(), &topic, 1).await;
    let target = Target::default();
    let url = target.serve().await;
    let file = recipe_file("oidc");
    let (store, ca) = system_store();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args(["--config", &file.path().display().to_string(), "run"])
        .args([
            "--group-id",
            &group,
            "--topics",
            &topic,
            "--target-url",
            &url,
        ])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .env(store, &ca)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    produce(&plain(), &topic, vec![Out::new(0, "ok-early")]).await;
    assert!(eventually(WAIT, || target.count("ok-early") == 1).await);
    let lifetime = s.oidc.lifetime();
    tokio::time::sleep(lifetime + lifetime / 2).await;
    produce(&plain(), &topic, vec![Out::new(0, "ok-late")]).await;
    assert!(
        eventually(WAIT, || target.count("ok-late") == 1).await,
        "a record produced after the first token expired was handled"
    );
    assert!(
        eventually(WAIT, || committed(&plain(), &group, &topic, 1)
            == HashMap::from([(0, 2)]))
        .await,
        "and committed: the consumer's connection outlived its first token"
    );
    let status = common::terminate(&mut child).await;
    assert_eq!(status.code(), Some(0));
    let issued = s.oidc.issued() - before;
    let tokens_needed = started.elapsed().as_secs() / security::TOKEN_LIFETIME_S;
    assert!(
        issued as u64 > tokens_needed,
        "{issued} tokens over {:?}: tokens were refreshed before they expired",
        started.elapsed()
    );
}

/// One `dlq list` against `listener` with `args` (connection flags), in `env`: it must fail
/// with exit code 1 and one line naming the brokers, the protocol and `cause`, and no secret.
fn refused(listener: Listener, flags: &[&str], env: &[(String, String)], cause: &str) {
    let s = secured();
    let brokers = s.kafka.listener(listener.name());
    let mut args = vec![
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        "any-dlt",
    ];
    args.extend_from_slice(flags);
    let started = Instant::now();
    let (code, out, err) = cli(&args, env);
    assert_eq!(code, 1, "{flags:?}: exit code 1; {out}{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: cannot connect to Kafka at"))
        .unwrap_or_else(|| panic!("{flags:?}: no refusal line in:\n{err}"));
    assert!(line.contains(&brokers), "{line}");
    assert!(
        line.contains(cause),
        "{flags:?}: expected `{cause}` in:\n{line}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{flags:?}: a refusal is reported at once, not after a retry loop ({:?})",
        started.elapsed()
    );
    assert_no_secret("a refused connection", &format!("{out}{err}"));
}

#[test]
fn each_refused_connection_is_one_line_naming_its_cause() {
    let s = secured();
    let ca = s.pki.ca();
    let other_ca = s.pki.other_ca();
    let scram = security::scram_flags(&ca);
    let mut wrong = scram.to_vec();
    wrong.extend(["--sasl-password", "not-the-password"]);
    refused(
        Listener::SaslSsl,
        &wrong,
        &[],
        "(SASL_SSL, SCRAM-SHA-512): the broker refused the user name or password",
    );
    // The real password, from the environment, where the CA is wrong: never printed.
    let env = vec![(
        "KAFKA_SASL_PASSWORD".to_string(),
        security::SCRAM_PASSWORD.to_string(),
    )];
    let mut untrusted = scram.to_vec();
    untrusted[7] = &other_ca;
    refused(
        Listener::SaslSsl,
        &untrusted,
        &env,
        "signed by a CA this client does not trust",
    );
    let tls = ["--security-protocol", "SSL", "--ssl-ca-location", &ca];
    refused(
        Listener::Expired,
        &tls,
        &[],
        "the broker's certificate has expired",
    );
    refused(Listener::WrongHost, &tls, &[], "for another host name");
    refused(Listener::Mtls, &tls, &[], "wants a client certificate");
    refused(
        Listener::Ssl,
        &[],
        &[],
        "the listener speaks another protocol",
    );
    let endpoint = s.oidc.token_endpoint();
    let oauth = [
        "--security-protocol",
        "SASL_SSL",
        "--sasl-mechanism",
        "OAUTHBEARER",
        "--oauth-token-endpoint",
        &endpoint,
        "--oauth-client-id",
        security::OIDC_EXPIRED_CLIENT_ID,
        "--oauth-client-secret",
        security::OIDC_CLIENT_SECRET,
    ];
    refused(
        Listener::Oauth,
        &oauth,
        &[system_store_var()],
        "no valid OAuth token",
    );
    // Amazon MSK IAM with the wrong secret key: the broker's check of the signature says no.
    let msk = security::msk_iam_flags(&ca);
    let mut env = recipe_env("msk-iam");
    for (var, value) in &mut env {
        if var == "AWS_SECRET_ACCESS_KEY" {
            *value = "not-the-secret-key".to_string();
        }
    }
    refused(Listener::MskIam, &msk, &env, "no valid OAuth token");
}

fn system_store_var() -> (String, String) {
    let (var, ca) = system_store();
    (var.to_string(), ca)
}

/// `run` with a wrong password stays up, not ready, and says why: one error line (then a
/// count every 30 s) and the same reason on `/readyz`; never a silent retry loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_a_wrong_password_is_not_ready_and_says_why() {
    let s = secured();
    let ca = s.pki.ca();
    let brokers = s.kafka.listener(Listener::SaslSsl.name());
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log_path = std::env::temp_dir().join(format!("{}.log", unique("refused")));
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args([
            "run",
            "--brokers",
            &brokers,
            "--group-id",
            "g",
            "--topics",
            "t",
        ])
        .args([
            "--target-url",
            "http://127.0.0.1:9/x",
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
        ])
        .args([
            "--security-protocol",
            "SASL_SSL",
            "--sasl-mechanism",
            "SCRAM-SHA-256",
        ])
        .args(["--sasl-username", security::USER, "--ssl-ca-location", &ca])
        .env("KAFKA_SASL_PASSWORD", security::PASSWORD)
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log_path).unwrap()))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let ready = || -> Option<(u16, String)> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", metrics_port)).ok()?;
        use std::io::{Read, Write};
        stream.write_all(b"GET /readyz HTTP/1.0\r\n\r\n").ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        let status = answer.split_whitespace().nth(1)?.parse().ok()?;
        Some((
            status,
            answer
                .split("\r\n\r\n")
                .nth(1)
                .unwrap_or_default()
                .to_string(),
        ))
    };
    let said = eventually(WAIT, || {
        ready().is_some_and(|(status, body)| {
            status == 503 && body.contains("refused the user name or password")
        })
    })
    .await;
    let logs = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(said, "/readyz: {:?}; logs:\n{logs}", ready());
    let (_, body) = ready().unwrap();
    assert!(
        body.contains(&brokers) && body.contains("SASL_SSL, SCRAM-SHA-256"),
        "{body}"
    );
    assert!(child.try_wait().unwrap().is_none(), "it stays up");
    let lines = logs
        .lines()
        .filter(|l| l.contains("kafka_connection_refused"))
        .count();
    assert_eq!(lines, 1, "one line, not one per attempt:\n{logs}");
    let status = common::terminate(&mut child).await;
    assert_eq!(
        status.code(),
        Some(0),
        "a refused consumer still stops cleanly"
    );
    let logs = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    assert_no_secret("the refused sidecar's log", &logs);
}
