//! The supervisor's run: validate, prepare state, start the box, watch it, report.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;
use terra_policy::{Capability, CapabilitySet, HostBindings, Mir, NetworkMode, SandboxPlan};
use terra_sandbox::linux::{self as launcher, BoxConfig, BoxExit, BoxReport};
use tracing::{debug, warn};

use crate::receipt::{rfc3339, Bindings, Capabilities, Outcome, Receipt, RECEIPT_VERSION};
use crate::request::{RunRequest, MAX_REQUEST_LEN, REQUEST_VERSION};
use crate::state::RunDir;
use crate::{forwarded_signals, EXIT_REFUSED, TIMEOUT_GRACE};

/// `si_code` of a signal the kernel generated (e.g. the terminal's Ctrl-C).
const SI_KERNEL: i32 = 0x80;

struct Args {
    request_fd: i32,
    parent_pid: i32,
}

fn parse_args(args: Vec<OsString>) -> Result<Args, String> {
    let mut it = args.into_iter().map(|a| a.to_string_lossy().into_owned());
    let (mut request_fd, mut parent_pid) = (None, None);
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> Result<i32, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} takes a number"))
        };
        match a.as_str() {
            "--request-fd" => request_fd = Some(num("--request-fd")?),
            "--parent-pid" => parent_pid = Some(num("--parent-pid")?),
            other => return Err(format!("unknown supervisor argument {other:?}")),
        }
    }
    match (request_fd, parent_pid) {
        (Some(request_fd), Some(parent_pid)) if request_fd > 2 => Ok(Args {
            request_fd,
            parent_pid,
        }),
        _ => Err("the supervisor is started by `terra run`, not by hand".into()),
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
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("terra: {e}");
            return EXIT_REFUSED;
        }
    };
    if nix::unistd::getppid().as_raw() != args.parent_pid {
        eprintln!("terra: `terra run` ended before the supervisor started; nothing was run");
        return EXIT_REFUSED;
    }
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
    let (raw, req) = match read_request(args.request_fd) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("terra: invalid run request: {e}");
            return EXIT_REFUSED;
        }
    };
    let mut run = Run::new(req, raw);
    let code = run.execute(&sigfd, t0);
    let _ = nix::sys::signal::SigSet::empty().thread_set_mask();
    code
}

/// Reads and parses the request; the pipe is reopened by path and its
/// inherited descriptor closed, so nothing of it reaches the box.
fn read_request(fd: i32) -> Result<(Vec<u8>, RunRequest), String> {
    let mut f =
        fs::File::open(format!("/proc/self/fd/{fd}")).map_err(|e| format!("fd {fd}: {e}"))?;
    let _ = nix::unistd::close(fd);
    let mut buf = Vec::new();
    f.by_ref()
        .take(MAX_REQUEST_LEN as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("read: {e}"))?;
    if buf.len() > MAX_REQUEST_LEN {
        return Err(format!("larger than {MAX_REQUEST_LEN} bytes"));
    }
    let req: RunRequest = serde_json::from_slice(&buf).map_err(|e| e.to_string())?;
    if req.version != REQUEST_VERSION {
        return Err(format!(
            "request version {} (this terra speaks {REQUEST_VERSION})",
            req.version
        ));
    }
    Ok((buf, req))
}

/// Re-validates the decision: canonical bytes decode, digest matches, the plan
/// resolves again against the same bindings and declared capabilities.
pub fn revalidate(req: &RunRequest) -> Result<SandboxPlan, String> {
    let bytes = req.mir_bytes()?;
    let mir = Mir::decode(&bytes).map_err(|e| format!("the plan's MIR does not decode: {e}"))?;
    if mir.decision_digest() != req.decision_digest {
        return Err(format!(
            "decision digest mismatch: the MIR hashes to {}, the request says {}",
            mir.decision_digest(),
            req.decision_digest
        ));
    }
    let declared = declared_set(&req.declared)?;
    let bindings = HostBindings {
        workspace: Some(req.workspace.clone()),
        temp: Some(req.temp.clone()),
        minimal_roots: req.minimal_roots.clone(),
        mediator: req.mediator.clone(),
    };
    let plan = terra_policy::compile_plan(&mir, &bindings, declared).map_err(|e| e.to_string())?;
    if plan.decision_digest() != req.decision_digest {
        return Err("the resolved plan's decision digest differs from the request's".into());
    }
    Ok(plan)
}

fn declared_set(names: &[String]) -> Result<CapabilitySet, String> {
    names
        .iter()
        .map(|n| Capability::from_name(n).ok_or_else(|| format!("unknown capability {n:?}")))
        .collect()
}

fn cap_names(set: CapabilitySet) -> Vec<String> {
    set.iter().map(|c| c.name().to_string()).collect()
}

struct Run {
    req: RunRequest,
    raw: Vec<u8>,
    started: SystemTime,
    run_id: String,
    required: Vec<String>,
    landlock_abi: Option<i32>,
    activation: String,
}

impl Run {
    fn new(req: RunRequest, raw: Vec<u8>) -> Run {
        Run {
            req,
            raw,
            started: SystemTime::now(),
            run_id: String::new(),
            required: Vec::new(),
            landlock_abi: None,
            activation: "not run".into(),
        }
    }

