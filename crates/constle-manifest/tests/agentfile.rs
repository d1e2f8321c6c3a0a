//! Agentfile parsing and validation, end to end through the public API.

// Test helpers outside `#[test]` functions panic on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use constle_manifest::{
    Egress, GateMatch, Limits, LlmApi, ModelPrices, OnTimeout, QuorumSource, Rejected, Severity,
    Validated, load_file, parse_str,
};
use rust_decimal::Decimal;

const DID_A: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
const DID_B: &str = "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp";

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(src: &str) -> Result<Validated, Rejected> {
    parse_str(src, Path::new("agent.yaml"), &no_env)
}

#[track_caller]
fn ok(src: &str) -> Validated {
    match parse(src) {
        Ok(v) => v,
        Err(r) => panic!("rejected:\n{r}\n--- source ---\n{src}"),
    }
}

#[track_caller]
fn rejected(src: &str) -> Rejected {
    match parse(src) {
        Ok(v) => panic!("accepted: {:?}\n--- source ---\n{src}", v.manifest),
        Err(r) => {
            assert!(!r.errors.is_empty());
            for e in &r.errors {
                assert_eq!(e.severity, Severity::Error);
                assert!(e.location.is_some(), "error without location: {e}");
                assert!(e.help.is_some(), "error without help: {e}");
            }
            r
        }
    }
}

/// (code, line, column) of every error.
#[track_caller]
fn errors(src: &str) -> Vec<(&'static str, usize, usize)> {
    rejected(src)
        .errors
        .iter()
        .map(|d| {
            let l = d.location.as_ref().unwrap();
            (d.code, l.line, l.column)
        })
        .collect()
}

fn codes(diags: &[constle_manifest::Diagnostic]) -> Vec<&'static str> {
    diags.iter().map(|d| d.code).collect()
}

fn at(diags: &[constle_manifest::Diagnostic]) -> Vec<(&'static str, usize, usize)> {
    diags
        .iter()
        .map(|d| {
            let l = d.location.as_ref().expect("located");
            (d.code, l.line, l.column)
        })
        .collect()
}

const MIN: &str = "name: a\nsandbox:\n  command: [x]\n";

fn with(extra: &str) -> String {
    format!("{MIN}{extra}")
}

// ---------------------------------------------------------------- the docs

/// The first ```yaml block of docs/agentfile.md.
fn doc_example() -> String {
    let doc = include_str!("../../../docs/agentfile.md");
    let start = doc.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let end = start + doc[start..].find("\n```").expect("closed");
    doc[start..end].to_string()
}

#[test]
fn docs_full_example_parses_cleanly() {
    let example = doc_example();
    let env = |name: &str| match name {
        "HUMAN_GATE_WEBHOOK_URL" => Some("https://approvals.example.com/gates".to_string()),
        "ACCOUNTING_MCP_TOKEN" => Some("t0ken".to_string()),
        "GH_PAT" => Some("ghp_example".to_string()),
        "ANTHROPIC_API_KEY" => Some("sk-ant-example".to_string()),
        _ => None,
    };
    let v = match parse_str(&example, Path::new("/srv/agents/agent.yaml"), &env) {
        Ok(v) => v,
        Err(r) => panic!("{r}"),
    };
    assert_eq!(codes(&v.warnings), Vec::<&str>::new());
    let m = v.manifest;
    assert_eq!(m.name.as_str(), "invoice-processor");
    assert_eq!(m.did().unwrap().to_string(), DID_A);
    assert_eq!(m.base_dir, Path::new("/srv/agents"));
    assert_eq!(
        m.sandbox.command,
        ["python", "agent.py", "--queue", "inbox"]
    );
    assert_eq!(m.sandbox.workdir, Path::new("/srv/agents/./work"));
    assert_eq!(
        m.sandbox.rootfs.as_deref(),
        Some(Path::new("/srv/agents/./rootfs"))
    );
    assert_eq!(m.sandbox.env.get("RETRIES").map(String::as_str), Some("3"));
    assert_eq!(m.sandbox.network.egress, Egress::Restricted);
    assert!(m.sandbox.network.allows("api.groq.com"));
    assert_eq!(
        m.sandbox.limits,
        Limits {
            memory_bytes: Some(2 << 30),
            pids: Some(256),
            cpu_millis: Some(1500),
            wall_clock_seconds: Some(3600),
        }
    );
    assert_eq!(
        m.sandbox.home.as_deref(),
        Some(Path::new("/srv/agents/./agent-home"))
    );
    assert_eq!(m.mcp.servers.len(), 3);
    assert!(m.mcp.server("git").unwrap().url().is_none());
    let accounting = m.mcp.server("accounting").unwrap();
    assert_eq!(accounting.env_var(), "CONSTLE_MCP_ACCOUNTING_URL");
    assert_eq!(
        accounting.price_of("pay_invoice"),
        Some(Decimal::new(25, 2))
    );
    assert_eq!(
        accounting.price_of("list_invoices"),
        Some(Decimal::new(1, 2))
    );
    let local = m.mcp.server("local-search").unwrap();
    assert_eq!(local.env_var(), "CONSTLE_MCP_LOCAL_SEARCH_URL");
    assert_eq!(local.allow_methods, ["resources/read"]);
    assert!(accounting.allow_methods.is_empty());
    let header = &accounting.headers()[0];
    assert_eq!(header.value(&env).unwrap(), "Bearer t0ken");
    assert!(local.headers().is_empty());
    let gated: Vec<_> = m
        .gated_tools()
        .iter()
        .map(|g| (g.server.id.as_str(), g.tool.as_str()))
        .collect();
    assert_eq!(gated, [("accounting", "pay_invoice")]);
    assert_eq!(
        m.human_gates.approver_pubkey.as_ref().unwrap().to_string(),
        DID_B
    );
    assert_eq!(m.human_gates.approval_timeout(), Duration::from_secs(300));
    assert_eq!(m.human_gates.on_timeout, OnTimeout::Abort);
    assert_eq!(m.spending.max_per_run_usd, Some(Decimal::new(500, 2)));
    assert_eq!(m.spending.max_per_day_usd, Some(Decimal::new(2000, 2)));
    assert_eq!(m.spending.max_per_month_usd, Some(Decimal::new(300, 0)));
    let anthropic = m.llm.provider("anthropic").unwrap();
    assert_eq!(anthropic.env_var(), "CONSTLE_LLM_ANTHROPIC_URL");
    assert_eq!(anthropic.api, LlmApi::Anthropic);
    assert_eq!(anthropic.url.as_str(), "https://api.anthropic.com");
    assert_eq!(anthropic.key(&env).unwrap(), "sk-ant-example");
    assert_eq!(anthropic.max_output_tokens, 16000);
    let sonnet = anthropic.model("claude-sonnet-4-5").unwrap();
    assert_eq!(
        sonnet.prices,
        ModelPrices {
            input: Decimal::new(300, 2),
            output: Decimal::new(1500, 2),
            cached_input: Decimal::new(30, 2),
            cache_write: Decimal::new(375, 2),
        }
    );
    assert_eq!(m.llm.spending.max_per_run_usd, Some(Decimal::new(200, 2)));
    assert_eq!(m.llm.spending.max_per_day_usd, Some(Decimal::new(1000, 2)));
    assert_eq!(
        m.llm.spending.max_per_month_usd,
        Some(Decimal::new(10000, 2))
    );
    let a2a = m.a2a.unwrap();
    assert_eq!(a2a.listen.unwrap().to_string(), "127.0.0.1:7400");
    assert_eq!(a2a.peers.len(), 1);

    // Without the host variables the example still validates, with warnings.
    let v = parse_str(&example, Path::new("agent.yaml"), &no_env).unwrap();
    assert_eq!(
        codes(&v.warnings),
        [
            "header_secret_unset",
            "env_secret_ref_unset",
            "header_secret_unset",
            "webhook_url_unset"
        ]
    );
}

/// Every code is documented in the table for its severity. (Sink checks in
/// debug builds that every code emitted is in `CODES`.)
#[test]
fn docs_list_every_code() {
    let doc = include_str!("../../../docs/agentfile.md");
    let errors = &doc[doc.find("### Errors").unwrap()..doc.find("### Warnings").unwrap()];
    let warnings = &doc[doc.find("### Warnings").unwrap()..];
    for (code, severity) in constle_manifest::CODES {
        let table = match severity {
            Severity::Error => errors,
            Severity::Warning => warnings,
        };
        assert!(
            table.contains(&format!("| `{code}` |")),
            "{code} is not documented"
        );
    }
    let mut seen = std::collections::HashSet::new();
    assert!(constle_manifest::CODES.iter().all(|(c, _)| seen.insert(c)));
}

#[test]
fn a_sandbox_directory_may_not_hold_the_agentfile() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.yaml");
    let check = |sandbox: &str| {
        let src = format!("name: a\nsandbox:\n  command: [x]\n{sandbox}");
        std::fs::write(&file, &src).unwrap();
        match constle_manifest::load_file(&file, &|_| None) {
            Ok(_) => Vec::new(),
            Err(r) => at(&r.errors),
        }
    };
    assert_eq!(check(""), []);
    assert_eq!(check("  workdir: ./work\n"), []);
    assert_eq!(
        check("  workdir: .\n"),
        [("workdir_holds_agentfile", 4, 12)]
    );
    assert_eq!(
        check("  workdir: ./\n"),
        [("workdir_holds_agentfile", 4, 12)]
    );
    let parent = format!("  workdir: {}\n", dir.path().parent().unwrap().display());
    assert_eq!(check(&parent), [("workdir_holds_agentfile", 4, 12)]);
    // through a link, and upwards with `..` (resolved on the real paths)
    std::os::unix::fs::symlink(dir.path(), dir.path().join("link")).unwrap();
    std::fs::create_dir(dir.path().join("work")).unwrap();
    assert_eq!(
        check("  workdir: ./link\n"),
        [("workdir_holds_agentfile", 4, 12)]
    );
    assert_eq!(
        check("  workdir: ./work/..\n"),
        [("workdir_holds_agentfile", 4, 12)]
    );
    assert_eq!(check("  rootfs: .\n"), [("rootfs_holds_agentfile", 4, 11)]);
    let help = match constle_manifest::load_file(&file, &|_| None) {
        Err(r) => r.errors[0].help.clone().unwrap(),
        Ok(_) => panic!("accepted"),
    };
    assert!(help.contains("rootfs: ./rootfs"), "{help}");
    std::fs::write(&file, "name: a\nsandbox:\n  command: [x]\n  workdir: .\n").unwrap();
    let err = constle_manifest::load_file(&file, &|_| None).unwrap_err();
    assert!(
        err.errors[0]
            .help
            .as_deref()
            .unwrap()
            .contains("workdir: ./work")
    );
}

#[test]
fn minimal_agentfile_gets_defaults() {
    let v = ok(MIN);
    assert!(v.warnings.is_empty());
    let m = v.manifest;
    assert_eq!(m.sandbox.workdir, m.base_dir.join("work"));
    assert!(m.sandbox.env.is_empty());
    assert_eq!(m.sandbox.network.egress, Egress::Restricted);
    assert!(m.sandbox.network.allowed_hosts.is_empty());
    assert!(m.mcp.servers.is_empty());
    assert!(!m.human_gates.enabled);
    assert_eq!(m.human_gates.approval_timeout_seconds, 300);
    assert_eq!(m.human_gates.on_timeout, OnTimeout::Abort);
    assert!(!m.spending.has_caps());
    assert!(m.identity.is_none() && m.a2a.is_none());
}

// ------------------------------------------------------- shape of the YAML

#[test]
fn unknown_field_is_located_with_did_you_mean() {
    let src = "name: a\nsandbox:\n  command: [x]\n  network:\n    alowed_hosts: [api.groq.com]\n";
    let r = rejected(src);
    assert_eq!(at(&r.errors), [("unknown_field", 5, 5)]);
    assert_eq!(
        r.errors[0].to_string(),
        "agent.yaml:5:5: error[unknown_field]: unknown field `alowed_hosts` in sandbox.network\n  help: did you mean `allowed_hosts`? valid fields: allowed_hosts, egress"
    );
}

#[test]
fn unknown_top_level_field() {
    let r = rejected(&with("humangates: {}\n"));
    assert_eq!(at(&r.errors), [("unknown_field", 4, 1)]);
    assert!(r.errors[0].message.contains("at the top level"));
    assert!(
        r.errors[0]
            .help
            .as_ref()
            .unwrap()
            .contains("did you mean `human_gates`?")
    );
}

