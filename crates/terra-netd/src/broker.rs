//! The broker: per connection, parse the proxy request, judge it, read the TLS
//! ClientHello when the decision needs SNI, resolve, judge the addresses,
//! connect to a judged address, replay what was read, relay both ways.
//!
//! Concurrency: std threads for negotiation. A connection gets a thread
//! (small stack) while it is parsed, judged, resolved and connected; once
//! admitted, the flow goes to the relay engine ([`crate::relay`]: one thread,
//! epoll, splice) and the connection thread ends; where there is no epoll
//! (macOS), or when a broker is made with [`Relay::Copy`], the connection
//! thread relays itself with one more thread ([`crate::copy_relay`]). The number of flows is
//! capped, connections above the cap get a short-lived refuser thread (itself
//! capped) that answers with `flow-limit`, and anything beyond that is closed
//! at once. Memory is therefore bounded by the caps.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
#[cfg(target_os = "linux")]
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use terra_policy::{Mir, NetworkMode};

use crate::address::is_private;
use crate::matcher::{judge, Pattern, Reason, Request, Verdict};
use crate::proxy::{
    http_head_len, parse_http_head, socks5_greeting, socks5_reply, socks5_request, HttpKind,
    Partial, Protocol, ProxyError, MAX_HTTP_HEAD,
};
use crate::receipt::{Attempt, ReceiptSink};
use crate::resolve::Resolver;
use crate::tls::{read_client_hello, HelloProgress};

/// Bounds of the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Most flows at once (negotiating or relaying).
    pub max_flows: usize,
    /// Most connections at once being refused with `flow-limit`.
    pub max_refusers: usize,
    /// Time a client has to send its whole request (and ClientHello).
    pub handshake_timeout_ms: u64,
    /// A flow with no byte either way for this long is closed.
    pub idle_timeout_ms: u64,
    /// Time to connect to one judged address.
    pub connect_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_flows: 1024,
            max_refusers: 32,
            handshake_timeout_ms: 10_000,
            idle_timeout_ms: 300_000,
            connect_timeout_ms: 10_000,
        }
    }
}

/// Stack of a connection thread (parsing, judging, connecting).
const CONN_STACK: usize = 128 * 1024;

/// How an admitted flow's bytes are moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relay {
    /// The event-driven relay ([`crate::relay`]: one epoll thread, splice):
    /// the default on Linux, which alone has it.
    Events,
    /// Two threads per flow copying through buffers ([`crate::copy_relay`]):
    /// every other host; on Linux only when asked (its tests).
    Copy,
}

impl Default for Relay {
    fn default() -> Self {
        if cfg!(target_os = "linux") {
            Relay::Events
        } else {
            Relay::Copy
        }
    }
}

/// Stack of a question thread (judging, one connect or one lookup).
#[cfg(target_os = "linux")]
const ASK_STACK: usize = 128 * 1024;

/// The broker's state, shared by every connection thread.
pub struct Broker {
    pub(crate) mode: NetworkMode,
    pub(crate) patterns: Vec<Pattern>,
    pub(crate) resolver: Arc<dyn Resolver>,
    pub(crate) receipts: ReceiptSink,
    pub(crate) limits: Limits,
    pub(crate) flows: AtomicUsize,
    refusers: AtomicUsize,
    /// How admitted flows are relayed.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    relay: Relay,
    /// What the box's DNS stub handed out this run (see `handoff`).
    #[cfg(target_os = "linux")]
    pub(crate) pins: std::sync::Mutex<crate::pins::Pins>,
    /// Threads for the box service's questions (see `handoff`).
    #[cfg(target_os = "linux")]
    pub(crate) asks: Arc<crate::pool::Pool>,
    /// The relay engine, made by the first admitted flow.
    #[cfg(target_os = "linux")]
    engine: std::sync::OnceLock<crate::relay::Engine>,
}

