//! The gate over HTTP, against a stand-in provider on loopback written
//! here: what reaches the provider, what reaches the agent, what is
//! settled and recorded.

#![allow(clippy::unwrap_used, reason = "test helpers panic on setup failure")]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use constle_llm_gate::{
    Api, Call, CancellationToken, DoneFuture, Gate, Held, Key, MAX_INTAKE, Meter, MeterRefusal,
    Prices, Provider, Reason, Recorder, Recording, Refused, Reservation, ReserveFuture, Settled,
    Usage,
};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::HeaderMap;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

const KEY: &str = "sk-real-key-4f1c9e";

type UpBody = UnsyncBoxBody<Bytes, Infallible>;
type Reply = Arc<dyn Fn(&Seen) -> Response<UpBody> + Send + Sync>;

/// One request the stand-in provider received.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: HeaderMap,
    body: Value,
}

/// Starts the stand-in provider: answers each request with `reply`,
/// reports each on the channel.
async fn provider_stand_in(reply: Reply) -> (SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (io, _) = listener.accept().await.unwrap();
            let (tx, reply) = (tx.clone(), Arc::clone(&reply));
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let (tx, reply) = (tx.clone(), Arc::clone(&reply));
                async move {
                    let (parts, body) = request.into_parts();
                    let body = body.collect().await.unwrap().to_bytes();
                    let seen = Seen {
                        path: parts.uri.to_string(),
                        headers: parts.headers,
                        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                    };
                    let response = reply(&seen);
                    let _ = tx.send(seen);
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(io), service),
            );
        }
    });
    (addr, rx)
}

fn json_reply(status: u16, body: Value, headers: &[(&str, &str)]) -> Response<UpBody> {
    let mut builder = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder
        .body(Full::new(Bytes::from(body.to_string())).boxed_unsync())
        .unwrap()
}

/// An SSE response whose chunks come from `chunks` as they are sent.
fn sse_reply(chunks: mpsc::UnboundedReceiver<String>) -> Response<UpBody> {
    let stream = futures_util::stream::unfold(chunks, |mut chunks| async move {
        let chunk = chunks.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(Bytes::from(chunk))), chunks))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("request-id", "req_stream_1")
        .body(StreamBody::new(stream).boxed_unsync())
        .unwrap()
}

/// An SSE response of all of `events` at once.
fn sse_all(events: &[&str]) -> Response<UpBody> {
    let (tx, rx) = mpsc::unbounded_channel();
    for event in events {
        tx.send((*event).to_owned()).unwrap();
    }
    sse_reply(rx)
}

fn prices() -> Prices {
    Prices {
        input: Decimal::new(3, 0),
        output: Decimal::new(15, 0),
        cached_input: Decimal::new(3, 1),
        cache_write: Decimal::new(375, 2),
    }
}

/// What the test meter saw.
#[derive(Default)]
struct Ledger {
    reserved: Vec<Call>,
    settled: Vec<(Call, Settled)>,
}

#[derive(Clone, Default)]
struct TestMeter {
    ledger: Arc<Mutex<Ledger>>,
    refuse: bool,
    settled: Option<mpsc::UnboundedSender<()>>,
    /// When set, the next reservation is recorded when this says so
    /// (`true`), or fails to be (`false`, or dropped).
    record: Arc<Mutex<Option<oneshot::Receiver<bool>>>>,
}

impl Meter for TestMeter {
    fn reserve<'a>(&'a self, call: &'a Call) -> ReserveFuture<'a> {
        self.ledger.lock().unwrap().reserved.push(call.clone());
        let result = if self.refuse {
            Err(MeterRefusal {
                reason: Reason::SpendRefused,
                message:
                    "a call that would pass max_per_run_usd; the Constle gate did not forward it"
                        .to_owned(),
            })
        } else {
            let recorded = match self.record.lock().unwrap().take() {
                Some(said) => Recording::pending(async move {
                    match said.await {
                        Ok(true) => Ok(()),
                        _ => Err(MeterRefusal {
                            reason: Reason::LedgerUnavailable,
                            message: "the reservation could not be recorded".to_owned(),
                        }),
                    }
                }),
                None => Recording::done(),
            };
            Ok(Reservation {
                held: Held(7),
                recorded,
            })
        };
        Box::pin(std::future::ready(result))
    }

