//! Linux kernel primitives that both the sandbox (terra-sandbox) and the
//! network broker's in-box half (terra-netd) use, so that neither crate
//! reaches into the other:
//!
//! - `notify`: seccomp user notification (seccomp_unotify(2)): installing a
//!   listener, receiving and answering calls, copying descriptors out of and
//!   into the caller, reading its memory and descriptor flags;
//! - `service`: the descriptors the box's init hands its network service
//!   (`ServiceFds`), and the service's entry type (`BoxService`).
//!
//! Everything here is Linux only; on other targets the crate is empty.

#[cfg(target_os = "linux")]
pub mod notify;
#[cfg(target_os = "linux")]
pub mod service;
