//! Handing a run to the supervisor: `terra run` starts `terra __supervisor`,
//! writes the [`RunRequest`] on an inherited pipe, forwards signals and
//! returns how the run ended (the supervisor's word on its report pipe, or
//! its exit status).

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;
use std::time::Instant;

use tracing::debug;

use crate::error::{Error, Result};
use crate::request::RunRequest;

/// `terra __supervisor`, started before its request exists: it starts
/// (and, with `early_box`, clones the box's init) while the CLI resolves
/// the run. Dropped without `hand_body` (the run was refused first), it
/// is killed and reaped.
struct Supervisor {
    child: Option<std::process::Child>,
    request: Option<std::os::fd::OwnedFd>,
    report: Option<std::os::fd::OwnedFd>,
    tty: Option<ForegroundTty>,
    /// The work beside the run, joined when the supervisor is reaped.
    beside: Option<std::thread::JoinHandle<()>>,
    /// The supervisor said `end N`: it is exiting on its own.
    ended: bool,
    t0: Instant,
}

impl Supervisor {
    /// Starts `terra __supervisor` (with `extra_args` before the role, e.g.
    /// the caller's `--log-level`); it waits for its request.
    fn start(extra_args: &[OsString], early_box: bool) -> Result<Supervisor> {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
        use nix::sys::signal::{SigSet, SigmaskHow, Signal};

        let t0 = Instant::now();
        let (rd, wr) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::sys("pipe", e))?;
        fcntl(rd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::empty()))
            .map_err(|e| Error::sys("fcntl", e))?;
        // The supervisor's word back (see `Report`): the run directory it
        // made, so the CLI opens its run without listing the state
        // directory, then `end N`. Read without blocking.
        let (report_r, report_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
            .map_err(|e| Error::sys("pipe", e))?;
        fcntl(report_w.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::empty()))
            .map_err(|e| Error::sys("fcntl", e))?;

        // The supervisor starts with the forwarded signals and SIGCHLD
        // blocked, so none is lost or acted on by default (it reads them
        // from its own signalfd). This CLI blocks them again only in
        // `hand`: until then a signal ends it as it would without terra.
        let mut mask = crate::forwarded_signals();
        mask.add(Signal::SIGCHLD);
        let mut old = SigSet::empty();
        nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&mask), Some(&mut old))
            .map_err(|e| Error::sys("cannot block signals", e))?;

        // The binary this CLI runs from (the kernel's link to it), named `terra`
        // in argv; the supervisor names itself `terra` too (comm).
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("terra")
            .args(extra_args)
            .arg("__supervisor")
            .arg("--request-fd")
            .arg(rd.as_raw_fd().to_string())
            .arg("--report-fd")
            .arg(report_w.as_raw_fd().to_string());
        if early_box {
            cmd.arg("--early-box");
        }
        let tty = ForegroundTty::detect();
        if tty.is_none() {
            cmd.process_group(0);
        }
        let spawned = cmd.spawn();
        let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        let child = spawned.map_err(|e| Error::op("cannot start the supervisor", e))?;
        Ok(Supervisor {
            child: Some(child),
            request: Some(wr),
            report: Some(report_r),
            tty,
            beside: None,
            ended: false,
            t0,
        })
    }

    /// Writes the request, runs `beside` on a thread of its own while the run
    /// goes on (work of the CLI that the run does not wait for, e.g. pruning
    /// old runs; joined on drop), forwards signals, and returns how the run
    /// ended as soon as the supervisor says so on the report pipe (`end N`,
    /// once its receipts are written and its box is gone), before it has
    /// exited; it is reaped on drop.
    fn hand_body(&mut self, body: Vec<u8>, beside: Box<dyn FnOnce() + Send>) -> Result<Ended> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use nix::sys::signal::{kill, Signal};
        use nix::sys::signalfd::{SfdFlags, SignalFd};
        use nix::unistd::Pid;

        let mut mask = crate::forwarded_signals();
        mask.add(Signal::SIGCHLD);
        mask.thread_block()
            .map_err(|e| Error::sys("cannot block signals", e))?;
        let sigfd = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
            .map_err(|e| Error::sys("signalfd", e))?;
        let (Some(child), Some(wr)) = (self.child.as_mut(), self.request.take()) else {
            return Err(Error::Request(
                "the supervisor was handed a request before".into(),
            ));
        };
        let child_pid = Pid::from_raw(child.id() as i32);
        {
            let mut w = fs::File::from(wr);
            if let Err(e) = w.write_all(&body) {
                // Killed and reaped by Drop.
                return Err(Error::op("cannot hand the run to the supervisor", e));
            }
        }
        debug!(
            phase = "handoff",
            ms = self.t0.elapsed().as_secs_f64() * 1e3
        );
        // After the spawn: this process forks nothing while the thread lives.
        self.beside = std::thread::Builder::new()
            .name("terra-beside".into())
            .spawn(beside)
            .map_err(|e| debug!("no thread for the work beside the run ({e}); skipped"))
            .ok();

        let tty = self.tty.take();
        let mut report = Report::new(self.report.take());
        let status = loop {
            if let Some(st) = child.try_wait().map_err(|e| Error::op("wait", e))? {
                break Some(st);
            }
            if report.ended().is_some() {
                break None;
            }
            let mut fds = vec![PollFd::new(sigfd.as_fd(), PollFlags::POLLIN)];
            if let Some(r) = report.fd() {
                fds.push(PollFd::new(r, PollFlags::POLLIN));
            }
            let _ = poll(&mut fds, PollTimeout::NONE);
            let readable = fds
                .get(1)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty());
            if readable {
                report.read_more();
            }
            while let Ok(Some(info)) = sigfd.read_signal() {
                match Signal::try_from(info.ssi_signo as i32) {
                    Ok(Signal::SIGCHLD) | Err(_) => {}
                    Ok(_) if tty.is_some() && info.ssi_code == crate::SI_KERNEL => {
                        debug!(
                            "terminal-generated signal: the workload gets it from the terminal itself"
                        );
                    }
                    Ok(sig) => {
                        debug!(signal = ?sig, "forwarding to the supervisor");
                        let _ = kill(child_pid, sig);
                    }
                }
            }
        };
        if let Some(t) = tty {
            t.restore();
        }
        debug!(
            phase = "supervisor",
            ms = self.t0.elapsed().as_secs_f64() * 1e3
        );
        let supervisor_pid = child_pid.as_raw() as u32;
        Ok(match status {
            // The supervisor said the run ended; it exits now (reaped by
            // Drop, after the CLI's summary).
            None => {
                self.ended = true;
                Ended {
                    code: report.ended().unwrap_or(terra_policy::EXIT_REFUSED),
                    supervisor_pid,
                    run_dir: report.run_dir(),
                }
            }
            Some(status) => {
                // Reaped already: nothing for Drop to kill.
                self.child = None;
                report.read_more();
                ended_by_status(status, supervisor_pid, report.run_dir())
            }
        })
    }
}

