//! Network broker benchmark (harness = false), one run:
//! 1. throughput of a 1 GiB transfer through the broker vs direct loopback;
//! 2. median added connect latency (CONNECT through the box service and the
//!    broker vs a direct connect; no DNS: a static resolver);
//! 3. the broker's RSS and threads with 10,000 concurrent idle flows
//!    (`BENCH_FLOWS=N` to change the number).
//!
//! The broker is the real role (`broker_main`: startup message on fd 8, the
//! box channel on fd 7, Landlock and seccomp), in a child process so that its
//! RSS and threads are its own; the box-side service feeding it runs here.
//! `cargo bench -p terra-netd --bench relay` (`BENCH_GIB=N` to change the
//! size). The broker holds two descriptors per flow: the bench raises its
//! descriptor limit as far as it may (the broker inherits it) and measures
//! as many idle flows as fit under it, saying so when that is fewer.

#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use terra_netd::fdpass::broker_socketpair;
use terra_netd::{box_proxy, encode_startup, Limits, StartupConfig};
use terra_policy::{MirBuilder, NetworkMode};

const ROLE_ENV: &str = "TERRA_NETD_BENCH_ROLE";

/// Moves each `(from, to)` descriptor to its fixed number (sources first
/// duplicated above 100 so that placing one cannot clobber another). Runs
/// between fork and exec: only fcntl and dup2.
fn place_fds(fds: &[(i32, i32)]) -> std::io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg};
    let mut high = [0i32; 4];
    for (i, (from, _)) in fds.iter().enumerate() {
        high[i] = fcntl(*from, FcntlArg::F_DUPFD_CLOEXEC(100))?;
    }
    for (i, (_, to)) in fds.iter().enumerate() {
        nix::unistd::dup2(high[i], *to)?;
    }
    Ok(())
}

/// Starts the broker role allowing 127.0.0.1 on `ports`, and the box-side
/// service in front of it; returns the child and the proxy address.
fn start_broker(ports: &[u16], max_flows: usize) -> (Child, SocketAddr) {
    let mut b = MirBuilder::new();
    b.set_network(NetworkMode::Mediated);
    for port in ports {
        b.add_destination("127.0.0.1", *port, false, true).unwrap();
    }
    let mir = b.build().unwrap();
    let (box_end, broker_end) = broker_socketpair().unwrap();
    let (startup_r, startup_w): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
    // The receipt lines go nowhere (fd 9 on /dev/null): writing them is
    // part of the broker's work, keeping them is not the bench's.
    let receipt = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let fds = [
        (broker_end.as_raw_fd(), 7),
        (startup_r.as_raw_fd(), 8),
        (receipt.as_raw_fd(), 9),
    ];
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env(ROLE_ENV, "broker")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    // SAFETY: between fork and exec the closure only calls fcntl and dup2,
    // which are async-signal-safe, on descriptors that stay open in the
    // parent until spawn returns.
    unsafe {
        cmd.pre_exec(move || place_fds(&fds));
    }
    let child = cmd.spawn().unwrap();
    drop((broker_end, startup_r, receipt));
    let config = StartupConfig {
        limits: Limits {
            max_flows,
            max_refusers: 16,
            handshake_timeout_ms: 30_000,
            idle_timeout_ms: 600_000,
            connect_timeout_ms: 5_000,
        },
        ..StartupConfig::default()
    };
    std::fs::File::from(startup_w)
        .write_all(&encode_startup(mir.bytes(), &config))
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = listener.local_addr().unwrap();
    std::thread::spawn(move || box_proxy(listener, box_end));
    (child, proxy)
}

/// Raises this process's descriptor limit as far as it goes (the broker
/// raises its own soft limit to the hard one it inherits).
fn raise_nofile() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let want = 1 << 17;
    if setrlimit(Resource::RLIMIT_NOFILE, want, want).is_err() {
        if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

/// The hold server's body: accepts and holds every connection, silent.
fn hold_role() -> ! {
    raise_nofile();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("{}", l.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    let mut held = Vec::new();
    for s in l.incoming().flatten() {
        held.push(s);
    }
    std::process::exit(0)
}

/// The hold server in its own process, so that its descriptors do not count
/// against this one's limit.
fn hold_server() -> (Child, SocketAddr) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(ROLE_ENV, "hold")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    (child, line.trim().parse().unwrap())
}

/// Flows the broker can hold: each takes two sockets, and the broker's
/// descriptor limit is the hard limit it inherits.
fn flows_that_fit() -> usize {
    use nix::sys::resource::{getrlimit, Resource};
    let hard = getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(_, h)| h);
    (hard.saturating_sub(200) / 2) as usize
}

/// A server that reads to EOF, then answers with the byte count (8 bytes).
fn sink_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut buf = vec![0u8; 256 * 1024];
                    let mut total = 0u64;
                    loop {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => total += n as u64,
                        }
                    }
                    let _ = s.write_all(&total.to_be_bytes());
                })
                .unwrap();
        }
    });
    addr
}

