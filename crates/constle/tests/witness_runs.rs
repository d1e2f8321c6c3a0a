//! `constle run` with witnesses: each a real `constle witness serve` in a
//! network namespace of its own (another machine, at a documentation
//! address), reached over the namespaces' links only. Checkpoints at the
//! start and end of every run, cosigned by a quorum; a witness down, killed
//! with SIGKILL and restarted, or shown a rewritten log; an idle run across
//! 00:00 UTC (under `faketime`) closing its day.

// Helpers outside `#[test]` functions report through panics too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::process::{Command, Stdio};

use constle_testkit::{HostsFile, TestHost, require_root};
use libtest_mimic::Arguments;

mod common;

use common::log::{read_entries, reseal};
use common::witnesses::{Agent, NsWitness};
use common::{constle_bin, e2e, e2e_when, report, text};
use constle_identity::{KeyKind, KeyStore, Name};

const TOKEN: &str = "M4RK3R-witness-token";
const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/invoice-processor/work/agent.py"
);

fn main() {
    let tests = vec![
        e2e(
            "two_of_two_witnesses_cosign_the_start_and_end_of_every_run",
            two_of_two,
        ),
        e2e(
            "a_past_rewritten_and_resigned_with_the_real_key_is_caught_by_what_the_witnesses_cosigned",
            rewritten,
        ),
        e2e(
            "two_of_three_with_one_down_and_one_killed_and_restarted_keeps_witnessing",
            two_of_three,
        ),
        e2e(
            "a_witness_down_leaves_the_run_going_unless_the_quorum_is_required",
            witness_down,
        ),
        e2e(
            "a_log_started_over_with_the_same_key_is_refused_by_its_witness",
            forked,
        ),
        e2e(
            "new_entries_during_a_run_are_checkpointed_while_it_runs",
            during,
        ),
        e2e_when(
            "an_idle_run_across_midnight_utc_closes_its_day_with_a_witnessed_checkpoint",
            |name| require_root(name, &["bwrap", "faketime"]),
            across_midnight,
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), tests).exit();
}

/// Two witnesses, both required: every checkpoint of two runs is cosigned
/// by both, the second run's from the size each cosigned in the first.
fn two_of_two() {
    let agent = Agent::new();
    let mut w1 = NsWitness::new(&agent.case, "w1.example.org", &agent.log);
    let mut w2 = NsWitness::new(&agent.case, "w2.example.org", &agent.log);
    let entries = [w1.serve().entry(), w2.serve().entry()];
    let agentfile = agent.agentfile("echo hello", &entries, 2, true);
    for _ in 0..2 {
        let out = agent.run(&agentfile);
        assert_eq!(out.status.code(), Some(0), "{}", report(&out));
        assert!(!text(&out.stderr).contains("warning"), "{}", report(&out));
    }
    assert_eq!(
        agent.triggers(),
        ["run_start", "run_end", "run_start", "run_end"]
    );
    let sizes: Vec<u64> = agent
        .events("checkpoint")
        .iter()
        .map(|e| e["size"].as_u64().unwrap())
        .collect();
    assert_eq!(agent.cosigned_by(&w1), sizes);
    assert_eq!(agent.cosigned_by(&w2), sizes);
    // The run's end is in the last checkpoint: run_finished is just before.
    let finished = agent.events("run_finished");
    assert_eq!(finished[1]["seq"].as_u64().unwrap() + 1, sizes[3]);

    let latest = fs::read_to_string(agent.case.home().join("logs/test-agent.checkpoint")).unwrap();
    let signature_lines = latest.lines().filter(|l| l.starts_with("— ")).count();
    assert_eq!(
        signature_lines, 3,
        "the agent's and both witnesses':\n{latest}"
    );
    assert!(latest.starts_with(&format!("{}\n{}\n", agent.log.origin(), sizes[3])));
    let after = agent.case.log().len() as u64 - sizes[3];
    assert_eq!(
        agent.witnessed(&agentfile),
        format!(
            "  witnessed: entries 0–{} by 2 of 2 witnesses (quorum 2); {after} entries after that not yet",
            sizes[3] - 1
        )
    );
    for w in [&w1, &w2] {
        assert!(
            w.said()
                .contains(&format!("witness: 200 {}", agent.log.origin())),
            "{}",
            w.said()
        );
    }
}

