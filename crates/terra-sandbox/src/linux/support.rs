//! What this host offers the Linux backend, each check with the exact fix.

use super::{landlock, sys, HostSupport};

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Tries what a box needs in a throw-away child: user, mount and PID
/// namespaces with the caller's ids mapped, then a new procfs mounted by PID 1
/// of the new namespace (sysctls, AppArmor and container runtimes can each
/// forbid one of these).
fn userns_works() -> Result<(), String> {
    // SAFETY: the child only makes system calls and _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork failed".into());
    }
    if pid == 0 {
        sys::exit_now(probe_child());
    }
    let mut st = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    match libc::WIFEXITED(st).then(|| libc::WEXITSTATUS(st)) {
        Some(0) => Ok(()),
        Some(1) => Err("unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID) was refused".into()),
        Some(2) => Err("writing the uid/gid maps was refused".into()),
        Some(3) => Err("mounting a new procfs inside the namespaces was refused".into()),
        Some(n) => Err(format!("the probe failed ({n})")),
        None => Err("the probe child died".into()),
    }
}

/// Exit code: 0 ok, 1 unshare, 2 maps, 3 procfs, 4 fork.
fn probe_child() -> i32 {
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: unshare only affects this throw-away process.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID) } != 0 {
        return 1;
    }
    if sys::write_id_maps(uid, gid).is_err() {
        return 2;
    }
    match sys::fork() {
        Ok(0) => {
            let ok =
                sys::mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None).and_then(|_| {
                    sys::mount(
                        Some("proc"),
                        "/proc",
                        Some("proc"),
                        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        None,
                    )
                });
            sys::exit_now(if ok.is_ok() { 0 } else { 3 })
        }
        Ok(child) => {
            let mut st = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(child, &mut st, 0) };
            if libc::WIFEXITED(st) {
                libc::WEXITSTATUS(st)
            } else {
                4
            }
        }
        Err(_) => 4,
    }
}

pub fn check() -> HostSupport {
    let mut checks = Vec::new();
    let mut add =
        |name: &str, ok: bool, detail: String| checks.push((name.to_string(), ok, detail));

    match userns_works() {
        Ok(()) => add(
            "user-namespaces",
            true,
            "unprivileged user, mount and PID namespaces can be created".into(),
        ),
        Err(e) => add(
            "user-namespaces",
            false,
            format!("creating a user namespace failed: {e}; see the checks below"),
        ),
    }
    if let Some(v) = read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") {
        add(
            "apparmor-userns",
            v == "0",
            if v == "0" {
                "AppArmor does not restrict unprivileged user namespaces".into()
            } else {
                "AppArmor restricts unprivileged user namespaces: run `sudo sysctl -w \
                 kernel.apparmor_restrict_unprivileged_userns=0` (persist it in /etc/sysctl.d/), or install an \
                 AppArmor profile for terra granting `userns,`"
                    .into()
            },
        );
    }
    if let Some(v) = read_trim("/proc/sys/kernel/unprivileged_userns_clone") {
        add(
            "unprivileged-userns-clone",
            v == "1",
            if v == "1" {
                "kernel.unprivileged_userns_clone=1".into()
            } else {
                "run `sudo sysctl -w kernel.unprivileged_userns_clone=1` (persist it in /etc/sysctl.d/)".into()
            },
        );
    }
    match read_trim("/proc/sys/user/max_user_namespaces").and_then(|v| v.parse::<u64>().ok()) {
        Some(n) => add(
            "max-user-namespaces",
            n > 0,
            if n > 0 {
                format!("user.max_user_namespaces={n}")
            } else {
                "run `sudo sysctl -w user.max_user_namespaces=15000` (persist it in /etc/sysctl.d/)"
                    .into()
            },
        ),
        None => add(
            "max-user-namespaces",
            false,
            "/proc/sys/user/max_user_namespaces is missing: the kernel \
             lacks CONFIG_USER_NS; use a kernel built with user namespaces"
                .into(),
        ),
    }
    let container = std::path::Path::new("/.dockerenv").exists()
        || std::path::Path::new("/run/.containerenv").exists()
        || read_trim("/proc/1/cgroup")
            .is_some_and(|c| c.contains("docker") || c.contains("kubepods") || c.contains("lxc"));
    add(
        "not-in-container",
        !container,
        if container {
            "running inside a container: its runtime may forbid user namespaces or mounting procfs; run with \
             `--security-opt seccomp=unconfined --security-opt apparmor=unconfined` (docker) or on the host"
                .into()
        } else {
            "no container runtime detected".into()
        },
    );
    let abi = landlock::kernel_abi();
    add(
        "landlock",
        abi.is_some(),
        match abi {
            Some(v) => format!("Landlock ABI {v}"),
            None => "no Landlock: boot with `lsm=landlock,...` in the kernel command line (Linux >= 5.13); \
                     terra still confines with namespaces and seccomp"
                .into(),
        },
    );
    let seccomp = read_trim("/proc/self/status")
        .is_some_and(|s| s.lines().any(|l| l.starts_with("Seccomp:")));
    add(
        "seccomp",
        seccomp,
        if seccomp {
            "seccomp filters available".into()
        } else {
            "the kernel lacks CONFIG_SECCOMP_FILTER: use a kernel built with seccomp".into()
        },
    );
    let cg2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    add(
        "cgroup-v2",
        cg2,
        if cg2 {
            "unified cgroup v2 hierarchy at /sys/fs/cgroup".into()
        } else {
            "no unified cgroup v2 hierarchy: boot with `systemd.unified_cgroup_hierarchy=1` (only needed for \
             resource limits; the box itself does not use cgroups)"
                .into()
        },
    );
    HostSupport {
        checks,
        landlock_abi: abi,
    }
}
