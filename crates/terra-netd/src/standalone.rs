//! The broker fed by its own loopback listeners instead of the box's fd 7
//! channel: the macOS broker.
//!
//! On macOS there is no network namespace to hold a box-side proxy, so the
//! workload reaches the broker directly: `terra run` binds a loopback port
//! on 127.0.0.1 and ::1 ([`bind_loopback`]; the workload's Seatbelt profile
//! may connect to that port and nothing else) and starts
//!
//! ```text
//! terra __sandbox_launcher --spec-fd S --canary C -- terra __network --startup-fd N
//! ```
//!
//! under the broker profile. Descriptor N is the supervisor's end of a Unix
//! socket pair carrying the same startup message as on Linux
//! ([`crate::startup`]), whose [`StartupConfig::listen_fds`] name the
//! inherited listeners and whose `receipt_fd` the network receipt. The broker
//! answers [`crate::READY`] once it serves, accepts on the listeners (one
//! thread, poll(2)), and judges, resolves, connects and relays every
//! connection with the same [`Broker`] as on Linux (proxy path, copy relay),
//! writing the same receipt lines. When the supervisor closes its end (or
//! dies), the broker stops accepting, lets open connections end (bounded by
//! [`crate::DRAIN_LIMIT`]) and exits.
//!
//! Everything here but the adoption of inherited descriptor numbers
//! ([`role_main`]) is exercised on Linux by `tests/broker_standalone.rs`.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use crate::broker::Broker;
use crate::receipt::ReceiptSink;
use crate::resolve::{Resolver, ResolverConfig};
use crate::startup::{read_startup, StartupConfig, StartupError};

/// The broker's option naming its startup descriptor.
pub const STARTUP_FD_FLAG: &str = "--startup-fd";

/// The broker's loopback listeners: one port on 127.0.0.1 and, where the
/// host has IPv6 loopback, the same port on ::1, so no other program can
/// hold that port on either family while the run lasts (the workload's
/// profile admits `localhost:PORT`, which is both).
#[derive(Debug)]
pub struct LoopbackListeners {
    pub v4: TcpListener,
    pub v6: Option<TcpListener>,
    pub port: u16,
}

impl LoopbackListeners {
    /// Every listener (v4 first).
    pub fn all(&self) -> Vec<&TcpListener> {
        std::iter::once(&self.v4).chain(self.v6.as_ref()).collect()
    }

    /// Independent copies of the listeners (what the broker is handed; the
    /// supervisor keeps its own, so the port stays taken even when the
    /// broker is gone).
    pub fn try_clone(&self) -> io::Result<Vec<TcpListener>> {
        self.all().into_iter().map(TcpListener::try_clone).collect()
    }
}

/// Binds 127.0.0.1:0 and the same port on [::1] (retried with a new port
/// when that one is taken on IPv6). A host without IPv6 loopback gets the
/// IPv4 listener only.
pub fn bind_loopback() -> io::Result<LoopbackListeners> {
    let mut last = None;
    for _ in 0..16 {
        let v4 = TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))?;
        let port = v4.local_addr()?.port();
        match TcpListener::bind(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port)) {
            Ok(v6) => {
                return Ok(LoopbackListeners {
                    v4,
                    v6: Some(v6),
                    port,
                })
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
            // No IPv6 loopback here: nobody can listen on [::1] at all.
            Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
                return Ok(LoopbackListeners { v4, v6: None, port })
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AddrInUse)))
}

/// Accepts on `listeners` until `until` reaches end of file (or fails):
/// every connection goes to [`Broker::accept`]. One thread, poll(2) over
/// the listeners and `until`; the listeners are made non-blocking, and each
/// accepted connection blocking again (on macOS it would inherit the
/// listener's O_NONBLOCK).
pub fn serve_listeners(
    broker: &Arc<Broker>,
    listeners: &[TcpListener],
    until: &UnixStream,
) -> io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags};
    for l in listeners {
        l.set_nonblocking(true)?;
    }
    loop {
        let mut fds: Vec<PollFd<'_>> = std::iter::once(until.as_fd())
            .chain(listeners.iter().map(AsFd::as_fd))
            .map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::IN))
            .collect();
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        if ready[0] {
            let mut byte = [0u8; 64];
            match (&*until).read(&mut byte) {
                // End of file: the supervisor is done (or gone).
                Ok(0) => return Ok(()),
                // Nothing more is expected on the channel: ignored.
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return Ok(()),
            }
        }
        for (l, _) in listeners.iter().zip(&ready[1..]).filter(|(_, r)| **r) {
            accept_all(broker, l);
        }
    }
}

/// Accepts every pending connection of a non-blocking listener.
fn accept_all(broker: &Arc<Broker>, listener: &TcpListener) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(false).is_ok() {
                    broker.accept(stream);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e)
                if e.kind() == io::ErrorKind::Interrupted
                    || e.kind() == io::ErrorKind::ConnectionAborted =>
            {
                continue
            }
            Err(e) => {
                // Out of descriptors, say: the connection waits in the
                // backlog; a short pause keeps poll from spinning on it.
                tracing::warn!("terra __network: accept: {e}");
                std::thread::sleep(Duration::from_millis(10));
                return;
            }
        }
    }
}

