//! Name resolution, owned by the broker (the box never resolves anything).
//!
//! The production resolver is terra's own ([`DnsResolver`]), not the C
//! library's getaddrinfo: musl's resolver bind()s its UDP socket before it
//! sends, and the broker's seccomp refuses every bind(). terra's resolver
//! needs no bind and no listen: a UDP socket connect()ed to the nameserver
//! (the kernel picks a random ephemeral source port when it connects, and
//! only delivers datagrams from that server to it), TCP with connect() when
//! the answer is truncated. It behaves the same on glibc and musl builds.
//!
//! Configuration ([`ResolverConfig`]): /etc/hosts, then /etc/resolv.conf's
//! nameservers, search domains, ndots, timeout and attempts, read once when
//! the broker starts. Each name is asked for A and AAAA at once (two
//! queries with random ids on one socket); a response is used only when it
//! comes from the connected server and matches a query's id and question.
//! CNAME chains are followed, at most [`MAX_CNAME_HOPS`] aliases. The whole
//! lookup is bounded by the broker's `resolve_timeout_ms`.
//!
//! Failures are [`ResolveError`]s whose kind a person can read: NXDOMAIN,
//! no-answer, timeout, server-failure (and busy when too many lookups run).

use std::collections::HashMap;
use std::net::IpAddr;
#[cfg(any(target_os = "linux", target_os = "macos"))]
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
#[cfg(any(target_os = "linux", target_os = "macos"))]
use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(any(target_os = "linux", target_os = "macos"))]
use std::time::{Duration, Instant};

use terra_policy::host::{classify_host, HostKind};

#[cfg(any(target_os = "linux", target_os = "macos"))]
use crate::dns::{self, Answer, Name, Response};
pub use crate::resolvconf::ResolverConfig;

/// Most CNAME aliases followed for one name (in responses and across
/// follow-up queries together).
pub const MAX_CNAME_HOPS: usize = 8;

/// Why a name did not resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolveErrorKind {
    /// The name does not exist (every name tried got NXDOMAIN).
    NxDomain,
    /// The name exists but has no A or AAAA record.
    NoAnswer,
    /// No usable answer in time.
    Timeout,
    /// A server failed (SERVFAIL, REFUSED, a malformed answer, unreachable).
    ServerFailure,
    /// Too many lookups at once; this one was not started.
    Busy,
}

impl ResolveErrorKind {
    /// How receipts spell the kind (the start of the `resolve-failed` detail).
    pub fn as_str(self) -> &'static str {
        match self {
            ResolveErrorKind::NxDomain => "NXDOMAIN",
            ResolveErrorKind::NoAnswer => "no-answer",
            ResolveErrorKind::Timeout => "timeout",
            ResolveErrorKind::ServerFailure => "server-failure",
            ResolveErrorKind::Busy => "busy",
        }
    }
}

/// A failed lookup: its kind and what happened, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveError {
    pub kind: ResolveErrorKind,
    pub detail: String,
}

impl ResolveError {
    pub fn new(kind: ResolveErrorKind, detail: impl Into<String>) -> Self {
        ResolveError {
            kind,
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.detail)
    }
}

impl std::error::Error for ResolveError {}

/// Resolves a (judged, canonical) name to every address it has.
pub trait Resolver: Send + Sync {
    fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError>;
}

/// A strict IPv4 literal name (as the host grammar accepts it) as an address.
pub fn ipv4_literal(name: &str) -> Option<IpAddr> {
    match classify_host(name) {
        Ok(HostKind::Ipv4Literal) => name.parse().ok(),
        _ => None,
    }
}

/// terra's own stub resolver (see the module documentation).
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub struct DnsResolver {
    config: ResolverConfig,
    budget: Duration,
    in_flight: AtomicUsize,
    max_in_flight: usize,
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
struct InFlight<'a>(&'a AtomicUsize);
#[cfg(any(target_os = "linux", target_os = "macos"))]
impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What one query (one name, one type) came to.
#[cfg(any(target_os = "linux", target_os = "macos"))]
#[derive(Debug)]
enum Got {
    /// A definitive answer (NOERROR).
    Answer(Answer),
    /// NXDOMAIN.
    NxDomain,
}

/// Why a query got no definitive answer from one server.
#[cfg(any(target_os = "linux", target_os = "macos"))]
#[derive(Debug, Clone)]
enum Fail {
    Timeout(String),
    Server(String),
}

