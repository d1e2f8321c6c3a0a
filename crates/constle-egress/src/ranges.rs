//! The destinations refused on the resolved address: [`internal_ranges`].
//!
//! Squid's `dst` ACL takes address ranges only, so everything here is a
//! [`Cidr`]. Three kinds:
//!
//! - the internal IPv4 ranges ([`INTERNAL_IPV4_RANGES`]) and the IPv6 ones
//!   that carry no IPv4 address ([`INTERNAL_IPV6_RANGES`]);
//! - every IPv6 form that carries an IPv4 address at a fixed place, for
//!   each internal IPv4 range: a connection to such an address is
//!   delivered to the IPv4 address it carries (by a NAT64 gateway, a 6to4
//!   relay, a stack that still honours IPv4-compatible addresses), so it
//!   is judged by that address. [`EMBEDDINGS`] lists them; the ranges are
//!   computed from the IPv4 list, never written out by hand. Their public
//!   addresses stay allowed: on an IPv6-only network behind NAT64, DNS64
//!   answers `64:ff9b::/96` addresses for every IPv4-only host;
//! - prefixes refused whole ([`REFUSED_WHOLE`]), where the IPv4 address
//!   inside cannot be picked out by a prefix (Teredo's client address,
//!   the NAT64 local-use prefix).
//!
//! IPv4-mapped addresses (`::ffff:0:0/96`) are not listed: Squid stores
//! every IPv4 address in mapped form and matches the IPv4 ranges against
//! them, and listing the mapped range would refuse all of IPv4.
//!
//! Compared with stripe/smokescreen and Anthropic's sandbox-runtime, which
//! guard against the same bypass: smokescreen refuses the NAT64, 6to4 and
//! Teredo prefixes whole, public addresses included (which would break
//! IPv6-only networks behind NAT64); sandbox-runtime's `embeddedIPv4`
//! decodes NAT64, 6to4, IPv4-compatible and IPv4-translated addresses as
//! here, and leaves Teredo and the local-use prefix to the operator's own
//! deny list, where here they are refused.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address range: a network address and a prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    len: u8,
}

impl Cidr {
    const fn v4(addr: Ipv4Addr, len: u8) -> Cidr {
        Cidr {
            addr: IpAddr::V4(addr),
            len,
        }
    }

    const fn v6(addr: Ipv6Addr, len: u8) -> Cidr {
        Cidr {
            addr: IpAddr::V6(addr),
            len,
        }
    }

    /// Whether `ip` is in the range (an address of the other family never
    /// is).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                same_prefix(u32::from(net).into(), u32::from(ip).into(), 32, self.len)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                same_prefix(u128::from(net), u128::from(ip), 128, self.len)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Whether `a` and `b`, numbers of `bits` bits, agree in their first `len`.
fn same_prefix(a: u128, b: u128, bits: u32, len: u8) -> bool {
    let len = u32::from(len).min(bits);
    let shift = bits - len;
    // A shift by the full width (len 0) would overflow: every number agrees.
    shift >= 128 || (a >> shift) == (b >> shift)
}

/// The IPv4 destinations refused: "this network", private, CGNAT,
/// loopback, link-local (cloud metadata), IETF protocol assignments,
/// private again, benchmarking, multicast, reserved.
pub const INTERNAL_IPV4_RANGES: [Cidr; 11] = [
    Cidr::v4(Ipv4Addr::new(0, 0, 0, 0), 8),
    Cidr::v4(Ipv4Addr::new(10, 0, 0, 0), 8),
    Cidr::v4(Ipv4Addr::new(100, 64, 0, 0), 10),
    Cidr::v4(Ipv4Addr::new(127, 0, 0, 0), 8),
    Cidr::v4(Ipv4Addr::new(169, 254, 0, 0), 16),
    Cidr::v4(Ipv4Addr::new(172, 16, 0, 0), 12),
    Cidr::v4(Ipv4Addr::new(192, 0, 0, 0), 24),
    Cidr::v4(Ipv4Addr::new(192, 168, 0, 0), 16),
    Cidr::v4(Ipv4Addr::new(198, 18, 0, 0), 15),
    Cidr::v4(Ipv4Addr::new(224, 0, 0, 0), 4),
    Cidr::v4(Ipv4Addr::new(240, 0, 0, 0), 4),
];

/// The IPv6 destinations refused in their own right: link-local,
/// unique-local, multicast, benchmarking (the IPv4 list's `198.18.0.0/15`
/// counterpart, and the sandbox resolver's placeholders).
///
/// The unspecified address `::` and loopback `::1` are refused too, but not
/// listed here: they lie in the IPv4-compatible form of `0.0.0.0/8`
/// (`::/104`), and Squid complains about a range listed inside another.
pub const INTERNAL_IPV6_RANGES: [Cidr; 4] = [
    Cidr::v6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),
    Cidr::v6(Ipv6Addr::new(0x2001, 0x2, 0, 0, 0, 0, 0, 0), 48),
    Cidr::v6(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),
    Cidr::v6(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),
];

