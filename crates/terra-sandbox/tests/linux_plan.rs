//! End to end: JSON policy -> compile_plan (with this backend's declared
//! capabilities) -> spawn_box; mediated networking; the confined broker role.
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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
        hostname: "plan-box".into(),
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
    let r = spawn_box(c).unwrap().wait().unwrap();
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
fn protect_create_is_not_declared() {
    let d = dirs();
    std::fs::create_dir(d.ws.path().join("locked")).unwrap();
    let policy = POLICY.replace(
        r#"{ "access": "deny", "path": { "root": "workspace", "relative": "secret" } }"#,
        r#"{ "access": "deny", "path": { "root": "workspace", "relative": "absent" }, "missing": "skip" }"#,
    );
    let err = plan(&d, &policy, false).unwrap_err();
    assert!(err.to_string().contains("fs-protect-create"), "{err}");
    // Twin: the same policy with an existing target compiles.
    std::fs::create_dir(d.ws.path().join("absent")).unwrap();
    plan(&d, &policy, false).unwrap();
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

fn proxy_service(listener: std::net::TcpListener, broker: OwnedFd) -> ! {
    let mut broker = UnixStream::from(broker);
    let _ = broker.write_all(b"service-up\n");
    loop {
        if let Ok((mut s, _)) = listener.accept() {
            let _ = s.write_all(b"hello-from-proxy\n");
        }
    }
}

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
    c.mediated = Some((OwnedFd::from(theirs), addr, proxy_service));
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
    let r = spawn_box(c).unwrap().wait().unwrap();
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

static ROLE_FILES: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();

fn role_main() -> i32 {
    let (granted, other) = ROLE_FILES.get().unwrap();
    let mut lines = Vec::new();
    lines.push(format!(
        "granted={}",
        std::fs::read_to_string(granted).unwrap_or_else(|e| format!("ERR {e}"))
    ));
    lines.push(format!("other={}", other.exists()));
    for p in ["/dev", "/tmp", "/proc", "/etc"] {
        lines.push(format!("{p}={}", Path::new(p).exists()));
    }
    lines.push(format!("env={}", std::env::vars_os().count()));
    // SAFETY: plain queries of this process.
    unsafe {
        lines.push(format!("pid={}", libc::getpid()));
        lines.push(format!(
            "cap_sys_admin={}",
            libc::prctl(libc::PR_CAPBSET_READ, 21, 0, 0, 0)
        ));
        lines.push(format!(
            "nnp={}",
            libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
        ));
        lines.push(format!("fd8={}", libc::fcntl(8, libc::F_GETFD) >= 0));
        let open_high = (9..256)
            .filter(|fd| libc::fcntl(*fd, libc::F_GETFD) >= 0)
            .count();
        lines.push(format!("open_above_8={open_high}"));
    }
    // SAFETY: fd 7 was handed to this role as the report channel.
    let mut report = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(7) };
    let _ = report.write_all(lines.join("\n").as_bytes());
    42
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
    ROLE_FILES
        .set((
            std::fs::canonicalize(&granted).unwrap(),
            std::fs::canonicalize(&other).unwrap(),
        ))
        .unwrap();
    let (mut report_r, report_w) = UnixStream::pair().unwrap();
    let (_keep_r, keep_w) = UnixStream::pair().unwrap();
    let stray = std::fs::File::open("/dev/null").unwrap(); // not CLOEXEC-relevant: must be closed by the role
    let h = spawn_confined_role(
        RoleConfig {
            read_only_files: vec![granted.clone()],
            keep_fds: vec![(OwnedFd::from(report_w), 7), (OwnedFd::from(keep_w), 8)],
        },
        role_main,
    )
    .unwrap();
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
        "pid=1",
        "cap_sys_admin=0",
        "nnp=1",
        "fd8=true",
        "open_above_8=0",
    ] {
        assert!(
            text.lines().any(|l| l == want),
            "missing {want:?} in:\n{text}"
        );
    }
    // Twin: the same file is readable outside.
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "not-for-the-role");
}

/// As root: this whole file again as an unprivileged user (uid/gid 65534).
#[test]
#[ignore = "needs root: runs this suite again as uid 65534"]
fn as_unprivileged_user() {
    common::rerun_unprivileged("as_unprivileged_user");
}
