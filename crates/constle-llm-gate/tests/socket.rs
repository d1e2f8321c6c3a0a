//! The Responses WebSocket through the gate, against a stand-in provider
//! socket on loopback: what reaches the provider, what the agent gets
//! back, what is settled and recorded.

#![allow(clippy::unwrap_used, reason = "test helpers panic on setup failure")]
#![allow(
    clippy::result_large_err,
    reason = "tungstenite's handshake callback type is fixed"
)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use constle_llm_gate::{
    Api, Call, DoneFuture, Gate, Held, Key, Meter, MeterRefusal, Prices, Provider, Reason,
    Recorder, Recording, Refused, Reservation, ReserveFuture, Settled, Transport,
};
use futures_util::{SinkExt, StreamExt};
use rust_decimal::Decimal;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

const KEY: &str = "sk-real-key-ws-77";

type Agent = tokio_tungstenite::WebSocketStream<TcpStream>;

/// The stand-in provider: reports the key header and every message it
/// gets; answers each with `response.created`, then `response.completed`
/// (or, with `echo_key`, an error quoting the key).
async fn provider(echo_key: bool) -> (String, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (io, _) = listener.accept().await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                let seen = tx.clone();
                let callback = move |request: &Request, response: Response| {
                    let auth = request.headers()["authorization"].to_str().unwrap();
                    let _ = seen.send(format!("auth {auth} {}", request.uri().path()));
                    Ok(response)
                };
                let mut socket = tokio_tungstenite::accept_hdr_async(io, callback)
                    .await
                    .unwrap();
                while let Some(Ok(Message::Text(text))) = socket.next().await {
                    let _ = tx.send(text.to_string());
                    let created =
                        json!({"type": "response.created", "response": {"id": "resp_ws1"}});
                    socket
                        .send(Message::text(created.to_string()))
                        .await
                        .unwrap();
                    let last = if echo_key {
                        json!({"type": "error", "error": {"message": format!("bad key {KEY}")}})
                    } else {
                        json!({"type": "response.completed", "response": {"id": "resp_ws1",
                            "usage": {"input_tokens": 30, "output_tokens": 7}}})
                    };
                    socket.send(Message::text(last.to_string())).await.unwrap();
                }
            });
        }
    });
    (format!("http://{addr}/v1"), rx)
}

#[derive(Clone, Default)]
struct TestMeter {
    refuse: bool,
    /// Reservations whose record fails.
    unrecorded: bool,
    settled: Arc<Mutex<Vec<(Call, Settled)>>>,
}

impl Meter for TestMeter {
    fn reserve<'a>(&'a self, _call: &'a Call) -> ReserveFuture<'a> {
        let result = if self.refuse {
            Err(MeterRefusal {
                reason: Reason::SpendRefused,
                message: "a cap; the Constle gate did not forward it".to_owned(),
            })
        } else if self.unrecorded {
            Ok(Reservation {
                held: Held(1),
                recorded: Recording::pending(std::future::ready(Err(MeterRefusal {
                    reason: Reason::LedgerUnavailable,
                    message: "the reservation could not be recorded".to_owned(),
                }))),
            })
        } else {
            Ok(Held(1).into())
        };
        Box::pin(std::future::ready(result))
    }

    fn settle(&self, _held: Held, call: Call, settled: Settled) -> DoneFuture<'_> {
        self.settled.lock().unwrap().push((call, settled));
        Box::pin(std::future::ready(()))
    }
}

#[derive(Clone, Default)]
struct TestRecorder(Arc<Mutex<Vec<Refused>>>);

impl Recorder for TestRecorder {
    fn refused<'a>(&'a self, refused: &'a Refused) -> DoneFuture<'a> {
        self.0.lock().unwrap().push(refused.clone());
        Box::pin(std::future::ready(()))
    }
}

struct Harness {
    agent: Agent,
    seen: mpsc::UnboundedReceiver<String>,
    meter: TestMeter,
    recorded: TestRecorder,
}

async fn harness(refuse: bool, echo_key: bool) -> Harness {
    let meter = TestMeter {
        refuse,
        ..TestMeter::default()
    };
    harness_with(meter, echo_key).await
}

