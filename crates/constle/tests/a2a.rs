//! Agent-to-agent messages end to end: an agent in `constle run` sends to a
//! peer and reads its inbox through `CONSTLE_A2A_URL`, a second agent
//! listens with `constle a2a listen` and answers with `constle a2a send`,
//! and a third, undeclared one is refused; a replay store damaged under
//! `a2a listen` is refused and recorded. Each side has its own
//! `CONSTLE_HOME`, as on two machines. Loopback only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use constle_testkit::{Agentfile, require_root};

mod common;
use common::{Case, text};

/// The agent inside the sandbox: sends to the peer, then waits for one
/// message in its inbox and prints it.
const AGENT: &str = r#"
import json, os, sys, time, urllib.request
base = os.environ["CONSTLE_A2A_URL"]
http = urllib.request.build_opener(urllib.request.ProxyHandler({}))
req = urllib.request.Request(base + "/outbox", json.dumps({"to": sys.argv[1], "body": {"text": "hello bob"}}).encode(), {"Content-Type": "application/json"})
print("sent", http.open(req, timeout=20).status, flush=True)
for _ in range(400):
    answer = http.open(base + "/inbox/next", timeout=20)
    if answer.status == 200:
        print("inbox", answer.read().decode(), flush=True)
        break
    time.sleep(0.05)
"#;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Agent {
    case: Case,
    name: &'static str,
    did: String,
    port: u16,
}

impl Agent {
    fn new(name: &'static str) -> Agent {
        let case = Case::new();
        let did = case.keygen(&["keygen", name]);
        Agent {
            case,
            name,
            did,
            port: free_port(),
        }
    }