    fn settle(&self, held: Held, call: Call, settled: Settled) -> DoneFuture<'_> {
        assert_eq!(held, Held(7));
        self.ledger.lock().unwrap().settled.push((call, settled));
        if let Some(tx) = &self.settled {
            let _ = tx.send(());
        }
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
    gate: SocketAddr,
    seen: mpsc::UnboundedReceiver<Seen>,
    ledger: Arc<Mutex<Ledger>>,
    recorded: TestRecorder,
    settled: mpsc::UnboundedReceiver<()>,
    shutoff: CancellationToken,
}

async fn harness(api: Api, reply: Reply, refuse: bool) -> Harness {
    let meter = TestMeter {
        refuse,
        ..TestMeter::default()
    };
    harness_with(api, reply, meter).await
}

async fn harness_with(api: Api, reply: Reply, meter: TestMeter) -> Harness {
    let (upstream, seen) = provider_stand_in(reply).await;
    let base = match api {
        Api::Anthropic => format!("http://{upstream}"),
        _ => format!("http://{upstream}/v1"),
    };
    let provider = Provider {
        id: "prov".to_owned(),
        api,
        upstream: base.parse().unwrap(),
        key: Key::new(KEY.to_owned()),
        max_output_tokens: 1000,
        models: BTreeMap::from([("m".to_owned(), prices())]),
    };
    let (tx, settled) = mpsc::unbounded_channel();
    let meter = TestMeter {
        settled: Some(tx),
        ..meter
    };
    let ledger = Arc::clone(&meter.ledger);
    let recorded = TestRecorder::default();
    let shutoff = CancellationToken::new();
    let gate = Gate::new(provider)
        .unwrap()
        .with_meter(meter)
        .with_recorder(recorded.clone())
        .with_shutoff(shutoff.clone());
    assert!(!format!("{gate:?}").contains(KEY));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(gate.serve(listener));
    Harness {
        gate: addr,
        seen,
        ledger,
        recorded,
        settled,
        shutoff,
    }
}

impl Harness {
    /// Sends `body` to `path` with the agent's own credentials.
    async fn post(&self, path: &str, body: &Value) -> Response<Incoming> {
        self.send("POST", path, Some(body)).await
    }

    async fn send(&self, method: &str, path: &str, body: Option<&Value>) -> Response<Incoming> {
        send_to(self.gate, method, path, body).await
    }

    async fn settled(&mut self) -> (Call, Settled) {
        tokio::time::timeout(Duration::from_secs(5), self.settled.recv())
            .await
            .unwrap()
            .unwrap();
        self.ledger.lock().unwrap().settled.last().cloned().unwrap()
    }
}

/// Sends `body` to the gate at `gate` with the agent's own credentials.
async fn send_to(
    gate: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(gate).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", gate.to_string())
        .header("content-type", "application/json")
        .header("x-api-key", "constle-gate-holds-the-key")
        .header("authorization", "Bearer agent-stolen-key")
        .header("cookie", "session=agent")
        .header("openai-organization", "org-agent")
        .header("anthropic-version", "2023-06-01")
        .header("x-stainless-lang", "python")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    sender.send_request(request).await.unwrap()
}

async fn text(response: Response<Incoming>) -> String {
    String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap()
}

fn anthropic_message() -> Value {
    json!({"id": "msg_1", "type": "message", "content": [{"type": "text", "text": "hi"}],
           "usage": {"input_tokens": 100, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 10, "output_tokens": 20}})
}

fn ok_anthropic() -> Reply {
    Arc::new(|_| {
        json_reply(
            200,
            anthropic_message(),
            &[("request-id", "req_1"), ("set-cookie", "a=b")],
        )
    })
}

