//! The box's network service: everything of mediated networking that runs
//! inside the box, in one process (a child of the box's init, see
//! `terra_kernel::service::ServiceFds`). It never judges and never reaches
//! the host network: the broker does both.
//!
//! - the proxy (127.0.0.1:3128): each accepted socket goes to the broker
//!   unread ([`box_proxy`]);
//! - the DNS stub (127.0.0.1:53, UDP and TCP): each A/AAAA question goes to
//!   the broker, which answers listed names with the addresses it pinned;
//! - the workload's connect() calls (seccomp user notification): the
//!   destination the workload wrote is read once, and the broker either
//!   connects to it and sends back the socket, which replaces the
//!   workload's (SECCOMP_IOCTL_NOTIF_ADDFD), or refuses it; box-local
//!   addresses nothing lists, and AF_UNIX sockets on the box's writable
//!   mounts ([`crate::unixconn`]), are connected by the service itself on
//!   the workload's own socket, inside the box. The kernel never runs the
//!   workload's connect(), and a socket that lives outside the box's
//!   network namespace (one the broker connected) never gets a new
//!   destination ([`Shared::off_box_refusal`]).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rustix::net::{sockopt, AddressFamily, SocketType};
use terra_kernel::notify::{self, Notification};
use terra_kernel::service::{MediatedFds, RefusingDnsFds, ServiceFds};

use crate::ask::{self, Answer, Ask, SocketOptions};
use crate::fdpass;
use crate::pool::Pool;
use crate::stub::{self, Lookup, StubLookup};
use crate::unixconn::{self, UnixOutcome};

/// Most workload connect() calls handled at once; more wait in the kernel.
const MAX_PENDING: usize = 1024;
/// Most DNS stub questions (UDP) and connections (TCP) at once.
const STUB_INFLIGHT: usize = 64;
const STUB_TCP_CONNS: usize = 16;
/// Stack of a thread handling one connect().
const CONNECT_STACK: usize = 128 * 1024;

/// The box's network service; never returns. Every box has it: the
/// workload's connect() calls come here (see `on_connect`); with mediated
/// networking it also serves the proxy and the DNS stub and asks the broker.
pub fn box_service(fds: ServiceFds) -> ! {
    let ServiceFds {
        notify_channel,
        proc_dir,
        mediated,
        refusing_dns,
    } = fds;
    let Some(MediatedFds {
        proxy,
        broker,
        dns_udp,
        dns_tcp,
        relay,
    }) = mediated
    else {
        if let Some(dns) = refusing_dns {
            serve_refusing_dns(dns);
        }
        serve_notifications(notify_channel, None, proc_dir, None);
        // The workload is gone; init ends the box.
        loop {
            std::thread::park();
        }
    };
    let broker = Arc::new(broker);
    let lookup: Arc<dyn StubLookup> = Arc::new(BrokerLookup(Arc::clone(&broker)));
    let l = Arc::clone(&lookup);
    spawn("terra-dns-udp", move || {
        if let Err(e) = stub::serve_udp(dns_udp, l, STUB_INFLIGHT) {
            tracing::warn!("terra: the box's DNS stub (UDP) stopped: {e}");
        }
    });
    spawn("terra-dns-tcp", move || {
        if let Err(e) = stub::serve_tcp(dns_tcp, lookup, STUB_TCP_CONNS) {
            tracing::warn!("terra: the box's DNS stub (TCP) stopped: {e}");
        }
    });
    let b = Arc::clone(&broker);
    spawn("terra-connect", move || {
        serve_notifications(notify_channel, Some(b), proc_dir, Some(relay))
    });
    box_proxy_loop(proxy, &broker)
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) {
    if let Err(e) = std::thread::Builder::new()
        .name(name.into())
        .stack_size(CONNECT_STACK)
        .spawn(f)
    {
        tracing::warn!("terra: the box service cannot start {name}: {e}");
    }
}

