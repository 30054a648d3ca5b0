//! Host-side profiles: named policies kept in the caller's configuration
//! directory, `$XDG_CONFIG_HOME/terra/profiles/NAME.json` (else
//! `~/.config/terra/profiles/NAME.json`), JSON source v3 or MIR bytes like
//! `--policy`. `terra run --profile NAME` uses one; `default.json` there is
//! used when neither `--policy` nor `--profile` is given. Profiles are never
//! read from the workspace: a profile file inside the workspace is refused
//! (a repository must not choose its own sandbox; `--policy FILE` names such
//! a file on purpose).
//!
//! A profile's resource limits sit beside it in `NAME.limits.json` (the
//! policy format has no place for them): `{"memory": "2G", "pids": "512",
//! "cpus": "2", "maxFileSize": "4G", "requireLimits": true}`, every field
//! optional. The command line's flags win over the file's.
//!
//! Both are host configuration and are trusted only as far as the caller
//! owns them ([`open_trusted`], the rule of OpenSSH's StrictModes): the file
//! and every directory above it, up to the caller's home (or `/` when it is
//! not under it), must be owned by the caller or root and writable by
//! nobody else. A symlinked profile (a dotfile manager's) is judged by its
//! target and the target's directories.

use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, CWD};

use crate::error::{Error, Result};

/// The profile used when none is named.
pub const DEFAULT_PROFILE: &str = "default";

/// `$XDG_CONFIG_HOME/terra/profiles`, else `$HOME/.config/terra/profiles`
/// (absolute values only).
pub fn profiles_dir() -> Option<PathBuf> {
    let abs = |n: &str| {
        std::env::var_os(n)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    abs("XDG_CONFIG_HOME")
        .or_else(|| abs("HOME").map(|h| h.join(".config")))
        .map(|c| c.join("terra/profiles"))
}

/// A profile name: letters, digits, `-`, `_` and `.` (not first), at most 64.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Where the profile `name` is (it need not exist); `flag` names the
/// option in a refusal.
pub fn file_for(name: &str, flag: &str) -> Result<PathBuf> {
    let sidecar = name.ends_with(".limits") || name.ends_with(".env");
    if !valid_name(name) || sidecar {
        return Err(Error::Argument(format!(
            "{flag} {name:?}: a profile name holds letters, digits, '-', '_' and '.' only, \
             and does not end in .limits or .env"
        )));
    }
    let dir = profiles_dir().ok_or_else(|| {
        Error::Argument(format!(
            "{flag} {name}: neither XDG_CONFIG_HOME nor HOME is an absolute path, so there is no profiles directory"
        ))
    })?;
    Ok(dir.join(format!("{name}.json")))
}

/// The file of the profile `name` (it must exist).
pub fn named(name: &str) -> Result<PathBuf> {
    let file = file_for(name, "--profile")?;
    let dir = file.parent().unwrap_or(Path::new("/"));
    if !file.is_file() {
        return Err(Error::Argument(format!(
            "--profile {name}: no profile {} (profiles are policy files, JSON source v3 or MIR, in {})",
            file.display(),
            dir.display()
        )));
    }
    Ok(file)
}

/// The profiles in the profiles directory, by name (sorted): each
/// `NAME.json` with a valid name (not the `NAME.limits.json` and
/// `NAME.env.json` beside them). None when there is no such directory.
pub fn list() -> Vec<(String, PathBuf)> {
    let Some(dir) = profiles_dir() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let stem = name.strip_suffix(".json")?;
            let sidecar = stem.ends_with(".limits") || stem.ends_with(".env");
            (valid_name(stem) && !sidecar && e.path().is_file())
                .then(|| (stem.to_string(), e.path()))
        })
        .collect();
    out.sort();
    out
}

/// The default profile's file, when there is one.
pub fn default_file() -> Option<PathBuf> {
    let file = profiles_dir()?.join(format!("{DEFAULT_PROFILE}.json"));
    file.is_file().then_some(file)
}

/// Refuses a profile file inside the workspace.
pub fn refuse_in_workspace(file: &Path, workspace: &Path, label: &str) -> Result<()> {
    let real = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    if real.starts_with(workspace) {
        return Err(Error::Argument(format!(
            "{label} {} is inside the workspace {}: a repository must not choose its own sandbox; \
             name the file with --policy if you mean it",
            real.display(),
            workspace.display()
        )));
    }
    Ok(())
}

