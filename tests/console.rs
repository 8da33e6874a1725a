//! `kafka-dlq console` on Apache Kafka, with dead letters the real consumer wrote: every API
//! endpoint, the roles, CSRF, hostile records, and (tests/console/browser.rs) the page in
//! headless Chromium.

mod common;
#[path = "console/mod.rs"]
mod console;

use common::*;
use console::*;
use serde_json::json;
use std::time::Duration;

const PERMANENT: &str = "permanent: rejected #";
const EXHAUSTED: &str = "retries_exhausted: downstream down";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_groups_redrives_discards_and_audits_real_dead_letters() {
    let dlt = dead_letters(&[
        "perm-1", "always-1", "perm-2", "ok-1", "always-2", "perm-3", "always-3",
    ])
    .await;
    let (_console, base) = console(&dlt.dlq, "/dlq", &[]).await;
    let api = Api::new(&base);
    let brokers = brokers();

    // The inbox: one row per cause, counted.
    let rows = api
        .inbox_until("", |rows| {
            row(rows, PERMANENT).is_some() && row(rows, EXHAUSTED).is_some()
        })
        .await;
    let perm = row(&rows, PERMANENT).unwrap();
    assert_eq!(perm["count"], 3, "{perm}");
    assert_eq!(perm["group"], dlt.group.as_str());
    assert_eq!(perm["source_topic"], dlt.topic.as_str());
    assert_eq!(perm["dlq_topic"], dlt.dlq.as_str());
    assert_eq!(perm["kind"], "permanent");
    assert_eq!(perm["new"], true);
    assert_eq!(perm["sample_ids"].as_array().unwrap().len(), 3);
    assert_eq!(perm["ages"]["hour"], 3);
    assert_eq!(perm["trend"].as_array().unwrap().len(), 24);
    assert_eq!(row(&rows, EXHAUSTED).unwrap()["count"], 3);
    assert_eq!(row(&rows, "permanent: rejected perm<").unwrap()["count"], 1);
    let filtered = api
        .inbox_until("kind=retries_exhausted", |r| r.len() == 1)
        .await;
    assert_eq!(filtered[0]["fingerprint"], EXHAUSTED);
    let (status, v) = api
        .get("/api/inbox?older_than=soon", As::Bearer(VIEWER))
        .await;
    assert_eq!(status, 400, "{v}");
    // The inbox lists causes: a filter of dead letters is refused, never ignored.
    let (status, v) = api.get("/api/inbox?id=some-id", As::Bearer(VIEWER)).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("id"), "{v}");

    // One filter language: the console and `dlq list --where` select the same dead letters,
    // and a bad expression is a 400 naming its column.
    let expression = "kind == 'permanent' && payload.startsWith('perm-') && attempts == 1";
    let (status, v) = api
        .get(
            &format!("/api/dead-letters?where={}", urlencode(expression)),
            As::Bearer(VIEWER),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let mut in_console: Vec<String> = v["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect();
    let (code, out, err) = cli(&[
        "dlq",
        "list",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlt.dlq,
        "--json",
        "--where",
        expression,
    ]);
    assert_eq!(code, 0, "{err}");
    let mut in_list: Vec<String> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| v["envelope"]["id"].as_str().unwrap().to_string())
        .collect();
    in_console.sort();
    in_list.sort();
    assert_eq!(
        in_console.len(),
        3,
        "perm-1 to perm-3, not the hostile perm<…: {v}"
    );
    assert_eq!(in_console, in_list);
    let (status, v) = api
        .get(
            "/api/dead-letters?where=kind%20%3D%3D%3D%201",
            As::Bearer(VIEWER),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().starts_with("where: column"),
        "{v}"
    );

    // Access: nobody is refused, a viewer reads, a wrong token is refused.
    assert_eq!(api.get("/api/inbox", As::Nobody).await.0, 401);
    assert_eq!(
        api.get("/api/inbox", As::Bearer("not-a-token-at-all-0000"))
            .await
            .0,
        401
    );
    assert_eq!(api.get("/api/history", As::Bearer(VIEWER)).await.0, 200);

    // A dead letter in full; hostile text is returned as text, payloads hidden from viewers.
    let hostile = format!("/api/dead-letters?dlq_topic={}&text=perm%3Cscript", dlt.dlq);
    let (status, list) = api.get(&hostile, As::Bearer(VIEWER)).await;
    assert_eq!(status, 200, "{list}");
    let found = list["dead_letters"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{list}");
    let at = format!(
        "/api/dead-letters/{}/{}/{}",
        dlt.dlq, found[0]["partition"], found[0]["offset"]
    );
    let (status, seen_by_viewer) = api.get(&at, As::Bearer(VIEWER)).await;
    assert_eq!(status, 200, "{seen_by_viewer}");
    assert_eq!(seen_by_viewer["hidden"], true);
    assert!(seen_by_viewer.get("payload").is_none() && seen_by_viewer.get("key").is_none());
    let (_, full) = api.get(&at, As::Bearer(OPERATOR)).await;
    assert_eq!(full["payload"]["as"], "text", "{full}");
    assert!(full["payload"]["text"]
        .as_str()
        .unwrap()
        .starts_with("perm<script>window.pwned=1</script>"));
    assert!(full["payload"]["why"]
        .as_str()
        .unwrap()
        .starts_with("not JSON"));
    assert_eq!(
        full["key"]["text"],
        "<img src=x onerror=\"window.pwned=3\">\u{1b}[31m"
    );
    assert_eq!(
        full["headers"][0]["name"]["text"],
        "<script>window.pwned=4</script>"
    );
    assert_eq!(
        full["headers"][0]["value"]["text"],
        "\u{1b}]0;pwned\u{7}<b>"
    );
    assert_eq!(full["id"], "<img src=x onerror=\"window.pwned=5\">");
    assert_eq!(full["group"], dlt.group.as_str());
    assert_eq!(full["source"]["topic"], dlt.topic.as_str());
    assert_eq!(full["attempts"], 1);
    assert_eq!(full["outstanding"], true);
    // Hostile paths.
    for path in [
        format!("/api/dead-letters/{}/0/99999", dlt.dlq),
        "/api/dead-letters/..%2F..%2Fetc%2Fpasswd/0/0".to_string(),
        "/api/dead-letters/%3Cscript%3E/0/0".to_string(),
        format!("/api/dead-letters/{}/-1/0", dlt.dlq),
    ] {
        let (status, v) = api.get(&path, As::Bearer(OPERATOR)).await;
        assert_eq!(status, 404, "{path}: {v}");
    }
    assert_eq!(
        api.get(
            &format!("/api/dead-letters/{}/x/1", dlt.dlq),
            As::Bearer(OPERATOR)
        )
        .await
        .0,
        400
    );

    // A viewer's redrive is refused and sends nothing; a viewer may dry-run.
    let exhausted = json!({ "dlq_topic": dlt.dlq, "fingerprint": EXHAUSTED });
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(VIEWER),
            json!({ "filter": exhausted }),
        )
        .await;
    assert_eq!(status, 403, "{v}");
    let (status, v) = api
        .post(
            "/api/discards",
            As::Bearer(VIEWER),
            json!({ "filter": exhausted, "reason": "x" }),
        )
        .await;
    assert_eq!(status, 403, "{v}");
    let redrive_topic = kafka_dlq::record::retry::redrive_topic(&dlt.topic, &dlt.group);
    let (status, dry) = api
        .post(
            "/api/redrives",
            As::Bearer(VIEWER),
            json!({ "filter": exhausted, "dry_run": true }),
        )
        .await;
    assert_eq!(status, 202, "{dry}");
    let dry = api.redrive_end(dry["id"].as_str().unwrap()).await;
    assert_eq!(
        (dry["state"].as_str(), dry["sent"].as_u64()),
        (Some("done"), Some(3)),
        "{dry}"
    );
    assert_eq!(dry["preview"].as_array().unwrap().len(), 3);
    assert_eq!(dry["preview"][0]["to"], redrive_topic.as_str());
    assert!(
        read_all_if_exists(&brokers, &redrive_topic).is_empty(),
        "a dry run sends nothing"
    );

    // CSRF: a session's action without its token is refused, with it goes through.
    let (cookie, csrf) = api.sign_in(OPERATOR).await;
    let behind_tls = reqwest::Client::new()
        .post(format!("{base}/api/session"))
        .header("X-Forwarded-Proto", "https")
        .header("Content-Type", "application/json")
        .body(json!({ "token": OPERATOR }).to_string())
        .send()
        .await
        .unwrap();
    let set = behind_tls.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        set.ends_with("; Secure"),
        "HTTPS only behind a TLS proxy: {set}"
    );
    let (status, v) = api
        .post(
            "/api/discards",
            As::Session(&cookie, None),
            json!({ "filter": exhausted, "reason": "x" }),
        )
        .await;
    assert_eq!(status, 403, "{v}");
    assert!(v["error"].as_str().unwrap().contains("X-CSRF-Token"), "{v}");
    let (status, _) = api
        .post(
            "/api/discards",
            As::Session(&cookie, Some("forged")),
            json!({ "filter": exhausted, "reason": "x" }),
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(
        api.get("/api/inbox", As::Session(&cookie, None)).await.0,
        200,
        "reading needs no CSRF token"
    );

    // A redrive at a rate, to the failing group's redrive topic.
    let (status, started) = api
        .post(
            "/api/redrives",
            As::Session(&cookie, Some(&csrf)),
            json!({ "filter": exhausted, "destination": "group", "rate": 5 }),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    let id = started["id"].as_str().unwrap().to_string();
    let (status, busy) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": exhausted }),
        )
        .await;
    let done = api.redrive_end(&id).await;
    assert!(
        status == 409 || done["state"] == "done",
        "one redrive per DLT at a time: {busy}"
    );
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(
        (
            done["sent"].as_u64(),
            done["refused"].as_u64(),
            done["failed"].as_u64()
        ),
        (Some(3), Some(0), Some(0)),
        "{done}"
    );
    assert_eq!(done["destinations"][&redrive_topic], 3);
    let sent = read_all(&brokers, &redrive_topic);
    let mut values: Vec<String> = sent
        .iter()
        .map(|m| String::from_utf8_lossy(rdkafka::Message::payload(m).unwrap()).to_string())
        .collect();
    values.sort();
    assert_eq!(values, ["always-1", "always-2", "always-3"]);
    // No longer outstanding: the cause leaves the inbox.
    api.inbox_until("", |rows| row(rows, EXHAUSTED).is_none())
        .await;

    // Discard with a reason; restore it.
    let permanent = json!({ "dlq_topic": dlt.dlq, "fingerprint": PERMANENT });
    let (status, v) = api
        .post(
            "/api/discards",
            As::Bearer(OPERATOR),
            json!({ "filter": permanent, "reason": "  " }),
        )
        .await;
    assert_eq!(status, 400, "a reason is required: {v}");
    let (status, discarded) = api
        .post(
            "/api/discards",
            As::Bearer(OPERATOR),
            json!({ "filter": permanent, "reason": "test orders from the load test" }),
        )
        .await;
    assert_eq!(status, 200, "{discarded}");
    assert_eq!(discarded["discarded"], 3);
    api.inbox_until("", |rows| row(rows, PERMANENT).is_none())
        .await;
    let (_, all) = api
        .get(
            &format!(
                "/api/dead-letters?dlq_topic={}&fingerprint={}&state=all",
                dlt.dlq,
                urlencode(PERMANENT)
            ),
            As::Bearer(VIEWER),
        )
        .await;
    let all = all["dead_letters"].as_array().unwrap().clone();
    assert_eq!(all.len(), 3);
    assert!(all.iter().all(|d| d["outstanding"] == false
        && d["resolution"]["by"] == "discarded"
        && d["resolution"]["reason"] == "test orders from the load test"
        && d["resolution"]["operator"] == "console:alice"));
    let (status, v) = api
        .post(
            &format!(
                "/api/discards/{}/restore",
                discarded["run"].as_str().unwrap()
            ),
            As::Bearer(OPERATOR),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    api.inbox_until("", |rows| {
        row(rows, PERMANENT).is_some_and(|r| r["count"] == 3)
    })
    .await;

    // The history: who did what, with the same runs `dlq history` lists.
    let (_, history) = api.get("/api/history", As::Bearer(VIEWER)).await;
    let runs = history["runs"].as_array().unwrap();
    let actions: Vec<(&str, &str)> = runs
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap(),
                r["operator"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("restore", "console:alice"),
            ("discard", "console:alice"),
            ("replay", "console:alice")
        ],
        "{history}"
    );
    assert_eq!(runs[1]["reason"], "test orders from the load test");
    assert_eq!(runs[2]["replayed"], 3);
    let (code, out, err) = cli(&[
        "dlq",
        "history",
        "--brokers",
        &brokers,
        "--dlq-topic",
        &dlt.dlq,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 3, "{out}");

    // Export: the outstanding dead letters as JSON lines, every one an envelope.
    let export = reqwest::Client::new()
        .get(format!("{base}/api/export?dlq_topic={}", dlt.dlq))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    assert_eq!(export.headers()["content-type"], "application/x-ndjson");
    let lines = export.text().await.unwrap();
    let lines: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "3 permanent and the hostile one");
    assert!(lines.iter().all(|l| l["envelope"]["id"].is_string()));
    assert_eq!(
        api.get(
            &format!("/api/export?dlq_topic={}", dlt.dlq),
            As::Bearer(VIEWER)
        )
        .await
        .0,
        403,
        "payloads are not a viewer's"
    );
    let (status, v) = api
        .get(
            &format!("/api/export?dlq_topic={}&state=everything", dlt.dlq),
            As::Bearer(OPERATOR),
        )
        .await;
    assert_eq!(status, 400, "a state that is no state is refused: {v}");
    let first = &lines[0];
    let (status, one) = api
        .get(
            &format!(
                "/api/dead-letters?dlq_topic={}&records={}@{}",
                dlt.dlq, first["partition"], first["offset"]
            ),
            As::Bearer(VIEWER),
        )
        .await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(
        one["dead_letters"].as_array().unwrap().len(),
        1,
        "the ticked one alone"
    );

    // Edit then redrive one dead letter: the edited payload goes, the original is in the audit.
    let (_, one) = api
        .get(
            &format!(
                "/api/dead-letters?dlq_topic={}&fingerprint={}&limit=1",
                dlt.dlq,
                urlencode(PERMANENT)
            ),
            As::Bearer(VIEWER),
        )
        .await;
    let one = &one["dead_letters"][0];
    let fixed = unique("fixed");
    let (status, started) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlt.dlq, "records": [{ "partition": one["partition"], "offset": one["offset"] }] },
                    "destination": { "topic": fixed }, "payload": "{\"fixed\":true}" }),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    let done = api.redrive_end(started["id"].as_str().unwrap()).await;
    assert_eq!(
        (
            done["state"].as_str(),
            done["sent"].as_u64(),
            done["edited"].as_bool()
        ),
        (Some("done"), Some(1), Some(true)),
        "{done}"
    );
    let arrived = read_all(&brokers, &fixed);
    assert_eq!(arrived.len(), 1);
    assert_eq!(
        rdkafka::Message::payload(&arrived[0]).unwrap(),
        b"{\"fixed\":true}"
    );
    let runs = kafka_dlq::replay::audit::history(
        &brokers,
        &kafka_dlq::kafka::ClientOptions::new(),
        &kafka_dlq::state::StateTopics::default(),
        Some(&dlt.dlq),
    )
    .unwrap()
    .runs;
    let edit = runs
        .iter()
        .find_map(|r| r.edit.clone())
        .expect("the edit is audited");
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    assert_eq!(
        b64.decode(&edit.original).unwrap(),
        one_payload(&api, one).await
    );
    assert_eq!(b64.decode(&edit.edited).unwrap(), b"{\"fixed\":true}");
    api.inbox_until("", |rows| {
        row(rows, PERMANENT).is_some_and(|r| r["count"] == 2)
    })
    .await;

    // Pause, resume and cancel.
    let (_, started) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": permanent, "destination": { "topic": unique("slow") }, "rate": 1 }),
        )
        .await;
    let id = started["id"].as_str().unwrap().to_string();
    assert_eq!(api.control(&id, "pause", OPERATOR).await, 200);
    api.state_becomes(&id, "paused").await;
    assert_eq!(api.control(&id, "resume", OPERATOR).await, 200);
    api.state_becomes(&id, "running").await;
    assert_eq!(api.control(&id, "cancel", VIEWER).await, 403);
    assert_eq!(api.control(&id, "cancel", OPERATOR).await, 200);
    let ended = api.redrive_end(&id).await;
    assert_eq!(ended["state"], "cancelled", "{ended}");
    assert_eq!(api.control(&id, "resume", OPERATOR).await, 409);
    assert_eq!(
        api.get("/api/redrives/nope", As::Bearer(OPERATOR)).await.0,
        404
    );

    // Bad requests say what is wrong.
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": permanent, "destination": "elsewhere" }),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("destination `elsewhere`"),
        "{v}"
    );
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": "other-dlt" } }),
        )
        .await;
    assert_eq!(status, 404, "{v}");
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": { "kind": "sad" } }),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("kind `sad`"), "{v}");

    // The probes, the metrics, the page and its prefix.
    let get = |path: &str| reqwest::get(format!("{base}{path}"));
    assert_eq!(get("/readyz").await.unwrap().status(), 200);
    let metrics = get("/metrics").await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("kafka_dlq_console_outstanding 3"),
        "{metrics}"
    );
    let unserved: Vec<_> = common::dashboard::console_families()
        .difference(&common::dashboard::families_served(&metrics))
        .cloned()
        .collect();
    assert!(
        unserved.is_empty(),
        "the dashboard asks the console for {unserved:?}:\n{metrics}"
    );
    let page = get("/").await.unwrap();
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe"),
        "{csp}"
    );
    assert!(page.text().await.unwrap().contains("assets/console.js"));
    let root = base.trim_end_matches("/dlq");
    let bare = reqwest::get(format!("{root}/dlq"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        bare.contains("<base href=\"/dlq/\">"),
        "links resolve under the prefix: {bare}"
    );
    assert_eq!(
        reqwest::get(format!("{root}/api/inbox"))
            .await
            .unwrap()
            .status(),
        404,
        "only under the prefix"
    );
}