/// The box-side proxy alone (tests and benches; the box runs
/// [`box_service`]): accepts on the in-box loopback and hands each socket
/// to the broker with SCM_RIGHTS, unread. If the broker is gone, each new
/// connection is closed.
pub fn box_proxy(listener: TcpListener, broker: OwnedFd) -> ! {
    box_proxy_loop(listener, &broker)
}

fn box_proxy_loop(listener: TcpListener, broker: &OwnedFd) -> ! {
    let mut broker_gone = false;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = fdpass::send_stream(broker, &stream) {
                    if !broker_gone {
                        tracing::warn!(
                            "terra: network broker unavailable ({e}); connections are closed"
                        );
                        broker_gone = true;
                    }
                }
                drop(stream);
            }
            Err(e) => {
                // EMFILE/ENFILE/ECONNABORTED...: back off briefly, keep serving.
                tracing::debug!("box proxy accept failed: {e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

/// Network none: the DNS stub answers every name REFUSED at once (a
/// resolver stops there, where a closed port 53 would only say "try
/// again"), and says each name the first time it is asked.
fn serve_refusing_dns(dns: RefusingDnsFds) {
    let RefusingDnsFds {
        dns_udp,
        dns_tcp,
        report,
    } = dns;
    let lookup: Arc<dyn StubLookup> = Arc::new(crate::refused::Refusing::new(report));
    let l = Arc::clone(&lookup);
    spawn("terra-dns-udp", move || {
        let _ = stub::serve_udp(dns_udp, l, STUB_INFLIGHT);
    });
    spawn("terra-dns-tcp", move || {
        let _ = stub::serve_tcp(dns_tcp, lookup, STUB_TCP_CONNS);
    });
}

/// The DNS stub's questions, asked of the broker.
struct BrokerLookup(Arc<OwnedFd>);

impl StubLookup for BrokerLookup {
    fn lookup(&self, name: &str, qtype: u16) -> Lookup {
        let q = Ask::Resolve {
            name: name.to_owned(),
            qtype,
        };
        match ask::ask(self.0.as_fd(), &q) {
            Ok((Answer::Addresses { addresses }, _)) => Lookup::Addresses(addresses),
            Ok((Answer::NxDomain, _)) => Lookup::NxDomain,
            _ => Lookup::ServFail,
        }
    }
}

/// Waits for the workload's listener on `channel`, then answers its
/// connect() calls, each on a thread of its own.
fn serve_notifications(
    channel: OwnedFd,
    broker: Option<Arc<OwnedFd>>,
    proc_dir: OwnedFd,
    relay: Option<TcpListener>,
) {
    let listener = match ask::recv_with(channel.as_fd()) {
        Ok(Some((_, fds))) if !fds.is_empty() => fds.into_iter().next().expect("one fd"),
        // The workload never got as far as its filter (refused or gone).
        _ => return,
    };
    drop(channel);
    let shared = Arc::new(Shared {
        listener,
        box_netns: box_netns(),
        broker,
        proc_dir,
        relay: relay.map(Mutex::new),
        defaults: Mutex::new(Vec::new()),
    });
    let pool = Pool::new("terra-connect", CONNECT_STACK, MAX_PENDING);
    loop {
        let n = match notify::receive(shared.listener.as_fd()) {
            Ok(n) => n,
            // Every process of the workload is gone.
            Err(_) => return,
        };
        let s = Arc::clone(&shared);
        let job = move || match i64::from(n.nr) {
            libc::SYS_sendto => on_sendto(&s, &n),
            _ => on_connect(&s, &n),
        };
        if pool.run(job).is_err() {
            let _ = notify::reply_errno(shared.listener.as_fd(), n.id, libc::EAGAIN);
        }
    }
}

struct Shared {
    listener: OwnedFd,
    /// The box's network namespace (its `SO_NETNS_COOKIE`); None when the
    /// kernel cannot name a socket's namespace, and then no socket the
    /// broker connected is handed over (see `on_connect`).
    box_netns: Option<u64>,
    /// The broker's channel (mediated networking only).
    broker: Option<Arc<OwnedFd>>,
    proc_dir: OwnedFd,
    /// The relay listener, locked for one connect-and-accept at a time so
    /// each pair is matched to its own connection.
    relay: Option<Mutex<TcpListener>>,
    /// The option values of a fresh stream socket, per family (the box's
    /// network namespace keeps its defaults: the workload cannot change its
    /// sysctls).
    defaults: Mutex<Vec<(AddressFamily, Defaults)>>,
}

/// The cookie of the box's network namespace, from a socket the service
/// makes here (it runs inside the box). None, said once on stderr, when the
/// kernel cannot tell (SO_NETNS_COOKIE is Linux 5.14).
fn box_netns() -> Option<u64> {
    let probe = match rustix::net::socket(AddressFamily::INET, SocketType::DGRAM, None) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(
                "terra: the box network service cannot make a socket ({e}); \
                 connections to outside the box are refused (the proxy still works)"
            );
            return None;
        }
    };
    match notify::netns_cookie(probe.as_fd()) {
        Ok(cookie) => Some(cookie),
        Err(e) => {
            tracing::warn!(
                "terra: this kernel cannot tell which network namespace a socket lives in \
                 (SO_NETNS_COOKIE, Linux 5.14: {e}); a connect() to outside the box fails \
                 with ECONNREFUSED (the proxy on 127.0.0.1:3128 still works)"
            );
            None
        }
    }
}

