//! End to end through a real Squid: every row of the spec's two network
//! tables and of issue 3's list. The outside is a test host in a network
//! namespace holding documentation addresses; names resolve from a hosts
//! file; internal addresses a name is pointed at are trapped into the same
//! namespace, so a wrong "allow" would show as a connection there and never
//! leave the machine.

#![allow(clippy::expect_used, reason = "test helpers panic on setup failure")]

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::{DECLARED, Fixture, host, restricted};
use constle_egress::{EgressPolicy, Mode, reason};
use constle_testkit::{DnsServer, HostsFile, TestHost};

// ---------------------------------------------------------------------------
// Spec, "Name-based matching, reverse lookups off"

#[tokio::test]
async fn declared_hostname_is_allowed_and_reaches_the_host() {
    let Some(mut f) = Fixture::restricted("declared hostname", &[DECLARED], |_, _| {}).await else {
        return;
    };
    let addr = f.host.ipv4().into();
    let event = f.tunnels_to(&format!("{DECLARED}:443"), addr).await;
    assert_eq!(event.host, DECLARED);
    assert_eq!(event.method, "CONNECT");
    assert!(event.client.is_some_and(|c| c.ip().is_loopback()));
    let age = jiff::Timestamp::now().duration_since(event.started);
    assert!(
        age < jiff::SignedDuration::from_secs(30) && !age.is_negative(),
        "started {} is not now",
        event.started
    );
    f.finish().await;
}

#[tokio::test]
async fn declared_hostname_reaches_the_host_over_ipv6() {
    let Some(mut f) = Fixture::restricted(
        "declared hostname, IPv6",
        &["v6.example.test"],
        |h, hosts| {
            hosts.add(h.ipv6(), "v6.example.test");
        },
    )
    .await
    else {
        return;
    };
    let addr = f.host.ipv6().into();
    let event = f.tunnels_to("v6.example.test:443", addr).await;
    assert_eq!(event.host, "v6.example.test");
    f.finish().await;
}

#[tokio::test]
async fn raw_ip_of_the_declared_host_is_refused() {
    let Some(mut f) = Fixture::restricted("raw IP of declared host", &[DECLARED], |_, _| {}).await
    else {
        return;
    };
    let v4 = f.host.ipv4();
    let event = f.refused(&format!("{v4}:443"), reason::IP_LITERAL).await;
    assert_eq!(
        (event.host.as_str(), event.port),
        (v4.to_string().as_str(), 443)
    );
    f.finish().await;
}

#[tokio::test]
async fn raw_ip_undeclared_is_refused() {
    let Some(mut f) = Fixture::restricted("raw IP, undeclared", &[DECLARED], |_, _| {}).await
    else {
        return;
    };
    // Another public (documentation) address of the test host; no name
    // points to it.
    let spare = f.host.spare_ipv4();
    f.refused(&format!("{spare}:443"), reason::IP_LITERAL).await;
    f.finish().await;
}

#[tokio::test]
async fn undeclared_hostname_is_refused_without_being_resolved() {
    let Some(mut f) = Fixture::restricted(
        "undeclared hostname",
        &[DECLARED, "dns.example.test"],
        |h, hosts| {
            // Resolvable, and to the test host: only the allowlist stands between.
            hosts.add(h.ipv4(), "evil.example.test");
            // Internal: had Squid resolved it first, the reason would be
            // internal_destination.
            hosts.add(Ipv4Addr::LOCALHOST, "evil-internal.example.test");
        },
    )
    .await
    else {
        return;
    };
    let event = f
        .refused("evil.example.test:443", reason::NOT_ALLOWED)
        .await;
    assert_eq!(event.host, "evil.example.test");
    f.refused("evil-internal.example.test:443", reason::NOT_ALLOWED)
        .await;
    // Names only DNS knows: Squid asks 127.0.0.1, where this server counts
    // every query. The undeclared one is never asked about.
    let dns = DnsServer::start(&[
        ("undeclared.example.test", f.host.ipv4().into()),
        ("dns.example.test", f.host.ipv4().into()),
    ])
    .expect("dns server");
    f.refused("undeclared.example.test:443", reason::NOT_ALLOWED)
        .await;
    assert_eq!(
        dns.queries_for("undeclared.example.test"),
        0,
        "{:?}",
        dns.queries()
    );
    // The counter works: the declared name is looked up (A and AAAA).
    let addr = f.host.ipv4().into();
    f.tunnels_to("dns.example.test:443", addr).await;
    assert!(
        dns.queries_for("dns.example.test") >= 1,
        "{:?}",
        dns.queries()
    );
    f.finish().await;
}

