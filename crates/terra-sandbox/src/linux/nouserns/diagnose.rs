//! Why user namespaces do not work here, and the exact fix for each cause,
//! from a [`Observed`] set of host facts (pure: unit-tested with made-up
//! hosts; [`observe`] reads the real one).

use nix::errno::Errno;

use super::super::support::{self, ProbeFailure};

/// The host facts the diagnosis reads.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The functional probe (user, mount and PID namespaces, a new procfs):
    /// Ok, or the step that failed.
    pub probe: Result<(), ProbeFailure>,
    /// `user.max_user_namespaces`; None: the file is missing (no CONFIG_USER_NS).
    pub max_user_namespaces: Option<u64>,
    /// Debian's `kernel.unprivileged_userns_clone`, when the kernel has it.
    pub unprivileged_userns_clone: Option<String>,
    /// Ubuntu's `kernel.apparmor_restrict_unprivileged_userns`, when present.
    pub apparmor_restrict: Option<String>,
    /// Why this looks like a container, if it does.
    pub container: Option<String>,
    /// The `Seccomp:` mode of this process (2: a filter is installed).
    pub seccomp_mode: Option<u32>,
    /// Running as uid 0 (the unprivileged switches do not apply).
    pub root: bool,
    /// This process is in the initial user namespace (its uid map is the
    /// identity over every id): no enclosing namespace can hold a limit.
    pub initial_userns: bool,
    /// The AppArmor profile confining this process (docker-default,
    /// containers-default-...), None when unconfined or without AppArmor.
    pub apparmor_profile: Option<String>,
}

/// One restriction that blocks user namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// Stable name (`--json`).
    pub name: &'static str,
    pub detail: String,
    pub fix: String,
}

