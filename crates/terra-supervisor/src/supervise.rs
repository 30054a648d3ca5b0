//! The supervisor's run: validate, prepare state, start the box, watch it, report.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;
use terra_policy::{Capability, CapabilitySet, Mir, NetworkMode, SandboxPlan};
use terra_sandbox::linux::{
    self as launcher, BoxConfig, BoxExit, BoxReport, RoleConfig, RoleHandle, SandboxError,
};
use tracing::{debug, warn};

use crate::error::{Error, Result};
use crate::receipt::{
    count_network_receipt, NetworkSummary, Observed, Outcome, Receipt, ReceiptOut,
};
use crate::request::{RunRequest, MAX_REQUEST_LEN, REQUEST_VERSION};
use crate::state::RunDir;
use crate::{forwarded_signals, EXIT_REFUSED, SI_KERNEL, TIMEOUT_GRACE};

struct Args {
    request_fd: i32,
    report_fd: Option<i32>,
    early_box: bool,
}

/// `--request-fd N [--report-fd M] [--early-box]`. The CLI's pid travels in
/// the request, not here: argv carries no host pid. `--early-box`: clone
/// the box's init before the request is read (see [`launcher::EarlyBox`]).
fn parse_args(args: Vec<OsString>) -> Result<Args> {
    let mut it = args.into_iter().map(|a| a.to_string_lossy().into_owned());
    let mut request_fd = None;
    let mut report_fd = None;
    let mut early_box = false;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--early-box" => early_box = true,
            "--request-fd" => {
                request_fd = Some(
                    it.next()
                        .and_then(|v| v.parse::<i32>().ok())
                        .ok_or_else(|| Error::Argument("--request-fd takes a number".into()))?,
                )
            }
            "--report-fd" => {
                report_fd = Some(
                    it.next()
                        .and_then(|v| v.parse::<i32>().ok())
                        .filter(|fd| *fd > 2)
                        .ok_or_else(|| Error::Argument("--report-fd takes a number > 2".into()))?,
                )
            }
            other => {
                return Err(Error::Argument(format!(
                    "unknown supervisor argument {other:?}"
                )))
            }
        }
    }
    match request_fd {
        Some(request_fd) if request_fd > 2 && report_fd != Some(request_fd) => Ok(Args {
            request_fd,
            report_fd,
            early_box,
        }),
        _ => Err(Error::Argument(
            "the supervisor is started by `terra run`, not by hand".into(),
        )),
    }
}

/// Runs the supervisor; returns the run's exit status.
pub fn main(args: Vec<OsString>) -> u8 {
    let t0 = Instant::now();
    // Die with the CLI, then make sure it did not die before we asked.
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        eprintln!("terra: cannot set the parent death signal: {e}");
        return EXIT_REFUSED;
    }
    // `terra` in ps and process accounting (the CLI started us through
    // /proc/self/exe, which names the process "exe"); and no exec below this
    // process ever gains privileges.
    launcher::set_name();
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        eprintln!("terra: cannot set no_new_privs: {e}");
        return EXIT_REFUSED;
    }
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("terra: {e}");
            return EXIT_REFUSED;
        }
    };
    // The report pipe is reopened close-on-exec (no role inherits it), on
    // a number other than 3: before fd 3 is claimed for the run lock when
    // it landed there, after that otherwise.
    let lock_fd = crate::state::LOCK_FD;
    let mut report = None;
    if args.report_fd == Some(lock_fd) {
        report = adopt_report(lock_fd);
    }
    // fd 3 is kept for the run lock before anything is opened (after the
    // request is read when the request came on fd 3).
    let early_slot = if args.request_fd == lock_fd {
        None
    } else {
        match crate::state::reserve_lock_fd() {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("terra: {e}");
                return EXIT_REFUSED;
            }
        }
    };
    if let Some(fd) = args.report_fd.filter(|fd| *fd != lock_fd) {
        report = adopt_report(fd);
    }
    // The executable every role is exec'd from, opened before any workload
    // exists: the file this process runs, never a path looked up later.
    let exe = match launcher::RoleExe::current() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("terra: cannot open terra's own executable: {e}");
            return EXIT_REFUSED;
        }
    };
    // The CLI blocked these before starting us; keep them blocked and read them
    // from a signalfd, so none is lost and none kills us with its default action.
    let signals = forwarded_signals();
    if let Err(e) = signals.thread_block() {
        eprintln!("terra: cannot block signals: {e}");
        return EXIT_REFUSED;
    }
    let sigfd = match SignalFd::with_flags(&signals, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("terra: cannot create a signalfd: {e}");
            return EXIT_REFUSED;
        }
    };
    // The box's namespaces and its init's exec need nothing from the run:
    // made while the CLI still prepares the request and while it is checked.
    // Not made (the box is cloned later as usual): the backend has no box
    // of its own or the clone failed here; the run's own clone then says why.
    let early = if args.early_box {
        launcher::EarlyBox::spawn(&exe, true)
            .map_err(|e| debug!("no early box: {e}"))
            .ok()
    } else {
        None
    };
    let req = match read_request(args.request_fd) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("terra: invalid run request: {e}");
            return EXIT_REFUSED;
        }
    };
    let lock_slot = match early_slot.map_or_else(crate::state::reserve_lock_fd, Ok) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("terra: {e}");
            return EXIT_REFUSED;
        }
    };
    // The death signal was armed above; if the CLI was already gone then, we
    // were re-parented: nothing is run without the CLI waiting for it.
    if nix::unistd::getppid().as_raw() != req.parent_pid {
        eprintln!("terra: `terra run` ended before the supervisor started; nothing was run");
        return EXIT_REFUSED;
    }
    let mut run = Run::new(req, lock_slot, exe);
    run.report = report;
    run.early = early;
    let code = run.execute(&sigfd, t0);
    // The last word on the report pipe: the receipts are written and the
    // box is gone; the CLI goes on while this process exits.
    if let Some(mut report) = run.report.take() {
        use std::io::Write;
        let _ = writeln!(report, "end {code}");
    }
    let _ = nix::sys::signal::SigSet::empty().thread_set_mask();
    code
}

