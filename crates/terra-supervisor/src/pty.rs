//! The operator's terminal and the box's own pseudo-terminal.
//!
//! When any of terra's standard streams is a terminal, the box gets a
//! pseudo-terminal of its own (see `terra_sandbox::linux::BoxTerminal`) and
//! the workload never holds a descriptor of the operator's terminal. This
//! module relays between the two, like a remote shell client: it puts the
//! operator's terminal in raw mode (only when stdin is that terminal and
//! terra runs in its foreground), copies the operator's keystrokes to the
//! box's master and the master's output to the operator's terminal, passes
//! window-size changes on as TIOCSWINSZ on the master, and restores the
//! operator's terminal modes on every way out ([`Relay::finish`], and `Drop`
//! for early returns and unwinding; the CLI restores them once more after
//! the supervisor ended, whatever killed it).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::termios::{self, SetArg, Termios};
use terra_sandbox::linux::{self as launcher, BoxTerminal, TerminalChannel, WindowSize};
use tracing::debug;

/// How long the relay may take, once the box has ended, to copy what the box
/// wrote last to the operator's terminal.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// The operator's side, found before the box starts.
pub struct Operator {
    /// Which of 0, 1, 2 are a terminal.
    stdio: [bool; 3],
    /// The terminal read from (stdin), when terra runs in its foreground.
    input: Option<OwnedFd>,
    /// The terminal the box's output goes to (the first of 1, 2, 0 that is one).
    output: OwnedFd,
    /// The terminal whose window size the box's follows.
    size_from: OwnedFd,
    size: Option<WindowSize>,
    modes: Option<Termios>,
}

fn is_tty(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    nix::unistd::isatty(fd.as_raw_fd()).unwrap_or(false)
}

impl Operator {
    /// None when none of stdin, stdout, stderr is a terminal (nothing changes
    /// for such runs: pipes and files stay what they are).
    pub fn detect() -> Result<Option<Operator>, crate::Error> {
        let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
        let fds = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()];
        let stdio = [is_tty(fds[0]), is_tty(fds[1]), is_tty(fds[2])];
        if !stdio.iter().any(|t| *t) {
            return Ok(None);
        }
        let dup = |i: usize| {
            fds[i].try_clone_to_owned().map_err(|e| {
                crate::Error::op(format!("cannot duplicate descriptor {i} (a terminal)"), e)
            })
        };
        // Read the operator's keys only in the terminal's foreground: a
        // background job reading it would be stopped (SIGTTIN).
        let foreground =
            stdio[0] && nix::unistd::tcgetpgrp(fds[0]).ok() == Some(nix::unistd::getpgrp());
        let input = if foreground { Some(dup(0)?) } else { None };
        let out = [1, 2, 0]
            .into_iter()
            .find(|i| stdio[*i])
            .unwrap_or_default();
        let first = (0..3).find(|i| stdio[*i]).unwrap_or_default();
        let size_from = dup(first)?;
        let size = launcher::window_size(size_from.as_fd()).ok();
        let modes = termios::tcgetattr(size_from.as_fd()).ok();
        Ok(Some(Operator {
            stdio,
            input,
            output: dup(out)?,
            size_from,
            size,
            modes,
        }))
    }

    /// What the box's terminal is made of.
    pub fn box_terminal(&self) -> BoxTerminal {
        BoxTerminal {
            stdio: self.stdio,
            size: self.size,
            modes: self.modes.clone(),
        }
    }

    /// Starts relaying once the box's master arrives on `channel` (call after
    /// the box was started: this starts threads).
    pub fn start(self, channel: Option<TerminalChannel>) -> Relay {
        let shared = Arc::new(Shared {
            input: self.input,
            raw: Mutex::new(RawState::default()),
            master: OnceLock::new(),
            size_from: self.size_from,
        });
        let (done_tx, done) = mpsc::channel();
        let stop = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok();
        let (stop_r, stop_w) = match stop {
            Some((r, w)) => (Some(r), Some(w)),
            None => (None, None),
        };
        if let Some(channel) = channel {
            let s = shared.clone();
            let output = self.output;
            let spawned = std::thread::Builder::new()
                .name("terminal".into())
                .spawn(move || {
                    relay_box(&s, channel, output, stop_r);
                    let _ = done_tx.send(());
                });
            if let Err(e) = spawned {
                eprintln!("terra: cannot start the terminal relay: {e}");
            }
        }
        Relay {
            shared,
            done,
            stop_w,
        }
    }
}

#[derive(Default)]
struct RawState {
    /// The operator's modes while the terminal is in raw mode.
    saved: Option<Termios>,
    /// Set by the first restore: raw mode is never entered afterwards.
    finished: bool,
}