/// Why the listener-fed broker did not start, or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum StandaloneError {
    /// The command line is not `--startup-fd N`.
    #[error("{0}")]
    Usage(String),
    /// An inherited descriptor is missing or not what it must be.
    #[error("descriptor {fd}: {why}")]
    Descriptor { fd: RawFd, why: String },
    /// The startup message was refused.
    #[error(transparent)]
    Startup(#[from] StartupError),
    /// resolv.conf or hosts could not be read.
    #[error("resolver configuration: {0}")]
    ResolverConfig(#[from] crate::resolvconf::ConfigError),
    /// Serving the listeners failed.
    #[error("serving: {0}")]
    Serve(io::Error),
}

impl StandaloneError {
    /// 1 when serving failed, [`crate::EXIT_REFUSED`] when startup was refused.
    pub fn exit_code(&self) -> u8 {
        match self {
            StandaloneError::Serve(_) => 1,
            _ => crate::EXIT_REFUSED,
        }
    }
}

/// `--startup-fd N`, N above 2.
pub fn parse_args(args: &[OsString]) -> Result<RawFd, StandaloneError> {
    let usage = || {
        StandaloneError::Usage(format!(
            "usage: terra __network {STARTUP_FD_FLAG} N (started by terra run, not by hand)"
        ))
    };
    match args {
        [flag, n] if flag == STARTUP_FD_FLAG => n
            .to_str()
            .and_then(|n| n.parse::<RawFd>().ok())
            .filter(|n| *n > 2)
            .ok_or_else(usage),
        _ => Err(usage()),
    }
}

/// Takes ownership of an inherited descriptor number after checking that
/// it is open. Each number may be adopted once: the caller checks that the
/// numbers it adopts are distinct ([`distinct`]).
pub fn adopt_fd(fd: RawFd) -> Result<OwnedFd, StandaloneError> {
    if fd <= 2 {
        return Err(StandaloneError::Descriptor {
            fd,
            why: "standard input, output and error are not handed over".into(),
        });
    }
    // SAFETY: F_GETFD only reads the descriptor's flags; any number is valid
    // to ask about.
    #[allow(unsafe_code)]
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(StandaloneError::Descriptor {
            fd,
            why: format!("not open: {}", io::Error::last_os_error()),
        });
    }
    // SAFETY: the descriptor is open (checked above); the supervisor handed
    // this number to this process for the broker, and the caller adopts it
    // exactly once (distinct numbers, checked before adopting), before any
    // other code of this process could use it.
    #[allow(unsafe_code)]
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(owned)
}

/// Refuses a list of descriptor numbers with a repeat (adopting one twice
/// would close it twice).
pub fn distinct(fds: &[RawFd]) -> Result<(), StandaloneError> {
    for (i, fd) in fds.iter().enumerate() {
        if fds[..i].contains(fd) {
            return Err(StandaloneError::Descriptor {
                fd: *fd,
                why: "named twice in the broker's startup".into(),
            });
        }
    }
    Ok(())
}

/// A handed-over listener: a TCP socket on a loopback address with no peer
/// (SO_ACCEPTCONN does not exist on macOS; a connected socket has a peer).
fn loopback_listener(fd: RawFd, owned: OwnedFd) -> Result<TcpListener, StandaloneError> {
    let is_stream = matches!(
        rustix::net::sockopt::socket_type(&owned),
        Ok(rustix::net::SocketType::STREAM)
    );
    let unconnected = matches!(
        rustix::net::getpeername(&owned),
        Err(rustix::io::Errno::NOTCONN)
    );
    let listener = TcpListener::from(owned);
    let local = listener.local_addr().ok();
    match local {
        Some(a) if is_stream && unconnected && a.ip().is_loopback() && a.port() != 0 => {
            Ok(listener)
        }
        _ => Err(StandaloneError::Descriptor {
            fd,
            why: format!("not a TCP listener on a loopback address ({local:?})"),
        }),
    }
}

