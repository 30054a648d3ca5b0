//! Name resolution, owned by the broker (the box never resolves anything).
//!
//! The production resolver is the host's getaddrinfo (A and AAAA through
//! /etc/nsswitch.conf, /etc/hosts and /etc/resolv.conf), run in a worker
//! thread so that a slow lookup costs at most the timeout. Tests inject a
//! fixed map.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use terra_policy::host::{classify_host, HostKind};

/// Resolves a (judged, canonical) name to every address it has.
pub trait Resolver: Send + Sync {
    fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>>;
}

/// getaddrinfo in a worker thread, bounded in time and in the number of
/// lookups still running (abandoned after a timeout or not).
pub struct SystemResolver {
    timeout: Duration,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: usize,
}

impl SystemResolver {
    pub fn new(timeout: Duration, max_in_flight: usize) -> Self {
        SystemResolver {
            timeout,
            in_flight: Arc::new(AtomicUsize::new(0)),
            max_in_flight,
        }
    }
}

struct InFlight(Arc<AtomicUsize>);
impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Resolver for SystemResolver {
    fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>> {
        if let Some(literal) = ipv4_literal(name) {
            return Ok(vec![literal]);
        }
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "too many name lookups in flight",
            ));
        }
        let guard = InFlight(self.in_flight.clone());
        let (tx, rx) = mpsc::sync_channel(1);
        let owned = name.to_owned();
        std::thread::Builder::new()
            .name("terra-netd-dns".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let _guard = guard;
                // Port 0: only the addresses matter. getaddrinfo with AF_UNSPEC
                // asks for both A and AAAA.
                let r = (owned.as_str(), 0u16)
                    .to_socket_addrs()
                    .map(|it| it.map(|sa| sa.ip()).collect::<Vec<_>>());
                let _ = tx.send(r);
            })?;
        match rx.recv_timeout(self.timeout) {
            Ok(Ok(mut addrs)) => {
                dedup_keep_order(&mut addrs);
                if addrs.is_empty() {
                    Err(io::Error::new(io::ErrorKind::NotFound, "no address"))
                } else {
                    Ok(addrs)
                }
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "name lookup timed out",
            )),
        }
    }
}

fn dedup_keep_order(addrs: &mut Vec<IpAddr>) {
    let mut seen = Vec::new();
    addrs.retain(|a| {
        if seen.contains(a) {
            false
        } else {
            seen.push(*a);
            true
        }
    });
}

/// A strict IPv4 literal name (as the host grammar accepts it) as an address.
pub fn ipv4_literal(name: &str) -> Option<IpAddr> {
    match classify_host(name) {
        Ok(HostKind::Ipv4Literal) => name.parse().ok(),
        _ => None,
    }
}

/// A fixed map name -> addresses (tests, benches). IPv4 literals resolve to
/// themselves; unknown names fail.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver {
    pub map: HashMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    pub fn new<I, S>(entries: I) -> Self
    where
        I: IntoIterator<Item = (S, Vec<IpAddr>)>,
        S: Into<String>,
    {
        StaticResolver {
            map: entries.into_iter().map(|(k, v)| (k.into(), v)).collect(),
        }
    }
}

impl Resolver for StaticResolver {
    fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>> {
        if let Some(literal) = ipv4_literal(name) {
            return Ok(vec![literal]);
        }
        self.map
            .get(name)
            .cloned()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{name}: unknown")))
    }
}

/// Files the production resolver reads (bound read-only into the broker's
/// root, and the only files its Landlock ruleset lets it read).
pub fn resolver_files() -> Vec<std::path::PathBuf> {
    [
        "/etc/resolv.conf",
        "/etc/hosts",
        "/etc/nsswitch.conf",
        "/etc/host.conf",
        "/etc/gai.conf",
    ]
    .iter()
    .map(std::path::PathBuf::from)
    .filter(|p| p.exists())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_static() {
        let r = StaticResolver::new([("a.example", vec!["127.0.0.1".parse().unwrap()])]);
        assert_eq!(
            r.resolve("a.example").unwrap(),
            vec!["127.0.0.1".parse::<IpAddr>().unwrap()]
        );
        assert!(r.resolve("b.example").is_err());
        assert_eq!(
            r.resolve("8.8.8.8").unwrap(),
            vec!["8.8.8.8".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(ipv4_literal("127.1"), None);
    }

    #[test]
    fn system_resolver_literal_needs_no_lookup() {
        // Only a literal: a test must never send a DNS query off this machine.
        let r = SystemResolver::new(Duration::from_secs(5), 4);
        assert_eq!(
            r.resolve("1.2.3.4").unwrap(),
            vec!["1.2.3.4".parse::<IpAddr>().unwrap()]
        );
    }
}