/// The CLI's report pipe, reopened by path (close-on-exec, so no role
/// inherits it) and its inherited descriptor closed; None when `fd` is not
/// open.
fn adopt_report(fd: i32) -> Option<fs::File> {
    let f = fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/self/fd/{fd}"))
        .ok();
    let _ = nix::unistd::close(fd);
    f
}

/// Reads and parses the request; the pipe is reopened by path and its
/// inherited descriptor closed, so nothing of it reaches the box.
fn read_request(fd: i32) -> Result<RunRequest> {
    let mut f = fs::File::open(format!("/proc/self/fd/{fd}"))
        .map_err(|e| Error::op(format!("fd {fd}"), e))?;
    let _ = nix::unistd::close(fd);
    let mut buf = Vec::new();
    f.by_ref()
        .take(MAX_REQUEST_LEN as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::op("read", e))?;
    if buf.len() > MAX_REQUEST_LEN {
        return Err(Error::Request(format!(
            "larger than {MAX_REQUEST_LEN} bytes"
        )));
    }
    let req: RunRequest =
        serde_json::from_slice(&buf).map_err(|e| Error::Request(e.to_string()))?;
    if req.version != REQUEST_VERSION {
        return Err(Error::Request(format!(
            "request version {} (this terra speaks {REQUEST_VERSION})",
            req.version
        )));
    }
    Ok(req)
}

/// Re-validates the decision: canonical bytes decode, digest matches, the plan
/// resolves again against the same bindings and declared capabilities.
pub fn revalidate(req: &RunRequest) -> Result<SandboxPlan> {
    let bytes = req.mir_bytes()?;
    let mir =
        Mir::decode(&bytes).map_err(|e| Error::policy("the plan's MIR does not decode", e))?;
    if mir.decision_digest() != req.decision_digest {
        return Err(Error::Request(format!(
            "decision digest mismatch: the MIR hashes to {}, the request says {}",
            mir.decision_digest(),
            req.decision_digest
        )));
    }
    let declared = declared_set(&req.declared)?;
    let plan = terra_policy::compile_plan(&mir, &req.bindings.host_bindings(), declared)
        .map_err(|e| Error::policy("the plan does not resolve again", e))?;
    if plan.decision_digest() != req.decision_digest {
        return Err(Error::Request(
            "the resolved plan's decision digest differs from the request's".into(),
        ));
    }
    Ok(plan)
}

fn declared_set(names: &[String]) -> Result<CapabilitySet> {
    names
        .iter()
        .map(|n| {
            Capability::from_name(n)
                .ok_or_else(|| Error::Request(format!("unknown capability {n:?}")))
        })
        .collect()
}

fn cap_names(set: CapabilitySet) -> Vec<String> {
    set.iter().map(|c| c.name().to_string()).collect()
}

struct Run {
    req: RunRequest,
    /// terra's executable, the roles' image.
    exe: launcher::RoleExe,
    /// `--receipt`, once opened.
    receipt_out: Option<ReceiptOut>,
    /// fd 3, kept free for the run lock until the run directory takes it.
    lock_slot: Option<fs::File>,
    started: SystemTime,
    run_id: String,
    required: Vec<String>,
    landlock_abi: Option<i32>,
    /// The supervisor's own Landlock ABI (confine.rs), once applied.
    supervisor_landlock_abi: Option<i32>,
    activation: String,
    network: Option<NetworkSummary>,
    /// Host pid of the box's init (0 before it exists).
    box_pid: i32,
    /// A role killed by its seccomp allowlist, in the receipt's words.
    role_killed: Option<String>,
    /// The CLI's report pipe: the run directory, then (`main`) the run's end.
    report: Option<fs::File>,
    /// The box's init cloned before the request was read, until the box
    /// starts from it (dropped unused: killed and reaped).
    early: Option<launcher::EarlyBox>,
    /// The thread that reaps the box's init once it reported the end.
    box_waiter: Option<std::thread::JoinHandle<std::result::Result<(), SandboxError>>>,
    /// This host's name, read at the start (before the supervisor's filters).
    host_name: Option<String>,
    /// Network none on the linux backend: the names the box's DNS stub refused.
    dns_names: Option<crate::dns_names::Reader>,
    /// The run's cgroup counters (OOM kills, refused forks), opened before
    /// the supervisor confines itself.
    limits_watch: crate::limits::Watch,
}

/// What the waiter threads report to the supervisor's main loop.
enum Event {
    Box(Result<BoxReport, SandboxError>),
    Broker(Result<i32, SandboxError>),
}

impl Run {
    fn new(req: RunRequest, lock_slot: fs::File, exe: launcher::RoleExe) -> Run {
        Run {
            req,
            exe,
            lock_slot: Some(lock_slot),
            receipt_out: None,
            started: SystemTime::now(),
            run_id: String::new(),
            required: Vec::new(),
            landlock_abi: None,
            supervisor_landlock_abi: None,
            activation: "not run".into(),
            network: None,
            box_pid: 0,
            role_killed: None,
            report: None,
            early: None,
            box_waiter: None,
            host_name: crate::receipt::host_name(),
            dns_names: None,
            limits_watch: crate::limits::Watch::default(),
        }
    }