/// The broker's startup and service on an already adopted startup channel:
/// reads the message, adopts the receipt and the listeners it names,
/// builds the broker (with `resolver`, or terra's DNS client on the
/// configured resolver files), answers [`crate::READY`], serves until the
/// channel closes, then drains. What `terra __network` does on macOS.
pub fn serve_startup(
    mut startup: UnixStream,
    resolver: Option<Arc<dyn Resolver>>,
) -> Result<(), StandaloneError> {
    use std::os::fd::AsRawFd;
    let (mir, config) = read_startup(&mut startup)?;
    if config.listen_fds.is_empty() {
        return Err(StartupError::Listeners(
            "no listener descriptors: the listener-fed broker needs the loopback listeners terra run bound",
        )
        .into());
    }
    let mut numbers = vec![startup.as_raw_fd()];
    numbers.extend(config.receipt_fd);
    numbers.extend(&config.listen_fds);
    distinct(&numbers)?;
    let receipts = match config.receipt_fd {
        Some(fd) => ReceiptSink::new(Box::new(std::fs::File::from(adopt_fd(fd)?))),
        None => ReceiptSink::discard(),
    };
    let mut listeners = Vec::new();
    for fd in &config.listen_fds {
        listeners.push(loopback_listener(*fd, adopt_fd(*fd)?)?);
    }
    raise_descriptor_limit();
    let resolver = match resolver {
        Some(r) => r,
        None => dns_resolver(&config)?,
    };
    // The copy relay on every host, so the relay the Mac runs is the one
    // this path's tests run on Linux.
    let broker = Broker::from_mir_with_relay(
        &mir,
        resolver,
        receipts,
        config.limits,
        crate::broker::Relay::Copy,
    );
    // Tell the supervisor we serve; it may be gone already (then the read
    // below ends at once).
    let _ = startup.write_all(crate::READY);
    serve_listeners(&broker, &listeners, &startup).map_err(StandaloneError::Serve)?;
    drop(listeners);
    if !broker.drain(crate::DRAIN_LIMIT) {
        eprintln!(
            "terra __network: {} connection(s) still open {:?} after terra run closed the startup channel; \
             their receipt lines are lost",
            broker.busy(),
            crate::DRAIN_LIMIT
        );
    }
    Ok(())
}

/// terra's DNS client on the resolver files the startup names.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn dns_resolver(config: &StartupConfig) -> Result<Arc<dyn Resolver>, StandaloneError> {
    let rc = ResolverConfig::load(
        config.resolv_conf.as_deref().map(std::path::Path::new),
        config.hosts.as_deref().map(std::path::Path::new),
    )?;
    Ok(Arc::new(crate::resolve::DnsResolver::new(
        rc,
        Duration::from_millis(config.resolve_timeout_ms),
        config.max_resolves,
    )))
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn dns_resolver(_config: &StartupConfig) -> Result<Arc<dyn Resolver>, StandaloneError> {
    Err(StartupError::Listeners("terra's DNS client is built for Linux and macOS only").into())
}

/// Each flow holds two sockets: the soft descriptor limit goes up to the
/// hard one (macOS refuses RLIM_INFINITY; then the soft limit stays).
fn raise_descriptor_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current != l.maximum {
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
}

/// `terra __network --startup-fd N`: the listener-fed broker's entry.
pub fn role_main(args: &[OsString]) -> u8 {
    let run = || -> Result<(), StandaloneError> {
        let fd = parse_args(args)?;
        let startup = UnixStream::from(adopt_fd(fd)?);
        serve_startup(startup, None)
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("terra __network: {e}");
            e.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_the_startup_descriptor_only() {
        let a = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(parse_args(&a(&["--startup-fd", "5"])).unwrap(), 5);
        for bad in [
            &[][..],
            &["--startup-fd"],
            &["--startup-fd", "2"],
            &["--startup-fd", "x"],
            &["--startup-fd", "5", "6"],
            &["--other", "5"],
        ] {
            assert!(parse_args(&a(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn repeated_or_standard_descriptors_are_refused() {
        assert!(distinct(&[5, 6, 7]).is_ok());
        let e = distinct(&[5, 6, 5]).unwrap_err().to_string();
        assert!(e.starts_with("descriptor 5: named twice"), "{e}");
        assert!(adopt_fd(1).is_err());
        assert!(adopt_fd(1_000_000)
            .unwrap_err()
            .to_string()
            .contains("not open"));
    }

    #[test]
    fn loopback_listeners_share_one_port_on_both_families() {
        let l = bind_loopback().unwrap();
        assert_eq!(l.v4.local_addr().unwrap().port(), l.port);
        if let Some(v6) = &l.v6 {
            assert_eq!(
                v6.local_addr().unwrap(),
                "[::1]:0"
                    .parse::<SocketAddr>()
                    .map(|mut a| {
                        a.set_port(l.port);
                        a
                    })
                    .unwrap()
            );
        }
        // The port is taken on 127.0.0.1 for anybody else.
        assert!(TcpListener::bind(("127.0.0.1", l.port)).is_err());
        assert_eq!(l.try_clone().unwrap().len(), l.all().len());
    }

    #[test]
    fn only_a_loopback_tcp_listener_is_taken() {
        let good = TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(loopback_listener(3, OwnedFd::from(good)).is_ok());
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(loopback_listener(3, OwnedFd::from(udp)).is_err());
        // A connected stream on loopback has a peer: refused.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert!(loopback_listener(3, OwnedFd::from(s)).is_err());
        // A listener on every address is not on loopback.
        if let Ok(public) = TcpListener::bind("0.0.0.0:0") {
            assert!(loopback_listener(3, OwnedFd::from(public)).is_err());
        }
    }
}