    fn execute(&mut self, sigfd: &SignalFd, t0: Instant) -> u8 {
        let plan = match revalidate(&self.req) {
            Ok(p) => p,
            Err(e) => {
                return self.refuse(None, &format!("the run request does not re-validate: {e}"))
            }
        };
        self.required = cap_names(plan.required_capabilities());
        let dir = match RunDir::create(&plan) {
            Ok(d) => d,
            Err(e) => return self.refuse(None, &e),
        };
        self.run_id = dir.run_id.clone();
        debug!(phase = "validate", ms = t0.elapsed().as_secs_f64() * 1e3, state_dir = %dir.path.display());
        // The canary: this run's own request, owner-only, outside every grant.
        let canary = match dir.write_file("request.json", &self.raw) {
            Ok(p) => p,
            Err(e) => return self.refuse(Some(&dir), &e),
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
        let config = BoxConfig {
            plan,
            argv,
            cwd: self.req.cwd.clone(),
            env,
            temp_dir: self.req.temp.clone(),
            canary_path: canary,
            canary_tcp,
            mediated: None,
            hostname: "terra".into(),
        };
        let t_spawn = Instant::now();
        let handle = match launcher::spawn_box(config) {
            Ok(h) => h,
            Err(e) => return self.refuse(Some(&dir), &format!("the box did not start: {e}")),
        };
        let box_pid = Pid::from_raw(handle.pid());
        debug!(
            phase = "spawn",
            ms = t_spawn.elapsed().as_secs_f64() * 1e3,
            pid = box_pid.as_raw()
        );
        if let Err(e) = dir.write_file("host.pid", format!("{box_pid}\n").as_bytes()) {
            warn!("{e}");
        }

        // Wait for the box on a thread; the main thread watches signals and the deadline.
        let (wake_r, wake_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
            Ok(p) => p,
            Err(e) => {
                let _ = kill(box_pid, Signal::SIGKILL);
                let _ = handle.wait();
                return self.refuse(Some(&dir), &format!("pipe: {e}"));
            }
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let report = handle.wait();
            let _ = tx.send(report);
            let _ = nix::unistd::write(&wake_w, b"x");
        });
        let deadline = self
            .req
            .timeout_ms
            .map(|ms| Instant::now() + Duration::from_millis(ms));
        let mut timed_out = false;
        let mut kill_at: Option<Instant> = None;
        let report = loop {
            if let Ok(r) = rx.try_recv() {
                break r;
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
            while let Ok(Some(info)) = sigfd.read_signal() {
                // A terminal-generated signal reached the whole foreground
                // process group, the workload included: do not deliver it twice.
                if info.ssi_code == SI_KERNEL {
                    continue;
                }
                if let Ok(sig) = Signal::try_from(info.ssi_signo as i32) {
                    debug!(signal = ?sig, "forwarding to the box");
                    let _ = kill(box_pid, sig);
                }
            }
        };
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
        }
        if timed_out {
            eprintln!(
                "terra: the deadline of {} ms passed; the box was stopped",
                self.req.timeout_ms.unwrap_or(0)
            );
        }
        self.cleanup_and_report(Some(dir), outcome)
    }

    fn refuse(&mut self, dir: Option<&RunDir>, why: &str) -> u8 {
        eprintln!("terra: {why}");
        let outcome = Outcome {
            exit_code: EXIT_REFUSED as i32,
            refused: Some(why.to_string()),
            ..Outcome::default()
        };
        self.cleanup_and_report(dir, outcome)
    }

    fn cleanup_and_report(&mut self, dir: Option<&RunDir>, outcome: Outcome) -> u8 {
        if !self.req.keep_temp {
            remove_tree(&self.req.temp);
        }
        let code = outcome.exit_code.clamp(0, 255) as u8;
        let receipt = Receipt {
            receipt_version: RECEIPT_VERSION,
            terra_version: env!("CARGO_PKG_VERSION").into(),
            run_id: self.run_id.clone(),
            backend: self.req.backend.clone(),
            policy: self.req.policy.clone(),
            decision_digest: self.req.decision_digest.clone(),
            capabilities: Capabilities {
                required: self.required.clone(),
                declared: self.req.declared.clone(),
            },
            host_bindings: Bindings {
                workspace: Some(self.req.workspace.clone()),
                temp: Some(self.req.temp.clone()),
                minimal_roots: self.req.minimal_roots.clone(),
                mediator: self.req.mediator.clone(),
            },
            landlock_abi: self.landlock_abi,
            activation: self.activation.clone(),
            started_at: rfc3339(self.started),
            ended_at: rfc3339(SystemTime::now()),
            argv: self.req.argv_display(),
            cwd: self.req.cwd.clone(),
            timeout_ms: self.req.timeout_ms,
            outcome,
        };
        let json = receipt.to_json();
        if let Some(dir) = dir {
            if let Err(e) = dir.write_file("receipt.json", json.as_bytes()) {
                eprintln!("terra: {e}");
            }
            // The canary holds the request, environment included (values of
            // --env may be secrets): it is not kept once the box is gone.
            dir.remove_file("request.json");
            dir.remove_file("host.pid");
            dir.remove_file("supervisor.pid");
        }
        if let Some(path) = &self.req.receipt {
            if let Err(e) = crate::receipt::write_atomic(path, json.as_bytes()) {
                eprintln!("terra: cannot write the receipt {}: {e}", path.display());
            }
        }
        code
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

/// Removes the run's temp directory even when the workload left unreadable or
/// unwritable directories in it.
fn remove_tree(path: &Path) {
    if fs::remove_dir_all(path).is_ok() || !path.exists() {
        return;
    }
    fn open_up(p: &Path) {
        if let Ok(meta) = fs::symlink_metadata(p) {
            if meta.is_dir() {
                let _ = fs::set_permissions(p, fs::Permissions::from_mode(0o700));
                if let Ok(rd) = fs::read_dir(p) {
                    for e in rd.flatten() {
                        open_up(&e.path());
                    }
                }
            }
        }
    }
    open_up(path);
    if let Err(e) = fs::remove_dir_all(path) {
        eprintln!(
            "terra: cannot remove the run's temp directory {}: {e}",
            path.display()
        );
    }
}