/// Decrements a counter when a connection thread ends, however it ends.
pub(crate) struct Slot<'a>(pub(crate) &'a AtomicUsize);
impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A flow's place under `max_flows`, given back when dropped: by the
/// connection thread after a refusal, by the relay's completion (after the
/// receipt line) once a relayed flow ends.
pub(crate) struct FlowSlot(Arc<Broker>);
impl Drop for FlowSlot {
    fn drop(&mut self) {
        self.0.flows.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A refusal on its way back to the client.
struct Refusal {
    reason: Reason,
    detail: String,
    /// SOCKS5 reply code to send (when the client speaks SOCKS5 and the
    /// tunnel is not yet established).
    socks_code: u8,
}

impl Refusal {
    fn new(reason: Reason, detail: impl Into<String>) -> Self {
        let socks_code = match reason {
            Reason::ResolveFailed => 0x04,
            Reason::ConnectFailed => 0x05,
            Reason::MalformedRequest | Reason::FlowLimit | Reason::Timeout => 0x01,
            _ => 0x02, // connection not allowed by ruleset
        };
        Refusal {
            reason,
            detail: detail.into(),
            socks_code,
        }
    }
}

/// How the client asked, once the request is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Connect,
    Forward,
    Socks,
}

/// A connection in negotiation.
struct Conn {
    client: TcpStream,
    deadline: Instant,
    /// Bytes read from the client and not yet consumed.
    buf: Vec<u8>,
    protocol: Option<Protocol>,
    /// The tunnel was already confirmed to the client (SNI stage): a refusal
    /// can only close.
    established: bool,
}

impl Conn {
    /// Reads more bytes into `buf` (at most `max_total` buffered), honouring
    /// the handshake deadline. Returns false at end of stream.
    fn fill(&mut self, max_total: usize) -> Result<bool, Refusal> {
        let room = max_total.saturating_sub(self.buf.len());
        if room == 0 {
            return Err(Refusal::new(
                Reason::MalformedRequest,
                "request larger than the broker reads",
            ));
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Refusal::new(Reason::Timeout, "client too slow"));
        }
        let _ = self.client.set_read_timeout(Some(left));
        let mut chunk = [0u8; 2048];
        let want = room.min(chunk.len());
        loop {
            match self.client.read(&mut chunk[..want]) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    return Err(Refusal::new(Reason::Timeout, "client too slow"))
                }
                Err(e) => {
                    return Err(Refusal::new(
                        Reason::MalformedRequest,
                        format!("read failed: {e}"),
                    ))
                }
            }
        }
    }

    /// Reads exactly enough that `buf` holds at least `n` bytes.
    /// Reads until `parse` decides on the buffered bytes: its value or its
    /// error; a refusal when the client closes inside the `what`.
    fn parse_more<T>(
        &mut self,
        what: &str,
        parse: impl Fn(&[u8]) -> Partial<T>,
    ) -> Result<Result<(T, usize), ProxyError>, Refusal> {
        loop {
            match parse(&self.buf) {
                Ok(Some(v)) => return Ok(Ok(v)),
                Ok(None) => {
                    if !self.fill(512)? {
                        return Err(Refusal::new(
                            Reason::MalformedRequest,
                            format!("client closed inside the {what}"),
                        ));
                    }
                }
                Err(e) => return Ok(Err(e)),
            }
        }
    }

    fn fill_to(&mut self, n: usize, what: &str) -> Result<(), Refusal> {
        while self.buf.len() < n {
            if !self.fill(n)? {
                return Err(Refusal::new(
                    Reason::MalformedRequest,
                    format!("client closed during {what}"),
                ));
            }
        }
        Ok(())
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), Refusal> {
        self.client
            .write_all(bytes)
            .map_err(|e| Refusal::new(Reason::MalformedRequest, format!("client write: {e}")))
    }
}

