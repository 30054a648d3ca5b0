//! The box's own pseudo-terminal, for runs whose standard streams are a
//! terminal.
//!
//! The workload never gets a descriptor of the operator's terminal: the box
//! init opens a pseudo-terminal in the box's private devpts (`/dev/ptmx`, so
//! the slave is `/dev/pts/N` of the box and belongs to no host devpts), sends
//! the master side to the caller over a socketpair (SCM_RIGHTS) and puts the
//! slave on those of descriptors 0, 1 and 2 that were a terminal on the
//! caller's side (pipes and files stay as they were). The workload becomes a
//! session leader with the slave as its controlling terminal, so the box's
//! own line discipline generates Ctrl-C, Ctrl-Z and window-change signals for
//! the box's foreground process group. The caller relays bytes between the
//! operator's terminal and the master.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

use super::error::SandboxError;
use super::sys;

/// A terminal window size (TIOCGWINSZ / TIOCSWINSZ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowSize {
    pub rows: u16,
    pub cols: u16,
    pub xpixel: u16,
    pub ypixel: u16,
}

impl WindowSize {
    fn to_c(self) -> libc::winsize {
        libc::winsize {
            ws_row: self.rows,
            ws_col: self.cols,
            ws_xpixel: self.xpixel,
            ws_ypixel: self.ypixel,
        }
    }
}

/// What the box's terminal is made of; the caller decides from its own
/// standard streams.
#[derive(Clone)]
pub struct BoxTerminal {
    /// Which of descriptors 0, 1, 2 get the box's terminal (those that are a
    /// terminal on the caller's side). At least one must be set.
    pub stdio: [bool; 3],
    /// The initial window size, set before the workload starts.
    pub size: Option<WindowSize>,
    /// The initial terminal modes (e.g. the operator's erase and interrupt
    /// characters), set before the workload starts.
    pub modes: Option<nix::sys::termios::Termios>,
}

/// The box's terminal as the box init needs it (plain data, prepared before
/// any fork).
pub(crate) struct TerminalPrep {
    stdio: [bool; 3],
    size: Option<libc::winsize>,
    modes: Option<libc::termios>,
    /// Box end of the socketpair the master is sent over (the caller's
    /// copy is closed once the box is started).
    pub(crate) channel: OwnedFd,
}

/// [`TerminalPrep`] without its channel, as the box's init is handed it
/// (the channel travels as a descriptor). The modes are the C library's
/// `struct termios` as bytes: caller and box run the same build.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct TerminalWire {
    stdio: [bool; 3],
    size: Option<[u16; 4]>,
    modes: Option<Vec<u8>>,
}

impl TerminalPrep {
    pub(crate) fn wire(&self) -> TerminalWire {
        TerminalWire {
            stdio: self.stdio,
            size: self
                .size
                .map(|w| [w.ws_row, w.ws_col, w.ws_xpixel, w.ws_ypixel]),
            modes: self.modes.as_ref().map(|t| {
                let mut b = vec![0u8; std::mem::size_of::<libc::termios>()];
                // SAFETY: termios is plain integers; `b` has its size.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (t as *const libc::termios).cast::<u8>(),
                        b.as_mut_ptr(),
                        b.len(),
                    )
                };
                b
            }),
        }
    }

    /// The box side: the wire form and the channel, at its fixed number.
    pub(crate) fn from_wire(
        w: TerminalWire,
        channel: OwnedFd,
    ) -> Result<TerminalPrep, SandboxError> {
        let modes = match w.modes {
            None => None,
            Some(b) if b.len() == std::mem::size_of::<libc::termios>() => {
                // SAFETY: termios is plain integers, so any bytes of its size
                // are a value of it; the all-zero start is one too.
                let mut t: libc::termios = unsafe { std::mem::zeroed() };
                // SAFETY: `b` holds exactly size_of::<termios>() bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        b.as_ptr(),
                        (&mut t as *mut libc::termios).cast::<u8>(),
                        b.len(),
                    )
                };
                Some(t)
            }
            Some(b) => {
                return Err(SandboxError::InvalidRequest(format!(
                    "terminal modes of {} bytes (struct termios has {})",
                    b.len(),
                    std::mem::size_of::<libc::termios>()
                )))
            }
        };
        Ok(TerminalPrep {
            stdio: w.stdio,
            size: w.size.map(|[r, c, x, y]| libc::winsize {
                ws_row: r,
                ws_col: c,
                ws_xpixel: x,
                ws_ypixel: y,
            }),
            modes,
            channel,
        })
    }
}

/// The caller's end of the channel on which the box sends its terminal's
/// master side.
pub struct TerminalChannel {
    fd: OwnedFd,
}

impl AsFd for TerminalChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl TerminalChannel {
    /// Blocks until the box sends the master side of its terminal. None when
    /// the box closed the channel without sending one (it refused to start,
    /// or ended). Anything but a pseudo-terminal master is an error.
    pub fn recv_master(&self) -> io::Result<Option<OwnedFd>> {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
        let mut byte = [0u8; 1];
        let mut iov = [io::IoSliceMut::new(&mut byte)];
        let mut space = nix::cmsg_space!([RawFd; 2]);
        let msg = loop {
            match recvmsg::<()>(
                self.fd.as_raw_fd(),
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
                    // SAFETY: the kernel just installed `fd` in this process
                    // for this message; nothing else refers to it.
                    owned.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
        let Some(master) = owned.pop() else {
            return Ok(None);
        };
        if !owned.is_empty() {
            return Err(io::Error::other(
                "the box sent more than one descriptor for its terminal",
            ));
        }
        let mut n: libc::c_uint = 0;
        // SAFETY: TIOCGPTN writes one unsigned int; it fails on anything but
        // a pseudo-terminal master.
        if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut n) } != 0 {
            return Err(io::Error::other(format!(
                "the box's terminal descriptor is not a pseudo-terminal master: {}",
                io::Error::last_os_error()
            )));
        }
        Ok(Some(master))
    }
}

