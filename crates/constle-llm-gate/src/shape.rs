//! Refusals in the provider's own error shape, so SDKs and CLIs show them
//! as the provider's errors, with a status none of them retries.
//!
//! Anthropic: `{"type":"error","error":{"type":…,"message":…}}`; OpenAI:
//! `{"error":{"message":…,"type":…,"code":…,"param":null}}`. `code` is
//! the gate's [`Reason`].
//!
//! Statuses: the SDKs (Anthropic's and OpenAI's, Stainless-generated)
//! retry 408, 409, 429 and 5xx, and Claude Code and Codex retry 429 and
//! 5xx with backoff; a refused cap answered with one of those would be
//! asked again and again. So a spend refusal, a ledger that cannot be
//! read and closed gates are 403 (`permission_error` for Anthropic,
//! `insufficient_quota` for OpenAI, which is what OpenAI calls an
//! exhausted quota), and every refusal carries `x-should-retry: false`,
//! which the Stainless SDKs obey over the status. The rest are what the
//! providers answer for the same mistake: 404 for an unknown path or
//! model, 413 for a body too large, 400 otherwise.

use hyper::StatusCode;
use serde_json::{Value, json};

use crate::config::Api;
use crate::reason::Reason;

/// The status a refusal for `reason` is answered with.
pub(crate) fn status(reason: Reason, too_large: bool) -> StatusCode {
    match reason {
        Reason::PathNotAllowed | Reason::ModelNotDeclared => StatusCode::NOT_FOUND,
        Reason::BodyUnreadable if too_large => StatusCode::PAYLOAD_TOO_LARGE,
        Reason::SpendRefused
        | Reason::LedgerUnavailable
        | Reason::GateClosed
        | Reason::HostRefused => StatusCode::FORBIDDEN,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// The provider's error `type` for a refusal with `status`.
fn error_type(api: Api, status: StatusCode) -> &'static str {
    match (api, status.as_u16()) {
        (Api::Anthropic, 403) => "permission_error",
        (Api::Anthropic, 404) => "not_found_error",
        (Api::Anthropic, 413) => "request_too_large",
        (Api::Anthropic, 502 | 504) => "api_error",
        (Api::Anthropic, _) => "invalid_request_error",
        (_, 403) => "insufficient_quota",
        (_, 502 | 504) => "server_error",
        (_, _) => "invalid_request_error",
    }
}

/// The error body for `reason` with `message`, in `api`'s shape.
pub(crate) fn body(api: Api, status: StatusCode, code: &str, message: &str) -> Value {
    let kind = error_type(api, status);
    match api {
        Api::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}),
        _ => json!({"error": {"message": message, "type": kind, "code": code, "param": null}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_never_answered_with_a_status_clients_retry() {
        for reason in [
            Reason::SpendRefused,
            Reason::LedgerUnavailable,
            Reason::GateClosed,
        ] {
            let status = status(reason, false);
            assert!(status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error());
            assert!(![408, 409].contains(&status.as_u16()));
        }
    }

    #[test]
    fn each_api_gets_its_own_shape() {
        let anthropic = body(
            Api::Anthropic,
            StatusCode::FORBIDDEN,
            "llm_spend_refused",
            "m",
        );
        assert_eq!(anthropic["type"], "error");
        assert_eq!(anthropic["error"]["type"], "permission_error");
        assert_eq!(anthropic["error"]["message"], "m");
        let openai = body(Api::OpenAi, StatusCode::FORBIDDEN, "llm_spend_refused", "m");
        assert_eq!(openai["error"]["type"], "insufficient_quota");
        assert_eq!(openai["error"]["code"], "llm_spend_refused");
        assert_eq!(openai["error"]["param"], Value::Null);
    }
}