/// The limits of a profile (`NAME.limits.json`), as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProfileLimits {
    pub memory: Option<String>,
    pub pids: Option<String>,
    pub cpus: Option<String>,
    pub max_file_size: Option<String>,
    pub require_limits: Option<bool>,
    /// The vm backend's kernel and guest memory for this profile
    /// (`--kernel`, `--vm-memory` win).
    pub vm_kernel: Option<std::path::PathBuf>,
    pub vm_memory: Option<String>,
}

/// Largest limits file read.
const MAX_LIMITS_LEN: usize = 64 << 10;

/// The limits beside the profile `profile_file` (none: no such file).
pub fn limits_of(profile_file: &Path) -> Result<ProfileLimits> {
    let Some((bytes, label)) = sidecar(profile_file, "limits", MAX_LIMITS_LEN)? else {
        return Ok(ProfileLimits::default());
    };
    serde_json::from_slice(&bytes).map_err(|e| Error::Argument(format!("{label}: {e}")))
}

/// The file `NAME.KIND.json` beside the profile `NAME.json`, read through
/// [`read_trusted`] (at most `limit` bytes), and its label for messages;
/// None without such a file.
fn sidecar(profile_file: &Path, kind: &str, limit: usize) -> Result<Option<(Vec<u8>, String)>> {
    let Some(stem) = profile_file.file_stem() else {
        return Ok(None);
    };
    let mut name = stem.to_os_string();
    name.push(format!(".{kind}.json"));
    let file = profile_file.with_file_name(name);
    let what = if kind == "env" { "variables" } else { kind };
    let label = format!("the profile's {what} {}", file.display());
    Ok(read_trusted(&file, limit, &label)?.map(|b| (b, label)))
}

/// Largest variables file read.
const MAX_ENV_LEN: usize = 64 << 10;

/// The variables of a profile (`NAME.env.json`: `{"NAME": "VALUE"}`, or
/// `null` for a variable copied from terra's environment at each run), by
/// name; none without such a file.
pub fn env_of(
    profile_file: &Path,
) -> Result<Vec<(std::ffi::OsString, Option<std::ffi::OsString>)>> {
    let Some((bytes, label)) = sidecar(profile_file, "env", MAX_ENV_LEN)? else {
        return Ok(Vec::new());
    };
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(|e| {
            Error::Argument(format!(
                "{label}: {e} (expected {{\"NAME\": \"VALUE\" or null}})"
            ))
        })?;
    map.into_iter()
        .map(|(k, v)| {
            let bad = k.is_empty() || k.contains('=') || k.contains('\0');
            let value = match v {
                serde_json::Value::Null if !bad => None,
                serde_json::Value::String(s) if !s.contains('\0') && !bad => Some(s.into()),
                _ => {
                    return Err(Error::Argument(format!(
                    "{label}: {k:?}: a variable is a name without '=' and a string value or null"
                )))
                }
            };
            Ok((k.into(), value))
        })
        .collect()
}

/// Reads the host configuration file `path` (a profile, its limits) through
/// [`open_trusted`], at most `limit` bytes; None when there is no such file.
pub fn read_trusted(path: &Path, limit: usize, label: &str) -> Result<Option<Vec<u8>>> {
    let Some(file) = open_trusted(path, label)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("cannot read", path, e))?;
    if bytes.len() > limit {
        return Err(Error::Argument(format!(
            "{label} is larger than {limit} bytes"
        )));
    }
    Ok(Some(bytes))
}

