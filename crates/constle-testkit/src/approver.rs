//! A stand-in for a person at a decision endpoint: a webhook server on
//! loopback that speaks the human-gates protocol
//! (`docs/spec/human-gates-webhook.md`) and answers each gated request by a
//! fixed rule, signing with a real approver key.
//!
//! It accepts the gate's `POST <url>` (recording the request) and answers
//! `GET <url>/<request_id>/decision` with 404 until it has a request by that
//! id, then with the decision its [`Answer`] for that tool says. Besides
//! honest approvals and denials it can misbehave the ways the gate must
//! survive: a signature by another key, a decision for another request id
//! or another digest, or no decision ever.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use constle_identity::SigningIdentity;
use serde_json::{Value, json};

/// How the endpoint answers requests for one tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A correctly signed `approved`.
    Approve,
    /// A correctly signed `denied`.
    Deny,
    /// 404 forever: nobody decides.
    Never,
    /// `approved`, signed by a key that is not the approver's.
    ForgedSignature,
    /// A correctly signed `approved` for another request id.
    WrongRequestId,
    /// A correctly signed `approved` for another subject digest.
    WrongDigest,
}

/// The endpoint. Stops when dropped.
pub struct SimulatedApprover {
    url: String,
    state: Arc<Endpoint>,
    _runtime: tokio::runtime::Runtime,
}

struct Endpoint {
    signer: SigningIdentity,
    forger: SigningIdentity,
    answers: BTreeMap<String, Answer>,
    otherwise: Answer,
    /// The POSTed requests, by request id, in arrival order.
    requests: Mutex<Vec<Value>>,
}

impl SimulatedApprover {
    /// Starts the endpoint on 127.0.0.1 with its own runtime thread.
    /// `answers` maps tool names to answers; other tools get `otherwise`.
    pub fn start(
        signer: SigningIdentity,
        answers: impl IntoIterator<Item = (String, Answer)>,
        otherwise: Answer,
    ) -> io::Result<SimulatedApprover> {
        let state = Arc::new(Endpoint {
            signer,
            forger: SigningIdentity::generate(),
            answers: answers.into_iter().collect(),
            otherwise,
            requests: Mutex::new(Vec::new()),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let addr: SocketAddr = listener.local_addr()?;
        let app = Router::new()
            .route("/gates", post(receive))
            .route("/gates/{id}/decision", get(decision))
            .with_state(Arc::clone(&state));
        runtime.spawn(async move { axum::serve(listener, app).await });
        Ok(SimulatedApprover {
            url: format!("http://{addr}/gates"),
            state,
            _runtime: runtime,
        })
    }

    /// The URL to put in the `url_secret_ref` variable.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every request the gate POSTed, parsed, in arrival order.
    pub fn requests(&self) -> Vec<Value> {
        match self.state.requests.lock() {
            Ok(requests) => requests.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

async fn receive(State(endpoint): State<Arc<Endpoint>>, body: Bytes) -> StatusCode {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    match endpoint.requests.lock() {
        Ok(mut requests) => requests.push(request),
        Err(poisoned) => poisoned.into_inner().push(request),
    }
    StatusCode::ACCEPTED
}

async fn decision(State(endpoint): State<Arc<Endpoint>>, Path(id): Path<String>) -> Response {
    let request = {
        let requests = match endpoint.requests.lock() {
            Ok(requests) => requests,
            Err(poisoned) => poisoned.into_inner(),
        };
        requests
            .iter()
            .find(|r| r["request_id"] == id.as_str())
            .cloned()
    };
    let Some(request) = request else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let tool = request["tool"].as_str().unwrap_or_default();
    let answer = endpoint
        .answers
        .get(tool)
        .copied()
        .unwrap_or(endpoint.otherwise);
    let digest = request["subject_digest"].as_str().unwrap_or_default();
    let (signer, word, id, digest) = match answer {
        Answer::Never => return StatusCode::NOT_FOUND.into_response(),
        Answer::Approve => (&endpoint.signer, "approved", id, digest.to_owned()),
        Answer::Deny => (&endpoint.signer, "denied", id, digest.to_owned()),
        Answer::ForgedSignature => (&endpoint.forger, "approved", id, digest.to_owned()),
        Answer::WrongRequestId => (
            &endpoint.signer,
            "approved",
            format!("hgr_{}", "0".repeat(32)),
            digest.to_owned(),
        ),
        Answer::WrongDigest => (
            &endpoint.signer,
            "approved",
            id,
            format!("sha256:{}", "0".repeat(64)),
        ),
    };
    let message = format!("{id}.{word}.{digest}");
    let signature = base64::engine::general_purpose::STANDARD
        .encode(signer.sign(message.as_bytes()).to_bytes());
    let body = json!({
        "request_id": id,
        "decision": word,
        "subject_digest": digest,
        "signature": signature,
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}
