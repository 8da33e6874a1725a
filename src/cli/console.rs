//! `kafka-dlq console`: the DLQ console's web page and API (see `kafka_dlq::console`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use kafka_dlq::config::secret_setting;
use kafka_dlq::console::access::{parse_tokens, Access, Role};
use kafka_dlq::console::api::Console;
use kafka_dlq::console::grants::{Grant, Subject};
use kafka_dlq::console::sealed_session::SessionKey;
use kafka_dlq::console::single_sign_on::{SingleSignOn, SsoConfig};
use kafka_dlq::console::ConsoleConfig;
use kafka_dlq::outstanding::watch::Watch;
use kafka_dlq::ConfigError;
use tokio_util::sync::CancellationToken;

use super::CliError;

/// Flags of `kafka-dlq console`.
#[derive(Debug, Args)]
pub(super) struct ConsoleArgs {
    /// Bootstrap servers, comma-separated host:port.
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: Option<String>,
    /// A dead-letter topic to show (repeat, or comma-separate); none: every topic the
    /// template names, looked up again as topics are created.
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_TOPICS", value_delimiter = ',')]
    dlq_topic: Vec<String>,
    /// The consumers' dead-letter topic template (`{topic}` standing for the source topic).
    #[arg(long, env = "KAFKA_DLQ_TOPIC", default_value = "{topic}-dlt")]
    dlq_topic_template: String,
    /// Where the page and the API listen.
    #[arg(
        long,
        env = "KAFKA_DLQ_CONSOLE_LISTEN",
        default_value = "127.0.0.1:8090"
    )]
    listen: String,
    /// Viewer tokens: `NAME:TOKEN` or `TOKEN`, comma-separated (secret: never logged).
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_VIEWER_TOKEN", hide_env_values = true)]
    viewer_token: Option<String>,
    /// A file holding the viewer tokens.
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_VIEWER_TOKEN_FILE")]
    viewer_token_file: Option<PathBuf>,
    /// Operator tokens (redrive, discard, edit): `NAME:TOKEN` or `TOKEN`, comma-separated;
    /// the name is who the audit says acted (secret: never logged).
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_OPERATOR_TOKEN", hide_env_values = true)]
    operator_token: Option<String>,
    /// A file holding the operator tokens.
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_OPERATOR_TOKEN_FILE")]
    operator_token_file: Option<PathBuf>,
    /// What a caller without a token may do: `none` (refused) or `viewer`.
    #[arg(
        long,
        env = "KAFKA_DLQ_CONSOLE_ANONYMOUS",
        value_enum,
        default_value = "none"
    )]
    anonymous: Anonymous,
    /// Grants: who (a single sign-on group or user, a token by name, `*`) holds which role
    /// over which DLTs and groups: `SUBJECT ROLE [dlts=PATTERN]... [groups=PATTERN]...
    /// [payloads]` (repeat, or comma-separate; docs/console.md, "Grants").
    #[arg(
        long = "grant",
        env = "KAFKA_DLQ_CONSOLE_GRANTS",
        value_delimiter = ','
    )]
    grants: Vec<String>,
    /// The key sessions are sealed with (at least 32 characters; secret: never logged): every
    /// replica with the same key opens the same sessions, and they survive restarts. None: a
    /// key of the process alone.
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_SESSION_KEY", hide_env_values = true)]
    session_key: Option<String>,
    /// A file holding the session key.
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_SESSION_KEY_FILE")]
    session_key_file: Option<PathBuf>,
    /// Single sign-on: the OpenID Connect issuer (`https://…`; `http://` on loopback only).
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_OIDC_ISSUER")]
    oidc_issuer: Option<String>,
    /// The console's client id at the identity provider.
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_OIDC_CLIENT_ID")]
    oidc_client_id: Option<String>,
    /// Its client secret (secret: never logged); none for a public client (PKCE alone).
    #[arg(
        long,
        env = "KAFKA_DLQ_CONSOLE_OIDC_CLIENT_SECRET",
        hide_env_values = true
    )]
    oidc_client_secret: Option<String>,
    /// A file holding the client secret.
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_OIDC_CLIENT_SECRET_FILE")]
    oidc_client_secret_file: Option<PathBuf>,
    /// The scopes asked for beside `openid` (comma-separated).
    #[arg(
        long,
        env = "KAFKA_DLQ_CONSOLE_OIDC_SCOPES",
        value_delimiter = ',',
        default_value = "profile,email"
    )]
    oidc_scopes: Vec<String>,
    /// The ID token's claim holding the groups that grants name (a dotted path for nested
    /// claims, e.g. `realm_access.roles`).
    #[arg(
        long,
        env = "KAFKA_DLQ_CONSOLE_OIDC_GROUPS_CLAIM",
        default_value = "groups"
    )]
    oidc_groups_claim: String,
    /// The ID token's claim that names the person (in the audit, and `user:` grants);
    /// `preferred_username`, then `sub`, when it is missing.
    #[arg(
        long,
        env = "KAFKA_DLQ_CONSOLE_OIDC_NAME_CLAIM",
        default_value = "email"
    )]
    oidc_name_claim: String,
    /// A CA certificate (PEM) the identity provider's certificate is checked against, beside
    /// the system's.
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_OIDC_CA_LOCATION")]
    oidc_ca_location: Option<PathBuf>,
    /// The address people reach the console at (`https://ops.example.com/dlq/`): the
    /// identity provider sends them back to `<public_url>auth/callback`, and Slack messages
    /// link to it.
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_PUBLIC_URL")]
    public_url: Option<String>,
    /// Redrives and discards of more dead letters than this wait for another operator's
    /// approval (grants marked `four-eyes` make every action of theirs wait).
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_FOUR_EYES_ABOVE")]
    four_eyes_above: Option<u64>,
    /// Where requests for approval and their decisions are posted.
    #[command(flatten)]
    slack: super::monitor::SlackArgs,
    /// Viewers see payloads, keys and header values too (they may hold personal data).
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_SHOW_PAYLOADS")]
    show_payloads: bool,
    /// The path the console is served under behind a reverse proxy, e.g. `/dlq`.
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_PATH_PREFIX", default_value = "")]
    path_prefix: String,
    /// Where redrives, discards and restores are recorded (`dlq history`'s audit topic) and
    /// replay positions kept.
    #[command(flatten)]
    state: super::state::StateArgs,
    /// The only topics a redrive may name as its destination (repeat, or comma-separate);
    /// none: any topic that is not a state, dead-letter, retry or internal topic.
    #[arg(long, env = "KAFKA_DLQ_CONSOLE_REDRIVE_TOPICS", value_delimiter = ',')]
    redrive_topics: Vec<String>,
    /// Redrives refuse records already replayed this many times.
    #[arg(long, default_value_t = 3)]
    max_replays: u32,
    #[command(flatten)]
    connection: super::connection::ConnectionArgs,
    /// The schema registry that Avro, Protobuf and JSON Schema payloads are shown decoded
    /// with, and edited as JSON (docs/schemas.md).
    #[command(flatten)]
    registry: super::schema_registry::RegistryArgs,
}