/// How the run ended, from the supervisor's exit status (it said nothing
/// on the report pipe: a refusal before its run, or it was killed).
fn ended_by_status(
    status: std::process::ExitStatus,
    supervisor_pid: u32,
    run_dir: Option<std::path::PathBuf>,
) -> Ended {
    if let Some(code) = status.code() {
        return Ended {
            code: code.clamp(0, 255) as u8,
            supervisor_pid,
            run_dir,
        };
    }
    let sig = status.signal().unwrap_or(0);
    if sig == terra_seccomp::KILL_SIGNAL {
        // Its allowlist killed it: no receipt could be written; say so here.
        let line = crate::role_kill::line("terra __supervisor", supervisor_pid as i32);
        eprintln!("terra: {line}; the box went with it and no receipt was written");
        return Ended {
            code: terra_policy::EXIT_REFUSED,
            supervisor_pid,
            run_dir: None,
        };
    }
    eprintln!("terra: the supervisor was killed by signal {sig}; the box went with it");
    Ended {
        code: (128 + sig).clamp(0, 255) as u8,
        supervisor_pid,
        run_dir: None,
    }
}

/// What the supervisor says on the report pipe: its run directory (the
/// first line, an absolute path), then `end N` once the run ended with
/// status N (the last thing it does before it exits).
struct Report {
    pipe: Option<fs::File>,
    bytes: Vec<u8>,
}