#[tokio::test]
async fn the_provider_sees_only_the_real_key_whatever_the_agent_sent() {
    let mut h = harness(Api::Anthropic, ok_anthropic(), false).await;
    let response = h
        .post(
            "/v1/messages?beta=true",
            &json!({"model": "m", "max_tokens": 5, "messages": []}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().get("set-cookie").is_none());
    let _ = text(response).await;
    let seen = h.seen.recv().await.unwrap();
    assert_eq!(seen.path, "/v1/messages?beta=true");
    assert_eq!(
        seen.headers.get_all("x-api-key").iter().collect::<Vec<_>>(),
        [KEY]
    );
    for dropped in ["authorization", "cookie", "openai-organization"] {
        assert!(seen.headers.get(dropped).is_none(), "{dropped}");
    }
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");
    assert_eq!(seen.headers["x-stainless-lang"], "python");
    assert_eq!(seen.headers["accept-encoding"], "identity");

    let mut h = harness(
        Api::OpenAi,
        Arc::new(|_| {
            json_reply(
                200,
                json!({"usage": {"prompt_tokens": 1, "completion_tokens": 1}}),
                &[],
            )
        }),
        false,
    )
    .await;
    let _ = text(
        h.post(
            "/v1/chat/completions",
            &json!({"model": "m", "messages": []}),
        )
        .await,
    )
    .await;
    let seen = h.seen.recv().await.unwrap();
    assert_eq!(seen.path, "/v1/chat/completions");
    let bearer = format!("Bearer {KEY}");
    assert_eq!(
        seen.headers
            .get_all("authorization")
            .iter()
            .collect::<Vec<_>>(),
        [bearer.as_str()]
    );
    assert!(seen.headers.get("x-api-key").is_none());
}

/// A meter whose next reservation is recorded when the sender says.
fn recording_later() -> (TestMeter, oneshot::Sender<bool>) {
    let (say, said) = oneshot::channel();
    let meter = TestMeter::default();
    *meter.record.lock().unwrap() = Some(said);
    (meter, say)
}

#[tokio::test]
async fn the_call_leaves_while_it_is_recorded_and_its_answer_waits_for_the_record() {
    for (api, path, reply) in [
        (Api::Anthropic, "/v1/messages", ok_anthropic()),
        (
            Api::Anthropic,
            "/v1/messages",
            Arc::new(|_: &Seen| sse_all(&["event: message_start\ndata: {}\n\n"])) as Reply,
        ),
    ] {
        let (meter, say) = recording_later();
        let mut h = harness_with(api, reply, meter).await;
        let body = json!({"model": "m", "max_tokens": 5, "messages": []});
        let gate = h.gate;
        let answer = tokio::spawn(async move { send_to(gate, "POST", path, Some(&body)).await });
        h.seen
            .recv()
            .await
            .expect("the call left before its record");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!answer.is_finished(), "no answer before the record");
        say.send(true).unwrap();
        let response = answer.await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(!text(response).await.is_empty());
    }
}

#[tokio::test]
async fn an_unrecorded_reservation_withholds_the_answer_and_is_charged_its_hold() {
    for api in [Api::Anthropic, Api::OpenAi] {
        let reply: Reply =
            Arc::new(|_| sse_all(&["event: message_start\ndata: {\"secret\": \"answer\"}\n\n"]));
        let (meter, say) = recording_later();
        let mut h = harness_with(api, reply, meter).await;
        let path = if api == Api::Anthropic {
            "/v1/messages"
        } else {
            "/v1/responses"
        };
        let body = json!({"model": "m", "max_tokens": 5, "max_output_tokens": 5, "input": "x", "messages": [], "stream": true});
        drop(say);
        let response = h.post(path, &body).await;
        assert_ne!(response.status(), StatusCode::OK);
        let answer = text(response).await;
        assert!(
            answer.contains("llm_ledger_unavailable") || answer.contains("could not be recorded"),
            "{answer}"
        );
        assert!(!answer.contains("secret"), "{answer}");
        let (call, settled) = h.settled().await;
        assert_eq!(settled.cost_usd, call.worst_case_usd);
    }
}

