//! The broker's half of transparent egress: the box service's questions
//! ([`crate::ask`]). A workload connect() is judged by the address the
//! workload chose: that address must be one the box's DNS stub handed out
//! for a listed name this run (the pin), or a listed IPv4 literal; then the
//! names behind it are judged exactly as a proxy request for them would be
//! (port, private addresses), the broker connects from the host network to
//! that address, and the connected socket goes back to the box, where it
//! replaces the workload's. No byte of an admitted connection passes through
//! terra.
//!
//! DNS: a stub question for a listed name is resolved once per run (the first
//! answer is pinned and every later question gets the same addresses);
//! unlisted names are never resolved.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustix::net::{sockopt, AddressFamily, SocketFlags, SocketType};

use crate::address::is_private;
use crate::ask::{self, Answer, Ask, SocketOptions};
use crate::broker::Broker;
use crate::matcher::{judge, Reason, Request, Verdict};
use crate::receipt::Attempt;

/// An IPv4-mapped IPv6 address judged as the IPv4 address it carries.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// What the judge decided about one connect().
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// Connect, as `name` (resolved to `resolved`).
    Admit { name: String, resolved: Vec<IpAddr> },
    /// A box-local address nothing lists: the box's own loopback.
    Local,
    /// A destination that requires TLS SNI matches: the checked path
    /// (`Broker::relay_for_box`).
    Sni { name: String, resolved: Vec<IpAddr> },
    Refuse {
        reason: Reason,
        name: Option<String>,
        detail: String,
    },
}

impl Broker {
    /// One question from the box service, answered on `reply`. Quick
    /// answers (box-local addresses, refusals) are given at once; a connect
    /// or a lookup gets a thread of its own, counted as a flow.
    pub(crate) fn question(
        self: &Arc<Self>,
        payload: &[u8],
        reply: OwnedFd,
        extra: Option<OwnedFd>,
    ) {
        let start = Instant::now();
        let time = SystemTime::now();
        let question = match ask::parse_ask(payload) {
            Ok(q) => q,
            Err(e) => {
                self.record(Attempt {
                    reason: Some(Reason::MalformedRequest.as_str()),
                    detail: Some(e.to_string()),
                    ..Attempt::started(time, "unknown")
                });
                return;
            }
        };
        if let Ask::Connect { to, .. } = &question {
            match self.decide(*to) {
                Decision::Local => {
                    let _ = ask::reply(reply.as_fd(), &Answer::Local, None);
                    return;
                }
                Decision::Refuse {
                    reason,
                    name,
                    detail,
                } => {
                    self.refuse_connect(time, start, "tcp", *to, name, reason, detail, &reply);
                    return;
                }
                Decision::Sni { .. } => {
                    let _ = ask::reply(reply.as_fd(), &Answer::Relay, None);
                    return;
                }
                Decision::Admit { .. } => {}
            }
        }
        let mut relay_to = None;
        if let Ask::Relay { to } = &question {
            let client = extra.and_then(crate::fdpass::tcp_stream);
            match (self.decide(*to), client) {
                (Decision::Sni { name, resolved }, Some(client)) => {
                    relay_to = Some((client, *to, name, resolved));
                }
                (_, client) => {
                    let detail = match client {
                        None => "a relay question without its socket".to_string(),
                        Some(_) => format!("{to}: not a destination that requires TLS SNI"),
                    };
                    self.record(Attempt {
                        reason: Some(Reason::MalformedRequest.as_str()),
                        detail: Some(detail),
                        address: Some(*to),
                        ..Attempt::started(time, "tcp")
                    });
                    return;
                }
            }
        }
        if let Ask::Udp { to } = &question {
            let to = *to;
            if canonical(to.ip()).is_loopback() || to.ip().is_unspecified() {
                let _ = ask::reply(reply.as_fd(), &Answer::Local, None);
            } else {
                let detail = format!("UDP to {to}: only the box's DNS stub is reachable over UDP");
                self.refuse_connect(
                    time,
                    start,
                    "udp",
                    to,
                    None,
                    Reason::NoDestination,
                    detail,
                    &reply,
                );
            }
            return;
        }
        if self.flows.fetch_add(1, Ordering::SeqCst) >= self.limits.max_flows {
            self.flows.fetch_sub(1, Ordering::SeqCst);
            let answer = match &question {
                Ask::Connect { to, .. } => {
                    let detail = format!("more than {} flows at once", self.limits.max_flows);
                    self.refuse_connect(
                        time,
                        start,
                        "tcp",
                        *to,
                        None,
                        Reason::FlowLimit,
                        detail,
                        &reply,
                    );
                    return;
                }
                _ => Answer::ServFail,
            };
            let _ = ask::reply(reply.as_fd(), &answer, None);
            return;
        }
        let me = Arc::clone(self);
        let pool = Arc::clone(&self.asks);
        let spawned = pool.run(move || {
            let _slot = crate::broker::Slot(&me.flows);
            match question {
                Ask::Connect {
                    to,
                    v6_socket,
                    options,
                } => me.connect_for_box(time, start, to, v6_socket, &options, &reply),
                Ask::Resolve { name, qtype } => {
                    let answer = me.resolve_for_stub(time, start, &name, qtype);
                    let _ = ask::reply(reply.as_fd(), &answer, None);
                }
                Ask::Relay { .. } => {
                    if let Some((client, to, name, resolved)) = relay_to {
                        let _ = ask::reply(reply.as_fd(), &Answer::Relaying, None);
                        drop(reply);
                        me.relay_for_box(client, to, name, resolved, time, start);
                    }
                }
                Ask::Udp { .. } => {}
            }
        });
        if spawned.is_err() {
            self.flows.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!("terra-netd: cannot start a question thread");
        }
    }

