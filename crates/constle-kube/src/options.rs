//! What the operator chooses beyond the Agentfile, checked before anything
//! is built: names are DNS-1123 labels, CIDRs parse and are canonical, the
//! seccomp profile is a relative path under the kubelet's seccomp root.

use ipnet::IpNet;

/// An address range, as `--cluster-cidr` and `--service-cidr` take it.
pub type Cidr = IpNet;

use crate::error::KubeError;

/// The image `--image` defaults to: the one docs/containers.md builds.
pub const DEFAULT_IMAGE: &str = "localhost/constle:latest";
/// The Secret `--secret` defaults to, beside `--name`: `<name>-secrets`.
pub const DEFAULT_SECRET_SUFFIX: &str = "-secrets";
/// The profile `--seccomp-profile` defaults to, relative to the kubelet's
/// seccomp root (`/var/lib/kubelet/seccomp/`): where an operator installs
/// `deploy/container/seccomp.json`.
pub const DEFAULT_SECCOMP_PROFILE: &str = "constle/seccomp.json";
/// The Redis image `--redis-image` defaults to: Debian-based like
/// Constle's own, and the major version the fleet tests run.
pub const DEFAULT_REDIS_IMAGE: &str = "docker.io/library/redis:7-bookworm";
/// The uid and gid `--uid` defaults to: the non-root user of the image
/// docs/containers.md builds. A uid of its own, outside the range of a
/// distribution's login users.
pub const DEFAULT_UID: i64 = 10001;
/// How long a finished Job (and its pod) is kept, by default: a day to read
/// its status and collect its log.
pub const DEFAULT_TTL_SECONDS: i32 = 86_400;

/// A DNS-1123 label: 1 to 63 of `a-z`, `0-9`, `-`, starting and ending
/// with a letter or digit. What Kubernetes requires of a namespace, and
/// (with room for suffixes) of the objects' names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label(String);

impl Label {
    /// Checks `value`, given as `what`, as a label of at most `max` bytes.
    pub fn new(what: &'static str, value: &str, max: usize) -> Result<Label, KubeError> {
        let edge_ok =
            |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let bytes = value.as_bytes();
        let ok = bytes.len() <= max
            && edge_ok(bytes.first())
            && edge_ok(bytes.last())
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
        match ok {
            true => Ok(Label(value.to_owned())),
            false => Err(KubeError::NotALabel {
                what,
                value: value.to_owned(),
                max,
            }),
        }
    }

    /// The label.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The longest `--name`: 63 less the longest suffix the objects add
/// (`-redis-ingress`), so every object's name and label value is a label.
pub const MAX_NAME_LEN: usize = 63 - "-redis-ingress".len();

/// Parses a canonical CIDR (`10.96.0.0/12`, `fd00:10::/108`): an address,
/// `/`, a prefix length, no host bits set. A CIDR with host bits is
/// refused rather than truncated: the operator meant some range, and the
/// message shows which one it would be.
pub fn parse_cidr(what: &'static str, value: &str) -> Result<IpNet, KubeError> {
    let err = |reason: String| KubeError::NotACidr {
        what,
        value: value.to_owned(),
        reason,
    };
    let net: IpNet = value.parse().map_err(|_| {
        err(
            "write an address, '/' and a prefix length, e.g. 10.244.0.0/16 or fd00:10:244::/56"
                .into(),
        )
    })?;
    if net.prefix_len() == 0 {
        return Err(err(
            "it is every address; name the cluster's own range".into()
        ));
    }
    if net.trunc() != net {
        return Err(err(format!(
            "it has host bits set; the range it is in is {}",
            net.trunc()
        )));
    }
    Ok(net)
}

/// Everything `constle kube` needs besides the Agentfile.
#[derive(Clone, Debug)]
pub struct Options {
    /// The objects' name and the `app.kubernetes.io/instance` label; at
    /// most [`MAX_NAME_LEN`].
    pub name: Label,
    /// The namespace, when one is to be written into the objects.
    pub namespace: Option<Label>,
    /// The image holding Constle, bubblewrap and Squid.
    pub image: String,
    /// The Secret holding the Agentfile's host variables, one key each.
    pub secret: String,
    /// The cluster's pod ranges, denied to the pod.
    pub cluster_cidrs: Vec<IpNet>,
    /// The cluster's service ranges, denied to the pod.
    pub service_cidrs: Vec<IpNet>,
    /// The Localhost seccomp profile, relative to the kubelet's seccomp root.
    pub seccomp_profile: String,
    /// The Redis image.
    pub redis_image: String,
    /// `ttlSecondsAfterFinished` of the Job.
    pub ttl_seconds: i32,
    /// What runs the agent's pod.
    pub workload: Workload,
    /// The uid and gid Constle runs as (and the pod's `fsGroup`): never 0.
    pub uid: i64,
    /// The Secret holding the agent's signing key under [`KEY_FILE`](crate::KEY_FILE),
    /// installed in the key store before the run; `None`: none installed.
    pub key_secret: Option<String>,
}

/// What carries the agent's pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Workload {
    /// A `batch/v1` Job: one run, never restarted (the default).
    #[default]
    Job,
    /// A bare `v1` Pod, for `podman kube play`, which plays Pods and
    /// Deployments but not Jobs.
    Pod,
    /// An agent-sandbox `SandboxTemplate`, carrying the fence in its own
    /// `networkPolicy`.
    SandboxTemplate,
}

