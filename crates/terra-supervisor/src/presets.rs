//! Presets for common toolchains (`terra run --preset NAME`, `terra
//! presets`): policy fragments resolved for this host. Each is a list of
//! host rules (tree scope, `missing: skip`, so a toolchain that is not
//! installed adds nothing) that join the policy through the same builder as
//! `--read`/`--write`, so they are part of the MIR and of its decision
//! digest; and the environment variables that point the toolchain at those
//! directories (the box's HOME is the run's temp directory, so `~/.cargo`
//! would not be found by default). `--env` overrides them.
//!
//! The toolchains' installations and caches that later host builds reuse
//! are granted **read-only** (cargo's registry sources, rustup's toolchains,
//! pyenv's interpreters): a workload writing them could poison the host's
//! next build. pip keeps its cache in the run's temp directory (HOME). The
//! one writable grant is npm's cache (`npm ci` writes it): its content is
//! addressed by hash and `npm ci` checks every tarball against the
//! lockfile's integrity, but a workload can add index entries that a later
//! `npm install` without a lockfile would use; `terra presets` says so.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use terra_policy::Access;

/// One rule of a preset, resolved for this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresetRule {
    pub access: Access,
    pub path: PathBuf,
}

/// A preset resolved for this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub name: &'static str,
    pub rules: Vec<PresetRule>,
    /// Set only for a directory that exists.
    pub env: Vec<(OsString, OsString)>,
}

/// One grant of a preset before resolution: access, host path, and the
/// variable that names the directory to the toolchain.
type Grant = (Access, PathBuf, Option<&'static str>);

/// A preset: its name, what it is for, and how it resolves.
#[derive(Debug)]
pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    resolve: fn(&HostDirs) -> Vec<Grant>,
}

/// The caller's directories the presets are resolved from.
#[derive(Debug, Clone)]
pub struct HostDirs {
    pub home: Option<PathBuf>,
    /// Reads an environment variable of the caller (absolute paths only are used).
    pub var: fn(&str) -> Option<OsString>,
}

impl HostDirs {
    /// From terra's own environment.
    pub fn from_env() -> HostDirs {
        HostDirs {
            home: std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute()),
            var: |n| std::env::var_os(n),
        }
    }

    /// `$VAR` when it is an absolute path, else `$HOME/default`.
    fn dir(&self, var: &str, default: &str) -> Option<PathBuf> {
        (self.var)(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| self.home.as_ref().map(|h| h.join(default)))
    }
}

/// The presets, by name.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "rust",
        about: "cargo and rustup: CARGO_HOME (~/.cargo) and RUSTUP_HOME (~/.rustup) readable, \
                CARGO_HOME and RUSTUP_HOME set",
        resolve: |h| {
            let mut v = Vec::new();
            if let Some(d) = h.dir("CARGO_HOME", ".cargo") {
                v.push((Access::Read, d, Some("CARGO_HOME")));
            }
            if let Some(d) = h.dir("RUSTUP_HOME", ".rustup") {
                v.push((Access::Read, d, Some("RUSTUP_HOME")));
            }
            v
        },
    },
    Preset {
        name: "node",
        about: "npm and nvm: the npm cache (~/.npm) WRITABLE with npm_config_cache set (a workload \
                can add cache entries; npm ci checks them against the lockfile), NVM_DIR (~/.nvm) readable",
        resolve: |h| {
            let mut v = Vec::new();
            if let Some(d) = h.dir("npm_config_cache", ".npm") {
                v.push((Access::Write, d, Some("npm_config_cache")));
            }
            if let Some(d) = h.dir("NVM_DIR", ".nvm") {
                v.push((Access::Read, d, Some("NVM_DIR")));
            }
            v
        },
    },
    Preset {
        name: "python",
        about: "pyenv: PYENV_ROOT (~/.pyenv) readable with PYENV_ROOT set; venvs live in the \
                workspace, pip's cache in the run's temp directory",
        resolve: |h| {
            h.dir("PYENV_ROOT", ".pyenv")
                .map(|d| vec![(Access::Read, d, Some("PYENV_ROOT"))])
                .unwrap_or_default()
        },
    },
];

/// The preset called `name`, or an error listing the presets.
pub fn find(name: &str) -> Result<&'static Preset, String> {
    PRESETS.iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        format!(
            "--preset {name:?}: no such preset (presets: {}; see `terra presets`)",
            names.join(", ")
        )
    })
}

impl Preset {
    /// The rules and environment of this preset on this host.
    pub fn resolve(&self, host: &HostDirs) -> Resolved {
        let mut rules = Vec::new();
        let mut env = Vec::new();
        for (access, path, var) in (self.resolve)(host) {
            if let Some(var) = var.filter(|_| is_dir(&path)) {
                env.push((OsString::from(var), path.clone().into_os_string()));
            }
            rules.push(PresetRule { access, path });
        }
        Resolved {
            name: self.name,
            rules,
            env,
        }
    }
}

fn is_dir(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(home: &str) -> HostDirs {
        HostDirs {
            home: Some(PathBuf::from(home)),
            var: |n| (n == "CARGO_HOME").then(|| OsString::from("/opt/cargo")),
        }
    }

    #[test]
    fn presets_resolve_from_the_environment_then_home() {
        let r = find("rust").unwrap().resolve(&host("/home/u"));
        let paths: Vec<(Access, &Path)> = r
            .rules
            .iter()
            .map(|r| (r.access, r.path.as_path()))
            .collect();
        assert_eq!(
            paths,
            [
                (Access::Read, Path::new("/opt/cargo")),
                (Access::Read, Path::new("/home/u/.rustup"))
            ]
        );
        // Neither directory exists here: no variable points at nothing.
        assert!(r.env.is_empty());
        let n = find("node").unwrap().resolve(&host("/home/u"));
        assert_eq!(n.rules[0].access, Access::Write);
        assert_eq!(n.rules[0].path, Path::new("/home/u/.npm"));
        assert!(find("python").is_ok());
        let e = find("perl").unwrap_err();
        assert!(e.contains("presets: rust, node, python"), "{e}");
    }

    #[test]
    fn a_directory_that_exists_gets_its_variable() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".rustup")).unwrap();
        let r = find("rust")
            .unwrap()
            .resolve(&host(d.path().to_str().unwrap()));
        assert_eq!(
            r.env,
            [(
                OsString::from("RUSTUP_HOME"),
                d.path().join(".rustup").into_os_string()
            )]
        );
    }
}