// ---------------------------------------------------------------------------
// Spec, "An allowed name is not a blank cheque"

#[tokio::test]
async fn declared_hostname_on_port_22_is_refused() {
    let Some(mut f) =
        Fixture::restricted("declared hostname, port 22", &[DECLARED], |_, _| {}).await
    else {
        return;
    };
    let event = f.refused(&format!("{DECLARED}:22"), reason::PORT).await;
    assert_eq!((event.host.as_str(), event.port), (DECLARED, 22));
    f.refused(&format!("{DECLARED}:80"), reason::PORT).await;
    f.refused(&format!("{DECLARED}:8443"), reason::PORT).await;
    f.finish().await;
}

#[tokio::test]
async fn declared_name_resolving_to_loopback_is_refused() {
    let Some(mut f) = Fixture::restricted(
        "declared name resolving to 127.0.0.1",
        &["localtest.example.test", "localtest6.example.test"],
        |_, hosts| {
            hosts.add(Ipv4Addr::LOCALHOST, "localtest.example.test");
            hosts.add(Ipv6Addr::LOCALHOST, "localtest6.example.test");
        },
    )
    .await
    else {
        return;
    };
    f.refused("localtest.example.test:443", reason::INTERNAL_DESTINATION)
        .await;
    f.refused("localtest6.example.test:443", reason::INTERNAL_DESTINATION)
        .await;
    f.finish().await;
}

#[tokio::test]
async fn address_whose_ptr_names_a_declared_host_is_refused() {
    // The hosts file is also Squid's reverse map: the spare address's PTR
    // is the declared name. Matching by name with -n never asks.
    let Some(mut f) = Fixture::restricted("PTR names a declared host", &[DECLARED], |h, hosts| {
        hosts.add(h.spare_ipv4(), DECLARED);
    })
    .await
    else {
        return;
    };
    let spare = f.host.spare_ipv4();
    f.refused(&format!("{spare}:443"), reason::IP_LITERAL).await;
    let v6 = f.host.ipv6();
    f.refused(&format!("[{v6}]:443"), reason::IP_LITERAL).await;
    f.finish().await;
}

// ---------------------------------------------------------------------------
// Issue 3: other spellings of an IP, names in other forms

/// One test per spelling of the test host's own address (or of an address
/// no lookup is needed for), each refused as an IP literal.
macro_rules! literal_refused {
    ($($name:ident: $spell:expr;)*) => {$(
        #[tokio::test]
        async fn $name() {
            let Some(mut f) = Fixture::restricted(stringify!($name), &[DECLARED], |_, _| {}).await
            else {
                return;
            };
            let spell: fn(&TestHost) -> String = $spell;
            let target = spell(&f.host);
            f.refused(&format!("{target}:443"), reason::IP_LITERAL).await;
            f.finish().await;
        }
    )*};
}

fn octets(h: &TestHost) -> [u8; 4] {
    h.ipv4().octets()
}

