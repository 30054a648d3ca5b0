//! Floods of half-open connections: the broker stays up, its threads (and so
//! its memory) stay bounded by the flow and refusal caps, excess connections
//! are refused with `flow-limit`, and silent clients are cut by the handshake
//! timeout. One test per file section, run in sequence (thread counts are
//! per process).
// Linux only: the box service passes sockets over SCM_RIGHTS (fdpass).
#![cfg(target_os = "linux")]

mod common;

use std::io::Write;
use std::time::Duration;

use common::*;
use terra_netd::Limits;

/// Thread counts are per process: the tests of this file run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn wait_until(mut cond: impl FnMut() -> bool, what: &str) {
    for _ in 0..3000 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("gave up waiting for {what}");
}

#[test]
fn flood_of_half_open_connections() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = hello_server();
    let port = server.addr.port();
    let max_flows = 16;
    let max_refusers = 4;
    let h = Harness::start(
        vec![pat("svc.test", port, false, true)],
        &["svc.test"],
        Limits {
            max_flows,
            max_refusers,
            handshake_timeout_ms: 60_000,
            idle_timeout_ms: 60_000,
            connect_timeout_ms: 5_000,
        },
    );
    // Let the harness threads start before taking the baseline.
    wait_until(|| threads() >= 3, "harness threads");
    let base = threads();

    // 300 clients that connect and send nothing or half a request.
    let mut idle = Vec::new();
    for i in 0..300 {
        let mut s = raw(h.proxy);
        if i % 2 == 0 {
            let _ = s.write_all(b"CONNECT svc.test:");
        }
        idle.push(s);
    }
    wait_until(
        || h.broker.active_flows() == max_flows,
        "the flow cap to fill",
    );
    let peak = threads();
    assert!(h.broker.active_flows() <= max_flows);
    assert!(
        peak <= base + max_flows + max_refusers + 1,
        "threads {peak} > base {base} + caps"
    );
    // Over the cap, clients were refused or closed, never queued: every one of
    // the 300 has been taken by the broker and recorded or is being served.
    wait_until(
        || h.receipts.lines().len() + max_flows >= 300,
        "excess connections to be refused",
    );
    let lines = h.receipts.lines();
    assert!(
        lines.iter().all(|l| l["reason"] == "flow-limit"),
        "{lines:?}"
    );

    // A full request while saturated is refused with flow-limit, not queued.
    wait_until(|| h.broker.active_flows() == max_flows, "saturation");
    let (code, body) = curl(&[
        "-x",
        &format!("http://{}", h.proxy),
        &format!("http://svc.test:{port}/"),
    ]);
    assert_eq!(code, 0);
    assert!(body.contains("flow-limit"), "{body}");
    assert_eq!(server.hits(), 0);

    // The clients go away; the broker frees every slot and serves again.
    drop(idle);
    wait_until(|| h.broker.active_flows() == 0, "flows to drain");
    let (code, body) = curl(&[
        "-x",
        &format!("http://{}", h.proxy),
        &format!("http://svc.test:{port}/ok"),
    ]);
    assert_eq!((code, body.as_str()), (0, "hello /ok\n"));
    assert_eq!(server.hits(), 1);
}

#[test]
fn silent_clients_are_cut_by_the_handshake_timeout() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = Harness::start(
        vec![pat("svc.test", 1, false, true)],
        &["svc.test"],
        Limits {
            max_flows: 4,
            max_refusers: 1,
            handshake_timeout_ms: 200,
            idle_timeout_ms: 60_000,
            connect_timeout_ms: 5_000,
        },
    );
    let mut s = raw(h.proxy);
    let got = read_all(&mut s);
    // The broker closed on its own.
    // Nothing was read, so the protocol is unknown: the broker just closes.
    assert!(got.is_empty(), "{got:?}");
    let lines = h.receipts_at_least(1);
    assert_eq!(lines[0]["reason"], "timeout");
    wait_until(|| h.broker.active_flows() == 0, "the slot to be freed");
}
