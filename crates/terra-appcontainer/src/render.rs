//! The launch plan as text and as JSON: what `terra run --backend windows
//! --dry-run [--json]` prints, on any host.

use std::fmt::Write;

use serde_json::{json, Value};

use crate::dacl::{Origin, PACKAGE_SID_PLACEHOLDER};
use crate::job::{creation_names, limit_names, ui_names, JobLimits};
use crate::launch::{declared_capabilities, Console, LaunchPlan, ProgramAccess, WorkerSettings};
use crate::mitigation::{
    policy1_names, policy2_names, LEFT_OFF, WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON, WORKLOAD_LEFT_OFF,
};
use crate::objects::Objects;
use crate::path::PathStyle;
use crate::rights::{inheritance_names, right_names};
use crate::spec::Role;

/// The profile name shown by a dry run: the launcher makes a fresh one.
pub const PROFILE_NAME_PLACEHOLDER: &str = "terra.<32 hex digits, fresh per launch>";

/// What the launcher checks from inside the AppContainer before the worker
/// runs (the self-check worker), and from outside on the worker itself.
pub const SELF_CHECKS: [&str; 6] = [
    "the token is an AppContainer token of this launch's package SID (less privileged for a role)",
    "the token carries exactly the role's capability SIDs",
    "the process is in a job of exactly the role's limits",
    "console: a role has none and cannot attach one; the workload's console holds only itself (never the user's); standard input is NUL",
    "the canary outside every grant does not open; the program's image opens for execution",
    "the real worker, still suspended: same package SID and capabilities, in its own job",
];

/// How the launcher proves it runs in terra run's own job.
pub const JOB_CHECK: [&str; 3] = [
    "terra run starts the launcher and assigns it to the launcher job before writing the launch spec to its standard input",
    "the launcher reads the whole spec first: it can only have read it once it is in the job, so the check cannot race the assignment",
    "then IsProcessInJob(the launcher itself, the launcher job's own handle, inherited with JOB_OBJECT_QUERY access only): membership in terra run's job, not in any job",
];

/// How a tree is granted.
pub const GRANTS: [&str; 4] = [
    "one inheritable ACE (OBJECT_INHERIT_ACE CONTAINER_INHERIT_ACE) per tree rule, on its root, written with SetSecurityInfo: Windows propagates it to the children that inherit; no per-file walk, no object cap",
    "objects with a protected DACL (inheriting nothing) below a tree get the covering rules' ACEs explicitly (found by a read-only scan), recorded and removed like the others",
    "reparse points below a tree are not entered; an entry whose root is one is refused",
    "removed at the end from each root (Windows removes the propagated copies) and from each explicit object",
];

/// The ledger of what a launch adds.
pub const LEDGER: [&str; 3] = [
    r"%LOCALAPPDATA%\terra\state\ledger\PID-START.ledger: every profile and ACE the launch adds, rewritten atomically (temporary file, flush, rename) before each change",
    "undone by the launcher when it ends in order (also on Ctrl-C and Ctrl-Break, which end the workload's job first)",
    "what a killed launcher or terra, or a closed console, leaves is undone by terra run when its launcher has exited and by every later launch: ledgers whose owner (process id and creation time) is gone",
];

fn settings_json(s: &WorkerSettings) -> Value {
    json!({
        "job": job(&s.job),
        "creationFlags": flags32(s.creation_flags, creation_names(s.creation_flags)),
        "childProcessPolicy": s.child_process_policy.map(|v| flags32(v, vec!["PROCESS_CREATION_CHILD_PROCESS_RESTRICTED".into()])),
        "allApplicationPackagesPolicy": s.all_application_packages_policy.map(|v| flags32(v, vec!["PROCESS_CREATION_ALL_APPLICATION_PACKAGES_OPT_OUT".into()])),
        "lessPrivileged": s.less_privileged(),
        "win32k": if s.mitigation[0] & WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON != 0 { "locked down" } else { "allowed" },
        "console": console_name(s.console),
        "mitigationPolicy": {
            "policy1": {"value": format!("0x{:016x}", s.mitigation[0]), "names": policy1_names(s.mitigation[0])},
            "policy2": {"value": format!("0x{:016x}", s.mitigation[1]), "names": policy2_names(s.mitigation[1])},
        },
    })
}

fn console_name(c: Console) -> &'static str {
    match c {
        Console::None => "none (DETACHED_PROCESS)",
        Console::OwnHidden => "its own, windowless (CREATE_NO_WINDOW), shared by its console children; never the user's",
    }
}

fn program_json(plan: &LaunchPlan) -> Value {
    match &plan.program_access {
        ProgramAccess::Granted => json!({"path": plan.executable, "access": "granted"}),
        ProgramAccess::SystemInstall { dir } => json!({
            "path": plan.executable,
            "access": "system install",
            "dir": dir,
            "note": "read and execute through the ACEs Windows ships for ALL APPLICATION PACKAGES; terra changes nothing there",
        }),
    }
}

