//! The resolver's answers, query by query, through its public API: what
//! it answers, and every shape of query it must refuse at once.

mod common;

use std::collections::HashSet;
use std::net::IpAddr;

use common::{Got, ask, message, query, restricted, take};
use constle_dns::{
    DEFAULT_MAX_NAMES, Decision, QueryType, Reason, Refused, Resolver, TTL_SECONDS, Transport,
};
use constle_egress::EgressPolicy;
use hickory_proto::op::{MessageType, OpCode, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RecordType};

const ALLOWED: &str = "api.example.com";

fn resolver() -> Resolver {
    Resolver::new(Some(&restricted(&[ALLOWED])))
}

fn refused(got: &Got) -> &Refused {
    match &got.decision {
        Decision::Refused(refused) => refused,
        other => panic!("not refused: {other:?}"),
    }
}

/// NXDOMAIN, no record, and the decision says `reason`.
fn assert_nxdomain(got: &Got, reason: Reason) {
    assert_eq!(got.code(), Some(ResponseCode::NXDomain));
    assert!(got.addresses().is_empty());
    assert_eq!(refused(got).reason, reason);
}

fn placeholder(resolver: &mut Resolver, name: &str, qtype: RecordType) -> IpAddr {
    let got = ask(resolver, &query(name, qtype));
    assert_eq!(got.code(), Some(ResponseCode::NoError), "{name}");
    let addresses = got.addresses();
    assert_eq!(addresses.len(), 1, "{name}");
    addresses[0]
}

#[test]
fn an_allowed_name_gets_one_placeholder_per_family_for_good() {
    let mut r = resolver();
    let got = ask(&mut r, &query("api.example.com.", RecordType::A));
    let Decision::Answered(answered) = &got.decision else {
        panic!("{:?}", got.decision);
    };
    assert_eq!(answered.name, ALLOWED);
    assert_eq!(answered.qtype, QueryType(1));
    assert!(answered.assigned);
    let reply = got.reply.as_ref().unwrap();
    assert_eq!(reply.metadata.id, 0x1234);
    assert_eq!(reply.metadata.message_type, MessageType::Response);
    assert!(reply.metadata.recursion_desired && reply.metadata.recursion_available);
    assert_eq!(reply.answers[0].ttl, TTL_SECONDS);
    let v4 = got.addresses()[0];
    assert_eq!(answered.address, Some(v4));
    assert_eq!(v4, "198.18.0.1".parse::<IpAddr>().unwrap());

    let v6 = placeholder(&mut r, ALLOWED, RecordType::AAAA);
    assert_eq!(v6, "2001:2::c612:1".parse::<IpAddr>().unwrap());
    for _ in 0..3 {
        assert_eq!(placeholder(&mut r, ALLOWED, RecordType::A), v4);
    }
    let again = ask(&mut r, &query(ALLOWED, RecordType::A));
    assert!(matches!(again.decision, Decision::Answered(ref a) if !a.assigned));
    for ip in [v4, v6] {
        assert_eq!(r.name_for(ip).map(|h| h.as_str()), Some(ALLOWED));
    }
}

#[test]
fn case_and_the_trailing_dot_make_no_difference() {
    let mut r = resolver();
    let first = placeholder(&mut r, ALLOWED, RecordType::A);
    for spelling in ["API.EXAMPLE.COM", "Api.Example.Com.", "aPi.eXaMpLe.cOm."] {
        assert_eq!(
            placeholder(&mut r, spelling, RecordType::A),
            first,
            "{spelling}"
        );
    }
    // The question comes back as it was asked: resolvers that randomise
    // case (DNS 0x20) check it.
    let got = ask(&mut r, &query("aPi.eXaMpLe.cOm.", RecordType::A));
    let reply = got.reply.unwrap();
    assert_eq!(reply.queries[0].name().to_ascii(), "aPi.eXaMpLe.cOm.");
    assert_eq!(reply.answers[0].name.to_ascii(), "aPi.eXaMpLe.cOm.");
}

#[test]
fn other_types_for_an_allowed_name_get_nodata_and_no_placeholder() {
    let mut r = resolver();
    for qtype in [
        RecordType::TXT,
        RecordType::ANY,
        RecordType::MX,
        RecordType::HTTPS,
    ] {
        let got = ask(&mut r, &query(ALLOWED, qtype));
        assert_eq!(got.code(), Some(ResponseCode::NoError), "{qtype}");
        assert_eq!(got.reply.as_ref().unwrap().answers.len(), 0, "{qtype}");
        let Decision::Answered(answered) = &got.decision else {
            panic!("{:?}", got.decision);
        };
        assert_eq!((answered.address, answered.assigned), (None, false));
    }
    assert_eq!(r.name_for("198.18.0.1".parse().unwrap()), None);
}

