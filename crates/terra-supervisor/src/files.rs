//! The files terra reads and writes for its caller, in one place.
//!
//! Inputs: [`read_capped`] reads at most the limit plus one byte, whatever the
//! file is (a regular file, a pipe, `/dev/zero`), and refuses anything larger.
//!
//! Outputs: [`OutDir`] is an output's directory, opened once, before anything
//! else can change it (for a receipt: before the workload starts), without
//! following a symlink in any component ([`Follow::Nothing`]) or following
//! symlinks of the directory part only ([`Follow::DirComponents`], for
//! commands that run nothing beside them). Everything after that is relative
//! to the descriptor, so replacing a directory of the path by a symlink later
//! changes nothing. The final name is never followed: it must be absent or a
//! regular file ([`Existing`] decides whether a regular file may be
//! replaced); a symlink, FIFO, device, socket or directory there is refused
//! and left untouched.
//!
//! On Linux a file is written into an anonymous `O_TMPFILE` in that
//! directory and linked into place once complete, so a writer killed
//! half-way leaves no name behind. Without replacing, it is linked under the final name itself
//! (`linkat` fails if the name appeared meanwhile, so nothing is clobbered).
//! With replacing, it is linked under an unpredictable temporary name and
//! renamed over the final one. File systems without `O_TMPFILE`, and macOS,
//! which has none, get a named temporary file instead
//! (`.NAME.terra-tmp-PID-RANDOM`, `O_EXCL|O_NOFOLLOW`), renamed into place
//! (`RENAME_NOREPLACE`, on macOS `RENAME_EXCL`, when nothing may be
//! replaced); temporary files of this pattern left by processes that no
//! longer exist are removed before a new one is made.
//!
//! Directories are held by an `O_PATH` descriptor on Linux and by an
//! `O_RDONLY` one elsewhere (macOS has no `O_PATH`: the directory must then
//! be readable by its owner, which every directory terra writes into is).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, CWD};
use rustix::io::Errno;

/// How a directory is held: `O_PATH` where it exists (no read permission
/// needed), else read-only.
#[cfg(target_os = "linux")]
const DIR_HOLD: OFlags = OFlags::PATH;
#[cfg(not(target_os = "linux"))]
const DIR_HOLD: OFlags = OFlags::RDONLY;

pub use crate::input::{read_capped, ReadError};

// ----------------------------------------------------------------- outputs

/// How symlinks on the way to an output's directory are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// No component of the directory may be a symlink (receipts, state).
    Nothing,
    /// Symlinks in the directory part are followed when it is opened (the
    /// caller's own path, opened while nothing else runs); never the final name.
    DirComponents,
}

/// What may already exist under the final name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Nothing: an existing entry of any kind is refused.
    Refuse,
    /// A regular file, which is replaced; any other kind is refused.
    ReplaceRegular,
}

/// Why an output was not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutError {
    /// A regular file is there and [`Existing::Refuse`] was asked.
    Exists(String),
    /// Something other than a regular file is there (or on the way there).
    NotRegular(String),
    /// Anything else (the message names the path and the cause).
    Io(String),
}

impl std::fmt::Display for OutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutError::Exists(m) | OutError::NotRegular(m) | OutError::Io(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for OutError {}

/// Splits an output path into its directory and final name; the name must
/// be a plain file name (not `.`, `..` or empty).
pub fn split_output(path: &Path) -> Result<(PathBuf, OsString), OutError> {
    let name = match path.components().next_back() {
        Some(Component::Normal(n)) if !path.as_os_str().as_bytes().ends_with(b"/") => n,
        _ => return Err(OutError::Io(format!("{} names no file", path.display()))),
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name.to_os_string()))
}

/// An output directory, held open by descriptor.
#[derive(Debug)]
pub struct OutDir {
    fd: OwnedFd,
    path: PathBuf,
}

fn kind_words(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "not a regular file",
    }
}

fn errno_io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

