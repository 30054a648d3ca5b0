//! What the launcher's activation check must observe once the profile is
//! applied, decided here in plain Rust so it is tested on every host.
//!
//! A successful `sandbox_init_with_parameters` alone is not trusted: the
//! launcher then tries what the profile must deny and execs the role only if
//! every try fails with a permission error. The canary is a private file the
//! caller made outside every grant; the network tries target loopback, which
//! a profile without network access must refuse too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::error::{Error, Result};
use crate::path::seatbelt_path;
use crate::spec::{GrantKind, LaunchSpec, Network, Role, Scope};

/// One operation the activation check tries: every probe but
/// [`Probe::ReachBroker`] must be denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Opening the canary file for reading.
    OpenCanary(String),
    /// A TCP connect to this loopback address.
    Connect(SocketAddr),
    /// Binding and listening on this loopback address (port 0: any).
    Listen(SocketAddr),
    /// A TCP connect to the broker's port, which must **succeed**: a
    /// mediated workload whose profile cannot reach the broker would fail
    /// every connection, and the check would be refusing for the wrong
    /// reason on the other probes. terra run bound the listener before the
    /// launcher starts, so the connect completes from the backlog.
    ReachBroker(SocketAddr),
}

impl Probe {
    /// Whether the profile must allow this probe (else deny it).
    pub fn must_succeed(&self) -> bool {
        matches!(self, Probe::ReachBroker(_))
    }
}

/// The probes for `spec` with the canary at `canary` (a canonical path).
/// Refused when a read or write grant covers the canary: the check would
/// prove nothing.
pub fn probes(spec: &LaunchSpec, canary: &str) -> Result<Vec<Probe>> {
    let canary = seatbelt_path(canary)?;
    if let Some(g) = spec
        .grants
        .iter()
        .filter(|g| matches!(g.kind, GrantKind::Read | GrantKind::Write))
        .find(|g| covers(g.scope, &g.path, &canary))
    {
        return Err(Error::Spec(format!(
            "the canary {canary} is inside the {} grant of {}: the activation check would prove nothing",
            g.kind.name(),
            g.path
        )));
    }
    let mut out = vec![Probe::OpenCanary(canary)];
    let loopbacks = [
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ];
    if spec.role == Role::Broker {
        // The broker connects anywhere (it is the judge), so a connect
        // proves nothing; but it binds nothing: its listeners were bound by
        // terra run and handed over.
        for ip in loopbacks {
            out.push(Probe::Listen(SocketAddr::new(ip, 0)));
        }
        return Ok(out);
    }
    match spec.network {
        Network::None => {
            for ip in loopbacks {
                // Nothing listens on port 9 (discard) on a Mac by default;
                // a refused connect shows as ECONNREFUSED, a sandbox
                // refusal as EPERM, which is what the launcher requires.
                out.push(Probe::Connect(SocketAddr::new(ip, 9)));
                out.push(Probe::Listen(SocketAddr::new(ip, 0)));
            }
        }
        Network::Mediated { port } => {
            // Only the broker's loopback port is open (the profile names it
            // as `localhost:PORT`): it is reached (over IPv4, where the
            // workload's proxy environment points), another port must be
            // refused on IPv4 and IPv6, and so must listening.
            out.push(Probe::ReachBroker(SocketAddr::new(loopbacks[0], port)));
            let other = if port == u16::MAX { port - 1 } else { port + 1 };
            for ip in loopbacks {
                out.push(Probe::Connect(SocketAddr::new(ip, other)));
                out.push(Probe::Listen(SocketAddr::new(ip, 0)));
            }
        }
        Network::Direct => {}
    }
    Ok(out)
}