impl Options {
    /// Options with every default, for the agent `name`.
    pub fn new(name: Label) -> Options {
        let secret = format!("{}{DEFAULT_SECRET_SUFFIX}", name.as_str());
        Options {
            name,
            namespace: None,
            image: DEFAULT_IMAGE.to_owned(),
            secret,
            cluster_cidrs: Vec::new(),
            service_cidrs: Vec::new(),
            seccomp_profile: DEFAULT_SECCOMP_PROFILE.to_owned(),
            redis_image: DEFAULT_REDIS_IMAGE.to_owned(),
            ttl_seconds: DEFAULT_TTL_SECONDS,
            workload: Workload::Job,
            uid: DEFAULT_UID,
            key_secret: None,
        }
    }

    /// Checks what the types do not: images, the Secret's name and the
    /// profile's path.
    pub fn check(&self) -> Result<(), KubeError> {
        for (what, image) in [
            ("--image", &self.image),
            ("--redis-image", &self.redis_image),
        ] {
            if image.is_empty() || image.bytes().any(|b| !b.is_ascii_graphic()) {
                return Err(invalid(
                    what,
                    image,
                    "is not an image name (empty, or spaces)",
                ));
            }
        }
        let secrets = std::iter::once(("--secret", &self.secret))
            .chain(self.key_secret.iter().map(|s| ("--key-secret", s)));
        for (what, secret) in secrets {
            Label::new(what, secret, 253).map_err(|_| {
                invalid(
                    what,
                    secret,
                    "is not a Secret name: lowercase letters, digits and '-'",
                )
            })?;
        }
        let profile = &self.seccomp_profile;
        let relative = !profile.is_empty()
            && !profile.starts_with('/')
            && profile
                .split('/')
                .all(|part| !part.is_empty() && part != "..");
        if !relative {
            return Err(invalid(
                "--seccomp-profile",
                profile,
                "must be a path relative to the kubelet's seccomp root, without '..', e.g. constle/seccomp.json",
            ));
        }
        if !(1..=i64::from(u32::MAX)).contains(&self.uid) {
            return Err(invalid(
                "--uid",
                &self.uid.to_string(),
                "must be a uid other than 0 (root)",
            ));
        }
        if self.ttl_seconds < 0 {
            return Err(invalid(
                "--ttl-seconds",
                &self.ttl_seconds.to_string(),
                "must be zero or more",
            ));
        }
        Ok(())
    }
}

fn invalid(what: &'static str, value: &str, reason: &'static str) -> KubeError {
    KubeError::Invalid {
        what,
        value: value.to_owned(),
        reason,
    }
}
