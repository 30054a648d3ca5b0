//! What a workload needs and the roles do not get: a process tree, user32,
//! plain paths, programs from Program Files; and the ledger that lets a
//! later run undo what an interrupted one added.

use terra_appcontainer::env::workload_env;
use terra_appcontainer::job::{
    JOB_OBJECT_LIMIT_ACTIVE_PROCESS, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
};
use terra_appcontainer::ledger::{is_stale, Ledger, Owner, Record};
use terra_appcontainer::mitigation::WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON;
use terra_appcontainer::{
    Console, Grant, GrantKind, LaunchPlan, PathStyle, Role, Scope, WorkerSettings,
};

#[test]
fn appcontainer_workload_may_start_children_but_roles_stay_one_process() {
    let w = WorkerSettings::of(Role::Workload);
    assert_eq!(w.job.limit_flags & JOB_OBJECT_LIMIT_ACTIVE_PROCESS, 0);
    assert_eq!(w.job.active_processes, 0);
    assert_ne!(w.job.limit_flags & JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, 0);
    assert_eq!(w.child_process_policy, None);
    assert_eq!(w.mitigation[0] & WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON, 0);
    assert!(!w.less_privileged());
    assert_eq!(w.console, Console::OwnHidden);
    let b = WorkerSettings::of(Role::Broker);
    assert_ne!(b.job.limit_flags & JOB_OBJECT_LIMIT_ACTIVE_PROCESS, 0);
    assert_eq!(b.job.active_processes, 1);
    assert_eq!(b.child_process_policy, Some(1));
    assert_ne!(b.mitigation[0] & WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON, 0);
    assert!(b.less_privileged());
    assert_eq!(b.console, Console::None);
    // Apart from these, the same hardening for both.
    assert_eq!(
        w.mitigation[0] | WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON,
        b.mitigation[0]
    );
    assert_eq!(w.mitigation[1], b.mitigation[1]);
    assert_eq!(w.job.ui_restrictions, b.job.ui_restrictions);
}

#[test]
fn appcontainer_working_directory_and_program_are_plain_paths() {
    let p = LaunchPlan::new(
        PathStyle::Windows,
        Role::Workload,
        r"\\?\C:\Program Files\Git\cmd\git.exe",
        r"\\?\C:\Users\ann\proj\src",
        r"\\?\C:\Program Files\terra\terra.exe",
        vec![Grant {
            kind: GrantKind::Write,
            scope: Scope::Tree,
            path: r"\\?\C:\Users\ann\proj".into(),
        }],
        Vec::new(),
    )
    .unwrap();
    assert_eq!(p.cwd, r"C:\Users\ann\proj\src");
    assert_eq!(p.executable, r"C:\Program Files\Git\cmd\git.exe");
    let spec = p.spec().unwrap();
    assert_eq!(spec.cwd, r"C:\Users\ann\proj\src");
    for path in [&spec.cwd, &spec.executable]
        .into_iter()
        .chain(spec.grants.iter().map(|g| &g.path))
    {
        assert!(!path.starts_with(r"\\"), "{path}");
    }
}

