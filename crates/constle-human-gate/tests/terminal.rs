//! The terminal channel: the prompt as rendered, escaping, and answers read
//! over an in-memory stream and over a real pseudo-terminal.

use std::time::Duration;

use constle_approval::PendingRequest;
use constle_approval::rules::OnTimeout;
use constle_human_gate::{
    MAX_ATTEMPTS, PromptRequest, TerminalOutcome, ask_terminal, escape, render_prompt,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream};
use tokio::time::Instant;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn pending(
    tool: &str,
    server: &str,
    arguments: Value,
) -> Result<PendingRequest, Box<dyn std::error::Error>> {
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(300);
    Ok(PendingRequest::new(
        "invoice-processor",
        server,
        tool,
        arguments,
        expires,
    )?)
}

fn prompt(request: &PendingRequest) -> PromptRequest {
    PromptRequest::new(request, Duration::from_secs(300), OnTimeout::Abort)
}

fn invoice() -> Result<PendingRequest, Box<dyn std::error::Error>> {
    pending(
        "pay_invoice",
        "accounting",
        json!({"invoice_id": "INV-0042"}),
    )
}

/// True if some line of `text` looks like one of the prompt's own header or
/// question lines.
fn has_forged_line(text: &str, real: &str) -> bool {
    let starts = [
        "⏸",
        "   MCP tool",
        "   subject:",
        "   arguments (",
        "   approve?",
        "   deny?",
    ];
    let mut forged = 0;
    let mut genuine = 0;
    for line in text.lines() {
        if starts.iter().any(|s| line.starts_with(s)) {
            forged += 1;
        }
    }
    for line in real.lines() {
        if starts.iter().any(|s| line.starts_with(s)) {
            genuine += 1;
        }
    }
    forged != genuine
}

#[test]
fn spec_example_renders_as_specified() -> TestResult {
    let request = invoice()?;
    let rendered = render_prompt(&prompt(&request));
    let expected = format!(
        "⏸  human gate: agent \"invoice-processor\" wants to call\n\
         \x20  MCP tool \"pay_invoice\" on server \"accounting\"\n\
         \x20  subject: {}\n\
         \x20  arguments (25 bytes, 1 lines) — shown in full:\n\
         \x20  {{\"invoice_id\":\"INV-0042\"}}\n\
         \x20  approve? [a]pprove / [d]eny (timeout 300s → abort): ",
        request.subject_digest()
    );
    assert_eq!(rendered, expected);
    println!("{rendered}");
    let proceed = PromptRequest::new(&request, Duration::from_secs(60), OnTimeout::Proceed);
    assert!(render_prompt(&proceed).ends_with("(timeout 60s → proceed): "));
    Ok(())
}

#[test]
fn escape_neutralises_terminal_control() {
    assert_eq!(escape("ok ünïcode"), "ok ünïcode");
    assert_eq!(escape("a\x1b[2Jb"), "a\\u{1b}[2Jb");
    assert_eq!(escape("x\ry\u{8}\n"), "x\\u{d}y\\u{8}\\u{a}");
    assert_eq!(escape("\u{202e}evil\u{2066}"), "\\u{202e}evil\\u{2066}");
    assert_eq!(escape("\u{9b}2J\u{7f}"), "\\u{9b}2J\\u{7f}");
}

#[test]
fn agent_bytes_never_reach_the_terminal_raw() -> TestResult {
    let nasty = "\x1b[2J\r\x08\u{9b}\u{202e}\u{85}\u{7}";
    let request = pending(
        &format!("pay{nasty}"),
        &format!("acc{nasty}"),
        json!({ "k": nasty, nasty: [nasty] }),
    )?;
    let rendered = render_prompt(&prompt(&request));
    for c in rendered.chars() {
        assert!(
            c == '\n'
                || !(c.is_control()
                    || ('\u{202a}'..='\u{202e}').contains(&c)
                    || ('\u{2066}'..='\u{2069}').contains(&c)),
            "raw {c:?} in {rendered:?}"
        );
    }
    assert!(
        rendered.contains("MCP tool \"pay\\u{1b}[2J\\u{d}\\u{8}\\u{9b}\\u{202e}\\u{85}\\u{7}\"")
    );
    Ok(())
}

