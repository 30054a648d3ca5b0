//! terra's own resolver (`DnsResolver`) against a DNS server this test
//! starts on 127.0.0.1 (a free port, UDP and TCP): A, AAAA, NXDOMAIN, no
//! answer, SERVFAIL, a silent server (timeout), a truncated answer (TCP
//! fallback), CNAME chains (in one answer, and an alias the client must ask
//! for), a CNAME loop, search domains with ndots, a datagram with a wrong id,
//! a dead first nameserver, and /etc/hosts taking precedence. Names live
//! under terra-test.example, which no /etc/hosts lists; no query leaves
//! this machine.
#![cfg(target_os = "linux")]

#[path = "common/dns_server.rs"]
mod dns_server;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use dns_server::{test_zone, DnsServer, DECOY};
use terra_netd::{DnsResolver, ResolveErrorKind, Resolver, ResolverConfig};

fn server() -> DnsServer {
    DnsServer::start("127.0.0.1:0".parse().unwrap(), test_zone())
}

fn resolver(servers: Vec<SocketAddr>, conf: &str, hosts: &str) -> DnsResolver {
    let mut c = ResolverConfig::parse(conf, hosts);
    c.nameservers = servers;
    DnsResolver::new(c, Duration::from_secs(10), 8)
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|a| a.parse().unwrap()).collect()
}

const Z: &str = "terra-test.example";

#[test]
fn a_and_aaaa_records() {
    let s = server();
    let r = resolver(vec![s.addr], "", "");
    assert_eq!(r.resolve(&format!("v4.{Z}")).unwrap(), ips(&["127.0.0.1"]));
    assert_eq!(r.resolve(&format!("v6.{Z}")).unwrap(), ips(&["::1"]));
    // A before AAAA, whatever the server's order.
    assert_eq!(
        r.resolve(&format!("both.{Z}")).unwrap(),
        ips(&["127.0.0.1", "::1"])
    );
    let seen = s.seen();
    for qtype in [1, 28] {
        assert!(
            seen.contains(&(format!("v4.{Z}"), qtype, "udp")),
            "{seen:?}"
        );
    }
}

#[test]
fn nxdomain_no_answer_and_server_failure_are_told_apart() {
    let s = server();
    let r = resolver(vec![s.addr], "options attempts:1", "");
    let e = r.resolve(&format!("gone.{Z}")).unwrap_err();
    assert_eq!(e.kind, ResolveErrorKind::NxDomain, "{e}");
    assert!(e.to_string().starts_with("NXDOMAIN: gone."), "{e}");
    assert!(e.detail.contains(&s.addr.to_string()), "{e}");
    let e = r.resolve(&format!("txt.{Z}")).unwrap_err();
    assert_eq!(e.kind, ResolveErrorKind::NoAnswer, "{e}");
    assert!(e.to_string().starts_with("no-answer: txt."), "{e}");
    let e = r.resolve(&format!("broken.{Z}")).unwrap_err();
    assert_eq!(e.kind, ResolveErrorKind::ServerFailure, "{e}");
    assert!(e.detail.contains("SERVFAIL"), "{e}");
    // The twin: the same server answers a name it has.
    assert_eq!(r.resolve(&format!("v4.{Z}")).unwrap(), ips(&["127.0.0.1"]));
}

#[test]
fn a_silent_server_times_out() {
    let s = server();
    let r = resolver(vec![s.addr], "options timeout:1 attempts:1", "");
    let e = r.resolve(&format!("slow.{Z}")).unwrap_err();
    assert_eq!(e.kind, ResolveErrorKind::Timeout, "{e}");
    assert!(e.to_string().starts_with("timeout: slow."), "{e}");
    assert!(s.asked(&format!("slow.{Z}"), "udp"));
    // The broker's own budget bounds the lookup too (here below the
    // resolv.conf timeout).
    let mut c = ResolverConfig::parse("options timeout:30 attempts:5", "");
    c.nameservers = vec![s.addr];
    let r = DnsResolver::new(c, Duration::from_millis(300), 8);
    let e = r.resolve(&format!("slow.{Z}")).unwrap_err();
    assert_eq!(e.kind, ResolveErrorKind::Timeout, "{e}");
    assert!(e.detail.contains("300 ms lookup budget"), "{e}");
}

#[test]
fn a_truncated_answer_is_asked_again_over_tcp() {
    let s = server();
    let r = resolver(vec![s.addr], "", "");
    let name = format!("big.{Z}");
    assert_eq!(r.resolve(&name).unwrap(), ips(&["127.0.0.1"]));
    assert!(s.asked(&name, "udp"), "{:?}", s.seen());
    assert!(s.asked(&name, "tcp"), "{:?}", s.seen());
    // The twin: an answer that fits never uses TCP.
    r.resolve(&format!("v4.{Z}")).unwrap();
    assert!(!s.asked(&format!("v4.{Z}"), "tcp"));
}

