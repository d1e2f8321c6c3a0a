//! Properties over random input: no bytes make the resolver panic, and
//! over any sequence of queries an allowed name keeps one placeholder,
//! no two names share one, and a refused name never gets one.

#![allow(clippy::unwrap_used, reason = "test helpers panic on setup failure")]

mod common;

use std::collections::HashMap;
use std::net::IpAddr;

use common::{ask, query, restricted};
use constle_dns::{Decision, MAX_RECORDED_BYTES, Resolver, Transport};
use constle_egress::EgressPolicy;
use hickory_proto::rr::RecordType;
use proptest::prelude::*;

const ALLOWED: [&str; 3] = ["a.example.com", "b.example.com", "api.example.org"];
const OTHERS: [&str; 3] = ["c.example.com", "x.a.example.com", "example.com"];

/// A name from [`ALLOWED`] or [`OTHERS`], in random case, with or without
/// the trailing dot.
fn spelling() -> impl Strategy<Value = (String, bool)> {
    let names: Vec<(&str, bool)> = ALLOWED
        .iter()
        .map(|n| (*n, true))
        .chain(OTHERS.iter().map(|n| (*n, false)))
        .collect();
    (proptest::sample::select(names), any::<u64>(), any::<bool>()).prop_map(
        |((name, allowed), case, dot)| {
            let mut text: String = name
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    if case >> (i % 64) & 1 == 1 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    }
                })
                .collect();
            if dot {
                text.push('.');
            }
            (text, allowed)
        },
    )
}

fn qtype() -> impl Strategy<Value = RecordType> {
    proptest::sample::select(vec![
        RecordType::A,
        RecordType::AAAA,
        RecordType::TXT,
        RecordType::ANY,
    ])
}

/// The IPv4 address an IPv6 placeholder carries, or the address itself.
fn as_v4(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => IpAddr::V4(std::net::Ipv4Addr::from(
            u32::try_from(u128::from(v6) & u128::from(u32::MAX)).unwrap(),
        )),
        v4 => v4,
    }
}

/// Answers `bytes` under every kind of policy and both framings: no
/// panic, and a refusal record that a log may hold.
fn answer_anything(bytes: &[u8]) -> Result<(), TestCaseError> {
    for policy in [None, Some(EgressPolicy::open()), Some(restricted(&ALLOWED))] {
        let mut r = Resolver::with_max_names(policy.as_ref(), 4);
        for transport in [Transport::Udp, Transport::Tcp] {
            let answer = r.answer(bytes, transport);
            if let Decision::Refused(refused) = answer.decision() {
                let name = refused.name.as_deref().unwrap_or("");
                prop_assert!(name.len() <= MAX_RECORDED_BYTES + '…'.len_utf8());
                prop_assert!(!name.chars().any(char::is_control));
            }
            let _ = answer.reply_after(|_| ());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        answer_anything(&bytes)?;
    }

    #[test]
    fn edited_queries_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        name in spelling(),
    ) {
        // Random bytes rarely get past the header: start from a real query.
        let mut bytes = query(&name.0, RecordType::A);
        for (at, byte) in edits {
            let at = at.index(bytes.len());
            bytes[at] = byte;
        }
        bytes.truncate(cut.index(bytes.len() + 1).max(1));
        answer_anything(&bytes)?;
    }

    #[test]
    fn placeholders_are_stable_distinct_and_only_for_allowed_names(
        queries in proptest::collection::vec((spelling(), qtype()), 1..60)
    ) {
        let mut r = Resolver::new(Some(&restricted(&ALLOWED)));
        let mut given: HashMap<String, IpAddr> = HashMap::new();
        for ((name, allowed), qtype) in queries {
            let got = ask(&mut r, &query(&name, qtype));
            let addresses = got.addresses();
            let canonical = name.trim_end_matches('.').to_ascii_lowercase();
            match &got.decision {
                Decision::Answered(answered) => {
                    prop_assert!(allowed, "{name} answered");
                    prop_assert_eq!(answered.name.as_str(), canonical.as_str());
                    prop_assert_eq!(answered.address.into_iter().collect::<Vec<_>>(), addresses.clone());
                }
                Decision::Refused(_) => {
                    prop_assert!(!allowed, "{name} refused");
                    prop_assert!(addresses.is_empty());
                }
                other => prop_assert!(false, "{other:?}"),
            }
            for ip in addresses {
                prop_assert_eq!(r.name_for(ip).map(|h| h.as_str()), Some(canonical.as_str()));
                let v4 = as_v4(ip);
                let first = *given.entry(canonical.clone()).or_insert(v4);
                prop_assert_eq!(first, v4, "{} moved", canonical);
            }
        }
        let mut seen: Vec<IpAddr> = given.values().copied().collect();
        seen.sort();
        seen.dedup();
        prop_assert_eq!(seen.len(), given.len(), "shared: {:?}", given);
        for other in OTHERS {
            prop_assert!(!given.contains_key(other));
        }
    }
}