literal_refused! {
    ipv6_literal_is_refused: |h| format!("[{}]", h.ipv6());
    ipv4_mapped_ipv6_is_refused: |h| format!("[::ffff:{}]", h.ipv4());
    decimal_ipv4_is_refused: |h| u32::from(h.ipv4()).to_string();
    octal_ipv4_is_refused: |h| {
        let o = octets(h);
        format!("0{:o}.0{:o}.0{:o}.0{:o}", o[0], o[1], o[2], o[3])
    };
    hex_dotted_ipv4_is_refused: |h| {
        let o = octets(h);
        format!("0x{:x}.0x{:x}.0x{:x}.0x{:x}", o[0], o[1], o[2], o[3])
    };
    hex_ipv4_is_refused: |h| format!("0x{:08X}", u32::from(h.ipv4()));
    short_form_ipv4_is_refused: |h| {
        let o = octets(h);
        format!("{}.{}.{}", o[0], o[1], u16::from(o[2]) << 8 | u16::from(o[3]))
    };
    zero_is_refused: |_| "0".to_owned();
    unspecified_ipv4_is_refused: |_| "0.0.0.0".to_owned();
    unspecified_ipv6_is_refused: |_| "[::]".to_owned();
    ipv6_with_zone_id_is_refused: |_| "[fe80::1%25lo]".to_owned();
    loopback_literal_is_refused: |_| "127.0.0.1".to_owned();
    metadata_literal_is_refused: |_| "169.254.169.254".to_owned();
}

#[tokio::test]
async fn upper_case_declared_name_is_allowed_as_the_declared_name() {
    let Some(mut f) = Fixture::restricted("upper-case declared name", &[DECLARED], |_, _| {}).await
    else {
        return;
    };
    let addr = f.host.ipv4().into();
    let event = f
        .tunnels_to(&format!("{}:443", DECLARED.to_uppercase()), addr)
        .await;
    assert_eq!(event.host, DECLARED, "logged in the form Squid matched");
    let event = f.tunnels_to("Api.Example.Test:443", addr).await;
    assert_eq!(event.host, DECLARED);
    f.finish().await;
}

#[tokio::test]
async fn trailing_dot_declared_name_is_allowed_as_the_declared_name() {
    let Some(mut f) =
        Fixture::restricted("trailing-dot declared name", &[DECLARED], |_, _| {}).await
    else {
        return;
    };
    let addr = f.host.ipv4().into();
    let event = f.tunnels_to(&format!("{DECLARED}.:443"), addr).await;
    assert_eq!(event.host, DECLARED);
    // A trailing dot does not make an undeclared name declared.
    f.refused("evil.example.test.:443", reason::NOT_ALLOWED)
        .await;
    f.finish().await;
}

/// One test per internal range: a declared name resolving into it is
/// refused on the resolved address. The address is trapped into the test
/// host's namespace first.
macro_rules! internal_refused {
    ($($name:ident: $addr:expr;)*) => {$(
        #[tokio::test]
        async fn $name() {
            let name = "inside.example.test";
            let Some(mut f) = Fixture::restricted(stringify!($name), &[DECLARED, name], |h, hosts| {
                let addr: fn(&TestHost) -> IpAddr = $addr;
                hosts.add(addr(h), name);
            })
            .await
            else {
                return;
            };
            let addr: fn(&TestHost) -> IpAddr = $addr;
            let addr = addr(&f.host);
            if needs_trap(addr) {
                f.host.trap(addr).expect("trap");
            }
            f.refused(&format!("{name}:443"), reason::INTERNAL_DESTINATION).await;
            f.finish().await;
        }
    )*};
}

/// Whether a connection to `addr` could leave the machine at all. Loopback,
/// 0/8 ("this network": connect refuses it), IPv6 link-local without a zone
/// and IPv4-mapped forms of those cannot, and need no trap.
fn needs_trap(addr: IpAddr) -> bool {
    match addr.to_canonical() {
        IpAddr::V4(v4) => !v4.is_loopback() && v4.octets()[0] != 0,
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 != 0xfe80 && !v6.is_loopback(),
    }
}

fn v4(a: u8, b: u8, c: u8, h: &TestHost) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, h.slot()))
}

