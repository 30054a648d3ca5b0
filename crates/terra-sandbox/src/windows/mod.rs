//! The Windows launcher: `terra __sandbox_launcher` (docs/sandbox-windows.md).
//!
//! ```text
//! terra __sandbox_launcher --canary PATH -- ARG0 [ARGS...]   (launch spec on stdin)
//! terra __sandbox_launcher --self-check ROLE CANARY          (the self-check worker)
//! ```
//!
//! A launch, in order: the launcher checks it runs inside a job (`terra
//! run`'s, which kills it and everything it starts when `terra run` ends),
//! reads the launch spec from standard input (terra-appcontainer's strict
//! format), rebuilds the launch plan from it, walks the granted trees
//! (reparse points skipped, at most 16,384 objects), creates a fresh
//! AppContainer profile, sets the DACL entries for its package SID, runs the
//! self-check worker and reads its verdict, creates the real worker
//! suspended, checks its token and job from outside, resumes it, relays its
//! output through the control-character filter, waits, removes the ACEs and
//! deletes the profile, and exits with the worker's exit code. Any refusal
//! is a `terra __sandbox_launcher: ...` line and exit 125 before the worker
//! runs.

mod acl;
mod args;
mod check;
mod consts;
pub mod job;
mod process;
mod profile;
mod relay;
pub mod sockets;
mod util;
pub mod walk;

use std::ffi::OsString;
use std::io::Read;
use std::process::ExitCode;

use terra_appcontainer::spec::MAX_SPEC_LEN;
use terra_appcontainer::{cmdline, dacl, objects, path, LaunchPlan, LaunchSpec, PathStyle, Role};

use crate::EXIT_REFUSED;

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

fn run(argv: Vec<OsString>) -> Result<u32, String> {
    match args::parse(argv)? {
        args::Args::SelfCheck { role, canary } => {
            check::inside(role, &canary)?;
            println!("{}", check::OK_LINE);
            Ok(0)
        }
        args::Args::Launch { canary, command } => launch(&canary, &command),
    }
}

/// Terra's own executable, as a canonical Windows path.
fn own_executable() -> Result<String, String> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("cannot find terra's own executable: {e}"))?;
    let exe = exe
        .to_str()
        .ok_or("terra's executable path is not valid Unicode")?;
    path::windows_path(exe).map_err(|e| e.to_string())
}

fn read_spec() -> Result<LaunchSpec, String> {
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_SPEC_LEN as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading the launch spec from standard input: {e}"))?;
    LaunchSpec::decode(&bytes).map_err(|e| e.to_string())
}

fn launch(canary: &str, command: &[String]) -> Result<u32, String> {
    if !job::current_in_job()? {
        return Err(
            "the launcher runs only inside terra run's job (which ends it with terra run); start it with terra run".into(),
        );
    }
    let spec = read_spec()?;
    if spec.role == Role::Broker {
        return Err(
            "no broker runs on Windows in this build (terra's network broker is Linux-only); the broker role is refused".into(),
        );
    }
    let launcher = own_executable()?;
    let plan = LaunchPlan::from_spec(&spec, &launcher).map_err(|e| e.to_string())?;
    let canary = path::windows_path(canary).map_err(|e| e.to_string())?;
    if dacl::readable(&plan.grants, PathStyle::Windows, &canary) {
        return Err(format!(
            "the canary {canary} is inside a grant: the self-check would prove nothing"
        ));
    }
    std::fs::File::open(&canary)
        .map_err(|e| format!("the canary {canary} must open before confinement: {e}"))?;
    let objects = objects::walk(
        &plan.entries,
        PathStyle::Windows,
        &walk::HostTree,
        objects::MAX_OBJECTS,
    )
    .map_err(|e| e.to_string())?;
    let profile = profile::Profile::create()?;
    tracing::debug!(profile = profile.name(), sid = ?profile.sid_string(), objects = objects.objects.len());
    let applied = acl::apply(&objects, &plan.entries, profile.sid())?;
    let environment = process::environment_block();
    self_check(&launcher, &canary, &environment, &profile, spec.role)?;
    let line = cmdline::command_line(&spec.executable, command).map_err(|e| e.to_string())?;
    let mut worker = process::create_suspended(
        &spec.executable,
        &line,
        &environment,
        profile.sid(),
        spec.role,
    )?;
    if let Err(e) = check::outside(&worker, profile.sid(), spec.role) {
        worker.kill();
        return Err(format!("the worker failed its check before it ran: {e}"));
    }
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
    for r in relays.into_iter().flatten() {
        let _ = r.join();
    }
    drop(worker);
    for p in applied.remove() {
        eprintln!("terra __sandbox_launcher: cleaning the launch's ACEs: {p}");
    }
    drop(profile);
    code
}

/// Runs the self-check worker in the launch's AppContainer and requires
/// its verdict.
fn self_check(
    launcher: &str,
    canary: &str,
    environment: &[u16],
    profile: &profile::Profile,
    role: Role,
) -> Result<(), String> {
    let argv: Vec<String> = [
        "terra",
        "__sandbox_launcher",
        "--self-check",
        role.name(),
        canary,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let line = cmdline::command_line(launcher, &argv).map_err(|e| e.to_string())?;
    let mut checker = process::create_suspended(launcher, &line, environment, profile.sid(), role)?;
    if let Err(e) = check::outside(&checker, profile.sid(), role) {
        checker.kill();
        return Err(format!(
            "the self-check worker failed its outside check: {e}"
        ));
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
        ));
    }
    Ok(())
}