#[test]
fn names_not_allowed_get_nxdomain_for_every_type() {
    let mut r = resolver();
    for name in [
        "example.com",
        "x.api.example.com",
        "api.example.com.evil.test",
        "api-example.com",
        "localhost",
        "com",
    ] {
        for qtype in [
            RecordType::A,
            RecordType::AAAA,
            RecordType::TXT,
            RecordType::ANY,
        ] {
            let got = ask(&mut r, &query(name, qtype));
            assert_nxdomain(&got, Reason::NotAllowed);
            assert_eq!(refused(&got).qtype, Some(qtype.into()));
        }
    }
    let got = ask(&mut r, &query("Evil.Example.COM.", RecordType::TXT));
    assert_eq!(refused(&got).name.as_deref(), Some("evil.example.com"));
    assert_eq!(refused(&got).qtype.unwrap().to_string(), "TXT");
}

#[test]
fn egress_none_resolves_nothing() {
    let mut r = Resolver::new(None);
    for qtype in [RecordType::A, RecordType::AAAA, RecordType::TXT] {
        assert_nxdomain(&ask(&mut r, &query(ALLOWED, qtype)), Reason::NoNetwork);
    }
}

#[test]
fn restricted_with_no_hosts_resolves_nothing() {
    let mut r = Resolver::new(Some(&restricted(&[])));
    assert_nxdomain(
        &ask(&mut r, &query(ALLOWED, RecordType::A)),
        Reason::NotAllowed,
    );
}

#[test]
fn open_egress_answers_public_looking_names_only() {
    let mut r = Resolver::new(Some(&EgressPolicy::open()));
    let a = placeholder(&mut r, "registry.npmjs.org", RecordType::A);
    let b = placeholder(&mut r, "pypi.org", RecordType::A);
    assert_ne!(a, b);
    for (name, reason) in [
        ("localhost", Reason::NotAHostName),
        ("intranet", Reason::NotAHostName),
        ("1.2.3.4", Reason::NotAHostName),
        ("example.0x7f", Reason::NotAHostName),
        ("metadata.google.internal", Reason::NotPublic),
        ("4.3.2.1.in-addr.arpa", Reason::NotPublic),
        ("printer.local", Reason::NotPublic),
    ] {
        assert_nxdomain(&ask(&mut r, &query(name, RecordType::A)), reason);
    }
}

#[test]
fn names_with_bytes_no_host_name_has_are_refused_and_escaped() {
    let mut r = Resolver::new(Some(&EgressPolicy::open()));
    let mut m = message("x.example.com", RecordType::A);
    let name = Name::from_labels([&b"a\x1b[2Jb_c"[..], b"example", b"com"]).unwrap();
    m.queries[0].set_name(name);
    let got = ask(&mut r, &m.to_vec().unwrap());
    assert_nxdomain(&got, Reason::NotAHostName);
    assert_eq!(
        refused(&got).name.as_deref(),
        Some("a\\027[2jb_c.example.com")
    );
    assert_nxdomain(
        &ask(&mut r, &query("a_b.example.com", RecordType::A)),
        Reason::NotAHostName,
    );
}

/// A header asking one standard query, then `name` as raw wire bytes,
/// type A, class IN.
fn raw_query(name: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(&[0, 1, 0, 1]);
    bytes
}

#[test]
fn tunnelling_shapes_are_refused_at_once() {
    let mut r = Resolver::new(Some(&EgressPolicy::open()));
    // A 64-byte label cannot be written in a message: its length byte
    // reads as a label type that does not exist.
    let mut long_label = vec![64];
    long_label.extend_from_slice(&[b'a'; 64]);
    long_label.extend_from_slice(b"\x07example\x03com\x00");
    let got = ask(&mut r, &raw_query(&long_label));
    assert_eq!(got.code(), Some(ResponseCode::FormErr));
    assert_eq!(got.reply.as_ref().unwrap().metadata.id, 0x1234);
    assert_eq!(refused(&got).reason, Reason::Unreadable);
    // Over 255 bytes on the wire (a 254-byte name and more).
    let mut long_name = Vec::new();
    for _ in 0..4 {
        long_name.push(63);
        long_name.extend_from_slice(&[b'a'; 63]);
    }
    long_name.push(0);
    let got = ask(&mut r, &raw_query(&long_name));
    assert_eq!(got.code(), Some(ResponseCode::FormErr));
    assert_eq!(refused(&got).reason, Reason::Unreadable);
    // TXT and ANY for names that carry data in their labels, in restricted
    // egress: nothing is answered, nothing is assigned.
    let mut r = resolver();
    for qtype in [
        RecordType::TXT,
        RecordType::ANY,
        RecordType::NULL,
        RecordType::A,
    ] {
        let name = format!("{}.{}.t.example.com.", "a".repeat(63), "b".repeat(63));
        assert_nxdomain(&ask(&mut r, &query(&name, qtype)), Reason::NotAllowed);
    }
    assert_eq!(r.name_for("198.18.0.1".parse().unwrap()), None);
}

#[test]
fn a_253_byte_name_is_the_longest_answered() {
    let mut r = Resolver::new(Some(&EgressPolicy::open()));
    let label = "a".repeat(63);
    let name = format!("{label}.{label}.{label}.{}.", "b".repeat(61));
    assert_eq!(name.len(), 254);
    placeholder(&mut r, &name, RecordType::A);
}

