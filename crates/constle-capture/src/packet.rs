//! What the SYN watch reads from a raw socket: an IPv4 packet, or an IPv6
//! packet's TCP header with its destination beside it. Only a connection's
//! first segment (SYN without ACK) to the placeholder pool, on a port
//! other than 443, is kept.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use constle_dns::{PLACEHOLDER_IPV4, PLACEHOLDER_IPV6};

use crate::connect::PORT;

/// `IPPROTO_TCP`.
const TCP: u8 = 6;
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

/// A connection attempt to a placeholder on a port nothing listens on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) address: IpAddr,
    pub(crate) port: u16,
}

/// From an IPv4 raw socket's packet (IP header, then TCP).
pub(crate) fn ipv4(packet: &[u8]) -> Option<Refused> {
    let version_ihl = *packet.first()?;
    let header = usize::from(version_ihl & 0x0f) * 4;
    let fragment_offset = u16::from_be_bytes([*packet.get(6)?, *packet.get(7)?]) & 0x1fff;
    if version_ihl >> 4 != 4 || header < 20 || *packet.get(9)? != TCP || fragment_offset != 0 {
        return None;
    }
    let destination: [u8; 4] = packet.get(16..20)?.try_into().ok()?;
    refused(
        IpAddr::V4(Ipv4Addr::from(destination)),
        packet.get(header..)?,
    )
}

/// From an IPv6 raw socket's TCP header and the packet's destination.
pub(crate) fn ipv6(destination: Ipv6Addr, tcp: &[u8]) -> Option<Refused> {
    refused(IpAddr::V6(destination), tcp)
}

fn refused(address: IpAddr, tcp: &[u8]) -> Option<Refused> {
    let port = u16::from_be_bytes([*tcp.get(2)?, *tcp.get(3)?]);
    let flags = *tcp.get(13)?;
    (flags & (SYN | ACK) == SYN && port != PORT && in_pool(address))
        .then_some(Refused { address, port })
}

/// Whether `address` lies in a placeholder range, whether or not a name
/// has it yet.
fn in_pool(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => {
            let shift = 32 - u32::from(PLACEHOLDER_IPV4.1);
            u32::from(v4) >> shift == u32::from(PLACEHOLDER_IPV4.0) >> shift
        }
        IpAddr::V6(v6) => {
            let shift = 128 - u32::from(PLACEHOLDER_IPV6.1);
            u128::from(v6) >> shift == u128::from(PLACEHOLDER_IPV6.0) >> shift
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// A TCP header to `port` with `flags`.
    fn tcp(port: u16, flags: u8) -> Vec<u8> {
        let mut header = vec![0; 20];
        header[..2].copy_from_slice(&40000u16.to_be_bytes());
        header[2..4].copy_from_slice(&port.to_be_bytes());
        header[12] = 5 << 4;
        header[13] = flags;
        header
    }

    /// An IPv4 packet to `destination` holding `tcp`, with `options`
    /// bytes of IP options.
    fn packet(destination: [u8; 4], options: usize, tcp: &[u8]) -> Vec<u8> {
        let mut packet = vec![0; 20 + options];
        packet[0] = 0x40 | u8::try_from((20 + options) / 4).unwrap();
        packet[9] = TCP;
        packet[12..16].copy_from_slice(&[198, 18, 0, 9]);
        packet[16..20].copy_from_slice(&destination);
        packet.extend_from_slice(tcp);
        packet
    }

    const PLACEHOLDER: [u8; 4] = [198, 18, 0, 1];

    #[test]
    fn a_syn_to_a_placeholder_off_443_is_kept() {
        let got = ipv4(&packet(PLACEHOLDER, 0, &tcp(80, SYN)));
        let address = IpAddr::V4(PLACEHOLDER.into());
        assert_eq!(got, Some(Refused { address, port: 80 }));
        let with_options = ipv4(&packet([198, 19, 255, 254], 8, &tcp(22, SYN)));
        assert_eq!(with_options.map(|r| r.port), Some(22));
    }

    #[test]
    fn everything_else_is_ignored() {
        let syn80 = tcp(80, SYN);
        for (what, bytes) in [
            ("port 443", packet(PLACEHOLDER, 0, &tcp(443, SYN))),
            ("SYN ACK", packet(PLACEHOLDER, 0, &tcp(80, SYN | ACK))),
            ("ACK", packet(PLACEHOLDER, 0, &tcp(80, ACK))),
            ("loopback", packet([127, 0, 0, 1], 0, &syn80)),
            ("below the pool", packet([198, 17, 255, 255], 0, &syn80)),
            ("above the pool", packet([198, 20, 0, 0], 0, &syn80)),
            ("cut short", packet(PLACEHOLDER, 0, &syn80[..13])),
            ("empty", Vec::new()),
        ] {
            assert_eq!(ipv4(&bytes), None, "{what}");
        }
        let mut udp = packet(PLACEHOLDER, 0, &syn80);
        udp[9] = 17;
        assert_eq!(ipv4(&udp), None, "UDP");
        let mut fragment = packet(PLACEHOLDER, 0, &syn80);
        fragment[7] = 1;
        assert_eq!(ipv4(&fragment), None, "a later fragment");
        let mut ipv6_version = packet(PLACEHOLDER, 0, &syn80);
        ipv6_version[0] = 0x65;
        assert_eq!(ipv4(&ipv6_version), None, "not version 4");
        let mut short_header = packet(PLACEHOLDER, 0, &syn80);
        short_header[0] = 0x44;
        assert_eq!(ipv4(&short_header), None, "header under 20 bytes");
    }

    #[test]
    fn ipv6_keeps_its_pool_only() {
        let placeholder: Ipv6Addr = "2001:2::c612:1".parse().unwrap();
        let got = ipv6(placeholder, &tcp(8080, SYN));
        assert_eq!(
            got,
            Some(Refused {
                address: IpAddr::V6(placeholder),
                port: 8080
            })
        );
        let edge: Ipv6Addr = "2001:2:0:ffff:ffff:ffff:ffff:ffff".parse().unwrap();
        assert!(ipv6(edge, &tcp(80, SYN)).is_some());
        for other in [
            "::1",
            "2001:3::c612:1",
            "2001:1:ffff::1",
            "::ffff:198.18.0.1",
        ] {
            assert_eq!(ipv6(other.parse().unwrap(), &tcp(80, SYN)), None, "{other}");
        }
        assert_eq!(ipv6(placeholder, &tcp(443, SYN)), None);
        assert_eq!(ipv6(placeholder, &tcp(80, SYN | ACK)), None);
    }
}