    fn record(&self, attempt: Attempt) {
        self.receipts.record(&attempt);
    }

    #[allow(clippy::too_many_arguments)]
    fn refuse_connect(
        &self,
        time: SystemTime,
        start: Instant,
        protocol: &'static str,
        to: SocketAddr,
        name: Option<String>,
        reason: Reason,
        detail: String,
        reply: &OwnedFd,
    ) {
        let errno = match (protocol, reason) {
            ("udp", _) => libc::ENETUNREACH,
            (_, Reason::ConnectFailed) => libc::ECONNREFUSED,
            (_, Reason::Timeout) => libc::ETIMEDOUT,
            _ => libc::ECONNREFUSED,
        };
        let resolved = name
            .as_ref()
            .and_then(|n| self.pins.lock().ok()?.addresses(n))
            .unwrap_or_default();
        self.record(Attempt {
            path: "handoff",
            name,
            port: Some(to.port()),
            resolved,
            address: Some(to),
            reason: Some(reason.as_str()),
            detail: Some(detail),
            duration_ms: start.elapsed().as_millis() as u64,
            ..Attempt::started(time, protocol)
        });
        let _ = ask::reply(reply.as_fd(), &Answer::Refused { errno }, None);
    }

    /// Judges a connect() to `to` (see the module documentation).
    fn decide(&self, to: SocketAddr) -> Decision {
        let ip = canonical(to.ip());
        let port = to.port();
        let local = ip.is_loopback() || ip.is_unspecified();
        let mut candidates: Vec<(String, Vec<IpAddr>)> = Vec::new();
        if let Ok(pins) = self.pins.lock() {
            for name in pins.names_at(ip) {
                let addrs = pins.addresses(name).unwrap_or_default();
                candidates.push((name.clone(), addrs));
            }
        }
        if ip.is_ipv4() {
            // An IPv4 literal destination names the address itself.
            candidates.push((ip.to_string(), vec![ip]));
        }
        let mut best: Option<(Reason, String)> = None;
        for (name, addrs) in candidates {
            let request = Request {
                name: &name,
                port,
                sni: None,
                resolves_private: addrs.iter().any(|a| is_private(*a)),
            };
            match judge(self.mode, &self.patterns, &request) {
                Verdict::Allowed => {
                    return Decision::Admit {
                        name,
                        resolved: addrs,
                    }
                }
                Verdict::Refused(r) => {
                    // Across candidates, "no destination for this one" says
                    // least: a candidate some destination matched explains more.
                    let rank = |r: Reason| (r == Reason::NoDestination, r);
                    if best.as_ref().is_none_or(|(b, _)| rank(r) < rank(*b)) {
                        best = Some((r, name));
                    }
                }
            }
        }
        // The box's own loopback, unless a destination names this address
        // and port (then its refusal, e.g. private-address, is the answer).
        let matched = best
            .as_ref()
            .is_some_and(|(r, _)| *r != Reason::NoDestination);
        if local && !matched {
            return Decision::Local;
        }
        match best {
            // Only the literal was tried: the address came from nowhere terra knows.
            Some((Reason::NoDestination, name)) if name == ip.to_string() => Decision::Refuse {
                reason: Reason::NoDestination,
                name: None,
                detail: format!(
                    "{to}: not an address the box's DNS stub handed out, nor a listed address"
                ),
            },
            Some((Reason::SniAbsent, name)) => {
                let resolved = self
                    .pins
                    .lock()
                    .ok()
                    .and_then(|p| p.addresses(&name))
                    .unwrap_or_else(|| vec![ip]);
                Decision::Sni { name, resolved }
            }
            Some((reason, name)) => Decision::Refuse {
                reason,
                detail: format!("{name}:{port} (address {ip})"),
                name: Some(name),
            },
            None => Decision::Refuse {
                reason: Reason::NoDestination,
                name: None,
                detail: format!("{to}: not a listed destination"),
            },
        }
    }

