//! What a vm run needs on the host, found and prepared before the box
//! starts (by `terra run`, as the caller): QEMU, a kernel with its modules,
//! the vmlinux taken out of its image and the initramfs holding terra, the
//! libraries terra loads (for a dynamically linked build) and the modules.
//!
//! The vmlinux and the initramfs are cached in
//! `$XDG_CACHE_HOME/terra/vm/<key>/` (else `~/.cache/...`), where key is
//! the SHA-256 of the kernel image, the modules and terra's loadable bytes:
//! a new kernel or a new terra gets a new directory. Every directory on
//! the way below the cache base is opened without following a symlink and
//! must belong to the caller with no group or other write access; files
//! are written under a temporary name and renamed into place, relative to
//! the directory's descriptor.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::{fstat, mkdirat, Mode};
use sha2::{Digest, Sha256};

use crate::accel::{self, Accel};
use crate::kernel::{self, Candidate};
use crate::modules::{self, DepTable};
use crate::qemu::Boot;
use crate::{cpio, elf};

#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    #[error("{what} is not available: {advice}")]
    Missing { what: String, advice: String },
    #[error("{0}")]
    Kernel(#[from] kernel::KernelError),
    #[error("the guest kernel's modules: {0}")]
    Modules(#[from] modules::ModuleError),
    #[error("{path}: {why}")]
    Io { path: String, why: String },
    #[error("the cache directory {path}: {why}")]
    Cache { path: String, why: String },
}

fn io(path: impl AsRef<Path>, e: impl std::fmt::Display) -> AssetError {
    AssetError::Io {
        path: path.as_ref().display().to_string(),
        why: e.to_string(),
    }
}

/// The run's wishes (command line, profile).
#[derive(Debug, Clone, Default)]
pub struct Wishes {
    /// `--kernel PATH` (a bzImage).
    pub kernel: Option<PathBuf>,
    pub memory_mib: Option<u32>,
    /// How long the guest may take to report ready (default per accelerator).
    pub ready_ms: Option<u64>,
}

pub const DEFAULT_MEMORY_MIB: u32 = 256;
/// The guest's report deadline: TCG boots in 2-3 s on a quiet host, much
/// slower on a loaded one; KVM in well under a second.
pub const READY_MS_TCG: u64 = 30_000;
pub const READY_MS_KVM: u64 = 10_000;

const QEMU_DIRS: [&str; 3] = ["/usr/bin", "/usr/local/bin", "/bin"];

/// The QEMU system emulator for this machine.
pub fn qemu_binary() -> Result<PathBuf, AssetError> {
    let name = qemu_name();
    QEMU_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| AssetError::Missing {
            what: name.into(),
            advice: format!(
                "install QEMU (Debian, Ubuntu: apt-get install {})",
                if cfg!(target_arch = "aarch64") {
                    "qemu-system-arm"
                } else {
                    "qemu-system-x86"
                }
            ),
        })
}

fn qemu_name() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "qemu-system-aarch64"
    } else {
        "qemu-system-x86_64"
    }
}