/// The window size of the terminal `fd`.
pub fn window_size(fd: BorrowedFd<'_>) -> io::Result<WindowSize> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one struct winsize.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(WindowSize {
        rows: ws.ws_row,
        cols: ws.ws_col,
        xpixel: ws.ws_xpixel,
        ypixel: ws.ws_ypixel,
    })
}

/// Sets the window size of the terminal `fd` (on a master: the kernel sends
/// SIGWINCH to the slave's foreground process group when it changes).
pub fn set_window_size(fd: BorrowedFd<'_>, size: WindowSize) -> io::Result<()> {
    let ws = size.to_c();
    // SAFETY: TIOCSWINSZ reads one struct winsize.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The socketpair for `terminal` and what the box needs of it: (the caller's
/// channel, the box's prep). The box end is close-on-exec and closed by the
/// box init once it has sent the master.
pub(crate) fn prepare(
    terminal: &BoxTerminal,
) -> Result<(TerminalChannel, TerminalPrep), SandboxError> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    if !terminal.stdio.iter().any(|t| *t) {
        return Err(SandboxError::InvalidRequest(
            "a box terminal needs at least one of descriptors 0, 1, 2".into(),
        ));
    }
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|errno| SandboxError::sys_at("socketpair", errno, "the terminal channel"))?;
    let prep = TerminalPrep {
        stdio: terminal.stdio,
        size: terminal.size.map(WindowSize::to_c),
        modes: terminal.modes.clone().map(libc::termios::from),
        channel: theirs,
    };
    Ok((TerminalChannel { fd: ours }, prep))
}

/// In the box init, inside the box root, before any child is forked: opens a
/// pseudo-terminal in the box's devpts, sets its modes and size, sends the
/// master to the caller, and puts the slave on the listed stdio descriptors
/// (replacing the caller's terminal there). Closes the master and the channel.
pub(crate) fn open_in_box(t: &TerminalPrep) -> Result<(), SandboxError> {
    use nix::fcntl::OFlag;
    let m = nix::fcntl::open(
        c"/dev/ptmx",
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|errno| SandboxError::sys_at("open", errno, "/dev/ptmx (the box's devpts)"))?;
    // SAFETY: `m` was just opened and is owned by nobody else.
    let master = unsafe { OwnedFd::from_raw_fd(m) };
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int.
    if unsafe { libc::ioctl(m, libc::TIOCSPTLCK, &unlock) } != 0 {
        return Err(pty_error("ioctl(TIOCSPTLCK)"));
    }
    // SAFETY: TIOCGPTPEER takes open flags and returns a new descriptor of
    // the slave, opened through the master (no path lookup).
    let s = unsafe {
        libc::ioctl(
            m,
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if s < 0 {
        return Err(pty_error("ioctl(TIOCGPTPEER)"));
    }
    // SAFETY: `s` was just returned by the kernel and is owned by nobody else.
    let slave = unsafe { OwnedFd::from_raw_fd(s) };
    if let Some(modes) = &t.modes {
        // SAFETY: tcsetattr reads one struct termios.
        if unsafe { libc::tcsetattr(s, libc::TCSANOW, modes) } != 0 {
            return Err(pty_error("tcsetattr"));
        }
    }
    if let Some(ws) = &t.size {
        // SAFETY: TIOCSWINSZ reads one struct winsize.
        if unsafe { libc::ioctl(s, libc::TIOCSWINSZ, ws) } != 0 {
            return Err(pty_error("ioctl(TIOCSWINSZ)"));
        }
    }
    {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
        let fds = [m];
        let payload = [b'T'];
        sendmsg::<()>(
            t.channel.as_raw_fd(),
            &[io::IoSlice::new(&payload)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map_err(|errno| {
            SandboxError::sys_at("sendmsg", errno, "the box's pty master, to the caller")
        })?;
    }
    drop(master);
    // SAFETY: the channel was inherited from the caller's `TerminalPrep`,
    // which init (never returning into the caller's code) does not drop.
    unsafe { sys::close_inherited(t.channel.as_raw_fd()) };
    for (fd, is_tty) in t.stdio.iter().enumerate() {
        // dup2 clears close-on-exec on the copy: the workload inherits it.
        if *is_tty {
            nix::unistd::dup2(s, fd as RawFd)
                .map_err(|errno| SandboxError::sys_at("dup2", errno, "the box's pty slave"))?;
        }
    }
    drop(slave);
    Ok(())
}

/// In the workload child, before anything else: a new session whose
/// controlling terminal is the box's pty slave (on the first listed stdio
/// descriptor), with the workload its foreground process group.
pub(crate) fn take_as_controlling(t: &TerminalPrep) -> Result<(), SandboxError> {
    let Some(fd) = t.stdio.iter().position(|x| *x) else {
        return Ok(());
    };
    // A forked child is never a process group leader, so this succeeds.
    nix::unistd::setsid().map_err(|errno| SandboxError::sys_at("setsid", errno, "the workload"))?;
    // SAFETY: TIOCSCTTY takes an int (0: do not steal from another session).
    if unsafe { libc::ioctl(fd as libc::c_int, libc::TIOCSCTTY, 0) } != 0 {
        return Err(SandboxError::sys_at(
            "ioctl(TIOCSCTTY)",
            Errno::last(),
            "the box's pty as the workload's controlling terminal",
        ));
    }
    Ok(())
}

/// The errno of a failed call on the box's pseudo-terminal.
fn pty_error(call: &'static str) -> SandboxError {
    SandboxError::sys_at(call, Errno::last(), "the box's pty")
}