impl Broker {
    pub fn new(
        mode: NetworkMode,
        patterns: Vec<Pattern>,
        resolver: Arc<dyn Resolver>,
        receipts: ReceiptSink,
        limits: Limits,
    ) -> Arc<Broker> {
        Broker::with_relay(mode, patterns, resolver, receipts, limits, Relay::default())
    }

    /// [`Broker::new`] with the relay named (a host without epoll always
    /// copies: there [`Relay::Events`] is taken as [`Relay::Copy`]).
    pub fn with_relay(
        mode: NetworkMode,
        patterns: Vec<Pattern>,
        resolver: Arc<dyn Resolver>,
        receipts: ReceiptSink,
        limits: Limits,
        relay: Relay,
    ) -> Arc<Broker> {
        let relay = if cfg!(target_os = "linux") {
            relay
        } else {
            Relay::Copy
        };
        Arc::new(Broker {
            mode,
            patterns,
            resolver,
            receipts,
            limits,
            flows: AtomicUsize::new(0),
            refusers: AtomicUsize::new(0),
            relay,
            #[cfg(target_os = "linux")]
            pins: Default::default(),
            #[cfg(target_os = "linux")]
            asks: crate::pool::Pool::new("terra-netd-ask", ASK_STACK, limits.max_flows + 1),
            #[cfg(target_os = "linux")]
            engine: std::sync::OnceLock::new(),
        })
    }

    /// A broker for a decoded MIR (its mode and exact destinations).
    pub fn from_mir(
        mir: &Mir,
        resolver: Arc<dyn Resolver>,
        receipts: ReceiptSink,
        limits: Limits,
    ) -> Arc<Broker> {
        Broker::from_mir_with_relay(mir, resolver, receipts, limits, Relay::default())
    }

    /// [`Broker::from_mir`] with the relay named (see [`Broker::with_relay`]).
    pub fn from_mir_with_relay(
        mir: &Mir,
        resolver: Arc<dyn Resolver>,
        receipts: ReceiptSink,
        limits: Limits,
        relay: Relay,
    ) -> Arc<Broker> {
        let patterns = mir
            .destinations()
            .iter()
            .map(Pattern::from_destination)
            .collect();
        Broker::with_relay(mir.network(), patterns, resolver, receipts, limits, relay)
    }

    /// Flows currently negotiating or relaying.
    pub fn active_flows(&self) -> usize {
        self.flows.load(Ordering::SeqCst)
    }

    /// Connections still negotiating, relaying or being refused (each
    /// writes its receipt line when it ends).
    pub fn busy(&self) -> usize {
        self.flows.load(Ordering::SeqCst) + self.refusers.load(Ordering::SeqCst)
    }