internal_refused! {
    name_resolving_to_metadata_is_refused: |_| IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254));
    name_resolving_to_link_local_is_refused: |h| v4(169, 254, 7, h);
    name_resolving_to_10_is_refused: |h| v4(10, 99, 0, h);
    name_resolving_to_172_16_is_refused: |h| v4(172, 16, 99, h);
    name_resolving_to_172_31_is_refused: |h| v4(172, 31, 99, h);
    name_resolving_to_192_168_is_refused: |h| v4(192, 168, 99, h);
    name_resolving_to_cgnat_is_refused: |h| v4(100, 64, 99, h);
    name_resolving_to_this_network_is_refused: |h| v4(0, 1, 2, h);
    name_resolving_to_benchmarking_is_refused: |h| v4(198, 18, 99, h);
    name_resolving_to_unique_local_fc_is_refused: |h| IpAddr::V6(Ipv6Addr::new(0xfc00, 0x99, 0, 0, 0, 0, 0, h.slot().into()));
    name_resolving_to_unique_local_fd_is_refused: |h| IpAddr::V6(Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, h.slot().into()));
    name_resolving_to_ipv6_link_local_is_refused: |h| IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, h.slot().into()));
    name_resolving_to_ipv4_mapped_loopback_is_refused: |_| IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped());
}

// ---------------------------------------------------------------------------
// Issue 22: IPv6 answers that carry an internal IPv4 address

/// An address made from a test host's.
type Address = fn(&TestHost) -> IpAddr;

/// `v4` in the NAT64 well-known prefix, `64:ff9b::a.b.c.d`.
fn nat64(v4: Ipv4Addr) -> IpAddr {
    let [a, b, c, d] = v4.octets();
    IpAddr::V6(Ipv6Addr::new(
        0x64,
        0xff9b,
        0,
        0,
        0,
        0,
        u16::from_be_bytes([a, b]),
        u16::from_be_bytes([c, d]),
    ))
}

/// `v4` in the NAT64 local-use prefix with the /48 layout of RFC 6052:
/// octets 1-2 in bits 48-63, the u-octet, octets 3-4 in bits 72-87.
fn nat64_local(v4: Ipv4Addr) -> IpAddr {
    let [a, b, c, d] = v4.octets();
    let (ab, cd) = (u16::from_be_bytes([a, b]), u16::from_be_bytes([0, c]));
    IpAddr::V6(Ipv6Addr::new(
        0x64,
        0xff9b,
        1,
        ab,
        cd,
        u16::from(d) << 8,
        0,
        0,
    ))
}

/// `v4` as a 6to4 site, host `::slot`: `2002:a.b.c.d::n`.
fn six_to_four(v4: Ipv4Addr, h: &TestHost) -> IpAddr {
    let [a, b, c, d] = v4.octets();
    IpAddr::V6(Ipv6Addr::new(
        0x2002,
        u16::from_be_bytes([a, b]),
        u16::from_be_bytes([c, d]),
        0,
        0,
        0,
        0,
        h.slot().into(),
    ))
}

/// The deprecated IPv4-compatible form, `::a.b.c.d`.
fn compatible(v4: Ipv4Addr) -> IpAddr {
    IpAddr::V6(v4.to_ipv6_compatible())
}

/// The IPv4-translated form of SIIT, `::ffff:0:a.b.c.d`.
fn translated(v4: Ipv4Addr) -> IpAddr {
    let [a, b, c, d] = v4.octets();
    IpAddr::V6(Ipv6Addr::new(
        0,
        0,
        0,
        0,
        0xffff,
        0,
        u16::from_be_bytes([a, b]),
        u16::from_be_bytes([c, d]),
    ))
}

/// A Teredo address: `server` in bits 32-63, `client` inverted in the last
/// 32, flags and port in between.
fn teredo(server: Ipv4Addr, client: Ipv4Addr) -> IpAddr {
    let [a, b, c, d] = server.octets();
    let [e, f, g, h] = (!u32::from(client)).to_be_bytes();
    IpAddr::V6(Ipv6Addr::new(
        0x2001,
        0,
        u16::from_be_bytes([a, b]),
        u16::from_be_bytes([c, d]),
        0x8000,
        0x63bf,
        u16::from_be_bytes([e, f]),
        u16::from_be_bytes([g, h]),
    ))
}