    /// Writes its Agentfile: listening on its port, `peers` with their URLs,
    /// running `command`.
    fn agentfile(&self, peers: &[&Agent], command: &[String]) -> std::path::PathBuf {
        let peers: String = peers
            .iter()
            .map(|p| {
                format!(
                    "    - did: {}\n      url: http://127.0.0.1:{}\n",
                    p.did, p.port
                )
            })
            .collect();
        self.case.write_agentfile(
            &Agentfile::new(self.name)
                .did(&self.did)
                .command(command)
                .workdir("./work")
                .egress("none")
                .section(&format!(
                    "a2a:\n  listen: 127.0.0.1:{}\n  peers:\n{peers}",
                    self.port
                )),
        )
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.case
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn events(&self, name: &str) -> Vec<serde_json::Value> {
        self.case.events(name)
    }
}

/// A listener started by a test: interrupted when the test is done with
/// it, killed if the test fails first (it would outlive the test).
struct Listening(Child);

impl Listening {
    /// Stops it as Ctrl-C would, so it closes its audit log.
    fn interrupt(mut self) {
        let _ = Command::new("kill")
            .arg("-INT")
            .arg(self.0.id().to_string())
            .status();
        let _ = self.0.wait();
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Lines of `child`'s stdout, as they come.
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

fn wait_for(lines: &mpsc::Receiver<String>, what: &str) -> String {
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no line with {what:?} in time"));
        if line.contains(what) {
            return line;
        }
    }
}

#[test]
fn agents_exchange_signed_messages_and_strangers_are_refused() {
    if !require_root("a2a end to end", &["bwrap"]) {
        return;
    }
    let alice = Agent::new("alice");
    let bob = Agent::new("bob");
    let carol = Agent::new("carol");
    let script = alice.case.path("work/agent.py");
    std::fs::write(&script, AGENT).unwrap();
    let command = ["python3".to_owned(), "agent.py".to_owned(), bob.did.clone()];
    let alice_file = alice.agentfile(&[&bob], &command);
    let bob_file = bob.agentfile(&[&alice], &["true".to_owned()]);
    let carol_file = carol.agentfile(&[&alice], &["true".to_owned()]);

    let mut listening =
        Listening(bob.spawn(&["a2a", "listen", "--agentfile", bob_file.to_str().unwrap()]));
    let bob_heard = lines(&mut listening.0);
    std::thread::sleep(Duration::from_millis(300));
    let mut run = alice.spawn(&["run", alice_file.to_str().unwrap()]);
    let alice_said = lines(&mut run);

    // Alice's agent sent through the host, which signed for it.
    assert_eq!(wait_for(&alice_said, "sent"), "sent 202");
    let heard: serde_json::Value =
        serde_json::from_str(&wait_for(&bob_heard, "hello bob")).unwrap();
    assert_eq!(heard["from"], alice.did.as_str());
    assert_eq!(heard["body"]["text"], "hello bob");

    // A stranger (Alice does not list Carol) is refused.
    let stranger = carol.case.run(&[
        "a2a",
        "send",
        "--agentfile",
        carol_file.to_str().unwrap(),
        "--to",
        &alice.did,
        r#"{"text":"let me in"}"#,
    ]);
    assert_eq!(
        stranger.status.code(),
        Some(1),
        "{}",
        text(&stranger.stderr)
    );
    assert!(text(&stranger.stderr).contains("a2a_unknown_sender"));

    // Bob answers from the command line; Alice's agent reads it.
    let answer = bob.case.run(&[
        "a2a",
        "send",
        "--agentfile",
        bob_file.to_str().unwrap(),
        "--to",
        &alice.did,
        r#"{"text":"hello alice"}"#,
    ]);
    assert!(answer.status.success(), "{}", text(&answer.stderr));
    let inbox = wait_for(&alice_said, "inbox");
    assert!(
        inbox.contains("hello alice") && inbox.contains(&bob.did),
        "{inbox}"
    );
    assert!(run.wait().unwrap().success());
    listening.interrupt();

    let sent = alice.events("a2a_sent");
    assert_eq!(sent[0]["to"], bob.did.as_str());
    assert_eq!(sent[0]["delivered"], true);
    let accepted = alice.events("a2a_accepted");
    assert_eq!(accepted.len(), 1);
    assert_eq!(accepted[0]["from"], bob.did.as_str());
    let refused = alice.events("a2a_refused");
    assert_eq!(refused[0]["reason"], "a2a_unknown_sender");
    assert_eq!(bob.events("a2a_accepted")[0]["from"], alice.did.as_str());
    assert_eq!(bob.events("a2a_sent")[0]["delivered"], true);
    assert_eq!(carol.events("a2a_sent")[0]["delivered"], false);
}

/// `a2a send` from `from` to `to`, with `body`.
fn send(from: &Agent, agentfile: &std::path::Path, to: &Agent, body: &str) -> std::process::Output {
    from.case.run(&[
        "a2a",
        "send",
        "--agentfile",
        agentfile.to_str().unwrap(),
        "--to",
        &to.did,
        body,
    ])
}

#[test]
fn a_replay_store_damaged_under_a2a_listen_is_refused_and_recorded() {
    let alice = Agent::new("alice");
    let bob = Agent::new("bob");
    let alice_file = alice.agentfile(&[&bob], &["true".to_owned()]);
    let bob_file = bob.agentfile(&[&alice], &["true".to_owned()]);
    let listening =
        Listening(bob.spawn(&["a2a", "listen", "--agentfile", bob_file.to_str().unwrap()]));
    // Until the listener is up, sending fails with 2.
    let delivered = (0..100).any(|_| {
        let out = send(&alice, &alice_file, &bob, r#"{"n":1}"#);
        std::thread::sleep(Duration::from_millis(100));
        out.status.success()
    });
    assert!(delivered, "the listener never accepted a message");

    let seen = bob
        .case
        .home()
        .join("a2a/replay")
        .join(&bob.did)
        .join("seen");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seen)
        .unwrap()
        .set_len(0)
        .unwrap();
    let refused = send(&alice, &alice_file, &bob, r#"{"n":2}"#);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("a2a_replay_store_unavailable"),
        "{}",
        text(&refused.stderr)
    );
    // The id was written back; the next message goes through.
    let again = send(&alice, &alice_file, &bob, r#"{"n":3}"#);
    assert!(again.status.success(), "{}", text(&again.stderr));
    listening.interrupt();

    let refusals = bob.events("a2a_refused");
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0]["reason"], "a2a_replay_store_unavailable");
    let detail = refusals[0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&seen.display().to_string()) && detail.contains("shrank"),
        "{detail}"
    );
    assert_eq!(bob.events("a2a_accepted").len(), 2);
}