fn connect_via(proxy: SocketAddr, port: u16) -> TcpStream {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_nodelay(true).unwrap();
    write!(
        s,
        "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::with_capacity(64);
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "proxy closed");
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

fn transfer(mut s: TcpStream, bytes: u64) -> Duration {
    let chunk = vec![0x5au8; 256 * 1024];
    let start = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        s.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut got = [0u8; 8];
    s.read_exact(&mut got).unwrap();
    let elapsed = start.elapsed();
    assert_eq!(u64::from_be_bytes(got), bytes, "server got every byte");
    elapsed
}

/// User + system CPU seconds of process `pid` so far.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the comm field.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn status_kib(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap())
        .unwrap_or(0)
}

fn main() {
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("broker") => std::process::exit(terra_netd::broker_main()),
        Ok("hold") => hold_role(),
        _ => {}
    }
    if !std::env::args().any(|a| a == "--bench") {
        // Run by `cargo test --all-targets`: not a benchmark run.
        println!("relay bench: run with `cargo bench -p terra-netd --bench relay`");
        return;
    }
    let gib: u64 = std::env::var("BENCH_GIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let bytes = gib << 30;
    raise_nofile();
    let wanted: usize = std::env::var("BENCH_FLOWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let flows = wanted.min(flows_that_fit());
    if flows < wanted {
        println!(
            "{wanted} idle flows do not fit the descriptor limit (2 per flow in the broker): measuring {flows}"
        );
    }
    let sink = sink_server();
    let (mut holder, hold) = hold_server();
    let (mut child, proxy) = start_broker(&[sink.port(), hold.port()], flows + 100);
    let pid = child.id();
    // The first CONNECT also waits for the broker to serve.
    drop(connect_via(proxy, sink.port()));

    // 1. Throughput: best of 3 each way, alternating.
    let mut direct = Vec::new();
    let mut brokered = Vec::new();
    let mut broker_cpu = 0.0;
    for _ in 0..3 {
        direct.push(transfer(TcpStream::connect(sink).unwrap(), bytes));
        let before = cpu_secs(pid);
        brokered.push(transfer(connect_via(proxy, sink.port()), bytes));
        broker_cpu += cpu_secs(pid) - before;
    }
    let best = |v: &[Duration]| *v.iter().min().unwrap();
    let rate = |d: Duration| bytes as f64 / d.as_secs_f64() / (1u64 << 20) as f64;
    let (d, b) = (best(&direct), best(&brokered));
    println!(
        "throughput ({gib} GiB): direct {:.0} MiB/s, through broker {:.0} MiB/s, ratio {:.1}%",
        rate(d),
        rate(b),
        100.0 * d.as_secs_f64() / b.as_secs_f64()
    );
    println!(
        "broker CPU (user+system) per GiB relayed: {:.2} s",
        broker_cpu / (3 * gib) as f64
    );

    // 2. Connect latency: 300 connects each way, medians.
    let mut direct_lat = Vec::new();
    let mut broker_lat = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        let s = TcpStream::connect(sink).unwrap();
        direct_lat.push(t.elapsed());
        drop(s);
        let t = Instant::now();
        let s = connect_via(proxy, sink.port());
        broker_lat.push(t.elapsed());
        drop(s);
    }
    let (md, mb) = (median(direct_lat), median(broker_lat));
    println!(
        "connect latency median: direct {:.1} us, through broker {:.1} us, added {:.1} us",
        md.as_secs_f64() * 1e6,
        mb.as_secs_f64() * 1e6,
        (mb.saturating_sub(md)).as_secs_f64() * 1e6
    );
    std::thread::sleep(Duration::from_millis(300)); // let those flows wind down
    let rss_before = status_kib(pid, "VmRSS:");

    // 3. Concurrent idle flows (to a server that holds them, silent).
    let threads_before = status_kib(pid, "Threads:");
    let mut idle = Vec::with_capacity(flows);
    let t = Instant::now();
    for i in 0..flows {
        let r = std::panic::catch_unwind(|| connect_via(proxy, hold.port()));
        match r {
            Ok(s) => idle.push(s),
            Err(_) => panic!(
                "flow {i} failed; broker {:?} threads {} fds {:?} {}",
                child.try_wait(),
                status_kib(pid, "Threads:"),
                std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()),
                std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default()
            ),
        }
    }
    let opened = t.elapsed();
    // Negotiation threads end once their flow is relayed; wait (bounded)
    // for them to be gone before reading the numbers.
    let until = Instant::now() + Duration::from_secs(30);
    while status_kib(pid, "Threads:") > threads_before && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let rss_idle = status_kib(pid, "VmRSS:");
    let threads = status_kib(pid, "Threads:");
    let hwm = status_kib(pid, "VmHWM:");
    println!(
        "{flows} idle flows (opened in {:.1} s): broker RSS {} KiB ({} KiB before, {:.0} bytes per flow), \
         peak RSS (VmHWM, whole run) {} KiB, threads {} ({} before)",
        opened.as_secs_f64(),
        rss_idle,
        rss_before,
        (rss_idle.saturating_sub(rss_before) * 1024) as f64 / flows as f64,
        hwm,
        threads,
        threads_before
    );
    // None was closed meanwhile: a read finds nothing yet (not EOF).
    let mut alive = 0;
    for s in &mut idle {
        s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        if matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
            alive += 1;
        }
    }
    println!("{alive} of {flows} idle flows still open");
    drop(idle);
    for c in [&mut child, &mut holder] {
        let _ = c.kill();
        let _ = c.wait();
    }
}
