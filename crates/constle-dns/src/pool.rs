//! The placeholder addresses: one IPv4 and one IPv6 address per allowed
//! name, given out in order of first query and kept for the resolver's
//! life. The crate documentation says why these ranges.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use constle_manifest::Hostname;

/// The IPv4 placeholders: 198.18.0.0/15 (RFC 2544, benchmarking), less its
/// first and last address.
pub const PLACEHOLDER_IPV4: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 0, 0), 15);

/// The IPv6 placeholders: 2001:2::/48 (RFC 5180, benchmarking), each the
/// IPv4 placeholder of the same name in its last 32 bits (`2001:2::c612:1`
/// is `198.18.0.1`).
pub const PLACEHOLDER_IPV6: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0), 48);

/// How many names the pool could hold at most: the IPv4 range less its
/// first and last address.
pub const POOL_ADDRESSES: usize = (1 << (32 - PLACEHOLDER_IPV4.1)) - 2;

/// How many names a [`Resolver`](crate::Resolver) gives addresses to
/// unless told otherwise: far more than the hosts one run reaches, few
/// enough that the names held stay about a megabyte.
pub const DEFAULT_MAX_NAMES: usize = 4096;

/// Every name the pool cannot give an address: the cap is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PoolFull;

/// The names given addresses so far; a name's slot is its index.
#[derive(Debug)]
pub(crate) struct Pool {
    max: usize,
    names: Vec<Hostname>,
    slots: HashMap<Hostname, u32>,
}

impl Pool {
    /// A pool that holds at most `max` names (and never more than
    /// [`POOL_ADDRESSES`]).
    pub(crate) fn new(max: usize) -> Pool {
        Pool {
            max: max.min(POOL_ADDRESSES),
            names: Vec::new(),
            slots: HashMap::new(),
        }
    }

    /// The slot of `name`, given now if it had none (then `true`).
    pub(crate) fn slot(&mut self, name: &Hostname) -> Result<(u32, bool), PoolFull> {
        if let Some(&slot) = self.slots.get(name) {
            return Ok((slot, false));
        }
        if self.names.len() >= self.max {
            return Err(PoolFull);
        }
        let slot = u32::try_from(self.names.len()).map_err(|_| PoolFull)?;
        self.names.push(name.clone());
        self.slots.insert(name.clone(), slot);
        Ok((slot, true))
    }

    /// The name whose placeholder `ip` is, in either family (an IPv4
    /// address mapped into IPv6, as a dual-stack socket reports it, too).
    pub(crate) fn name_for(&self, ip: IpAddr) -> Option<&Hostname> {
        let slot = slot_of(ip)?;
        self.names.get(usize::try_from(slot).ok()?)
    }
}

/// Both placeholders of the name whose placeholder (of either family)
/// `address` is; `None` for an address outside the pool.
pub fn placeholders(address: IpAddr) -> Option<(Ipv4Addr, Ipv6Addr)> {
    let slot = slot_of(address)?;
    Some((ipv4(slot), ipv6(slot)))
}

/// The IPv4 placeholder of `slot`.
pub(crate) fn ipv4(slot: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(PLACEHOLDER_IPV4.0) + 1 + slot)
}

/// The IPv6 placeholder of `slot`.
pub(crate) fn ipv6(slot: u32) -> Ipv6Addr {
    Ipv6Addr::from(u128::from(PLACEHOLDER_IPV6.0) | u128::from(u32::from(ipv4(slot))))
}

fn slot_of(ip: IpAddr) -> Option<u32> {
    let v4 = match ip.to_canonical() {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            if bits >> 32 != u128::from(PLACEHOLDER_IPV6.0) >> 32 {
                return None;
            }
            Ipv4Addr::from(u32::try_from(bits & u128::from(u32::MAX)).ok()?)
        }
    };
    let offset = u32::from(v4).checked_sub(u32::from(PLACEHOLDER_IPV4.0) + 1)?;
    (usize::try_from(offset).ok()? < POOL_ADDRESSES).then_some(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> Hostname {
        Hostname::new(s).unwrap()
    }

    #[test]
    fn slots_are_stable_distinct_and_capped() {
        let mut pool = Pool::new(2);
        assert_eq!(pool.slot(&host("a.example.com")), Ok((0, true)));
        assert_eq!(pool.slot(&host("b.example.com")), Ok((1, true)));
        assert_eq!(pool.slot(&host("a.example.com")), Ok((0, false)));
        assert_eq!(pool.slot(&host("c.example.com")), Err(PoolFull));
        assert_eq!(pool.slot(&host("b.example.com")), Ok((1, false)));
    }

    #[test]
    fn addresses_lie_in_the_documented_ranges_and_agree() {
        assert_eq!(ipv4(0), Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(ipv6(0), "2001:2::c612:1".parse::<Ipv6Addr>().unwrap());
        let last = u32::try_from(POOL_ADDRESSES - 1).unwrap();
        assert_eq!(ipv4(last), Ipv4Addr::new(198, 19, 255, 254));
        assert_eq!(ipv6(last), "2001:2::c613:fffe".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn either_placeholder_gives_both() {
        let both = Some((ipv4(7), ipv6(7)));
        assert_eq!(placeholders(IpAddr::V4(ipv4(7))), both);
        assert_eq!(placeholders(IpAddr::V6(ipv6(7))), both);
        for outside in [
            "198.18.0.0",
            "198.20.0.1",
            "2001:2:0:1::c612:1",
            "127.0.0.1",
        ] {
            assert_eq!(placeholders(outside.parse().unwrap()), None, "{outside}");
        }
    }

    #[test]
    fn reverse_lookup_in_both_families_and_nothing_else() {
        let mut pool = Pool::new(DEFAULT_MAX_NAMES);
        let a = host("a.example.com");
        pool.slot(&host("z.example.com")).unwrap();
        let (slot, _) = pool.slot(&a).unwrap();
        for ip in [
            IpAddr::V4(ipv4(slot)),
            IpAddr::V6(ipv6(slot)),
            IpAddr::V6(ipv4(slot).to_ipv6_mapped()),
        ] {
            assert_eq!(pool.name_for(ip), Some(&a), "{ip}");
        }
        for ip in [
            "198.18.0.0",
            "198.18.0.3",
            "198.19.255.255",
            "198.20.0.1",
            "127.0.0.1",
            "::1",
            "2001:2::1:c612:2",
            "2001:3::c612:2",
            "::c612:2",
            "64:ff9b::c612:2",
        ] {
            assert_eq!(pool.name_for(ip.parse().unwrap()), None, "{ip}");
        }
    }
}
