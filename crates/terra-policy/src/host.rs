//! Destination host grammar (spec section 3): DNS-style names and strict IPv4 literals.

use crate::error::{PolicyError, Result};

/// Longest host name in bytes.
pub const MAX_HOST_LEN: usize = 253;
/// Longest label in bytes.
pub const MAX_LABEL_LEN: usize = 63;

/// What a valid host name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKind {
    Name,
    Ipv4Literal,
}

/// Checks `host` against the grammar, case-insensitively, and says which kind it is.
/// The caller lowercases; this function does not change anything.
pub fn classify_host(host: &str) -> Result<HostKind> {
    let bad = |why: &str| PolicyError::Argument(format!("invalid host {host:?}: {why}"));
    if host.is_empty() {
        return Err(bad("empty"));
    }
    if host.len() > MAX_HOST_LEN {
        return Err(bad("longer than 253 bytes"));
    }
    if host.contains('*') {
        return Err(bad("wildcard names cannot be encoded in MIR v3"));
    }
    if host.starts_with('.') || host.ends_with('.') {
        return Err(bad("leading or trailing dot"));
    }
    let labels: Vec<&str> = host.split('.').collect();
    for label in &labels {
        if label.is_empty() {
            return Err(bad("empty label"));
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(bad("label longer than 63 bytes"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(bad("labels may hold only letters, digits and '-'"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(bad("a label starts or ends with '-'"));
        }
    }
    let last = labels[labels.len() - 1];
    if is_numeric_label(last) {
        if is_strict_ipv4(&labels) {
            return Ok(HostKind::Ipv4Literal);
        }
        return Err(bad(
            "a numeric last label requires a strict dotted-quad IPv4 literal",
        ));
    }
    Ok(HostKind::Name)
}

/// All decimal digits, or `0x`/`0X` followed by at least one hex digit.
fn is_numeric_label(label: &str) -> bool {
    let b = label.as_bytes();
    if b.iter().all(u8::is_ascii_digit) {
        return true;
    }
    b.len() > 2
        && b[0] == b'0'
        && (b[1] == b'x' || b[1] == b'X')
        && b[2..].iter().all(u8::is_ascii_hexdigit)
}

/// Four decimal octets 0..=255, no leading zeros except "0" itself.
fn is_strict_ipv4(labels: &[&str]) -> bool {
    labels.len() == 4
        && labels.iter().all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.len() <= 3
                && b.iter().all(u8::is_ascii_digit)
                && (b.len() == 1 || b[0] != b'0')
                && l.parse::<u16>().map(|v| v <= 255).unwrap_or(false)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        for ok in [
            "93.184.216.34",
            "1.example.com",
            "0xdead.example.com",
            "a",
            "github.com",
            "0.0.0.0",
        ] {
            assert!(classify_host(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            classify_host("93.184.216.34").unwrap(),
            HostKind::Ipv4Literal
        );
        for bad in [
            "127.1",
            "2130706433",
            "0x7f.1",
            "010.0.0.1",
            "999.1.1.1",
            "example.0x1",
            "0X7F.1",
            "",
            ".a",
            "a.",
            "a..b",
            "-a.b",
            "a-.b",
            "*.example.com",
            "a_b.com",
            "::1",
            "[::1]",
            "1.2.3.4.5",
        ] {
            assert!(classify_host(bad).is_err(), "{bad}");
        }
        assert!(classify_host(&"a".repeat(64)).is_err());
        assert!(classify_host(&"a".repeat(63)).is_ok());
        let long = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        assert_eq!(long.len(), 253);
        assert!(classify_host(&long).is_ok());
        assert!(classify_host(&format!("{long}e")).is_err());
    }
}
