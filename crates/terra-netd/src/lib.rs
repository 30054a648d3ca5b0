//! The network broker: proxy protocols, destination matching, DNS pinning, relay, receipts.
//!
//! Mediated networking has two halves:
//! - [`box_service`] runs inside the box. It accepts connections on the box's
//!   loopback ([`proxy_listen_addr`]) and passes each socket, unread, to the
//!   broker over the fd 7 socketpair. It parses and connects nothing.
//! - [`broker_main`] is the `__network` role on the host network. It reads its
//!   startup message from fd 8, confines itself (Landlock, seccomp), then
//!   judges every passed connection against the destination contract
//!   ([`matcher::judge`]), resolves granted names itself, connects to an
//!   address it judged, relays, and writes one receipt line per attempt.
//!
//! There is never a fallback to direct networking: when the broker is gone,
//! the box service closes every new connection.
#![deny(unsafe_code)]

pub mod address;
#[cfg(target_os = "linux")]
pub mod ask;
#[cfg(target_os = "linux")]
pub mod boxside;
pub mod broker;
#[cfg(target_os = "linux")]
pub mod confine;
pub mod copy_relay;
pub mod dns;
#[cfg(target_os = "linux")]
pub mod fdpass;
#[cfg(target_os = "linux")]
pub mod handoff;
pub mod matcher;
#[cfg(target_os = "linux")]
mod pins;
#[cfg(target_os = "linux")]
mod pool;
pub mod proxy;
pub mod receipt;
#[cfg(target_os = "linux")]
pub mod refused;
#[cfg(target_os = "linux")]
pub mod relay;
pub mod resolvconf;
pub mod resolve;
#[cfg(unix)]
pub mod standalone;
pub mod startup;
pub mod stub;
pub mod tls;
#[cfg(target_os = "linux")]
pub mod unixconn;

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::ExitCode;
pub use terra_policy::EXIT_REFUSED;
/// The mediator id of terra's built-in broker, as plans bind it.
pub const MEDIATOR: &str = "terra-netd/1";

pub use address::is_private;
#[cfg(target_os = "linux")]
pub use boxside::{box_proxy, box_service};
pub use broker::{Broker, Limits, Relay};
pub use matcher::{judge, HostPattern, Pattern, Reason, Request, Verdict};
pub use receipt::{Attempt, MemoryReceipt, ReceiptSink};
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub use resolve::DnsResolver;
pub use resolve::{
    resolver_files, resolver_sources, ResolveError, ResolveErrorKind, Resolver, ResolverConfig,
    StaticResolver,
};
pub use startup::{encode_startup, StartupConfig};

/// Descriptor of the box<->broker socketpair in the broker role.
pub const BROKER_CHANNEL_FD: i32 = 7;
/// Descriptor of the supervisor->broker startup channel in the broker role.
pub const STARTUP_FD: i32 = 8;
/// Descriptor the network receipt is handed over on (opened by the
/// supervisor, write-only, O_APPEND), unless the startup config names another.
pub const RECEIPT_FD: i32 = 9;
/// What the broker writes back on fd 8 once it has validated its startup
/// message, adopted its descriptors and confined itself, just before it
/// serves. Only when fd 8 is a socket (the supervisor's); on a pipe the write
/// fails and is ignored. A supervisor that reads end of file instead knows the
/// broker did not start.
pub const READY: &[u8] = b"ready\n";

/// Where the box-side proxy listens: the box's own loopback (its own network
/// namespace, so the fixed port cannot clash with anything on the host).
pub fn proxy_listen_addr() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 3128))
}

/// The proxy environment of the workload. HTTP, HTTPS and ALL use the
/// `http://` scheme (HTTP CONNECT), which every proxy-aware client
/// understands; SOCKS5 is served on the same port (protocol detected by the
/// first byte) for clients configured explicitly with `socks5h://`. NO_PROXY
/// is empty: nothing bypasses the broker (and the box has no other route).
pub fn proxy_env(addr: SocketAddr) -> Vec<(String, String)> {
    let url = format!("http://{addr}");
    let mut env = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.push((name.to_owned(), url.clone()));
        env.push((name.to_ascii_lowercase(), url.clone()));
    }
    env.push(("NO_PROXY".to_owned(), String::new()));
    env.push(("no_proxy".to_owned(), String::new()));
    env
}

/// The broker role's body (what `terra __network` runs once
/// `enter_confined_role` built its root): startup message
/// from fd 8, confinement, then serve fd 7 until the box closes it.
/// Returns 0 when the box closed the channel, 125 when startup was refused,
/// 1 when serving failed ([`BrokerError::exit_code`]).
#[cfg(target_os = "linux")]
pub fn broker_main() -> i32 {
    match broker_run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("terra __network: {e}");
            e.exit_code()
        }
    }
}