/// Whether the "re-aimed a socket connected outside the box" warning was
/// already given (once per run: a workload could repeat the call).
static REAIM_WARNED: AtomicBool = AtomicBool::new(false);

impl Shared {
    /// The errno of a connect() on `sock` when it does not live in the box's
    /// network namespace: a socket the broker connected on the host network
    /// (or one received from outside the box) never gets a new destination,
    /// whatever the address (AF_UNSPEC included: it would make the socket
    /// connectable again). Read on the service's own copy of the socket,
    /// so the workload cannot swap it after the check. None: the socket is
    /// the box's, or the kernel cannot tell and then no socket connected
    /// outside was ever handed over.
    fn off_box_refusal(&self, sock: BorrowedFd<'_>, bytes: &[u8]) -> Option<i32> {
        let home = self.box_netns?;
        match notify::netns_cookie(sock) {
            Ok(cookie) if cookie == home => None,
            Ok(_) => {
                if !REAIM_WARNED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "terra: refused a connect() on a socket connected outside the box: \
                         a connection the broker made cannot be given another destination \
                         (said once per run)"
                    );
                }
                Some(off_box_errno(bytes))
            }
            Err(e) => Some(e.raw_os_error().unwrap_or(libc::EPERM)),
        }
    }

    /// Asks the broker; without one (network none or direct) nothing
    /// leaves the box: ENETUNREACH, as the kernel would say.
    fn ask(&self, q: &Ask, extra: Option<BorrowedFd<'_>>) -> io::Result<(Answer, Option<OwnedFd>)> {
        match &self.broker {
            Some(b) => ask::ask_with(b.as_fd(), q, extra),
            None => Err(io::Error::from_raw_os_error(libc::ENETUNREACH)),
        }
    }

    /// [`Shared::ask`] for a connect: the socket the broker admits comes
    /// first unconnected, and is bound here to a port of its own
    /// ([`bind_own_port`]) before the broker connects it.
    fn ask_connect(&self, q: &Ask) -> io::Result<(Answer, Option<OwnedFd>)> {
        match &self.broker {
            Some(b) => ask::ask_connect(b.as_fd(), q, bind_own_port),
            None => Err(io::Error::from_raw_os_error(libc::ENETUNREACH)),
        }
    }

    /// A connected TCP pair on the box loopback: (the workload's end, the
    /// broker's end).
    fn pair(&self) -> io::Result<(TcpStream, TcpStream)> {
        let relay = self
            .relay
            .as_ref()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOTCONN))?;
        let listener = relay.lock().unwrap_or_else(|p| p.into_inner());
        let mine = TcpStream::connect(listener.local_addr()?)?;
        loop {
            let (theirs, from) = listener.accept()?;
            // Only this service connects to the listener, one at a time;
            // anything else is dropped.
            if from == mine.local_addr()? {
                return Ok((mine, theirs));
            }
        }
    }
}

