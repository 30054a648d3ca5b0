//! Which backend runs a plan: `--backend linux`, `--backend landlock`, or
//! `--backend auto` (the default): linux where user namespaces work, else
//! landlock where the kernel has what it needs, else a refusal naming both
//! reasons. The choice and why travel in the request and the receipt.

use terra_policy::CapabilitySet;
#[cfg(target_os = "linux")]
use terra_sandbox::linux::nouserns;

use crate::error::{Error, Result};

/// The landlock backend's name (`terra_sandbox::linux::nouserns::NAME`,
/// which exists on Linux only).
pub const LANDLOCK: &str = "landlock";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Namespaces + seccomp + Landlock (terra_sandbox::linux).
    Linux,
    /// Landlock + seccomp + the supervisor as subreaper (terra_sandbox::linux::nouserns).
    Landlock,
    /// Seatbelt (terra_seatbelt): resolved on every host so its profile can
    /// be reviewed with `--dry-run`; a real run needs a Mac.
    Macos,
    /// AppContainer (terra_appcontainer): resolved on every host so its
    /// launch plan can be reviewed with `--dry-run`; a real run needs Windows.
    Windows,
    /// A guest kernel in QEMU inside the namespace box (terra_vm, docs/vm.md).
    Vm,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Linux => "linux",
            Backend::Landlock => LANDLOCK,
            Backend::Macos => "macos",
            Backend::Windows => "windows",
            Backend::Vm => "vm",
        }
    }

    pub fn from_name(name: &str) -> Option<Backend> {
        match name {
            "linux" => Some(Backend::Linux),
            LANDLOCK => Some(Backend::Landlock),
            "macos" => Some(Backend::Macos),
            "windows" => Some(Backend::Windows),
            "vm" => Some(Backend::Vm),
            _ => None,
        }
    }

    /// The capabilities the backend declares (`broker`: the network broker
    /// is built in: the linux backend's mediated networking, and on macOS
    /// the listener-fed broker, `terra_netd::standalone`).
    pub fn declared(self, broker: bool) -> CapabilitySet {
        match self {
            #[cfg(target_os = "linux")]
            Backend::Linux => terra_sandbox::linux::declared_capabilities(broker),
            #[cfg(target_os = "linux")]
            Backend::Landlock => nouserns::declared_capabilities(),
            // Never chosen off Linux (`choose` refuses them there).
            #[cfg(not(target_os = "linux"))]
            Backend::Linux | Backend::Landlock => CapabilitySet::EMPTY,
            Backend::Macos => terra_seatbelt::declared_capabilities(broker),
            // No broker runs on Windows: mediated plans are refused.
            Backend::Windows => terra_appcontainer::declared_capabilities(),
            Backend::Vm => vm_declared(),
        }
    }
}

/// What the vm backend enforces: the box's tree through the 9p share (read,
/// write, deny, deny-write), no network or one route to the broker (whose
/// proxy judges every connection with the destination's flags: TLS SNI,
/// private addresses), the whole process tree inside the guest. Not
/// network-direct (the guest has no host network by design), not
/// root-ephemeral-write, not fs-protect-create (not tested through the
/// share).
pub fn vm_declared() -> CapabilitySet {
    use terra_policy::Capability as C;
    [
        C::FsRead,
        C::FsWrite,
        C::FsDeny,
        C::FsDenyWrite,
        C::NetworkNone,
        C::NetworkMediated,
        C::NetworkRequireTlsSni,
        C::NetworkPrivateAddresses,
        C::ProcessTree,
    ]
    .into_iter()
    .collect()
}

/// A backend and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub backend: Backend,
    pub reason: String,
}

/// The facts `auto` decides on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// The user-namespace probe: Ok, or why it failed (with the names of
    /// the restrictions `terra doctor` found).
    pub user_namespaces: std::result::Result<(), String>,
    /// The landlock backend: Ok(Landlock ABI), or why it cannot run.
    pub landlock: std::result::Result<i32, String>,
}

impl HostFacts {
    /// Off Linux neither Linux backend can run.
    #[cfg(not(target_os = "linux"))]
    pub fn probe() -> HostFacts {
        let why = || format!("Linux only; this is {}", std::env::consts::OS);
        HostFacts {
            user_namespaces: Err(why()),
            landlock: Err(why()),
        }
    }

    /// This host's facts: without a fork when nothing on the host can
    /// restrict user namespaces (`nothing_restricts_userns`), else with the
    /// namespace probe (two forks, namespaces, a procfs mount).
    #[cfg(target_os = "linux")]
    pub fn probe() -> HostFacts {
        Self::probe_with_causes().0
    }

