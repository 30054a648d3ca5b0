//! Everything computed in the caller before the box is cloned: the mount
//! program, the synthesized files, the checked strings for exec (the
//! configuration `terra __vm` is handed); and the reading of the box's
//! reports afterwards.

use std::ffi::CString;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use terra_policy::{NetworkMode, RootMode};

use super::config::{VmConfig, WorkloadWire};
use super::landlock::{LandlockPlan, NetRule};
use super::lower::{self, LowerInput, MountOp, NodeKind};
use super::status::Status;
use super::workload;
use super::{seccomp, BoxExit, BoxReport, BoxSpec, PlanView, SandboxError};

/// Top-level host names that are often symlinks into /usr (merged /usr).
const TOP_LINKS: [&str; 6] = ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

fn host_kind(p: &str) -> NodeKind {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => NodeKind::Dir,
        Ok(m) if m.file_type().is_char_device() => NodeKind::Device { block: false },
        Ok(m) if m.file_type().is_block_device() => NodeKind::Device { block: true },
        Ok(_) => NodeKind::File,
        Err(_) => NodeKind::Missing,
    }
}

fn canonical(p: &Path) -> Result<String, SandboxError> {
    let c = std::fs::canonicalize(p)
        .map_err(|e| SandboxError::io_at("realpath", &e, p.display().to_string()))?;
    c.to_str()
        .map(str::to_string)
        .ok_or_else(|| SandboxError::Unsupported(format!("{} is not UTF-8", c.display())))
}

/// The user's name and home from the host passwd file (no NSS), for the
/// synthesized one.
fn user_entry(uid: u32) -> (String, String) {
    let text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    for line in text.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() >= 7 && f[2].parse::<u32>().ok() == Some(uid) {
            return (f[0].to_string(), f[5].to_string());
        }
    }
    (
        if uid == 0 { "root" } else { "terra" }.to_string(),
        "/tmp".to_string(),
    )
}

/// The caller's effective uid and gid (mapped to themselves in the box).
fn ids() -> (u32, u32) {
    (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    )
}

