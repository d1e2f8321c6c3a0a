//! The pages, written by hand. Everything that came from the gate (and so,
//! possibly, from the agent) goes through [`escape`] and lands in text
//! content or a quoted attribute value, never in markup, a URL or a style:
//! the page shows arguments, it never interprets them. There is no
//! JavaScript at all, and the Content-Security-Policy forbids any.

use std::fmt::Write as _;

use crate::request::Version2;
use crate::store::{Reported, StoredRequest};

/// HTML-escapes `s` for text content and double-quoted attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn page(title: &str, refresh: bool, body: &str) -> String {
    let refresh = if refresh {
        // A person waiting for requests sees new ones without JavaScript.
        "<meta http-equiv=\"refresh\" content=\"20\">"
    } else {
        ""
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">{refresh}\
         <title>{title} · Constle approver</title>\
         <link rel=\"stylesheet\" href=\"/style.css\"></head>\
         <body>{body}</body></html>\n",
        title = escape(title),
    )
}

/// The login form, with an optional error line.
pub fn login(error: Option<&str>) -> String {
    let error = error
        .map(|e| format!("<p class=\"error\" role=\"alert\">{}</p>", escape(e)))
        .unwrap_or_default();
    page(
        "Sign in",
        false,
        &format!(
            "<main class=\"narrow\"><h1>Constle approver</h1>{error}\
             <form method=\"post\" action=\"/login\" class=\"login\">\
             <label>User <input name=\"user\" id=\"user\" autocomplete=\"username\" value=\"admin\" required></label>\
             <label>Password <input name=\"password\" id=\"password\" type=\"password\" autocomplete=\"current-password\" required></label>\
             <button type=\"submit\" id=\"sign-in\">Sign in</button></form></main>"
        ),
    )
}

/// A short page for a refused action.
pub fn message(title: &str, text: &str) -> String {
    page(
        title,
        false,
        &format!(
            "<main class=\"narrow\"><h1>{}</h1><p>{}</p><p><a href=\"/\">Back to the requests</a></p></main>",
            escape(title),
            escape(text)
        ),
    )
}

/// "4 min 12 s".
fn time_left(seconds: i64) -> String {
    let seconds = seconds.max(0);
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if h > 0 {
        format!("{h} h {m} min")
    } else if m > 0 {
        format!("{m} min {s} s")
    } else {
        format!("{s} s")
    }
}

fn when(unix: i64) -> String {
    jiff::Timestamp::from_second(unix)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// Pretty JSON for display; the stored compact text if it somehow does not
/// parse.
fn pretty(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| arguments.to_owned())
}

/// Who looks at the page, and with which key this endpoint signs.
pub struct Viewer<'a> {
    /// The signed-in user.
    pub user: &'a str,
    /// The session's CSRF token.
    pub csrf: &'a str,
    /// This endpoint's `did:key`.
    pub key: &'a str,
}

/// What a version 2 request adds to its description list: the agent's DID,
/// the policy digest, the expiry, the threshold and the approvers (this
/// endpoint's key marked).
fn version2_rows(v2: &Version2, expires_at: &str, key: &str) -> String {
    let agent_did = match &v2.agent_did {
        Some(did) => format!("<code>{}</code>", escape(did)),
        None => "none".to_owned(),
    };
    let mut approvers = String::new();
    for listed in &v2.approvers {
        let mine = if listed.did == key {
            " <b class=\"mine\">(this endpoint's key)</b>"
        } else {
            ""
        };
        let _ = write!(
            approvers,
            "<li>{} <code>{}</code>{mine}</li>",
            escape(&listed.label),
            escape(&listed.did)
        );
    }
    format!(
        "<dt>Agent DID</dt><dd class=\"agent-did\">{agent_did}</dd>\
         <dt>Policy digest</dt><dd><code class=\"digest policy\">{policy}</code></dd>\
         <dt>Expires</dt><dd class=\"expires\">{expires}</dd>\
         <dt>Approvals needed</dt><dd class=\"threshold\">{k} of {n}</dd>\
         <dt>Approvers</dt><dd><ul class=\"approvers\">{approvers}</ul></dd>",
        policy = escape(&v2.policy_digest),
        expires = escape(expires_at),
        k = v2.threshold,
        n = v2.approvers.len(),
    )
}

/// A version 2 request's description rows and votes so far; nothing for
/// version 1.
fn version2_parts(r: &StoredRequest, key: &str) -> (String, String) {
    match &r.request.v2 {
        Some(v2) => (
            version2_rows(v2, &r.request.expires_at, key),
            votes_so_far(r.reported.as_ref()),
        ),
        None => (String::new(), String::new()),
    }
}

