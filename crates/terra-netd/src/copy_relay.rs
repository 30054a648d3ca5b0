//! The portable relay: two threads per flow, each copying one way through a
//! buffer with blocking reads bounded by a tick.
//!
//! It is the relay of hosts without epoll and splice (the macOS broker), and
//! it is built and tested on every host: on Linux a broker made with
//! [`crate::broker::Relay::Copy`] uses it, so the code a Mac runs has run
//! in this crate's tests (`tests/broker_standalone.rs`, the unit tests
//! below). The event-driven relay of the Linux broker is [`crate::relay`].
//!
//! A flow ends when both directions reached end of stream (each half-close
//! is passed on), on any error (both sockets are shut down, which wakes the
//! other direction's thread), or when nothing moved either way for `idle`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Stack of the upstream-to-client thread (the client-to-upstream direction
/// runs on the caller's thread).
const RELAY_STACK: usize = 64 * 1024;
/// Buffers start small (idle flows stay cheap) and grow once a read fills one.
const BUF_MIN: usize = 8 * 1024;
const BUF_MAX: usize = 128 * 1024;

/// What a flow moved: bytes client->upstream (the replay included) and
/// upstream->client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    pub up: u64,
    pub down: u64,
}

/// Sends `replay` upstream, then relays both ways until the flow ends (see
/// the module documentation). Blocks the calling thread; starts one more.
pub fn relay(client: TcpStream, upstream: TcpStream, replay: Vec<u8>, idle: Duration) -> Moved {
    let idle = idle.max(Duration::from_millis(1));
    // How often a blocked read wakes up to look at the idle clock.
    let tick = (idle / 4).clamp(Duration::from_millis(20), Duration::from_secs(5));
    let clock = Clock {
        epoch: Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let clock = Arc::new(clock);
    let _ = client.set_write_timeout(Some(idle));
    let _ = upstream.set_write_timeout(Some(idle));
    if !replay.is_empty() && (&upstream).write_all(&replay).is_err() {
        close_both(&client, &upstream);
        return Moved::default();
    }
    let sent = replay.len() as u64;
    drop(replay);
    let (c2, u2) = match (client.try_clone(), upstream.try_clone()) {
        (Ok(c), Ok(u)) => (c, u),
        _ => {
            close_both(&client, &upstream);
            return Moved { up: sent, down: 0 };
        }
    };
    let clock2 = Arc::clone(&clock);
    let down = std::thread::Builder::new()
        .name("terra-netd-copy".into())
        .stack_size(RELAY_STACK)
        .spawn(move || pump(&u2, &c2, &clock2, idle, tick));
    let down = match down {
        Ok(h) => h,
        Err(_) => {
            close_both(&client, &upstream);
            return Moved { up: sent, down: 0 };
        }
    };
    let up = pump(&client, &upstream, &clock, idle, tick);
    let down = down.join().unwrap_or(0);
    Moved {
        up: sent + up,
        down,
    }
}

/// When the flow last moved a byte either way (milliseconds since `epoch`).
struct Clock {
    epoch: Instant,
    last_ms: AtomicU64,
}

impl Clock {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }
    fn quiet_for(&self, idle: Duration) -> bool {
        let quiet = self
            .now_ms()
            .saturating_sub(self.last_ms.load(Ordering::Relaxed));
        quiet >= u64::try_from(idle.as_millis()).unwrap_or(u64::MAX)
    }
}

/// Ends a flow: both sockets shut down both ways, so the other direction's
/// blocked read returns at once.
fn close_both(a: &TcpStream, b: &TcpStream) {
    let _ = a.shutdown(Shutdown::Both);
    let _ = b.shutdown(Shutdown::Both);
}

/// Copies `from` -> `to` until end of stream (then half-closes `to`), an
/// error, or `idle` without a byte in either direction (then closes both).
/// Returns the bytes copied.
fn pump(from: &TcpStream, to: &TcpStream, clock: &Clock, idle: Duration, tick: Duration) -> u64 {
    let _ = from.set_read_timeout(Some(tick));
    let mut buf = vec![0u8; BUF_MIN];
    let mut total = 0u64;
    let mut reader = from;
    let mut writer = to;
    loop {
        match reader.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return total;
            }
            Ok(n) => {
                clock.touch();
                if writer.write_all(&buf[..n]).is_err() {
                    close_both(from, to);
                    return total;
                }
                clock.touch();
                total += n as u64;
                if n == buf.len() && buf.len() < BUF_MAX {
                    buf.resize(BUF_MAX, 0);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                if clock.quiet_for(idle) {
                    close_both(from, to);
                    return total;
                }
            }
            Err(_) => {
                close_both(from, to);
                return total;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A connected pair over loopback: (the end we keep, the end the relay gets).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    /// Starts a relay between a "client" and an "upstream" pair; returns our
    /// ends and the relay's join handle.
    fn start(
        replay: &[u8],
        idle: Duration,
    ) -> (TcpStream, TcpStream, std::thread::JoinHandle<Moved>) {
        let (client, client_relay) = pair();
        let (upstream, upstream_relay) = pair();
        let replay = replay.to_vec();
        let h = std::thread::spawn(move || relay(client_relay, upstream_relay, replay, idle));
        (client, upstream, h)
    }

    #[test]
    fn bytes_go_both_ways_after_the_replay_and_are_counted() {
        let (mut client, mut upstream, h) = start(b"HELLO ", Duration::from_secs(30));
        client.write_all(b"from client").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        upstream.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"HELLO from client");
        // A half-close upstream was passed on; the other way still works.
        let big = vec![7u8; 3 * BUF_MAX + 5];
        upstream.write_all(&big).unwrap();
        upstream.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        client.read_to_end(&mut back).unwrap();
        assert_eq!(back, big);
        let moved = h.join().unwrap();
        assert_eq!(
            moved,
            Moved {
                up: 17,
                down: big.len() as u64
            }
        );
    }

    #[test]
    fn a_quiet_flow_is_closed_after_its_idle_time() {
        let (mut client, mut upstream, h) = start(b"", Duration::from_millis(50));
        // Nothing moves: the relay must end by itself and close both sides
        // (a generous bound, so a relay that never ends fails the test).
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(h.join().unwrap()));
        let moved = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the idle flow was never closed");
        assert_eq!(moved, Moved::default());
        let mut buf = [0u8; 1];
        assert_eq!(client.read(&mut buf).unwrap_or(0), 0);
        assert_eq!(upstream.read(&mut buf).unwrap_or(0), 0);
    }

    #[test]
    fn a_reset_side_ends_the_flow() {
        let (client, mut upstream, h) = start(b"", Duration::from_secs(30));
        drop(client);
        // The client closed: end of stream reaches upstream, which then
        // closes too, and the relay returns.
        let mut got = Vec::new();
        upstream.read_to_end(&mut got).unwrap();
        assert!(got.is_empty());
        drop(upstream);
        assert_eq!(h.join().unwrap(), Moved::default());
    }
}
