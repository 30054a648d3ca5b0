//! The DNS wire format, as much as the broker's resolver needs (RFC 1035):
//! encode one query (one question, recursion desired, no EDNS), decode one
//! response strictly. Written by hand, not a crate: a few hundred lines with
//! explicit bounds keep the static binary small and are easy to fuzz
//! (`fuzz/fuzz_targets/netd_dns_response.rs`).
//!
//! Bounds: a name is at most 255 bytes on the wire, a label at most 63; a
//! compression pointer must point strictly before the name it belongs to, so
//! decoding always terminates; every length is checked against the message
//! before it is used. Decoding never panics.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Record types the resolver asks for or follows.
pub const TYPE_A: u16 = 1;
pub const TYPE_CNAME: u16 = 5;
pub const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;

/// Longest name on the wire (RFC 1035 2.3.4), the root's zero byte included.
const MAX_NAME_WIRE: usize = 255;
const MAX_LABEL: usize = 63;
const HEADER_LEN: usize = 12;

/// Which rule of a dotted name [`Name::from_dotted`] found broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameRule {
    #[error("a name has 1 to 253 bytes")]
    Length,
    #[error("a label has 1 to 63 bytes")]
    LabelLength,
    #[error("labels hold only letters, digits, '-' and '_'")]
    LabelBytes,
}

/// A dotted name that is not a name DNS can ask for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?}: {why}")]
pub struct NameError {
    pub text: String,
    pub why: NameRule,
}

/// A domain name in uncompressed wire form, ASCII letters lowercased
/// (DNS compares names case-insensitively), ending with the root's zero byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Name(Vec<u8>);

impl Name {
    /// A name from its dotted text form (no trailing dot; labels 1..63 bytes
    /// of letters, digits, '-' and '_'; at most 253 bytes of text).
    pub fn from_dotted(text: &str) -> Result<Name, NameError> {
        let refuse = |why| NameError {
            text: text.to_owned(),
            why,
        };
        if text.is_empty() || text.len() > 253 {
            return Err(refuse(NameRule::Length));
        }
        let mut wire = Vec::with_capacity(text.len() + 2);
        for label in text.split('.') {
            if label.is_empty() || label.len() > MAX_LABEL {
                return Err(refuse(NameRule::LabelLength));
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(refuse(NameRule::LabelBytes));
            }
            wire.push(label.len() as u8);
            wire.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
        }
        wire.push(0);
        Ok(Name(wire))
    }

    /// The wire bytes (uncompressed, lowercased).
    pub fn wire(&self) -> &[u8] {
        &self.0
    }

    /// The dotted text, with bytes outside `[a-z0-9_-]` written as `\DDD`
    /// (a hostile server's name never prints as something it is not).
    pub fn to_dotted(&self) -> String {
        let mut out = String::new();
        let mut i = 0;
        while let Some(&len) = self.0.get(i) {
            if len == 0 {
                break;
            }
            if !out.is_empty() {
                out.push('.');
            }
            let end = (i + 1 + len as usize).min(self.0.len());
            for &b in &self.0[i + 1..end] {
                if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                    out.push(b as char);
                } else {
                    out.push_str(&format!("\\{b:03}"));
                }
            }
            i = end;
        }
        if out.is_empty() {
            out.push('.');
        }
        out
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_dotted())
    }
}

/// The query for `name`/`qtype` with message id `id`: one question, the
/// RD flag set, nothing else.
pub fn encode_query(id: u16, name: &Name, qtype: u16) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEADER_LEN + name.0.len() + 4);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&0x0100u16.to_be_bytes()); // RD
    m.extend_from_slice(&1u16.to_be_bytes()); // QDCOUNT
    m.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // AN, NS, AR
    m.extend_from_slice(&name.0);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&CLASS_IN.to_be_bytes());
    m
}

