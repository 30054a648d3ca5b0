//! The broker as a real process: `broker_main` with its fixed descriptors
//! (7 channel, 8 startup, 9 receipt), its own seccomp and Landlock, fed by the
//! real box service; then killed, after which nothing reaches the network.
//!
//! The child is this test binary re-executed with an environment variable
//! that selects its role (no launcher needed). The binary has its own
//! `main` (`harness = false` in Cargo.toml): a role is not a test, so it is
//! not listed as one that passes; the tests below run through [`TESTS`].
#![allow(unsafe_code)]

mod common;
#[path = "common/dns_server.rs"]
mod dns_server;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use common::*;
use terra_netd::fdpass::broker_socketpair;
use terra_netd::{box_proxy, encode_startup, Limits, StartupConfig};
use terra_policy::{MirBuilder, NetworkMode};

const ROLE_ENV: &str = "TERRA_NETD_TEST_ROLE";
/// The parent's DNS server address, for the confine child.
const DNS_ENV: &str = "TERRA_NETD_TEST_DNS";

/// The tests of this binary, by name.
const TESTS: &[(&str, fn())] = &[
    ("confinement_holds_in_a_child", confinement_holds_in_a_child),
    (
        "broker_process_serves_then_dies_without_fallback",
        broker_process_serves_then_dies_without_fallback,
    ),
    (
        "broker_refuses_a_non_mediated_startup",
        broker_refuses_a_non_mediated_startup,
    ),
];

/// A child runs its role; otherwise the tests run (those whose name contains
/// a non-flag argument, all without one; `--list` lists them, `--ignored`
/// runs none: there are no ignored tests).
fn main() -> ExitCode {
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("broker") => std::process::exit(terra_netd::broker_main()),
        Ok("confine") => role_confine(),
        Ok(other) => {
            eprintln!("{ROLE_ENV}={other}: no such role");
            return ExitCode::from(2);
        }
        Err(_) => {}
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filters: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected: Vec<&(&str, fn())> = TESTS
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f)))
        .collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in &selected {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--ignored") {
        println!("test result: ok. 0 passed; 0 failed (no ignored tests)");
        return ExitCode::SUCCESS;
    }
    println!("\nrunning {} tests", selected.len());
    let mut failed = Vec::new();
    for (name, test) in &selected {
        let ok = std::panic::catch_unwind(*test).is_ok();
        println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
        if !ok {
            failed.push(*name);
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        selected.len() - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("failures: {failed:?}");
        ExitCode::FAILURE
    }
}

/// The escapes a confined child attempts (`TERRA_NETD_TEST_ESCAPE`): each
/// is off the broker's allowlist, so the child must die by SIGSYS.
const ESCAPES: &[&str] = &[
    "unix-socket",
    "netlink-socket",
    "tcp-bind",
    "udp-bind",
    "exec",
    "unshare",
    "x32-bind",
];
const ESCAPE_ENV: &str = "TERRA_NETD_TEST_ESCAPE";

fn escape(name: &str) {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    let _ = match name {
        "unix-socket" => socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )
        .map(drop)
        .is_ok(),
        "netlink-socket" => socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::empty(),
            None,
        )
        .map(drop)
        .is_ok(),
        "tcp-bind" => TcpListener::bind("127.0.0.1:0").is_ok(),
        "udp-bind" => std::net::UdpSocket::bind("0.0.0.0:0").is_ok(),
        "exec" => Command::new("/bin/true").status().is_ok(),
        "unshare" => nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER).is_ok(),
        // SAFETY: an x32 bind(-1, NULL, 0) on no descriptor: it fails either
        // way and touches no memory of this process.
        "x32-bind" => (unsafe { libc::syscall(0x4000_0000 | libc::SYS_bind, -1, 0, 0) }) == 0,
        other => panic!("no escape {other}"),
    };
    println!("ESCAPE-SURVIVED {name}");
    std::process::exit(0);
}