#[tokio::test]
async fn a_json_call_is_settled_to_its_reported_usage() {
    let mut h = harness(Api::Anthropic, ok_anthropic(), false).await;
    let response = h
        .post(
            "/v1/messages",
            &json!({"model": "m", "max_tokens": 50000, "messages": []}),
        )
        .await;
    assert!(text(response).await.contains("msg_1"));
    let seen = h.seen.recv().await.unwrap();
    assert_eq!(
        seen.body["max_tokens"], 1000,
        "lowered to the provider's ceiling"
    );
    let (call, settled) = h.settled().await;
    assert_eq!(call.output_tokens_bound, 1000);
    let usage = Usage {
        input: 100,
        cached_input: 1000,
        cache_write: 10,
        output: 20,
    };
    assert_eq!(settled.usage, Some(usage));
    // 100*3 + 1000*0.3 + 10*3.75 + 20*15 per million.
    assert_eq!(settled.cost_usd, Decimal::new(9375, 7));
    assert_eq!(settled.request_id.as_deref(), Some("req_1"));
    assert_eq!(settled.status, Some(200));
    assert!(!settled.streamed);
}

#[tokio::test]
async fn sse_passes_chunk_by_chunk_and_settles_on_the_final_usage() {
    let (tx, rx) = mpsc::unbounded_channel();
    let rx = Arc::new(Mutex::new(Some(rx)));
    let reply: Reply = Arc::new(move |_| sse_reply(rx.lock().unwrap().take().unwrap()));
    let mut h = harness(Api::Anthropic, reply, false).await;
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n";
    tx.send(start.to_owned()).unwrap();
    let response = h
        .post(
            "/v1/messages",
            &json!({"model": "m", "max_tokens": 5, "stream": true, "messages": []}),
        )
        .await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    // The first event arrives while the provider's stream is still open.
    let first = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), start.as_bytes());
    tx.send("event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":4}}\n\n".to_owned()).unwrap();
    drop(tx);
    let rest = body.collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&rest).contains("message_delta"));
    let (_, settled) = h.settled().await;
    assert_eq!(
        settled.usage,
        Some(Usage {
            input: 10,
            output: 4,
            ..Usage::default()
        })
    );
    assert!(settled.streamed);
    assert_eq!(settled.request_id.as_deref(), Some("req_stream_1"));
}

/// The agent reads only whole events, each as soon as its last byte has
/// arrived: a part of one is held until the rest comes, then the event
/// passes in one piece, before the provider sends anything more.
#[tokio::test]
async fn an_event_passes_whole_once_its_last_byte_arrives() {
    let (tx, rx) = mpsc::unbounded_channel();
    let rx = Arc::new(Mutex::new(Some(rx)));
    let reply: Reply = Arc::new(move |_| sse_reply(rx.lock().unwrap().take().unwrap()));
    let h = harness(Api::Anthropic, reply, false).await;
    let delta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"tok \"}}\n\n";
    // All of it but the `\n` of its blank line.
    let (most, last) = delta.split_at(delta.len() - 1);
    tx.send(most.to_owned()).unwrap();
    let response = h
        .post(
            "/v1/messages",
            &json!({"model": "m", "max_tokens": 5, "stream": true, "messages": []}),
        )
        .await;
    let mut body = response.into_body();
    let early = tokio::time::timeout(Duration::from_millis(200), body.frame()).await;
    assert!(early.is_err(), "nothing of an unfinished event passes");
    tx.send(last.to_owned()).unwrap();
    let whole = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(whole.into_data().unwrap(), delta.as_bytes());
    drop(tx);
    assert!(body.collect().await.unwrap().to_bytes().is_empty());
}

