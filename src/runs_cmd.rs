//! `terra runs`: the runs recorded in the state directory (list, show,
//! prune). The reading and pruning is `terra_supervisor::runs`.

use std::io::Read;
use std::process::ExitCode;
use std::time::SystemTime;

use serde_json::{json, Value};
use terra_supervisor::runs::{self, Retention, RunFiles};
use terra_supervisor::summary::plural;

#[derive(Debug, clap::Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    command: Option<RunsCommand>,
    /// Machine-readable output (one JSON array).
    #[arg(long)]
    json: bool,
    /// List at most this many of the newest runs.
    #[arg(long, default_value_t = 20, value_name = "N")]
    limit: usize,
}

#[derive(Debug, clap::Subcommand)]
enum RunsCommand {
    /// Print a run's receipt and its network log.
    Show {
        /// A run id as `terra runs` lists it, or `last`.
        #[arg(default_value = "last", value_name = "ID|last")]
        run: String,
        /// One JSON object: {"receipt": ..., "network": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// Remove old runs now (`terra run` does this after every run with the defaults).
    Prune {
        /// Keep the newest N finished runs.
        #[arg(long, default_value_t = runs::DEFAULT_KEEP, value_name = "N")]
        keep: usize,
        /// Remove runs that started more than DAYS days ago.
        #[arg(long, default_value_t = runs::DEFAULT_MAX_AGE.as_secs() / 86_400, value_name = "DAYS")]
        max_age_days: u64,
    },
}

pub fn run(args: RunsArgs) -> ExitCode {
    let bases = runs::bases();
    match args.command {
        None => list(&bases, args.json, args.limit),
        Some(RunsCommand::Show { run, json }) => show(&bases, &run, json),
        Some(RunsCommand::Prune { keep, max_age_days }) => prune(&bases, keep, max_age_days),
    }
}

/// One row of the listing, from a run's receipt (a run without one is
/// still running or ended without writing it).
fn row(run: &RunFiles) -> Value {
    let Some(r) = run.receipt() else {
        return json!({"id": run.id, "state": "no receipt (running, or ended without one)"});
    };
    let duration = match (r["startedAt"].as_str(), r["endedAt"].as_str()) {
        (Some(a), Some(b)) => runs::millis_between(a, b),
        _ => None,
    };
    json!({
        "id": run.id,
        "startedAt": r["startedAt"],
        "durationMs": r.get("durationMs").cloned().unwrap_or_else(|| json!(duration)),
        "argv": r["argv"],
        "exitCode": r["outcome"]["exitCode"],
        "backend": r["backend"],
        "refused": r["network"]["refused"].as_u64().unwrap_or(0),
        "admitted": r["network"]["admitted"].as_u64().unwrap_or(0),
        "path": run.path,
    })
}

fn list(bases: &[runs::StateBase], as_json: bool, limit: usize) -> ExitCode {
    let mut all: Vec<RunFiles> = bases
        .iter()
        .flat_map(|b| {
            b.run_ids()
                .into_iter()
                .filter_map(|id| b.open_run(&id).ok())
                .collect::<Vec<_>>()
        })
        .collect();
    all.sort_by(|a, b| b.id.cmp(&a.id));
    all.truncate(limit);
    let rows: Vec<Value> = all.iter().map(row).collect();
    if as_json {
        out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        ));
        return ExitCode::SUCCESS;
    }
    if rows.is_empty() {
        out("no runs recorded yet\n");
        return ExitCode::SUCCESS;
    }
    let mut text = format!(
        "{:<32} {:<24} {:>9} {:>4} {:<8} {:>7}  COMMAND",
        "ID", "STARTED", "DURATION", "EXIT", "BACKEND", "REFUSED"
    );
    text.push('\n');
    for r in &rows {
        let s = |k: &str| r[k].as_str().unwrap_or("-").to_string();
        let duration = r["durationMs"]
            .as_u64()
            .map_or("-".into(), |ms| format!("{}.{:03}s", ms / 1000, ms % 1000));
        let exit = r["exitCode"].as_i64().map_or("-".into(), |c| c.to_string());
        let argv: Vec<&str> = r["argv"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        text.push_str(&format!(
            "{:<32} {:<24} {:>9} {:>4} {:<8} {:>7}  {}\n",
            s("id"),
            s("startedAt"),
            duration,
            exit,
            s("backend"),
            r["refused"],
            if argv.is_empty() {
                s("state")
            } else {
                argv.join(" ")
            }
        ));
    }
    out(&text);
    ExitCode::SUCCESS
}

fn show(bases: &[runs::StateBase], which: &str, as_json: bool) -> ExitCode {
    let run = match runs::find(bases, which) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("terra: runs show: {e}");
            return ExitCode::from(1);
        }
    };
    let receipt = run.receipt();
    // The network log, at most 1 MiB of it.
    let mut log = String::new();
    if let Some(f) = run.open("network.jsonl") {
        let _ = f.take(1 << 20).read_to_string(&mut log);
    }
    let mut text = String::new();
    if as_json {
        let lines: Vec<Value> = log
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let v = json!({"id": run.id, "path": run.path, "receipt": receipt, "network": lines});
        out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&v).unwrap_or_default()
        ));
        return ExitCode::SUCCESS;
    }
    text.push_str(&format!("run {} ({})\n", run.id, run.path.display()));
    match &receipt {
        Some(r) => text.push_str(&format!(
            "{}\n",
            serde_json::to_string_pretty(r).unwrap_or_default()
        )),
        None => {
            text.push_str("no receipt (the run is still running, or ended without writing one)\n")
        }
    }
    if !log.is_empty() {
        text.push_str(&format!(
            "network log ({}):\n{log}",
            run.path.join("network.jsonl").display()
        ));
    }
    out(&text);
    ExitCode::SUCCESS
}

fn prune(bases: &[runs::StateBase], keep: usize, max_age_days: u64) -> ExitCode {
    let retention = Retention {
        keep,
        max_age: std::time::Duration::from_secs(max_age_days.saturating_mul(86_400)),
        slack: 0,
    };
    let mut failed_any = false;
    for b in bases {
        let (removed, failed) = b.prune(retention, SystemTime::now());
        println!(
            "{}: removed {}",
            b.path().display(),
            plural(removed.len() as u64, "run", "runs")
        );
        for f in failed {
            eprintln!("terra: cannot remove the run {f}");
            failed_any = true;
        }
    }
    ExitCode::from(u8::from(failed_any))
}

/// Writes to standard output; a closed pipe (`terra runs | head`) ends the
/// output quietly.
fn out(text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes()).and_then(|_| o.flush());
}