/// Three witnesses, two required: one never answers (its machine is up,
/// nothing listens), which is a warning and an entry; one is SIGKILLed
/// after the run and restarted, and from its state on disk cosigns the
/// next run's checkpoints as extensions of the ones it cosigned.
fn two_of_three() {
    let agent = Agent::new();
    let mut w1 = NsWitness::new(&agent.case, "w1.example.org", &agent.log);
    let mut w2 = NsWitness::new(&agent.case, "w2.example.org", &agent.log);
    let mut w3 = NsWitness::new(&agent.case, "w3.example.org", &agent.log);
    let entries = [w1.serve().entry(), w2.serve().entry(), w3.serve().entry()];
    w3.kill();
    let agentfile = agent.agentfile("echo hello", &entries, 2, true);
    let out = agent.run(&agentfile);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "constle: warning: witness w3.example.org ({}) did not cosign checkpoint",
            w3.url()
        )),
        "{stderr}"
    );
    let failed = agent.events("checkpoint_witness_failed");
    assert_eq!(failed.len(), 2, "at the run's start and end");
    assert!(
        failed
            .iter()
            .all(|f| f["witness"] == "w3.example.org" && f["url"] == w3.url())
    );

    w1.kill();
    w1.serve();
    let out = agent.run(&agentfile);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let sizes: Vec<u64> = agent
        .events("checkpoint")
        .iter()
        .map(|e| e["size"].as_u64().unwrap())
        .collect();
    assert_eq!(agent.cosigned_by(&w1), sizes);
    assert_eq!(agent.cosigned_by(&w2), sizes);
    assert!(agent.cosigned_by(&w3).is_empty());
}

/// A witness down: with the quorum not required the run goes on, warned;
/// with it required the agent never starts, and the run fails.
fn witness_down() {
    let agent = Agent::new();
    let mut w1 = NsWitness::new(&agent.case, "w1.example.org", &agent.log);
    // Its URL carries an access token, which nothing may show.
    let entry = [w1
        .serve()
        .entry()
        .replace(&w1.url(), &format!("{}/?token={TOKEN}", w1.url()))];
    let marker = agent.case.path("work/started");
    let command = "touch started";
    let agentfile = agent.agentfile(command, &entry, 1, false);
    // One run witnessed, then the witness is gone for the next.
    assert_eq!(agent.run(&agentfile).status.code(), Some(0));
    let witnessed = agent.events("checkpoint")[1]["size"].as_u64().unwrap();
    w1.kill();
    let out = agent.run(&agentfile);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    assert!(marker.exists());
    assert!(
        text(&out.stderr).contains(&format!(
            "witness w1.example.org ({}/?token=***) did not cosign",
            w1.url()
        )),
        "{}",
        report(&out)
    );
    assert_eq!(agent.events("checkpoint").len(), 4);
    assert_eq!(agent.events("checkpoint_cosigned").len(), 2);
    assert_eq!(agent.events("checkpoint_witness_failed").len(), 2);
    let after = agent.case.log().len() as u64 - witnessed;
    assert_eq!(
        agent.witnessed(&agentfile),
        format!(
            "  witnessed: entries 0–{} by 1 of 1 witness (quorum 1); {after} entries after that not yet",
            witnessed - 1
        )
    );
    let log = fs::read_to_string(agent.case.log_file()).unwrap();
    assert!(
        !log.contains(TOKEN) && !text(&out.stderr).contains(TOKEN),
        "{log}"
    );

    fs::remove_file(&marker).unwrap();
    let out = agent.run(&agent.agentfile(command, &entry, 1, true));
    assert_eq!(out.status.code(), Some(125), "{}", report(&out));
    assert!(!marker.exists(), "the agent started without its witness");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("cosigned by 0 of 1 witnesses"), "{stderr}");
    assert!(
        stderr.contains("the run stops rather than go on unwitnessed"),
        "{stderr}"
    );
    let missed = agent.events("checkpoint_quorum_missed");
    assert_eq!(missed[0]["cosigned"], 0);
    assert_eq!(missed[0]["quorum"], 1);
}

