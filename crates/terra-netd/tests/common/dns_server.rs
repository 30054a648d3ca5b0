//! A small authoritative-style DNS responder for tests (UDP and TCP on one
//! address), written from RFC 1035 and independent of the broker's own
//! encoder and decoder, so the two check each other. Shared by the broker's
//! resolver tests and the repository's network end-to-end tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the server answers one name.
#[derive(Debug, Clone)]
pub enum Entry {
    /// A and AAAA records (each query gets those of its family; none is
    /// NOERROR with an empty answer).
    Addrs(Vec<IpAddr>),
    /// A CNAME to the target, followed inside the zone like a recursive
    /// server does (the target's records in the same answer).
    Cname(String),
    /// A CNAME to the target alone (the client must ask for the target).
    BareCname(String),
    /// Never answers.
    Silent,
    /// Over UDP a truncated (TC) answer without records; over TCP the records.
    Truncated(Vec<IpAddr>),
    /// SERVFAIL.
    ServFail,
    /// First a datagram with a wrong id and a wrong address, then the answer.
    WrongIdFirst(Vec<IpAddr>),
}

/// One query the server received: name, type, "udp" or "tcp".
pub type Seen = (String, u16, &'static str);

pub struct DnsServer {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

/// The decoy address [`Entry::WrongIdFirst`] sends under a wrong id.
pub const DECOY: &str = "203.0.113.66";

fn be16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

/// The question of a query: (id, flags' RD bit, name lowercase, qtype, end offset).
fn parse_query(q: &[u8]) -> Option<(u16, String, u16, usize)> {
    if q.len() < 12 || be16(q, 4) != 1 {
        return None;
    }
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = *q.get(pos)? as usize;
        if len == 0 {
            pos += 1;
            break;
        }
        if len > 63 {
            return None;
        }
        labels.push(String::from_utf8_lossy(q.get(pos + 1..pos + 1 + len)?).to_lowercase());
        pos += 1 + len;
    }
    let qtype = be16(q.get(pos..pos + 4)?, 0);
    Some((be16(q, 0), labels.join("."), qtype, pos + 4))
}

fn wire_name(name: &str) -> Vec<u8> {
    let mut w = Vec::new();
    for l in name.split('.') {
        w.push(l.len() as u8);
        w.extend_from_slice(l.as_bytes());
    }
    w.push(0);
    w
}

fn record(out: &mut Vec<u8>, owner: &str, rtype: u16, rdata: &[u8]) {
    out.extend_from_slice(&wire_name(owner));
    out.extend_from_slice(&rtype.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&30u32.to_be_bytes());
    out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    out.extend_from_slice(rdata);
}

fn addr_records(out: &mut Vec<u8>, owner: &str, qtype: u16, addrs: &[IpAddr]) -> u16 {
    let mut n = 0;
    for a in addrs {
        match (a, qtype) {
            (IpAddr::V4(v4), 1) => record(out, owner, 1, &v4.octets()),
            (IpAddr::V6(v6), 28) => record(out, owner, 28, &v6.octets()),
            _ => continue,
        }
        n += 1;
    }
    n
}

/// The answer to one query, or None to stay silent.
fn answer(zone: &HashMap<String, Entry>, q: &[u8], tcp: bool) -> Option<Vec<Vec<u8>>> {
    let (id, name, qtype, qend) = parse_query(q)?;
    let mut flags: u16 = 0x8400 | 0x0100 | 0x0080; // QR AA RD RA
    let mut answers = Vec::new();
    let mut count = 0u16;
    let mut rcode = 0u16;
    let mut extra = Vec::new();
    match zone.get(&name) {
        None => rcode = 3,
        Some(Entry::Silent) => return None,
        Some(Entry::ServFail) => rcode = 2,
        Some(Entry::Addrs(a)) => count += addr_records(&mut answers, &name, qtype, a),
        Some(Entry::Truncated(a)) => {
            if tcp {
                count += addr_records(&mut answers, &name, qtype, a);
            } else {
                flags |= 0x0200;
            }
        }
        Some(Entry::WrongIdFirst(a)) => {
            count += addr_records(&mut answers, &name, qtype, a);
            let decoy: IpAddr = DECOY.parse().unwrap();
            let mut d = Vec::new();
            let n = addr_records(&mut d, &name, qtype, &[decoy]);
            let mut m = header(id ^ 0x5A5A, flags, n);
            m.extend_from_slice(&q[12..qend]);
            m.extend_from_slice(&d);
            extra.push(m);
        }
        Some(Entry::BareCname(t)) => {
            record(&mut answers, &name, 5, &wire_name(t));
            count += 1;
        }
        Some(Entry::Cname(t)) => {
            let mut owner = name.clone();
            let mut target = t.clone();
            for _ in 0..16 {
                record(&mut answers, &owner, 5, &wire_name(&target));
                count += 1;
                match zone.get(&target) {
                    Some(Entry::Cname(next)) => {
                        owner = target.clone();
                        target = next.clone();
                    }
                    Some(Entry::Addrs(a)) => {
                        count += addr_records(&mut answers, &target, qtype, a);
                        break;
                    }
                    _ => break,
                }
            }
        }
    }
    let mut m = header(id, flags | rcode, count);
    m.extend_from_slice(&q[12..qend]);
    m.extend_from_slice(&answers);
    extra.push(m);
    Some(extra)
}

fn header(id: u16, flags: u16, ancount: u16) -> Vec<u8> {
    let mut m = Vec::new();
    for v in [id, flags, 1, ancount, 0, 0] {
        m.extend_from_slice(&v.to_be_bytes());
    }
    m
}

impl DnsServer {
    /// Serves `zone` on UDP and TCP at `addr` (port 0: a free port, the same
    /// for both).
    pub fn start(addr: SocketAddr, zone: HashMap<String, Entry>) -> DnsServer {
        let (udp, tcp) = (0..50)
            .find_map(|_| {
                let udp = UdpSocket::bind(addr).ok()?;
                let tcp = TcpListener::bind(udp.local_addr().ok()?).ok()?;
                Some((udp, tcp))
            })
            .expect("DNS test server: cannot bind UDP and TCP on one port");
        let addr = udp.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let zone = Arc::new(zone);
        {
            let (zone, seen) = (zone.clone(), seen.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 1500];
                while let Ok((n, from)) = udp.recv_from(&mut buf) {
                    let q = &buf[..n];
                    if let Some((_, name, qtype, _)) = parse_query(q) {
                        seen.lock().unwrap().push((name, qtype, "udp"));
                    }
                    for m in answer(&zone, q, false).unwrap_or_default() {
                        let _ = udp.send_to(&m, from);
                    }
                }
            });
        }
        let tcp_seen = seen.clone();
        std::thread::spawn(move || {
            let seen = tcp_seen;
            for s in tcp.incoming() {
                let Ok(mut s) = s else { continue };
                let (zone, seen) = (zone.clone(), seen.clone());
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                    let mut len = [0u8; 2];
                    if s.read_exact(&mut len).is_err() {
                        return;
                    }
                    let mut q = vec![0u8; u16::from_be_bytes(len) as usize];
                    if s.read_exact(&mut q).is_err() {
                        return;
                    }
                    if let Some((_, name, qtype, _)) = parse_query(&q) {
                        seen.lock().unwrap().push((name, qtype, "tcp"));
                    }
                    if let Some(ms) = answer(&zone, &q, true) {
                        if let Some(m) = ms.last() {
                            let mut framed = (m.len() as u16).to_be_bytes().to_vec();
                            framed.extend_from_slice(m);
                            let _ = s.write_all(&framed);
                        }
                    }
                });
            }
        });
        DnsServer { addr, seen }
    }

    /// The queries received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Whether `name` was asked for over `transport`.
    pub fn asked(&self, name: &str, transport: &str) -> bool {
        self.seen()
            .iter()
            .any(|(n, _, t)| n == name && *t == transport)
    }
}