/// The destination of a connect() as the workload wrote it.
fn parse_sockaddr(b: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes([*b.first()?, *b.get(1)?]);
    let port = u16::from_be_bytes([*b.get(2)?, *b.get(3)?]);
    match i32::from(family) {
        libc::AF_INET if b.len() >= 16 => {
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Some(SocketAddr::new(IpAddr::V4(ip), port))
        }
        // 24 bytes: RFC 2133's sockaddr_in6, without sin6_scope_id.
        libc::AF_INET6 if b.len() >= 24 => {
            let flowinfo = u32::from_be_bytes(b[4..8].try_into().ok()?);
            let octets: [u8; 16] = b[8..24].try_into().ok()?;
            let scope = match b.get(24..28) {
                Some(s) => u32::from_ne_bytes(s.try_into().ok()?),
                None => 0,
            };
            let ip = Ipv6Addr::from(octets);
            Some(SocketAddr::V6(SocketAddrV6::new(ip, port, flowinfo, scope)))
        }
        _ => None,
    }
}

fn is_box_local(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    ip.is_loopback() || ip.is_unspecified()
}

/// The answer to one connect(). The kernel never runs the workload's call
/// itself ("continue"): another thread could rewrite the sockaddr or put
/// another socket at the descriptor number before the kernel reads them
/// again, and an AF_UNIX path reaches past the box's network namespace.
/// So every call ends with the service's own connect: a socket the broker
/// connected and judged replaces the workload's, or the service connects
/// the workload's own socket (its pidfd_getfd copy) to the address it read
/// ([`connect_here`]: box-local inet, an AF_UNIX socket it judged), or the
/// call fails with an errno.
fn on_connect(s: &Shared, n: &Notification) {
    let l = s.listener.as_fd();
    let fail = |errno: i32| {
        let _ = notify::reply_errno(l, n.id, errno);
    };
    let fd = n.args[0] as u32 as i32 as RawFd;
    let len = n.args[2] as u32 as usize;
    if !(2..=128).contains(&len) {
        return fail(libc::EINVAL);
    }
    let Ok(bytes) = notify::read_memory(n.pid, n.args[1], len) else {
        return fail(libc::EFAULT);
    };
    // The notification names the calling thread; its socket is taken from
    // its process.
    let Ok(tgid) = notify::thread_group(s.proc_dir.as_fd(), n.pid) else {
        return fail(libc::ECONNREFUSED);
    };
    // What was read belongs to this call only if the call still waits.
    if !notify::id_valid(l, n.id) {
        return;
    }
    let sock = match notify::take_fd(tgid, fd) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => return fail(libc::EBADF),
        Err(_) => return fail(libc::ECONNREFUSED),
    };
    if let Some(errno) = s.off_box_refusal(sock.as_fd(), &bytes) {
        return fail(errno);
    }
    let domain = match sockopt::socket_domain(&sock) {
        Ok(d) => d,
        Err(_) => return fail(libc::ENOTSOCK),
    };
    let here = || match connect_here(&sock, domain, &bytes) {
        0 => {
            let _ = notify::reply_value(l, n.id, 0);
        }
        errno => fail(errno),
    };
    if domain == AddressFamily::UNIX {
        return match unixconn::connect_unix(s.proc_dir.as_fd(), n.pid, tgid, &bytes, &sock) {
            UnixOutcome::Connected => {
                let _ = notify::reply_value(l, n.id, 0);
            }
            UnixOutcome::Refuse(errno) => fail(errno),
        };
    }
    let Some(to) = parse_sockaddr(&bytes) else {
        return here(); // AF_UNSPEC, a netlink address, a short or foreign one
    };
    let v6_socket = domain == AddressFamily::INET6;
    let same_family =
        (domain == AddressFamily::INET && to.is_ipv4()) || (v6_socket && to.is_ipv6());
    if !same_family {
        return here(); // not inet, or a family mismatch: the kernel's own error
    }
    match sockopt::socket_type(&sock) {
        Ok(SocketType::STREAM) => {}
        Ok(SocketType::DGRAM) => {
            if is_box_local(to.ip()) {
                return here(); // the DNS stub, an in-box UDP service
            }
            return match s.ask(&Ask::Udp { to }, None) {
                Ok((Answer::Local, _)) => here(),
                Ok((Answer::Refused { errno }, _)) => fail(errno),
                _ => fail(libc::ENETUNREACH),
            };
        }
        _ => return here(), // raw sockets need a capability the workload lacks
    }
    if rustix::net::getpeername(&sock).is_ok() {
        return fail(libc::EISCONN);
    }
    let options = options_set(&sock, domain, s.defaults(domain));
    let nonblocking = rustix::fs::fcntl_getfl(&sock)
        .map(|f| f.contains(rustix::fs::OFlags::NONBLOCK))
        .unwrap_or(false);
    let cloexec = notify::fd_is_cloexec(s.proc_dir.as_fd(), n.pid, fd).unwrap_or(true);
    let question = Ask::Connect {
        to,
        v6_socket,
        options,
    };
    match s.ask_connect(&question) {
        Ok((Answer::Connected, Some(conn))) => {
            if s.box_netns.is_none() {
                // Without the namespace check a handed socket could be re-aimed.
                return fail(libc::ECONNREFUSED);
            }
            if nonblocking {
                let _ = rustix::io::ioctl_fionbio(&conn, true);
            }
            hand_over(l, n.id, conn.as_fd(), fd, cloexec);
        }
        Ok((Answer::Relay, _)) => {
            let Ok((workload_end, broker_end)) = s.pair() else {
                return fail(libc::ECONNREFUSED);
            };
            let relayed = s.ask(&Ask::Relay { to }, Some(broker_end.as_fd()));
            drop(broker_end);
            if !matches!(relayed, Ok((Answer::Relaying, _))) {
                return fail(libc::ECONNREFUSED);
            }
            if nonblocking {
                let _ = workload_end.set_nonblocking(true);
            }
            hand_over(l, n.id, workload_end.as_fd(), fd, cloexec);
        }

        Ok((Answer::Local, _)) => here(),
        Ok((Answer::Refused { errno }, _)) => fail(errno),
        Ok(_) => fail(libc::ECONNREFUSED),
        // No broker (gone, or none at all): box-local calls still work,
        // nothing else does.
        Err(_) if is_box_local(to.ip()) => here(),
        Err(e) if s.broker.is_none() => fail(e.raw_os_error().unwrap_or(libc::ENETUNREACH)),
        Err(_) => fail(libc::ECONNREFUSED),
    }
}

