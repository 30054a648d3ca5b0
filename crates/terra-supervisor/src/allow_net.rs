//! `--allow-net HOST:PORT[,private]`: one TCP destination of the command
//! line, lowered into the MIR like a policy file's destination (so the
//! decision digest covers it).
//!
//! - An IPv4 literal in a private, loopback or other non-public range admits
//!   that address: the user named it, so the destination gets
//!   `allowPrivateAddresses`.
//! - A name that resolves to a private address (a company mirror on 10.x)
//!   needs the explicit `,private` opt-in; without it the broker refuses it
//!   with `private-address`.
//! - A wildcard (`*.example.com`) cannot be encoded in MIR v3: refused with
//!   the exact names to list instead.

use std::net::Ipv4Addr;

use crate::error::{Error, Result};

/// One parsed `--allow-net` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowNet<'a> {
    pub host: &'a str,
    pub port: u16,
    /// `allowPrivateAddresses`: `,private`, or a private IPv4 literal.
    pub allow_private: bool,
}

/// Parses `HOST:PORT` or `HOST:PORT,private`.
pub fn parse(dest: &str) -> Result<AllowNet<'_>> {
    let (hostport, opt_in) = match dest.split_once(',') {
        None => (dest, false),
        Some((hp, "private")) => (hp, true),
        Some((_, other)) => {
            return Err(Error::Argument(format!(
                "--allow-net {dest:?}: unknown option {other:?} after the comma (only `private`: \
                 HOST:PORT,private admits a name that resolves to a private address)"
            )))
        }
    };
    let (host, port) = hostport
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| Error::Argument(missing_port(dest, hostport, opt_in)))?;
    if host.contains('*') {
        return Err(Error::Argument(wildcard_refusal(host, port)));
    }
    let literal_private = host
        .parse::<Ipv4Addr>()
        .is_ok_and(terra_netd::address::is_private_v4);
    Ok(AllowNet {
        host,
        port,
        allow_private: opt_in || literal_private,
    })
}

/// Why a value without a port number is refused: a bare name (or one with
/// an empty or named port) gets the HTTPS spelling to use.
fn missing_port(dest: &str, hostport: &str, private: bool) -> String {
    let host = match hostport.rsplit_once(':') {
        Some((h, p)) if p.is_empty() || p.bytes().all(|b| b.is_ascii_alphabetic()) => h,
        Some(_) => "",
        None => hostport,
    };
    if host.is_empty() || host.contains(':') {
        return format!("--allow-net {dest:?}: expected HOST:PORT");
    }
    let opt = if private { ",private" } else { "" };
    format!(
        "--allow-net {dest:?}: expected HOST:PORT; for HTTPS give --allow-net {host}:443{opt} \
         (a destination is one port)"
    )
}

/// Why `*.example.com` is refused, with the exact names to give instead.
fn wildcard_refusal(host: &str, port: u16) -> String {
    let base = host.trim_start_matches("*.").trim_start_matches('*');
    let examples = if base.is_empty() || base.contains('*') {
        format!("--allow-net NAME:{port}")
    } else {
        format!("--allow-net {base}:{port} --allow-net www.{base}:{port}")
    };
    format!(
        "--allow-net {host}:{port}: wildcard destinations cannot be encoded in MIR v3 (a destination \
         is one exact name); list each name the workload connects to instead, e.g. {examples} \
         (after a run, the refusal summary names the ones it asked for)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_and_the_private_opt_in() {
        let p = parse("example.com:443").unwrap();
        assert_eq!(
            (p.host, p.port, p.allow_private),
            ("example.com", 443, false)
        );
        // The last colon separates the port (the host is the policy's to check).
        assert_eq!(parse("a:b:80").unwrap().host, "a:b");
        assert!(parse("mirror.corp:8080,private").unwrap().allow_private);
        for bad in [
            "example.com",
            "example.com:",
            "example.com:https",
            "h:65536",
            "h:-1",
            "h:1,",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(
                e.contains(": expected HOST:PORT") || e.contains("unknown option"),
                "{bad}: {e}"
            );
        }
        // A name without a port: the HTTPS spelling is suggested.
        for (bad, want) in [
            ("example.com", "give --allow-net example.com:443 "),
            ("example.com:", "give --allow-net example.com:443 "),
            ("example.com:https", "give --allow-net example.com:443 "),
            (
                "mirror.corp,private",
                "give --allow-net mirror.corp:443,private ",
            ),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
        // Twin: a port number out of range gets no such suggestion.
        let e = parse("h:65536").unwrap_err().to_string();
        assert!(e.ends_with(": expected HOST:PORT"), "{e}");
        let e = parse("h:1,public").unwrap_err().to_string();
        assert!(e.contains("only `private`"), "{e}");
    }

    #[test]
    fn a_private_or_loopback_literal_is_admitted_a_public_one_stays_public() {
        for lit in [
            "127.0.0.1:8080",
            "10.1.2.3:443",
            "192.168.0.10:3000",
            "172.16.0.1:1",
        ] {
            assert!(parse(lit).unwrap().allow_private, "{lit}");
        }
        for public in ["93.184.216.34:443", "localhost:80", "10.example.com:443"] {
            assert!(!parse(public).unwrap().allow_private, "{public}");
        }
    }

    #[test]
    fn wildcards_are_refused_with_exact_names() {
        let e = parse("*.example.com:443").unwrap_err().to_string();
        assert!(e.contains("cannot be encoded in MIR v3"), "{e}");
        assert!(
            e.contains("--allow-net example.com:443 --allow-net www.example.com:443"),
            "{e}"
        );
        let e = parse("*:80").unwrap_err().to_string();
        assert!(e.contains("--allow-net NAME:80"), "{e}");
    }
}
