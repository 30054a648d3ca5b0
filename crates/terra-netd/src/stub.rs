//! The box's DNS stub: in mediated mode the box's /etc/resolv.conf says
//! `nameserver 127.0.0.1`, and this stub answers on UDP and TCP port 53 of the
//! box's loopback. It resolves nothing itself: every A or AAAA question goes
//! to a [`StubLookup`] (in production, the broker, which answers only for
//! listed names, with the addresses it pinned), and the stub turns what it
//! said into a DNS response.
//!
//! It answers only what the box needs: one question of class IN, type A or
//! AAAA. Everything else gets a plain refusal (REFUSED, FORMERR, NOTIMP), so
//! nothing in the box can use it to ask anything else of anyone. Parsing is
//! strict and bounded (wire names at most 255 bytes, no compression in a
//! query, nothing after the one optional EDNS record) and never panics.
#![forbid(unsafe_code)]

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::dns::{
    RCODE_FORMERR, RCODE_NOERROR, RCODE_NOTIMP, RCODE_NXDOMAIN, RCODE_REFUSED, RCODE_SERVFAIL,
    TYPE_A, TYPE_AAAA,
};

/// What the broker said about one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The name is listed: these addresses (both families; may be empty = NOERROR, no data).
    Addresses(Vec<IpAddr>),
    /// The name is not a listed destination (or does not exist): NXDOMAIN.
    NxDomain,
    /// The lookup failed (broker gone, upstream timeout...): SERVFAIL.
    ServFail,
    /// The box has no name service (network none): REFUSED, which a
    /// resolver takes as final at once.
    Refused,
}

/// Who the stub asks (in production: the broker over a socket).
pub trait StubLookup: Send + Sync {
    /// `name` is lowercase dotted text without trailing dot, `qtype` TYPE_A or TYPE_AAAA.
    fn lookup(&self, name: &str, qtype: u16) -> Lookup;
}

/// TTL of every answer record: short, so a name the broker pins anew is seen soon.
pub const TTL: u32 = 60;
/// Largest response over UDP (RFC 1035 without EDNS: the stub never speaks EDNS).
pub const UDP_MAX: usize = 512;
/// Largest response over TCP (what the 2-byte length prefix can say).
pub const TCP_MAX: usize = 65535;
/// A TCP connection must bring each whole query within this time after the
/// previous answer (or its start), else it is closed.
pub const TCP_IDLE: Duration = Duration::from_secs(10);

const THREAD_NAME: &str = "terra-dns-stub";
const THREAD_STACK: usize = 64 * 1024;

const HEADER_LEN: usize = 12;
const MAX_NAME_WIRE: usize = 255;
const CLASS_IN: u16 = 1;
const TYPE_OPT: u16 = 41;

const FLAG_QR: u16 = 0x8000;
const MASK_OPCODE: u16 = 0x7800;
const FLAG_AA: u16 = 0x0400;
const FLAG_TC: u16 = 0x0200;
const FLAG_RD: u16 = 0x0100;
const FLAG_RA: u16 = 0x0080;

/// The response to one query message, or None when `msg` is not a query worth answering
/// (a response, too short to hold a header): such datagrams are dropped.
///
/// `max_len` is clamped to 512..=65535: every DNS client accepts 512 bytes,
/// and TCP's length prefix cannot say more than 65535.
pub fn answer(msg: &[u8], lookup: &dyn StubLookup, max_len: usize) -> Option<Vec<u8>> {
    match step(msg) {
        Step::Drop => None,
        Step::Reply(r) => Some(r),
        Step::Lookup(p) => {
            let found = lookup.lookup(&p.name, p.qtype);
            Some(p.finish(&found, max_len))
        }
    }
}

/// What a message needs: nothing, a reply known without a lookup, or a lookup.
enum Step {
    Drop,
    Reply(Vec<u8>),
    Lookup(Pending),
}

/// An A or AAAA question for a name that may be listed: what the response needs.
struct Pending {
    id: u16,
    flags: u16,
    /// The question as sent (name in its original case, type, class).
    question: Vec<u8>,
    /// Lowercase dotted name, as the lookup wants it.
    name: String,
    qtype: u16,
}

