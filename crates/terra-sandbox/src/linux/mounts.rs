//! Applies a mount program inside the box's new mount namespace (run by the
//! box init, which holds every capability of the box's user namespace).
//!
//! Layout while building: a staging tmpfs becomes the root, the host root is
//! reachable at /oldroot (all sources are read there), the box root is a second
//! tmpfs at /newroot. At the end /newroot becomes the root and the staging tmpfs
//! with the whole host tree below it is detached.
//!
//! The empty masking file lives in its own small tmpfs at /synth, and the
//! synthesized files that must be bound (over a host file) in another at
//! /synth-files, each written once and then made read-only: a bind mount
//! copies the flags of its source mount, so every bind of such a file is
//! read-only (and nosuid, nodev, noexec) from the start, one mount(2) each.
//! A synthesized file with nothing under it in a root that ends read-only
//! is written into the box root itself.
//!
//! The box's /proc (with its masks) and /dev need nothing from the run:
//! [`prebuild`] makes them while the configuration is awaited (an early
//! box, mod.rs), and [`apply`] uses them where the program has them and
//! nothing before them covers their place; otherwise they are detached and
//! made in program order as before.

use super::lower::MountOp;
use nix::mount::MsFlags;

use super::error::{Result, SandboxError};
use super::sys;

const OLD: &str = "/oldroot";
const NEW: &str = "/newroot";
const SYNTH: &str = "/synth";
const EMPTY_FILE: &str = "/synth/.empty";
const SYNTH_FILES: &str = "/synth-files";

const NOSUID: MsFlags = MsFlags::MS_NOSUID;
const NODEV: MsFlags = MsFlags::MS_NODEV;
const NOEXEC: MsFlags = MsFlags::MS_NOEXEC;
const BIND: MsFlags = MsFlags::MS_BIND;
const RBIND: MsFlags = MsFlags::MS_BIND.union(MsFlags::MS_REC);

/// Host nodes bound into the box /dev.
pub const DEV_NODES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];
/// procfs files masked with an empty read-only file: kernel memory, kernel
/// state and keys that describe or reach the host, not the box.
const PROC_MASK_FILES: [&str; 14] = [
    "kcore",
    "sysrq-trigger",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "latency_stats",
    "kallsyms",
    "kmsg",
    "keys",
    "key-users",
    "kpageflags",
    "kpagecount",
    "kpagecgroup",
    "slabinfo",
];
/// procfs directories masked with an empty read-only tmpfs.
const PROC_MASK_DIRS: [&str; 3] = ["acpi", "scsi", "asound"];
/// procfs directories made read-only: they hold host-wide kernel settings
/// (IRQ affinity, bus and file system tunables, sysctls) that a uid 0 mapped
/// to host root could otherwise write, capabilities or not.
const PROC_READ_ONLY_DIRS: [&str; 4] = ["sys", "irq", "bus", "fs"];
/// sysfs directories masked with an empty read-only tmpfs when a grant
/// shows /sys in the box (firmware tables and variables).
const SYS_MASK_DIRS: [&str; 1] = ["/sys/firmware"];

/// Mounts a new file system of type `fstype` (tmpfs, devpts) at `target`.
fn new_fs(fstype: &str, target: &str, flags: MsFlags, data: &str) -> Result<()> {
    sys::mount(Some(fstype), target, Some(fstype), flags, Some(data))
}

fn new(p: &str) -> String {
    if p == "/" {
        NEW.to_string()
    } else {
        format!("{NEW}{p}")
    }
}
fn old(p: &str) -> String {
    if p == "/" {
        OLD.to_string()
    } else {
        format!("{OLD}{p}")
    }
}

