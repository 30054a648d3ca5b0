//! The QEMU command line of a guest, rendered from a [`Boot`] (what the
//! host side found: binary, kernel, initramfs, accelerator, sizes) and the
//! run's network mode. Pure, so `--dry-run` prints exactly what runs.
//!
//! - `-nodefaults -no-user-config -display none -no-reboot`: no device,
//!   configuration file or display terra did not ask for; the guest's
//!   power-off (or a panic, `panic=-1`) ends QEMU.
//! - `-M microvm,acpi=on`: no PCI, no firmware tables beyond what describes
//!   the virtio-mmio devices (the generic Debian kernel has no
//!   VIRTIO_MMIO_CMDLINE_DEVICES).
//! - the control channel: a virtio-serial port named `terra.ctl` on the
//!   socket QEMU inherits as descriptor 3;
//! - the box's tree: one virtio-9p share of `export` (`security_model=none`:
//!   files are created as QEMU's own uid, the caller's; `multidevs=remap`:
//!   the bind mounts inside keep distinct inode numbers);
//! - network none: no NIC at all. mediated: user networking with
//!   `restrict=on` (the guest reaches nothing of the host) and one
//!   `guestfwd` to the box's proxy, through terra's forwarder;
//! - `-sandbox on,...`: QEMU's own seccomp filter; `spawn=deny` and
//!   `elevateprivileges=deny` only without networking (the forwarder is
//!   spawned per connection, and its spawn calls setsid).

use serde::{Deserialize, Serialize};

use crate::accel::Accel;

/// The guest's fixed addresses under QEMU's user networking.
pub const GUEST_ADDRESS: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 0, 2, 15);
pub const GUEST_PREFIX: u8 = 24;
/// The one endpoint the guest can reach (QEMU's guestfwd to the box's proxy).
pub const PROXY: std::net::SocketAddrV4 =
    std::net::SocketAddrV4::new(std::net::Ipv4Addr::new(10, 0, 2, 100), 3128);
/// QEMU's user networking's alias for the host (the box's loopback): with
/// `restrict=on` the guest must not reach it (the activation check tries).
pub const HOST_ALIAS: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 0, 2, 2);
/// The 9p share's tag.
pub const SHARE_TAG: &str = "terra-root";
/// The control port's name.
pub const PORT_NAME: &str = "terra.ctl";
/// The descriptor QEMU inherits the control socket on.
pub const CONTROL_FD: i32 = 3;
/// The 9p message size: the largest the virtio transport takes (128 pages).
pub const MSIZE: u32 = 512 * 1024;

/// What a guest boots with (the host side's choices, in the run request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Boot {
    /// qemu-system-x86_64 (or -aarch64).
    pub qemu: String,
    /// `QEMU emulator version ...`, for the receipt.
    pub qemu_version: String,
    /// The uncompressed vmlinux (cached) and the initramfs (cached).
    pub vmlinux: String,
    pub initramfs: String,
    /// The kernel image it came from, its SHA-256 and release (receipt).
    pub kernel: String,
    pub kernel_sha256: String,
    pub kernel_release: String,
    pub accel: Accel,
    pub accel_reason: String,
    /// The host's TSC frequency, for `tsc_early_khz` (microvm under TCG
    /// hangs in about one boot of three without it).
    pub tsc_khz: Option<u64>,
    pub memory_mib: u32,
    pub cpus: u32,
    /// How long the guest may take to report on the control channel.
    pub ready_ms: u64,
    /// Host paths QEMU reads (bound read-only in its own root, never in
    /// the share): its binary's tree, the loader's cache, the cache directory.
    pub host_paths: Vec<String>,
    /// Where terra's executable appears in QEMU's root (the forwarder).
    pub terra_in_root: String,
}

/// The guest kernel's command line.
pub fn kernel_cmdline(boot: &Boot) -> String {
    let mut c = vec![
        "console=ttyS0".to_string(),
        "quiet".into(),
        "loglevel=1".into(),
        "panic=-1".into(),
        "pci=off".into(),
        "cryptomgr.notests".into(),
        "random.trust_cpu=on".into(),
        "8250.nr_uarts=1".into(),
        "rdinit=/terra".into(),
    ];
    if let Some(khz) = boot.tsc_khz {
        c.push(format!("tsc_early_khz={khz}"));
    }
    // After "--": the guest init's own arguments (terra's role).
    c.push("--".into());
    c.push(crate::GUEST_ROLE.into());
    c.join(" ")
}