#[test]
fn many_errors_in_one_pass() {
    let src = "\
name: a/b
sandbox:
  command: python agent.py
  env:
    HTTPS_PROXY: x
  network:
    egress: closed
    allowed_hosts: [1.1.1.1, API.example.com]
mcp:
  servers:
    - id: acc
      url: http://mcp.example.com/
      tools: [a]
      bogus: 1
human_gates:
  enabled: yes
  approval_timeout_seconds: 0443
spending:
  max_per_run_usd: -5
";
    assert_eq!(
        errors(src),
        [
            ("invalid_name", 1, 7),
            ("invalid_type", 3, 12),
            ("reserved_env_name", 5, 5),
            ("unknown_variant", 7, 13),
            ("invalid_hostname", 8, 21),
            ("invalid_hostname", 8, 30),
            ("insecure_url", 12, 12),
            ("unknown_field", 14, 7),
            ("invalid_bool", 16, 12),
            ("invalid_integer", 17, 29),
            ("invalid_amount", 19, 20),
        ]
    );
}

#[test]
fn duplicate_keys_are_errors() {
    let r = rejected("name: a\nsandbox:\n  command: [x]\n  command: [y]\nname: b\n");
    assert_eq!(
        at(&r.errors),
        [("duplicate_key", 4, 3), ("duplicate_key", 5, 1)]
    );
    assert!(r.errors[0].help.as_ref().unwrap().contains("line 3"));
    // Quoting does not make a key different.
    assert_eq!(errors(&with("\"name\": b\n")), [("duplicate_key", 4, 1)]);
}

#[test]
fn anchors_aliases_merge_keys_and_tags_are_refused() {
    assert_eq!(
        errors("name: &n a\nsandbox:\n  command: [*n]\n"),
        [("anchor_not_allowed", 1, 7), ("alias_not_allowed", 3, 13)]
    );
    assert_eq!(
        errors("name: a\nsandbox:\n  <<: {command: [x]}\n  command: [x]\n"),
        [("merge_key_not_allowed", 3, 3)]
    );
    assert_eq!(
        errors("name: !!str a\nsandbox:\n  command: [x]\n"),
        [("tag_not_allowed", 1, 7)]
    );
    assert_eq!(
        errors("name: a\nsandbox: !foo\n  command: [x]\n"),
        [("tag_not_allowed", 2, 10)]
    );
    assert_eq!(
        errors(&with("mcp: !!map {}\n")),
        [("tag_not_allowed", 4, 6)]
    );
    assert_eq!(
        errors("name: a\nsandbox:\n  command: [*nowhere]\n"),
        [("alias_not_allowed", 3, 13)]
    );
    assert_eq!(
        errors(&format!("%YAML 1.2\n---\n{MIN}")),
        [("directive_not_allowed", 1, 1)]
    );
    assert_eq!(errors(&with("? [a, b]\n: c\n")), [("invalid_key", 4, 3)]);
}

#[test]
fn multiple_documents_are_refused() {
    assert_eq!(
        errors(&format!("{MIN}---\nname: b\n")),
        [("multiple_documents", 4, 1)]
    );
    assert_eq!(
        errors(&format!("---\n{MIN}---\n")),
        [("multiple_documents", 5, 1)]
    );
    // One explicit document is fine.
    ok(&format!("---\n{MIN}...\n"));
}

#[test]
fn billion_laughs_fails_fast() {
    let mut src = String::from(
        "a0: &a0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n",
    );
    for i in 1..10 {
        let p = i - 1;
        src.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let start = Instant::now();
    let r = rejected(&src);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}",
        start.elapsed()
    );
    assert!(codes(&r.errors).contains(&"anchor_not_allowed"));
    assert!(codes(&r.errors).contains(&"alias_not_allowed"));
    assert!(r.errors.len() <= 101);

    // A wide alias fan-out is cut off by the error cap.
    let mut wide = String::from("a: &a x\nb: [");
    for _ in 0..100_000 {
        wide.push_str("*a,");
    }
    wide.push_str("]\n");
    let start = Instant::now();
    let r = rejected(&wide);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(r.errors.len(), 101);
    assert_eq!(r.errors.last().unwrap().code, "too_many_errors");
}

#[test]
fn size_and_depth_are_bounded() {
    let big = format!("{MIN}# {}\n", "x".repeat(constle_manifest::MAX_INPUT_BYTES));
    assert_eq!(errors(&big), [("input_too_large", 1, 1)]);

    let deep = format!("{MIN}mcp: {}{}\n", "{a: ".repeat(40), "}".repeat(40));
    let r = rejected(&deep);
    assert_eq!(codes(&r.errors), ["nesting_too_deep"]);

    let many = format!("{MIN}extra: [{}]\n", "1,".repeat(60_000));
    assert_eq!(codes(&rejected(&many).errors), ["too_many_nodes"]);
}

#[test]
fn syntax_errors_are_located() {
    let r = rejected("name: a\nsandbox:\n  command: [x\n");
    assert_eq!(codes(&r.errors), ["yaml_syntax"]);
    assert!(r.errors[0].location.as_ref().unwrap().line >= 3);
    assert_eq!(errors(""), [("empty_document", 1, 1)]);
    assert_eq!(errors("# only a comment\n"), [("empty_document", 1, 1)]);
    assert_eq!(errors("~\n"), [("empty_document", 1, 1)]);
    assert_eq!(errors("- a\n- b\n"), [("invalid_type", 1, 1)]);
    assert_eq!(errors("just text\n"), [("invalid_type", 1, 1)]);
}

#[test]
fn missing_required_fields() {
    let r = rejected("identity: {did: x}\n");
    let got = at(&r.errors);
    assert!(got.contains(&("missing_field", 1, 1)), "{got:?}");
    assert_eq!(
        codes(&r.errors)
            .iter()
            .filter(|c| **c == "missing_field")
            .count(),
        2
    );
    assert!(r.errors.iter().any(|e| e.message.contains("`name`")));
    assert!(r.errors.iter().any(|e| e.message.contains("`sandbox`")));

    assert_eq!(
        errors("name: a\nsandbox:\n  workdir: .\n"),
        [("missing_field", 2, 1)]
    );
    assert_eq!(
        errors(&with("mcp:\n  servers:\n    - id: s\n      tools: [t]\n")),
        [("missing_field", 6, 7)]
    );
}

#[test]
fn null_is_never_absent() {
    // A required string given null is an error, not the text "~".
    assert_eq!(
        errors("name: ~\nsandbox:\n  command: [x]\n"),
        [("invalid_type", 1, 7)]
    );
    assert_eq!(
        errors("name:\nsandbox:\n  command: [x]\n"),
        [("invalid_type", 1, 1)]
    );
    let r = rejected("name: null\nsandbox:\n  command: [x]\n");
    assert!(r.errors[0].help.as_ref().unwrap().contains("\"null\""));
    // Sections and lists too.
    assert_eq!(errors(&with("human_gates:\n")), [("invalid_type", 4, 1)]);
    assert_eq!(
        errors(&with("mcp:\n  servers: ~\n")),
        [("invalid_type", 5, 12)]
    );
    assert_eq!(
        errors(&with("spending:\n  max_per_run_usd:\n")),
        [("invalid_type", 5, 3)]
    );
    assert_eq!(
        errors(&with("  env:\n    LOG: ~\n")),
        [("invalid_type", 5, 10)]
    );
    // Quoted, the same spellings are text.
    let v = ok("name: a\nsandbox:\n  command: [\"~\", \"null\", \"\"]\n");
    assert_eq!(v.manifest.sandbox.command, ["~", "null", ""]);
}

// ------------------------------------------------------ values keep types

#[test]
fn strings_keep_their_exact_text() {
    let tricky = [
        "no", "yes", "on", "off", "0443", "1:30", "0x1F", "1e3", "true", "12.50", "-0", ".inf",
        "0o17",
    ];
    let mut src = String::from(MIN);
    src.push_str("  env:\n");
    for (i, t) in tricky.iter().enumerate() {
        src.push_str(&format!("    V{i}: {t}\n"));
    }
    src.push_str("mcp:\n  servers:\n    - id: s\n      url: https://m.example.com\n      tools: [");
    src.push_str(&tricky.join(", "));
    src.push_str("]\n");
    let m = ok(&src).manifest;
    for (i, t) in tricky.iter().enumerate() {
        assert_eq!(
            m.sandbox
                .env
                .get(format!("V{i}").as_str())
                .map(String::as_str),
            Some(*t)
        );
    }
    let tools: Vec<&str> = m.mcp.servers[0].tools.iter().map(|t| t.as_str()).collect();
    assert_eq!(tools, tricky);
    // The name too.
    assert_eq!(
        ok("name: 0443\nsandbox:\n  command: [x]\n")
            .manifest
            .name
            .as_str(),
        "0443"
    );
    assert_eq!(
        ok("name: 1e3\nsandbox:\n  command: [yes, no, 0x1F]\n")
            .manifest
            .sandbox
            .command,
        ["yes", "no", "0x1F"]
    );
}

#[test]
fn bools_are_true_or_false_only() {
    for ok_value in ["true", "false"] {
        let v = ok(&with(&format!("human_gates:\n  enabled: {ok_value}\n")));
        assert_eq!(v.manifest.human_gates.enabled, ok_value == "true");
    }
    for bad in [
        "yes", "no", "on", "off", "y", "True", "FALSE", "1", "0", "\"true\"", "'false'", "[]",
    ] {
        let r = rejected(&with(&format!("human_gates:\n  enabled: {bad}\n")));
        assert_eq!(at(&r.errors), [("invalid_bool", 5, 12)], "{bad}");
        assert!(
            r.errors[0]
                .help
                .as_ref()
                .unwrap()
                .contains("write true or false"),
            "{bad}"
        );
    }
}

#[test]
fn integers_are_plain_decimal() {
    let v = ok(&with("human_gates:\n  approval_timeout_seconds: 90\n"));
    assert_eq!(v.manifest.human_gates.approval_timeout_seconds, 90);
    for (bad, hint) in [
        ("0443", "write 443"),
        ("1:30", "would be 90"),
        ("300.0", "300"),
        ("\"300\"", "without quotes: 300"),
        ("'300'", "without quotes"),
        ("0x12C", "decimal"),
        ("3e2", "decimal"),
        ("+300", "decimal"),
        ("-1", "decimal"),
        ("five", "decimal"),
        ("[300]", "whole number"),
    ] {
        let r = rejected(&with(&format!(
            "human_gates:\n  approval_timeout_seconds: {bad}\n"
        )));
        assert_eq!(at(&r.errors), [("invalid_integer", 5, 29)], "{bad}");
        let help = r.errors[0].help.clone().unwrap();
        assert!(help.contains(hint), "{bad}: {help}");
    }
    for bad in ["0", "86401", "99999999999999999999999"] {
        let r = rejected(&with(&format!(
            "human_gates:\n  approval_timeout_seconds: {bad}\n"
        )));
        assert_eq!(at(&r.errors), [("out_of_range", 5, 29)], "{bad}");
    }
    ok(&with("human_gates:\n  approval_timeout_seconds: 86400\n"));
    ok(&with("human_gates:\n  approval_timeout_seconds: 1\n"));
}

