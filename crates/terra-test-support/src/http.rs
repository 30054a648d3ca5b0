//! A plain HTTP server on the host that counts the connections it accepts.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Answers every request with a body made from its path and a header
/// `X-Seen-Head: <request line>`, then closes the connection.
pub struct HttpServer {
    pub addr: SocketAddr,
    pub port: u16,
    hits: Arc<AtomicUsize>,
}

impl HttpServer {
    /// On a free port of 127.0.0.1, answering `from-host <path>`.
    pub fn start() -> HttpServer {
        HttpServer::start_on("127.0.0.1:0", |path| format!("from-host {path}"))
    }

    /// On `addr` (e.g. "[::1]:0"), answering `body(path)`.
    pub fn start_on(addr: &str, body: fn(&str) -> String) -> HttpServer {
        let l = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        let addr = l.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                h.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
                    let mut buf = Vec::new();
                    let mut b = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut b) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf);
                    let path = head.split_whitespace().nth(1).unwrap_or("?");
                    let body = body(path);
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\nX-Seen-Head: {}\r\n\r\n{body}",
                        body.len(),
                        head.lines().next().unwrap_or_default()
                    );
                });
            }
        });
        HttpServer {
            port: addr.port(),
            addr,
            hits,
        }
    }

    /// Connections accepted so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}