    fn connect_for_box(
        &self,
        time: SystemTime,
        start: Instant,
        to: SocketAddr,
        v6_socket: bool,
        options: &SocketOptions,
        reply: &OwnedFd,
    ) {
        let (name, resolved) = match self.decide(to) {
            Decision::Admit { name, resolved } => (name, resolved),
            Decision::Local => {
                let _ = ask::reply(reply.as_fd(), &Answer::Local, None);
                return;
            }
            Decision::Sni { .. } => {
                let _ = ask::reply(reply.as_fd(), &Answer::Relay, None);
                return;
            }
            Decision::Refuse {
                reason,
                name,
                detail,
            } => {
                self.refuse_connect(time, start, "tcp", to, name, reason, detail, reply);
                return;
            }
        };
        let timeout = Duration::from_millis(self.limits.connect_timeout_ms);
        let opened = open_socket(to, v6_socket, options).and_then(|(sock, target)| {
            bound_by_box(reply, &sock)?;
            connect_opened(&sock, target, timeout)?;
            Ok(sock)
        });
        match opened {
            Ok(sock) => {
                let allowed = Attempt {
                    path: "handoff",
                    verdict: "allowed",
                    name: Some(name),
                    port: Some(to.port()),
                    resolved,
                    address: Some(to),
                    duration_ms: start.elapsed().as_millis() as u64,
                    ..Attempt::started(time, "tcp")
                };
                // The line is written before the socket leaves: once the
                // workload holds a connection, a broker killed at any moment
                // has already recorded it.
                self.record(allowed.clone());
                if let Err(e) = ask::reply(reply.as_fd(), &Answer::Connected, Some(sock.as_fd())) {
                    self.record(Attempt {
                        verdict: "refused",
                        reason: Some(Reason::ConnectFailed.as_str()),
                        detail: Some(format!("the box did not take the socket: {e}")),
                        ..allowed
                    });
                }
            }
            Err(e) => {
                let detail = format!("{to}: {e}");
                let reason = if e.kind() == io::ErrorKind::TimedOut {
                    Reason::Timeout
                } else {
                    Reason::ConnectFailed
                };
                self.refuse_connect(time, start, "tcp", to, Some(name), reason, detail, reply);
            }
        }
    }

    fn resolve_for_stub(&self, time: SystemTime, start: Instant, name: &str, qtype: u16) -> Answer {
        let what = match qtype {
            crate::dns::TYPE_A => "A",
            crate::dns::TYPE_AAAA => "AAAA",
            _ => "another type",
        };
        let listed = self.patterns.iter().any(|p| p.matches(name, p.port));
        let mut attempt = Attempt {
            path: "dns-stub",
            name: Some(name.to_owned()),
            ..Attempt::started(time, "dns")
        };
        let pinned = self.pins.lock().ok().and_then(|p| p.addresses(name));
        let answer = if !listed {
            attempt.reason = Some(Reason::NoDestination.as_str());
            attempt.detail = Some(format!(
                "{what} {name}: not a listed name (NXDOMAIN in the box)"
            ));
            Answer::NxDomain
        } else if let Some(addresses) = pinned {
            // Already answered this run: the same addresses, no second line.
            return Answer::Addresses { addresses };
        } else {
            match self.resolver.resolve(name) {
                Ok(addrs) => {
                    let addresses = match self.pins.lock() {
                        Ok(mut p) => p.pin(name, addrs),
                        Err(_) => addrs,
                    };
                    attempt.verdict = "allowed";
                    attempt.resolved = addresses.clone();
                    attempt.detail = Some(format!("{what} {name}: pinned for this run"));
                    Answer::Addresses { addresses }
                }
                Err(e) => {
                    let detail = e.to_string();
                    attempt.reason = Some(Reason::ResolveFailed.as_str());
                    let nx = detail.starts_with("NXDOMAIN");
                    attempt.detail = Some(format!("{what} {name}: {detail}"));
                    if nx {
                        Answer::NxDomain
                    } else {
                        Answer::ServFail
                    }
                }
            }
        };
        attempt.duration_ms = start.elapsed().as_millis() as u64;
        self.record(attempt);
        answer
    }
}

