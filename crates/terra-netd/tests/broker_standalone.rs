//! The listener-fed broker (the macOS broker, `terra_netd::standalone`)
//! through its whole startup path, on whatever host runs the tests: the
//! startup message on a Unix socket pair, the receipt and the loopback
//! listeners handed over by descriptor number, terra's DNS client on a hosts
//! file, the proxy protocols, the judge, the copy relay, the receipt lines,
//! and the end when the supervisor closes its end. On Linux this is the code
//! the Mac runs, run here.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use terra_netd::standalone::{bind_loopback, serve_startup, LoopbackListeners};
use terra_netd::{encode_startup, StartupConfig, READY};
use terra_policy::{MirBuilder, NetworkMode};
use terra_test_support::http::HttpServer;

struct Running {
    listeners: LoopbackListeners,
    supervisor_end: UnixStream,
    broker: std::thread::JoinHandle<Result<(), String>>,
    receipt: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// Starts the broker on a thread as `terra __network` would be started: the
/// destinations `svc.test:PORT` (private addresses allowed: it is loopback)
/// and `sni.test:PORT` (TLS SNI required), both resolving through a hosts
/// file to 127.0.0.1.
fn start(port: u16) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 svc.test sni.test\n").unwrap();
    let receipt = dir.path().join("network.jsonl");
    let receipt_file = std::fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(&receipt)
        .unwrap();
    let listeners = bind_loopback().unwrap();
    let handed: Vec<i32> = listeners
        .try_clone()
        .unwrap()
        .into_iter()
        .map(IntoRawFd::into_raw_fd)
        .collect();
    let mut b = MirBuilder::new();
    b.set_network(NetworkMode::Mediated);
    b.add_destination("svc.test", port, false, true).unwrap();
    b.add_destination("sni.test", port, true, true).unwrap();
    let mir = b.build().unwrap();
    let config = StartupConfig {
        receipt_fd: Some(receipt_file.into_raw_fd()),
        resolv_conf: None,
        hosts: Some(hosts.to_str().unwrap().to_string()),
        listen_fds: handed,
        ..StartupConfig::default()
    };
    let (mut supervisor_end, broker_end) = UnixStream::pair().unwrap();
    supervisor_end
        .write_all(&encode_startup(mir.bytes(), &config))
        .unwrap();
    let broker =
        std::thread::spawn(move || serve_startup(broker_end, None).map_err(|e| e.to_string()));
    // The broker says it serves before anything connects.
    supervisor_end
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut ready = [0u8; 6];
    supervisor_end.read_exact(&mut ready).unwrap();
    assert_eq!(&ready, READY);
    Running {
        listeners,
        supervisor_end,
        broker,
        receipt,
        _dir: dir,
    }
}

impl Running {
    /// Ends the run as terra run does (closes its end), waits for the
    /// broker, returns the receipt's lines.
    fn stop(self) -> Vec<serde_json::Value> {
        drop(self.supervisor_end);
        self.broker.join().unwrap().unwrap();
        drop(self.listeners);
        std::fs::read_to_string(&self.receipt)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// `CONNECT host:port` through the broker at `proxy`; the status line's code
/// and the headers, and the stream when the tunnel stands.
fn connect(proxy: SocketAddr, host: &str, port: u16) -> (u16, String, BufReader<TcpStream>) {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head, r)
}

fn get_through(mut tunnel: BufReader<TcpStream>, path: &str) -> String {
    write!(
        tunnel.get_mut(),
        "GET {path} HTTP/1.0\r\nHost: svc.test\r\n\r\n"
    )
    .unwrap();
    let mut all = String::new();
    tunnel.read_to_string(&mut all).unwrap();
    all.split("\r\n\r\n").nth(1).unwrap_or_default().to_string()
}

fn find<'a>(lines: &'a [serde_json::Value], name: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["name"] == name).collect()
}