/// What one record type of one name came to, aliases followed.
#[cfg(any(target_os = "linux", target_os = "macos"))]
enum TypeResult {
    Addresses(Vec<IpAddr>),
    NoData,
    NxDomain,
    Failed(Fail),
}

/// What one candidate name came to (A and AAAA together).
#[cfg(any(target_os = "linux", target_os = "macos"))]
enum Outcome {
    Addresses(Vec<IpAddr>),
    NxDomain,
    NoData,
    Timeout(String),
    Server(String),
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
const QTYPES: [u16; 2] = [dns::TYPE_A, dns::TYPE_AAAA];

#[cfg(any(target_os = "linux", target_os = "macos"))]
fn rcode_name(rcode: u8) -> String {
    match rcode {
        dns::RCODE_FORMERR => "FORMERR".into(),
        dns::RCODE_SERVFAIL => "SERVFAIL".into(),
        dns::RCODE_NOTIMP => "NOTIMP".into(),
        dns::RCODE_REFUSED => "REFUSED".into(),
        n => format!("response code {n}"),
    }
}

/// The kernel gave no random bytes for a query id.
#[cfg(any(target_os = "linux", target_os = "macos"))]
#[derive(Debug, thiserror::Error)]
#[error("no random query id ({RANDOM_CALL}: {})", io_text(.0))]
struct NoRandom(std::io::Error);

#[cfg(target_os = "linux")]
const RANDOM_CALL: &str = "getrandom";
#[cfg(target_os = "macos")]
const RANDOM_CALL: &str = "getentropy";

/// `n` random message ids from the kernel (getrandom(2)).
#[cfg(target_os = "linux")]
fn random_ids(n: usize) -> Result<Vec<u16>, NoRandom> {
    let mut buf = vec![0u8; n * 2];
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(got) => filled += got,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(NoRandom(e.into())),
        }
    }
    Ok(ids_of(&buf))
}