#[test]
fn appcontainer_environment_paths_are_plain_never_verbatim() {
    let host: Vec<(String, String)> = [
        ("Path", r"C:\Windows\System32;C:\Program Files\Git\cmd"),
        ("ProgramFiles", r"C:\Program Files"),
        ("SECRET_TOKEN", "x"),
        ("USERPROFILE", r"C:\Users\ann"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let env = workload_env(
        PathStyle::Windows,
        &host,
        r"\\?\C:\Users\ann\AppData\Local\Temp\terra-tmp-1",
        &["A=1".into(), "ProgramFiles".into()],
    )
    .unwrap();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    for k in ["TEMP", "TMP", "HOME", "USERPROFILE"] {
        assert_eq!(
            get(k),
            Some(r"C:\Users\ann\AppData\Local\Temp\terra-tmp-1"),
            "{k}"
        );
    }
    assert!(env.iter().all(|(_, v)| !v.starts_with(r"\\?\")), "{env:?}");
    assert_eq!(get("A"), Some("1"));
    assert_eq!(
        get("Path"),
        Some(r"C:\Windows\System32;C:\Program Files\Git\cmd")
    );
    assert_eq!(get("SECRET_TOKEN"), None);
    assert!(workload_env(PathStyle::Windows, &host, r"\\?\UNC\srv\share\t", &[]).is_err());
    assert!(workload_env(PathStyle::Windows, &host, r"C:\t", &["NOPE".into()]).is_err());
}

fn ledger() -> Ledger {
    let mut l = Ledger::new(Owner {
        pid: 4242,
        start: 133_000_000_000_000_000,
    });
    l.push(Record::Profile {
        name: format!("terra.{}", "ab".repeat(16)),
    })
    .unwrap();
    for path in [r"C:\Users\ann\proj", r"C:\Users\ann\proj\secret"] {
        l.push(Record::Ace {
            sid: "S-1-15-2-1-2-3-4-5-6-7".into(),
            path: path.into(),
        })
        .unwrap();
    }
    l
}

#[test]
fn appcontainer_ledger_round_trips_and_undoes_aces_before_the_profile() {
    let l = ledger();
    let bytes = l.encode();
    assert!(bytes.starts_with(b"terra-appcontainer-ledger 1\nowner 4242 "));
    assert_eq!(Ledger::decode(&bytes).unwrap(), l);
    let order: Vec<&Record> = l.undo_order().collect();
    assert!(matches!(order[0], Record::Ace { path, .. } if path.ends_with("secret")));
    assert!(matches!(order[2], Record::Profile { .. }));
    // A truncated write (no rename happened) is never taken for a ledger.
    assert!(Ledger::decode(&bytes[..bytes.len() - 1]).is_err());
}

#[test]
fn appcontainer_ledger_refuses_what_terra_never_writes() {
    let mut l = ledger();
    for bad in [
        Record::Profile {
            name: "Microsoft.WindowsCalculator".into(),
        },
        Record::Ace {
            sid: "S-1-5-32-544".into(), // Administrators: never undone by terra
            path: r"C:\Users".into(),
        },
        Record::Ace {
            sid: "S-1-15-2-1".into(),
            path: r"\\?\C:\Users\ann".into(),
        },
    ] {
        assert!(l.push(bad.clone()).is_err(), "{bad:?}");
    }
    let text = String::from_utf8(ledger().encode()).unwrap();
    for forged in [
        text.replace("owner 4242", "owner x"),
        text.replace("profile ", "profile  "),
        text.replace("terra-appcontainer-ledger 1", "terra-appcontainer-ledger 2"),
        format!("{text}rm 2f\n"),
    ] {
        assert!(Ledger::decode(forged.as_bytes()).is_err(), "{forged}");
    }
}

#[test]
fn appcontainer_ledger_owner_is_pid_and_start_time() {
    let o = Owner {
        pid: 4242,
        start: 0x01da_0000_1234_5678,
    };
    assert_eq!(Owner::from_file_name(&o.file_name()), Some(o));
    for bad in [
        "4242.ledger",
        "x-01da000012345678.ledger",
        "04242-01da000012345678.ledger",
        "4242-01DA000012345678.ledger",
    ] {
        assert_eq!(Owner::from_file_name(bad), None, "{bad}");
    }
    // The same pid with another start time is another process: stale.
    let running = |x: Owner| x.pid == 4242 && x.start == o.start;
    assert!(!is_stale(o, running));
    assert!(is_stale(
        Owner {
            start: o.start + 1,
            ..o
        },
        running
    ));
    assert!(is_stale(Owner { pid: 7, ..o }, running));
}

#[cfg(unix)]
fn default_plan(ws: &std::path::Path, other: &std::path::Path) -> terra_policy::SandboxPlan {
    let mir = terra_policy::compile_source(terra_policy::DEFAULT_POLICY_SOURCE.as_bytes()).unwrap();
    for d in ["sys", "tmp"] {
        std::fs::create_dir_all(other.join(d)).unwrap();
    }
    let bindings = terra_policy::HostBindings {
        workspace: Some(ws.to_path_buf()),
        temp: Some(std::fs::canonicalize(other.join("tmp")).unwrap()),
        minimal_roots: vec![std::fs::canonicalize(other.join("sys")).unwrap()],
        mediator: None,
    };
    terra_policy::compile_plan(&mir, &bindings, terra_appcontainer::declared_capabilities())
        .unwrap()
}

#[cfg(unix)]
#[test]
fn appcontainer_programs_run_from_system_installs_and_per_user_installs_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(d.path()).unwrap();
    let ws = ws.to_str().unwrap();
    let other = tempfile::tempdir().unwrap();
    let plan = default_plan(std::path::Path::new(ws), other.path());
    let system_dirs = ["/opt/Program Files".to_string()];
    let lower = |exe: &str| {
        terra_appcontainer::lower_plan(
            &plan,
            PathStyle::Foreign,
            &terra_appcontainer::Host {
                executable: exe,
                cwd: ws,
                launcher: "/opt/Program Files/terra/terra",
                system_dirs: &system_dirs,
            },
        )
    };
    // Under Program Files: read through ALL APPLICATION PACKAGES, no ACE.
    let p = lower("/opt/Program Files/Git/cmd/git").unwrap();
    assert_eq!(
        p.program_access,
        terra_appcontainer::ProgramAccess::SystemInstall {
            dir: "/opt/Program Files".into()
        }
    );
    assert!(
        p.entries.iter().all(|e| !e.path.contains("Git")),
        "{:?}",
        p.entries
    );
    // Inside the workspace: granted.
    let inside = format!("{ws}/tools/x");
    assert_eq!(
        lower(&inside).unwrap().program_access,
        terra_appcontainer::ProgramAccess::Granted
    );
    // A per-user install: refused before anything changes, naming its directory.
    let e = lower("/home/ann/.cargo/bin/rustc").unwrap_err().to_string();
    assert!(e.contains("/home/ann/.cargo/bin"), "{e}");
    assert!(e.contains("Program Files"), "{e}");
    // A working directory outside every grant is refused too.
    let e = terra_appcontainer::lower_plan(
        &plan,
        PathStyle::Foreign,
        &terra_appcontainer::Host {
            executable: &inside,
            cwd: "/home/ann",
            launcher: "/opt/Program Files/terra/terra",
            system_dirs: &system_dirs,
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("working directory"), "{e}");
}
