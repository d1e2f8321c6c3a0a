//! The policy core: what one model call may be, and what it may cost at
//! worst. Pure: bytes in, a decision out, no I/O. See the crate docs for
//! the rules and why.

use rust_decimal::Decimal;
use serde_json::{Map, Value};

use crate::config::{Api, Prices, Provider};
use crate::media::{self, Media};
use crate::reason::Reason;
use crate::route::Kind;

/// Largest request body the gate reads: 32 MiB, the largest any of the
/// providers' request limits allows.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// Largest `n` (choices) of a chat completion: OpenAI's own bound.
pub const MAX_CHOICES: u64 = 128;

/// The ending of every refusal message.
pub(crate) const NOT_FORWARDED: &str = "; the Constle gate did not forward it";

/// A call the gate would forward, and what it may cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspected {
    /// The declared model it names.
    pub model: String,
    /// That model's prices.
    pub prices: Prices,
    /// What is forwarded: the parsed body, written anew with the gate's
    /// changes (output maximum, usage requested), so the provider reads
    /// exactly what the gate read.
    pub body: Vec<u8>,
    /// Whether the agent asked for a stream (`stream: true`).
    pub stream: bool,
    /// The most input tokens the call can be charged (see the crate docs).
    pub input_tokens_bound: u64,
    /// The most output tokens: the maximum forwarded (times `n`).
    pub output_tokens_bound: u64,
    /// The worst case, in USD: both bounds at the model's prices.
    pub worst_case_usd: Decimal,
    /// The output maximum the agent asked for, when the gate wrote another
    /// (none asked, or more than the provider's `max_output_tokens`).
    pub lowered_from: Option<Option<u64>>,
}

/// A call the gate refuses, before anything reaches the provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Why, as a stable code.
    pub reason: Reason,
    /// What the agent is told: what was refused, then
    /// "; the Constle gate did not forward it". Never the prompt.
    pub message: String,
    /// The model the body named, if it was a string (cut to
    /// [`crate::MAX_RECORDED_BYTES`]).
    pub model: Option<String>,
}

impl Refusal {
    pub(crate) fn new(reason: Reason, what: &str, model: Option<&str>) -> Refusal {
        Refusal {
            reason,
            message: format!("{what}{NOT_FORWARDED}"),
            model: model.map(crate::refused::bounded),
        }
    }
}

/// Decides one model call of `kind` to `provider` with body `body`.
/// `previous` gives the tokens (input plus output) of a response this gate
/// saw complete, by id: a Responses call continuing it reads them again.
pub fn inspect(
    provider: &Provider,
    kind: Kind,
    body: &[u8],
    previous: &dyn Fn(&str) -> Option<u64>,
) -> Result<Inspected, Refusal> {
    let mut object = parse(body)?;
    let model = match object.get("model") {
        Some(Value::String(model)) => model.clone(),
        _ => {
            let what = "a request without a model name";
            return Err(Refusal::new(Reason::ModelNotDeclared, what, None));
        }
    };
    let refuse = |(reason, what): (Reason, String)| Refusal::new(reason, &what, Some(&model));
    let Some(prices) = provider.models.get(&model) else {
        let what = format!(
            "model {model:?} is not declared for provider {:?}",
            provider.id
        );
        return Err(refuse((Reason::ModelNotDeclared, what)));
    };
    let earlier = rules(provider.api, kind, &object, previous).map_err(refuse)?;
    let media = media::scan(&object).map_err(refuse)?;
    let (output, lowered_from) = output_bound(provider, kind, &mut object).map_err(refuse)?;
    let stream = object.get("stream") == Some(&Value::Bool(true));
    if stream && kind == Kind::ChatCompletions {
        ask_for_usage(&mut object).map_err(refuse)?;
    }
    let body_out = serde_json::to_vec(&Value::Object(object)).map_err(|_| {
        refuse((
            Reason::BodyUnreadable,
            "a body the gate cannot write again".to_owned(),
        ))
    })?;
    let input = input_bound(body.len().max(body_out.len()), media, earlier);
    let worst = cost(input, prices.max_input())
        .zip(cost(output, prices.output))
        .and_then(|(i, o)| i.checked_add(o))
        .ok_or_else(|| {
            refuse((
                Reason::Unsupported,
                "a request too large to price".to_owned(),
            ))
        })?;
    Ok(Inspected {
        model,
        prices: *prices,
        body: body_out,
        stream,
        input_tokens_bound: input,
        output_tokens_bound: output,
        worst_case_usd: worst,
        lowered_from,
    })
}

/// `tokens` at `per_million` USD per million tokens; `None` on overflow.
pub(crate) fn cost(tokens: u64, per_million: Decimal) -> Option<Decimal> {
    Decimal::from(tokens)
        .checked_mul(per_million)?
        .checked_div(Decimal::from(1_000_000u32))
}