    /// Waits, at most `limit`, until every connection has ended (and written
    /// its receipt line). True when none is left.
    pub fn drain(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while self.busy() > 0 {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    /// Serves the fd 7 channel until the box closes it: proxy sockets (a
    /// one-byte message with the accepted socket) and the box service's
    /// questions ([`crate::ask`], each with its reply socket).
    #[cfg(target_os = "linux")]
    pub fn serve_channel(self: &Arc<Self>, chan: &OwnedFd) -> io::Result<()> {
        use std::os::fd::AsFd;
        loop {
            let (payload, fds) = match crate::ask::recv_with(chan.as_fd()) {
                Ok(None) => return Ok(()),
                Ok(Some(m)) => m,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if payload.first() == Some(&crate::ask::ASK_TAG) {
                let mut fds = fds.into_iter();
                match fds.next() {
                    Some(reply) => self.question(&payload, reply, fds.next()),
                    None => self.record_refusal(
                        SystemTime::now(),
                        Instant::now(),
                        "unknown",
                        &Refusal::new(
                            Reason::MalformedRequest,
                            "a question without its reply socket",
                        ),
                    ),
                }
                continue;
            }
            let mut dropped = 0;
            for fd in fds {
                match crate::fdpass::tcp_stream(fd) {
                    Some(s) => self.accept(s),
                    None => dropped += 1,
                }
            }
            if dropped > 0 {
                self.record_refusal(
                    SystemTime::now(),
                    Instant::now(),
                    "unknown",
                    &Refusal::new(
                        Reason::MalformedRequest,
                        format!("{dropped} passed descriptor(s) not TCP sockets"),
                    ),
                );
            }
        }
    }

    /// Serves a listener directly (tests and benches; the box uses the channel).
    pub fn serve_listener(self: &Arc<Self>, listener: TcpListener) -> io::Result<()> {
        loop {
            let (s, _) = listener.accept()?;
            self.accept(s);
        }
    }

    /// Takes one client connection: a flow thread when under the cap, a
    /// refuser thread when over it, an immediate close when both are full.
    pub fn accept(self: &Arc<Self>, client: TcpStream) {
        let over = self.flows.fetch_add(1, Ordering::SeqCst) >= self.limits.max_flows;
        if over {
            self.flows.fetch_sub(1, Ordering::SeqCst);
            if self.refusers.fetch_add(1, Ordering::SeqCst) >= self.limits.max_refusers {
                self.refusers.fetch_sub(1, Ordering::SeqCst);
                self.record_refusal(
                    SystemTime::now(),
                    Instant::now(),
                    "unknown",
                    &Refusal::new(Reason::FlowLimit, "flow and refusal caps reached; closed"),
                );
                drop(client);
                return;
            }
        }
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("terra-netd-conn".into())
            .stack_size(CONN_STACK)
            .spawn(move || {
                // A refuser's slot ends with this thread; a flow's slot goes
                // with the flow (to the relay when admitted).
                let _refuser = over.then(|| Slot(&me.refusers));
                let flow = (!over).then(|| FlowSlot(Arc::clone(&me)));
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    me.handle(client, flow)
                }));
                if r.is_err() {
                    tracing::error!(
                        "terra-netd: a connection handler panicked; connection dropped"
                    );
                }
            });
        if let Err(e) = spawned {
            // The closure (and its client and slot) was dropped with the error,
            // but the counter slot was never created: give it back here.
            if over {
                self.refusers.fetch_sub(1, Ordering::SeqCst);
            } else {
                self.flows.fetch_sub(1, Ordering::SeqCst);
            }
            tracing::warn!("terra-netd: cannot start a connection thread: {e}");
        }
    }

    fn record_refusal(
        &self,
        time: SystemTime,
        start: Instant,
        protocol: &'static str,
        r: &Refusal,
    ) {
        self.receipts.record(&Attempt {
            reason: Some(r.reason.as_str()),
            detail: Some(r.detail.clone()),
            duration_ms: start.elapsed().as_millis() as u64,
            ..Attempt::started(time, protocol)
        });
    }