/// Who may use the console without a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Anonymous {
    /// Nobody.
    None,
    /// Anyone, as a viewer.
    Viewer,
}

impl ConsoleArgs {
    /// Its connection settings.
    pub(super) fn connection_mut(&mut self) -> &mut super::connection::ConnectionArgs {
        &mut self.connection
    }
}

fn tokens(
    value: &Option<String>,
    file: &Option<PathBuf>,
    key: &str,
    role: Role,
) -> Result<Vec<(String, String, Role)>, ConfigError> {
    let Some(list) = secret_setting(key, value.as_deref(), file.as_deref())? else {
        return Ok(Vec::new());
    };
    parse_tokens(&list, role).map_err(|e| ConfigError::new(key, "<redacted>", e))
}

/// The settings checked, without connecting.
pub(super) struct Checked {
    /// What the console reads.
    pub config: ConsoleConfig,
    access: Access,
    sso: Option<SsoConfig>,
    slack: kafka_dlq::monitor::SlackTarget,
    listen: std::net::SocketAddr,
}

/// Checks every setting of `console`.
pub(super) fn check(args: &ConsoleArgs) -> Result<Checked, CliError> {
    let brokers = args
        .brokers
        .clone()
        .filter(|b| !b.trim().is_empty())
        .ok_or_else(|| ConfigError::new("brokers", "", "is required"))?;
    let template = kafka_dlq::dlq::DlqTopic::new(&args.dlq_topic_template)
        .map_err(|r| ConfigError::new("dlq_topic_template", &args.dlq_topic_template, r))?;
    let mut dlq_topics = Vec::new();
    for topic in args
        .dlq_topic
        .iter()
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
    {
        kafka_dlq::dlq::check_topic_name(topic)
            .map_err(|r| ConfigError::new("dlq_topic", topic, r))?;
        if !dlq_topics.iter().any(|t| t == topic) {
            dlq_topics.push(topic.to_string());
        }
    }
    let listen = args.listen.parse().map_err(|e| {
        ConfigError::new("listen", &args.listen, format!("expected host:port ({e})"))
    })?;
    let prefix = args.path_prefix.trim().trim_end_matches('/').to_string();
    if !prefix.is_empty()
        && (!prefix.starts_with('/')
            || prefix.contains(['?', '#', '{', '}', '*', ' '])
            || prefix.contains("//"))
    {
        return Err(ConfigError::new(
            "path_prefix",
            &args.path_prefix,
            "expected a path such as /dlq: starting with /, without ?, #, spaces, braces or *",
        )
        .into());
    }
    let mut all = tokens(
        &args.viewer_token,
        &args.viewer_token_file,
        "viewer_token",
        Role::Viewer,
    )?;
    all.extend(tokens(
        &args.operator_token,
        &args.operator_token_file,
        "operator_token",
        Role::Operator,
    )?);
    let anonymous = match args.anonymous {
        Anonymous::None => None,
        Anonymous::Viewer => Some(Role::Viewer),
    };
    let grants = Grant::parse_list(args.grants.iter().map(String::as_str))
        .map_err(|e| ConfigError::new("grants", "", e))?;
    for grant in &grants {
        if let Subject::Token(name) = &grant.subject {
            if !all.iter().any(|(n, _, _)| n == name) {
                return Err(ConfigError::new(
                    "grants",
                    name,
                    format!("a grant names `token:{name}`, but no token of the token lists has that name"),
                )
                .into());
            }
        }
    }
    let public_url = public_url(args)?;
    let sso = single_sign_on(args, public_url.as_deref())?;
    if sso.is_some()
        && !grants
            .iter()
            .any(|g| !matches!(g.subject, Subject::Token(_)))
    {
        return Err(ConfigError::new(
            "grants",
            "",
            "single sign-on is set (oidc_issuer) but no grant names a group, a user or `*`, so nobody could sign in with it: add --grant (docs/console.md, \"Grants\")",
        )
        .into());
    }
    let mut access = Access::new(all, anonymous).with_grants(grants);
    let session_key = secret_setting(
        "session_key",
        args.session_key.as_deref(),
        args.session_key_file.as_deref(),
    )?;
    if let Some(secret) = session_key {
        let key = SessionKey::from_secret(&secret)
            .map_err(|e| ConfigError::new("session_key", "<redacted>", e))?;
        access = access.with_session_key(key);
    }
    if access.is_closed() && sso.is_none() {
        return Err(ConfigError::new(
            "operator_token",
            "",
            "no token is set, so nobody could sign in: set KAFKA_DLQ_CONSOLE_OPERATOR_TOKEN and/or KAFKA_DLQ_CONSOLE_VIEWER_TOKEN (or their _FILE forms), set up single sign-on (--oidc-issuer), or allow --anonymous viewer",
        )
        .into());
    }
    let mut redrive_topics = Vec::new();
    for topic in args
        .redrive_topics
        .iter()
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
    {
        kafka_dlq::dlq::check_topic_name(topic)
            .map_err(|r| ConfigError::new("redrive_topics", topic, r))?;
        redrive_topics.push(topic.to_string());
    }
    let config = ConsoleConfig {
        librdkafka: args.connection.client_options()?,
        dlq_template: template,
        state: args.state.topics()?,
        redrive_topics,
        show_payloads: args.show_payloads,
        path_prefix: prefix,
        max_replays: args.max_replays,
        schemas: args.registry.codec()?,
        public_url,
        four_eyes_above: args.four_eyes_above,
        ..ConsoleConfig::new(&brokers, dlq_topics)
    };
    let slack = args.slack.target()?;
    kafka_dlq::monitor::Notifier::new(slack.clone())?;
    Ok(Checked {
        config,
        access,
        sso,
        slack,
        listen,
    })
}