#[test]
fn amounts_are_exact_decimals() {
    let v = ok(&with(
        "spending:\n  max_per_run_usd: 0.1\n  max_per_day_usd: \"0.2\"\n",
    ));
    let s = v.manifest.spending;
    let sum = s.max_per_run_usd.unwrap() + s.max_per_day_usd.unwrap();
    assert_eq!(sum, Decimal::new(3, 1));
    assert_eq!(sum.to_string(), "0.3");

    // Not representable in an f64: 12345678901234567.89 would round.
    let v = ok(&with(
        "spending:\n  max_per_day_usd: 12345678901234567.89\n  max_per_run_usd: \"12345678901234567.89\"\n",
    ));
    let exact = Decimal::from_i128_with_scale(1_234_567_890_123_456_789, 2);
    assert_eq!(v.manifest.spending.max_per_day_usd, Some(exact));
    assert_eq!(v.manifest.spending.max_per_run_usd, Some(exact));
    assert_eq!(exact.to_string(), "12345678901234567.89");
    assert_ne!(12345678901234567.89f64.to_string(), "12345678901234567.89");

    assert_eq!(
        ok(&with("spending:\n  max_per_run_usd: 5.00\n"))
            .manifest
            .spending
            .max_per_run_usd
            .unwrap()
            .to_string(),
        "5.00"
    );
    for bad in [
        "-5",
        "-0.01",
        "abc",
        "1e3",
        "1E-2",
        ".inf",
        "-.inf",
        ".nan",
        "\"\"",
        "''",
        "$5",
        "1,000",
        "05",
        ".5",
        "5.",
        "0x10",
        "1_000",
        "1234567890123456789",
        "0.12345678901",
        "[5]",
        "{a: 1}",
    ] {
        let r = rejected(&with(&format!("spending:\n  max_per_run_usd: {bad}\n")));
        let want = if bad.starts_with('[') || bad.starts_with('{') {
            "invalid_type"
        } else {
            "invalid_amount"
        };
        assert_eq!(at(&r.errors), [(want, 5, 20)], "{bad}");
    }
    // In pricing, too.
    assert_eq!(
        errors(&with(
            "mcp:\n  servers:\n    - id: s\n      url: https://m.example.com\n      tools: [t]\n      pricing:\n        default_usd: 1e-3\n        tools:\n          t: -1\n"
        )),
        [("invalid_amount", 10, 22), ("invalid_amount", 12, 14)]
    );
}

// ------------------------------------------------------------------ fields

#[test]
fn agent_names_are_file_name_safe() {
    ok("name: research-bot.v2_1\nsandbox:\n  command: [x]\n");
    for bad in [
        "a/b",
        "..",
        "a..b",
        "\"\"",
        "\"a\\x01b\"",
        ".hidden",
        "-x",
        &"a".repeat(65),
        "\"ümlaut\"",
        "\"a b\"",
    ] {
        let r = rejected(&format!("name: {bad}\nsandbox:\n  command: [x]\n"));
        assert_eq!(at(&r.errors), [("invalid_name", 1, 7)], "{bad}");
    }
}