internal_refused! {
    name_resolving_to_nat64_of_metadata_is_refused: |_| nat64(Ipv4Addr::new(169, 254, 169, 254));
    name_resolving_to_nat64_of_loopback_is_refused: |_| nat64(Ipv4Addr::LOCALHOST);
    name_resolving_to_nat64_of_10_is_refused: |h| nat64(Ipv4Addr::new(10, 96, 0, h.slot()));
    name_resolving_to_nat64_local_use_of_metadata_is_refused: |_| nat64_local(Ipv4Addr::new(169, 254, 169, 254));
    name_resolving_to_nat64_local_use_of_a_public_address_is_refused: |h| nat64_local(h.ipv4());
    name_resolving_to_6to4_of_metadata_is_refused: |h| six_to_four(Ipv4Addr::new(169, 254, 169, 254), h);
    name_resolving_to_6to4_of_192_168_is_refused: |h| six_to_four(Ipv4Addr::new(192, 168, 96, h.slot()), h);
    name_resolving_to_ipv4_compatible_of_10_is_refused: |h| compatible(Ipv4Addr::new(10, 95, 0, h.slot()));
    name_resolving_to_ipv4_compatible_of_metadata_is_refused: |_| compatible(Ipv4Addr::new(169, 254, 169, 254));
    name_resolving_to_ipv4_translated_of_172_16_is_refused: |h| translated(Ipv4Addr::new(172, 16, 95, h.slot()));
    name_resolving_to_teredo_with_an_internal_client_is_refused: |h| teredo(h.ipv4(), Ipv4Addr::new(10, 94, 0, h.slot()));
    name_resolving_to_teredo_of_public_addresses_is_refused: |h| teredo(h.ipv4(), h.spare_ipv4());
}

#[tokio::test]
async fn names_resolving_to_ipv6_forms_of_public_addresses_are_allowed() {
    // Judged by the IPv4 address they carry: public, so allowed (an
    // IPv6-only network behind NAT64 reaches every IPv4-only host so).
    let forms: [(&str, Address); 4] = [
        ("nat64.example.test", |h| nat64(h.ipv4())),
        ("6to4.example.test", |h| six_to_four(h.ipv4(), h)),
        ("compatible.example.test", |h| compatible(h.ipv4())),
        ("translated.example.test", |h| translated(h.ipv4())),
    ];
    let names: Vec<&str> = forms.iter().map(|(name, _)| *name).collect();
    let Some(mut f) = Fixture::restricted("public embedded IPv4", &names, |h, hosts| {
        for (name, form) in &forms {
            hosts.add(form(h), name);
        }
    })
    .await
    else {
        return;
    };
    for (name, form) in &forms {
        let addr = form(&f.host);
        f.host.trap(addr).expect("trap");
        f.tunnels_to(&format!("{name}:443"), addr).await;
    }
    f.finish().await;
}

#[tokio::test]
async fn name_with_public_and_internal_answers_is_refused() {
    // Several answers per name need DNS (a hosts file holds one per name).
    let names = [
        "two-a.example.test",
        "a-inside.example.test",
        "aaaa-inside.example.test",
        "public.example.test",
    ];
    let Some(mut f) = Fixture::restricted("public and internal answers", &names, |_, _| {}).await
    else {
        return;
    };
    let (pub4, pub6) = (IpAddr::V4(f.host.ipv4()), IpAddr::V6(f.host.ipv6()));
    let in4 = IpAddr::V4(Ipv4Addr::new(10, 98, 0, f.host.slot()));
    let in6 = IpAddr::V6(Ipv6Addr::new(
        0xfd98,
        0,
        0,
        0,
        0,
        0,
        0,
        f.host.slot().into(),
    ));
    f.host.trap(in4).expect("trap");
    f.host.trap(in6).expect("trap");
    let dns = DnsServer::start(&[
        ("two-a.example.test", pub4),
        ("two-a.example.test", in4),
        ("a-inside.example.test", in4),
        ("a-inside.example.test", pub6),
        ("aaaa-inside.example.test", pub4),
        ("aaaa-inside.example.test", in6),
        ("public.example.test", pub4),
        ("public.example.test", pub6),
    ])
    .expect("dns server");
    for name in &names[..3] {
        f.refused(&format!("{name}:443"), reason::INTERNAL_DESTINATION)
            .await;
    }
    // Control: the same path with only public answers goes through.
    let before = f.host.connections();
    let outcome = f.connect("public.example.test:443").await;
    assert_eq!(outcome.status, 200, "{outcome:?}");
    assert_eq!(f.host.connections(), before + 1);
    let event = f.event().await;
    assert!(event.allowed);
    assert!(
        event.resolved == Some(pub4) || event.resolved == Some(pub6),
        "{event:?}"
    );
    drop(dns);
    f.finish().await;
}