/// `resolved_on`: the OS the plan was resolved on (`std::env::consts::OS`);
/// `env`: the workload's environment.
pub fn json(
    plan: &LaunchPlan,
    digest: &str,
    resolved_on: &str,
    objects: Option<&Objects>,
    env: &[(String, String)],
) -> Value {
    let s = plan.settings();
    let broker = WorkerSettings::of(Role::Broker);
    let dacl: Vec<Value> = plan
        .entries
        .iter()
        .map(|e| {
            let mut v = json!({
                "path": e.path,
                "scope": e.scope.name(),
                "origin": e.origin.name(),
                "sid": PACKAGE_SID_PLACEHOLDER,
                "allow": rights(e.allow),
                "deny": rights(e.deny),
                "inheritance": inheritance_names(e.inheritance),
                "written": "on this path alone; Windows propagates inheritable ACEs to children that inherit",
            });
            if let Origin::KeepsInPlace { target } = &e.origin {
                v["keepsInPlace"] = json!(target);
            }
            if let Origin::Protected { root, kind } = &e.origin {
                v["protectedBelow"] = json!(root);
                v["rule"] = json!(kind.name());
            }
            v
        })
        .collect();
    let objects = match objects {
        Some(o) => json!({
            "cap": null,
            "counted": true,
            "scanned": o.scanned,
            "protected": o.protected.iter().map(|p| &p.path).collect::<Vec<_>>(),
            "skippedReparsePoints": o.skipped,
        }),
        None => json!({
            "cap": null,
            "counted": false,
            "note": "scanned (read only) by the launcher on the Windows host for protected DACLs",
        }),
    };
    let mut left_off: Vec<Value> = LEFT_OFF
        .iter()
        .map(|(n, why)| json!({"name": n, "why": why}))
        .collect();
    if plan.role == Role::Workload {
        left_off.push(json!({"name": WORKLOAD_LEFT_OFF.0, "why": WORKLOAD_LEFT_OFF.1}));
    }
    let env: serde_json::Map<String, Value> =
        env.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    json!({
        "backend": "windows",
        "decisionDigest": digest,
        "resolvedOn": resolved_on,
        "pathsWindowsCanonical": plan.style == PathStyle::Windows,
        "profile": {
            "name": PROFILE_NAME_PLACEHOLDER,
            "packageSid": PACKAGE_SID_PLACEHOLDER,
            "lessPrivileged": s.less_privileged(),
            "removedAfterRun": true,
        },
        "role": plan.role.name(),
        "executable": plan.executable,
        "program": program_json(plan),
        "workingDirectory": plan.cwd,
        "environment": env,
        "selfCheckExecutable": plan.launcher,
        "capabilities": s.capabilities.iter().map(|c| json!({"name": c.name, "sid": c.sid})).collect::<Vec<_>>(),
        "workerJob": job(&s.job),
        "launcherJob": job(&s.launcher_job),
        "creationFlags": flags32(s.creation_flags, creation_names(s.creation_flags)),
        "childProcessPolicy": s.child_process_policy.map(|v| flags32(v, vec!["PROCESS_CREATION_CHILD_PROCESS_RESTRICTED".into()])),
        "allApplicationPackagesPolicy": s.all_application_packages_policy.map(|v| flags32(v, vec!["PROCESS_CREATION_ALL_APPLICATION_PACKAGES_OPT_OUT".into()])),
        "mitigationPolicy": {
            "policy1": {"value": format!("0x{:016x}", s.mitigation[0]), "names": policy1_names(s.mitigation[0])},
            "policy2": {"value": format!("0x{:016x}", s.mitigation[1]), "names": policy2_names(s.mitigation[1])},
            "leftOff": left_off,
        },
        "processes": {
            "workload": settings_json(&s),
            "broker": settings_json(&broker),
        },
        "console": {"workload": console_name(s.console), "stdin": "NUL", "stdout": "relay", "stderr": "relay",
                    "relay": "control characters replaced (C0 and DEL as ^X, C1 and invalid UTF-8 as U+FFFD; CR only before LF)"},
        "jobCheck": JOB_CHECK,
        "selfCheck": SELF_CHECKS,
        "grants": GRANTS,
        "ledger": LEDGER,
        "minimalRuntime": {
            "paths": plan.baseline,
            "note": "not changed by terra: readable through the ACEs Windows ships for ALL APPLICATION PACKAGES and ALL RESTRICTED APPLICATION PACKAGES",
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

fn spelled(names: Vec<String>) -> String {
    if names.is_empty() {
        "(none)".to_string()
    } else {
        names.join(" ")
    }
}

fn job_line(t: &mut String, name: &str, j: &JobLimits) {
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

fn settings_lines(t: &mut String, who: &str, s: &WorkerSettings) {
    job_line(t, &format!("{who} job"), &s.job);
    let _ = writeln!(
        t,
        "{who} creation flags: 0x{:08x} {}",
        s.creation_flags,
        creation_names(s.creation_flags).join(" ")
    );
    let _ = writeln!(
        t,
        "{who} child process policy: {}",
        match s.child_process_policy {
            Some(v) => format!("0x{v:08x} PROCESS_CREATION_CHILD_PROCESS_RESTRICTED"),
            None => "not set (may start child processes, all kept in its job)".to_string(),
        }
    );
    let _ = writeln!(
        t,
        "{who} token: {}",
        if s.less_privileged() {
            "less-privileged AppContainer (PROCESS_CREATION_ALL_APPLICATION_PACKAGES_OPT_OUT)"
        } else {
            "AppContainer (ALL APPLICATION PACKAGES applies: Program Files, System32, the window station)"
        }
    );
    let _ = writeln!(
        t,
        "{who} win32k: {}",
        if s.mitigation[0] & WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON != 0 {
            "locked down (WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON)"
        } else {
            "allowed (console programs import user32.dll)"
        }
    );
    let _ = writeln!(t, "{who} console: {}", console_name(s.console));
}

/// The plan as text, one fact per line.
pub fn text(
    plan: &LaunchPlan,
    digest: &str,
    resolved_on: &str,
    objects: Option<&Objects>,
    env: &[(String, String)],
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
    match &plan.program_access {
        ProgramAccess::Granted => {
            let _ = writeln!(t, "program access: inside a grant");
        }
        ProgramAccess::SystemInstall { dir } => {
            let _ = writeln!(
                t,
                "program access: system install under {dir} (read and execute through Windows' ACEs for ALL APPLICATION PACKAGES; terra changes nothing there)"
            );
        }
    }
    let _ = writeln!(t, "working directory: {}", plan.cwd);
    for (k, v) in env {
        let _ = writeln!(t, "environment: {k}={v}");
    }
    let _ = writeln!(t, "self-check executable: {}", plan.launcher);
    let caps: Vec<String> = s
        .capabilities
        .iter()
        .map(|c| format!("{} ({})", c.name, c.sid))
        .collect();
    let _ = writeln!(
        t,
        "capabilities: {}",
        if caps.is_empty() {
            "none".to_string()
        } else {
            caps.join(", ")
        }
    );
    let who = plan.role.name();
    settings_lines(&mut t, who, &s);
    if plan.role == Role::Workload {
        let _ = writeln!(
            t,
            "roles (terra's own processes; the broker is not started on Windows yet):"
        );
        settings_lines(&mut t, "  broker", &WorkerSettings::of(Role::Broker));
    }
    job_line(&mut t, "launcher job", &s.launcher_job);
    let _ = writeln!(t, "launcher job check:");
    for c in JOB_CHECK {
        let _ = writeln!(t, "  {c}");
    }
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
    if plan.role == Role::Workload {
        let _ = writeln!(t, "  {}: {}", WORKLOAD_LEFT_OFF.0, WORKLOAD_LEFT_OFF.1);
    }
    let _ = writeln!(
        t,
        "stdio: stdin NUL; stdout and stderr through the relay (control characters replaced)"
    );
    let _ = writeln!(t, "self-check before the worker runs:");
    for c in SELF_CHECKS {
        let _ = writeln!(t, "  {c}");
    }
    let _ = writeln!(
        t,
        "minimal-runtime (no ACL change; readable through Windows' own ACEs for application packages):{}",
        if plan.baseline.is_empty() { " none" } else { "" }
    );
    for p in &plan.baseline {
        let _ = writeln!(t, "  {p}");
    }
    let _ = writeln!(t, "grants:");
    for g in GRANTS {
        let _ = writeln!(t, "  {g}");
    }
    let _ = writeln!(t, "ledger:");
    for l in LEDGER {
        let _ = writeln!(t, "  {l}");
    }
    let _ = writeln!(t, "dacl entries (each for {PACKAGE_SID_PLACEHOLDER} only):");
    for e in &plan.entries {
        let why = match &e.origin {
            Origin::KeepsInPlace { target } => format!(" (keeps {target} in place)"),
            Origin::Launcher => " (terra's executable, for the self-check worker)".to_string(),
            Origin::Protected { root, kind } => {
                format!(" (protected DACL below the {} rule on {root})", kind.name())
            }
            Origin::Rule(_) => String::new(),
        };
        let _ = writeln!(
            t,
            "  {} {} {}{why}",
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
            let _ = writeln!(
                t,
                "objects: {} scanned below tree roots (read only, no cap); {} with a protected DACL",
                o.scanned,
                o.protected.len()
            );
            for p in &o.skipped {
                let _ = writeln!(t, "  reparse point skipped: {p}");
            }
        }
        None => {
            let _ = writeln!(
                t,
                "objects: scanned (read only, no cap) by the launcher on the Windows host for protected DACLs"
            );
        }
    }
    let _ = writeln!(t, "declares: {}", declared_capabilities().names().join(" "));
    t
}
