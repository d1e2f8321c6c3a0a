#![allow(dead_code)]
//! `constle approver serve` as a child process, and a person's session with
//! it over plain HTTP (no browser).

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use constle_identity::{DidKey, KeyKind, KeyStore, Name};

use super::Case;
use super::http::{self, Response, form};

pub const PASSWORD: &str = "correct horse battery staple";

/// The running approver. Killed when dropped.
pub struct Approver {
    child: Child,
    /// `127.0.0.1:port`.
    pub addr: String,
    pub stderr: Arc<Mutex<String>>,
}

impl Approver {
    /// Makes an approver key `key` (if there is none) and serves with it
    /// on a free loopback port, setting `PASSWORD` for `admin`.
    pub fn start(case: &Case, key: &str, db: Option<&Path>) -> Approver {
        Approver::start_on(case, key, db, "127.0.0.1:0")
    }

    /// [`start`](Approver::start), listening on `listen`.
    pub fn start_on(case: &Case, key: &str, db: Option<&Path>, listen: &str) -> Approver {
        if !case
            .home()
            .join(format!("keys/approver/{key}.pem"))
            .exists()
        {
            case.keygen(&["webhook-keygen", key]);
        }
        let mut args = vec![
            "approver",
            "serve",
            "--key",
            key,
            "--listen",
            listen,
            "--set-password",
        ];
        let db_arg;
        if let Some(db) = db {
            db_arg = db.display().to_string();
            args.extend(["--db", &db_arg]);
        }
        let mut child = case
            .command(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        writeln!(child.stdin.take().unwrap(), "{PASSWORD}").unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut addr = None;
        for line in lines.by_ref() {
            let line = line.unwrap();
            stderr.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some(url) = line.split("gate URL (url_secret_ref) http://").nth(1) {
                addr = Some(url.trim_end_matches("/gate").to_owned());
                break;
            }
        }
        let Some(addr) = addr else {
            panic!("the approver did not start:\n{}", stderr.lock().unwrap());
        };
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Approver {
            child,
            addr,
            stderr,
        }
    }

    /// The process id of `constle approver serve`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn gate_url(&self) -> String {
        format!("http://{}/gate", self.addr)
    }

    pub fn post_gate(&self, body: &[u8]) -> Response {
        http::request(
            &self.addr,
            "POST",
            "/gate",
            &[("Content-Type", "application/json")],
            body,
        )
        .unwrap()
    }

    /// `GET /gate/<id>/decision`.
    pub fn decision(&self, id: &str) -> Response {
        http::request(&self.addr, "GET", &format!("/gate/{id}/decision"), &[], b"").unwrap()
    }

    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Approver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `did:key` of approver key `key` in `case`'s home.
pub fn key_did(case: &Case, key: &str) -> DidKey {
    KeyStore::open(&case.home())
        .unwrap()
        .load(KeyKind::Approver, &Name::new(key).unwrap())
        .unwrap()
        .did()
        .clone()
}

/// A request waiting for a decision, as the page shows it.
pub struct Shown {
    /// Its request id.
    pub id: String,
    /// Its `<article>`'s markup.
    pub html: String,
}

impl Shown {
    /// The tool the request is for.
    pub fn tool(&self) -> &str {
        self.between("<span class=\"tool\">", "</span>")
    }

    /// The text between the first `open` in the article and the `close`
    /// after it (`""` if there is none).
    pub fn between(&self, open: &str, close: &str) -> &str {
        self.html
            .split_once(open)
            .and_then(|(_, rest)| rest.split_once(close))
            .map_or("", |(text, _)| text)
    }

    /// Panics unless the article says each of `says`.
    #[track_caller]
    pub fn says(&self, says: &[&str]) {
        for said in says {
            assert!(
                self.html.contains(said),
                "{said:?} not shown for {}:\n{}",
                self.id,
                self.html
            );
        }
    }
}

/// A person with (or without) a session.
pub struct Person<'a> {
    pub approver: &'a Approver,
    pub cookie: Option<String>,
}

impl<'a> Person<'a> {
    pub fn anonymous(approver: &'a Approver) -> Person<'a> {
        Person {
            approver,
            cookie: None,
        }
    }

    pub fn login(approver: &'a Approver, password: &str) -> (Person<'a>, Response) {
        let body = form(&[("user", "admin"), ("password", password)]);
        let response = http::request(
            &approver.addr,
            "POST",
            "/login",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            body.as_bytes(),
        )
        .unwrap();
        let cookie = response
            .header("set-cookie")
            .map(|c| c.split(';').next().unwrap().to_owned());
        (Person { approver, cookie }, response)
    }

    fn headers(&self) -> Vec<(&str, &str)> {
        let mut headers = vec![("Content-Type", "application/x-www-form-urlencoded")];
        if let Some(cookie) = &self.cookie {
            headers.push(("Cookie", cookie.as_str()));
        }
        headers
    }

    pub fn get(&self, path: &str) -> Response {
        http::request(&self.approver.addr, "GET", path, &self.headers(), b"").unwrap()
    }

    /// The requests the page lists as waiting for a decision.
    pub fn waiting(&self) -> Vec<Shown> {
        let page = self.get("/").text();
        let Some((_, waiting)) = page.split_once("<h2>Waiting for a decision") else {
            panic!("not the requests page:\n{page}");
        };
        let waiting = waiting.split("<h2>History</h2>").next().unwrap();
        waiting
            .split("<article class=\"request\" id=\"req-")
            .skip(1)
            .map(|article| {
                let (id, _) = article.split_once('"').unwrap();
                Shown {
                    id: id.to_owned(),
                    html: article.split("</article>").next().unwrap().to_owned(),
                }
            })
            .collect()
    }

    /// Reloads the page (for at most 20 s) until it lists a waiting
    /// request that `wanted` accepts; `what` names it for the failure.
    #[track_caller]
    pub fn wait_for(&self, what: &str, wanted: impl Fn(&Shown) -> bool) -> Shown {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(shown) = self.waiting().into_iter().find(&wanted) {
                return shown;
            }
            assert!(Instant::now() < deadline, "the page never showed {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The CSRF token in the page's forms.
    pub fn csrf(&self) -> String {
        let page = self.get("/").text();
        let at = page
            .find("name=\"csrf\" value=\"")
            .unwrap_or_else(|| panic!("no CSRF token in\n{page}"));
        page[at + 19..at + 19 + 64].to_owned()
    }

    pub fn decide(&self, csrf: &str, id: &str, decision: &str) -> Response {
        self.post(
            "/decide",
            &[("csrf", csrf), ("request_id", id), ("decision", decision)],
            &[],
        )
    }

    /// What a click on the page's button sends: the page's own CSRF token.
    pub fn click(&self, id: &str, decision: &str) -> Response {
        self.decide(&self.csrf(), id, decision)
    }

    pub fn post(&self, path: &str, fields: &[(&str, &str)], extra: &[(&str, &str)]) -> Response {
        let mut headers = self.headers();
        headers.extend_from_slice(extra);
        http::request(
            &self.approver.addr,
            "POST",
            path,
            &headers,
            form(fields).as_bytes(),
        )
        .unwrap()
    }
}