/// The key holder moves the log aside and starts a new chain with the same
/// key: the witness that cosigned the old one refuses every checkpoint of
/// the new (422), so with its quorum required the agent does not start.
fn forked() {
    let agent = Agent::new();
    let mut w1 = NsWitness::new(&agent.case, "w1.example.org", &agent.log);
    let entry = [w1.serve().entry()];
    let agentfile = agent.agentfile("echo hello", &entry, 1, true);
    let out = agent.run(&agentfile);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let logs = agent.case.home().join("logs");
    fs::rename(&logs, agent.case.path("old-logs")).unwrap();

    // A longer and a shorter new history: neither is an extension.
    for command in ["echo again; echo and again", "true"] {
        let out = agent.run(&agent.agentfile(command, &entry, 1, true));
        assert_eq!(out.status.code(), Some(125), "{}", report(&out));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("did not cosign") && stderr.contains("cosigned by 0 of 1"),
            "{stderr}"
        );
        assert!(agent.events("checkpoint_cosigned").is_empty());
        fs::remove_dir_all(&logs).unwrap();
    }
    let refused = w1.said();
    assert!(
        refused.contains("witness: 422") || refused.contains("witness: 409"),
        "{refused}"
    );
}

/// The example agent's requests are entries (the proxy's decisions); with
/// a checkpoint every 2 entries and the agent still running a few seconds
/// after them, a round happens during the run, between the first and the
/// last, and the witness cosigns it.
fn during() {
    let agent = Agent::new();
    let outside = TestHost::start().unwrap();
    let mut w1 = NsWitness::new(&agent.case, "w1.example.org", &agent.log);
    let entry = [w1.serve().entry()];
    fs::copy(EXAMPLE, agent.case.path("work/agent.py")).unwrap();
    let hosts = agent.case.path("hosts");
    HostsFile::new()
        .with(outside.ipv4(), "api.groq.com")
        .write(&hosts)
        .unwrap();
    let network = format!(
        "  env:\n    ALLOWED_ADDRESS: \"{}\"\n  network:\n    allowed_hosts: [api.groq.com]\n",
        outside.ipv4()
    );
    let audit = "checkpoint_every_entries: 2\n";
    let agentfile = agent.agentfile_with("python3 agent.py; sleep 3", &network, &entry, audit);
    let out = agent.case.run(&[
        "run",
        "--hosts-file",
        hosts.to_str().unwrap(),
        agentfile.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let triggers = agent.triggers();
    assert_eq!(
        triggers.first().map(String::as_str),
        Some("run_start"),
        "{triggers:?}"
    );
    assert_eq!(
        triggers.last().map(String::as_str),
        Some("run_end"),
        "{triggers:?}"
    );
    assert!(triggers.iter().any(|t| t == "entries"), "{triggers:?}");
    let sizes: Vec<u64> = agent
        .events("checkpoint")
        .iter()
        .map(|e| e["size"].as_u64().unwrap())
        .collect();
    assert_eq!(agent.cosigned_by(&w1), sizes);
    let last = sizes.last().unwrap();
    assert!(agent.witnessed(&agentfile).starts_with(&format!(
        "  witnessed: entries 0–{} by 1 of 1 witness (quorum 1); ",
        last - 1
    )),);
}

/// Two witnessed runs, then the key holder edits the first run's exit
/// status and re-signs the whole log with the agent's real key: it
/// verifies as a chain, but not against what the witnesses cosigned, and
/// `audit verify` says between which entries the histories part.
fn rewritten() {
    let agent = Agent::new();
    let mut w1 = NsWitness::new(&agent.case, "w1.example.org", &agent.log);
    let mut w2 = NsWitness::new(&agent.case, "w2.example.org", &agent.log);
    let entries = [w1.serve().entry(), w2.serve().entry()];
    let agentfile = agent.agentfile("exit 3", &entries, 2, true);
    for _ in 0..2 {
        assert_eq!(agent.run(&agentfile).status.code(), Some(3));
    }
    let sizes: Vec<u64> = agent
        .events("checkpoint")
        .iter()
        .map(|e| e["size"].as_u64().unwrap())
        .collect();
    let logs = agent.case.home().join("logs");
    let name = Name::new("test-agent").unwrap();
    let mut log = read_entries(&logs, &name);
    let first_end = log
        .iter()
        .position(|e| e["event"] == "run_finished")
        .unwrap();
    log[first_end]["exit_status"] = 0.into();
    let key = KeyStore::open(&agent.case.home())
        .unwrap()
        .find(KeyKind::Agent, agent.log.did())
        .unwrap();
    fs::remove_dir_all(&logs).unwrap();
    let files = reseal(&log, &logs, &name, key);
    let (code, said) = agent.case.audit_verify(&agentfile, &files[0]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("witnessed_history_rewritten"), "{said}");
    let range = format!(
        "the histories part at an entry in seq {}..{}",
        sizes[0],
        sizes[1] - 1
    );
    assert!(said.contains(&range), "{said}");
    assert!(first_end as u64 >= sizes[0] && (first_end as u64) < sizes[1]);
}

/// A run whose agent does nothing while 00:00 UTC passes: its clock (the
/// wall clock only, through libfaketime) starts at 23:59:56. The day is
/// closed by a `day_close` checkpoint of everything the day's file holds,
/// cosigned, though no entry was added since the run's first checkpoint.
fn across_midnight() {
    let agent = Agent::new();
    let mut w1 = NsWitness::new(&agent.case, "w1.example.org", &agent.log);
    let entries = [w1.serve().entry()];
    let agentfile = agent.agentfile("sleep 6", &entries, 1, false);
    let out = Command::new("faketime")
        .args(["--exclude-monotonic", "-f", "@2026-12-02 23:59:56"])
        .arg(constle_bin())
        .args(["run", agentfile.to_str().unwrap()])
        .env("CONSTLE_HOME", agent.case.home())
        .env("TZ", "UTC")
        .current_dir(agent.case.dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let day = |date: &str| -> Vec<serde_json::Value> {
        let file = agent
            .case
            .home()
            .join(format!("logs/test-agent-{date}.jsonl"));
        let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (before, after) = (day("2026-12-02"), day("2026-12-03"));
    let named = |entries: &[serde_json::Value], event: &str| -> Vec<serde_json::Value> {
        entries
            .iter()
            .filter(|e| e["event"] == event)
            .cloned()
            .collect()
    };
    let triggers: Vec<_> = [&before, &after]
        .iter()
        .flat_map(|d| named(d, "checkpoint"))
        .map(|e| e["trigger"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        triggers,
        ["run_start", "day_close", "run_end"],
        "{}",
        report(&out)
    );
    // The day's close is the new day's first entry and covers the whole
    // of the day before, the first round's own entries included.
    assert_eq!(after[0]["event"], "checkpoint", "{}", after[0]);
    assert_eq!(after[0]["trigger"], "day_close");
    assert_eq!(after[0]["size"].as_u64(), Some(before.len() as u64));
    let cosigned = named(&after, "checkpoint_cosigned");
    assert_eq!(cosigned[0]["size"], after[0]["size"], "{cosigned:?}");
    // And the two days verify as one log, witnessed.
    let files = ["2026-12-02", "2026-12-03"]
        .map(|d| agent.case.home().join(format!("logs/test-agent-{d}.jsonl")));
    let out = agent.case.run(&[
        "audit",
        "verify",
        &format!("--agentfile={}", agentfile.display()),
        files[0].to_str().unwrap(),
        files[1].to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
}