/// Why the broker role did not start, or stopped serving.
#[cfg(target_os = "linux")]
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// A fixed descriptor (startup channel, box channel) is not open.
    #[error(transparent)]
    Descriptor(#[from] fdpass::NotOpen),
    /// The startup message was refused.
    #[error(transparent)]
    Startup(#[from] startup::StartupError),
    /// The startup config names a receipt descriptor that is not open.
    #[error("receipt: {0}")]
    Receipt(fdpass::NotOpen),
    /// resolv.conf or hosts could not be read.
    #[error("resolver configuration: {0}")]
    ResolverConfig(#[from] resolvconf::ConfigError),
    /// Landlock or seccomp could not be applied.
    #[error(transparent)]
    Confine(#[from] confine::ConfineError),
    /// Receiving from the box channel failed.
    #[error("serving: {0}")]
    Serve(std::io::Error),
}

#[cfg(target_os = "linux")]
impl BrokerError {
    /// The role's exit status: 1 when serving failed, [`EXIT_REFUSED`]
    /// (startup refused) otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            BrokerError::Serve(_) => 1,
            _ => i32::from(EXIT_REFUSED),
        }
    }
}

#[cfg(target_os = "linux")]
fn broker_run() -> Result<(), BrokerError> {
    use std::sync::Arc;
    let startup_fd = fdpass::adopt_fd(STARTUP_FD)?;
    let mut startup_file = std::fs::File::from(startup_fd);
    let (mir, config) = startup::read_startup(&mut startup_file)?;
    if !config.listen_fds.is_empty() {
        return Err(BrokerError::Startup(startup::StartupError::Listeners(
            "listener descriptors were given, but the Linux broker takes its connections from the box over fd 7",
        )));
    }
    let receipt_fd = config.receipt_fd.unwrap_or(RECEIPT_FD);
    let receipts = match fdpass::adopt_fd(receipt_fd) {
        Ok(fd) => ReceiptSink::new(Box::new(std::fs::File::from(fd))),
        Err(e) if config.receipt_fd.is_some() => return Err(BrokerError::Receipt(e)),
        Err(_) => ReceiptSink::discard(),
    };
    let channel = fdpass::adopt_fd(BROKER_CHANNEL_FD)?;
    // Each flow holds two sockets and two pipes: use the whole hard limit.
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    // The resolver configuration is read once, now: once confined, the
    // broker reads no file at all.
    let resolver_config = ResolverConfig::load(
        config.resolv_conf.as_deref().map(std::path::Path::new),
        config.hosts.as_deref().map(std::path::Path::new),
    )?;
    let confinement = confine::apply_broker()?;
    tracing::debug!("terra __network: landlock {}", confinement.landlock);
    let resolver = Arc::new(DnsResolver::new(
        resolver_config,
        std::time::Duration::from_millis(config.resolve_timeout_ms),
        config.max_resolves,
    ));
    let broker = Broker::from_mir(&mir, resolver, receipts, config.limits);
    // Tell the supervisor we serve (MSG_NOSIGNAL: it may be gone already).
    let _ = rustix::net::send(&startup_file, READY, rustix::net::SendFlags::NOSIGNAL);
    drop(startup_file);
    broker.serve_channel(&channel).map_err(BrokerError::Serve)?;
    // The box is gone (it closed the channel): let the connections still
    // open end and write their receipt lines, bounded by DRAIN_LIMIT.
    if !broker.drain(DRAIN_LIMIT) {
        eprintln!(
            "terra __network: {} connection(s) still open {DRAIN_LIMIT:?} after the box closed its channel; \
             their receipt lines are lost",
            broker.busy()
        );
    }
    Ok(())
}

/// The broker's program, for `terra run --dry-run`: what the box side does,
/// the descriptors, the confinement ([`confine::describe`], written from the
/// tables the filters are built from) and the default limits.
#[cfg(target_os = "linux")]
pub fn describe() -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let addr = proxy_listen_addr();
    let config = StartupConfig::default();
    let _ = writeln!(
        s,
        "box side: a service in the box accepts on {addr} (HTTP CONNECT, plain HTTP, SOCKS5) and passes \
         each socket, unread, over fd {BROKER_CHANNEL_FD} (SCM_RIGHTS)"
    );
    let env = proxy_env(addr);
    let set: Vec<&str> = env
        .iter()
        .filter(|(k, v)| !v.is_empty() && k.chars().all(|c| !c.is_ascii_lowercase()))
        .map(|(k, _)| k.as_str())
        .collect();
    let empty: Vec<&str> = env
        .iter()
        .filter(|(k, v)| v.is_empty() && k.chars().all(|c| !c.is_ascii_lowercase()))
        .map(|(k, _)| k.as_str())
        .collect();
    let _ = writeln!(
        s,
        "workload environment: {} (and lowercase) = http://{addr}; {} empty",
        set.join(", "),
        empty.join(", ")
    );
    // The role itself (namespaces, root, capabilities) is terra-sandbox's
    // `spawn_confined_role`, which the supervisor calls with these files.
    let _ = writeln!(
        s,
        "started by the supervisor before the box: namespaces user, pid, mount, ipc, uts; host network"
    );
    let files: Vec<String> = resolver_files()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let _ = writeln!(
        s,
        "root tmpfs, read-only, holding only (read-only): {}",
        files.join(" ")
    );
    let _ = writeln!(
        s,
        "descriptors: 0,1 /dev/null; 2 terra's stderr; {BROKER_CHANNEL_FD} box<->broker socketpair; \
         {STARTUP_FD} startup channel (canonical MIR, re-validated by the broker; it confirms once it \
         serves); {RECEIPT_FD} network receipt <state-dir>/network.jsonl (0600, append)"
    );
    let _ = writeln!(
        s,
        "environment cleared; all capabilities dropped; no_new_privs"
    );
    s.push_str(&confine::describe());
    let l = &config.limits;
    let _ = writeln!(
        s,
        "limits: {} flows, {} refusers, handshake {} ms, idle {} ms, connect {} ms, resolve {} ms, {} lookups in flight",
        l.max_flows,
        l.max_refusers,
        l.handshake_timeout_ms,
        l.idle_timeout_ms,
        l.connect_timeout_ms,
        config.resolve_timeout_ms,
        config.max_resolves
    );
    let _ = writeln!(
        s,
        "failure: the run is refused (exit {EXIT_REFUSED}) when the broker does not start; if it ends \
         mid-run, connections fail (no restart, no fallback)"
    );
    s
}

