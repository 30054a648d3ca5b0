//! Finding the workload's program the way the box will, on the host: when
//! the box cannot find it but the host's PATH has it outside every grant of
//! the plan (`~/.cargo/bin/cargo` under the default policy), say where it is
//! and which flag grants it. Used by `--dry-run` (before the run) and after
//! a run whose program was not found or could not be executed.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use terra_policy::SandboxPlan;

use crate::state::visible_in_box;

/// What the host knows about the workload's program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// An executable the plan grants (the box can reach it).
    Granted(PathBuf),
    /// An executable on the host outside every grant; `grant` is the
    /// directory a `--read` would grant (the toolchain's root for `.../bin/x`).
    OutsideGrants { host_path: PathBuf, grant: PathBuf },
    /// No executable of that name on the host's PATH either.
    NotFound,
}

/// Looks `program` up as execvp would with `path` (the box's PATH): a name
/// with a slash is taken as is (relative to `cwd`).
pub fn locate(program: &OsStr, path: &OsStr, cwd: &Path, plan: &SandboxPlan) -> Program {
    let candidates: Vec<PathBuf> = if program.as_bytes().contains(&b'/') {
        vec![cwd.join(program)]
    } else {
        std::env::split_paths(path)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(program))
            .collect()
    };
    let mut outside = None;
    for c in candidates {
        let Ok(meta) = std::fs::metadata(&c) else {
            continue;
        };
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            continue;
        }
        let real = std::fs::canonicalize(&c).unwrap_or_else(|_| c.clone());
        if visible_in_box(plan, &c) && visible_in_box(plan, &real) {
            return Program::Granted(c);
        }
        outside.get_or_insert(c);
    }
    match outside {
        Some(host_path) => {
            let dir = host_path.parent().unwrap_or(Path::new("/"));
            // The toolchain's root, unless granting it would expose a
            // credential (`~/.cargo` holds credentials.toml, `~/bin`'s
            // root is HOME): then the program's own directory.
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let exposes = |d: &Path| {
                home.as_deref()
                    .is_some_and(|h| crate::presets::credential_under(d, h).is_some())
            };
            let grant = match (dir.file_name(), dir.parent()) {
                (Some(b), Some(root)) if b == "bin" && root != Path::new("/") && !exposes(root) => {
                    root
                }
                _ => dir,
            };
            Program::OutsideGrants {
                grant: grant.to_path_buf(),
                host_path,
            }
        }
        None => Program::NotFound,
    }
}

/// The preset whose grants hold `program` (as found, or its real path) on
/// this host, if any.
pub fn preset_for(program: &Path, host: &crate::presets::HostDirs) -> Option<&'static str> {
    let real = std::fs::canonicalize(program).ok();
    crate::presets::PRESETS.iter().find_map(|p| {
        let r = p.resolve(host).ok()?;
        r.rules
            .iter()
            .filter(|rule| rule.access != terra_policy::Access::Deny)
            .any(|rule| {
                program.starts_with(&rule.path)
                    || real.as_deref().is_some_and(|x| x.starts_with(&rule.path))
            })
            .then_some(p.name)
    })
}

/// The hint for a program outside the grants, or None.
pub fn hint(program: &OsStr, found: &Program, with_policy: bool) -> Option<String> {
    let Program::OutsideGrants { host_path, grant } = found else {
        return None;
    };
    let how = if with_policy {
        format!("a read rule on {} in the policy grants it", grant.display())
    } else if let Some(preset) = preset_for(host_path, &crate::presets::HostDirs::from_env()) {
        // The preset also brings the toolchain's other directories and
        // variables (a bare --read of ~/.cargo/bin leaves rustup without
        // RUSTUP_HOME).
        format!("--preset {preset} grants it with the rest of its toolchain (see `terra presets`)")
    } else {
        format!("--read {} grants it", grant.display())
    };
    Some(format!(
        "{} is {} on the host, outside every grant of the box; {how}",
        program.to_string_lossy(),
        host_path.display()
    ))
}

#[cfg(test)]
mod preset_tests {
    use super::*;

    #[test]
    fn a_program_of_a_presets_toolchain_names_the_preset() {
        let host = crate::presets::HostDirs {
            home: Some(PathBuf::from("/home/u")),
            var: |_| None,
        };
        assert_eq!(
            preset_for(Path::new("/home/u/.cargo/bin/cargo"), &host),
            Some("rust")
        );
        assert_eq!(
            preset_for(Path::new("/home/u/.nvm/versions/node/v20/bin/node"), &host),
            Some("node")
        );
        assert_eq!(
            preset_for(Path::new("/home/u/.pyenv/shims/python"), &host),
            Some("python")
        );
        // Twin: a program elsewhere under HOME has none.
        assert_eq!(preset_for(Path::new("/home/u/bin/tool"), &host), None);
        assert_eq!(preset_for(Path::new("/home/u/.cargo/env"), &host), None);
    }
}