    fn execute(&mut self, sigfd: &SignalFd, t0: Instant) -> u8 {
        // The receipt's destination is opened and checked before anything
        // runs: the box may be able to change the path later (a receipt in
        // the workspace), and a receipt that cannot be written is a refusal.
        if let Some(path) = self.req.receipt.clone() {
            match ReceiptOut::open(&path) {
                Ok(r) => self.receipt_out = Some(r),
                Err(e) => return self.refuse(None, &e),
            }
        }
        let plan = match revalidate(&self.req) {
            Ok(p) => p,
            Err(e) => {
                return self.refuse(None, &format!("the run request does not re-validate: {e}"))
            }
        };
        self.required = cap_names(plan.required_capabilities());
        if let Err(e) = self.req.limits.validate() {
            return self.refuse(None, &format!("the run request does not re-validate: {e}"));
        }
        let landlock = match crate::backend::Backend::from_name(&self.req.backend) {
            Some(crate::backend::Backend::Macos) => {
                return self.refuse(
                    None,
                    &"backend macos runs only on macOS; this supervisor runs the linux and landlock backends",
                )
            }
            Some(crate::backend::Backend::Windows) => {
                return self.refuse(
                    None,
                    &"backend windows runs only on Windows; this supervisor runs the linux and landlock backends",
                )
            }
            Some(crate::backend::Backend::Vm) if self.req.vm.is_none() => {
                return self.refuse(None, &"backend vm: the run request has no boot configuration")
            }
            Some(b) => b == crate::backend::Backend::Landlock,
            None => {
                return self.refuse(
                    None,
                    &format!("unknown backend {:?} in the run request", self.req.backend),
                )
            }
        };
        // The CLI checked the plan against the backend's declared set; a
        // request claiming more than the backend declares is refused.
        if landlock {
            let own = launcher::nouserns::declared_capabilities();
            let claimed = declared_set(&self.req.declared).unwrap_or(CapabilitySet::ALL);
            if let Some(c) = claimed.missing_from(own).first() {
                return self.refuse(
                    None,
                    &format!(
                        "the run request declares {c}, which the landlock backend does not enforce"
                    ),
                );
            }
        }
        let Some(lock_slot) = self.lock_slot.take() else {
            return self.refuse(None, &"the run lock's descriptor is gone");
        };
        let dir = match RunDir::create(&plan, lock_slot) {
            Ok(d) => d,
            Err(e) => return self.refuse(None, &e),
        };
        self.run_id = dir.run_id.clone();
        // The CLI opens this run by the path said here (no listing); the
        // pipe is kept for the run's end (`main`).
        if let Some(report) = self.report.as_mut() {
            use std::io::Write;
            use std::os::unix::ffi::OsStrExt;
            let mut line = dir.path.as_os_str().as_bytes().to_vec();
            line.push(b'\n');
            let _ = report.write_all(&line);
        }
        debug!(phase = "validate", ms = t0.elapsed().as_secs_f64() * 1e3, state_dir = %dir.path.display(), runtime_dir = %dir.runtime.display());
        // The canary: this run's own request, owner-only, outside every grant,
        // without environment values (they may be secrets; the file is kept as
        // a record). It (and the state directory holding it) is written while
        // the box builds its root; the box waits for the word on `gate` before
        // its activation check.
        let canary = dir.canary_path();
        let (gate_r, gate_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
            Ok(p) => p,
            Err(e) => return self.refuse(Some(&dir), &format!("pipe: {e}")),
        };
        // With network none, a host loopback listener the box must not reach.
        let listener = if plan.network() == NetworkMode::None {
            match TcpListener::bind("127.0.0.1:0") {
                Ok(l) => Some(l),
                Err(e) => {
                    return self
                        .refuse(Some(&dir), &format!("cannot bind the canary listener: {e}"))
                }
            }
        } else {
            None
        };
        let canary_tcp: Option<SocketAddr> = listener.as_ref().and_then(|l| l.local_addr().ok());
        let (argv, env) = match (self.req.argv(), self.req.env()) {
            (Ok(a), Ok(e)) => (a, e),
            (Err(e), _) | (_, Err(e)) => return self.refuse(Some(&dir), &e),
        };
        // Mediated networking: the broker starts first and the box beside
        // it; the broker must confirm that it serves before the workload may
        // run (the canary gate below); if it cannot, the run is refused,
        // never degraded.
        let mut broker: Option<Broker> = None;
        let mut pending: Option<PendingBroker> = None;
        let mut t_broker = Instant::now();
        let mediated = if plan.network() == NetworkMode::Mediated {
            let mir = match self.req.mir_bytes() {
                Ok(m) => m,
                Err(e) => return self.refuse(Some(&dir), &e),
            };
            // The broker appends to the state directory's network receipt.
            if let Err(e) = dir.create_state_dir() {
                return self.refuse(Some(&dir), &e);
            }
            t_broker = Instant::now();
            match Broker::start(&self.exe, &dir, &mir) {
                Ok((b, box_end)) => {
                    pending = Some(b);
                    Some((
                        box_end,
                        terra_netd::proxy_listen_addr(),
                        terra_netd::box_service as launcher::BoxService,
                    ))
                }
                Err(e) => {
                    return self.refuse(
                        Some(&dir),
                        &format!(
                            "the network broker did not start: {e}; the run is refused (no fallback to another network mode)"
                        ),
                    )
                }
            }
        } else {
            None
        };
        // Network none in a box with its own network namespace: the box's
        // DNS stub says each name it refuses on a pipe read from here.
        let dns_report =
            if plan.network() == NetworkMode::None && !landlock && self.req.vm.is_none() {
                match crate::dns_names::start() {
                    Ok((reader, w)) => {
                        self.dns_names = Some(reader);
                        Some(w)
                    }
                    Err(e) => {
                        if let Some(p) = pending.take() {
                            p.abandon();
                        }
                        return self
                            .refuse(Some(&dir), &format!("cannot read the box's DNS names: {e}"));
                    }
                }
            } else {
                None
            };
        let config = BoxConfig {
            plan,
            argv,
            cwd: self.req.cwd.clone(),
            env,
            temp_dir: self.req.bindings.temp.clone(),
            canary_path: canary,
            canary_tcp,
            canary_gate: Some(gate_r),
            mediated,
            dns_report,
            hostname: "terra".into(),
            rlimits: rlimits(&self.req.limits.rlimits),
            vm: self.req.vm.clone(),
        };
        // A terminal on stdin, stdout or stderr: the box gets its own (pty.rs).
        // The landlock backend has no devpts of its own: its workload shares
        // the caller's terminal (TIOCSTI, TIOCLINUX, TIOCSETD refused).
        // The vm backend relays the guest's stdio itself (no pty yet).
        let operator = match if landlock || self.req.vm.is_some() {
            Ok(None)
        } else {
            crate::pty::Operator::detect()
        } {
            Ok(o) => o,
            Err(e) => {
                if let Some(p) = pending.take() {
                    p.abandon();
                }
                return self.refuse(Some(&dir), &e);
            }
        };
        let box_terminal = operator.as_ref().map(|o| o.box_terminal());
        let t_spawn = Instant::now();
        // Without a PID namespace, orphans of the workload come to us, not
        // to the host's init: found, killed and reaped at the end (reaper.rs).
        if landlock {
            if let Err(e) = crate::reaper::become_subreaper() {
                if let Some(p) = pending.take() {
                    p.abandon();
                }
                return self.refuse(Some(&dir), &e);
            }
        }
        // The box is cloned inside the run's cgroups (so every process it
        // makes starts there) and the supervisor leaves them at once.
        let joined = match crate::limits::join(&self.req.limits) {
            Ok(j) => j,
            Err(e) => {
                if let Some(p) = pending.take() {
                    p.abandon();
                }
                return self.refuse(Some(&dir), &e);
            }
        };
        // The early box is used unless the box must be cloned inside the
        // run's cgroups (joined above) or the backend has no box of its own.
        let early = self
            .early
            .take()
            .filter(|_| !landlock && self.req.limits.cgroups.is_empty());
        let spawned = if landlock {
            launcher::nouserns::spawn_box(config)
        } else if let Some(early) = early {
            early.start(&self.exe, config, box_terminal)
        } else {
            launcher::spawn_box_with_terminal(&self.exe, config, box_terminal)
        };
        let left = joined.leave();
        let spawned = match (spawned, left) {
            (Ok(h), Err(e)) => {
                let _ = kill(Pid::from_raw(h.pid()), Signal::SIGKILL);
                let _ = h.wait();
                if let Some(p) = pending.take() {
                    p.abandon();
                }
                return self.refuse(Some(&dir), &e);
            }
            (s, _) => s,
        };
        self.limits_watch = crate::limits::Watch::open(&self.req.limits);
        let mut handle = match spawned {
            Ok(h) => h,
            Err(e) => {
                if let Some(p) = pending.take() {
                    p.abandon();
                }
                return self.refuse(Some(&dir), &format!("the box did not start: {e}"));
            }
        };
        let box_pid = Pid::from_raw(handle.pid());
        self.box_pid = box_pid.as_raw();
        debug!(
            phase = "spawn",
            ms = t_spawn.elapsed().as_secs_f64() * 1e3,
            pid = box_pid.as_raw()
        );
        // The broker's word, while the box builds its root.
        if let Some(p) = pending.take() {
            match p.confirm(&dir) {
                Ok(b) => {
                    debug!(
                        phase = "broker-start",
                        ms = t_broker.elapsed().as_secs_f64() * 1e3,
                        pid = b.pid
                    );
                    self.network = Some(b.summary_before_end());
                    broker = Some(b);
                }
                Err(e) => {
                    drop(gate_w);
                    let _ = kill(box_pid, Signal::SIGKILL);
                    let _ = handle.wait();
                    return self.refuse(
                        Some(&dir),
                        &format!(
                            "the network broker did not start: {e}; the run is refused (no fallback to another network mode)"
                        ),
                    );
                }
            }
        }
        let made = dir
            .create_state_dir()
            .and_then(|_| dir.write_canary(&self.req.without_env_values()));
        if let Err(e) = made {
            drop(gate_w);
            let _ = kill(box_pid, Signal::SIGKILL);
            let _ = handle.wait();
            if let Some(b) = broker.take() {
                self.network = Some(b.stop(None));
            }
            return self.refuse(Some(&dir), &e);
        }
        if let Err(e) = dir.write_runtime("host.pid", format!("{box_pid}\n").as_bytes()) {
            warn!("{e}");
        }
        // The workers run: from here on the supervisor reaches only the
        // files of its run (before any thread, so that every one is in it).
        match crate::confine::apply(&self.req, &dir) {
            Ok(abi) => self.supervisor_landlock_abi = abi,
            Err(e) => {
                let _ = kill(box_pid, Signal::SIGKILL);
                let _ = handle.wait();
                if let Some(b) = broker.take() {
                    self.network = Some(b.stop(None));
                }
                return self.refuse(Some(&dir), &e);
            }
        }
        // The workers run and the Landlock domain is in place: from here on
        // the supervisor's allowlist holds (no exec, no new process, no
        // socket, no mount...; any other call kills it). Threads started
        // below inherit it.
        if let Err(e) = terra_seccomp::compile(terra_seccomp::Table::Supervisor)
            .and_then(|p| terra_seccomp::install(&p))
        {
            let _ = kill(box_pid, Signal::SIGKILL);
            let _ = handle.wait();
            if let Some(b) = broker.take() {
                self.network = Some(b.stop(None));
            }
            return self.refuse(Some(&dir), &e);
        }
        // The canary exists and this process is confined: the workload's
        // activation check may run, and with it the workload (it waits for
        // this byte). Written only now, so no instruction of the workload
        // runs while the supervisor is not yet under its Landlock domain and
        // allowlist. A box that already ended has no reader: the write
        // fails, harmlessly.
        let _ = nix::unistd::write(&gate_w, b"x");
        drop(gate_w);
        // Threads start only now (the box is cloned from a process that has
        // none, and every thread is in the Landlock domain).
        let relay = operator.map(|o| o.start(handle.take_terminal()));

        // Wait for the box (and the broker) on threads; the main thread
        // watches signals and the deadline. No fork happens after this point.
        let (wake_r, wake_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
            Ok(p) => p,
            Err(e) => {
                let _ = kill(box_pid, Signal::SIGKILL);
                let _ = handle.wait();
                if let Some(b) = broker.take() {
                    self.network = Some(b.stop(None));
                }
                return self.refuse(Some(&dir), &format!("pipe: {e}"));
            }
        };
        let (tx, rx) = mpsc::channel();
        if let Some(b) = broker.as_mut() {
            if let Some(role) = b.handle.take() {
                let tx = tx.clone();
                let wake = wake_w.try_clone().ok();
                std::thread::spawn(move || {
                    let _ = tx.send(Event::Broker(role.wait()));
                    if let Some(w) = wake {
                        let _ = nix::unistd::write(&w, b"x");
                    }
                });
            }
        }
        // The box's end is reported as soon as its init says how the
        // workload ended; the thread then reaps init (the kernel ends what
        // is left of the box and tears down its namespaces meanwhile, while
        // the receipt is written) and is joined before the supervisor ends.
        self.box_waiter = Some(std::thread::spawn(move || {
            let (report, reap) = match handle.wait_reported() {
                Ok((r, reap)) => (Ok(r), Some(reap)),
                Err(e) => (Err(e), None),
            };
            let _ = tx.send(Event::Box(report));
            let _ = nix::unistd::write(&wake_w, b"x");
            let t_reap = Instant::now();
            let reaped = reap.map_or(Ok(()), launcher::BoxReap::wait);
            debug!(phase = "reap", ms = t_reap.elapsed().as_secs_f64() * 1e3);
            reaped
        }));
        let deadline = self
            .req
            .timeout_ms
            .map(|ms| Instant::now() + Duration::from_millis(ms));
        let mut timed_out = false;
        let mut kill_at: Option<Instant> = None;
        let report = 'run: loop {
            while let Ok(ev) = rx.try_recv() {
                match ev {
                    Event::Box(r) => break 'run r,
                    Event::Broker(r) => {
                        if let Some(b) = broker.as_mut() {
                            if matches!(r, Ok(crate::role_kill::KILLED_STATUS)) {
                                // Its allowlist killed it: the run ends (125).
                                let line = crate::role_kill::line("terra __network", b.pid);
                                eprintln!("terra: {line}; stopping the box");
                                self.role_killed = Some(line);
                                let _ = kill(box_pid, Signal::SIGKILL);
                            }
                            b.ended(r, true);
                        }
                    }
                }
            }
            let now = Instant::now();
            let next = match (deadline, kill_at) {
                (_, Some(k)) => Some(k),
                (Some(d), None) => Some(d),
                (None, None) => None,
            };
            if let Some(t) = next {
                if now >= t {
                    if kill_at.is_none() {
                        debug!("deadline passed: SIGTERM to the box, SIGKILL in {TIMEOUT_GRACE:?}");
                        timed_out = true;
                        let _ = kill(box_pid, Signal::SIGTERM);
                        kill_at = Some(now + TIMEOUT_GRACE);
                    } else {
                        debug!("grace over: SIGKILL to the box");
                        let _ = kill(box_pid, Signal::SIGKILL);
                        kill_at = Some(now + Duration::from_secs(3600));
                    }
                    continue;
                }
            }
            let timeout = match next {
                Some(t) => {
                    let ms = t
                        .saturating_duration_since(now)
                        .as_millis()
                        .clamp(1, i32::MAX as u128);
                    PollTimeout::try_from(ms as i32).unwrap_or(PollTimeout::MAX)
                }
                None => PollTimeout::NONE,
            };
            let mut fds = [
                PollFd::new(sigfd.as_fd(), PollFlags::POLLIN),
                PollFd::new(wake_r.as_fd(), PollFlags::POLLIN),
            ];
            let _ = poll(&mut fds, timeout);
            let mut drain = [0u8; 16];
            if fds[1]
                .revents()
                .is_some_and(|r| r.contains(PollFlags::POLLIN))
            {
                let _ = nix::unistd::read(wake_r.as_raw_fd(), &mut drain);
            }
            while let Ok(Some(info)) = sigfd.read_signal() {
                if let Some(r) = &relay {
                    // The box's terminal follows the operator's window and
                    // signals the box's foreground process group itself.
                    if info.ssi_signo == Signal::SIGWINCH as u32 {
                        r.resize();
                        continue;
                    }
                } else if info.ssi_code == SI_KERNEL {
                    // Without a box terminal, a terminal-generated signal
                    // reached the whole foreground process group, the workload
                    // included: do not deliver it twice. (With one, the
                    // workload is in a session of its own and gets nothing
                    // from the operator's terminal: it is forwarded.)
                    continue;
                }
                if let Ok(sig) = Signal::try_from(info.ssi_signo as i32) {
                    debug!(signal = ?sig, "forwarding to the box");
                    let _ = kill(box_pid, sig);
                }
            }
        };
        // The box's last output, then the operator's terminal modes back,
        // before anything of terra's own is printed.
        if let Some(r) = relay {
            r.finish();
        }
        if landlock {
            match crate::reaper::stop_descendants() {
                Ok(0) => {}
                Ok(n) => debug!(killed = n, "descendants of the workload stopped"),
                Err(e) => eprintln!("terra: stopping the workload's descendants: {e}"),
            }
        }
        if let Some(b) = broker.take() {
            let t_stop = Instant::now();
            self.network = Some(b.stop(Some(&rx)));
            debug!(
                phase = "broker-stop",
                ms = t_stop.elapsed().as_secs_f64() * 1e3
            );
        }
        let t_teardown = Instant::now();
        // From the launcher's fork to the reaped box: namespaces, mounts,
        // filters, activation check, exec, the workload itself, its exit.
        debug!(
            phase = "box",
            ms = t_teardown.duration_since(t_spawn).as_secs_f64() * 1e3
        );
        let code = match report {
            Ok(r) => self.finish(&dir, r, timed_out),
            Err(e) => self.refuse(Some(&dir), &format!("the box failed: {e}")),
        };
        // (The box was reaped with the receipts: cleanup_and_report.)
        reap_box(self.box_waiter.take());
        drop(listener);
        debug!(
            phase = "teardown",
            ms = t_teardown.elapsed().as_secs_f64() * 1e3
        );
        debug!(
            vm_hwm_kb = peak_rss_kb(),
            "supervisor peak resident set size"
        );
        code
    }

    fn finish(&mut self, dir: &RunDir, report: BoxReport, timed_out: bool) -> u8 {
        self.landlock_abi = report.landlock_abi;
        self.activation = report.activation.clone();
        let mut outcome = Outcome {
            timed_out,
            ..Outcome::default()
        };
        match &report.exit {
            BoxExit::Code(c) => outcome.exit_code = *c,
            BoxExit::Signal(s) => {
                outcome.signal = Some(*s);
                outcome.exit_code = 128 + s;
            }
            BoxExit::Refused(why) => {
                eprintln!("terra: the box refused to start the workload: {why}");
                outcome.exit_code = EXIT_REFUSED as i32;
                outcome.refused = Some(why.clone());
            }
            BoxExit::ExecFailed { code, reason } => {
                eprintln!("terra: {reason}");
                outcome.exit_code = *code;
                outcome.exec_failed = Some(reason.clone());
            }
            BoxExit::InitKilledBySeccomp => {
                let line = crate::role_kill::line("terra __vm", self.box_pid);
                eprintln!("terra: {line}; the box went with it");
                self.role_killed = Some(line);
            }
        }
        // A role killed by its allowlist ends the run as a refusal, whatever
        // the workload did meanwhile.
        if let Some(line) = &self.role_killed {
            outcome.exit_code = EXIT_REFUSED as i32;
            outcome.signal = None;
            outcome.refused = Some(line.clone());
            outcome.role_killed = Some(line.clone());
        }
        outcome.limit_reached = self.limit_effects(&report.exit);
        if timed_out {
            eprintln!(
                "terra: the deadline of {} ms passed; the box was stopped",
                self.req.timeout_ms.unwrap_or(0)
            );
        }
        self.cleanup_and_report(Some(dir), outcome)
    }

    /// What a limit did to the run, said on stderr and returned for the
    /// receipt's outcome (None: no limit acted, as far as terra can tell).
    fn limit_effects(&self, exit: &BoxExit) -> Option<String> {
        let l = &self.req.limits;
        let fx = self.limits_watch.effects();
        let mut said = Vec::new();
        if let (Some(m), true) = (&l.memory, fx.oom_kills > 0) {
            said.push(match exit {
                BoxExit::Signal(9) => format!(
                    "the workload was killed by the memory limit ({})",
                    m.requested
                ),
                _ => format!(
                    "the memory limit ({}) killed {} process(es) of the box",
                    m.requested, fx.oom_kills
                ),
            });
        }
        if let (Some(p), true) = (&l.pids, fx.forks_refused > 0) {
            said.push(format!(
                "the pids limit ({}) refused {} fork(s) of the box",
                p.requested, fx.forks_refused
            ));
        }
        if let (Some(f), BoxExit::Signal(s)) = (&l.max_file_size, exit) {
            if *s == libc::SIGXFSZ {
                said.push(format!(
                    "the workload was killed by SIGXFSZ: it wrote past the file size limit ({})",
                    f.requested
                ));
            }
        }
        if said.is_empty() {
            return None;
        }
        let text = said.join("; ");
        eprintln!("terra: {text}");
        Some(text)
    }

    fn refuse(&mut self, dir: Option<&RunDir>, why: &dyn std::fmt::Display) -> u8 {
        // An early box that will not be used ends first (killed and reaped).
        self.early = None;
        eprintln!("terra: {why}");
        let outcome = Outcome {
            exit_code: EXIT_REFUSED as i32,
            refused: Some(why.to_string()),
            ..Outcome::default()
        };
        self.cleanup_and_report(dir, outcome)
    }

    fn cleanup_and_report(&mut self, dir: Option<&RunDir>, outcome: Outcome) -> u8 {
        // The receipts are written while the box's init is reaped (on its
        // waiter thread: the kernel tears the box down meanwhile); the temp
        // directory goes once no process of the box is left. The CLI waits
        // for all of it. (A thread of its own for the temp directory could
        // overlap only the receipts' writing, ~0.2 ms, and cost a thread
        // in every run.)
        let written = self.write_receipts(dir, &outcome);
        reap_box(self.box_waiter.take());
        if !self.req.keep_temp {
            crate::files::remove_tree(&self.req.bindings.temp);
        }
        written.map_or_else(
            |e| {
                eprintln!(
                    "terra: {e}; exit status {EXIT_REFUSED} instead of the run's {}",
                    outcome.exit_code
                );
                EXIT_REFUSED
            },
            |()| outcome.exit_code.clamp(0, 255) as u8,
        )
    }

    /// Writes the receipt to the state directory and to `--receipt`, and
    /// removes the runtime files. Err: a receipt could not be written.
    fn write_receipts(&mut self, dir: Option<&RunDir>, outcome: &Outcome) -> Result<()> {
        let mut receipt = Receipt::new(
            &self.req,
            Observed {
                run_id: &self.run_id,
                required: &self.required,
                started: self.started,
                landlock_abi: self.landlock_abi,
                supervisor_landlock_abi: self.supervisor_landlock_abi,
                activation: &self.activation,
                network: self.network.clone(),
                host_name: self.host_name.clone(),
            },
            outcome.clone(),
            SystemTime::now(),
        );
        // The box closes the pipe as it ends (its init reported already).
        receipt.dns_refused = self
            .dns_names
            .take()
            .map(|r| r.finish(Duration::from_millis(200)));
        let json = receipt.to_json();
        let mut failed = Vec::new();
        if let Some(dir) = dir {
            // A refusal can come before the state directory was made.
            if let Err(e) = dir
                .create_state_dir()
                .and_then(|_| dir.write_file("receipt.json", json.as_bytes()).map(|_| ()))
            {
                failed.push(e);
            }
            dir.remove_runtime();
        }
        if let Some(out) = &self.receipt_out {
            if let Err(e) = out.write(&json) {
                failed.push(e);
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(Error::Several(failed))
        }
    }
}

