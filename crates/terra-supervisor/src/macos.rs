//! The macos backend's run: the plan lowered to a Seatbelt launch spec and
//! the workload started under `terra __sandbox_launcher`
//! (docs/sandbox-macos.md).
//!
//! `terra run` itself is the supervisor and stays unconfined. The run is
//! built by the same [`crate::run::RunBuilder`] as on Linux (the policy, the
//! command line's `--read`/`--write`/`--deny`/`--allow-net` rules, the
//! environment, `--timeout`, `--receipt`); [`MacosRun::run`] then:
//!
//! 1. opens the `--receipt` destination (before anything runs);
//! 2. makes the run's private directory ([`crate::state::RunDir`]) outside
//!    every grant and writes the canary there (`request.json`, the request
//!    without environment values, as on Linux);
//! 3. for a mediated plan, starts the broker: `terra __sandbox_launcher`
//!    under the broker profile execs `terra __network --startup-fd N`, which
//!    gets the loopback listeners terra run bound before the run was built
//!    (their port is the workload's proxy), the network receipt
//!    (`network.jsonl`) and the startup message, and answers `ready`;
//! 4. starts the launcher for the workload in a process group of its own
//!    (the terminal's foreground group when terra run had the terminal),
//!    reads its status pipe (activation passed, refused, exec failed),
//!    forwards the signals terra run receives to that group, stops it at
//!    the deadline (SIGTERM, then SIGKILL after [`crate::TIMEOUT_GRACE`])
//!    and, once the workload's first process ended, kills what is left of
//!    the group, then every process that still carries the run's profile
//!    (the sweep: also those that left the group with setsid and forked
//!    again; `terra_seatbelt::tree`);
//! 5. stops the broker (closing its startup channel; it drains), counts the
//!    network receipt, writes the receipt (`receipt.json` in the run's
//!    state directory, and `--receipt`), removes the temp directory unless
//!    kept.
//!
//! The sweep is `terra __sandbox_reaper`'s, started before the workload: it
//! begins when its standard input ends, which terra run closes after the
//! workload's first process ended, and which the kernel closes when terra
//! run dies, also by SIGKILL. What it cannot end: a run whose reaper was
//! killed too (the workload cannot signal it: its profile allows signals
//! to its own sandbox only). The receipt says what the sweep found
//! (`processTree`).

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{IsTerminal, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::signal::{kill, killpg, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use terra_netd::standalone::LoopbackListeners;
use terra_policy::{NetworkMode, SandboxPlan};
use terra_seatbelt::{LaunchSpec, LauncherArgs, RunMark};

use crate::error::{Error, Result};
use crate::receipt::{NetworkSummary, Observed, Outcome, Receipt, ReceiptOut};
use crate::request::RunRequest;
use crate::run::PreparedRun;
use crate::state::RunDir;
use crate::{EXIT_REFUSED, TIMEOUT_GRACE};

/// The signals terra run passes on to the workload's process group.
const FORWARDED: [Signal; 7] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGWINCH,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// How long the broker may take to say it serves.
const BROKER_START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the broker gets to end once its startup channel is closed (it
/// drains for at most `terra_netd::DRAIN_LIMIT`).
const BROKER_END_TIMEOUT: Duration = Duration::from_secs(5);

/// How the sweep for the run's processes ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Swept {
    /// The reaper's report.
    Report {
        killed: usize,
        passes: usize,
        gave_up: bool,
    },
    /// The reaper said nothing usable (it died, or could not sweep).
    Failed(String),
}

/// What the receipt says about the process tree: how the sweep ended.
fn process_tree_words(swept: Option<&Swept>) -> String {
    match swept {
        Some(Swept::Report {
            killed,
            passes,
            gave_up: true,
        }) => format!(
            "NOT contained: the sweep for processes carrying the run's profile still found some after {passes} \
             passes (a tree forking as fast as it was killed); {killed} were killed; the rest stay under the profile"
        ),
        Some(Swept::Report { killed, passes, .. }) => format!(
            "contained: when the workload's first process ended, terra killed its process group, then every \
             process still carrying the run's profile, also those that left the group (setsid, setpgid): {killed} \
             found by the sweep in {passes} passes"
        ),
        Some(Swept::Failed(why)) => format!(
            "NOT known to be contained: {why}; terra killed the workload's process group, and processes that left \
             it may remain (under the run's profile)"
        ),
        None => "not swept (the policy's process.treeConfinement is \"disabled\"): terra killed the workload's \
                 process group only, so a descendant that left it (setsid) was not ended, and stays under the \
                 profile"
            .to_string(),
    }
}

/// `terra __sandbox_reaper`: started before the workload when the policy
/// requires process-tree, it sweeps the run's processes once its standard
/// input ends, which happens when terra run closes it at the run's end or
/// dies (also by SIGKILL: the kernel closes terra run's end then). Its own
/// process group, so the terminal's Ctrl-C is not its.
struct Reaper {
    child: std::process::Child,
    /// terra run's end of the reaper's standard input (close-on-exec, so no
    /// other child holds a copy).
    input: Option<std::process::ChildStdin>,
}

impl Reaper {
    fn start(exe: &Path, mark: &RunMark) -> Result<Reaper> {
        let mut child = Command::new(exe)
            .arg0("terra")
            .arg("__sandbox_reaper")
            .args(terra_seatbelt::tree::reaper_argv(mark))
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| Error::io("cannot start the run's reaper:", exe, e))?;
        let input = child.stdin.take();
        Ok(Reaper { child, input })
    }

    /// Ends its input (the sweep starts), reads its report, reaps it.
    fn finish(mut self) -> Swept {
        drop(self.input.take());
        let mut out = String::new();
        if let Some(o) = self.child.stdout.take() {
            let _ = o.take(4096).read_to_string(&mut out);
        }
        let status = self.child.wait();
        match terra_seatbelt::SweepReport::parse_line(&out) {
            Some((killed, passes, gave_up)) => Swept::Report {
                killed,
                passes,
                gave_up,
            },
            None => Swept::Failed(format!(
                "the run's reaper reported {out:?} ({})",
                match status {
                    Ok(s) => s.to_string(),
                    Err(e) => e.to_string(),
                }
            )),
        }
    }
}

/// The mark a dry run shows: in the first state base, under the
/// placeholder run id `RUN-ID` (a real run's id is chosen when it starts).
pub fn dry_run_mark() -> Result<RunMark> {
    let uid = nix::unistd::geteuid().as_raw();
    let base = crate::state::candidates(uid)
        .into_iter()
        .next()
        .map(|(p, _)| p)
        .ok_or_else(|| Error::Host("no state directory candidate".into()))?;
    let dir = base.join("RUN-ID");
    let dir = dir
        .to_str()
        .ok_or_else(|| Error::Host(format!("{} is not UTF-8", dir.display())))?;
    RunMark::in_dir(dir).map_err(|e| Error::Unsupported(e.to_string()))
}

/// The caller's terminal devices (standard input, output and error that are
/// terminals), canonical and in Seatbelt's form, each once: the workload
/// may use exactly these (job control, raw mode).
pub fn caller_terminals() -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for fd in [
        std::io::stdin().as_fd(),
        std::io::stdout().as_fd(),
        std::io::stderr().as_fd(),
    ] {
        let Ok(name) = nix::unistd::ttyname(fd) else {
            continue;
        };
        let Some(path) = fs::canonicalize(&name)
            .ok()
            .and_then(|p| p.to_str().map(str::to_owned))
            .and_then(|p| terra_seatbelt::path::seatbelt_path(&p).ok())
        else {
            continue;
        };
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// One macos run, built by [`crate::run::RunBuilder`] with backend macos.
pub struct MacosRun {
    pub prepared: PreparedRun,
    /// The broker's loopback listeners, bound before the run was built
    /// (the workload's proxy environment names their port). Required for a
    /// mediated plan; dropped otherwise.
    pub listeners: Option<LoopbackListeners>,
    /// Keep the run's temp directory (`--keep-temp`).
    pub keep_temp: bool,
    /// The executable run as `terra __sandbox_launcher` and `terra __network`
    /// (None: terra's own). Tests put a stand-in there.
    pub terra_exe: Option<PathBuf>,
}

/// The workload's launch spec: the plan lowered with the command's program
/// (found like a shell would, on the run's PATH) as the executable, the
/// run's `mark` and the caller's terminals.
pub fn workload_spec(
    prepared: &PreparedRun,
    broker_port: Option<u16>,
    mark: &RunMark,
) -> Result<LaunchSpec> {
    let req = &prepared.request;
    let argv = req.argv()?;
    let env = req.env()?;
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let name = argv
        .first()
        .ok_or_else(|| Error::Argument("no command to run".into()))?;
    let program = find_program(name, &req.cwd, &path)?;
    let program = program.to_str().ok_or_else(|| {
        Error::Argument(format!("the program {} is not UTF-8", program.display()))
    })?;
    let mut spec = terra_seatbelt::lower_plan(&prepared.plan, program, broker_port)
        .map_err(|e| Error::Unsupported(e.to_string()))?;
    terra_seatbelt::tree::check_mark_outside(&spec, mark)
        .map_err(|e| Error::Unsupported(e.to_string()))?;
    spec.mark = Some(mark.mark.clone());
    spec.terminals = caller_terminals();
    Ok(spec)
}

/// The canonical path of the program `name` names: a path (with a slash)
/// relative to `cwd`, else the first regular file of that name on `path`.
pub fn find_program(name: &OsStr, cwd: &Path, path: &OsStr) -> Result<PathBuf> {
    let candidates: Vec<PathBuf> = if name.as_bytes().contains(&b'/') {
        vec![cwd.join(name)]
    } else {
        std::env::split_paths(path)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(name))
            .collect()
    };
    candidates
        .iter()
        .find_map(|c| fs::canonicalize(c).ok().filter(|p| p.is_file()))
        .ok_or_else(|| {
            Error::Argument(format!(
                "the program {} was not found (searched {})",
                name.to_string_lossy(),
                if name.as_bytes().contains(&b'/') {
                    cwd.display().to_string()
                } else {
                    path.to_string_lossy().into_owned()
                }
            ))
        })
}

/// What the run's threads tell the supervising loop.
enum Event {
    Signal(Signal),
    Workload(WaitStatus),
    Broker(i32),
}

/// The state of one run, for its receipt.
struct Run<'a> {
    req: &'a RunRequest,
    plan: &'a SandboxPlan,
    exe: PathBuf,
    started: SystemTime,
    run_id: String,
    required: Vec<String>,
    activation: String,
    network: Option<NetworkSummary>,
    host_name: Option<String>,
    receipt_out: Option<ReceiptOut>,
    /// The run's mark, once its directory exists.
    mark: Option<RunMark>,
    /// The run's reaper while the workload runs (process-tree required).
    reaper: Option<Reaper>,
    /// How the sweep for the run's processes ended (None: not run).
    swept: Option<Swept>,
}

