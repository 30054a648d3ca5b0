//! A bounded, strict TLS ClientHello parser: enough to read the server name
//! (SNI) the client asks for, and nothing more. The broker never terminates
//! TLS; it reads the client's first flight, judges it, and replays it upstream.

/// Longest ClientHello handshake message accepted (body, without its header).
pub const MAX_CLIENT_HELLO: usize = 32 * 1024;
/// Largest TLS plaintext record fragment (RFC 8446 section 5.1).
const MAX_RECORD: usize = 16 * 1024;

/// Why the bytes are not an acceptable ClientHello.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed TLS ClientHello: {0}")]
pub struct TlsError(pub String);

fn bad<T>(why: impl Into<String>) -> Result<T, TlsError> {
    Err(TlsError(why.into()))
}

/// Progress of reading a ClientHello from the start of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloProgress {
    /// At least this many more bytes are needed (read exactly that many, so
    /// nothing after the ClientHello's last record is consumed).
    Need(usize),
    /// Complete: the server name (None when the client sent none) and the
    /// length of the records that carried the ClientHello.
    Done { sni: Option<String>, len: usize },
}

/// Reads handshake records from `buf` (the first bytes the client sent after
/// the tunnel was established). The ClientHello may span several records but
/// must end exactly at a record boundary, alone.
pub fn read_client_hello(buf: &[u8]) -> Result<HelloProgress, TlsError> {
    let mut at = 0;
    let mut message: Vec<u8> = Vec::new();
    loop {
        if buf.len() < at + 5 {
            return Ok(HelloProgress::Need(at + 5 - buf.len()));
        }
        let header = &buf[at..at + 5];
        if header[0] != 0x16 {
            return bad(format!("record type {} is not handshake", header[0]));
        }
        if header[1] != 0x03 || header[2] > 0x04 {
            return bad("unknown record version");
        }
        let len = u16::from_be_bytes([header[3], header[4]]) as usize;
        if len == 0 || len > MAX_RECORD {
            return bad(format!("record length {len}"));
        }
        if buf.len() < at + 5 + len {
            return Ok(HelloProgress::Need(at + 5 + len - buf.len()));
        }
        message.extend_from_slice(&buf[at + 5..at + 5 + len]);
        at += 5 + len;
        if message.len() >= 4 {
            if message[0] != 0x01 {
                return bad(format!("handshake type {} is not ClientHello", message[0]));
            }
            let body_len = u32::from_be_bytes([0, message[1], message[2], message[3]]) as usize;
            if body_len > MAX_CLIENT_HELLO {
                return bad(format!("ClientHello of {body_len} bytes"));
            }
            match message.len().cmp(&(4 + body_len)) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Greater => {
                    return bad("bytes after the ClientHello in its record")
                }
                std::cmp::Ordering::Equal => {
                    let sni = parse_client_hello(&message[4..])?;
                    return Ok(HelloProgress::Done { sni, len: at });
                }
            }
        }
    }
}

/// A cursor that refuses to read past its end.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], TlsError> {
        if self.buf.len() - self.at < n {
            return bad(format!("truncated {what}"));
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<usize, TlsError> {
        Ok(self.take(1, what)?[0] as usize)
    }
    fn u16(&mut self, what: &str) -> Result<usize, TlsError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]) as usize)
    }
    fn rest(&self) -> usize {
        self.buf.len() - self.at
    }
}

/// Parses a ClientHello body (after the 4-byte handshake header) and returns
/// its host_name, if the client sent the server_name extension.
pub fn parse_client_hello(body: &[u8]) -> Result<Option<String>, TlsError> {
    let mut c = Cursor { buf: body, at: 0 };
    let version = c.take(2, "legacy_version")?;
    if version[0] != 0x03 || version[1] == 0 || version[1] > 0x03 {
        return bad("legacy_version is not TLS 1.0..1.2");
    }
    c.take(32, "random")?;
    let sid = c.u8("session id length")?;
    if sid > 32 {
        return bad("session id longer than 32 bytes");
    }
    c.take(sid, "session id")?;
    let suites = c.u16("cipher suites length")?;
    if suites < 2 || suites % 2 != 0 {
        return bad("cipher suites length");
    }
    c.take(suites, "cipher suites")?;
    let comp = c.u8("compression methods length")?;
    if comp < 1 {
        return bad("no compression method");
    }
    c.take(comp, "compression methods")?;
    if c.rest() == 0 {
        return Ok(None); // no extensions at all (TLS 1.0-1.2)
    }
    let ext_len = c.u16("extensions length")?;
    if ext_len != c.rest() {
        return bad("extensions length does not match the message");
    }
    let mut seen: Vec<usize> = Vec::new();
    let mut sni = None;
    while c.rest() > 0 {
        let ty = c.u16("extension type")?;
        let len = c.u16("extension length")?;
        let data = c.take(len, "extension")?;
        if seen.contains(&ty) {
            return bad(format!("duplicate extension {ty}"));
        }
        seen.push(ty);
        if ty == 0 {
            sni = Some(parse_server_name(data)?);
        }
    }
    Ok(sni)
}