/// Waits until the box's init is reaped (no process of the box is left).
fn reap_box(waiter: Option<std::thread::JoinHandle<std::result::Result<(), SandboxError>>>) {
    if let Some(w) = waiter {
        match w.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!("reaping the box: {e}"),
            Err(_) => warn!("the box's waiter thread panicked"),
        }
    }
}

/// Peak resident set size of this process (VmHWM), in KiB.
fn peak_rss_kb() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// How long the broker may take to confirm it serves (startup message read,
/// descriptors adopted, Landlock and seccomp applied).
const BROKER_START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the broker gets to end by itself once the box is gone (it ends
/// when the box's end of fd 7 closes, after at most
/// `terra_netd::DRAIN_LIMIT` for open connections to write their receipt
/// lines) before terra stops it.
const BROKER_EXIT_WAIT: Duration = Duration::from_millis(2500);

/// The network broker of a mediated run (`terra __network`, a confined role).
struct Broker {
    pid: i32,
    /// Some until a waiter thread takes it.
    handle: Option<RoleHandle>,
    /// The network receipt in the run's state directory.
    receipt: PathBuf,
    /// The network receipt, opened for reading when it was created.
    reader: Option<fs::File>,
    /// Exit status, whether it ended while the box ran, how.
    end: Option<(Option<i32>, bool, String)>,
}

impl Broker {
    /// Starts the broker: fd 7 socketpair (the box end is returned for the
    /// box), fd 8 startup channel (the canonical MIR and the config; the
    /// broker re-validates the MIR and answers [`terra_netd::READY`] once it
    /// serves), fd 9 the network receipt (owner-only, append). Anything but
    /// a confirmed start is an error: the caller refuses the run.
    fn start(
        exe: &launcher::RoleExe,
        dir: &RunDir,
        mir: &[u8],
    ) -> Result<(PendingBroker, OwnedFd)> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        use std::io::Write;
        let (box_end, broker_end) = terra_netd::fdpass::broker_socketpair()
            .map_err(|e| Error::op("the fd 7 socketpair", e))?;
        let (startup, startup_theirs) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| Error::sys("the fd 8 startup channel", e))?;
        let (file, receipt) = dir.create_state_file("network.jsonl")?;
        // Read back at the end through this descriptor, not by path.
        let reader = dir.open_state_file_read("network.jsonl")?;
        // The broker gets no stdin/stdout of the run: /dev/null on 0 and 1,
        // stderr stays (its refusals are printed there).
        let null = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_CLOEXEC.bits())
            .open("/dev/null")
            .map_err(|e| Error::io("", Path::new("/dev/null"), e))?;
        let null2 = null
            .try_clone()
            .map_err(|e| Error::io("", Path::new("/dev/null"), e))?;
        let role = launcher::spawn_confined_role(
            exe,
            c"__network",
            RoleConfig {
                read_only_files: terra_netd::resolver_files(),
                keep_fds: vec![
                    (OwnedFd::from(null), 0),
                    (OwnedFd::from(null2), 1),
                    (broker_end, terra_netd::BROKER_CHANNEL_FD),
                    (startup_theirs, terra_netd::STARTUP_FD),
                    (OwnedFd::from(file), terra_netd::RECEIPT_FD),
                ],
            },
        )?;
        let pid = role.pid();
        let fail = |role: RoleHandle, why: String| -> Error {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            Error::Broker(match role.wait() {
                Ok(code) => format!("{why} (broker exit status {code})"),
                Err(e) => format!("{why} ({e})"),
            })
        };
        let mut chan = fs::File::from(startup);
        let message = terra_netd::encode_startup(mir, &terra_netd::StartupConfig::default());
        if let Err(e) = chan.write_all(&message) {
            return Err(fail(role, format!("cannot write its startup message: {e}")));
        }
        Ok((
            PendingBroker {
                pid,
                role,
                chan,
                receipt,
                reader,
            },
            box_end,
        ))
    }
}