async fn harness_with(meter: TestMeter, echo_key: bool) -> Harness {
    let (upstream, seen) = provider(echo_key).await;
    let price = Decimal::new(1, 0);
    let prices = Prices {
        input: price,
        output: price,
        cached_input: price,
        cache_write: price,
    };
    let provider = Provider {
        id: "openai".to_owned(),
        api: Api::OpenAi,
        upstream: upstream.parse().unwrap(),
        key: Key::new(KEY.to_owned()),
        max_output_tokens: 1000,
        models: BTreeMap::from([("m".to_owned(), prices)]),
    };
    let recorded = TestRecorder::default();
    let gate = Gate::new(provider)
        .unwrap()
        .with_meter(meter.clone())
        .with_recorder(recorded.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(gate.serve(listener));
    let mut request = format!("ws://{addr}/v1/responses")
        .into_client_request()
        .unwrap();
    request.headers_mut().insert(
        "authorization",
        "Bearer constle-gate-holds-the-key".parse().unwrap(),
    );
    let io = TcpStream::connect(addr).await.unwrap();
    let (agent, _) = tokio_tungstenite::client_async(request, io).await.unwrap();
    Harness {
        agent,
        seen,
        meter,
        recorded,
    }
}

impl Harness {
    async fn send(&mut self, message: Value) {
        self.agent
            .send(Message::text(message.to_string()))
            .await
            .unwrap();
    }

    async fn event(&mut self) -> Option<Value> {
        match tokio::time::timeout(Duration::from_secs(5), self.agent.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => Some(serde_json::from_str(&text).unwrap()),
            _ => None,
        }
    }
}

#[tokio::test]
async fn a_create_is_inspected_forwarded_with_the_key_and_settled_on_its_usage() {
    let mut h = harness(false, false).await;
    let auth = h.seen.recv().await.unwrap();
    assert_eq!(auth, format!("auth Bearer {KEY} /v1/responses"));
    // Messages the mode does not define, and calls the rules refuse, get an
    // error event; the socket stays open; nothing reaches the provider.
    h.send(json!({"type": "session.update", "session": {}}))
        .await;
    let error = h.event().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["code"], "llm_unsupported");
    h.send(json!({"type": "response.create", "model": "gpt-9", "input": "x"}))
        .await;
    let error = h.event().await.unwrap();
    assert_eq!(error["status"], 404);
    assert_eq!(error["error"]["code"], "llm_model_not_declared");
    h.send(json!({"type": "response.create", "model": "m", "input": "hi", "tools": [{"type": "web_search"}]}))
        .await;
    assert_eq!(h.event().await.unwrap()["error"]["code"], "llm_hosted_tool");
    let recorded = h.recorded.0.lock().unwrap().clone();
    assert_eq!(recorded.len(), 3);
    assert!(recorded.iter().all(|r| r.transport == Transport::WebSocket));
    assert!(h.seen.try_recv().is_err());

    h.send(json!({"type": "response.create", "model": "m", "input": "hi"}))
        .await;
    let forwarded: Value = serde_json::from_str(&h.seen.recv().await.unwrap()).unwrap();
    assert_eq!(forwarded["type"], "response.create");
    assert_eq!(forwarded["max_output_tokens"], 1000);
    assert_eq!(h.event().await.unwrap()["type"], "response.created");
    assert_eq!(h.event().await.unwrap()["type"], "response.completed");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let settled = h.meter.settled.lock().unwrap().clone();
    assert_eq!(settled.len(), 1);
    let (call, settled) = &settled[0];
    assert_eq!(call.transport, Transport::WebSocket);
    assert_eq!(settled.usage.map(|u| (u.input, u.output)), Some((30, 7)));
    assert_eq!(settled.cost_usd, Decimal::new(37, 6));
}

#[tokio::test]
async fn a_cap_refuses_on_the_socket_in_openais_shape() {
    let mut h = harness(true, false).await;
    let _auth = h.seen.recv().await.unwrap();
    h.send(json!({"type": "response.create", "model": "m", "input": "hi"}))
        .await;
    let error = h.event().await.unwrap();
    assert_eq!(error["status"], 429);
    assert_eq!(error["error"]["type"], "insufficient_quota");
    assert!(h.seen.try_recv().is_err(), "never forwarded");
    assert!(
        h.recorded.0.lock().unwrap().is_empty(),
        "the meter records its own"
    );
}

#[tokio::test]
async fn an_event_echoing_the_key_closes_the_socket_and_settles_to_the_hold() {
    let mut h = harness(false, true).await;
    let _auth = h.seen.recv().await.unwrap();
    h.send(json!({"type": "response.create", "model": "m", "input": "hi"}))
        .await;
    assert_eq!(h.event().await.unwrap()["type"], "response.created");
    assert_eq!(h.event().await, None, "closed before the echo");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let recorded = h.recorded.0.lock().unwrap().clone();
    assert_eq!(recorded[0].reason, Reason::UpstreamEchoedKey);
    let settled = h.meter.settled.lock().unwrap().clone();
    let (call, settled) = &settled[0];
    assert_eq!(
        (settled.usage, settled.cost_usd),
        (None, call.worst_case_usd)
    );
}

#[tokio::test]
async fn an_unrecorded_reservation_gets_an_error_event_never_the_answer() {
    let meter = TestMeter {
        unrecorded: true,
        ..TestMeter::default()
    };
    let mut h = harness_with(meter, false).await;
    let _auth = h.seen.recv().await.unwrap();
    h.send(json!({"type": "response.create", "model": "m", "input": "hi"}))
        .await;
    let error = h.event().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["code"], "llm_ledger_unavailable");
    assert_eq!(h.event().await, None, "closed, the answer withheld");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let settled = h.meter.settled.lock().unwrap().clone();
    let (call, settled) = &settled[0];
    assert_eq!(settled.cost_usd, call.worst_case_usd);
}
