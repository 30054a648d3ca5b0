//! The event-driven relay (issue 13): one thread, one epoll set, every
//! admitted flow. No thread per flow, no stack per flow, no buffer or pipe
//! while a flow is idle.
//!
//! A flow is two non-blocking sockets (client, upstream) and a direction per
//! way. Bytes move with splice(2): socket -> pipe -> socket. A direction takes
//! its pipe when data is there (a one-byte peek first) and gives it back once
//! the flow has been quiet for [`LINGER`]; when no pipe can be had (EMFILE) or splice refuses the
//! socket, the direction copies through a bounded buffer instead.
//!
//! Edge-triggered epoll: each socket is added once (in, out, peer half-close)
//! and never modified; the engine keeps its own "readable"/"writable" flags,
//! set by an event and cleared by EAGAIN. Level-triggered would need an
//! epoll_ctl per stall (stop reading a side whose peer is full, then start
//! again): a system call per state change instead of none.
//!
//! Idle timeout: one deadline per flow in a sorted set, checked after each
//! wait. A deadline that comes due is re-armed from the flow's last byte
//! instead of being moved on every byte.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::net::{Shutdown, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::buffer::spare_capacity;
use rustix::event::{epoll, eventfd, EventfdFlags};
use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags};
use rustix::pipe::{pipe_with, splice, PipeFlags, SpliceFlags};

/// What a flow moved: bytes client->upstream (the replay included) and
/// upstream->client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub up: u64,
    pub down: u64,
}

/// Called once when the flow has ended, however it ended.
pub type Done = Box<dyn FnOnce(Totals) + Send>;

/// An admitted flow, handed to [`Engine::add`].
pub struct Flow {
    pub client: TcpStream,
    pub upstream: TcpStream,
    /// Bytes already read from the client (ClientHello, rewritten head):
    /// they go upstream before anything else.
    pub replay: Vec<u8>,
    /// No byte either way for this long ends the flow.
    pub idle: Duration,
    pub done: Done,
}

/// Pipe capacity per direction while in use.
const PIPE_SIZE: usize = 256 * 1024;
/// The copying fallback's buffer per direction while in use.
const COPY_BUF: usize = 64 * 1024;
/// Bytes one flow may read per turn before the others get theirs.
const TURN_BUDGET: usize = 4 << 20;
/// A flow quiet this long gives back its pipes and buffers.
const LINGER: Duration = Duration::from_secs(1);
/// Events taken per wait.
const EVENTS: usize = 256;
/// The eventfd's key (flow keys are `id << 1 | side`, ids start at 0 and
/// never reach 2^63).
const WAKE: u64 = u64::MAX;
const CLIENT: usize = 0;
const UPSTREAM: usize = 1;

/// The relay engine: an epoll set and, once the first flow arrives, the one
/// thread that serves it.
pub struct Engine {
    shared: Arc<Shared>,
    /// Whether the engine's thread runs (started by the first `add`).
    started: Mutex<bool>,
    splice: bool,
}

struct Shared {
    epoll: OwnedFd,
    /// Written by `add`, so the thread wakes and takes `incoming`.
    wake: OwnedFd,
    incoming: Mutex<Vec<Flow>>,
    /// The engine was dropped: the thread ends its flows and returns.
    closing: AtomicBool,
}

impl Engine {
    /// An engine that splices (the normal case).
    pub fn new() -> io::Result<Engine> {
        Engine::with_splice(true)
    }