/// A broker started but not yet confirmed (it reads its startup message,
/// confines itself and says `ready` while the box builds its root).
struct PendingBroker {
    pid: i32,
    role: RoleHandle,
    chan: fs::File,
    receipt: PathBuf,
    reader: fs::File,
}

impl PendingBroker {
    /// Ends a broker whose run was refused before it was confirmed.
    fn abandon(self) {
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        let _ = self.role.wait();
    }

    /// Waits (at most BROKER_START_TIMEOUT) for the broker's `ready`.
    fn confirm(self, dir: &RunDir) -> Result<Broker> {
        let PendingBroker {
            pid,
            role,
            mut chan,
            receipt,
            reader,
        } = self;
        let fail = |role: RoleHandle, why: String| -> Error {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            Error::Broker(match role.wait() {
                Ok(code) => format!("{why} (broker exit status {code})"),
                Err(e) => format!("{why} ({e})"),
            })
        };
        let deadline = Instant::now() + BROKER_START_TIMEOUT;
        let mut got = Vec::new();
        while got.len() < terra_netd::READY.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(fail(
                    role,
                    format!("it did not confirm within {BROKER_START_TIMEOUT:?}"),
                ));
            }
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            let mut fds = [PollFd::new(chan.as_fd(), PollFlags::POLLIN)];
            let _ = poll(
                &mut fds,
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
            );
            let mut b = [0u8; 16];
            match chan.read(&mut b) {
                Ok(0) => {
                    return Err(fail(
                        role,
                        "it ended before confirming that it serves".into(),
                    ))
                }
                Ok(n) => got.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(fail(role, format!("reading its confirmation: {e}"))),
            }
        }
        if got != terra_netd::READY {
            return Err(fail(role, format!("unexpected confirmation {got:?}")));
        }
        drop(chan);
        if let Err(e) = dir.write_runtime("broker.pid", format!("{pid}\n").as_bytes()) {
            warn!("{e}");
        }
        debug!(pid, receipt = %receipt.display(), "network broker serves");
        Ok(Broker {
            pid,
            handle: Some(role),
            receipt,
            reader: Some(reader),
            end: None,
        })
    }
}

