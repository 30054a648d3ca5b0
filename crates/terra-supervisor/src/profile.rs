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

use std::path::{Path, PathBuf};

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

/// The file of the profile `name` (it must exist).
pub fn named(name: &str) -> Result<PathBuf> {
    if !valid_name(name) {
        return Err(Error::Argument(format!(
            "--profile {name:?}: a profile name holds letters, digits, '-', '_' and '.' only"
        )));
    }
    let dir = profiles_dir().ok_or_else(|| {
        Error::Argument(format!(
            "--profile {name}: neither XDG_CONFIG_HOME nor HOME is an absolute path, so there is no profiles directory"
        ))
    })?;
    let file = dir.join(format!("{name}.json"));
    if !file.is_file() {
        return Err(Error::Argument(format!(
            "--profile {name}: no profile {} (profiles are policy files, JSON source v3 or MIR, in {})",
            file.display(),
            dir.display()
        )));
    }
    Ok(file)
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
const MAX_LIMITS_LEN: u64 = 64 << 10;

/// The limits beside the profile `profile_file` (none: no such file).
pub fn limits_of(profile_file: &Path) -> Result<ProfileLimits> {
    let Some(stem) = profile_file.file_stem() else {
        return Ok(ProfileLimits::default());
    };
    let mut name = stem.to_os_string();
    name.push(".limits.json");
    let file = profile_file.with_file_name(name);
    let label = || format!("the profile's limits {}", file.display());
    let bytes = match std::fs::File::open(&file) {
        Ok(f) => {
            use std::io::Read;
            let mut v = Vec::new();
            f.take(MAX_LIMITS_LEN + 1)
                .read_to_end(&mut v)
                .map_err(|e| Error::io("cannot read", &file, e))?;
            if v.len() as u64 > MAX_LIMITS_LEN {
                return Err(Error::Argument(format!(
                    "{} is larger than 64 KiB",
                    label()
                )));
            }
            v
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ProfileLimits::default()),
        Err(e) => return Err(Error::io("cannot open", &file, e)),
    };
    serde_json::from_slice(&bytes).map_err(|e| Error::Argument(format!("{}: {e}", label())))
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
}