/// `n` random message ids from the kernel (getentropy(2): a system call,
/// no file, so it works under the broker's profile).
#[cfg(target_os = "macos")]
fn random_ids(n: usize) -> Result<Vec<u16>, NoRandom> {
    let mut buf = vec![0u8; n * 2];
    // getentropy fills at most 256 bytes per call.
    for chunk in buf.chunks_mut(256) {
        // SAFETY: `chunk` is a valid, writable buffer of `chunk.len()` bytes
        // (at most 256, the call's limit), alive for the whole call.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::getentropy(chunk.as_mut_ptr().cast(), chunk.len()) };
        if rc != 0 {
            return Err(NoRandom(std::io::Error::last_os_error()));
        }
    }
    Ok(ids_of(&buf))
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
fn ids_of(bytes: &[u8]) -> Vec<u16> {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect()
}

/// A UDP socket connect()ed to `server`, never bound: connect() gives it a
/// random ephemeral port, and the kernel delivers it only `server`'s datagrams.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn connected_udp(server: SocketAddr) -> std::io::Result<UdpSocket> {
    use rustix::net::{connect, AddressFamily, SocketType};
    let family = match server {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    #[cfg(target_os = "linux")]
    let fd = rustix::net::socket_with(
        family,
        SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    // No SOCK_CLOEXEC on macOS: the flag follows at once (the broker starts
    // no process, so nothing could inherit the socket in between).
    #[cfg(target_os = "macos")]
    let fd = {
        let fd = rustix::net::socket(family, SocketType::DGRAM, None)?;
        rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
        fd
    };
    connect(&fd, &server)?;
    Ok(UdpSocket::from(fd))
}

/// Fills `buf` from `s` before `deadline` (each read bounded by what is left).
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    use std::io::Read;
    let mut done = 0;
    while done < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[done..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A UDP exchange's I/O error as a server failure, in words.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn udp_fail(server: SocketAddr, e: &std::io::Error) -> Fail {
    Fail::Server(if e.kind() == std::io::ErrorKind::ConnectionRefused {
        // An ICMP port unreachable from the server.
        format!("{server}: nothing answers there (port unreachable)")
    } else {
        format!("{server}: {}", io_text(e))
    })
}

/// An I/O error in words, without the bare "(os error N)".
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn io_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
impl DnsResolver {
    /// A resolver with `config`; one lookup takes at most `budget`; at most
    /// `max_in_flight` lookups run at once.
    pub fn new(config: ResolverConfig, budget: Duration, max_in_flight: usize) -> Self {
        DnsResolver {
            config,
            budget,
            in_flight: AtomicUsize::new(0),
            max_in_flight,
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &ResolverConfig {
        &self.config
    }

    fn servers_text(&self) -> String {
        self.config
            .nameservers
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Turns one response into a definitive answer or a failure.
    fn judge_response(server: SocketAddr, resp: &Response, qtype: u16) -> Result<Got, Fail> {
        match resp.rcode {
            dns::RCODE_NOERROR => dns::follow(resp, qtype, MAX_CNAME_HOPS)
                .map(Got::Answer)
                .map_err(|e| Fail::Server(format!("{server}: {e}"))),
            dns::RCODE_NXDOMAIN => Ok(Got::NxDomain),
            other => Err(Fail::Server(format!(
                "{server} answered {} for {}",
                rcode_name(other),
                resp.qname
            ))),
        }
    }

    /// Whether `resp` answers the query `id` for `name`/`qtype`.
    fn matches(resp: &Response, id: u16, name: &Name, qtype: u16) -> bool {
        resp.id == id && resp.qname == *name && resp.qtype == qtype
    }

    /// One query over TCP (after a truncated UDP answer).
    fn exchange_tcp(
        server: SocketAddr,
        name: &Name,
        qtype: u16,
        deadline: Instant,
    ) -> Result<Got, Fail> {
        use std::io::Write;
        let id = random_ids(1).map_err(|e| Fail::Server(e.to_string()))?[0];
        let query = dns::encode_query(id, name, qtype);
        let timeout = |what: &str| Fail::Timeout(format!("{server} (TCP): no {what} in time"));
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timeout("connection"));
        }
        let mut s = TcpStream::connect_timeout(&server, left).map_err(|e| {
            if is_timeout(&e) {
                timeout("connection")
            } else {
                Fail::Server(format!(
                    "{server} (TCP, after a truncated answer): {}",
                    io_text(&e)
                ))
            }
        })?;
        let io_fail = |e: std::io::Error| {
            if is_timeout(&e) {
                timeout("answer")
            } else {
                Fail::Server(format!("{server} (TCP): {}", io_text(&e)))
            }
        };
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        s.set_write_timeout(Some(left)).map_err(io_fail)?;
        let mut framed = (query.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&query);
        s.write_all(&framed).map_err(io_fail)?;
        let mut len = [0u8; 2];
        read_exact_by(&mut s, &mut len, deadline).map_err(io_fail)?;
        let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
        read_exact_by(&mut s, &mut msg, deadline).map_err(io_fail)?;
        let resp = dns::parse_response(&msg)
            .map_err(|e| Fail::Server(format!("{server} (TCP): malformed answer: {}", e.0)))?;
        if !Self::matches(&resp, id, name, qtype) {
            return Err(Fail::Server(format!(
                "{server} (TCP): the answer does not match the question"
            )));
        }
        Self::judge_response(server, &resp, qtype)
    }

    /// Asks `server` for `name` once for each of `qtypes` (at once, on one
    /// connected UDP socket), waiting at most the configured timeout (and
    /// never past `overall`). A truncated answer is asked again over TCP,
    /// with a timeout of its own. Datagrams that match no query are ignored.
    fn exchange(
        &self,
        server: SocketAddr,
        name: &Name,
        qtypes: &[u16],
        overall: Instant,
    ) -> Vec<Result<Got, Fail>> {
        let try_for = |from: Instant| (from + self.config.timeout).min(overall);
        let deadline = try_for(Instant::now());
        let fail_all = |f: Fail| qtypes.iter().map(|_| Err(f.clone())).collect::<Vec<_>>();
        let ids = match random_ids(qtypes.len()) {
            Ok(ids) => ids,
            Err(e) => return fail_all(Fail::Server(e.to_string())),
        };
        let sock = match connected_udp(server) {
            Ok(s) => s,
            Err(e) => {
                return fail_all(Fail::Server(format!(
                    "cannot reach {server}: {}",
                    io_text(&e)
                )))
            }
        };
        let mut out: Vec<Option<Result<Got, Fail>>> = qtypes.iter().map(|_| None).collect();
        for (qtype, id) in qtypes.iter().zip(&ids) {
            if let Err(e) = sock.send(&dns::encode_query(*id, name, *qtype)) {
                return fail_all(udp_fail(server, &e));
            }
        }
        let mut ignored = 0usize;
        let mut buf = vec![0u8; 4096];
        while out.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if sock.set_read_timeout(Some(left)).is_err() {
                break;
            }
            let n = match sock.recv(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if is_timeout(&e) => break,
                Err(e) => {
                    // ECONNREFUSED: an ICMP port unreachable from the server.
                    let f = udp_fail(server, &e);
                    for slot in out.iter_mut().filter(|s| s.is_none()) {
                        *slot = Some(Err(f.clone()));
                    }
                    break;
                }
            };
            let Ok(resp) = dns::parse_response(&buf[..n]) else {
                ignored += 1;
                continue;
            };
            let Some(i) = (0..qtypes.len())
                .find(|&i| out[i].is_none() && Self::matches(&resp, ids[i], name, qtypes[i]))
            else {
                ignored += 1;
                continue;
            };
            out[i] = Some(if resp.truncated {
                Self::exchange_tcp(server, name, qtypes[i], try_for(Instant::now()))
            } else {
                Self::judge_response(server, &resp, qtypes[i])
            });
        }
        let note = if ignored > 0 {
            format!("; {ignored} datagram(s) that answered no query ignored")
        } else {
            String::new()
        };
        out.into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Err(Fail::Timeout(format!("{server}: no answer in time{note}")))
                })
            })
            .collect()
    }

    /// Looks `name` up for each of `qtypes` through every nameserver and
    /// attempt, follows aliases, and returns what each type came to.
    fn lookup_types(
        &self,
        name: &Name,
        qtypes: &[u16],
        deadline: Instant,
        hops: usize,
    ) -> Vec<TypeResult> {
        // Per type: a definitive answer, or the latest failure.
        let mut got: Vec<Option<Got>> = qtypes.iter().map(|_| None).collect();
        let mut fails: Vec<Option<Fail>> = qtypes.iter().map(|_| None).collect();
        'rounds: for _ in 0..self.config.attempts {
            for server in &self.config.nameservers {
                let pending: Vec<usize> = (0..qtypes.len()).filter(|&i| got[i].is_none()).collect();
                if pending.is_empty() {
                    break 'rounds;
                }
                let now = Instant::now();
                if now >= deadline {
                    break 'rounds;
                }
                let types: Vec<u16> = pending.iter().map(|&i| qtypes[i]).collect();
                let results = self.exchange(*server, name, &types, deadline);
                for (i, r) in pending.iter().zip(results) {
                    match r {
                        Ok(g) => got[*i] = Some(g),
                        Err(f) => fails[*i] = Some(f),
                    }
                }
            }
        }
        let mut out = Vec::new();
        for (i, qtype) in qtypes.iter().enumerate() {
            out.push(match got[i].take() {
                Some(Got::Answer(Answer::Addresses(a))) => TypeResult::Addresses(a),
                Some(Got::Answer(Answer::NoData)) => TypeResult::NoData,
                Some(Got::NxDomain) => TypeResult::NxDomain,
                Some(Got::Answer(Answer::Alias { target, hops: h })) => {
                    if hops + h > MAX_CNAME_HOPS {
                        TypeResult::Failed(Fail::Server(format!(
                            "CNAME chain longer than {MAX_CNAME_HOPS} aliases at {target}"
                        )))
                    } else {
                        self.lookup_types(&target, &[*qtype], deadline, hops + h)
                            .pop()
                            .unwrap_or(TypeResult::NoData)
                    }
                }
                None => TypeResult::Failed(fails[i].take().unwrap_or_else(|| {
                    Fail::Timeout(format!("no answer from {} in time", self.servers_text()))
                })),
            });
        }
        out
    }

    /// One candidate name: A and AAAA together.
    fn lookup(&self, name: &Name, deadline: Instant) -> Outcome {
        let per_type = self.lookup_types(name, &QTYPES, deadline, 0);
        let mut addrs = Vec::new();
        let (mut nx, mut timeout, mut server) = (false, None, None);
        for r in per_type {
            match r {
                TypeResult::Addresses(a) => addrs.extend(a),
                TypeResult::NoData => {}
                TypeResult::NxDomain => nx = true,
                TypeResult::Failed(Fail::Timeout(d)) => timeout = Some(d),
                TypeResult::Failed(Fail::Server(d)) => server = Some(d),
            }
        }
        if !addrs.is_empty() {
            let mut seen = Vec::new();
            addrs.retain(|a| {
                let fresh = !seen.contains(a);
                seen.push(*a);
                fresh
            });
            Outcome::Addresses(addrs)
        } else if nx {
            Outcome::NxDomain
        } else if let Some(d) = timeout {
            Outcome::Timeout(d)
        } else if let Some(d) = server {
            Outcome::Server(d)
        } else {
            Outcome::NoData
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
impl Resolver for DnsResolver {
    fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        use ResolveErrorKind as K;
        if let Some(literal) = ipv4_literal(name) {
            return Ok(vec![literal]);
        }
        let lower = name.to_ascii_lowercase();
        if let Some(addrs) = self.config.hosts.get(&lower).filter(|a| !a.is_empty()) {
            return Ok(addrs.clone());
        }
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(ResolveError::new(
                K::Busy,
                format!(
                    "{name}: {} name lookups already in flight",
                    self.max_in_flight
                ),
            ));
        }
        let _guard = InFlight(&self.in_flight);
        let deadline = Instant::now() + self.budget;
        let candidates = self.config.candidates(&lower);
        if candidates.is_empty() {
            return Err(ResolveError::new(
                K::NxDomain,
                format!("{name} is not a name DNS can ask for"),
            ));
        }
        let tried = candidates
            .iter()
            .map(|c| c.to_dotted())
            .collect::<Vec<_>>()
            .join(", ");
        let (mut nodata, mut server) = (false, None);
        for c in &candidates {
            match self.lookup(c, deadline) {
                Outcome::Addresses(a) => return Ok(a),
                Outcome::NxDomain => {}
                Outcome::NoData => nodata = true,
                Outcome::Server(d) => server = Some(d),
                // Later names would only spend what is left of the budget.
                Outcome::Timeout(d) => {
                    let budget = if Instant::now() >= deadline {
                        format!(
                            " (the broker's {} ms lookup budget is spent)",
                            self.budget.as_millis()
                        )
                    } else {
                        String::new()
                    };
                    return Err(ResolveError::new(K::Timeout, format!("{c}: {d}{budget}")));
                }
            }
        }
        Err(match (server, nodata) {
            (Some(d), _) => ResolveError::new(K::ServerFailure, format!("{name}: {d}")),
            (None, true) => ResolveError::new(
                K::NoAnswer,
                format!("{name} has no A or AAAA record (asked for {tried})"),
            ),
            (None, false) => ResolveError::new(
                K::NxDomain,
                format!(
                    "{name} does not exist (asked {} for {tried})",
                    self.servers_text()
                ),
            ),
        })
    }
}

