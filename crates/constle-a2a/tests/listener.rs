//! The listener over real HTTP on loopback: every refusal, replays after a
//! restart and across listeners (embedded and Redis), a store that cannot
//! be read, and the agent's inbox and outbox.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests stop at the first surprise"
)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use constle_a2a::{
    A2aClient, DeliverError, Envelope, Inbox, Listener, ListenerConfig, ListenerEvent, Outbox,
    PeerUrl, ReplayStore, sandbox_router, sign_envelope,
};
use constle_identity::{DidKey, SigningIdentity};
use constle_testkit::{RedisServer, require_tools};
use jiff::{SignedDuration, Timestamp};
use serde_json::json;

type Events = Arc<Mutex<Vec<ListenerEvent>>>;

struct Running {
    url: PeerUrl,
    base: String,
    inbox: Inbox,
    events: Events,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap().unwrap();
    }

    fn reasons(&self) -> Vec<&'static str> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(ListenerEvent::reason)
            .collect()
    }
}

async fn start(me: &DidKey, peers: &[&DidKey], store: ReplayStore, inbox: Inbox) -> Running {
    start_with(me, peers, store, inbox, |c| c).await
}

async fn start_with(
    me: &DidKey,
    peers: &[&DidKey],
    store: ReplayStore,
    inbox: Inbox,
    tweak: impl FnOnce(ListenerConfig) -> ListenerConfig,
) -> Running {
    let events: Events = Arc::default();
    let sink = Arc::clone(&events);
    let config = ListenerConfig::new(
        me.clone(),
        peers.iter().map(|d| (*d).clone()),
        store,
        inbox.clone(),
    )
    .on_event(move |event| sink.lock().unwrap().push(event));
    let listener = Listener::new(tweak(config));
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(listener.serve_with_shutdown(tcp, async {
        let _ = stopped.await;
    }));
    let base = format!("http://{addr}");
    Running {
        url: PeerUrl::parse(&base).unwrap(),
        base,
        inbox,
        events,
        stop: Some(stop),
        task,
    }
}

async fn embedded(home: &Path, me: &DidKey) -> ReplayStore {
    ReplayStore::embedded(home, me).await.unwrap()
}

/// `me`'s replay store in `redis`, shared by every listener that opens it.
async fn shared(redis: &RedisServer, me: &DidKey) -> ReplayStore {
    ReplayStore::redis(&redis.url(), me).await.unwrap()
}

fn keys() -> (SigningIdentity, SigningIdentity) {
    (SigningIdentity::generate(), SigningIdentity::generate())
}

/// Bob's listener with alice as his one peer and a default inbox: the node
/// most tests post to, over whichever replay store the test is about.
async fn listen(alice: &SigningIdentity, bob: &SigningIdentity, store: ReplayStore) -> Running {
    start(bob.did(), &[alice.did()], store, Inbox::default()).await
}

/// Where most tests start: a fresh home, alice and bob, and bob's listener
/// hearing alice with its seen ids kept in that home.
async fn scene() -> (tempfile::TempDir, SigningIdentity, SigningIdentity, Running) {
    let home = tempfile::tempdir().unwrap();
    let (alice, bob) = keys();
    let node = listen(&alice, &bob, embedded(home.path(), bob.did()).await).await;
    (home, alice, bob, node)
}

fn envelope(from: &SigningIdentity, to: &DidKey) -> Envelope {
    sign_envelope(from, to, json!({"text": "hi"}), Timestamp::now()).unwrap()
}

/// POSTs raw bytes; returns the status, the reason code and `Retry-After`.
async fn post(base: &str, body: Vec<u8>) -> (u16, Option<String>, Option<String>) {
    let response = reqwest::Client::new()
        .post(format!("{base}/a2a/v1/messages"))
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    let code = body
        .get("error")
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    (status, code, retry)
}

