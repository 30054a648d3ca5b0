//! Descriptor passing between the box-side service and the broker (fd 7), and
//! adopting the broker's fixed descriptors. The only module with `unsafe`.
#![allow(unsafe_code)]

use std::io::{self, IoSlice, IoSliceMut};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    getsockopt, recvmsg, sendmsg, socketpair, sockopt, AddressFamily, ControlMessage,
    ControlMessageOwned, MsgFlags, SockFlag, SockType,
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
    let fds = [stream.as_raw_fd()];
    let payload = [0u8];
    sendmsg::<()>(
        chan.as_raw_fd(),
        &[IoSlice::new(&payload)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
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
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS_PER_MESSAGE]);
    let msg = loop {
        match recvmsg::<()>(
            chan.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => break m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let mut owned: Vec<OwnedFd> = Vec::new();
    for cmsg in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            for fd in fds {
                // SAFETY: the kernel just installed `fd` in this process for this
                // message; nothing else refers to it, so we take sole ownership.
                owned.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    if msg.bytes == 0 && owned.is_empty() {
        return Ok(Received::Closed);
    }
    let mut streams = Vec::new();
    let mut dropped = 0;
    for fd in owned {
        let is_stream = matches!(getsockopt(&fd, sockopt::SockType), Ok(SockType::Stream));
        let stream = TcpStream::from(fd);
        if is_stream && stream.local_addr().is_ok() {
            streams.push(stream);
        } else {
            dropped += 1;
        }
    }
    Ok(Received::Streams(streams, dropped))
}

/// Takes ownership of an inherited fixed descriptor (7 or 8) after checking
/// that it is open.
pub fn adopt_fd(fd: RawFd) -> io::Result<OwnedFd> {
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).map_err(|e| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("descriptor {fd} is not open: {e}"),
        )
    })?;
    // SAFETY: the launcher placed `fd` in this process for this role (fixed
    // descriptor numbers, DESIGN.md); it is open (checked above) and adopted
    // exactly once, at startup, before any other code could use the number.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