struct Shared {
    input: Option<OwnedFd>,
    raw: Mutex<RawState>,
    master: OnceLock<Arc<File>>,
    size_from: OwnedFd,
}

impl Shared {
    /// Raw mode on the operator's terminal (keys go to the box's terminal,
    /// whose line discipline interprets them), unless already restored.
    fn enter_raw(&self) {
        let Some(input) = &self.input else { return };
        let Ok(mut st) = self.raw.lock() else { return };
        if st.finished || st.saved.is_some() {
            return;
        }
        let Ok(saved) = termios::tcgetattr(input.as_fd()) else {
            return;
        };
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        match termios::tcsetattr(input.as_fd(), SetArg::TCSANOW, &raw) {
            Ok(()) => st.saved = Some(saved),
            Err(e) => debug!("cannot put the terminal in raw mode: {e}"),
        }
    }

    fn restore(&self) {
        let mut st = match self.raw.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        st.finished = true;
        if let (Some(saved), Some(input)) = (st.saved.take(), &self.input) {
            if let Err(e) = termios::tcsetattr(input.as_fd(), SetArg::TCSANOW, &saved) {
                eprintln!("terra: cannot restore the terminal's modes: {e}");
            }
        }
    }

    fn resize(&self) {
        let Some(master) = self.master.get() else {
            return;
        };
        if let Ok(size) = launcher::window_size(self.size_from.as_fd()) {
            let _ = launcher::set_window_size(master.as_fd(), size);
        }
    }
}

/// The relay of one run.
pub struct Relay {
    shared: Arc<Shared>,
    /// One message when the box's output has all been copied (or never came).
    done: mpsc::Receiver<()>,
    stop_w: Option<OwnedFd>,
}

impl Relay {
    /// The operator's window changed: the box's terminal follows (the kernel
    /// then signals the box's foreground process group).
    pub fn resize(&self) {
        self.shared.resize();
    }

    /// After the box ended: copies its last output, stops reading the
    /// operator's keys and restores the operator's terminal modes.
    pub fn finish(mut self) {
        if self.done.recv_timeout(DRAIN_LIMIT).is_err() {
            debug!("the box's last terminal output was not all copied within {DRAIN_LIMIT:?}");
        }
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(w) = self.stop_w.take() {
            let _ = nix::unistd::write(&w, b"x");
        }
        self.shared.restore();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The relay thread: waits for the master, enters raw mode, starts the input
/// thread, then copies the box's output until the box's side is closed.
fn relay_box(s: &Arc<Shared>, channel: TerminalChannel, output: OwnedFd, stop: Option<OwnedFd>) {
    let master = match channel.recv_master() {
        Ok(Some(m)) => Arc::new(File::from(m)),
        Ok(None) => return,
        Err(e) => {
            eprintln!("terra: the box's terminal did not arrive: {e}");
            return;
        }
    };
    drop(channel);
    if s.master.set(master.clone()).is_err() {
        return;
    }
    // The window may have changed since the box copied its size.
    s.resize();
    s.enter_raw();
    if let (Some(input), Some(stop)) = (&s.input, stop) {
        match input.try_clone() {
            Ok(input) => {
                let m = master.clone();
                let spawned = std::thread::Builder::new()
                    .name("terminal-input".into())
                    .spawn(move || relay_input(File::from(input), &m, stop));
                if let Err(e) = spawned {
                    eprintln!("terra: cannot relay the terminal's input: {e}");
                }
            }
            Err(e) => eprintln!("terra: cannot relay the terminal's input: {e}"),
        }
    }
    let mut out = File::from(output);
    let mut out_ok = true;
    let mut buf = [0u8; 8192];
    loop {
        match (&*master).read(&mut buf) {
            // EIO: every descriptor of the box's slave is closed.
            Ok(0) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
            Ok(n) => {
                if out_ok && out.write_all(&buf[..n]).is_err() {
                    // Keep draining so the box never blocks on a full terminal.
                    out_ok = false;
                }
            }
        }
    }
}

/// The input thread: the operator's keys to the box's master, until the
/// operator's terminal ends, the box's side closes, or the relay stops.
fn relay_input(input: File, mut master: &File, stop: OwnedFd) {
    let mut buf = [0u8; 4096];
    loop {
        let mut fds = [
            PollFd::new(input.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            return;
        }
        let r = fds[0].revents().unwrap_or(PollFlags::empty());
        if !r.contains(PollFlags::POLLIN) {
            if r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL) {
                return;
            }
            continue;
        }
        match (&input).read(&mut buf) {
            Ok(0) => return,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
            Ok(n) => {
                if master.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}