/// How long the box may take to bind a socket ([`bound_by_box`]).
const BIND_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends `sock` (not yet connected) to the box, which binds it to a port of
/// its own, and waits for its word. A socket bound to a port by number
/// keeps that port when its connection ends (the kernel's
/// SOCK_BINDPORT_LOCK), so once handed to the workload it can never be
/// bound anew (EINVAL): a port connect() picks is given back when the
/// connection ends, and the socket, which lives on the host network, could
/// then take any host port. The broker itself never binds (its Landlock
/// domain and allowlist grant no bind); the box's service binds it.
fn bound_by_box(reply: &OwnedFd, sock: &OwnedFd) -> io::Result<()> {
    ask::reply(reply.as_fd(), &Answer::Bind, Some(sock.as_fd()))?;
    sockopt::set_socket_timeout(reply, sockopt::Timeout::Recv, Some(BIND_TIMEOUT))?;
    let word = ask::recv_with(reply.as_fd())?.map(|(bytes, _)| bytes);
    let port = SocketAddr::try_from(rustix::net::getsockname(sock)?).map_or(0, |a| a.port());
    if word.as_deref() == Some(ask::BOUND) && port != 0 {
        Ok(())
    } else {
        Err(io::Error::other("the box did not bind the socket"))
    }
}

/// A socket of the workload's family with its options, and the address to
/// connect it to (v4-mapped for an AF_INET6 socket).
fn open_socket(
    to: SocketAddr,
    v6_socket: bool,
    o: &SocketOptions,
) -> io::Result<(OwnedFd, SocketAddr)> {
    let (family, target) = match (v6_socket, to) {
        (true, SocketAddr::V4(v4)) => (
            AddressFamily::INET6,
            SocketAddr::new(IpAddr::V6(v4.ip().to_ipv6_mapped()), v4.port()),
        ),
        (true, v6) => (AddressFamily::INET6, v6),
        (false, v4 @ SocketAddr::V4(_)) => (AddressFamily::INET, v4),
        (false, SocketAddr::V6(_)) => return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT)),
    };
    let sock = rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    if let Some(v) = o.reuse_addr {
        sockopt::set_socket_reuseaddr(&sock, v)?;
    }
    if let Some(v) = o.keepalive {
        sockopt::set_socket_keepalive(&sock, v)?;
    }
    if let Some(v) = o.nodelay {
        sockopt::set_tcp_nodelay(&sock, v)?;
    }
    if let Some(v) = o.send_buffer {
        sockopt::set_socket_send_buffer_size(&sock, v)?;
    }
    if let Some(v) = o.recv_buffer {
        sockopt::set_socket_recv_buffer_size(&sock, v)?;
    }
    if let Some(v) = o.linger {
        sockopt::set_socket_linger(&sock, v.map(|s| Duration::from_secs(s.into())))?;
    }
    if let (Some(v), AddressFamily::INET6) = (o.v6_only, family) {
        sockopt::set_ipv6_v6only(&sock, v)?;
    }
    Ok((sock, target))
}