async fn one_payload(api: &Api, one: &serde_json::Value) -> Vec<u8> {
    let (_, full) = api
        .get(
            &format!(
                "/api/dead-letters/{}/{}/{}",
                one["dlq_topic"].as_str().unwrap(),
                one["partition"],
                one["offset"]
            ),
            As::Bearer(OPERATOR),
        )
        .await;
    full["payload"]["text"]
        .as_str()
        .unwrap()
        .as_bytes()
        .to_vec()
}

fn urlencode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

fn read_all_if_exists(brokers: &str, topic: &str) -> Vec<rdkafka::message::OwnedMessage> {
    let consumer: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let metadata = rdkafka::consumer::Consumer::fetch_metadata(
        &consumer,
        Some(topic),
        std::time::Duration::from_secs(10),
    )
    .unwrap();
    if metadata
        .topics()
        .first()
        .is_none_or(|t| t.error().is_some() || t.partitions().is_empty())
    {
        return Vec::new();
    }
    read_all(brokers, topic)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_refuses_to_start_without_a_way_in() {
    let (code, _, err) = cli(&[
        "console",
        "--brokers",
        "127.0.0.1:9",
        "--dlq-topic",
        "x-dlt",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no token is set"), "{err}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-dlq"))
        .args(["console", "--brokers", "127.0.0.1:9"])
        .env("KAFKA_DLQ_CONSOLE_OPERATOR_TOKEN", "short")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("operator_token") && err.contains("at least 16") && !err.contains("short"),
        "{err}"
    );
    let (code, _, err) = cli(&[
        "console",
        "--brokers",
        "b:9092",
        "--anonymous",
        "viewer",
        "--path-prefix",
        "dlq",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("path_prefix"), "{err}");
    // Single sign-on and grants: each bad setting named.
    let sso_at = |issuer: &str, public_url: &str, extra: &[&str]| {
        let mut args = vec![
            "console",
            "--brokers",
            "b:9092",
            "--oidc-issuer",
            issuer,
            "--oidc-client-id",
            "console",
            "--public-url",
            public_url,
        ];
        args.extend_from_slice(extra);
        cli(&args)
    };
    let issuer = "https://login.example.com/realms/ops";
    let sso = |extra: &[&str]| sso_at(issuer, "https://ops.example.com/dlq/", extra);
    let (code, _, err) = sso(&[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("grants") && err.contains("nobody could sign in"),
        "{err}"
    );
    let (code, _, err) = sso(&["--grant", "team:x operator"]);
    assert_eq!(code, 2);
    assert!(err.contains("grant `team:x operator`"), "{err}");
    let (code, _, err) = sso_at(
        "http://login.example.com",
        "https://ops.example.com/dlq/",
        &["--grant", "* viewer"],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("oidc_issuer") && err.contains("loopback"),
        "{err}"
    );
    let (code, _, err) = sso_at(issuer, "ops.example.com", &["--grant", "* viewer"]);
    assert_eq!(code, 2);
    assert!(err.contains("public_url"), "{err}");
    let (code, _, err) = sso(&["--grant", "token:ghost viewer"]);
    assert_eq!(code, 2);
    assert!(err.contains("token:ghost"), "{err}");
}

/// Single sign-on with a real OpenID Connect provider (Ory Hydra and its login app): in
/// Chromium, a person of the billing team signs in, sees only the dead letters of the billing
/// service in a DLT that another service shares, cannot touch the other service's (a selection
/// that reaches past the grant is refused whole, by the API as by the page), acts within it,
/// and signs out at the provider too; a person whom no grant names is turned away with the
/// reason, and a callback this browser did not start is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_signs_in_with_its_identity_provider_and_touches_only_its_services() {
    let dlt = dead_letters(&["perm-1", "perm-2", "always-1"]).await;
    // A second service reads the same topic: its dead letters share the DLT.
    let shipping = dead_letter_as(&dlt.topic, "shipping", &[]).await;
    let port = free_port();
    let public_url = format!("http://127.0.0.1:{port}/dlq/");
    let idp = identity_provider::IdentityProvider::start(
        &[("alice", &["billing-ops"]), ("carol", &["interns"])],
        &public_url,
    )
    .await;
    let secret = std::env::temp_dir().join(unique("oidc-secret"));
    std::fs::write(&secret, format!("{}\n", idp.client_secret)).unwrap();
    let grant = format!("group:billing-ops operator groups={}", dlt.group);
    let (_console, base) = console_at(
        port,
        &brokers(),
        &dlt.dlq,
        "/dlq",
        &[
            "--oidc-issuer",
            &idp.issuer,
            "--oidc-client-id",
            &idp.client_id,
            "--oidc-client-secret-file",
            secret.to_str().unwrap(),
            "--public-url",
            &public_url,
            "--grant",
            &grant,
        ],
    )
    .await;
    let api = Api::new(&base);
    // Every dead letter of both services, as a token of the whole cluster sees them.
    let everything = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        v["dead_letters"]
            .as_array()
            .unwrap_or_else(|| panic!("dead letters: {v}"))
            .clone()
    };
    let all_path = format!(
        "/api/dead-letters?dlq_topic={}&state=all&limit=1000",
        dlt.dlq
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    let all = loop {
        // The console's first look at the cluster may not have ended yet.
        let (status, v) = api.get(&all_path, As::Bearer(VIEWER)).await;
        let all = match status {
            200 => everything(&v),
            _ => Vec::new(),
        };
        if all
            .iter()
            .filter(|d| d["group"] == shipping.as_str())
            .count()
            == 5
        {
            break all;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "both services' dead letters are in the DLT: {all:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    let billing_count = all
        .iter()
        .filter(|d| d["group"] == dlt.group.as_str())
        .count();
    assert_eq!(billing_count, 4, "{all:?}");

    // Signing in at the provider, in the browser.
    let browser = browser::Browser::start().await;
    browser.open(&format!("{base}/")).await;
    browser.wait_count("#sso:not([hidden])", 1).await;
    browser.click("#sso-sign-in").await;
    browser.wait_count("#user", 1).await;
    assert!(browser
        .url()
        .await
        .starts_with(&format!("{}/", idp_app(&browser).await)));
    browser.type_into("#user", "alice").await;
    browser.click("#login").await;
    browser
        .wait_text("#who", |t| t.contains("alice@example.com (operator)"))
        .await;
    // The page shows only the billing service's causes.
    let inbox = browser
        .wait_text("#inbox-table", |t| t.contains(dlt.group.as_str()))
        .await;
    assert!(!inbox.contains(shipping.as_str()), "{inbox}");
    let cookie = browser.cookie("kafka_dlq_session").await;
    assert!(!cookie.is_empty());
    let (status, session) = api.get("/api/session", As::Session(&cookie, None)).await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["name"], "alice@example.com");
    let csrf = session["csrf_token"].as_str().unwrap().to_string();
    let alice = As::Session(&cookie, Some(&csrf));

    // Every answer holds only what the grant covers.
    let (_, v) = api.get(&all_path, alice).await;
    let seen = everything(&v);
    assert_eq!(seen.len(), billing_count, "{v}");
    assert!(seen.iter().all(|d| d["group"] == dlt.group.as_str()), "{v}");
    let (_, v) = api.get("/api/inbox", alice).await;
    let rows = v["rows"].as_array().unwrap();
    assert!(
        !rows.is_empty() && rows.iter().all(|r| r["group"] == dlt.group.as_str()),
        "{v}"
    );
    let counted: u64 = rows.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    let (_, status) = api.get("/api/status", alice).await;
    assert_eq!(status["outstanding"], counted, "{status}");
    let theirs = all
        .iter()
        .find(|d| d["group"] == shipping.as_str())
        .unwrap();
    let one = format!(
        "/api/dead-letters/{}/{}/{}",
        dlt.dlq, theirs["partition"], theirs["offset"]
    );
    assert_eq!(api.get(&one, As::Bearer(VIEWER)).await.0, 200);
    assert_eq!(
        api.get(&one, alice).await.0,
        404,
        "another service's dead letter"
    );
    let (status, export) = api
        .get(
            &format!("/api/export?dlq_topic={}&state=all", dlt.dlq),
            alice,
        )
        .await;
    assert_eq!(status, 200);
    let lines: Vec<&str> = export.as_str().unwrap().lines().collect();
    assert_eq!(lines.len(), billing_count, "{export}");
    assert!(
        lines.iter().all(|l| !l.contains(shipping.as_str())),
        "{export}"
    );

    // Acting: a selection that reaches past the grant is refused whole, and nothing is done.
    let (status, v) = api
        .post(
            "/api/discards",
            alice,
            json!({ "filter": { "dlq_topic": dlt.dlq, "kind": "permanent" }, "reason": "too wide" }),
        )
        .await;
    assert_eq!(status, 403, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("outside your grants"),
        "{v}"
    );
    let (status, v) = api
        .post(
            "/api/redrives",
            alice,
            json!({ "filter": { "dlq_topic": dlt.dlq }, "dry_run": true }),
        )
        .await;
    assert_eq!(status, 403, "{v}");
    let (_, v) = api.get(&all_path, As::Bearer(VIEWER)).await;
    assert!(
        everything(&v).iter().all(|d| d["outstanding"] == true),
        "a refused action resolved nothing: {v}"
    );
    // Within the grant it acts, and the audit names the person.
    let (status, v) = api
        .post(
            "/api/discards",
            alice,
            json!({ "filter": { "dlq_topic": dlt.dlq, "group": dlt.group, "kind": "permanent" }, "reason": "fixed upstream" }),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["discarded"], 3, "{v}");
    let (status, v) = api
        .post(
            "/api/redrives",
            alice,
            json!({ "filter": { "dlq_topic": dlt.dlq, "group": dlt.group, "kind": "retries_exhausted" } }),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    let done = api.redrive_end(v["id"].as_str().unwrap()).await;
    assert_eq!(
        (done["state"].as_str(), done["sent"].as_u64()),
        (Some("done"), Some(1)),
        "{done}"
    );
    // Another service's action (by a token of the whole cluster) is not in the history the
    // billing team sees.
    let (status, v) = api
        .post(
            "/api/discards",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlt.dlq, "group": shipping, "kind": "permanent" }, "reason": "shipping's own" }),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (_, mine) = api.get("/api/history", alice).await;
    let operators: Vec<&str> = mine["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["operator"].as_str().unwrap())
        .collect();
    assert!(operators.contains(&"console:alice@example.com"), "{mine}");
    assert!(!operators.contains(&"console:alice"), "{mine}");
    let (_, whole) = api.get("/api/history", As::Bearer(VIEWER)).await;
    assert!(whole.to_string().contains("shipping's own"), "{whole}");

    // Signing out ends the session and the provider's, and comes back to the console.
    browser.click("#sign-out").await;
    browser.wait_count("#signin:not([hidden])", 1).await;
    assert!(
        browser.url().await.starts_with(&public_url),
        "{}",
        browser.url().await
    );
    assert_eq!(
        idp.logouts.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the provider's sign-out was asked for"
    );
    assert_eq!(api.get("/api/inbox", alice).await.0, 401);

    // Someone no grant names is turned away, saying why.
    browser.click("#sso-sign-in").await;
    browser.wait_count("#user", 1).await;
    browser.type_into("#user", "carol").await;
    browser.click("#login").await;
    let said = browser
        .wait_text("#message", |t| t.contains("no grant names"))
        .await;
    assert!(
        said.contains("carol@example.com") && said.contains("interns"),
        "{said}"
    );
    assert_eq!(browser.count("#who span").await, 0);
    browser.quit().await;

    // A callback this browser did not start opens no session.
    let forged = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{base}/auth/callback?state=forged&code=stolen"))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 303);
    let to = forged.headers()["location"].to_str().unwrap();
    assert!(
        to.contains("sign_in_error") && to.contains("not+started+here"),
        "{to}"
    );
    assert!(forged
        .headers()
        .get_all("set-cookie")
        .iter()
        .all(|c| !c.to_str().unwrap().starts_with("kafka_dlq_session=")));
    let _ = std::fs::remove_file(secret);
}

/// Four eyes: a redrive above the configured size becomes a request that Slack hears of; its
/// requester cannot approve it; another operator approves it in the page, and exactly the dead
/// letters selected when it was asked are sent, though more of the same cause arrived since; a
/// rejected request does nothing; every step is in the audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_operator_approves_exactly_the_frozen_selection() {
    const BOB: &str = "bob-operator-token-0123456789abcdef";
    let dlt = dead_letters(&["perm-1", "perm-2", "perm-3", "always-1"]).await;
    let brokers = brokers();
    let target = unique("fixed");
    create_topic(&brokers, &target, 1).await;
    // Slack: a real HTTP server on loopback that keeps what it is sent.
    let posted = std::sync::Arc::new(std::sync::Mutex::new(Vec::<serde_json::Value>::new()));
    let keep = posted.clone();
    let hook = serve_on_loopback(axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: String| {
            let keep = keep.clone();
            async move {
                keep.lock()
                    .unwrap()
                    .push(serde_json::from_str(&body).unwrap());
                "ok"
            }
        }),
    ))
    .await;
    let port = free_port();
    let public_url = format!("http://127.0.0.1:{port}/");
    let operators = format!("alice:{OPERATOR},bob:{BOB}");
    let (_console, base) = console_at(
        port,
        &brokers,
        &dlt.dlq,
        "",
        &[
            "--operator-token",
            &operators,
            "--four-eyes-above",
            "2",
            "--public-url",
            &public_url,
            "--slack-webhook-url",
            &format!("http://{hook}/hook"),
        ],
    )
    .await;
    let api = Api::new(&base);
    let permanent = |rows: &[serde_json::Value]| {
        row(rows, PERMANENT).map_or(0, |r| r["count"].as_u64().unwrap())
    };
    let rows = api.inbox_until("", |rows| permanent(rows) == 3).await;
    assert_eq!(row(&rows, "permanent: rejected perm<").unwrap()["count"], 1);

    // Four permanent dead letters (the hostile one among them): above 2, so asked for.
    let ask = json!({
        "filter": { "dlq_topic": dlt.dlq, "kind": "permanent" },
        "destination": { "topic": target },
        "reason": "the fix for #123 is deployed",
    });
    let (status, v) = api.post("/api/redrives", As::Bearer(OPERATOR), ask).await;
    assert_eq!(status, 202, "{v}");
    let request = v["request"].clone();
    assert_eq!(request["state"], "pending", "{v}");
    assert_eq!(request["count"], 4, "{v}");
    assert_eq!(request["requested_by"], "console:alice");
    let id = request["id"].as_str().unwrap().to_string();
    // Small enough: done at once.
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlt.dlq, "kind": "retries_exhausted" }, "dry_run": true }),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    assert!(v["id"].is_string(), "a dry run is never a request: {v}");
    // Slack heard of it, with a link to the request.
    assert!(
        eventually(WAIT, || !posted.lock().unwrap().is_empty()).await,
        "Slack got the request"
    );
    let message = posted.lock().unwrap()[0].to_string();
    assert!(message.contains("waits for a second operator"), "{message}");
    assert!(
        message.contains(&format!("{public_url}?request={id}")),
        "{message}"
    );
    assert!(
        message.contains("console:alice") && message.contains("#123"),
        "{message}"
    );

    // More of the same cause arrive: not in the frozen selection.
    let late = dead_letter_as(&dlt.topic, "billing", &["perm-late"]).await;
    let (_, all) = api
        .get(
            &format!(
                "/api/dead-letters?dlq_topic={}&kind=permanent&limit=1000",
                dlt.dlq
            ),
            As::Bearer(VIEWER),
        )
        .await;
    let permanent_now = all["dead_letters"].as_array().unwrap().len();
    assert!(permanent_now > 4, "{all}");

    // The requester cannot approve; the request is pending for everyone to see.
    let approve = format!("/api/requests/{id}/approve");
    let (status, v) = api.post(&approve, As::Bearer(OPERATOR), json!({})).await;
    assert_eq!(status, 403, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("another operator"),
        "{v}"
    );
    let (_, v) = api
        .get("/api/requests?state=pending", As::Bearer(VIEWER))
        .await;
    assert_eq!(v["requests"][0]["id"], id.as_str(), "{v}");
    assert_eq!(v["requests"][0]["yours_to_decide"], false);

    // Bob approves in the page, from the link Slack had.
    let browser = browser::Browser::start().await;
    browser.sign_in(&base, BOB, "bob (operator)").await;
    browser.open(&format!("{public_url}?request={id}")).await;
    let button = format!("#requests-table tr[data-id='{id}'] button.approve");
    browser.wait_count(&button, 1).await;
    browser
        .type_into("#decision-reason", "checked the fix with alice")
        .await;
    browser.click(&button).await;
    browser
        .wait_text("#message", |t| t.contains("approved"))
        .await;
    browser.quit().await;
    let (_, v) = api.get("/api/requests", As::Bearer(VIEWER)).await;
    let decided = &v["requests"][0];
    assert_eq!(decided["state"], "approved", "{v}");
    assert_eq!(decided["decided_by"], "console:bob");
    assert_eq!(decided["decision_reason"], "checked the fix with alice");
    let (_, v) = api.get("/api/redrives", As::Bearer(VIEWER)).await;
    let carried = v["redrives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["dry_run"] == false)
        .unwrap_or_else(|| panic!("the approved redrive: {v}"))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = api.redrive_end(&carried).await;
    assert_eq!(
        (done["state"].as_str(), done["sent"].as_u64()),
        (Some("done"), Some(4)),
        "{done}"
    );
    // Exactly the four asked for, not the late ones.
    let sent = read_committed(&brokers, &target, 4);
    assert_eq!(sent.len(), 4);
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        read_all(&brokers, &target).len(),
        4,
        "nothing more was sent"
    );
    let (status, v) = api.post(&approve, As::Bearer(VIEWER), json!({})).await;
    assert_eq!(status, 403, "a viewer decides nothing: {v}");
    let (status, v) = api.post(&approve, As::Bearer(BOB), json!({})).await;
    assert_eq!(status, 409, "decided once: {v}");

    // A rejected request does nothing.
    let (status, v) = api
        .post(
            "/api/discards",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlt.dlq, "kind": "permanent" }, "reason": "noise" }),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    let rejected = v["request"]["id"].as_str().unwrap().to_string();
    let (status, v) = api
        .post(
            &format!("/api/requests/{rejected}/reject"),
            As::Bearer(BOB),
            json!({ "reason": "these need a fix, not a discard" }),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "rejected");
    let outstanding_path = format!(
        "/api/dead-letters?dlq_topic={}&kind=permanent&limit=1000",
        dlt.dlq
    );
    assert!(
        eventually_async(WAIT, || async {
            let (_, after) = api.get(&outstanding_path, As::Bearer(VIEWER)).await;
            after["dead_letters"].as_array().map(Vec::len) == Some(permanent_now - 4)
        })
        .await,
        "only the redriven four left the outstanding ones, the rejected discard took none"
    );
    // An approved discard discards exactly its selection: the late group's permanent ones.
    let (status, v) = api
        .post(
            "/api/discards",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlt.dlq, "kind": "permanent", "group": late }, "reason": "replayed by hand" }),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    let late_count = v["request"]["count"].as_u64().unwrap();
    assert!(late_count > 2, "{v}");
    let asked = v["request"]["id"].as_str().unwrap().to_string();
    let (status, v) = api
        .post(
            &format!("/api/requests/{asked}/approve"),
            As::Bearer(BOB),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["carried_out"]["discarded"], late_count, "{v}");
    assert!(
        eventually_async(WAIT, || async {
            let (_, after) = api.get(&outstanding_path, As::Bearer(VIEWER)).await;
            after["dead_letters"].as_array().map(Vec::len)
                == Some(permanent_now - 4 - late_count as usize)
        })
        .await,
        "the approved discard took the late group's"
    );
    let (_, history) = api.get("/api/history", As::Bearer(VIEWER)).await;
    let actions: Vec<&str> = history["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    for action in ["request", "approve", "reject", "replay", "discard"] {
        assert!(actions.contains(&action), "{action} in {history}");
    }
    assert!(
        eventually(WAIT, || posted.lock().unwrap().len() >= 3).await,
        "Slack heard of the decisions too"
    );
}