fn parse(body: &[u8]) -> Result<Map<String, Value>, Refusal> {
    let unreadable = |what: &str| Refusal::new(Reason::BodyUnreadable, what, None);
    match constle_json::parse_limited(body, MAX_BODY_BYTES) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(unreadable("a body that is not a JSON object")),
        Err(constle_json::LimitedError::TooLarge { .. }) => Err(unreadable(&format!(
            "a body larger than {MAX_BODY_BYTES} bytes"
        ))),
        Err(_) => Err(unreadable(
            "a body that is not strict JSON (duplicate keys, too deep, or not JSON)",
        )),
    }
}

/// A token covers at least one byte of the text it stands for (byte-level
/// BPE vocabularies, which both providers' tokenizers are, hold every
/// single byte and only longer strings besides), and JSON writes text in
/// at least as many bytes as it has (escapes only lengthen it). So the
/// body's length bounds the tokens of everything it holds as text, and
/// the framing the provider adds around messages is far less than the
/// JSON syntax around them. Media and earlier responses add their own.
fn input_bound(body_len: usize, media: Media, earlier: u64) -> u64 {
    u64::try_from(body_len)
        .unwrap_or(u64::MAX)
        .saturating_add(media.tokens())
        .saturating_add(earlier)
}

type Checked<T> = Result<T, (Reason, String)>;

/// The rules of each API on what the provider would do beyond the body;
/// the tokens of an earlier response the call continues.
fn rules(
    api: Api,
    kind: Kind,
    object: &Map<String, Value>,
    previous: &dyn Fn(&str) -> Option<u64>,
) -> Checked<u64> {
    let present = |key: &str| object.get(key).is_some_and(|v| !v.is_null());
    match (api, kind) {
        (Api::Anthropic, _) => {
            if present("mcp_servers") {
                return hosted("mcp_servers (remote MCP servers the provider calls)");
            }
            check_tools(object, anthropic_client_tool, false)?;
            Ok(0)
        }
        (_, Kind::Responses) => {
            check_tools(object, openai_client_tool, true)?;
            for (key, what) in [
                ("conversation", "a stored conversation (conversation)"),
                ("prompt", "a stored prompt (prompt)"),
            ] {
                if present(key) {
                    return Err((Reason::InputUnbounded, what.to_owned()));
                }
            }
            if object.get("background") == Some(&Value::Bool(true)) {
                let what = "a background response (background: true)";
                return Err((Reason::InputUnbounded, what.to_owned()));
            }
            previous_tokens(object, previous)
        }
        _ => {
            check_tools(object, openai_client_tool, false)?;
            if present("web_search_options") {
                return hosted("web search (web_search_options)");
            }
            let modalities = object.get("modalities").and_then(Value::as_array);
            if present("audio") || modalities.is_some_and(|m| m.iter().any(|v| v == "audio")) {
                return Err((Reason::Unsupported, "audio output".to_owned()));
            }
            Ok(0)
        }
    }
}

fn hosted<T>(what: &str) -> Checked<T> {
    Err((
        Reason::HostedTool,
        format!("a tool the provider runs itself: {what}"),
    ))
}

/// Tools the client runs: Anthropic's custom tools (no `type`, or
/// `custom`), and its schema tools that the client executes in the
/// sandbox (bash, text editor, computer use, memory).
fn anthropic_client_tool(kind: Option<&str>) -> bool {
    match kind {
        None | Some("custom") => true,
        Some(kind) => ["bash_", "text_editor_", "computer_", "memory_"]
            .iter()
            .any(|prefix| kind.starts_with(prefix)),
    }
}

/// OpenAI's client tools: `function` and `custom` (free-form input).
fn openai_client_tool(kind: Option<&str>) -> bool {
    matches!(kind, Some("function" | "custom"))
}

/// Every tool in `object.tools` a client tool; with `namespaces` (the
/// Responses API), a `namespace` groups tools, each of which must be one.
fn check_tools(
    object: &Map<String, Value>,
    client: fn(Option<&str>) -> bool,
    namespaces: bool,
) -> Checked<()> {
    let tools = match object.get("tools") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(tools)) => tools,
        Some(_) => {
            return Err((
                Reason::BodyUnreadable,
                "tools that are not a list".to_owned(),
            ));
        }
    };
    for tool in tools {
        let Some(tool) = tool.as_object() else {
            return Err((
                Reason::BodyUnreadable,
                "a tool that is not an object".to_owned(),
            ));
        };
        let kind = match tool.get("type") {
            None => None,
            Some(Value::String(kind)) => Some(kind.as_str()),
            Some(_) => {
                return Err((
                    Reason::BodyUnreadable,
                    "a tool type that is not a string".to_owned(),
                ));
            }
        };
        if namespaces && kind == Some("namespace") {
            check_tools(tool, client, false)?;
        } else if !client(kind) {
            return hosted(&format!("tool type {:?}", kind.unwrap_or_default()));
        }
    }
    Ok(())
}