/// Response codes the resolver tells apart.
pub const RCODE_NOERROR: u8 = 0;
pub const RCODE_FORMERR: u8 = 1;
pub const RCODE_SERVFAIL: u8 = 2;
pub const RCODE_NXDOMAIN: u8 = 3;
pub const RCODE_NOTIMP: u8 = 4;
pub const RCODE_REFUSED: u8 = 5;

/// One answer record the resolver uses (class IN only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Address(IpAddr),
    Cname(Name),
}

/// A decoded response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub id: u16,
    /// The TC bit: the answer did not fit (ask again over TCP).
    pub truncated: bool,
    pub rcode: u8,
    pub qname: Name,
    pub qtype: u16,
    /// Answer-section records: (owner, record). A/AAAA/CNAME of class IN
    /// only; everything else is skipped.
    pub answers: Vec<(Name, Record)>,
}

/// Why a message was not accepted as a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

fn bad<T>(why: impl Into<String>) -> Result<T, Malformed> {
    Err(Malformed(why.into()))
}

struct Reader<'a> {
    msg: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.msg.len())
            .ok_or_else(|| Malformed("message ends inside a field".into()))?;
        let s = &self.msg[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16, Malformed> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn name(&mut self) -> Result<Name, Malformed> {
        let (name, next) = read_name(self.msg, self.pos)?;
        self.pos = next;
        Ok(name)
    }
}

/// Reads the (possibly compressed) name at `start`; returns it and the
/// offset just after it in the message.
fn read_name(msg: &[u8], start: usize) -> Result<(Name, usize), Malformed> {
    let mut wire = Vec::new();
    let mut pos = start;
    // Where reading continues after the name (set at the first pointer).
    let mut after = None;
    // Every pointer must point strictly below this bound, which only
    // decreases: decoding terminates after at most msg.len() jumps.
    let mut limit = start;
    loop {
        let Some(&len) = msg.get(pos) else {
            return bad("message ends inside a name");
        };
        match len & 0xC0 {
            0x00 => {
                let len = len as usize;
                if len == 0 {
                    wire.push(0);
                    if wire.len() > MAX_NAME_WIRE {
                        return bad("name longer than 255 bytes");
                    }
                    return Ok((Name(wire), after.unwrap_or(pos + 1)));
                }
                let Some(label) = msg.get(pos + 1..pos + 1 + len) else {
                    return bad("message ends inside a label");
                };
                wire.push(len as u8);
                wire.extend(label.iter().map(|b| b.to_ascii_lowercase()));
                if wire.len() + 1 > MAX_NAME_WIRE {
                    return bad("name longer than 255 bytes");
                }
                pos += 1 + len;
            }
            0xC0 => {
                let Some(&low) = msg.get(pos + 1) else {
                    return bad("message ends inside a compression pointer");
                };
                let target = ((len as usize & 0x3F) << 8) | low as usize;
                if target >= limit {
                    return bad("compression pointer does not point backwards");
                }
                if after.is_none() {
                    after = Some(pos + 2);
                }
                limit = target;
                pos = target;
            }
            _ => return bad("unknown label type"),
        }
    }
}