#[tokio::test]
async fn a_stream_without_usage_is_charged_its_reservation() {
    let reply: Reply = Arc::new(|_| {
        sse_all(&[
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
        ])
    });
    let mut h = harness(Api::Anthropic, reply, false).await;
    let _ = text(
        h.post(
            "/v1/messages",
            &json!({"model": "m", "max_tokens": 5, "stream": true, "messages": []}),
        )
        .await,
    )
    .await;
    let (call, settled) = h.settled().await;
    assert_eq!(settled.usage, None);
    assert_eq!(settled.cost_usd, call.worst_case_usd);
    assert!(call.worst_case_usd > Decimal::ZERO);

    let reply: Reply = Arc::new(|_| json_reply(500, json!({"error": {"message": "boom"}}), &[]));
    let mut h = harness(Api::OpenAi, reply, false).await;
    let response = h
        .post("/v1/responses", &json!({"model": "m", "input": "x"}))
        .await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let _ = text(response).await;
    let (call, settled) = h.settled().await;
    assert_eq!(
        (settled.usage, settled.cost_usd, settled.status),
        (None, call.worst_case_usd, Some(500))
    );
}

#[tokio::test]
async fn openai_responses_and_chat_settle_streamed_or_not() {
    let completed = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_7\",\"usage\":{\"input_tokens\":50,\"input_tokens_details\":{\"cached_tokens\":20},\"output_tokens\":9}}}\n\n";
    let reply: Reply = Arc::new(move |seen: &Seen| match seen.path.as_str() {
        "/v1/responses" if seen.body["stream"] == true => sse_all(&[completed]),
        "/v1/responses" => json_reply(
            200,
            json!({"id": "resp_8", "status": "completed", "usage": {"input_tokens": 5, "output_tokens": 6}}),
            &[("x-request-id", "req_r")],
        ),
        _ if seen.body["stream"] == true => sse_all(&[
            "data: {\"choices\":[{\"delta\":{}}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":8}}\n\ndata: [DONE]\n\n",
        ]),
        _ => json_reply(
            200,
            json!({"usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
            &[],
        ),
    });
    let mut h = harness(Api::OpenAi, reply, false).await;
    let cases = [
        (
            "/v1/responses",
            json!({"model": "m", "input": "x", "stream": true}),
            Usage {
                input: 30,
                cached_input: 20,
                cache_write: 0,
                output: 9,
            },
        ),
        (
            "/v1/responses",
            json!({"model": "m", "input": "x"}),
            Usage {
                input: 5,
                output: 6,
                ..Usage::default()
            },
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": [], "stream": true}),
            Usage {
                input: 7,
                output: 8,
                ..Usage::default()
            },
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": []}),
            Usage {
                input: 3,
                output: 4,
                ..Usage::default()
            },
        ),
    ];
    for (path, body, usage) in cases {
        let _ = text(h.post(path, &body).await).await;
        let seen = h.seen.recv().await.unwrap();
        if path.ends_with("completions") && body["stream"] == true {
            assert_eq!(seen.body["stream_options"]["include_usage"], true);
        }
        let (_, settled) = h.settled().await;
        assert_eq!(settled.usage, Some(usage), "{path} {body}");
        assert_eq!(settled.cost_usd, usage.cost(&prices()).unwrap());
    }
    // Both responses completed: a call continuing either is bounded, one
    // continuing another is not.
    let next = h
        .post(
            "/v1/responses",
            &json!({"model": "m", "input": "x", "previous_response_id": "resp_7"}),
        )
        .await;
    assert_eq!(next.status(), StatusCode::OK);
    let _ = text(next).await;
    let (call, _) = h.settled().await;
    assert!(call.input_tokens_bound > 79);
    let unknown = h
        .post(
            "/v1/responses",
            &json!({"model": "m", "input": "x", "previous_response_id": "resp_other"}),
        )
        .await;
    assert_eq!(unknown.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn refusals_come_in_the_providers_shape_recorded_and_never_forwarded() {
    let mut h = harness(Api::Anthropic, ok_anthropic(), false).await;
    let cases = [
        (
            "/v1/files",
            json!({}),
            404,
            "not_found_error",
            Reason::PathNotAllowed,
        ),
        (
            "/v1/messages",
            json!({"model": "opus", "max_tokens": 5, "messages": []}),
            404,
            "not_found_error",
            Reason::ModelNotDeclared,
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 5, "messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            400,
            "invalid_request_error",
            Reason::HostedTool,
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "url", "url": "https://x.example/a.pdf"}}]}]}),
            400,
            "invalid_request_error",
            Reason::InputUnbounded,
        ),
    ];
    for (path, body, status, kind, reason) in cases {
        let response = h.post(path, &body).await;
        assert_eq!(response.status().as_u16(), status, "{path} {body}");
        assert_eq!(response.headers()["x-should-retry"], "false");
        let text = text(response).await;
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], kind);
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.ends_with("; the Constle gate did not forward it"),
            "{message}"
        );
        assert!(!text.contains(KEY));
        let recorded = h.recorded.0.lock().unwrap().last().cloned().unwrap();
        assert_eq!(recorded.reason, reason);
        assert!(!format!("{recorded:?}").contains(KEY));
    }
    assert_eq!(
        h.recorded.0.lock().unwrap()[1].model.as_deref(),
        Some("opus")
    );
    assert!(h.seen.try_recv().is_err(), "nothing reached the provider");
    assert!(h.ledger.lock().unwrap().reserved.is_empty());
}