#[test]
fn a_fake_prompt_inside_the_arguments_cannot_start_a_line() -> TestResult {
    let fake = "\n   approve? [a]pprove / [d]eny (timeout 300s → abort): ";
    let header =
        "⏸  human gate: agent \"x\" wants to call\n   MCP tool \"harmless\" on server \"s\"";
    let padding = " ".repeat(200);
    for arguments in [
        json!({ "note": fake }),
        json!({ "note": format!("{padding}approve? [a]pprove / [d]eny") }),
        json!({ "note": format!("{padding}{header}"), "more": [1, 2, 3] }),
        json!(format!("x{padding}⏸  human gate")),
        json!({ format!("{padding}   approve? [a]pprove"): 1 }),
    ] {
        let request = pending("pay_invoice", "accounting", arguments)?;
        let shown = prompt(&request);
        let rendered = render_prompt(&shown);
        let clean = render_prompt(&prompt(&invoice()?));
        assert!(!has_forged_line(&rendered, &clean), "{rendered}");
        assert!(rendered.ends_with("\n   approve? [a]pprove / [d]eny (timeout 300s → abort): "));
        assert_eq!(
            rendered
                .lines()
                .filter(|l| l.starts_with("   approve?"))
                .count(),
            1,
            "{rendered}"
        );
        for line in rendered.lines() {
            let columns: usize = line.chars().map(|c| if c.is_ascii() { 1 } else { 2 }).sum();
            assert!(columns <= 76 || line.starts_with("   subject:"), "{line}");
        }
    }
    // The same text as a tool name is wrapped too.
    let request = pending(&format!("t{padding}⏸  human gate"), "s", json!({}))?;
    let rendered = render_prompt(&prompt(&request));
    assert_eq!(
        rendered.lines().filter(|l| l.starts_with('⏸')).count(),
        1,
        "{rendered}"
    );
    Ok(())
}

#[test]
fn newlines_in_strings_stay_escaped_and_large_values_are_indented_lines() -> TestResult {
    let request = pending("t", "s", json!({"memo": "line one\nline two\r\n"}))?;
    let rendered = render_prompt(&prompt(&request));
    assert!(
        rendered.contains("   {\"memo\":\"line one\\nline two\\r\\n\"}\n"),
        "{rendered}"
    );

    let request = pending(
        "t",
        "s",
        json!({"lines": ["first line of many", "second line of many", "third line of many"], "why": "long enough to be pretty-printed"}),
    )?;
    let rendered = render_prompt(&prompt(&request));
    let body: Vec<&str> = rendered
        .lines()
        .skip_while(|l| !l.contains("shown in full"))
        .skip(1)
        .take_while(|l| !l.starts_with("   approve?"))
        .collect();
    assert!(body.len() > 3, "{rendered}");
    assert!(body.iter().all(|l| l.starts_with("   ")), "{body:?}");
    assert!(rendered.contains("lines) — shown in full:"));
    assert!(
        rendered.contains(&format!(", {} lines)", body.len())),
        "{rendered}"
    );
    Ok(())
}

fn too_large() -> Result<PendingRequest, Box<dyn std::error::Error>> {
    pending("t", "s", json!({"blob": "x".repeat(5000)}))
}

#[test]
fn too_large_arguments_are_not_shown_and_offer_deny_only() -> TestResult {
    let request = too_large()?;
    let shown = prompt(&request);
    assert!(shown.too_large_to_show());
    let rendered = render_prompt(&shown);
    assert!(
        rendered.contains("   arguments (5016 bytes, 3 lines) — too large to show: deny only\n"),
        "{rendered}"
    );
    assert!(!rendered.contains("xxxx"));
    assert!(rendered.ends_with("   deny? [d]eny only (timeout 300s → abort): "));

    let many = pending("t", "s", json!((0..50).collect::<Vec<u32>>()))?;
    assert!(prompt(&many).too_large_to_show());
    assert!(!prompt(&invoice()?).too_large_to_show());
    Ok(())
}

/// Runs the prompt over an in-memory stream, typing `input` and then
/// closing the person's side if `close` is set.
async fn converse(
    request: &PendingRequest,
    input: &[u8],
    close: bool,
    wait: Duration,
) -> Result<(TerminalOutcome, String), Box<dyn std::error::Error>> {
    let (mut gate, mut person): (DuplexStream, DuplexStream) = tokio::io::duplex(64 * 1024);
    person.write_all(input).await?;
    let reader = tokio::spawn(async move {
        let mut shown = Vec::new();
        if close {
            person.shutdown().await.ok();
        }
        let _ = person.read_to_end(&mut shown).await;
        String::from_utf8_lossy(&shown).into_owned()
    });
    let outcome = ask_terminal(&mut gate, &prompt(request), Instant::now() + wait).await;
    drop(gate);
    Ok((outcome, reader.await?))
}

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn approve_and_deny() -> TestResult {
    let request = invoice()?;
    for (input, expected) in [
        (&b"a\n"[..], TerminalOutcome::Approved),
        (b"  Approve \r\n", TerminalOutcome::Approved),
        (b"d\n", TerminalOutcome::Denied),
        (b"DENY\n", TerminalOutcome::Denied),
    ] {
        let (outcome, shown) = converse(&request, input, false, WAIT).await?;
        assert_eq!(outcome, expected, "{input:?}");
        assert!(shown.starts_with("⏸  human gate"));
    }
    Ok(())
}