/// The kernel: `wished` (its release from the bzImage header), else the
/// newest /boot/vmlinuz-* with modules installed.
pub fn choose_kernel(wished: Option<&Path>) -> Result<Candidate, AssetError> {
    let has_modules = |d: &Path| d.join("modules.dep").is_file();
    match wished {
        Some(p) => {
            let bytes = std::fs::read(p).map_err(|e| AssetError::Missing {
                what: format!("the kernel {}", p.display()),
                advice: format!(
                    "it cannot be read ({e}); name a bzImage whose modules are installed under /lib/modules \
                     (--kernel PATH, or vmKernel in the profile's NAME.limits.json), or name none to take the \
                     newest /boot/vmlinuz-*"
                ),
            })?;
            let release =
                kernel::bzimage_version(&bytes).ok_or_else(|| kernel::KernelError::NotBzImage {
                    path: p.display().to_string(),
                })?;
            let modules = Path::new("/lib/modules").join(&release);
            if !has_modules(&modules) {
                return Err(AssetError::Missing {
                    what: format!(
                        "{}/modules.dep for kernel {release} ({})",
                        modules.display(),
                        p.display()
                    ),
                    advice: format!("install that kernel's modules, then run `depmod {release}`"),
                });
            }
            Ok(Candidate {
                image: p.to_path_buf(),
                release,
                modules,
            })
        }
        None => {
            let names: Vec<String> = std::fs::read_dir("/boot")
                .map(|rd| {
                    rd.flatten()
                        .filter_map(|e| e.file_name().into_string().ok())
                        .collect()
                })
                .unwrap_or_default();
            Ok(kernel::newest(
                Path::new("/boot"),
                &names,
                Path::new("/lib/modules"),
                &has_modules,
            )?)
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A module file's bytes, decompressed when the kernel ships it compressed.
fn module_bytes(path: &Path) -> Result<Vec<u8>, AssetError> {
    let raw = std::fs::read(path).map_err(|e| io(path, e))?;
    let name = path.as_os_str().as_bytes();
    let mut out = Vec::new();
    if name.ends_with(b".ko.xz") {
        lzma_rust2::XzReader::new(&raw[..], true)
            .read_to_end(&mut out)
            .map_err(|e| io(path, e))?;
        Ok(out)
    } else if name.ends_with(b".ko.zst") {
        ruzstd::decoding::StreamingDecoder::new(&raw[..])
            .map_err(|e| io(path, e))?
            .read_to_end(&mut out)
            .map_err(|e| io(path, e))?;
        Ok(out)
    } else if name.ends_with(b".ko") {
        Ok(raw)
    } else {
        Err(io(
            path,
            "a compression terra does not read (only .ko, .ko.xz, .ko.zst)",
        ))
    }
}

const LIB_DIRS: [&str; 6] = [
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
];

/// terra's executable (its loadable part) and, when it is dynamically
/// linked, its loader and libraries: (path in the initramfs, bytes).
fn terra_files() -> Result<Vec<(String, Vec<u8>)>, AssetError> {
    let exe = std::fs::read("/proc/self/exe").map_err(|e| io("/proc/self/exe", e))?;
    let mut files = vec![(
        "/terra".to_string(),
        elf::loadable(&exe).map_err(|e| io("terra's executable", e))?,
    )];
    let Some(interp) = elf::interpreter(&exe).map_err(|e| io("terra's executable", e))? else {
        return Ok(files);
    };
    let interp_bytes = std::fs::read(&interp).map_err(|e| io(&interp, e))?;
    files.push((interp.clone(), interp_bytes));
    let mut seen = BTreeSet::new();
    let mut todo: Vec<String> = elf::needed(&exe).map_err(|e| io("terra's executable", e))?;
    let interp_name = interp.rsplit('/').next().unwrap_or_default().to_string();
    while let Some(lib) = todo.pop() {
        if lib == interp_name || !seen.insert(lib.clone()) {
            continue;
        }
        let found = LIB_DIRS
            .iter()
            .map(|d| Path::new(d).join(&lib))
            .find(|p| p.is_file())
            .ok_or_else(|| AssetError::Missing {
                what: format!("the library {lib} terra is linked with"),
                advice: "use the static build (make build)".into(),
            })?;
        let bytes = std::fs::read(&found).map_err(|e| io(&found, e))?;
        todo.extend(elf::needed(&bytes).map_err(|e| io(&found, e))?);
        files.push((found.display().to_string(), bytes));
    }
    Ok(files)
}

/// The modules' load order and bytes: (file name in the initramfs, bytes).
fn module_files(k: &Candidate) -> Result<Vec<(String, Vec<u8>)>, AssetError> {
    let dep_path = k.modules.join("modules.dep");
    let dep = std::fs::read_to_string(&dep_path).map_err(|e| io(&dep_path, e))?;
    let table = DepTable::parse(&dep)?;
    let builtin = std::fs::read_to_string(k.modules.join("modules.builtin"))
        .map(|t| modules::builtin(&t))
        .unwrap_or_default();
    let (base, net) = modules::split_order(&table, &builtin)?;
    let mut files = Vec::new();
    for (dir, order) in [("/modules", base), ("/modules/net", net)] {
        for (i, rel) in order.iter().enumerate() {
            let bytes = module_bytes(&k.modules.join(rel))?;
            files.push((format!("{dir}/{i:02}-{}.ko", modules::name_of(rel)), bytes));
        }
    }
    Ok(files)
}

/// The initramfs: terra (with its loader and libraries) and the modules.
pub fn initramfs(terra: &[(String, Vec<u8>)], modules: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut w = cpio::Writer::new();
    let mut made = BTreeSet::new();
    for d in ["/dev", "/proc", "/sys", "/newroot"] {
        made.insert(d.to_string());
        w.dir(d, 0o755);
    }
    for (path, bytes) in terra {
        w.parents(path, &mut made);
        w.file(path, 0o755, bytes);
    }
    for (path, bytes) in modules {
        w.parents(path, &mut made);
        w.file(path, 0o644, bytes);
    }
    w.finish()
}

/// The cache base: `$XDG_CACHE_HOME` or `$HOME/.cache` (absolute only).
fn cache_base() -> Result<PathBuf, AssetError> {
    let abs = |v: Option<std::ffi::OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    abs(std::env::var_os("XDG_CACHE_HOME"))
        .or_else(|| abs(std::env::var_os("HOME")).map(|h| h.join(".cache")))
        .ok_or_else(|| AssetError::Missing {
            what: "a cache directory".into(),
            advice: "set XDG_CACHE_HOME or HOME".into(),
        })
}

/// Opens (making it if absent, mode 0700) the directory `name` in `dir`,
/// never through a symlink; it must be the caller's, not writable by others.
fn sub_dir(dir: &OwnedFd, name: &str, shown: &Path) -> Result<OwnedFd, AssetError> {
    let cache = |why: String| AssetError::Cache {
        path: shown.display().to_string(),
        why,
    };
    match mkdirat(Some(dir.as_raw_fd()), name, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
        Err(e) => return Err(cache(format!("mkdir: {e}"))),
    }
    let fd = openat(
        Some(dir.as_raw_fd()),
        name,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
        Mode::empty(),
    )
    .map_err(|e| cache(format!("open (no symlink followed): {e}")))?;
    // SAFETY: openat returned a new descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    check_owned(&fd).map_err(cache)?;
    Ok(fd)
}

fn check_owned(fd: &OwnedFd) -> Result<(), String> {
    let st = fstat(fd.as_raw_fd()).map_err(|e| format!("fstat: {e}"))?;
    if st.st_uid != nix::unistd::geteuid().as_raw() {
        return Err(format!("belongs to uid {}, not to the caller", st.st_uid));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(format!(
            "mode {:o} lets others write it",
            st.st_mode & 0o7777
        ));
    }
    Ok(())
}

/// Whether `name` in `dir` is a regular file of the caller's (no symlink).
fn cached(dir: &OwnedFd, name: &str) -> bool {
    openat(
        Some(dir.as_raw_fd()),
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()
    // SAFETY: openat returned a new descriptor owned by nobody else.
    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
    .and_then(|fd| fstat(fd.as_raw_fd()).ok())
    .is_some_and(|st| {
        st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_uid == nix::unistd::geteuid().as_raw()
    })
}

/// Writes `bytes` as `name` in `dir`: a new temporary file, then renamed
/// over the name (a reader sees the old file or the whole new one).
fn write_atomic(dir: &OwnedFd, name: &str, bytes: &[u8], shown: &Path) -> Result<(), AssetError> {
    let mut rnd = [0u8; 8];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut rnd));
    let tmp = format!(".tmp-{}-{}", std::process::id(), hex(&rnd));
    let fd = openat(
        Some(dir.as_raw_fd()),
        tmp.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .map_err(|e| io(shown.join(&tmp), e))?;
    // SAFETY: openat returned a new descriptor owned by nobody else.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let written = {
        use std::io::Write;
        (&file).write_all(bytes).and_then(|_| file.sync_all())
    };
    let renamed = written.map_err(|e| io(shown.join(&tmp), e)).and_then(|_| {
        renameat(
            Some(dir.as_raw_fd()),
            tmp.as_str(),
            Some(dir.as_raw_fd()),
            name,
        )
        .map_err(|e| io(shown.join(name), e))
    });
    if renamed.is_err() {
        let _ = nix::unistd::unlinkat(
            Some(dir.as_raw_fd()),
            tmp.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    renamed
}

/// How many cache entries are kept (each holds a vmlinux of tens of MB).
const KEEP_ENTRIES: usize = 3;

/// Removes all but the newest [`KEEP_ENTRIES`] cache entries (and never
/// `current`): only directories named like a key, holding only regular
/// files, each removed relative to the cache's descriptor without following
/// a symlink. A run still booting from a removed entry keeps its open files.
fn prune(vm_dir: &OwnedFd, current: &str) {
    use nix::dir::{Dir, Type};
    let Ok(mut d) = Dir::openat(
        Some(vm_dir.as_raw_fd()),
        ".",
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let mut entries: Vec<(i64, String)> = d
        .iter()
        .flatten()
        .filter(|e| e.file_type() == Some(Type::Directory))
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
        .filter(|n| n.len() == 32 && n.bytes().all(|b| b.is_ascii_hexdigit()) && n != current)
        .filter_map(|n| {
            nix::sys::stat::fstatat(
                Some(vm_dir.as_raw_fd()),
                n.as_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .ok()
            .filter(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
            .map(|st| (st.st_mtime, n))
        })
        .collect();
    entries.sort();
    let excess = entries.len().saturating_sub(KEEP_ENTRIES - 1);
    for (_, name) in entries.into_iter().take(excess) {
        let Ok(fd) = openat(
            Some(vm_dir.as_raw_fd()),
            name.as_str(),
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
            Mode::empty(),
        ) else {
            continue;
        };
        // SAFETY: openat returned a new descriptor owned by nobody else.
        let entry = unsafe { OwnedFd::from_raw_fd(fd) };
        if let Ok(mut inner) = Dir::openat(
            Some(entry.as_raw_fd()),
            ".",
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            let files: Vec<String> = inner
                .iter()
                .flatten()
                .filter(|e| e.file_type() == Some(Type::File))
                .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
                .collect();
            for f in files {
                let _ = nix::unistd::unlinkat(
                    Some(entry.as_raw_fd()),
                    f.as_str(),
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                );
            }
        }
        let _ = nix::unistd::unlinkat(
            Some(vm_dir.as_raw_fd()),
            name.as_str(),
            nix::unistd::UnlinkatFlags::RemoveDir,
        );
    }
}

/// The host's TSC frequency in kHz: rdtsc against CLOCK_MONOTONIC_RAW over
/// 20 ms (x86_64 only), cached per host boot.
fn tsc_khz(vm_dir: &OwnedFd, vm_path: &Path) -> Option<u64> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let name = format!("tsc-khz-{}", boot_id.trim());
    if let Ok(fd) = openat(
        Some(vm_dir.as_raw_fd()),
        name.as_str(),
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        // SAFETY: openat returned a new descriptor owned by nobody else.
        let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let mut s = String::new();
        if f.read_to_string(&mut s).is_ok() {
            if let Ok(k) = s.trim().parse::<u64>() {
                return Some(k);
            }
        }
    }
    let khz = crate::tsc::measure_khz()?;
    let _ = write_atomic(vm_dir, &name, format!("{khz}\n").as_bytes(), vm_path);
    Some(khz)
}

/// How long the KVM probe boot may take to report.
const KVM_PROBE_MS: u64 = 10_000;

/// Whether a guest boots under KVM here: QEMU started directly (no
/// workload, no share is mounted: the guest waits for a configuration that
/// never comes) with the cached kernel and initramfs, which must say Ready
/// on the control channel within [`KVM_PROBE_MS`]. On a paravirtualized or
/// broken KVM the guest dies or stalls instead. The answer is cached per
/// host boot.
fn kvm_probe(
    vm_dir: &OwnedFd,
    vm_path: &Path,
    qemu: &Path,
    dir: &Path,
    tsc: Option<u64>,
) -> Result<(), String> {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let name = format!("kvm-probe-{}", boot_id.trim());
    if let Ok(fd) = openat(
        Some(vm_dir.as_raw_fd()),
        name.as_str(),
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        // SAFETY: openat returned a new descriptor owned by nobody else.
        let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let mut s = String::new();
        if f.read_to_string(&mut s).is_ok() {
            return match s.trim() {
                "ok" => Ok(()),
                other => Err(other.trim_start_matches("failed: ").to_string()),
            };
        }
    }
    let result = run_probe(qemu, dir, tsc);
    let line = match &result {
        Ok(()) => "ok\n".to_string(),
        Err(why) => format!("failed: {why}\n"),
    };
    let _ = write_atomic(vm_dir, &name, line.as_bytes(), vm_path);
    result
}

fn run_probe(qemu: &Path, dir: &Path, tsc: Option<u64>) -> Result<(), String> {
    use std::os::unix::net::UnixStream;
    use std::os::unix::process::CommandExt;
    let boot = Boot {
        qemu: qemu.display().to_string(),
        qemu_version: String::new(),
        vmlinux: dir.join("vmlinux").display().to_string(),
        initramfs: dir.join("initramfs.cpio").display().to_string(),
        kernel: String::new(),
        kernel_sha256: String::new(),
        kernel_release: String::new(),
        accel: Accel::Kvm,
        accel_reason: String::new(),
        tsc_khz: tsc,
        memory_mib: DEFAULT_MEMORY_MIB,
        cpus: 1,
        ready_ms: KVM_PROBE_MS,
        host_paths: Vec::new(),
        terra_in_root: String::new(),
    };
    // The share is the cache directory, read-only; the guest never mounts it.
    let mut argv = crate::qemu::argv(&boot, None, &dir.display().to_string());
    if let Some(fsdev) = argv.iter_mut().find(|a| a.starts_with("local,id=root,")) {
        fsdev.push_str(",readonly=on");
    }
    let (ours, theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    let theirs_fd = theirs.as_raw_fd();
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: between fork and exec the closure only calls dup2 and fcntl.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(theirs_fd, crate::qemu::CONTROL_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot start QEMU: {e}"))?;
    drop(theirs);
    ours.set_read_timeout(Some(std::time::Duration::from_millis(KVM_PROBE_MS)))
        .map_err(|e| e.to_string())?;
    let mut dec = crate::proto::Decoder::new();
    let mut buf = [0u8; 64];
    let result = loop {
        match (&ours).read(&mut buf) {
            Ok(0) => break Err("QEMU ended before the guest reported".to_string()),
            Ok(n) => {
                dec.push(&buf[..n]);
                match dec.next_from_guest() {
                    Ok(Some(crate::proto::FromGuest::Ready)) => break Ok(()),
                    Ok(_) => continue,
                    Err(e) => break Err(e.to_string()),
                }
            }
            Err(_) => break Err(format!("no report within {KVM_PROBE_MS} ms")),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// QEMU's version line (`QEMU emulator version 7.2.22 ...`).
fn qemu_version(qemu: &Path) -> String {
    std::process::Command::new(qemu)
        .arg("--version")
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Everything a vm run boots with; builds the cache entry when it is absent.
pub fn prepare(w: &Wishes) -> Result<Boot, AssetError> {
    supported_arch()?;
    let qemu = qemu_binary()?;
    let k = choose_kernel(w.kernel.as_deref())?;
    let image = std::fs::read(&k.image).map_err(|e| io(&k.image, e))?;
    let kernel_sha256 = hex(&Sha256::digest(&image));
    let mods = module_files(&k)?;
    let terra = terra_files()?;
    let mut h = Sha256::new();
    h.update(b"terra-vm-cache-1\0");
    h.update(kernel_sha256.as_bytes());
    for (p, b) in mods.iter().chain(terra.iter()) {
        h.update(p.as_bytes());
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    }
    let key = hex(&h.finalize()[..16]);

    let base = cache_base()?;
    std::fs::create_dir_all(&base).map_err(|e| AssetError::Cache {
        path: base.display().to_string(),
        why: e.to_string(),
    })?;
    let base_fd = nix::fcntl::open(
        &base,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
        Mode::empty(),
    )
    .map_err(|e| AssetError::Cache {
        path: base.display().to_string(),
        why: format!("open (no symlink followed): {e}"),
    })?;
    // SAFETY: open returned a new descriptor owned by nobody else.
    let base_fd = unsafe { OwnedFd::from_raw_fd(base_fd) };
    let terra_dir = sub_dir(&base_fd, "terra", &base.join("terra"))?;
    let vm_path = base.join("terra/vm");
    let vm_dir = sub_dir(&terra_dir, "vm", &vm_path)?;
    let dir_path = vm_path.join(&key);
    let dir = sub_dir(&vm_dir, &key, &dir_path)?;
    if !cached(&dir, "vmlinux") {
        let vmlinux = kernel::extract_vmlinux(&image, &k.image.display().to_string())?;
        write_atomic(&dir, "vmlinux", &vmlinux, &dir_path)?;
        // A new entry (a new kernel or a new terra): old ones go.
        prune(&vm_dir, &key);
    }
    if !cached(&dir, "initramfs.cpio") {
        write_atomic(&dir, "initramfs.cpio", &initramfs(&terra, &mods), &dir_path)?;
    }
    let mut facts = accel::host_facts();
    let (mut accel, mut accel_reason) = accel::decide(&facts);
    let tsc = tsc_khz(&vm_dir, &vm_path);
    if accel == Accel::Kvm {
        facts.probe = Some(kvm_probe(&vm_dir, &vm_path, &qemu, &dir_path, tsc));
        (accel, accel_reason) = accel::decide(&facts);
    }
    let mut host_paths = vec!["/usr".to_string(), dir_path.display().to_string()];
    for p in ["/lib", "/lib64", "/bin", "/etc/ld.so.cache"] {
        if Path::new(p).exists() || std::fs::symlink_metadata(p).is_ok() {
            host_paths.push(p.into());
        }
    }
    let _ = dir.as_fd();
    Ok(Boot {
        qemu: qemu.display().to_string(),
        qemu_version: qemu_version(&qemu),
        vmlinux: dir_path.join("vmlinux").display().to_string(),
        initramfs: dir_path.join("initramfs.cpio").display().to_string(),
        kernel: k.image.display().to_string(),
        kernel_sha256,
        kernel_release: k.release,
        accel,
        accel_reason,
        tsc_khz: tsc,
        memory_mib: w.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB),
        cpus: 1,
        ready_ms: w.ready_ms.unwrap_or(match accel {
            Accel::Kvm => READY_MS_KVM,
            Accel::Tcg => READY_MS_TCG,
        }),
        host_paths,
        terra_in_root: "/terra".into(),
    })
}

/// The guest's machine (QEMU's microvm) and its boot through the PVH note
/// are x86_64 only; an aarch64 guest (`-M virt`) is not built yet.
fn supported_arch() -> Result<(), AssetError> {
    if cfg!(target_arch = "x86_64") {
        Ok(())
    } else {
        Err(AssetError::Missing {
            what: format!("the vm backend on {}", std::env::consts::ARCH),
            advice:
                "it runs x86_64 guests only so far (QEMU's microvm machine); use --backend linux"
                    .into(),
        })
    }
}

/// Whether the vm backend can run here, and why not (`terra backends`,
/// `terra doctor`): QEMU and a kernel with modules.
pub fn usable() -> Result<String, String> {
    supported_arch().map_err(|e| e.to_string())?;
    let qemu = qemu_binary().map_err(|e| e.to_string())?;
    let k = choose_kernel(None).map_err(|e| e.to_string())?;
    let (accel, why) = accel::decide(&accel::host_facts());
    let _ = OsStr::new("");
    Ok(format!(
        "{} with kernel {} ({}), accelerator {} ({why})",
        qemu.display(),
        k.release,
        k.image.display(),
        accel.name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_fd(p: &Path) -> OwnedFd {
        std::fs::File::open(p).unwrap().into()
    }

    #[test]
    fn prune_keeps_the_newest_entries_and_the_current_one() {
        let t = tempfile::tempdir().unwrap();
        let key = |i: usize| format!("{i:032x}");
        for i in 0..6 {
            let d = t.path().join(key(i));
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("vmlinux"), b"x").unwrap();
            let when = nix::sys::time::TimeSpec::new(1_000_000 + i as i64 * 100, 0);
            nix::sys::stat::utimensat(
                None,
                &d,
                &when,
                &when,
                nix::sys::stat::UtimensatFlags::NoFollowSymlink,
            )
            .unwrap();
        }
        // Not an entry: kept whatever its age.
        std::fs::create_dir(t.path().join("not-a-key")).unwrap();
        std::os::unix::fs::symlink("/", t.path().join(key(99))).unwrap();
        // The oldest is the current one: kept too.
        prune(&dir_fd(t.path()), &key(0));
        let mut left: Vec<String> = std::fs::read_dir(t.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut want = vec![key(0), key(4), key(5), key(99), "not-a-key".to_string()];
        want.sort();
        assert_eq!(left, want);
    }
}