#[test]
fn past_the_cap_new_names_are_refused_and_old_ones_kept() {
    let mut r = Resolver::with_max_names(Some(&EgressPolicy::open()), 3);
    let names: Vec<String> = (0..10).map(|i| format!("n{i}.example.com")).collect();
    let kept: Vec<IpAddr> = names[..3]
        .iter()
        .map(|n| placeholder(&mut r, n, RecordType::A))
        .collect();
    for name in &names[3..] {
        for qtype in [RecordType::A, RecordType::AAAA] {
            let got = ask(&mut r, &query(name, qtype));
            assert_nxdomain(&got, Reason::PoolFull);
            assert_eq!(refused(&got).name.as_deref(), Some(name.as_str()));
        }
    }
    for (name, ip) in names.iter().zip(&kept) {
        assert_eq!(placeholder(&mut r, name, RecordType::A), *ip);
    }
}

#[test]
fn the_default_cap_holds_and_a_larger_one_is_honoured() {
    let names: Vec<String> = (0..=DEFAULT_MAX_NAMES)
        .map(|i| format!("n{i}.example.com"))
        .collect();
    let (last, first) = names.split_last().unwrap();
    let mut default = Resolver::new(Some(&EgressPolicy::open()));
    let mut larger = Resolver::with_max_names(Some(&EgressPolicy::open()), usize::MAX);
    let mut seen = HashSet::new();
    for name in first {
        assert!(seen.insert(placeholder(&mut default, name, RecordType::A)));
        placeholder(&mut larger, name, RecordType::A);
    }
    assert_nxdomain(
        &ask(&mut default, &query(last, RecordType::A)),
        Reason::PoolFull,
    );
    assert!(seen.insert(placeholder(&mut larger, last, RecordType::A)));
}

#[test]
fn several_questions_are_refused() {
    let mut r = resolver();
    let mut m = message(ALLOWED, RecordType::A);
    m.add_query(m.queries[0].clone());
    let got = ask(&mut r, &m.to_vec().unwrap());
    assert_nxdomain(&got, Reason::MultipleQuestions);
    assert_eq!(refused(&got).name.as_deref(), Some(ALLOWED));
}

#[test]
fn other_classes_are_refused() {
    let mut r = resolver();
    let mut m = message(ALLOWED, RecordType::TXT);
    m.queries[0].set_query_class(DNSClass::CH);
    assert_nxdomain(&ask(&mut r, &m.to_vec().unwrap()), Reason::NotInternetClass);
}

#[test]
fn what_is_not_a_query_gets_an_error_or_nothing() {
    let mut r = resolver();
    let mut response = message(ALLOWED, RecordType::A);
    response.metadata.message_type = MessageType::Response;
    let got = ask(&mut r, &response.to_vec().unwrap());
    assert_eq!(
        (got.code(), refused(&got).reason),
        (None, Reason::NotAQuery)
    );

    let mut status = message(ALLOWED, RecordType::A);
    status.metadata.op_code = OpCode::Status;
    let got = ask(&mut r, &status.to_vec().unwrap());
    assert_eq!(got.code(), Some(ResponseCode::NotImp));
    assert_eq!(refused(&got).reason, Reason::NotAQuery);

    let no_question = [0x12, 0x34, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 0];
    let got = ask(&mut r, &no_question);
    assert_eq!(got.code(), Some(ResponseCode::FormErr));

    let short = [0xab, 0xcd, 0x01];
    let got = ask(&mut r, &short);
    assert_eq!(got.code(), Some(ResponseCode::FormErr));
    assert_eq!(got.reply.as_ref().unwrap().metadata.id, 0xabcd);
    assert_eq!(refused(&got).reason, Reason::Unreadable);

    for nothing in [&[][..], &[0x12]] {
        let got = ask(&mut r, nothing);
        assert_eq!(got.code(), None);
        assert_eq!(refused(&got).reason, Reason::Unreadable);
    }
}

#[test]
fn declared_sections_that_are_not_there_are_never_read() {
    let mut r = resolver();
    let mut bytes = query(ALLOWED, RecordType::A);
    bytes[6..12].copy_from_slice(&[0xff; 6]);
    assert_eq!(ask(&mut r, &bytes).code(), Some(ResponseCode::NoError));
}

#[test]
fn tcp_replies_are_framed_like_the_query() {
    let mut r = resolver();
    let bytes = query(ALLOWED, RecordType::A);
    let mut framed = u16::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
    framed.extend_from_slice(&bytes);
    let mut decision = None;
    let reply = r
        .answer(&framed, Transport::Tcp)
        .reply_after(|d| decision = Some(d))
        .unwrap();
    assert!(matches!(decision, Some(Decision::Answered(_))));
    assert_eq!(
        usize::from(u16::from_be_bytes([reply[0], reply[1]])),
        reply.len() - 2
    );
    let udp = take(r.answer(&bytes, Transport::Udp));
    assert_eq!(udp.code(), Some(ResponseCode::NoError));

    for bad in [&framed[..framed.len() - 1], &framed[1..], &[0, 0][..], &[]] {
        let got = take(r.answer(bad, Transport::Tcp));
        assert_eq!(got.code(), None);
        assert_eq!(refused(&got).reason, Reason::Unreadable);
    }
}
