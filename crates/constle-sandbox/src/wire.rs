//! How the launcher tells `sandbox-init` about the relays: one
//! `--relay NAME,ADDRESS,SOCKET` argument pair per relay, before `--`.
//! The socket path comes last, so it may hold commas. `--stdio SOCKET`
//! names the socket the command's stdin and stdout connect to.

use std::ffi::OsString;
use std::net::SocketAddrV4;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

pub(crate) const RELAY_FLAG: &str = "--relay";
pub(crate) const STDIO_FLAG: &str = "--stdio";

pub(crate) fn encode_relay(name: &str, listen: SocketAddrV4, socket: &Path) -> OsString {
    let mut s = OsString::from(format!("{name},{listen},"));
    s.push(socket.as_os_str());
    s
}

/// A relay as `sandbox-init` receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InitRelay {
    pub name: String,
    pub listen: SocketAddrV4,
    pub socket: PathBuf,
}

pub(crate) fn decode_relay(arg: OsString) -> Option<InitRelay> {
    let bytes = arg.into_vec();
    let mut parts = bytes.splitn(3, |&b| b == b',');
    let name = std::str::from_utf8(parts.next()?).ok()?;
    let listen = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let socket = PathBuf::from(OsString::from_vec(parts.next()?.to_vec()));
    if !crate::spec::valid_relay_name(name) || !socket.is_absolute() {
        return None;
    }
    Some(InitRelay {
        name: name.to_owned(),
        listen,
        socket,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let relay = InitRelay {
            name: "mcp-accounting".into(),
            listen: "127.0.0.1:3129".parse().unwrap(),
            socket: "/run/constle/a,b.sock".into(),
        };
        let encoded = encode_relay(&relay.name, relay.listen, &relay.socket);
        assert_eq!(
            encoded,
            "mcp-accounting,127.0.0.1:3129,/run/constle/a,b.sock"
        );
        assert_eq!(decode_relay(encoded), Some(relay));
        for bad in [
            "",
            "proxy",
            "proxy,127.0.0.1:3128",
            "proxy,127.0.0.1,/s",
            "Proxy,127.0.0.1:3128,/s",
            "proxy,127.0.0.1:3128,relative",
            "proxy,[::1]:3128,/s",
        ] {
            assert_eq!(decode_relay(bad.into()), None, "{bad}");
        }
    }
}
