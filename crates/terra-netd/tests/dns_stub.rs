//! The box's DNS stub (`terra_netd::stub`) served on 127.0.0.1 (a free port,
//! UDP and TCP), with a fake broker behind it, asked three ways: with the
//! broker's own resolver pieces (`dns::encode_query`/`parse_response`, and
//! the whole `DnsResolver`), with `dig` (dnsutils, scripts/bootstrap.sh) and
//! with a raw UDP query python3 builds by hand. Checked: A, AAAA, both
//! families from one lookup, NXDOMAIN, SERVFAIL, REFUSED for MX, 0x20 case
//! kept, TC over 512 bytes (40 addresses) and the same answer over TCP, two
//! queries on one TCP connection, the connection cap, and the in-flight cap
//! (SERVFAIL without a lookup). Ordering is made with a gate in the fake
//! lookup, never with sleeps.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use terra_netd::dns::{
    encode_query, parse_response, Name, Record, Response, RCODE_NOERROR, RCODE_NXDOMAIN,
    RCODE_REFUSED, RCODE_SERVFAIL, TYPE_A, TYPE_AAAA,
};
use terra_netd::stub::{serve_tcp, serve_udp, Lookup, StubLookup};
use terra_netd::{DnsResolver, ResolveErrorKind, Resolver, ResolverConfig};

/// Only a hang bound: no assertion depends on it.
const HANG: Duration = Duration::from_secs(20);
const TYPE_MX: u16 = 15;

/// Holds `hold.stub.test`'s lookup until released, and tells when it started.
#[derive(Default)]
struct Gate {
    state: Mutex<(bool, bool)>, // (entered, released)
    changed: Condvar,
}

impl Gate {
    fn enter_and_wait(&self) {
        let mut s = self.state.lock().unwrap();
        s.0 = true;
        self.changed.notify_all();
        while !s.1 {
            s = self.changed.wait(s).unwrap();
        }
    }
    fn wait_entered(&self) {
        let mut s = self.state.lock().unwrap();
        while !s.0 {
            s = self.changed.wait(s).unwrap();
        }
    }
    fn release(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

/// The fake broker: what it knows, and every lookup it was asked for.
#[derive(Default)]
struct Fake {
    calls: Mutex<Vec<(String, u16)>>,
    gate: Gate,
}

fn many() -> Vec<IpAddr> {
    (0..40u8).map(|i| IpAddr::from([198, 51, 100, i])).collect()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

impl StubLookup for Fake {
    fn lookup(&self, name: &str, qtype: u16) -> Lookup {
        self.calls.lock().unwrap().push((name.to_owned(), qtype));
        match name {
            "v4.stub.test" => Lookup::Addresses(vec![ip("192.0.2.1")]),
            "v6.stub.test" => Lookup::Addresses(vec![ip("2001:db8::1")]),
            "both.stub.test" => {
                Lookup::Addresses(vec![ip("192.0.2.1"), ip("2001:db8::1"), ip("192.0.2.2")])
            }
            "many.stub.test" => Lookup::Addresses(many()),
            "fail.stub.test" => Lookup::ServFail,
            "hold.stub.test" => {
                self.gate.enter_and_wait();
                Lookup::Addresses(vec![ip("192.0.2.3")])
            }
            _ => Lookup::NxDomain,
        }
    }
}

impl Fake {
    fn asked(&self, name: &str) -> usize {
        let calls = self.calls.lock().unwrap();
        calls.iter().filter(|(n, _)| n == name).count()
    }
}

struct Stub {
    addr: SocketAddr,
    fake: Arc<Fake>,
}

/// The stub on one free port of 127.0.0.1, UDP and TCP, serving for the
/// rest of the test process.
fn start(max_inflight: usize, max_conns: usize) -> Stub {
    let (udp, tcp) = (0..20)
        .find_map(|_| {
            let udp = UdpSocket::bind("127.0.0.1:0").ok()?;
            let tcp = TcpListener::bind(udp.local_addr().ok()?).ok()?;
            Some((udp, tcp))
        })
        .expect("cannot bind UDP and TCP on one port of 127.0.0.1");
    let addr = udp.local_addr().unwrap();
    let fake = Arc::new(Fake::default());
    let lookup: Arc<dyn StubLookup> = fake.clone();
    let l = Arc::clone(&lookup);
    std::thread::spawn(move || serve_udp(udp, l, max_inflight));
    std::thread::spawn(move || serve_tcp(tcp, lookup, max_conns));
    Stub { addr, fake }
}

fn stub() -> Stub {
    start(16, 16)
}

fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    encode_query(id, &Name::from_dotted(name).unwrap(), qtype)
}

/// One datagram to the stub from a fresh socket, and its reply.
fn udp(addr: SocketAddr, msg: &[u8]) -> Vec<u8> {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(addr).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    s.send(msg).unwrap();
    let mut buf = vec![0u8; 65536];
    let n = s.recv(&mut buf).expect("a reply from the stub");
    buf.truncate(n);
    buf
}

fn ask(stub: &Stub, id: u16, name: &str, qtype: u16) -> Response {
    let r = parse_response(&udp(stub.addr, &query(id, name, qtype))).unwrap();
    assert_eq!(r.id, id);
    r
}

fn addrs(r: &Response) -> Vec<IpAddr> {
    r.answers
        .iter()
        .map(|(owner, rec)| {
            assert_eq!(*owner, r.qname, "owner is the question's name");
            match rec {
                Record::Address(a) => *a,
                other => panic!("{other:?}"),
            }
        })
        .collect()
}

fn tcp_send(s: &mut TcpStream, msgs: &[Vec<u8>]) {
    let mut out = Vec::new();
    for m in msgs {
        out.extend_from_slice(&(m.len() as u16).to_be_bytes());
        out.extend_from_slice(m);
    }
    s.write_all(&out).unwrap();
}

fn tcp_recv(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len)?;
    let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut msg)?;
    Ok(msg)
}

