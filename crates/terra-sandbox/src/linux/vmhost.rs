//! `terra __vm` for the vm backend (`VmConfig.vm`): the box is built as for
//! the linux backend (the plan's mounts, masks and read-only binds), but
//! instead of forking the workload, init moves that tree into QEMU's own
//! small root as the 9p share and runs QEMU there, with terra as the
//! guest's init (terra_vm::guest). Init then relays over the control
//! channel: its own stdin to the guest, the guest's stdout and stderr to
//! its own, the forwarded signals to the guest; it reports the guest's
//! activation check and how the workload ended on the status and result
//! pipes, as the box's init does for the linux backend.
//!
//! QEMU runs as a child of init (PID 1 of the box's PID namespace: when
//! init dies, the kernel kills QEMU) with every capability dropped,
//! no_new_privs and the workload's seccomp deny lists (so no set-id bit can
//! be set through 9p either), plus QEMU's own `-sandbox`. A guest that does
//! not report on the control channel within `Boot.ready_ms` is killed and
//! the run refused, with the tail of its console.

use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::{ForkResult, Pid};
use terra_vm::proto::{Decoder, FromGuest, GuestConfig, GuestNet, ToGuest};
use terra_vm::qemu;

use super::config::VmConfig;
use super::init::report_and_exit;
use super::status::{self, Status};
use super::{mounts, seccomp, sys, BoxService, SandboxError};
use crate::EXIT_REFUSED;

/// Where the box's tree appears in QEMU's root.
pub const EXPORT: &str = "/export";
/// How much of QEMU's console (the guest kernel's messages) is kept for a
/// refusal's message.
const CONSOLE_TAIL: usize = 4096;
/// How long QEMU may take to exit after the guest reported the end.
const QEMU_EXIT_GRACE: Duration = Duration::from_secs(5);

struct Ends {
    status: OwnedFd,
    result: OwnedFd,
}

/// The caller's terminal modes, while the relay has it in raw mode.
static SAVED_MODES: std::sync::OnceLock<libc::termios> = std::sync::OnceLock::new();

/// Puts the caller's terminal (stdin) back as it was (the CLI does it once
/// more after the run, also when this process was killed).
fn restore_terminal() {
    if let Some(t) = SAVED_MODES.get() {
        // SAFETY: descriptor 0 is this process's standard input.
        let fd = unsafe { BorrowedFd::borrow_raw(0) };
        let t = nix::sys::termios::Termios::from(*t);
        let _ = nix::sys::termios::tcsetattr(fd, nix::sys::termios::SetArg::TCSADRAIN, &t);
    }
}

impl Ends {
    fn refuse(&self, why: String) -> ! {
        restore_terminal();
        status::send(self.status.as_fd(), &Status::Refused(why));
        report_and_exit(self.result.as_fd(), false, EXIT_REFUSED.into())
    }

    fn exit(&self, signaled: bool, value: i32) -> ! {
        restore_terminal();
        report_and_exit(self.result.as_fd(), signaled, value)
    }
}

/// The size of the caller's terminal (on stdout), when stdin and stdout are
/// one and terra runs in its foreground: the guest then gives the workload
/// a terminal of that size, and the caller's terminal goes to raw mode so
/// that every key reaches the guest's line discipline (Ctrl-C included).
fn caller_terminal() -> Option<(u16, u16)> {
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return None;
    }
    // SAFETY: descriptor 0 is this process's standard input.
    let stdin = unsafe { BorrowedFd::borrow_raw(0) };
    let foreground = nix::unistd::tcgetpgrp(stdin).ok() == Some(nix::unistd::getpgrp());
    if !foreground {
        return None;
    }
    let size = window_size()?;
    let modes = nix::sys::termios::tcgetattr(stdin).ok()?;
    let mut raw = modes.clone();
    nix::sys::termios::cfmakeraw(&mut raw);
    let _ = SAVED_MODES.set(libc::termios::from(modes));
    nix::sys::termios::tcsetattr(stdin, nix::sys::termios::SetArg::TCSADRAIN, &raw).ok()?;
    Some(size)
}

/// TIOCGWINSZ of the caller's stdout.
fn window_size() -> Option<(u16, u16)> {
    // SAFETY: winsize is plain old data.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize.
    (unsafe { libc::ioctl(1, libc::TIOCGWINSZ as _, &mut ws as *mut libc::winsize) } == 0)
        .then_some((ws.ws_row, ws.ws_col))
}

