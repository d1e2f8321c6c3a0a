//! The outer fence: NetworkPolicies around the agent's pod and the Redis.
//!
//! The agent's pod may send only:
//! - TCP 443 to public addresses: `0.0.0.0/0` and `::/0` except
//!   link-local (and so the cloud metadata addresses), private, CGNAT and
//!   unique-local ranges, and the cluster's own pod and service ranges;
//! - DNS (UDP and TCP 53) to the cluster's DNS pods (`k8s-app: kube-dns` in
//!   `kube-system`), the only resolver a pod uses; a DNS rule to
//!   `0.0.0.0/0` would let the pod query any resolver anywhere, and one
//!   under the same exceptions could not reach the cluster's;
//! - TCP 6379 to this agent's Redis pods.
//!
//! It receives nothing. The Redis receives only from the agent's pods, on
//! 6379, and sends nothing. Inside the pod, the agent itself reaches none of
//! this: its only way out is Constle's proxy and gates (the fence holds
//! if Constle's own sandbox does not).

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::meta::{self, Component};
use crate::options::Options;

/// Always denied, IPv4: link-local (metadata at
/// 169.254.169.254 included), private, CGNAT.
pub const DENIED_V4: [&str; 6] = [
    "169.254.0.0/16",
    "169.254.169.254/32",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
];
/// Always denied, IPv6: link-local, AWS's metadata address, unique-local.
pub const DENIED_V6: [&str; 3] = ["fe80::/10", "fd00:ec2::254/128", "fc00::/7"];
/// The Redis port.
pub const REDIS_PORT: i32 = 6379;

/// The agent pod's NetworkPolicy.
pub fn agent_policy(options: &Options) -> NetworkPolicy {
    NetworkPolicy {
        metadata: meta::object(options, Component::Agent, "-egress"),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(meta::selector(options, Component::Agent)),
            policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
            ingress: Some(Vec::new()),
            egress: Some(agent_egress(options)),
        }),
    }
}

/// The Redis's NetworkPolicy: in from the agent's pods on 6379, nothing out.
pub fn redis_policy(options: &Options) -> NetworkPolicy {
    NetworkPolicy {
        metadata: meta::object(options, Component::Redis, "-redis-ingress"),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(meta::selector(options, Component::Redis)),
            policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![pods(options, Component::Agent)]),
                ports: Some(vec![port("TCP", REDIS_PORT)]),
            }]),
            egress: Some(Vec::new()),
        }),
    }
}

/// The agent's egress rules (also a SandboxTemplate's `networkPolicy`).
pub fn agent_egress(options: &Options) -> Vec<NetworkPolicyEgressRule> {
    let cluster: Vec<IpNet> = options
        .cluster_cidrs
        .iter()
        .chain(&options.service_cidrs)
        .copied()
        .collect();
    let public = NetworkPolicyEgressRule {
        to: Some(vec![
            public_block("0.0.0.0/0", &DENIED_V4, &cluster, |n| {
                matches!(n, IpNet::V4(_))
            }),
            public_block("::/0", &DENIED_V6, &cluster, |n| matches!(n, IpNet::V6(_))),
        ]),
        ports: Some(vec![port("TCP", 443)]),
    };
    let dns = NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(match_labels("kubernetes.io/metadata.name", "kube-system")),
            pod_selector: Some(match_labels("k8s-app", "kube-dns")),
            ..NetworkPolicyPeer::default()
        }]),
        ports: Some(vec![port("UDP", 53), port("TCP", 53)]),
    };
    let redis = NetworkPolicyEgressRule {
        to: Some(vec![pods(options, Component::Redis)]),
        ports: Some(vec![port("TCP", REDIS_PORT)]),
    };
    vec![public, dns, redis]
}

/// `cidr` less `denied` and the cluster's ranges of the same family.
fn public_block(
    cidr: &str,
    denied: &[&str],
    cluster: &[IpNet],
    family: fn(&IpNet) -> bool,
) -> NetworkPolicyPeer {
    let except = denied
        .iter()
        .map(|s| (*s).to_owned())
        .chain(cluster.iter().filter(|n| family(n)).map(IpNet::to_string))
        .collect();
    NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.to_owned(),
            except: Some(except),
        }),
        ..NetworkPolicyPeer::default()
    }
}

/// This agent's pods of `component`, in the policy's namespace.
fn pods(options: &Options, component: Component) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(meta::selector(options, component)),
        ..NetworkPolicyPeer::default()
    }
}

fn match_labels(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some([(key.to_owned(), value.to_owned())].into()),
        ..LabelSelector::default()
    }
}

fn port(protocol: &str, number: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(number)),
        protocol: Some(protocol.to_owned()),
        ..NetworkPolicyPort::default()
    }
}