impl OutDir {
    /// Opens `dir` for writing outputs into. A relative `dir` starts at the
    /// current directory (which is not looked up by name).
    pub fn open(dir: &Path, follow: Follow) -> Result<OutDir, OutError> {
        let fail = |e: Errno| {
            OutError::Io(format!(
                "cannot open the directory {}: {}",
                dir.display(),
                errno_io(e)
            ))
        };
        let fd = match follow {
            Follow::DirComponents => rustix::fs::openat(
                CWD,
                dir,
                DIR_HOLD | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(fail)?,
            Follow::Nothing => {
                let mut cur = rustix::fs::openat(
                    CWD,
                    if dir.is_absolute() { "/" } else { "." },
                    DIR_HOLD | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(fail)?;
                let mut walked = if dir.is_absolute() {
                    PathBuf::from("/")
                } else {
                    PathBuf::new()
                };
                for comp in dir.components() {
                    let name: &OsStr = match comp {
                        Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
                        Component::ParentDir => OsStr::new(".."),
                        Component::Normal(n) => n,
                    };
                    walked.push(name);
                    cur = match rustix::fs::openat(
                        &cur,
                        name,
                        DIR_HOLD | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    ) {
                        Ok(fd) => fd,
                        Err(e) => {
                            let kind = rustix::fs::statat(&cur, name, AtFlags::SYMLINK_NOFOLLOW)
                                .ok()
                                .map(|st| FileType::from_raw_mode(st.st_mode));
                            return Err(match kind {
                                Some(FileType::Symlink) => OutError::NotRegular(format!(
                                    "{} is a symlink; terra follows no symlink on the way to this file \
                                     (name the real directory, e.g. with realpath)",
                                    walked.display()
                                )),
                                Some(t) if t != FileType::Directory => OutError::NotRegular(format!(
                                    "{} is {}, not a directory",
                                    walked.display(),
                                    kind_words(t)
                                )),
                                _ => OutError::Io(format!(
                                    "cannot open the directory {}: {}",
                                    walked.display(),
                                    errno_io(e)
                                )),
                            });
                        }
                    };
                }
                cur
            }
        };
        Ok(OutDir {
            fd,
            path: dir.to_path_buf(),
        })
    }

    /// The directory as it was named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's descriptor.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn shown(&self, name: &OsStr) -> PathBuf {
        self.path.join(name)
    }

    /// Checks what is under `name` now: absent, or a regular file that
    /// `existing` allows to replace. Anything else is refused.
    pub fn check(&self, name: &OsStr, existing: Existing) -> Result<(), OutError> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(OutError::Io(format!(
                "cannot inspect {}: {}",
                self.shown(name).display(),
                errno_io(e)
            ))),
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile if existing == Existing::ReplaceRegular => Ok(()),
                FileType::RegularFile => Err(OutError::Exists(format!(
                    "{} already exists",
                    self.shown(name).display()
                ))),
                t => Err(OutError::NotRegular(format!(
                    "{} is {}; terra writes regular files only and leaves it untouched",
                    self.shown(name).display(),
                    kind_words(t)
                ))),
            },
        }
    }

    /// Opens `name` as a new file (never an existing entry, never through a
    /// symlink) for appending, mode 0600.
    pub fn create_append(&self, name: &OsStr) -> Result<File, OutError> {
        let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::EXCL;
        self.open_at(name, flags, Mode::from_raw_mode(0o600), "create")
    }

    /// Opens the existing regular file `name` for reading (never through a
    /// symlink).
    pub fn open_read(&self, name: &OsStr) -> Result<File, OutError> {
        self.open_at(name, OFlags::RDONLY, Mode::empty(), "open")
    }

    /// `openat` in this directory, never through a symlink, close-on-exec;
    /// an error says `cannot VERB PATH: CAUSE`.
    fn open_at(
        &self,
        name: &OsStr,
        flags: OFlags,
        mode: Mode,
        verb: &str,
    ) -> Result<File, OutError> {
        rustix::fs::openat(
            &self.fd,
            name,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode,
        )
        .map(File::from)
        .map_err(|e| {
            OutError::Io(format!(
                "cannot {verb} {}: {}",
                self.shown(name).display(),
                errno_io(e)
            ))
        })
    }

    /// Writes `bytes` as `name` atomically: a reader sees the old state or
    /// the complete file. `mode` is the new file's mode (before the umask);
    /// `durable` syncs the data and the directory.
    pub fn write(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        existing: Existing,
        durable: bool,
    ) -> Result<(), OutError> {
        self.check(name, existing)?;
        self.remove_stale(name);
        let io = |what: &str, p: &Path, e: io::Error| {
            OutError::Io(format!("cannot {what} {}: {e}", p.display()))
        };
        let mode = mode_bits(mode);
        #[cfg(target_os = "linux")]
        match rustix::fs::openat(
            &self.fd,
            ".",
            OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
            mode,
        ) {
            Ok(fd) => {
                let mut file = File::from(fd);
                file.write_all(bytes)
                    .and_then(|_| if durable { file.sync_all() } else { Ok(()) })
                    .map_err(|e| io("write", &self.shown(name), e))?;
                if !self.link_tmpfile(&file, name, existing)? {
                    // The anonymous file cannot be linked here (no /proc and
                    // no CAP_DAC_READ_SEARCH for AT_EMPTY_PATH): it goes with
                    // its descriptor; a named temporary file instead.
                    drop(file);
                    self.write_named(name, bytes, mode, existing, durable)?;
                }
            }
            // No O_TMPFILE on this file system (or kernel): a named temporary file.
            Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL | Errno::NOENT) => {
                self.write_named(name, bytes, mode, existing, durable)?
            }
            Err(e) => return Err(io("create a file in", &self.path, errno_io(e))),
        }
        // No O_TMPFILE outside Linux: a named temporary file.
        #[cfg(not(target_os = "linux"))]
        {
            let _ = io;
            self.write_named(name, bytes, mode, existing, durable)?;
        }
        if durable {
            if let Ok(d) = rustix::fs::openat(
                &self.fd,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                let _ = rustix::fs::fsync(d);
            }
        }
        Ok(())
    }

    /// Gives the anonymous file `file` the name `name` (see the module doc).
    /// Ok(false): it could not be linked at all (the caller falls back).
    #[cfg(target_os = "linux")]
    fn link_tmpfile(
        &self,
        file: &File,
        name: &OsStr,
        existing: Existing,
    ) -> Result<bool, OutError> {
        let target: OsString = match existing {
            Existing::Refuse => name.to_os_string(),
            Existing::ReplaceRegular => self.temp_name(name)?,
        };
        let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(file));
        let linked = rustix::fs::linkat(
            CWD,
            proc_path.as_str(),
            &self.fd,
            &target,
            AtFlags::SYMLINK_FOLLOW,
        )
        .or_else(|_| rustix::fs::linkat(file.as_fd(), "", &self.fd, &target, AtFlags::EMPTY_PATH));
        match linked {
            Ok(()) => {}
            Err(Errno::EXIST) if existing == Existing::Refuse => return Err(self.appeared(name)),
            Err(_) => return Ok(false),
        }
        if existing == Existing::ReplaceRegular {
            self.rename_over(&target, name)?;
        }
        Ok(true)
    }

    /// Renames the temporary `tmp` over `name` after checking `name` once
    /// more; removes `tmp` on failure.
    fn rename_over(&self, tmp: &OsStr, name: &OsStr) -> Result<(), OutError> {
        let r = self.check(name, Existing::ReplaceRegular).and_then(|_| {
            rustix::fs::renameat(&self.fd, tmp, &self.fd, name).map_err(|e| {
                OutError::Io(format!(
                    "cannot replace {}: {}",
                    self.shown(name).display(),
                    errno_io(e)
                ))
            })
        });
        if r.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, tmp, AtFlags::empty());
        }
        r
    }

    /// The error for a name that appeared after the check.
    fn appeared(&self, name: &OsStr) -> OutError {
        match self.check(name, Existing::Refuse) {
            Err(e) => e,
            Ok(()) => OutError::Exists(format!("{} already exists", self.shown(name).display())),
        }
    }

    /// The fallback without `O_TMPFILE`.
    fn write_named(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: Mode,
        existing: Existing,
        durable: bool,
    ) -> Result<(), OutError> {
        let mut made = None;
        for _ in 0..16 {
            let tmp = self.temp_name(name)?;
            match rustix::fs::openat(
                &self.fd,
                &tmp,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                mode,
            ) {
                Ok(fd) => {
                    made = Some((tmp, File::from(fd)));
                    break;
                }
                Err(Errno::EXIST) => continue,
                Err(e) => {
                    return Err(OutError::Io(format!(
                        "cannot create a temporary file in {}: {}",
                        self.path.display(),
                        errno_io(e)
                    )))
                }
            }
        }
        let (tmp, mut file) = made.ok_or_else(|| {
            OutError::Io(format!("no free temporary name in {}", self.path.display()))
        })?;
        let unlink = || {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        };
        if let Err(e) =
            file.write_all(bytes)
                .and_then(|_| if durable { file.sync_all() } else { Ok(()) })
        {
            unlink();
            return Err(OutError::Io(format!(
                "cannot write {}: {e}",
                self.shown(&tmp).display()
            )));
        }
        drop(file);
        match existing {
            Existing::ReplaceRegular => self.rename_over(&tmp, name),
            Existing::Refuse => {
                let r = match rustix::fs::renameat_with(
                    &self.fd,
                    &tmp,
                    &self.fd,
                    name,
                    RenameFlags::NOREPLACE,
                ) {
                    Ok(()) => return Ok(()),
                    Err(Errno::EXIST) => Err(self.appeared(name)),
                    // No RENAME_NOREPLACE here: a hard link never clobbers either.
                    Err(e) if no_exclusive_rename(e) => {
                        match rustix::fs::linkat(&self.fd, &tmp, &self.fd, name, AtFlags::empty()) {
                            Ok(()) => Ok(()),
                            Err(Errno::EXIST) => Err(self.appeared(name)),
                            Err(e) => Err(OutError::Io(format!(
                                "cannot create {} (no way to create it without replacing what may appear there): {}",
                                self.shown(name).display(),
                                errno_io(e)
                            ))),
                        }
                    }
                    Err(e) => Err(OutError::Io(format!(
                        "cannot create {}: {}",
                        self.shown(name).display(),
                        errno_io(e)
                    ))),
                };
                unlink();
                r
            }
        }
    }

    /// `.NAME.terra-tmp-PID-` (the prefix of this process's temporary names).
    fn temp_prefix(name: &OsStr, pid: u32) -> OsString {
        let mut s = OsString::from(".");
        s.push(name);
        s.push(format!(".terra-tmp-{pid}-"));
        s
    }

    /// An unpredictable temporary name for `name` in this directory.
    fn temp_name(&self, name: &OsStr) -> Result<OsString, OutError> {
        let mut rnd = [0u8; 12];
        random_bytes(&mut rnd).map_err(|e| OutError::Io(format!("random bytes: {e}")))?;
        let mut s = Self::temp_prefix(name, std::process::id());
        s.push(crate::hex::hex(&rnd));
        Ok(s)
    }

    /// Removes `.NAME.terra-tmp-PID-*` regular files owned by this user whose
    /// PID is no longer a process (left by a writer that was killed).
    fn remove_stale(&self, name: &OsStr) {
        let mut prefix = OsString::from(".");
        prefix.push(name);
        prefix.push(".terra-tmp-");
        let prefix = prefix.as_bytes();
        let Ok(dir) = rustix::fs::openat(
            &self.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return;
        };
        let Ok(entries) = rustix::fs::Dir::new(dir) else {
            return;
        };
        let uid = nix::unistd::geteuid();
        for entry in entries.flatten() {
            let entry_name = entry.file_name().to_bytes();
            let Some(rest) = entry_name.strip_prefix(prefix) else {
                continue;
            };
            let pid = rest
                .split(|b| *b == b'-')
                .next()
                .and_then(|p| std::str::from_utf8(p).ok())
                .and_then(|p| p.parse::<i32>().ok());
            let Some(pid) = pid.filter(|p| *p > 0) else {
                continue;
            };
            if pid as u32 == std::process::id() {
                continue;
            }
            let gone = matches!(
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
                Err(nix::errno::Errno::ESRCH)
            );
            let stale = OsStr::from_bytes(entry_name);
            let ours =
                rustix::fs::statat(&self.fd, stale, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
                    FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                        && st.st_uid == uid.as_raw()
                });
            if gone && ours {
                let _ = rustix::fs::unlinkat(&self.fd, stale, AtFlags::empty());
            }
        }
    }
}

