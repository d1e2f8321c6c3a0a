#![allow(dead_code)]
//! `constle approver serve` as a child process, and a person's session with
//! it over plain HTTP (no browser).

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};

use super::common::Case;
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