/// Bulk fix then redrive: a merge patch previewed in the page over every outstanding dead
/// letter of a DLT (changed, unchanged and failed counted, the first ones before and after),
/// then redriven: each changed payload is exactly the patched JSON, each unchanged one goes
/// byte for byte as it was, the ones the patch fails on stay behind, and the audit's digests
/// are those of the payloads before and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_fix_is_previewed_then_redriven_with_exactly_the_patched_payloads() {
    let brokers = brokers();
    let source = unique("payments");
    let dlq = format!("{source}-dlt");
    let target = unique("payments-fixed");
    create_topic(&brokers, &dlq, 1).await;
    create_topic(&brokers, &target, 1).await;
    // 40 to fix, 8 already right (odd spacing: sent as they are), 2 that are not JSON.
    let mut payloads: Vec<Vec<u8>> = Vec::new();
    for i in 0..50 {
        payloads.push(
            match i % 25 {
                0..20 => {
                    format!(r#"{{"order":{i},"currency":"eur","amount":"1.50","legacy":true}}"#)
                }
                20..24 => format!(r#"{{ "order" : {i}, "currency" : "EUR" }}"#),
                _ => format!("not json <{i}>"),
            }
            .into_bytes(),
        );
    }
    let letters: Vec<Out> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let record =
                kafka_dlq::Record::new(source.clone(), 0, i as i64).with_payload(p.clone());
            let letter = kafka_dlq::dlq::Envelope::new(
                &record,
                kafka_dlq::DeadLetterKind::Permanent,
                "currency must be upper case",
                1,
                "payments-api",
            );
            Out {
                partition: 0,
                key: None,
                value: Some(letter.to_vec()),
                headers: vec![],
            }
        })
        .collect();
    produce(&brokers, &dlq, letters).await;
    let (_console, base) = console(&dlq, "", &[]).await;
    let api = Api::new(&base);
    api.inbox_until("", |rows| {
        row(rows, "permanent: currency").is_some_and(|r| r["count"] == 50)
    })
    .await;
    let patch = json!({"currency": "EUR", "legacy": null});

    // The preview, in the page.
    let browser = browser::Browser::start().await;
    browser.sign_in(&base, OPERATOR, "alice (operator)").await;
    browser
        .open(&format!(
            "{base}/?dlq_topic={dlq}&where={}",
            urlencode("kind == 'permanent'")
        ))
        .await;
    browser.wait_count("#letters-table tbody tr", 50).await;
    browser.type_into("#fix-text", &patch.to_string()).await;
    browser.click("#fix-preview").await;
    let counts = browser
        .wait_text("#fix-counts", |t| t.contains("changed"))
        .await;
    assert!(
        counts.contains("50 outstanding") && counts.contains("40 changed, 8 unchanged, 2 failed"),
        "{counts}"
    );
    assert_eq!(browser.count("#fix-table tbody tr").await, 20);
    assert!(
        browser.count("#fix-table span.changed").await > 0,
        "the changed lines are marked"
    );
    browser.quit().await;
    // The same through the API: every outstanding one counted, the first shown.
    let (status, p) = api
        .post(
            "/api/transforms/preview",
            As::Bearer(VIEWER),
            json!({ "filter": { "dlq_topic": dlq }, "transform": { "merge_patch": patch }, "limit": 50 }),
        )
        .await;
    assert_eq!(status, 403, "a viewer without payloads sees none: {p}");
    let (status, p) = api
        .post(
            "/api/transforms/preview",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlq }, "transform": { "merge_patch": patch }, "limit": 50 }),
        )
        .await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(
        (
            p["changed"].as_u64(),
            p["unchanged"].as_u64(),
            p["failed"].as_u64()
        ),
        (Some(40), Some(8), Some(2)),
        "{p}"
    );
    let first = &p["records"][0];
    assert_eq!(first["state"], "changed");
    assert!(
        first["before"].as_str().unwrap().contains("\"eur\""),
        "{first}"
    );
    assert!(
        first["after"].as_str().unwrap().contains("\"EUR\""),
        "{first}"
    );
    assert!(
        !first["after"].as_str().unwrap().contains("legacy"),
        "{first}"
    );
    let failed = p["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["state"] == "failed")
        .unwrap();
    assert!(
        failed["why"].as_str().unwrap().contains("not JSON"),
        "{failed}"
    );
    // Nothing was sent by a preview.
    assert!(read_all(&brokers, &target).is_empty());

    // The redrive with the fix.
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlq }, "destination": { "topic": target }, "transform": { "merge_patch": patch } }),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    let done = api.redrive_end(v["id"].as_str().unwrap()).await;
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(
        (done["sent"].as_u64(), done["failed"].as_u64()),
        (Some(48), Some(2)),
        "{done}"
    );
    let summary = &done["transform"];
    assert_eq!(
        (
            summary["changed"].as_u64(),
            summary["unchanged"].as_u64(),
            summary["failed"].as_u64()
        ),
        (Some(40), Some(8), Some(2)),
        "{done}"
    );
    // Byte-exact: the patched JSON, or the original bytes.
    let sent = read_committed(&brokers, &target, 48);
    let mut expected_after = openssl::sha::Sha256::new();
    let mut expected_before = openssl::sha::Sha256::new();
    let feed = |h: &mut openssl::sha::Sha256, b: &[u8]| {
        h.update(&(b.len() as u64).to_be_bytes());
        h.update(b);
    };
    let mut sent_iter = sent.iter();
    for original in &payloads {
        feed(&mut expected_before, original);
        let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(original) else {
            continue;
        };
        let wanted = if value["currency"] == "EUR" && value.get("legacy").is_none() {
            original.clone()
        } else {
            value["currency"] = json!("EUR");
            value.as_object_mut().unwrap().remove("legacy");
            serde_json::to_vec(&value).unwrap()
        };
        feed(&mut expected_after, &wanted);
        let got = sent_iter.next().expect("a record for each one fixed");
        assert_eq!(
            rdkafka::Message::payload(got).unwrap(),
            wanted.as_slice(),
            "{}",
            String::from_utf8_lossy(&wanted)
        );
    }
    let hex = |h: openssl::sha::Sha256| {
        h.finish()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert_eq!(summary["before_sha256"], hex(expected_before), "{summary}");
    assert_eq!(summary["after_sha256"], hex(expected_after), "{summary}");
    // The audit keeps the transformation and its digests; the two it failed on stay outstanding.
    let (_, history) = api.get("/api/history", As::Bearer(VIEWER)).await;
    let run = history["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action"] == "replay")
        .unwrap();
    assert_eq!(
        run["transform"]["transform"],
        json!({ "merge_patch": patch }),
        "{run}"
    );
    assert_eq!(run["transform"]["after_sha256"], summary["after_sha256"]);
    assert!(
        eventually_async(WAIT, || async {
            let (_, left) = api
                .get(
                    &format!("/api/dead-letters?dlq_topic={dlq}"),
                    As::Bearer(VIEWER),
                )
                .await;
            left["dead_letters"].as_array().map(Vec::len) == Some(2)
        })
        .await,
        "the two the fix failed on are still outstanding"
    );
}

