//! Proxy request parsers: HTTP CONNECT, absolute-form plain HTTP, SOCKS5.
//!
//! Pure functions over byte buffers with fixed bounds, so they can be fuzzed
//! and tested without sockets. They refuse anything unusual rather than guess.

/// Longest HTTP request head (request line and headers) the broker reads.
pub const MAX_HTTP_HEAD: usize = 16 * 1024;
/// Most header lines in one HTTP request head.
pub const MAX_HTTP_HEADERS: usize = 100;

/// Why a proxy request was refused as malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed proxy request: {0}")]
pub struct ProxyError(pub String);

fn err<T>(why: impl Into<String>) -> Result<T, ProxyError> {
    Err(ProxyError(why.into()))
}

/// Which proxy protocol a connection speaks, from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Socks5,
    Http,
}

impl Protocol {
    /// 0x05 is SOCKS5; an ASCII uppercase letter starts an HTTP method;
    /// anything else (SOCKS4's 0x04, a TLS record, binary) is refused.
    pub fn detect(first: u8) -> Option<Protocol> {
        match first {
            0x05 => Some(Protocol::Socks5),
            b'A'..=b'Z' => Some(Protocol::Http),
            _ => None,
        }
    }
}

/// What an HTTP proxy request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpKind {
    /// `CONNECT host:port`: a tunnel.
    Connect,
    /// An absolute-form request (`GET http://host:port/path`): `head` is the
    /// request head to send upstream, rewritten to origin form with
    /// `Connection: close` and without proxy headers.
    Forward { head: Vec<u8> },
}

/// A parsed HTTP proxy request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub kind: HttpKind,
    /// The host as the client wrote it (brackets of an IPv6 literal removed).
    pub host: String,
    pub port: u16,
}

/// The length of the request head in `buf` (through the blank line), if complete.
pub fn http_head_len(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A strict decimal port: 1..=65535, digits only, no leading zero.
pub fn parse_port(s: &str) -> Result<u16, ProxyError> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 5 || !b.iter().all(u8::is_ascii_digit) || b[0] == b'0' {
        return err(format!("bad port {s:?}"));
    }
    match s.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(p as u16),
        _ => err(format!("bad port {s:?}")),
    }
}

/// Splits an authority `host[:port]` (`[v6]` allowed); `default_port` when the
/// port is absent (None: the port is required).
pub fn parse_authority(a: &str, default_port: Option<u16>) -> Result<(String, u16), ProxyError> {
    if a.is_empty() || a.contains('@') {
        return err(format!("bad authority {a:?}"));
    }
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let Some(end) = rest.find(']') else {
            return err(format!("bad authority {a:?}"));
        };
        let host = &rest[..end];
        let after = &rest[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return err(format!("bad authority {a:?}")),
        };
        (host, port)
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    };
    let bracketed = a.starts_with('[');
    let host_byte_ok = |b: u8| {
        if bracketed {
            b.is_ascii_hexdigit() || b == b':' || b == b'.'
        } else {
            b.is_ascii_graphic() && !b"[]/?#@:".contains(&b)
        }
    };
    if host.is_empty() || !host.bytes().all(host_byte_ok) {
        return err(format!("bad host in authority {a:?}"));
    }
    let port = match (port, default_port) {
        (Some(p), _) => parse_port(p)?,
        (None, Some(d)) => d,
        (None, None) => return err(format!("authority {a:?} has no port")),
    };
    Ok((host.to_owned(), port))
}

/// Headers that concern only the hop to the proxy and are not forwarded.
const HOP_HEADERS: &[&str] = &[
    "connection",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "keep-alive",
];