/// Local ports a handed socket is bound to: Linux's default ephemeral range.
const OWN_PORTS: std::ops::RangeInclusive<u16> = 32768..=60999;
/// Random ports tried before the hand-off fails.
const OWN_PORT_TRIES: usize = 64;

/// Binds the broker's socket (not yet connected, on the host network) to a
/// random port of its own on the unspecified address. A port bound by
/// number stays the socket's when its connection ends, so bind() on the
/// handed socket fails with EINVAL for as long as the workload holds it,
/// whatever descriptor swapping it tries; a port connect() picks would be
/// given back, and the socket could then take any host port.
fn bind_own_port(sock: BorrowedFd<'_>) -> io::Result<()> {
    let any: IpAddr = match sockopt::socket_domain(sock)? {
        AddressFamily::INET6 => Ipv6Addr::UNSPECIFIED.into(),
        _ => Ipv4Addr::UNSPECIFIED.into(),
    };
    let span = u32::from(OWN_PORTS.end() - OWN_PORTS.start()) + 1;
    for _ in 0..OWN_PORT_TRIES {
        let mut r = [0u8; 4];
        rustix::rand::getrandom(&mut r, rustix::rand::GetRandomFlags::empty())?;
        let port = OWN_PORTS.start() + (u32::from_ne_bytes(r) % span) as u16;
        match rustix::net::bind(sock, &SocketAddr::new(any, port)) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::ADDRINUSE) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrNotAvailable,
        format!("no free local port in {OWN_PORTS:?} after {OWN_PORT_TRIES} tries"),
    ))
}