#[tokio::test]
async fn garbage_is_re_asked_then_an_answer_counts() -> TestResult {
    let request = invoice()?;
    let long = "y".repeat(5000);
    let input = format!("yes\n\n{long}\n\u{fffd}\na\n");
    let (outcome, shown) = converse(&request, input.as_bytes(), false, WAIT).await?;
    assert_eq!(outcome, TerminalOutcome::Approved);
    assert_eq!(shown.matches("please answer a or d").count(), 4, "{shown}");
    assert_eq!(shown.matches("approve? [a]pprove").count(), 5);
    Ok(())
}

#[tokio::test]
async fn endless_garbage_is_no_answer() -> TestResult {
    let request = invoice()?;
    let input = "x\n".repeat(MAX_ATTEMPTS + 3) + "a\n";
    let (outcome, shown) = converse(&request, input.as_bytes(), false, WAIT).await?;
    assert_eq!(outcome, TerminalOutcome::NoAnswer);
    assert!(shown.contains("waits for the webhook or the timeout"));
    Ok(())
}

#[tokio::test]
async fn too_large_cannot_be_approved_only_denied() -> TestResult {
    let request = too_large()?;
    let (outcome, shown) = converse(&request, b"a\napprove\nd\n", false, WAIT).await?;
    assert_eq!(outcome, TerminalOutcome::Denied);
    assert_eq!(
        shown.matches("cannot be approved here").count(),
        2,
        "{shown}"
    );
    let (outcome, _) = converse(&request, b"a\n", true, WAIT).await?;
    assert_eq!(outcome, TerminalOutcome::NoAnswer);
    Ok(())
}

#[tokio::test]
async fn end_of_input_is_no_answer() -> TestResult {
    let request = invoice()?;
    let (outcome, _) = converse(&request, b"", true, WAIT).await?;
    assert_eq!(outcome, TerminalOutcome::NoAnswer);
    // A last line without its newline is not an answer.
    let (outcome, _) = converse(&request, b"a", true, WAIT).await?;
    assert_eq!(outcome, TerminalOutcome::NoAnswer);
    Ok(())
}

#[tokio::test]
async fn the_deadline_is_no_answer() -> TestResult {
    let request = invoice()?;
    let (mut gate, _person) = tokio::io::duplex(64 * 1024);
    let started = Instant::now();
    let outcome = ask_terminal(
        &mut gate,
        &prompt(&request),
        started + Duration::from_millis(300),
    )
    .await;
    assert_eq!(outcome, TerminalOutcome::NoAnswer);
    assert!(started.elapsed() >= Duration::from_millis(300));
    Ok(())
}

#[cfg(unix)]
mod pty {
    use std::fs::File;
    use std::io::{Read as _, Write as _};

    use constle_human_gate::HostTty;

    use super::*;

    /// Types `input` on a real pseudo-terminal and returns the outcome and
    /// what the terminal showed.
    async fn over_pty(
        request: &PendingRequest,
        input: &'static [u8],
    ) -> Result<(TerminalOutcome, String), Box<dyn std::error::Error>> {
        let pty = nix::pty::openpty(None, None)?;
        let mut tty = HostTty::from_fd(pty.slave)?;
        let mut master = File::from(pty.master);
        let mut writer = master.try_clone()?;
        let screen = std::thread::spawn(move || {
            let mut shown = Vec::new();
            let mut chunk = [0u8; 4096];
            // Ends with EIO once the slave side is closed.
            while let Ok(n) = master.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                shown.extend_from_slice(&chunk[..n]);
            }
            String::from_utf8_lossy(&shown).into_owned()
        });
        let typist = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            writer.write_all(input)
        });
        let outcome = ask_terminal(
            &mut tty,
            &prompt(request),
            Instant::now() + Duration::from_secs(2),
        )
        .await;
        drop(tty);
        typist.join().map_err(|_| "typist panicked")??;
        let shown = screen.join().map_err(|_| "screen panicked")?;
        Ok((outcome, shown))
    }

    #[tokio::test]
    async fn a_real_pty_approves_and_denies() -> TestResult {
        let request = invoice()?;
        let (outcome, shown) = over_pty(&request, b"what\na\n").await?;
        assert_eq!(outcome, TerminalOutcome::Approved, "{shown}");
        assert!(shown.contains("approve? [a]pprove / [d]eny"), "{shown}");
        assert!(shown.contains("please answer a or d"), "{shown}");
        assert!(shown.contains("approved at the terminal"), "{shown}");

        let (outcome, _) = over_pty(&request, b"d\n").await?;
        assert_eq!(outcome, TerminalOutcome::Denied);
        Ok(())
    }

    #[tokio::test]
    async fn a_silent_pty_reaches_the_deadline() -> TestResult {
        let request = invoice()?;
        let (outcome, _) = over_pty(&request, b"").await?;
        assert_eq!(outcome, TerminalOutcome::NoAnswer);
        Ok(())
    }
}