/// QEMU's argv (argv[0] is the binary).
pub fn argv(boot: &Boot, proxy: Option<std::net::SocketAddr>, export: &str) -> Vec<String> {
    let mediated = proxy.is_some();
    let mut a: Vec<String> = vec![
        boot.qemu.clone(),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        "-no-reboot".into(),
        "-M".into(),
        "microvm,acpi=on".into(),
        "-accel".into(),
        boot.accel.name().into(),
        "-cpu".into(),
        match boot.accel {
            Accel::Kvm => "host".into(),
            Accel::Tcg => "max".into(),
        },
        "-m".into(),
        format!("{}M", boot.memory_mib),
        "-smp".into(),
        boot.cpus.to_string(),
        "-kernel".into(),
        boot.vmlinux.clone(),
        "-initrd".into(),
        boot.initramfs.clone(),
        "-append".into(),
        kernel_cmdline(boot),
        "-serial".into(),
        "stdio".into(),
        "-device".into(),
        "virtio-serial-device,max_ports=2".into(),
        "-chardev".into(),
        format!("socket,id=ctl,fd={CONTROL_FD}"),
        "-device".into(),
        format!("virtserialport,chardev=ctl,name={PORT_NAME}"),
        "-fsdev".into(),
        format!("local,id=root,path={export},security_model=none,multidevs=remap"),
        "-device".into(),
        format!("virtio-9p-device,fsdev=root,mount_tag={SHARE_TAG}"),
    ];
    if let Some(proxy) = proxy {
        a.extend([
            "-netdev".into(),
            format!(
                "user,id=net0,restrict=on,ipv6=off,guestfwd=tcp:{}-cmd:{} {} {}",
                PROXY,
                boot.terra_in_root,
                crate::FORWARD_ROLE,
                proxy
            ),
            "-device".into(),
            "virtio-net-device,netdev=net0".into(),
        ]);
    } else {
        a.extend(["-nic".into(), "none".into()]);
    }
    a.extend([
        "-sandbox".into(),
        format!(
            "on,obsolete=deny,elevateprivileges={},spawn={},resourcecontrol=deny",
            // The forwarder's spawn calls setsid, which elevateprivileges
            // denies; QEMU has no capability and no_new_privs, so set*id
            // cannot gain it anything.
            if mediated { "allow" } else { "deny" },
            if mediated { "allow" } else { "deny" }
        ),
    ]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boot() -> Boot {
        Boot {
            qemu: "/usr/bin/qemu-system-x86_64".into(),
            qemu_version: "QEMU emulator version 7.2.22".into(),
            vmlinux: "/c/vmlinux".into(),
            initramfs: "/c/initramfs.cpio".into(),
            kernel: "/boot/vmlinuz-6.1.0-57-amd64".into(),
            kernel_sha256: "00".into(),
            kernel_release: "6.1.0-57-amd64".into(),
            accel: Accel::Tcg,
            accel_reason: "tcg: test".into(),
            tsc_khz: Some(2_596_152),
            memory_mib: 256,
            cpus: 1,
            ready_ms: 30_000,
            host_paths: vec!["/usr".into()],
            terra_in_root: "/terra".into(),
        }
    }

    fn pairs(a: &[String]) -> Vec<(String, String)> {
        a.windows(2).map(|w| (w[0].clone(), w[1].clone())).collect()
    }

    #[test]
    fn network_none_has_no_nic_and_denies_spawning() {
        let a = argv(&boot(), None, "/export");
        let p = pairs(&a);
        assert!(p.contains(&("-nic".into(), "none".into())));
        assert!(!a
            .iter()
            .any(|x| x.contains("netdev") || x.contains("user,")));
        assert!(a.iter().any(|x| x.contains("spawn=deny")));
        for flag in ["-nodefaults", "-no-user-config", "-no-reboot"] {
            assert!(a.iter().any(|x| x == flag), "{flag}");
        }
        assert!(p.contains(&("-accel".into(), "tcg".into())));
        assert!(p.contains(&("-m".into(), "256M".into())));
        let fsdev = &p.iter().find(|(f, _)| f == "-fsdev").unwrap().1;
        assert!(
            fsdev.contains("path=/export")
                && fsdev.contains("multidevs=remap")
                && fsdev.contains("security_model=none")
        );
    }

    #[test]
    fn mediated_is_user_networking_restricted_to_one_forward() {
        let a = argv(&boot(), Some("127.0.0.1:3128".parse().unwrap()), "/export");
        let netdev = &pairs(&a)
            .into_iter()
            .find(|(f, _)| f == "-netdev")
            .unwrap()
            .1;
        assert!(
            netdev.starts_with("user,") && netdev.contains("restrict=on"),
            "{netdev}"
        );
        assert_eq!(netdev.matches("guestfwd=").count(), 1, "{netdev}");
        assert!(
            netdev.contains("guestfwd=tcp:10.0.2.100:3128-cmd:/terra __vm_forward 127.0.0.1:3128"),
            "{netdev}"
        );
        assert!(!netdev.contains("hostfwd"), "{netdev}");
    }

    #[test]
    fn the_kernel_gets_the_tsc_and_terra_as_init_with_its_role() {
        let c = kernel_cmdline(&boot());
        assert!(c.contains("tsc_early_khz=2596152"), "{c}");
        assert!(c.contains("rdinit=/terra"), "{c}");
        assert!(c.ends_with("-- __vm_guest"), "{c}");
        let mut b = boot();
        b.tsc_khz = None;
        b.accel = Accel::Kvm;
        assert!(!kernel_cmdline(&b).contains("tsc_early_khz"));
        assert!(pairs(&argv(&b, None, "/e")).contains(&("-cpu".into(), "host".into())));
    }
}
