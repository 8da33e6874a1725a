//! A stand-in for Slack's incoming webhook on loopback, printing each alert as Slack shows it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// An HTTP endpoint on loopback standing in for Slack's incoming webhook.
pub(super) async fn slack_stand_in(
    alerts: Arc<AtomicU32>,
    increases: Arc<AtomicU32>,
) -> anyhow::Result<String> {
    use axum::routing::post;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/services/T000/B000/demo", listener.local_addr()?);
    let app = axum::Router::new().route(
        "/services/T000/B000/demo",
        post(move |body: axum::body::Bytes| {
            let (alerts, increases) = (alerts.clone(), increases.clone());
            async move {
                let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let text = json["text"].as_str().unwrap_or_default();
                let framed: String = text.lines().map(|l| format!("  │ {l}\n")).collect();
                println!("\n  ┌─ Slack #parcel-alerts (from the DLQ monitor)\n{framed}  └─");
                alerts.fetch_add(1, Ordering::SeqCst);
                if text.contains("new dead letter") {
                    increases.fetch_add(1, Ordering::SeqCst);
                }
                "ok"
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(url)
}