/// Step 1: private propagation, staging tmpfs as root, host at /oldroot, empty
/// box root tmpfs at /newroot.
pub fn enter_staging() -> Result<()> {
    sys::mount(None, "/", None, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None)?;
    // Any existing host directory can carry the staging tmpfs: after pivot_root
    // the host tree, including that directory, is visible again under /oldroot.
    let base = ["/tmp", "/mnt", "/var", "/usr", "/"]
        .into_iter()
        .find(|p| {
            sys::lstat(p)
                .ok()
                .flatten()
                .is_some_and(|st| sys::is_dir(&st))
        })
        .ok_or_else(|| {
            SandboxError::Unsupported("no host directory to stage the box root on".into())
        })?;
    new_fs("tmpfs", base, NOSUID | NODEV, "mode=0700")?;
    for d in [OLD, NEW, SYNTH, SYNTH_FILES] {
        sys::mkdir(&format!("{base}{d}"), 0o700)?;
    }
    sys::pivot_root(base, &format!("{base}{OLD}"))?;
    sys::chdir("/")?;
    new_fs("tmpfs", NEW, NOSUID | NODEV, "mode=0755")
}

/// Step 3: the box root becomes `/`; the staging tmpfs and the host are detached.
pub fn enter_new_root() -> Result<()> {
    sys::chdir(NEW)?;
    sys::pivot_root(".", ".")?;
    sys::umount_detach(".")?;
    sys::chdir("/")
}

/// Device of the box root tmpfs, to know where mount points may be created.
fn root_dev() -> Result<u64> {
    Ok(sys::lstat(NEW)?.ok_or_else(|| vanished(NEW))?.st_dev)
}

/// Makes sure `target` (a /newroot path) exists to mount on. Missing components
/// are created only inside the box root tmpfs or the run's /tmp, never inside
/// a host bind.
fn ensure(target: &str, dir: bool, rdev: u64) -> Result<()> {
    if sys::lstat(target)?.is_some() {
        return Ok(());
    }
    let rel = &target[NEW.len()..];
    let parts: Vec<&str> = rel.split('/').filter(|s| !s.is_empty()).collect();
    let mut cur = NEW.to_string();
    for (i, part) in parts.iter().enumerate() {
        let parent_dev = sys::lstat(&cur)?.ok_or_else(|| vanished(&cur))?.st_dev;
        let next = format!("{cur}/{part}");
        if sys::lstat(&next)?.is_none() {
            let in_tmp = next.starts_with(&format!("{NEW}/tmp/"));
            if parent_dev != rdev && !in_tmp {
                return Err(SandboxError::Root(format!(
                    "mount point {} is absent inside a host bind; refusing to create it on the host",
                    &next[NEW.len()..]
                )));
            }
            if i + 1 == parts.len() && !dir {
                sys::touch(&next, 0o444)?;
            } else {
                sys::mkdir(&next, 0o755)?;
            }
        }
        cur = next;
    }
    Ok(())
}

fn is_mountpoint(target: &str) -> Result<bool> {
    if target == NEW {
        return Ok(true);
    }
    let st = sys::lstat(target)?.ok_or_else(|| vanished(target))?;
    let parent = match target.rfind('/') {
        Some(0) => "/".to_string(),
        Some(i) => target[..i].to_string(),
        None => return Ok(false),
    };
    let pst = sys::lstat(&parent)?.ok_or_else(|| vanished(&parent))?;
    Ok(st.st_dev != pst.st_dev || st.st_ino == pst.st_ino)
}

fn mask_dir(t: &str) -> Result<()> {
    new_fs(
        "tmpfs",
        t,
        MsFlags::MS_RDONLY | NOSUID | NODEV | NOEXEC,
        "mode=0555,size=4k",
    )
}

/// Covers a file with the empty 0444 file; the bind is read-only because
/// /synth is (see `write_synth`).
fn mask_file(t: &str) -> Result<()> {
    sys::mount(Some(EMPTY_FILE), t, None, BIND, None)
}