impl MacosRun {
    /// Runs the workload; returns the run's exit status: the workload's,
    /// 128 + N when signal N ended it, 126/127 when its program could not
    /// be executed or found, 125 when terra refused. Every refusal is said
    /// on stderr as `terra: ...`.
    pub fn run(self) -> u8 {
        let MacosRun {
            prepared,
            listeners,
            keep_temp,
            terra_exe,
        } = self;
        let exe = match terra_exe.map_or_else(std::env::current_exe, Ok) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("terra: cannot find terra's own executable: {e}");
                return EXIT_REFUSED;
            }
        };
        let mut run = Run {
            req: &prepared.request,
            plan: &prepared.plan,
            exe,
            started: SystemTime::now(),
            run_id: String::new(),
            required: prepared
                .plan
                .required_capabilities()
                .iter()
                .map(|c| c.name().to_string())
                .collect(),
            activation: "not run".into(),
            network: None,
            host_name: crate::receipt::host_name(),
            receipt_out: None,
            mark: None,
            reaper: None,
            swept: None,
        };
        let mut dir = None;
        let outcome = run.execute(&prepared, listeners, &mut dir);
        let code = run.report(dir.as_ref(), outcome);
        if !keep_temp {
            crate::files::remove_tree(&prepared.request.bindings.temp);
        }
        code
    }
}