/// In the child: apply the broker's confinement, then probe it: one escape
/// (which must kill it), or what the broker does (which must work).
fn role_confine() -> ! {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // The parent's DNS server (it binds and accepts; the confined broker
    // cannot, and seccomp covers every thread of this process).
    let dns_addr: std::net::SocketAddr = std::env::var(DNS_ENV).unwrap().parse().unwrap();
    let mut rc = terra_netd::ResolverConfig::parse("options timeout:5 attempts:1", "");
    rc.nameservers = vec![dns_addr];
    let resolver = terra_netd::DnsResolver::new(rc, Duration::from_secs(10), 4);
    // As the broker does: nothing of the filesystem is granted.
    let c = terra_netd::confine::apply(&[]).unwrap();
    if let Ok(name) = std::env::var(ESCAPE_ENV) {
        escape(&name);
    }
    let mut failures = Vec::new();
    let mut check = |ok: bool, what: &str| {
        if !ok {
            failures.push(what.to_owned());
        }
    };
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    check(
        socket(
            AddressFamily::Inet6,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )
        .is_ok(),
        "AF_INET6 socket allowed",
    );
    check(
        std::net::TcpStream::connect(addr).is_ok(),
        "connect to a loopback listener allowed",
    );
    check(
        std::thread::spawn(|| 7).join().ok() == Some(7),
        "threads can be started",
    );
    // No file opens: EACCES from seccomp (glibc's malloc may try /sys and
    // /proc when it adds or shrinks an arena; it has defaults), and Landlock
    // grants nothing besides.
    for (path, write) in [
        ("/etc/passwd", false),
        ("/tmp/terra-netd-landlock-probe", true),
    ] {
        let r = if write {
            std::fs::write(path, b"x")
        } else {
            std::fs::read(path).map(drop)
        };
        check(
            matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EACCES)),
            &format!("opening {path} fails with EACCES (got {r:?})"),
        );
    }
    // The broker's resolver works confined: UDP with connect() and no
    // bind(), and TCP after a truncated answer.
    use terra_netd::Resolver;
    for name in ["v4.terra-test.example", "big.terra-test.example"] {
        match resolver.resolve(name) {
            Ok(addrs) => check(
                addrs == ["127.0.0.1".parse::<std::net::IpAddr>().unwrap()],
                &format!("{name} resolves to 127.0.0.1 while confined"),
            ),
            Err(e) => check(false, &format!("{name} resolves while confined: {e}")),
        }
    }
    if failures.is_empty() {
        println!("CONFINE-OK landlock={}", c.landlock);
        std::process::exit(0);
    }
    println!("CONFINE-FAILED {failures:?}");
    std::process::exit(3);
}

/// Moves each `(from, to)` descriptor to its fixed number. Every source is
/// first duplicated above 100 so that placing one cannot clobber another.
/// Runs between fork and exec: only fcntl and dup2 (async-signal-safe; the
/// nix wrappers allocate nothing).
fn place_fds(fds: &[(i32, i32)]) -> std::io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg};
    let mut high = [0i32; 8];
    for (i, (from, _)) in fds.iter().enumerate() {
        high[i] = fcntl(*from, FcntlArg::F_DUPFD_CLOEXEC(100))?;
    }
    for (i, (_, to)) in fds.iter().enumerate() {
        // dup2 clears close-on-exec on the target.
        nix::unistd::dup2(high[i], *to)?;
    }
    Ok(())
}

fn child(role: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env(ROLE_ENV, role).stdin(Stdio::null());
    cmd
}