/// The empty masking file in a fresh tmpfs at /synth, then made read-only.
fn write_mask_source() -> Result<()> {
    new_fs("tmpfs", SYNTH, NOSUID | NODEV | NOEXEC, "mode=0755")?;
    sys::touch(EMPTY_FILE, 0o444)?;
    sys::make_readonly(SYNTH, false)
}

/// Every synthesized file (numbered in program order) in a fresh tmpfs at
/// /synth-files, then made read-only; made when the first one must be bound.
fn write_synth_files(ops: &[MountOp]) -> Result<()> {
    new_fs("tmpfs", SYNTH_FILES, NOSUID | NODEV | NOEXEC, "mode=0755")?;
    let mut n = 0;
    for op in ops {
        if let MountOp::Synth { content, .. } = op {
            n += 1;
            sys::write_file(&format!("{SYNTH_FILES}/{n}"), content.as_bytes())?;
        }
    }
    sys::make_readonly(SYNTH_FILES, false)
}

/// What [`prebuild`] made.
#[derive(Debug, Default, Clone, Copy)]
pub struct Prebuilt {
    mask_source: bool,
    proc: bool,
    dev: bool,
}

/// Builds the box's /proc and /dev at their places in the box root (after
/// `enter_staging`), before the mount program is known. A part that fails
/// is detached and left to [`apply`], which then says why.
pub fn prebuild() -> Prebuilt {
    let mut made = Prebuilt::default();
    if write_mask_source().is_err() {
        return made;
    }
    made.mask_source = true;
    let Ok(rdev) = root_dev() else {
        return made;
    };
    made.proc = prebuild_one("/proc", |t| mount_proc(t, rdev));
    made.dev = prebuild_one("/dev", |t| mount_dev(t, rdev));
    made
}

fn prebuild_one(path: &str, build: impl FnOnce(&str) -> Result<()>) -> bool {
    let t = new(path);
    if build(&t).is_ok() {
        return true;
    }
    if sys::lstat(&t).ok().flatten().is_some() {
        let _ = sys::umount_detach(&t);
    }
    false
}

/// The path an op mounts on or makes.
fn op_path(op: &MountOp) -> Option<&str> {
    match op {
        MountOp::Bind { path, .. }
        | MountOp::BindTemp { path, .. }
        | MountOp::EmptyDir { path }
        | MountOp::Proc { path }
        | MountOp::Dev { path }
        | MountOp::Device { path, .. }
        | MountOp::Synth { path, .. }
        | MountOp::Symlink { path, .. }
        | MountOp::Pin { path }
        | MountOp::ReadOnly { path }
        | MountOp::MaskDir { path }
        | MountOp::MaskFile { path }
        | MountOp::MaskPlaceholder { path }
        | MountOp::ProtectCreate { path } => Some(path),
        MountOp::RootReadOnly => None,
    }
}

/// Whether a prebuilt file system at `path` stands for the op `wanted`:
/// the program has that op, and no op before it mounts on the root or on
/// `path` itself (which would have covered it).
fn prebuilt_fits(ops: &[MountOp], path: &str, wanted: impl Fn(&MountOp) -> bool) -> bool {
    let Some(at) = ops
        .iter()
        .position(|op| wanted(op) && op_path(op) == Some(path))
    else {
        return false;
    };
    !ops[..at]
        .iter()
        .filter_map(op_path)
        .any(|p| p == "/" || p == path)
}

/// Binds the host's `source` at `path` in the box (recursive), with nosuid
/// and nodev, and read-only unless `writable`.
fn bind_host(source: &str, path: &str, dir: bool, writable: bool, rdev: u64) -> Result<()> {
    let t = new(path);
    ensure(&t, dir, rdev)?;
    sys::mount(Some(&old(source)), &t, None, RBIND, None)?;
    if writable {
        sys::harden(&t)
    } else {
        sys::harden_readonly(&t)
    }
}