/// `--public-url`, checked, ending in `/`.
fn public_url(args: &ConsoleArgs) -> Result<Option<String>, ConfigError> {
    let Some(public) = args.public_url.as_deref().filter(|u| !u.trim().is_empty()) else {
        return Ok(None);
    };
    let parsed = url::Url::parse(public.trim())
        .map_err(|e| ConfigError::new("public_url", public, format!("not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "https" | "http") || parsed.query().is_some() {
        return Err(ConfigError::new(
            "public_url",
            public,
            "expected an http:// or https:// address without a query",
        ));
    }
    let mut url = parsed.to_string();
    if !url.ends_with('/') {
        url.push('/');
    }
    Ok(Some(url))
}

/// The single sign-on settings, checked: `None` without an issuer.
fn single_sign_on(
    args: &ConsoleArgs,
    public_url: Option<&str>,
) -> Result<Option<SsoConfig>, CliError> {
    let Some(issuer) = args.oidc_issuer.as_deref().filter(|i| !i.trim().is_empty()) else {
        return Ok(None);
    };
    let issuer = issuer.trim().to_string();
    let url = url::Url::parse(&issuer)
        .map_err(|e| ConfigError::new("oidc_issuer", &issuer, format!("not a URL: {e}")))?;
    let loopback = |u: &url::Url| match u.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    };
    if url.scheme() != "https" && !(url.scheme() == "http" && loopback(&url)) {
        return Err(ConfigError::new(
            "oidc_issuer",
            &issuer,
            "expected https:// (http:// only on a loopback address)",
        )
        .into());
    }
    let client_id = args
        .oidc_client_id
        .clone()
        .filter(|c| !c.trim().is_empty())
        .ok_or_else(|| ConfigError::new("oidc_client_id", "", "is required with oidc_issuer"))?;
    let client_secret = secret_setting(
        "oidc_client_secret",
        args.oidc_client_secret.as_deref().map(str::trim),
        args.oidc_client_secret_file.as_deref(),
    )?;
    let public_url = public_url
        .ok_or_else(|| {
            ConfigError::new(
                "public_url",
                "",
                "is required with oidc_issuer: the address people reach the console at (the identity provider sends them back to <public_url>auth/callback)",
            )
        })?
        .to_string();
    let ca_pem = match &args.oidc_ca_location {
        None => None,
        Some(path) => Some(
            std::fs::read(path)
                .map_err(|e| ConfigError::new("oidc_ca_location", path.display().to_string(), e))?,
        ),
    };
    let config = SsoConfig {
        issuer,
        client_id,
        client_secret,
        public_url,
        scopes: args
            .oidc_scopes
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty() && s != "openid")
            .collect(),
        groups_claim: args.oidc_groups_claim.trim().to_string(),
        name_claim: args.oidc_name_claim.trim().to_string(),
        ca_pem,
    };
    // The CA is read now, so a bad one stops the start.
    SingleSignOn::new(config.clone()).map_err(|e| ConfigError::new("oidc_ca_location", "", e))?;
    Ok(Some(config))
}

