//! What the end-to-end tests of runs with witnesses share: a real
//! `constle witness serve` in a network namespace of its own, and an agent
//! with an identity whose Agentfile lists witnesses.

use std::fs;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::{Arc, Mutex};

use constle_identity::{DidKey, Name};
use constle_testkit::TestHost;
use constle_tlog::{Deployment, LogKey, Origin, SignedCheckpoint, WitnessKey, verify_cosignature};

use super::{Case, constle_bin, report, text};

/// The agents' deployment: the origin's first part.
pub const DEPLOYMENT: &str = "ci.example.com";
/// Where each witness listens, in its namespace.
pub const PORT: u16 = 7710;

/// Reads what the `constle witness serve` `child` says on standard error as
/// it starts, up to its URL: its verifier key and the address it listens
/// on. All it says, then and later, is collected in `said`.
pub fn started(child: &mut Child, said: &Arc<Mutex<String>>) -> (WitnessKey, String) {
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut key, mut addr) = (None, None);
    for line in lines.by_ref() {
        let line = line.unwrap();
        said.lock().unwrap().push_str(&format!("{line}\n"));
        if let Some(vkey) = line.strip_prefix("constle witness: verifier key ") {
            key = Some(WitnessKey::from_vkey(vkey).unwrap());
        }
        if let Some(url) = line.split("add-checkpoint at http://").nth(1) {
            addr = Some(url.trim_end_matches("/add-checkpoint").to_owned());
            break;
        }
    }
    let sink = Arc::clone(said);
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().unwrap().push_str(&format!("{line}\n"));
        }
    });
    match (key, addr) {
        (Some(key), Some(addr)) => (key, addr),
        _ => panic!("the witness did not start:\n{}", said.lock().unwrap()),
    }
}

/// A `constle witness serve` in a namespace of its own; SIGKILLed when
/// dropped (or killed), its state kept in `home` for a restart.
pub struct NsWitness {
    host: TestHost,
    name: String,
    home: PathBuf,
    logs: PathBuf,
    key: Option<WitnessKey>,
    child: Option<Child>,
    stderr: Arc<Mutex<String>>,
}

impl NsWitness {
    /// A namespace for witness `name` of `log`, with its key made but not
    /// yet serving.
    pub fn new(case: &Case, name: &str, log: &LogKey) -> NsWitness {
        let host = TestHost::builder()
            .port(PORT)
            .without_listener()
            .start()
            .unwrap();
        let home = case.path(&format!("{name}-home"));
        let out = case
            .command(&["witness-keygen", "w"])
            .env("CONSTLE_HOME", &home)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", report(&out));
        let logs = case.path(&format!("{name}-logs.txt"));
        fs::write(&logs, format!("{}\n", log.vkey())).unwrap();
        NsWitness {
            host,
            name: name.to_owned(),
            home,
            logs,
            key: None,
            child: None,
            stderr: Arc::default(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}:{PORT}", self.host.ipv4())
    }

    /// Starts serving; returns once it listens.
    pub fn serve(&mut self) -> &mut NsWitness {
        let listen = format!("{}:{PORT}", self.host.ipv4());
        let mut child = self
            .host
            .command(constle_bin())
            .unwrap()
            .args(["witness", "serve", "--key", "w", "--name", &self.name])
            .arg("--logs")
            .arg(&self.logs)
            .args(["--listen", &listen])
            .env("CONSTLE_HOME", &self.home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        self.key = Some(started(&mut child, &self.stderr).0);
        self.child = Some(child);
        self
    }

    pub fn key(&self) -> &WitnessKey {
        self.key.as_ref().expect("the witness has served once")
    }

    /// SIGKILL, at once.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// The Agentfile's list entry for this witness.
    pub fn entry(&self) -> String {
        format!(
            "    - url: {}\n      key: {}\n",
            self.url(),
            self.key().vkey()
        )
    }

    pub fn said(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for NsWitness {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An agent with an identity, its log's key, and where its logs are.
pub struct Agent {
    pub case: Case,
    pub log: LogKey,
}

impl Agent {
    pub fn new() -> Agent {
        let case = Case::new();
        let did = case.keygen(&["keygen", "agent"]);
        let did = DidKey::parse(did.lines().last().unwrap()).unwrap();
        let origin = Origin::new(
            &Deployment::new(DEPLOYMENT).unwrap(),
            &Name::new("test-agent").unwrap(),
        );
        Agent {
            log: LogKey::new(origin, &did),
            case,
        }
    }

    /// Writes the Agentfile: `command` in the sandbox without network,
    /// witnesses listed as their entries, `quorum`, `required`.
    pub fn agentfile(
        &self,
        command: &str,
        witnesses: &[String],
        quorum: usize,
        required: bool,
    ) -> PathBuf {
        let network = "  network:\n    egress: none\n";
        let audit = format!("witness_quorum: {quorum}\n  witness_quorum_required: {required}\n");
        self.agentfile_with(command, network, witnesses, &audit)
    }

    /// The Agentfile with `network` under `sandbox` and `audit`'s lines
    /// after the witnesses.
    pub fn agentfile_with(
        &self,
        command: &str,
        network: &str,
        witnesses: &[String],
        audit: &str,
    ) -> PathBuf {
        self.case.agentfile(&format!(
            "identity:\n  did: {}\nsandbox:\n  command: [sh, -c, {command:?}]\n{network}audit:\n  deployment: {DEPLOYMENT}\n  witnesses:\n{}  {audit}",
            self.log.did(),
            witnesses.concat(),
        ))
    }

    pub fn run(&self, agentfile: &Path) -> Output {
        self.case.run(&["run", agentfile.to_str().unwrap()])
    }

    /// The events named `name`, in order.
    pub fn events(&self, name: &str) -> Vec<serde_json::Value> {
        self.case.events(name)
    }

    /// `constle audit verify --agentfile` of the log, with the latest
    /// cosigned checkpoint as a copy kept elsewhere would hold it: it
    /// must verify; its `witnessed:` line.
    pub fn witnessed(&self, agentfile: &Path) -> String {
        let held = self.case.home().join("logs/test-agent.checkpoint");
        let out = self.case.run(&[
            "audit",
            "verify",
            &format!("--agentfile={}", agentfile.display()),
            &format!("--checkpoint={}", held.display()),
            self.case.log_file().to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", report(&out));
        let stdout = text(&out.stdout);
        let line = stdout.lines().find(|l| l.starts_with("  witnessed: "));
        line.unwrap_or_else(|| panic!("{stdout}")).to_owned()
    }

    /// Every `checkpoint_cosigned` verifies with `witness`'s key over the
    /// checkpoint its `checkpoint` entry names; returns their sizes.
    pub fn cosigned_by(&self, witness: &NsWitness) -> Vec<u64> {
        let notes: Vec<_> = self.events("checkpoint");
        self.events("checkpoint_cosigned")
            .into_iter()
            .filter(|e| e["witness"] == witness.name)
            .map(|e| {
                let size = e["size"].as_u64().unwrap();
                let note = notes.iter().find(|n| n["size"] == size).unwrap();
                let signed = SignedCheckpoint::parse(note["note"].as_str().unwrap().as_bytes());
                let checkpoint = signed.unwrap().verify(&self.log).unwrap();
                let line = e["cosignature"].as_str().unwrap();
                verify_cosignature(&checkpoint, witness.key(), line).unwrap();
                size
            })
            .collect()
    }

    pub fn triggers(&self) -> Vec<String> {
        self.events("checkpoint")
            .iter()
            .map(|e| e["trigger"].as_str().unwrap().to_owned())
            .collect()
    }
}