/// Parses a complete request head (as delimited by [`http_head_len`]).
pub fn parse_http_head(head: &[u8]) -> Result<HttpRequest, ProxyError> {
    if head.len() > MAX_HTTP_HEAD {
        return err("request head too large");
    }
    let Ok(text) = std::str::from_utf8(head) else {
        return err("request head is not UTF-8");
    };
    let Some(text) = text.strip_suffix("\r\n\r\n") else {
        return err("request head not terminated by an empty line");
    };
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return err("bad request line");
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return err("bad method");
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return err(format!("unsupported version {version:?}"));
    }
    if target.is_empty() || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return err("bad request target");
    }
    let mut headers: Vec<(&str, &str)> = Vec::new();
    for line in lines {
        if headers.len() >= MAX_HTTP_HEADERS {
            return err("too many headers");
        }
        let Some((name, value)) = line.split_once(':') else {
            return err("header line without ':'");
        };
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return err("bad header name (obsolete line folding is refused)");
        }
        if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return err("control byte in header value");
        }
        headers.push((name, value.trim_matches([' ', '\t'])));
    }
    let hosts: Vec<&str> = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map(|(_, v)| *v)
        .collect();
    if hosts.len() > 1 {
        return err("more than one Host header");
    }
    if method == "CONNECT" {
        let (host, port) = parse_authority(target, None)?;
        if let Some(h) = hosts.first() {
            let (hh, hp) = parse_authority(h, Some(port))?;
            if !hh.eq_ignore_ascii_case(&host) || hp != port {
                return err("Host header disagrees with the CONNECT target");
            }
        }
        return Ok(HttpRequest {
            kind: HttpKind::Connect,
            host,
            port,
        });
    }
    let Some(scheme_end) = target.find("://") else {
        return err("a proxy request needs an absolute-form target (http://host/...) or CONNECT");
    };
    if !target[..scheme_end].eq_ignore_ascii_case("http") {
        return err("only http:// is forwarded; use CONNECT for other schemes");
    }
    let rest = &target[scheme_end + 3..];
    let cut = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(cut);
    if authority.contains('#') || path.contains('#') {
        return err("fragment in request target");
    }
    let (host, port) = parse_authority(authority, Some(80))?;
    let Some(host_header) = hosts.first() else {
        return err("absolute-form request without a Host header");
    };
    let (hh, hp) = parse_authority(host_header, Some(80))?;
    if !hh.eq_ignore_ascii_case(&host) || hp != port {
        return err("Host header disagrees with the request target");
    }
    let path = if path.is_empty() {
        "/".to_owned()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let mut out = format!("{method} {path} {version}\r\n");
    for (name, value) in &headers {
        if HOP_HEADERS.iter().any(|h| name.eq_ignore_ascii_case(h)) {
            continue;
        }
        out.push_str(name);
        out.push_str(": ");
        out.push_str(value);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(HttpRequest {
        kind: HttpKind::Forward {
            head: out.into_bytes(),
        },
        host,
        port,
    })
}

/// Outcome of an incremental parse: `Ok(None)` means "need more bytes".
pub type Partial<T> = Result<Option<(T, usize)>, ProxyError>;

/// Parses the SOCKS5 greeting (VER NMETHODS METHODS). Returns whether
/// "no authentication" (0x00) is offered, and the bytes consumed.
pub fn socks5_greeting(buf: &[u8]) -> Partial<bool> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != 0x05 {
        return err(format!("SOCKS version {} (only 5)", buf[0]));
    }
    if buf.len() < 2 {
        return Ok(None);
    }
    let n = buf[1] as usize;
    if n == 0 {
        return err("SOCKS5 greeting offers no method");
    }
    if buf.len() < 2 + n {
        return Ok(None);
    }
    Ok(Some((buf[2..2 + n].contains(&0x00), 2 + n)))
}

/// The target of a SOCKS5 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocksHost {
    Name(String),
    V4(std::net::Ipv4Addr),
    V6(std::net::Ipv6Addr),
}

impl SocksHost {
    /// The name the matcher judges: the domain as sent, or the address in text.
    pub fn as_name(&self) -> String {
        match self {
            SocksHost::Name(n) => n.clone(),
            SocksHost::V4(a) => a.to_string(),
            SocksHost::V6(a) => a.to_string(),
        }
    }
}

/// A SOCKS5 request: command, target, port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocksRequest {
    /// 1 CONNECT, 2 BIND, 3 UDP ASSOCIATE; only CONNECT is served.
    pub command: u8,
    pub host: SocksHost,
    pub port: u16,
}

