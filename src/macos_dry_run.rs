//! `terra run --backend macos --dry-run`: the workload's Seatbelt profile and
//! its parameters and, for a mediated plan, the broker's, rendered from the
//! plan on any host (crate terra-seatbelt).

use std::io::Write;
use std::process::ExitCode;

use serde_json::{json, Map, Value};
use terra_policy::NetworkMode;
use terra_seatbelt::Profile;
use terra_supervisor::run::PreparedRun;
use terra_supervisor::Error;

/// Prints the profile and, separately, the parameters (or one JSON object:
/// `backend`, `profile`, `parameters`, and `broker` with the broker's
/// `profile` and `parameters` when the plan is mediated).
pub fn print(prepared: &PreparedRun, json: bool) -> ExitCode {
    match render(prepared) {
        Ok((workload, broker)) => {
            let out = if json {
                let mut v = json!({
                    "backend": "macos",
                    "profile": workload.text,
                    "parameters": parameters(&workload),
                });
                if let Some(b) = &broker {
                    v["broker"] = json!({"profile": b.text, "parameters": parameters(b)});
                }
                format!("{v}\n")
            } else {
                let mut s = format!(
                    "backend: macos (Seatbelt)\ndecision digest: {}\nprofile:\n{}parameters:\n{}\
                     note: RUN_MARK is in the run's own directory (RUN-ID is chosen when the run starts); at the \
                     run's end terra kills every process whose profile allows it (docs/sandbox-macos.md)\n",
                    prepared.plan.decision_digest(),
                    workload.text,
                    workload.parameter_lines()
                );
                if let Some(b) = &broker {
                    s.push_str(&format!(
                        "broker profile (terra __network):\n{}broker parameters:\n{}\
                         note: BROKER_PORT is chosen when the run starts (terra run binds a free port on \
                         127.0.0.1 and ::1 for the broker); a dry run shows 0\n",
                        b.text,
                        b.parameter_lines()
                    ));
                }
                s
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

/// A profile terra-seatbelt refused to render: what Seatbelt cannot enforce.
fn seatbelt(e: terra_seatbelt::Error) -> Error {
    Error::Unsupported(e.to_string())
}

fn parameters(p: &Profile) -> Map<String, Value> {
    p.parameters
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// The profiles a run would apply: the workload's (its executable the
/// command's program, found on the run's PATH on this host) and for a
/// mediated plan the broker's (terra itself, the resolver files: on macOS
/// those this host has, elsewhere those of a Mac). The broker's port is
/// known only once terra run binds it: 0 here.
fn render(prepared: &PreparedRun) -> Result<(Profile, Option<Profile>), Error> {
    let mark = terra_supervisor::macos::dry_run_mark()?;
    let spec = terra_supervisor::macos::workload_spec(prepared, None, &mark)?;
    let workload = terra_seatbelt::render(&spec).map_err(seatbelt)?;
    if prepared.plan.network() != NetworkMode::Mediated {
        return Ok((workload, None));
    }
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| Error::Host(format!("cannot find terra's own executable: {e}")))?;
    let exe = exe.to_str().ok_or_else(|| {
        Error::Host(format!(
            "terra's executable path {} is not UTF-8",
            exe.display()
        ))
    })?;
    let files: Vec<String> = if cfg!(target_os = "macos") {
        let (resolv_conf, hosts) = terra_netd::resolver_sources();
        [resolv_conf, hosts]
            .into_iter()
            .flatten()
            .filter_map(|p| p.to_str().map(str::to_owned))
            .collect()
    } else {
        terra_seatbelt::MACOS_RESOLVER_FILES
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    let broker_spec = terra_seatbelt::lower_broker(exe, 0, &files).map_err(seatbelt)?;
    let broker = terra_seatbelt::render(&broker_spec).map_err(seatbelt)?;
    Ok((workload, Some(broker)))
}
