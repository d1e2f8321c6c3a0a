//! Which requests a provider's gate serves at all: a method and a path per
//! endpoint of its API, relative to the base URL the agent was given.
//!
//! The agent's base is `http://127.0.0.1:PORT` for Anthropic (its SDKs
//! append `/v1/messages`) and `http://127.0.0.1:PORT/v1` for the OpenAI
//! family (the SDKs append `/responses`, `/chat/completions`). The path
//! after the agent's base is appended to the provider's upstream base, so
//! `https://api.openai.com/v1` + `/responses`. Anything else is refused
//! (`llm_path_not_allowed`): the gate forwards no endpoint it does not
//! know the cost of.
//!
//! A query string is refused too, but for `beta=true` on Anthropic's
//! endpoints, which the Anthropic SDKs add for their beta namespace
//! (Claude Code sends it on every call): it selects no other endpoint.

use hyper::Method;

use crate::config::Api;

/// What an endpoint does, for the meter and the usage parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// Anthropic `POST /v1/messages`.
    Messages,
    /// Anthropic `POST /v1/messages/count_tokens`: free, but still a call.
    CountTokens,
    /// OpenAI `POST /v1/responses`, or a `response.create` on its
    /// WebSocket.
    Responses,
    /// OpenAI `POST /v1/chat/completions` (and OpenAI-compatible hosts').
    ChatCompletions,
}

impl Kind {
    /// A stable name for events (`messages`, `count_tokens`, `responses`,
    /// `chat_completions`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Messages => "messages",
            Kind::CountTokens => "count_tokens",
            Kind::Responses => "responses",
            Kind::ChatCompletions => "chat_completions",
        }
    }
}

/// A request the gate serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// A model call: inspected, metered, forwarded to `upstream_path`.
    Call {
        kind: Kind,
        upstream_path: &'static str,
    },
    /// `GET …/responses` with an Upgrade: the Responses WebSocket.
    ResponsesSocket,
    /// `GET …/models`: answered by the gate itself with the declared
    /// models, so the agent learns nothing of the key's account.
    Models,
}

/// The route of `method path?query` on a provider speaking `api`; `None`:
/// not served.
pub(crate) fn route(api: Api, method: &Method, path: &str, query: Option<&str>) -> Option<Route> {
    let call = |kind, upstream_path| Route::Call {
        kind,
        upstream_path,
    };
    let route = match (api, path) {
        (Api::Anthropic, "/v1/messages") => call(Kind::Messages, "/v1/messages"),
        (Api::Anthropic, "/v1/messages/count_tokens") => {
            call(Kind::CountTokens, "/v1/messages/count_tokens")
        }
        (Api::OpenAi, "/v1/responses") if method == Method::GET => Route::ResponsesSocket,
        (Api::OpenAi, "/v1/responses") => call(Kind::Responses, "/responses"),
        (Api::OpenAi | Api::OpenAiCompatible, "/v1/chat/completions") => {
            call(Kind::ChatCompletions, "/chat/completions")
        }
        (Api::OpenAi | Api::OpenAiCompatible, "/v1/models") => Route::Models,
        _ => return None,
    };
    let method_ok = match route {
        Route::Call { .. } => method == Method::POST,
        Route::ResponsesSocket | Route::Models => method == Method::GET,
    };
    let query_ok = match query {
        None => true,
        Some(query) => api == Api::Anthropic && query == "beta=true",
    };
    (method_ok && query_ok).then_some(route)
}

/// `path?query` as it goes upstream: the query only when it is the one
/// [`route`] lets through.
pub(crate) fn upstream_path_and_query(path: &str, query: Option<&str>) -> String {
    match query {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_api_serves_its_own_endpoints_only() {
        let post = Method::POST;
        let get = Method::GET;
        let served = [
            (Api::Anthropic, &post, "/v1/messages", None),
            (Api::Anthropic, &post, "/v1/messages", Some("beta=true")),
            (Api::Anthropic, &post, "/v1/messages/count_tokens", None),
            (Api::OpenAi, &post, "/v1/responses", None),
            (Api::OpenAi, &get, "/v1/responses", None),
            (Api::OpenAi, &post, "/v1/chat/completions", None),
            (Api::OpenAi, &get, "/v1/models", None),
            (Api::OpenAiCompatible, &post, "/v1/chat/completions", None),
            (Api::OpenAiCompatible, &get, "/v1/models", None),
        ];
        for (api, method, path, query) in served {
            assert!(route(api, method, path, query).is_some(), "{api:?} {path}");
        }
        let refused = [
            (Api::Anthropic, &get, "/v1/messages", None),
            (Api::Anthropic, &post, "/v1/messages/batches", None),
            (Api::Anthropic, &post, "/v1/files", None),
            (Api::Anthropic, &post, "/v1/messages", Some("beta=false")),
            (Api::Anthropic, &post, "/v1/responses", None),
            (Api::OpenAi, &post, "/v1/messages", None),
            (Api::OpenAi, &post, "/v1/responses", Some("beta=true")),
            (Api::OpenAi, &get, "/v1/responses/resp_1", None),
            (Api::OpenAi, &post, "/v1/files", None),
            (Api::OpenAi, &post, "/v1/embeddings", None),
            (Api::OpenAi, &post, "/v1/models", None),
            (Api::OpenAi, &post, "/v1//responses", None),
            (Api::OpenAi, &post, "/responses", None),
            (Api::OpenAiCompatible, &post, "/v1/responses", None),
            (Api::OpenAiCompatible, &get, "/v1/responses", None),
        ];
        for (api, method, path, query) in refused {
            assert_eq!(
                route(api, method, path, query),
                None,
                "{api:?} {method} {path}"
            );
        }
    }
}
