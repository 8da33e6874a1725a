//! Delivering alerts: Slack's Web API (`chat.postMessage`, replies in threads, `chat.update`),
//! an incoming webhook, or the log.

use std::fmt;

use slack_morphism::errors::SlackClientError;
use slack_morphism::prelude::*;
use tokio_util::sync::CancellationToken;

use super::blocks::SlackMessage;
use crate::backoff::{ExponentialBackoff, Next};
use crate::config::ConfigError;

/// A secret string (token, webhook URL): shown as `<redacted>` in `Debug` and never logged.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where alerts go.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub enum SlackTarget {
    /// The Web API: a bot token and a channel; `api_url` is Slack's (`https://slack.com/api`)
    /// unless overridden.
    WebApi {
        /// Bot token (`xoxb-…`).
        token: Secret,
        /// Channel id or name.
        channel: String,
        /// The API's base URL, such as `https://slack.com/api`.
        api_url: String,
    },
    /// An incoming webhook URL.
    Webhook {
        /// The webhook URL.
        url: Secret,
    },
    /// No Slack: alert texts go to the log.
    #[default]
    Log,
}

/// Why an alert was not delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeliveryError {
    /// Slack refused it for good (bad token, unknown channel, …); the text went to the log.
    Rejected(String),
    /// Stopped while retrying.
    Stopped,
}

/// Sends alert texts to one [`SlackTarget`], retrying what may succeed later.
pub struct Notifier {
    target: SlackTarget,
    client: Option<SlackClient<SlackClientHyperHttpsConnector>>,
    webhook: Option<url::Url>,
    retry: ExponentialBackoff,
}

impl Notifier {
    /// Checks the target and builds its HTTP client.
    pub fn new(target: SlackTarget) -> Result<Self, ConfigError> {
        let (client, webhook) = match &target {
            SlackTarget::Log => (None, None),
            SlackTarget::WebApi {
                api_url, channel, ..
            } => {
                if channel.trim().is_empty() {
                    return Err(ConfigError::new(
                        "slack_channel",
                        channel,
                        "is required with a bot token",
                    ));
                }
                let parsed = url::Url::parse(api_url)
                    .map_err(|e| ConfigError::new("slack_api_url", api_url, e))?;
                // slack-morphism joins "<base>/<method>".
                let base = parsed.as_str().trim_end_matches('/').to_string();
                (Some(client(Some(&base))?), None)
            }
            SlackTarget::Webhook { url } => {
                let parsed = url::Url::parse(url.expose()).map_err(|e| {
                    ConfigError::new("slack_webhook_url", "<redacted>", format!("not a URL: {e}"))
                })?;
                (Some(client(None)?), Some(parsed))
            }
        };
        Ok(Self {
            target,
            client,
            webhook,
            retry: ExponentialBackoff::infrastructure(),
        })
    }

    /// Whether alerts go to Slack (else to the log).
    pub fn is_slack(&self) -> bool {
        self.client.is_some()
    }

