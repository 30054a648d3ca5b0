//! End to end: JSON policy -> compile_plan (with this backend's declared
//! capabilities) -> spawn_box; mediated networking; the confined broker role.
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use common::open_tempdir;
use common::probe::parse;
use terra_policy::{
    compile_plan, compile_source, default_minimal_roots, HostBindings, SandboxPlan,
};
use terra_sandbox::linux::{
    declared_capabilities, describe, spawn_box, spawn_confined_role, BoxConfig, BoxExit, RoleConfig,
};

struct Dirs {
    ws: tempfile::TempDir,
    tmp: tempfile::TempDir,
    host: tempfile::TempDir,
}

fn dirs() -> Dirs {
    Dirs {
        ws: open_tempdir(),
        tmp: open_tempdir(),
        host: open_tempdir(),
    }
}

fn plan(d: &Dirs, policy: &str, broker: bool) -> Result<SandboxPlan, terra_policy::PolicyError> {
    let mir = compile_source(policy.as_bytes())?;
    let bindings = HostBindings {
        workspace: Some(d.ws.path().to_path_buf()),
        temp: Some(d.tmp.path().to_path_buf()),
        minimal_roots: default_minimal_roots(),
        mediator: broker.then(|| "test-broker".to_string()),
    };
    compile_plan(&mir, &bindings, declared_capabilities(broker))
}

fn config(d: &Dirs, plan: SandboxPlan, argv: &[&str]) -> BoxConfig {
    let canary = d.host.path().join("canary");
    std::fs::write(&canary, "canary").unwrap();
    BoxConfig {
        plan,
        argv: argv.iter().map(Into::into).collect(),
        cwd: std::fs::canonicalize(d.ws.path()).unwrap(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        temp_dir: d.tmp.path().to_path_buf(),
        canary_path: canary,
        canary_tcp: None,
        canary_gate: None,
        mediated: None,
        dns_report: None,
        hostname: "plan-box".into(),
        rlimits: Default::default(),
        vm: None,
    }
}

const POLICY: &str = r#"{
  "formatVersion": 3,
  "filesystem": { "default": "deny", "rules": [
    { "access": "read", "path": { "special": "minimal-runtime" } },
    { "access": "write", "path": { "root": "workspace" } },
    { "access": "deny", "path": { "root": "workspace", "relative": "secret" } },
    { "access": "deny-write", "path": { "root": "workspace", "relative": "locked" } }
  ] },
  "network": { "mode": "none" },
  "process": { "treeConfinement": "required" },
  "root": { "mode": "read-only" }
}"#;

#[test]
fn compiled_plan_runs_in_a_box() {
    let d = dirs();
    let ws = d.ws.path();
    std::fs::create_dir(ws.join("secret")).unwrap();
    std::fs::write(ws.join("secret/s.txt"), "the-secret").unwrap();
    std::fs::create_dir(ws.join("locked")).unwrap();
    std::fs::write(ws.join("locked/l.txt"), "locked-content").unwrap();
    let p = plan(&d, POLICY, false).unwrap();
    let script = "cat locked/l.txt; echo; cat secret/s.txt; if echo x > locked/l.txt; then echo LOCKED-WRITTEN; fi; \
                  echo made > out.txt; hostname; if test -e /etc/shadow; then echo SHADOW; fi";
    let out = ws.join("log");
    let c = config(
        &d,
        p,
        &[
            "sh",
            "-c",
            &format!("exec > {} 2>&1; {script}", out.display()),
        ],
    );
    let r = spawn_box(common::roles(), c).unwrap().wait().unwrap();
    let log = std::fs::read_to_string(&out).unwrap();
    assert_eq!(r.exit, BoxExit::Code(0), "{log}");
    assert_eq!(r.activation, "passed");
    assert!(
        log.contains("locked-content") && log.contains("plan-box"),
        "{log}"
    );
    assert!(
        !log.contains("the-secret") && !log.contains("LOCKED-WRITTEN") && !log.contains("SHADOW"),
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("out.txt")).unwrap(),
        "made\n"
    );
}

#[test]
fn protect_create_is_declared() {
    let d = dirs();
    std::fs::create_dir(d.ws.path().join("locked")).unwrap();
    let policy = POLICY.replace(
        r#"{ "access": "deny", "path": { "root": "workspace", "relative": "secret" } }"#,
        r#"{ "access": "deny", "path": { "root": "workspace", "relative": "absent" }, "missing": "skip" }"#,
    );
    let plan = plan(&d, &policy, false).unwrap();
    let kept: Vec<_> = plan.rules().iter().filter(|r| r.protect_create).collect();
    assert_eq!(kept.len(), 1);
    assert!(kept[0].path.ends_with("/absent"), "{}", kept[0].path);
}

const MEDIATED: &str = r#"{
  "formatVersion": 3,
  "filesystem": { "default": "deny", "rules": [
    { "access": "read", "path": { "special": "minimal-runtime" } },
    { "access": "write", "path": { "root": "workspace" } }
  ] },
  "network": { "mode": "mediated", "allow": [ { "protocol": "tcp", "host": "example.com", "port": 443 } ] },
  "process": { "treeConfinement": "required" },
  "root": { "mode": "read-only" }
}"#;