/// The errno for a connect() on a socket that lives outside the box: an
/// address gets what a connected socket says (EISCONN, and the socket
/// stays connected); AF_UNSPEC, which would disconnect it, and anything
/// else, EPERM.
fn off_box_errno(bytes: &[u8]) -> i32 {
    let family = match bytes {
        [lo, hi, ..] => i32::from(u16::from_ne_bytes([*lo, *hi])),
        _ => libc::AF_UNSPEC,
    };
    if family == libc::AF_INET || family == libc::AF_INET6 {
        libc::EISCONN
    } else {
        libc::EPERM
    }
}

/// Puts `sock` at the workload's descriptor `fd` and lets its connect()
/// return 0. When the kernel cannot add it (a kernel before 5.9 has no
/// SECCOMP_IOCTL_NOTIF_ADDFD), the call fails instead of waiting forever;
/// when the call is gone (ENOENT: the thread was killed), nothing is left to
/// answer.
fn hand_over(l: BorrowedFd<'_>, id: u64, sock: BorrowedFd<'_>, fd: RawFd, cloexec: bool) {
    match notify::add_fd_at(l, id, sock, fd, cloexec) {
        Ok(()) => {
            let _ = notify::reply_value(l, id, 0);
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        Err(_) => {
            let _ = notify::reply_errno(l, id, libc::ECONNREFUSED);
        }
    }
}

/// The workload's connect() run by the service on the workload's own
/// socket (`sock`, a copy of its descriptor) with the bytes the service
/// read: inside the box's network namespace, as the kernel would have run
/// it, with the kernel's own errors. Returns 0 or the errno. Families the
/// workload's seccomp lets it create and that this does not know (none
/// today) fail EAFNOSUPPORT rather than being run by the kernel.
fn connect_here(sock: &OwnedFd, domain: AddressFamily, bytes: &[u8]) -> i32 {
    let (Some(&lo), Some(&hi)) = (bytes.first(), bytes.get(1)) else {
        return libc::EINVAL;
    };
    let family = i32::from(u16::from_ne_bytes([lo, hi]));
    let result = if family == libc::AF_UNSPEC {
        rustix::net::connect_unspec(sock)
    } else if let Some(to) = parse_sockaddr(bytes) {
        rustix::net::connect(sock, &to)
    } else if domain == AddressFamily::NETLINK {
        match netlink_addr(bytes) {
            Some(addr) => rustix::net::connect(sock, &addr),
            None => return libc::EINVAL,
        }
    } else if family == libc::AF_INET || family == libc::AF_INET6 {
        return libc::EINVAL; // shorter than its family's sockaddr
    } else {
        return libc::EAFNOSUPPORT;
    };
    match result {
        Ok(()) => 0,
        Err(e) => e.raw_os_error(),
    }
}

/// A `sockaddr_nl`: family, padding, port id, groups.
fn netlink_addr(b: &[u8]) -> Option<rustix::net::netlink::SocketAddrNetlink> {
    let family = u16::from_ne_bytes([*b.first()?, *b.get(1)?]);
    if i32::from(family) != libc::AF_NETLINK || b.len() < 12 {
        return None;
    }
    let pid = u32::from_ne_bytes(b[4..8].try_into().ok()?);
    let groups = u32::from_ne_bytes(b[8..12].try_into().ok()?);
    Some(rustix::net::netlink::SocketAddrNetlink::new(pid, groups))
}

/// A sendto() with a destination address (the filter passes no other):
/// a UDP datagram to the box's loopback goes ahead; to anywhere else it is
/// refused with a receipt line (the box has no route; the broker writes the
/// line and says ENETUNREACH). On other sockets the kernel decides: a TCP
/// socket ignores the address. MSG_FASTOPEN, which would connect to it, is
/// refused by the workload's filter before the call gets here, and again
/// here, so this never lets the kernel run one.
fn on_sendto(s: &Shared, n: &Notification) {
    let l = s.listener.as_fd();
    let proceed = || {
        let _ = notify::reply_continue(l, n.id);
    };
    if n.args[3] as u32 & libc::MSG_FASTOPEN as u32 != 0 {
        let _ = notify::reply_errno(l, n.id, libc::EOPNOTSUPP);
        return;
    }
    let fd = n.args[0] as u32 as i32 as RawFd;
    let len = n.args[5] as u32 as usize;
    if !(2..=128).contains(&len) {
        return proceed();
    }
    let Ok(bytes) = notify::read_memory(n.pid, n.args[4], len) else {
        return proceed();
    };
    let Some(to) = parse_sockaddr(&bytes) else {
        return proceed();
    };
    if is_box_local(to.ip()) {
        return proceed(); // the DNS stub, in-box services
    }
    let Ok(tgid) = notify::thread_group(s.proc_dir.as_fd(), n.pid) else {
        return proceed();
    };
    if !notify::id_valid(l, n.id) {
        return;
    }
    let Ok(sock) = notify::take_fd(tgid, fd) else {
        return proceed();
    };
    if !matches!(sockopt::socket_type(&sock), Ok(SocketType::DGRAM)) {
        return proceed();
    }
    if s.broker.is_none() {
        return proceed(); // no broker, no receipt: the kernel's own ENETUNREACH
    }
    let errno = match s.ask(&Ask::Udp { to }, None) {
        Ok((Answer::Local, _)) => return proceed(),
        Ok((Answer::Refused { errno }, _)) => errno,
        _ => libc::ENETUNREACH,
    };
    let _ = notify::reply_errno(l, n.id, errno);
}

/// The option values [`options_set`] compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Defaults {
    reuse_addr: Option<bool>,
    keepalive: Option<bool>,
    nodelay: Option<bool>,
    send_buffer: Option<usize>,
    recv_buffer: Option<usize>,
    v6_only: Option<bool>,
}

