//! The broker wrapper's socket ledger: which outbound sockets the wrapper
//! may open for the broker, decided in plain Rust.
//!
//! On Windows the broker runs in its own AppContainer with no network
//! capability: it can neither connect, accept nor listen. When its policy
//! approves a peer, it tells its wrapper (`terra __sandbox_launcher`, which
//! runs as the user); the wrapper opens the socket, connects it and
//! duplicates it into the broker. The ledger is the wrapper's rulebook:
//!
//! - **Approval first.** A socket is opened only for an address the broker
//!   approved just before, once per approval, and only when the approval
//!   names one of the spec's peers with the same protocol and port, and a
//!   private address only for a peer that allows private addresses (so even
//!   a broker that lies can reach no other port, nor the host's own
//!   services).
//! - **At most [`MAX_OPEN`] at a time.** An approval waiting to be used
//!   and a socket between its open and its hand-over each hold a slot.
//! - **[`LIFETIME_MS`] each.** A slot older than that is expired: the
//!   wrapper abandons the connect (closes its socket) and says so.
//!
//! Time is a millisecond count from the caller's monotonic clock, so the
//! ledger never reads a clock itself.

use std::net::{IpAddr, SocketAddr};

use crate::error::{Error, Result};
use crate::spec::{Peer, Proto};

/// The most approvals and sockets the wrapper holds at once.
pub const MAX_OPEN: usize = 64;
/// How long an approval or a socket being opened may take, in milliseconds.
pub const LIFETIME_MS: u64 = 30_000;

/// One slot of the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub id: u64,
    pub proto: Proto,
    pub addr: SocketAddr,
    /// Index of the peer in the spec.
    pub peer: usize,
    pub since_ms: u64,
    /// Opened (the wrapper holds a socket), not just approved.
    pub opened: bool,
}

/// The wrapper's ledger for one broker.
#[derive(Debug)]
pub struct Ledger {
    peers: Vec<Peer>,
    is_private: fn(IpAddr) -> bool,
    slots: Vec<Slot>,
    next_id: u64,
}

impl Ledger {
    /// `peers`: the spec's peers; `is_private`: the policy's classification
    /// of addresses that are not globally routable.
    pub fn new(peers: Vec<Peer>, is_private: fn(IpAddr) -> bool) -> Ledger {
        Ledger {
            peers,
            is_private,
            slots: Vec::new(),
            next_id: 1,
        }
    }

    /// Slots held (approved or opened).
    pub fn held(&self) -> usize {
        self.slots.len()
    }

    /// The broker's policy approved `addr` over `proto` for peer `peer`.
    /// Returns the approval's id, which [`Ledger::open`] takes.
    pub fn approve(
        &mut self,
        peer: usize,
        proto: Proto,
        addr: SocketAddr,
        now_ms: u64,
    ) -> Result<u64> {
        let p = self.peers.get(peer).ok_or_else(|| {
            Error::Socket(format!(
                "the approval names peer {peer}, and the spec has {}",
                self.peers.len()
            ))
        })?;
        if p.proto != proto || p.port != addr.port() {
            return Err(Error::Socket(format!(
                "{} {addr} does not match peer {peer} ({} {}:{})",
                proto.name(),
                p.proto.name(),
                p.host,
                p.port
            )));
        }
        if (self.is_private)(addr.ip()) && !p.allow_private {
            return Err(Error::Socket(format!(
                "{addr} is a private address, and peer {peer} ({}:{}) does not allow private addresses",
                p.host, p.port
            )));
        }
        if self.slots.len() >= MAX_OPEN {
            return Err(Error::Socket(format!(
                "{MAX_OPEN} sockets are already being opened; refusing {addr} until one is done"
            )));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.slots.push(Slot {
            id,
            proto,
            addr,
            peer,
            since_ms: now_ms,
            opened: false,
        });
        Ok(id)
    }

    /// The wrapper is about to open the socket of approval `id` to `addr`:
    /// allowed once, for exactly the approved protocol and address, within
    /// its lifetime.
    pub fn open(&mut self, id: u64, proto: Proto, addr: SocketAddr, now_ms: u64) -> Result<()> {
        let slot = self.slots.iter_mut().find(|s| s.id == id).ok_or_else(|| {
            Error::Socket(format!("no approval {id} (never given, used, or expired)"))
        })?;
        if slot.opened {
            return Err(Error::Socket(format!("approval {id} was already used")));
        }
        if slot.proto != proto || slot.addr != addr {
            return Err(Error::Socket(format!(
                "approval {id} is for {} {}, not {} {addr}",
                slot.proto.name(),
                slot.addr,
                proto.name()
            )));
        }
        if now_ms.saturating_sub(slot.since_ms) >= LIFETIME_MS {
            return Err(Error::Socket(format!("approval {id} expired")));
        }
        slot.opened = true;
        Ok(())
    }

    /// The socket of `id` was handed to the broker, or its open failed: the
    /// slot is free again.
    pub fn done(&mut self, id: u64) {
        self.slots.retain(|s| s.id != id);
    }

    /// Removes and returns the slots older than [`LIFETIME_MS`] at `now_ms`:
    /// the wrapper closes the socket of each opened one.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Slot> {
        let (old, keep): (Vec<Slot>, Vec<Slot>) = std::mem::take(&mut self.slots)
            .into_iter()
            .partition(|s| now_ms.saturating_sub(s.since_ms) >= LIFETIME_MS);
        self.slots = keep;
        old
    }
}
