//! Shared harness: the broker in-process (no launcher), fed through the real
//! box service and fd-passing socketpair, against servers on 127.0.0.1.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use terra_netd::fdpass::broker_socketpair;
use terra_netd::{
    box_proxy, Broker, Limits, MemoryReceipt, Pattern, ReceiptSink, Resolver, StaticResolver,
};
use terra_policy::NetworkMode;

/// A resolver that counts lookups (to prove unlisted names are never resolved).
pub struct CountingResolver {
    pub inner: StaticResolver,
    pub lookups: AtomicUsize,
}

impl Resolver for CountingResolver {
    fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, terra_netd::ResolveError> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        self.inner.resolve(name)
    }
}

pub struct Harness {
    pub proxy: SocketAddr,
    pub broker: Arc<Broker>,
    pub receipts: MemoryReceipt,
    pub resolver: Arc<CountingResolver>,
    broker_end: Arc<OwnedFd>,
}

impl Harness {
    /// `names` all resolve to 127.0.0.1.
    pub fn start(patterns: Vec<Pattern>, names: &[&str], limits: Limits) -> Harness {
        let resolver = Arc::new(CountingResolver {
            inner: StaticResolver::new(
                names
                    .iter()
                    .map(|n| (n.to_string(), vec!["127.0.0.1".parse().unwrap()])),
            ),
            lookups: AtomicUsize::new(0),
        });
        let receipts = MemoryReceipt::default();
        let broker = Broker::new(
            NetworkMode::Mediated,
            patterns,
            resolver.clone(),
            ReceiptSink::new(Box::new(receipts.clone())),
            limits,
        );
        let (box_end, broker_end) = broker_socketpair().unwrap();
        let broker_end = Arc::new(broker_end);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = listener.local_addr().unwrap();
        std::thread::spawn(move || box_proxy(listener, box_end));
        let b = broker.clone();
        let chan = broker_end.clone();
        std::thread::spawn(move || {
            let _ = b.serve_channel(&chan);
        });
        Harness {
            proxy,
            broker,
            receipts,
            resolver,
            broker_end,
        }
    }

    /// Simulates the broker dying: its end of the channel is shut down, so its
    /// serve loop ends and the box service's sends fail from then on.
    pub fn kill_broker(&self) {
        rustix::net::shutdown(&*self.broker_end, rustix::net::Shutdown::Both).unwrap();
    }

    /// Waits (bounded) until `n` receipt lines exist, then returns them all.
    pub fn receipts_at_least(&self, n: usize) -> Vec<serde_json::Value> {
        for _ in 0..500 {
            let lines = self.receipts.lines();
            if lines.len() >= n {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let lines = self.receipts.lines();
        panic!("expected {n} receipt lines, got {}: {lines:?}", lines.len());
    }

    pub fn lookups(&self) -> usize {
        self.resolver.lookups.load(Ordering::SeqCst)
    }
}

/// A [`HttpServer`] and a [`Harness`] whose one destination is `svc.test`
/// on the server's port (resolving to 127.0.0.1).
pub struct Served {
    pub server: HttpServer,
    pub port: u16,
    pub h: Harness,
}

/// See [`Served`]: the destination with `require_tls_sni` = `sni` and
/// `allow_private_addresses` = `private`, default [`limits`].
pub fn served(sni: bool, private: bool) -> Served {
    let server = hello_server();
    let port = server.addr.port();
    let h = Harness::start(
        vec![pat("svc.test", port, sni, private)],
        &["svc.test"],
        limits(),
    );
    Served { server, port, h }
}

pub fn pat(host: &str, port: u16, sni: bool, private: bool) -> Pattern {
    Pattern::parse(host, port, sni, private).unwrap()
}

pub fn limits() -> Limits {
    Limits {
        max_flows: 64,
        max_refusers: 8,
        handshake_timeout_ms: 5_000,
        idle_timeout_ms: 10_000,
        connect_timeout_ms: 5_000,
    }
}

pub use terra_test_support::http::HttpServer;

/// The shared test HTTP server on 127.0.0.1, answering `hello <path>`.
pub fn hello_server() -> HttpServer {
    HttpServer::start_on("127.0.0.1:0", |p| format!("hello {p}\n"))
}

/// A throwaway self-signed certificate for `name` in a temp dir.
pub struct Cert {
    pub dir: tempfile::TempDir,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub fn make_cert(name: &str) -> Cert {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    let st = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .arg("-subj")
        .arg(format!("/CN={name}"))
        .arg("-addext")
        .arg(format!("subjectAltName=DNS:{name}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl is installed");
    assert!(st.success(), "openssl req failed");
    Cert { dir, cert, key }
}

/// `openssl s_server -www` on 127.0.0.1, killed on drop.
pub struct TlsServer {
    pub port: u16,
    child: Child,
    _cert: Cert,
}

impl TlsServer {
    pub fn start(name: &str) -> TlsServer {
        let cert = make_cert(name);
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = Command::new("openssl")
            .args(["s_server", "-www", "-quiet", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(&cert.cert)
            .arg("-key")
            .arg(&cert.key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl is installed");
        for _ in 0..500 {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        TlsServer {
            port,
            child,
            _cert: cert,
        }
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs curl with `args`; returns (exit code, stdout).
pub fn curl(args: &[&str]) -> (i32, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20", "--noproxy", ""])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .stdin(Stdio::null())
        .output()
        .expect("curl is installed");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// curl with `proxy` as its HTTP proxy (`-x`); `args` follow.
pub fn curl_http_proxy(proxy: SocketAddr, args: &[&str]) -> (i32, String) {
    let url = format!("http://{proxy}");
    curl(&[&["-x", url.as_str()], args].concat())
}

/// curl with `proxy` as its SOCKS5 proxy, names sent to the proxy
/// (`--socks5-hostname`); `args` follow.
pub fn curl_socks_proxy(proxy: SocketAddr, args: &[&str]) -> (i32, String) {
    let addr = proxy.to_string();
    curl(&[&["--socks5-hostname", addr.as_str()], args].concat())
}

/// A connection to the proxy past the SOCKS5 greeting (one method offered,
/// "no authentication", and accepted).
pub fn socks5_greeted(proxy: SocketAddr) -> TcpStream {
    let mut s = raw(proxy);
    s.write_all(&[5, 1, 0]).unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).unwrap();
    assert_eq!(m, [5, 0], "SOCKS5 method reply");
    s
}

/// A SOCKS5 request: version 5, `command`, the address (type byte first),
/// the port.
pub fn socks5_request(command: u8, address: &[u8], port: u16) -> Vec<u8> {
    let mut req = vec![5, command, 0];
    req.extend_from_slice(address);
    req.extend_from_slice(&port.to_be_bytes());
    req
}

/// A SOCKS5 domain-name address (type 3, length, name).
pub fn socks5_domain(name: &str) -> Vec<u8> {
    let mut a = vec![3, name.len() as u8];
    a.extend_from_slice(name.as_bytes());
    a
}

/// Opens a raw connection to the proxy.
pub fn raw(proxy: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Reads until the peer closes (bounded by the read timeout).
pub fn read_all(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// Sends a CONNECT and returns the response head.
pub fn connect_head(s: &mut TcpStream, target: &str) -> String {
    write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// The receipt line whose name and port match.
pub fn find<'a>(lines: &'a [serde_json::Value], name: &str, port: u16) -> &'a serde_json::Value {
    lines
        .iter()
        .find(|l| l["name"] == name && l["port"] == port)
        .unwrap_or_else(|| panic!("no receipt for {name}:{port} in {lines:?}"))
}