    /// [`HostFacts::probe`] and what blocks user namespaces (empty when they
    /// work, or when the probe was not needed): `terra run` and `terra
    /// doctor` decide `auto` from this one function, so they agree.
    #[cfg(target_os = "linux")]
    pub fn probe_with_causes() -> (HostFacts, Vec<nouserns::Cause>) {
        if nouserns::nothing_restricts_userns() {
            let facts = HostFacts {
                user_namespaces: Ok(()),
                landlock: nouserns::usable().map_err(|e| e.to_string()),
            };
            return (facts, Vec::new());
        }
        let observed = nouserns::observe();
        let causes = nouserns::diagnose(&observed);
        let user_namespaces = observed.probe.map_err(|why| {
            let names: Vec<&str> = causes.iter().map(|c| c.name).collect();
            format!("{why}; blocked by: {}", names.join(", "))
        });
        let facts = HostFacts {
            user_namespaces,
            landlock: nouserns::usable().map_err(|e| e.to_string()),
        };
        (facts, causes)
    }
}

/// How every reason `auto` gives begins.
const AUTO: &str = "auto: ";

/// What `terra run` says on stderr when `--backend auto` took a backend
/// other than linux: which, why, and what it leaves unconfined. None for a
/// named backend (the user chose it) and for linux (the default).
pub fn auto_notice(choice: &Choice) -> Option<String> {
    if !choice.reason.starts_with(AUTO) {
        return None;
    }
    match choice.backend {
        #[cfg(target_os = "linux")]
        Backend::Landlock => {
            let refused: Vec<&str> = terra_sandbox::linux::declared_capabilities(true)
                .missing_from(nouserns::declared_capabilities())
                .into_iter()
                .map(|c| c.name())
                .collect();
            Some(format!(
                "backend landlock ({}). It cannot confine: {}. Plans that need {} are refused. \
                 `terra doctor` says how to make user namespaces work; --backend landlock makes the choice \
                 explicit",
                choice.reason,
                nouserns::NOT_CONFINED.join("; "),
                refused.join(", ")
            ))
        }
        _ => None,
    }
}

/// The backend for `requested`; `facts` is called only for the choices that
/// depend on the host (`auto`, `landlock`). On macOS: [`choose_on_macos`].
pub fn choose(requested: &str, facts: impl FnOnce() -> HostFacts) -> Result<Choice> {
    if cfg!(target_os = "macos") {
        return choose_on_macos(requested);
    }
    match requested {
        "linux" => Ok(Choice {
            backend: Backend::Linux,
            reason: "--backend linux".into(),
        }),
        LANDLOCK => match facts().landlock {
            Ok(abi) => Ok(Choice {
                backend: Backend::Landlock,
                reason: format!("--backend landlock (Landlock ABI {abi})"),
            }),
            Err(why) => Err(Error::Unsupported(format!(
                "the landlock backend cannot run on this host: {why} (see `terra doctor`)"
            ))),
        },
        "auto" => {
            let f = facts();
            match (f.user_namespaces, f.landlock) {
                (Ok(()), _) => Ok(Choice {
                    backend: Backend::Linux,
                    reason: format!("{AUTO}user namespaces work here"),
                }),
                (Err(userns), Ok(abi)) => Ok(Choice {
                    backend: Backend::Landlock,
                    reason: format!(
                        "{AUTO}user namespaces are unavailable ({userns}); Landlock ABI {abi} runs the landlock backend"
                    ),
                }),
                (Err(userns), Err(landlock)) => Err(Error::Unsupported(format!(
                    "no backend can run on this host: linux needs user namespaces ({userns}); landlock: {landlock} \
                     (see `terra doctor`)"
                ))),
            }
        }
        "macos" => Ok(Choice {
            backend: Backend::Macos,
            reason: "--backend macos".into(),
        }),
        "vm" => Ok(Choice {
            backend: Backend::Vm,
            reason: "--backend vm".into(),
        }),
        "windows" => Ok(Choice {
            backend: Backend::Windows,
            reason: "--backend windows".into(),
        }),
        other => Err(Error::Unsupported(format!(
            "unknown backend {other:?}: auto, linux, landlock, vm, macos or windows (see `terra backends`)"
        ))),
    }
}

