//! The vm backend (`terra run --backend vm`): the workload runs under its
//! own Linux kernel in QEMU, which itself runs inside the namespace box
//! (`terra __vm`), so a kernel exploit in the workload meets QEMU's device
//! emulation and the box, not the host kernel's system call surface. See
//! docs/vm.md.
//!
//! Pure parts, tested without QEMU: the control protocol (`proto`), the
//! initramfs writer (`cpio`), ELF reading (`elf`), the module load order
//! (`modules`), kernel selection and vmlinux extraction (`kernel`), the
//! accelerator decision (`accel`) and QEMU's command line (`qemu`). Linux
//! only: preparing the cache (`assets`), the guest's init (`guest`) and the
//! network forwarder QEMU spawns (`forward`).
#![deny(unsafe_code)]

pub mod accel;
pub mod cpio;
pub mod elf;
pub mod kernel;
pub mod modules;
pub mod proto;
pub mod qemu;

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub mod assets;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub mod forward;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub mod guest;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod tsc;

pub use qemu::Boot;

/// terra's role in the guest (after `--` on the kernel command line).
pub const GUEST_ROLE: &str = "__vm_guest";
/// The forwarder QEMU spawns for each guest connection to the proxy.
pub const FORWARD_ROLE: &str = "__vm_forward";
