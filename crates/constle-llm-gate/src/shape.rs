//! Refusals in the provider's own error shape, so SDKs and CLIs show them
//! as the provider's errors, with a status none of them retries.
//!
//! Anthropic: `{"type":"error","error":{"type":…,"message":…}}`; OpenAI:
//! `{"error":{"message":…,"type":…,"code":…,"param":null}}`. `code` is
//! the gate's [`Reason`].
//!
//! Statuses: a refused cap must end the client's attempt at once, not be
//! asked again and again. Every refusal carries `x-should-retry: false`,
//! which the Stainless-generated SDKs (Anthropic's and OpenAI's, and
//! Claude Code's) obey over the status. A spend refusal, or a ledger that
//! cannot be read, is what each provider answers for money that has run
//! out, which each client shows as such and stops on: Anthropic's 402
//! `billing_error` (Claude Code stops at once; on 403 it says "Failed to
//! authenticate", and retries a 400 six times), OpenAI's 429
//! `insufficient_quota` (Codex stops at once with "Quota exceeded"; it
//! retries a 403 six times). Closed gates and requests not addressed to
//! loopback are 403. The rest are what the providers answer for the same
//! mistake: 404 for an unknown path or model, 413 for a body too large,
//! 400 otherwise. An answer withheld because it held the key is 502, the
//! provider's failure (its error `type` `api_error` or `server_error`).

use hyper::StatusCode;
use serde_json::{Value, json};

use crate::config::Api;
use crate::reason::Reason;

/// The status a refusal for `reason` is answered with by a gate for `api`.
pub(crate) fn status(api: Api, reason: Reason, too_large: bool) -> StatusCode {
    match reason {
        Reason::PathNotAllowed | Reason::ModelNotDeclared => StatusCode::NOT_FOUND,
        Reason::BodyUnreadable if too_large => StatusCode::PAYLOAD_TOO_LARGE,
        Reason::SpendRefused | Reason::LedgerUnavailable => match api {
            Api::Anthropic => StatusCode::PAYMENT_REQUIRED,
            Api::OpenAi | Api::OpenAiCompatible => StatusCode::TOO_MANY_REQUESTS,
        },
        Reason::GateClosed | Reason::HostRefused => StatusCode::FORBIDDEN,
        Reason::UpstreamEchoedKey => StatusCode::BAD_GATEWAY,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// The provider's error `type` for a refusal with `status`.
fn error_type(api: Api, status: StatusCode) -> &'static str {
    match (api, status.as_u16()) {
        (Api::Anthropic, 402) => "billing_error",
        (Api::Anthropic, 403) => "permission_error",
        (Api::Anthropic, 404) => "not_found_error",
        (Api::Anthropic, 413) => "request_too_large",
        (Api::Anthropic, 502 | 504) => "api_error",
        (Api::Anthropic, _) => "invalid_request_error",
        (_, 429) => "insufficient_quota",
        (_, 403) => "permission_denied",
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
    fn caps_are_answered_as_each_provider_answers_money_run_out() {
        for reason in [Reason::SpendRefused, Reason::LedgerUnavailable] {
            let anthropic = status(Api::Anthropic, reason, false);
            assert_eq!(anthropic, StatusCode::PAYMENT_REQUIRED);
            let kind = error_type(Api::Anthropic, anthropic);
            assert_eq!(kind, "billing_error");
            for api in [Api::OpenAi, Api::OpenAiCompatible] {
                let openai = status(api, reason, false);
                assert_eq!(openai, StatusCode::TOO_MANY_REQUESTS);
                assert_eq!(error_type(api, openai), "insufficient_quota");
            }
        }
        for api in [Api::Anthropic, Api::OpenAi] {
            let closed = status(api, Reason::GateClosed, false);
            assert!(!closed.is_server_error() && ![408, 409, 429].contains(&closed.as_u16()));
        }
    }

    #[test]
    fn each_api_gets_its_own_shape() {
        let anthropic = body(
            Api::Anthropic,
            StatusCode::PAYMENT_REQUIRED,
            "llm_spend_refused",
            "m",
        );
        assert_eq!(anthropic["type"], "error");
        assert_eq!(anthropic["error"]["type"], "billing_error");
        assert_eq!(anthropic["error"]["message"], "m");
        let openai = body(
            Api::OpenAi,
            StatusCode::TOO_MANY_REQUESTS,
            "llm_spend_refused",
            "m",
        );
        assert_eq!(openai["error"]["type"], "insufficient_quota");
        assert_eq!(openai["error"]["code"], "llm_spend_refused");
        assert_eq!(openai["error"]["param"], Value::Null);
    }
}