fn refused(result: Result<constle_a2a::Delivery, DeliverError>) -> (u16, String) {
    match result {
        Err(DeliverError::Refused { status, reason, .. }) => (status, reason.unwrap()),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn accepts_once_then_refuses_the_replay() {
    let (home, alice, bob, node) = scene().await;
    let client = A2aClient::new().unwrap();
    let sent = envelope(&alice, bob.did());
    let delivery = client.deliver(&node.url, &sent).await.unwrap();
    assert_eq!(delivery.status, 202);
    assert_eq!(&delivery.msg_id, sent.msg_id());
    let message = node.inbox.pop().unwrap();
    assert_eq!(message.from(), alice.did());
    assert_eq!(message.body(), &json!({"text": "hi"}));
    assert!(node.inbox.pop().is_none());
    assert_eq!(
        refused(client.deliver(&node.url, &sent).await),
        (409, "a2a_replayed".to_owned())
    );
    assert!(node.inbox.pop().is_none());
    assert_eq!(node.reasons(), ["a2a_accepted", "a2a_replayed"]);
    let events = node.events.lock().unwrap().clone();
    assert!(events[0].accepted);
    assert_eq!(events[1].msg_id.as_ref(), Some(sent.msg_id()));
    assert_eq!(events[1].from.as_ref(), Some(alice.did()));
    assert_eq!(events[1].status, 409);
    assert!(events[1].remote.unwrap().ip().is_loopback());
    // Seen ids live under $CONSTLE_HOME/a2a/replay/<did>/.
    let seen = std::fs::read_to_string(
        home.path()
            .join("a2a/replay")
            .join(bob.did().as_str())
            .join("seen"),
    )
    .unwrap();
    assert!(seen.contains(sent.msg_id().as_str()));
    node.stop().await;
}

#[tokio::test]
async fn every_refusal_has_its_status_and_code() {
    let home = tempfile::tempdir().unwrap();
    let (alice, bob) = keys();
    let (mallory, carol) = keys();
    let node = start_with(
        bob.did(),
        &[alice.did(), carol.did()],
        embedded(home.path(), bob.did()).await,
        Inbox::default(),
        |c| c.max_envelope_bytes(4096),
    )
    .await;
    let now = Timestamp::now();
    let minutes = |m: i64| SignedDuration::from_mins(m);

    // Unknown sender: a valid signature by an undeclared key.
    let from_mallory = envelope(&mallory, bob.did());
    assert_eq!(
        post(&node.base, from_mallory.to_bytes()).await,
        (403, Some("a2a_unknown_sender".into()), None)
    );

    // Bad signature: a declared sender, an edited body.
    let mut edited: serde_json::Value =
        serde_json::from_slice(&envelope(&alice, bob.did()).to_bytes()).unwrap();
    edited["body"]["text"] = json!("pay mallory");
    assert_eq!(
        post(&node.base, edited.to_string().into_bytes()).await,
        (401, Some("a2a_bad_signature".into()), None)
    );
    // Bad signature: a declared sender's envelope, signed by someone else.
    let mut forged: serde_json::Value = serde_json::from_slice(&from_mallory.to_bytes()).unwrap();
    forged["from"] = json!(alice.did().as_str());
    assert_eq!(
        post(&node.base, forged.to_string().into_bytes()).await,
        (401, Some("a2a_bad_signature".into()), None)
    );

    // Wrong addressee: for carol, sent to bob.
    let for_carol = envelope(&alice, carol.did());
    assert_eq!(
        post(&node.base, for_carol.to_bytes()).await,
        (403, Some("a2a_wrong_addressee".into()), None)
    );

    // Too old, from the future; just inside the window both ways.
    let old = sign_envelope(&alice, bob.did(), json!(1), now - minutes(6)).unwrap();
    assert_eq!(
        post(&node.base, old.to_bytes()).await,
        (400, Some("a2a_too_old".into()), None)
    );
    let future = sign_envelope(&alice, bob.did(), json!(1), now + minutes(6)).unwrap();
    assert_eq!(
        post(&node.base, future.to_bytes()).await,
        (400, Some("a2a_from_the_future".into()), None)
    );
    let early = sign_envelope(&alice, bob.did(), json!(1), now - minutes(4)).unwrap();
    assert_eq!(post(&node.base, early.to_bytes()).await.0, 202);
    let late = sign_envelope(&alice, bob.did(), json!(1), now + minutes(4)).unwrap();
    assert_eq!(post(&node.base, late.to_bytes()).await.0, 202);

    // Malformed: not JSON, duplicate keys, an extra member, a wrong type,
    // a non-canonical time, a big integer.
    let good: serde_json::Value =
        serde_json::from_slice(&envelope(&alice, bob.did()).to_bytes()).unwrap();
    let text = good.to_string();
    let duplicated = text.replacen("{\"body\"", "{\"v\":\"constle-a2a-v1\",\"body\"", 1);
    let mut extra = good.clone();
    extra["note"] = json!("x");
    let mut wrong_type = good.clone();
    wrong_type["msg_id"] = json!(7);
    let mut odd_time = good.clone();
    odd_time["issued_at"] = json!(Timestamp::now().to_string());
    let mut big = good.clone();
    big["body"] = json!({"n": 1u64 << 60});
    for (what, body) in [
        ("not JSON", b"{not json".to_vec()),
        ("empty", Vec::new()),
        ("duplicate key", duplicated.into_bytes()),
        ("extra member", extra.to_string().into_bytes()),
        ("wrong type", wrong_type.to_string().into_bytes()),
        ("time spelling", odd_time.to_string().into_bytes()),
        ("big integer", big.to_string().into_bytes()),
        ("trailing data", format!("{text} {{}}").into_bytes()),
    ] {
        assert_eq!(
            post(&node.base, body).await,
            (400, Some("a2a_malformed".into()), None),
            "{what}"
        );
    }

    // Too large: declared by Content-Length, over the configured 4096.
    let large = sign_envelope(&alice, bob.did(), json!("x".repeat(5000)), now).unwrap();
    assert_eq!(
        post(&node.base, large.to_bytes()).await,
        (413, Some("a2a_too_large".into()), None)
    );

    let reasons = node.reasons();
    for code in [
        "a2a_unknown_sender",
        "a2a_bad_signature",
        "a2a_wrong_addressee",
        "a2a_too_old",
        "a2a_from_the_future",
        "a2a_malformed",
        "a2a_too_large",
    ] {
        assert!(reasons.contains(&code), "{code} reported: {reasons:?}");
    }
    assert_eq!(node.inbox.len(), 2);
    node.stop().await;
}

#[tokio::test]
async fn a_replay_is_refused_after_a_restart() {
    let (home, alice, bob, first) = scene().await;
    let sent = envelope(&alice, bob.did());
    assert_eq!(post(&first.base, sent.to_bytes()).await.0, 202);
    first.stop().await;
    let second = listen(&alice, &bob, embedded(home.path(), bob.did()).await).await;
    assert_eq!(
        post(&second.base, sent.to_bytes()).await,
        (409, Some("a2a_replayed".into()), None)
    );
    assert!(second.inbox.is_empty());
    second.stop().await;
}

/// Sends `copies` of one envelope to the listeners, all at once, and counts
/// the final statuses (a copy that met another one still in flight in Redis
/// is resent, as its 503 asks).
async fn race(bases: &[String], sent: &Envelope, copies: usize) -> (usize, usize) {
    let mut tasks = Vec::new();
    for i in 0..copies {
        let base = bases[i % bases.len()].clone();
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move { resend(&base, &sent).await.0 }));
    }
    let mut accepted = 0;
    let mut replayed = 0;
    for task in tasks {
        match task.await.unwrap() {
            202 => accepted += 1,
            409 => replayed += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    (accepted, replayed)
}

/// Ten envelopes, each posted eight times at once across `a` and `b`: every
/// one accepted exactly once in all, whatever store the two listeners share.
async fn accept_once_in_all(
    a: &Running,
    b: &Running,
    alice: &SigningIdentity,
    bob: &SigningIdentity,
) {
    let bases = [a.base.clone(), b.base.clone()];
    for _ in 0..10 {
        let sent = envelope(alice, bob.did());
        assert_eq!(race(&bases, &sent, 8).await, (1, 7));
    }
    assert_eq!(a.inbox.len() + b.inbox.len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_embedded_listeners_of_one_identity_accept_once_in_all() {
    let (home, alice, bob, a) = scene().await;
    let b = listen(&alice, &bob, embedded(home.path(), bob.did()).await).await;
    accept_once_in_all(&a, &b, &alice, &bob).await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn an_unreadable_store_refuses_with_a_retryable_503() {
    let (home, alice, bob, node) = scene().await;
    let dir = home.path().join("a2a/replay").join(bob.did().as_str());
    // Content this version did not write.
    std::fs::write(dir.join("seen"), "garbage\n").unwrap();
    let sent = envelope(&alice, bob.did());
    assert_eq!(
        post(&node.base, sent.to_bytes()).await,
        (
            503,
            Some("a2a_replay_store_unavailable".into()),
            Some("1".into())
        )
    );
    // Not a file at all (also refused when running as root).
    std::fs::remove_file(dir.join("seen")).unwrap();
    std::fs::create_dir(dir.join("seen")).unwrap();
    assert_eq!(post(&node.base, sent.to_bytes()).await.0, 503);
    assert!(node.inbox.is_empty());
    // Repaired with an empty file (this listener had recorded nothing, so
    // nothing is lost): the same envelope is accepted, it was never recorded.
    std::fs::remove_dir(dir.join("seen")).unwrap();
    std::fs::write(dir.join("seen"), "").unwrap();
    assert_eq!(post(&node.base, sent.to_bytes()).await.0, 202);
    let event = node.events.lock().unwrap()[0].clone();
    assert_eq!(event.reason(), "a2a_replay_store_unavailable");
    assert!(
        format!("{:?}", event.refusal).contains("corrupt"),
        "{event:?}"
    );
    node.stop().await;
}

fn seen_file(home: &Path, me: &DidKey) -> std::path::PathBuf {
    home.join("a2a/replay").join(me.as_str()).join("seen")
}

fn set_len(path: &Path, len: impl FnOnce(u64) -> u64) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let was = file.metadata().unwrap().len();
    file.set_len(len(was)).unwrap();
}

/// Something done to a store's `seen` file.
type Damage = fn(&Path);

/// What can happen to the seen-ids file while a listener runs, none of
/// which may make it forget an id still inside its window.
const DAMAGE: [(&str, Damage); 4] = [
    ("truncated to nothing", |seen| set_len(seen, |_| 0)),
    ("cut inside its last line", |seen| {
        set_len(seen, |len| len - 10)
    }),
    ("unlinked", |seen| std::fs::remove_file(seen).unwrap()),
    ("replaced by an empty file", |seen| {
        let other = seen.with_extension("other");
        std::fs::write(&other, "").unwrap();
        std::fs::rename(&other, seen).unwrap();
    }),
];

#[tokio::test]
async fn a_store_damaged_under_a_running_listener_forgets_nothing() {
    for (what, damage) in DAMAGE {
        let (home, alice, bob, node) = scene().await;
        let sent = envelope(&alice, bob.did());
        assert_eq!(post(&node.base, sent.to_bytes()).await.0, 202, "{what}");
        damage(&seen_file(home.path(), bob.did()));
        // The damage is refused and reported, and the ids written back.
        assert_eq!(
            post(&node.base, sent.to_bytes()).await,
            (
                503,
                Some("a2a_replay_store_unavailable".into()),
                Some("1".into())
            ),
            "{what}"
        );
        let refusal = format!("{:?}", node.events.lock().unwrap()[1].refusal);
        assert!(refusal.contains("written back"), "{what}: {refusal}");
        assert_eq!(post(&node.base, sent.to_bytes()).await.0, 409, "{what}");
        assert_eq!(node.inbox.len(), 1, "{what}");
        node.stop().await;
        // Also for a listener started afterwards.
        let again = listen(&alice, &bob, embedded(home.path(), bob.did()).await).await;
        assert_eq!(post(&again.base, sent.to_bytes()).await.0, 409, "{what}");
        again.stop().await;
    }
}

/// What a listener may find when it starts: each is refused, and left as
/// it was for an operator to look at.
const UNTRUSTED: [(&str, Damage, &str); 3] = [
    (
        "seen removed",
        |seen| std::fs::remove_file(seen).unwrap(),
        "missing",
    ),
    (
        "garbage",
        |seen| std::fs::write(seen, "garbage\n").unwrap(),
        "corrupt",
    ),
    (
        "not UTF-8",
        |seen| std::fs::write(seen, b"\xff\n").unwrap(),
        "corrupt",
    ),
];

#[tokio::test]
async fn a_store_that_cannot_be_trusted_is_refused_at_start() {
    for (what, damage, expected) in UNTRUSTED {
        let home = tempfile::tempdir().unwrap();
        let bob = SigningIdentity::generate();
        drop(embedded(home.path(), bob.did()).await);
        let seen = seen_file(home.path(), bob.did());
        damage(&seen);
        let before = std::fs::read(&seen).ok();
        let err = ReplayStore::embedded(home.path(), bob.did())
            .await
            .unwrap_err();
        assert!(err.to_string().contains(expected), "{what}: {err}");
        assert!(
            err.to_string().contains(&seen.display().to_string()),
            "{what}: {err}"
        );
        assert_eq!(std::fs::read(&seen).ok(), before, "{what}: left as it was");
    }
}

#[tokio::test]
async fn a_full_inbox_refuses_without_recording() {
    let home = tempfile::tempdir().unwrap();
    let (alice, bob) = keys();
    let node = start(
        bob.did(),
        &[alice.did()],
        embedded(home.path(), bob.did()).await,
        Inbox::new(1),
    )
    .await;
    assert_eq!(
        post(&node.base, envelope(&alice, bob.did()).to_bytes())
            .await
            .0,
        202
    );
    let second = envelope(&alice, bob.did());
    assert_eq!(
        post(&node.base, second.to_bytes()).await,
        (503, Some("a2a_inbox_full".into()), Some("1".into()))
    );
    node.inbox.pop().unwrap();
    assert_eq!(post(&node.base, second.to_bytes()).await.0, 202);
    assert_eq!(node.inbox.wait().await.msg_id(), second.msg_id());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_machines_sharing_redis_accept_once_in_all() {
    if !require_tools("two listeners sharing Redis accept once", &["redis-server"]) {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let (alice, bob) = keys();
    // Two "machines": separate homes, one Redis.
    let (home_a, home_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let _ = (home_a.path(), home_b.path());
    let a = listen(&alice, &bob, shared(&redis, bob.did()).await).await;
    let b = listen(&alice, &bob, shared(&redis, bob.did()).await).await;
    accept_once_in_all(&a, &b, &alice, &bob).await;
    // Replayed later, to a listener started afterwards.
    let sent = envelope(&alice, bob.did());
    assert_eq!(post(&a.base, sent.to_bytes()).await.0, 202);
    let c = listen(&alice, &bob, shared(&redis, bob.did()).await).await;
    assert_eq!(
        post(&c.base, sent.to_bytes()).await,
        (409, Some("a2a_replayed".into()), None)
    );
    a.stop().await;
    b.stop().await;
    c.stop().await;
}

#[tokio::test]
async fn a_redis_that_is_down_or_frozen_refuses_with_503() {
    if !require_tools("a Redis that is down refuses with 503", &["redis-server"]) {
        return;
    }
    let mut redis = RedisServer::start().unwrap();
    let (alice, bob) = keys();
    let node = listen(&alice, &bob, shared(&redis, bob.did()).await).await;
    redis.stop().unwrap();
    let frozen = envelope(&alice, bob.did());
    let started = std::time::Instant::now();
    assert_eq!(
        post(&node.base, frozen.to_bytes()).await,
        (
            503,
            Some("a2a_replay_store_unavailable".into()),
            Some("1".into())
        )
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded: {:?}",
        started.elapsed()
    );
    redis.resume().unwrap();
    redis.kill().unwrap();
    assert_eq!(
        post(&node.base, envelope(&alice, bob.did()).to_bytes())
            .await
            .0,
        503
    );
    assert!(node.inbox.is_empty());
    node.stop().await;
}

/// Posts `sent` to `base` until it is answered with something other than a
/// 503, as a sender honouring `Retry-After` would (without the wait).
async fn resend(base: &str, sent: &Envelope) -> (u16, Option<String>) {
    for _ in 0..100 {
        let (status, code, _) = post(base, sent.to_bytes()).await;
        if status != 503 {
            return (status, code);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("still 503 after 100 resends");
}

#[tokio::test]
async fn a_503_from_a_frozen_redis_means_not_recorded() {
    if !require_tools("a 503 from a frozen Redis", &["redis-server"]) {
        return;
    }
    // The resend reaches the listener that answered 503, or another one.
    for other in [false, true] {
        let redis = RedisServer::start().unwrap();
        let (alice, bob) = keys();
        let first = listen(&alice, &bob, shared(&redis, bob.did()).await).await;
        let second = listen(&alice, &bob, shared(&redis, bob.did()).await).await;
        let sent = envelope(&alice, bob.did());
        redis.stop().unwrap();
        assert_eq!(post(&first.base, sent.to_bytes()).await.0, 503, "{other}");
        // Redis wakes up and runs the claim it was sent before the 503.
        redis.resume().unwrap();
        let to = if other { &second } else { &first };
        assert_eq!(resend(&to.base, &sent).await, (202, None), "{other}");
        assert_eq!(
            resend(&first.base, &sent).await,
            (409, Some("a2a_replayed".into())),
            "{other}"
        );
        assert_eq!(first.inbox.len() + second.inbox.len(), 1, "{other}");
        first.stop().await;
        second.stop().await;
    }
}

#[tokio::test]
async fn the_agent_sends_through_its_outbox_and_reads_its_inbox() {
    let (home_a, home_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let alice = Arc::new(SigningIdentity::generate());
    let bob = SigningIdentity::generate();
    let stranger = SigningIdentity::generate();
    // Bob's listener and his agent's side.
    let bob_node = listen(&alice, &bob, embedded(home_b.path(), bob.did()).await).await;
    let bob_side = serve(sandbox_router(bob_node.inbox.clone(), None)).await;
    // Alice's agent's side, with an outbox to bob.
    let sent: Arc<Mutex<Vec<constle_a2a::OutboxEvent>>> = Arc::default();
    let log = Arc::clone(&sent);
    let outbox = Outbox::new(
        Arc::clone(&alice),
        [(bob.did().clone(), bob_node.url.clone())],
        A2aClient::new().unwrap(),
    )
    .on_send(move |event| log.lock().unwrap().push(event));
    let alice_inbox = Inbox::default();
    let _ = home_a;
    let alice_side = serve(sandbox_router(alice_inbox, Some(outbox))).await;
    let http = reqwest::Client::new();

    let empty = next_message(&http, &bob_side).await;
    assert_eq!(empty.status().as_u16(), 204);

    let answer = http
        .post(format!("{alice_side}/outbox"))
        .body(json!({"to": bob.did().as_str(), "body": {"q": "price?"}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 202);
    let answer: serde_json::Value = serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap();
    assert_eq!(answer["delivered"], true);

    let next = next_message(&http, &bob_side).await;
    assert_eq!(next.status().as_u16(), 200);
    let message: serde_json::Value = serde_json::from_slice(&next.bytes().await.unwrap()).unwrap();
    assert_eq!(message["from"], alice.did().as_str());
    assert_eq!(message["to"], bob.did().as_str());
    assert_eq!(message["body"], json!({"q": "price?"}));
    assert_eq!(message["msg_id"], answer["msg_id"]);

    // Only declared peers; only strict JSON of the right shape.
    for (body, status, code) in [
        (
            json!({"to": stranger.did().as_str(), "body": 1}).to_string(),
            403,
            "a2a_unknown_peer",
        ),
        (
            json!({"to": "did:web:example.com", "body": 1}).to_string(),
            400,
            "a2a_malformed",
        ),
        (
            json!({"to": bob.did().as_str()}).to_string(),
            400,
            "a2a_malformed",
        ),
        (
            json!({"to": bob.did().as_str(), "body": 1, "from": "x"}).to_string(),
            400,
            "a2a_malformed",
        ),
        (
            format!("{{\"to\":\"{}\",\"body\":1,\"body\":2}}", bob.did()),
            400,
            "a2a_malformed",
        ),
        (
            json!({"to": bob.did().as_str(), "body": {"n": 1u64 << 60}}).to_string(),
            400,
            "a2a_malformed",
        ),
    ] {
        let answer = http
            .post(format!("{alice_side}/outbox"))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), status, "{body}");
        let answer: serde_json::Value =
            serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap();
        assert_eq!(answer["error"], code, "{body}");
    }
    let events = sent.lock().unwrap().clone();
    assert_eq!(events.len(), 1);
    assert!(events[0].delivered);
    bob_node.stop().await;
}

/// A POST of `body` to `path` on `host`, declaring its length or sent in
/// chunks, asking the server to close the connection after its answer.
fn post_request(host: &str, path: &str, body: &[u8], chunked: bool) -> (Vec<u8>, Vec<u8>) {
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    let mut payload = Vec::new();
    if chunked {
        head.push_str("Transfer-Encoding: chunked\r\n\r\n");
        for chunk in body.chunks(16 * 1024) {
            payload.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            payload.extend_from_slice(chunk);
            payload.extend_from_slice(b"\r\n");
        }
        payload.extend_from_slice(b"0\r\n\r\n");
    } else {
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        payload.extend_from_slice(body);
    }
    (head.into_bytes(), payload)
}

/// The status, `Content-Type` and body of a whole HTTP answer.
fn parse_answer(answer: &[u8]) -> (u16, String, Vec<u8>) {
    let text = String::from_utf8_lossy(answer).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_owned)
        })
        .unwrap_or_default();
    (status, content_type, rest.as_bytes().to_vec())
}

/// POSTs `body` to `url` over a plain connection, declaring its length or
/// sending it in chunks; returns the status, `Content-Type` and body.
async fn raw_post(url: &str, body: &[u8], chunked: bool) -> (u16, String, Vec<u8>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (host, path) = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
        .unwrap();
    let mut tcp = tokio::net::TcpStream::connect(host).await.unwrap();
    let (head, payload) = post_request(host, &format!("/{path}"), body, chunked);
    tcp.write_all(&head).await.unwrap();
    // The server may answer and close before it has read everything.
    let _ = tcp.write_all(&payload).await;
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer).await;
    parse_answer(&answer)
}

/// Sends a whole request and then reads the whole answer, as most clients
/// do: a connection reset on either side is an error.
async fn send_then_read<S>(mut stream: S, head: &[u8], payload: &[u8]) -> Result<Vec<u8>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    stream
        .write_all(head)
        .await
        .map_err(|e| format!("sending the head: {e}"))?;
    stream
        .write_all(payload)
        .await
        .map_err(|e| format!("sending the body: {e}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    Ok(answer)
}

/// Where a large POST goes.
enum Endpoint {
    /// A path on a TCP host (`127.0.0.1:port`).
    Tcp(String, &'static str),
    /// A path on a Unix socket.
    Unix(std::path::PathBuf, &'static str),
}

impl Endpoint {
    /// Sends `body` whole, then reads the answer ([`send_then_read`]).
    async fn post(&self, body: &[u8], chunked: bool) -> Result<Vec<u8>, String> {
        match self {
            Endpoint::Tcp(host, path) => {
                let (head, payload) = post_request(host, path, body, chunked);
                let tcp = tokio::net::TcpStream::connect(host).await.unwrap();
                send_then_read(tcp, &head, &payload).await
            }
            Endpoint::Unix(socket, path) => {
                let (head, payload) = post_request("localhost", path, body, chunked);
                let unix = tokio::net::UnixStream::connect(socket).await.unwrap();
                send_then_read(unix, &head, &payload).await
            }
        }
    }
}

#[tokio::test]
async fn a_large_post_always_gets_its_413_never_a_reset() {
    let (_home, alice, bob, node) = scene().await;
    let outbox = Outbox::new(
        Arc::new(alice),
        [(bob.did().clone(), node.url.clone())],
        A2aClient::new().unwrap(),
    );
    let router = sandbox_router(Inbox::default(), Some(outbox));
    let side = serve(router.clone()).await;
    // In a run the agent's side is served on a Unix socket, which the
    // sandbox relay forwards to.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("a2a.sock");
    let unix = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(async move { axum::serve(unix, router).await });
    let host = |base: &str| base.strip_prefix("http://").unwrap().to_owned();
    let endpoints = [
        Endpoint::Tcp(host(&node.base), "/a2a/v1/messages"),
        Endpoint::Tcp(host(&side), "/outbox"),
        Endpoint::Unix(socket, "/outbox"),
    ];
    for size in [300 * 1024, 1024 * 1024, 8 * 1024 * 1024] {
        assert!(size <= constle_a2a::MAX_DISCARDED_BYTES);
        let body = vec![b' '; size];
        for chunked in [false, true] {
            for round in 0..8 {
                for (n, endpoint) in endpoints.iter().enumerate() {
                    let what =
                        format!("endpoint {n}, {size} bytes, chunked: {chunked}, round {round}");
                    let answer = endpoint.post(&body, chunked).await;
                    let answer = answer.unwrap_or_else(|err| panic!("{what}: {err}"));
                    let (status, content_type, body) = parse_answer(&answer);
                    assert_eq!(
                        (status, content_type.as_str()),
                        (413, "application/json"),
                        "{what}"
                    );
                    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    assert_eq!(body["error"], "a2a_too_large", "{what}");
                }
            }
        }
    }
    node.stop().await;
}

#[tokio::test]
async fn an_oversized_body_is_a_413_in_json_at_every_endpoint() {
    let (_home, alice, bob, node) = scene().await;
    let outbox = Outbox::new(
        Arc::new(alice),
        [(bob.did().clone(), node.url.clone())],
        A2aClient::new().unwrap(),
    );
    let side = serve(sandbox_router(Inbox::default(), Some(outbox))).await;
    let big = vec![b' '; constle_a2a::MAX_ENVELOPE_BYTES + 1];
    for url in [
        format!("{}/a2a/v1/messages", node.base),
        format!("{side}/outbox"),
    ] {
        for chunked in [false, true] {
            let (status, content_type, body) = raw_post(&url, &big, chunked).await;
            let what = format!("{url}, chunked: {chunked}");
            assert_eq!(
                (status, content_type.as_str()),
                (413, "application/json"),
                "{what}: {}",
                String::from_utf8_lossy(&body)
            );
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["error"], "a2a_too_large", "{what}");
        }
    }
    node.stop().await;
}

#[tokio::test]
async fn a_refused_delivery_reports_the_peers_reason() {
    let home = tempfile::tempdir().unwrap();
    let (alice, bob) = keys();
    // Bob does not know alice.
    let node = start(
        bob.did(),
        &[],
        embedded(home.path(), bob.did()).await,
        Inbox::default(),
    )
    .await;
    let alice = Arc::new(alice);
    let outbox = Outbox::new(
        Arc::clone(&alice),
        [(bob.did().clone(), node.url.clone())],
        A2aClient::new().unwrap(),
    );
    let side = serve(sandbox_router(Inbox::default(), Some(outbox))).await;
    let answer = reqwest::Client::new()
        .post(format!("{side}/outbox"))
        .body(json!({"to": bob.did().as_str(), "body": "hi"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 502);
    let answer: serde_json::Value = serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap();
    assert_eq!(answer["error"], "a2a_peer_refused");
    assert_eq!(answer["peer_status"], 403);
    assert_eq!(answer["peer_reason"], "a2a_unknown_sender");
    assert_eq!(answer["retryable"], false);
    node.stop().await;
}

/// What an agent gets asking its sandbox side for the next message.
async fn next_message(http: &reqwest::Client, side: &str) -> reqwest::Response {
    http.get(format!("{side}/inbox/next")).send().await.unwrap()
}

async fn serve(router: axum::Router) -> String {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(tcp, router).await });
    format!("http://{addr}")
}