/// Saved views: a viewer names the filter on the page, everyone sees it in the list (from the
/// audit topic, so any replica does), its link opens the same dead letters, and whoever saved
/// it or an operator deletes it; a view whose filter does not read is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_view_is_shared_and_opens_the_same_dead_letters() {
    let dlt = dead_letters(&["perm-1", "perm-2", "always-1"]).await;
    let (_console, base) = console(&dlt.dlq, "", &[]).await;
    let api = Api::new(&base);
    api.inbox_until("", |rows| row(rows, PERMANENT).is_some())
        .await;
    let expression = "kind == 'permanent' && payload.startsWith('perm-')";
    let browser = browser::Browser::start().await;
    browser.sign_in(&base, VIEWER, "victor (viewer)").await;
    browser
        .open(&format!(
            "{base}/?dlq_topic={}&where={}",
            dlt.dlq,
            urlencode(expression)
        ))
        .await;
    browser.wait_count("#letters-table tbody tr", 2).await;
    browser.type_into("#view-name", "billing rejects").await;
    browser.click("#view-save").await;
    let said = browser
        .wait_text("#message", |t| t.contains("Saved the view"))
        .await;
    assert!(said.contains("letters=1"), "{said}");
    let (status, v) = api.get("/api/views", As::Bearer(OPERATOR)).await;
    assert_eq!(status, 200, "{v}");
    let view = v["views"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "billing rejects")
        .unwrap_or_else(|| panic!("{v}"))
        .clone();
    assert_eq!(view["saved_by"], "console:victor");
    let link = format!("{base}/?{}&letters=1", view["query"].as_str().unwrap());
    // Its link, opened afresh, shows the same dead letters.
    browser.open(&link).await;
    browser.wait_count("#letters-table tbody tr", 2).await;
    let shown = browser
        .run("return document.querySelector('#where').value;", json!([]))
        .await;
    assert_eq!(shown, expression);
    browser.quit().await;
    // A filter that does not read is not saved.
    let (status, v) = api
        .post(
            "/api/views",
            As::Bearer(VIEWER),
            json!({ "name": "broken", "query": "where=kind%20%3D%3D" }),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("where"), "{v}");
    // An operator deletes it; then it is gone for everyone.
    let (status, v) = api
        .send_delete("/api/views/billing%20rejects", As::Bearer(OPERATOR))
        .await;
    assert_eq!(status, 200, "{v}");
    let (_, v) = api.get("/api/views", As::Bearer(VIEWER)).await;
    assert!(
        v["views"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["name"] != "billing rejects"),
        "{v}"
    );
    let (status, _) = api
        .send_delete("/api/views/billing%20rejects", As::Bearer(OPERATOR))
        .await;
    assert_eq!(status, 404);
}

/// Replicas and restarts: two consoles with the same session key open each other's sessions,
/// a session outlives the restart of the console that opened it, a sign-out on one replica is
/// refused on the other too (it learns it from the audit topic), and a console with another
/// key opens none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_survive_a_restart_and_work_on_every_replica() {
    let dlt = dead_letters(&["perm-1"]).await;
    let brokers = brokers();
    let key = "a-session-key-for-this-test-0123456789";
    let with_key = ["--session-key", key];
    let (one, base_one) = console(&dlt.dlq, "", &with_key).await;
    let (_two, base_two) = console(&dlt.dlq, "", &with_key).await;
    let (one_api, two_api) = (Api::new(&base_one), Api::new(&base_two));
    two_api.inbox_until("", |rows| !rows.is_empty()).await;
    let (cookie, csrf) = one_api.sign_in(OPERATOR).await;
    let (status, v) = two_api
        .get("/api/session", As::Session(&cookie, None))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["name"].as_str(), v["csrf_token"].as_str()),
        (Some("alice"), Some(csrf.as_str()))
    );
    // An action on the other replica, with the session's CSRF token.
    let (status, v) = two_api
        .post(
            "/api/redrives",
            As::Session(&cookie, Some(&csrf)),
            json!({ "filter": { "dlq_topic": dlt.dlq }, "dry_run": true }),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    // The first replica restarts: the session goes on.
    drop(one);
    let port = base_one.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    assert!(
        eventually(WAIT, || std::net::TcpListener::bind(("127.0.0.1", port))
            .is_ok())
        .await,
        "the first replica is gone"
    );
    let (_one_again, _) = console_at(port, &brokers, &dlt.dlq, "", &with_key).await;
    let (status, v) = one_api
        .get("/api/session", As::Session(&cookie, None))
        .await;
    assert_eq!(status, 200, "after a restart: {v}");
    // Another key opens nothing.
    let (_other, base_other) = console(
        &dlt.dlq,
        "",
        &["--session-key", "another-key-of-at-least-32-characters"],
    )
    .await;
    let (status, _) = Api::new(&base_other)
        .get("/api/session", As::Session(&cookie, None))
        .await;
    assert_eq!(status, 401);
    // Signed out on the second replica: refused there at once, and on the first once it read
    // the audit topic.
    let (status, _, _) = two_api
        .send_with_headers(
            reqwest::Method::DELETE,
            "/api/session",
            As::Session(&cookie, Some(&csrf)),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        two_api
            .get("/api/inbox", As::Session(&cookie, None))
            .await
            .0,
        401
    );
    assert!(
        eventually_async(WAIT, || async {
            one_api
                .get("/api/inbox", As::Session(&cookie, None))
                .await
                .0
                == 401
        })
        .await,
        "the other replica refuses the signed-out session too"
    );
    let (status, _) = console_cli_check(&["--session-key", "short"]);
    assert_eq!(status, 2);
}