/// The backend for `requested` on macOS: the macos backend for `auto` and
/// `macos`; the Linux backends refused by name, never swapped.
pub fn choose_on_macos(requested: &str) -> Result<Choice> {
    match requested {
        "auto" => Ok(Choice {
            backend: Backend::Macos,
            reason: format!("{AUTO}macOS runs the macos backend (Seatbelt)"),
        }),
        "macos" => Ok(Choice {
            backend: Backend::Macos,
            reason: "--backend macos".into(),
        }),
        "linux" | LANDLOCK => Err(Error::Unsupported(format!(
            "backend {requested} runs on Linux only; on macOS terra runs the macos backend (see `terra backends`)"
        ))),
        "windows" => Err(Error::Unsupported(format!(
            "backend {requested} is not supported on this host (see `terra backends`)"
        ))),
        other => Err(Error::Unsupported(format!(
            "unknown backend {other:?}: auto or macos on macOS (see `terra backends`)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_macos_auto_is_macos_and_linux_backends_are_refused() {
        assert_eq!(choose_on_macos("auto").unwrap().backend, Backend::Macos);
        assert_eq!(choose_on_macos("macos").unwrap().backend, Backend::Macos);
        for b in ["linux", "landlock", "windows", "plan9"] {
            assert!(
                matches!(choose_on_macos(b), Err(Error::Unsupported(_))),
                "{b}"
            );
        }
        // The macOS build declares mediated networking (its broker is built in).
        assert!(Backend::Macos
            .declared(true)
            .contains(terra_policy::Capability::NetworkMediated));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_landlock_name_is_the_launchers() {
        assert_eq!(LANDLOCK, nouserns::NAME);
    }

    #[cfg(target_os = "linux")]
    fn facts(userns: bool, landlock: bool) -> HostFacts {
        HostFacts {
            user_namespaces: if userns {
                Ok(())
            } else {
                Err("unshare was refused; blocked by: apparmor-userns".into())
            },
            landlock: if landlock {
                Ok(7)
            } else {
                Err("Landlock ABI 4 is older than 6".into())
            },
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn auto_prefers_namespaces_then_landlock_then_refuses() {
        let c = choose("auto", || facts(true, true)).unwrap();
        assert_eq!(c.backend, Backend::Linux);
        let c = choose("auto", || facts(false, true)).unwrap();
        assert_eq!(c.backend, Backend::Landlock);
        assert!(
            c.reason.contains("apparmor-userns") && c.reason.contains("ABI 7"),
            "{}",
            c.reason
        );
        let e = choose("auto", || facts(false, false))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("apparmor-userns") && e.contains("older than 6"),
            "{e}"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn auto_names_the_fallback_and_what_it_leaves_unconfined() {
        let c = choose("auto", || facts(false, true)).unwrap();
        let n = auto_notice(&c).expect("a notice for the landlock fallback");
        assert!(n.starts_with("backend landlock (auto: "), "{n}");
        assert!(n.contains("apparmor-userns"), "{n}");
        assert!(n.contains(nouserns::NOT_CONFINED[0]), "{n}");
        assert!(
            n.contains("fs-deny") && n.contains("network-mediated"),
            "{n}"
        );
        // The default and a named backend say nothing.
        assert_eq!(
            auto_notice(&choose("auto", || facts(true, true)).unwrap()),
            None
        );
        assert_eq!(
            auto_notice(&choose("landlock", || facts(false, true)).unwrap()),
            None
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_named_backend_is_taken_or_refused_never_swapped() {
        let c = choose("linux", || panic!("linux is not probed here")).unwrap();
        assert_eq!(c.backend, Backend::Linux);
        let c = choose("landlock", || facts(true, true)).unwrap();
        assert_eq!(c.backend, Backend::Landlock);
        let e = choose("landlock", || facts(true, false)).unwrap_err();
        assert!(e.to_string().contains("landlock backend cannot run"), "{e}");
        assert!(choose("plan9", || facts(true, true)).is_err());
        // Resolved on every host (for --dry-run), never probed.
        let c = choose("windows", || panic!("windows is not probed here")).unwrap();
        assert_eq!(c.backend, Backend::Windows);
        assert_eq!(Backend::from_name("windows"), Some(Backend::Windows));
    }

    #[test]
    fn the_windows_backend_declares_what_appcontainer_enforces() {
        use terra_policy::Capability as C;
        let d = Backend::Windows.declared(true);
        for c in [
            C::FsRead,
            C::FsWrite,
            C::FsDeny,
            C::FsDenyWrite,
            C::NetworkNone,
            C::ProcessTree,
        ] {
            assert!(d.contains(c), "{c}");
        }
        for c in [
            C::NetworkDirect,
            C::NetworkMediated,
            C::RootEphemeralWrite,
            C::FsProtectCreate,
        ] {
            assert!(!d.contains(c), "{c}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_landlock_backend_declares_no_deny_and_no_mediation() {
        use terra_policy::Capability as C;
        let d = Backend::Landlock.declared(true);
        for c in [
            C::FsDeny,
            C::FsDenyWrite,
            C::NetworkMediated,
            C::RootEphemeralWrite,
        ] {
            assert!(!d.contains(c), "{c}");
        }
        for c in [
            C::FsRead,
            C::FsWrite,
            C::NetworkNone,
            C::NetworkDirect,
            C::ProcessTree,
        ] {
            assert!(d.contains(c), "{c}");
        }
    }
}
