//! What can stop `constle kube` from rendering: an input the cluster would
//! refuse, or output that would not read back as what was built.

/// Why the objects were not rendered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubeError {
    /// A name that is not a DNS-1123 label, so not a Kubernetes object name.
    #[error(
        "{what} {value:?} is not a DNS-1123 label: use 1 to {max} lowercase letters, digits and '-', starting and ending with a letter or digit"
    )]
    NotALabel {
        /// Which input (`--name`, `--namespace`, …).
        what: &'static str,
        /// What was given.
        value: String,
        /// The longest the name may be.
        max: usize,
    },
    /// A CIDR that does not parse, or has host bits set.
    #[error("{what} {value:?} is not a CIDR: {reason}")]
    NotACidr {
        /// Which flag.
        what: &'static str,
        /// What was given.
        value: String,
        /// What is wrong, and what to write instead.
        reason: String,
    },
    /// An input that would make an invalid object (an empty image name, a
    /// seccomp profile path Kubernetes refuses).
    #[error("{what} {value:?} {reason}")]
    Invalid {
        /// Which flag.
        what: &'static str,
        /// What was given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The YAML emitter failed.
    #[error("cannot write the objects as YAML: {0}")]
    Yaml(String),
    /// What was written does not read back as the objects built: nothing is
    /// printed rather than something that would run another policy.
    #[error("the rendered YAML does not read back as the objects built: {0}")]
    RoundTrip(String),
}