/// The tokens of the response `previous_response_id` continues, which the
/// provider reads again as input: known only for one this gate saw
/// complete.
fn previous_tokens(
    object: &Map<String, Value>,
    previous: &dyn Fn(&str) -> Option<u64>,
) -> Checked<u64> {
    match object.get("previous_response_id") {
        None | Some(Value::Null) => Ok(0),
        Some(Value::String(id)) => previous(id).ok_or_else(|| {
            let what = "a previous_response_id this gate did not see complete in this run";
            (Reason::InputUnbounded, what.to_owned())
        }),
        Some(_) => Err((
            Reason::BodyUnreadable,
            "a previous_response_id that is not a string".to_owned(),
        )),
    }
}

/// The output maximum forwarded, written into `object` where the agent
/// asked for none or for more than the provider's `max_output_tokens`;
/// the bound on output tokens and what the agent had asked.
fn output_bound(
    provider: &Provider,
    kind: Kind,
    object: &mut Map<String, Value>,
) -> Checked<(u64, Option<Option<u64>>)> {
    let ceiling = u64::from(provider.max_output_tokens);
    let (fields, written): (&[&str], &str) = match (provider.api, kind) {
        (_, Kind::CountTokens) => return Ok((0, None)),
        (_, Kind::Messages) => (&["max_tokens"], "max_tokens"),
        (_, Kind::Responses) => (&["max_output_tokens"], "max_output_tokens"),
        (Api::OpenAiCompatible, _) => (&["max_completion_tokens", "max_tokens"], "max_tokens"),
        _ => (
            &["max_completion_tokens", "max_tokens"],
            "max_completion_tokens",
        ),
    };
    let mut asked = None;
    let mut lowered = false;
    for field in fields {
        let Some(value) = tokens_field(object, field)? else {
            continue;
        };
        asked = asked.max(Some(value));
        if value > ceiling {
            object.insert((*field).to_owned(), Value::from(ceiling));
            lowered = true;
        }
    }
    if asked.is_none() {
        object.insert(written.to_owned(), Value::from(ceiling));
    }
    let sent = asked.unwrap_or(ceiling).min(ceiling);
    if kind == Kind::Messages {
        lower_thinking_budget(object, sent)?;
    }
    let choices = if kind == Kind::ChatCompletions {
        choices(object)?
    } else {
        1
    };
    let lowered_from = (lowered || asked.is_none()).then_some(asked);
    Ok((sent.saturating_mul(choices), lowered_from))
}

/// A token count field: absent or null, else a non-negative integer.
fn tokens_field(object: &Map<String, Value>, field: &str) -> Checked<Option<u64>> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or_else(|| {
            (
                Reason::BodyUnreadable,
                format!("a {field} that is not a non-negative integer"),
            )
        }),
    }
}

/// Anthropic refuses a thinking budget not below `max_tokens`: one the
/// gate's lowering put there is lowered below it in turn.
fn lower_thinking_budget(object: &mut Map<String, Value>, max_tokens: u64) -> Checked<()> {
    let Some(Value::Object(thinking)) = object.get_mut("thinking") else {
        return Ok(());
    };
    if let Some(budget) = tokens_field(thinking, "budget_tokens")?
        && budget >= max_tokens
    {
        let lowered = max_tokens.saturating_sub(1);
        thinking.insert("budget_tokens".to_owned(), Value::from(lowered));
    }
    Ok(())
}

/// How many choices a chat completion asks for (`n`), each up to the
/// output maximum.
fn choices(object: &Map<String, Value>) -> Checked<u64> {
    match tokens_field(object, "n")? {
        None => Ok(1),
        Some(n) if n > MAX_CHOICES => Err((
            Reason::Unsupported,
            format!("n above {MAX_CHOICES} choices"),
        )),
        Some(n) => Ok(n.max(1)),
    }
}

/// A streamed chat completion reports usage only when asked
/// (`stream_options.include_usage`): the gate asks, whatever the agent did.
fn ask_for_usage(object: &mut Map<String, Value>) -> Checked<()> {
    let options = object
        .entry("stream_options")
        .or_insert_with(|| Value::Object(Map::new()));
    if options.is_null() {
        *options = Value::Object(Map::new());
    }
    let Value::Object(options) = options else {
        return Err((
            Reason::BodyUnreadable,
            "stream_options that are not an object".to_owned(),
        ));
    };
    options.insert("include_usage".to_owned(), Value::Bool(true));
    Ok(())
}

#[cfg(test)]
mod tests;
