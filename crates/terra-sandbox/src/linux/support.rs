//! What this host offers the Linux backend, each check with the exact fix.
//! The one implementation of host checks: `terra doctor` and `terra backends`
//! print these, never probe on their own.

use nix::mount::MsFlags;
use nix::sched::{unshare, CloneFlags};
use nix::unistd::ForkResult;

use super::{landlock, sys, HostSupport, SandboxError};

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Where the .deb installs terra's AppArmor profile (packaging/apparmor/terra).
pub(crate) const TERRA_APPARMOR_PROFILE: &str = "/etc/apparmor.d/terra";

/// How to let terra create user namespaces under Ubuntu's AppArmor
/// restriction: the packaged profile first, a hand-written one for a binary
/// the profile does not name.
pub(crate) fn apparmor_userns_fix() -> String {
    format!(
        "the terra .deb installs and loads {TERRA_APPARMOR_PROFILE}, which grants `userns,` to \
         /usr/bin/terra and /usr/local/bin/terra (if it is installed but not loaded: \
         `sudo apparmor_parser -r {TERRA_APPARMOR_PROFILE}`); for a terra binary elsewhere, write a \
         profile with its path, e.g. /etc/apparmor.d/terra-local containing `abi <abi/4.0>, include \
         <tunables/global> profile terra-local /path/to/terra flags=(unconfined) {{ userns, }}`, then \
         `sudo apparmor_parser -r /etc/apparmor.d/terra-local`"
    )
}

/// This process runs under the AppArmor profile `terra` (its label reads
/// `terra (unconfined)`).
fn under_terra_profile() -> bool {
    read_trim("/proc/self/attr/apparmor/current")
        .or_else(|| read_trim("/proc/self/attr/current"))
        .is_some_and(|l| is_terra_label(&l))
}

/// An AppArmor label names the profile `terra`: `terra (unconfined)` (the
/// mode follows the name), not `terra-local` nor `unconfined`.
fn is_terra_label(label: &str) -> bool {
    label.split_whitespace().next() == Some("terra")
}

/// Why the user-namespace probe failed: the step, and for unshare the errno
/// (EPERM from a seccomp filter or a sysctl, ENOSPC from a limit reached in
/// an enclosing user namespace, EINVAL from a kernel without them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeFailure {
    #[error("unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWIPC|CLONE_NEWUTS) was refused ({0})")]
    Unshare(nix::errno::Errno),
    #[error("writing the uid/gid maps was refused")]
    IdMaps,
    #[error("setting the hostname inside the namespaces was refused")]
    Hostname,
    #[error("mounting a new procfs inside the namespaces was refused")]
    Procfs,
    #[error("the probe failed ({0})")]
    Other(i32),
    #[error("the probe child died")]
    Died,
    #[error("the probe could not run: {0}")]
    Sys(String),
}

impl From<SandboxError> for ProbeFailure {
    fn from(e: SandboxError) -> ProbeFailure {
        ProbeFailure::Sys(e.to_string())
    }
}

/// The probe child's exit code for a refused unshare: this plus the errno.
const UNSHARE_REFUSED: i32 = 64;

/// Tries what a box needs in a throw-away child: the box's namespaces (user,
/// mount, PID, IPC, UTS) with the caller's ids mapped, then, in PID 1 of the
/// new namespace, a hostname and a new procfs (sysctls, AppArmor and
/// container runtimes can each forbid one of these: rootless podman's
/// seccomp profile refuses sethostname).
fn userns_works() -> Result<(), ProbeFailure> {
    // SAFETY: the child only makes system calls, writes two small files and
    // `_exit`s (see `probe_child`); it never returns here.
    let pid = match unsafe { sys::fork() }? {
        ForkResult::Child => sys::exit_now(probe_child()),
        ForkResult::Parent { child } => child,
    };
    match sys::wait_child(pid, false)? {
        Some((_, (false, 0))) => Ok(()),
        Some((_, (false, 2))) => Err(ProbeFailure::IdMaps),
        Some((_, (false, 3))) => Err(ProbeFailure::Procfs),
        Some((_, (false, 5))) => Err(ProbeFailure::Hostname),
        Some((_, (false, n))) if n > UNSHARE_REFUSED => Err(ProbeFailure::Unshare(
            nix::errno::Errno::from_raw(n - UNSHARE_REFUSED),
        )),
        Some((_, (false, n))) => Err(ProbeFailure::Other(n)),
        Some((_, (true, _))) | None => Err(ProbeFailure::Died),
    }
}

/// [`userns_works`], for the landlock backend's diagnosis and `--backend auto`.
pub(super) fn userns_probe() -> Result<(), ProbeFailure> {
    userns_works()
}