fn tcp_connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    s
}

#[test]
fn broker_pieces_over_udp() {
    let s = stub();
    let r = ask(&s, 1, "v4.stub.test", TYPE_A);
    assert_eq!((r.rcode, r.truncated), (RCODE_NOERROR, false));
    assert_eq!(addrs(&r), vec![ip("192.0.2.1")]);
    let r = ask(&s, 2, "v6.stub.test", TYPE_AAAA);
    assert_eq!(addrs(&r), vec![ip("2001:db8::1")]);
    // One lookup holds both families; each question gets its own, in order.
    let r = ask(&s, 3, "both.stub.test", TYPE_A);
    assert_eq!(addrs(&r), vec![ip("192.0.2.1"), ip("192.0.2.2")]);
    let r = ask(&s, 4, "both.stub.test", TYPE_AAAA);
    assert_eq!(addrs(&r), vec![ip("2001:db8::1")]);
    // A listed name without an address of the family asked: no data.
    let r = ask(&s, 5, "v4.stub.test", TYPE_AAAA);
    assert_eq!((r.rcode, r.answers.len()), (RCODE_NOERROR, 0));
    let r = ask(&s, 6, "gone.stub.test", TYPE_A);
    assert_eq!((r.rcode, r.answers.len()), (RCODE_NXDOMAIN, 0));
    let r = ask(&s, 7, "fail.stub.test", TYPE_A);
    assert_eq!(r.rcode, RCODE_SERVFAIL);
    let r = ask(&s, 8, "v4.stub.test", TYPE_MX);
    assert_eq!((r.rcode, r.qtype), (RCODE_REFUSED, TYPE_MX));
    // MX was never looked up: v4 was asked for A and AAAA only.
    assert_eq!(
        s.fake
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == "v4.stub.test")
            .map(|c| c.1)
            .collect::<Vec<_>>(),
        vec![TYPE_A, TYPE_AAAA]
    );
}

#[test]
fn mixed_case_questions_come_back_as_asked() {
    let s = stub();
    let mut q = query(0x0020, "v4.stub.test", TYPE_A);
    // 0x20 randomisation: flip the case of every other letter of the name.
    let name_end = q.len() - 4;
    for (i, b) in q[12..name_end].iter_mut().enumerate() {
        if b.is_ascii_lowercase() && i % 2 == 0 {
            b.make_ascii_uppercase();
        }
    }
    let asked = q[12..].to_vec();
    assert_ne!(asked, query(0, "v4.stub.test", TYPE_A)[12..]);
    let r = udp(s.addr, &q);
    assert_eq!(&r[12..12 + asked.len()], &asked[..]);
    let p = parse_response(&r).unwrap();
    assert_eq!(addrs(&p), vec![ip("192.0.2.1")]);
    assert_eq!(
        s.fake.calls.lock().unwrap().as_slice(),
        &[("v4.stub.test".to_owned(), TYPE_A)]
    );
}