#[tokio::test]
async fn names_that_do_not_resolve_are_refused_in_both_modes() {
    for policy in [
        restricted(&[DECLARED, "gone.example.test"]),
        EgressPolicy::open(),
    ] {
        let mode = policy.mode;
        let Some(mut f) = Fixture::start("unresolvable name", policy, |h| {
            HostsFile::new().with(h.ipv4(), DECLARED)
        })
        .await
        else {
            return;
        };
        // The DNS server answers NXDOMAIN for any name it does not know.
        let dns = DnsServer::start(&[]).expect("dns server");
        let event = f.refused("gone.example.test:443", reason::UNRESOLVED).await;
        assert_eq!(event.host, "gone.example.test", "{mode:?}");
        assert!(dns.queries_for("gone.example.test") >= 1, "{mode:?}");
        drop(dns);
        f.finish().await;
    }
}

#[tokio::test]
async fn anything_but_connect_is_refused() {
    let Some(mut f) = Fixture::restricted("not CONNECT", &[DECLARED], |_, _| {}).await else {
        return;
    };
    let status = f
        .raw(format!("GET http://{DECLARED}/ HTTP/1.1\r\nHost: {DECLARED}\r\n\r\n").as_bytes())
        .await;
    assert_eq!(status, 403);
    let event = f.event().await;
    assert!(!event.allowed);
    assert_eq!(event.reason.as_deref(), Some(reason::NOT_CONNECT));
    assert_eq!(event.method, "GET");
    assert_eq!((event.host.as_str(), event.port), (DECLARED, 80));
    // Squid's own pages: the cache manager and internal icons.
    let port = f.squid().addr().port();
    for request in [
        format!("GET /squid-internal-mgr/menu HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"),
        format!(
            "GET http://127.0.0.1:{port}/squid-internal-mgr/info HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        ),
        format!(
            "GET http://constle-egress:{port}/squid-internal-static/icons/SN.png HTTP/1.1\r\nHost: constle-egress:{port}\r\n\r\n"
        ),
        "GET cache_object://localhost/info HTTP/1.0\r\n\r\n".to_owned(),
        format!(
            "POST http://{DECLARED}:443/ HTTP/1.1\r\nHost: {DECLARED}:443\r\nContent-Length: 0\r\n\r\n"
        ),
    ] {
        let status = f.raw(request.as_bytes()).await;
        let event = f.event().await;
        assert!(!event.allowed, "{request:?}: {event:?}");
        assert!(status == 403 || status == 400, "{request:?}: {status}");
        if status == 403 {
            assert_eq!(
                event.reason.as_deref(),
                Some(reason::NOT_CONNECT),
                "{request:?}: {event:?}"
            );
        }
    }
    assert_eq!(f.host.connections(), 0);
    f.finish().await;
}

#[tokio::test]
async fn malformed_request_is_one_refused_event() {
    let Some(mut f) = Fixture::restricted("malformed request", &[DECLARED], |_, _| {}).await else {
        return;
    };
    let status = f.raw(b"garbage\x1b[2J here\r\n\r\n").await;
    assert_eq!(status, 400);
    let event = f.event().await;
    assert!(!event.allowed);
    assert_eq!(event.squid_result, "NONE_NONE/400");
    assert_eq!(event.reason.as_deref(), Some("malformed_request"));
    assert!(!event.method.contains('\u{1b}'), "{event:?}");
    f.finish().await;
}

// ---------------------------------------------------------------------------
// Modes

#[tokio::test]
async fn empty_allowlist_refuses_everything() {
    let Some(mut f) = Fixture::start("empty allowlist", restricted(&[]), |h| {
        HostsFile::new().with(h.ipv4(), DECLARED)
    })
    .await
    else {
        return;
    };
    f.refused(&format!("{DECLARED}:443"), reason::NOT_ALLOWED)
        .await;
    f.refused(&format!("{DECLARED}:22"), reason::PORT).await;
    let v4 = f.host.ipv4();
    f.refused(&format!("{v4}:443"), reason::IP_LITERAL).await;
    f.finish().await;
}

#[tokio::test]
async fn open_mode_allows_an_undeclared_public_name_and_refuses_internal_ones() {
    let policy = EgressPolicy {
        mode: Mode::Open,
        allowed_hosts: vec![host(DECLARED)],
    };
    let Some(mut f) = Fixture::start("open mode", policy, |h| {
        HostsFile::new()
            .with(h.ipv4(), "anything.example.test")
            .with(h.ipv6(), "anything6.example.test")
            .with(Ipv4Addr::LOCALHOST, "loop.example.test")
            .with(Ipv4Addr::new(169, 254, 169, 254), "metadata.example.test")
            .with(Ipv4Addr::new(10, 97, 0, h.slot()), "ten.example.test")
    })
    .await
    else {
        return;
    };
    f.host
        .trap(IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)))
        .expect("trap");
    f.host
        .trap(IpAddr::V4(Ipv4Addr::new(10, 97, 0, f.host.slot())))
        .expect("trap");
    let (v4, v6) = (f.host.ipv4(), f.host.ipv6());
    let event = f.tunnels_to("anything.example.test:443", v4.into()).await;
    assert_eq!(event.host, "anything.example.test");
    f.tunnels_to("anything6.example.test:443", v6.into()).await;
    f.refused("loop.example.test:443", reason::INTERNAL_DESTINATION)
        .await;
    f.refused("metadata.example.test:443", reason::INTERNAL_DESTINATION)
        .await;
    f.refused("ten.example.test:443", reason::INTERNAL_DESTINATION)
        .await;
    f.refused(&format!("{v4}:443"), reason::IP_LITERAL).await;
    f.refused(&format!("[{v6}]:443"), reason::IP_LITERAL).await;
    f.refused("anything.example.test:22", reason::PORT).await;
    f.finish().await;
}