/// Exit code: 0 ok, [`UNSHARE_REFUSED`] + errno for unshare, 2 maps, 3
/// procfs, 4 fork, 5 hostname.
fn probe_child() -> i32 {
    let (uid, gid) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    if let Err(e) = unshare(
        CloneFlags::CLONE_NEWUSER
            | CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWPID
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS,
    ) {
        // Errno values stay far below 255 - UNSHARE_REFUSED.
        return UNSHARE_REFUSED + (e as i32).clamp(1, 190);
    }
    if sys::write_id_maps(uid, gid).is_err() {
        return 2;
    }
    // SAFETY: this process has one thread (a fork child); the child only
    // makes system calls and `_exit`s.
    match unsafe { sys::fork() } {
        Ok(ForkResult::Child) => {
            if nix::unistd::sethostname("terra-probe").is_err() {
                sys::exit_now(5);
            }
            let ok = sys::mount(None, "/", None, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None)
                .and_then(|_| {
                    sys::mount(
                        Some("proc"),
                        "/proc",
                        Some("proc"),
                        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                        None,
                    )
                });
            sys::exit_now(if ok.is_ok() { 0 } else { 3 })
        }
        Ok(ForkResult::Parent { child }) => match sys::wait_child(child, false) {
            Ok(Some((_, (false, code)))) => code,
            _ => 4,
        },
        Err(_) => 4,
    }
}

/// A host check, by what it looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CheckId {
    /// Functional: user, mount and PID namespaces plus a new procfs, tried in a child.
    UserNamespaces,
    /// The kernel has user namespaces at all (`user.max_user_namespaces` > 0).
    MaxUserNamespaces,
    /// Debian's `kernel.unprivileged_userns_clone` switch.
    UnprivilegedUsernsClone,
    /// Ubuntu's `kernel.apparmor_restrict_unprivileged_userns` switch.
    ApparmorUserns,
    /// Inside a container runtime (docker, podman, kubernetes, lxc).
    Container,
    /// Seccomp filters.
    Seccomp,
    /// Landlock, the box's second file-system layer.
    Landlock,
    /// The unified cgroup v2 hierarchy.
    CgroupV2,
    /// `dev.tty.legacy_tiocsti`.
    LegacyTiocsti,
}

impl CheckId {
    /// The name `terra doctor` prints and `--json` carries.
    pub fn name(self) -> &'static str {
        match self {
            CheckId::UserNamespaces => "user-namespaces",
            CheckId::MaxUserNamespaces => "max-user-namespaces",
            CheckId::UnprivilegedUsernsClone => "unprivileged-userns-clone",
            CheckId::ApparmorUserns => "apparmor-userns",
            CheckId::Container => "container",
            CheckId::Seccomp => "seccomp",
            CheckId::Landlock => "landlock",
            CheckId::CgroupV2 => "cgroup-v2",
            CheckId::LegacyTiocsti => "tty.legacy-tiocsti",
        }
    }

    /// Whether a failure stops boxes from starting. The switches that can
    /// break user namespaces are reported, but the functional
    /// `user-namespaces` check decides (root passes them all). Without
    /// Landlock a box still runs on namespaces and seccomp, and its receipt
    /// says so (`landlockAbi` null).
    pub fn required(self) -> bool {
        matches!(self, CheckId::UserNamespaces | CheckId::Seccomp)
    }
}

/// One check's result.
#[derive(Clone, Debug)]
pub struct HostCheck {
    pub id: CheckId,
    pub ok: bool,
    /// What was found.
    pub detail: String,
    /// What to change, when not ok.
    pub fix: Option<String>,
}

/// Why this looks like a container, if it does.
pub(super) fn container_hint() -> Option<String> {
    if std::path::Path::new("/.dockerenv").exists() {
        return Some("docker (/.dockerenv)".into());
    }
    if std::path::Path::new("/run/.containerenv").exists() {
        return Some("podman (/run/.containerenv)".into());
    }
    if let Ok(c) = std::env::var("container") {
        return Some(format!("container={c}"));
    }
    let cg = read_trim("/proc/1/cgroup").unwrap_or_default();
    ["docker", "kubepods", "lxc", "containerd"]
        .into_iter()
        .find(|k| cg.contains(k))
        .map(|k| format!("/proc/1/cgroup mentions {k}"))
}

