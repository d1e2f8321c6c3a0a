//! `constle kube FILE`: print the Kubernetes objects that run an Agentfile
//! as a Job per run (docs/kubernetes.md). The YAML alone goes to stdout;
//! the Agentfile's diagnostics and the notes on what the operator must
//! still provide go to stderr. Every refusal exits 2.

use anyhow::{Context as _, bail};
use constle_kube::{Cidr, Label, MAX_NAME_LEN, Options, Workload, parse_cidr};
use constle_manifest::{Diagnostic, Manifest, PolicyDigest, Severity};

use crate::Outcome;
use crate::cli::KubeArgs;
use crate::terminal::{self, Paint, Stream, escape};

/// Warnings about this machine's environment, which the pod does not use:
/// it gets the host variables from the Secret.
const LOCAL_ENV_WARNINGS: [&str; 4] = [
    "webhook_url_unset",
    "header_secret_unset",
    "header_secret_invalid",
    "env_secret_ref_unset",
];

pub fn run(args: &KubeArgs) -> anyhow::Result<Outcome> {
    let (manifest, text) = load(args)?;
    let options = options(args, &manifest)?;
    let rendered = constle_kube::render(&manifest, &text, &options)?;
    terminal::out(rendered.yaml.trim_end_matches('\n'));
    for note in &rendered.notes {
        let label = Stream::Err.paint(Paint::Yellow, "note:");
        terminal::err_line(&format!("{label} {}", escape(note)));
    }
    Ok(Outcome::Success)
}

/// The Agentfile, loaded as `constle validate` loads it, and its exact
/// text. Errors and warnings are printed on stderr; an invalid file is an
/// error.
fn load(args: &KubeArgs) -> anyhow::Result<(Manifest, String)> {
    let validated = match constle_manifest::load_file(&args.file, &|_| None) {
        Ok(validated) => validated,
        Err(rejected) if rejected.errors.iter().any(|e| e.code == "io_error") => {
            bail!("{}", rejected.errors[0].message)
        }
        Err(rejected) => {
            print(&rejected.errors, &rejected.warnings);
            bail!(
                "{} is invalid: `constle validate` it, then render it",
                escape(&args.file.display().to_string())
            )
        }
    };
    print(&[], &validated.warnings);
    // Read once more for the bytes the ConfigMap carries; the digest shows
    // they are the ones validated.
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read the Agentfile {}", args.file.display()))?;
    if PolicyDigest::of(text.as_bytes()) != validated.manifest.policy_digest {
        bail!(
            "{} changed while it was read; run constle kube again",
            args.file.display()
        );
    }
    Ok((validated.manifest, text))
}

fn print(errors: &[Diagnostic], warnings: &[Diagnostic]) {
    let shown = warnings
        .iter()
        .filter(|w| w.severity == Severity::Warning && !LOCAL_ENV_WARNINGS.contains(&w.code));
    super::validate::print_diagnostics(errors.iter().chain(shown), Stream::Err);
}

/// The options from the flags, each checked.
fn options(args: &KubeArgs, manifest: &Manifest) -> anyhow::Result<Options> {
    let name = match &args.name {
        Some(name) => Label::new("--name", name, MAX_NAME_LEN)?,
        None => Label::new("the agent's name", manifest.name.as_str(), MAX_NAME_LEN)
            .context("give the objects a name with --name")?,
    };
    let mut options = Options::new(name);
    if let Some(namespace) = &args.namespace {
        options.namespace = Some(Label::new("--namespace", namespace, 63)?);
    }
    if let Some(secret) = &args.secret {
        options.secret.clone_from(secret);
    }
    options.image.clone_from(&args.image);
    options.redis_image.clone_from(&args.redis_image);
    options.seccomp_profile.clone_from(&args.seccomp_profile);
    options.key_secret.clone_from(&args.key_secret);
    options.uid = i64::try_from(args.uid).context("--uid is too large")?;
    options.ttl_seconds = i32::try_from(args.ttl_seconds).context("--ttl-seconds is too large")?;
    options.cluster_cidrs = cidrs("--cluster-cidr", &args.cluster_cidrs)?;
    options.service_cidrs = cidrs("--service-cidr", &args.service_cidrs)?;
    options.workload = match (args.sandbox_template, args.pod) {
        (true, _) => Workload::SandboxTemplate,
        (false, true) => Workload::Pod,
        (false, false) => Workload::Job,
    };
    Ok(options)
}

fn cidrs(flag: &'static str, values: &[String]) -> anyhow::Result<Vec<Cidr>> {
    Ok(values
        .iter()
        .map(|v| parse_cidr(flag, v))
        .collect::<Result<_, _>>()?)
}
