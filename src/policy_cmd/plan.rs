//! capabilities, resolve, evaluate, restrict, contains, diff, overlaps.
//!
//! A POLICY argument is a MIR v3 file (it starts with the magic `MMIR`) or a
//! JSON source v3 file (anything else); files over 1 MiB are refused before
//! they are parsed. Errors go to stderr as `terra: <class>: <message>` (and,
//! with `--json`, as an `error` object on stdout). Exit status: 0 ok, 1
//! failure, 2 a valid report with violations (a failed `--check`, a candidate
//! that is not contained).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use terra_policy::compose::{ContainmentReport, DiffReport, OverlapReport, Region};
use terra_policy::evaluate::Evaluation;
use terra_policy::{
    capability, codec, compile_source, default_minimal_roots, resolve, Capability, CapabilitySet,
    Destination, HostBindings, Mir, PolicyError, Resolution, ResolvedRule,
};

use super::print_json;

/// Trusted host bindings used to resolve a policy on this host.
#[derive(Debug, Args, Clone)]
pub struct HostArgs {
    /// The workspace directory (binds `workspace` rules).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// The temp directory (binds `temp` rules).
    #[arg(long, value_name = "DIR")]
    temp: Option<PathBuf>,
    /// A minimal-runtime root; repeat for more (at most 64 distinct). Default:
    /// /usr, /bin, /sbin, /lib, /lib32, /lib64, /etc/alternatives,
    /// /etc/ssl/certs, /etc/ca-certificates, /etc/pki/tls/certs,
    /// /etc/pki/ca-trust, whichever exist.
    #[arg(long = "minimal-root", value_name = "DIR")]
    minimal_roots: Vec<PathBuf>,
    /// The network mediator id (needed by mediated policies).
    #[arg(long, value_name = "ID")]
    mediator: Option<String>,
}

impl HostArgs {
    fn bindings(&self) -> HostBindings {
        HostBindings {
            workspace: self.workspace.clone(),
            temp: self.temp.clone(),
            minimal_roots: if self.minimal_roots.is_empty() {
                default_minimal_roots()
            } else {
                self.minimal_roots.clone()
            },
            mediator: self.mediator.clone(),
        }
    }
}