pub fn check() -> HostSupport {
    let mut checks = Vec::new();
    let mut add = |id: CheckId, ok: bool, detail: String, fix: &str| {
        checks.push(HostCheck {
            id,
            ok,
            detail,
            fix: (!ok).then(|| fix.to_string()),
        })
    };

    let userns = userns_works();
    add(
        CheckId::UserNamespaces,
        userns.is_ok(),
        match &userns {
            Ok(()) => "unprivileged user, mount and PID namespaces can be created".into(),
            Err(e) => format!("creating a user namespace failed: {e}"),
        },
        "see the max-user-namespaces, unprivileged-userns-clone, apparmor-userns and container lines",
    );
    match read_trim("/proc/sys/user/max_user_namespaces").and_then(|v| v.parse::<u64>().ok()) {
        Some(n) => add(
            CheckId::MaxUserNamespaces,
            n > 0,
            format!("user.max_user_namespaces = {n}"),
            "sudo sysctl -w user.max_user_namespaces=15000 (persist it in /etc/sysctl.d/)",
        ),
        None => add(
            CheckId::MaxUserNamespaces,
            false,
            "/proc/sys/user/max_user_namespaces is missing: the kernel lacks CONFIG_USER_NS".into(),
            "use a kernel built with user namespaces",
        ),
    }
    if let Some(v) = read_trim("/proc/sys/kernel/unprivileged_userns_clone") {
        add(
            CheckId::UnprivilegedUsernsClone,
            v == "1",
            format!("kernel.unprivileged_userns_clone = {v}"),
            "sudo sysctl -w kernel.unprivileged_userns_clone=1 (persist it in /etc/sysctl.d/)",
        );
    }
    match read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") {
        // The restriction does not apply under a profile that grants
        // `userns,`: the packaged one is named `terra`.
        Some(v) if v != "0" && under_terra_profile() => add(
            CheckId::ApparmorUserns,
            true,
            format!(
                "kernel.apparmor_restrict_unprivileged_userns = {v}, but terra runs under the AppArmor \
                 profile `terra` ({TERRA_APPARMOR_PROFILE})"
            ),
            "",
        ),
        Some(v) => add(
            CheckId::ApparmorUserns,
            v == "0",
            format!("kernel.apparmor_restrict_unprivileged_userns = {v}"),
            &format!(
                "AppArmor restricts unprivileged user namespaces: {}, or \
                 `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`",
                apparmor_userns_fix()
            ),
        ),
        None => add(
            CheckId::ApparmorUserns,
            true,
            "no AppArmor restriction on unprivileged user namespaces".into(),
            "",
        ),
    }
    let container = container_hint();
    add(
        CheckId::Container,
        container.is_none(),
        container
            .as_ref()
            .map_or("no container runtime detected".into(), |c| {
                format!("inside a container: {c}")
            }),
        "container runtimes often block unshare(CLONE_NEWUSER) or mounting procfs: if user-namespaces \
         fails, run the container with `--security-opt seccomp=unconfined --security-opt \
         apparmor=unconfined` (docker, podman), or run terra on the host",
    );
    let seccomp = read_trim("/proc/self/status")
        .is_some_and(|s| s.lines().any(|l| l.starts_with("Seccomp:")));
    add(
        CheckId::Seccomp,
        seccomp,
        if seccomp {
            "seccomp filters available".into()
        } else {
            "the kernel lacks CONFIG_SECCOMP_FILTER".into()
        },
        "use a kernel built with seccomp filters",
    );
    let abi = landlock::kernel_abi();
    add(
        CheckId::Landlock,
        abi.is_some(),
        match abi {
            Some(v) => format!("Landlock ABI {v}"),
            None => "no Landlock: boxes run on namespaces and seccomp only (receipts say landlockAbi null)"
                .into(),
        },
        "boot Linux >= 5.13 with landlock in `lsm=` on the kernel command line",
    );
    let cg2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let own = read_trim("/proc/self/cgroup").unwrap_or_default();
    add(
        CheckId::CgroupV2,
        cg2,
        format!(
            "{}; this process is in {}",
            if cg2 {
                "unified cgroup v2 hierarchy at /sys/fs/cgroup"
            } else {
                "cgroup v1 or hybrid"
            },
            own.lines().collect::<Vec<_>>().join(", ")
        ),
        "boot with `systemd.unified_cgroup_hierarchy=1` (only needed for resource limits; the box itself \
         does not use cgroups)",
    );
    if let Some(v) = read_trim("/proc/sys/dev/tty/legacy_tiocsti") {
        add(
            CheckId::LegacyTiocsti,
            true,
            format!("dev.tty.legacy_tiocsti = {v} (boxes block TIOCSTI with seccomp either way)"),
            "",
        );
    }
    HostSupport {
        checks,
        landlock_abi: abi,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_packaged_profile_counts_as_terra() {
        assert!(is_terra_label("terra (unconfined)"));
        assert!(is_terra_label("terra (enforce)"));
        for other in [
            "unconfined",
            "terra-local (unconfined)",
            "docker-default (enforce)",
            "",
        ] {
            assert!(!is_terra_label(other), "{other:?}");
        }
    }

    #[test]
    fn the_fix_names_the_packaged_profile_and_the_alternative() {
        let fix = apparmor_userns_fix();
        assert!(
            fix.contains("sudo apparmor_parser -r /etc/apparmor.d/terra`"),
            "{fix}"
        );
        assert!(fix.contains("flags=(unconfined) { userns, }"), "{fix}");
    }
}