#[test]
fn listed_host_through_the_broker_on_both_loopbacks() {
    let server = HttpServer::start_on("127.0.0.1:0", |p| format!("hello {p}\n"));
    let port = server.addr.port();
    let run = start(port);
    let v4 = SocketAddr::from(([127, 0, 0, 1], run.listeners.port));
    let (code, head, tunnel) = connect(v4, "svc.test", port);
    assert_eq!(code, 200, "{head}");
    assert_eq!(get_through(tunnel, "/v4"), "hello /v4\n");
    let v6 = run.listeners.v6.as_ref().map(|l| l.local_addr().unwrap());
    if let Some(v6) = v6 {
        let (code, head, tunnel) = connect(v6, "svc.test", port);
        assert_eq!(code, 200, "{head}");
        assert_eq!(get_through(tunnel, "/v6"), "hello /v6\n");
    }
    let lines = run.stop();
    let admitted = find(&lines, "svc.test");
    assert_eq!(admitted.len(), 1 + usize::from(v6.is_some()), "{lines:?}");
    for r in admitted {
        assert_eq!(r["verdict"], "allowed");
        assert_eq!(r["path"], "relay");
        assert_eq!(r["protocol"], "http-connect");
        assert_eq!(r["resolved"], serde_json::json!(["127.0.0.1"]));
        assert_eq!(r["address"], format!("127.0.0.1:{port}"));
        assert!(r["bytes_up"].as_u64().unwrap() > 0, "{r}");
        assert!(r["bytes_down"].as_u64().unwrap() > 0, "{r}");
    }
    assert_eq!(server.hits(), 1 + usize::from(v6.is_some()));
}

#[test]
fn unlisted_host_and_port_are_refused_with_their_reason() {
    let server = HttpServer::start_on("127.0.0.1:0", |p| format!("hello {p}\n"));
    let port = server.addr.port();
    let run = start(port);
    let proxy = SocketAddr::from(([127, 0, 0, 1], run.listeners.port));
    let (code, head, _) = connect(proxy, "other.test", port);
    assert_eq!(code, 403, "{head}");
    assert!(head.contains("X-Terra-Refusal: no-destination"), "{head}");
    // A listed name on another port.
    let (code, _, _) = connect(proxy, "svc.test", port.wrapping_add(1).max(1));
    assert_eq!(code, 403);
    // The name that requires TLS SNI, with no TLS: the tunnel is confirmed
    // (the ClientHello comes after), then closed without reaching the server.
    let (code, _, mut tunnel) = connect(proxy, "sni.test", port);
    assert_eq!(code, 200);
    tunnel
        .get_mut()
        .write_all(b"GET / HTTP/1.0\r\n\r\n")
        .unwrap();
    let mut rest = Vec::new();
    let _ = tunnel.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    let lines = run.stop();
    assert_eq!(server.hits(), 0, "a refused connection reached the server");
    assert_eq!(find(&lines, "other.test")[0]["reason"], "no-destination");
    let svc = find(&lines, "svc.test");
    assert_eq!(svc.len(), 1);
    assert_eq!(svc[0]["reason"], "no-destination");
    let sni = find(&lines, "sni.test");
    assert_eq!(sni[0]["verdict"], "refused");
    assert_eq!(sni[0]["reason"], "sni-absent");
    // An unlisted name is never looked up.
    assert_eq!(
        find(&lines, "other.test")[0]["resolved"],
        serde_json::json!([])
    );
}

#[test]
fn socks5_through_the_broker() {
    let server = HttpServer::start_on("127.0.0.1:0", |p| format!("hello {p}\n"));
    let port = server.addr.port();
    let run = start(port);
    let mut s = TcpStream::connect(("127.0.0.1", run.listeners.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(&[5, 1, 0]).unwrap();
    let mut reply = [0u8; 2];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(reply, [5, 0]);
    let mut req = vec![5, 1, 0, 3, 8];
    req.extend_from_slice(b"svc.test");
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).unwrap();
    let mut head = [0u8; 10];
    s.read_exact(&mut head).unwrap();
    assert_eq!(head[1], 0, "SOCKS5 reply {head:?}");
    let body = get_through(BufReader::new(s), "/socks");
    assert_eq!(body, "hello /socks\n");
    let lines = run.stop();
    assert_eq!(find(&lines, "svc.test")[0]["protocol"], "socks5");
    assert_eq!(find(&lines, "svc.test")[0]["verdict"], "allowed");
}

#[test]
fn a_startup_without_listeners_or_with_a_repeated_descriptor_is_refused() {
    let mut b = MirBuilder::new();
    b.set_network(NetworkMode::Mediated);
    b.add_destination("svc.test", 80, false, false).unwrap();
    let mir = b.build().unwrap();
    let refused = |config: StartupConfig| {
        let (mut sup, brk) = UnixStream::pair().unwrap();
        sup.write_all(&encode_startup(mir.bytes(), &config))
            .unwrap();
        serve_startup(brk, None).unwrap_err().to_string()
    };
    let none = StartupConfig {
        receipt_fd: None,
        ..StartupConfig::default()
    };
    assert!(refused(none).contains("no listener descriptors"));
    let l = bind_loopback().unwrap();
    let fd = l.v4.try_clone().unwrap().into_raw_fd();
    let twice = StartupConfig {
        receipt_fd: Some(fd),
        listen_fds: vec![fd],
        ..StartupConfig::default()
    };
    assert!(refused(twice).contains("named twice"));
}