/// Decodes a response strictly: a response (QR set) to a standard query,
/// exactly one question, every record inside the message. Trailing bytes
/// after the answer section are not read (authority and additional sections
/// are not used).
pub fn parse_response(msg: &[u8]) -> Result<Response, Malformed> {
    if msg.len() < HEADER_LEN {
        return bad(format!("{} bytes, shorter than a header", msg.len()));
    }
    let mut r = Reader { msg, pos: 0 };
    let id = r.u16()?;
    let flags = r.u16()?;
    let qd = r.u16()?;
    let an = r.u16()?;
    let _ns = r.u16()?;
    let _ar = r.u16()?;
    if flags & 0x8000 == 0 {
        return bad("not a response (QR clear)");
    }
    if (flags >> 11) & 0xF != 0 {
        return bad("not a standard query's response (opcode)");
    }
    if qd != 1 {
        return bad(format!("{qd} questions (one expected)"));
    }
    let truncated = flags & 0x0200 != 0;
    let rcode = (flags & 0xF) as u8;
    let qname = r.name()?;
    let qtype = r.u16()?;
    let qclass = r.u16()?;
    if qclass != CLASS_IN {
        return bad(format!("question class {qclass}"));
    }
    let mut answers = Vec::new();
    for _ in 0..an {
        // A truncated response may end inside its answer section: keep what
        // is whole (the caller asks again over TCP anyway).
        let rec = (|| -> Result<Option<(Name, Record)>, Malformed> {
            let owner = r.name()?;
            let rtype = r.u16()?;
            let class = r.u16()?;
            let _ttl = r.take(4)?;
            let rdlen = r.u16()? as usize;
            let rdata_start = r.pos;
            let rdata = r.take(rdlen)?;
            if class != CLASS_IN {
                return Ok(None);
            }
            Ok(match rtype {
                TYPE_A => {
                    let b: [u8; 4] = rdata
                        .try_into()
                        .map_err(|_| Malformed(format!("A record of {rdlen} bytes")))?;
                    Some((owner, Record::Address(IpAddr::V4(Ipv4Addr::from(b)))))
                }
                TYPE_AAAA => {
                    let b: [u8; 16] = rdata
                        .try_into()
                        .map_err(|_| Malformed(format!("AAAA record of {rdlen} bytes")))?;
                    Some((owner, Record::Address(IpAddr::V6(Ipv6Addr::from(b)))))
                }
                TYPE_CNAME => {
                    let (target, end) = read_name(msg, rdata_start)?;
                    if end != rdata_start + rdlen {
                        return bad("CNAME data longer or shorter than its name");
                    }
                    Some((owner, Record::Cname(target)))
                }
                _ => None,
            })
        })();
        match rec {
            Ok(Some(x)) => answers.push(x),
            Ok(None) => {}
            Err(_) if truncated => break,
            Err(e) => return Err(e),
        }
    }
    Ok(Response {
        id,
        truncated,
        rcode,
        qname,
        qtype,
        answers,
    })
}

/// What a response says about `qname`/`qtype`, CNAME chains followed inside
/// its answer section (at most `max_hops` aliases).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The addresses of the name the chain ends at (in answer order).
    Addresses(Vec<IpAddr>),
    /// The chain ends at an alias whose records the response does not hold:
    /// ask for this name (having used `hops` aliases).
    Alias { target: Name, hops: usize },
    /// The name exists but has no record of this type.
    NoData,
}

/// A CNAME chain in one response longer than the resolver follows (or a loop).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CNAME chain longer than {max_hops} aliases from {from}")]
pub struct ChainTooLong {
    pub max_hops: usize,
    /// The name the chain starts at (the question's).
    pub from: Name,
}

