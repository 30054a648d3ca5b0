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
pub mod broker;
#[cfg(target_os = "linux")]
pub mod confine;
pub mod dns;
#[cfg(target_os = "linux")]
pub mod fdpass;
pub mod matcher;
pub mod proxy;
pub mod receipt;
pub mod resolvconf;
pub mod resolve;
pub mod startup;
pub mod tls;

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::os::fd::OwnedFd;
use std::process::ExitCode;

pub use address::is_private;
pub use broker::{Broker, Limits};
pub use matcher::{judge, HostPattern, Pattern, Reason, Request, Verdict};
pub use receipt::{Attempt, MemoryReceipt, ReceiptSink};
#[cfg(target_os = "linux")]
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

/// The box-side proxy (a `terra_sandbox::linux::BoxService`): accepts on the
/// in-box loopback and hands each socket to the broker with SCM_RIGHTS. It
/// never reads, parses or connects anything. If the broker is gone, each new
/// connection is closed.
#[cfg(target_os = "linux")]
pub fn box_service(listener: TcpListener, broker: OwnedFd) -> ! {
    let mut broker_gone = false;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = fdpass::send_stream(&broker, &stream) {
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

/// The broker role's body (what `spawn_confined_role` runs): startup message
/// from fd 8, confinement, then serve fd 7 until the box closes it.
/// Returns 0 when the box closed the channel, 125 when startup was refused,
/// 1 when serving failed.
#[cfg(target_os = "linux")]
pub fn broker_main() -> i32 {
    match broker_run() {
        Ok(()) => 0,
        Err((code, msg)) => {
            eprintln!("terra __network: {msg}");
            code
        }
    }
}

#[cfg(target_os = "linux")]
fn broker_run() -> Result<(), (i32, String)> {
    use std::sync::Arc;
    let refuse = |m: String| (125, m);
    let startup_fd = fdpass::adopt_fd(STARTUP_FD).map_err(|e| refuse(e.to_string()))?;
    let mut startup_file = std::fs::File::from(startup_fd);
    let (mir, config) =
        startup::read_startup(&mut startup_file).map_err(|e| refuse(e.to_string()))?;
    let receipt_fd = config.receipt_fd.unwrap_or(RECEIPT_FD);
    let receipts = match fdpass::adopt_fd(receipt_fd) {
        Ok(fd) => ReceiptSink::new(Box::new(std::fs::File::from(fd))),
        Err(e) if config.receipt_fd.is_some() => return Err(refuse(format!("receipt: {e}"))),
        Err(_) => ReceiptSink::discard(),
    };
    let channel = fdpass::adopt_fd(BROKER_CHANNEL_FD).map_err(|e| refuse(e.to_string()))?;
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
    )
    .map_err(|e| refuse(format!("resolver configuration: {e}")))?;
    let confinement = confine::apply(&[]).map_err(refuse)?;
    tracing::debug!("terra __network: landlock {}", confinement.landlock);
    let resolver = Arc::new(DnsResolver::new(
        resolver_config,
        std::time::Duration::from_millis(config.resolve_timeout_ms),
        config.max_resolves,
    ));
    let broker = Broker::from_mir(&mir, resolver, receipts, config.limits);
    // Tell the supervisor we serve (MSG_NOSIGNAL: it may be gone already).
    let _ = nix::sys::socket::send(
        std::os::fd::AsRawFd::as_raw_fd(&startup_file),
        READY,
        nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
    );
    drop(startup_file);
    broker
        .serve_channel(&channel)
        .map_err(|e| (1, format!("serving: {e}")))?;
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

/// How long the broker waits, once the box closed its channel, for open
/// connections to end and write their receipt lines before it exits.
pub const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_millis(1500);

/// Entry point of the hidden `terra __network` role (the same body as
/// [`broker_main`], for a launcher that starts the role by exec).
pub fn role_main(args: Vec<OsString>) -> ExitCode {
    if !args.is_empty() {
        eprintln!("terra __network: takes no arguments (its input is fd 8)");
        return ExitCode::from(125);
    }
    #[cfg(target_os = "linux")]
    {
        ExitCode::from(broker_main().clamp(0, 255) as u8)
    }
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("terra __network: only on Linux");
        ExitCode::from(125)
    }
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