#[test]
fn command_must_be_a_list() {
    let r = rejected("name: a\nsandbox:\n  command: python agent.py --fast\n");
    assert_eq!(at(&r.errors), [("invalid_type", 3, 12)]);
    assert_eq!(
        r.errors[0].help.as_deref(),
        Some(r#"write a list: ["python", "agent.py", "--fast"]"#)
    );
    assert_eq!(
        errors("name: a\nsandbox:\n  command: []\n"),
        [("invalid_command", 3, 12)]
    );
    assert_eq!(
        errors("name: a\nsandbox:\n  command: [\"\", x]\n"),
        [("invalid_command", 3, 13)]
    );
    assert_eq!(
        errors("name: a\nsandbox:\n  command: [x, \"a\\0b\"]\n"),
        [("invalid_command", 3, 16)]
    );
    // Block style, with an empty argument after the program.
    let v = ok("name: a\nsandbox:\n  command:\n    - python\n    - ''\n");
    assert_eq!(v.manifest.sandbox.command, ["python", ""]);
}

#[test]
fn env_names_are_checked_and_reserved_ones_refused() {
    let src = with(
        "  env:\n    https_proxy: a\n    No_Proxy: b\n    ALL_PROXY: c\n    HTTP_PROXY: d\n    CONSTLE_HOME: e\n    constle_x: f\n    1BAD: g\n    GOOD_1: h\n    NUL: \"a\\0\"\n",
    );
    assert_eq!(
        errors(&src),
        [
            ("reserved_env_name", 5, 5),
            ("reserved_env_name", 6, 5),
            ("reserved_env_name", 7, 5),
            ("reserved_env_name", 8, 5),
            ("reserved_env_name", 9, 5),
            ("reserved_env_name", 10, 5),
            ("invalid_env_name", 11, 5),
            ("invalid_string", 13, 10),
        ]
    );
    assert_eq!(errors(&with("  env: [A]\n")), [("invalid_type", 4, 8)]);
    assert_eq!(
        errors(&with("  env:\n    A: [1]\n")),
        [("invalid_type", 5, 8)]
    );
}

#[test]
fn paths_resolve_against_the_agentfile_directory() {
    let v = parse_str(
        "name: a\nsandbox:\n  command: [x]\n  workdir: data\n  rootfs: /opt/root\n",
        Path::new("/etc/agents/agent.yaml"),
        &no_env,
    )
    .unwrap();
    assert_eq!(v.manifest.base_dir, Path::new("/etc/agents"));
    assert_eq!(v.manifest.sandbox.workdir, Path::new("/etc/agents/data"));
    assert_eq!(
        v.manifest.sandbox.rootfs.as_deref(),
        Some(Path::new("/opt/root"))
    );
    let v = parse_str(MIN, Path::new("agent.yaml"), &no_env).unwrap();
    assert!(v.manifest.base_dir.is_absolute());
    assert_eq!(
        errors(&with("  workdir: \"\"\n")),
        [("invalid_path", 4, 12)]
    );
}

#[test]
fn allowed_hosts_are_plain_lower_case_names() {
    let v = ok(&with(
        "  network:\n    allowed_hosts: [api.groq.com, api.openai.com]\n",
    ));
    assert_eq!(v.manifest.sandbox.network.allowed_hosts.len(), 2);
    for bad in [
        "1.1.1.1",
        "\"2130706433\"",
        "0x7f000001",
        "0x7f.1",
        "010.0.0.1",
        "127.1",
        "\"::1\"",
        "\"[::1]\"",
        "\"[2606:4700::1111]\"",
        "\"api.groq.com:443\"",
        "https://api.groq.com",
        "api.groq.com/v1",
        "\"*.groq.com\"",
        "api.groq.com.",
        "\"api .groq.com\"",
        "API.groq.com",
        "localhost",
        "a_b.com",
        "\"bücher.de\"",
        "\"\"",
    ] {
        let r = rejected(&with(&format!("  network:\n    allowed_hosts: [{bad}]\n")));
        assert_eq!(at(&r.errors), [("invalid_hostname", 5, 21)], "{bad}");
    }
    let r = rejected(&with("  network:\n    allowed_hosts: [1.1.1.1]\n"));
    assert!(r.errors[0].message.contains("IP address"));
    let r = rejected(&with("  network:\n    allowed_hosts: [API.Groq.com]\n"));
    assert_eq!(
        r.errors[0].help.as_deref(),
        Some("write it in lower case: `api.groq.com`")
    );
    assert_eq!(
        errors(&with(
            "  network:\n    allowed_hosts:\n      - a.example.com\n      - a.example.com\n"
        )),
        [("duplicate_host", 7, 9)]
    );
}

#[test]
fn egress_modes() {
    assert_eq!(
        ok(&with("  network:\n    egress: none\n"))
            .manifest
            .sandbox
            .network
            .egress,
        Egress::None
    );
    assert_eq!(
        errors(&with(
            "  network:\n    egress: none\n    allowed_hosts: [a.example.com]\n"
        )),
        [("egress_none_with_hosts", 5, 13)]
    );
    let v = ok(&with("  network:\n    egress: open\n"));
    assert_eq!(v.manifest.sandbox.network.egress, Egress::Open);
    assert_eq!(at(&v.warnings), [("egress_open", 5, 13)]);
    let r = rejected(&with("  network:\n    egress: Restricted\n"));
    assert_eq!(at(&r.errors), [("unknown_variant", 5, 13)]);
    assert!(
        r.errors[0]
            .help
            .as_ref()
            .unwrap()
            .contains("did you mean `restricted`?")
    );
}

/// Each server is a door of the sandbox, and the doors travel together:
/// 48 servers are fine, the 49th is refused where it is written.
#[test]
fn at_most_48_mcp_servers() {
    let servers = |n: usize| {
        let list: String = (0..n)
            .map(|i| {
                format!("    - id: s{i}\n      url: https://a.example.com/mcp\n      tools: [t]\n")
            })
            .collect();
        with(&format!("mcp:\n  servers:\n{list}"))
    };
    ok(&servers(constle_manifest::MAX_MCP_SERVERS));
    let r = rejected(&servers(constle_manifest::MAX_MCP_SERVERS + 1));
    assert_eq!(codes(&r.errors), ["too_many_servers"]);
    assert!(
        r.errors[0].message.starts_with("49 MCP servers"),
        "{}",
        r.errors[0].message
    );
}

#[test]
fn mcp_servers_are_checked() {
    let src = with(
        "mcp:
  servers:
    - id: my-srv
      url: https://a.example.com/mcp
      tools: [a, b, a]
    - id: my_srv
      url: http://10.0.0.1/mcp
      tools: []
    - id: my-srv
      url: mcp.example.com
      tools: [c]
    - id: Bad
      url: https://b.example.com
      tools: [\"x\\ty\", \" z\"]
      pricing:
        tools:
          nope: 1
",
    );
    assert_eq!(
        errors(&src),
        [
            ("duplicate_tool", 8, 21),
            ("server_id_collision", 9, 11),
            ("insecure_url", 10, 12),
            ("empty_tools", 11, 14),
            ("duplicate_server_id", 12, 11),
            ("invalid_url", 13, 12),
            ("invalid_server_id", 15, 11),
            ("invalid_tool_name", 17, 15),
            ("invalid_tool_name", 17, 23),
        ]
    );
    let r = rejected(&with(
        "mcp:\n  servers:\n    - id: s\n      url: https://a.example.com\n      tools: [pay_invoice]\n      pricing:\n        tools:\n          pay_invoce: 1\n",
    ));
    assert_eq!(at(&r.errors), [("unknown_priced_tool", 11, 11)]);
    assert!(
        r.errors[0]
            .help
            .as_ref()
            .unwrap()
            .contains("did you mean `pay_invoice`?")
    );
    let r = rejected(&with(
        "mcp:\n  servers:\n    - id: s\n      url: http://a.example.com\n      tools: [t]\n",
    ));
    assert_eq!(
        r.errors[0].help.as_deref(),
        Some("use https: `https://a.example.com`")
    );
    ok(&with(
        "mcp:\n  servers:\n    - id: s\n      url: http://localhost:8080/mcp\n      tools: [t]\n",
    ));
    ok(&with("mcp:\n  servers: []\n"));
}

#[test]
fn headers_name_a_host_variable_and_only_headers_the_gate_does_not_set() {
    // Line 4 is `mcp:`; the server's headers start on line 9.
    let src = with(
        "mcp:
  servers:
    - id: s
      url: https://a.example.com/mcp
      tools: [t]
      headers:
        - name: Authorization
          scheme: Bearer
          value_secret_ref: S_TOKEN
        - {name: X-Api-Key, value_secret_ref: S_KEY}
",
    );
    let env = |name: &str| match name {
        "S_TOKEN" => Some("t0ken".to_string()),
        "S_KEY" => Some("k3y".to_string()),
        _ => None,
    };
    let v = parse_str(&src, Path::new("agent.yaml"), &env).unwrap();
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let headers = &v.manifest.mcp.servers[0].headers();
    let shown: Vec<_> = headers
        .iter()
        .map(|h| {
            (
                h.name.as_str(),
                h.scheme.as_ref().map(|s| s.as_str()),
                h.value_secret_ref.as_str(),
                h.value(&env).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (
                "Authorization",
                Some("Bearer"),
                "S_TOKEN",
                "Bearer t0ken".to_string()
            ),
            ("X-Api-Key", None, "S_KEY", "k3y".to_string()),
        ]
    );
    // No headers: none added.
    assert!(
        ok(&with(SERVER)).manifest.mcp.servers[0]
            .headers()
            .is_empty()
    );
    ok(&with(&format!("{SERVER}      headers: []\n")));
}

#[test]
fn header_mistakes_are_refused_where_they_are() {
    let src = with(&format!(
        "{SERVER}      headers:
        - {{name: \"X Api\", value_secret_ref: A}}
        - {{name: Content-Length, value_secret_ref: A}}
        - {{name: mcp-session-id, value_secret_ref: A}}
        - {{name: PROXY-Authorization, value_secret_ref: A}}
        - {{name: Authorization, scheme: \"Bearer \", value_secret_ref: A}}
        - {{name: X-Key, value_secret_ref: 1A}}
        - {{name: X-Key, value_secret_ref: A, value: S3CRET}}
        - {{value_secret_ref: A}}
        - {{name: Authorization}}
        - {{name: x-api-key, value_secret_ref: A}}
        - {{name: X-API-KEY, value_secret_ref: B}}
"
    ));
    assert_eq!(
        errors(&src),
        [
            ("invalid_header_name", 10, 18),
            ("reserved_header_name", 11, 18),
            ("reserved_header_name", 12, 18),
            ("reserved_header_name", 13, 18),
            ("invalid_auth_scheme", 14, 41),
            ("invalid_env_name", 15, 43),
            ("unknown_field", 16, 46),
            ("missing_field", 17, 11),
            ("missing_field", 18, 11),
            ("duplicate_header", 20, 18),
        ]
    );
    // Every framing, connection and MCP header, in any case.
    for name in [
        "Host",
        "content-type",
        "Transfer-Encoding",
        "Connection",
        "Keep-Alive",
        "TE",
        "Upgrade",
        "Accept",
        "Accept-Encoding",
        "Last-Event-ID",
        "MCP-Protocol-Version",
        "Mcp-Method",
        "Mcp-Name",
        "Proxy-Connection",
    ] {
        let src = with(&format!(
            "{SERVER}      headers: [{{name: {name}, value_secret_ref: A}}]\n"
        ));
        assert_eq!(
            codes(&rejected(&src).errors),
            ["reserved_header_name"],
            "{name}"
        );
    }
}

#[test]
fn an_unusable_header_secret_is_a_warning_that_never_shows_it() {
    // `constle validate` may run where the secret is not set; `constle run`
    // refuses to start then.
    let src = with(&format!(
        "{SERVER}      headers:\n        - {{name: Authorization, scheme: Bearer, value_secret_ref: S_TOKEN}}\n"
    ));
    for (set, code) in [
        (None, "header_secret_unset"),
        (Some(""), "header_secret_unset"),
        (Some("S3CRET\n"), "header_secret_invalid"),
        (Some("S3CRET\r\nX-Injected: 1"), "header_secret_invalid"),
        (Some(" S3CRET"), "header_secret_invalid"),
    ] {
        let env = |name: &str| {
            (name == "S_TOKEN")
                .then(|| set.map(str::to_owned))
                .flatten()
        };
        let v = parse_str(&src, Path::new("agent.yaml"), &env).unwrap();
        assert_eq!(at(&v.warnings), [(code, 10, 67)], "{set:?}");
        let said = v.warnings[0].to_string();
        assert!(
            said.contains("S_TOKEN") && said.contains("`Authorization`"),
            "{said}"
        );
        assert!(said.contains("refuse to start"), "{said}");
        assert!(!said.contains("S3CRET"), "{said}");
    }
}

#[test]
fn allow_methods_are_checked() {
    let server = |methods: &str| {
        with(&format!(
            "mcp:\n  servers:\n    - id: s\n      url: https://a.example.com\n      tools: [t]\n      allow_methods: {methods}\n"
        ))
    };
    // Absent: nothing beyond the base sets.
    let v = ok(&with(
        "mcp:\n  servers:\n    - id: s\n      url: https://a.example.com\n      tools: [t]\n",
    ));
    assert!(v.manifest.mcp.servers[0].allow_methods.is_empty());

    let v = ok(&server(
        "[resources/read, sampling/createMessage, notifications/custom]",
    ));
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let methods: Vec<&str> = v.manifest.mcp.servers[0]
        .allow_methods
        .iter()
        .map(|m| m.as_str())
        .collect();
    assert_eq!(
        methods,
        [
            "resources/read",
            "sampling/createMessage",
            "notifications/custom"
        ]
    );
    ok(&server("[]"));

    // Each entry: non-empty, at most 128 bytes, visible ASCII, no spaces.
    let long = "m".repeat(129);
    let src = server(&format!(
        "[\"\", \"a b\", \" resources/read\", \"résumé\", \"x\\ty\", {long}]"
    ));
    assert_eq!(
        errors(&src),
        [
            ("invalid_method_name", 9, 23),
            ("invalid_method_name", 9, 27),
            ("invalid_method_name", 9, 34),
            ("invalid_method_name", 9, 53),
            ("invalid_method_name", 9, 63),
            ("invalid_method_name", 9, 71),
        ]
    );
    ok(&server(&format!("[{}]", "m".repeat(128))));

    // Unique, the duplicate located and pointing at the first.
    let r = rejected(&server(
        "\n        - resources/read\n        - prompts/get\n        - resources/read",
    ));
    assert_eq!(at(&r.errors), [("duplicate_method", 12, 11)]);
    assert_eq!(
        r.errors[0].message,
        "`resources/read` is listed twice in allow_methods"
    );
    assert_eq!(
        r.errors[0].help.as_deref(),
        Some("remove it; it is already listed at line 10")
    );
    // Case matters: these are two methods.
    ok(&server("[resources/read, Resources/Read]"));

    // Methods the gate allows anyway: a warning, the file is accepted.
    let v = ok(&server(
        "[tools/call, tools/list, initialize, ping, notifications/initialized, notifications/cancelled, notifications/progress, notifications/roots/list_changed, resources/read]",
    ));
    assert_eq!(
        codes(&v.warnings),
        ["method_always_allowed"; 8],
        "{:?}",
        v.warnings
    );
    assert!(v.warnings[0].message.contains("under its own rules"));
    assert!(
        v.warnings[0]
            .help
            .as_deref()
            .unwrap()
            .contains("this server's tools")
    );
    assert_eq!(
        v.warnings[2].message,
        "`initialize` in allow_methods changes nothing: the gate always allows it"
    );
    assert_eq!(at(&v.warnings)[3], ("method_always_allowed", 9, 59));
    assert_eq!(v.manifest.mcp.servers[0].allow_methods.len(), 9);

    // Not a list, or a list of non-strings.
    assert_eq!(errors(&server("resources/read"))[0].0, "invalid_type");
    assert_eq!(errors(&server("[[a]]"))[0].0, "invalid_type");
}

// ------------------------------------------------------------ human gates

const SERVER: &str = "mcp:\n  servers:\n    - id: accounting\n      url: https://a.example.com\n      tools: [list_invoices, pay_invoice]\n";

#[test]
fn gated_calls_need_an_approver() {
    // Line 9 is `human_gates:`.
    let src = format!(
        "{MIN}{SERVER}human_gates:\n  enabled: true\n  require_approval_for: [pay_invoice]\n"
    );
    let r = rejected(&src);
    assert_eq!(at(&r.errors), [("missing_approver_pubkey", 9, 1)]);
    assert!(
        r.errors[0]
            .help
            .as_ref()
            .unwrap()
            .contains("constle webhook-keygen")
    );

    let bad = format!(
        "{MIN}{SERVER}human_gates:\n  enabled: true\n  require_approval_for: [pay_invoice]\n  approver_pubkey: did:key:z6MkNOPE\n"
    );
    assert_eq!(errors(&bad), [("invalid_did_key", 12, 20)]);

    // Not gated (nothing listed, or not enabled): no approver needed, but an invalid one is still an error.
    ok(&format!("{MIN}{SERVER}human_gates:\n  enabled: true\n"));
    ok(&format!(
        "{MIN}{SERVER}human_gates:\n  require_approval_for: [pay_invoice]\n"
    ));
    assert_eq!(
        errors(&format!(
            "{MIN}human_gates:\n  approver_pubkey: not-a-did\n"
        )),
        [("invalid_did_key", 5, 20)]
    );
    assert_eq!(
        errors(&format!(
            "{MIN}human_gates:\n  approver_pubkey: {}\n",
            DID_A.replace("z6Mk", "z6Mm")
        )),
        [("invalid_did_key", 5, 20)]
    );

    let good = format!(
        "{MIN}{SERVER}human_gates:\n  enabled: true\n  require_approval_for: [pay_invoice]\n  approver_pubkey: {DID_B}\n"
    );
    let v = ok(&good);
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let gates = &v.manifest.human_gates;
    assert!(gates.is_active());
    assert_eq!(gates.check("pay_invoice"), GateMatch::Gated);
    assert_eq!(gates.check("Pay_Invoice"), GateMatch::CaseVariant);
    assert_eq!(gates.check("list_invoices"), GateMatch::NotGated);
}

#[test]
fn gate_warnings() {
    let src = format!(
        "{MIN}{SERVER}human_gates:
  require_approval_for: [pay_invoice, Pay_Invoice, external_transfer]
  approver_pubkey: {DID_B}
  on_timeout: proceed
  notify:
    - channel: webhook
      url_secret_ref: HOOK_URL
"
    );
    let v = ok(&src);
    assert_eq!(
        at(&v.warnings),
        [
            ("gates_disabled", 10, 26),
            ("gates_disabled", 10, 39),
            ("gate_matches_no_tool", 10, 39),
            ("gates_disabled", 10, 52),
            ("gate_matches_no_tool", 10, 52),
            ("on_timeout_proceed", 12, 15),
            ("webhook_url_unset", 15, 23),
        ]
    );
    let near = &v.warnings[2];
    assert!(near.message.contains("`pay_invoice`"), "{near}");
    assert!(near.help.as_ref().unwrap().contains("write `pay_invoice`"));
    assert!(!v.warnings[4].message.contains("declares"));
    assert!(v.warnings[5].message.contains("delay"));
    assert!(
        v.warnings[6]
            .message
            .contains("only be decided at the terminal")
    );
    assert!(v.warnings.iter().all(|w| w.severity == Severity::Warning));
    let m = v.manifest;
    assert!(m.gated_tools().is_empty());
    assert_eq!(m.human_gates.on_timeout, OnTimeout::Proceed);

    // With the variable set, no webhook warning; with a bad value, a warning that does not echo it.
    let env_ok = |n: &str| (n == "HOOK_URL").then(|| "https://hooks.example.com/x".to_string());
    let v = parse_str(&src, Path::new("agent.yaml"), &env_ok).unwrap();
    assert!(!codes(&v.warnings).contains(&"webhook_url_unset"));
    let env_bad = |n: &str| (n == "HOOK_URL").then(|| "secret-token-value".to_string());
    let v = parse_str(&src, Path::new("agent.yaml"), &env_bad).unwrap();
    let w = v
        .warnings
        .iter()
        .find(|w| w.code == "webhook_url_invalid")
        .unwrap();
    assert!(!w.to_string().contains("secret-token-value"));

    // No servers at all.
    let v = ok(&format!(
        "{MIN}human_gates:\n  enabled: true\n  require_approval_for: [x]\n  approver_pubkey: {DID_B}\n"
    ));
    assert_eq!(at(&v.warnings), [("gate_matches_no_tool", 6, 26)]);
    assert!(v.warnings[0].message.contains("no MCP server"));
    // Each name once.
    assert_eq!(
        errors(&format!(
            "{MIN}human_gates:\n  require_approval_for: [a, b, a]\n"
        )),
        [("duplicate_entry", 5, 32)]
    );
    // Enabled, nothing listed.
    let v = ok(&format!("{MIN}human_gates:\n  enabled: true\n"));
    assert_eq!(at(&v.warnings), [("gates_nothing", 5, 12)]);
}

#[test]
fn notify_entries_are_checked() {
    let src = format!(
        "{MIN}human_gates:\n  notify:\n    - channel: email\n      url_secret_ref: 1X\n    - channel: webhook\n    - {{channel: webhook, url_secret_ref: OK_VAR, extra: 1}}\n"
    );
    assert_eq!(
        errors(&src),
        [
            ("unknown_variant", 6, 16),
            ("invalid_env_name", 7, 23),
            ("missing_field", 8, 7),
            ("unknown_field", 9, 50),
        ]
    );
}

#[test]
fn on_timeout_values() {
    let r = rejected(&with("human_gates:\n  on_timeout: wait\n"));
    assert_eq!(at(&r.errors), [("unknown_variant", 5, 15)]);
    assert!(
        r.errors[0]
            .help
            .as_ref()
            .unwrap()
            .contains("abort, proceed")
    );
}

// --------------------------------------------------------- spending, a2a

// ---------------------------------------------------------- sandbox.limits

/// `sandbox.limits` holding `body` (one `key: value` per line, unindented).
fn limits_src(body: &str) -> String {
    let body: String = body.lines().map(|l| format!("    {l}\n")).collect();
    format!("{MIN}  limits:\n{body}")
}

#[track_caller]
fn limits(body: &str) -> Limits {
    ok(&limits_src(body)).manifest.sandbox.limits
}

/// The one error for the one-line `body` (`key: value`), which must point
/// at the value, and its help line.
#[track_caller]
fn limit_error(body: &str) -> (&'static str, String) {
    let r = rejected(&limits_src(body));
    assert_eq!(r.errors.len(), 1, "{r}");
    let e = &r.errors[0];
    let l = e.location.as_ref().unwrap();
    let column = "    ".len() + body.find(": ").unwrap() + ": ".len() + 1;
    assert_eq!((l.line, l.column), (5, column), "{e}");
    (e.code, e.help.clone().unwrap())
}

#[test]
fn limits_default_to_none() {
    assert_eq!(ok(MIN).manifest.sandbox.limits, Limits::default());
    let v = ok(&format!("{MIN}  limits: {{}}\n"));
    assert_eq!(v.manifest.sandbox.limits, Limits::default());
    let all = limits("memory: 512m\npids: 64\ncpus: 1.5");
    assert_eq!(
        all,
        Limits {
            memory_bytes: Some(512 << 20),
            pids: Some(64),
            cpu_millis: Some(1500),
            wall_clock_seconds: None,
        }
    );
}

#[test]
fn memory_is_a_docker_size() {
    for (text, bytes) in [
        ("512m", 512u64 << 20),
        ("512M", 512 << 20),
        ("\"512m\"", 512 << 20),
        ("2g", 2 << 30),
        ("6m", 6 << 20),
        ("6144k", 6 << 20),
        ("6291456", 6 << 20),
        ("6291456b", 6 << 20),
        ("6291456B", 6 << 20),
        ("16777216g", 1 << 54),
    ] {
        assert_eq!(
            limits(&format!("memory: {text}")).memory_bytes,
            Some(bytes),
            "{text}"
        );
    }
}

#[test]
fn memory_refusals_say_what_to_write() {
    for (text, help) in [
        ("512mb", "write 512m; Docker's units are b, k, m and g"),
        ("512MiB", "write 512m;"),
        ("2GB", "write 2g;"),
        ("1.5g", "write 1536m"),
        ("0.5m", "write 512k"),
        ("1.1b", "e.g. 1536m for 1.5g"),
        ("1t", "write 1024g"),
        ("0512m", "write 512m"),
        ("5m", "write at least 6m"),
        ("0", "write at least 6m"),
        ("6291455", "write at least 6m"),
        ("99999999999g", "fits in 64 bits"),
        ("512 m", "e.g. 512m or 2g"),
        ("-1", "e.g. 512m or 2g"),
        ("1e9", "e.g. 512m or 2g"),
        ("m", "e.g. 512m or 2g"),
        ("\"\"", "e.g. 512m or 2g"),
    ] {
        let (code, got) = limit_error(&format!("memory: {text}"));
        assert_eq!(code, "invalid_limit", "{text}");
        assert!(got.contains(help), "{text}: {got}");
    }
    assert_eq!(errors(&limits_src("memory: ~")), [("invalid_type", 5, 13)]);
    assert_eq!(
        errors(&limits_src("memory: [512m]")),
        [("invalid_type", 5, 13)]
    );
}

#[test]
fn pids_are_a_whole_number_from_8() {
    for n in [8, 64, 4_194_304] {
        assert_eq!(limits(&format!("pids: {n}")).pids, Some(n));
    }
    for bad in ["7", "0", "4194305", "99999999999"] {
        let (code, help) = limit_error(&format!("pids: {bad}"));
        assert_eq!(code, "invalid_limit", "{bad}");
        assert!(help.contains("constle's own processes"), "{help}");
    }
    assert_eq!(limit_error("pids: \"64\"").1, "write it without quotes: 64");
    for bad in ["1.5", "064", "64k", "-1"] {
        assert_eq!(limit_error(&format!("pids: {bad}")).0, "invalid_integer");
    }
}

#[test]
fn cpus_are_exact_thousandths() {
    for (text, millis) in [
        ("1.5", 1500),
        ("\"1.5\"", 1500),
        ("2", 2000),
        ("0.01", 10),
        ("0.015", 15),
        ("0.333", 333),
        ("1024", 1_024_000),
    ] {
        assert_eq!(
            limits(&format!("cpus: {text}")).cpu_millis,
            Some(millis),
            "{text}"
        );
    }
    for (text, help) in [
        ("0", "from 0.01"),
        ("0.009", "from 0.01"),
        ("1025", "to 1024"),
        ("0.0001", "3 after it"),
        ("0.3333", "3 after it"),
        (".5", "write 0.5"),
        ("2.", "write 2"),
        ("01.5", "write 1.5"),
        ("-1", "positive number of CPUs"),
        ("1e1", "exponent"),
        ("50%", "number of CPUs such as 1.5"),
        (".nan", "number of CPUs such as 1.5"),
    ] {
        let (code, got) = limit_error(&format!("cpus: {text}"));
        assert_eq!(code, "invalid_limit", "{text}");
        assert!(got.contains(help), "{text}: {got}");
    }
}

#[test]
fn limits_refuse_unknown_keys() {
    let r = rejected(&limits_src("memory-swap: 1g\ncpu: 1\npids_limit: 64"));
    assert_eq!(
        at(&r.errors),
        [
            ("unknown_field", 5, 5),
            ("unknown_field", 6, 5),
            ("unknown_field", 7, 5)
        ]
    );
    assert!(r.errors[0].message.contains("in sandbox.limits"));
    assert!(
        r.errors[1]
            .help
            .as_ref()
            .unwrap()
            .contains("did you mean `cpus`?")
    );
    assert!(
        r.errors[2]
            .help
            .as_ref()
            .unwrap()
            .contains("valid fields: memory, pids, cpus")
    );
}

#[test]
fn every_limit_error_in_one_pass() {
    assert_eq!(
        errors(&limits_src("memory: 1mb\npids: 2\ncpus: 0")),
        [
            ("invalid_limit", 5, 13),
            ("invalid_limit", 6, 11),
            ("invalid_limit", 7, 11)
        ]
    );
}

#[test]
fn the_wall_clock_limit_needs_no_cgroup() {
    for n in [1, 3600, 604_800] {
        let l = limits(&format!("wall_clock_seconds: {n}"));
        assert_eq!(l.wall_clock_seconds, Some(n));
        assert!(!l.needs_cgroup(), "{l:?}");
    }
    assert!(!Limits::default().needs_cgroup());
    for body in ["memory: 6m", "pids: 8", "cpus: 1"] {
        let l = limits(&format!("{body}\nwall_clock_seconds: 60"));
        assert!(l.needs_cgroup(), "{body}");
        assert_eq!(l.wall_clock_seconds, Some(60));
    }
    for bad in ["0", "604801", "99999999999"] {
        let (code, help) = limit_error(&format!("wall_clock_seconds: {bad}"));
        assert_eq!(code, "invalid_limit", "{bad}");
        assert!(help.contains("wall_clock_seconds: 3600"), "{help}");
    }
    assert_eq!(
        limit_error("wall_clock_seconds: 1:30").1,
        "write a number of seconds, not minutes:seconds; 1:30 would be 90"
    );
}

/// `sandbox:` holding `lines` (each indented by two) for an Agentfile in
/// a new directory; the errors' (code, line, column), or none.
fn home_errors(dir: &Path, lines: &str) -> Vec<(&'static str, usize, usize)> {
    let file = dir.join("agent.yaml");
    let lines: String = lines.lines().map(|l| format!("  {l}\n")).collect();
    std::fs::write(&file, format!("name: a\nsandbox:\n  command: [x]\n{lines}")).unwrap();
    match load_file(&file, &|_| None) {
        Ok(_) => Vec::new(),
        Err(r) => at(&r.errors),
    }
}

#[test]
fn the_home_is_a_directory_of_its_own() {
    let v = parse_str(
        "name: a\nsandbox:\n  command: [x]\n  home: ./agent-home\n",
        Path::new("/srv/a/agent.yaml"),
        &no_env,
    )
    .unwrap();
    assert_eq!(
        v.manifest.sandbox.home.as_deref(),
        Some(Path::new("/srv/a/agent-home"))
    );
    assert_eq!(ok(MIN).manifest.sandbox.home, None);

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_eq!(home_errors(d, "home: ./agent-home"), []);
    assert_eq!(home_errors(d, "home: ."), [("home_holds_agentfile", 4, 9)]);
    assert_eq!(home_errors(d, "home: .."), [("home_holds_agentfile", 4, 9)]);
    assert_eq!(home_errors(d, "home: \"\""), [("invalid_path", 4, 9)]);
    // Never the work directory, inside it or around it; nor the rootfs.
    for home in ["./work", "./work/home", "./work/.."] {
        let found = home_errors(d, &format!("home: {home}"));
        assert!(
            found.contains(&("home_overlaps", 4, 9)),
            "{home}: {found:?}"
        );
    }
    assert_eq!(
        home_errors(d, "workdir: ./w\nhome: ./w/h"),
        [("home_overlaps", 5, 9)]
    );
    assert_eq!(
        home_errors(d, "workdir: ./h/w\nhome: ./h"),
        [("home_overlaps", 5, 9)]
    );
    assert_eq!(
        home_errors(d, "rootfs: ./r\nhome: ./r/home/agent"),
        [("home_overlaps", 5, 9)]
    );
    assert_eq!(home_errors(d, "rootfs: ./r\nworkdir: ./w\nhome: ./h"), []);
    let file = d.join("agent.yaml");
    std::fs::write(
        &file,
        "name: a\nsandbox:\n  command: [x]\n  home: ./work/h\n",
    )
    .unwrap();
    let err = load_file(&file, &|_| None).unwrap_err();
    assert!(
        err.errors[0].message.contains("the work directory"),
        "{err}"
    );
    assert!(
        err.errors[0]
            .help
            .as_deref()
            .unwrap()
            .contains("home: ./agent-home"),
        "{err}"
    );
    // A stdio server's work directory stays out of the agent's home too.
    let server = "mcp:\n  servers:\n    - id: s\n      command: [s]\n      tools: [t]\n      workdir: ./h/s\n";
    let src = format!("name: a\nsandbox:\n  command: [x]\n  home: ./h\n{server}");
    std::fs::write(&file, &src).unwrap();
    let err = load_file(&file, &|_| None).unwrap_err();
    assert_eq!(at(&err.errors), [("workdir_shared", 10, 16)]);
    assert!(err.errors[0].message.contains("the agent's home"), "{err}");
    assert!(
        err.errors[0]
            .help
            .as_deref()
            .unwrap()
            .contains("outside sandbox.home")
    );
}

#[test]
fn spending_warnings() {
    let v = ok(&with("spending:\n  max_per_month_usd: 100\n"));
    assert_eq!(at(&v.warnings), [("spend_caps_unmetered", 4, 1)]);
    assert_eq!(v.manifest.spending.max_per_month_usd, Some(100.into()));
    let v = ok(&format!(
        "{MIN}{SERVER}      pricing: {{default_usd: 0.5}}\nspending:\n  max_per_run_usd: 1\n"
    ));
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
}

#[test]
fn the_ledger_is_a_redis_url() {
    let v = ok(&with(
        "spending:\n  ledger: redis://ledger.internal:6379/0\n",
    ));
    let ledger = v.manifest.spending.ledger.unwrap();
    assert_eq!(ledger.as_str(), "redis://ledger.internal:6379/0");
    for url in [
        "rediss://h:6380",
        "redis+unix:///run/redis.sock",
        "unix:///run/redis.sock",
    ] {
        ok(&with(&format!("spending:\n  ledger: {url}\n")));
    }
    for url in [
        "https://ledger",
        "redis://",
        "redis ://h",
        "/run/redis.sock",
        "REDIS://h",
    ] {
        let r = rejected(&with(&format!("spending:\n  ledger: \"{url}\"\n")));
        assert_eq!(at(&r.errors), [("invalid_redis_url", 5, 11)], "{url}");
    }
    let v = ok(&with(
        "spending:\n  ledger: redis://app:s3cret@ledger:6379\n",
    ));
    assert_eq!(at(&v.warnings), [("redis_password_in_agentfile", 5, 11)]);
    let ledger = v.manifest.spending.ledger.unwrap();
    assert!(!format!("{ledger:?} {}", ledger.redacted()).contains("s3cret"));
    let v = ok(&format!(
        "{MIN}identity:\n  did: {DID_A}\na2a:\n  replay: redis+unix:///run/r.sock\n"
    ));
    assert_eq!(
        v.manifest.a2a.unwrap().replay.unwrap().as_str(),
        "redis+unix:///run/r.sock"
    );
    let r = rejected(&format!(
        "{MIN}identity:\n  did: {DID_A}\na2a:\n  replay: http://x\n"
    ));
    assert_eq!(codes(&r.errors), ["invalid_redis_url"]);
    assert!(
        r.errors[0].message.contains("a2a.replay"),
        "{}",
        r.errors[0].message
    );
    let v = ok(&with(
        "spending:\n  ledger: redis://ledger.internal:6379/0?db=1\n",
    ));
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
}

/// What marks a secret in the cases below: it must appear in no
/// diagnostic (text or JSON) and no `Debug` of what was read.
const MARKER: &str = "M4RK3R";

/// Every Agentfile field that takes a URL, each with a secret in the user
/// information or a secret-looking query parameter: a valid one is
/// accepted with a warning, an invalid one refused, and neither shows the
/// secret anywhere.
#[test]
fn a_secret_in_a_url_is_warned_about_and_never_shown() {
    let replay = |url: &str| format!("{MIN}identity:\n  did: {DID_A}\na2a:\n  replay: \"{url}\"\n");
    let peer = |url: &str| {
        format!(
            "{MIN}identity:\n  did: {DID_A}\na2a:\n  peers:\n    - did: {DID_B}\n      url: \"{url}\"\n"
        )
    };
    let ledger = |url: &str| with(&format!("spending:\n  ledger: \"{url}\"\n"));
    let server = |url: &str| {
        with(&format!(
            "mcp:\n  servers:\n    - id: s\n      url: \"{url}\"\n      tools: [t]\n"
        ))
    };
    let host = |url: &str| with(&format!("  network:\n    allowed_hosts: [\"{url}\"]\n"));
    let m = MARKER;
    let warned = [
        (
            ledger(&format!("redis+unix:///run/r.sock?pass={m}")),
            "redis_password_in_agentfile",
        ),
        (
            ledger(&format!("unix:///run/r.sock?db=1&PASS={m}")),
            "redis_password_in_agentfile",
        ),
        (
            ledger(&format!("unix:///run/r.sock?pa%73s={m}")),
            "redis_password_in_agentfile",
        ),
        (
            ledger(&format!("redis://:{m}@ledger:6379/0")),
            "redis_password_in_agentfile",
        ),
        (
            ledger(&format!("redis://{m}@ledger:6379/0")),
            "redis_password_in_agentfile",
        ),
        (
            replay(&format!("redis+unix:///run/r.sock?password={m}")),
            "redis_password_in_agentfile",
        ),
        (
            server(&format!("https://mcp.example.com/mcp?api_key={m}")),
            "url_carries_secret",
        ),
        (
            peer(&format!("https://peer.example.com/a2a?token={m}")),
            "url_carries_secret",
        ),
    ];
    for (src, code) in &warned {
        let v = ok(src);
        assert_eq!(codes(&v.warnings), [*code], "{src}");
        assert_never_shown(&v.warnings, &format!("{:?}", v.manifest), src);
    }
    let refused = [
        (ledger(&format!("redis:/:{m}@ledger")), "invalid_redis_url"),
        (
            ledger(&format!("ftp://user:{m}@ledger/?pass={m}")),
            "invalid_redis_url",
        ),
        (
            server(&format!("https://user:{m}@mcp.example.com/mcp")),
            "invalid_url",
        ),
        (
            server(&format!("https://{m}@mcp.example.com/mcp")),
            "invalid_url",
        ),
        (
            server(&format!("http://mcp.example.com/mcp?token={m}")),
            "insecure_url",
        ),
        (
            server(&format!("https://mcp.example.com/mcp?token={m}#x")),
            "invalid_url",
        ),
        (
            peer(&format!("https://u:{m}@peer.example.com/a2a")),
            "invalid_url",
        ),
        (
            host(&format!("https://u:{m}@api.example.com")),
            "invalid_hostname",
        ),
    ];
    for (src, code) in &refused {
        let r = rejected(src);
        assert_eq!(codes(&r.errors), [*code], "{src}");
        assert_never_shown(&r.errors, "", src);
        assert!(r.errors[0].message.contains("***"), "{}", r.errors[0]);
    }
}

#[track_caller]
fn assert_never_shown(diagnostics: &[constle_manifest::Diagnostic], read: &str, src: &str) {
    for d in diagnostics {
        let json = serde_json::to_string(d).unwrap();
        for shown in [d.to_string(), json, read.to_owned()] {
            assert!(!shown.contains(MARKER), "{src}\nshows the secret: {shown}");
        }
    }
}

#[test]
fn identity_and_a2a() {
    let v = ok(&format!(
        "{MIN}identity:\n  did: {DID_A}\na2a:\n  listen: \"[::1]:7400\"\n  peers:\n    - did: {DID_B}\n"
    ));
    let a2a = v.manifest.a2a.unwrap();
    assert_eq!(a2a.listen.unwrap().port(), 7400);
    assert!(a2a.peers[0].url.is_none());

    assert_eq!(
        errors(&format!("{MIN}a2a:\n  listen: 127.0.0.1:7400\n")),
        [("a2a_requires_identity", 4, 1)]
    );
    assert_eq!(
        errors(&format!(
            "{MIN}identity:\n  did: {DID_A}\na2a:\n  listen: localhost:7400\n  peers:\n    - did: {DID_B}\n      url: http://peer.example.com\n    - did: {DID_B}\n    - url: https://x.example.com\n"
        )),
        [
            ("invalid_socket_addr", 7, 11),
            ("insecure_url", 10, 12),
            ("duplicate_peer", 11, 12),
            ("missing_field", 12, 7),
        ]
    );
    assert_eq!(
        errors(&format!(
            "{MIN}a2a:\n  listen: 127.0.0.1:0\nidentity: {{did: {DID_A}}}\n"
        )),
        [("invalid_socket_addr", 5, 11)]
    );
    assert_eq!(
        errors(&format!("{MIN}identity: {{did: nope}}\n")),
        [("invalid_did_key", 4, 17)]
    );
    assert_eq!(
        errors(&format!("{MIN}identity: {{}}\n")),
        [("missing_field", 4, 1)]
    );
}

// ------------------------------------------------------ output and files

#[test]
fn diagnostics_serialize_and_render() {
    let r = rejected(&with("bogus: 1\nspending:\n  max_per_run_usd: -1\n"));
    let json = serde_json::to_value(&r.errors).unwrap();
    assert_eq!(json[0]["code"], "unknown_field");
    assert_eq!(json[0]["severity"], "error");
    assert_eq!(json[0]["location"]["path"], "agent.yaml");
    assert_eq!(json[0]["location"]["line"], 4);
    assert_eq!(json[0]["location"]["column"], 1);
    assert_eq!(json[1]["code"], "invalid_amount");
    let text = r.to_string();
    assert!(text.starts_with(
        "agent.yaml:4:1: error[unknown_field]: unknown field `bogus` at the top level\n  help: "
    ));
    assert!(text.contains("\nagent.yaml:6:20: error[invalid_amount]: "));
    assert!(text.contains("\nagent.yaml:5:1: warning[spend_caps_unmetered]: "));
}

#[test]
fn agentfile_text_is_escaped_in_messages() {
    let r = rejected(&with("\"evil\\e[2J\\u202e\": 1\n"));
    let text = r.to_string();
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{202e}'),
        "{text:?}"
    );
    assert!(text.contains("\\u{1b}[2J\\u{202e}"));
}

#[test]
fn load_file_reads_and_locates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, MIN).unwrap();
    let v = load_file(&path, &no_env).unwrap();
    assert_eq!(v.manifest.base_dir, dir.path());

    std::fs::write(&path, b"name: a\nsandbox:\n  command: [\xff]\n").unwrap();
    let r = load_file(&path, &no_env).unwrap_err();
    assert_eq!(at(&r.errors), [("invalid_utf8", 3, 13)]);
    assert_eq!(r.errors[0].location.as_ref().unwrap().path, path);

    std::fs::write(&path, vec![b'#'; constle_manifest::MAX_INPUT_BYTES + 1]).unwrap();
    let r = load_file(&path, &no_env).unwrap_err();
    assert_eq!(codes(&r.errors), ["input_too_large"]);

    let r = load_file(&dir.path().join("missing.yaml"), &no_env).unwrap_err();
    assert_eq!(codes(&r.errors), ["io_error"]);
    assert!(r.errors[0].message.contains("missing.yaml"));
    assert!(r.errors[0].location.is_none());
}

// ------------------------------------------------------------ robustness

#[test]
fn large_inputs_stay_fast() {
    // Many declared tools and as many gate entries: no quadratic checks.
    let n = 15_000;
    let tools: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
    let src = format!(
        "{MIN}mcp:\n  servers:\n    - id: s\n      url: https://s.example.com\n      tools: [{}]\n      pricing:\n        tools: {{{}}}\nhuman_gates:\n  enabled: true\n  approver_pubkey: {DID_B}\n  require_approval_for: [{}]\n",
        tools.join(", "),
        tools
            .iter()
            .take(5_000)
            .map(|t| format!("{t}: 1"))
            .collect::<Vec<_>>()
            .join(", "),
        tools
            .iter()
            .map(|t| format!("T{}", &t[1..]))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let start = Instant::now();
    let v = ok(&src);
    assert_eq!(v.warnings.len(), n);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );

    // Many unknown keys: reporting stops at the cap, without suggestions for the rest.
    let keys: String = (0..20_000)
        .map(|i| format!("k{i}_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx: 1\n"))
        .collect();
    let start = Instant::now();
    let r = rejected(&format!("{MIN}{keys}"));
    assert_eq!(r.errors.len(), 101);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
}

/// Every truncation and many small mutations of the full example must give
/// an answer, never a panic; rejections always carry located errors.
#[test]
fn truncations_and_mutations_never_panic() {
    let example = doc_example();
    let check = |src: &str| {
        if let Err(r) = parse(src) {
            assert!(!r.errors.is_empty());
            for e in &r.errors {
                assert!(e.location.is_some(), "{e}");
                let _ = e.to_string();
            }
        }
    };
    for (i, _) in example.char_indices() {
        check(&example[..i]);
    }
    let specials = [
        ":", "-", "[", "]", "{", "}", "&a", "*a", "!", "|", ">", "'", "\"", "#", "%", "@", "\n",
        "\t", " ", "?", ",", "~", "<<", "\u{0}", "\u{feff}",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let boundaries: Vec<usize> = example.char_indices().map(|(i, _)| i).collect();
    for _ in 0..3_000 {
        let mut src = example.clone();
        for _ in 0..1 + next() % 3 {
            let at = boundaries[(next() as usize) % boundaries.len()].min(src.len());
            if !src.is_char_boundary(at) {
                continue;
            }
            let s = specials[(next() as usize) % specials.len()];
            if next() % 2 == 0 {
                src.insert_str(at, s);
            } else {
                let end = src[at..]
                    .char_indices()
                    .nth(1)
                    .map_or(src.len(), |(j, _)| at + j);
                src.replace_range(at..end, s);
            }
        }
        check(&src);
    }
}

// ---------------------------------------------------------- stdio servers

#[test]
fn stdio_servers_are_checked() {
    use constle_manifest::McpTransport;
    let env = |name: &str| (name == "GH_PAT").then(|| "ghp_secret".to_string());
    let src = with(
        "mcp:
  servers:
    - id: git
      command: [mcp-server-git, --repository, .]
      workdir: ./git-work
      env_secret_refs: {GITHUB_TOKEN: GH_PAT}
      network:
        allowed_hosts: [api.github.com]
      tools: [git_log]
    - id: plain
      command: [server]
      tools: [t]
",
    );
    let v = parse_str(&src, Path::new("/p/agent.yaml"), &env).unwrap();
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let servers = &v.manifest.mcp.servers;
    let McpTransport::Stdio(git) = &servers[0].transport else {
        panic!("{:?}", servers[0].transport);
    };
    assert_eq!(git.command, ["mcp-server-git", "--repository", "."]);
    assert_eq!(git.workdir.as_deref(), Some(Path::new("/p/git-work")));
    assert_eq!(
        git.env_secret_refs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
        [("GITHUB_TOKEN", "GH_PAT")]
    );
    assert_eq!(git.allowed_hosts, ["api.github.com"]);
    assert!(servers[0].url().is_none());
    let McpTransport::Stdio(plain) = &servers[1].transport else {
        panic!("{:?}", servers[1].transport);
    };
    assert_eq!(plain.workdir, None);
    assert!(plain.env_secret_refs.is_empty() && plain.allowed_hosts.is_empty());

    // A host variable unset where validate runs is warned about, by name.
    let v = ok(&src);
    assert_eq!(codes(&v.warnings), ["env_secret_ref_unset"]);
    assert!(v.warnings[0].message.contains("GH_PAT"));
}

#[test]
fn stdio_server_mistakes() {
    let src = with(
        "mcp:
  servers:
    - id: both
      url: https://a.example.com/mcp
      command: [x]
      tools: [t]
    - id: neither
      tools: [t]
    - id: url-extras
      url: https://a.example.com/mcp
      workdir: ./w
      env_secret_refs: {A: B}
      network: {allowed_hosts: []}
      tools: [t]
    - id: hosts
      command: [x]
      network:
        allowed_hosts: [API.example.com]
      tools: [t]
    - id: bad
      command: []
      workdir: .
      env_secret_refs: {\"A-B\": C, D: \"1x\"}
      network: {egress: none}
      tools: [t]
    - id: shared
      command: [x]
      workdir: ./work/server
      tools: [t]
",
    );
    assert_eq!(
        errors(&src),
        [
            ("url_and_command", 8, 7),
            ("missing_field", 10, 7),
            ("stdio_field_on_url_server", 14, 7),
            ("stdio_field_on_url_server", 15, 7),
            ("stdio_field_on_url_server", 16, 7),
            ("invalid_hostname", 21, 25),
            ("invalid_command", 24, 16),
            ("workdir_shared", 25, 16),
            ("invalid_env_name", 26, 25),
            ("invalid_env_name", 26, 38),
            ("unknown_field", 27, 17),
            ("workdir_shared", 31, 16),
        ]
    );
    let r = rejected(&with(
        "mcp:\n  servers:\n    - id: s\n      command: [x]\n      headers:\n        - {name: X-Key, value_secret_ref: K}\n      tools: [t]\n",
    ));
    assert_eq!(at(&r.errors), [("headers_on_stdio_server", 8, 7)]);
    let r = rejected(&with(
        "mcp:\n  servers:\n    - id: s\n      command: [x]\n      env_secret_refs: {https_proxy: P, CONSTLE_X: Q}\n      tools: [t]\n",
    ));
    assert_eq!(
        at(&r.errors),
        [("reserved_env_name", 8, 25), ("reserved_env_name", 8, 41)]
    );
}

const KEY_A: &str = "did:key:z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw";
const KEY_B: &str = "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp";

/// An Agentfile gating `pay` with these `human_gates` lines added.
fn gated(lines: &str) -> String {
    format!(
        "name: a\nsandbox:\n  command: [x]\nmcp:\n  servers:\n    - id: books\n      url: https://books.example.com/mcp\n      tools: [pay]\nhuman_gates:\n  enabled: true\n  require_approval_for: [pay]\n{lines}"
    )
}

#[test]
fn several_approvers_and_a_threshold() {
    let two = format!(
        "  approvers:\n    - {{did: {KEY_A}, label: alice}}\n    - {{did: {KEY_B}, label: bob}}\n  threshold: 2\n  terminal_approves: true\n"
    );
    let listed = |src: &str| {
        let quorum = ok(&gated(src)).manifest.human_gates.quorum.unwrap();
        match quorum.source {
            QuorumSource::Listed {
                approvers,
                threshold,
            } => (approvers, threshold, quorum.terminal_approves),
            QuorumSource::Set(set) => panic!("listed, not {set:?}"),
        }
    };
    let (approvers, threshold, terminal) = listed(&two);
    assert_eq!((threshold, terminal), (2, true));
    let labels: Vec<&str> = approvers.iter().map(|a| a.label.as_str()).collect();
    assert_eq!(labels, ["alice", "bob"]);
    // The threshold defaults to one.
    let one = format!("  approvers:\n    - {{did: {KEY_A}, label: alice}}\n");
    assert_eq!(listed(&one).1, 1);
    // Or a signed, versioned set, its directory resolved against the Agentfile's.
    let pin = format!("sha256:{}", "ab".repeat(32));
    let set = format!("  approver_set: {{dir: ./approvers, pin: {pin}}}\n");
    let quorum = ok(&gated(&set)).manifest.human_gates.quorum.unwrap();
    let QuorumSource::Set(set) = quorum.source else {
        panic!("a set");
    };
    assert_eq!(set.pin, pin);
    assert!(set.dir.ends_with("approvers"), "{set:?}");
}

#[test]
fn a_quorum_that_cannot_work_is_refused() {
    let pin = format!("sha256:{}", "0".repeat(64));
    let cases = [
        (
            format!(
                "  approver_pubkey: {KEY_A}\n  approvers:\n    - {{did: {KEY_B}, label: bob}}\n"
            ),
            "approvers_conflict",
        ),
        (
            format!("  approver_pubkey: {KEY_A}\n  threshold: 1\n"),
            "quorum_without_approvers",
        ),
        (
            format!("  approvers:\n    - {{did: {KEY_A}, label: alice}}\n  threshold: 2\n"),
            "out_of_range",
        ),
        (
            format!("  approvers:\n    - {{did: {KEY_A}, label: alice}}\n  threshold: 0\n"),
            "out_of_range",
        ),
        (
            format!(
                "  approvers:\n    - {{did: {KEY_A}, label: alice}}\n    - {{did: {KEY_A}, label: bob}}\n"
            ),
            "duplicate_approver",
        ),
        (
            format!(
                "  approvers:\n    - {{did: {KEY_A}, label: alice}}\n    - {{did: {KEY_B}, label: alice}}\n"
            ),
            "duplicate_approver",
        ),
        (
            format!("  approvers:\n    - {{did: {KEY_A}, label: \" alice\"}}\n"),
            "invalid_label",
        ),
        ("  approvers: []\n".to_owned(), "out_of_range"),
        (
            format!(
                "  approver_set: {{dir: ./a, pin: {pin}}}\n  approvers:\n    - {{did: {KEY_A}, label: a}}\n"
            ),
            "approvers_conflict",
        ),
        (
            format!("  approver_set: {{dir: ./a, pin: {pin}}}\n  threshold: 1\n"),
            "approvers_conflict",
        ),
        (
            "  approver_set: {dir: ./a, pin: sha256:ABC}\n".to_owned(),
            "invalid_pin",
        ),
        (format!("  approver_set: {{pin: {pin}}}\n"), "missing_field"),
        (
            "  approvers:\n    - {label: alice}\n".to_owned(),
            "missing_field",
        ),
    ];
    for (lines, code) in cases {
        assert_eq!(codes(&rejected(&gated(&lines)).errors), [code], "{lines}");
    }
}

#[test]
fn the_policy_digest_is_of_the_exact_text() {
    let src = gated(&format!("  approver_pubkey: {KEY_A}\n"));
    let digest = ok(&src).manifest.policy_digest;
    assert_eq!(digest, constle_manifest::PolicyDigest::of(src.as_bytes()));
    assert_ne!(
        digest,
        ok(&format!("{src}# a comment\n")).manifest.policy_digest
    );
}

const WITNESS_KEY: &str =
    "witness.example.org/w1+2ce32234+BD1AF8PoQ4lakrcKp00bfrycmCzPLsSWjMDNVfEq9GYM";

#[test]
fn audit_defaults_and_witnesses() {
    let audit = ok(MIN).manifest.audit;
    assert_eq!(audit.deployment, "constle.invalid");
    assert_eq!(
        (
            audit.checkpoint_every_entries,
            audit.checkpoint_every_seconds
        ),
        (256, 60)
    );
    assert!(audit.witnesses.is_empty());

    let src = format!(
        "{MIN}identity:\n  did: {DID_A}\naudit:\n  deployment: ci.example.com\n  checkpoint_every_entries: 10\n  checkpoint_every_seconds: 5\n  witnesses:\n    - url: http://192.0.2.10:7710\n      key: {WITNESS_KEY}\n  witness_quorum_required: true\n"
    );
    let audit = ok(&src).manifest.audit;
    assert_eq!(audit.deployment, "ci.example.com");
    assert_eq!(audit.witnesses[0].name(), "witness.example.org/w1");
    assert_eq!(audit.witnesses[0].url.as_str(), "http://192.0.2.10:7710");
    assert_eq!(
        (audit.witness_quorum, audit.witness_quorum_required),
        (1, true)
    );
}

#[test]
fn audit_mistakes_each_have_a_code() {
    let id = format!("identity:\n  did: {DID_A}\n");
    let witness = format!("    - url: http://192.0.2.10:7710\n      key: {WITNESS_KEY}\n");
    let cases = [
        (
            format!("{MIN}{id}audit:\n  deployment: CI.example.com\n"),
            "invalid_deployment",
        ),
        (
            format!("{MIN}{id}audit:\n  deployment: a..b\n"),
            "invalid_deployment",
        ),
        (
            format!("{MIN}{id}audit:\n  checkpoint_every_entries: 0\n"),
            "out_of_range",
        ),
        (
            format!("{MIN}{id}audit:\n  checkpoint_every_seconds: 86401\n"),
            "out_of_range",
        ),
        (
            format!("{MIN}{id}audit:\n  witness_quorum: 1\n"),
            "out_of_range",
        ),
        (
            format!("{MIN}{id}audit:\n  witness_quorum_required: true\n"),
            "quorum_without_witnesses",
        ),
        (
            format!("{MIN}audit:\n  deployment: ci.example.com\n  witnesses:\n{witness}"),
            "witnesses_require_identity",
        ),
        (
            format!("{MIN}{id}audit:\n  witnesses:\n{witness}"),
            "witnesses_require_deployment",
        ),
        (
            format!("{MIN}{id}audit:\n  deployment: d.example\n  witnesses:\n{witness}{witness}"),
            "duplicate_witness",
        ),
        (
            format!(
                "{MIN}{id}audit:\n  deployment: d.example\n  witness_quorum: 2\n  witnesses:\n{witness}"
            ),
            "out_of_range",
        ),
        (
            format!(
                "{MIN}{id}audit:\n  deployment: d.example\n  witnesses:\n    - url: http://192.0.2.10:7710\n      key: w1+2ce32234+AQ==\n"
            ),
            "invalid_witness_key",
        ),
        (
            // Well shaped, but its key ID is not the one name and key give.
            format!(
                "{MIN}{id}audit:\n  deployment: d.example\n  witnesses:\n    - url: http://192.0.2.10:7710\n      key: {}\n",
                WITNESS_KEY.replace("+2ce32234+", "+2ce32235+")
            ),
            "invalid_witness_key",
        ),
        (
            // Another name for the same key: the key ID no longer matches.
            format!(
                "{MIN}{id}audit:\n  deployment: d.example\n  witnesses:\n    - url: http://192.0.2.10:7710\n      key: {}\n",
                WITNESS_KEY.replace("/w1+", "/w2+")
            ),
            "invalid_witness_key",
        ),
        (
            format!(
                "{MIN}{id}audit:\n  deployment: d.example\n  witnesses:\n    - url: ftp://192.0.2.10\n      key: {WITNESS_KEY}\n"
            ),
            "invalid_url",
        ),
        (
            format!(
                "{MIN}{id}audit:\n  deployment: d.example\n  witnesses:\n    - key: {WITNESS_KEY}\n"
            ),
            "missing_field",
        ),
    ];
    for (src, code) in &cases {
        assert_eq!(codes(&rejected(src).errors), [*code], "{src}");
    }
}

#[test]
fn a_witness_url_with_a_secret_is_warned_about_and_never_shown() {
    let src = format!(
        "{MIN}identity:\n  did: {DID_A}\naudit:\n  deployment: d.example\n  witnesses:\n    - url: http://192.0.2.10:7710/?token={MARKER}\n      key: {WITNESS_KEY}\n"
    );
    let v = ok(&src);
    assert_eq!(codes(&v.warnings), ["url_carries_secret"]);
    assert_never_shown(&v.warnings, "", &src);
}

fn tmpfs_src(body: &str) -> String {
    let body: String = body.lines().map(|l| format!("    {l}\n")).collect();
    format!("{MIN}  tmpfs:\n{body}")
}

#[test]
fn tmpfs_sizes_are_written_as_memory_is() {
    let t = ok(&tmpfs_src("tmp: 2g\nhome: 512m\nshm: 1m"))
        .manifest
        .sandbox
        .tmpfs;
    assert_eq!(
        (t.tmp, t.home, t.shm),
        (Some(2 << 30), Some(512 << 20), Some(1 << 20))
    );
    let silent = ok(MIN).manifest.sandbox.tmpfs;
    assert_eq!((silent.tmp, silent.home, silent.shm), (None, None, None));
    let only = ok(&tmpfs_src("shm: 256m")).manifest.sandbox.tmpfs;
    assert_eq!((only.tmp, only.shm), (None, Some(256 << 20)));
    for (text, help) in [
        ("512k", "write at least 1m"),
        ("1.5g", "write 1536m"),
        ("2GB", "write 2g;"),
        ("lots", "e.g. 512m or 2g"),
    ] {
        let r = rejected(&tmpfs_src(&format!("tmp: {text}")));
        assert_eq!(at(&r.errors), [("invalid_tmpfs", 5, 10)], "{text}");
        assert!(
            r.errors[0].message.starts_with("size "),
            "{}",
            r.errors[0].message
        );
        assert!(
            r.errors[0].help.as_ref().unwrap().contains(help),
            "{text}: {r}"
        );
    }
    let r = rejected(&tmpfs_src("var: 1g"));
    assert_eq!(at(&r.errors), [("unknown_field", 5, 5)]);
}

// --------------------------------------------------------------------- llm

/// A provider `id` of `api` with one model `m`, indented for `llm.providers`.
fn provider(id: &str, api: &str) -> String {
    let host = id.to_ascii_lowercase().replace('_', "-");
    format!(
        "    - id: {id}
      api: {api}
      url: https://{host}.example.com/v1
      key_secret_ref: KEY
      models:
        - name: m
          input_usd_per_mtok: 1
          output_usd_per_mtok: 2
"
    )
}

fn llm(providers: &[String]) -> String {
    with(&format!("llm:\n  providers:\n{}", providers.concat()))
}

fn key_env(name: &str) -> Option<String> {
    (name == "KEY").then(|| "sk-secret".to_string())
}

#[track_caller]
fn llm_ok(src: &str) -> Validated {
    match parse_str(src, Path::new("agent.yaml"), &key_env) {
        Ok(v) => v,
        Err(r) => panic!("rejected:\n{r}\n--- source ---\n{src}"),
    }
}

#[test]
fn llm_providers_get_defaults() {
    let v = llm_ok(&llm(&[provider("oa", "openai")]));
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let p = &v.manifest.llm.providers[0];
    assert_eq!(p.api, LlmApi::OpenAi);
    assert_eq!(p.api.as_str(), "openai");
    assert_eq!(p.max_output_tokens, 8192);
    assert_eq!(p.key_secret_ref.as_str(), "KEY");
    let prices = p.model("m").unwrap().prices;
    assert_eq!((prices.input, prices.output), (1.into(), 2.into()));
    assert_eq!(
        (prices.cached_input, prices.cache_write),
        (1.into(), 1.into())
    );
    assert!(p.model("M").is_none());
    assert_eq!(v.manifest.llm.spending, Default::default());
    assert!(ok(MIN).manifest.llm.providers.is_empty());
    for api in LlmApi::ALL {
        let src = llm(&[provider("p", api.as_str())]);
        assert_eq!(llm_ok(&src).manifest.llm.providers[0].api, api);
    }
    // The key's variable unset here: a warning naming it, never a value.
    let v = ok(&llm(&[provider("oa", "openai")]));
    assert_eq!(at(&v.warnings), [("header_secret_unset", 9, 23)]);
    assert!(v.warnings[0].message.contains("KEY is not set"));
    let bad = |name: &str| (name == "KEY").then(|| "sk-secret\n".to_string());
    let v = parse_str(&llm(&[provider("oa", "openai")]), Path::new("a.yaml"), &bad).unwrap();
    assert_eq!(codes(&v.warnings), ["header_secret_invalid"]);
    assert!(!v.warnings[0].to_string().contains("sk-secret"));
}

#[test]
fn llm_provider_mistakes_each_have_a_code() {
    let src = llm(&[provider("a", "anthropic"), provider("a", "openai")]);
    assert_eq!(errors(&src), [("duplicate_provider_id", 14, 11)]);
    let src = llm(&[provider("my-p", "anthropic"), provider("my_p", "openai")]);
    assert_eq!(errors(&src), [("provider_id_collision", 14, 11)]);
    assert!(
        rejected(&src).errors[0]
            .message
            .contains("CONSTLE_LLM_MY_P_URL")
    );
    let src = llm(&[provider("Up", "openai")]);
    assert_eq!(errors(&src), [("invalid_provider_id", 6, 11)]);
    let src = llm(&[provider("a", "anthropc")]);
    assert_eq!(errors(&src), [("unknown_variant", 7, 12)]);
    assert!(
        rejected(&src).errors[0]
            .help
            .as_deref()
            .unwrap()
            .contains("did you mean `anthropic`?")
    );
    for (first, second) in [
        ("anthropic", "anthropic"),
        ("openai", "openai"),
        ("openai", "openai-compatible"),
        ("openai-compatible", "openai-compatible"),
    ] {
        let src = llm(&[provider("a", first), provider("b", second)]);
        assert_eq!(
            errors(&src),
            [("duplicate_provider_api", 15, 12)],
            "{first} {second}"
        );
    }
    let src = llm(&[
        provider("a", "anthropic"),
        provider("b", "openai-compatible"),
    ]);
    assert_eq!(llm_ok(&src).manifest.llm.providers.len(), 2);
    let src =
        llm(&[provider("a", "openai").replace("https://a.example.com", "http://a.example.com")]);
    assert_eq!(errors(&src), [("insecure_url", 8, 12)]);
    let src = llm(&[provider("a", "openai").replace("KEY", "1KEY")]);
    assert_eq!(errors(&src), [("invalid_env_name", 9, 23)]);
    let missing = "    - id: a\n      api: openai\n      url: https://a.example.com\n      key_secret_ref: K\n".to_string();
    let r = rejected(&llm(&[missing]));
    assert_eq!(codes(&r.errors), ["missing_field"]);
    assert!(r.errors[0].message.contains("llm.providers[].models"));
}

#[test]
fn llm_models_and_their_limits_are_checked() {
    let p = provider("a", "openai");
    let src = llm(&[p.replace("      models:\n        - name: m\n          input_usd_per_mtok: 1\n          output_usd_per_mtok: 2\n", "      models: []\n")]);
    assert_eq!(errors(&src), [("empty_models", 10, 15)]);
    let twice = format!(
        "{p}        - name: m\n          input_usd_per_mtok: 1\n          output_usd_per_mtok: 2\n"
    );
    assert_eq!(errors(&llm(&[twice])), [("duplicate_model", 14, 17)]);
    for bad in ["\"a b\"", "\"\"", &"m".repeat(129), "\"é\""] {
        let src = llm(&[p.replace("name: m", &format!("name: {bad}"))]);
        assert_eq!(
            codes(&rejected(&src).errors),
            ["invalid_model_name"],
            "{bad}"
        );
    }
    let src = llm(&[p.replace("name: m", &format!("name: {}", "m".repeat(128)))]);
    llm_ok(&src);
    let src = llm(&[p.replace("          output_usd_per_mtok: 2\n", "")]);
    let r = rejected(&src);
    assert_eq!(codes(&r.errors), ["missing_field"]);
    assert!(r.errors[0].message.contains("output_usd_per_mtok"));
    let src = llm(&[p.replace("output_usd_per_mtok: 2", "output_usd_per_mtok: -2")]);
    assert_eq!(errors(&src), [("invalid_amount", 13, 32)]);
    let src = llm(&[p.replace("input_usd_per_mtok: 1", "input_usd_per_mtok: \"3.00\"\n          cached_input_usd_per_mtok: 0.3\n          cache_write_usd_per_mtok: 1e3")]);
    assert_eq!(errors(&src), [("invalid_amount", 14, 37)]);
    let src = llm(&[p.replace(
        "input_usd_per_mtok: 1",
        "input_usd_per_mtok: 1\n          cached_input_usd_per_mtok: 0.1",
    )]);
    let prices = llm_ok(&src).manifest.llm.providers[0].models[0].prices;
    assert_eq!(
        (prices.cached_input, prices.cache_write),
        (Decimal::new(1, 1), 1.into())
    );
    let with_max = |n: &str| {
        llm(&[p.replace(
            "key_secret_ref: KEY",
            &format!("key_secret_ref: KEY\n      max_output_tokens: {n}"),
        )])
    };
    assert_eq!(
        llm_ok(&with_max("1000000")).manifest.llm.providers[0].max_output_tokens,
        1_000_000
    );
    assert_eq!(
        llm_ok(&with_max("1")).manifest.llm.providers[0].max_output_tokens,
        1
    );
    for bad in ["0", "1000001"] {
        assert_eq!(errors(&with_max(bad)), [("out_of_range", 10, 26)], "{bad}");
    }
    let src = format!(
        "{}  spending:\n    max_per_run_usd: \"2.00\"\n    max_per_day_usd: 5\n    max_per_month_usd: x\n",
        llm(std::slice::from_ref(&p))
    );
    assert_eq!(errors(&src), [("invalid_amount", 17, 24)]);
    let src = format!(
        "{}  spending:\n    max_per_run_usd: \"2.00\"\n    ledger: redis://x\n",
        llm(std::slice::from_ref(&p))
    );
    assert_eq!(errors(&src), [("unknown_field", 16, 5)]);
}

#[test]
fn the_gates_variables_stay_out_of_sandbox_env() {
    let env_src = |api: &str, var: &str| {
        format!(
            "name: a\nsandbox:\n  command: [x]\n  env:\n    {var}: x\nllm:\n  providers:\n{}",
            provider("p", api)
        )
    };
    for (api, var) in [
        ("anthropic", "ANTHROPIC_BASE_URL"),
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("anthropic", "ANTHROPIC_AUTH_TOKEN"),
        ("anthropic", "anthropic_api_key"),
        ("openai", "OPENAI_BASE_URL"),
        ("openai", "OPENAI_API_KEY"),
        ("openai", "CODEX_API_KEY"),
        ("openai-compatible", "OPENAI_API_KEY"),
        ("openai", "CONSTLE_LLM_P_URL"),
    ] {
        assert_eq!(
            errors(&env_src(api, var)),
            [("reserved_env_name", 5, 5)],
            "{api} {var}"
        );
    }
    // Only the declared API's variables, and none without a provider.
    for (api, var) in [
        ("anthropic", "OPENAI_API_KEY"),
        ("openai", "ANTHROPIC_API_KEY"),
        ("openai", "ANTHROPIC_AUTH_TOKEN"),
    ] {
        let v = parse_str(&env_src(api, var), Path::new("a.yaml"), &key_env);
        assert!(v.is_ok(), "{api} {var}");
    }
    ok(&with("").replace(
        "  command: [x]\n",
        "  command: [x]\n  env:\n    ANTHROPIC_API_KEY: x\n",
    ));
}

#[test]
fn a_provider_the_agent_can_reach_directly_is_warned_about() {
    let src = |network: &str| {
        format!(
            "name: a\nsandbox:\n  command: [x]\n  network:\n{network}llm:\n  providers:\n{}",
            provider("p", "openai")
        )
    };
    let v = llm_ok(&src(
        "    allowed_hosts: [p.example.com, other.example.com]\n",
    ));
    assert_eq!(at(&v.warnings), [("llm_host_allowed", 10, 12)]);
    assert!(
        v.warnings[0].message.contains("around the gate"),
        "{}",
        v.warnings[0]
    );
    assert!(
        v.warnings[0]
            .help
            .as_deref()
            .unwrap()
            .contains("CONSTLE_LLM_P_URL")
    );
    let v = llm_ok(&src("    egress: open\n"));
    assert_eq!(codes(&v.warnings), ["egress_open", "llm_host_allowed"]);
    let v = llm_ok(&src("    allowed_hosts: [other.example.com]\n"));
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let v = llm_ok(&src("    egress: none\n"));
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let loopback =
        src("    egress: open\n").replace("https://p.example.com", "http://127.0.0.1:8080");
    assert_eq!(codes(&llm_ok(&loopback).warnings), ["egress_open"]);
}

#[test]
fn spend_caps_count_model_calls() {
    let src = format!(
        "{}spending:\n  max_per_run_usd: 1\n",
        llm(&[provider("p", "openai")])
    );
    assert!(llm_ok(&src).warnings.is_empty());
}