fn be16(msg: &[u8], at: usize) -> Option<u16> {
    let b = msg.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// Order of the checks: the header (drop, NOTIMP, FORMERR), the question and
/// what follows it (FORMERR), then class (REFUSED), type (REFUSED), name
/// (NXDOMAIN). Only a question that passes all of them is looked up.
fn step(msg: &[u8]) -> Step {
    if msg.len() < HEADER_LEN {
        return Step::Drop;
    }
    let (id, flags) = (be16(msg, 0).unwrap_or(0), be16(msg, 2).unwrap_or(0));
    if flags & FLAG_QR != 0 {
        return Step::Drop;
    }
    let bare = |rcode| Step::Reply(header_only(id, flags, rcode));
    if flags & MASK_OPCODE != 0 {
        return bare(RCODE_NOTIMP);
    }
    let counts = [4, 6, 8, 10].map(|at| be16(msg, at).unwrap_or(0));
    if counts[0] != 1 || counts[1] != 0 || counts[2] != 0 || counts[3] > 1 {
        return bare(RCODE_FORMERR);
    }
    let Some(Question {
        name_end,
        qtype,
        qclass,
    }) = question(msg, counts[3] == 1)
    else {
        return bare(RCODE_FORMERR);
    };
    let question_end = name_end + 4;
    let pending = Pending {
        id,
        flags,
        question: msg[HEADER_LEN..question_end].to_vec(),
        name: String::new(),
        qtype,
    };
    if qclass != CLASS_IN || (qtype != TYPE_A && qtype != TYPE_AAAA) {
        return Step::Reply(pending.reply(RCODE_REFUSED, &[]));
    }
    match dotted_lowercase(&msg[HEADER_LEN..name_end]) {
        Some(name) => Step::Lookup(Pending { name, ..pending }),
        // Not a name any destination can have: it does not exist for the box.
        None => Step::Reply(pending.reply(RCODE_NXDOMAIN, &[])),
    }
}

/// Where the question's name ends, and its type and class.
struct Question {
    name_end: usize,
    qtype: u16,
    qclass: u16,
}

/// The question after the header, or None when it is malformed or followed
/// by anything but (`with_opt`) one EDNS OPT record.
fn question(msg: &[u8], with_opt: bool) -> Option<Question> {
    let name_end = name_end(msg, HEADER_LEN)?;
    let (qtype, qclass) = (be16(msg, name_end)?, be16(msg, name_end + 2)?);
    let end = if with_opt {
        opt_end(msg, name_end + 4)?
    } else {
        name_end + 4
    };
    (end == msg.len()).then_some(Question {
        name_end,
        qtype,
        qclass,
    })
}

/// The offset just after the uncompressed name at `start`, or None when it
/// is malformed: a compression pointer (a query has nothing to point at),
/// a reserved label type, a label past the end, more than 255 bytes.
fn name_end(msg: &[u8], start: usize) -> Option<usize> {
    let mut pos = start;
    loop {
        let len = *msg.get(pos)? as usize;
        if len & 0xC0 != 0 {
            return None;
        }
        pos += 1 + len;
        if pos - start > MAX_NAME_WIRE {
            return None;
        }
        if len == 0 {
            return Some(pos);
        }
        if pos > msg.len() {
            return None;
        }
    }
}

/// The offset just after an EDNS OPT record at `start` (RFC 6891: root
/// owner, type 41; its payload size, flags and options are not used), or
/// None when the record there is anything else or does not fit.
fn opt_end(msg: &[u8], start: usize) -> Option<usize> {
    if *msg.get(start)? != 0 || be16(msg, start + 1)? != TYPE_OPT {
        return None;
    }
    // owner 1, type 2, payload size 2, extended rcode and flags 4, rdlength 2
    let rdlen = be16(msg, start + 9)? as usize;
    let end = start + 11 + rdlen;
    (end <= msg.len()).then_some(end)
}

/// The name as lowercase dotted text, or None when it is the root alone or
/// holds a byte outside letters, digits, '-' and '_'.
fn dotted_lowercase(wire: &[u8]) -> Option<String> {
    let mut out = String::with_capacity(wire.len());
    let mut pos = 0;
    while let Some(&len) = wire.get(pos) {
        if len == 0 {
            break;
        }
        let label = wire.get(pos + 1..pos + 1 + len as usize)?;
        if !label
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
        {
            return None;
        }
        if !out.is_empty() {
            out.push('.');
        }
        out.extend(label.iter().map(|b| b.to_ascii_lowercase() as char));
        pos += 1 + len as usize;
    }
    (!out.is_empty()).then_some(out)
}

/// Response flags: QR, the query's opcode and RD, RA (the broker recurses
/// for the box), and `extra` (AA, TC), with `rcode`.
fn response_flags(query_flags: u16, extra: u16, rcode: u8) -> u16 {
    FLAG_QR | (query_flags & (MASK_OPCODE | FLAG_RD)) | FLAG_RA | extra | u16::from(rcode & 0xF)
}

fn push_header(out: &mut Vec<u8>, id: u16, flags: u16, qd: u16, an: u16) {
    for v in [id, flags, qd, an, 0, 0] {
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// A response without a question: for queries whose header or question
/// could not be read (FORMERR) or whose opcode is not a query (NOTIMP).
fn header_only(id: u16, query_flags: u16, rcode: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN);
    push_header(&mut out, id, response_flags(query_flags, 0, rcode), 0, 0);
    out
}

impl Pending {
    /// The response for what the lookup said.
    fn finish(&self, found: &Lookup, max_len: usize) -> Vec<u8> {
        match found {
            Lookup::Addresses(all) => {
                let family: Vec<IpAddr> = all
                    .iter()
                    .copied()
                    .filter(|a| a.is_ipv4() == (self.qtype == TYPE_A))
                    .collect();
                self.reply_fitting(&family, max_len)
            }
            Lookup::NxDomain => self.reply(RCODE_NXDOMAIN, &[]),
            Lookup::ServFail => self.reply(RCODE_SERVFAIL, &[]),
            Lookup::Refused => self.reply(RCODE_REFUSED, &[]),
        }
    }

    /// NOERROR with `addrs` as answers, or with TC and no answers when they
    /// would make the response longer than `max_len`.
    fn reply_fitting(&self, addrs: &[IpAddr], max_len: usize) -> Vec<u8> {
        let max_len = max_len.clamp(UDP_MAX, TCP_MAX);
        let rdlen = if self.qtype == TYPE_A { 4 } else { 16 };
        // pointer 2, type 2, class 2, TTL 4, rdlength 2, data
        let len = HEADER_LEN + self.question.len() + addrs.len() * (12 + rdlen);
        if len > max_len {
            return self.build(RCODE_NOERROR, FLAG_AA | FLAG_TC, &[]);
        }
        self.reply(RCODE_NOERROR, addrs)
    }

    /// The response with `rcode` and `addrs` (NOERROR and NXDOMAIN speak
    /// with authority: the broker's view is the only one the box has).
    fn reply(&self, rcode: u8, addrs: &[IpAddr]) -> Vec<u8> {
        let aa = if rcode == RCODE_NOERROR || rcode == RCODE_NXDOMAIN {
            FLAG_AA
        } else {
            0
        };
        self.build(rcode, aa, addrs)
    }

    fn build(&self, rcode: u8, extra: u16, addrs: &[IpAddr]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.question.len() + addrs.len() * 28);
        let flags = response_flags(self.flags, extra, rcode);
        let an = u16::try_from(addrs.len()).unwrap_or(u16::MAX);
        push_header(&mut out, self.id, flags, 1, an);
        out.extend_from_slice(&self.question);
        for addr in addrs.iter().take(an as usize) {
            push_record(&mut out, *addr);
        }
        out
    }
}

/// One answer record; the owner is a pointer to the question's name, which
/// always starts right after the header (offset 12).
fn push_record(out: &mut Vec<u8>, addr: IpAddr) {
    out.extend_from_slice(&[0xC0, HEADER_LEN as u8]);
    let (rtype, data): (u16, Vec<u8>) = match addr {
        IpAddr::V4(a) => (TYPE_A, a.octets().to_vec()),
        IpAddr::V6(a) => (TYPE_AAAA, a.octets().to_vec()),
    };
    out.extend_from_slice(&rtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    out.extend_from_slice(&TTL.to_be_bytes());
    out.extend_from_slice(&(data.len() as u16).to_be_bytes());
    out.extend_from_slice(&data);
}

/// A place among at most `max` (queries in flight, connections), given back
/// when dropped, also when the thread holding it unwinds.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(Arc::clone(count)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn spawn(f: impl FnOnce() + Send + 'static) -> io::Result<()> {
    std::thread::Builder::new()
        .name(THREAD_NAME.to_owned())
        .stack_size(THREAD_STACK)
        .spawn(f)
        .map(drop)
}

fn send_reply(sock: &UdpSocket, reply: &[u8], peer: SocketAddr) {
    // The client may be gone; the next query is unaffected.
    if let Err(e) = sock.send_to(reply, peer) {
        tracing::debug!("dns stub: reply to {peer}: {e}");
    }
}

/// Serves UDP until the socket fails; one thread per query in flight, at most `max_inflight`
/// (above it a query gets SERVFAIL at once, without a lookup).
///
/// Only queries that need a lookup take a thread; refusals and malformed
/// queries are answered at once, responses and runts dropped. The socket
/// must be blocking.
pub fn serve_udp(
    sock: UdpSocket,
    lookup: Arc<dyn StubLookup>,
    max_inflight: usize,
) -> io::Result<()> {
    let sock = Arc::new(sock);
    let inflight = Arc::new(AtomicUsize::new(0));
    // The largest datagram: a longer query must not be cut into a valid one.
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(got) => got,
            Err(e) if transient(&e) => continue,
            Err(e) => return Err(e),
        };
        let pending = match step(&buf[..n]) {
            Step::Drop => continue,
            Step::Reply(r) => {
                send_reply(&sock, &r, peer);
                continue;
            }
            Step::Lookup(p) => Arc::new(p),
        };
        let Some(slot) = Slot::take(&inflight, max_inflight) else {
            send_reply(&sock, &pending.finish(&Lookup::ServFail, UDP_MAX), peer);
            continue;
        };
        let (s, l, p) = (Arc::clone(&sock), Arc::clone(&lookup), Arc::clone(&pending));
        let spawned = spawn(move || {
            let reply = {
                // Given back before the reply leaves: a client that has its
                // answer finds the place free.
                let _slot = slot;
                p.finish(&l.lookup(&p.name, p.qtype), UDP_MAX)
            };
            send_reply(&s, &reply, peer);
        });
        if let Err(e) = spawned {
            tracing::debug!("dns stub: no thread for a query ({e})");
            send_reply(&sock, &pending.finish(&Lookup::ServFail, UDP_MAX), peer);
        }
    }
}