/// An IPv6 form that carries an IPv4 address at a fixed place.
#[derive(Clone, Copy, Debug)]
pub struct Embedding {
    /// What it is, and where it is defined.
    pub name: &'static str,
    /// The IPv6 prefix, the IPv4 address's bits zero.
    pub prefix: Ipv6Addr,
    /// The bit (from the left, 0-based) where the IPv4 address starts.
    pub at: u8,
}

impl Embedding {
    /// The IPv6 range of the addresses that carry an address of `v4`.
    /// `None` for an IPv6 range (nothing to embed).
    pub fn of(&self, v4: &Cidr) -> Option<Cidr> {
        let IpAddr::V4(net) = v4.addr else {
            return None;
        };
        let shift = 128 - u32::from(self.at) - 32;
        let bits = u128::from(self.prefix) | (u128::from(u32::from(net)) << shift);
        Some(Cidr::v6(Ipv6Addr::from(bits), self.at + v4.len))
    }
}

/// The IPv6 forms judged by the IPv4 address they carry.
pub const EMBEDDINGS: [Embedding; 4] = [
    Embedding {
        name: "NAT64, well-known prefix (RFC 6052): the IPv4 address in the last 32 bits",
        prefix: Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0),
        at: 96,
    },
    Embedding {
        name: "6to4 (RFC 3056): the IPv4 address in bits 16 to 47",
        prefix: Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0),
        at: 16,
    },
    Embedding {
        name: "IPv4-compatible (RFC 4291, deprecated): the IPv4 address in the last 32 bits",
        prefix: Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0),
        at: 96,
    },
    Embedding {
        name: "IPv4-translated (RFC 2765, SIIT): the IPv4 address in the last 32 bits",
        prefix: Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0),
        at: 96,
    },
];

/// A prefix refused whole, and why no narrower range would do.
#[derive(Clone, Copy, Debug)]
pub struct RefusedWhole {
    /// The prefix.
    pub range: Cidr,
    /// What it is, and why it is refused whole.
    pub why: &'static str,
}

/// The prefixes that carry an IPv4 address in a way no set of prefixes can
/// follow, refused whole.
pub const REFUSED_WHOLE: [RefusedWhole; 2] = [
    RefusedWhole {
        range: Cidr::v6(Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32),
        why: "Teredo (RFC 4380): the client's IPv4 address sits, inverted, in the last \
              32 bits, behind 32 bits of flags and port that can be anything, so no \
              prefix picks out an internal client",
    },
    RefusedWhole {
        range: Cidr::v6(Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48),
        why: "NAT64, local-use prefix (RFC 8215): a network may carve a prefix of any \
              RFC 6052 length out of it, and the IPv4 address moves with that length; \
              even at /48 it straddles the u-octet (bits 64 to 71), so a range longer \
              than /16 has no prefix",
    },
];

/// The ranges of one line of the `constle_internal` ACL, and what they are.
#[derive(Clone, Debug)]
pub struct RangeGroup {
    /// What the ranges are.
    pub what: String,
    /// The ranges.
    pub ranges: Vec<Cidr>,
}

/// Every range refused on the resolved address, in groups: IPv4, IPv6,
/// each [`Embedding`] of the IPv4 ranges, and [`REFUSED_WHOLE`]. No range
/// lies inside another (Squid would complain).
pub fn internal_range_groups() -> Vec<RangeGroup> {
    let mut groups = vec![
        RangeGroup {
            what: "IPv4: this network, private, CGNAT, loopback, link-local and \
                   metadata, IETF protocol assignments, benchmarking, multicast, reserved"
                .into(),
            ranges: INTERNAL_IPV4_RANGES.to_vec(),
        },
        RangeGroup {
            what: "IPv6: link-local, unique-local, multicast (:: and ::1 are in ::/104 below)"
                .into(),
            ranges: INTERNAL_IPV6_RANGES.to_vec(),
        },
    ];
    for embedding in &EMBEDDINGS {
        groups.push(RangeGroup {
            what: format!("the IPv4 ranges above as {}", embedding.name),
            ranges: INTERNAL_IPV4_RANGES
                .iter()
                .filter_map(|v4| embedding.of(v4))
                .collect(),
        });
    }
    for whole in &REFUSED_WHOLE {
        groups.push(RangeGroup {
            what: format!("refused whole: {}", whole.why),
            ranges: vec![whole.range],
        });
    }
    groups
}