    /// The checked path of a workload connect() to a destination that
    /// requires TLS SNI (see `handoff`): `client` is the broker's end of a
    /// TCP pair inside the box whose other end replaced the workload's
    /// socket. The ClientHello is read before anything is connected, the
    /// name judged again with it, then the broker connects to `to` (the
    /// address the workload chose, pinned for `name`) and relays. Writes one
    /// receipt line (`path: "relay"`, protocol "tcp").
    #[cfg(target_os = "linux")]
    pub(crate) fn relay_for_box(
        self: &Arc<Self>,
        client: TcpStream,
        to: SocketAddr,
        name: String,
        resolved: Vec<IpAddr>,
        time: SystemTime,
        start: Instant,
    ) {
        let mut attempt = Attempt {
            name: Some(name.clone()),
            port: Some(to.port()),
            resolved: resolved.clone(),
            ..Attempt::started(time, "tcp")
        };
        let _ = client.set_nodelay(true);
        let mut conn = Conn {
            client,
            deadline: start + Duration::from_millis(self.limits.handshake_timeout_ms),
            buf: Vec::new(),
            protocol: None,
            // The workload's connect() already returned: a refusal can only close.
            established: true,
        };
        let upstream = (|| {
            let sni = read_sni(&mut conn, &mut attempt)?;
            let request = Request {
                name: &name,
                port: to.port(),
                sni: Some(&sni),
                resolves_private: resolved.iter().any(|a| is_private(*a)),
            };
            if let Verdict::Refused(reason) = judge(self.mode, &self.patterns, &request) {
                return Err(Refusal::new(
                    reason,
                    format!("{name}:{} with SNI {sni:?}", to.port()),
                ));
            }
            let timeout = Duration::from_millis(self.limits.connect_timeout_ms);
            let up = TcpStream::connect_timeout(&to, timeout)
                .map_err(|e| Refusal::new(Reason::ConnectFailed, format!("{to}: {e}")))?;
            let _ = up.set_nodelay(true);
            attempt.address = Some(to);
            Ok(up)
        })();
        match upstream {
            Ok(up) => {
                attempt.verdict = "allowed";
                let replay = std::mem::take(&mut conn.buf);
                // The relayed flow holds a place of its own until it ends
                // (the question's place is given back when its thread ends).
                self.flows.fetch_add(1, Ordering::SeqCst);
                let slot = FlowSlot(Arc::clone(self));
                return self.relay(conn.client, up, replay, attempt, start, slot);
            }
            Err(r) => {
                attempt.reason = Some(r.reason.as_str());
                attempt.detail = Some(r.detail.clone());
                refuse(&mut conn, &r);
            }
        }
        attempt.duration_ms = start.elapsed().as_millis() as u64;
        self.receipts.record(&attempt);
    }

    /// One connection, start to end; always writes exactly one receipt line
    /// (a relayed flow's when its relay ends). `slot` is None for a
    /// connection over the flow cap (a refuser).
    fn handle(&self, client: TcpStream, slot: Option<FlowSlot>) {
        let over_cap = slot.is_none();
        let start = Instant::now();
        let mut attempt = Attempt::started(SystemTime::now(), "unknown");
        let _ = client.set_nodelay(true);
        let _ = client.set_write_timeout(Some(Duration::from_millis(
            self.limits.handshake_timeout_ms,
        )));
        let handshake = if over_cap {
            // Refusers get a short deadline: they exist only to say why.
            Duration::from_millis(self.limits.handshake_timeout_ms.min(2_000))
        } else {
            Duration::from_millis(self.limits.handshake_timeout_ms)
        };
        let mut conn = Conn {
            client,
            deadline: start + handshake,
            buf: Vec::new(),
            protocol: None,
            established: false,
        };
        match self.negotiate(&mut conn, &mut attempt, over_cap) {
            Ok((upstream, _kind, replay)) => {
                attempt.verdict = "allowed";
                if let Some(slot) = slot {
                    return self.relay(conn.client, upstream, replay, attempt, start, slot);
                }
                // Not reached: `negotiate` refuses every connection over the
                // cap. Were it reached, the flow closes with its receipt.
            }
            Err(mut refusal) => {
                if over_cap && refusal.reason != Reason::FlowLimit {
                    // Whatever else went wrong, this client was turned away
                    // because the broker was full.
                    refusal.detail = format!("flow cap reached; {}", refusal.detail);
                    refusal.reason = Reason::FlowLimit;
                    refusal.socks_code = 0x01;
                }
                attempt.reason = Some(refusal.reason.as_str());
                attempt.detail = Some(refusal.detail.clone());
                refuse(&mut conn, &refusal);
            }
        }
        attempt.duration_ms = start.elapsed().as_millis() as u64;
        self.receipts.record(&attempt);
    }