#[test]
fn forty_addresses_truncate_over_udp_and_fit_over_tcp() {
    let s = stub();
    let q = query(9, "many.stub.test", TYPE_A);
    let raw = udp(s.addr, &q);
    assert!(raw.len() <= 512, "{} bytes", raw.len());
    let r = parse_response(&raw).unwrap();
    assert!(r.truncated);
    assert_eq!((r.rcode, r.answers.len()), (RCODE_NOERROR, 0));
    assert_eq!(r.qname.to_dotted(), "many.stub.test");
    let mut c = tcp_connect(s.addr);
    tcp_send(&mut c, &[q]);
    let r = parse_response(&tcp_recv(&mut c).unwrap()).unwrap();
    assert!(!r.truncated);
    assert_eq!(addrs(&r), many());
}

#[test]
fn tcp_answers_several_queries_on_one_connection_in_order() {
    let s = stub();
    let mut c = tcp_connect(s.addr);
    // Two queries in one write (pipelined), then a third after the answers.
    tcp_send(
        &mut c,
        &[
            query(1, "v4.stub.test", TYPE_A),
            query(2, "v6.stub.test", TYPE_AAAA),
        ],
    );
    let first = parse_response(&tcp_recv(&mut c).unwrap()).unwrap();
    let second = parse_response(&tcp_recv(&mut c).unwrap()).unwrap();
    assert_eq!((first.id, addrs(&first)), (1, vec![ip("192.0.2.1")]));
    assert_eq!((second.id, addrs(&second)), (2, vec![ip("2001:db8::1")]));
    tcp_send(&mut c, &[query(3, "gone.stub.test", TYPE_A)]);
    let third = parse_response(&tcp_recv(&mut c).unwrap()).unwrap();
    assert_eq!((third.id, third.rcode), (3, RCODE_NXDOMAIN));
    // A message that is not a query ends the connection.
    let mut not_query = query(4, "v4.stub.test", TYPE_A);
    not_query[2] |= 0x80;
    tcp_send(&mut c, &[not_query]);
    let mut rest = Vec::new();
    assert_eq!(c.read_to_end(&mut rest).unwrap(), 0);
}

#[test]
fn tcp_connections_above_the_cap_are_closed() {
    let s = start(16, 1);
    let mut first = tcp_connect(s.addr);
    tcp_send(&mut first, &[query(1, "v4.stub.test", TYPE_A)]);
    // Answered: the first connection holds the only place.
    assert_eq!(
        parse_response(&tcp_recv(&mut first).unwrap()).unwrap().id,
        1
    );
    let mut second = tcp_connect(s.addr);
    tcp_send(&mut second, &[query(2, "v4.stub.test", TYPE_A)]);
    // Closed without an answer (end of stream, or a reset for the unread query).
    assert!(tcp_recv(&mut second).is_err());
    // The first connection still serves.
    tcp_send(&mut first, &[query(3, "v6.stub.test", TYPE_AAAA)]);
    assert_eq!(
        parse_response(&tcp_recv(&mut first).unwrap()).unwrap().id,
        3
    );
}

#[test]
fn queries_above_the_inflight_cap_get_servfail_without_lookup() {
    let s = start(1, 16);
    let held = UdpSocket::bind("127.0.0.1:0").unwrap();
    held.connect(s.addr).unwrap();
    held.set_read_timeout(Some(HANG)).unwrap();
    held.send(&query(1, "hold.stub.test", TYPE_A)).unwrap();
    // The one place is taken while this lookup waits at the gate.
    s.fake.gate.wait_entered();
    let r = ask(&s, 2, "v4.stub.test", TYPE_A);
    assert_eq!((r.rcode, r.answers.len()), (RCODE_SERVFAIL, 0));
    assert_eq!(s.fake.asked("v4.stub.test"), 0);
    // Queries that need no lookup are still answered as usual.
    assert_eq!(ask(&s, 3, "v4.stub.test", TYPE_MX).rcode, RCODE_REFUSED);
    s.fake.gate.release();
    let mut buf = [0u8; 512];
    let n = held.recv(&mut buf).unwrap();
    let r = parse_response(&buf[..n]).unwrap();
    assert_eq!((r.id, addrs(&r)), (1, vec![ip("192.0.2.3")]));
    // The place is given back before the answer leaves: the twin succeeds.
    let r = ask(&s, 4, "v4.stub.test", TYPE_A);
    assert_eq!(addrs(&r), vec![ip("192.0.2.1")]);
}

/// The broker's whole resolver, pointed at the stub: A and AAAA at once,
/// and for the truncated answer, its TCP fallback.
#[test]
fn the_broker_resolver_reads_the_stub() {
    let s = stub();
    let mut c = ResolverConfig::parse("options attempts:1", "");
    c.nameservers = vec![s.addr];
    let r = DnsResolver::new(c, HANG, 4);
    assert_eq!(
        r.resolve("both.stub.test").unwrap(),
        vec![ip("192.0.2.1"), ip("192.0.2.2"), ip("2001:db8::1")]
    );
    assert_eq!(r.resolve("many.stub.test").unwrap(), many());
    // UDP (truncated) and TCP for A, UDP for AAAA.
    assert_eq!(s.fake.asked("many.stub.test"), 3);
    let e = r.resolve("gone.stub.test").unwrap_err();
    assert_eq!(e.kind, ResolveErrorKind::NxDomain, "{e}");
    let e = r.resolve("fail.stub.test").unwrap_err();
    assert_eq!(e.kind, ResolveErrorKind::ServerFailure, "{e}");
}

