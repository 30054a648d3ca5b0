//! The broker wrapper's socket service, for a broker in its own
//! AppContainer without network capability: open an outbound TCP or UDP
//! socket the broker's policy approved (checked against the ledger,
//! `terra_appcontainer::sockets`: approval first, at most 64 at a time,
//! 30 s each), connect it, and duplicate it into the broker's process
//! (WSADuplicateSocketW); the broker makes its own socket from the
//! returned WSAPROTOCOL_INFOW.
//!
//! Not started by anything in this build: no broker runs on Windows
//! (terra-netd's broker is Linux-only), so the launcher refuses the broker
//! role. This is the wrapper's half, ready for it.

use super::error::Error;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::windows::io::AsRawSocket;
use std::time::Duration;

use terra_appcontainer::sockets::{Ledger, LIFETIME_MS};
use terra_appcontainer::Proto;
use windows_sys::Win32::Networking::WinSock::{
    WSADuplicateSocketW, WSAGetLastError, SOCKET, WSAPROTOCOL_INFOW,
};

/// Opens the socket of approval `id` and duplicates it into `broker_pid`;
/// returns the WSAPROTOCOL_INFOW bytes for the broker. The ledger's slot is
/// freed whatever happens.
pub fn open_for_broker(
    ledger: &mut Ledger,
    id: u64,
    proto: Proto,
    addr: SocketAddr,
    broker_pid: u32,
    now_ms: u64,
) -> Result<Vec<u8>, Error> {
    ledger.open(id, proto, addr, now_ms)?;
    let result = match proto {
        Proto::Tcp => TcpStream::connect_timeout(&addr, Duration::from_millis(LIFETIME_MS))
            .map_err(|e| Error::Os {
                call: format!("connect {addr}"),
                source: e,
            })
            .and_then(|s| duplicate(s.as_raw_socket(), broker_pid)),
        Proto::Udp => {
            let local: SocketAddr = if addr.is_ipv4() {
                "0.0.0.0:0".parse().expect("a literal address")
            } else {
                "[::]:0".parse().expect("a literal address")
            };
            UdpSocket::bind(local)
                .and_then(|s| s.connect(addr).map(|()| s))
                .map_err(|e| Error::Os {
                    call: format!("udp {addr}"),
                    source: e,
                })
                .and_then(|s| duplicate(s.as_raw_socket(), broker_pid))
        }
    };
    ledger.done(id);
    result
}

fn duplicate(socket: u64, pid: u32) -> Result<Vec<u8>, Error> {
    // SAFETY: all-zero is a valid WSAPROTOCOL_INFOW for the call to fill.
    let mut info: WSAPROTOCOL_INFOW = unsafe { std::mem::zeroed() };
    // SAFETY: `socket` is a valid socket of this process (its owner is
    // alive until after the call); `info` is writable.
    if unsafe { WSADuplicateSocketW(socket as SOCKET, pid, &mut info) } != 0 {
        // SAFETY: plain call reading this thread's last Winsock error.
        let e = unsafe { WSAGetLastError() };
        return Err(format!("WSADuplicateSocketW into process {pid}: error {e}").into());
    }
    // SAFETY: `info` is a plain C structure; its bytes are what the broker
    // passes to WSASocketW.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&info as *const WSAPROTOCOL_INFOW).cast::<u8>(),
            std::mem::size_of::<WSAPROTOCOL_INFOW>(),
        )
    };
    Ok(bytes.to_vec())
}