/// Two replicas behind a load balancer and a redrive started through it: the replica that does
/// not run it is killed and started again, then the one that runs it is stopped (SIGTERM, as a
/// rolling restart does) and started again. The redrive moves to the other replica and
/// finishes once — every dead letter sent exactly once — and its progress is answered
/// throughout, by whichever replica the balancer picks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_survives_a_rolling_restart_of_two_replicas() {
    let values: Vec<String> = (0..150).map(|i| format!("perm-{i}")).collect();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let dlt = dead_letters(&refs).await;
    let brokers = brokers();
    let to = unique("rolled");
    create_topic(&brokers, &to, 1).await;
    let ports = [free_port(), free_port()];
    let mut replicas = Vec::new();
    for port in ports {
        replicas.push(Some(console_at(port, &brokers, &dlt.dlq, "", &[]).await.0));
    }
    let proxy = proxy::Proxy::start(&ports).await;
    let api = Api::per_request(&proxy.base);
    assert!(
        eventually_async(WAIT, || async {
            api.try_get("/readyz", As::Nobody)
                .await
                .is_some_and(|(s, _)| s == 200)
        })
        .await,
        "the balancer reaches a replica"
    );
    let total = values.len() as u64 + 1; // and the hostile record
    api.inbox_until("", |rows| {
        rows.iter().filter_map(|r| r["count"].as_u64()).sum::<u64>() == total
    })
    .await;
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlt.dlq }, "destination": { "topic": to }, "rate": 8 }),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    // Its progress, asked through the balancer ten times a second until it ends.
    let watcher = {
        let (api, path) = (Api::per_request(&proxy.base), format!("/api/redrives/{id}"));
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
            while tokio::time::Instant::now() < deadline {
                let answer = api.try_get(&path, As::Bearer(VIEWER)).await;
                let over = answer.as_ref().is_some_and(|(_, p)| {
                    ["done", "cancelled", "failed"].contains(&p["state"].as_str().unwrap_or(""))
                });
                seen.push((tokio::time::Instant::now(), answer));
                if over {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen
        })
    };
    let pid_of = |replica: &Option<tokio::process::Child>| replica.as_ref().unwrap().id().unwrap();
    let pids = [pid_of(&replicas[0]), pid_of(&replicas[1])];
    let running = api.runner_of(&id, &pids).await;
    let other = 1 - running;
    // The replica that does not run it dies and comes back.
    drop(replicas[other].take());
    assert!(
        eventually(WAIT, || std::net::TcpListener::bind((
            "127.0.0.1",
            ports[other]
        ))
        .is_ok())
        .await,
        "the killed replica is gone"
    );
    replicas[other] = Some(
        console_at(ports[other], &brokers, &dlt.dlq, "", &[])
            .await
            .0,
    );
    // The runner is stopped as a rolling restart stops it, and comes back.
    let mut stopped = replicas[running].take().unwrap();
    unsafe {
        libc::kill(stopped.id().unwrap() as i32, libc::SIGTERM);
    }
    let exit = tokio::time::timeout(WAIT, stopped.wait())
        .await
        .expect("the stopped replica exits")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    replicas[running] = Some(
        console_at(ports[running], &brokers, &dlt.dlq, "", &[])
            .await
            .0,
    );
    let ended = api.redrive_end(&id).await;
    assert_eq!(ended["state"], "done", "{ended}");
    assert_eq!(ended["sent"], total, "{ended}");
    assert!(ended["runs"].as_array().unwrap().len() >= 2, "{ended}");
    // What arrived: each dead letter once.
    let (payloads, before) = distinct_payloads(&brokers, &to);
    assert_eq!(
        (before, payloads.len() as u64),
        (total as usize, total),
        "each sent once"
    );
    for value in &values {
        assert!(
            payloads.contains(&value.as_bytes().to_vec()),
            "{value} arrived"
        );
    }
    // The progress, throughout: always there, never lost or stopped, and run by the other
    // replica after the handover.
    let seen = watcher.await.unwrap();
    let answers: Vec<&(u16, serde_json::Value)> =
        seen.iter().filter_map(|(_, a)| a.as_ref()).collect();
    for (status, p) in &answers {
        assert_eq!(*status, 200, "{p}");
        assert!(
            ["running", "done"].contains(&p["state"].as_str().unwrap()),
            "{p}"
        );
    }
    let mut last = seen[0].0;
    for (at, answer) in &seen {
        if answer.is_some() {
            assert!(
                at.duration_since(last) < Duration::from_secs(3),
                "no answer for {:?}",
                at.duration_since(last)
            );
            last = *at;
        }
    }
    // Either replica may win the lease once it is released: the one killed before, or the
    // one just stopped, started again.
    let heirs = [pid_of(&replicas[0]), pid_of(&replicas[1])];
    assert!(
        answers
            .iter()
            .any(|(_, p)| heirs.iter().any(|pid| runs_on(p, *pid))),
        "another replica took the redrive over"
    );
    assert_eq!(answers.last().unwrap().1["state"], "done");
}

/// The replica running a redrive is killed outright: its replay lock's session times out, the
/// other replica takes the redrive over from the position in Kafka and finishes it. Every dead
/// letter arrives; at most what was acknowledged after the last position written (a record or
/// two at this rate) is sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_moves_to_another_replica_when_its_runner_dies() {
    let values: Vec<String> = (0..80).map(|i| format!("perm-{i}")).collect();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let dlt = dead_letters(&refs).await;
    let brokers = brokers();
    let to = unique("orphaned");
    create_topic(&brokers, &to, 1).await;
    let mut replicas = Vec::new();
    let mut apis = Vec::new();
    for _ in 0..2 {
        let (child, base) = console(&dlt.dlq, "", &[]).await;
        replicas.push(Some(child));
        apis.push(Api::new(&base));
    }
    let total = values.len() as u64 + 1;
    apis[0]
        .inbox_until("", |rows| {
            rows.iter().filter_map(|r| r["count"].as_u64()).sum::<u64>() == total
        })
        .await;
    let (status, v) = apis[0]
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlt.dlq }, "destination": { "topic": to }, "rate": 8 }),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    let path = format!("/api/redrives/{}", v["id"].as_str().unwrap());
    let pids: Vec<u32> = replicas
        .iter()
        .map(|r| r.as_ref().unwrap().id().unwrap())
        .collect();
    let running = apis[1]
        .runner_of(&path["/api/redrives/".len()..], &pids)
        .await;
    let heir = 1 - running;
    let mut killed = replicas[running].take().unwrap();
    killed.kill().await.unwrap();
    let ended = apis[heir]
        .redrive_end(&path["/api/redrives/".len()..])
        .await;
    assert_eq!(ended["state"], "done", "{ended}");
    // The killed replica's run never ended, so never reached the audit: the heir's did.
    let runs = ended["runs"].as_array().unwrap().clone();
    assert!(!runs.is_empty(), "{ended}");
    let (payloads, sent) = distinct_payloads(&brokers, &to);
    assert_eq!(payloads.len() as u64, total, "every dead letter arrived");
    assert!(
        sent - payloads.len() <= 2,
        "{} sent twice",
        sent - payloads.len()
    );
    // The heir's run is audited.
    let (_, history) = apis[heir].get("/api/history", As::Bearer(VIEWER)).await;
    let last = runs.last().unwrap().as_str().unwrap();
    assert!(history.to_string().contains(last), "{history}");
}

/// `kafka-dlq console` with `extra` flags, checked only (it fails before connecting): its exit
/// code and stderr.
fn console_cli_check(extra: &[&str]) -> (i32, String) {
    let mut args = vec![
        "console",
        "--brokers",
        "127.0.0.1:9",
        "--anonymous",
        "viewer",
    ];
    args.extend_from_slice(extra);
    let (code, _, err) = cli(&args);
    assert!(
        err.contains("session_key") && !err.contains("short"),
        "{err}"
    );
    (code, err)
}

/// Where the login app the provider sent the browser to lives.
async fn idp_app(browser: &browser::Browser) -> String {
    let url = browser.url().await;
    url.split("/login").next().unwrap().to_string()
}