impl Report {
    fn new(pipe: Option<std::os::fd::OwnedFd>) -> Report {
        Report {
            pipe: pipe.map(fs::File::from),
            bytes: Vec::new(),
        }
    }

    fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.pipe.as_ref().map(|p| p.as_fd())
    }

    /// Reads what is there (the pipe does not block); at its end, closes it.
    fn read_more(&mut self) {
        use std::io::Read;
        let Some(p) = self.pipe.as_mut() else { return };
        let mut chunk = [0u8; 4096];
        loop {
            match p.read(&mut chunk) {
                Ok(0) => {
                    self.pipe = None;
                    return;
                }
                Ok(n) if self.bytes.len() + n <= 8192 => self.bytes.extend_from_slice(&chunk[..n]),
                Ok(_) => {
                    // More than a run directory and an end: not the supervisor's words.
                    self.pipe = None;
                    self.bytes.clear();
                    return;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    fn lines(&self) -> impl Iterator<Item = &[u8]> {
        self.bytes
            .split_inclusive(|b| *b == b'\n')
            .filter_map(|l| l.strip_suffix(b"\n"))
    }

    /// The run directory said first.
    fn run_dir(&self) -> Option<std::path::PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let line = self.lines().next()?;
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(line));
        path.is_absolute().then(|| path.to_path_buf())
    }

    /// The run's exit status, once the supervisor said `end N`.
    fn ended(&self) -> Option<u8> {
        self.lines()
            .find_map(|l| l.strip_prefix(b"end "))
            .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
    }
}

/// A supervisor started before its request ([`Starting::begin`]), on the
/// calling thread: the spawn waits only for the supervisor's exec to begin
/// (vfork), and a thread of its own would first wait for a CPU (0.65-0.9 ms
/// on a loaded 2-core machine, measured with sched tracepoints) while the
/// CLI's own work holds one. Its parent-death signal follows the thread
/// that started it, so that thread must live as long as the supervisor:
/// the CLI's main thread does. [`Starting::hand`] returns as soon as the
/// supervisor said how the run ended; dropping the `Starting` reaps it.
///
/// Signals are delivered once:
/// - Without a terminal in the foreground (CI, pipes, background jobs) the
///   supervisor gets its own process group, so a terminal-generated signal
///   reaches only this CLI, which forwards it along CLI -> supervisor -> box.
/// - When terra runs in the terminal's foreground with stdin on that terminal,
///   the CLI and the supervisor stay in the foreground process group; the
///   supervisor relays the terminal to the box's own pseudo-terminal
///   (terra-supervisor's pty.rs). The CLI forwards only signals sent to it by a
///   process (`kill`), never the terminal's own (si_code SI_KERNEL): the
///   supervisor got those too. On exit the CLI gives the terminal back to its
///   own process group and restores the terminal modes it found (also when
///   the supervisor, which restores them itself, was killed).
pub struct Starting {
    early_box: bool,
    supervisor: Supervisor,
}

impl Starting {
    /// [`Supervisor::start`] on this thread, which must outlive it.
    pub fn begin(extra_args: Vec<OsString>, early_box: bool) -> Result<Starting> {
        Ok(Starting {
            early_box,
            supervisor: Supervisor::start(&extra_args, early_box)?,
        })
    }

    /// Whether the supervisor was told to clone the box before its request.
    pub fn early_box(&self) -> bool {
        self.early_box
    }

    /// Hands the request to the supervisor and returns how the run ended
    /// once the supervisor said so (its receipts written, its box gone);
    /// the supervisor is reaped when this `Starting` is dropped.
    pub fn hand(
        &mut self,
        req: &RunRequest,
        beside: impl FnOnce() + Send + 'static,
    ) -> Result<Ended> {
        let body = serde_json::to_vec(req)
            .map_err(|e| Error::Request(format!("cannot encode the run request: {e}")))?;
        self.supervisor.hand_body(body, Box::new(beside))
    }
}

impl Drop for Supervisor {
    /// Joins the work beside the run; reaps the supervisor: one that said
    /// how its run ended is exiting and is waited for, any other (the run
    /// was refused before its request, or the request could not be
    /// written) is killed first.
    fn drop(&mut self) {
        if let Some(h) = self.beside.take() {
            let _ = h.join();
        }
        if let Some(mut child) = self.child.take() {
            if !self.ended {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = child.wait();
        }
    }
}

/// How the supervisor of a run ended.
#[derive(Debug, Clone)]
pub struct Ended {
    /// Its exit status, the run's.
    pub code: u8,
    /// Its pid (the run id contains it).
    pub supervisor_pid: u32,
    /// The run's state directory, as the supervisor reported it.
    pub run_dir: Option<std::path::PathBuf>,
}

/// The terminal terra runs in the foreground of, with the modes it had.
struct ForegroundTty {
    pgrp: nix::unistd::Pid,
    termios: Option<nix::sys::termios::Termios>,
}

impl ForegroundTty {
    /// Some when stdin is a terminal whose foreground process group is ours.
    fn detect() -> Option<ForegroundTty> {
        let stdin = std::io::stdin();
        if !nix::unistd::isatty(stdin.as_raw_fd()).unwrap_or(false) {
            return None;
        }
        let pgrp = nix::unistd::getpgrp();
        if nix::unistd::tcgetpgrp(stdin.as_fd()).ok()? != pgrp {
            return None;
        }
        let termios = nix::sys::termios::tcgetattr(stdin.as_fd()).ok();
        Some(ForegroundTty { pgrp, termios })
    }

    /// Gives the terminal back to our process group (a workload shell may have
    /// taken it for its own jobs) and restores the terminal modes.
    fn restore(self) {
        use nix::sys::signal::{SigSet, Signal};
        let stdin = std::io::stdin();
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        // tcsetpgrp from a background group succeeds while SIGTTOU is blocked.
        let _ = ttou.thread_block();
        let _ = nix::unistd::tcsetpgrp(stdin.as_fd(), self.pgrp);
        if let Some(t) = &self.termios {
            let _ =
                nix::sys::termios::tcsetattr(stdin.as_fd(), nix::sys::termios::SetArg::TCSANOW, t);
        }
        let _ = ttou.thread_unblock();
    }
}

#[cfg(test)]
mod tests {
    use super::Report;

    fn said(bytes: &[u8]) -> Report {
        Report {
            pipe: None,
            bytes: bytes.to_vec(),
        }
    }

    #[test]
    fn the_report_pipe_says_the_run_directory_then_the_end() {
        let r = said(b"/home/u/.local/state/terra/runs/20261203T100000Z-1-0000000a\nend 3\n");
        assert_eq!(
            r.run_dir().as_deref(),
            Some(std::path::Path::new(
                "/home/u/.local/state/terra/runs/20261203T100000Z-1-0000000a"
            ))
        );
        assert_eq!(r.ended(), Some(3));
        // Not yet ended: the run directory only, or an end still being written.
        assert_eq!(said(b"/s/runs/x\n").ended(), None);
        assert_eq!(said(b"/s/runs/x\nend 3").ended(), None);
        // Not the supervisor's words: no run directory, no end.
        assert_eq!(said(b"runs/x\n").run_dir(), None);
        assert_eq!(said(b"/s/runs/x\nend 300\n").ended(), None);
        assert_eq!(said(b"/s/runs/x\nend x\n").ended(), None);
    }
}