#[test]
fn cname_chains_are_followed_and_bounded() {
    let s = server();
    let r = resolver(vec![s.addr], "options attempts:1", "");
    // alias -> alias2 -> v4, all in one answer.
    assert_eq!(
        r.resolve(&format!("alias.{Z}")).unwrap(),
        ips(&["127.0.0.1"])
    );
    let v4_a = (format!("v4.{Z}"), 1, "udp");
    assert!(!s.seen().contains(&v4_a), "{:?}", s.seen());
    // bare -> v4 without v4's records: the resolver asks for v4.
    assert_eq!(
        r.resolve(&format!("bare.{Z}")).unwrap(),
        ips(&["127.0.0.1"])
    );
    assert!(s.seen().contains(&v4_a), "{:?}", s.seen());
    // loop1 -> loop2 -> loop1 ...: refused, not followed for ever.
    let e = r.resolve(&format!("loop1.{Z}")).unwrap_err();
    assert_eq!(e.kind, ResolveErrorKind::ServerFailure, "{e}");
    assert!(e.detail.contains("CNAME chain longer than 8"), "{e}");
}

#[test]
fn search_domains_follow_ndots() {
    let s = server();
    let r = resolver(vec![s.addr], &format!("search {Z}\noptions ndots:2"), "");
    // One label, fewer dots than ndots: the search domain first.
    assert_eq!(r.resolve("pkg").unwrap(), ips(&["127.0.0.1"]));
    let seen = s.seen();
    assert_eq!(seen[0].0, format!("pkg.{Z}"), "{seen:?}");
    assert!(!seen.iter().any(|q| q.0 == "pkg"), "{seen:?}");
    // As many dots as ndots: the name itself first, found, search not used.
    let before = s.seen().len();
    assert_eq!(r.resolve(&format!("v4.{Z}")).unwrap(), ips(&["127.0.0.1"]));
    let later = &s.seen()[before..];
    assert!(later.iter().all(|q| q.0 == format!("v4.{Z}")), "{later:?}");
    // ndots:5: the search domain is tried first (NXDOMAIN), then the name.
    let r = resolver(vec![s.addr], &format!("search {Z}\noptions ndots:5"), "");
    let before = s.seen().len();
    assert_eq!(r.resolve(&format!("v4.{Z}")).unwrap(), ips(&["127.0.0.1"]));
    let later = &s.seen()[before..];
    assert_eq!(later[0].0, format!("v4.{Z}.{Z}"), "{later:?}");
    // Every name tried is NXDOMAIN: the error lists them.
    let e = r.resolve("nothing").unwrap_err();
    assert_eq!(e.kind, ResolveErrorKind::NxDomain, "{e}");
    assert!(e.detail.contains(&format!("nothing.{Z}, nothing")), "{e}");
}

#[test]
fn a_datagram_with_a_wrong_id_is_ignored() {
    let s = server();
    let r = resolver(vec![s.addr], "", "");
    let got = r.resolve(&format!("spoofed.{Z}")).unwrap();
    assert_eq!(got, ips(&["127.0.0.1"]));
    assert!(!got.contains(&DECOY.parse().unwrap()));
}

#[test]
fn a_dead_first_nameserver_falls_through_to_the_next() {
    let s = server();
    // A port with nothing behind it (bound, then closed): ICMP unreachable.
    let dead = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let r = resolver(vec![dead, s.addr], "options timeout:2 attempts:1", "");
    assert_eq!(r.resolve(&format!("v4.{Z}")).unwrap(), ips(&["127.0.0.1"]));
    // Only the dead server: a server failure that names it.
    let r = resolver(vec![dead], "options timeout:2 attempts:1", "");
    let e = r.resolve(&format!("v4.{Z}")).unwrap_err();
    assert_eq!(e.kind, ResolveErrorKind::ServerFailure, "{e}");
    assert!(e.detail.contains(&dead.to_string()), "{e}");
    assert!(e.detail.contains("port unreachable"), "{e}");
    assert!(!e.detail.contains("os error"), "no bare errno: {e}");
}

#[test]
fn hosts_file_answers_before_dns() {
    let s = server();
    let r = resolver(vec![s.addr], "", &format!("127.0.0.7 v4.{Z}\n::1 v6.{Z}\n"));
    assert_eq!(r.resolve(&format!("v4.{Z}")).unwrap(), ips(&["127.0.0.7"]));
    assert_eq!(r.resolve(&format!("V6.{Z}")).unwrap(), ips(&["::1"]));
    assert!(s.seen().is_empty(), "{:?}", s.seen());
    // The twin: a name the file does not list is asked for.
    assert_eq!(r.resolve(&format!("both.{Z}")).unwrap().len(), 2);
    assert!(s.asked(&format!("both.{Z}"), "udp"));
}

#[test]
fn too_many_lookups_at_once_are_refused_as_busy() {
    let s = server();
    let mut c = ResolverConfig::parse("options timeout:2 attempts:1", "");
    c.nameservers = vec![s.addr];
    let r = std::sync::Arc::new(DnsResolver::new(c, Duration::from_secs(5), 1));
    let r2 = r.clone();
    let slow = std::thread::spawn(move || r2.resolve(&format!("slow.{Z}")));
    // Wait until the slow lookup is in flight (its queries arrived).
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !s.asked(&format!("slow.{Z}"), "udp") {
        assert!(
            std::time::Instant::now() < until,
            "the slow lookup never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let e = r.resolve(&format!("v4.{Z}")).unwrap_err();
    assert_eq!(e.kind, ResolveErrorKind::Busy, "{e}");
    assert_eq!(
        slow.join().unwrap().unwrap_err().kind,
        ResolveErrorKind::Timeout
    );
    // The slot is free again.
    assert_eq!(r.resolve(&format!("v4.{Z}")).unwrap(), ips(&["127.0.0.1"]));
}
