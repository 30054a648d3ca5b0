//! The Windows launcher: `terra __sandbox_launcher` (docs/sandbox-windows.md).
//!
//! ```text
//! terra __sandbox_launcher --canary PATH --job HANDLE -- ARG0 [ARGS...]   (launch spec on stdin)
//! terra __sandbox_launcher --self-check ROLE CANARY PROGRAM               (the self-check worker)
//! ```
//!
//! A launch, in order: the launcher reads the launch spec from standard
//! input (terra-appcontainer's strict format; `terra run` writes it only
//! after putting the launcher into its job), then proves it is in that
//! very job (IsProcessInJob with the query-only handle `terra run` let it
//! inherit), undoes what earlier launches left in the ledger, rebuilds the
//! launch plan from the spec, scans the granted trees for protected DACLs,
//! records and creates a fresh AppContainer profile, records and sets each
//! path's ACEs for its package SID (one inheritable ACE per tree root;
//! Windows propagates it), runs the self-check worker and reads its
//! verdict, creates the real worker suspended in its plain working
//! directory, checks its token and job from outside, resumes it, relays its
//! output through the control-character filter, waits, removes the ACEs,
//! deletes the profile and its ledger, and exits with the worker's exit
//! code. Ctrl-C, Ctrl-Break and a closed console end the workload's job
//! and the launcher still cleans up. Any refusal is a `terra
//! __sandbox_launcher: ...` line and exit 125 before the worker runs.

mod acl;
mod args;
mod check;
pub mod cleanup;
pub mod console;
mod consts;
pub mod error;
pub mod job;
pub mod ledger;
mod process;
mod profile;
mod relay;
pub mod sockets;
mod util;
pub mod walk;

use std::ffi::OsString;
use std::io::Read;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use terra_appcontainer::ledger::Record;
use terra_appcontainer::spec::MAX_SPEC_LEN;
use terra_appcontainer::{cmdline, dacl, objects, path, LaunchPlan, LaunchSpec, PathStyle, Role};
use windows_sys::Win32::System::Console::{
    SetConsoleCtrlHandler, CTRL_BREAK_EVENT, CTRL_CLOSE_EVENT, CTRL_C_EVENT,
};

use crate::EXIT_REFUSED;
use error::Error;

/// Entry point of `terra __sandbox_launcher` on Windows.
pub fn launcher_main(argv: Vec<OsString>) -> ExitCode {
    match run(argv) {
        Ok(code) => {
            // The worker's exit code is 32 bits on Windows; ExitCode holds 8.
            std::process::exit(code as i32)
        }
        Err(why) => {
            eprintln!("terra __sandbox_launcher: {why}");
            ExitCode::from(EXIT_REFUSED)
        }
    }
}

fn run(argv: Vec<OsString>) -> Result<u32, Error> {
    match args::parse(argv)? {
        args::Args::SelfCheck {
            role,
            canary,
            program,
        } => {
            check::inside(role, &canary, &program)?;
            println!("{}", check::OK_LINE);
            Ok(0)
        }
        args::Args::Launch {
            canary,
            job,
            command,
        } => launch(&canary, job, &command),
    }
}

/// Terra's own executable, as a canonical Windows path.
fn own_executable() -> Result<String, Error> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("cannot find terra's own executable: {e}"))?;
    let exe = exe
        .to_str()
        .ok_or("terra's executable path is not valid Unicode")?;
    Ok(path::windows_path(exe)?)
}

fn read_spec() -> Result<LaunchSpec, Error> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_SPEC_LEN as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading the launch spec from standard input: {e}"))?;
    Ok(LaunchSpec::decode(&bytes)?)
}

/// The workload's job while it runs, for the console control handler.
static WORKLOAD_JOB: AtomicPtr<core::ffi::c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Set once the launcher has undone what it added (or tried to).
static CLEANED: AtomicBool = AtomicBool::new(false);

/// STATUS_CONTROL_C_EXIT: how a console program ends on Ctrl-C.
const CONTROL_C_EXIT: u32 = 0xC000_013A;

/// Ctrl-C, Ctrl-Break and a closed console end the workload's job (its
/// whole tree); the launcher is not ended by Ctrl-C or Ctrl-Break, so it
/// goes on to remove the ACEs, the profile and its ledger. A closed console
/// ends the launcher when this handler returns, so for that one the handler
/// waits (at most console::CLOSE_GRACE_MS) for the main thread's cleanup;
/// whatever is left then, the ledger holds for the next sweep. The workload
/// has a console of its own and sees none of these events itself.
unsafe extern "system" fn on_console_event(event: u32) -> windows_sys::core::BOOL {
    match event {
        CTRL_C_EVENT | CTRL_BREAK_EVENT | CTRL_CLOSE_EVENT => {
            let job = WORKLOAD_JOB.load(Ordering::SeqCst);
            if !job.is_null() {
                // SAFETY: the launcher stores the workload job's handle only
                // while the worker (which owns it) lives, and clears it before
                // the worker is dropped.
                let _ = unsafe { job::terminate_raw(job, CONTROL_C_EXIT) };
            }
            if event == CTRL_CLOSE_EVENT {
                let step = std::time::Duration::from_millis(50);
                let mut waited = 0;
                while !CLEANED.load(Ordering::SeqCst) && waited < console::CLOSE_GRACE_MS - 500 {
                    std::thread::sleep(step);
                    waited += 50;
                }
            }
            1
        }
        _ => 0,
    }
}