/// Parses a SOCKS5 request (VER CMD RSV ATYP DST.ADDR DST.PORT).
pub fn socks5_request(buf: &[u8]) -> Partial<SocksRequest> {
    if buf.len() < 4 {
        if !buf.is_empty() && buf[0] != 0x05 {
            return err(format!("SOCKS version {} (only 5)", buf[0]));
        }
        return Ok(None);
    }
    if buf[0] != 0x05 {
        return err(format!("SOCKS version {} (only 5)", buf[0]));
    }
    if buf[2] != 0 {
        return err("SOCKS5 reserved byte is not 0");
    }
    let command = buf[1];
    let (host, at) = match buf[3] {
        0x01 => {
            if buf.len() < 4 + 4 + 2 {
                return Ok(None);
            }
            let o: [u8; 4] = buf[4..8].try_into().expect("length checked");
            (SocksHost::V4(o.into()), 8)
        }
        0x04 => {
            if buf.len() < 4 + 16 + 2 {
                return Ok(None);
            }
            let o: [u8; 16] = buf[4..20].try_into().expect("length checked");
            (SocksHost::V6(o.into()), 20)
        }
        0x03 => {
            if buf.len() < 5 {
                return Ok(None);
            }
            let n = buf[4] as usize;
            if n == 0 {
                return err("empty SOCKS5 domain name");
            }
            if buf.len() < 5 + n + 2 {
                return Ok(None);
            }
            let Ok(name) = std::str::from_utf8(&buf[5..5 + n]) else {
                return err("SOCKS5 domain name is not UTF-8");
            };
            (SocksHost::Name(name.to_owned()), 5 + n)
        }
        t => return err(format!("SOCKS5 address type {t}")),
    };
    let port = u16::from_be_bytes([buf[at], buf[at + 1]]);
    Ok(Some((
        SocksRequest {
            command,
            host,
            port,
        },
        at + 2,
    )))
}

