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
//! or another digest, or no decision ever. A version 2 request (several
//! approvers) gets a version 2 decision, which can also be for another
//! tool, server or policy, signed for an expired request, or carry a v1
//! signature.

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
use constle_approval::quorum::SignedFields;
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
    /// (v2) A correctly signed `approved` for another tool.
    WrongTool,
    /// (v2) A correctly signed `approved` for another server.
    WrongServer,
    /// (v2) A correctly signed `approved` under another policy.
    WrongPolicy,
    /// (v2) A correctly signed `approved` whose signed expiry has passed.
    Expired,
    /// (v2) `approved` signed as a v1 decision (`id.approved.digest`),
    /// sent in a v2 body.
    V1Signature,
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
    if request["version"] == 2 {
        return match answer {
            Answer::Never => StatusCode::NOT_FOUND.into_response(),
            answer => (
                StatusCode::OK,
                axum::Json(v2_decision(&endpoint, &request, answer)),
            )
                .into_response(),
        };
    }
    let digest = request["subject_digest"].as_str().unwrap_or_default();
    let (signer, word, id, digest) = match answer {
        Answer::Never => return StatusCode::NOT_FOUND.into_response(),
        // The v2 misbehaviours are plain approvals to a v1 request.
        Answer::Approve
        | Answer::WrongTool
        | Answer::WrongServer
        | Answer::WrongPolicy
        | Answer::Expired
        | Answer::V1Signature => (&endpoint.signer, "approved", id, digest.to_owned()),
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

/// A version 2 decision for `request` by `answer`.
fn v2_decision(endpoint: &Endpoint, request: &Value, answer: Answer) -> Value {
    let text = |name: &str| request[name].as_str().unwrap_or_default().to_owned();
    let mut fields = SignedFields {
        request_id: text("request_id"),
        decision: "approved".into(),
        subject_digest: text("subject_digest"),
        agent: text("agent"),
        agent_did: request["agent_did"].as_str().map(str::to_owned),
        server: text("server"),
        tool: text("tool"),
        policy_digest: text("policy_digest"),
        expires_at: text("expires_at"),
    };
    let mut signer = &endpoint.signer;
    match answer {
        Answer::Deny => fields.decision = "denied".into(),
        Answer::ForgedSignature => signer = &endpoint.forger,
        Answer::WrongRequestId => fields.request_id = format!("hgr_{}", "0".repeat(32)),
        Answer::WrongDigest => fields.subject_digest = format!("sha256:{}", "0".repeat(64)),
        Answer::WrongTool => fields.tool = format!("{}_other", fields.tool),
        Answer::WrongServer => fields.server = format!("{}-other", fields.server),
        Answer::WrongPolicy => fields.policy_digest = format!("sha256:{}", "0".repeat(64)),
        Answer::Expired => fields.expires_at = "2026-01-01T00:00:00Z".into(),
        Answer::Approve | Answer::Never | Answer::V1Signature => {}
    }
    let message = match answer {
        Answer::V1Signature => {
            format!("{}.approved.{}", fields.request_id, fields.subject_digest).into_bytes()
        }
        _ => fields.message(),
    };
    let signature =
        base64::engine::general_purpose::STANDARD.encode(signer.sign(&message).to_bytes());
    let mut body = match serde_json::to_value(&fields) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    body.insert("version".into(), json!(2));
    body.insert("approver".into(), json!(signer.did().as_str()));
    body.insert("signature".into(), json!(signature));
    Value::Object(body)
}