/// Every range refused on the resolved address ([`internal_range_groups`],
/// flattened).
pub fn internal_ranges() -> Vec<Cidr> {
    internal_range_groups()
        .into_iter()
        .flat_map(|group| group.ranges)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(ip: IpAddr) -> bool {
        internal_ranges().iter().any(|range| range.contains(ip))
    }

    fn v6(text: &str) -> IpAddr {
        IpAddr::V6(text.parse().unwrap())
    }

    #[test]
    fn ranges_are_written_as_squid_reads_them() {
        let shown: Vec<String> = internal_ranges().iter().map(Cidr::to_string).collect();
        for expected in [
            "10.0.0.0/8",
            "fc00::/7",
            "2001:2::/48",
            "64:ff9b::a9fe:0/112",
            "64:ff9b::a00:0/104",
            "2002:a9fe::/32",
            "2002:7f00::/24",
            "::/104",
            "::a00:0/104",
            "::ffff:0:a00:0/104",
            "2001::/32",
            "64:ff9b:1::/48",
        ] {
            assert!(
                shown.contains(&expected.to_owned()),
                "{expected}: {shown:?}"
            );
        }
    }

    /// Whether every address of `b` is in `a`.
    fn covers(a: &Cidr, b: &Cidr) -> bool {
        b.len >= a.len && a.contains(b.addr)
    }

    #[test]
    fn no_range_lies_inside_another_nor_touches_the_mapped_range() {
        let all = internal_ranges();
        // Squid holds every IPv4 address as ::ffff:a.b.c.d.
        let mapped = Cidr::v6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96);
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate() {
                assert!(i == j || !covers(a, b), "{a} covers {b}");
            }
            assert!(!covers(a, &mapped) && !covers(&mapped, a), "{a}");
        }
    }

    #[test]
    fn each_embedding_is_judged_by_the_ipv4_address_it_carries() {
        let samples = [
            Ipv4Addr::new(169, 254, 169, 254),
            Ipv4Addr::new(127, 0, 0, 1),
            Ipv4Addr::new(10, 1, 2, 3),
            Ipv4Addr::new(172, 31, 255, 255),
            Ipv4Addr::new(192, 0, 0, 170),
            Ipv4Addr::new(192, 0, 1, 1),
            Ipv4Addr::new(100, 127, 0, 1),
            Ipv4Addr::new(100, 128, 0, 1),
            Ipv4Addr::new(198, 19, 0, 1),
            Ipv4Addr::new(203, 0, 113, 7),
            Ipv4Addr::new(8, 8, 8, 8),
            Ipv4Addr::new(255, 255, 255, 255),
            Ipv4Addr::new(0, 0, 0, 1),
        ];
        for embedding in &EMBEDDINGS {
            let shift = 128 - u32::from(embedding.at) - 32;
            for v4 in samples {
                let internal = refused(IpAddr::V4(v4));
                let carrier = u128::from(embedding.prefix) | (u128::from(u32::from(v4)) << shift);
                // Bits after the IPv4 address (6to4's subnet and host) do
                // not change the judgement.
                let after = if shift > 0 {
                    vec![0, 1, (1 << shift) - 1]
                } else {
                    vec![0]
                };
                for low in after {
                    let ip = IpAddr::V6(Ipv6Addr::from(carrier | low));
                    assert_eq!(
                        refused(ip),
                        internal,
                        "{}: {ip} carries {v4}",
                        embedding.name
                    );
                }
            }
        }
    }

    #[test]
    fn docs_run_md_lists_every_range() {
        let run_md = include_str!("../../../docs/run.md");
        for range in internal_ranges() {
            assert!(
                run_md.contains(&format!("`{range}`")),
                "{range} is not in docs/run.md"
            );
        }
    }

    #[test]
    fn the_issue_s_addresses() {
        for (ip, internal) in [
            ("64:ff9b::a9fe:a9fe", true),
            ("64:ff9b::7f00:1", true),
            ("64:ff9b::cb00:7107", false),
            ("64:ff9c::a9fe:a9fe", false),
            ("64:ff9b:1:a9fe:a9:fe00::", true),
            ("64:ff9b:1::cb00:7107", true),
            ("2002:a9fe:a9fe::1", true),
            ("2002:cb00:7107::1", false),
            ("::a9fe:a9fe", true),
            ("::cb00:7107", false),
            ("::", true),
            ("::1", true),
            ("::ffff:0:a9fe:a9fe", true),
            // Teredo: server 203.0.113.7, client 10.0.0.1 (inverted), and
            // a wholly public one: refused either way.
            ("2001:0:cb00:7107:0:0:f5ff:fffe", true),
            ("2001:0:cb00:7107:8000:63bf:3fff:fdd2", true),
            ("2001:db8::7", false),
            // Smokescreen's test vectors: the internal ones refused, the
            // public ones (which it refuses too) allowed here.
            ("64:ff9b::a00:1", true),
            ("64:ff9b::ac1c:5", true),
            ("2002:a00:1::1", true),
            ("64:ff9b::808:808", false),
            ("2002:808:808::1", false),
            ("2001:4860:4860::8888", false),
            ("fe80::1", true),
            ("fd00:ec2::254", true),
            ("ff02::2", true),
            // Benchmarking, where the sandbox resolver's placeholders are;
            // its neighbours are not.
            ("2001:2::c612:1", true),
            ("2001:3::1", false),
        ] {
            assert_eq!(refused(v6(ip)), internal, "{ip}");
        }
    }
}