/// Errors after which a socket still serves.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::TimedOut
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}

/// Out of descriptors or memory: accepting again at once would spin.
#[cfg(unix)]
fn exhausted(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

#[cfg(not(unix))]
fn exhausted(_: &io::Error) -> bool {
    false
}

/// Serves DNS over TCP (RFC 1035 4.2.2 and 7766: 2-byte length prefix, several queries per
/// connection answered in order, idle timeout 10 s, at most `max_conns` connections; above it
/// a connection is closed at once).
///
/// A connection is also closed when it sends a message that is not a query
/// worth answering (a response, fewer than 12 bytes), when a whole query does
/// not arrive within [`TCP_IDLE`] of the previous answer, or when its
/// answer cannot be written within [`TCP_IDLE`].
pub fn serve_tcp(
    listener: TcpListener,
    lookup: Arc<dyn StubLookup>,
    max_conns: usize,
) -> io::Result<()> {
    let conns = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if transient(&e) => continue,
            Err(e) if exhausted(&e) => {
                tracing::debug!("dns stub: accept: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some(slot) = Slot::take(&conns, max_conns) else {
            drop(stream);
            continue;
        };
        let l = Arc::clone(&lookup);
        let spawned = spawn(move || {
            let _slot = slot;
            if let Err(e) = serve_conn(stream, l.as_ref()) {
                tracing::debug!("dns stub: tcp connection: {e}");
            }
        });
        if let Err(e) = spawned {
            tracing::debug!("dns stub: no thread for a connection ({e})");
        }
    }
}

/// One connection: length-prefixed queries, answered one after the other.
fn serve_conn(mut stream: TcpStream, lookup: &dyn StubLookup) -> io::Result<()> {
    stream.set_write_timeout(Some(TCP_IDLE))?;
    // Each answer goes out in one write; do not hold it back for an ACK.
    let _ = stream.set_nodelay(true);
    loop {
        let deadline = Instant::now() + TCP_IDLE;
        let mut prefix = [0u8; 2];
        if !read_full(&mut stream, &mut prefix, deadline)? {
            return Ok(());
        }
        let mut msg = vec![0u8; u16::from_be_bytes(prefix) as usize];
        if !read_full(&mut stream, &mut msg, deadline)? {
            return Ok(());
        }
        let Some(reply) = answer(&msg, lookup, TCP_MAX) else {
            return Ok(());
        };
        let mut out = Vec::with_capacity(2 + reply.len());
        out.extend_from_slice(&(reply.len() as u16).to_be_bytes());
        out.extend_from_slice(&reply);
        stream.write_all(&out)?;
    }
}

/// Fills `buf` before `deadline`: Ok(false) at end of stream, Err(TimedOut)
/// when the deadline passes first.
fn read_full(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Ok(false),
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::parse_response;
    use std::sync::Mutex;

    /// A fake broker: fixed answers per name, every call recorded.
    struct Fake {
        calls: Mutex<Vec<(String, u16)>>,
    }

    impl Fake {
        fn new() -> Fake {
            Fake {
                calls: Mutex::new(Vec::new()),
            }
        }
        fn calls(&self) -> Vec<(String, u16)> {
            self.calls.lock().unwrap().clone()
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    impl StubLookup for Fake {
        fn lookup(&self, name: &str, qtype: u16) -> Lookup {
            self.calls.lock().unwrap().push((name.to_owned(), qtype));
            match name {
                "mixed.test" => {
                    Lookup::Addresses(vec![ip("192.0.2.1"), ip("2001:db8::1"), ip("192.0.2.2")])
                }
                "empty.test" => Lookup::Addresses(vec![]),
                "fail.test" => Lookup::ServFail,
                "refused.test" => Lookup::Refused,
                "many.test" => {
                    Lookup::Addresses((0..40u8).map(|i| IpAddr::from([198, 51, 100, i])).collect())
                }
                "thirty.test" => {
                    Lookup::Addresses((0..30u8).map(|i| IpAddr::from([198, 51, 100, i])).collect())
                }
                "thirtyone.test" => {
                    Lookup::Addresses((0..31u8).map(|i| IpAddr::from([198, 51, 100, i])).collect())
                }
                "_sip._tcp.x-y.test" | "www.example.test" => {
                    Lookup::Addresses(vec![ip("192.0.2.9")])
                }
                _ => Lookup::NxDomain,
            }
        }
    }

    /// Wire form of a dotted name, case kept as written ("" is the root).
    fn wire(name: &str) -> Vec<u8> {
        let mut w = Vec::new();
        for label in name.split('.').filter(|l| !l.is_empty()) {
            w.push(label.len() as u8);
            w.extend_from_slice(label.as_bytes());
        }
        w.push(0);
        w
    }

    /// A query: header with `flags` and counts, then `body` (the question
    /// and anything after it) as given.
    fn raw(id: u16, flags: u16, counts: [u16; 4], body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        for v in [id, flags, counts[0], counts[1], counts[2], counts[3]] {
            m.extend_from_slice(&v.to_be_bytes());
        }
        m.extend_from_slice(body);
        m
    }

    fn question(name_wire: &[u8], qtype: u16, qclass: u16) -> Vec<u8> {
        let mut q = name_wire.to_vec();
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&qclass.to_be_bytes());
        q
    }

    /// A standard query with RD set for `name` (case kept).
    fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
        raw(id, FLAG_RD, [1, 0, 0, 0], &question(&wire(name), qtype, 1))
    }

    /// An EDNS OPT record: payload 4096, DO set, one cookie option.
    fn opt() -> Vec<u8> {
        let mut r = vec![0];
        r.extend_from_slice(&TYPE_OPT.to_be_bytes());
        r.extend_from_slice(&4096u16.to_be_bytes());
        r.extend_from_slice(&[0, 0, 0x80, 0]);
        let option = [0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8];
        r.extend_from_slice(&(option.len() as u16).to_be_bytes());
        r.extend_from_slice(&option);
        r
    }

    fn flags(r: &[u8]) -> u16 {
        be16(r, 2).unwrap()
    }
    fn rcode(r: &[u8]) -> u8 {
        (flags(r) & 0xF) as u8
    }
    fn counts(r: &[u8]) -> [u16; 4] {
        [4, 6, 8, 10].map(|at| be16(r, at).unwrap())
    }

    /// The answer's data, in order, checked record by record: owner pointer
    /// 0xC00C, the asked type, class IN, TTL 60.
    fn addresses(r: &[u8], qlen: usize) -> Vec<IpAddr> {
        let mut pos = HEADER_LEN + qlen;
        let mut out = Vec::new();
        for _ in 0..counts(r)[1] {
            assert_eq!(&r[pos..pos + 2], &[0xC0, 0x0C]);
            let rtype = be16(r, pos + 2).unwrap();
            assert_eq!(be16(r, pos + 4), Some(1));
            assert_eq!(&r[pos + 6..pos + 10], &60u32.to_be_bytes());
            let rdlen = be16(r, pos + 10).unwrap() as usize;
            let data = &r[pos + 12..pos + 12 + rdlen];
            out.push(match (rtype, rdlen) {
                (TYPE_A, 4) => IpAddr::from(<[u8; 4]>::try_from(data).unwrap()),
                (TYPE_AAAA, 16) => IpAddr::from(<[u8; 16]>::try_from(data).unwrap()),
                other => panic!("record {other:?}"),
            });
            pos += 12 + rdlen;
        }
        assert_eq!(pos, r.len(), "bytes after the answers");
        out
    }

    /// A reply that is not a dropped message; the id is always the query's.
    fn ask(fake: &Fake, msg: &[u8]) -> Vec<u8> {
        let r = answer(msg, fake, UDP_MAX).expect("a reply");
        assert_eq!(&r[..2], &msg[..2], "id");
        assert_ne!(flags(&r) & FLAG_QR, 0, "QR");
        r
    }

    #[test]
    fn responses_and_runts_are_dropped() {
        let fake = Fake::new();
        let q = query(1, "mixed.test", TYPE_A);
        let mut resp = q.clone();
        resp[2] |= 0x80;
        assert_eq!(answer(&resp, &fake, UDP_MAX), None);
        for n in 0..HEADER_LEN {
            assert_eq!(answer(&q[..n], &fake, UDP_MAX), None, "{n} bytes");
        }
        assert!(fake.calls().is_empty());
        // The twin: the query itself is answered.
        assert_eq!(rcode(&ask(&fake, &q)), RCODE_NOERROR);
    }

    #[test]
    fn other_opcodes_are_not_implemented() {
        let fake = Fake::new();
        let body = question(&wire("mixed.test"), TYPE_A, 1);
        for opcode in [1u16, 2, 4, 5, 15] {
            let r = ask(&fake, &raw(7, FLAG_RD | opcode << 11, [1, 0, 0, 0], &body));
            assert_eq!(rcode(&r), RCODE_NOTIMP, "opcode {opcode}");
            assert_eq!(flags(&r) & MASK_OPCODE, opcode << 11, "opcode copied");
            assert_eq!(r.len(), HEADER_LEN);
        }
        assert!(fake.calls().is_empty());
    }

    #[test]
    fn section_counts_are_checked() {
        let fake = Fake::new();
        let body = question(&wire("mixed.test"), TYPE_A, 1);
        let mut two = body.clone();
        two.extend_from_slice(&body);
        for (counts, body) in [
            ([0, 0, 0, 0], &[][..]),
            ([0, 0, 0, 0], &body[..]),
            ([2, 0, 0, 0], &two[..]),
            ([1, 1, 0, 0], &body[..]),
            ([1, 0, 1, 0], &body[..]),
            ([1, 0, 0, 2], &body[..]),
        ] {
            let r = ask(&fake, &raw(3, FLAG_RD, counts, body));
            assert_eq!(rcode(&r), RCODE_FORMERR, "{counts:?}");
            assert_eq!(r.len(), HEADER_LEN);
            assert_eq!(flags(&r) & FLAG_RD, FLAG_RD);
        }
        assert!(fake.calls().is_empty());
    }

    #[test]
    fn an_edns_record_is_allowed_and_ignored() {
        let fake = Fake::new();
        let q = question(&wire("mixed.test"), TYPE_A, 1);
        let mut body = q.clone();
        body.extend_from_slice(&opt());
        let r = ask(&fake, &raw(5, FLAG_RD, [1, 0, 0, 1], &body));
        assert_eq!(rcode(&r), RCODE_NOERROR);
        // No OPT in the answer: the additional section is empty, and nothing
        // follows the answers.
        assert_eq!(counts(&r), [1, 2, 0, 0]);
        assert_eq!(
            addresses(&r, q.len()),
            vec![ip("192.0.2.1"), ip("192.0.2.2")]
        );
        // Anything else in the additional section, or after it, is refused.
        let mut not_opt = opt();
        not_opt[2] = TYPE_A as u8;
        let mut named = opt();
        named.splice(0..1, wire("x"));
        let mut long = opt();
        long[10] += 1; // rdlength one past the end
        let mut trailing = opt();
        trailing.push(0);
        for (what, extra) in [
            ("not OPT", not_opt),
            ("OPT with an owner", named),
            ("OPT past the end", long),
            ("a byte after OPT", trailing),
            ("half an OPT", opt()[..5].to_vec()),
        ] {
            let mut body = q.clone();
            body.extend_from_slice(&extra);
            let r = ask(&fake, &raw(5, FLAG_RD, [1, 0, 0, 1], &body));
            assert_eq!(rcode(&r), RCODE_FORMERR, "{what}");
        }
        // Trailing bytes after the question when no record is announced.
        let mut body = q.clone();
        body.push(0);
        let r = ask(&fake, &raw(5, FLAG_RD, [1, 0, 0, 0], &body));
        assert_eq!(rcode(&r), RCODE_FORMERR);
        assert_eq!(fake.calls().len(), 1);
    }

    #[test]
    fn other_classes_are_refused() {
        let fake = Fake::new();
        for class in [3u16, 4, 254, 255] {
            let q = question(&wire("mixed.test"), TYPE_A, class);
            let r = ask(&fake, &raw(9, 0, [1, 0, 0, 0], &q));
            assert_eq!(rcode(&r), RCODE_REFUSED, "class {class}");
            assert_eq!(counts(&r), [1, 0, 0, 0]);
            assert_eq!(&r[HEADER_LEN..], &q[..], "question kept");
        }
        assert!(fake.calls().is_empty());
    }

    #[test]
    fn malformed_questions_are_format_errors() {
        let fake = Fake::new();
        let label63 = format!("{}.", "a".repeat(63));
        let long = wire(&label63.repeat(4)); // 4 * 64 + 1 = 257 bytes
        let longest = wire(&format!("{}{}", label63.repeat(3), "b".repeat(61)));
        assert_eq!(longest.len(), 255);
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("label type 01", b"\x40aaaa\x00".to_vec()),
            ("label type 10", b"\x80aaaa\x00".to_vec()),
            ("pointer", b"\xC0\x0C".to_vec()),
            ("label then pointer", b"\x01a\xC0\x0C".to_vec()),
            ("name over 255 bytes", long),
        ];
        cases = cases
            .into_iter()
            .map(|(w, n)| (w, question(&n, TYPE_A, 1)))
            .collect();
        let full = question(&wire("mixed.test"), TYPE_A, 1);
        for cut in 0..full.len() {
            cases.push(("cut short", full[..cut].to_vec()));
        }
        for (what, body) in cases {
            let r = ask(&fake, &raw(2, 0, [1, 0, 0, 0], &body));
            assert_eq!(rcode(&r), RCODE_FORMERR, "{what}: {body:?}");
        }
        assert!(fake.calls().is_empty());
        // The twin: a name of exactly 255 bytes is a name (unknown here).
        let r = ask(&fake, &raw(2, 0, [1, 0, 0, 0], &question(&longest, 1, 1)));
        assert_eq!(rcode(&r), RCODE_NXDOMAIN);
        assert_eq!(fake.calls().len(), 1);
    }

    #[test]
    fn names_are_looked_up_lowercase_and_echoed_as_asked() {
        let fake = Fake::new();
        let q = query(0x2020, "WwW.ExAmPlE.TeSt", TYPE_A);
        let r = ask(&fake, &q);
        assert_eq!(rcode(&r), RCODE_NOERROR);
        assert_eq!(fake.calls(), vec![("www.example.test".to_owned(), TYPE_A)]);
        // 0x20 randomisation: the question comes back byte for byte.
        assert_eq!(&r[HEADER_LEN..q.len()], &q[HEADER_LEN..]);
        assert_eq!(addresses(&r, q.len() - HEADER_LEN), vec![ip("192.0.2.9")]);
        // '-' and '_' are name bytes.
        let r = ask(&fake, &query(1, "_sip._TCP.x-y.test", TYPE_A));
        assert_eq!(rcode(&r), RCODE_NOERROR);
        assert_eq!(fake.calls()[1], ("_sip._tcp.x-y.test".to_owned(), TYPE_A));
    }

    #[test]
    fn names_no_destination_can_have_do_not_exist() {
        let fake = Fake::new();
        let mut names: Vec<Vec<u8>> = ["a b.test", "a*.test", "a/b.test", "caf\u{e9}.test"]
            .iter()
            .map(|n| wire(n))
            .collect();
        names.push(b"\x03a.b\x04test\x00".to_vec()); // a dot inside a label
        names.push(b"\x03a\x00b\x04test\x00".to_vec()); // a zero byte
        names.push(vec![0]); // the root alone
        for n in &names {
            let q = question(n, TYPE_A, 1);
            let r = ask(&fake, &raw(4, FLAG_RD, [1, 0, 0, 0], &q));
            assert_eq!(rcode(&r), RCODE_NXDOMAIN, "{n:?}");
            assert_eq!(&r[HEADER_LEN..], &q[..]);
            assert_eq!(flags(&r) & FLAG_AA, FLAG_AA);
        }
        assert!(fake.calls().is_empty());
    }

    #[test]
    fn addresses_of_the_asked_family_in_order() {
        let fake = Fake::new();
        for (qtype, want) in [
            (TYPE_A, vec![ip("192.0.2.1"), ip("192.0.2.2")]),
            (TYPE_AAAA, vec![ip("2001:db8::1")]),
        ] {
            for rd in [0, FLAG_RD] {
                let q = raw(
                    0xBEEF,
                    rd,
                    [1, 0, 0, 0],
                    &question(&wire("Mixed.Test"), qtype, 1),
                );
                let r = ask(&fake, &q);
                assert_eq!(
                    flags(&r),
                    FLAG_QR | FLAG_AA | FLAG_RA | rd,
                    "qtype {qtype} rd {rd}"
                );
                assert_eq!(counts(&r), [1, want.len() as u16, 0, 0]);
                assert_eq!(addresses(&r, q.len() - HEADER_LEN), want);
                // The broker's own decoder reads it the same way.
                let p = parse_response(&r).unwrap();
                assert_eq!(
                    (p.id, p.qtype, p.qname.to_dotted()),
                    (0xBEEF, qtype, "mixed.test".into())
                );
                assert_eq!(p.answers.len(), want.len());
                assert!(p.answers.iter().all(|(owner, _)| *owner == p.qname));
            }
        }
    }

    #[test]
    fn no_address_of_the_family_is_an_empty_answer() {
        let fake = Fake::new();
        for (name, qtype) in [("empty.test", TYPE_A), ("empty.test", TYPE_AAAA)] {
            let r = ask(&fake, &query(1, name, qtype));
            assert_eq!(rcode(&r), RCODE_NOERROR);
            assert_eq!(counts(&r), [1, 0, 0, 0]);
            assert_eq!(flags(&r) & (FLAG_AA | FLAG_RA), FLAG_AA | FLAG_RA);
        }
        // Only IPv4 listed, IPv6 asked.
        struct V4Only;
        impl StubLookup for V4Only {
            fn lookup(&self, _: &str, _: u16) -> Lookup {
                Lookup::Addresses(vec![ip("192.0.2.7")])
            }
        }
        let q = query(1, "v4.test", TYPE_AAAA);
        let r = answer(&q, &V4Only, UDP_MAX).unwrap();
        assert_eq!((rcode(&r), counts(&r)), (RCODE_NOERROR, [1, 0, 0, 0]));
        let r = answer(&query(1, "v4.test", TYPE_A), &V4Only, UDP_MAX).unwrap();
        assert_eq!((rcode(&r), counts(&r)), (RCODE_NOERROR, [1, 1, 0, 0]));
    }

    #[test]
    fn nxdomain_and_servfail_from_the_lookup() {
        let fake = Fake::new();
        for (name, want, aa) in [
            ("gone.test", RCODE_NXDOMAIN, FLAG_AA),
            ("fail.test", RCODE_SERVFAIL, 0),
            ("refused.test", RCODE_REFUSED, 0),
        ] {
            for qtype in [TYPE_A, TYPE_AAAA] {
                let q = query(0x1234, name, qtype);
                let r = ask(&fake, &q);
                assert_eq!(rcode(&r), want, "{name}");
                assert_eq!(flags(&r) & FLAG_AA, aa, "{name}");
                assert_eq!(counts(&r), [1, 0, 0, 0]);
                assert_eq!(&r[HEADER_LEN..], &q[HEADER_LEN..]);
            }
        }
        assert_eq!(fake.calls().len(), 6);
    }

    #[test]
    fn other_types_are_refused_without_lookup() {
        let fake = Fake::new();
        // NS, CNAME, SOA, PTR, MX, TXT, SRV, OPT, SVCB, HTTPS, AXFR, ANY, CAA
        for qtype in [2u16, 5, 6, 12, 15, 16, 33, 41, 64, 65, 252, 255, 257] {
            let q = query(8, "mixed.test", qtype);
            let r = ask(&fake, &q);
            assert_eq!(rcode(&r), RCODE_REFUSED, "qtype {qtype}");
            assert_eq!(&r[HEADER_LEN..], &q[HEADER_LEN..]);
            assert_eq!(flags(&r) & FLAG_AA, 0);
        }
        assert!(fake.calls().is_empty());
    }

    #[test]
    fn an_answer_over_max_len_is_truncated() {
        let fake = Fake::new();
        // Header 12 + question 17 + 16 per A record: 30 fit in 512 (509
        // bytes), 31 do not (525; "thirtyone" is 3 bytes longer still).
        let q = query(1, "thirty.test", TYPE_A);
        let r = ask(&fake, &q);
        assert_eq!(r.len(), 12 + 17 + 30 * 16);
        assert_eq!(flags(&r) & FLAG_TC, 0);
        assert_eq!(counts(&r)[1], 30);
        let q = query(1, "thirtyone.test", TYPE_A);
        let r = ask(&fake, &q);
        assert_eq!(flags(&r) & FLAG_TC, FLAG_TC);
        assert_eq!(counts(&r), [1, 0, 0, 0]);
        assert_eq!(&r[HEADER_LEN..], &q[HEADER_LEN..], "question kept");
        assert_eq!(rcode(&r), RCODE_NOERROR);
        // Over TCP the 40 fit; a max_len below 512 is taken as 512.
        let q = query(1, "many.test", TYPE_A);
        let r = answer(&q, &fake, TCP_MAX).unwrap();
        assert_eq!((flags(&r) & FLAG_TC, counts(&r)[1]), (0, 40));
        assert_eq!(
            addresses(&r, q.len() - HEADER_LEN),
            (0..40u8)
                .map(|i| IpAddr::from([198, 51, 100, i]))
                .collect::<Vec<_>>()
        );
        let q = query(1, "thirty.test", TYPE_A);
        let r = answer(&q, &fake, 0).unwrap();
        assert_eq!((flags(&r) & FLAG_TC, counts(&r)[1]), (0, 30));
    }

    #[test]
    fn the_id_is_the_querys() {
        let fake = Fake::new();
        for id in [0u16, 1, 0x8000, 0xFFFF] {
            for q in [
                query(id, "mixed.test", TYPE_A),
                query(id, "mixed.test", 15),
                raw(id, 0, [0, 0, 0, 0], &[]),
            ] {
                assert_eq!(be16(&ask(&fake, &q), 0), Some(id));
            }
        }
    }

    /// Mutations of valid queries (bytes changed, cut, inserted) and random
    /// messages never panic; whatever is answered is a well-formed response
    /// to that query, within 512 bytes.
    #[test]
    fn mutated_queries_never_panic() {
        let fake = Fake::new();
        let mut with_opt = question(&wire("Mixed.Test"), TYPE_AAAA, 1);
        with_opt.extend_from_slice(&opt());
        let seeds = [
            query(1, "mixed.test", TYPE_A),
            query(2, "MANY.test", TYPE_A),
            raw(3, FLAG_RD, [1, 0, 0, 1], &with_opt),
            query(4, "_sip._tcp.x-y.test", TYPE_AAAA),
        ];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // Dropped, header-only, refused class, answered with addresses.
        let mut kinds = [0usize; 4];
        for round in 0..60_000 {
            let mut m = if round % 10 == 0 {
                (0..next() % 80).map(|_| next() as u8).collect()
            } else {
                seeds[round % seeds.len()].clone()
            };
            for _ in 0..(next() % 4 + 1) {
                if m.is_empty() {
                    break;
                }
                let i = (next() as usize) % m.len();
                match next() % 3 {
                    0 => m[i] = next() as u8,
                    1 => m.truncate(i),
                    _ => m.insert(i, next() as u8),
                }
            }
            let Some(r) = answer(&m, &fake, UDP_MAX) else {
                assert!(m.len() < HEADER_LEN || m[2] & 0x80 != 0, "{m:?}");
                kinds[0] += 1;
                continue;
            };
            assert!(r.len() >= HEADER_LEN && r.len() <= UDP_MAX, "{m:?}");
            assert_eq!(&r[..2], &m[..2]);
            assert_ne!(flags(&r) & FLAG_QR, 0);
            match counts(&r) {
                [0, 0, 0, 0] => {
                    assert_eq!(r.len(), HEADER_LEN);
                    kinds[1] += 1;
                }
                [1, an, 0, 0] => {
                    // Only a well-formed question is echoed, and as sent.
                    let qlen = name_end(&m, HEADER_LEN).unwrap() + 4 - HEADER_LEN;
                    let asked = &m[HEADER_LEN..HEADER_LEN + qlen];
                    assert_eq!(&r[HEADER_LEN..HEADER_LEN + qlen], asked);
                    if be16(asked, qlen - 2) != Some(CLASS_IN) {
                        assert_eq!((rcode(&r), r.len()), (RCODE_REFUSED, HEADER_LEN + qlen));
                        kinds[2] += 1;
                        continue;
                    }
                    // The broker's own decoder accepts every other echo.
                    let p = parse_response(&r).unwrap_or_else(|e| panic!("{e:?}: {m:?}"));
                    assert_eq!(p.answers.len(), an as usize);
                    assert_eq!(addresses(&r, qlen).len(), an as usize);
                    kinds[3] += usize::from(an > 0);
                }
                other => panic!("counts {other:?} for {m:?}"),
            }
        }
        // The mutations reached every kind of outcome.
        assert!(kinds.iter().all(|k| *k > 100), "{kinds:?}");
        // Every call the fake saw was a clean lowercase name of A or AAAA.
        for (name, qtype) in fake.calls() {
            assert!(qtype == TYPE_A || qtype == TYPE_AAAA);
            assert!(crate::dns::Name::from_dotted(&name).is_ok(), "{name:?}");
            assert_eq!(name, name.to_ascii_lowercase());
        }
    }
}