/// Opens the host configuration file `path` and checks what was opened:
/// a regular file owned by the caller or root, not writable by group or
/// others, and so is every directory above it (by its real path, walked by
/// descriptor without following a symlink) up to the caller's home, or up to
/// `/` when it is not under the home. Anyone else who could change one of
/// them could choose the sandbox. A root-owned directory with the sticky bit
/// (`/tmp`) passes: nobody but an entry's owner can replace the entry, and
/// the entry below it is checked in turn. None when `path` does not exist.
pub fn open_trusted(path: &Path, label: &str) -> Result<Option<File>> {
    // Non-blocking: a FIFO planted under the name must not hang the open
    // (it is refused below as not a regular file).
    let opened = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path)
    };
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("cannot open", path, e).context(label.to_string())),
    };
    let st = rustix::fs::fstat(&file).map_err(|e| sys_err(path, e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(Error::Host(format!(
            "{label} {} is not a regular file; terra reads its configuration from regular files only",
            path.display()
        )));
    }
    let who = Caller::this();
    refuse_untrusted(&st, path, label, &who, false)?;
    let real = std::fs::canonicalize(path).map_err(|e| Error::io("", path, e))?;
    let (Some(dir), Some(name)) = (real.parent(), real.file_name()) else {
        return Err(Error::Host(format!(
            "{label} {} names no file",
            path.display()
        )));
    };
    let dirs = walk_dirs(dir, label)?;
    // The real path must still name the file that was opened: what was
    // checked is what is read.
    let last = dirs.last().map(|(fd, _)| fd);
    let named = match last {
        Some(fd) => rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW),
        None => rustix::fs::statat(CWD, &real, AtFlags::SYMLINK_NOFOLLOW),
    }
    .map_err(|e| sys_err(&real, e))?;
    if (named.st_dev, named.st_ino) != (st.st_dev, st.st_ino) {
        return Err(Error::Host(format!(
            "{label} {} changed while it was being opened; run again",
            path.display()
        )));
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .and_then(|h| std::fs::canonicalize(h).ok());
    // From the file's directory up to the home (or to /).
    for (fd, shown) in dirs.iter().rev() {
        let st = rustix::fs::fstat(fd).map_err(|e| sys_err(shown, e))?;
        refuse_untrusted(&st, shown, label, &who, true)?;
        if home.as_deref() == Some(shown.as_path()) {
            break;
        }
    }
    Ok(Some(file))
}

/// Opens `/` and each directory down to `dir` (canonical) without following a
/// symlink, each with the path it has.
fn walk_dirs(dir: &Path, label: &str) -> Result<Vec<(std::os::fd::OwnedFd, PathBuf)>> {
    // O_PATH where it exists: no read permission is needed to hold a directory.
    #[cfg(target_os = "linux")]
    const HOLD: OFlags = OFlags::PATH;
    #[cfg(not(target_os = "linux"))]
    const HOLD: OFlags = OFlags::RDONLY;
    let open = |at: &dyn std::os::fd::AsFd, name: &std::ffi::OsStr, shown: &Path| {
        rustix::fs::openat(
            at,
            name,
            HOLD | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| sys_err(shown, e).context(label.to_string()))
    };
    let root = PathBuf::from("/");
    let mut v = vec![(open(&CWD, std::ffi::OsStr::new("/"), &root)?, root)];
    for comp in dir.components() {
        let std::path::Component::Normal(name) = comp else {
            continue;
        };
        let (parent, shown) = v.last().expect("/ is first");
        let shown = shown.join(name);
        let fd = open(parent, name, &shown)?;
        v.push((fd, shown));
    }
    Ok(v)
}

/// Who may own and write terra's configuration: the caller, and the
/// caller's private group when it has one.
struct Caller {
    uid: u32,
    /// The caller's primary group when it is a user private group (named
    /// after the caller, no other member listed), as Debian and Ubuntu make
    /// for each user and give write access with umask 002: its write bit
    /// lets nobody else in, so a group-writable `~/.config` is not refused
    /// (Debian's OpenSSH makes the same exception).
    private_gid: Option<u32>,
}

impl Caller {
    fn this() -> Caller {
        let uid = nix::unistd::geteuid();
        let private_gid = nix::unistd::User::from_uid(uid)
            .ok()
            .flatten()
            .and_then(|user| {
                let group = nix::unistd::Group::from_gid(user.gid).ok().flatten()?;
                is_private_group(&user.name, &group.name, &group.mem).then_some(user.gid.as_raw())
            });
        Caller {
            uid: uid.as_raw(),
            private_gid,
        }
    }
}

/// A group is the user's private group when it bears the user's name and
/// lists nobody else as a member.
fn is_private_group(user: &str, group: &str, members: &[String]) -> bool {
    group == user && members.iter().all(|m| m == user)
}