/// A SOCKS5 reply with an all-zero IPv4 bound address.
pub fn socks5_reply(code: u8) -> [u8; 10] {
    [0x05, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every one of `heads` is refused.
    fn all_refused(heads: &[&[u8]]) {
        for bad in heads {
            assert!(
                parse_http_head(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// The head forwarded for an absolute-form request.
    fn forwarded(raw: &[u8]) -> Vec<u8> {
        match parse_http_head(raw).unwrap().kind {
            HttpKind::Forward { head } => head,
            other => panic!("{other:?} for {}", String::from_utf8_lossy(raw)),
        }
    }

    #[test]
    fn connect() {
        let r = parse_http_head(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\nUser-Agent: x\r\n\r\n").unwrap();
        assert_eq!(r.kind, HttpKind::Connect);
        assert_eq!((r.host.as_str(), r.port), ("api.example.com", 443));
        let r = parse_http_head(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((r.host.as_str(), r.port), ("::1", 8443));
        all_refused(&[
            &b"CONNECT api.example.com HTTP/1.1\r\n\r\n"[..],
            b"CONNECT api.example.com:0 HTTP/1.1\r\n\r\n",
            b"CONNECT api.example.com:65536 HTTP/1.1\r\n\r\n",
            b"CONNECT api.example.com:0443 HTTP/1.1\r\n\r\n",
            b"CONNECT api.example.com:+443 HTTP/1.1\r\n\r\n",
            b"CONNECT user@api.example.com:443 HTTP/1.1\r\n\r\n",
            b"CONNECT api.example.com:443 HTTP/2.0\r\n\r\n",
            b"CONNECT  api.example.com:443 HTTP/1.1\r\n\r\n",
            b"CONNECT api.example.com:443 HTTP/1.1\r\n folded\r\n\r\n",
            b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: other:443\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nHost: a:443\r\n\r\n",
            b"CONNECT :443 HTTP/1.1\r\n\r\n",
            b"CONNECT [::1:443 HTTP/1.1\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\n\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\nX: \x01\r\n\r\n",
            b"CONNECT a\xff:443 HTTP/1.1\r\n\r\n",
        ]);
    }

    #[test]
    fn absolute_form() {
        let raw = b"GET http://a.example:8080/x?y HTTP/1.1\r\nHost: a.example:8080\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n";
        let r = parse_http_head(raw).unwrap();
        assert_eq!((r.host.as_str(), r.port), ("a.example", 8080));
        assert_eq!(
            String::from_utf8(forwarded(raw)).unwrap(),
            "GET /x?y HTTP/1.1\r\nHost: a.example:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let raw = b"GET http://a.example HTTP/1.1\r\nHost: a.example\r\n\r\n";
        assert_eq!(parse_http_head(raw).unwrap().port, 80);
        assert!(forwarded(raw).starts_with(b"GET / HTTP/1.1\r\n"));
        let raw = b"GET http://a.example?q HTTP/1.1\r\nHost: a.example:80\r\n\r\n";
        assert!(forwarded(raw).starts_with(b"GET /?q HTTP/1.1\r\n"));
        all_refused(&[
            &b"GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n"[..],
            b"GET https://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
            b"GET http://a.example/ HTTP/1.1\r\n\r\n",
            b"GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n",
            b"GET http://a.example/ HTTP/1.1\r\nHost: a.example:81\r\n\r\n",
            b"GET http://a.example:81/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
            b"GET http://u@a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
            b"GET http://a.example/#f HTTP/1.1\r\nHost: a.example\r\n\r\n",
            b"get http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n\r\n",
        ]);
    }

    #[test]
    fn head_limits() {
        assert_eq!(http_head_len(b"GET x\r\n\r\nrest"), Some(9));
        assert_eq!(http_head_len(b"GET x\r\n\r"), None);
        let mut big = b"CONNECT a:1 HTTP/1.1\r\n".to_vec();
        for i in 0..101 {
            big.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        big.extend_from_slice(b"\r\n");
        assert!(parse_http_head(&big).is_err());
        let mut huge = b"CONNECT a:1 HTTP/1.1\r\nX: ".to_vec();
        huge.resize(MAX_HTTP_HEAD + 1, b'a');
        huge.extend_from_slice(b"\r\n\r\n");
        assert!(parse_http_head(&huge).is_err());
    }

    #[test]
    fn socks5() {
        assert_eq!(socks5_greeting(&[]), Ok(None));
        assert_eq!(socks5_greeting(&[5]), Ok(None));
        assert_eq!(socks5_greeting(&[5, 2, 0]), Ok(None));
        assert_eq!(socks5_greeting(&[5, 2, 2, 0]), Ok(Some((true, 4))));
        assert_eq!(socks5_greeting(&[5, 1, 2]), Ok(Some((false, 3))));
        assert!(socks5_greeting(&[4, 1, 0]).is_err());
        assert!(socks5_greeting(&[5, 0]).is_err());

        let mut req = vec![5, 1, 0, 3, 9];
        req.extend_from_slice(b"a.example");
        req.extend_from_slice(&443u16.to_be_bytes());
        for cut in 0..req.len() {
            assert_eq!(socks5_request(&req[..cut]), Ok(None), "{cut}");
        }
        let (r, n) = socks5_request(&req).unwrap().unwrap();
        assert_eq!(n, req.len());
        assert_eq!(
            r,
            SocksRequest {
                command: 1,
                host: SocksHost::Name("a.example".into()),
                port: 443
            }
        );
        let (r, n) = socks5_request(&[5, 1, 0, 1, 127, 0, 0, 1, 0, 80])
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.host.as_name().as_str(), r.port, n),
            ("127.0.0.1", 80, 10)
        );
        let mut v6 = vec![5, 1, 0, 4];
        v6.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        v6.extend_from_slice(&[0, 80]);
        let (r, _) = socks5_request(&v6).unwrap().unwrap();
        assert_eq!(r.host.as_name(), "::1");
        assert!(socks5_request(&[4, 1, 0, 1]).is_err());
        assert!(socks5_request(&[4]).is_err());
        assert!(socks5_request(&[5, 1, 1, 1, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(socks5_request(&[5, 1, 0, 2, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(socks5_request(&[5, 1, 0, 3, 0, 0, 0]).is_err());
        assert!(socks5_request(&[5, 1, 0, 3, 2, 0xff, 0xfe, 0, 80]).is_err());
    }

    #[test]
    fn detect() {
        assert_eq!(Protocol::detect(5), Some(Protocol::Socks5));
        assert_eq!(Protocol::detect(b'C'), Some(Protocol::Http));
        assert_eq!(Protocol::detect(4), None);
        assert_eq!(Protocol::detect(0x16), None);
    }
}
