//! Network broker benchmark (harness = false), one run:
//! 1. throughput of a 1 GiB transfer through the broker vs direct loopback;
//! 2. median added connect latency (CONNECT through the box service and the
//!    broker vs a direct connect; no DNS: a static resolver);
//! 3. the broker's peak RSS with 1,000 concurrent idle flows.
//!
//! The broker (and the box-side service feeding it over the fd-passing
//! socketpair) runs in a child process, so its RSS is its own.
//! `cargo bench -p terra-netd --bench relay` (`BENCH_GIB=N` to change the size).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use terra_netd::fdpass::broker_socketpair;
use terra_netd::{box_proxy, Broker, Limits, Pattern, ReceiptSink, StaticResolver};
use terra_policy::NetworkMode;

const ROLE_ENV: &str = "TERRA_NETD_BENCH_ROLE";

fn child_broker(port: u16) -> ! {
    let resolver = Arc::new(StaticResolver::new([(
        "sink.bench",
        vec!["127.0.0.1".parse().unwrap()],
    )]));
    let patterns = vec![Pattern::parse("sink.bench", port, false, true).unwrap()];
    let broker = Broker::new(
        NetworkMode::Mediated,
        patterns,
        resolver,
        ReceiptSink::discard(),
        Limits {
            max_flows: 1100,
            max_refusers: 16,
            handshake_timeout_ms: 30_000,
            idle_timeout_ms: 600_000,
            connect_timeout_ms: 5_000,
        },
    );
    let (box_end, broker_end) = broker_socketpair().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("PROXY {}", listener.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    std::thread::spawn(move || box_proxy(listener, box_end));
    let _ = broker.serve_channel(&broker_end);
    std::process::exit(0)
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
        "CONNECT sink.bench:{port} HTTP/1.1\r\nHost: sink.bench:{port}\r\n\r\n"
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
    if let Ok(port) = std::env::var(ROLE_ENV) {
        child_broker(port.parse().unwrap());
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
    let sink = sink_server();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(ROLE_ENV, sink.port().to_string())
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let proxy: SocketAddr = line.trim().strip_prefix("PROXY ").unwrap().parse().unwrap();
    let pid = child.id();

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

    // 3. 1,000 concurrent idle flows.
    let mut flows = Vec::new();
    for _ in 0..1000 {
        flows.push(connect_via(proxy, sink.port()));
    }
    std::thread::sleep(Duration::from_millis(500));
    let rss_idle = status_kib(pid, "VmRSS:");
    let threads = status_kib(pid, "Threads:");
    let hwm = status_kib(pid, "VmHWM:");
    println!(
        "1000 idle flows: broker RSS {} KiB ({} KiB before), peak RSS (VmHWM, whole run) {} KiB, threads {}",
        rss_idle, rss_before, hwm, threads
    );
    drop(flows);
    let _ = child.kill();
    let _ = child.wait();
}
