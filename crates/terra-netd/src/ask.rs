//! The box service's questions to the broker, beside the proxy sockets on the
//! same fd 7 channel: "connect this workload socket", "resolve this name
//! for the DNS stub", "the workload sent UDP elsewhere". Each question is one
//! SOCK_SEQPACKET message (tag byte [`ASK_TAG`], then JSON) carrying the
//! question's own reply socket (one end of a fresh socketpair); the broker
//! answers on that socket once (JSON, plus the connected socket for
//! [`Answer::Connected`]) and closes it. No multiplexing, no ids: a reply
//! socket belongs to one question.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};

/// First byte of a question message (a proxy socket's message is one 0 byte).
pub const ASK_TAG: u8 = b'?';
/// Largest question or answer (a name is at most 253 bytes; an answer holds
/// at most a few dozen addresses).
pub const MAX_MESSAGE: usize = 8 * 1024;

/// Socket options the workload set before connect() (only those that
/// differ from a fresh socket's), applied by the broker to the socket it
/// connects, before it connects.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocketOptions {
    pub reuse_addr: Option<bool>,
    pub keepalive: Option<bool>,
    pub nodelay: Option<bool>,
    /// As the workload set them (the kernel reports twice the value set).
    pub send_buffer: Option<usize>,
    pub recv_buffer: Option<usize>,
    /// SO_LINGER: Some(seconds) when on.
    pub linger: Option<Option<u32>>,
    pub v6_only: Option<bool>,
}

/// A question of the box service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Ask {
    /// A workload's connect() of a TCP socket to `to`, as written;
    /// `v6_socket` when the workload's socket is AF_INET6 (the broker's
    /// socket is then AF_INET6 too, also for a v4-mapped address).
    Connect {
        to: SocketAddr,
        v6_socket: bool,
        options: SocketOptions,
    },
    /// A DNS stub question for A or AAAA (`qtype` 1 or 28).
    Resolve { name: String, qtype: u16 },
    /// A workload's connect() of a UDP socket to `to`.
    Udp { to: SocketAddr },
    /// The checked path for `to` after [`Answer::Relay`]: the broker's end
    /// of a TCP pair inside the box travels with the question.
    Relay { to: SocketAddr },
}

/// The broker's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Answer {
    /// Connected and judged: the socket travels with this message.
    Connected,
    /// Admitted: the broker's socket, not yet connected, travels with this
    /// message, for the box to bind to a port of its own ([`ask_connect`]);
    /// the box says `bound` (or `unbound`) on the same reply socket and the
    /// broker then connects it and answers again.
    Bind,
    /// A box-local address no destination lists: the box service connects
    /// the workload's socket itself, inside the box (its own loopback).
    Local,
    /// Refused: the call fails with this errno (the receipt says why).
    Refused { errno: i32 },
    /// The destination requires TLS SNI: the box hands the workload one end
    /// of a TCP pair and the broker the other ([`Ask::Relay`]), so the
    /// broker reads the ClientHello before it connects anywhere.
    Relay,
    /// The broker took the relayed socket.
    Relaying,
    /// The stub's answer: the name's pinned addresses (both families).
    Addresses { addresses: Vec<IpAddr> },
    /// Not a listed name, or it does not exist.
    NxDomain,
    /// The lookup failed.
    ServFail,
}

fn send_with(sock: BorrowedFd<'_>, payload: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("SCM_RIGHTS message does not fit"));
    }
    sendmsg(
        sock,
        &[IoSlice::new(payload)],
        &mut control,
        SendFlags::NOSIGNAL,
    )
    .map(|_| ())
    .map_err(io::Error::from)
}

/// Receives one message of at most [`MAX_MESSAGE`] bytes with the
/// descriptors it carries (owned at once, close-on-exec). `None` when the
/// peer closed.
pub fn recv_with(sock: BorrowedFd<'_>) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = loop {
        let mut iov = [IoSliceMut::new(&mut buf)];
        match recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(m) => break m,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let mut fds: Vec<OwnedFd> = Vec::new();
    for cmsg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(got) = cmsg {
            fds.extend(got);
        }
    }
    if msg.bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    if msg.flags.contains(rustix::net::ReturnFlags::TRUNC) {
        return Err(io::Error::other("a message longer than 8 KiB"));
    }
    buf.truncate(msg.bytes);
    Ok(Some((buf, fds)))
}

/// The box side: asks `question` over the fd 7 channel and waits for the
/// answer (and the socket of [`Answer::Connected`]).
pub fn ask(channel: BorrowedFd<'_>, question: &Ask) -> io::Result<(Answer, Option<OwnedFd>)> {
    ask_with(channel, question, None)
}

/// [`ask`], with `extra` travelling beside the reply socket ([`Ask::Relay`]).
pub fn ask_with(
    channel: BorrowedFd<'_>,
    question: &Ask,
    extra: Option<BorrowedFd<'_>>,
) -> io::Result<(Answer, Option<OwnedFd>)> {
    let (mine, theirs) = crate::fdpass::broker_socketpair()?;
    let mut payload = vec![ASK_TAG];
    serde_json::to_writer(&mut payload, question).map_err(io::Error::other)?;
    let mut fds = vec![theirs.as_fd()];
    fds.extend(extra);
    send_with(channel, &payload, &fds)?;
    drop(theirs);
    receive_answer(mine.as_fd())
}

/// The box's word after [`Answer::Bind`].
pub const BOUND: &[u8] = b"bound";
pub const UNBOUND: &[u8] = b"unbound";