    /// `splice` false: every direction copies through its buffer (the
    /// fallback's own tests).
    pub fn with_splice(splice: bool) -> io::Result<Engine> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        // Level-triggered: the thread drains it on each wake.
        epoll::add(
            &epoll,
            &wake,
            epoll::EventData::new_u64(WAKE),
            epoll::EventFlags::IN,
        )?;
        Ok(Engine {
            shared: Arc::new(Shared {
                epoll,
                wake,
                incoming: Mutex::new(Vec::new()),
                closing: AtomicBool::new(false),
            }),
            started: Mutex::new(false),
            splice,
        })
    }

    /// Hands a flow to the engine. Its `done` is always called, once: when
    /// the flow ends, or at once (with zero totals) when the engine cannot
    /// take it.
    pub fn add(&self, flow: Flow) {
        if let Err(e) = self.start() {
            tracing::warn!("terra-netd: cannot start the relay thread: {e}");
            (flow.done)(Totals::default());
            return;
        }
        lock(&self.shared.incoming).push(flow);
        self.shared.wake();
    }

    fn start(&self) -> io::Result<()> {
        let mut started = lock(&self.started);
        if *started {
            return Ok(());
        }
        let shared = Arc::clone(&self.shared);
        let splice = self.splice;
        std::thread::Builder::new()
            .name("terra-netd-relay".into())
            .stack_size(256 * 1024)
            .spawn(move || Worker::new(shared, splice).run())?;
        *started = true;
        Ok(())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        self.shared.wake();
    }
}

impl Shared {
    fn wake(&self) {
        // A full counter (2^64 - 2 wakes not yet read) cannot happen: the
        // thread reads it on every wake.
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }
}

/// A lock that survives a panicked holder (the data stays consistent: a
/// Vec push or a flag).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One way of a flow.
#[derive(Default)]
struct Dir {
    /// (read end, write end), while in use.
    pipe: Option<(OwnedFd, OwnedFd)>,
    in_pipe: usize,
    /// The copying fallback (and the replay): bytes `buf[start..]` are
    /// still to be written.
    buf: Vec<u8>,
    start: usize,
    /// Splice for this direction (false after splice refused the socket).
    splice: bool,
    /// The source sent end of stream.
    eof: bool,
    /// End of stream was passed on (`shutdown(Write)` on the destination).
    shut: bool,
    total: u64,
}

impl Dir {
    fn pending(&self) -> usize {
        self.in_pipe + (self.buf.len() - self.start)
    }

    fn holds(&self) -> bool {
        self.pipe.is_some() || self.buf.capacity() > 0
    }

    /// Gives back the pipe and the buffer when nothing is in them.
    fn release(&mut self) {
        if self.pending() == 0 {
            self.pipe = None;
            self.buf = Vec::new();
            self.start = 0;
        }
    }