/// The scenario of the issue, in headless Chromium: sign in, open the inbox, filter to one
/// cause, open a dead letter, dry-run, redrive at a rate to the end, discard another with a
/// reason, see both in the history — the records arrive where the page said, and the script
/// planted in a record never runs. Screenshots go to target/console-screenshots/ (the
/// manual's are copies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_redrives_and_discards_in_a_real_browser() {
    let dlt = dead_letters(&["perm-1", "always-1", "perm-2", "always-2", "always-3"]).await;
    let (_console, base) = console(&dlt.dlq, "", &[]).await;
    let brokers = brokers();
    let browser = browser::Browser::start().await;

    // Signing in: the token is not in the page afterwards.
    browser.sign_in(&base, OPERATOR, "alice (operator)").await;

    // The inbox: three causes, the counts as the consumer wrote them.
    browser.wait_count("#inbox-table tr.cause", 3).await;
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("../console-screenshots");
    browser.screenshot(&shots.join("inbox.png")).await;
    let counts = browser
        .run("return [...document.querySelectorAll('#inbox-table tr.cause')].map(r => r.querySelector('.fingerprint').textContent + '=' + r.querySelector('.count').textContent);", json!([]))
        .await;
    let counts: Vec<String> = serde_json::from_value(counts).unwrap();
    assert!(
        counts.contains(&format!("{EXHAUSTED}=3")) && counts.contains(&format!("{PERMANENT}=2")),
        "{counts:?}"
    );

    // Filter to one cause, open it and one of its dead letters.
    browser.type_into("#filter-fingerprint", EXHAUSTED).await;
    browser.click("#inbox-apply").await;
    browser.wait_count("#inbox-table tr.cause", 1).await;
    browser.click("#inbox-table tr.cause").await;
    browser.wait_count("#letters-table tr.dead-letter", 3).await;

    // A filter expression narrows them; one that does not parse says where, and nothing changes.
    browser
        .type_into("#where", "payload == 'always-2' && attempts > 1")
        .await;
    browser.click("#where-apply").await;
    browser.wait_count("#letters-table tr.dead-letter", 1).await;
    browser.click("#letters-table tr.dead-letter").await;
    browser
        .wait_text("#detail-payload", |t| t == "always-2")
        .await;
    browser
        .type_into("#where", "payload == 'always-2' &&& x")
        .await;
    browser.click("#where-apply").await;
    browser
        .wait_text("#message", |t| t.contains("where: column 25"))
        .await;
    browser.type_into("#where", "").await;
    browser.click("#where-apply").await;
    browser.wait_count("#letters-table tr.dead-letter", 3).await;

    // A list asked for the filter shown before (a redrive's end reloads it) that answers after
    // the operator opened another is not drawn: this cause's list is held back 1.5 s, the
    // other cause's opened meanwhile, and that one stays.
    browser
        .run(
            "const cause = arguments[0]; window.__exhausted = state.filter; window.__late = false; \
             const real = window.fetch; window.__realFetch = real; \
             window.fetch = (url, options) => { const answer = real(url, options); \
               const asked = new URL(url, location.href); \
               if (!asked.pathname.endsWith('api/dead-letters') || asked.searchParams.get('fingerprint') !== cause) return answer; \
               return answer.then(r => new Promise(ok => setTimeout(() => { ok(r); setTimeout(() => { window.__late = true; }, 300); }, 1500))); }; \
             loadLetters(); \
             openLetters(Object.assign({}, state.filter, { fingerprint: arguments[1] }));",
            json!([EXHAUSTED, PERMANENT]),
        )
        .await;
    browser.wait_count("#letters-table tr.dead-letter", 2).await;
    while browser.run("return window.__late;", json!([])).await != json!(true) {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let shown = browser.text("#letters-table tbody").await;
    assert!(
        browser.count("#letters-table tr.dead-letter").await == 2
            && !shown.contains("downstream down"),
        "the earlier filter's late answer replaced the list shown: {shown}"
    );
    browser
        .run(
            "window.fetch = window.__realFetch; openLetters(window.__exhausted);",
            json!([]),
        )
        .await;
    browser.wait_count("#letters-table tr.dead-letter", 3).await;

    browser.click("#letters-table tr.dead-letter").await;
    browser
        .wait_text("#detail-fields", |t| {
            t.contains("downstream down") && t.contains(&dlt.group)
        })
        .await;
    browser
        .wait_text("#detail-payload", |t| t.starts_with("always-"))
        .await;

    // A dry run says what would go where, and sends nothing.
    let redrive_topic = kafka_dlq::record::retry::redrive_topic(&dlt.topic, &dlt.group);
    browser.click("#dry-run").await;
    browser.wait_text("#progress-state", |t| t == "done").await;
    browser.wait_count("#preview-table tbody tr", 3).await;
    let said = browser
        .text("#preview-table tbody tr td:nth-child(2)")
        .await;
    assert_eq!(said, redrive_topic, "the page says where they would go");
    assert!(browser
        .text("#progress-counts")
        .await
        .contains("would send 3"));

    // The redrive at 2 per second, watched to its end.
    browser.type_into("#rate", "2").await;
    browser.click("#redrive").await;
    browser
        .wait_text("#progress-id", |t| !t.contains("dry run"))
        .await;
    let seen_running = browser
        .wait_text("#progress-state", |t| t == "running" || t == "done")
        .await;
    browser.wait_text("#progress-state", |t| t == "done").await;
    let counts = browser.text("#progress-counts").await;
    assert!(
        counts.contains("sent 3") && counts.contains("at most 2/s"),
        "{counts} (seen {seen_running})"
    );
    let arrived = read_all(&brokers, &said);
    assert_eq!(arrived.len(), 3, "the records arrived where the page said");

    // The hostile dead letter: shown as text, its script never runs. Discarded with a reason.
    browser.click("button[data-tab=inbox]").await;
    browser.type_into("#filter-fingerprint", "").await;
    browser.type_into("#filter-text", "pwned").await;
    browser.click("#inbox-apply").await;
    browser.wait_count("#inbox-table tr.cause", 1).await;
    browser
        .wait_text("#inbox-table tr.cause .fingerprint", |t| {
            t.contains("pwned")
        })
        .await;
    browser.click("#inbox-table tr.cause").await;
    // The list of this cause, not the one before it: that list, refreshed as the redrive
    // resolved its dead letters, can also hold one row for a moment.
    browser
        .wait_text("#letters-table tr.dead-letter td.id", |t| {
            t.contains("window.pwned=5")
        })
        .await;
    browser.wait_count("#letters-table tr.dead-letter", 1).await;
    browser.click("#letters-table tr.dead-letter").await;
    let payload = browser
        .wait_text("#detail-payload", |t| t.contains("<script>"))
        .await;
    assert!(
        payload.starts_with("perm<script>window.pwned=1</script><img src=x onerror="),
        "{payload}"
    );
    let key = browser.text("#detail-key").await;
    assert_eq!(
        key, "<img src=x onerror=\"window.pwned=3\">\\u{1b}[31m",
        "escapes shown, not obeyed"
    );
    assert!(browser
        .text("#detail-headers")
        .await
        .contains("\\u{1b}]0;pwned\\u{7}<b>"));
    browser.screenshot(&shots.join("dead-letter.png")).await;
    browser
        .type_into("#discard-reason", "a penetration test's record")
        .await;
    browser.click("#discard").await;
    browser
        .wait_text("#message", |t| t.starts_with("Discarded 1 dead letters"))
        .await;

    // Both in the history, by the operator who signed in.
    browser.click("button[data-tab=history]").await;
    browser.wait_count("#history-table tbody tr", 2).await;
    let history = browser.text("#history-table tbody").await;
    assert!(
        history.contains("discard") && history.contains("a penetration test's record"),
        "{history}"
    );
    assert!(
        history.contains("replay") && history.contains(&redrive_topic) || history.contains("group"),
        "{history}"
    );
    assert!(history.contains("console:alice"), "{history}");

    // Nothing planted ran: no flag set, no script element but the console's own.
    let planted = browser
        .run("return [window.pwned === undefined, document.scripts.length, document.querySelectorAll('img').length];", json!([]))
        .await;
    assert_eq!(
        planted,
        json!([true, 1, 0]),
        "no planted markup became elements"
    );
    browser.quit().await;
}

/// The monitor and the console mean the same by outstanding: what the console discards or
/// redrives by a filter leaves the monitor's count, and once nothing is left it says resolved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_console_discards_or_redrives_is_no_longer_outstanding_for_the_monitor() {
    let dlt = dead_letters(&["perm-1", "perm-2", "always-1"]).await;
    let monitor = Monitoring::start(&dlt.dlq, 500).await;
    let said = |text: &str| monitor.said(text);
    assert!(
        eventually(WAIT, || said("(4 outstanding)")).await,
        "{:?}",
        monitor.posts()
    );

    // No --dlq-topic: every topic the template names, this test's among them.
    let (_console, base) = console("", "", &[]).await;
    let api = Api::new(&base);
    api.inbox_until(&format!("dlq_topic={}", dlt.dlq), |rows| rows.len() == 3)
        .await;
    let (_, status) = api.get("/api/status", As::Bearer(VIEWER)).await;
    assert!(
        status["dlq_topics"]
            .as_array()
            .unwrap()
            .contains(&json!(dlt.dlq)),
        "{status}"
    );
    let permanent = json!({ "fingerprint": PERMANENT });
    let (status, v) = api
        .post(
            "/api/discards",
            As::Bearer(OPERATOR),
            json!({ "filter": permanent, "reason": "known bad rows" }),
        )
        .await;
    let several = api.get("/api/status", As::Bearer(VIEWER)).await.1["dlq_topics"]
        .as_array()
        .unwrap()
        .len();
    if several > 1 {
        assert_eq!(status, 400, "several DLTs: a discard names its own: {v}");
        let (status, v) = api
            .post(
                "/api/discards",
                As::Bearer(OPERATOR),
                json!({ "filter": { "dlq_topic": dlt.dlq, "fingerprint": PERMANENT }, "reason": "known bad rows" }),
            )
            .await;
        assert_eq!(status, 200, "{v}");
    } else {
        assert_eq!(status, 200, "{v}");
    }
    assert!(
        eventually(WAIT, || said("went down from 4 to 2 outstanding")).await,
        "{:?}",
        monitor.posts()
    );
    let (status, started) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlt.dlq, "fingerprint": EXHAUSTED } }),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(
        api.redrive_end(started["id"].as_str().unwrap()).await["state"],
        "done"
    );
    let (status, _) = api
        .post(
            "/api/discards",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlt.dlq, "text": "pwned" }, "reason": "a penetration test" }),
        )
        .await;
    assert_eq!(status, 200);
    assert!(
        eventually(WAIT, || said("Resolved")).await,
        "{:?}",
        monitor.posts()
    );
    monitor.stop().await;
}

/// A handler that refuses every record: each is dead-lettered at once, as it came.
struct RefuseAll;

impl kafka_dlq::Handler for RefuseAll {
    async fn handle(&self, _: &kafka_dlq::Record) -> Result<(), kafka_dlq::HandlerError> {
        Err(kafka_dlq::HandlerError::permanent("refused"))
    }
}

/// The records a byte-exact redrive must give back as they failed: JSON whose text a parser
/// would change (keys out of order, a number past f64, a duplicate key), a schema-framed
/// payload, bytes that are not UTF-8, a tombstone; every one with binary, empty and repeated
/// headers and a binary key.
fn awkward_records() -> Vec<Out> {
    let headers = vec![
        (b"bin\xfe".to_vec(), Some(vec![0, 1, 0xff, 0x80])),
        (b"empty".to_vec(), Some(vec![])),
        (b"none".to_vec(), None),
        (b"twice".to_vec(), Some(b"1".to_vec())),
        (b"twice".to_vec(), Some(b"2".to_vec())),
    ];
    let mut framed = vec![0, 0, 0, 0, 7];
    framed.extend_from_slice(br#"{"x":1}"#);
    let values: Vec<Option<Vec<u8>>> = vec![
        Some(br#"{"b":1,"a":123456789012345678901234,"a":2}"#.to_vec()),
        Some(framed),
        Some(vec![
            0xff, 0xfe, 0x00, 0x9f, 0x92, 0x96, 0xc3, 0x28, 1, 2, 3, 4, 5, 6, 7, 8,
        ]),
        None,
    ];
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| Out {
            partition: 0,
            key: Some(vec![0xc0 | i as u8, 0x00, 0xff]),
            value,
            headers: headers.clone(),
        })
        .collect()
}

/// The key, value and headers of `m` that are the record's own: not the replay's stamps
/// (`kafka_dlq-…`) nor the redrive topic's account of where it came from (Spring's
/// `kafka_dlt-…` and `retry_topic-…`); header names read as bytes.
fn own_bytes(m: &rdkafka::message::OwnedMessage) -> Bytes {
    use rdkafka::message::Message;
    let headers = m
        .headers()
        .map(kafka_dlq::RecordHeader::read_all)
        .unwrap_or_default()
        .into_iter()
        .filter(|h| {
            !(h.key.starts_with(b"kafka_dlq-")
                || h.key.starts_with(b"kafka_dlt-")
                || h.key.starts_with(b"retry_topic-"))
        })
        .map(|h| (h.key, h.value))
        .collect();
    (
        m.key().map(<[u8]>::to_vec),
        m.payload().map(<[u8]>::to_vec),
        headers,
    )
}

/// A record's own key, value and headers.
type Bytes = (
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(Vec<u8>, Option<Vec<u8>>)>,
);

/// [`awkward_records`] dead-lettered by the real consumer: the source topic, its DLT, the
/// group, and each record's bytes as produced.
async fn awkward_dead_letters() -> (String, String, String, Vec<Bytes>) {
    let brokers = brokers();
    let topic = unique("awkward");
    let dlq = format!("{topic}-dlt");
    let group = unique("billing");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    let sent = awkward_records();
    let originals: Vec<Bytes> = sent
        .iter()
        .map(|o| (o.key.clone(), o.value.clone(), o.headers.clone()))
        .collect();
    produce(&brokers, &topic, sent).await;
    let running = Running::start(test_config(&brokers, &group, &topic), RefuseAll);
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&4))
        .await,
        "every record dead-lettered"
    );
    running.stop().await;
    (topic, dlq, group, originals)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_sends_back_exactly_the_bytes_that_failed() {
    let brokers = brokers();
    let (topic, dlq, group, originals) = awkward_dead_letters().await;
    let (_console, base) = console(&dlq, "", &[]).await;
    let api = Api::new(&base);
    api.inbox_until("", |rows| {
        rows.iter()
            .map(|r| r["count"].as_u64().unwrap())
            .sum::<u64>()
            == 4
    })
    .await;
    let redrive = kafka_dlq::record::retry::redrive_topic(&topic, &group);

    // What the editor starts from is the bytes, not a view of them.
    let letter = |offset: i64| {
        let api = &api;
        let dlq = dlq.clone();
        async move {
            let (status, v) = api
                .get(
                    &format!("/api/dead-letters/{dlq}/0/{offset}"),
                    As::Bearer(OPERATOR),
                )
                .await;
            assert_eq!(status, 200, "{v}");
            v
        }
    };
    let json = letter(0).await;
    assert_eq!(json["editable"]["as"], "text", "{json}");
    assert_eq!(
        json["editable"]["text"],
        r#"{"b":1,"a":123456789012345678901234,"a":2}"#
    );
    let framed = letter(1).await;
    assert_eq!(framed["editable"]["text"], r#"{"x":1}"#, "{framed}");
    assert_eq!(framed["editable"]["schema_prefix"], "AAAAAAc=");
    let binary = letter(2).await;
    assert_eq!(binary["editable"]["as"], "base64", "{binary}");
    let tombstone = letter(3).await;
    assert_eq!(tombstone["editable"]["as"], "none", "{tombstone}");

    // Edited and left unchanged: the very bytes go back, in a redrive of its own each.
    let mut expected = Vec::new();
    for (offset, body) in [
        (0, json!({ "payload": json["editable"]["text"] })),
        (1, json!({ "payload": framed["editable"]["text"] })),
        (2, json!({ "payload_base64": binary["editable"]["base64"] })),
    ] {
        let mut body = body;
        body["filter"] =
            json!({ "dlq_topic": dlq, "records": [{ "partition": 0, "offset": offset }] });
        let (status, v) = api.post("/api/redrives", As::Bearer(OPERATOR), body).await;
        assert_eq!(status, 202, "{v}");
        let done = api.redrive_end(v["id"].as_str().unwrap()).await;
        assert_eq!(
            (&done["state"], &done["sent"]),
            (&json!("done"), &json!(1)),
            "{done}"
        );
        expected.push(originals[offset as usize].clone());
    }
    // A tombstone has nothing to edit; a binary payload is not edited as text.
    let one = |offset: i64| json!({ "dlq_topic": dlq, "records": [{ "partition": 0, "offset": offset }] });
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": one(3), "payload": "" }),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("tombstone"), "{v}");
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": one(2), "payload": "x" }),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("payload_base64"),
        "{v}"
    );

    // A plain redrive of them all: each as it failed, the tombstone a tombstone.
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlq } }),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    let done = api.redrive_end(v["id"].as_str().unwrap()).await;
    assert_eq!(done["state"], "done", "{done}");
    // The three edited ones were redriven already: only the tombstone is left to send.
    assert_eq!(
        (&done["sent"], &done["already_resolved"]),
        (&json!(1), &json!(3)),
        "{done}"
    );
    expected.push(originals[3].clone());
    let arrived: Vec<_> = read_all(&brokers, &redrive).iter().map(own_bytes).collect();
    assert_eq!(
        arrived, expected,
        "byte for byte, headers in order, duplicates kept"
    );

    // A real edit: the new text behind the kept prefix; the audit has both digests.
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": one(1), "payload": r#"{"x":2}"# }),
        )
        .await;
    assert_eq!(status, 202, "{v}");
    api.redrive_end(v["id"].as_str().unwrap()).await;
    let all = read_all(&brokers, &redrive);
    let last = own_bytes(all.last().unwrap());
    let mut edited = vec![0, 0, 0, 0, 7];
    edited.extend_from_slice(br#"{"x":2}"#);
    assert_eq!(last.1, Some(edited.clone()));
    let runs = kafka_dlq::replay::audit::history(
        &brokers,
        &kafka_dlq::kafka::ClientOptions::new(),
        &kafka_dlq::state::StateTopics::default(),
        Some(&dlq),
    )
    .unwrap()
    .runs;
    let edit = runs.iter().rev().find_map(|r| r.edit.clone()).unwrap();
    assert_eq!(
        edit.original_sha256,
        kafka_dlq::replay::audit::sha256_hex(originals[1].1.as_deref().unwrap())
    );
    assert_eq!(
        edit.edited_sha256,
        kafka_dlq::replay::audit::sha256_hex(&edited)
    );
}

