//! Just enough W3C WebDriver to drive headless Chromium through
//! chromedriver: one browser, navigate, find, type, click, read, screenshot.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::http;

/// The key under which WebDriver returns an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// chromedriver and one browser session. Both end when dropped.
pub struct Browser {
    driver: Child,
    addr: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and headless Chromium with a fresh profile and a
    /// `width`×`height` window.
    pub fn start(width: u32, height: u32) -> Browser {
        let port = {
            let probe = TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = http::request(&addr, "GET", "/status", &[], b"")
                .ok()
                .and_then(|r| serde_json::from_slice::<Value>(&r.body).ok())
                .is_some_and(|v| v["value"]["ready"] == true);
            if ready {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--hide-scrollbars".to_owned(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let mut browser = Browser {
            driver,
            addr,
            session: String::new(),
            _profile: profile,
        };
        let created = browser.call(
            "POST",
            "/session",
            Some(json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
            }}})),
        );
        browser.session = created["sessionId"].as_str().unwrap().to_owned();
        browser
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let response = http::request(
            &self.addr,
            method,
            path,
            &[("Content-Type", "application/json; charset=utf-8")],
            body.as_bytes(),
        )
        .unwrap();
        let value: Value = serde_json::from_slice(&response.body).unwrap();
        assert_eq!(
            response.status, 200,
            "WebDriver {method} {path}: {}",
            value["value"]
        );
        value["value"].clone()
    }

    fn session_call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    pub fn goto(&self, url: &str) {
        self.session_call("POST", "/url", Some(json!({"url": url})));
    }

    /// The serialized DOM.
    pub fn source(&self) -> String {
        self.session_call("GET", "/source", None)
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Every element matching the CSS selector.
    pub fn find_all(&self, css: &str) -> Vec<String> {
        let found = self.session_call(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        );
        found
            .as_array()
            .unwrap_or_else(|| panic!("{css}: {found}"))
            .iter()
            .map(|e| {
                e[ELEMENT]
                    .as_str()
                    .unwrap_or_else(|| panic!("{e}"))
                    .to_owned()
            })
            .collect()
    }

    pub fn find(&self, css: &str) -> String {
        let found = self.find_all(css);
        assert_eq!(found.len(), 1, "{css}: {} elements", found.len());
        found[0].clone()
    }

    pub fn type_into(&self, element: &str, text: &str) {
        self.session_call(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({"text": text})),
        );
    }

    pub fn click(&self, element: &str) {
        self.session_call(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        );
    }

    /// Clicks a button that submits a form, and returns once the page the
    /// submission leads to has replaced this one. A click returns when it
    /// is dispatched, before the browser has even started the submission:
    /// reading the page then reads the old one, and navigating away may
    /// cancel the submission.
    pub fn submit(&self, button: &str) {
        let page = self.find("html");
        self.click(button);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.is_stale(&page) {
            assert!(Instant::now() < deadline, "the form's next page never came");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether `element` belongs to a page that has been replaced (WebDriver
    /// answers 404, "stale element reference").
    fn is_stale(&self, element: &str) -> bool {
        let path = format!("/session/{}/element/{element}/name", self.session);
        http::request(&self.addr, "GET", &path, &[], b"").is_ok_and(|r| r.status == 404)
    }

    /// The rendered text of an element, as a person reads it.
    pub fn text(&self, element: &str) -> String {
        self.session_call("GET", &format!("/element/{element}/text"), None)
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub fn resize(&self, width: u32, height: u32) {
        self.session_call(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        );
    }

    /// A PNG of the viewport.
    pub fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let data = self.session_call("GET", "/screenshot", None);
        base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http::request(
                &self.addr,
                "DELETE",
                &format!("/session/{}", self.session),
                &[],
                b"",
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