/// Binds the host's device node `path` alone at its path. Its mount point
/// is made only in the box's own /dev tmpfs or the box root tmpfs, never
/// on the host; the node must still be a device of the same kind and
/// numbers as when the plan was made (checked on the node bound).
fn bind_device(path: &str, writable: bool, rdev: u64, dev_dir: Option<&str>) -> Result<()> {
    let t = new(path);
    let host = old(path);
    let st = sys::lstat(&host)?.ok_or_else(|| vanished(path))?;
    let kind = st.st_mode & libc::S_IFMT;
    if kind != libc::S_IFCHR && kind != libc::S_IFBLK {
        return Err(SandboxError::Root(format!(
            "{path} is no longer a device node on the host"
        )));
    }
    if sys::lstat(&t)?.is_none() {
        let in_dev = dev_dir.is_some_and(|d| t.starts_with(&format!("{d}/")));
        if in_dev {
            // The box's /dev is a tmpfs of its own: make the directories
            // and the mount point there.
            let d = dev_dir.unwrap_or_default();
            let mut cur = d.to_string();
            let rest = &t[d.len() + 1..];
            let parts: Vec<&str> = rest.split('/').collect();
            for (i, part) in parts.iter().enumerate() {
                cur = format!("{cur}/{part}");
                if sys::lstat(&cur)?.is_some() {
                    continue;
                }
                if i + 1 == parts.len() {
                    sys::touch(&cur, 0o600)?;
                } else {
                    sys::mkdir(&cur, 0o755)?;
                }
            }
        } else {
            ensure(&t, false, rdev)?;
        }
    }
    sys::mount(Some(&host), &t, None, MsFlags::MS_BIND, None)?;
    let bound = sys::lstat(&t)?.ok_or_else(|| vanished(path))?;
    if bound.st_rdev != st.st_rdev || bound.st_mode & libc::S_IFMT != kind {
        return Err(SandboxError::Root(format!(
            "{path}: the node bound is not the device the plan named"
        )));
    }
    sys::harden_device(&t, writable)
}

fn vanished(path: &str) -> SandboxError {
    SandboxError::Root(format!("{path} vanished while the box root was built"))
}