/// Refuses a configuration file or directory that someone other than the
/// caller and root owns or may write, naming it and the fix.
fn refuse_untrusted(st: &Stat, path: &Path, label: &str, who: &Caller, dir: bool) -> Result<()> {
    let (owner, uid) = (st.st_uid, who.uid);
    let what = if dir { "its directory " } else { "" };
    if owner != uid && owner != 0 {
        return Err(Error::Host(format!(
            "{label}: {what}{} is owned by uid {owner}, neither you (uid {uid}) nor root, so its owner \
             could choose your sandbox; terra does not use it (fix: chown {uid} {}, or remove it)",
            path.display(),
            path.display()
        )));
    }
    let mode = st.st_mode & 0o7777;
    let sticky_root_dir = dir && owner == 0 && mode & 0o1000 != 0;
    let own_group = who.private_gid == Some(st.st_gid);
    let others_write = mode & 0o002 != 0 || (mode & 0o020 != 0 && !own_group);
    if others_write && !sticky_root_dir {
        return Err(Error::Host(format!(
            "{label}: {what}{} is writable by {} (mode {mode:04o}), so they could choose your \
             sandbox; terra does not use it (fix: chmod go-w {})",
            path.display(),
            match (mode & 0o020 != 0, mode & 0o002 != 0) {
                (true, true) => "its group and others",
                (true, false) => "its group",
                _ => "others",
            },
            path.display()
        )));
    }
    Ok(())
}

fn sys_err(path: &Path, e: rustix::io::Errno) -> Error {
    Error::io(
        "",
        path,
        std::io::Error::from_raw_os_error(e.raw_os_error()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_names_cannot_name_other_files() {
        for ok in ["ci", "rust-dev", "a_b", "v1.2"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "../x", "a/b", ".hidden", "x y", &"n".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
            assert!(named(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn profile_limits_sit_beside_the_profile_and_refuse_unknown_fields() {
        let dir = std::env::temp_dir().join(format!("terra-profile-limits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let profile = dir.join("ci.json");
        assert_eq!(limits_of(&profile).unwrap(), ProfileLimits::default());
        std::fs::write(
            dir.join("ci.limits.json"),
            r#"{"memory": "2G", "requireLimits": true}"#,
        )
        .unwrap();
        let l = limits_of(&profile).unwrap();
        assert_eq!(l.memory.as_deref(), Some("2G"));
        assert_eq!(l.require_limits, Some(true));
        std::fs::write(dir.join("ci.limits.json"), r#"{"memroy": "2G"}"#).unwrap();
        assert!(limits_of(&profile).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_profile_others_can_write_is_refused_with_the_fix() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("profiles");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = dir.join("ci.json");
        std::fs::write(&file, "{}").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read_trusted(&file, 10, "p").unwrap().unwrap(), b"{}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = read_trusted(&file, 10, "p").unwrap_err().to_string();
        assert!(e.contains(&format!("chmod go-w {}", file.display())), "{e}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        // A group that is not the caller's private one (root can hand the
        // directory to nogroup; another caller's own group may be private:
        // `group_write_is_trusted_only_for_the_callers_private_group`).
        let gid = |p: &Path| std::os::unix::fs::MetadataExt::gid(&std::fs::metadata(p).unwrap());
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(&dir, None, Some(nix::unistd::Gid::from_raw(65534))).unwrap();
        }
        if Caller::this().private_gid != Some(gid(&dir)) {
            let e = read_trusted(&file, 10, "p").unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "its directory {} is writable by its group",
                    dir.display()
                )),
                "{e}"
            );
        }
        // Missing: none; too large: refused.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(read_trusted(&dir.join("nope.json"), 10, "p")
            .unwrap()
            .is_none());
        assert!(read_trusted(&file, 1, "p").is_err());
        // A FIFO under the name: refused, without waiting for a writer.
        let fifo = dir.join("fifo.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = read_trusted(&fifo, 10, "p").unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn group_write_is_trusted_only_for_the_callers_private_group() {
        assert!(is_private_group("ana", "ana", &[]));
        assert!(is_private_group("ana", "ana", &["ana".into()]));
        assert!(!is_private_group("ana", "staff", &[]));
        assert!(!is_private_group("ana", "ana", &["bob".into()]));
        let f = tempfile::NamedTempFile::new().unwrap();
        let mut st = rustix::fs::fstat(f.as_file()).unwrap();
        let uid = st.st_uid;
        st.st_gid = 4321;
        let path = Path::new("/x/ci.json");
        let check = |st: &Stat, private_gid| {
            refuse_untrusted(st, path, "p", &Caller { uid, private_gid }, false)
        };
        st.st_mode = 0o100664;
        assert!(check(&st, Some(4321)).is_ok(), "the caller's own group");
        let e = check(&st, None).unwrap_err().to_string();
        assert!(e.contains("writable by its group"), "{e}");
        assert!(check(&st, Some(1)).is_err(), "another group");
        st.st_mode = 0o100666;
        let e = check(&st, Some(4321)).unwrap_err().to_string();
        assert!(e.contains("its group and others"), "{e}");
    }
}
