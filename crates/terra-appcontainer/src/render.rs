//! The launch plan as text and as JSON: what `terra run --backend windows
//! --dry-run [--json]` prints, on any host.

use std::fmt::Write;

use serde_json::{json, Value};

use crate::dacl::{Origin, PACKAGE_SID_PLACEHOLDER};
use crate::job::{creation_names, limit_names, ui_names, JobLimits};
use crate::launch::{declared_capabilities, LaunchPlan};
use crate::mitigation::{policy1_names, policy2_names, LEFT_OFF};
use crate::objects::{Objects, MAX_OBJECTS};
use crate::path::PathStyle;
use crate::rights::{inheritance_names, right_names};

/// The profile name shown by a dry run: the launcher makes a fresh one.
pub const PROFILE_NAME_PLACEHOLDER: &str = "terra.<32 hex digits, fresh per launch>";

/// What the launcher checks from inside the AppContainer before the worker
/// runs (the self-check worker), and from outside on the worker itself.
pub const SELF_CHECKS: [&str; 5] = [
    "the token is an AppContainer token of this launch's package SID, less privileged (no ALL APPLICATION PACKAGES)",
    "the token carries exactly the role's capability SIDs",
    "the process is in the worker job, which admits one process",
    "no console is attached or attachable, standard input is NUL",
    "the real worker, still suspended: same package SID and capabilities, in its own worker job",
];

/// `resolved_on`: the OS the plan was resolved on (`std::env::consts::OS`).
pub fn json(
    plan: &LaunchPlan,
    digest: &str,
    resolved_on: &str,
    objects: Option<&Objects>,
) -> Value {
    let s = plan.settings();
    let dacl: Vec<Value> = plan
        .entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut v = json!({
                "path": e.path,
                "scope": e.scope.name(),
                "origin": e.origin.name(),
                "sid": PACKAGE_SID_PLACEHOLDER,
                "allow": rights(e.allow),
                "deny": rights(e.deny),
                "inheritance": inheritance_names(e.inheritance),
            });
            if let Origin::KeepsInPlace { target } = &e.origin {
                v["keepsInPlace"] = json!(target);
            }
            if let Some(o) = objects {
                v["objects"] = json!(o.per_entry.get(i).copied().unwrap_or(0));
            }
            v
        })
        .collect();
    let objects = match objects {
        Some(o) => json!({
            "cap": MAX_OBJECTS,
            "counted": true,
            "total": o.objects.len(),
            "skippedReparsePoints": o.skipped,
        }),
        None => json!({
            "cap": MAX_OBJECTS,
            "counted": false,
            "note": "counted by the launcher on the Windows host at each launch",
        }),
    };
    json!({
        "backend": "windows",
        "decisionDigest": digest,
        "resolvedOn": resolved_on,
        "pathsWindowsCanonical": plan.style == PathStyle::Windows,
        "profile": {
            "name": PROFILE_NAME_PLACEHOLDER,
            "packageSid": PACKAGE_SID_PLACEHOLDER,
            "lessPrivileged": true,
            "removedAfterRun": true,
        },
        "role": plan.role.name(),
        "executable": plan.executable,
        "selfCheckExecutable": plan.launcher,
        "capabilities": s.capabilities.iter().map(|c| json!({"name": c.name, "sid": c.sid})).collect::<Vec<_>>(),
        "workerJob": job(&s.job),
        "launcherJob": job(&s.launcher_job),
        "creationFlags": flags32(s.creation_flags, creation_names(s.creation_flags)),
        "childProcessPolicy": flags32(s.child_process_policy, vec!["PROCESS_CREATION_CHILD_PROCESS_RESTRICTED".into()]),
        "allApplicationPackagesPolicy": flags32(
            s.all_application_packages_policy,
            vec!["PROCESS_CREATION_ALL_APPLICATION_PACKAGES_OPT_OUT".into()]
        ),
        "mitigationPolicy": {
            "policy1": {"value": format!("0x{:016x}", s.mitigation[0]), "names": policy1_names(s.mitigation[0])},
            "policy2": {"value": format!("0x{:016x}", s.mitigation[1]), "names": policy2_names(s.mitigation[1])},
            "leftOff": LEFT_OFF.iter().map(|(n, why)| json!({"name": n, "why": why})).collect::<Vec<_>>(),
        },
        "console": {"attached": false, "stdin": "NUL", "stdout": "relay", "stderr": "relay",
                    "relay": "control characters replaced (C0 and DEL as ^X, C1 and invalid UTF-8 as U+FFFD; CR only before LF)"},
        "selfCheck": SELF_CHECKS,
        "minimalRuntime": {
            "paths": plan.baseline,
            "note": "not changed by terra: readable through the ACEs Windows ships for ALL RESTRICTED APPLICATION PACKAGES",
        },
        "dacl": dacl,
        "objects": objects,
        "declaredCapabilities": declared_capabilities().names(),
    })
}

fn rights(mask: u32) -> Value {
    json!({"mask": format!("0x{mask:08x}"), "rights": right_names(mask)})
}

fn flags32(value: u32, names: Vec<String>) -> Value {
    json!({"value": format!("0x{value:08x}"), "names": names})
}

fn job(j: &JobLimits) -> Value {
    json!({
        "limitFlags": flags32(j.limit_flags, limit_names(j.limit_flags)),
        "activeProcessLimit": j.active_processes,
        "uiRestrictions": flags32(j.ui_restrictions, ui_names(j.ui_restrictions)),
    })
}

