//! `terra run --backend macos --dry-run`: the workload's Seatbelt profile and
//! its parameters, rendered from the plan on any host (crate terra-seatbelt).

use std::io::Write;
use std::process::ExitCode;

use serde_json::{json, Map, Value};
use terra_policy::SandboxPlan;

/// Prints the profile and, separately, the parameters (or one JSON object).
#[cfg(target_os = "linux")]
pub fn print(plan: &SandboxPlan, json: bool) -> ExitCode {
    print_rendered(plan, render(plan), json)
}

/// On macOS: the profile of the spec the run would hand the launcher (its
/// executable the command's resolved program).
#[cfg(target_os = "macos")]
pub fn print_spec(plan: &SandboxPlan, spec: &terra_seatbelt::LaunchSpec, json: bool) -> ExitCode {
    print_rendered(
        plan,
        terra_seatbelt::render(spec).map_err(|e| e.to_string()),
        json,
    )
}

fn print_rendered(
    plan: &SandboxPlan,
    rendered: Result<terra_seatbelt::Profile, String>,
    json: bool,
) -> ExitCode {
    match rendered {
        Ok(profile) => {
            let out = if json {
                let parameters: Map<String, Value> = profile
                    .parameters
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                let v =
                    json!({"backend": "macos", "profile": profile.text, "parameters": parameters});
                format!("{v}\n")
            } else {
                format!(
                    "backend: macos (Seatbelt)\ndecision digest: {}\nprofile:\n{}parameters:\n{}",
                    plan.decision_digest(),
                    profile.text,
                    profile.parameter_lines()
                )
            };
            // One write; a closed pipe (`| head`) is not an error of terra's.
            let _ = std::io::stdout().lock().write_all(out.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("terra: {e}");
            ExitCode::from(terra_supervisor::EXIT_REFUSED)
        }
    }
}

#[cfg(target_os = "linux")]
/// The profile the launcher would apply: the executable is this terra
/// binary, which execs the role after confinement. A mediated plan's broker
/// port is only known once the broker listens; a dry run shows port 0.
fn render(plan: &SandboxPlan) -> Result<terra_seatbelt::Profile, String> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("cannot find terra's own executable: {e}"))?;
    let exe = exe
        .to_str()
        .ok_or_else(|| format!("terra's executable path {} is not UTF-8", exe.display()))?;
    let spec = terra_seatbelt::lower_plan(plan, exe, None).map_err(|e| e.to_string())?;
    terra_seatbelt::render(&spec).map_err(|e| e.to_string())
}