    /// Moves bytes from `src` to `dst` while both are ready and the turn's
    /// budget lasts; passes end of stream on. Returns the bytes read plus
    /// written (zero: nothing happened); an error ends the flow.
    fn pump(
        &mut self,
        src: &TcpStream,
        dst: &TcpStream,
        readable: &mut bool,
        writable: &mut bool,
        budget: &mut usize,
    ) -> Result<usize, Errno> {
        let mut moved = 0;
        loop {
            if self.pending() > 0 {
                if !*writable {
                    break;
                }
                match self.flush(dst) {
                    Ok(n) => {
                        moved += n;
                        self.total += n as u64;
                    }
                    Err(Errno::AGAIN) => {
                        *writable = false;
                        break;
                    }
                    Err(Errno::INTR) => {}
                    Err(e) => return Err(e),
                }
                continue;
            }
            if self.eof {
                if !self.shut {
                    // The other way keeps flowing.
                    let _ = dst.shutdown(Shutdown::Write);
                    self.shut = true;
                    self.release();
                }
                break;
            }
            if !*readable || *budget == 0 {
                break;
            }
            match self.fill(src) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    moved += n;
                    *budget = budget.saturating_sub(n);
                }
                Err(Errno::AGAIN) => {
                    *readable = false;
                    break;
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(moved)
    }

    /// Reads from `src` into the pipe (or the buffer). Only called when
    /// nothing is pending. Returns 0 at end of stream.
    fn fill(&mut self, src: &TcpStream) -> Result<usize, Errno> {
        if self.splice && self.pipe.is_none() {
            // Take a pipe only for bytes that are there: a peek first, so an
            // event without data (the first one after adding, a spurious
            // wake) costs no descriptor.
            let mut one = [0u8; 1];
            if rustix::net::recv(src, &mut one, RecvFlags::PEEK)?.0 == 0 {
                return Ok(0);
            }
            // EMFILE and friends: copy this time, try a pipe again next time.
            self.pipe = new_pipe().ok();
        }
        if let Some((_, w)) = &self.pipe {
            let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
            match splice(src, None, w, None, PIPE_SIZE, flags) {
                Ok(n) => {
                    self.in_pipe = n;
                    return Ok(n);
                }
                Err(Errno::INVAL | Errno::NOSYS) => {
                    // This socket cannot be spliced: copy from now on.
                    self.splice = false;
                    self.pipe = None;
                }
                Err(e) => return Err(e),
            }
        }
        if self.buf.capacity() == 0 {
            self.buf = Vec::with_capacity(COPY_BUF);
        }
        self.buf.clear();
        self.start = 0;
        rustix::io::read(src, spare_capacity(&mut self.buf))
    }

    /// Writes pending bytes to `dst`. Returns how many (never 0).
    fn flush(&mut self, dst: &TcpStream) -> Result<usize, Errno> {
        let n = if self.in_pipe > 0 {
            let Some((r, _)) = &self.pipe else {
                return Err(Errno::BADF);
            };
            let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
            let n = splice(r, None, dst, None, self.in_pipe, flags)?;
            self.in_pipe -= n.min(self.in_pipe);
            n
        } else {
            let n = rustix::net::send(dst, &self.buf[self.start..], SendFlags::NOSIGNAL)?;
            self.start += n;
            if self.start == self.buf.len() {
                self.buf.clear();
                self.start = 0;
            }
            n
        };
        // A socket that takes nothing without EAGAIN is broken: end the flow
        // rather than loop.
        if n == 0 {
            return Err(Errno::PIPE);
        }
        Ok(n)
    }
}

fn new_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
    // The default (64 KiB) is enough; larger means fewer calls per MiB.
    let _ = rustix::pipe::fcntl_setpipe_size(&w, PIPE_SIZE);
    Ok((r, w))
}

/// A relayed flow inside the engine.
struct State {
    socks: [TcpStream; 2],
    readable: [bool; 2],
    writable: [bool; 2],
    /// `dirs[0]`: client -> upstream; `dirs[1]`: upstream -> client.
    dirs: [Dir; 2],
    idle: Duration,
    last: Instant,
    /// This flow's entry in the deadline set.
    due: Instant,
    /// Listed among the flows holding pipes or buffers.
    holding: bool,
    done: Option<Done>,
}

/// How a turn left a flow.
enum Turn {
    Open { more: bool },
    Ended,
}

impl State {
    /// Marks what an event says is ready on `side`.
    fn mark(&mut self, side: usize, flags: epoll::EventFlags) {
        use epoll::EventFlags as F;
        if flags.intersects(F::IN | F::RDHUP | F::HUP | F::ERR) {
            self.readable[side] = true;
        }
        if flags.intersects(F::OUT | F::HUP | F::ERR) {
            self.writable[side] = true;
        }
    }

    /// Moves what can be moved now, both ways.
    fn turn(&mut self, now: Instant) -> Turn {
        let mut budget = TURN_BUDGET;
        let mut moved = 0;
        for (d, (src, dst)) in [(CLIENT, UPSTREAM), (UPSTREAM, CLIENT)]
            .into_iter()
            .enumerate()
        {
            let r = self.dirs[d].pump(
                &self.socks[src],
                &self.socks[dst],
                &mut self.readable[src],
                &mut self.writable[dst],
                &mut budget,
            );
            match r {
                Ok(n) => moved += n,
                Err(_) => return Turn::Ended,
            }
        }
        if moved > 0 {
            self.last = now;
        }
        if self.dirs.iter().all(|d| d.shut) {
            return Turn::Ended;
        }
        // Budget spent with a source still readable: come back without
        // waiting for an edge that will not come.
        // (Direction d reads from side d.)
        let more = budget == 0 && (0..2).any(|d| !self.dirs[d].eof && self.readable[d]);
        Turn::Open { more }
    }

