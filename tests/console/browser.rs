//! A real browser: Debian's headless Chromium driven over WebDriver by its chromedriver.

use std::os::unix::process::CommandExt;
use std::time::Duration;

use serde_json::{json, Value};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver and one headless Chromium session; both stop when dropped.
pub struct Browser {
    driver: std::process::Child,
    base: String,
    session: String,
    client: reqwest::Client,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium session.
    pub async fn start() -> Browser {
        let port = super::free_port();
        // A process group of its own, Chromium included: a test that fails before `quit`
        // leaves no browser behind (see Drop).
        let driver = std::process::Command::new(
            std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into()),
        )
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("chromedriver (Debian's chromium-driver; ./scripts/test.sh installs it)");
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let status = format!("{base}/status");
        assert!(
            super::eventually_async(Duration::from_secs(30), || async {
                match client.get(&status).send().await {
                    Ok(r) => r.json_value().await["value"]["ready"] == true,
                    Err(_) => false,
                }
            })
            .await,
            "chromedriver is ready"
        );
        let mut browser = Browser {
            driver,
            base,
            session: String::new(),
            client,
        };
        let binary = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let created = browser
            .call(
                reqwest::Method::POST,
                "/session",
                Some(json!({ "capabilities": { "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": binary,
                        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                 "--window-size=1400,1000", "--user-data-dir=/tmp/kafka-dlq-chromium-".to_string() + &port.to_string()]
                    }
                }}})),
            )
            .await;
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("a session: {created}"))
            .to_string();
        browser
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let value = self.answer(method, path, body).await;
        assert!(
            value["value"]["error"].is_null(),
            "WebDriver {path}: {value}"
        );
        value["value"].clone()
    }

    /// ChromeDriver's whole answer to a request, an error included.
    async fn answer(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request
                .header("Content-Type", "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.expect("chromedriver answers");
        response.json_value().await
    }

    fn at(&self, path: &str) -> String {
        format!("/session/{}{path}", self.session)
    }

    /// Opens `url`.
    pub async fn open(&self, url: &str) {
        self.call(
            reqwest::Method::POST,
            &self.at("/url"),
            Some(json!({ "url": url })),
        )
        .await;
    }

    /// Runs `script` in the page (its `arguments` are `args`); what it returns.
    pub async fn run(&self, script: &str, args: Value) -> Value {
        self.call(
            reqwest::Method::POST,
            &self.at("/execute/sync"),
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    async fn element(&self, css: &str) -> String {
        let found = self
            .call(
                reqwest::Method::POST,
                &self.at("/element"),
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await;
        found[ELEMENT].as_str().unwrap().to_string()
    }

    /// Clicks the first element `css` selects, as a user would. The page may render the
    /// element again between finding and clicking it (CI once caught a stale element there):
    /// then it is found again, up to five times, as a user's eye would.
    pub async fn click(&self, css: &str) {
        for _ in 0..5 {
            let id = self.element(css).await;
            let path = self.at(&format!("/element/{id}/click"));
            let value = self
                .answer(reqwest::Method::POST, &path, Some(json!({})))
                .await;
            match value["value"]["error"].as_str() {
                None => return,
                Some("stale element reference") => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await
                }
                Some(_) => panic!("WebDriver {path}: {value}"),
            }
        }
        panic!("{css} was rendered again at each of five clicks");
    }

    /// Clears the field `css` selects and types `text` into it.
    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &self.at(&format!("/element/{id}/clear")),
            Some(json!({})),
        )
        .await;
        self.call(
            reqwest::Method::POST,
            &self.at(&format!("/element/{id}/value")),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// The text of the first element `css` selects ("" when none does).
    pub async fn text(&self, css: &str) -> String {
        self.run(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';",
            json!([css]),
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// How many elements `css` selects (visible or not).
    pub async fn count(&self, css: &str) -> u64 {
        self.run(
            "return document.querySelectorAll(arguments[0]).length;",
            json!([css]),
        )
        .await
        .as_u64()
        .unwrap()
    }

    /// Waits until `check` holds of the text of `css`; that text.
    pub async fn wait_text(&self, css: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + super::WAIT;
        loop {
            let text = self.text(css).await;
            if check(&text) {
                return text;
            }
            let message = self.text("#message").await;
            assert!(
                tokio::time::Instant::now() < deadline,
                "`{css}` never got there: {text:?} (message: {message:?})"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until `css` selects `n` elements.
    pub async fn wait_count(&self, css: &str, n: u64) {
        let deadline = tokio::time::Instant::now() + super::WAIT;
        while self.count(css).await != n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "`{css}` never counted {n}: {}",
                self.count(css).await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A PNG of the page, written to `path`.
    pub async fn screenshot(&self, path: &std::path::Path) {
        use base64::Engine as _;
        let png = self
            .call(reqwest::Method::GET, &self.at("/screenshot"), None)
            .await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

impl Browser {
    /// Opens the console at `base`, signs in with `token` and waits until the page says
    /// who signed in (`who`, e.g. `alice (operator)`).
    pub async fn sign_in(&self, base: &str, token: &str, who: &str) {
        self.open(&format!("{base}/")).await;
        self.wait_count("#signin:not([hidden])", 1).await;
        self.type_into("#token", token).await;
        self.click("#sign-in").await;
        self.wait_text("#who", |t| t.contains(who)).await;
    }

    /// The value of the cookie `name` the page's site set (HttpOnly ones too).
    pub async fn cookie(&self, name: &str) -> String {
        let found = self
            .call(
                reqwest::Method::GET,
                &self.at(&format!("/cookie/{name}")),
                None,
            )
            .await;
        found["value"].as_str().unwrap_or_default().to_string()
    }

    /// The address the browser is at.
    pub async fn url(&self) -> String {
        let at = self
            .call(reqwest::Method::GET, &self.at("/url"), None)
            .await;
        at.as_str().unwrap_or_default().to_string()
    }

    /// Ends the session: Chromium quits, then chromedriver stops.
    pub async fn quit(mut self) {
        let path = format!("/session/{}", self.session);
        self.call(reqwest::Method::DELETE, &path, None).await;
        self.session.clear();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group: chromedriver and the Chromium it started.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

trait JsonValue {
    async fn json_value(self) -> Value;
}

impl JsonValue for reqwest::Response {
    async fn json_value(self) -> Value {
        let text = self.text().await.unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }
}