#[test]
fn mediated_box_reaches_only_its_proxy() {
    let d = dirs();
    assert!(
        plan(&d, MEDIATED, false).is_err(),
        "mediated needs the broker capability"
    );
    let p = plan(&d, MEDIATED, true).unwrap();
    let mut c = config(&d, p, &[]);
    let (mine, theirs) = UnixStream::pair().unwrap();
    let addr: std::net::SocketAddr = "127.0.0.1:3128".parse().unwrap();
    // The service is terra-test-roles' (it greets with hello-from-proxy);
    // this function pointer only names the box as mediated here.
    c.mediated = Some((OwnedFd::from(theirs), addr, unused_service));
    let text = describe(&c);
    assert!(
        text.contains("tcp not restricted by Landlock (the network namespace is the boundary)"),
        "{text}"
    );
    // Probes: through the exe copied into the workspace (granted by the plan).
    let probe_exe = d.ws.path().join("probe");
    std::fs::copy(common::probe_exe(), &probe_exe).unwrap();
    let out = d.ws.path().join("log");
    c.env.push((
        "TERRA_PROBE".into(),
        "connect:127.0.0.1:3128,connect:127.0.0.1:3129".into(),
    ));
    c.argv = vec![
        "sh".into(),
        "-c".into(),
        format!("exec > {} 2>&1; {}", out.display(), probe_exe.display()).into(),
    ];
    let r = spawn_box(common::roles(), c).unwrap().wait().unwrap();
    let log = std::fs::read_to_string(&out).unwrap();
    assert_eq!(r.exit, BoxExit::Code(0), "{log}");
    let m = parse(&log);
    assert_eq!(m["connect:127.0.0.1:3128"], "ok:hello-from-proxy", "{log}");
    // Nothing else listens in the box's own network namespace.
    assert_eq!(m["connect:127.0.0.1:3129"], "ECONNREFUSED", "{log}");
    let mut got = String::new();
    let mut mine = mine;
    mine.read_to_string(&mut got).unwrap();
    assert_eq!(got, "service-up\n");
}

/// A box's service runs in `terra __vm`, whose binary hands it in: the one
/// of this caller's config is never called.
fn unused_service(_: terra_sandbox::linux::ServiceFds) -> ! {
    unreachable!("the box's service is the role executable's")
}

#[test]
fn confined_role_sees_only_its_files_and_keeps_its_fds() {
    // Not under /tmp: the role's root must not even have a /tmp directory.
    let host = tempfile::Builder::new()
        .prefix("terra-role-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let granted = host.path().join("granted.conf");
    std::fs::write(&granted, "role-config").unwrap();
    let other = host.path().join("other.conf");
    std::fs::write(&other, "not-for-the-role").unwrap();
    let (mut report_r, report_w) = UnixStream::pair().unwrap();
    let (mut names, names_theirs) = UnixStream::pair().unwrap();
    // Not close-on-exec-relevant: the role must not inherit it.
    let stray = std::fs::File::open("/dev/null").unwrap();
    let h = spawn_confined_role(
        common::roles(),
        c"__probe_role",
        RoleConfig {
            read_only_files: vec![granted.clone()],
            keep_fds: vec![
                (OwnedFd::from(report_w), 7),
                (OwnedFd::from(names_theirs), 8),
            ],
        },
    )
    .unwrap();
    writeln!(
        names,
        "{}\n{}",
        std::fs::canonicalize(&granted).unwrap().display(),
        std::fs::canonicalize(&other).unwrap().display()
    )
    .unwrap();
    drop(names);
    assert_eq!(h.wait().unwrap(), 42);
    let mut text = String::new();
    report_r.read_to_string(&mut text).unwrap();
    let _ = stray.as_raw_fd();
    for want in [
        "granted=role-config",
        "other=false",
        "/dev=false",
        "/tmp=false",
        "/proc=false",
        "env=0",
        "argv=terra __probe_role",
        "comm=terra",
        "pid=1",
        "cap_sys_admin=0",
        "nnp=1",
        "dumpable=0",
        "fd8=true",
        "open_other=0",
    ] {
        assert!(
            text.lines().any(|l| l == want),
            "missing {want:?} in:\n{text}"
        );
    }
    // Twin: the same file is readable outside.
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "not-for-the-role");
}

#[test]
fn a_role_started_by_hand_refuses() {
    // No namespaces, no descriptors: the role executable refuses to act as
    // a box init or a confined role.
    for role in ["__vm", "__probe_role"] {
        let out = std::process::Command::new(common::roles_path())
            .arg(role)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{role}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("not run by hand") || err.contains("not by hand"),
            "{role}: {err}"
        );
    }
}

/// As root: this whole file again as an unprivileged user (uid/gid 65534).
#[test]
#[ignore = "needs root: runs this suite again as uid 65534"]
fn as_unprivileged_user() {
    common::rerun_unprivileged("as_unprivileged_user");
}