impl Run<'_> {
    /// Everything up to the workload's end; the outcome for the receipt.
    fn execute(
        &mut self,
        prepared: &PreparedRun,
        listeners: Option<LoopbackListeners>,
        dir_slot: &mut Option<RunDir>,
    ) -> Outcome {
        // The receipt's destination is opened and checked before anything
        // runs: the workload may be able to change the path later.
        if let Some(path) = &self.req.receipt {
            match ReceiptOut::open(path) {
                Ok(r) => self.receipt_out = Some(r),
                Err(e) => return refused(&e),
            }
        }
        let dir = match RunDir::create_unpinned(self.plan).and_then(|d| {
            d.create_state_dir()?;
            Ok(d)
        }) {
            Ok(d) => dir_slot.insert(d),
            Err(e) => return refused(&e),
        };
        self.run_id = dir.run_id.clone();
        let canary = match dir.write_canary(&self.req.without_env_values()) {
            Ok(p) => p,
            Err(e) => return refused(&e),
        };
        let Some(canary) = canary.to_str().map(str::to_owned) else {
            return refused(&format!(
                "the canary path {} is not UTF-8",
                canary.display()
            ));
        };
        let mediated = self.plan.network() == NetworkMode::Mediated;
        let listeners = match (mediated, listeners) {
            (true, Some(l)) => Some(l),
            (true, None) => {
                return refused(
                    &"a mediated run needs the broker's loopback listeners; none were bound",
                )
            }
            (false, _) => None,
        };
        let mark = match dir
            .path
            .to_str()
            .ok_or_else(|| {
                Error::Host(format!(
                    "the run's directory {} is not UTF-8",
                    dir.path.display()
                ))
            })
            .and_then(|d| RunMark::in_dir(d).map_err(|e| Error::Unsupported(e.to_string())))
        {
            Ok(m) => m,
            Err(e) => return refused(&e),
        };
        let spec = match workload_spec(prepared, listeners.as_ref().map(|l| l.port), &mark) {
            Ok(s) => {
                self.mark = Some(mark);
                s
            }
            Err(Error::Argument(why)) if why.contains("was not found") => {
                eprintln!("terra: {why}");
                return Outcome {
                    exit_code: 127,
                    exec_failed: Some(why),
                    ..Outcome::default()
                };
            }
            Err(e) => return refused(&e),
        };
        // Refused here already when a grant covers the canary; the launcher
        // checks again.
        if let Err(e) = terra_seatbelt::probes(&spec, &canary) {
            return refused(&format!("activation check: {e}"));
        }
        // The signals to forward are blocked before any thread exists, so
        // every thread inherits the mask and only the signal thread takes
        // them; SIGTTOU too, so terra run may take the terminal back from
        // the workload's group. A child inherits the mask (std resets only
        // SIGPIPE): the launcher empties it first thing.
        let mut blocked = SigSet::empty();
        for s in FORWARDED {
            blocked.add(s);
        }
        blocked.add(Signal::SIGTTOU);
        if let Err(e) = blocked.thread_block() {
            return refused(&format!("cannot block signals: {e}"));
        }
        let (tx, rx) = mpsc::channel();
        let waited: SigSet = FORWARDED.iter().copied().collect();
        let sig_tx = tx.clone();
        let spawned = std::thread::Builder::new()
            .name("terra-signals".into())
            .spawn(move || {
                while let Ok(sig) = waited.wait() {
                    if sig_tx.send(Event::Signal(sig)).is_err() {
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            return refused(&format!("cannot start the signal thread: {e}"));
        }
        let mut broker = None;
        if let Some(l) = &listeners {
            match self.start_broker(dir, &canary, l, tx.clone()) {
                Ok(b) => broker = Some(b),
                Err(e) => return refused(&e),
            }
        }
        if self.plan.process_tree() == terra_policy::ProcessTree::Required {
            let started = self.mark.as_ref().map(|m| Reaper::start(&self.exe, m));
            match started {
                Some(Ok(r)) => self.reaper = Some(r),
                Some(Err(e)) => return refused(&e),
                None => {
                    return refused(&"the run's mark is missing: its process tree cannot be swept")
                }
            }
        }
        let outcome = self.workload(dir, &spec, &canary, &tx, &rx, broker.as_mut());
        // After the workload's group was killed: every other process of the
        // run, wherever it went.
        if let Some(r) = self.reaper.take() {
            let swept = r.finish();
            match &swept {
                Swept::Report {
                    passes,
                    gave_up: true,
                    ..
                } => eprintln!(
                    "terra: processes of this run were still being started after {passes} passes of killing \
                     them; some may remain (under the run's profile)"
                ),
                Swept::Failed(why) => eprintln!("terra: {why}; processes of this run may remain"),
                Swept::Report { .. } => {}
            }
            self.swept = Some(swept);
        }
        if let Some(b) = broker {
            self.network = Some(b.stop(&rx));
        }
        // terra run's own listeners (the broker had copies) go last: the
        // port stayed taken for the whole run.
        drop(listeners);
        outcome
    }

    /// Starts, supervises and reaps the workload.
    fn workload(
        &mut self,
        dir: &RunDir,
        spec: &LaunchSpec,
        canary: &str,
        tx: &mpsc::Sender<Event>,
        rx: &mpsc::Receiver<Event>,
        broker: Option<&mut Broker>,
    ) -> Outcome {
        let spec_file = match pass_spec(dir, "workload.spec", spec) {
            Ok(f) => f,
            Err(e) => return refused(&e),
        };
        let (status_r, status_w) = match status_pipe() {
            Ok(p) => p,
            Err(e) => return refused(&e),
        };
        // The terminal goes to the workload's group when terra run has it.
        let stdin = std::io::stdin();
        let foreground = stdin.is_terminal()
            && nix::unistd::tcgetpgrp(stdin.as_fd()).ok() == Some(nix::unistd::getpgrp());
        let args = LauncherArgs {
            spec_fd: spec_file.as_raw_fd(),
            canary: canary.to_string(),
            status_fd: Some(status_w.as_raw_fd()),
            foreground,
            command: match self.req.argv() {
                Ok(a) => a,
                Err(e) => return refused(&e),
            },
        };
        let env = match self.req.env() {
            Ok(e) => e,
            Err(e) => return refused(&e),
        };
        let child = Command::new(&self.exe)
            .arg0("terra")
            .arg("__sandbox_launcher")
            .args(args.to_argv())
            .env_clear()
            .envs(env)
            .current_dir(&self.req.cwd)
            .process_group(0)
            .spawn();
        // The launcher has its copies (or none): ours go now, so no later
        // child inherits them and the status pipe ends with the launcher.
        drop(spec_file);
        drop(status_w);
        let child = match child {
            Ok(c) => c,
            Err(e) => return refused(&Error::io("cannot start", &self.exe, e)),
        };
        let pid = Pid::from_raw(child.id() as i32);
        drop(child); // reaped below with waitpid (to see it stop, too)
        let _ = dir.write_runtime("host.pid", format!("{pid}\n").as_bytes());
        let mut report = Vec::new();
        let _ = File::from(status_r)
            .take(terra_seatbelt::launcher::MAX_REPORT as u64)
            .read_to_end(&mut report);
        let report = terra_seatbelt::read_report(&report);
        self.activation = report.activation.clone();
        let w_tx = tx.clone();
        let spawned = std::thread::Builder::new()
            .name("terra-wait".into())
            .spawn(move || loop {
                match waitpid(pid, Some(WaitPidFlag::WUNTRACED)) {
                    Ok(s @ WaitStatus::Stopped(..)) => {
                        if w_tx.send(Event::Workload(s)).is_err() {
                            return;
                        }
                    }
                    Ok(s @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => {
                        let _ = w_tx.send(Event::Workload(s));
                        return;
                    }
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(_) => {
                        let _ = w_tx.send(Event::Workload(WaitStatus::Exited(pid, 255)));
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            let _ = killpg(pid, Signal::SIGKILL);
            let _ = waitpid(pid, None);
            return refused(&format!("cannot start the waiting thread: {e}"));
        }
        let deadline = self
            .req
            .timeout_ms
            .map(|ms| Instant::now() + Duration::from_millis(ms));
        let ended = supervise(pid, foreground, deadline, rx, broker);
        // Whatever is left of the group goes with the workload (as a box
        // ends with its init on Linux). ESRCH: nothing was left. The rest of
        // the run is the reaper's (after this returns).
        let _ = killpg(pid, Signal::SIGKILL);
        if foreground {
            let _ = nix::unistd::tcsetpgrp(stdin.as_fd(), nix::unistd::getpgrp());
        }
        let mut outcome = Outcome {
            timed_out: ended.timed_out,
            ..Outcome::default()
        };
        match ended.status {
            WaitStatus::Signaled(_, sig, _) => {
                outcome.signal = Some(sig as i32);
                outcome.exit_code = 128 + sig as i32;
            }
            WaitStatus::Exited(_, code) => outcome.exit_code = code,
            _ => outcome.exit_code = EXIT_REFUSED as i32,
        }
        if let Some(why) = &report.refused {
            eprintln!("terra: the launcher refused to start the workload: {why}");
            outcome.refused = Some(why.clone());
            outcome.exit_code = EXIT_REFUSED as i32;
            outcome.signal = None;
        } else if let Some((code, why)) = &report.exec_failed {
            eprintln!("terra: {why}");
            outcome.exec_failed = Some(why.clone());
            outcome.exit_code = i32::from(*code);
            outcome.signal = None;
        } else if !report.execed {
            let why = format!(
                "the launcher ended without reporting its activation check ({})",
                status_words(ended.status)
            );
            eprintln!("terra: {why}");
            outcome.refused = Some(why);
            outcome.exit_code = EXIT_REFUSED as i32;
            outcome.signal = None;
        }
        if ended.timed_out {
            eprintln!(
                "terra: the deadline of {} ms passed; the workload's process group was stopped",
                self.req.timeout_ms.unwrap_or(0)
            );
        }
        outcome
    }

    /// Starts `terra __network` under the broker profile and waits for it to
    /// say it serves.
    fn start_broker(
        &mut self,
        dir: &RunDir,
        canary: &str,
        listeners: &LoopbackListeners,
        tx: mpsc::Sender<Event>,
    ) -> Result<Broker> {
        let exe = fs::canonicalize(&self.exe).map_err(|e| Error::io("", &self.exe, e))?;
        let exe_str = exe
            .to_str()
            .ok_or_else(|| Error::Host(format!("{} is not UTF-8", exe.display())))?;
        let (resolv_conf, hosts) = terra_netd::resolver_sources();
        let files: Vec<&str> = [&resolv_conf, &hosts]
            .into_iter()
            .flatten()
            .filter_map(|p| p.to_str())
            .collect();
        let spec = terra_seatbelt::lower_broker(exe_str, listeners.port, &files)
            .map_err(|e| Error::Broker(format!("the broker's launch spec: {e}")))?;
        terra_seatbelt::probes(&spec, canary)
            .map_err(|e| Error::Broker(format!("the broker's activation check: {e}")))?;
        let (receipt_file, receipt) = dir.create_state_file("network.jsonl")?;
        let read = dir.open_state_file_read("network.jsonl").ok();
        let handed: Vec<OwnedFd> = listeners
            .try_clone()
            .map_err(|e| Error::op("cannot copy the broker's listeners", e))?
            .into_iter()
            .map(OwnedFd::from)
            .collect();
        let (mut sup, brk) =
            UnixStream::pair().map_err(|e| Error::op("cannot make the broker's channel", e))?;
        let spec_file = pass_spec(dir, "broker.spec", &spec)?;
        let config = terra_netd::StartupConfig {
            receipt_fd: Some(receipt_file.as_raw_fd()),
            listen_fds: handed.iter().map(AsRawFd::as_raw_fd).collect(),
            ..terra_netd::StartupConfig::default()
        };
        let mir = self.req.mir_bytes()?;
        // Everything the broker inherits, close-on-exec cleared on our
        // copies until the spawn; they are closed right after it.
        for fd in handed
            .iter()
            .map(AsFd::as_fd)
            .chain([brk.as_fd(), receipt_file.as_fd()])
        {
            inheritable(fd.as_raw_fd())?;
        }
        let args = LauncherArgs {
            spec_fd: spec_file.as_raw_fd(),
            canary: canary.to_string(),
            status_fd: None,
            foreground: false,
            command: vec![
                "terra".into(),
                "__network".into(),
                terra_netd::standalone::STARTUP_FD_FLAG.into(),
                brk.as_raw_fd().to_string().into(),
            ],
        };
        let child = Command::new(&exe)
            .arg0("terra")
            .arg("__sandbox_launcher")
            .args(args.to_argv())
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // A group of its own: the terminal's Ctrl-C is not the broker's.
            .process_group(0)
            .spawn();
        drop((spec_file, brk, receipt_file, handed));
        let mut child = child.map_err(|e| Error::io("cannot start the broker:", &exe, e))?;
        let pid = child.id() as i32;
        let _ = dir.write_runtime("broker.pid", format!("{pid}\n").as_bytes());
        sup.write_all(&terra_netd::encode_startup(&mir, &config))
            .and_then(|_| sup.set_read_timeout(Some(BROKER_START_TIMEOUT)))
            .map_err(|e| Error::op("cannot write the broker's startup message", e))
            .and_then(|_| {
                let mut ready = [0u8; 6];
                match sup.read_exact(&mut ready) {
                    Ok(()) if ready.as_slice() == terra_netd::READY => Ok(()),
                    Ok(()) => Err(Error::Broker(format!(
                        "the network broker answered {:?} instead of ready",
                        String::from_utf8_lossy(&ready)
                    ))),
                    Err(e) => Err(Error::Broker(format!(
                        "the network broker did not start ({e}); its own message, if any, is above"
                    ))),
                }
            })
            .inspect_err(|_| {
                let _ = child.kill();
                let _ = child.wait();
            })?;
        let spawned = std::thread::Builder::new()
            .name("terra-broker-wait".into())
            .spawn(move || {
                let code = match child.wait() {
                    Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
                    Err(_) => 255,
                };
                let _ = tx.send(Event::Broker(code));
            });
        if let Err(e) = spawned {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            return Err(Error::Broker(format!(
                "cannot start the broker's waiting thread: {e}"
            )));
        }
        Ok(Broker {
            pid,
            sup: Some(sup),
            receipt,
            read,
            exit: None,
            ended_during_run: false,
        })
    }

    /// Writes the receipt to the run's state directory and to `--receipt`,
    /// removes the runtime files; the run's exit status.
    fn report(&self, dir: Option<&RunDir>, outcome: Outcome) -> u8 {
        let mut receipt = Receipt::new(
            self.req,
            Observed {
                run_id: &self.run_id,
                required: &self.required,
                started: self.started,
                landlock_abi: None,
                supervisor_landlock_abi: None,
                activation: &self.activation,
                network: self.network.clone(),
                host_name: self.host_name.clone(),
            },
            outcome.clone(),
            SystemTime::now(),
        );
        receipt.process_tree = Some(process_tree_words(self.swept.as_ref()));
        let json = receipt.to_json();
        let mut failed = Vec::new();
        if let Some(dir) = dir {
            if let Err(e) = dir.write_file("receipt.json", json.as_bytes()) {
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
            outcome.exit_code.clamp(0, 255) as u8
        } else {
            eprintln!(
                "terra: {}; exit status {EXIT_REFUSED} instead of the run's {}",
                Error::Several(failed),
                outcome.exit_code
            );
            EXIT_REFUSED
        }
    }
}

/// The broker of a mediated run, while it runs.
struct Broker {
    pid: i32,
    /// terra run's end of the startup channel: closing it ends the broker.
    sup: Option<UnixStream>,
    receipt: PathBuf,
    read: Option<File>,
    exit: Option<i32>,
    ended_during_run: bool,
}

impl Broker {
    /// Ends the broker (closes its channel, waits, kills it after
    /// [`BROKER_END_TIMEOUT`]) and counts its receipt.
    fn stop(mut self, rx: &mpsc::Receiver<Event>) -> NetworkSummary {
        drop(self.sup.take());
        if self.exit.is_none() {
            self.exit = wait_broker(rx, BROKER_END_TIMEOUT);
        }
        if self.exit.is_none() {
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
            self.exit = wait_broker(rx, BROKER_END_TIMEOUT);
        }
        let mut s = NetworkSummary {
            receipt: self.receipt.clone(),
            broker_pid: self.pid,
            broker_exit: self.exit,
            broker_ended_during_run: self.ended_during_run,
            broker_ended: match self.exit {
                Some(0) if !self.ended_during_run => {
                    "ended after the workload, as asked".to_string()
                }
                Some(c) => format!(
                    "{}{}",
                    if self.ended_during_run {
                        "ended while the workload ran: "
                    } else {
                        ""
                    },
                    code_words(c)
                ),
                None => "did not end; killed".to_string(),
            },
            ..NetworkSummary::default()
        };
        match &self.read {
            Some(f) => {
                if let Err(e) = crate::receipt::count_network_receipt(f, &mut s) {
                    eprintln!(
                        "terra: cannot read the network receipt {}: {e}",
                        self.receipt.display()
                    );
                }
            }
            None => eprintln!(
                "terra: the network receipt {} was not opened",
                self.receipt.display()
            ),
        }
        s
    }
}

/// Waits for the broker's end (other events are dropped: the workload has
/// ended by then).
fn wait_broker(rx: &mpsc::Receiver<Event>, limit: Duration) -> Option<i32> {
    let until = Instant::now() + limit;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Event::Broker(code)) => return Some(code),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
}

/// How the workload's first process ended, and whether the deadline passed.
struct Ended {
    status: WaitStatus,
    timed_out: bool,
}

/// The supervising loop: forwards signals to the group `pid`, stops it at
/// the deadline, follows job control, notes the broker's end; returns when
/// the workload's first process ended.
fn supervise(
    pid: Pid,
    foreground: bool,
    deadline: Option<Instant>,
    rx: &mpsc::Receiver<Event>,
    mut broker: Option<&mut Broker>,
) -> Ended {
    let mut timed_out = false;
    let mut kill_at: Option<Instant> = None;
    loop {
        let wake = match (deadline.filter(|_| !timed_out), kill_at) {
            (Some(d), _) => Some(d),
            (None, Some(k)) => Some(k),
            (None, None) => None,
        };
        let event = match wake {
            Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(e) => Some(e),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Ended {
                        status: WaitStatus::Exited(pid, EXIT_REFUSED as i32),
                        timed_out,
                    }
                }
            },
            None => match rx.recv() {
                Ok(e) => Some(e),
                Err(_) => {
                    return Ended {
                        status: WaitStatus::Exited(pid, EXIT_REFUSED as i32),
                        timed_out,
                    }
                }
            },
        };
        match event {
            None if !timed_out => {
                timed_out = true;
                let _ = killpg(pid, Signal::SIGTERM);
                kill_at = Some(Instant::now() + TIMEOUT_GRACE);
            }
            None => {
                let _ = killpg(pid, Signal::SIGKILL);
                kill_at = None;
            }
            Some(Event::Signal(sig)) => {
                let _ = killpg(pid, sig);
            }
            Some(Event::Workload(WaitStatus::Stopped(..))) => job_stop(pid, foreground),
            Some(Event::Workload(status)) => return Ended { status, timed_out },
            Some(Event::Broker(code)) => {
                if let Some(b) = broker.as_deref_mut() {
                    b.exit = Some(code);
                    b.ended_during_run = true;
                    eprintln!(
                        "terra: the network broker ended while the workload ran ({}); its connections fail from now on",
                        code_words(code)
                    );
                }
            }
        }
    }
}

/// The workload's group stopped (Ctrl-Z, or it read the terminal from the
/// background): terra run takes the terminal back and stops too, so the
/// shell sees the job stopped; once continued (`fg`, `bg`) it gives the
/// terminal to the group again when it is in the foreground, and continues
/// the group.
fn job_stop(pid: Pid, foreground: bool) {
    let stdin = std::io::stdin();
    if foreground {
        let _ = nix::unistd::tcsetpgrp(stdin.as_fd(), nix::unistd::getpgrp());
    }
    let _ = kill(nix::unistd::getpid(), Signal::SIGSTOP);
    // Continued.
    let now_foreground = stdin.is_terminal()
        && nix::unistd::tcgetpgrp(stdin.as_fd()).ok() == Some(nix::unistd::getpgrp());
    if now_foreground {
        let _ = nix::unistd::tcsetpgrp(stdin.as_fd(), pid);
    }
    let _ = killpg(pid, Signal::SIGCONT);
}

/// Writes a launch spec owner-only in the run's runtime directory and opens
/// it for the launcher (close-on-exec cleared on that one descriptor).
fn pass_spec(dir: &RunDir, name: &str, spec: &LaunchSpec) -> Result<File> {
    let path = dir.write_runtime(name, &spec.encode())?;
    let file = File::open(&path).map_err(|e| Error::io("", &path, e))?;
    inheritable(file.as_raw_fd())?;
    Ok(file)
}

/// A pipe whose read end (ours) is close-on-exec and whose write end is
/// inherited by the launcher.
fn status_pipe() -> Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe().map_err(|e| Error::sys("cannot make a pipe", e))?;
    fcntl(r.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map_err(|e| Error::sys("cannot mark the status pipe close-on-exec", e))?;
    inheritable(w.as_raw_fd())?;
    Ok((r, w))
}

/// Clears close-on-exec on `fd`, for the next child only: the caller closes
/// its copy right after that spawn.
fn inheritable(fd: i32) -> Result<()> {
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()))
        .map(drop)
        .map_err(|e| Error::sys(format!("cannot pass descriptor {fd} on"), e))
}

/// A refusal before the workload ran: said on stderr, exit 125.
fn refused(why: &dyn std::fmt::Display) -> Outcome {
    eprintln!("terra: {why}");
    Outcome {
        exit_code: EXIT_REFUSED as i32,
        refused: Some(why.to_string()),
        ..Outcome::default()
    }
}

/// An exit status in words (128 + N: killed by signal N).
fn code_words(code: i32) -> String {
    if code > 128 {
        match Signal::try_from(code - 128) {
            Ok(s) => format!("killed by signal {} ({s})", code - 128),
            Err(_) => format!("exit status {code}"),
        }
    } else {
        format!("exit status {code}")
    }
}

fn status_words(s: WaitStatus) -> String {
    match s {
        WaitStatus::Exited(_, c) => format!("exit status {c}"),
        WaitStatus::Signaled(_, sig, _) => format!("killed by {sig}"),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_name_is_found_on_path_and_canonicalised() {
        let p = find_program(
            OsStr::new("sh"),
            Path::new("/"),
            OsStr::new("/nowhere:/bin"),
        )
        .unwrap();
        assert_eq!(p, fs::canonicalize("/bin/sh").unwrap());
    }

    #[test]
    fn a_missing_program_is_refused_naming_the_search() {
        let e = find_program(
            OsStr::new("no-such-program"),
            Path::new("/"),
            OsStr::new("/bin"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("searched /bin"), "{e}");
    }

    #[test]
    fn exit_statuses_in_words() {
        assert_eq!(code_words(0), "exit status 0");
        assert_eq!(code_words(137), "killed by signal 9 (SIGKILL)");
    }
}

/// `MacosRun::run` on Linux, with a stand-in for `terra __sandbox_launcher`
/// that speaks its status protocol (`--status-fd`) and execs the command
/// unconfined: the supervision the Mac runs (status pipe, process group,
/// deadline, the group's rest killed, the receipt), run here. What the
/// stand-in cannot show (the profile, the activation probes, the broker) is
/// for scripts/macos-acceptance.sh.
#[cfg(all(test, target_os = "linux"))]
mod supervision_tests {
    use super::*;
    use crate::run::RunBuilder;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::OnceLock;

    /// The stand-in launcher (bash: dash redirects descriptors 0-9 only):
    /// `STATUS` lines before the exec as the script
    /// is told by `$TERRA_FAKE` (`pass`, `refuse`, `exec-fail`).
    const FAKE: &str = r#"#!/bin/bash
if [ "$1" = __sandbox_reaper ]; then
  # The stand-in reaper: waits for terra run's end of its input, then
  # "sweeps" the processes of this run, marked by the environment the
  # stand-in launcher gave them (its run directory; the real reaper asks
  # libsandbox about each process's profile).
  [ "$2" = --mark ] && [ "$4" = --antimark ] || exit 96
  run_dir=$(dirname "$3"); run_dir=${run_dir#/private}
  cat >/dev/null
  n=0
  for e in /proc/[0-9]*/environ; do
    if tr '\0' '\n' 2>/dev/null <"$e" | grep -qxF "TERRA_FAKE_RUN=$run_dir"; then
      p=${e#/proc/}; kill -9 "${p%/environ}" 2>/dev/null && n=$((n+1))
    fi
  done
  echo "swept $n 1"
  exit 0
fi
[ "$1" = __sandbox_launcher ] || exit 99
shift
# Ignored before the status pipe closes (the deadline starts then), and so
# in everything exec'd from here on.
[ "$TERRA_FAKE" = ignore-term ] && trap '' TERM
status=
while [ "$1" != -- ]; do
  case "$1" in
    --status-fd) status=$2; shift 2 ;;
    --canary) export TERRA_FAKE_RUN="$(dirname "$2")"; shift 2 ;;
    --spec-fd) shift 2 ;;
    --foreground) shift ;;
    *) exit 98 ;;
  esac
done
shift
[ -n "$status" ] || exit 97
case "$TERRA_FAKE" in
  refuse) eval "echo 'refused activation check: the canary opened under the profile' >&$status"; exit 125 ;;
  exec-fail) eval "echo 'activation passed' >&$status; echo 'exec-failed 126 exec /x: Permission denied' >&$status"; exit 126 ;;