fn synth_files(net: NetworkMode, hostname: &str) -> Vec<(String, String)> {
    let (uid, gid) = ids();
    let (name, home) = user_entry(uid);
    let mut passwd = format!("{name}:x:{uid}:{gid}:{name}:{home}:/bin/sh\n");
    let mut group = format!("{name}:x:{gid}:\n");
    if uid != 65534 {
        passwd.push_str("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
    }
    if gid != 65534 {
        group.push_str("nogroup:x:65534:\n");
    }
    let resolv = match net {
        NetworkMode::None => "# terra: network none: the box's DNS stub refuses every name at once\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n".to_string(),
        NetworkMode::Mediated => "# terra: network mediated: the box's DNS stub answers listed names with the addresses the broker resolved and pinned\nnameserver 127.0.0.1\noptions timeout:5 attempts:2\n".to_string(),
        NetworkMode::Direct => std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
    };
    vec![
        ("/etc/passwd".into(), passwd),
        ("/etc/group".into(), group),
        (
            "/etc/hosts".into(),
            format!("127.0.0.1\tlocalhost {hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
        ),
        ("/etc/resolv.conf".into(), resolv),
        (
            "/etc/nsswitch.conf".into(),
            "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n".into(),
        ),
    ]
}

fn top_symlinks() -> Vec<(String, String, String)> {
    TOP_LINKS
        .iter()
        .filter_map(|p| {
            let text = std::fs::read_link(p).ok()?;
            let target = std::fs::canonicalize(p).ok()?;
            Some((
                p.to_string(),
                text.to_str()?.to_string(),
                target.to_str()?.to_string(),
            ))
        })
        .collect()
}

/// The mount program and the Landlock program of a box.
pub fn programs(
    view: &PlanView,
    temp_dir: &Path,
    hostname: &str,
    proxy: Option<SocketAddr>,
) -> Result<(Vec<MountOp>, LandlockPlan), SandboxError> {
    let temp = canonical(temp_dir)?;
    let input = LowerInput {
        rules: &view.rules,
        root_mode: view.root_mode,
        temp_dir: &temp,
        synth: synth_files(view.network, hostname),
        top_symlinks: top_symlinks(),
    };
    let ops = lower::lower(&input, &host_kind)?;
    let net = match (view.network, proxy) {
        (NetworkMode::None | NetworkMode::Direct, _) | (NetworkMode::Mediated, Some(_)) => {
            NetRule::Unrestricted
        }
        (NetworkMode::Mediated, None) => {
            return Err(SandboxError::InvalidPlan(
                "network mediated needs the broker socket and a proxy address; falling back to ambient \
                 networking is forbidden"
                    .into(),
            ))
        }
    };
    let ll = LandlockPlan::from_ops(&ops, view.root_mode == RootMode::EphemeralWrite, net);
    Ok((ops, ll))
}

fn cstring(bytes: &[u8], what: &str) -> Result<CString, SandboxError> {
    CString::new(bytes)
        .map_err(|_| SandboxError::InvalidRequest(format!("{what} holds a NUL byte")))
}

/// `bytes` as the bytes of a C string: refused when it holds a NUL.
fn c_bytes(bytes: &[u8], what: &str) -> Result<Vec<u8>, SandboxError> {
    if bytes.contains(&0) {
        return Err(SandboxError::InvalidRequest(format!(
            "{what} holds a NUL byte"
        )));
    }
    Ok(bytes.to_vec())
}

/// What execve needs, as C strings: the PATH candidates for argv[0], argv,
/// the environment, and the working directory.
pub struct ExecStrings {
    pub candidates: Vec<CString>,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub cwd: String,
}

/// [`ExecStrings`] of a command, refusing NUL bytes and bad environment names.
pub fn exec_strings(
    argv: &[std::ffi::OsString],
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    cwd: &Path,
) -> Result<ExecStrings, SandboxError> {
    if argv.is_empty() {
        return Err(SandboxError::InvalidRequest("empty command".into()));
    }
    let argv = argv
        .iter()
        .map(|a| cstring(a.as_bytes(), "an argument"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut envp = Vec::new();
    let mut env_path = None;
    for (k, v) in env {
        if k.as_bytes().contains(&b'=') || k.is_empty() {
            return Err(SandboxError::InvalidRequest(format!(
                "invalid environment name {k:?}"
            )));
        }
        if k.as_bytes() == b"PATH" {
            env_path = Some(v.as_bytes().to_vec());
        }
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        envp.push(cstring(&kv, "an environment entry")?);
    }
    let candidates = workload::candidates(argv[0].as_bytes(), env_path.as_deref())
        .into_iter()
        .map(|c| cstring(&c, "the command"))
        .collect::<Result<Vec<_>, _>>()?;
    let cwd = cwd
        .to_str()
        .ok_or_else(|| SandboxError::Unsupported("the working directory is not UTF-8".into()))?
        .to_string();
    Ok(ExecStrings {
        candidates,
        argv,
        envp,
        cwd,
    })
}

/// What the box's init (`terra __vm`) is handed of `spec`, checked and
/// lowered before any clone. The descriptors of `spec` travel beside it.
pub fn vm_config(spec: &BoxSpec) -> Result<VmConfig, SandboxError> {
    if spec.argv.is_empty() {
        return Err(SandboxError::InvalidRequest("empty command".into()));
    }
    if spec.hostname.is_empty() || spec.hostname.len() > 64 {
        return Err(SandboxError::InvalidRequest(format!(
            "invalid host name {:?}",
            spec.hostname
        )));
    }
    let proxy = spec.mediated.as_ref().map(|(_, a, _)| *a);
    if spec.mediated.is_some() && spec.plan.network != NetworkMode::Mediated {
        return Err(SandboxError::InvalidRequest(
            "a broker socket was given but the plan is not mediated".into(),
        ));
    }
    if spec.dns_report.is_some() && spec.plan.network != NetworkMode::None {
        return Err(SandboxError::InvalidRequest(
            "a DNS report pipe was given but the plan's network is not none".into(),
        ));
    }
    let (mut ops, _) = programs(&spec.plan, &spec.temp_dir, &spec.hostname, proxy)?;
    if spec.vm.is_some() {
        ops = vm_ops(ops)?;
    }
    let ExecStrings {
        candidates,
        argv,
        envp,
        cwd,
    } = exec_strings(&spec.argv, &spec.env, &spec.cwd)?;
    let bytes = |v: Vec<CString>| v.into_iter().map(CString::into_bytes).collect::<Vec<_>>();
    let (candidates, argv, envp) = (bytes(candidates), bytes(argv), bytes(envp));
    Ok(VmConfig {
        new_net: spec.plan.network != NetworkMode::Direct,
        hostname: spec.hostname.clone(),
        root_writable: spec.plan.root_mode == RootMode::EphemeralWrite,
        ops,
        proxy,
        dns_report: spec.dns_report.is_some(),
        workload: WorkloadWire {
            candidates,
            argv,
            envp,
            cwd,
            canary_path: c_bytes(spec.canary_path.as_os_str().as_bytes(), "the canary path")?,
            canary_tcp: spec.canary_tcp,
            gate: spec.canary_gate.is_some(),
            rlimits: spec.rlimits,
        },
        terminal: None,
        vm: spec.vm.clone(),
    })
}

/// The mount program of the vm backend's share: the box's tree without its
/// procfs and /dev (the guest mounts its own there: the box's procfs would
/// show QEMU's memory to the guest through 9p), keeping their empty mount
/// points. A device node cannot be granted through 9p: refused.
pub fn vm_ops(ops: Vec<MountOp>) -> Result<Vec<MountOp>, SandboxError> {
    ops.into_iter()
        .map(|op| match op {
            MountOp::Proc { path } | MountOp::Dev { path } => Ok(MountOp::EmptyDir { path }),
            MountOp::Device { path, .. } => Err(SandboxError::InvalidPlan(format!(
                "the vm backend cannot grant the device {path}: the guest has its own devices, and a host                  device node does not cross the 9p share"
            ))),
            other => Ok(other),
        })
        .collect()
}

pub fn describe(
    view: &PlanView,
    temp_dir: &Path,
    hostname: &str,
    proxy: Option<SocketAddr>,
) -> String {
    let mut s = String::new();
    s.push_str("namespaces user (caller's uid/gid mapped to themselves), pid, mount, ipc, uts");
    s.push_str(match view.network {
        NetworkMode::Direct => "; host network\n",
        NetworkMode::None => ", net (loopback only)\n",
        NetworkMode::Mediated => ", net (loopback only; in-box proxy -> broker over fd 7)\n",
    });
    s.push_str(&format!("hostname {hostname}\n"));
    match programs(
        view,
        temp_dir,
        hostname,
        proxy.or_else(|| {
            (view.network == NetworkMode::Mediated).then(|| SocketAddr::from(([127, 0, 0, 1], 0)))
        }),
    ) {
        Ok((ops, ll)) => {
            s.push_str("root tmpfs, then:\n");
            for op in &ops {
                s.push_str("  ");
                s.push_str(&op.describe());
                s.push('\n');
            }
            s.push_str("pivot_root into the new root; the host root is detached\n");
            s.push_str("workload: all capabilities dropped, no_new_privs, fds > 2 closed, env exactly as given\n");
            s.push_str(&ll.describe());
            s.push_str(&seccomp::describe());
            s.push_str("activation: the canary must fail to open (and the canary TCP listener must refuse) in the final context\n");
        }
        Err(e) => s.push_str(&format!("refused: {e}\n")),
    }
    s
}

/// The report of a finished box from its status lines, how the caller's
/// child (launcher or init) ended and, when the caller cloned init itself,
/// init's result bytes (how the workload ended; absent when init was killed
/// outright, e.g. by SIGKILL, and then the child's end tells).
/// `has_init`: the box has an init that reports the workload's end (the
/// linux backend; the landlock backend's child is the workload itself).
pub fn report(
    reports: &[Status],
    ended: (bool, i32),
    result: Option<(bool, i32)>,
    has_init: bool,
) -> BoxReport {
    let mut landlock_abi = None;
    let mut activation = "not run".to_string();
    let mut refused = None;
    let mut exec_failed = None;
    for r in reports {
        match r {
            Status::Landlock(abi) => landlock_abi = *abi,
            Status::Activation(a) => activation = a.clone(),
            Status::Refused(why) => refused = Some(why.clone()),
            Status::ExecFailed { code, reason } => exec_failed = Some((*code, reason.clone())),
        }
    }
    let (signaled, value) = result.unwrap_or(ended);
    // init reports the workload's end before it exits; without that report
    // a SIGSYS end is init's own (the supervisor never sends SIGSYS).
    let init_killed = has_init && result.is_none() && ended == (true, libc::SIGSYS);
    let exit = if init_killed {
        BoxExit::InitKilledBySeccomp
    } else if let Some(why) = refused {
        BoxExit::Refused(why)
    } else if let Some((code, reason)) = exec_failed {
        BoxExit::ExecFailed { code, reason }
    } else if signaled {
        BoxExit::Signal(value)
    } else {
        BoxExit::Code(value)
    };
    BoxReport {
        exit,
        landlock_abi,
        activation,
    }
}