#[tokio::test]
async fn a_spend_refusal_is_an_exhausted_quota_and_never_forwarded() {
    let mut h = harness(Api::OpenAi, ok_anthropic(), true).await;
    let response = h
        .post("/v1/responses", &json!({"model": "m", "input": "x"}))
        .await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["x-should-retry"], "false");
    let error: Value = serde_json::from_str(&text(response).await).unwrap();
    assert_eq!(error["error"]["type"], "insufficient_quota");
    assert_eq!(error["error"]["code"], "llm_spend_refused");
    assert!(h.seen.try_recv().is_err());
    assert_eq!(h.ledger.lock().unwrap().reserved.len(), 1);
}

#[tokio::test]
async fn the_shutoff_stops_all_forwarding_and_models_are_the_declared_ones() {
    let mut h = harness(Api::OpenAi, ok_anthropic(), false).await;
    let models: Value =
        serde_json::from_str(&text(h.send("GET", "/v1/models", None).await).await).unwrap();
    assert_eq!(models["data"][0]["id"], "m");
    assert_eq!(models["data"].as_array().unwrap().len(), 1);
    // A GET of the Responses path that is no WebSocket upgrade.
    let socket = h.send("GET", "/v1/responses", None).await;
    assert_eq!(socket.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        h.recorded.0.lock().unwrap()[0].reason,
        Reason::PathNotAllowed
    );
    h.recorded.0.lock().unwrap().clear();
    h.shutoff.cancel();
    let response = h
        .post("/v1/responses", &json!({"model": "m", "input": "x"}))
        .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(text(response).await.contains("llm_gate_closed"));
    assert!(h.seen.try_recv().is_err());
    assert_eq!(h.recorded.0.lock().unwrap()[0].reason, Reason::GateClosed);
}