esac
eval "echo 'activation passed' >&$status; exec $status>&-"
# As the launcher: the role starts with an empty signal mask.
exec python3 -c 'import os, signal, sys
signal.pthread_sigmask(signal.SIG_SETMASK, [])
os.execvp(sys.argv[1], sys.argv[1:])' "$@"
"#;

    /// One directory for the state of every run of these tests (set once,
    /// before any run reads it), the stand-in launcher inside it.
    fn base() -> &'static Path {
        static BASE: OnceLock<PathBuf> = OnceLock::new();
        BASE.get_or_init(|| {
            let d = tempfile::tempdir().unwrap().keep();
            std::env::set_var("XDG_STATE_HOME", d.join("state"));
            std::env::set_var("XDG_RUNTIME_DIR", d.join("runtime"));
            fs::create_dir_all(d.join("runtime")).unwrap();
            fs::set_permissions(d.join("runtime"), fs::Permissions::from_mode(0o700)).unwrap();
            let fake = d.join("fake-terra");
            fs::write(&fake, FAKE).unwrap();
            fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
            d
        })
    }

    struct Ran {
        code: u8,
        receipt: serde_json::Value,
        _dir: tempfile::TempDir,
    }

    /// Runs `sh -c SCRIPT` as a macos run under the stand-in (`fake`: its
    /// mode), network none, with `timeout`; returns the exit status and the
    /// `--receipt` copy.
    fn run(script: &str, fake: &str, timeout: Option<&str>) -> Ran {
        run_tree(script, fake, timeout, "disabled")
    }

    /// [`run`] with `process.treeConfinement` set to `tree`; the workload's
    /// stand-in launcher marks the workload's processes with the run's
    /// directory (`TERRA_FAKE_RUN`) for the stand-in reaper.
    fn run_tree(script: &str, fake: &str, timeout: Option<&str>, tree: &str) -> Ran {
        let base = base();
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        fs::create_dir(&ws).unwrap();
        let policy = dir.path().join("p.json");
        fs::write(
            &policy,
            r#"{"formatVersion":3,"filesystem":{"default":"deny","rules":[
 {"access":"write","path":{"root":"workspace","relative":""},"scope":"tree"},
 {"access":"read","path":{"special":"minimal-runtime"},"scope":"tree"}]},
 "network":{"mode":"none"},"process":{"treeConfinement":"TREE"},"root":{"mode":"read-only"}}"#
                .replace("TREE", tree),
        )
        .unwrap();
        let receipt = dir.path().join("receipt.json");
        let prepared = RunBuilder {
            backend: "macos".into(),
            policy: Some(policy),
            workspace: Some(ws),
            env: vec![format!("TERRA_FAKE={fake}").into()],
            timeout: timeout.map(str::to_owned),
            receipt: Some(receipt.clone()),
            ..RunBuilder::new(vec!["sh".into(), "-c".into(), script.into()])
        }
        .build()
        .unwrap();
        let code = MacosRun {
            prepared,
            listeners: None,
            keep_temp: false,
            terra_exe: Some(base.join("fake-terra")),
        }
        .run();
        let receipt = serde_json::from_slice(&fs::read(&receipt).unwrap()).unwrap();
        Ran {
            code,
            receipt,
            _dir: dir,
        }
    }

    fn alive(pid: i32) -> bool {
        // A zombie nobody reaps (no init in a container) is not alive.
        match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z')),
            Err(_) => false,
        }
    }

    /// Whether `pid` is gone within a generous bound: a SIGKILL is
    /// delivered asynchronously (a bound against hangs, not a timing claim).
    fn gone(pid: i32) -> bool {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if !alive(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn the_workloads_status_and_the_receipt() {
        let r = run("exit 7", "pass", None);
        assert_eq!(r.code, 7);
        let v = &r.receipt;
        assert_eq!(v["backend"], "macos");
        assert_eq!(v["activation"], "passed");
        assert_eq!(v["outcome"]["exitCode"], 7);
        assert_eq!(v["outcome"]["timedOut"], false);
        assert!(v["runId"].as_str().is_some_and(|id| !id.is_empty()), "{v}");
        // treeConfinement "disabled": no reaper, and the receipt says so.
        assert!(v["processTree"].as_str().unwrap().starts_with("not swept"));
        assert!(v["capabilities"]["declared"]
            .as_array()
            .unwrap()
            .contains(&"network-mediated".into()));
        // The state directory's copy is the same receipt.
        let state = base()
            .join("state/terra/runs")
            .join(v["runId"].as_str().unwrap());
        let kept: serde_json::Value =
            serde_json::from_slice(&fs::read(state.join("receipt.json")).unwrap()).unwrap();
        assert_eq!(&kept, v);
        // The launch spec and the pid files went with the run; the canary stays.
        assert!(state.join("request.json").exists());
        assert!(!state.join("workload.spec").exists());
        assert!(!state.join("host.pid").exists());
    }

    #[test]
    fn a_signal_ends_as_128_plus_n() {
        let r = run("kill -USR1 $$; exit 3", "pass", None);
        assert_eq!(r.code, 128 + 10);
        assert_eq!(r.receipt["outcome"]["signal"], 10);
    }

    #[test]
    fn the_deadline_stops_the_group_with_term_then_kill() {
        let r = run("sleep 1000", "pass", Some("200ms"));
        assert_eq!(r.code, 128 + 15);
        assert_eq!(r.receipt["outcome"]["timedOut"], true);
        assert_eq!(r.receipt["timeoutMs"], 200);
        // A workload that ignores SIGTERM gets SIGKILL after the grace.
        let r = run("sleep 1000", "ignore-term", Some("200ms"));
        assert_eq!(r.code, 128 + 9);
        assert_eq!(r.receipt["outcome"]["timedOut"], true);
    }

    #[test]
    fn the_groups_rest_is_killed_a_process_that_left_it_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let stayed = dir.path().join("stayed");
        let left = dir.path().join("left");
        // The workload ends only once the escapee leads a session of its
        // own (field 6 of /proc/PID/stat), so the group's kill cannot come
        // first.
        let script = format!(
            "sleep 1000 & echo $! > {}; setsid sleep 1000 & p=$!; echo $p > {}; \
             until [ \"$(cut -d' ' -f6 /proc/$p/stat)\" = \"$p\" ]; do sleep 0.01; done; exit 0",
            stayed.display(),
            left.display()
        );
        let r = run(&script, "pass", None);
        assert_eq!(r.code, 0);
        let pid = |p: &Path| -> i32 { fs::read_to_string(p).unwrap().trim().parse().unwrap() };
        let (stayed, left) = (pid(&stayed), pid(&left));
        let escaped = alive(left);
        let _ = kill(Pid::from_raw(left), Signal::SIGKILL);
        assert!(
            gone(stayed),
            "the group's background process {stayed} outlived the run"
        );
        // The documented limit: setsid left the group, terra cannot end it
        // (checked before the test killed it above).
        assert!(
            escaped,
            "expected the setsid process {left} to outlive the run (the documented limit)"
        );
    }

    #[test]
    fn with_process_tree_required_the_reaper_ends_a_setsid_escapee() {
        let dir = tempfile::tempdir().unwrap();
        let left = dir.path().join("left");
        let script = format!(
            "setsid sleep 1000 & p=$!; echo $p > {}; \
             until [ \"$(cut -d' ' -f6 /proc/$p/stat)\" = \"$p\" ]; do sleep 0.01; done; exit 0",
            left.display()
        );
        let r = run_tree(&script, "pass", None, "required");
        assert_eq!(r.code, 0);
        let left: i32 = fs::read_to_string(&left).unwrap().trim().parse().unwrap();
        assert!(gone(left), "the setsid process {left} outlived the run");
        let tree = r.receipt["processTree"].as_str().unwrap();
        assert!(tree.starts_with("contained:"), "{tree}");
        // The escapee at least (the group's kill may have ended the rest).
        assert!(!tree.contains(": 0 found"), "{tree}");
        assert!(r.receipt["capabilities"]["required"]
            .as_array()
            .unwrap()
            .contains(&"process-tree".into()));
    }

    #[test]
    fn a_launcher_refusal_and_an_exec_failure_are_reported() {
        let r = run("exit 0", "refuse", None);
        assert_eq!(r.code, 125);
        let refused = r.receipt["outcome"]["refused"].as_str().unwrap();
        assert!(refused.contains("the canary opened"), "{refused}");
        assert_eq!(r.receipt["activation"], refused);
        let r = run("exit 0", "exec-fail", None);
        assert_eq!(r.code, 126);
        assert_eq!(r.receipt["activation"], "passed");
        assert!(r.receipt["outcome"]["execFailed"]
            .as_str()
            .unwrap()
            .contains("Permission denied"));
    }
}