/// The zone the tests share: names under `terra-test.example` (never in
/// /etc/hosts) resolving to loopback addresses.
pub fn test_zone() -> HashMap<String, Entry> {
    let v4: IpAddr = "127.0.0.1".parse().unwrap();
    let v6: IpAddr = "::1".parse().unwrap();
    let z = |n: &str| format!("{n}.terra-test.example");
    HashMap::from([
        (z("v4"), Entry::Addrs(vec![v4])),
        (z("v6"), Entry::Addrs(vec![v6])),
        (z("both"), Entry::Addrs(vec![v6, v4])),
        (z("pkg"), Entry::Addrs(vec![v4])),
        // TEST-NET-1: never connected to (its tests refuse before connecting).
        (z("doc"), Entry::Addrs(vec!["192.0.2.10".parse().unwrap()])),
        (z("txt"), Entry::Addrs(vec![])),
        (z("slow"), Entry::Silent),
        (z("broken"), Entry::ServFail),
        (z("big"), Entry::Truncated(vec![v4])),
        (z("spoofed"), Entry::WrongIdFirst(vec![v4])),
        (z("alias"), Entry::Cname(z("alias2"))),
        (z("alias2"), Entry::Cname(z("v4"))),
        (z("bare"), Entry::BareCname(z("v4"))),
        (z("loop1"), Entry::Cname(z("loop2"))),
        (z("loop2"), Entry::Cname(z("loop1"))),
    ])
}
