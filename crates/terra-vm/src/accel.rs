//! KVM or TCG. QEMU's `-accel kvm -accel tcg` falls back only when
//! /dev/kvm cannot be opened; on a host whose KVM is paravirtualized (PVM,
//! the `kvm_pvm` module) it opens, and the guest later dies with an
//! emulation failure. So terra decides from facts: KVM only when /dev/kvm
//! opens read-write, the CPU has vmx or svm, and no paravirtual KVM module
//! is loaded; TCG otherwise, with the reason.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// What the host says about KVM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// /dev/kvm opened read-write (Err: why not).
    pub kvm_opens: Result<(), String>,
    /// The CPU flags hold vmx or svm.
    pub cpu_virt: bool,
    /// A loaded paravirtual KVM module (kvm_pvm), if any.
    pub paravirt_module: Option<String>,
    /// A probe boot under KVM: did the guest report on its control channel
    /// within the deadline (None: not tried; it is tried only when every
    /// other fact allows KVM, once per host boot).
    pub probe: Option<Result<(), String>>,
}

/// The accelerator and why.
pub fn decide(f: &Facts) -> (Accel, String) {
    if let Err(why) = &f.kvm_opens {
        return (Accel::Tcg, format!("tcg: /dev/kvm {why}"));
    }
    if let Some(m) = &f.paravirt_module {
        return (
            Accel::Tcg,
            format!("tcg: /dev/kvm is a paravirtualized KVM (module {m}), whose guests fail with emulation errors"),
        );
    }
    if !f.cpu_virt {
        return (
            Accel::Tcg,
            "tcg: the CPU flags have neither vmx nor svm".into(),
        );
    }
    match &f.probe {
        Some(Err(why)) => (
            Accel::Tcg,
            format!("tcg: a probe boot under KVM failed: {why}"),
        ),
        Some(Ok(())) => (
            Accel::Kvm,
            "kvm: /dev/kvm opens, the CPU has hardware virtualization and a probe boot reported in time"
                .into(),
        ),
        None => (
            Accel::Kvm,
            "kvm: /dev/kvm opens and the CPU has hardware virtualization (not probed)".into(),
        ),
    }
}

/// Paravirtual KVM modules: their guests need a kernel of their own.
pub const PARAVIRT_MODULES: [&str; 1] = ["kvm_pvm"];

#[cfg(target_os = "linux")]
/// This host's facts: /dev/kvm, /proc/cpuinfo, /sys/module.
pub fn host_facts() -> Facts {
    let kvm_opens = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map(drop)
        .map_err(|e| format!("cannot be opened: {e}"));
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_virt = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|w| w == "vmx" || w == "svm"));
    let paravirt_module = PARAVIRT_MODULES
        .iter()
        .find(|m| std::path::Path::new("/sys/module").join(m).exists())
        .map(|m| m.to_string());
    Facts {
        kvm_opens,
        cpu_virt,
        paravirt_module,
        probe: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kvm_only_when_every_fact_allows_it() {
        let good = Facts {
            kvm_opens: Ok(()),
            cpu_virt: true,
            paravirt_module: None,
            probe: Some(Ok(())),
        };
        assert_eq!(decide(&good).0, Accel::Kvm);
        let failed = Facts {
            probe: Some(Err("no report within 10000 ms".into())),
            ..good.clone()
        };
        let (a, why) = decide(&failed);
        assert_eq!(a, Accel::Tcg);
        assert!(why.contains("probe boot"), "{why}");
        let pvm = Facts {
            paravirt_module: Some("kvm_pvm".into()),
            ..good.clone()
        };
        let (a, why) = decide(&pvm);
        assert_eq!(a, Accel::Tcg);
        assert!(why.contains("kvm_pvm"), "{why}");
        let closed = Facts {
            kvm_opens: Err("cannot be opened: EACCES".into()),
            ..good.clone()
        };
        assert_eq!(decide(&closed).0, Accel::Tcg);
        let novirt = Facts {
            cpu_virt: false,
            ..good
        };
        assert_eq!(decide(&novirt).0, Accel::Tcg);
    }
}