/// A backend's declared capabilities, for `--check`.
#[derive(Debug, Args, Clone)]
pub struct CheckArgs {
    /// Check the required capabilities against --available; exit 2 when some are missing.
    #[arg(long)]
    check: bool,
    /// Capabilities the backend declares (names, space- or comma-separated).
    #[arg(long, value_name = "CAP", num_args = 1.., value_delimiter = ',', requires = "check")]
    available: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// List the capabilities a policy requires (read from the policy alone).
    Capabilities {
        /// Policy file: MIR v3 or JSON source v3.
        policy: PathBuf,
        #[command(flatten)]
        check: CheckArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Resolve a policy on this host and print the plan.
    Resolve {
        /// Policy file: MIR v3 or JSON source v3.
        policy: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        #[command(flatten)]
        check: CheckArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the permission of one canonical absolute path under a resolved policy.
    Evaluate {
        /// Policy file: MIR v3 or JSON source v3.
        policy: PathBuf,
        /// Canonical absolute path to evaluate.
        #[arg(long, value_name = "PATH")]
        path: String,
        #[command(flatten)]
        host: HostArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Narrow BASE by OVERLAY (deny and deny-write rules only) and write the MIR.
    Restrict {
        /// Base policy file.
        base: PathBuf,
        /// Overlay policy file: only deny and deny-write rules.
        overlay: PathBuf,
        /// Where to write the canonical MIR v3 bytes.
        #[arg(long, value_name = "FILE")]
        output: PathBuf,
        /// Replace OUTPUT if it exists.
        #[arg(long)]
        replace: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Whether CANDIDATE grants nothing beyond BOUNDARY (exit 2 when it does).
    Contains {
        boundary: PathBuf,
        candidate: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// What changes from BEFORE to AFTER.
    Diff {
        before: PathBuf,
        after: PathBuf,
        /// Exit 2 when AFTER grants anything BEFORE does not.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        host: HostArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// What FIRST and SECOND both grant.
    Overlaps {
        first: PathBuf,
        second: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// A command's result: exit status and what to print.
struct Outcome {
    code: u8,
    text: String,
    json: Value,
}

pub fn run(cmd: PlanCommand) -> ExitCode {
    let json = match &cmd {
        PlanCommand::Capabilities { json, .. }
        | PlanCommand::Resolve { json, .. }
        | PlanCommand::Evaluate { json, .. }
        | PlanCommand::Restrict { json, .. }
        | PlanCommand::Contains { json, .. }
        | PlanCommand::Diff { json, .. }
        | PlanCommand::Overlaps { json, .. } => *json,
    };
    let result = match cmd {
        PlanCommand::Capabilities { policy, check, .. } => capabilities(&policy, &check),
        PlanCommand::Resolve {
            policy,
            host,
            check,
            ..
        } => resolve_cmd(&policy, &host, &check),
        PlanCommand::Evaluate {
            policy, path, host, ..
        } => evaluate(&policy, &path, &host),
        PlanCommand::Restrict {
            base,
            overlay,
            output,
            replace,
            ..
        } => restrict(&base, &overlay, &output, replace),
        PlanCommand::Contains {
            boundary,
            candidate,
            host,
            ..
        } => contains(&boundary, &candidate, &host),
        PlanCommand::Diff {
            before,
            after,
            check,
            host,
            ..
        } => diff(&before, &after, check, &host),
        PlanCommand::Overlaps {
            first,
            second,
            host,
            ..
        } => overlaps(&first, &second, &host),
    };
    match result {
        Ok(out) => {
            if json {
                print_json(&out.json);
            } else {
                print!("{}", out.text);
            }
            ExitCode::from(out.code)
        }
        Err(e) => {
            if json {
                let mut err = json!({ "class": e.class().as_str(), "message": e.detail() });
                if let Some((before, after)) = conflict_permissions(e.detail()) {
                    err["before"] = json!(before);
                    err["after"] = json!(after);
                }
                print_json(&json!({ "ok": false, "error": err }));
            }
            crate::fail(crate::Failure::Policy {
                error: &e,
                violations: false,
            })
        }
    }
}

/// `before=X after=Y` out of a conflict message.
fn conflict_permissions(message: &str) -> Option<(String, String)> {
    let start = message.find("(before=")?;
    let rest = &message[start + 1..];
    let end = rest.find(')')?;
    let mut words = rest[..end].split_whitespace();
    let before = words.next()?.strip_prefix("before=")?;
    let after = words.next()?.strip_prefix("after=")?;
    Some((before.to_string(), after.to_string()))
}

/// Loads a policy: MIR v3 when the file starts with `MMIR`, JSON source v3 otherwise.
fn load_policy(path: &Path) -> Result<Mir, PolicyError> {
    let bytes = super::read_input(path, PolicyError::Limit)?;
    if bytes.starts_with(codec::MAGIC) {
        Mir::decode(&bytes)
    } else {
        compile_source(&bytes)
    }
}

fn load_resolved(path: &Path, host: &HostArgs) -> Result<Resolution, PolicyError> {
    let mir = load_policy(path)?;
    resolve(&mir, &host.bindings())
}

fn rule_json(r: &ResolvedRule) -> Value {
    json!({
        "access": r.access.name(),
        "scope": r.scope.name(),
        "path": r.path,
        "protectCreate": r.protect_create,
        "sourceRule": r.source_rule,
        "sourceRoot": r.source_root.name(),
    })
}

fn rule_text(r: &ResolvedRule) -> String {
    format!(
        "{} {} {}{}",
        r.access,
        r.scope,
        r.path,
        if r.protect_create {
            " (protect-create)"
        } else {
            ""
        }
    )
}

fn destination_json(d: &Destination) -> Value {
    json!({
        "protocol": "tcp",
        "host": d.host,
        "port": d.port,
        "requireTlsSni": d.require_tls_sni,
        "allowPrivateAddresses": d.allow_private_addresses,
    })
}

fn destination_text(d: &Destination) -> String {
    let mut s = format!("tcp {}:{}", d.host, d.port);
    if d.require_tls_sni {
        s.push_str(" require-tls-sni");
    }
    if d.allow_private_addresses {
        s.push_str(" allow-private-addresses");
    }
    s
}

fn names(set: &[&str]) -> Value {
    json!(set)
}

/// The capabilities given with --available, or `None` without --check.
fn available(check: &CheckArgs) -> Result<Option<CapabilitySet>, PolicyError> {
    if !check.check {
        return Ok(None);
    }
    let list: Vec<&str> = check
        .available
        .iter()
        .flat_map(|s| s.split_whitespace())
        .collect();
    CapabilitySet::parse(list).map(Some)
}

/// The names of the capabilities missing (with `--check`) and one blocker per name.
fn missing(missing: Option<Vec<Capability>>) -> (Option<Vec<&'static str>>, Vec<String>) {
    let names: Option<Vec<&str>> = missing.map(|m| m.into_iter().map(|c| c.name()).collect());
    let blockers = names
        .iter()
        .flatten()
        .map(|c| format!("missing capability {c}"))
        .collect();
    (names, blockers)
}

/// Exit 0 without blockers, 2 (a valid report with violations) with.
fn violations_code(blockers: &[String]) -> u8 {
    if blockers.is_empty() {
        super::EXIT_OK
    } else {
        super::EXIT_VIOLATIONS
    }
}

fn capabilities(policy: &Path, check: &CheckArgs) -> Result<Outcome, PolicyError> {
    let mir = load_policy(policy)?;
    let available = available(check)?;
    let required = capability::required_capabilities(&mir);
    let conditional: Vec<&str> = if capability::may_require_protect_create(&mir) {
        vec!["fs-protect-create"]
    } else {
        vec![]
    };
    let (missing, blockers) = missing(available.map(|a| required.missing_from(a)));
    let mut text = String::new();
    for c in required.names() {
        text.push_str(c);
        text.push('\n');
    }
    for c in &conditional {
        text.push_str(&format!(
            "{c} (conditional: when resolution keeps an absent deny or deny-write)\n"
        ));
    }
    if let Some(m) = &missing {
        if m.is_empty() {
            text.push_str("check: every required capability is available\n");
        } else {
            text.push_str(&format!("check: missing {}\n", m.join(", ")));
        }
    }
    Ok(Outcome {
        code: violations_code(&blockers),
        text,
        json: json!({
            "ok": blockers.is_empty(),
            "digest": mir.decision_digest(),
            "required": names(&required.names()),
            "conditional": conditional,
            "available": available.map(|a| a.names()),
            "missing": missing,
            "blockers": blockers,
        }),
    })
}

fn resolve_cmd(policy: &Path, host: &HostArgs, check: &CheckArgs) -> Result<Outcome, PolicyError> {
    let available = available(check)?;
    let res = load_resolved(policy, host)?;
    let required = res.required_capabilities();
    let (missing, blockers) = missing(available.map(|a| res.missing_capabilities(a)));
    if let Some(a) = available {
        if blockers.is_empty() {
            // The same check the runtime makes; it cannot fail here.
            res.clone().into_plan(a)?;
        }
    }
    let mut text = format!("digest: {}\n", res.decision_digest());
    text.push_str(&format!("network: {}", res.network()));
    if let Some(m) = res.mediator() {
        text.push_str(&format!(" (mediator {m})"));
    }
    text.push('\n');
    for d in res.destinations() {
        text.push_str(&format!("  allow {}\n", destination_text(d)));
    }
    text.push_str(&format!(
        "root: {}\nprocess tree: {}\n",
        res.root_mode(),
        res.process_tree()
    ));
    text.push_str(&format!("rules ({}):\n", res.rules().len()));
    for r in res.rules() {
        text.push_str(&format!("  {}\n", rule_text(r)));
    }
    text.push_str(&format!("omitted ({}):\n", res.omitted().len()));
    for o in res.omitted() {
        text.push_str(&format!("  {} {} (missing, skipped)\n", o.access, o.path));
    }
    text.push_str(&format!(
        "required capabilities: {}\n",
        required.names().join(", ")
    ));
    if let Some(m) = &missing {
        text.push_str(&format!(
            "missing capabilities: {}\n",
            if m.is_empty() {
                "none".to_string()
            } else {
                m.join(", ")
            }
        ));
    }
    let json = json!({
        "ok": blockers.is_empty(),
        "digest": res.decision_digest(),
        "network": {
            "mode": res.network().name(),
            "mediator": res.mediator(),
            "allow": res.destinations().iter().map(destination_json).collect::<Vec<_>>(),
        },
        "root": { "mode": res.root_mode().name() },
        "process": { "treeConfinement": res.process_tree().name() },
        "rules": res.rules().iter().map(rule_json).collect::<Vec<_>>(),
        "omitted": res.omitted().iter().map(|o| json!({
            "access": o.access.name(), "path": o.path, "sourceRule": o.source_rule,
        })).collect::<Vec<_>>(),
        "required": names(&required.names()),
        "available": available.map(|a| a.names()),
        "missing": missing,
        "blockers": blockers,
    });
    Ok(Outcome {
        code: violations_code(&blockers),
        text,
        json,
    })
}

fn evaluate(policy: &Path, path: &str, host: &HostArgs) -> Result<Outcome, PolicyError> {
    // Refuse a non-canonical path before touching the policy.
    terra_policy::evaluate::check_canonical_path(path)?;
    let res = load_resolved(policy, host)?;
    let Evaluation {
        permission,
        reason,
        decisive,
        applicable,
    } = res.evaluate(path)?;
    let rule = decisive.map(|i| &res.rules()[i]);
    let text = format!(
        "{permission} {reason}{} [{applicable} applicable rule{}]\n",
        rule.map(|r| format!(" ({})", rule_text(r)))
            .unwrap_or_default(),
        if applicable == 1 { "" } else { "s" }
    );
    Ok(Outcome {
        code: super::EXIT_OK,
        text,
        json: json!({
            "ok": true,
            "digest": res.decision_digest(),
            "path": path,
            "permission": permission.name(),
            "reason": reason.name(),
            "decisiveRule": rule.map(rule_json),
            "applicable": applicable,
        }),
    })
}

fn restrict(
    base: &Path,
    overlay: &Path,
    output: &Path,
    replace: bool,
) -> Result<Outcome, PolicyError> {
    let base_mir = load_policy(base)?;
    let overlay_mir = load_policy(overlay)?;
    let mir = terra_policy::restrict(&base_mir, &overlay_mir)?;
    super::write_output(output, mir.bytes(), replace)?;
    Ok(Outcome {
        code: super::EXIT_OK,
        text: format!(
            "wrote {} ({} bytes, digest {})\n",
            output.display(),
            mir.bytes().len(),
            mir.decision_digest()
        ),
        json: json!({
            "ok": true,
            "output": output.display().to_string(),
            "digest": mir.decision_digest(),
            "bytes": mir.bytes().len(),
            "rules": mir.rules().len(),
            "network": mir.network().name(),
            "root": mir.root_mode().name(),
            "process": mir.process_tree().name(),
        }),
    })
}

fn region_json(r: &Region, first: &str, second: &str) -> Value {
    let mut v = json!({ "path": r.path, "named": r.named });
    v[first] = json!(r.first.name());
    v[second] = json!(r.second.name());
    v
}

fn region_text(r: &Region, first: &str, second: &str) -> String {
    format!(
        "  {}{}: {first} {}, {second} {}\n",
        r.path,
        if r.named { "" } else { " (unnamed)" },
        r.first,
        r.second
    )
}

/// A headline, then one line per region.
fn regions_text(headline: &str, regions: &[Region], first: &str, second: &str) -> String {
    let mut text = format!("{headline}\n");
    for r in regions {
        text.push_str(&region_text(r, first, second));
    }
    text
}

fn regions_json(regions: &[Region], first: &str, second: &str) -> Vec<Value> {
    regions
        .iter()
        .map(|r| region_json(r, first, second))
        .collect()
}

/// The two policies a comparison reads, each resolved on this host.
fn load_two(
    first: &Path,
    second: &Path,
    host: &HostArgs,
) -> Result<(Resolution, Resolution), PolicyError> {
    Ok((load_resolved(first, host)?, load_resolved(second, host)?))
}

fn contains(boundary: &Path, candidate: &Path, host: &HostArgs) -> Result<Outcome, PolicyError> {
    let (b, c) = load_two(boundary, candidate, host)?;
    let report: ContainmentReport = terra_policy::contains(&b, &c);
    let (contained, regions, settings) = (report.contained, report.regions, report.settings);
    let headline = ["not contained", "contained"][usize::from(contained)];
    let mut text = regions_text(headline, &regions, "boundary", "candidate");
    for s in &settings {
        text.push_str(&format!("  {s}\n"));
    }
    Ok(Outcome {
        code: if contained {
            super::EXIT_OK
        } else {
            super::EXIT_VIOLATIONS
        },
        text,
        json: json!({
            "ok": contained,
            "contained": contained,
            "boundaryDigest": b.decision_digest(),
            "candidateDigest": c.decision_digest(),
            "regions": regions_json(&regions, "boundary", "candidate"),
            "settings": settings,
            "blockers": regions.iter().map(|r| region_text(r, "boundary", "candidate").trim().to_string())
                .chain(settings.iter().cloned()).collect::<Vec<_>>(),
        }),
    })
}

fn pair<T: std::fmt::Display>(p: &Option<(T, T)>) -> Value {
    match p {
        Some((a, b)) => json!({ "before": a.to_string(), "after": b.to_string() }),
        None => Value::Null,
    }
}

fn diff(before: &Path, after: &Path, check: bool, host: &HostArgs) -> Result<Outcome, PolicyError> {
    let (b, a) = load_two(before, after, host)?;
    let report: DiffReport = terra_policy::diff(&b, &a);
    let violations = check && !report.widened.is_empty();
    let s = &report.settings;
    let mut text = String::new();
    if report.is_empty() {
        text.push_str("no differences\n");
    }
    if !report.regions.is_empty() {
        text.push_str(&format!("regions ({}):\n", report.regions.len()));
        for r in &report.regions {
            text.push_str(&region_text(r, "before", "after"));
        }
    }
    if let Some((x, y)) = s.network {
        text.push_str(&format!("network: {x} -> {y}\n"));
    }
    for d in &s.destinations_only_first {
        text.push_str(&format!("destination removed: {}\n", destination_text(d)));
    }
    for d in &s.destinations_only_second {
        text.push_str(&format!("destination added: {}\n", destination_text(d)));
    }
    if let Some((x, y)) = s.root {
        text.push_str(&format!("root: {x} -> {y}\n"));
    }
    if let Some((x, y)) = s.process_tree {
        text.push_str(&format!("process tree: {x} -> {y}\n"));
    }
    if check {
        if report.widened.is_empty() {
            text.push_str("check: nothing widened\n");
        } else {
            text.push_str("check: widened\n");
            for w in &report.widened {
                text.push_str(&format!("  {w}\n"));
            }
        }
    }
    Ok(Outcome {
        code: if violations {
            super::EXIT_VIOLATIONS
        } else {
            super::EXIT_OK
        },
        text,
        json: json!({
            "ok": !violations,
            "identical": report.is_empty(),
            "beforeDigest": b.decision_digest(),
            "afterDigest": a.decision_digest(),
            "regions": regions_json(&report.regions, "before", "after"),
            "network": pair(&s.network),
            "destinationsRemoved": s.destinations_only_first.iter().map(destination_json).collect::<Vec<_>>(),
            "destinationsAdded": s.destinations_only_second.iter().map(destination_json).collect::<Vec<_>>(),
            "root": pair(&s.root),
            "process": pair(&s.process_tree),
            "widened": report.widened,
            "blockers": if check { report.widened.clone() } else { Vec::new() },
        }),
    })
}

fn overlaps(first: &Path, second: &Path, host: &HostArgs) -> Result<Outcome, PolicyError> {
    let (f, s) = load_two(first, second, host)?;
    let report: OverlapReport = terra_policy::overlaps(&f, &s);
    let (overlapping, network) = (report.overlapping, report.network);
    let (regions, common_destinations) = (report.regions, report.common_destinations);
    let headline = ["disjoint", "overlapping"][usize::from(overlapping)];
    let mut text = regions_text(headline, &regions, "first", "second");
    if network {
        text.push_str(&format!(
            "network: both reach it ({} / {})\n",
            f.network(),
            s.network()
        ));
        for d in &common_destinations {
            text.push_str(&format!("  common {}\n", destination_text(d)));
        }
    }
    Ok(Outcome {
        code: super::EXIT_OK,
        text,
        json: json!({
            "ok": true,
            "overlapping": overlapping,
            "firstDigest": f.decision_digest(),
            "secondDigest": s.decision_digest(),
            "regions": regions_json(&regions, "first", "second"),
            "network": network,
            "commonDestinations": common_destinations.iter().map(destination_json).collect::<Vec<_>>(),
        }),
    })
}