/// [`ask`] for [`Ask::Connect`]: when the broker answers [`Answer::Bind`],
/// `bind` binds its socket (the broker's, shared through SCM_RIGHTS) before
/// the broker connects it, and the answer after that is returned.
pub fn ask_connect(
    channel: BorrowedFd<'_>,
    question: &Ask,
    bind: impl Fn(BorrowedFd<'_>) -> io::Result<()>,
) -> io::Result<(Answer, Option<OwnedFd>)> {
    let (mine, theirs) = crate::fdpass::broker_socketpair()?;
    let mut payload = vec![ASK_TAG];
    serde_json::to_writer(&mut payload, question).map_err(io::Error::other)?;
    send_with(channel, &payload, &[theirs.as_fd()])?;
    drop(theirs);
    let (answer, fd) = receive_answer(mine.as_fd())?;
    if answer != Answer::Bind {
        return Ok((answer, fd));
    }
    let word = match fd.as_ref().map(|s| bind(s.as_fd())) {
        Some(Ok(())) => BOUND,
        _ => UNBOUND,
    };
    send_with(mine.as_fd(), word, &[])?;
    receive_answer(mine.as_fd())
}

/// One answer and the socket it carries.
fn receive_answer(mine: BorrowedFd<'_>) -> io::Result<(Answer, Option<OwnedFd>)> {
    let (bytes, fds) = recv_with(mine)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "the broker did not answer"))?;
    let fd = fds.into_iter().next();
    let answer: Answer = serde_json::from_slice(&bytes).map_err(io::Error::other)?;
    if matches!(answer, Answer::Connected | Answer::Bind) && fd.is_none() {
        return Err(io::Error::other(format!(
            "the broker answered {answer:?} without a socket"
        )));
    }
    Ok((answer, fd))
}

/// Why a message on the broker's channel is not a question (the receipt
/// line's detail).
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("a malformed question: {0}")]
    Malformed(serde_json::Error),
    #[error("a message that is neither a socket nor a question")]
    NotAQuestion,
}

/// The broker side: the question in a tagged message's payload.
pub fn parse_ask(payload: &[u8]) -> Result<Ask, AskError> {
    match payload.split_first() {
        Some((&ASK_TAG, json)) => serde_json::from_slice(json).map_err(AskError::Malformed),
        _ => Err(AskError::NotAQuestion),
    }
}

/// The broker side: answers on a question's reply socket.
pub fn reply(
    reply: BorrowedFd<'_>,
    answer: &Answer,
    socket: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let payload = serde_json::to_vec(answer).map_err(io::Error::other)?;
    let fds: Vec<BorrowedFd<'_>> = socket.into_iter().collect();
    send_with(reply, &payload, &fds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_and_its_answer_travel_with_their_sockets() {
        let (box_end, broker_end) = crate::fdpass::broker_socketpair().unwrap();
        let q = Ask::Connect {
            to: "192.0.2.1:443".parse().unwrap(),
            v6_socket: false,
            options: SocketOptions {
                nodelay: Some(true),
                ..Default::default()
            },
        };
        let broker = std::thread::spawn(move || {
            let (payload, fds) = recv_with(broker_end.as_fd()).unwrap().unwrap();
            let fd = fds.into_iter().next();
            let got = parse_ask(&payload).unwrap();
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            reply(fd.unwrap().as_fd(), &Answer::Connected, Some(s.as_fd())).unwrap();
            (got, l, s.local_addr().unwrap())
        });
        let (answer, fd) = ask(box_end.as_fd(), &q).unwrap();
        assert_eq!(answer, Answer::Connected);
        let s = std::net::TcpStream::from(fd.unwrap());
        let (got, _listener, sent) = broker.join().unwrap();
        assert_eq!(s.local_addr().unwrap(), sent);
        assert_eq!(got, q);
    }

    /// The broker sends its unconnected socket, the box binds it and says
    /// so, and only then does the broker connect and answer again.
    #[test]
    fn an_admitted_connect_is_bound_by_the_box_before_it_is_connected() {
        let (box_end, broker_end) = crate::fdpass::broker_socketpair().unwrap();
        let q = Ask::Connect {
            to: "127.0.0.1:1".parse().unwrap(),
            v6_socket: false,
            options: SocketOptions::default(),
        };
        let broker = std::thread::spawn(move || {
            let (_, fds) = recv_with(broker_end.as_fd()).unwrap().unwrap();
            let reply_end = fds.into_iter().next().unwrap();
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let s = rustix::net::socket(
                rustix::net::AddressFamily::INET,
                rustix::net::SocketType::STREAM,
                None,
            )
            .unwrap();
            reply(reply_end.as_fd(), &Answer::Bind, Some(s.as_fd())).unwrap();
            let (word, _) = recv_with(reply_end.as_fd()).unwrap().unwrap();
            rustix::net::connect(&s, &l.local_addr().unwrap()).unwrap();
            reply(reply_end.as_fd(), &Answer::Connected, Some(s.as_fd())).unwrap();
            (word, l)
        });
        let bound_to = std::sync::Mutex::new(None);
        let (answer, fd) = ask_connect(box_end.as_fd(), &q, |sock| {
            let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
            rustix::net::bind(sock, &any)?;
            *bound_to.lock().unwrap() = Some(rustix::net::getsockname(sock)?);
            Ok(())
        })
        .unwrap();
        let (word, _listener) = broker.join().unwrap();
        assert_eq!(word, BOUND);
        assert_eq!(answer, Answer::Connected);
        let local = rustix::net::getsockname(fd.unwrap()).unwrap();
        assert_eq!(Some(local), bound_to.into_inner().unwrap());
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        assert!(parse_ask(&[0]).is_err());
        assert!(parse_ask(b"?{\"connect\":1}").is_err());
        assert!(parse_ask(b"?{\"resolve\":{\"name\":\"a\",\"qtype\":1,\"x\":2}}").is_err());
        assert!(parse_ask(b"").is_err());
    }
}
