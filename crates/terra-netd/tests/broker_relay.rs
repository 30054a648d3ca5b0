//! The event-driven relay through the whole broker (box service, fd 7
//! channel, negotiation, engine): many idle flows cost no thread each and
//! all still work; half-close; the idle timeout. Thread counts are per
//! process, so the tests of this file run one at a time.
// Linux only: the box service passes sockets over SCM_RIGHTS (fdpass).
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use terra_netd::Limits;

static SERIAL: Mutex<()> = Mutex::new(());

/// Threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Open descriptors of this process.
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Polls `cond` until it holds; fails after a generous deadline.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(120);
    while !cond() {
        assert!(Instant::now() < until, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A server on one thread that accepts and keeps every connection, silent.
fn silent_server() -> (u16, Arc<Mutex<Vec<TcpStream>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            keep.lock().unwrap().push(s);
        }
    });
    (port, held)
}

fn relay_limits(max_flows: usize, idle_timeout_ms: u64) -> Limits {
    Limits {
        max_flows,
        max_refusers: 8,
        handshake_timeout_ms: 30_000,
        idle_timeout_ms,
        connect_timeout_ms: 5_000,
    }
}

/// A CONNECT through the proxy, established.
fn tunnel(proxy: std::net::SocketAddr, target: &str) -> TcpStream {
    let mut s = raw(proxy);
    let head = connect_head(&mut s, target);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s
}

#[test]
fn two_thousand_idle_flows_hold_no_thread_each_and_all_work() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 2000;
    let (port, held) = silent_server();
    let h = Harness::start(
        vec![pat("idle.test", port, false, true)],
        &["idle.test"],
        relay_limits(N + 16, 600_000),
    );
    wait_until("harness threads", || threads() >= 4);
    let base = threads();
    let base_fds = fds();

    let target = format!("idle.test:{port}");
    let clients: Vec<TcpStream> = (0..N).map(|_| tunnel(h.proxy, &target)).collect();
    wait_until("every upstream connection", || {
        held.lock().unwrap().len() == N
    });
    assert_eq!(
        h.broker.active_flows(),
        N,
        "each relayed flow holds its slot"
    );
    // The negotiation threads end once their flow is handed over; what is
    // left is the relay engine's one thread (and one of slack). A thread
    // per flow would keep this above base + N.
    wait_until("negotiation threads to end", || threads() <= base + 2);
    assert!(
        h.receipts.lines().is_empty(),
        "no receipt before a flow ends"
    );
    // Four sockets per flow in this process (client, the broker's two, the
    // server's) and no pipe: an idle flow holds none (a pipe is two
    // descriptors, so one per flow would add 2 x N).
    let idle_fds = base_fds + 4 * N + 64;
    assert!(fds() <= idle_fds, "{} descriptors > {idle_fds}", fds());

    // Every flow still works: each client sends its index, the server
    // echoes on the same connection, each client gets its own index back.
    let mut clients = clients;
    for (i, c) in clients.iter_mut().enumerate() {
        c.write_all(&(i as u16).to_be_bytes()).unwrap();
    }
    let mut servers = std::mem::take(&mut *held.lock().unwrap());
    for s in &mut servers {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut b = [0u8; 2];
        s.read_exact(&mut b).unwrap();
        s.write_all(&b).unwrap();
    }
    for (i, c) in clients.iter_mut().enumerate() {
        let mut b = [0u8; 2];
        c.read_exact(&mut b).unwrap();
        assert_eq!(
            u16::from_be_bytes(b),
            i as u16,
            "flow {i} got another's bytes"
        );
    }
    assert!(threads() <= base + 2, "the echo started threads");
    // The echo took pipes; quiet again, the flows give them back.
    wait_until("the pipes to be given back", || fds() <= idle_fds);

    // Closing both ends ends every flow: N receipt lines with the bytes, and
    // every slot back.
    drop(clients);
    drop(servers);
    wait_until("every receipt line", || h.receipts.lines().len() == N);
    wait_until("every slot", || h.broker.active_flows() == 0);
    let lines = h.receipts.lines();
    assert!(
        lines
            .iter()
            .all(|l| l["verdict"] == "allowed" && l["bytes_up"] == 2 && l["bytes_down"] == 2),
        "{:?}",
        lines
            .iter()
            .find(|l| l["bytes_up"] != 2 || l["bytes_down"] != 2)
    );
    assert!(h.broker.drain(Duration::from_secs(1)));
}

/// Either side's half-close passes through while the other way keeps
/// flowing.
#[test]
fn half_close_either_way() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (port, held) = silent_server();
    let h = Harness::start(
        vec![pat("half.test", port, false, true)],
        &["half.test"],
        relay_limits(8, 60_000),
    );
    let mut c = tunnel(h.proxy, &format!("half.test:{port}"));
    wait_until("the upstream connection", || {
        held.lock().unwrap().len() == 1
    });
    let mut s = held.lock().unwrap().pop().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();

    // The server speaks first and half-closes: the client reads to EOF.
    s.write_all(b"banner").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut c), b"banner");
    // The client -> server way is still open and carries a lot.
    let payload: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    c.write_all(&payload).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let got = read_all(&mut s);
    assert!(
        got == payload,
        "got {} of {} bytes",
        got.len(),
        payload.len()
    );

    let lines = h.receipts_at_least(1);
    assert_eq!(lines[0]["bytes_up"], 1_000_000);
    assert_eq!(lines[0]["bytes_down"], 6);
    wait_until("the slot", || h.broker.active_flows() == 0);
}

/// A flow quiet for `idle_timeout_ms` is closed on both sides, written to
/// the receipt, and gives its slot back; a flow with traffic is not.
#[test]
fn idle_timeout_closes_quiet_flows() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (port, held) = silent_server();
    let h = Harness::start(
        vec![pat("quiet.test", port, false, true)],
        &["quiet.test"],
        relay_limits(8, 200),
    );
    let mut c = tunnel(h.proxy, &format!("quiet.test:{port}"));
    c.write_all(b"ping").unwrap();
    wait_until("the upstream connection", || {
        held.lock().unwrap().len() == 1
    });
    let mut s = held.lock().unwrap().pop().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // Both reads end with EOF from the broker's close; a missing idle
    // timeout would make them fail after 30 s instead.
    let (mut up, mut down) = (Vec::new(), Vec::new());
    s.read_to_end(&mut up).unwrap();
    c.read_to_end(&mut down).unwrap();
    assert_eq!(up, b"ping");
    assert!(down.is_empty());
    let lines = h.receipts_at_least(1);
    assert_eq!(lines[0]["verdict"], "allowed");
    assert_eq!(lines[0]["bytes_up"], 4);
    assert_eq!(lines[0]["bytes_down"], 0);
    wait_until("the slot", || h.broker.active_flows() == 0);
}