    /// Parses, judges, resolves and connects. On success returns the upstream
    /// connection and the bytes to send it before relaying.
    fn negotiate(
        &self,
        conn: &mut Conn,
        attempt: &mut Attempt,
        over_cap: bool,
    ) -> Result<(TcpStream, Kind, Vec<u8>), Refusal> {
        if !conn.fill(MAX_HTTP_HEAD)? {
            return Err(Refusal::new(
                Reason::MalformedRequest,
                "client sent nothing",
            ));
        }
        let protocol = Protocol::detect(conn.buf[0]).ok_or_else(|| {
            Refusal::new(
                Reason::MalformedRequest,
                format!("first byte {:#04x} is neither SOCKS5 nor HTTP", conn.buf[0]),
            )
        })?;
        conn.protocol = Some(protocol);
        let (kind, name, port, forward_head) = match protocol {
            Protocol::Http => {
                attempt.protocol = "http";
                let len = loop {
                    if let Some(len) = http_head_len(&conn.buf) {
                        break len;
                    }
                    if !conn.fill(MAX_HTTP_HEAD)? {
                        return Err(Refusal::new(
                            Reason::MalformedRequest,
                            "client closed inside the request head",
                        ));
                    }
                };
                let req = parse_http_head(&conn.buf[..len])
                    .map_err(|e| Refusal::new(Reason::MalformedRequest, e.0))?;
                conn.buf.drain(..len);
                match req.kind {
                    HttpKind::Connect => {
                        attempt.protocol = "http-connect";
                        (Kind::Connect, req.host, req.port, None)
                    }
                    HttpKind::Forward { head } => (Kind::Forward, req.host, req.port, Some(head)),
                }
            }
            Protocol::Socks5 => {
                attempt.protocol = "socks5";
                let (no_auth, used) = match conn.parse_more("SOCKS5 greeting", socks5_greeting)? {
                    Ok(g) => g,
                    Err(e) => {
                        // Still in method negotiation: "no acceptable method".
                        let _ = conn.send(&[0x05, 0xff]);
                        conn.protocol = None;
                        return Err(Refusal::new(Reason::MalformedRequest, e.0));
                    }
                };
                conn.buf.drain(..used);
                if !no_auth {
                    let _ = conn.send(&[0x05, 0xff]);
                    conn.protocol = None; // nothing more to say
                    return Err(Refusal::new(
                        Reason::MalformedRequest,
                        "SOCKS5 client offers no 'no authentication' method",
                    ));
                }
                conn.send(&[0x05, 0x00])?;
                let (req, used) = conn
                    .parse_more("SOCKS5 request", socks5_request)?
                    .map_err(|e| Refusal::new(Reason::MalformedRequest, e.0))?;
                conn.buf.drain(..used);
                if req.command != 0x01 {
                    let mut r = Refusal::new(
                        Reason::MalformedRequest,
                        format!("SOCKS5 command {} (only CONNECT)", req.command),
                    );
                    r.socks_code = 0x07;
                    return Err(r);
                }
                (Kind::Socks, req.host.as_name(), req.port, None)
            }
        };
        attempt.name = Some(name.clone());
        attempt.port = Some(port);
        if over_cap {
            return Err(Refusal::new(
                Reason::FlowLimit,
                format!("more than {} flows at once", self.limits.max_flows),
            ));
        }

        // 1. Name and port, before any lookup: an unlisted name is never resolved.
        let mut request = Request {
            name: &name,
            port,
            sni: None,
            resolves_private: false,
        };
        let sni_owned: Option<String>;
        match judge(self.mode, &self.patterns, &request) {
            Verdict::Allowed => sni_owned = None,
            Verdict::Refused(Reason::SniAbsent) if kind != Kind::Forward => {
                // 2. SNI decides: confirm the tunnel, then read the ClientHello.
                match kind {
                    Kind::Connect => conn.send(b"HTTP/1.1 200 Connection established\r\n\r\n")?,
                    _ => conn.send(&socks5_reply(0x00))?,
                }
                conn.established = true;
                sni_owned = Some(read_sni(conn, attempt)?);
            }
            Verdict::Refused(reason) => {
                return Err(Refusal::new(reason, format!("{name}:{port}")));
            }
        }
        request.sni = sni_owned.as_deref();
        if request.sni.is_some() {
            if let Verdict::Refused(reason) = judge(self.mode, &self.patterns, &request) {
                return Err(Refusal::new(
                    reason,
                    format!(
                        "{name}:{port} with SNI {:?}",
                        request.sni.unwrap_or_default()
                    ),
                ));
            }
        }

        // 3. Resolve once, judge every address, connect only to judged ones.
        let addrs: Vec<IpAddr> = self
            .resolver
            .resolve(&name)
            .map_err(|e| Refusal::new(Reason::ResolveFailed, e.to_string()))?;
        attempt.resolved = addrs.clone();
        request.resolves_private = addrs.iter().any(|a| is_private(*a));
        if let Verdict::Refused(reason) = judge(self.mode, &self.patterns, &request) {
            return Err(Refusal::new(
                reason,
                format!("{name} resolves to a private address"),
            ));
        }
        let timeout = Duration::from_millis(self.limits.connect_timeout_ms);
        let mut last_err = None;
        let mut upstream = None;
        for ip in &addrs {
            let sa = SocketAddr::new(*ip, port);
            match TcpStream::connect_timeout(&sa, timeout) {
                Ok(s) => {
                    attempt.address = Some(sa);
                    upstream = Some(s);
                    break;
                }
                Err(e) => last_err = Some(format!("{sa}: {e}")),
            }
        }
        let upstream = upstream.ok_or_else(|| {
            Refusal::new(
                Reason::ConnectFailed,
                last_err.unwrap_or_else(|| "no address".into()),
            )
        })?;
        let _ = upstream.set_nodelay(true);

        // 4. Confirm to the client and collect what to replay upstream.
        let mut replay = Vec::new();
        match kind {
            Kind::Connect if !conn.established => {
                conn.send(b"HTTP/1.1 200 Connection established\r\n\r\n")?
            }
            Kind::Socks if !conn.established => conn.send(&socks5_reply(0x00))?,
            Kind::Forward => replay.extend_from_slice(&forward_head.unwrap_or_default()),
            _ => {}
        }
        replay.append(&mut conn.buf);
        Ok((upstream, kind, replay))
    }