/// dig's output: (status, flags, answer records as whitespace-split fields).
struct Dig {
    text: String,
    status: String,
    flags: Vec<String>,
    records: Vec<Vec<String>>,
}

fn dig(stub: &Stub, args: &[&str]) -> Dig {
    let port = stub.addr.port().to_string();
    let out = Command::new("dig")
        .args(["@127.0.0.1", "-p", &port, "+tries=1", "+time=10"])
        .args(args)
        .output()
        .expect("dig is needed (dnsutils; scripts/bootstrap.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "dig {args:?}: {text}");
    let after = |key: &str| {
        text.lines()
            .find_map(|l| l.split_once(key).map(|(_, rest)| rest.to_owned()))
            .unwrap_or_else(|| panic!("no {key:?} in dig's output: {text}"))
    };
    let status = after("status: ").split(',').next().unwrap().to_owned();
    let flags = after(";; flags: ")
        .split(';')
        .next()
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let records = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(';'))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    Dig {
        text,
        status,
        flags,
        records,
    }
}

fn record(owner: &str, rtype: &str, data: &str) -> Vec<String> {
    [owner, "60", "IN", rtype, data]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn dig_over_udp() {
    let s = stub();
    let d = dig(&s, &["v4.stub.test", "A"]);
    assert_eq!(d.status, "NOERROR", "{}", d.text);
    assert_eq!(d.flags, ["qr", "aa", "rd", "ra"], "{}", d.text);
    assert_eq!(d.records, [record("v4.stub.test.", "A", "192.0.2.1")]);
    // dig sends an EDNS record (with a cookie); the stub answers without one.
    assert!(!d.text.contains("OPT PSEUDOSECTION"), "{}", d.text);
    let d = dig(&s, &["v6.stub.test", "AAAA"]);
    assert_eq!(d.records, [record("v6.stub.test.", "AAAA", "2001:db8::1")]);
    let d = dig(&s, &["both.stub.test", "A"]);
    assert_eq!(
        d.records,
        [
            record("both.stub.test.", "A", "192.0.2.1"),
            record("both.stub.test.", "A", "192.0.2.2")
        ]
    );
    let d = dig(&s, &["both.stub.test", "AAAA"]);
    assert_eq!(
        d.records,
        [record("both.stub.test.", "AAAA", "2001:db8::1")]
    );
    let d = dig(&s, &["gone.stub.test", "A"]);
    assert_eq!(
        (d.status.as_str(), d.records.len()),
        ("NXDOMAIN", 0),
        "{}",
        d.text
    );
    let d = dig(&s, &["v4.stub.test", "MX"]);
    assert_eq!(
        (d.status.as_str(), d.records.len()),
        ("REFUSED", 0),
        "{}",
        d.text
    );
    let d = dig(&s, &["fail.stub.test", "A"]);
    assert_eq!(d.status, "SERVFAIL", "{}", d.text);
    // 0x20: the question and the answer's owner (a pointer to it) as asked.
    let d = dig(&s, &["V4.StUb.TeSt", "A"]);
    assert!(d.text.contains(";V4.StUb.TeSt.\t"), "{}", d.text);
    assert_eq!(d.records, [record("V4.StUb.TeSt.", "A", "192.0.2.1")]);
    assert_eq!(s.fake.asked("v4.stub.test"), 2);
}

#[test]
fn dig_truncation_and_tcp() {
    let s = stub();
    // +ignore: keep the truncated UDP answer.
    let d = dig(&s, &["+ignore", "many.stub.test", "A"]);
    assert_eq!(d.status, "NOERROR", "{}", d.text);
    assert!(d.flags.contains(&"tc".to_owned()), "{}", d.text);
    assert!(d.records.is_empty(), "{}", d.text);
    // By default dig retries over TCP and gets all 40.
    let d = dig(&s, &["many.stub.test", "A"]);
    assert!(
        d.text.contains("Truncated, retrying in TCP mode"),
        "{}",
        d.text
    );
    let want: Vec<Vec<String>> = many()
        .iter()
        .map(|a| record("many.stub.test.", "A", &a.to_string()))
        .collect();
    assert_eq!(d.records, want);
    let d = dig(&s, &["+tcp", "v4.stub.test", "A"]);
    assert_eq!(d.records, [record("v4.stub.test.", "A", "192.0.2.1")]);
    // Two queries, the TCP connection kept open between them.
    let port = s.addr.port().to_string();
    let out = Command::new("dig")
        .args([
            "@127.0.0.1",
            "-p",
            &port,
            "+tries=1",
            "+time=10",
            "+tcp",
            "+keepopen",
        ])
        .args([
            "+noall",
            "+answer",
            "v4.stub.test",
            "A",
            "v6.stub.test",
            "AAAA",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(';'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        [
            ["v4.stub.test.", "60", "IN", "A", "192.0.2.1"],
            ["v6.stub.test.", "60", "IN", "AAAA", "2001:db8::1"]
        ],
        "{text}"
    );
}

/// A query python3 builds by hand (struct), sent over UDP; prints what the
/// reply says as JSON.
const PY_QUERY: &str = r#"
import json, socket, struct, sys
port, name, qtype, qid = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
question = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
question += struct.pack(">HH", qtype, 1)
query = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + question
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(20)
s.sendto(query, ("127.0.0.1", port))
r, _ = s.recvfrom(65535)
rid, flags, qd, an, ns, ar = struct.unpack(">HHHHHH", r[:12])
out = {"id": rid, "qr": flags >> 15, "aa": (flags >> 10) & 1, "tc": (flags >> 9) & 1,
       "rd": (flags >> 8) & 1, "ra": (flags >> 7) & 1, "rcode": flags & 15,
       "counts": [qd, an, ns, ar], "len": len(r),
       "question": r[12:12 + len(question)] == question, "answers": []}
pos = 12 + len(question)
for _ in range(an):
    owner, rtype, rclass, ttl, rdlen = struct.unpack(">HHHIH", r[pos:pos + 12])
    data = r[pos + 12:pos + 12 + rdlen]
    family = socket.AF_INET if rtype == 1 else socket.AF_INET6
    out["answers"].append([owner, rtype, rclass, ttl, socket.inet_ntop(family, data)])
    pos += 12 + rdlen
out["trailing"] = len(r) - pos
print(json.dumps(out))
"#;

fn python(stub: &Stub, name: &str, qtype: u16, id: u16) -> serde_json::Value {
    let out = Command::new("python3")
        .args(["-c", PY_QUERY])
        .arg(stub.addr.port().to_string())
        .args([name, &qtype.to_string(), &id.to_string()])
        .output()
        .expect("python3 is needed (scripts/bootstrap.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn python_raw_udp_queries() {
    let s = stub();
    let r = python(&s, "v4.stub.test", 1, 4660);
    let want = serde_json::json!({
        "id": 4660, "qr": 1, "aa": 1, "tc": 0, "rd": 1, "ra": 1, "rcode": 0,
        "counts": [1, 1, 0, 0], "len": 12 + 18 + 16, "question": true,
        "answers": [[0xC00C, 1, 1, 60, "192.0.2.1"]], "trailing": 0
    });
    assert_eq!(r, want);
    let r = python(&s, "both.stub.test", 28, 1);
    assert_eq!(
        r["answers"],
        serde_json::json!([[0xC00C, 28, 1, 60, "2001:db8::1"]])
    );
    let r = python(&s, "both.stub.test", 1, 2);
    assert_eq!(
        r["answers"],
        serde_json::json!([
            [0xC00C, 1, 1, 60, "192.0.2.1"],
            [0xC00C, 1, 1, 60, "192.0.2.2"]
        ])
    );
    let r = python(&s, "gone.stub.test", 1, 3);
    assert_eq!(
        (r["rcode"].as_u64(), r["counts"][1].as_u64()),
        (Some(3), Some(0))
    );
    let r = python(&s, "v4.stub.test", 15, 4);
    assert_eq!(
        (r["rcode"].as_u64(), r["question"].as_bool()),
        (Some(5), Some(true))
    );
    let r = python(&s, "V4.sTuB.TEST", 1, 5);
    assert_eq!(r["question"], true, "{r}");
    assert_eq!(r["answers"][0][4], "192.0.2.1");
    let r = python(&s, "many.stub.test", 1, 6);
    assert_eq!(
        (r["tc"].as_u64(), r["counts"][1].as_u64()),
        (Some(1), Some(0)),
        "{r}"
    );
    assert!(r["len"].as_u64().unwrap() <= 512);
    assert_eq!(
        (r["question"].as_bool(), r["trailing"].as_i64()),
        (Some(true), Some(0))
    );
}
