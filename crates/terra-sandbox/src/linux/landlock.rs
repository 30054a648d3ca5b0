//! Landlock: a second, independent layer over the same filesystem plan, plus
//! TCP and scope restrictions where the kernel ABI has them. Best effort by ABI.

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope as LlScope, ABI,
};

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

use super::error::SandboxError;
use super::lower::MountOp;
use super::mounts::DEV_NODES;

/// The highest ABI whose rights terra asks for (6: scopes of abstract unix
/// sockets and signals).
const TARGET: ABI = ABI::V6;

/// The Landlock rights of `access` at ABI `target`, for a directory or
/// (`is_dir` false) a file, which holds only the file rights.
pub(super) fn rights_for(access: FsAccess, is_dir: bool, target: ABI) -> BitFlags<AccessFs> {
    let rights: BitFlags<AccessFs> = match access {
        FsAccess::ListDir => AccessFs::ReadDir.into(),
        FsAccess::ReadData => AccessFs::from_read(target) & !AccessFs::Execute,
        FsAccess::Read => AccessFs::from_read(target),
        FsAccess::ReadWrite => AccessFs::from_all(target),
        FsAccess::RemoveDirs => AccessFs::RemoveDir.into(),
    };
    if is_dir {
        rights
    } else {
        rights & AccessFs::from_file(target)
    }
}

/// What one path may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsAccess {
    /// List the directory only.
    ListDir,
    /// Read files and list directories, no execute.
    ReadData,
    /// Read and execute.
    Read,
    ReadWrite,
    /// Remove directories in it, nothing else (the parent of a directory
    /// the process removes at the end).
    RemoveDirs,
}

/// TCP policy of a process in the box.
///
/// The workload gets `Unrestricted` in every mode: with network none or
/// mediated its network namespace holds only its own loopback, so Landlock port
/// rules would add nothing but break test suites that serve and connect on
/// 127.0.0.1 inside the box. The namespace is the boundary, and the activation
/// check proves every run that the host's loopback is out of reach. The
/// mediated proxy service, which only accepts and passes sockets, gets
/// `NoConnect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetRule {
    /// No TCP restriction.
    Unrestricted,
    /// No TCP connect at all (ABI >= 4).
    NoConnect,
}

#[derive(Debug, Clone)]
pub struct LandlockPlan {
    pub fs: Vec<(String, FsAccess)>,
    pub net: NetRule,
}

impl LandlockPlan {
    /// Derives the Landlock rules from the mount program.
    pub fn from_ops(ops: &[MountOp], root_writable: bool, net: NetRule) -> LandlockPlan {
        let mut fs = vec![(
            "/".to_string(),
            if root_writable {
                FsAccess::ReadWrite
            } else {
                FsAccess::ListDir
            },
        )];
        for op in ops {
            match op {
                MountOp::Bind { path, writable, .. } => fs.push((
                    path.clone(),
                    if *writable {
                        FsAccess::ReadWrite
                    } else {
                        FsAccess::Read
                    },
                )),
                MountOp::BindTemp { path, .. } => fs.push((path.clone(), FsAccess::ReadWrite)),
                // Read: open read-only, no device ioctls (Landlock ABI >= 5
                // handles those); write: the device's whole interface.
                MountOp::Device { path, writable, .. } => fs.push((
                    path.clone(),
                    if *writable {
                        FsAccess::ReadWrite
                    } else {
                        FsAccess::ReadData
                    },
                )),
                MountOp::Proc { path } => fs.push((path.clone(), FsAccess::ReadData)),
                MountOp::Synth { path, .. } => fs.push((path.clone(), FsAccess::ReadData)),
                MountOp::Dev { path } => {
                    fs.push((path.clone(), FsAccess::ReadData));
                    for n in DEV_NODES.iter().chain(["pts", "shm"].iter()) {
                        fs.push((format!("{path}/{n}"), FsAccess::ReadWrite));
                    }
                }
                _ => {}
            }
        }
        LandlockPlan { fs, net }
    }

    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (p, a) in &self.fs {
            let a = match a {
                FsAccess::ListDir => "list-dir",
                FsAccess::ReadData => "read",
                FsAccess::Read => "read+execute",
                FsAccess::ReadWrite => "read+write+execute",
                FsAccess::RemoveDirs => "remove-dirs",
            };
            s.push_str(&format!("landlock fs  {a:<19} {p}\n"));
        }
        let net = match self.net {
            NetRule::Unrestricted => {
                "tcp not restricted by Landlock (the network namespace is the boundary)".to_string()
            }
            NetRule::NoConnect => "tcp connect denied everywhere (ABI >= 4)".to_string(),
        };
        s.push_str(&format!("landlock net {net}\n"));
        s.push_str("landlock scope abstract-unix-socket, signal (ABI >= 6)\n");
        s
    }
}

/// The kernel's Landlock ABI version, None without Landlock.
pub fn kernel_abi() -> Option<i32> {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: with a null attr and size 0 this only queries the version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (v > 0).then_some(v as i32)
}

/// Applies the plan to the calling process. Returns the ABI enforced (None
/// when the kernel has no Landlock). Paths missing in the box are skipped.
pub fn apply(plan: &LandlockPlan) -> Result<Option<i32>, SandboxError> {
    restrict(&plan.fs, plan.net, true)
}

/// Restricts the calling thread, and every thread and process it starts
/// afterwards, to `fs` (the supervisor's own domain once the box and the
/// broker run). No scope: the supervisor signals the box and the broker,
/// which are outside its domain. Returns the ABI enforced (None when the
/// kernel has no Landlock); missing paths are skipped.
pub fn restrict_self(fs: &[(String, FsAccess)]) -> Result<Option<i32>, SandboxError> {
    restrict(fs, NetRule::Unrestricted, false)
}

fn restrict(
    fs: &[(String, FsAccess)],
    net: NetRule,
    scoped: bool,
) -> Result<Option<i32>, SandboxError> {
    let Some(kabi) = kernel_abi() else {
        return Ok(None);
    };
    let mut rs = Ruleset::default().handle_access(AccessFs::from_all(TARGET))?;
    if net != NetRule::Unrestricted {
        rs = rs.handle_access(AccessNet::ConnectTcp)?;
    }
    if scoped {
        rs = rs.scope(LlScope::from_all(TARGET))?;
    }
    let mut created = rs.create()?;
    for (path, access) in fs {
        // One open per rule (the workload's start runs this for every
        // rule): a path that cannot be reached gets no rule, as one whose
        // stat failed did; any other failure refuses.
        let fd = match nix::fcntl::open(
            path.as_str(),
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        ) {
            // SAFETY: open returned a new descriptor owned by nobody else.
            Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd) },
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::EACCES | Errno::ELOOP) => continue,
            Err(errno) => return Err(SandboxError::sys_at("open", errno, path.clone())),
        };
        let st = nix::sys::stat::fstat(fd.as_raw_fd())
            .map_err(|errno| SandboxError::sys_at("fstat", errno, path.clone()))?;
        let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        let rights = rights_for(*access, is_dir, TARGET);
        if rights.is_empty() {
            continue;
        }
        created = created.add_rule(PathBeneath::new(fd, rights))?;
    }
    let status = created.restrict_self()?;
    Ok(match status.ruleset {
        RulesetStatus::NotEnforced => None,
        _ => Some(kabi.min(TARGET as i32)),
    })
}
