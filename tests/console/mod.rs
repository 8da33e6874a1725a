//! What the console tests share: real dead letters from the real consumer, the console
//! binary on a free loopback port, and a small HTTP client.

pub mod browser;
pub mod identity_provider;
pub mod proxy;

use std::time::Duration;

use serde_json::Value;

use crate::common::*;

pub const OPERATOR: &str = "operator-token-0123456789abcdef";
pub const VIEWER: &str = "viewer-token-0123456789abcdef";
pub const WAIT: Duration = Duration::from_secs(60);

/// A source topic, its DLT and the group whose dead letters they hold.
pub struct Dlt {
    pub topic: String,
    pub dlq: String,
    pub group: String,
}

/// Runs the real consumer over `values` (the scripted handler: `perm…` fails for good,
/// `always…` is retried then dead-lettered) until every record is dealt with; a hostile record
/// (markup in its key, header names and values, payload and id, terminal escapes) among them.
pub async fn dead_letters(values: &[&str]) -> Dlt {
    let brokers = brokers();
    let topic = unique("orders");
    let dlq = format!("{topic}-dlt");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    let group = dead_letter_as(&topic, "billing", values).await;
    Dlt { topic, dlq, group }
}

/// Writes `values` (and the hostile record) to `topic` and runs the real consumer over it in a
/// new group named after `service` until every record is dealt with: its dead letters go to
/// `{topic}-dlt` beside any other group's. The group.
pub async fn dead_letter_as(topic: &str, service: &str, values: &[&str]) -> String {
    let brokers = brokers();
    let topic = topic.to_string();
    let group = unique(service);
    let mut records: Vec<Out> = values.iter().map(|v| Out::new(0, v)).collect();
    let mut hostile = Out::new(
        0,
        "perm<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">",
    );
    hostile.key = Some(b"<img src=x onerror=\"window.pwned=3\">\x1b[31m".to_vec());
    hostile.headers = vec![
        (
            b"<script>window.pwned=4</script>".to_vec(),
            Some(b"\x1b]0;pwned\x07<b>".to_vec()),
        ),
        (
            b"id".to_vec(),
            Some(b"<img src=x onerror=\"window.pwned=5\">".to_vec()),
        ),
    ];
    records.push(hostile);
    produce(&brokers, &topic, records).await;
    // Every record of the topic, an earlier group's too: a new group reads them all.
    let end = {
        use rdkafka::consumer::Consumer as _;
        let reader: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .create()
            .unwrap();
        reader
            .fetch_watermarks(&topic, 0, Duration::from_secs(10))
            .unwrap()
            .1
    };
    // The hostile record's `id` header becomes its record id: markup in an id too.
    let config = kafka_dlq::ConsumerConfig {
        id_header: Some("id".into()),
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config, Scripted::default());
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&end))
        .await,
        "the consumer dealt with every record"
    );
    running.stop().await;
    group
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `kafka-dlq console` on `dlq` (`""`: every DLT the template names), killed when dropped;
/// its base URL (with `prefix`).
pub async fn console(dlq: &str, prefix: &str, extra: &[&str]) -> (tokio::process::Child, String) {
    console_on(&brokers(), dlq, prefix, extra).await
}

/// [`console`] on the cluster at `brokers`.
pub async fn console_on(
    brokers: &str,
    dlq: &str,
    prefix: &str,
    extra: &[&str],
) -> (tokio::process::Child, String) {
    console_at(free_port(), brokers, dlq, prefix, extra).await
}

/// [`console_on`], listening on `port`.
pub async fn console_at(
    port: u16,
    brokers: &str,
    dlq: &str,
    prefix: &str,
    extra: &[&str],
) -> (tokio::process::Child, String) {
    let listen = format!("127.0.0.1:{port}");
    let topics: &[&str] = match dlq {
        "" => &[],
        dlq => &["--dlq-topic", dlq],
    };
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args(["console", "--brokers", brokers, "--listen", &listen])
        .args(topics)
        .args(["--path-prefix", prefix])
        .args(extra)
        .env(
            "KAFKA_DLQ_CONSOLE_OPERATOR_TOKEN",
            format!("alice:{OPERATOR}"),
        )
        .env("KAFKA_DLQ_CONSOLE_VIEWER_TOKEN", format!("victor:{VIEWER}"))
        .kill_on_drop(true)
        .spawn()
        .expect("kafka-dlq console");
    let base = format!("http://{listen}{prefix}");
    let health = format!("{base}/healthz");
    assert!(
        eventually_async(WAIT, || async {
            reqwest::get(&health).await.is_ok_and(|r| r.status() == 200)
        })
        .await,
        "the console answers"
    );
    (child, base)
}