/// How long the broker waits, once the box closed its channel, for open
/// connections to end and write their receipt lines before it exits.
pub const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_millis(1500);

/// Entry point of the hidden `terra __network` role on Linux: the broker,
/// exec'd by the supervisor (`spawn_confined_role`) as PID 1 of its own
/// namespaces; its input is on descriptors 3 (its root), 7, 8 and 9.
/// `enter_role` builds the role's root, drops its capabilities and sets
/// no_new_privs (`terra_sandbox::linux::enter_confined_role` in terra: the
/// binary joins the two crates, this one does not know the sandbox).
#[cfg(target_os = "linux")]
pub fn role_main<E: std::fmt::Display>(
    args: Vec<OsString>,
    enter_role: fn() -> Result<(), E>,
) -> ExitCode {
    if !args.is_empty() {
        eprintln!("terra __network: takes no arguments (its input is fd 8)");
        return ExitCode::from(EXIT_REFUSED);
    }
    // Exec'd by the supervisor inside its namespaces: first its root,
    // no capabilities, no_new_privs, then the broker.
    if let Err(e) = enter_role() {
        eprintln!("terra __network: {e}");
        return ExitCode::from(EXIT_REFUSED);
    }
    // The broker's own seccomp allowlist and Landlock are applied in
    // `broker_run` once it has read its startup message (confine.rs).
    ExitCode::from(broker_main().clamp(0, 255) as u8)
}

/// Entry point of the hidden `terra __network` role on macOS: the
/// listener-fed broker ([`standalone`]: `terra __network --startup-fd N`,
/// exec'd by the Seatbelt launcher under the broker profile).
#[cfg(target_os = "macos")]
pub fn role_main(args: Vec<OsString>) -> ExitCode {
    ExitCode::from(standalone::role_main(&args))
}

/// Entry point of the hidden `terra __network` role: Linux and macOS only.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn role_main(args: Vec<OsString>) -> ExitCode {
    if !args.is_empty() {
        eprintln!("terra __network: takes no arguments (its input is fd 8)");
        return ExitCode::from(EXIT_REFUSED);
    }
    eprintln!("terra __network: only on Linux and macOS");
    ExitCode::from(EXIT_REFUSED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_points_at_the_box_proxy() {
        let env = proxy_env(proxy_listen_addr());
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        for k in [
            "HTTP_PROXY",
            "http_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
        ] {
            assert_eq!(get(k), Some("http://127.0.0.1:3128"), "{k}");
        }
        assert_eq!(get("NO_PROXY"), Some(""));
        assert_eq!(get("no_proxy"), Some(""));
        assert_eq!(env.len(), 8);
        assert!(proxy_listen_addr().ip().is_loopback());
    }
}