/// Connects `sock` to `target` within `timeout`. Blocking again once
/// connected (the box sets the workload's own status flags).
fn connect_opened(sock: &OwnedFd, target: SocketAddr, timeout: Duration) -> io::Result<()> {
    rustix::io::ioctl_fionbio(sock, true)?;
    match rustix::net::connect(sock, &target) {
        Ok(()) => {}
        Err(rustix::io::Errno::INPROGRESS) => {
            let deadline = Instant::now() + timeout;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"));
                }
                let mut fds = [rustix::event::PollFd::new(
                    sock,
                    rustix::event::PollFlags::OUT,
                )];
                let ts = rustix::event::Timespec {
                    tv_sec: left.as_secs() as i64,
                    tv_nsec: left.subsec_nanos() as i64,
                };
                match rustix::event::poll(&mut fds, Some(&ts)) {
                    Ok(0) => continue,
                    Ok(_) => break,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            if let Err(e) = sockopt::socket_error(sock)? {
                return Err(e.into());
            }
        }
        Err(e) => return Err(e.into()),
    }
    rustix::io::ioctl_fionbio(sock, false)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::Pattern;
    use crate::receipt::MemoryReceipt;
    use crate::resolve::StaticResolver;
    use terra_policy::NetworkMode;

    fn broker(patterns: Vec<Pattern>, resolver: StaticResolver) -> (Arc<Broker>, MemoryReceipt) {
        let mem = MemoryReceipt::default();
        let b = Broker::new(
            NetworkMode::Mediated,
            patterns,
            Arc::new(resolver),
            crate::receipt::ReceiptSink::new(Box::new(mem.clone())),
            crate::broker::Limits::default(),
        );
        (b, mem)
    }

    fn pat(h: &str, port: u16, private: bool) -> Pattern {
        Pattern::parse(h, port, false, private).unwrap()
    }

    #[test]
    fn an_address_is_admitted_only_for_a_pinned_listed_name_or_literal() {
        let r = StaticResolver::new([("api.example.com", vec!["93.184.216.34".parse().unwrap()])]);
        let (b, _) = broker(
            vec![
                pat("api.example.com", 443, false),
                pat("192.0.2.7", 22, true),
            ],
            r,
        );
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        // Not pinned yet: the stub never handed it out.
        assert!(matches!(
            b.decide(sa("93.184.216.34:443")),
            Decision::Refuse {
                reason: Reason::NoDestination,
                ..
            }
        ));
        let t = SystemTime::now();
        let got = b.resolve_for_stub(t, Instant::now(), "api.example.com", 1);
        assert_eq!(
            got,
            Answer::Addresses {
                addresses: vec!["93.184.216.34".parse().unwrap()]
            }
        );
        assert!(matches!(
            b.decide(sa("93.184.216.34:443")),
            Decision::Admit { .. }
        ));
        // Mapped form of the same address, other port, literal.
        assert!(matches!(
            b.decide(sa("[::ffff:93.184.216.34]:443")),
            Decision::Admit { .. }
        ));
        assert!(matches!(
            b.decide(sa("93.184.216.34:80")),
            Decision::Refuse {
                reason: Reason::NoDestination,
                ..
            }
        ));
        assert!(matches!(
            b.decide(sa("192.0.2.7:22")),
            Decision::Admit { .. }
        ));
        // Box loopback stays local unless listed.
        assert_eq!(b.decide(sa("127.0.0.1:8080")), Decision::Local);
        assert_eq!(b.decide(sa("[::1]:8080")), Decision::Local);
        // An unlisted name is never resolved: NXDOMAIN.
        assert_eq!(
            b.resolve_for_stub(t, Instant::now(), "other.example.com", 1),
            Answer::NxDomain
        );
    }

    #[test]
    fn a_private_pin_is_refused_without_the_flag_and_a_listed_loopback_is_handed_off() {
        let r = StaticResolver::new([
            ("db.internal", vec!["10.1.2.3".parse().unwrap()]),
            ("local.test", vec!["127.0.0.1".parse().unwrap()]),
        ]);
        let (b, _) = broker(
            vec![
                pat("db.internal", 5432, false),
                pat("local.test", 5432, true),
            ],
            r,
        );
        let t = SystemTime::now();
        b.resolve_for_stub(t, Instant::now(), "db.internal", 1);
        b.resolve_for_stub(t, Instant::now(), "local.test", 1);
        assert!(matches!(
            b.decide("10.1.2.3:5432".parse().unwrap()),
            Decision::Refuse {
                reason: Reason::PrivateAddress,
                ..
            }
        ));
        assert!(matches!(
            b.decide("127.0.0.1:5432".parse().unwrap()),
            Decision::Admit { .. }
        ));
        assert_eq!(b.decide("127.0.0.1:5433".parse().unwrap()), Decision::Local);
        // A loopback name listed without the private flag: refused, not local.
        let r = StaticResolver::new([("lo.test", vec!["127.0.0.1".parse().unwrap()])]);
        let (b, _) = broker(vec![pat("lo.test", 80, false)], r);
        b.resolve_for_stub(t, Instant::now(), "lo.test", 1);
        assert!(matches!(
            b.decide("127.0.0.1:80".parse().unwrap()),
            Decision::Refuse {
                reason: Reason::PrivateAddress,
                ..
            }
        ));
        assert_eq!(b.decide("127.0.0.1:81".parse().unwrap()), Decision::Local);
    }

    #[test]
    fn options_are_set_before_the_connect() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let o = SocketOptions {
            nodelay: Some(true),
            keepalive: Some(true),
            ..Default::default()
        };
        let (s, target) = open_socket(l.local_addr().unwrap(), true, &o).unwrap();
        connect_opened(&s, target, Duration::from_secs(5)).unwrap();
        assert!(sockopt::tcp_nodelay(&s).unwrap());
        assert!(sockopt::socket_keepalive(&s).unwrap());
        let s = std::net::TcpStream::from(s);
        // An AF_INET6 socket to a v4 address: the peer is the mapped form.
        assert!(s.peer_addr().unwrap().is_ipv6());
    }
}