    /// Hands an admitted flow to the relay engine; its completion writes
    /// the receipt line and then gives the slot back.
    #[cfg(target_os = "linux")]
    fn relay(
        &self,
        client: TcpStream,
        upstream: TcpStream,
        replay: Vec<u8>,
        mut attempt: Attempt,
        start: Instant,
        slot: FlowSlot,
    ) {
        use crate::relay::{Flow, Totals};
        if self.relay == Relay::Copy {
            return self.copy_relay(client, upstream, replay, attempt, start, slot);
        }
        let done = Box::new(move |t: Totals| {
            attempt.bytes_up = t.up;
            attempt.bytes_down = t.down;
            attempt.duration_ms = start.elapsed().as_millis() as u64;
            slot.0.receipts.record(&attempt);
            drop(slot);
        });
        let flow = Flow {
            client,
            upstream,
            replay,
            idle: Duration::from_millis(self.limits.idle_timeout_ms.max(1)),
            done,
        };
        match self.engine() {
            Ok(engine) => engine.add(flow),
            Err(e) => {
                tracing::warn!("terra-netd: no relay engine: {e}");
                (flow.done)(Totals::default());
            }
        }
    }

    /// The relay engine, made on first use (a failure is retried by the next
    /// flow).
    #[cfg(target_os = "linux")]
    fn engine(&self) -> io::Result<&crate::relay::Engine> {
        if let Some(e) = self.engine.get() {
            return Ok(e);
        }
        // Two first flows at once may both make one; the loser's is dropped.
        let _ = self.engine.set(crate::relay::Engine::new()?);
        self.engine
            .get()
            .ok_or_else(|| io::Error::other("relay engine not set"))
    }