/// The server_name extension: exactly one host_name entry.
fn parse_server_name(data: &[u8]) -> Result<String, TlsError> {
    let mut c = Cursor { buf: data, at: 0 };
    let list = c.u16("server name list length")?;
    if list != c.rest() || list == 0 {
        return bad("server name list length");
    }
    let kind = c.u8("server name type")?;
    if kind != 0 {
        return bad(format!("server name type {kind}"));
    }
    let len = c.u16("host name length")?;
    let name = c.take(len, "host name")?;
    if c.rest() != 0 {
        return bad("more than one server name");
    }
    if name.is_empty() || !name.iter().all(|b| b.is_ascii_graphic()) {
        return bad("host name is empty or not printable ASCII");
    }
    Ok(String::from_utf8(name.to_vec()).expect("ASCII"))
}

/// Builds a minimal TLS 1.2-style ClientHello record for tests and benches.
pub fn build_client_hello(sni: Option<&str>) -> Vec<u8> {
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[0x11; 32]);
    body.push(0); // session id
    body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]); // one suite
    body.extend_from_slice(&[0x01, 0x00]); // null compression
    let mut ext = Vec::new();
    if let Some(name) = sni {
        let n = name.len() as u16;
        ext.extend_from_slice(&[0x00, 0x00]);
        ext.extend_from_slice(&(n + 5).to_be_bytes());
        ext.extend_from_slice(&(n + 3).to_be_bytes());
        ext.push(0);
        ext.extend_from_slice(&n.to_be_bytes());
        ext.extend_from_slice(name.as_bytes());
    }
    ext.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]); // supported_versions
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![0x01];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 0x03, 0x01];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sni() {
        let rec = build_client_hello(Some("api.example.com"));
        assert_eq!(
            read_client_hello(&rec),
            Ok(HelloProgress::Done {
                sni: Some("api.example.com".into()),
                len: rec.len()
            })
        );
        let rec = build_client_hello(None);
        assert_eq!(
            read_client_hello(&rec),
            Ok(HelloProgress::Done {
                sni: None,
                len: rec.len()
            })
        );
    }

    #[test]
    fn incremental_and_truncated() {
        let rec = build_client_hello(Some("a.example"));
        assert_eq!(read_client_hello(&[]), Ok(HelloProgress::Need(5)));
        for cut in 1..rec.len() {
            match read_client_hello(&rec[..cut]) {
                Ok(HelloProgress::Need(n)) => assert!(n >= 1 && cut + n <= rec.len()),
                other => panic!("{cut}: {other:?}"),
            }
        }
        // A record that claims more than the handshake message holds.
        let mut short = rec.clone();
        let body_len = short.len() - 9 - 1;
        short[6..9].copy_from_slice(&(body_len as u32).to_be_bytes()[1..]);
        assert!(read_client_hello(&short).is_err());
    }

    #[test]
    fn split_across_records() {
        let rec = build_client_hello(Some("a.example"));
        let hs = &rec[5..];
        let mut two = Vec::new();
        for part in [&hs[..10], &hs[10..]] {
            two.extend_from_slice(&[0x16, 0x03, 0x01]);
            two.extend_from_slice(&(part.len() as u16).to_be_bytes());
            two.extend_from_slice(part);
        }
        assert_eq!(
            read_client_hello(&two),
            Ok(HelloProgress::Done {
                sni: Some("a.example".into()),
                len: two.len()
            })
        );
    }

    #[test]
    fn refuses_malformed() {
        let good = build_client_hello(Some("a.example"));
        let mut cases: Vec<Vec<u8>> = Vec::new();
        let mut c = good.clone();
        c[0] = 0x17; // application data
        cases.push(c);
        let mut c = good.clone();
        c[1] = 0x02;
        cases.push(c);
        let mut c = good.clone();
        c[5] = 0x02; // ServerHello
        cases.push(c);
        cases.push(b"GET / HTTP/1.1\r\n\r\n".to_vec());
        cases.push(vec![0x16, 0x03, 0x01, 0x00, 0x00]);
        cases.push(vec![0x16, 0x03, 0x01, 0x40, 0x01]);
        // Duplicate server_name.
        let sni_ext: Vec<u8> = {
            let mut e = vec![0, 0, 0, 14, 0, 12, 0, 0, 9];
            e.extend_from_slice(b"a.example");
            e
        };
        let mut body = vec![3, 3];
        body.extend_from_slice(&[0; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 1, 1, 0]);
        let mut ext = sni_ext.clone();
        ext.extend_from_slice(&sni_ext);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        assert!(parse_client_hello(&body).is_err());
        // Truncated bodies never panic and never succeed with a name.
        let full = &good[9..];
        for cut in 0..full.len() {
            let r = parse_client_hello(&full[..cut]);
            assert!(r.is_err() || r == Ok(None), "{cut}: {r:?}");
        }
        for case in cases {
            assert!(read_client_hello(&case).is_err(), "{case:?}");
        }
    }

    #[test]
    fn server_name_strictness() {
        assert!(parse_server_name(&[0, 0]).is_err());
        assert!(parse_server_name(&[0, 4, 1, 0, 1, b'a']).is_err());
        assert!(parse_server_name(&[0, 3, 0, 0, 0]).is_err());
        assert!(parse_server_name(&[0, 5, 0, 0, 1, b'a', 0]).is_err());
        assert!(parse_server_name(&[0, 4, 0, 0, 1, 0x07]).is_err());
        assert_eq!(parse_server_name(&[0, 4, 0, 0, 1, b'a']), Ok("a".into()));
    }
}