    fn holds(&self) -> bool {
        self.dirs.iter().any(Dir::holds)
    }

    fn totals(&self) -> Totals {
        Totals {
            up: self.dirs[0].total,
            down: self.dirs[1].total,
        }
    }
}

/// The engine's thread and everything only it touches.
struct Worker {
    shared: Arc<Shared>,
    splice: bool,
    flows: HashMap<u64, State>,
    next_id: u64,
    deadlines: BTreeSet<(Instant, u64)>,
    /// Flows with work left after their turn's budget.
    again: Vec<u64>,
    /// Flows that may hold a pipe or buffer (checked every LINGER).
    holders: Vec<u64>,
    next_sweep: Option<Instant>,
}

impl Worker {
    fn new(shared: Arc<Shared>, splice: bool) -> Worker {
        Worker {
            shared,
            splice,
            flows: HashMap::new(),
            next_id: 0,
            deadlines: BTreeSet::new(),
            again: Vec::new(),
            holders: Vec::new(),
            next_sweep: None,
        }
    }

    fn run(mut self) {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(EVENTS);
        let mut touched: Vec<u64> = Vec::new();
        loop {
            let timeout = self.timeout(Instant::now());
            events.clear();
            match epoll::wait(
                &self.shared.epoll,
                spare_capacity(&mut events),
                timeout.as_ref(),
            ) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => {
                    // Not expected (EBADF, EFAULT): nothing sensible is left
                    // to do but end every flow, so their slots come back.
                    tracing::error!("terra-netd: relay epoll_wait failed: {e}");
                    self.end_all();
                    return;
                }
            }
            touched.clear();
            touched.append(&mut self.again);
            for ev in &events {
                let key = ev.data.u64();
                if key == WAKE {
                    self.adopt_incoming(&mut touched);
                    continue;
                }
                let (id, side) = (key >> 1, (key & 1) as usize);
                if let Some(f) = self.flows.get_mut(&id) {
                    f.mark(side, ev.flags);
                    touched.push(id);
                }
            }
            touched.sort_unstable();
            touched.dedup();
            let now = Instant::now();
            for &id in &touched {
                self.turn(id, now);
            }
            self.expire(now);
            self.sweep(now);
            if self.shared.closing.load(Ordering::SeqCst) {
                self.end_all();
                return;
            }
        }
    }

    /// How long to wait: not at all with work left, else until the next
    /// deadline or sweep, else forever.
    fn timeout(&self, now: Instant) -> Option<rustix::event::Timespec> {
        if !self.again.is_empty() {
            return Some(timespec(Duration::ZERO));
        }
        let next = self.deadlines.first().map(|(t, _)| *t);
        let next = match (next, self.next_sweep) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }?;
        // Capped so the millisecond count fits the system call's int.
        let wait = next
            .saturating_duration_since(now)
            .min(Duration::from_secs(3600));
        Some(timespec(wait))
    }

    fn adopt_incoming(&mut self, touched: &mut Vec<u64>) {
        let mut counter = [0u8; 8];
        let _ = rustix::io::read(&self.shared.wake, &mut counter);
        let flows = std::mem::take(&mut *lock(&self.shared.incoming));
        for flow in flows {
            if let Some(id) = self.adopt(flow) {
                touched.push(id);
            }
        }
    }

    /// Registers a new flow; None (and its `done` called) when it cannot be.
    fn adopt(&mut self, flow: Flow) -> Option<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let registered = register(&self.shared.epoll, &flow.client, id << 1)
            .and_then(|()| register(&self.shared.epoll, &flow.upstream, id << 1 | 1));
        if let Err(e) = registered {
            tracing::warn!("terra-netd: cannot relay a flow: {e}");
            finish(flow.done, Totals::default());
            return None;
        }
        let now = Instant::now();
        let due = now + flow.idle;
        let mut dirs: [Dir; 2] = Default::default();
        for d in &mut dirs {
            d.splice = self.splice;
        }
        dirs[0].buf = flow.replay;
        self.flows.insert(
            id,
            State {
                socks: [flow.client, flow.upstream],
                // Optimistic: the first turn finds out (EAGAIN) what is not.
                readable: [true; 2],
                writable: [true; 2],
                dirs,
                idle: flow.idle,
                last: now,
                due,
                holding: false,
                done: Some(flow.done),
            },
        );
        self.deadlines.insert((due, id));
        Some(id)
    }

    fn turn(&mut self, id: u64, now: Instant) {
        let Some(f) = self.flows.get_mut(&id) else {
            return;
        };
        match f.turn(now) {
            Turn::Ended => self.end(id),
            Turn::Open { more } => {
                if more {
                    self.again.push(id);
                }
                if !f.holding && f.holds() {
                    f.holding = true;
                    self.holders.push(id);
                    self.next_sweep.get_or_insert(now + LINGER);
                }
            }
        }
    }

    /// Ends flows quiet for their idle timeout; re-arms the others.
    fn expire(&mut self, now: Instant) {
        while let Some(&(due, id)) = self.deadlines.first() {
            if due > now {
                break;
            }
            self.deadlines.pop_first();
            let Some(f) = self.flows.get_mut(&id) else {
                continue;
            };
            let next = f.last + f.idle;
            if next <= now {
                self.end(id);
            } else {
                f.due = next;
                self.deadlines.insert((next, id));
            }
        }
    }

    /// Takes pipes and buffers back from flows quiet for LINGER.
    fn sweep(&mut self, now: Instant) {
        match self.next_sweep {
            Some(t) if t <= now => {}
            _ => return,
        }
        let flows = &mut self.flows;
        self.holders.retain(|id| {
            let Some(f) = flows.get_mut(id) else {
                return false;
            };
            if now.saturating_duration_since(f.last) >= LINGER {
                f.dirs.iter_mut().for_each(Dir::release);
            }
            f.holding = f.holds();
            f.holding
        });
        self.next_sweep = (!self.holders.is_empty()).then(|| now + LINGER);
    }

    /// Closes a flow (both sockets; deregistered by the close) and reports it.
    fn end(&mut self, id: u64) {
        if let Some(mut f) = self.flows.remove(&id) {
            self.deadlines.remove(&(f.due, id));
            let totals = f.totals();
            for s in &f.socks {
                let _ = s.shutdown(Shutdown::Both);
            }
            if let Some(done) = f.done.take() {
                drop(f);
                finish(done, totals);
            }
        }
    }

    fn end_all(&mut self) {
        let ids: Vec<u64> = self.flows.keys().copied().collect();
        for id in ids {
            self.end(id);
        }
        for flow in std::mem::take(&mut *lock(&self.shared.incoming)) {
            finish(flow.done, Totals::default());
        }
    }
}