/// A file mode as rustix takes it (`mode_t` is 16 bits on macOS).
#[cfg(target_os = "linux")]
fn mode_bits(mode: u32) -> Mode {
    Mode::from_raw_mode(mode)
}
#[cfg(not(target_os = "linux"))]
fn mode_bits(mode: u32) -> Mode {
    Mode::from_bits_truncate(u16::try_from(mode & 0o7777).unwrap_or(0o600))
}

/// The file system (or kernel) has no exclusive rename: renameat2 without
/// RENAME_NOREPLACE on Linux, renameatx_np without RENAME_EXCL on macOS.
#[cfg(target_os = "linux")]
fn no_exclusive_rename(e: Errno) -> bool {
    matches!(e, Errno::INVAL | Errno::NOSYS)
}
#[cfg(not(target_os = "linux"))]
fn no_exclusive_rename(e: Errno) -> bool {
    matches!(
        e,
        Errno::INVAL | Errno::NOSYS | Errno::NOTSUP | Errno::OPNOTSUPP
    )
}

/// Writes `bytes` to `path` (see [`OutDir::write`]): the directory is opened
/// with `follow`, then the file is written relative to it.
pub fn write_file(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    follow: Follow,
    existing: Existing,
    durable: bool,
) -> Result<(), OutError> {
    let (dir, name) = split_output(path)?;
    OutDir::open(&dir, follow)?.write(&name, bytes, mode, existing, durable)
}

