//! What a client inside the sandbox needs to be told to use the proxy: the
//! proxy variables, and the opt-ins of clients that ignore them by default.

use std::collections::BTreeMap;
use std::net::SocketAddr;

/// What makes clients that ignore the proxy variables by default use them;
/// the declared environment may override each. Node goes through the proxy
/// only when told to: its `fetch` from Node 22.21 and 24.0 on, its `http`
/// and `https` modules from 22.21 and 24.5 on; older versions ignore the
/// variable.
pub const PROXY_OPT_INS: [(&str, &str); 1] = [("NODE_USE_ENV_PROXY", "1")];

/// `declared`, with the proxy variables pointing at `proxy` (which win)
/// and the opt-ins that make clients use them (which `declared` may
/// override): the environment of a sandbox whose network is the proxy.
pub fn client_env(
    proxy: SocketAddr,
    declared: impl Iterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = PROXY_OPT_INS
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into_iter()
        .collect();
    env.extend(declared);
    let url = format!("http://{proxy}");
    for name in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
        env.insert(name.into(), url.clone());
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.insert(name.into(), "127.0.0.1,localhost".into());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_variables_win_and_the_opt_ins_yield() {
        let proxy = SocketAddr::from(([127, 0, 0, 1], 3128));
        let declared = [
            ("HTTPS_PROXY", "http://elsewhere:1"),
            ("NODE_USE_ENV_PROXY", "0"),
            ("FOO", "bar"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let env = client_env(proxy, declared.into_iter());
        assert_eq!(env["HTTPS_PROXY"], "http://127.0.0.1:3128");
        assert_eq!(env["no_proxy"], "127.0.0.1,localhost");
        assert_eq!(env["NODE_USE_ENV_PROXY"], "0");
        assert_eq!(env["FOO"], "bar");
    }
}