    /// Relays on this thread (and one more) until the flow ends, then writes
    /// the receipt line ([`crate::copy_relay`]): the relay where there is no
    /// epoll, and on Linux a broker made with [`Relay::Copy`].
    fn copy_relay(
        &self,
        client: TcpStream,
        upstream: TcpStream,
        replay: Vec<u8>,
        mut attempt: Attempt,
        start: Instant,
        slot: FlowSlot,
    ) {
        let idle = Duration::from_millis(self.limits.idle_timeout_ms.max(1));
        let moved = crate::copy_relay::relay(client, upstream, replay, idle);
        attempt.bytes_up = moved.up;
        attempt.bytes_down = moved.down;
        attempt.duration_ms = start.elapsed().as_millis() as u64;
        self.receipts.record(&attempt);
        drop(slot);
    }

    /// Relays on the copy relay: every host but Linux.
    #[cfg(not(target_os = "linux"))]
    fn relay(
        &self,
        client: TcpStream,
        upstream: TcpStream,
        replay: Vec<u8>,
        attempt: Attempt,
        start: Instant,
        slot: FlowSlot,
    ) {
        self.copy_relay(client, upstream, replay, attempt, start, slot)
    }
}

/// Reads the ClientHello (exactly its records) and returns its server name.
fn read_sni(conn: &mut Conn, attempt: &mut Attempt) -> Result<String, Refusal> {
    loop {
        match read_client_hello(&conn.buf) {
            Ok(HelloProgress::Need(n)) => {
                let want = conn.buf.len() + n;
                conn.fill_to(want, "the TLS ClientHello")?;
            }
            Ok(HelloProgress::Done { sni: Some(sni), .. }) => {
                attempt.sni = Some(sni.clone());
                return Ok(sni);
            }
            Ok(HelloProgress::Done { sni: None, .. }) => {
                return Err(Refusal::new(
                    Reason::SniAbsent,
                    "the ClientHello names no server",
                ))
            }
            Err(e) => {
                // Not TLS at all, or a broken ClientHello: no usable SNI.
                let reason = if conn.buf.first() == Some(&0x16) {
                    Reason::MalformedRequest
                } else {
                    Reason::SniAbsent
                };
                return Err(Refusal::new(reason, e.0));
            }
        }
    }
}

/// Tells the client why (when the protocol still allows it), then closes.
fn refuse(conn: &mut Conn, r: &Refusal) {
    if !conn.established {
        match conn.protocol {
            Some(Protocol::Http) => {
                let (code, text) = match r.reason {
                    Reason::MalformedRequest => (400, "Bad Request"),
                    Reason::ResolveFailed | Reason::ConnectFailed => (502, "Bad Gateway"),
                    Reason::FlowLimit => (503, "Service Unavailable"),
                    Reason::Timeout => (408, "Request Timeout"),
                    _ => (403, "Forbidden"),
                };
                let body = format!(
                    "terra: connection refused: {} ({})\n",
                    r.reason.as_str(),
                    r.detail.replace(['\r', '\n'], " ")
                );
                let msg = format!(
                    "HTTP/1.1 {code} {text}\r\nContent-Type: text/plain\r\nX-Terra-Refusal: {}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                    r.reason.as_str(),
                    body.len()
                );
                let _ = conn.client.write_all(msg.as_bytes());
            }
            Some(Protocol::Socks5) => {
                let _ = conn.client.write_all(&socks5_reply(r.socks_code));
            }
            None => {}
        }
    }
    // Lingering close: stop sending, then discard what the client still sends
    // (bounded in bytes and time) so that closing with unread input does not
    // reset the connection before the client has read the refusal.
    let _ = conn.client.shutdown(Shutdown::Write);
    let _ = conn
        .client
        .set_read_timeout(Some(Duration::from_millis(LINGER_MS)));
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < LINGER_BYTES {
        match conn.client.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    let _ = conn.client.shutdown(Shutdown::Both);
}

/// Bounds of the lingering close after a refusal.
const LINGER_MS: u64 = 500;
const LINGER_BYTES: usize = 256 * 1024;