// ---------------------------------------------------------------------------
// Events

#[tokio::test]
async fn every_request_is_exactly_one_event_in_order() {
    let Some(mut f) = Fixture::restricted("one event per request", &[DECLARED], |_, _| {}).await
    else {
        return;
    };
    let addr = f.squid().addr();
    let v4 = f.host.ipv4();
    let targets = [
        format!("{DECLARED}:443"),
        format!("{DECLARED}:22"),
        "evil.example.test:443".to_owned(),
        format!("{v4}:443"),
        format!("{DECLARED}:443"),
    ];
    for target in &targets {
        common::connect_through(addr, target).await;
    }
    let mut seen = Vec::new();
    for _ in &targets {
        let e = f.event().await;
        seen.push((e.host, e.port, e.allowed, e.reason));
    }
    assert_eq!(
        seen,
        vec![
            (DECLARED.to_owned(), 443, true, None),
            (DECLARED.to_owned(), 22, false, Some("port".to_owned())),
            (
                "evil.example.test".to_owned(),
                443,
                false,
                Some("not_allowed".to_owned())
            ),
            (v4.to_string(), 443, false, Some("ip_literal".to_owned())),
            (DECLARED.to_owned(), 443, true, None),
        ]
    );
    assert_eq!(f.host.connections(), 2);
    f.finish().await;
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_not_dropped_silently() {
    // The start-up probe's line is filtered by its port; a client's empty
    // connection is still reported.
    let Some(mut f) = Fixture::restricted("empty connection", &[DECLARED], |_, _| {}).await else {
        return;
    };
    let stream = tokio::net::TcpStream::connect(f.squid().addr())
        .await
        .expect("connect");
    drop(stream);
    let event = f.event().await;
    assert!(!event.allowed);
    assert_eq!(event.method, "-");
    assert_eq!(event.squid_result, "NONE_NONE/000");
    assert_eq!(event.reason.as_deref(), Some("no_request"));
    f.finish().await;
}
