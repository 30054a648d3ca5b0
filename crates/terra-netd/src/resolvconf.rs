//! The resolver's configuration: /etc/resolv.conf and /etc/hosts, read once
//! when the broker starts (before it confines itself).
//!
//! resolv.conf, as glibc and musl read it: `nameserver` (at most 3, IPv4 or
//! IPv6, port 53), `search` and `domain` (the last one wins; at most 6
//! domains), `options ndots:N timeout:N attempts:N` (clamped to 15, 30 s and
//! 5 like glibc). Other options are ignored. No `nameserver` line means
//! 127.0.0.1, as in glibc and musl. `#` and `;` start a comment.
//!
//! hosts: `address name [alias...]`, `#` comments; names compare
//! case-insensitively; an address with a `%scope` is skipped. A name listed
//! there is answered from the file alone (nsswitch's usual `files dns`).

use std::collections::HashMap;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::dns::Name;

/// Most nameservers used (glibc's MAXNS).
pub const MAX_NAMESERVERS: usize = 3;
/// Most search domains used (glibc's MAXDNSRCH).
pub const MAX_SEARCH: usize = 6;
/// Largest configuration file read (a hosts file with a block list can be
/// large; anything bigger is refused, not cut).
pub const MAX_FILE: u64 = 32 * 1024 * 1024;

/// What the resolver uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolverConfig {
    pub nameservers: Vec<SocketAddr>,
    /// Search domains, lowercase, without trailing dot.
    pub search: Vec<String>,
    pub ndots: usize,
    /// Time one query may take before the next server or attempt.
    pub timeout: Duration,
    /// Rounds over the nameservers.
    pub attempts: usize,
    /// /etc/hosts: lowercase name -> addresses, in file order.
    pub hosts: HashMap<String, Vec<IpAddr>>,
}

impl Default for ResolverConfig {
    fn default() -> Self {
        ResolverConfig::parse("", "")
    }
}