fn read_options(sock: BorrowedFd<'_>, domain: AddressFamily) -> Defaults {
    Defaults {
        reuse_addr: sockopt::socket_reuseaddr(sock).ok(),
        keepalive: sockopt::socket_keepalive(sock).ok(),
        nodelay: sockopt::tcp_nodelay(sock).ok(),
        send_buffer: sockopt::socket_send_buffer_size(sock).ok(),
        recv_buffer: sockopt::socket_recv_buffer_size(sock).ok(),
        v6_only: if domain == AddressFamily::INET6 {
            sockopt::ipv6_v6only(sock).ok()
        } else {
            None
        },
    }
}

impl Shared {
    /// A fresh stream socket's option values in the box, read once per family.
    fn defaults(&self, domain: AddressFamily) -> Defaults {
        let mut cache = self.defaults.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, d)) = cache.iter().find(|(f, _)| *f == domain) {
            return *d;
        }
        let d = rustix::net::socket(domain, SocketType::STREAM, None)
            .map(|f| read_options(f.as_fd(), domain))
            .unwrap_or_default();
        cache.push((domain, d));
        d
    }
}

/// The options the workload set on `sock` that differ from `fresh`.
fn options_set(sock: &OwnedFd, domain: AddressFamily, fresh: Defaults) -> SocketOptions {
    let mine = read_options(sock.as_fd(), domain);
    fn differ<T: PartialEq + Copy>(mine: Option<T>, fresh: Option<T>) -> Option<T> {
        if mine == fresh {
            None
        } else {
            mine
        }
    }
    SocketOptions {
        reuse_addr: differ(mine.reuse_addr, fresh.reuse_addr),
        keepalive: differ(mine.keepalive, fresh.keepalive),
        nodelay: differ(mine.nodelay, fresh.nodelay),
        // The kernel reports twice what was set; the broker sets half.
        send_buffer: differ(mine.send_buffer, fresh.send_buffer).map(|v| v / 2),
        recv_buffer: differ(mine.recv_buffer, fresh.recv_buffer).map(|v| v / 2),
        linger: match sockopt::socket_linger(sock) {
            Ok(Some(d)) => Some(Some(d.as_secs() as u32)),
            _ => None,
        },
        v6_only: differ(mine.v6_only, fresh.v6_only),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddrs_are_read_as_the_kernel_reads_them() {
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&443u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[192, 0, 2, 1]);
        assert_eq!(parse_sockaddr(&v4), Some("192.0.2.1:443".parse().unwrap()));
        assert_eq!(parse_sockaddr(&v4[..15]), None);
        let mut v6 = vec![0u8; 28];
        v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&22u16.to_be_bytes());
        v6[23] = 1;
        assert_eq!(parse_sockaddr(&v6), Some("[::1]:22".parse().unwrap()));
        let mut unix = vec![0u8; 110];
        unix[..2].copy_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
        assert_eq!(parse_sockaddr(&unix), None);
        assert!(is_box_local(
            "[::ffff:127.0.0.2]:1".parse::<SocketAddr>().unwrap().ip()
        ));
        assert!(is_box_local("0.0.0.0".parse().unwrap()));
        assert!(!is_box_local("10.0.0.1".parse().unwrap()));
    }

    /// A socket bound by number keeps its port when its connection ends, so
    /// the workload can never bind a handed socket to another (a host port).
    #[test]
    fn a_socket_bound_to_its_own_port_cannot_be_bound_again_after_its_connection() {
        for (listen, family) in [
            ("127.0.0.1:0", AddressFamily::INET),
            ("127.0.0.1:0", AddressFamily::INET6),
            ("[::1]:0", AddressFamily::INET6),
        ] {
            let Ok(l) = TcpListener::bind(listen) else {
                continue; // no IPv6 loopback here
            };
            let s = rustix::net::socket(family, SocketType::STREAM, None).unwrap();
            bind_own_port(s.as_fd()).unwrap();
            let mut to = l.local_addr().unwrap();
            if family == AddressFamily::INET6 {
                if let SocketAddr::V4(v4) = to {
                    to = SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port());
                }
            }
            rustix::net::connect(&s, &to).unwrap();
            let mine = rustix::net::getsockname(&s).unwrap();
            let (peer, _) = l.accept().unwrap();
            let any: SocketAddr = match family {
                AddressFamily::INET6 => "[::]:0".parse().unwrap(),
                _ => "127.0.0.1:0".parse().unwrap(),
            };
            assert_eq!(rustix::net::bind(&s, &any), Err(rustix::io::Errno::INVAL));
            // Both sides close: the socket leaves its connection (TCP_CLOSE).
            rustix::net::shutdown(&s, rustix::net::Shutdown::Both).unwrap();
            drop(peer);
            let mut b = [0u8; 1];
            let got = rustix::net::recv(&s, &mut b, rustix::net::RecvFlags::empty()).unwrap();
            assert_eq!(got.0, 0);
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert_eq!(
                rustix::net::bind(&s, &any),
                Err(rustix::io::Errno::INVAL),
                "{listen}"
            );
            assert_eq!(rustix::net::getsockname(&s).unwrap(), mine);
        }
    }

    #[test]
    fn only_options_that_differ_from_a_fresh_socket_are_copied() {
        let s = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
        let fresh = read_options(s.as_fd(), AddressFamily::INET);
        assert_eq!(
            options_set(&s, AddressFamily::INET, fresh),
            SocketOptions::default()
        );
        sockopt::set_tcp_nodelay(&s, true).unwrap();
        sockopt::set_socket_keepalive(&s, true).unwrap();
        sockopt::set_socket_send_buffer_size(&s, 65536).unwrap();
        let o = options_set(&s, AddressFamily::INET, fresh);
        assert_eq!(o.nodelay, Some(true));
        assert_eq!(o.keepalive, Some(true));
        assert_eq!(o.send_buffer, Some(65536));
        assert_eq!(o.reuse_addr, None);
    }
}