/// Follows the answer section from `qname` through CNAME records to the
/// records of `qtype`. Err when the chain is longer than `max_hops` (or loops).
pub fn follow(resp: &Response, qtype: u16, max_hops: usize) -> Result<Answer, ChainTooLong> {
    let mut current = resp.qname.clone();
    let mut hops = 0;
    loop {
        let addrs: Vec<IpAddr> = resp
            .answers
            .iter()
            .filter(|(owner, _)| *owner == current)
            .filter_map(|(_, r)| match r {
                Record::Address(a @ IpAddr::V4(_)) if qtype == TYPE_A => Some(*a),
                Record::Address(a @ IpAddr::V6(_)) if qtype == TYPE_AAAA => Some(*a),
                _ => None,
            })
            .collect();
        if !addrs.is_empty() {
            return Ok(Answer::Addresses(addrs));
        }
        let alias = resp.answers.iter().find_map(|(owner, r)| match r {
            Record::Cname(t) if *owner == current => Some(t.clone()),
            _ => None,
        });
        match alias {
            Some(t) => {
                hops += 1;
                if hops > max_hops {
                    return Err(ChainTooLong {
                        max_hops,
                        from: resp.qname.clone(),
                    });
                }
                current = t;
            }
            None if hops == 0 => return Ok(Answer::NoData),
            None => {
                return Ok(Answer::Alias {
                    target: current,
                    hops,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(id: u16, flags: u16, qd: u16, an: u16) -> Vec<u8> {
        let mut m = Vec::new();
        for v in [id, flags, qd, an, 0, 0] {
            m.extend_from_slice(&v.to_be_bytes());
        }
        m
    }

    fn question(m: &mut Vec<u8>, name: &str, qtype: u16) {
        m.extend_from_slice(Name::from_dotted(name).unwrap().wire());
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
    }

    fn rr(m: &mut Vec<u8>, owner: &[u8], rtype: u16, rdata: &[u8]) {
        m.extend_from_slice(owner);
        m.extend_from_slice(&rtype.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        m.extend_from_slice(&60u32.to_be_bytes());
        m.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        m.extend_from_slice(rdata);
    }

    #[test]
    fn query_encoding() {
        let q = encode_query(
            0xBEEF,
            &Name::from_dotted("Pkg.Example").unwrap(),
            TYPE_AAAA,
        );
        assert_eq!(
            q,
            b"\xBE\xEF\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03pkg\x07example\x00\x00\x1C\x00\x01"
        );
        let why = |t: &str| Name::from_dotted(t).unwrap_err().why;
        assert_eq!(why("a..b"), NameRule::LabelLength);
        assert_eq!(why(&"a".repeat(64)), NameRule::LabelLength);
        assert_eq!(why("a b"), NameRule::LabelBytes);
        assert_eq!(why(""), NameRule::Length);
        assert_eq!(why(&"a.".repeat(127)), NameRule::Length);
        assert_eq!(
            Name::from_dotted("a b").unwrap_err().to_string(),
            "\"a b\": labels hold only letters, digits, '-' and '_'"
        );
    }

    /// A response `id` with `answers` records announced: www.example CNAME
    /// edge.example (pointer to "example" at 16), edge.example A `a`. Also
    /// returns the offset of edge.example's name, for more records.
    fn www_via_edge(id: u16, answers: u16, a: [u8; 4]) -> (Vec<u8>, usize) {
        let mut m = header(id, 0x8180, 1, answers);
        question(&mut m, "www.example", TYPE_A);
        rr(&mut m, b"\xC0\x0C", TYPE_CNAME, b"\x04edge\xC0\x10");
        let edge = m.len() - 7;
        rr(&mut m, &[0xC0, edge as u8], TYPE_A, &a);
        (m, edge)
    }

    #[test]
    fn response_with_compression_and_chain() {
        let (mut m, edge) = www_via_edge(7, 3, [93, 184, 216, 34]);
        rr(&mut m, &[0xC0, edge as u8], 16, b"\x03txt"); // TXT: skipped
        let r = parse_response(&m).unwrap();
        assert_eq!(r.id, 7);
        assert_eq!(r.rcode, RCODE_NOERROR);
        assert_eq!(r.qname.to_dotted(), "www.example");
        assert_eq!(r.answers.len(), 2);
        assert_eq!(
            follow(&r, TYPE_A, 8).unwrap(),
            Answer::Addresses(vec!["93.184.216.34".parse().unwrap()])
        );
        assert_eq!(
            follow(&r, TYPE_AAAA, 8).unwrap(),
            Answer::Alias {
                target: Name::from_dotted("edge.example").unwrap(),
                hops: 1
            }
        );
        assert!(follow(&r, TYPE_A, 0).is_err());
    }

    #[test]
    fn cname_loop_is_bounded() {
        let mut m = header(1, 0x8180, 1, 2);
        question(&mut m, "a.example", TYPE_A);
        rr(&mut m, b"\xC0\x0C", TYPE_CNAME, b"\x01b\xC0\x0E");
        let b = m.len() - 4;
        rr(&mut m, &[0xC0, b as u8], TYPE_CNAME, b"\xC0\x0C");
        let r = parse_response(&m).unwrap();
        let e = follow(&r, TYPE_A, 8).unwrap_err();
        assert_eq!((e.max_hops, e.from.clone()), (8, r.qname.clone()));
        assert!(e.to_string().contains("longer than 8"), "{e}");
    }

    #[test]
    fn malformed_messages_are_refused() {
        let mut ok = header(1, 0x8180, 1, 0);
        question(&mut ok, "a.example", TYPE_A);
        assert!(parse_response(&ok).is_ok());
        // Every strict prefix is refused, never a panic.
        for n in 0..ok.len() {
            assert!(parse_response(&ok[..n]).is_err(), "prefix {n}");
        }
        let mut q = ok.clone();
        q[2] &= 0x7F; // QR clear
        assert!(parse_response(&q).is_err());
        let mut q = header(1, 0x8180, 2, 0);
        question(&mut q, "a.example", TYPE_A);
        assert!(parse_response(&q).is_err());
        // Forward pointer, self pointer, pointer loop, bad label type.
        for name in [
            &b"\xC0\x20"[..],
            b"\xC0\x0C",
            b"\x01a\xC0\x0C",
            b"\x41a\x00",
        ] {
            let mut m = header(1, 0x8180, 1, 0);
            m.extend_from_slice(name);
            m.extend_from_slice(&[0, 1, 0, 1]);
            assert!(parse_response(&m).is_err(), "{name:?}");
        }
        // A record of 5 bytes.
        let mut m = ok.clone();
        m[7] = 1;
        rr(&mut m, b"\xC0\x0C", TYPE_A, &[1, 2, 3, 4, 5]);
        assert!(parse_response(&m).is_err());
        // Name over 255 bytes through pointers.
        let mut m = header(1, 0x8180, 1, 0);
        let base = m.len();
        m.extend_from_slice(&[63]);
        m.extend_from_slice(&[b'a'; 63]);
        m.push(0);
        let mut prev = base;
        for _ in 0..4 {
            let here = m.len();
            m.push(63);
            m.extend_from_slice(&[b'b'; 63]);
            m.extend_from_slice(&[0xC0 | (prev >> 8) as u8, prev as u8]);
            prev = here;
        }
        let start = m.len();
        m.extend_from_slice(&[0xC0 | (prev >> 8) as u8, prev as u8]);
        assert!(read_name(&m, start).is_err());
    }

    /// Mutations of a valid response (random bytes flipped, cut, grown)
    /// never panic, and whatever decodes stays within DNS's bounds. (The
    /// fuzz target netd_dns_response does the same with coverage.)
    #[test]
    fn mutated_responses_never_panic() {
        let (seed, _) = www_via_edge(9, 2, [10, 0, 0, 1]);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..50_000 {
            let mut m = seed.clone();
            for _ in 0..(next() % 4 + 1) {
                let i = (next() as usize) % m.len();
                match next() % 3 {
                    0 => m[i] = next() as u8,
                    1 => m.truncate(i),
                    _ => m.insert(i, next() as u8),
                }
                if m.is_empty() {
                    break;
                }
            }
            if let Ok(r) = parse_response(&m) {
                assert!(r.qname.wire().len() <= MAX_NAME_WIRE);
                for (owner, _) in &r.answers {
                    assert!(owner.wire().len() <= MAX_NAME_WIRE);
                }
                let _ = r.qname.to_dotted();
                let _ = follow(&r, TYPE_A, 8);
                let _ = follow(&r, TYPE_AAAA, 8);
            }
        }
    }

    #[test]
    fn hostile_names_print_escaped() {
        let mut m = header(1, 0x8180, 1, 0);
        m.extend_from_slice(b"\x03a.b\x00\x00\x01\x00\x01");
        let r = parse_response(&m).unwrap();
        assert_eq!(r.qname.to_dotted(), "a\\046b");
        assert_ne!(r.qname, Name::from_dotted("a.b").unwrap());
    }
}