/// Serves the console until SIGINT or SIGTERM.
pub(super) async fn run(args: ConsoleArgs) -> Result<(), CliError> {
    let checked = check(&args)?;
    let listener = tokio::net::TcpListener::bind(checked.listen)
        .await
        .with_context(|| format!("cannot listen on --listen {}", checked.listen))
        .map_err(CliError::Runtime)?;
    serve(
        checked.config,
        checked.access,
        checked.sso,
        checked.slack,
        listener,
        super::shutdown_signal(),
    )
    .await
}

/// Serves the console of `config` on `listener` until `shutdown`.
pub(super) async fn serve(
    config: ConsoleConfig,
    access: Access,
    sso: Option<SsoConfig>,
    slack: kafka_dlq::monitor::SlackTarget,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), CliError> {
    let address = listener
        .local_addr()
        .map_err(|e| CliError::Runtime(e.into()))?;
    let url = format!("http://{address}{}/", config.path_prefix);
    tracing::info!(event = "console_listening", %url, topics = ?config.dlq_topics,
        "the DLQ console serves {url}");
    let config = Arc::new(config);
    {
        let mut client = rdkafka::ClientConfig::new();
        client.set("bootstrap.servers", &config.brokers);
        config.librdkafka.apply(&mut client);
        let (brokers, state) = (config.brokers.clone(), config.state.clone());
        tokio::spawn(async move {
            kafka_dlq::state::topics::warn(&client, &brokers, &state).await;
        });
    }
    let watch = Watch::new(Arc::new(config.source()));
    let stop = CancellationToken::new();
    let watcher = tokio::spawn(watch.clone().run(stop.clone()));
    let mut console = Console::new(config, Arc::new(access), watch);
    if let Some(sso) = sso {
        let sso = SingleSignOn::new(sso)
            .map_err(|e| CliError::Runtime(anyhow::anyhow!("single sign-on: {e}")))?;
        console = console.with_single_sign_on(sso);
    }
    let notifier = kafka_dlq::monitor::Notifier::new(slack).map_err(CliError::Config)?;
    if notifier.is_slack() {
        console = console.with_slack(notifier);
    }
    let follower = {
        let (console, stop) = (console.clone(), stop.clone());
        tokio::spawn(async move { console.follow_redrives(stop).await })
    };
    let routes = console.clone().router();
    let stopping = stop.clone();
    let result = kafka_dlq::server::serve_router(
        listener,
        routes,
        async move {
            shutdown.await;
            stopping.cancel();
        },
        Duration::from_secs(5),
    )
    .await;
    stop.cancel();
    console.stop_redrives(Duration::from_secs(10)).await;
    let _ = watcher.await;
    let _ = follower.await;
    result
        .context("the console's HTTP server failed")
        .map_err(CliError::Runtime)
}