#[tokio::test]
async fn a_json_answer_echoing_the_key_is_withheld_recorded_and_settled() {
    let reply: Reply = Arc::new(|_| {
        let mut body = anthropic_message();
        body["debug"] = json!(format!("authenticated with {KEY}"));
        json_reply(
            200,
            body,
            &[("request-id", "req_echo"), ("x-debug-key", KEY)],
        )
    });
    let mut h = harness(Api::Anthropic, reply, false).await;
    let response = h
        .post(
            "/v1/messages",
            &json!({"model": "m", "max_tokens": 5, "messages": []}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert!(response.headers().get("x-debug-key").is_none());
    let text = text(response).await;
    assert!(!text.contains(KEY), "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["type"], "api_error");
    let recorded = h.recorded.0.lock().unwrap().clone();
    assert!(!recorded.is_empty());
    assert!(
        recorded
            .iter()
            .all(|r| r.reason == Reason::UpstreamEchoedKey)
    );
    assert_eq!(recorded[0].model.as_deref(), Some("m"));
    assert_eq!(
        Reason::UpstreamEchoedKey.as_str(),
        "llm_upstream_echoed_key"
    );
    // The provider answered: settled as usual, to the usage it reported.
    let (_, settled) = h.settled().await;
    assert_eq!(settled.status, Some(200));
    assert!(settled.usage.is_some());
}

#[tokio::test]
async fn a_header_echoing_the_key_is_dropped_and_the_answer_passes() {
    let reply: Reply = Arc::new(|_| {
        json_reply(
            200,
            anthropic_message(),
            &[("x-debug-key", &format!("got {KEY}")), ("request-id", KEY)],
        )
    });
    let mut h = harness(Api::Anthropic, reply, false).await;
    let response = h
        .post(
            "/v1/messages",
            &json!({"model": "m", "max_tokens": 5, "messages": []}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().get("x-debug-key").is_none());
    assert!(response.headers().get("request-id").is_none());
    assert!(text(response).await.contains("msg_1"));
    assert_eq!(
        h.recorded.0.lock().unwrap()[0].reason,
        Reason::UpstreamEchoedKey
    );
    let (_, settled) = h.settled().await;
    assert_eq!(settled.request_id, None, "the log never holds the key");
}

#[tokio::test]
async fn a_stream_is_cut_before_the_event_echoing_the_key_even_split_across_chunks() {
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n";
    let echo = format!(
        "event: error\ndata: {{\"type\":\"error\",\"error\":{{\"message\":\"invalid x-api-key {KEY}\"}}}}\n\n"
    );
    let delta = "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":4}}\n\n";
    // Split inside the key: each half alone holds no key.
    let split = echo.find(KEY).unwrap() + 5;
    let (a, b) = echo.split_at(split);
    let chunks = [
        start.to_owned(),
        a.to_owned(),
        b.to_owned(),
        delta.to_owned(),
    ];
    let reply: Reply =
        Arc::new(move |_| sse_all(&chunks.iter().map(String::as_str).collect::<Vec<_>>()));
    let mut h = harness(Api::Anthropic, reply, false).await;
    let response = h
        .post(
            "/v1/messages",
            &json!({"model": "m", "max_tokens": 5, "stream": true, "messages": []}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = text(response).await;
    assert_eq!(
        text, start,
        "the events before it pass, nothing of it or after"
    );
    assert_eq!(
        h.recorded.0.lock().unwrap()[0].reason,
        Reason::UpstreamEchoedKey
    );
    let (call, settled) = h.settled().await;
    assert_eq!(settled.usage, None);
    assert_eq!(settled.cost_usd, call.worst_case_usd);
}

/// Bodies are read and inspected at most `MAX_INTAKE` at a time: uploads
/// that never finish hold every turn, and the next call waits (its body
/// is not read into constle's memory) until one of them goes away.
#[tokio::test]
async fn bodies_are_taken_in_a_few_at_a_time() {
    use tokio::io::AsyncWriteExt as _;
    let h = harness(Api::Anthropic, ok_anthropic(), false).await;
    let mut stalled = Vec::new();
    for _ in 0..MAX_INTAKE {
        let mut stream = tokio::net::TcpStream::connect(h.gate).await.unwrap();
        let head = format!(
            "POST /v1/messages HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n{{",
            h.gate
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stalled.push(stream);
    }
    // Let the gate take each stalled upload's turn.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let call = json!({"model": "m", "max_tokens": 5, "messages": []});
    let waiting = h.post("/v1/messages", &call);
    tokio::pin!(waiting);
    let early = tokio::time::timeout(Duration::from_millis(500), &mut waiting).await;
    assert!(early.is_err(), "a call went ahead of the stalled uploads");
    drop(stalled.pop());
    let answered = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("a turn came free");
    assert_eq!(answered.status(), StatusCode::OK);
}