/// The body of `terra __vm` with a vm configuration; never returns.
pub(crate) fn main(
    config: VmConfig,
    prebuilt: mounts::Prebuilt,
    broker: Option<OwnedFd>,
    gate: Option<OwnedFd>,
    service: BoxService,
    status: OwnedFd,
    result: OwnedFd,
) -> ! {
    let ends = Ends { status, result };
    let Some(boot) = config.vm.clone() else {
        ends.refuse("the vm box was started without its boot configuration".into())
    };
    // (The network namespace, its loopback up, was entered in vm.rs.)
    if let Err(e) = sys::sethostname(&config.hostname) {
        ends.refuse(e.to_string())
    }
    let kvm = boot.accel == terra_vm::accel::Accel::Kvm;
    // (The staging root was entered before the configuration came: vm.rs.)
    if let Err(e) = mounts::apply(&config.ops, prebuilt)
        .and_then(|_| mounts::enter_vm_root(&boot.host_paths, kvm, &boot.terra_in_root, EXPORT))
    {
        ends.refuse(format!("the vm box's root: {e}"))
    }
    // Mediated: the box's proxy on its loopback, which QEMU's forwarder
    // reaches; the broker behind it judges.
    if let (Some(addr), Some(b)) = (config.proxy, broker.as_ref()) {
        if let Err(e) = super::init::start_service(service, b.as_fd(), addr) {
            ends.refuse(format!("the box's network service: {e}"))
        }
    }
    drop(broker);
    let mut guest = guest_config(&config);
    guest.terminal = caller_terminal();
    let argv = qemu::argv(&boot, config.proxy, EXPORT);
    relay(&ends, &boot, argv, guest, gate)
}

/// What the guest is told: the workload's strings as the box would run
/// them, the caller's ids, the canary, the network.
fn guest_config(c: &VmConfig) -> GuestConfig {
    let w = &c.workload;
    let mediated = c.proxy.is_some();
    let mut canary_tcp: Vec<SocketAddr> = w.canary_tcp.into_iter().collect();
    if mediated {
        // The box's loopback through QEMU's host alias: restrict=on must refuse it.
        canary_tcp.push(SocketAddr::V4(SocketAddrV4::new(
            qemu::HOST_ALIAS,
            qemu::PROXY.port(),
        )));
    }
    GuestConfig {
        candidates: w.candidates.clone(),
        argv: w.argv.clone(),
        envp: w.envp.clone(),
        cwd: w.cwd.clone(),
        uid: nix::unistd::geteuid().as_raw(),
        gid: nix::unistd::getegid().as_raw(),
        canary_path: w.canary_path.clone(),
        canary_tcp,
        net: mediated.then_some(GuestNet {
            address: qemu::GUEST_ADDRESS,
            prefix: qemu::GUEST_PREFIX,
            proxy: qemu::PROXY,
        }),
        share_tag: qemu::SHARE_TAG.into(),
        msize: qemu::MSIZE,
        terminal: None,
    }
}

/// Starts QEMU: a child with the control socket on descriptor 3, /dev/null
/// on 0, the console pipe on 1 and 2, no capability, the workload's deny
/// lists; an empty environment.
fn spawn_qemu(argv: &[String], ctl: &OwnedFd, console: &OwnedFd) -> Result<Pid, SandboxError> {
    let cargs: Vec<std::ffi::CString> = argv
        .iter()
        .map(|a| {
            std::ffi::CString::new(a.as_bytes()).map_err(|_| {
                SandboxError::InvalidRequest(format!("a NUL byte in QEMU's argument {a:?}"))
            })
        })
        .collect::<Result<_, _>>()?;
    let filters = seccomp::build()?;
    let null = std::fs::File::open("/dev/null")
        .map_err(|e| SandboxError::io_at("open", &e, "/dev/null"))?;
    // SAFETY: init has one thread (nothing started one); the child only
    // makes system calls and execs or exits.
    match unsafe { sys::fork() }? {
        ForkResult::Child => {
            sys::reset_signals();
            if !sys::die_with_parent(Pid::from_raw(1)) {
                sys::exit_now(EXIT_REFUSED.into());
            }
            let moves: [(RawFd, RawFd); 4] = [
                (null.as_raw_fd(), 0),
                (console.as_raw_fd(), 1),
                (console.as_raw_fd(), 2),
                (ctl.as_raw_fd(), qemu::CONTROL_FD),
            ];
            let mut high = [0; 4];
            for (i, (from, _)) in moves.iter().enumerate() {
                match nix::fcntl::fcntl(*from, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(100)) {
                    Ok(h) => high[i] = h,
                    Err(_) => sys::exit_now(EXIT_REFUSED.into()),
                }
            }
            for (i, (_, to)) in moves.iter().enumerate() {
                if nix::unistd::dup2(high[i], *to).is_err() {
                    sys::exit_now(EXIT_REFUSED.into());
                }
            }
            // SAFETY: this child never returns to init's code (it execs or exits).
            unsafe { sys::close_fds_except(&[qemu::CONTROL_FD]) };
            if sys::drop_all_capabilities().is_err() || seccomp::install(&filters).is_err() {
                sys::exit_now(EXIT_REFUSED.into());
            }
            let env: [&std::ffi::CStr; 0] = [];
            let _ = nix::unistd::execve(&cargs[0], &cargs, &env);
            let _ = nix::unistd::write(std::io::stderr(), b"terra: cannot execute QEMU\n");
            sys::exit_now(126)
        }
        ForkResult::Parent { child } => Ok(child),
    }
}