/// The restrictions that explain a failed probe (empty when it passed). When
/// none of the known ones applies, one `unknown` cause carries the probe's error.
pub fn diagnose(o: &Observed) -> Vec<Cause> {
    let Err(probe) = &o.probe else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    match o.max_user_namespaces {
        None => causes.push(Cause {
            name: "no-config-user-ns",
            detail: "/proc/sys/user/max_user_namespaces is missing: the kernel is built without CONFIG_USER_NS"
                .into(),
            fix: "boot a kernel built with CONFIG_USER_NS=y (or use --backend landlock)".into(),
        }),
        Some(0) => causes.push(Cause {
            name: "max-user-namespaces",
            detail: "user.max_user_namespaces = 0: no user namespace may be created".into(),
            fix: "sudo sysctl -w user.max_user_namespaces=15000 (persist it in /etc/sysctl.d/90-terra.conf)"
                .into(),
        }),
        Some(_) => {}
    }
    if !o.root && o.unprivileged_userns_clone.as_deref() == Some("0") {
        causes.push(Cause {
            name: "unprivileged-userns-clone",
            detail: "kernel.unprivileged_userns_clone = 0: only root may create user namespaces".into(),
            fix: "sudo sysctl -w kernel.unprivileged_userns_clone=1 (persist it in /etc/sysctl.d/90-terra.conf)"
                .into(),
        });
    }
    if !o.root && o.apparmor_restrict.as_deref() == Some("1") {
        causes.push(Cause {
            name: "apparmor-userns",
            detail: "kernel.apparmor_restrict_unprivileged_userns = 1: AppArmor strips the capabilities of a \
                     user namespace made by an unconfined program"
                .into(),
            fix: support::apparmor_userns_fix(),
        });
    }
    if *probe == ProbeFailure::Unshare(Errno::ENOSPC)
        && o.max_user_namespaces.is_some_and(|n| n > 0)
    {
        causes.push(Cause {
            name: "userns-limit-reached",
            detail: format!(
                "unshare(CLONE_NEWUSER) fails with ENOSPC although user.max_user_namespaces = {} here: \
                 the limit of an enclosing user namespace is reached (bubblewrap's --disable-userns sets it \
                 so, as can a container runtime){}",
                o.max_user_namespaces.unwrap_or_default(),
                if o.initial_userns { "" } else { "; this process runs in a nested user namespace" }
            ),
            fix: "start the enclosing sandbox without --disable-userns (bubblewrap), or run terra outside it; \
                  until then `--backend auto` runs the landlock backend"
                .into(),
        });
    }
    if let Some(c) = &o.container {
        let filtered = matches!(probe, ProbeFailure::Unshare(_) | ProbeFailure::Hostname);
        if filtered && o.seccomp_mode == Some(2) {
            causes.push(Cause {
                name: "container-seccomp",
                detail: format!(
                    "inside a container ({c}) under a seccomp filter: the runtime's default profile refuses \
                     unshare(CLONE_NEWUSER) and clone with namespace flags (docker), or sethostname without \
                     CAP_SYS_ADMIN (podman)"
                ),
                fix: "start the container with `--security-opt seccomp=unconfined` (docker, podman), or a \
                      profile that allows unshare/clone with CLONE_NEWUSER; in Kubernetes \
                      `securityContext.seccompProfile.type: Unconfined`; until then `--backend auto` runs the \
                      landlock backend"
                    .into(),
            });
        } else if *probe == ProbeFailure::Procfs {
            if let Some(profile) = &o.apparmor_profile {
                causes.push(Cause {
                    name: "container-apparmor",
                    detail: format!(
                        "inside a container ({c}) under the AppArmor profile {profile}, which refuses \
                         mounts (docker-default does)"
                    ),
                    fix: "start the container with `--security-opt apparmor=unconfined` (docker, podman); in \
                          Kubernetes `securityContext.appArmorProfile.type: Unconfined`"
                        .into(),
                });
            }
            causes.push(Cause {
                name: "container-proc-masked",
                detail: format!(
                    "inside a container ({c}): the user namespace was made, but the runtime covers parts of \
                     /proc (masked paths such as /proc/kcore and read-only /proc/sys), and the kernel refuses \
                     a new procfs while the container's is partly covered"
                ),
                fix: "start the container with `--security-opt systempaths=unconfined` (docker) or \
                      `--security-opt unmask=ALL` (podman), besides a seccomp profile that allows \
                      CLONE_NEWUSER; in Kubernetes `securityContext.procMount: Unmasked`; until then \
                      `--backend auto` runs the landlock backend"
                    .into(),
            });
        } else if causes.is_empty() {
            // Only when nothing above explains the failure already.
            causes.push(Cause {
                name: "container",
                detail: format!(
                    "inside a container ({c}): its runtime may forbid mounting procfs or user namespaces"
                ),
                fix: "start the container with `--security-opt apparmor=unconfined --security-opt \
                      systempaths=unconfined` (docker, podman), or run terra on the host"
                    .into(),
            });
        }
    }
    if causes.is_empty() {
        causes.push(Cause {
            name: "unknown",
            detail: format!("creating a user namespace failed: {probe}"),
            fix: "none of the known restrictions applies; see the other `terra doctor` lines"
                .into(),
        });
    }
    causes
}

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// This host's facts (runs the functional probe: one fork).
pub fn observe() -> Observed {
    Observed {
        probe: support::userns_probe(),
        max_user_namespaces: read_trim("/proc/sys/user/max_user_namespaces")
            .and_then(|v| v.parse().ok()),
        unprivileged_userns_clone: read_trim("/proc/sys/kernel/unprivileged_userns_clone"),
        apparmor_restrict: read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        container: support::container_hint(),
        seccomp_mode: crate::linux::sys::seccomp_mode(),
        root: nix::unistd::geteuid().is_root(),
        initial_userns: in_initial_userns(),
        apparmor_profile: apparmor_profile(),
    }
}

/// The AppArmor profile on this process, from AppArmor's own attribute
/// (the generic one may be another LSM's label): None when unconfined.
fn apparmor_profile() -> Option<String> {
    read_trim("/proc/self/attr/apparmor/current").filter(|l| l != "unconfined")
}

