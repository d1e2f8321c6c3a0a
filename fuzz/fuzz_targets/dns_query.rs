//! The sandbox's resolver: any bytes, as a datagram or a TCP frame, get an
//! answer and a decision without panicking; a refusal record holds no
//! control character and is bounded; a reply is a DNS message whose id is
//! the query's; and no refused name ever gets a placeholder.

#![no_main]

use constle_dns::{Decision, MAX_RECORDED_BYTES, Resolver, Transport};
use constle_egress::EgressPolicy;
use constle_manifest::Hostname;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let allowed = Hostname::new("api.example.com").expect("host");
    let policies = [
        None,
        Some(EgressPolicy::open()),
        Some(EgressPolicy::restricted([allowed.clone()])),
    ];
    for (i, policy) in policies.iter().enumerate() {
        let mut resolver = Resolver::with_max_names(policy.as_ref(), 2);
        for transport in [Transport::Udp, Transport::Tcp] {
            let answer = resolver.answer(data, transport);
            let mut decision = None;
            let reply = answer.reply_after(|d| decision = Some(d));
            match decision.expect("handed over") {
                Decision::Refused(refused) => {
                    let name = refused.name.unwrap_or_default();
                    assert!(name.len() <= MAX_RECORDED_BYTES + '…'.len_utf8());
                    assert!(!name.chars().any(char::is_control), "{name:?}");
                }
                Decision::Answered(answered) => {
                    assert!(i > 0, "egress: none answered {}", answered.name);
                    if i == 2 {
                        assert_eq!(answered.name, allowed);
                    }
                    if let Some(ip) = answered.address {
                        assert_eq!(resolver.name_for(ip), Some(&answered.name));
                    }
                }
                _ => {}
            }
            if let Some(reply) = reply {
                // The TCP frame's length is in front of the message.
                let at = match transport {
                    Transport::Udp => 0,
                    Transport::Tcp => 2,
                };
                assert!(reply.len() >= at + 12);
                assert_eq!(reply[at..at + 2], data[at..at + 2]);
            }
        }
    }
});