/// The gate's latest "votes so far", said to be its unverified word.
fn votes_so_far(reported: Option<&Reported>) -> String {
    let mut html = String::from(
        "<h4>Votes so far <span class=\"unverified\">(reported by the gate, not verified)</span></h4>",
    );
    let Some(reported) = reported.filter(|r| !r.votes.is_empty()) else {
        html.push_str("<p class=\"empty votes\">None reported.</p>");
        return html;
    };
    html.push_str("<ul class=\"votes\">");
    for vote in &reported.votes {
        let _ = write!(
            html,
            "<li class=\"{word}\"><span class=\"badge\">{word}</span> {label} <code>{did}</code></li>",
            word = if vote.decision == "approved" {
                "approved"
            } else {
                "denied"
            },
            label = escape(&vote.label),
            did = escape(&vote.approver),
        );
    }
    let _ = write!(
        html,
        "</ul><p class=\"reported-at\">Reported {}</p>",
        when(reported.at)
    );
    html
}

/// The main page: pending requests with their buttons, then the history.
pub fn requests(
    viewer: &Viewer<'_>,
    pending: &[StoredRequest],
    history: &[StoredRequest],
    now: i64,
) -> String {
    let csrf = escape(viewer.csrf);
    let mut body = format!(
        "<header><h1>Constle approver</h1><div class=\"who\">Signed in as <b>{}</b>\
         <form method=\"post\" action=\"/logout\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <button type=\"submit\" class=\"quiet\">Sign out</button></form></div></header><main>",
        escape(viewer.user)
    );
    let _ = write!(body, "<h2>Waiting for a decision ({})</h2>", pending.len());
    if pending.is_empty() {
        body.push_str(
            "<p class=\"empty\">Nothing is waiting. This page reloads every 20 seconds.</p>",
        );
    }
    for r in pending {
        let id = escape(&r.request.request_id);
        let (v2_rows, votes) = version2_parts(r, viewer.key);
        let _ = write!(
            body,
            "<article class=\"request\" id=\"req-{id}\">\
             <h3><span class=\"tool\">{tool}</span> <span class=\"on\">on</span> <span class=\"server\">{server}</span></h3>\
             <dl><dt>Agent</dt><dd>{agent}</dd>{v2_rows}\
             <dt>Time left</dt><dd class=\"left\">{left}</dd>\
             <dt>Request</dt><dd><code>{id}</code></dd>\
             <dt>Subject digest</dt><dd><code class=\"digest\">{digest}</code></dd></dl>\
             <h4>Arguments</h4><pre class=\"args\">{args}</pre>{votes}\
             <div class=\"actions\">\
             <form method=\"post\" action=\"/decide\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <input type=\"hidden\" name=\"request_id\" value=\"{id}\"><input type=\"hidden\" name=\"decision\" value=\"approved\">\
             <button type=\"submit\" class=\"approve\">Approve</button></form>\
             <form method=\"post\" action=\"/decide\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <input type=\"hidden\" name=\"request_id\" value=\"{id}\"><input type=\"hidden\" name=\"decision\" value=\"denied\">\
             <button type=\"submit\" class=\"deny\">Deny</button></form>\
             </div></article>",
            tool = escape(&r.request.tool),
            server = escape(&r.request.server),
            agent = escape(&r.request.agent),
            left = time_left(r.request.expires_at_unix - now),
            digest = escape(&r.request.subject_digest),
            args = escape(&pretty(&r.request.arguments)),
        );
    }
    body.push_str("<h2>History</h2>");
    if history.is_empty() {
        body.push_str("<p class=\"empty\">No decisions yet.</p>");
    } else {
        body.push_str("<ul class=\"history\">");
    }
    for r in history {
        let (class, word, by) = match (&r.decision, &r.decided_by) {
            (Some(d), Some(by)) => (d.as_str(), d.as_str(), format!("by {}", escape(by))),
            _ => ("expired", "expired", "nobody decided".to_owned()),
        };
        let at = r.decided_at.unwrap_or(r.request.expires_at_unix);
        let (v2_rows, votes) = version2_parts(r, viewer.key);
        let _ = write!(
            body,
            "<li class=\"{class}\" id=\"hist-{id}\"><span class=\"badge\">{word}</span> \
             <b>{tool}</b> on {server} for {agent}, {by}, {at}\
             <details><summary>Details</summary><dl><dt>Request</dt><dd><code>{id}</code></dd>\
             <dt>Subject digest</dt><dd><code class=\"digest\">{digest}</code></dd>{v2_rows}</dl>\
             <pre class=\"args\">{args}</pre>{votes}</details></li>",
            id = escape(&r.request.request_id),
            tool = escape(&r.request.tool),
            server = escape(&r.request.server),
            agent = escape(&r.request.agent),
            at = when(at),
            digest = escape(&r.request.subject_digest),
            args = escape(&pretty(&r.request.arguments)),
        );
    }
    if !history.is_empty() {
        body.push_str("</ul>");
    }
    body.push_str("</main>");
    page("Requests", true, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            escape(r#"<script>alert("x")&'</script>"#),
            "&lt;script&gt;alert(&quot;x&quot;)&amp;&#39;&lt;/script&gt;"
        );
        assert_eq!(time_left(252), "4 min 12 s");
        assert_eq!(time_left(-3), "0 s");
    }
}