/// Step 2: applies the program (between `enter_staging` and `enter_new_root`),
/// using what [`prebuild`] made where it fits.
pub fn apply(ops: &[MountOp], prebuilt: Prebuilt) -> Result<()> {
    if !prebuilt.mask_source {
        write_mask_source()?;
    }
    let use_proc =
        prebuilt.proc && prebuilt_fits(ops, "/proc", |op| matches!(op, MountOp::Proc { .. }));
    let use_dev =
        prebuilt.dev && prebuilt_fits(ops, "/dev", |op| matches!(op, MountOp::Dev { .. }));
    for (made, used, path) in [
        (prebuilt.proc, use_proc, "/proc"),
        (prebuilt.dev, use_dev, "/dev"),
    ] {
        if made && !used {
            sys::umount_detach(&new(path))?;
        }
    }
    let rdev = root_dev()?;
    let root_read_only = ops.iter().any(|op| matches!(op, MountOp::RootReadOnly));
    let mut dev_dir: Option<String> = None;
    let mut synth_n = 0;
    let mut synth_files = false;
    for op in ops {
        match op {
            MountOp::Bind {
                path,
                dir,
                writable,
            } => bind_host(path, path, *dir, *writable, rdev)?,
            MountOp::BindTemp { source, path } => bind_host(source, path, true, true, rdev)?,
            MountOp::EmptyDir { path } => ensure(&new(path), true, rdev)?,
            MountOp::Proc { path } if use_proc && path == "/proc" => {}
            MountOp::Proc { path } => mount_proc(&new(path), rdev)?,
            MountOp::Dev { path } => {
                let t = new(path);
                if !(use_dev && path == "/dev") {
                    mount_dev(&t, rdev)?;
                }
                dev_dir = Some(t);
            }
            MountOp::Device { path, writable, .. } => {
                bind_device(path, *writable, rdev, dev_dir.as_deref())?
            }
            MountOp::Synth { path, content } => {
                // Numbered like `write_synth`; read-only from the source mount.
                synth_n += 1;
                let t = new(path);
                // Nothing there, in the box root, which ends read-only: a
                // file of the root itself (no mount to make and tear down).
                if root_read_only && sys::lstat(&t)?.is_none() {
                    if let Some(parent) = t.rfind('/').map(|i| &t[..i]) {
                        let on_root = ensure(parent, true, rdev).is_ok()
                            && sys::lstat(parent)?.is_some_and(|st| st.st_dev == rdev);
                        if on_root {
                            sys::create_file(&t, content.as_bytes(), 0o444)?;
                            continue;
                        }
                    }
                }
                if ensure(&t, false, rdev).is_err() {
                    continue; // e.g. /etc is a host bind without this file: nothing to hide
                }
                if !synth_files {
                    write_synth_files(ops)?;
                    synth_files = true;
                }
                let src = format!("{SYNTH_FILES}/{synth_n}");
                sys::mount(Some(&src), &t, None, BIND, None)?;
            }
            MountOp::Symlink { path, target } => {
                let t = new(path);
                if sys::lstat(&t)?.is_none() {
                    sys::symlink(target, &t)?;
                }
            }
            MountOp::Pin { path } => {
                let t = new(path);
                if sys::lstat(&t)?.is_none() {
                    continue;
                }
                sys::mount(Some(&t), &t, None, RBIND, None)?;
                sys::harden(&t)?;
            }
            MountOp::ReadOnly { path } => {
                let t = new(path);
                if sys::lstat(&t)?.is_none() {
                    continue;
                }
                if !is_mountpoint(&t)? {
                    sys::mount(Some(&t), &t, None, RBIND, None)?;
                }
                sys::make_readonly(&t, true)?;
            }
            MountOp::MaskDir { path } => {
                let t = new(path);
                if sys::lstat(&t)?.is_some() {
                    mask_dir(&t)?;
                }
            }
            MountOp::MaskFile { path } => {
                let t = new(path);
                if sys::lstat(&t)?.is_some() {
                    mask_file(&t)?;
                }
            }
            MountOp::MaskPlaceholder { path } => {
                let t = new(path);
                if sys::lstat(&t)?.is_none() {
                    return Err(SandboxError::Root(format!(
                        "{path} is denied and does not exist, and terra's placeholder for it is \
                         not there: the box could create it"
                    )));
                }
                mask_file(&t)?;
            }
            MountOp::ProtectCreate { path } => {
                let t = new(path);
                ensure(&t, true, rdev)?;
                mask_dir(&t)?;
            }
            MountOp::RootReadOnly => sys::make_readonly(NEW, false)?,
        }
    }
    if let Some(d) = dev_dir {
        sys::make_readonly(&d, false)?;
    }
    for d in SYS_MASK_DIRS {
        let t = new(d);
        if sys::lstat(&t)?.is_some_and(|st| sys::is_dir(&st)) {
            mask_dir(&t)?;
        }
    }
    Ok(())
}

fn mount_proc(t: &str, rdev: u64) -> Result<()> {
    ensure(t, true, rdev)?;
    proc_at(t)
}

/// A new procfs at `t` (which exists), its sensitive parts masked.
fn proc_at(t: &str) -> Result<()> {
    sys::mount(Some("proc"), t, Some("proc"), NOSUID | NODEV | NOEXEC, None)?;
    for f in PROC_MASK_FILES {
        let p = format!("{t}/{f}");
        if sys::lstat(&p)?.is_some() {
            mask_file(&p)?;
        }
    }
    for d in PROC_MASK_DIRS {
        let p = format!("{t}/{d}");
        if sys::lstat(&p)?.is_some() {
            mask_dir(&p)?;
        }
    }
    for d in PROC_READ_ONLY_DIRS {
        let p = format!("{t}/{d}");
        if sys::lstat(&p)?.is_some() {
            sys::mount(Some(&p), &p, None, RBIND, None)?;
            sys::make_readonly(&p, true)?;
        }
    }
    Ok(())
}

