//! `terra run --backend windows --dry-run [--json]`: the launch plan the
//! windows backend would use (crate terra-appcontainer): capabilities, job
//! limits, mitigation flags, creation flags and every DACL entry.
//!
//! On Windows the plan's paths are canonical Windows paths and the granted
//! trees are scanned (read only) for protected DACLs, as the launcher
//! would. Elsewhere (Linux) the plan was resolved on this host: its paths
//! are shown as given and marked as not Windows-canonical, the program is
//! the one this host's PATH finds, and nothing is scanned.

use std::io::Write;
use std::process::ExitCode;

use terra_appcontainer::{render, LaunchPlan, Objects};

/// Prints the plan as text or as one JSON object.
fn emit(
    plan: &LaunchPlan,
    digest: &str,
    objects: Option<&Objects>,
    env: &[(String, String)],
    json: bool,
) -> ExitCode {
    let os = std::env::consts::OS;
    let out = if json {
        format!("{}\n", render::json(plan, digest, os, objects, env))
    } else {
        render::text(plan, digest, os, objects, env)
    };
    // One write; a closed pipe (`| head`) is not an error of terra's.
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    ExitCode::SUCCESS
}

#[cfg(target_os = "linux")]
fn refuse(why: &str) -> ExitCode {
    eprintln!("terra: {why}");
    ExitCode::from(terra_supervisor::EXIT_REFUSED)
}

/// On Linux: the plan resolved here, its paths as given.
#[cfg(target_os = "linux")]
pub fn print_foreign(prepared: &terra_supervisor::run::PreparedRun, json: bool) -> ExitCode {
    use terra_supervisor::command_check::Program;
    let argv = prepared.request.argv().unwrap_or_default();
    let name = argv
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    let program = match prepared.program() {
        Program::Granted(p) => p,
        Program::OutsideGrants { host_path, .. } => host_path,
        Program::NotFound => {
            return refuse(&format!(
                "the program {name} was not found on the workload's PATH on this host (the dry run resolves it here)"
            ))
        }
    };
    let program = std::fs::canonicalize(&program).unwrap_or(program);
    let launcher = match std::env::current_exe().and_then(std::fs::canonicalize) {
        Ok(p) => p,
        Err(e) => return refuse(&format!("cannot find terra's own executable: {e}")),
    };
    let cwd = &prepared.request.cwd;
    let temp = &prepared.request.bindings.temp;
    let (Some(program), Some(launcher), Some(cwd), Some(temp)) = (
        program.to_str(),
        launcher.to_str(),
        cwd.to_str(),
        temp.to_str(),
    ) else {
        return refuse("the program's, terra's, the working directory's or the temp directory's path is not UTF-8");
    };
    let style = terra_appcontainer::PathStyle::Foreign;
    let host = terra_appcontainer::Host {
        executable: program,
        cwd,
        launcher,
        system_dirs: &[],
    };
    let vars: Vec<(String, String)> = std::env::vars().collect();
    let env = match terra_appcontainer::env::workload_env(style, &vars, temp, &[]) {
        Ok(e) => e,
        Err(e) => return refuse(&e.to_string()),
    };
    match terra_appcontainer::lower_plan(&prepared.plan, style, &host) {
        Ok(plan) => emit(&plan, prepared.plan.decision_digest(), None, &env, json),
        Err(e) => refuse(&e.to_string()),
    }
}

/// On Windows: the plan the run would hand the launcher, with the objects
/// the launcher would change.
#[cfg(windows)]
pub fn print_windows(
    plan: &LaunchPlan,
    digest: &str,
    objects: &Objects,
    env: &[(String, String)],
    json: bool,
) -> ExitCode {
    emit(plan, digest, Some(objects), env, json)
}
