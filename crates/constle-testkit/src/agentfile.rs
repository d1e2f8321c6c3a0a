//! An Agentfile for a test, built in code instead of written as YAML text
//! inline, so that a test shows what it sets and nothing else.
//!
//! [`Agentfile::to_yaml`] writes the keys in the order docs/agentfile.md
//! lists them, every string as a JSON string (which YAML reads as the same
//! string), and a section the builder has no method for (`human_gates`,
//! `mcp`, `a2a`, …) as given to [`Agentfile::section`]. A test that means
//! to write malformed or unusual YAML writes it inline instead.

use std::fmt::Write as _;

/// An Agentfile: `name`, `identity.did`, `sandbox` and raw sections.
#[derive(Clone, Debug, Default)]
pub struct Agentfile {
    name: String,
    did: Option<String>,
    command: Vec<String>,
    workdir: Option<String>,
    env: Vec<(String, String)>,
    limits: Option<String>,
    egress: Option<String>,
    allowed_hosts: Option<Vec<String>>,
    sections: Vec<String>,
}

impl Agentfile {
    /// An Agentfile named `name` whose agent runs `true`.
    pub fn new(name: &str) -> Agentfile {
        Agentfile {
            name: name.to_owned(),
            command: vec!["true".to_owned()],
            ..Agentfile::default()
        }
    }

    /// `identity.did`.
    pub fn did(mut self, did: &str) -> Agentfile {
        self.did = Some(did.to_owned());
        self
    }

    /// `sandbox.command`.
    pub fn command<S: AsRef<str>>(mut self, argv: impl IntoIterator<Item = S>) -> Agentfile {
        self.command = argv.into_iter().map(|a| a.as_ref().to_owned()).collect();
        self
    }

    /// `sandbox.command: [sh, -c, script]`.
    pub fn sh(self, script: &str) -> Agentfile {
        self.command(["sh", "-c", script])
    }

    /// `sandbox.workdir`.
    pub fn workdir(mut self, workdir: &str) -> Agentfile {
        self.workdir = Some(workdir.to_owned());
        self
    }

    /// One variable of `sandbox.env`, after those given before.
    pub fn env(mut self, name: &str, value: &str) -> Agentfile {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// `sandbox.limits`: its mapping's lines as YAML, indented by four.
    pub fn limits(mut self, lines: &str) -> Agentfile {
        self.limits = Some(lines.to_owned());
        self
    }

    /// `sandbox.network.egress` (`none`, `open` or `restricted`).
    pub fn egress(mut self, egress: &str) -> Agentfile {
        self.egress = Some(egress.to_owned());
        self
    }

    /// `sandbox.network.allowed_hosts`.
    pub fn allowed_hosts<S: AsRef<str>>(mut self, hosts: impl IntoIterator<Item = S>) -> Agentfile {
        self.allowed_hosts = Some(hosts.into_iter().map(|h| h.as_ref().to_owned()).collect());
        self
    }

    /// A top-level section as YAML (`human_gates:\n  enabled: true\n…`),
    /// written after `sandbox` in the order given.
    pub fn section(mut self, yaml: &str) -> Agentfile {
        self.sections.push(yaml.to_owned());
        self
    }

    /// The Agentfile as YAML.
    pub fn to_yaml(&self) -> String {
        let mut y = format!("name: {}\n", quoted(&self.name));
        if let Some(did) = &self.did {
            let _ = write!(y, "identity:\n  did: {}\n", quoted(did));
        }
        let _ = write!(y, "sandbox:\n  command: {}\n", list(&self.command));
        if let Some(workdir) = &self.workdir {
            let _ = writeln!(y, "  workdir: {}", quoted(workdir));
        }
        if !self.env.is_empty() {
            y.push_str("  env:\n");
            for (name, value) in &self.env {
                let _ = writeln!(y, "    {name}: {}", quoted(value));
            }
        }
        if let Some(limits) = &self.limits {
            let _ = write!(y, "  limits:\n{limits}");
        }
        if self.egress.is_some() || self.allowed_hosts.is_some() {
            y.push_str("  network:\n");
        }
        if let Some(egress) = &self.egress {
            let _ = writeln!(y, "    egress: {egress}");
        }
        if let Some(hosts) = &self.allowed_hosts {
            let _ = writeln!(y, "    allowed_hosts: {}", list(hosts));
        }
        for section in &self.sections {
            y.push_str(section);
        }
        y
    }
}

/// `s` as a JSON string: a YAML scalar that is exactly `s`.
fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// A YAML flow sequence of quoted strings.
fn list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| quoted(i)).collect();
    format!("[{}]", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::Agentfile;

    #[test]
    fn writes_what_was_set_in_the_documented_order() {
        let yaml = Agentfile::new("test-agent")
            .did("did:key:z6Mk")
            .sh("echo \"hi\"")
            .workdir("./work")
            .env("A", "yes")
            .allowed_hosts(["api.groq.com"])
            .section("audit:\n  deployment: ci.example.com\n")
            .to_yaml();
        assert_eq!(
            yaml,
            "name: \"test-agent\"\nidentity:\n  did: \"did:key:z6Mk\"\nsandbox:\n  command: [\"sh\", \"-c\", \"echo \\\"hi\\\"\"]\n  workdir: \"./work\"\n  env:\n    A: \"yes\"\n  network:\n    allowed_hosts: [\"api.groq.com\"]\naudit:\n  deployment: ci.example.com\n"
        );
        assert_eq!(
            Agentfile::new("a").egress("none").to_yaml(),
            "name: \"a\"\nsandbox:\n  command: [\"true\"]\n  network:\n    egress: none\n"
        );
    }
}
