//! Names, labels and metadata shared by every object: one place decides
//! which labels select the agent's pods and which the Redis's, since the
//! NetworkPolicies depend on exactly those.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::options::Options;

/// The component an object belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// The agent's pod: Constle, Squid and the sandbox.
    Agent,
    /// The Redis the spend ledger and A2A replay store share.
    Redis,
}

impl Component {
    fn as_str(self) -> &'static str {
        match self {
            Component::Agent => "agent",
            Component::Redis => "redis",
        }
    }
}

/// The labels that select a component's pods.
pub fn labels(options: &Options, component: Component) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "constle".to_owned()),
        (
            "app.kubernetes.io/instance".to_owned(),
            options.name.as_str().to_owned(),
        ),
        (
            "app.kubernetes.io/component".to_owned(),
            component.as_str().to_owned(),
        ),
    ])
}

/// A selector matching exactly [`labels`].
pub fn selector(options: &Options, component: Component) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(options, component)),
        ..LabelSelector::default()
    }
}

/// An object's metadata: `name` (the agent's name, then `suffix`), the
/// namespace when given, and the component's labels.
pub fn object(options: &Options, component: Component, suffix: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(format!("{}{suffix}", options.name.as_str())),
        namespace: options.namespace.as_ref().map(|ns| ns.as_str().to_owned()),
        labels: Some(labels(options, component)),
        ..ObjectMeta::default()
    }
}

/// The Redis Service's name, which the Agentfile's Redis URLs name.
pub fn redis_service(options: &Options) -> String {
    format!("{}-redis", options.name.as_str())
}
