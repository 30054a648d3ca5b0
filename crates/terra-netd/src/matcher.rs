//! The destination contract (spec section 7) as pure logic.
//!
//! [`judge`] decides one request against a network mode and a list of
//! destination patterns. A pattern is an exact name (what MIR v3 encodes) or a
//! `*.suffix` wildcard, which exists only here: MIR v3 cannot encode it, but
//! the decision corpus specifies how the matcher treats one.

use terra_policy::host::{classify_host, HostKind, MAX_HOST_LEN};
use terra_policy::{Destination, NetworkMode};

/// Why a request was refused. The first six are the contract's reasons, in its
/// priority order; the rest are the broker's own operational reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    NetworkNone,
    MalformedName,
    NoDestination,
    SniAbsent,
    SniMismatch,
    PrivateAddress,
    /// The proxy request itself could not be parsed (bad version, oversized
    /// header, truncated ClientHello, unsupported command...).
    MalformedRequest,
    /// Too many flows at once.
    FlowLimit,
    /// The name did not resolve (or not in time).
    ResolveFailed,
    /// No judged address accepted the connection.
    ConnectFailed,
    /// The client sent nothing usable in time.
    Timeout,
}

impl Reason {
    /// The reason's name as receipts and proxy errors spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NetworkNone => "network-none",
            Reason::MalformedName => "malformed-name",
            Reason::NoDestination => "no-destination",
            Reason::SniAbsent => "sni-absent",
            Reason::SniMismatch => "sni-mismatch",
            Reason::PrivateAddress => "private-address",
            Reason::MalformedRequest => "malformed-request",
            Reason::FlowLimit => "flow-limit",
            Reason::ResolveFailed => "resolve-failed",
            Reason::ConnectFailed => "connect-failed",
            Reason::Timeout => "timeout",
        }
    }

    /// The reason a contract name stands for (used by the corpus tests).
    pub fn from_name(name: &str) -> Option<Reason> {
        [
            Reason::NetworkNone,
            Reason::MalformedName,
            Reason::NoDestination,
            Reason::SniAbsent,
            Reason::SniMismatch,
            Reason::PrivateAddress,
            Reason::MalformedRequest,
            Reason::FlowLimit,
            Reason::ResolveFailed,
            Reason::ConnectFailed,
            Reason::Timeout,
        ]
        .into_iter()
        .find(|r| r.as_str() == name)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of [`judge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Refused(Reason),
}

/// How a destination names its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this canonical name or IPv4 literal.
    Exact(String),
    /// `*.suffix`: one or more labels below `suffix`, never `suffix` itself.
    Wildcard(String),
}

/// One destination as the matcher sees it (TCP only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub host: HostPattern,
    pub port: u16,
    pub require_tls_sni: bool,
    pub allow_private_addresses: bool,
}

/// Which wildcard rule a destination breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WildcardRule {
    #[error("is longer than 253 bytes")]
    TooLong,
    #[error("over an IPv4 literal")]
    OverIpv4Literal,
    #[error("covers a whole top-level domain")]
    TopLevelDomain,
    #[error("cannot allow private addresses")]
    PrivateAddresses,
}

/// Why [`Pattern::parse`] refused a destination.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PatternError {
    #[error("port must be 1..65535")]
    Port,
    /// The host (or a wildcard's suffix) is not in the host grammar.
    #[error(transparent)]
    Host(terra_policy::PolicyError),
    #[error("wildcard {host:?} {why}")]
    Wildcard { host: String, why: WildcardRule },
    #[error("{host}: an IPv4 literal cannot require TLS SNI")]
    LiteralWithSni { host: String },
}

impl Pattern {
    /// The pattern of one MIR destination (always exact).
    pub fn from_destination(d: &Destination) -> Pattern {
        Pattern {
            host: HostPattern::Exact(d.host.clone()),
            port: d.port,
            require_tls_sni: d.require_tls_sni,
            allow_private_addresses: d.allow_private_addresses,
        }
    }

    /// Parses a destination as the corpus writes it, wildcards included, with
    /// the source rules: lowercase names, the host grammar, no TLS SNI on an
    /// IPv4 literal, and for `*.suffix`: a suffix of at least two labels that is
    /// a name (not an IPv4 literal), at most 253 bytes in all, and no
    /// `allow-private-addresses`.
    pub fn parse(
        host: &str,
        port: u16,
        require_tls_sni: bool,
        allow_private_addresses: bool,
    ) -> Result<Pattern, PatternError> {
        if port == 0 {
            return Err(PatternError::Port);
        }
        let host = host.to_ascii_lowercase();
        let pattern = if let Some(suffix) = host.strip_prefix("*.") {
            let refuse = |why| PatternError::Wildcard {
                host: host.clone(),
                why,
            };
            if host.len() > MAX_HOST_LEN {
                return Err(refuse(WildcardRule::TooLong));
            }
            match classify_host(suffix) {
                Ok(HostKind::Name) => {}
                Ok(HostKind::Ipv4Literal) => return Err(refuse(WildcardRule::OverIpv4Literal)),
                Err(e) => return Err(PatternError::Host(e)),
            }
            if !suffix.contains('.') {
                return Err(refuse(WildcardRule::TopLevelDomain));
            }
            if allow_private_addresses {
                return Err(refuse(WildcardRule::PrivateAddresses));
            }
            HostPattern::Wildcard(suffix.to_owned())
        } else {
            let kind = classify_host(&host).map_err(PatternError::Host)?;
            if kind == HostKind::Ipv4Literal && require_tls_sni {
                return Err(PatternError::LiteralWithSni { host });
            }
            HostPattern::Exact(host)
        };
        Ok(Pattern {
            host: pattern,
            port,
            require_tls_sni,
            allow_private_addresses,
        })
    }

    /// Whether the pattern's name and port match (a canonical) `name`:`port`.
    pub fn matches(&self, name: &str, port: u16) -> bool {
        if self.port != port {
            return false;
        }
        match &self.host {
            HostPattern::Exact(h) => h == name,
            HostPattern::Wildcard(suffix) => {
                name.len() > suffix.len() + 1
                    && name.ends_with(suffix.as_str())
                    && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
            }
        }
    }

    /// What this (matching) pattern says about the request.
    fn admits(&self, request: &Request<'_>) -> Verdict {
        if self.require_tls_sni {
            match request.sni {
                None => return Verdict::Refused(Reason::SniAbsent),
                Some(sni) if sni != request.name => return Verdict::Refused(Reason::SniMismatch),
                Some(_) => {}
            }
        }
        if request.resolves_private && !self.allow_private_addresses {
            return Verdict::Refused(Reason::PrivateAddress);
        }
        Verdict::Allowed
    }
}

/// One connection attempt as the matcher sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// The requested name as the client wrote it.
    pub name: &'a str,
    pub port: u16,
    /// The TLS server name the client sent, if any.
    pub sni: Option<&'a str>,
    /// The name resolves to at least one private address.
    pub resolves_private: bool,
}

/// A request name is acceptable only in canonical form: the host grammar, all
/// lowercase.
pub fn is_canonical_name(name: &str) -> bool {
    classify_host(name).is_ok() && !name.bytes().any(|b| b.is_ascii_uppercase())
}

/// Decides `request` (spec section 7): `none` refuses, `direct` admits,
/// `mediated` admits when at least one matching destination admits. When none
/// admits, the reason is the highest-priority one among the refusals.
pub fn judge(mode: NetworkMode, destinations: &[Pattern], request: &Request<'_>) -> Verdict {
    match mode {
        NetworkMode::None => return Verdict::Refused(Reason::NetworkNone),
        NetworkMode::Direct => return Verdict::Allowed,
        NetworkMode::Mediated => {}
    }
    if !is_canonical_name(request.name) {
        return Verdict::Refused(Reason::MalformedName);
    }
    let mut best: Option<Reason> = None;
    for d in destinations
        .iter()
        .filter(|d| d.matches(request.name, request.port))
    {
        match d.admits(request) {
            Verdict::Allowed => return Verdict::Allowed,
            Verdict::Refused(r) => best = Some(best.map_or(r, |b| b.min(r))),
        }
    }
    Verdict::Refused(best.unwrap_or(Reason::NoDestination))
}

/// Whether any destination matching `name`:`port` could admit without SNI.
/// When false but some destination matches, the broker must read the TLS
/// ClientHello before it can decide.
pub fn needs_sni(mode: NetworkMode, destinations: &[Pattern], name: &str, port: u16) -> bool {
    let probe = Request {
        name,
        port,
        sni: None,
        resolves_private: false,
    };
    judge(mode, destinations, &probe) == Verdict::Refused(Reason::SniAbsent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pat(h: &str, port: u16, sni: bool, private: bool) -> Pattern {
        Pattern::parse(h, port, sni, private).unwrap()
    }

    #[test]
    fn wildcard_matching() {
        let w = pat("*.example.com", 443, false, false);
        assert!(w.matches("a.example.com", 443));
        assert!(w.matches("a.b.example.com", 443));
        assert!(!w.matches("example.com", 443));
        assert!(!w.matches("xexample.com", 443));
        assert!(!w.matches(".example.com", 443));
        assert!(!w.matches("a.example.com", 80));
    }

    #[test]
    fn reasons_take_priority() {
        let ds = [
            pat("a.example", 443, true, false),
            pat("a.example", 443, false, false),
        ];
        // The second admits without SNI when not private.
        let r = Request {
            name: "a.example",
            port: 443,
            sni: None,
            resolves_private: false,
        };
        assert_eq!(judge(NetworkMode::Mediated, &ds, &r), Verdict::Allowed);
        // Private: first says sni-absent, second private-address -> sni-absent.
        let r = Request {
            resolves_private: true,
            ..r
        };
        assert_eq!(
            judge(NetworkMode::Mediated, &ds, &r),
            Verdict::Refused(Reason::SniAbsent)
        );
        for order in [&ds[..], &[ds[1].clone(), ds[0].clone()][..]] {
            assert_eq!(
                judge(NetworkMode::Mediated, order, &r),
                Verdict::Refused(Reason::SniAbsent)
            );
        }
    }

    #[test]
    fn parse_refuses_bad_patterns() {
        use WildcardRule as W;
        let wildcard = |why| move |e: &PatternError| matches!(e, PatternError::Wildcard { why: w, .. } if *w == why);
        let host = |e: &PatternError| matches!(e, PatternError::Host(_));
        type Expected<'a> = &'a dyn Fn(&PatternError) -> bool;
        let cases: [(&str, bool, bool, Expected); 9] = [
            ("*.com", false, false, &wildcard(W::TopLevelDomain)),
            ("*example.com", false, false, &host),
            ("api.*.example.com", false, false, &host),
            ("*.example.com", false, true, &wildcard(W::PrivateAddresses)),
            ("*.0x7f.0x1", false, false, &host),
            ("127.1", false, false, &host),
            (
                "1.2.3.4",
                true,
                false,
                &|e: &PatternError| matches!(e, PatternError::LiteralWithSni { host } if host == "1.2.3.4"),
            ),
            ("**.example.com", false, false, &host),
            ("*", false, false, &host),
        ];
        for (h, sni, private, expected) in cases {
            let e = Pattern::parse(h, 443, sni, private).unwrap_err();
            assert!(expected(&e), "{h}: {e:?}");
        }
        assert_eq!(
            Pattern::parse("a.example", 0, false, false).unwrap_err(),
            PatternError::Port
        );
        let long = format!("*.{}.example", "a".repeat(250));
        assert!(wildcard(W::TooLong)(
            &Pattern::parse(&long, 443, false, false).unwrap_err()
        ));
        assert!(wildcard(W::OverIpv4Literal)(
            &Pattern::parse("*.1.2.3.4", 443, false, false).unwrap_err()
        ));
    }

    #[test]
    fn needs_sni_only_when_sni_decides() {
        let ds = [pat("a.example", 443, true, false)];
        assert!(needs_sni(NetworkMode::Mediated, &ds, "a.example", 443));
        assert!(!needs_sni(NetworkMode::Mediated, &ds, "b.example", 443));
        let ds = [
            pat("*.b.example", 443, false, false),
            pat("a.b.example", 443, true, false),
        ];
        assert!(!needs_sni(NetworkMode::Mediated, &ds, "a.b.example", 443));
    }
}