fn mount_dev(t: &str, rdev: u64) -> Result<()> {
    ensure(t, true, rdev)?;
    new_fs("tmpfs", t, NOSUID | NOEXEC, "mode=0755")?;
    for n in DEV_NODES {
        let host = format!("{OLD}/dev/{n}");
        if sys::lstat(&host)?.is_none() {
            continue;
        }
        let p = format!("{t}/{n}");
        sys::touch(&p, 0o666)?;
        sys::mount(Some(&host), &p, None, BIND, None)?;
    }
    let pts = format!("{t}/pts");
    sys::mkdir(&pts, 0o755)?;
    new_fs(
        "devpts",
        &pts,
        NOSUID | NOEXEC,
        "newinstance,ptmxmode=0666,mode=0620",
    )?;
    sys::symlink("pts/ptmx", &format!("{t}/ptmx"))?;
    let shm = format!("{t}/shm");
    sys::mkdir(&shm, 0o755)?;
    new_fs("tmpfs", &shm, NOSUID | NODEV, "mode=1777")?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        sys::symlink(target, &format!("{t}/{name}"))?;
    }
    Ok(())
}

/// The vm backend's root for QEMU (between `apply` and the end of staging):
/// a tmpfs holding, read-only, the host paths QEMU needs (`host_paths`: its
/// binary's tree, the loader's cache, the cached kernel and initramfs; a
/// top-level symlink such as `/lib -> usr/lib` as the same symlink), terra's
/// own executable at `terra_at` (the network forwarder QEMU spawns), a
/// /dev of null, zero, full, random, urandom (and /dev/kvm with `kvm`), a
/// procfs of the box's PID namespace, and the box's tree built by `apply`
/// moved to `export`: the 9p share. Then it becomes the root and the host
/// is detached. Nothing of QEMU's own root is in the share.
pub fn enter_vm_root(host_paths: &[String], kvm: bool, terra_at: &str, export: &str) -> Result<()> {
    const VM: &str = "/vmroot";
    sys::mkdir(VM, 0o700)?;
    new_fs("tmpfs", VM, NOSUID | NODEV, "mode=0755")?;
    let at = |p: &str| format!("{VM}{p}");
    let mkdirs = |p: &str| -> Result<()> {
        let mut cur = String::new();
        for part in p.split('/').filter(|s| !s.is_empty()) {
            cur.push('/');
            cur.push_str(part);
            if sys::lstat(&at(&cur))?.is_none() {
                sys::mkdir(&at(&cur), 0o755)?;
            }
        }
        Ok(())
    };
    for p in host_paths {
        if !p.starts_with('/') || p.contains("/../") || p.ends_with("/..") {
            return Err(SandboxError::Root(format!(
                "QEMU's host path {p} is not absolute and plain"
            )));
        }
        let host = old(p);
        let Some(st) = sys::lstat(&host)? else {
            continue;
        };
        let parent = p.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        mkdirs(parent)?;
        let t = at(p);
        match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => {
                let text = std::fs::read_link(&host)
                    .map_err(|e| SandboxError::io_at("readlink", &e, host.clone()))?;
                let text = text.to_str().ok_or_else(|| {
                    SandboxError::Unsupported(format!("{p}: a link that is not UTF-8"))
                })?;
                sys::symlink(text, &t)?;
            }
            libc::S_IFDIR => {
                mkdirs(p)?;
                sys::mount(Some(&host), &t, None, RBIND, None)?;
                sys::harden_readonly(&t)?;
            }
            _ => {
                sys::touch(&t, 0o444)?;
                sys::mount(Some(&host), &t, None, BIND, None)?;
                sys::harden_readonly(&t)?;
            }
        }
    }
    // terra's executable, for the forwarder QEMU spawns (exec allowed):
    // bound by its host path (the running file's mount belongs to the
    // caller's mount namespace, so /proc/self/exe cannot be bound), then
    // checked to be the very file this process runs.
    let exe = std::fs::read_link("/oldroot/proc/self/exe")
        .map_err(|e| SandboxError::io_at("readlink", &e, "/proc/self/exe"))?;
    let exe = exe
        .to_str()
        .filter(|p| p.starts_with('/') && !p.ends_with(" (deleted)"))
        .ok_or_else(|| {
            SandboxError::Root(format!(
                "terra's executable {} has no usable path",
                exe.display()
            ))
        })?
        .to_string();
    sys::touch(&at(terra_at), 0o555)?;
    sys::mount(Some(&old(&exe)), &at(terra_at), None, BIND, None)?;
    sys::make_readonly(&at(terra_at), false)?;
    let running = nix::sys::stat::stat("/oldroot/proc/self/exe")
        .map_err(|e| SandboxError::sys_at("stat", e, "/proc/self/exe"))?;
    let bound = sys::lstat(&at(terra_at))?.ok_or_else(|| vanished(terra_at))?;
    if (bound.st_dev, bound.st_ino) != (running.st_dev, running.st_ino) {
        return Err(SandboxError::Root(format!(
            "{exe} is no longer the executable terra runs from (replaced since it started)"
        )));
    }
    let dev = at("/dev");
    sys::mkdir(&dev, 0o755)?;
    new_fs("tmpfs", &dev, NOSUID | NOEXEC, "mode=0755")?;
    let mut nodes: Vec<&str> = vec!["null", "zero", "full", "random", "urandom"];
    if kvm {
        nodes.push("kvm");
    }
    for n in nodes {
        let host = format!("{OLD}/dev/{n}");
        if sys::lstat(&host)?.is_none() {
            continue;
        }
        let p = format!("{dev}/{n}");
        sys::touch(&p, 0o666)?;
        sys::mount(Some(&host), &p, None, BIND, None)?;
    }
    sys::make_readonly(&dev, false)?;
    let proc_ = at("/proc");
    sys::mkdir(&proc_, 0o555)?;
    proc_at(&proc_)?;
    let e = at(export);
    sys::mkdir(&e, 0o755)?;
    sys::mount(Some(NEW), &e, None, MsFlags::MS_MOVE, None)?;
    sys::make_readonly(VM, false)?;
    sys::chdir(VM)?;
    sys::pivot_root(".", ".")?;
    sys::umount_detach(".")?;
    sys::chdir("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(path: &str) -> MountOp {
        MountOp::Bind {
            path: path.into(),
            dir: true,
            writable: false,
        }
    }

    #[test]
    fn a_prebuilt_proc_or_dev_stands_only_where_nothing_covered_it() {
        let is_proc = |op: &MountOp| matches!(op, MountOp::Proc { .. });
        let proc_at = |p: &str| MountOp::Proc { path: p.into() };
        // The usual program: binds beside it, deeper ops after it.
        let ops = vec![bind("/usr"), proc_at("/proc"), bind("/usr/lib")];
        assert!(prebuilt_fits(&ops, "/proc", is_proc));
        // A grant of the root, or of /proc itself, before it covers it.
        let ops = vec![bind("/"), proc_at("/proc")];
        assert!(!prebuilt_fits(&ops, "/proc", is_proc));
        let ops = vec![bind("/proc"), proc_at("/proc")];
        assert!(!prebuilt_fits(&ops, "/proc", is_proc));
        // The vm backend's program has an empty directory there instead.
        let ops = vec![MountOp::EmptyDir {
            path: "/proc".into(),
        }];
        assert!(!prebuilt_fits(&ops, "/proc", is_proc));
        // A procfs elsewhere is not this one.
        let ops = vec![proc_at("/srv/proc")];
        assert!(!prebuilt_fits(&ops, "/proc", is_proc));
    }
}