/// A fixed map name -> addresses (tests, benches). IPv4 literals resolve to
/// themselves; unknown names fail with NXDOMAIN.
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
    fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        if let Some(literal) = ipv4_literal(name) {
            return Ok(vec![literal]);
        }
        self.map
            .get(name)
            .cloned()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                ResolveError::new(ResolveErrorKind::NxDomain, format!("{name}: unknown"))
            })
    }
}

/// Where the broker reads its resolver configuration, as the supervisor
/// sees the host: (/etc/resolv.conf, /etc/hosts) with symbolic links
/// resolved, each None when absent. The broker's root holds the files at
/// these (canonical) paths, so a /etc/resolv.conf that is a link (to
/// systemd-resolved's file, say) is still found.
pub fn resolver_sources() -> (Option<PathBuf>, Option<PathBuf>) {
    let canon = |p: &str| std::fs::canonicalize(p).ok();
    (canon("/etc/resolv.conf"), canon("/etc/hosts"))
}

/// Files bound read-only into the broker's root: /etc/resolv.conf and
/// /etc/hosts (those that exist). The broker reads them once, before it
/// confines itself.
pub fn resolver_files() -> Vec<PathBuf> {
    ["/etc/resolv.conf", "/etc/hosts"]
        .iter()
        .map(PathBuf::from)
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
        assert_eq!(
            r.resolve("b.example").unwrap_err().kind,
            ResolveErrorKind::NxDomain
        );
        assert_eq!(
            r.resolve("8.8.8.8").unwrap(),
            vec!["8.8.8.8".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(ipv4_literal("127.1"), None);
    }

    #[cfg(any(target_os = "linux", target_os = "macos"))]
    #[test]
    fn literals_and_hosts_need_no_query() {
        // The nameserver is a closed port on loopback: any query would fail.
        let c = ResolverConfig::parse(
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1",
            "127.0.0.9 Only-Hosts.test\n",
        );
        let r = DnsResolver::new(c, Duration::from_secs(5), 4);
        assert_eq!(
            r.resolve("1.2.3.4").unwrap(),
            vec!["1.2.3.4".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            r.resolve("only-hosts.test").unwrap(),
            vec!["127.0.0.9".parse::<IpAddr>().unwrap()]
        );
    }

    #[cfg(any(target_os = "linux", target_os = "macos"))]
    #[test]
    fn ids_are_random() {
        let a = random_ids(64).unwrap();
        let b = random_ids(64).unwrap();
        assert_ne!(a, b);
    }
}
