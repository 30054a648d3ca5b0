//! Descriptor passing between the box-side service and the broker (fd 7), and
//! adopting the broker's fixed descriptors. The only module with `unsafe`
//! (one block: taking ownership of an inherited descriptor number).

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::TcpStream;
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use rustix::net::{
    recvmsg, sendmsg, sockopt, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketType,
};

/// Most descriptors the broker accepts in one message (the box sends one).
const MAX_FDS_PER_MESSAGE: usize = 4;

/// The fd 7 socketpair the supervisor creates: (box end, broker end).
/// SOCK_SEQPACKET keeps one message per passed socket; both ends close-on-exec.
pub fn broker_socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)
}

/// Sends `stream` over `chan` with SCM_RIGHTS (never raises SIGPIPE).
pub fn send_stream(chan: &OwnedFd, stream: &TcpStream) -> io::Result<()> {
    let fds = [stream.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("SCM_RIGHTS message does not fit"));
    }
    let payload = [0u8];
    sendmsg(
        chan,
        &[IoSlice::new(&payload)],
        &mut control,
        SendFlags::NOSIGNAL,
    )
    .map(|_| ())
    .map_err(io::Error::from)
}

/// What one receive from the channel gave.
pub enum Received {
    /// The peer closed the channel.
    Closed,
    /// Descriptors that are TCP stream sockets, and how many others were dropped.
    Streams(Vec<TcpStream>, usize),
}

/// Receives one message from `chan`; every descriptor is owned immediately and
/// kept only when it is an internet stream socket.
pub fn recv_streams(chan: &OwnedFd) -> io::Result<Received> {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_MESSAGE))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = loop {
        let mut iov = [IoSliceMut::new(&mut byte)];
        match recvmsg(chan, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(m) => break m,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let mut owned: Vec<OwnedFd> = Vec::new();
    for cmsg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = cmsg {
            owned.extend(fds);
        }
    }
    if msg.bytes == 0 && owned.is_empty() {
        return Ok(Received::Closed);
    }
    let mut streams = Vec::new();
    let mut dropped = 0;
    for fd in owned {
        match tcp_stream(fd) {
            Some(s) => streams.push(s),
            None => dropped += 1,
        }
    }
    Ok(Received::Streams(streams, dropped))
}

/// `fd` as a TCP stream when it is a connected internet stream socket.
pub fn tcp_stream(fd: OwnedFd) -> Option<TcpStream> {
    let is_stream = matches!(sockopt::socket_type(&fd), Ok(SocketType::STREAM));
    let stream = TcpStream::from(fd);
    (is_stream && stream.local_addr().is_ok()).then_some(stream)
}

/// A fixed descriptor the broker expected to inherit is not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("descriptor {fd} is not open: {errno}")]
pub struct NotOpen {
    pub fd: RawFd,
    /// What fcntl(F_GETFD) said (EBADF).
    pub errno: Errno,
}

/// Takes ownership of an inherited fixed descriptor (7, 8 or 9) after
/// checking that it is open.
pub fn adopt_fd(fd: RawFd) -> Result<OwnedFd, NotOpen> {
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).map_err(|errno| NotOpen { fd, errno })?;
    // SAFETY: the launcher placed `fd` in this process for this role (fixed
    // descriptor numbers, DESIGN.md); it is open (checked above) and adopted
    // exactly once, at startup, before any other code could use the number.
    #[allow(unsafe_code)]
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_stream_passes_and_the_closed_channel_is_seen() {
        let (a, b) = broker_socketpair().unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        send_stream(&a, &s).unwrap();
        match recv_streams(&b).unwrap() {
            Received::Streams(got, 0) => {
                assert_eq!(got.len(), 1);
                assert_eq!(got[0].local_addr().unwrap(), s.local_addr().unwrap());
            }
            _ => panic!("expected one stream"),
        }
        drop(a);
        assert!(matches!(recv_streams(&b).unwrap(), Received::Closed));
    }

    #[test]
    fn adopting_a_closed_descriptor_names_it() {
        let e = adopt_fd(1_000_000).unwrap_err();
        assert_eq!(e.errno, Errno::EBADF);
        assert!(
            e.to_string().starts_with("descriptor 1000000 is not open"),
            "{e}"
        );
    }
}