/// A second key a test's tools share, 16 bytes and more.
const AUDIT_KEY: &str = "a-key-only-the-tools-hold-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrives_go_only_where_they_belong_and_unsealed_actions_change_nothing() {
    let dlt = dead_letters(&["perm-1", "perm-2", "always-1"]).await;
    let brokers = brokers();
    let audit = unique("sealed-audit");
    let state = kafka_dlq::state::StateTopics::new(&audit);
    let allowed = unique("fixed");
    let allow = format!("{allowed},{}", state.positions);
    let (_console, base) = console(
        &dlt.dlq,
        "",
        &[
            "--audit-topic",
            &audit,
            "--audit-key",
            AUDIT_KEY,
            "--redrive-topics",
            &allow,
        ],
    )
    .await;
    let api = Api::new(&base);
    api.inbox_until("", |rows| {
        rows.iter()
            .map(|r| r["count"].as_u64().unwrap())
            .sum::<u64>()
            == 4
    })
    .await;
    let all = json!({ "dlq_topic": dlt.dlq });

    // Never to a state topic, a DLT, a retry topic or an internal topic; else only to the
    // topics allowed. Nothing is written.
    for (topic, why) in [
        (audit.as_str(), "audit topic"),
        (state.positions.as_str(), "positions topic"),
        (dlt.dlq.as_str(), "dead-letter topic"),
        ("__consumer_offsets", "internal topic"),
        ("_schemas", "internal topic"),
        (&format!("{}-retry-0", dlt.topic), "retry topic"),
        ("somewhere-else", "redrive_topics"),
    ] {
        let (status, v) = api
            .post(
                "/api/redrives",
                As::Bearer(OPERATOR),
                json!({ "filter": all, "destination": { "topic": topic } }),
            )
            .await;
        assert_eq!(status, 400, "{topic}: {v}");
        assert!(v["error"].as_str().unwrap().contains(why), "{topic}: {v}");
    }
    // A topic that holds dead letters under another name, even when allowed.
    create_topic(&brokers, &allowed, 1).await;
    let letter = kafka_dlq::dlq::Envelope::new(
        &kafka_dlq::Record::new("x", 0, 0),
        kafka_dlq::DeadLetterKind::Permanent,
        "e",
        1,
        "g",
    );
    produce(
        &brokers,
        &allowed,
        vec![Out {
            partition: 0,
            key: None,
            value: Some(letter.to_vec()),
            headers: vec![],
        }],
    )
    .await;
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": all, "destination": { "topic": allowed } }),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("dead-letter envelopes"),
        "{v}"
    );
    assert_eq!(
        read_all(&brokers, &allowed).len(),
        1,
        "nothing written there"
    );

    // A dead letter whose envelope names a source this DLT does not serve goes nowhere.
    let payments = unique("payments");
    create_topic(&brokers, &payments, 1).await;
    let forged = kafka_dlq::dlq::Envelope::new(
        &kafka_dlq::Record::new(payments.clone(), 0, 0).with_payload("pay me"),
        kafka_dlq::DeadLetterKind::Permanent,
        "forged",
        1,
        &dlt.group,
    );
    produce(
        &brokers,
        &dlt.dlq,
        vec![Out {
            partition: 0,
            key: None,
            value: Some(forged.to_vec()),
            headers: vec![],
        }],
    )
    .await;
    // (Two selections: a selection's position passed it once, refused, and keeps it
    // outstanding, not to be tried again under the same selection.)
    for (destination, text) in [("source", "forged"), ("group", "forg")] {
        let forged_at = json!({
            "dlq_topic": dlt.dlq, "text": text, "records": [{ "partition": 0, "offset": 4 }]
        });
        let (status, v) = api
            .post(
                "/api/redrives",
                As::Bearer(OPERATOR),
                json!({ "filter": forged_at, "destination": destination }),
            )
            .await;
        assert_eq!(status, 202, "{v}");
        let done = api.redrive_end(v["id"].as_str().unwrap()).await;
        assert_eq!(
            (&done["sent"], &done["failed"]),
            (&json!(0), &json!(1)),
            "{done}"
        );
        assert!(
            done["problems"]
                .to_string()
                .contains("whose dead letters go to"),
            "{done}"
        );
    }
    assert!(
        read_all(&brokers, &payments).is_empty(),
        "nothing sent to the forged source"
    );

    // Records written to the state topics without the key are ignored, and counted.
    let outstanding = || async {
        api.get("/api/status", As::Bearer(VIEWER)).await.1["outstanding"]
            .as_u64()
            .unwrap()
    };
    assert!(eventually_async(WAIT, || async { outstanding().await == 5 }).await);
    let mut discard = kafka_dlq::replay::audit::ReplayRun::record(
        kafka_dlq::replay::audit::Action::Discard,
        "console:mallory",
        &dlt.dlq,
    );
    discard.selection = Some(kafka_dlq::dlq_reader::Filter::default());
    discard.ends = [(0, i64::MAX)].into_iter().collect();
    kafka_dlq::replay::audit::append(&brokers, &Default::default(), &state, &discard)
        .await
        .unwrap();
    let mut positions = kafka_dlq::state::PositionStore::new(&brokers, &Default::default(), &state);
    let key = kafka_dlq::state::PositionKey {
        dlq_topic: dlt.dlq.clone(),
        partition: 0,
        group: kafka_dlq::dlq_reader::REPLAY_GROUP.into(),
    };
    let record = kafka_dlq::state::PositionRecord {
        next: i64::MAX,
        lost: vec![],
        selection: None,
        run: None,
        operator: Some("mallory".into()),
        at: chrono::Utc::now(),
        migrated: false,
        honoured: Vec::new(),
    };
    positions.write(&key, &record).await.unwrap();
    let metrics = format!("{base}/metrics");
    assert!(
        eventually_async(WAIT, || async {
            reqwest::get(&metrics)
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
                .contains("kafka_dlq_state_unverified_records 2")
        })
        .await,
        "both forged records counted"
    );
    assert_eq!(outstanding().await, 5, "and neither resolved anything");
    let (_, history) = api.get("/api/history", As::Bearer(VIEWER)).await;
    assert!(!history.to_string().contains("mallory"), "{history}");

    // The console's own discard, sealed, does.
    let (status, v) = api
        .post(
            "/api/discards",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlt.dlq, "fingerprint": PERMANENT }, "reason": "known" }),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert!(eventually_async(WAIT, || async { outstanding().await < 5 }).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_checks_callers_before_their_bodies_and_bounds_what_each_may_run() {
    let dlt = dead_letters(&["perm-1", "always-1"]).await;
    let (console, base) = console(&dlt.dlq, "", &["--show-payloads"]).await;
    let pid = console.id().unwrap();
    let api = Api::new(&base);
    api.inbox_until("", |rows| !rows.is_empty()).await;
    let client = reqwest::Client::new();
    let raw = |token: Option<&str>, body: Vec<u8>| {
        let mut request = client
            .post(format!("{base}/api/discards"))
            .header("Content-Type", "application/json")
            .body(body);
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let v: serde_json::Value =
                serde_json::from_str(&response.text().await.unwrap()).expect("every error is JSON");
            (status, v)
        }
    };

    // Who calls, then whether their role may, then the body.
    let (status, v) = raw(None, b"{not json".to_vec()).await;
    assert_eq!(status, 401, "{v}");
    let (status, v) = raw(Some(VIEWER), b"{not json".to_vec()).await;
    assert_eq!(status, 403, "{v}");
    let (status, v) = raw(Some(OPERATOR), b"{not json".to_vec()).await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = raw(Some(OPERATOR), br#"{"reason":"x","filtre":{}}"#.to_vec()).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("filtre"), "{v}");
    let (status, v) = api.get("/api/discards", As::Bearer(OPERATOR)).await;
    assert_eq!(status, 405, "{v}");
    assert!(v["error"].is_string(), "{v}");

    // 50 MB bodies: refused, unread without a token, and memory stays where it was.
    let rss = || -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap()
    };
    let before = rss();
    let address = base.trim_start_matches("http://").to_string();
    assert_eq!(huge_post(&address, None).await, 401);
    let mut posts = Vec::new();
    for _ in 0..5 {
        posts.push(tokio::spawn(huge_post(address.clone(), Some(OPERATOR))));
    }
    for post in posts {
        assert_eq!(post.await.unwrap(), 413);
    }
    let grown = rss().saturating_sub(before);
    println!("console RSS {before} kB before five 50 MB bodies, +{grown} kB after");
    assert!(grown < 64 * 1024, "memory grew by {grown} kB");

    // A viewer's 100 exports at once: a few run, the rest are told to wait; others are
    // answered meanwhile.
    let mut exports = Vec::new();
    for _ in 0..100 {
        let request = client
            .get(format!("{base}/api/export?dlq_topic={}", dlt.dlq))
            .header("Authorization", format!("Bearer {VIEWER}"));
        exports.push(tokio::spawn(async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            // Held open, unread, while the others come in.
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            status
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let asked = std::time::Instant::now();
    let (status, _) = api.get("/api/status", As::Bearer(OPERATOR)).await;
    let status_took = asked.elapsed();
    assert_eq!(status, 200);
    let (status, v) = api
        .get(
            &format!("/api/dead-letters?dlq_topic={}", dlt.dlq),
            As::Bearer(OPERATOR),
        )
        .await;
    assert_eq!(status, 200, "another caller still reads: {v}");
    let mut statuses = Vec::new();
    for export in exports {
        statuses.push(export.await.unwrap());
    }
    let ran = statuses.iter().filter(|s| **s == 200).count();
    let told_to_wait = statuses.iter().filter(|s| **s == 429).count();
    println!("100 exports at once: {ran} ran, {told_to_wait} told to wait; /api/status answered in {status_took:?}");
    // The bound is on exports running at once: one whose small body is already written has
    // given its place back before the last of the hundred arrive, so a few more than
    // PER_CALLER may run in all; without the bound all hundred would.
    assert!(
        ran >= 1 && ran <= 25 && told_to_wait >= 75,
        "a burst is mostly told to wait: {statuses:?}"
    );
    assert_eq!(ran + told_to_wait, 100, "{statuses:?}");
    assert!(
        status_took < std::time::Duration::from_secs(5),
        "{status_took:?}"
    );
    drop(console);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_edits_the_bytes_that_failed_and_sends_them_back_unchanged() {
    let brokers = brokers();
    let (topic, dlq, group, originals) = awkward_dead_letters().await;
    let (_console, base) = console(&dlq, "", &[]).await;
    let redrive = kafka_dlq::record::retry::redrive_topic(&topic, &group);
    let browser = browser::Browser::start().await;
    browser.sign_in(&base, OPERATOR, "alice (operator)").await;
    browser.wait_count("#inbox-table tr.cause", 1).await;
    browser.click("#inbox-table tr.cause").await;
    browser.wait_count("#letters-table tr.dead-letter", 4).await;
    // The JSON a parser would change, the schema-framed one, the bytes: each opened, its
    // editor left as it was filled, and sent.
    for (row, shown) in [
        (0, "as text, exactly"),
        (1, "schema prefix is kept"),
        (2, "as base64"),
    ] {
        // Each one sent leaves the outstanding list: the next is the first.
        browser
            .run(
                "document.querySelectorAll('#letters-table tr.dead-letter')[0].click();",
                json!([]),
            )
            .await;
        browser
            .wait_text("#detail-fields", |t| t.contains(&format!("offset {row}")))
            .await;
        browser.wait_text("#edit-as", |t| t.contains(shown)).await;
        let filled = browser
            .run(
                "return document.querySelector('#edit-payload').value;",
                json!([]),
            )
            .await;
        if row == 0 {
            assert_eq!(filled, r#"{"b":1,"a":123456789012345678901234,"a":2}"#);
        }
        browser.click("#edit-redrive").await;
        assert!(
            eventually(WAIT, || read_all(&brokers, &redrive).len() == row + 1).await,
            "row {row} redriven"
        );
        let last = own_bytes(read_all(&brokers, &redrive).last().unwrap());
        assert_eq!(last, originals[row], "row {row}: the bytes that failed");
        // The inbox counts it no more (it refreshes itself), and its list shows the rest.
        browser.click("button[data-tab=inbox]").await;
        let left = (3 - row).to_string();
        browser
            .wait_text("#inbox-table tr.cause .count", |t| t == left)
            .await;
        browser.click("#inbox-table tr.cause").await;
        browser
            .wait_count("#letters-table tr.dead-letter", 3 - row as u64)
            .await;
    }
    // The tombstone cannot be edited: its editor is off.
    browser
        .run(
            "document.querySelectorAll('#letters-table tr.dead-letter')[0].click();",
            json!([]),
        )
        .await;
    browser
        .wait_text("#edit-as", |t| t.contains("tombstone"))
        .await;
    let off = browser
        .run("return [document.querySelector('#edit-payload').disabled, document.querySelector('#edit-redrive').disabled];", json!([]))
        .await;
    assert_eq!(off, json!([true, true]));
    browser.quit().await;
}

/// POSTs a 50 MB body to `/api/discards` at `address` as `token`'s caller, as a client that
/// goes on sending until the server answers (or closes): the answer's status.
async fn huge_post(address: impl AsRef<str>, token: Option<&str>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(address.as_ref())
        .await
        .unwrap();
    let (mut read, mut write) = stream.into_split();
    let size = 50 * 1024 * 1024;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST /api/discards HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n{auth}Content-Length: {size}\r\n\r\n",
        address.as_ref()
    );
    write.write_all(head.as_bytes()).await.unwrap();
    let sending = tokio::spawn(async move {
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..size / chunk.len() {
            if write.write_all(&chunk).await.is_err() {
                return; // the server closed: it read no more
            }
        }
    });
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    let read_answer = async {
        loop {
            match read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buffer[..n]),
            }
            if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), read_answer)
        .await
        .expect("an answer within 30 s");
    sending.abort();
    let line = String::from_utf8_lossy(&answer);
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {line:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_an_avro_dead_letter_decoded_and_redrives_its_edited_json_encoded() {
    use common::schema_registry::{read, registry, write};
    let brokers = brokers();
    let (registry_url, _registry) = registry().await;
    let topic = unique("avro-console");
    let dlq = format!("{topic}-dlt");
    let group = unique("billing");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    write(&registry_url, &brokers, &topic, "avro", "prefix", 1).await;
    let running = Running::start(test_config(&brokers, &group, &topic), RefuseAll);
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&1))
        .await,
        "the record is dead-lettered"
    );
    running.stop().await;
    let (_console, base) = console(&dlq, "", &["--schema-registry-url", &registry_url]).await;
    let redrive = kafka_dlq::record::retry::redrive_topic(&topic, &group);

    // A value the schema refuses is refused, saying where; nothing is sent.
    let api = Api::new(&base);
    api.inbox_until("", |rows| rows.len() == 1).await;
    let (status, v) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({"filter": {"dlq_topic": dlq, "records": [{"partition": 0, "offset": 0}]},
                   "payload_json": {"id": "not a long", "customer": {"name": "x"}}}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(v.to_string().contains("id: expected an integer"), "{v}");

    let browser = browser::Browser::start().await;
    browser.sign_in(&base, OPERATOR, "alice (operator)").await;
    browser.wait_count("#inbox-table tr.cause", 1).await;
    browser.click("#inbox-table tr.cause").await;
    browser.wait_count("#letters-table tr.dead-letter", 1).await;
    browser.click("#letters-table tr.dead-letter").await;
    browser
        .wait_text("#payload-as", |t| {
            t.contains("decoded: AVRO") && t.contains(&format!("{topic}-value"))
        })
        .await;
    browser
        .wait_text("#detail-payload", |t| t.contains("\"name\": \"c0\""))
        .await;
    browser
        .wait_text("#edit-as", |t| {
            t.contains("as JSON decoded with its schema")
        })
        .await;
    let filled = browser
        .run(
            "return JSON.parse(document.querySelector('#edit-payload').value);",
            json!([]),
        )
        .await;
    assert_eq!(
        filled,
        json!({"id": 0, "customer": {"name": "c0"}, "note": null})
    );
    browser
        .run(
            "document.querySelector('#edit-payload').value = arguments[0];",
            json!([r#"{"id": 7, "customer": {"name": "edited"}, "note": "fixed by hand"}"#]),
        )
        .await;
    browser.click("#edit-redrive").await;
    assert!(
        eventually(WAIT, || read_all(&brokers, &redrive).len() == 1).await,
        "the edited dead letter is redriven"
    );
    browser.quit().await;
    // Confluent's own deserializer reads the redriven record, with the registry: the edit.
    let values = read(&registry_url, &brokers, &redrive, "avro", 1).await;
    assert_eq!(
        values,
        vec![json!({"id": 7, "customer": {"name": "edited"}, "note": "fixed by hand"})]
    );
}

/// `key_order_after_failure = "park"`: the console shows what waits behind a dead letter —
/// per cause in the inbox, per dead letter, in a redrive's dry run — and a discard in the page
/// releases the key's parked records, which the handler then gets in their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_records_parked_behind_a_dead_letter_and_a_discard_releases_them() {
    let brokers = brokers();
    let topic = unique("parked");
    let dlq = format!("{topic}-dlt");
    let group = unique("billing");
    create_topic(&brokers, &topic, 1).await;
    create_topic(&brokers, &dlq, 1).await;
    // Keys k0-k2, events 0-3 of each, interleaved; k1's first is rejected for good.
    let event = |k: u32, seq: u32| {
        let value = match (k, seq) {
            (1, 0) => "perm-k1-0".to_string(),
            _ => format!("ok-k{k}-{seq}"),
        };
        let mut out = Out::new(0, &value);
        out.key = Some(format!("k{k}").into_bytes());
        out
    };
    produce(
        &brokers,
        &topic,
        (0..4)
            .flat_map(|s| (0..3).map(move |k| event(k, s)))
            .collect(),
    )
    .await;
    let handler = Scripted::default();
    let config = kafka_dlq::ConsumerConfig {
        key_order_after_failure: kafka_dlq::config::KeyOrderAfterFailure::Park,
        ..test_config(&brokers, &group, &topic)
    };
    let running = Running::start(config, handler.clone());
    assert!(
        eventually(WAIT, || committed(&brokers, &group, &topic, 1).get(&0)
            == Some(&12))
        .await,
        "every record handled, dead-lettered or parked"
    );
    let k1 = || -> Vec<String> {
        handler
            .calls()
            .into_iter()
            .map(|c| c.value)
            .filter(|v| v.contains("-k1-"))
            .collect()
    };
    assert_eq!(k1(), ["perm-k1-0"], "k1 waits behind its first event");

    // The monitor's alert names what waits behind the new dead letter.
    let monitor = Monitoring::start(&dlq, 3_000).await;
    assert!(
        eventually(WAIT, || monitor.said("1 new dead letter")).await,
        "{:?}",
        monitor.posts()
    );
    assert!(
        monitor.said("*Parked:* 1 key waits behind them, 3 records in all"),
        "{:?}",
        monitor.posts()
    );
    monitor.stop().await;

    let (_console, base) = console(&dlq, "", &[]).await;
    let api = Api::new(&base);
    // The cause's row: one key, three records waiting behind it.
    let rows = api
        .inbox_until("", |rows| rows.len() == 1 && rows[0]["parked"]["keys"] == 1)
        .await;
    assert_eq!(rows[0]["parked"]["records"], 3, "{}", rows[0]);
    assert!(rows[0]["parked"]["oldest"].is_string(), "{}", rows[0]);
    // The dead letter, listed and opened.
    let (status, list) = api
        .get(
            &format!("/api/dead-letters?dlq_topic={dlq}"),
            As::Bearer(VIEWER),
        )
        .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["dead_letters"][0]["parked"]["records"], 3, "{list}");
    let (status, one) = api
        .get(&format!("/api/dead-letters/{dlq}/0/0"), As::Bearer(VIEWER))
        .await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["parked"]["records"], 3, "{one}");
    // A dry run says what a redrive would release.
    let (status, started) = api
        .post(
            "/api/redrives",
            As::Bearer(OPERATOR),
            json!({ "filter": { "dlq_topic": dlq }, "dry_run": true }),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    let dry = api.redrive_end(started["id"].as_str().unwrap()).await;
    assert_eq!(
        (&dry["parked"]["keys"], &dry["parked"]["records"]),
        (&json!(1), &json!(3)),
        "{dry}"
    );

    // The page shows it per cause and per dead letter; the discard says what it released.
    let browser = browser::Browser::start().await;
    browser.sign_in(&base, OPERATOR, "alice (operator)").await;
    browser.wait_count("#inbox-table tr.cause", 1).await;
    browser
        .wait_text("#inbox-table tr.cause .parked", |t| {
            t.starts_with("1 key · 3 records waiting since")
        })
        .await;
    browser.click("#inbox-table tr.cause").await;
    browser.wait_count("#letters-table tr.dead-letter", 1).await;
    browser.click("#letters-table tr.dead-letter").await;
    browser
        .wait_text("#detail-fields", |t| {
            t.contains("3 records of this key are waiting behind it")
        })
        .await;
    browser
        .type_into("#discard-reason", "order k1 was cancelled")
        .await;
    browser.click("#discard").await;
    browser
        .wait_text("#message", |t| {
            t.starts_with("Discarded 1 dead letters")
                && t.contains("Released 3 parked records of 1 key, in order.")
        })
        .await;
    browser.quit().await;

    // The partition's owner hands them to the handler in their order; the key flows again.
    assert!(
        eventually(WAIT, || k1()
            == ["perm-k1-0", "ok-k1-1", "ok-k1-2", "ok-k1-3"])
        .await,
        "{:?}",
        k1()
    );
    produce(&brokers, &topic, vec![event(1, 4)]).await;
    assert!(
        eventually(WAIT, || k1().last().map(String::as_str) == Some("ok-k1-4")).await,
        "{:?}",
        k1()
    );
    running.stop().await;
    assert_eq!(
        k1(),
        ["perm-k1-0", "ok-k1-1", "ok-k1-2", "ok-k1-3", "ok-k1-4"],
        "each once, in order"
    );
    for k in [0, 2] {
        let calls: Vec<String> = handler
            .calls()
            .into_iter()
            .map(|c| c.value)
            .filter(|v| v.contains(&format!("-k{k}-")))
            .collect();
        assert_eq!(calls.len(), 4, "k{k} went on: {calls:?}");
    }
}