/// Removes the run's temp directory even when the workload left unreadable or
/// unwritable directories in it.
pub fn remove_tree(path: &Path) {
    if std::fs::remove_dir_all(path).is_ok() || !path.exists() {
        return;
    }
    fn open_up(p: &Path) {
        if let Ok(meta) = std::fs::symlink_metadata(p) {
            if meta.is_dir() {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
                if let Ok(rd) = std::fs::read_dir(p) {
                    for e in rd.flatten() {
                        open_up(&e.path());
                    }
                }
            }
        }
    }
    open_up(path);
    if let Err(e) = std::fs::remove_dir_all(path) {
        eprintln!(
            "terra: cannot remove the run's temp directory {}: {e}",
            path.display()
        );
    }
}

/// Unpredictable bytes for names: getrandom(2) on Linux (no file to
/// open), /dev/urandom elsewhere.
pub(crate) fn random_bytes(buf: &mut [u8]) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let mut filled = 0;
        while filled < buf.len() {
            filled +=
                rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty())
                    .map_err(std::io::Error::from)?;
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        use std::io::Read;
        File::open("/dev/urandom").and_then(|mut f| f.read_exact(buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{symlink, FileTypeExt};

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("terra-files-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_and_replaces_regular_files_only() {
        let d = scratch("replace");
        let p = d.join("r.json");
        write_file(&p, b"one", 0o600, Follow::Nothing, Existing::Refuse, false).unwrap();
        assert!(matches!(
            write_file(&p, b"two", 0o600, Follow::Nothing, Existing::Refuse, false),
            Err(OutError::Exists(_))
        ));
        write_file(
            &p,
            b"two",
            0o600,
            Follow::Nothing,
            Existing::ReplaceRegular,
            true,
        )
        .unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(names(&d), ["r.json"], "no temporary file left");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn symlinks_fifos_and_devices_are_refused_and_untouched() {
        let d = scratch("kinds");
        fs::write(d.join("target"), b"keep").unwrap();
        symlink(d.join("target"), d.join("link")).unwrap();
        nix::unistd::mkfifo(
            &d.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        for (name, replace) in [
            ("link", false),
            ("link", true),
            ("fifo", false),
            ("fifo", true),
        ] {
            let existing = if replace {
                Existing::ReplaceRegular
            } else {
                Existing::Refuse
            };
            let r = write_file(
                &d.join(name),
                b"x",
                0o600,
                Follow::DirComponents,
                existing,
                false,
            );
            assert!(matches!(r, Err(OutError::NotRegular(_))), "{name}: {r:?}");
        }
        assert_eq!(fs::read(d.join("target")).unwrap(), b"keep");
        assert!(fs::symlink_metadata(d.join("link"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(fs::symlink_metadata(d.join("fifo"))
            .unwrap()
            .file_type()
            .is_fifo());
        // A character device (made here as root, like /dev/null: 1,3): refused, untouched.
        #[cfg(target_os = "linux")]
        let dev = d.join("null");
        #[cfg(target_os = "linux")]
        if terra_test_support::users::make_null_device(&dev) {
            let r = write_file(
                &dev,
                b"x",
                0o600,
                Follow::Nothing,
                Existing::ReplaceRegular,
                false,
            );
            assert!(matches!(r, Err(OutError::NotRegular(_))), "{r:?}");
            assert!(fs::symlink_metadata(&dev)
                .unwrap()
                .file_type()
                .is_char_device());
        }
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn no_symlink_on_the_way_unless_asked() {
        let d = scratch("dirlink");
        fs::create_dir(d.join("real")).unwrap();
        symlink(d.join("real"), d.join("via")).unwrap();
        let r = write_file(
            &d.join("via/f"),
            b"x",
            0o600,
            Follow::Nothing,
            Existing::Refuse,
            false,
        );
        assert!(
            matches!(&r, Err(OutError::NotRegular(m)) if m.contains("is a symlink")),
            "{r:?}"
        );
        assert!(names(&d.join("real")).is_empty());
        write_file(
            &d.join("via/f"),
            b"x",
            0o600,
            Follow::DirComponents,
            Existing::Refuse,
            false,
        )
        .unwrap();
        assert_eq!(fs::read(d.join("real/f")).unwrap(), b"x");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_directory_is_held_by_descriptor() {
        // The directory is swapped for a symlink after it was opened: the
        // file still goes into the original directory, nothing elsewhere.
        let d = scratch("swap");
        fs::create_dir(d.join("out")).unwrap();
        fs::create_dir(d.join("elsewhere")).unwrap();
        let dir = OutDir::open(&d.join("out"), Follow::Nothing).unwrap();
        fs::rename(d.join("out"), d.join("moved")).unwrap();
        symlink(d.join("elsewhere"), d.join("out")).unwrap();
        dir.write(OsStr::new("r"), b"x", 0o600, Existing::Refuse, false)
            .unwrap();
        assert_eq!(fs::read(d.join("moved/r")).unwrap(), b"x");
        assert!(names(&d.join("elsewhere")).is_empty());
        fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_unfinished_file_has_no_name() {
        // What `write` does before linking: an O_TMPFILE in the directory is
        // invisible there, so a writer killed at this point leaves nothing.
        let d = scratch("tmpfile");
        let dir = OutDir::open(&d, Follow::Nothing).unwrap();
        let fd = rustix::fs::openat(
            &dir.fd,
            ".",
            OFlags::TMPFILE | OFlags::WRONLY,
            Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let mut f = File::from(fd);
        f.write_all(b"partial").unwrap();
        assert!(names(&d).is_empty(), "{:?}", names(&d));
        drop(f);
        assert!(names(&d).is_empty());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn stale_temporary_files_of_dead_writers_are_removed() {
        let d = scratch("stale");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = format!(".out.mir.terra-tmp-{dead}-0");
        let live = format!(
            ".out.mir.terra-tmp-{}-ab",
            std::os::unix::process::parent_id()
        );
        fs::write(d.join(&stale), b"partial").unwrap();
        fs::write(d.join(&live), b"someone else's").unwrap();
        let dir = OutDir::open(&d, Follow::Nothing).unwrap();
        dir.remove_stale(OsStr::new("out.mir"));
        assert_eq!(names(&d), [live]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_named_fallback_never_clobbers_and_leaves_nothing() {
        // What file systems without O_TMPFILE get.
        let d = scratch("named");
        let dir = OutDir::open(&d, Follow::Nothing).unwrap();
        let m = Mode::from_raw_mode(0o600);
        dir.write_named(OsStr::new("f"), b"one", m, Existing::Refuse, true)
            .unwrap();
        let r = dir.write_named(OsStr::new("f"), b"two", m, Existing::Refuse, false);
        assert!(matches!(r, Err(OutError::Exists(_))), "{r:?}");
        assert_eq!(fs::read(d.join("f")).unwrap(), b"one");
        dir.write_named(
            OsStr::new("f"),
            b"three",
            m,
            Existing::ReplaceRegular,
            false,
        )
        .unwrap();
        assert_eq!(fs::read(d.join("f")).unwrap(), b"three");
        assert_eq!(names(&d), ["f"]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn capped_reads() {
        let d = scratch("read");
        fs::write(d.join("small"), b"abc").unwrap();
        assert_eq!(read_capped(&d.join("small"), 3).unwrap(), b"abc");
        assert!(matches!(
            read_capped(&d.join("small"), 2),
            Err(ReadError::TooLarge(_))
        ));
        assert!(matches!(
            read_capped(Path::new("/dev/zero"), 1 << 20),
            Err(ReadError::TooLarge(_))
        ));
        assert!(matches!(read_capped(&d, 10), Err(ReadError::Io(_))));
        fs::remove_dir_all(&d).unwrap();
    }
}
