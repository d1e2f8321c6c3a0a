//! The model API gate: the agent's only path to a model provider. It holds
//! the provider's key (the agent gets a placeholder), forwards only the
//! endpoints and models the Agentfile declares, reserves each call's worst
//! case against the spend caps before forwarding it, settles to the usage
//! the provider reports, and has every call and refusal recorded.
//!
//! The policy core ([`inspect`]) is a pure function, no I/O; [`Gate`] is
//! the HTTP side built on it (and the Responses API's WebSocket mode,
//! each `response.create` message inspected as a POST body), with a [`Meter`] where the run's spend
//! ledger plugs in (and records `llm_call`), a [`Recorder`] where the
//! audit log records the gate's own refusals (`llm_refused`), and a
//! shutoff ([`Gate::with_shutoff`]) that stops all forwarding at once.
//!
//! The agent is assumed compromised. Nothing it sends in a header lifts a
//! refusal; every credential it sends is dropped and the real key added;
//! the key appears in no error, event or `Debug` output ([`Key`]).
//!
//! # What a call may be: [`inspect`]
//!
//! For each model call (the endpoints per API are in [`Kind`]; anything
//! else is refused, `llm_path_not_allowed`), in order:
//!
//! | Rule | [`Reason`] |
//! |---|---|
//! | the body at most [`MAX_BODY_BYTES`], a strict JSON object ([`constle_json`]: no duplicate keys, bounded depth) | `llm_body_unreadable` |
//! | `model` a string naming a declared model, byte for byte | `llm_model_not_declared` |
//! | no tool the provider runs itself: Anthropic `mcp_servers`, a `tools[]` entry whose `type` is not absent, `custom`, or a client-executed schema tool (`bash_…`, `text_editor_…`, `computer_…`, `memory_…`, run in the sandbox); OpenAI a tool other than `function` or `custom`; chat `web_search_options` | `llm_hosted_tool` |
//! | no input the body does not hold: an image or document by URL or file id, `item_reference`, `container_upload`, OpenAI `conversation`, `prompt`, `background: true`, a `previous_response_id` this gate did not see complete | `llm_input_unbounded` |
//! | nothing priced otherwise than per token: audio in or out, `n` above [`MAX_CHOICES`] | `llm_unsupported` |
//!
//! Hosted tools run at the provider on the agent's behalf: they can carry
//! data to hosts `allowed_hosts` never named, and cost money beyond any
//! bound the gate could set. Input held elsewhere (a URL the provider
//! fetches, a stored conversation) has no length the gate can see.
//!
//! # What a call may cost
//!
//! - **Input** is bounded by the body's length in bytes: a token of
//!   byte-level BPE covers at least one byte of the text, and JSON writes
//!   text in at least as many bytes. Each inline image adds
//!   [`IMAGE_TOKENS`] and each inline document [`DOCUMENT_TOKENS`] (their
//!   tokens follow pixels and pages, not bytes); a continued Responses
//!   call adds the reported tokens of the response it continues. Priced at
//!   the model's highest input price (input, cached or cache write).
//! - **Output** is bounded by the request's maximum (Anthropic
//!   `max_tokens`, Responses `max_output_tokens`, chat
//!   `max_completion_tokens` or `max_tokens`, times `n`), at the output
//!   price. A request without one gets the provider's `max_output_tokens`
//!   written in; a larger one is lowered to it (and an Anthropic
//!   `thinking.budget_tokens` not below the new maximum to one under it).
//!
//! The sum is reserved ([`Meter::reserve`]) before the call is sent, so
//! concurrent calls cannot together pass a cap; the reservation's record
//! is written while the call is on its way, and nothing of the answer
//! passes before it is on disk ([`Recording`]). The body is written anew
//! from what was parsed, with the gate's changes, so the provider reads
//! what the gate read; a streamed chat completion also gets
//! `stream_options.include_usage: true`, so its usage arrives.
//!
//! # Settlement
//!
//! The response passes to the agent as it arrives, an SSE stream event by
//! event (a JSON body once whole), while the gate reads the usage from it
//! ([`Usage`]). Nothing that holds the key passes: a provider echoing it
//! (an error quoting it) has that header dropped, that body answered with
//! a 502 `llm_upstream_echoed_key`, that stream cut before the event. When it has passed (or
//! was cut) the call is settled ([`Meter::settle`]): to the reported usage
//! at the model's prices, or to the whole reservation when no final usage
//! came. A call refused before it left costs nothing.
//!
//! # Refusals
//!
//! In the provider's own error shape (Anthropic
//! `{"type":"error","error":{"type","message"}}`, OpenAI
//! `{"error":{"message","type","code","param"}}`, `code` the [`Reason`]),
//! with a status that ends the client's attempt: a spend refusal, or a
//! ledger that cannot be read, is what each provider answers for money
//! run out (Anthropic 402 `billing_error`, OpenAI 429
//! `insufficient_quota`), on which Claude Code and Codex stop at once;
//! closed gates are 403; and every refusal carries `x-should-retry:
//! false`, which the Stainless-generated
//! SDKs obey over the status. An unknown path or model is 404, a body too
//! large 413, the rest 400, as the providers answer the same mistakes.
//! Every message says what was refused and ends "; the Constle gate did
//! not forward it"; none holds the key, the prompt or the output.

#![forbid(unsafe_code)]

mod config;
mod echo;
mod error;
mod http;
mod inspect;
mod loopback;
mod media;
mod meter;
mod reason;
mod refused;
mod route;
mod shape;
mod socket;
mod state;
mod upstream;
mod usage;

pub use config::{Api, Key, Prices, Provider};
pub use error::GateError;
pub use http::{DEFAULT_RESPONSE_TIMEOUT, FORWARDED_REQUEST_HEADERS, Gate};
pub use inspect::{Inspected, MAX_BODY_BYTES, MAX_CHOICES, Refusal, inspect};
pub use media::{DOCUMENT_TOKENS, IMAGE_TOKENS};
pub use meter::{
    Call, DoneFuture, Held, Meter, MeterRefusal, Recorder, Recording, Reservation, ReserveFuture,
    Settled, Unmetered, Unrecorded,
};
pub use reason::Reason;
pub use refused::{MAX_RECORDED_BYTES, Refused, Transport};
pub use route::Kind;
pub use state::{INTAKE_TIMEOUT, MAX_INTAKE, MAX_REMEMBERED_RESPONSES};
/// The shutoff [`Gate::with_shutoff`] takes.
pub use tokio_util::sync::CancellationToken;
pub use usage::Usage;