fn confinement_holds_in_a_child() {
    let dns = dns_server::DnsServer::start("127.0.0.1:0".parse().unwrap(), dns_server::test_zone());
    let out = child("confine")
        .env(DNS_ENV, dns.addr.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("CONFINE-OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each escape kills a confined child (SIGSYS), the real escape and
    // not an error path: the same child without an escape runs (above).
    for name in ESCAPES {
        use std::os::unix::process::ExitStatusExt;
        let out = child("confine")
            .env(DNS_ENV, dns.addr.to_string())
            .env(ESCAPE_ENV, name)
            .output()
            .unwrap();
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGSYS),
            "{name}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let described = terra_netd::confine::describe();
    assert!(
        described.contains("socket (family AF_INET; family AF_INET6)"),
        "{described}"
    );
    // The confined child asked over UDP, and over TCP after the truncated answer.
    assert!(
        dns.asked("v4.terra-test.example", "udp"),
        "{:?}",
        dns.seen()
    );
    assert!(
        dns.asked("big.terra-test.example", "tcp"),
        "{:?}",
        dns.seen()
    );
}

fn broker_process_serves_then_dies_without_fallback() {
    let server = hello_server();
    let port = server.addr.port();
    let mut b = MirBuilder::new();
    b.set_network(NetworkMode::Mediated);
    b.add_destination("127.0.0.1", port, false, true).unwrap();
    let mir = b.build().unwrap();

    let (box_end, broker_end) = broker_socketpair().unwrap();
    let (startup_r, startup_w): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let receipt_path = dir.path().join("network.jsonl");
    let receipt = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&receipt_path)
        .unwrap();
    let fds = [
        (broker_end.as_raw_fd(), 7),
        (startup_r.as_raw_fd(), 8),
        (receipt.as_raw_fd(), 9),
    ];
    let mut cmd = child("broker");
    cmd.stdout(Stdio::null());
    // SAFETY: between fork and exec the closure only calls fcntl and dup2,
    // which are async-signal-safe, on descriptors that stay open in the parent
    // until after spawn returns.
    unsafe {
        cmd.pre_exec(move || place_fds(&fds));
    }
    let mut broker = cmd.spawn().unwrap();
    drop((broker_end, startup_r, receipt));
    let mut w = std::fs::File::from(startup_w);
    let config = StartupConfig {
        limits: Limits {
            max_flows: 8,
            max_refusers: 2,
            handshake_timeout_ms: 5_000,
            idle_timeout_ms: 10_000,
            connect_timeout_ms: 5_000,
        },
        ..StartupConfig::default()
    };
    w.write_all(&encode_startup(mir.bytes(), &config)).unwrap();
    drop(w);

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = listener.local_addr().unwrap();
    std::thread::spawn(move || box_proxy(listener, box_end));

    let url = format!("http://127.0.0.1:{port}/via-role");
    let (code, body) = curl(&["-x", &format!("http://{proxy}"), &url]);
    assert_eq!((code, body.as_str()), (0, "hello /via-role\n"));
    let (_, body) = curl(&["-x", &format!("http://{proxy}"), "http://127.0.0.1:1/"]);
    assert!(body.contains("no-destination"), "{body}");

    // The receipt file got one line per attempt.
    let mut lines = Vec::new();
    for _ in 0..500 {
        let mut text = String::new();
        std::fs::File::open(&receipt_path)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        lines = text.lines().map(str::to_owned).collect::<Vec<_>>();
        if lines.len() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(lines.len(), 2, "{lines:?}");
    let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(first["verdict"], "allowed");
    assert_eq!(first["address"], format!("127.0.0.1:{port}"));

    // Kill the broker: later connections fail, and nothing falls back.
    broker.kill().unwrap();
    let status = broker.wait().unwrap();
    assert!(!status.success());
    for _ in 0..3 {
        let (code, body) = curl(&["-x", &format!("http://{proxy}"), &url]);
        assert_ne!(code, 0, "{body}");
    }
    let (code, _) = curl(&["--socks5-hostname", &proxy.to_string(), &url]);
    assert_ne!(code, 0);
    assert_eq!(server.hits(), 1);
}

fn broker_refuses_a_non_mediated_startup() {
    let (_box_end, broker_end) = broker_socketpair().unwrap();
    let (startup_r, startup_w): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
    let fds = [(broker_end.as_raw_fd(), 7), (startup_r.as_raw_fd(), 8)];
    let mut cmd = child("broker");
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    // SAFETY: as above, only fcntl and dup2 between fork and exec.
    unsafe {
        cmd.pre_exec(move || place_fds(&fds));
    }
    let broker = cmd.spawn().unwrap();
    drop((broker_end, startup_r));
    let direct = {
        let mut b = MirBuilder::new();
        b.set_network(NetworkMode::Direct);
        b.build().unwrap()
    };
    let mut w = std::fs::File::from(startup_w);
    w.write_all(&encode_startup(direct.bytes(), &StartupConfig::default()))
        .unwrap();
    drop(w);
    let out = broker.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("mediated"));
}