/// True when a grant of `scope` on `path` applies to `target`.
pub(crate) fn covers(scope: Scope, path: &str, target: &str) -> bool {
    match scope {
        Scope::Exact => path == target,
        Scope::Tree => {
            path == "/"
                || target == path
                || (target.starts_with(path) && target.as_bytes().get(path.len()) == Some(&b'/'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Grant, Role};

    fn spec(network: Network, grants: Vec<Grant>) -> LaunchSpec {
        LaunchSpec {
            role: Role::Workload,
            network,
            executable: "/usr/bin/true".into(),
            mark: None,
            terminals: Vec::new(),
            grants,
        }
    }

    fn grant(kind: GrantKind, scope: Scope, path: &str) -> Grant {
        Grant {
            kind,
            scope,
            path: path.into(),
        }
    }

    #[test]
    fn seatbelt_activation_refuses_a_canary_inside_a_grant() {
        for (scope, path) in [
            (Scope::Tree, "/"),
            (Scope::Tree, "/private/tmp"),
            (Scope::Exact, "/private/tmp/canary"),
        ] {
            for kind in [GrantKind::Read, GrantKind::Write] {
                let s = spec(Network::None, vec![grant(kind, scope, path)]);
                let e = probes(&s, "/tmp/canary").unwrap_err();
                assert!(e.to_string().contains("would prove nothing"), "{e}");
            }
        }
    }

    #[test]
    fn seatbelt_activation_accepts_a_canary_beside_a_grant() {
        let s = spec(
            Network::Direct,
            vec![
                grant(GrantKind::Write, Scope::Tree, "/private/tmp/work"),
                // A prefix that is not a parent does not cover it.
                grant(GrantKind::Read, Scope::Tree, "/private/tmp/can"),
                // A deny over the canary only makes it more denied.
                grant(GrantKind::Deny, Scope::Tree, "/private/tmp"),
            ],
        );
        assert_eq!(
            probes(&s, "/tmp/canary").unwrap(),
            vec![Probe::OpenCanary("/private/tmp/canary".into())]
        );
    }

    #[test]
    fn seatbelt_activation_network_none_tries_both_loopbacks() {
        let p = probes(&spec(Network::None, vec![]), "/private/var/c").unwrap();
        let text = format!("{p:?}");
        for want in ["127.0.0.1:9", "[::1]:9", "127.0.0.1:0", "[::1]:0"] {
            assert!(text.contains(want), "{want} missing: {text}");
        }
        assert_eq!(p.len(), 5);
        assert!(p.iter().all(|p| !p.must_succeed()));
    }

    #[test]
    fn seatbelt_activation_mediated_reaches_the_broker_and_nothing_else() {
        let p = probes(&spec(Network::Mediated { port: 4000 }, vec![]), "/c").unwrap();
        // The broker's port must be reached, and it is the only probe that
        // must succeed.
        let must: Vec<&Probe> = p.iter().filter(|p| p.must_succeed()).collect();
        assert_eq!(
            must,
            [&Probe::ReachBroker("127.0.0.1:4000".parse().unwrap())]
        );
        assert!(!p.contains(&Probe::Connect("127.0.0.1:4000".parse().unwrap())));
        assert!(!p.contains(&Probe::Connect("[::1]:4000".parse().unwrap())));
        assert!(p.contains(&Probe::Connect("127.0.0.1:4001".parse().unwrap())));
        assert!(p.contains(&Probe::Connect("[::1]:4001".parse().unwrap())));
        let top = probes(&spec(Network::Mediated { port: u16::MAX }, vec![]), "/c").unwrap();
        assert!(top.contains(&Probe::Connect("127.0.0.1:65534".parse().unwrap())));
    }

    #[test]
    fn seatbelt_activation_broker_tries_listening_never_connecting() {
        let mut s = spec(Network::Mediated { port: 4000 }, vec![]);
        s.role = Role::Broker;
        let p = probes(&s, "/c").unwrap();
        assert_eq!(
            p,
            vec![
                Probe::OpenCanary("/c".into()),
                Probe::Listen("127.0.0.1:0".parse().unwrap()),
                Probe::Listen("[::1]:0".parse().unwrap()),
            ]
        );
    }

    #[test]
    fn seatbelt_activation_refuses_a_relative_canary() {
        assert!(probes(&spec(Network::None, vec![]), "tmp/c").is_err());
    }
}