pub async fn eventually_async<F: std::future::Future<Output = bool>>(
    timeout: Duration,
    mut check: impl FnMut() -> F,
) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Who calls the API.
#[derive(Clone, Copy)]
pub enum As<'a> {
    Nobody,
    Bearer(&'a str),
    /// A session cookie, with the CSRF token or without.
    Session(&'a str, Option<&'a str>),
}

pub struct Api {
    pub base: String,
    client: reqwest::Client,
}

impl Api {
    pub fn new(base: &str) -> Api {
        Api {
            base: base.to_string(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
        }
    }

    /// An API client that opens a connection per request: behind a load balancer, each goes
    /// to the next replica.
    pub fn per_request(base: &str) -> Api {
        Api {
            base: base.to_string(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .pool_max_idle_per_host(0)
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        }
    }

    /// A GET that reports a failed connection instead of panicking: `None`.
    pub async fn try_get(&self, path: &str, who: As<'_>) -> Option<(u16, Value)> {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let As::Bearer(token) = who {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let response = request.send().await.ok()?;
        let status = response.status().as_u16();
        let text = response.text().await.ok()?;
        Some((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        who: As<'_>,
        body: Option<Value>,
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        match who {
            As::Nobody => {}
            As::Bearer(token) => {
                request = request.header("Authorization", format!("Bearer {token}"))
            }
            As::Session(cookie, csrf) => {
                request = request.header("Cookie", format!("kafka_dlq_session={cookie}"));
                if let Some(csrf) = csrf {
                    request = request.header("X-CSRF-Token", csrf);
                }
            }
        }
        if let Some(body) = body {
            request = request
                .header("Content-Type", "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.expect("the console answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value, headers)
    }

    pub async fn get(&self, path: &str, who: As<'_>) -> (u16, Value) {
        let (s, v, _) = self.send(reqwest::Method::GET, path, who, None).await;
        (s, v)
    }

    pub async fn post(&self, path: &str, who: As<'_>, body: Value) -> (u16, Value) {
        let (s, v, _) = self
            .send(reqwest::Method::POST, path, who, Some(body))
            .await;
        (s, v)
    }

    pub async fn send_with_headers(
        &self,
        method: reqwest::Method,
        path: &str,
        who: As<'_>,
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        self.send(method, path, who, None).await
    }

    pub async fn send_delete(&self, path: &str, who: As<'_>) -> (u16, Value) {
        let (s, v, _) = self.send(reqwest::Method::DELETE, path, who, None).await;
        (s, v)
    }

    /// Signs in with `token`: the session cookie and the CSRF token.
    pub async fn sign_in(&self, token: &str) -> (String, String) {
        let (status, v, headers) = self
            .send(
                reqwest::Method::POST,
                "/api/session",
                As::Nobody,
                Some(serde_json::json!({ "token": token })),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        let cookie = headers
            .get("set-cookie")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
            "{cookie}"
        );
        let id = cookie
            .split(';')
            .next()
            .unwrap()
            .split_once('=')
            .unwrap()
            .1
            .to_string();
        (id, v["csrf_token"].as_str().unwrap().to_string())
    }

    /// The inbox rows once `ready` holds for them.
    pub async fn inbox_until(&self, query: &str, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (status, v) = self
                .get(&format!("/api/inbox?{query}"), As::Bearer(VIEWER))
                .await;
            assert_eq!(status, 200, "{v}");
            let rows = v["rows"].as_array().unwrap().clone();
            if ready(&rows) {
                return rows;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the inbox never got there: {v}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Asks redrive `id` to `pause`, `resume` or `cancel` as `token`'s caller: the status.
    pub async fn control(&self, id: &str, what: &str, token: &str) -> u16 {
        let path = format!("/api/redrives/{id}/{what}");
        self.post(&path, As::Bearer(token), serde_json::json!({}))
            .await
            .0
    }

    /// Waits until redrive `id` is in `state`.
    pub async fn state_becomes(&self, id: &str, state: &str) {
        let path = format!("/api/redrives/{id}");
        let reached = eventually_async(WAIT, || async {
            self.get(&path, As::Bearer(VIEWER)).await.1["state"] == state
        })
        .await;
        assert!(reached, "redrive {id} never became {state}");
    }

    /// Which of the replicas of processes `pids` runs redrive `id`, once it has sent 10.
    pub async fn runner_of(&self, id: &str, pids: &[u32]) -> usize {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            // Through a balancer, a request may meet a replica as it stops: asked again.
            let p = self
                .try_get(&format!("/api/redrives/{id}"), As::Bearer(VIEWER))
                .await
                .map_or(Value::Null, |(_, p)| p);
            let found = (0..pids.len()).find(|i| runs_on(&p, pids[*i]));
            if let Some(i) = found.filter(|_| p["sent"].as_u64().unwrap_or(0) >= 10) {
                return i;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no replica runs the redrive: {p}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Redrive `id`'s progress once it ended.
    pub async fn redrive_end(&self, id: &str) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut last = Value::Null;
        loop {
            // Through a balancer, a request may meet a replica as it stops (the connection
            // closes unanswered): asked again; every answer must be the progress.
            let answer = self
                .try_get(&format!("/api/redrives/{id}"), As::Bearer(VIEWER))
                .await;
            if let Some((status, p)) = answer {
                assert_eq!(status, 200, "{p}");
                if ["done", "cancelled", "failed"].contains(&p["state"].as_str().unwrap()) {
                    return p;
                }
                last = p;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the redrive never ended: {last}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Whether redrive progress `p` names the replica of process `pid` as its runner.
pub fn runs_on(p: &Value, pid: u32) -> bool {
    p["runner"]
        .as_str()
        .is_some_and(|r| r.ends_with(&format!(":{pid}")))
}

/// The payloads on `topic`, sorted and each once, and how many records there were.
pub fn distinct_payloads(brokers: &str, topic: &str) -> (Vec<Vec<u8>>, usize) {
    let mut payloads: Vec<Vec<u8>> = read_all(brokers, topic)
        .iter()
        .map(|m| rdkafka::Message::payload(m).unwrap_or_default().to_vec())
        .collect();
    let records = payloads.len();
    payloads.sort();
    payloads.dedup();
    (payloads, records)
}

/// The row of `fingerprint` (its start) in `rows`.
pub fn row<'a>(rows: &'a [Value], fingerprint: &str) -> Option<&'a Value> {
    rows.iter().find(|r| {
        r["fingerprint"]
            .as_str()
            .is_some_and(|f| f.starts_with(fingerprint))
    })
}

/// The kafka-dlq monitor on `dlq`, alerting a Slack webhook on loopback after windows of
/// `window_ms`: what the webhook was posted, and the monitor's stop and task.
pub struct Monitoring {
    pub posted: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    pub stop: tokio_util::sync::CancellationToken,
    pub running: tokio::task::JoinHandle<Result<(), kafka_dlq::monitor::MonitorError>>,
}

impl Monitoring {
    pub async fn start(dlq: &str, window_ms: u64) -> Self {
        let posted: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let hook = {
            let posted = posted.clone();
            axum::Router::new().route(
                "/hook",
                axum::routing::post(move |body: String| async move {
                    posted.lock().unwrap().push(body);
                    "ok"
                }),
            )
        };
        let slack = serve_on_loopback(hook).await;
        let monitor = kafka_dlq::monitor::Monitor::new(kafka_dlq::monitor::MonitorConfig {
            group_id: unique("monitor"),
            window_ms,
            min_interval_ms: 0,
            check_interval_ms: 300,
            slack: kafka_dlq::monitor::SlackTarget::Webhook {
                url: kafka_dlq::monitor::Secret::new(format!("http://{slack}/hook")),
            },
            ..kafka_dlq::monitor::MonitorConfig::new(&brokers(), [dlq.to_string()])
        })
        .unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let running = tokio::spawn(monitor.run(stop.clone().cancelled_owned()));
        Self {
            posted,
            stop,
            running,
        }
    }

    /// Whether a post said `text`.
    pub fn said(&self, text: &str) -> bool {
        self.posted.lock().unwrap().iter().any(|p| p.contains(text))
    }

    /// What was posted, for a failure's message.
    pub fn posts(&self) -> Vec<String> {
        self.posted.lock().unwrap().clone()
    }

    pub async fn stop(self) {
        self.stop.cancel();
        self.running.await.unwrap().unwrap();
    }
}
