//! Helpers for the box tests: hand-made resolved rules (the plan compiler's
//! resolution output shape), a workspace, a temp dir and a canary.
#![allow(dead_code, unused_imports)]

pub mod probe;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use terra_test_support::process::wait_until;
use terra_test_support::users::{rerun_as_nobody, world_readable_copy};

use terra_policy::{Access, NetworkMode, ResolvedRule, RootKind, RootMode, Scope};
use terra_sandbox::linux::{spawn_box_spec, BoxExit, BoxReport, BoxSpec, PlanView, RoleExe};

pub fn rule(access: Access, path: &Path, scope: Scope) -> ResolvedRule {
    ResolvedRule {
        access,
        path: std::fs::canonicalize(path)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string(),
        scope,
        protect_create: false,
        source_rule: 0,
        source_root: RootKind::Host,
    }
}

/// The minimal runtime of DESIGN.md, canonicalized like resolution does.
pub fn minimal_runtime() -> Vec<ResolvedRule> {
    let mut v: Vec<ResolvedRule> = Vec::new();
    for p in terra_policy::default_minimal_roots() {
        let r = rule(Access::Read, &p, Scope::Tree);
        if !v.iter().any(|x| x.path == r.path) {
            v.push(r);
        }
    }
    v
}

/// A fresh world-accessible directory (the tests also run as an unprivileged user).
pub fn open_tempdir() -> tempfile::TempDir {
    let base = std::env::var_os("TERRA_TEST_TMP")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let d = tempfile::Builder::new()
        .prefix("terra-sbx-")
        .tempdir_in(base)
        .unwrap();
    std::fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    d
}

pub struct World {
    pub ws: tempfile::TempDir,
    pub tmp: tempfile::TempDir,
    pub host: tempfile::TempDir,
    pub canary: PathBuf,
    pub rules: Vec<ResolvedRule>,
    pub network: NetworkMode,
    pub root_mode: RootMode,
    pub canary_tcp: Option<std::net::SocketAddr>,
    pub env: Vec<(OsString, OsString)>,
}

impl World {
    /// Minimal runtime read, the workspace writable, network none, root read-only.
    pub fn new() -> World {
        let ws = open_tempdir();
        let tmp = open_tempdir();
        let host = open_tempdir();
        let canary = host.path().join("canary");
        std::fs::write(&canary, "host-only canary").unwrap();
        let mut rules = minimal_runtime();
        rules.push(rule(Access::Write, ws.path(), Scope::Tree));
        World {
            ws,
            tmp,
            host,
            canary,
            rules,
            network: NetworkMode::None,
            root_mode: RootMode::ReadOnly,
            canary_tcp: None,
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("LC_ALL".into(), "C".into()),
            ],
        }
    }

    pub fn ws(&self) -> PathBuf {
        std::fs::canonicalize(self.ws.path()).unwrap()
    }

    pub fn spec(&self, argv: &[&str]) -> BoxSpec {
        BoxSpec {
            plan: PlanView {
                rules: self.rules.clone(),
                network: self.network,
                root_mode: self.root_mode,
            },
            argv: argv.iter().map(OsString::from).collect(),
            cwd: self.ws(),
            env: self.env.clone(),
            temp_dir: self.tmp.path().to_path_buf(),
            canary_path: self.canary.clone(),
            canary_tcp: self.canary_tcp,
            canary_gate: None,
            mediated: None,
            dns_report: None,
            hostname: "terra-box".into(),
            rlimits: Default::default(),
            vm: None,
        }
    }

    /// Runs `sh -c script` in the box with stdout captured into a workspace file.
    pub fn sh(&self, script: &str) -> (BoxReport, String) {
        let out = self.ws().join(".terra-test-out");
        let _ = std::fs::remove_file(&out);
        let wrapped = format!("exec >{} 2>&1\n{script}", out.display());
        let report = spawn_box_spec(roles(), self.spec(&["/bin/sh", "-c", &wrapped]))
            .unwrap()
            .wait()
            .unwrap();
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        (report, text)
    }

    pub fn run(&self, argv: &[&str]) -> BoxReport {
        spawn_box_spec(roles(), self.spec(argv))
            .unwrap()
            .wait()
            .unwrap()
    }
}

/// Asserts the workload ran and exited 0, showing its output otherwise.
pub fn ok(r: &(BoxReport, String)) -> &str {
    assert_eq!(
        r.0.exit,
        BoxExit::Code(0),
        "box failed: {:?}\noutput:\n{}",
        r.0,
        r.1
    );
    &r.1
}

/// Names the probe program's world-readable copy in a rerun as 65534.
const PROBE_ENV: &str = "TERRA_BOX_PROBE";

/// The probe program (terra-box-probe): a world-readable copy under /tmp, so
/// a box of any user can execute it at a path outside the build tree.
pub fn probe_exe() -> PathBuf {
    static COPY: OnceLock<PathBuf> = OnceLock::new();
    if let Some(p) = std::env::var_os(PROBE_ENV) {
        return PathBuf::from(p);
    }
    COPY.get_or_init(|| {
        let me = std::env::current_exe().unwrap();
        let suite = me.file_name().unwrap().to_string_lossy().into_owned();
        world_readable_copy(
            Path::new(env!("CARGO_BIN_EXE_terra-box-probe")),
            &format!("terra-box-probe-{suite}-"),
        )
    })
    .clone()
}

/// Names the role executable's world-readable copy in a rerun as 65534.
const ROLES_ENV: &str = "TERRA_TEST_ROLES";

/// The path of the role executable (terra-test-roles), world-readable like
/// the probe's, so that a box of any user can exec it.
pub fn roles_path() -> PathBuf {
    static COPY: OnceLock<PathBuf> = OnceLock::new();
    if let Some(p) = std::env::var_os(ROLES_ENV) {
        return PathBuf::from(p);
    }
    COPY.get_or_init(|| {
        let me = std::env::current_exe().unwrap();
        let suite = me.file_name().unwrap().to_string_lossy().into_owned();
        world_readable_copy(
            Path::new(env!("CARGO_BIN_EXE_terra-test-roles")),
            &format!("terra-test-roles-{suite}-"),
        )
    })
    .clone()
}

/// The role executable, opened once (as terra's supervisor opens its own).
pub fn roles() -> &'static RoleExe {
    static EXE: OnceLock<RoleExe> = OnceLock::new();
    EXE.get_or_init(|| RoleExe::open(&roles_path()).unwrap())
}

/// As root: the calling test binary again as uid/gid 65534 (without the test
/// `skip` that calls this), handed the probe program's and the role
/// executable's copies.
pub fn rerun_unprivileged(skip: &str) {
    let probe = probe_exe();
    let roles = roles_path();
    rerun_as_nobody(
        skip,
        &[
            (PROBE_ENV, probe.as_os_str()),
            (ROLES_ENV, roles.as_os_str()),
        ],
    );
}