impl Broker {
    /// Records the broker's end. Status 0 means the box's end of fd 7 was
    /// closed, i.e. the box (its service) is gone: that is never an end
    /// during the run, whichever waiter reported first.
    fn ended(&mut self, r: Result<i32, SandboxError>, during_run: bool) {
        if self.end.is_some() {
            return;
        }
        let (code, status) = match r {
            Ok(0) => {
                self.end = Some((
                    Some(0),
                    false,
                    "exited with status 0 when the box closed its channel".into(),
                ));
                return;
            }
            Ok(c) => (Some(c), status_words(c)),
            Err(e) => (None, format!("could not be waited for: {e}")),
        };
        let how = if during_run {
            eprintln!(
                "terra: the network broker ended while the box was running ({status}); networking is \
                 unavailable for the rest of the run (no restart, no fallback)"
            );
            format!("{status} while the box was running")
        } else {
            status
        };
        self.end = Some((code, during_run, how));
    }

    /// The summary while the broker runs (so a refusal still links the receipt).
    fn summary_before_end(&self) -> NetworkSummary {
        NetworkSummary {
            receipt: self.receipt.clone(),
            broker_pid: self.pid,
            broker_ended: "running".into(),
            ..NetworkSummary::default()
        }
    }

    /// After the box ended: lets the broker end by itself (the box's end of
    /// fd 7 is closed), else SIGTERM, then SIGKILL; reaps it and summarizes
    /// the network receipt.
    fn stop(mut self, rx: Option<&mpsc::Receiver<Event>>) -> NetworkSummary {
        if self.end.is_none() {
            let own;
            let rx = match (self.handle.take(), rx) {
                (Some(role), _) => {
                    let (tx, r) = mpsc::channel();
                    std::thread::spawn(move || {
                        let _ = tx.send(Event::Broker(role.wait()));
                    });
                    own = r;
                    &own
                }
                (None, Some(rx)) => rx,
                (None, None) => {
                    self.end = Some((None, false, "not waited for".into()));
                    return self.summary();
                }
            };
            let recv = |d: Duration| -> Option<Result<i32, SandboxError>> {
                let until = Instant::now() + d;
                loop {
                    match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                        Ok(Event::Broker(r)) => return Some(r),
                        Ok(Event::Box(_)) => continue,
                        Err(mpsc::RecvTimeoutError::Timeout) => return None,
                        Err(mpsc::RecvTimeoutError::Disconnected) => {
                            return Some(Err(SandboxError::Io(
                                "the broker's waiter is gone".into(),
                            )))
                        }
                    }
                }
            };
            let pid = Pid::from_raw(self.pid);
            if let Some(r) = recv(BROKER_EXIT_WAIT) {
                self.ended(r, false);
            } else {
                let _ = kill(pid, Signal::SIGTERM);
                if let Some(r) = recv(TIMEOUT_GRACE) {
                    self.ended(r, false);
                    if let Some((_, _, how)) = self.end.as_mut() {
                        *how = format!("stopped by terra with SIGTERM after the box ended: {how}");
                    }
                } else {
                    let _ = kill(pid, Signal::SIGKILL);
                    let r = recv(Duration::from_secs(60)).unwrap_or_else(|| {
                        Err(SandboxError::Io("still running after SIGKILL".into()))
                    });
                    self.ended(r, false);
                    if let Some((_, _, how)) = self.end.as_mut() {
                        *how = format!("killed by terra with SIGKILL after the box ended: {how}");
                    }
                }
            }
        }
        self.summary()
    }

    /// Reads the network receipt (the broker has ended) and counts it.
    fn summary(&self) -> NetworkSummary {
        let mut s = self.summary_before_end();
        if let Some((code, during, how)) = &self.end {
            s.broker_exit = *code;
            s.broker_ended_during_run = *during;
            s.broker_ended = how.clone();
        }
        let Some(file) = self.reader.as_ref() else {
            warn!(
                "the network receipt {} was not opened",
                self.receipt.display()
            );
            return s;
        };
        if let Err(e) = count_network_receipt(file, &mut s) {
            warn!(
                "cannot read the network receipt {}: {e}",
                self.receipt.display()
            );
        }
        s
    }
}

/// An exit status in words (128+N: killed by signal N, as `RoleHandle::wait` reports it).
fn status_words(code: i32) -> String {
    if code > 128 {
        let sig = code - 128;
        match Signal::try_from(sig) {
            Ok(s) => format!("killed by signal {sig} ({s})"),
            Err(_) => format!("exit status {code}"),
        }
    } else {
        format!("exited with status {code}")
    }
}

/// The workload's rlimits, as the launcher takes them.
fn rlimits(r: &crate::limits::Rlimits) -> terra_sandbox::linux::Rlimits {
    terra_sandbox::linux::Rlimits {
        address_space: r.address_space,
        processes: r.processes,
        file_size: r.file_size,
    }
}