/// This process's uid map is the initial user namespace's: every id, mapped
/// to itself.
fn in_initial_userns() -> bool {
    read_trim("/proc/self/uid_map")
        .is_some_and(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"])
}

/// The facts [`observe`] reads without its probe (no fork), for
/// `--backend auto`: true when nothing that can block user namespaces is
/// present — user.max_user_namespaces above 0, no sysctl that restricts
/// them for this user, no seccomp filter on this process (container
/// runtimes refuse CLONE_NEWUSER with one), no AppArmor profile on it
/// (docker-default refuses the box's mounts), the initial user namespace
/// (a nested one can have its limit reached: bubblewrap's
/// --disable-userns), and no container marker (a runtime masks parts of
/// /proc, which forbids the box's procfs even without a filter). Then the
/// linux backend is chosen without the probe (which costs a run two forks,
/// namespaces and a procfs mount); anything else takes the probe, as
/// `terra doctor` does.
pub fn nothing_restricts_userns() -> bool {
    let o = Observed {
        probe: Ok(()),
        max_user_namespaces: read_trim("/proc/sys/user/max_user_namespaces")
            .and_then(|v| v.parse().ok()),
        unprivileged_userns_clone: read_trim("/proc/sys/kernel/unprivileged_userns_clone"),
        apparmor_restrict: read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        container: support::container_hint(),
        seccomp_mode: crate::linux::sys::seccomp_mode(),
        root: nix::unistd::geteuid().is_root(),
        initial_userns: in_initial_userns(),
        apparmor_profile: None,
    };
    plainly_unrestricted(&o) && apparmor_unconfined()
}

/// This process has no AppArmor profile: the label reads `unconfined`, or
/// AppArmor is not the active LSM (the attribute cannot be read).
fn apparmor_unconfined() -> bool {
    let label = read_trim("/proc/self/attr/apparmor/current")
        .or_else(|| read_trim("/proc/self/attr/current"));
    label.is_none_or(|l| l == "unconfined")
}

fn plainly_unrestricted(o: &Observed) -> bool {
    o.max_user_namespaces.is_some_and(|n| n > 0)
        && (o.root || o.unprivileged_userns_clone.as_deref() != Some("0"))
        && (o.root || o.apparmor_restrict.as_deref() != Some("1"))
        && o.seccomp_mode == Some(0)
        && o.container.is_none()
        && o.initial_userns
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked() -> Observed {
        Observed {
            probe: Err(ProbeFailure::Unshare(Errno::EPERM)),
            max_user_namespaces: Some(15000),
            unprivileged_userns_clone: None,
            apparmor_restrict: None,
            container: None,
            seccomp_mode: None,
            root: false,
            initial_userns: true,
            apparmor_profile: None,
        }
    }

    fn names(o: &Observed) -> Vec<&'static str> {
        diagnose(o).iter().map(|c| c.name).collect()
    }

    #[test]
    fn the_probe_is_skipped_only_when_nothing_can_restrict_user_namespaces() {
        let clear = Observed {
            probe: Err(ProbeFailure::Other(9)),
            max_user_namespaces: Some(15000),
            unprivileged_userns_clone: None,
            apparmor_restrict: Some("0".into()),
            container: None,
            seccomp_mode: Some(0),
            root: false,
            initial_userns: true,
            apparmor_profile: None,
        };
        assert!(plainly_unrestricted(&clear));
        for restricted in [
            Observed {
                max_user_namespaces: Some(0),
                ..clear.clone()
            },
            Observed {
                max_user_namespaces: None,
                ..clear.clone()
            },
            Observed {
                apparmor_restrict: Some("1".into()),
                ..clear.clone()
            },
            Observed {
                unprivileged_userns_clone: Some("0".into()),
                ..clear.clone()
            },
            Observed {
                seccomp_mode: Some(2),
                ..clear.clone()
            },
            Observed {
                container: Some("docker (/.dockerenv)".into()),
                ..clear.clone()
            },
            Observed {
                initial_userns: false,
                ..clear.clone()
            },
        ] {
            assert!(!plainly_unrestricted(&restricted), "{restricted:?}");
        }
        // Root is not held back by the unprivileged-only sysctls.
        let root = Observed {
            apparmor_restrict: Some("1".into()),
            root: true,
            ..clear.clone()
        };
        assert!(plainly_unrestricted(&root));
    }

    #[test]
    fn a_working_probe_needs_no_diagnosis() {
        let o = Observed {
            probe: Ok(()),
            max_user_namespaces: Some(0),
            ..blocked()
        };
        assert!(diagnose(&o).is_empty());
    }

    #[test]
    fn each_restriction_is_named_with_its_fix() {
        let o = Observed {
            max_user_namespaces: Some(0),
            ..blocked()
        };
        let c = diagnose(&o);
        assert_eq!(c[0].name, "max-user-namespaces");
        assert!(c[0].fix.contains("sysctl -w user.max_user_namespaces="));

        let o = Observed {
            max_user_namespaces: None,
            ..blocked()
        };
        assert_eq!(names(&o), ["no-config-user-ns"]);

        let o = Observed {
            apparmor_restrict: Some("1".into()),
            ..blocked()
        };
        let c = diagnose(&o);
        assert_eq!(names(&o), ["apparmor-userns"]);
        assert!(c[0].fix.contains("userns,") && c[0].fix.contains("apparmor_parser -r"));
        // The packaged profile first, the hand-written one for another path.
        assert!(c[0]
            .fix
            .contains("installs and loads /etc/apparmor.d/terra"));
        assert!(c[0].fix.contains("/usr/bin/terra and /usr/local/bin/terra"));
        assert!(c[0]
            .fix
            .contains("/path/to/terra flags=(unconfined) { userns, }"));

        let o = Observed {
            unprivileged_userns_clone: Some("0".into()),
            ..blocked()
        };
        assert_eq!(names(&o), ["unprivileged-userns-clone"]);

        let o = Observed {
            container: Some("docker (/.dockerenv)".into()),
            seccomp_mode: Some(2),
            ..blocked()
        };
        let c = diagnose(&o);
        assert_eq!(names(&o), ["container-seccomp"]);
        assert!(c[0].fix.contains("--security-opt seccomp=unconfined"));

        let o = Observed {
            container: Some("podman (/run/.containerenv)".into()),
            seccomp_mode: Some(0),
            ..blocked()
        };
        assert_eq!(names(&o), ["container"]);
        // A container without a filter is not blamed when a switch explains it.
        let o = Observed {
            container: Some("podman (/run/.containerenv)".into()),
            max_user_namespaces: Some(0),
            ..blocked()
        };
        assert_eq!(names(&o), ["max-user-namespaces"]);
    }

    #[test]
    fn a_limit_reached_in_an_enclosing_namespace_is_named() {
        // bubblewrap --unshare-user --disable-userns: the limit reads high,
        // unshare fails with ENOSPC.
        let o = Observed {
            probe: Err(ProbeFailure::Unshare(Errno::ENOSPC)),
            max_user_namespaces: Some(2147483647),
            initial_userns: false,
            ..blocked()
        };
        let c = diagnose(&o);
        assert_eq!(names(&o), ["userns-limit-reached"]);
        assert!(c[0].detail.contains("ENOSPC") && c[0].detail.contains("nested"));
        assert!(c[0].fix.contains("--disable-userns") && c[0].fix.contains("landlock"));
        // ENOSPC with the limit at 0 here is the sysctl's doing.
        let o = Observed {
            probe: Err(ProbeFailure::Unshare(Errno::ENOSPC)),
            max_user_namespaces: Some(0),
            ..blocked()
        };
        assert_eq!(names(&o), ["max-user-namespaces"]);
    }

    #[test]
    fn a_container_is_blamed_for_the_step_that_failed() {
        // Docker's default profile: unshare refused by the filter.
        let docker = Observed {
            container: Some("docker (/.dockerenv)".into()),
            seccomp_mode: Some(2),
            ..blocked()
        };
        assert_eq!(names(&docker), ["container-seccomp"]);
        // Podman's profile lets unshare through; the masked /proc stops procfs.
        let podman = Observed {
            probe: Err(ProbeFailure::Procfs),
            container: Some("podman (/run/.containerenv)".into()),
            seccomp_mode: Some(2),
            ..blocked()
        };
        let c = diagnose(&podman);
        assert_eq!(names(&podman), ["container-proc-masked"]);
        assert!(c[0].fix.contains("unmask=ALL") && c[0].fix.contains("systempaths=unconfined"));
        // Podman with /proc unmasked: its profile refuses sethostname.
        let unmasked = Observed {
            probe: Err(ProbeFailure::Hostname),
            ..podman
        };
        assert_eq!(names(&unmasked), ["container-seccomp"]);
        // docker-default refuses the mount too: both are named.
        let docker_apparmor = Observed {
            probe: Err(ProbeFailure::Procfs),
            container: Some("docker (/.dockerenv)".into()),
            seccomp_mode: Some(0),
            apparmor_profile: Some("docker-default (enforce)".into()),
            ..blocked()
        };
        let c = diagnose(&docker_apparmor);
        assert_eq!(
            names(&docker_apparmor),
            ["container-apparmor", "container-proc-masked"]
        );
        assert!(c[0].detail.contains("docker-default") && c[0].fix.contains("apparmor=unconfined"));
    }

    #[test]
    fn switches_for_unprivileged_users_do_not_explain_a_root_failure() {
        let o = Observed {
            apparmor_restrict: Some("1".into()),
            unprivileged_userns_clone: Some("0".into()),
            root: true,
            ..blocked()
        };
        let c = diagnose(&o);
        assert_eq!(names(&o), ["unknown"]);
        assert!(c[0].detail.contains("EPERM"), "{}", c[0].detail);
    }

    #[test]
    fn several_causes_are_all_reported() {
        let o = Observed {
            max_user_namespaces: Some(0),
            apparmor_restrict: Some("1".into()),
            container: Some("container=lxc".into()),
            seccomp_mode: Some(2),
            ..blocked()
        };
        assert_eq!(
            names(&o),
            [
                "max-user-namespaces",
                "apparmor-userns",
                "container-seccomp"
            ]
        );
    }
}