    /// Delivers `message`, as a reply in the thread of `thread` (a message's `ts`) when given
    /// and the target has threads (the Web API; an incoming webhook has none, so the message
    /// is a post of its own there). Returns the new message's `ts` (Web API only). 429 waits
    /// for `Retry-After`; 5xx and network errors are retried with backoff (1 s doubling to
    /// 30 s) until delivered or `cancel` fires; any other refusal is permanent: it is logged
    /// with the text, and reported as [`DeliveryError::Rejected`].
    pub async fn deliver(
        &self,
        message: &SlackMessage,
        thread: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<Option<String>, DeliveryError> {
        self.send(Send::Post { message, thread }, cancel).await
    }

    /// Replaces the message `ts` with `message` (`chat.update`; Web API only: elsewhere
    /// nothing happens). Retried like [`Notifier::deliver`].
    pub async fn update(
        &self,
        ts: &str,
        message: &SlackMessage,
        cancel: &CancellationToken,
    ) -> Result<(), DeliveryError> {
        if !matches!(self.target, SlackTarget::WebApi { .. }) {
            return Ok(());
        }
        self.send(Send::Update { message, ts }, cancel)
            .await
            .map(|_| ())
    }

    /// Whether replies go into threads (the Web API).
    pub fn has_threads(&self) -> bool {
        matches!(self.target, SlackTarget::WebApi { .. })
    }

    async fn send(
        &self,
        send: Send<'_>,
        cancel: &CancellationToken,
    ) -> Result<Option<String>, DeliveryError> {
        let Some(client) = &self.client else {
            let text = match send {
                Send::Post { message, .. } | Send::Update { message, .. } => &message.text,
            };
            tracing::warn!(event = "dlq_alert", channel = "log", "{text}");
            return Ok(None);
        };
        let delivered = crate::backoff::retry(cancel, self.retry.delays(), |mut delays| async move {
            let (message, content) = match send {
                Send::Post { message, .. } | Send::Update { message, .. } => {
                    (message, message.content())
                }
            };
            let result: Result<Option<String>, SlackClientError> =
                match (&self.target, &self.webhook, send) {
                    (SlackTarget::WebApi { token, channel, .. }, _, Send::Post { thread, .. }) => {
                        let token =
                            SlackApiToken::new(SlackApiTokenValue(token.expose().to_string()));
                        let mut request =
                            SlackApiChatPostMessageRequest::new(channel.clone().into(), content);
                        if let Some(ts) = thread {
                            request = request.with_thread_ts(ts.to_string().into());
                        }
                        client
                            .open_session(&token)
                            .chat_post_message(&request)
                            .await
                            .map(|r| Some(r.ts.to_string()))
                    }
                    (SlackTarget::WebApi { token, channel, .. }, _, Send::Update { ts, .. }) => {
                        let token =
                            SlackApiToken::new(SlackApiTokenValue(token.expose().to_string()));
                        let request = SlackApiChatUpdateRequest::new(
                            channel.clone().into(),
                            content,
                            ts.to_string().into(),
                        );
                        client
                            .open_session(&token)
                            .chat_update(&request)
                            .await
                            .map(|_| None)
                    }
                    (_, Some(url), _) => client
                        .post_webhook_message(url, &SlackApiPostWebhookMessageRequest::new(content))
                        .await
                        .map(|_| None),
                    _ => unreachable!("a client exists only for Slack targets"),
                };
            let next = match result {
                Ok(ts) => {
                    tracing::info!(event = "dlq_alert_delivered", channel = "slack");
                    Next::Done(Ok(ts))
                }
                Err(SlackClientError::RateLimitError(e)) => {
                    let wait = e
                        .retry_after
                        .unwrap_or_else(|| delays.next().expect("endless backoff"));
                    tracing::warn!(
                        event = "slack_rate_limited",
                        retry_in_ms = wait.as_millis() as u64
                    );
                    Next::RetryIn(wait)
                }
                Err(e) if is_transient(&e) => {
                    let wait = delays.next().expect("endless backoff");
                    tracing::warn!(event = "slack_delivery_failed", error = %describe(&e),
                        retry_in_ms = wait.as_millis() as u64, "Slack is unavailable; the alert is kept and retried");
                    Next::RetryIn(wait)
                }
                Err(e) => {
                    let reason = describe(&e);
                    tracing::error!(event = "slack_delivery_rejected", error = %reason,
                        "Slack refused the alert; check the token, channel or webhook URL. The alert follows:\n{}", message.text);
                    Next::Done(Err(DeliveryError::Rejected(reason)))
                }
            };
            (delays, next)
        })
        .await;
        delivered.unwrap_or(Err(DeliveryError::Stopped))
    }
}

/// What [`Notifier::send`] sends.
#[derive(Clone, Copy)]
enum Send<'a> {
    Post {
        message: &'a SlackMessage,
        thread: Option<&'a str>,
    },
    Update {
        message: &'a SlackMessage,
        ts: &'a str,
    },
}

fn client(
    api_url: Option<&str>,
) -> Result<SlackClient<SlackClientHyperHttpsConnector>, ConfigError> {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| {
            ConfigError::new(
                "slack",
                "system CA certificates",
                format!("cannot load them ({e}); install the ca-certificates package"),
            )
        })?
        .https_or_http()
        .enable_http1()
        .build();
    let mut connector = SlackClientHyperConnector::with_connector(https);
    if let Some(url) = api_url {
        connector = connector.with_slack_api_url(url);
    }
    Ok(SlackClient::new(connector))
}

fn is_transient(e: &SlackClientError) -> bool {
    match e {
        SlackClientError::HttpError(h) => {
            let s = h.status_code.as_u16();
            s == 408 || s >= 500
        }
        SlackClientError::HttpProtocolError(_)
        | SlackClientError::SystemError(_)
        | SlackClientError::EndOfStream(_) => true,
        SlackClientError::ApiError(a) => {
            matches!(
                a.code.as_str(),
                "internal_error" | "service_unavailable" | "fatal_error" | "request_timeout"
            )
        }
        _ => false,
    }
}

/// The error without anything that could hold a secret (URLs are left out).
fn describe(e: &SlackClientError) -> String {
    match e {
        SlackClientError::ApiError(a) => format!("Slack API error `{}`", a.code),
        SlackClientError::HttpError(h) => format!("HTTP {}", h.status_code),
        SlackClientError::RateLimitError(_) => "rate limited".into(),
        SlackClientError::HttpProtocolError(_) => "HTTP protocol or connection error".into(),
        SlackClientError::SystemError(_) => "network or system error".into(),
        SlackClientError::EndOfStream(_) => "connection closed".into(),
        SlackClientError::ProtocolError(_) => "unexpected response".into(),
        SlackClientError::SocketModeProtocolError(_) => "socket mode error".into(),
    }
}