fn nonblocking(fd: BorrowedFd<'_>) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    if let Ok(fl) = fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL) {
        let _ = fcntl(
            fd.as_raw_fd(),
            FcntlArg::F_SETFL(OFlag::from_bits_truncate(fl) | OFlag::O_NONBLOCK),
        );
    }
}

fn write_out(fd: RawFd, data: &[u8]) {
    // SAFETY: 1 and 2 are init's standard output and error, open for its life.
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    sys::write_all_fd(b, data);
}

fn tail(console: &[u8]) -> String {
    let text = String::from_utf8_lossy(console);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = &lines[lines.len().saturating_sub(8)..];
    if last.is_empty() {
        "(nothing on the console)".into()
    } else {
        last.join(" | ")
    }
}

fn relay(
    ends: &Ends,
    boot: &terra_vm::Boot,
    argv: Vec<String>,
    guest: GuestConfig,
    mut gate: Option<OwnedFd>,
) -> ! {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let terminal = guest.terminal.is_some();
    let (ours, theirs) = match socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    ) {
        Ok(p) => p,
        Err(e) => ends.refuse(format!("socketpair: {e}")),
    };
    let (console_r, console_w) = match sys::pipe_cloexec() {
        Ok(p) => p,
        Err(e) => ends.refuse(e.to_string()),
    };
    let sigs = sys::block_forwarded();
    let sfd = match SignalFd::with_flags(&sigs, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) {
        Ok(s) => s,
        Err(e) => ends.refuse(format!("signalfd: {e}")),
    };
    let filters = seccomp::vm_host();
    let qemu_pid = match spawn_qemu(&argv, &theirs, &console_w) {
        Ok(p) => p,
        Err(e) => ends.refuse(format!("cannot start QEMU: {e}")),
    };
    drop((theirs, console_w));
    // From here on init only relays: no capability of the box's user
    // namespace is left to it (a bug in the relay reachable from the guest
    // gains no mount, no network administration).
    if let Err(e) = sys::drop_all_capabilities() {
        let _ = kill(qemu_pid, Signal::SIGKILL);
        ends.refuse(format!("dropping the relay's capabilities: {e}"))
    }
    // And its own allowlist (crates/terra-seccomp/tables/vm-host.json): any
    // other call kills it, and with it the box (the supervisor says so).
    if let Err(e) = filters.and_then(|f| seccomp::install(&f)) {
        let _ = kill(qemu_pid, Signal::SIGKILL);
        ends.refuse(format!("the relay's seccomp allowlist: {e}"))
    }
    let config_frame = match ToGuest::Config(Box::new(guest)).encode() {
        Ok(f) => f,
        Err(e) => {
            let _ = kill(qemu_pid, Signal::SIGKILL);
            ends.refuse(format!("the guest's configuration: {e}"))
        }
    };
    nonblocking(ours.as_fd());
    nonblocking(console_r.as_fd());
    // SAFETY: descriptor 0 is init's standard input, open for its life
    // (or closed: then polling it reports POLLNVAL, taken as its end).
    let stdin = unsafe { BorrowedFd::borrow_raw(0) };
    let mut stdin_open = nix::fcntl::fcntl(0, nix::fcntl::FcntlArg::F_GETFD).is_ok();
    let mut out: Vec<u8> = Vec::new();
    // The configuration goes out once the canary exists (the gate's byte):
    // the guest's activation check must not pass vacuously.
    let mut config = Some(config_frame);
    if gate.is_none() {
        out.extend(config.take().unwrap_or_default());
    }
    let mut dec = Decoder::new();
    let mut console: Vec<u8> = Vec::new();
    let mut console_open = true;
    let deadline = Instant::now() + Duration::from_millis(boot.ready_ms);
    let mut ready = false;
    let mut exit: Option<(bool, i32)> = None;
    let mut qemu_status: Option<(bool, i32)> = None;
    let mut exit_by: Option<Instant> = None;
    let mut buf = vec![0u8; 64 * 1024];
    let mut ctl_open = true;
    loop {
        if let Some(q) = qemu_status {
            if !ctl_open || exit.is_some() {
                match exit {
                    Some((signaled, value)) => ends.exit(signaled, value),
                    None => ends.refuse(format!(
                        "QEMU ended ({}) before the guest reported how the workload ended; the guest's console: {}",
                        if q.0 { format!("signal {}", q.1) } else { format!("exit status {}", q.1) },
                        tail(&console)
                    )),
                }
            }
        }
        let now = Instant::now();
        if !ready && now >= deadline {
            let _ = kill(qemu_pid, Signal::SIGKILL);
            let _ = sys::wait_child(qemu_pid, false);
            ends.refuse(format!(
                "the guest did not report on its control channel within {} ms (accelerator {}); the guest's \
                 console: {}",
                boot.ready_ms,
                boot.accel.name(),
                tail(&console)
            ))
        }
        if let Some(by) = exit_by {
            if now >= by {
                let _ = kill(qemu_pid, Signal::SIGKILL);
            }
        }
        let mut wait_until = if ready { None } else { Some(deadline) };
        if let Some(by) = exit_by {
            wait_until = Some(wait_until.map_or(by, |w: Instant| w.min(by)));
        }
        let timeout = match wait_until {
            Some(t) => PollTimeout::try_from(
                t.saturating_duration_since(now)
                    .as_millis()
                    .clamp(1, 60_000) as i32,
            )
            .unwrap_or(PollTimeout::MAX),
            None => PollTimeout::NONE,
        };
        // Only the descriptors that can still say something are polled: a
        // pipe at its end reports POLLHUP whatever was asked, and would spin.
        const CTL: usize = 0;
        const SIG: usize = 1;
        const CONSOLE: usize = 2;
        const STDIN: usize = 3;
        const GATE: usize = 4;
        let mut fds: Vec<PollFd> = Vec::with_capacity(5);
        let mut slot = [usize::MAX; 5];
        fn add<'a>(
            slot: &mut [usize; 5],
            which: usize,
            fd: BorrowedFd<'a>,
            flags: PollFlags,
            fds: &mut Vec<PollFd<'a>>,
        ) {
            slot[which] = fds.len();
            fds.push(PollFd::new(fd, flags));
        }
        if ctl_open {
            let mut flags = PollFlags::POLLIN;
            if !out.is_empty() {
                flags |= PollFlags::POLLOUT;
            }
            add(&mut slot, CTL, ours.as_fd(), flags, &mut fds);
        }
        add(&mut slot, SIG, sfd.as_fd(), PollFlags::POLLIN, &mut fds);
        if console_open {
            add(
                &mut slot,
                CONSOLE,
                console_r.as_fd(),
                PollFlags::POLLIN,
                &mut fds,
            );
        }
        // Stdin only once the guest runs (its configuration must be the
        // first frame), and while the queue is short.
        if stdin_open && ready && out.len() < (1 << 20) {
            add(&mut slot, STDIN, stdin, PollFlags::POLLIN, &mut fds);
        }
        if let Some(g) = &gate {
            add(&mut slot, GATE, g.as_fd(), PollFlags::POLLIN, &mut fds);
        }
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => ends.refuse(format!("poll: {e}")),
        }
        let revents: Vec<PollFlags> = fds
            .iter()
            .map(|f| f.revents().unwrap_or(PollFlags::empty()))
            .collect();
        drop(fds);
        let has = |which: usize, f: PollFlags| {
            slot[which] != usize::MAX && revents.get(slot[which]).is_some_and(|r| r.intersects(f))
        };
        let hup = PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL;
        // The canary gate.
        if gate.is_some() && has(GATE, PollFlags::POLLIN | hup) {
            let ok = gate.as_ref().is_some_and(|g| sys::read_byte(g.as_fd()));
            gate = None;
            if !ok {
                let _ = kill(qemu_pid, Signal::SIGKILL);
                ends.refuse(
                    "activation check failed: the caller ended before the canary existed".into(),
                )
            }
            out.extend(config.take().unwrap_or_default());
        }
        // Signals: SIGCHLD reaps; the others go to the guest's workload. A
        // terminal's signal (from the kernel) reached this process, not the
        // workload in the guest: it is forwarded too.
        if has(SIG, PollFlags::POLLIN) {
            while let Ok(Some(info)) = sfd.read_signal() {
                let sig = info.ssi_signo as i32;
                if sig == libc::SIGCHLD {
                    while let Ok(Some((pid, ended))) = sys::wait_child(Pid::from_raw(-1), true) {
                        if pid == qemu_pid {
                            qemu_status = Some(ended);
                        }
                    }
                } else if sig == libc::SIGWINCH && terminal {
                    // The guest's terminal follows the caller's window.
                    if let Some((rows, cols)) = window_size() {
                        out.extend(
                            ToGuest::WindowSize { rows, cols }
                                .encode()
                                .unwrap_or_default(),
                        );
                    }
                } else if let Ok(f) = ToGuest::Signal(sig).encode() {
                    out.extend(f);
                }
            }
        }
        if has(CONSOLE, PollFlags::POLLIN | hup) {
            match nix::unistd::read(console_r.as_raw_fd(), &mut buf) {
                Ok(0) => console_open = false,
                Ok(n) => {
                    console.extend_from_slice(&buf[..n]);
                    if console.len() > 2 * CONSOLE_TAIL {
                        console.drain(..console.len() - CONSOLE_TAIL);
                    }
                }
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
                Err(_) => console_open = false,
            }
        }
        if has(STDIN, PollFlags::POLLIN | hup) {
            match nix::unistd::read(0, &mut buf) {
                Ok(0) | Err(_) => {
                    stdin_open = false;
                    out.extend(ToGuest::StdinEof.encode().unwrap_or_default());
                }
                Ok(n) => out.extend(ToGuest::stdin_frames(&buf[..n])),
            }
        }
        if ctl_open && has(CTL, PollFlags::POLLOUT) && !out.is_empty() {
            match nix::unistd::write(&ours, &out) {
                Ok(n) => {
                    out.drain(..n);
                }
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
                Err(_) => ctl_open = false,
            }
        }
        if ctl_open && has(CTL, PollFlags::POLLIN | hup) {
            let room = dec.room().min(buf.len());
            match nix::unistd::read(ours.as_raw_fd(), &mut buf[..room]) {
                Ok(0) => ctl_open = false,
                Ok(n) => dec.push(&buf[..n]),
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
                Err(_) => ctl_open = false,
            }
            loop {
                match dec.next_from_guest() {
                    Ok(Some(FromGuest::Ready)) => ready = true,
                    Ok(Some(FromGuest::Activation(a))) => status::send_all(
                        ends.status.as_fd(),
                        &[Status::Landlock(None), Status::Activation(a)],
                    ),
                    Ok(Some(FromGuest::Refused(r))) => {
                        status::send(ends.status.as_fd(), &Status::Refused(r))
                    }
                    Ok(Some(FromGuest::ExecFailed { code, reason })) => {
                        status::send(ends.status.as_fd(), &Status::ExecFailed { code, reason })
                    }
                    Ok(Some(FromGuest::Stdout(b))) => write_out(1, &b),
                    Ok(Some(FromGuest::Stderr(b))) => write_out(2, &b),
                    Ok(Some(FromGuest::Exit { signaled, value })) => {
                        exit = Some((signaled, value));
                        exit_by = Some(Instant::now() + QEMU_EXIT_GRACE);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let _ = kill(qemu_pid, Signal::SIGKILL);
                        let _ = sys::wait_child(qemu_pid, false);
                        ends.refuse(format!("the guest broke the control protocol: {e}"))
                    }
                }
            }
        }
    }
}