/// The plan as text, one fact per line.
pub fn text(
    plan: &LaunchPlan,
    digest: &str,
    resolved_on: &str,
    objects: Option<&Objects>,
) -> String {
    let s = plan.settings();
    let mut t = String::new();
    let _ = writeln!(t, "backend: windows (AppContainer)");
    let _ = writeln!(t, "decision digest: {digest}");
    match plan.style {
        PathStyle::Windows => {
            let _ = writeln!(
                t,
                "paths: canonical Windows paths (resolved on {resolved_on})"
            );
        }
        PathStyle::Foreign => {
            let _ = writeln!(
                t,
                "paths: as resolved on {resolved_on}, NOT Windows-canonical (a dry run off Windows shows the plan's own paths)"
            );
        }
    }
    let _ = writeln!(
        t,
        "profile: {PROFILE_NAME_PLACEHOLDER}; package SID {PACKAGE_SID_PLACEHOLDER} derived from it; removed after the run, never reused"
    );
    let _ = writeln!(t, "role: {}", plan.role.name());
    let _ = writeln!(t, "executable: {}", plan.executable);
    let _ = writeln!(t, "self-check executable: {}", plan.launcher);
    let caps: Vec<String> = s
        .capabilities
        .iter()
        .map(|c| format!("{} ({})", c.name, c.sid))
        .collect();
    let _ = writeln!(
        t,
        "token: less-privileged AppContainer (PROCESS_CREATION_ALL_APPLICATION_PACKAGES_OPT_OUT); capabilities: {}",
        if caps.is_empty() { "none".to_string() } else { caps.join(", ") }
    );
    let spelled = |names: Vec<String>| {
        if names.is_empty() {
            "(none)".to_string()
        } else {
            names.join(" ")
        }
    };
    for (name, j) in [("worker job", &s.job), ("launcher job", &s.launcher_job)] {
        let processes = if j.active_processes == 0 {
            "no active process limit".to_string()
        } else {
            format!("active process limit {}", j.active_processes)
        };
        let _ = writeln!(
            t,
            "{name}: limit flags 0x{:08x} {}; {processes}; UI restrictions 0x{:08x} {}",
            j.limit_flags,
            spelled(limit_names(j.limit_flags)),
            j.ui_restrictions,
            spelled(ui_names(j.ui_restrictions))
        );
    }
    let _ = writeln!(
        t,
        "creation flags: 0x{:08x} {}",
        s.creation_flags,
        creation_names(s.creation_flags).join(" ")
    );
    let _ = writeln!(
        t,
        "child process policy: 0x{:08x} PROCESS_CREATION_CHILD_PROCESS_RESTRICTED",
        s.child_process_policy
    );
    let _ = writeln!(
        t,
        "mitigation policy: 0x{:016x} 0x{:016x}",
        s.mitigation[0], s.mitigation[1]
    );
    for n in policy1_names(s.mitigation[0])
        .iter()
        .chain(&policy2_names(s.mitigation[1]))
    {
        let _ = writeln!(t, "  {n}");
    }
    let _ = writeln!(t, "mitigations left off:");
    for (n, why) in LEFT_OFF {
        let _ = writeln!(t, "  {n}: {why}");
    }
    let _ = writeln!(
        t,
        "console: none attached; stdin NUL; stdout and stderr through the relay (control characters replaced)"
    );
    let _ = writeln!(t, "self-check before the worker runs:");
    for c in SELF_CHECKS {
        let _ = writeln!(t, "  {c}");
    }
    let _ = writeln!(
        t,
        "minimal-runtime (no ACL change; readable through Windows' own ACEs for ALL RESTRICTED APPLICATION PACKAGES):{}",
        if plan.baseline.is_empty() { " none" } else { "" }
    );
    for p in &plan.baseline {
        let _ = writeln!(t, "  {p}");
    }
    let _ = writeln!(t, "dacl entries (each for {PACKAGE_SID_PLACEHOLDER} only):");
    for (i, e) in plan.entries.iter().enumerate() {
        let why = match &e.origin {
            Origin::KeepsInPlace { target } => format!(" (keeps {target} in place)"),
            Origin::Launcher => " (terra's executable, for the self-check worker)".to_string(),
            Origin::Rule(_) => String::new(),
        };
        let count = objects
            .map(|o| format!(", {} objects", o.per_entry.get(i).copied().unwrap_or(0)))
            .unwrap_or_default();
        let _ = writeln!(
            t,
            "  {} {} {}{why}{count}",
            e.origin.name(),
            e.scope.name(),
            e.path
        );
        if e.allow != 0 {
            let _ = writeln!(
                t,
                "    allow 0x{:08x} {}",
                e.allow,
                right_names(e.allow).join(" ")
            );
        }
        if e.deny != 0 {
            let _ = writeln!(
                t,
                "    deny  0x{:08x} {}",
                e.deny,
                right_names(e.deny).join(" ")
            );
        }
        let _ = writeln!(
            t,
            "    inheritance {}",
            inheritance_names(e.inheritance).join(" ")
        );
    }
    match objects {
        Some(o) => {
            let _ = writeln!(t, "objects: {} (at most {MAX_OBJECTS})", o.objects.len());
            for p in &o.skipped {
                let _ = writeln!(t, "  reparse point skipped: {p}");
            }
        }
        None => {
            let _ = writeln!(
                t,
                "objects: counted by the launcher on the Windows host at each launch (at most {MAX_OBJECTS})"
            );
        }
    }
    let _ = writeln!(t, "declares: {}", declared_capabilities().names().join(" "));
    t
}