fn register(epoll_fd: &OwnedFd, sock: &TcpStream, key: u64) -> io::Result<()> {
    use epoll::EventFlags as F;
    sock.set_nonblocking(true)?;
    epoll::add(
        epoll_fd,
        sock,
        epoll::EventData::new_u64(key),
        F::IN | F::OUT | F::RDHUP | F::ET,
    )?;
    Ok(())
}

/// Runs a completion; a panic in it (a receipt writer bug) must not take
/// every other flow down with the engine's thread.
fn finish(done: Done, totals: Totals) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| done(totals)));
    if r.is_err() {
        tracing::error!("terra-netd: a relay completion panicked");
    }
}

fn timespec(d: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: d.as_secs() as _,
        tv_nsec: d.subsec_nanos() as _,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// A connected pair of loopback sockets.
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        for s in [&a, &b] {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        }
        (a, b)
    }

    /// A flow between two fresh pairs: (the client's end, the upstream
    /// server's end, the completion's receiver).
    fn flow(
        engine: &Engine,
        replay: &[u8],
        idle: Duration,
    ) -> (TcpStream, TcpStream, mpsc::Receiver<Totals>) {
        let (client_app, client) = pair();
        let (upstream, server_app) = pair();
        let (tx, rx) = mpsc::channel();
        engine.add(Flow {
            client,
            upstream,
            replay: replay.to_vec(),
            idle,
            done: Box::new(move |t| {
                let _ = tx.send(t);
            }),
        });
        (client_app, server_app, rx)
    }

    fn pattern(len: usize, seed: u32) -> Vec<u8> {
        (0..len as u32)
            .map(|i| ((i * 7 + seed) % 251) as u8)
            .collect()
    }

    /// Both ways at once, each ended by a half-close: every byte arrives in
    /// order, the replay first, and the totals count them.
    fn relays_both_ways(splice: bool) {
        let engine = Engine::with_splice(splice).unwrap();
        let (mut c, mut s, done) = flow(&engine, b"REPLAY", Duration::from_secs(60));
        let up = pattern(700_000, 1);
        let down = pattern(900_000, 2);
        let (up2, down2) = (up.clone(), down.clone());
        let client = std::thread::spawn(move || {
            let mut r = c.try_clone().unwrap();
            let reader = std::thread::spawn(move || {
                let mut got = Vec::new();
                r.read_to_end(&mut got).unwrap();
                got
            });
            c.write_all(&up2).unwrap();
            c.shutdown(Shutdown::Write).unwrap();
            reader.join().unwrap()
        });
        let mut w = s.try_clone().unwrap();
        let server = std::thread::spawn(move || {
            w.write_all(&down2).unwrap();
            w.shutdown(Shutdown::Write).unwrap();
        });
        let mut got_up = Vec::new();
        s.read_to_end(&mut got_up).unwrap();
        server.join().unwrap();
        let got_down = client.join().unwrap();
        assert_eq!(&got_up[..6], b"REPLAY");
        assert!(got_up[6..] == up[..], "client->server bytes differ");
        assert!(got_down == down, "server->client bytes differ");
        let t = done.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(
            t,
            Totals {
                up: 6 + up.len() as u64,
                down: down.len() as u64
            }
        );
    }

    #[test]
    fn splice_relays_both_ways() {
        relays_both_ways(true);
    }

    #[test]
    fn copy_fallback_relays_both_ways() {
        relays_both_ways(false);
    }

    /// After the server half-closes, the client still gets the end of
    /// stream and can go on sending; the flow ends only when both ways did.
    #[test]
    fn half_close_keeps_the_other_way() {
        let engine = Engine::new().unwrap();
        let (mut c, mut s, done) = flow(&engine, b"", Duration::from_secs(60));
        s.write_all(b"bye").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"bye");
        // The flow is still open client -> server.
        assert!(done.try_recv().is_err());
        let more = pattern(200_000, 3);
        c.write_all(&more).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        s.read_to_end(&mut back).unwrap();
        assert!(back == more);
        let t = done.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!((t.up, t.down), (200_000, 3));
    }

    /// A flow with no byte either way is closed on both sides.
    #[test]
    fn idle_flow_is_closed() {
        let engine = Engine::new().unwrap();
        let (mut c, mut s, done) = flow(&engine, b"hi", Duration::from_millis(100));
        let mut two = [0u8; 2];
        s.read_exact(&mut two).unwrap();
        assert_eq!(&two, b"hi");
        // Both reads end (EOF) because the engine closed the flow, not
        // because of the 30 s read timeout (that would be an error).
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        s.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        let t = done.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!((t.up, t.down), (2, 0));
    }

    /// Dropping the engine ends its flows (and reports them).
    #[test]
    fn dropped_engine_ends_its_flows() {
        let engine = Engine::new().unwrap();
        let (mut c, _s, done) = flow(&engine, b"", Duration::from_secs(60));
        drop(engine);
        let t = done.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(t, Totals::default());
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
    }
}