fn launch(canary: &str, job_handle: usize, command: &[String]) -> Result<u32, Error> {
    // The spec first: terra run writes it only after AssignProcessToJobObject
    // put this process into its job, so once it is read the check below
    // cannot race the assignment.
    let spec = read_spec()?;
    if !job::current_in(job_handle)? {
        return Err(
            "the launcher runs only inside terra run's own job (which ends it with terra run); start it with terra run".into(),
        );
    }
    for p in cleanup::sweep() {
        eprintln!("terra __sandbox_launcher: cleaning what an earlier run left: {p}");
    }
    if spec.role == Role::Broker {
        return Err(
            "no broker runs on Windows in this build (terra's network broker is Linux-only); the broker role is refused".into(),
        );
    }
    let launcher = own_executable()?;
    let mut plan = LaunchPlan::from_spec(&spec, &launcher)?;
    let canary = path::windows_path(canary)?;
    if dacl::readable(&plan.grants, PathStyle::Windows, &canary) {
        return Err(format!(
            "the canary {canary} is inside a grant: the self-check would prove nothing"
        )
        .into());
    }
    std::fs::File::open(&canary)
        .map_err(|e| format!("the canary {canary} must open before confinement: {e}"))?;
    let scan = objects::scan(&plan.entries, PathStyle::Windows, &walk::HostTree)?;
    let explicit = objects::explicit_entries(&plan.entries, &scan);
    plan.entries.extend(explicit);
    // SAFETY: a handler of the right signature, valid for the whole process.
    if unsafe { SetConsoleCtrlHandler(Some(on_console_event), 1) } == 0 {
        return Err(util::last_error("SetConsoleCtrlHandler"));
    }
    let mut book = ledger::File::create()?;
    let name = profile::Profile::fresh_name()?;
    book.record(Record::Profile { name: name.clone() })?;
    let profile = profile::Profile::create(name)?;
    let sid_text = profile.sid_string()?;
    tracing::debug!(profile = profile.name(), sid = %sid_text, scanned = scan.scanned, protected = scan.protected.len());
    let applied = acl::apply(&plan.entries, profile.sid(), &sid_text, &mut book)?;
    let environment = process::environment_block();
    self_check(
        &launcher,
        &canary,
        &spec.executable,
        &spec.cwd,
        &environment,
        &profile,
        spec.role,
    )?;
    let line = cmdline::command_line(&spec.executable, command)?;
    let mut worker = process::create_suspended(
        &spec.executable,
        &line,
        &environment,
        Some(&spec.cwd),
        profile.sid(),
        spec.role,
    )?;
    if let Err(e) = check::outside(&worker, profile.sid(), spec.role) {
        worker.kill();
        return Err(format!("the worker failed its check before it ran: {e}").into());
    }
    WORKLOAD_JOB.store(worker.job.raw(), Ordering::SeqCst);
    let relays = [
        worker
            .stdout
            .take()
            .map(|f| relay::spawn(f, relay::To::Stdout)),
        worker
            .stderr
            .take()
            .map(|f| relay::spawn(f, relay::To::Stderr)),
    ];
    if let Err(e) = worker.resume() {
        worker.kill();
        return Err(e);
    }
    let code = worker.wait();
    // Every process of the tree ends with the workload's run: none outlives
    // it holding the pipes open.
    let _ = worker.job.terminate(code.as_ref().map_or(1, |c| *c));
    for r in relays.into_iter().flatten() {
        let _ = r.join();
    }
    WORKLOAD_JOB.store(std::ptr::null_mut(), Ordering::SeqCst);
    drop(worker);
    let mut problems = applied.remove();
    if let Err(e) = profile.delete() {
        problems.push(e.to_string());
    }
    for p in &problems {
        eprintln!("terra __sandbox_launcher: cleaning up: {p}");
    }
    if problems.is_empty() {
        // Otherwise the ledger stays, and the next sweep undoes the rest.
        book.remove()?;
    }
    CLEANED.store(true, Ordering::SeqCst);
    code
}

/// Runs the self-check worker in the launch's AppContainer and requires
/// its verdict.
fn self_check(
    launcher: &str,
    canary: &str,
    program: &str,
    cwd: &str,
    environment: &[u16],
    profile: &profile::Profile,
    role: Role,
) -> Result<(), Error> {
    let argv: Vec<String> = [
        "terra",
        "__sandbox_launcher",
        "--self-check",
        role.name(),
        canary,
        program,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let line = cmdline::command_line(launcher, &argv)?;
    let mut checker =
        process::create_suspended(launcher, &line, environment, Some(cwd), profile.sid(), role)?;
    if let Err(e) = check::outside(&checker, profile.sid(), role) {
        checker.kill();
        return Err(format!("the self-check worker failed its outside check: {e}").into());
    }
    let stderr = checker.stderr.take();
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut f) = stderr {
            let _ = f.by_ref().take(64 * 1024).read_to_string(&mut s);
        }
        s
    });
    let mut out = String::new();
    if let Err(e) = checker.resume() {
        checker.kill();
        return Err(e);
    }
    if let Some(mut f) = checker.stdout.take() {
        let _ = f.by_ref().take(64 * 1024).read_to_string(&mut out);
    }
    let code = checker.wait()?;
    let err = err_thread.join().unwrap_or_default();
    if code != 0 || out.trim_end() != check::OK_LINE {
        return Err(format!(
            "the self-check worker refused (exit {code}): {}",
            terra_appcontainer::relay::filter(err.trim_end().as_bytes()).escape_ascii()
        )
        .into());
    }
    Ok(())
}