impl ResolverConfig {
    /// Parses the two files' text (never fails: unusable lines are skipped,
    /// as the C libraries do).
    pub fn parse(resolv_conf: &str, hosts: &str) -> ResolverConfig {
        let mut c = ResolverConfig {
            nameservers: Vec::new(),
            search: Vec::new(),
            ndots: 1,
            timeout: Duration::from_secs(5),
            attempts: 2,
            hosts: parse_hosts(hosts),
        };
        for line in resolv_conf.lines() {
            let line = line.split(['#', ';']).next().unwrap_or("");
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => {
                    if c.nameservers.len() >= MAX_NAMESERVERS {
                        continue;
                    }
                    if let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) {
                        c.nameservers.push(SocketAddr::new(ip, 53));
                    }
                }
                Some("domain") => {
                    c.search = words.next().and_then(search_domain).into_iter().collect();
                }
                Some("search") => {
                    c.search = words.filter_map(search_domain).take(MAX_SEARCH).collect();
                }
                Some("options") => {
                    for w in words {
                        let Some((key, value)) = w.split_once(':') else {
                            continue;
                        };
                        let Ok(n) = value.parse::<u64>() else {
                            continue;
                        };
                        match key {
                            "ndots" => c.ndots = n.min(15) as usize,
                            "timeout" => c.timeout = Duration::from_secs(n.clamp(1, 30)),
                            "attempts" => c.attempts = n.clamp(1, 5) as usize,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if c.nameservers.is_empty() {
            c.nameservers
                .push(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 53));
        }
        c
    }

    /// Reads the files (None counts as an empty file: the host has none).
    /// A file that cannot be read, missing included (the supervisor named
    /// it, so the broker's root should hold it), or one over [`MAX_FILE`],
    /// is an error naming the file.
    pub fn load(
        resolv_conf: Option<&Path>,
        hosts: Option<&Path>,
    ) -> Result<ResolverConfig, ConfigError> {
        Ok(ResolverConfig::parse(
            &read_optional(resolv_conf)?,
            &read_optional(hosts)?,
        ))
    }

    /// The names to ask for, in order (glibc's rule): the name itself first
    /// when it has at least `ndots` dots, else after the search domains.
    pub fn candidates(&self, name: &str) -> Vec<Name> {
        let dots = name.bytes().filter(|b| *b == b'.').count();
        let mut out = Vec::new();
        let mut push = |text: &str| {
            if let Ok(n) = Name::from_dotted(text) {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        };
        if dots >= self.ndots {
            push(name);
        }
        for d in &self.search {
            push(&format!("{name}.{d}"));
        }
        if dots < self.ndots {
            push(name);
        }
        out
    }
}

/// Why a resolver file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// open(2) or read(2) failed (a missing file included).
    #[error("{}: cannot {op}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is over [`MAX_FILE`] (refused, not cut).
    #[error("{}: larger than {} MiB", path.display(), MAX_FILE >> 20)]
    TooLarge { path: PathBuf },
}

fn read_optional(path: Option<&Path>) -> Result<String, ConfigError> {
    let Some(path) = path else {
        return Ok(String::new());
    };
    let io = |op| {
        move |source| ConfigError::Io {
            op,
            path: path.to_owned(),
            source,
        }
    };
    let file = std::fs::File::open(path).map_err(io("open"))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(io("read"))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(ConfigError::TooLarge {
            path: path.to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A search domain as written (trailing dot allowed), lowercased, or None
/// when it is not a usable name.
fn search_domain(word: &str) -> Option<String> {
    let d = word.strip_suffix('.').unwrap_or(word).to_ascii_lowercase();
    Name::from_dotted(&d).ok().map(|_| d)
}

fn parse_hosts(text: &str) -> HashMap<String, Vec<IpAddr>> {
    let mut map: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) else {
            continue;
        };
        for name in words {
            let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
            let addrs = map.entry(name).or_default();
            if !addrs.contains(&ip) {
                addrs.push(ip);
            }
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_lines() {
        let c = ResolverConfig::parse(
            "# comment\nnameserver 127.0.0.153 # trailing\nnameserver ::1\nnameserver fe80::1%eth0\n\
             nameserver 10.0.0.1\nnameserver 10.0.0.2\nnameserver 10.0.0.3\n\
             domain first.example\nsearch Corp.Example. b.example bad..name\n\
             options ndots:2 timeout:1 attempts:9 rotate\n",
            "",
        );
        assert_eq!(
            c.nameservers,
            vec![
                "127.0.0.153:53".parse().unwrap(),
                "[::1]:53".parse().unwrap(),
                "10.0.0.1:53".parse().unwrap()
            ]
        );
        assert_eq!(c.search, ["corp.example", "b.example"]);
        assert_eq!(c.ndots, 2);
        assert_eq!(c.timeout, Duration::from_secs(1));
        assert_eq!(c.attempts, 5);
        let d = ResolverConfig::parse("search a.example\ndomain z.example\n", "");
        assert_eq!(d.search, ["z.example"]);
        assert_eq!(d.nameservers, vec!["127.0.0.1:53".parse().unwrap()]);
        assert_eq!((d.ndots, d.attempts), (1, 2));
        assert_eq!(d.timeout, Duration::from_secs(5));
    }

    #[test]
    fn candidate_order_follows_ndots() {
        let c = ResolverConfig::parse("search corp.example lab.example\noptions ndots:2", "");
        let names =
            |n: &str| -> Vec<String> { c.candidates(n).iter().map(|x| x.to_dotted()).collect() };
        assert_eq!(names("pkg"), ["pkg.corp.example", "pkg.lab.example", "pkg"]);
        assert_eq!(
            names("a.b.c"),
            ["a.b.c", "a.b.c.corp.example", "a.b.c.lab.example"]
        );
        // A candidate over 253 bytes is left out.
        let long = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(50)
        );
        assert_eq!(names(&long).len(), 1);
    }

    #[test]
    fn hosts_file() {
        let h = parse_hosts(
            "127.0.0.1 localhost Local.Test # c\n::1 localhost\nfe80::1%lo x\nbogus y\n#1.2.3.4 z\n",
        );
        assert_eq!(
            h["localhost"],
            vec![
                "127.0.0.1".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert!(h.contains_key("local.test"));
        assert!(!h.contains_key("x") && !h.contains_key("y") && !h.contains_key("z"));
    }

    #[test]
    fn load_none_is_empty_missing_and_oversize_refused() {
        let dir = tempfile::tempdir().unwrap();
        let c = ResolverConfig::load(None, None).unwrap();
        assert_eq!(c, ResolverConfig::default());
        let none = dir.path().join("none");
        let e = ResolverConfig::load(Some(&none), None).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Io { op: "open", path, source }
                if *path == none && source.kind() == std::io::ErrorKind::NotFound),
            "{e:?}"
        );
        assert!(e.to_string().contains("none"), "{e}");
        std::fs::write(dir.path().join("r"), "nameserver 10.1.2.3\n").unwrap();
        std::fs::write(dir.path().join("h"), "10.9.9.9 x.test\n").unwrap();
        let c =
            ResolverConfig::load(Some(&dir.path().join("r")), Some(&dir.path().join("h"))).unwrap();
        assert_eq!(c.nameservers, vec!["10.1.2.3:53".parse().unwrap()]);
        assert_eq!(
            c.hosts["x.test"],
            vec!["10.9.9.9".parse::<IpAddr>().unwrap()]
        );
        let big = dir.path().join("big");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_FILE + 1).unwrap();
        let e = ResolverConfig::load(None, Some(&big)).unwrap_err();
        assert!(
            matches!(&e, ConfigError::TooLarge { path } if *path == big),
            "{e:?}"
        );
        assert!(e.to_string().contains("larger than 32 MiB"), "{e}");
    }
}
