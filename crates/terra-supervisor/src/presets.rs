//! Presets for common toolchains (`terra run --preset NAME`, `terra
//! presets`): policy fragments resolved for this host. Each is a list of
//! host rules (tree scope, `missing: skip`, so a toolchain that is not
//! installed adds nothing) that join the policy through the same builder as
//! `--read`/`--write`, so they are part of the MIR and of its decision
//! digest; and the environment variables that point the toolchain at those
//! directories (the box's HOME is the run's temp directory, so `~/.cargo`
//! would not be found by default). `--env` overrides them.
//!
//! The toolchains' installations are granted **read-only** (cargo's
//! installed binaries, rustup's toolchains, pyenv's interpreters): a
//! workload writing them could poison the host's next build. The download
//! caches a package fetch needs are **writable** (cargo's registry and git
//! checkouts, pip's cache, npm's cache), each named in `terra presets`:
//! cargo checks every crate file against the index's checksum and `npm ci`
//! every tarball against the lockfile's integrity, but a workload can add
//! entries a later fetch without a lock file would use. A writable cache
//! that does not exist yet is made before the run (see [`Resolved::caches`]).
//!
//! Each preset also names the registry hosts its fetches reach
//! ([`Preset::hosts`], TCP port 443); `--preset-net` admits them through the
//! network broker like `--allow-net HOST:443`.
//!
//! No preset exposes a credential. The grants are narrowed so that no
//! token file lies under them (cargo's `bin`, `registry` and `git`, never
//! CARGO_HOME itself, which holds `credentials.toml` and `config.toml`);
//! where a token file can sit inside a granted toolchain directory (an nvm
//! node's global `etc/npmrc`, a pyenv interpreter's `pip.conf`), each one
//! present is denied. A preset directory that would hold one of the
//! [`HOME_CREDENTIALS`] (a variable pointing at `$HOME`, say) is refused.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use terra_policy::Access;

use crate::error::{Error, Result};

/// Credential files and directories under `$HOME` that no preset grant may
/// cover: tokens of package registries, git hosts, clouds and container
/// registries, and keys. `terra presets` and docs/run.md list them.
pub const HOME_CREDENTIALS: &[&str] = &[
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".cargo/config",
    ".cargo/config.toml",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    ".config/pip",
    ".pip",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".ssh",
    ".gnupg",
    ".docker/config.json",
    ".config/containers/auth.json",
    ".gem/credentials",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".nuget/NuGet/NuGet.Config",
    ".composer/auth.json",
    ".config/composer/auth.json",
    ".bundle/config",
    ".terraform.d/credentials.tfrc.json",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube/config",
    ".local/share/keyrings",
    ".password-store",
];

/// The directories of CARGO_HOME the rust preset grants: installed
/// binaries (the rustup proxies), the registry's index, downloads and
/// sources, git dependencies' checkouts. Not CARGO_HOME itself:
/// `credentials.toml` and `config.toml` (registry tokens) live there.
pub const CARGO_DIRS: &[&str] = &["bin", "registry", "git"];
/// The ones of [`CARGO_DIRS`] a fetch writes.
pub const CARGO_CACHES: &[&str] = &["registry", "git"];

/// The TCP port of every preset's registry host.
pub const REGISTRY_PORT: u16 = 443;

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
    /// Set only for a directory that exists (a writable cache: also for
    /// one that [`make_caches`] makes).
    pub env: Vec<(OsString, OsString)>,
    /// The writable caches, with the variable that names each to the
    /// toolchain (if any): [`make_caches`] makes the missing ones.
    pub caches: Vec<(PathBuf, Option<&'static str>)>,
    /// The registry hosts (port [`REGISTRY_PORT`]) `--preset-net` admits.
    pub hosts: &'static [&'static str],
}

/// One part of a preset before resolution.
enum Part {
    /// A grant of a host directory, with the credential files that can sit
    /// inside it (patterns relative to it, `*` one directory name): each
    /// one present is denied.
    Grant {
        access: Access,
        path: PathBuf,
        secrets: &'static [&'static str],
    },
    /// A variable naming a directory to the toolchain (set when it exists).
    Var(&'static str, PathBuf),
    /// A download cache: granted writable, made when missing, its variable
    /// (if any) set.
    Cache(Option<&'static str>, PathBuf),
    /// A certificate variable of the caller's environment (a file or a
    /// directory of CA certificates): passed on, and its path readable,
    /// when it is set to an absolute path that exists.
    Cert(&'static str),
}

/// The certificate variables each toolchain reads (a company's CA behind
/// a TLS-inspecting proxy): OpenSSL's, then the toolchain's own.
const CERTS_OPENSSL: [&str; 2] = ["SSL_CERT_FILE", "SSL_CERT_DIR"];

/// Every certificate variable some preset passes.
pub const CERT_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CARGO_HTTP_CAINFO",
    "PIP_CERT",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
];

fn certs(own: &'static [&'static str]) -> impl Iterator<Item = Part> {
    CERTS_OPENSSL.iter().chain(own).map(|v| Part::Cert(v))
}

fn grant(access: Access, path: PathBuf) -> Part {
    Part::Grant {
        access,
        path,
        secrets: &[],
    }
}

/// A preset: its name, what it is for, and how it resolves.
pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    /// The registry hosts a package fetch reaches (port [`REGISTRY_PORT`]).
    pub hosts: &'static [&'static str],
    parts: fn(&HostDirs) -> Vec<Part>,
}

impl std::fmt::Debug for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preset").field("name", &self.name).finish()
    }
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

/// The presets' names, in [`PRESETS`]' order (for completions).
pub const NAMES: &[&str] = &["rust", "node", "python"];

/// The presets, by name.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "rust",
        about: "cargo and rustup: CARGO_HOME's bin readable, its registry and git WRITABLE (the download \
                caches; ~/.cargo/{bin,registry,git}; not CARGO_HOME itself, which holds credentials.toml and \
                config.toml) and RUSTUP_HOME (~/.rustup) readable, CARGO_HOME and RUSTUP_HOME set",
        hosts: &["index.crates.io", "static.crates.io", "crates.io"],
        parts: |h| {
            let mut v = Vec::new();
            if let Some(d) = h.dir("CARGO_HOME", ".cargo") {
                for s in CARGO_DIRS {
                    v.push(if CARGO_CACHES.contains(s) {
                        Part::Cache(None, d.join(s))
                    } else {
                        grant(Access::Read, d.join(s))
                    });
                }
                v.push(Part::Var("CARGO_HOME", d));
            }
            v.extend(certs(&["CARGO_HTTP_CAINFO"]));
            if let Some(d) = h.dir("RUSTUP_HOME", ".rustup") {
                v.push(grant(Access::Read, d.clone()));
                v.push(Part::Var("RUSTUP_HOME", d));
            }
            v
        },
    },
    Preset {
        name: "node",
        about: "npm and nvm: the npm cache (~/.npm) WRITABLE with npm_config_cache set (a workload \
                can add cache entries; npm ci checks them against the lockfile), NVM_DIR (~/.nvm) readable \
                but each node's global etc/npmrc (tokens) denied",
        hosts: &["registry.npmjs.org"],
        parts: |h| {
            let mut v = Vec::new();
            if let Some(d) = h.dir("npm_config_cache", ".npm") {
                v.push(Part::Cache(Some("npm_config_cache"), d));
            }
            v.extend(certs(&["NODE_EXTRA_CA_CERTS"]));
            if let Some(d) = h.dir("NVM_DIR", ".nvm") {
                v.push(Part::Grant {
                    access: Access::Read,
                    path: d.clone(),
                    secrets: &["versions/node/*/etc/npmrc", "versions/io.js/*/etc/npmrc"],
                });
                v.push(Part::Var("NVM_DIR", d));
            }
            v
        },
    },
    Preset {
        name: "python",
        about: "pip and pyenv: pip's cache (~/.cache/pip) WRITABLE with PIP_CACHE_DIR set, PYENV_ROOT \
                (~/.pyenv) readable with PYENV_ROOT set, each interpreter's and virtualenv's pip.conf (index \
                credentials) denied; venvs live in the workspace",
        hosts: &["pypi.org", "files.pythonhosted.org"],
        parts: |h| {
            let mut v = Vec::new();
            if let Some(d) = h.dir("PIP_CACHE_DIR", ".cache/pip") {
                v.push(Part::Cache(Some("PIP_CACHE_DIR"), d));
            }
            v.extend(certs(&["PIP_CERT", "REQUESTS_CA_BUNDLE"]));
            if let Some(d) = h.dir("PYENV_ROOT", ".pyenv") {
                v.push(Part::Grant {
                    access: Access::Read,
                    path: d.clone(),
                    secrets: &["versions/*/pip.conf", "versions/*/envs/*/pip.conf"],
                });
                v.push(Part::Var("PYENV_ROOT", d));
            }
            v
        },
    },
];

/// The preset called `name`, or an error listing the presets.
pub fn find(name: &str) -> Result<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        Error::Argument(format!(
            "--preset {name:?}: no such preset (presets: {}; see `terra presets`)",
            names.join(", ")
        ))
    })
}

impl Preset {
    /// The rules and environment of this preset on this host. Refused when
    /// a grant would hold one of the [`HOME_CREDENTIALS`].
    pub fn resolve(&self, host: &HostDirs) -> Result<Resolved> {
        let mut rules = Vec::new();
        let mut env = Vec::new();
        let mut caches = Vec::new();
        for part in (self.parts)(host) {
            match part {
                Part::Var(var, path) => {
                    if is_dir(&path) {
                        env.push((OsString::from(var), path.into_os_string()));
                    }
                }
                Part::Cert(var) => {
                    let Some(value) = (host.var)(var) else {
                        continue;
                    };
                    let path = PathBuf::from(&value);
                    if !path.is_absolute() || std::fs::metadata(&path).is_err() {
                        continue;
                    }
                    self.refuse_credentials_under(&path, host)?;
                    env.push((OsString::from(var), value));
                    rules.push(PresetRule {
                        access: Access::Read,
                        path,
                    });
                }
                Part::Cache(var, path) => {
                    self.refuse_credentials_under(&path, host)?;
                    if let Some(var) = var {
                        env.push((OsString::from(var), path.clone().into_os_string()));
                    }
                    rules.push(PresetRule {
                        access: Access::Write,
                        path: path.clone(),
                    });
                    caches.push((path, var));
                }
                Part::Grant {
                    access,
                    path,
                    secrets,
                } => {
                    self.refuse_credentials_under(&path, host)?;
                    let denied: Vec<PathBuf> = secrets
                        .iter()
                        .flat_map(|pattern| present_matches(&path, pattern))
                        .collect();
                    rules.push(PresetRule { access, path });
                    rules.extend(denied.into_iter().map(|path| PresetRule {
                        access: Access::Deny,
                        path,
                    }));
                }
            }
        }
        Ok(Resolved {
            name: self.name,
            rules,
            env,
            caches,
            hosts: self.hosts,
        })
    }

    /// Refuses a grant of `dir` that would hold one of the
    /// [`HOME_CREDENTIALS`].
    fn refuse_credentials_under(&self, dir: &Path, host: &HostDirs) -> Result<()> {
        let Some(cred) = host
            .home
            .as_deref()
            .and_then(|h| credential_under(dir, h).or_else(|| credential_holding(dir, h)))
        else {
            return Ok(());
        };
        Err(Error::Argument(format!(
            "--preset {}: its grant of {} would hold {} (credentials); point the toolchain's \
             variable at its own directory",
            self.name,
            dir.display(),
            cred.display()
        )))
    }
}

/// Makes each writable cache of `resolved` that is missing (with its
/// parents, as the toolchain itself would), so the grant is not skipped and
/// the first fetch has somewhere to write. Refused when a cache path exists
/// but is not a directory. A cache the caller may not make (a shared,
/// read-only toolchain directory) stays missing and its grant skipped, as
/// any missing preset directory: the note returned says so.
pub fn make_caches(resolved: &Resolved) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    for (path, _) in &resolved.caches {
        let label = || format!("--preset {} (cache {})", resolved.name, path.display());
        match std::fs::symlink_metadata(path) {
            Ok(_) if is_dir(path) => {}
            Ok(_) => {
                return Err(Error::Argument(format!(
                    "{}: exists and is not a directory",
                    label()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match std::fs::DirBuilder::new().recursive(true).create(path) {
                    Ok(()) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::PermissionDenied
                                | std::io::ErrorKind::ReadOnlyFilesystem
                        ) =>
                    {
                        notes.push(format!(
                            "{}: cannot be made ({e}); the box has no such cache, so a fetch \
                             cannot write one",
                            label()
                        ));
                    }
                    Err(e) => {
                        return Err(Error::io("cannot make the cache", path, e).context(label()))
                    }
                }
            }
            Err(e) => return Err(Error::io("", path, e).context(label())),
        }
    }
    Ok(notes)
}

/// The first of the [`HOME_CREDENTIALS`] under `home` that a tree grant of
/// `dir` would hold (both compared as written and canonical), if any.
pub fn credential_under(dir: &Path, home: &Path) -> Option<PathBuf> {
    find_credential(dir, home, |cred, d| cred.starts_with(d))
}

/// The one of the [`HOME_CREDENTIALS`] under `home` that holds `path`
/// (a certificate variable pointing into `~/.ssh`, say), if any.
fn credential_holding(path: &Path, home: &Path) -> Option<PathBuf> {
    find_credential(path, home, |cred, p| p.starts_with(cred))
}

/// The first credential `c` (under `home`, as written and canonical) for
/// which `related(c, path)` holds, `path` also taken both ways.
fn find_credential(
    path: &Path,
    home: &Path,
    related: impl Fn(&Path, &Path) -> bool,
) -> Option<PathBuf> {
    let paths = [Some(path.to_path_buf()), std::fs::canonicalize(path).ok()];
    let homes = [Some(home.to_path_buf()), std::fs::canonicalize(home).ok()];
    HOME_CREDENTIALS.iter().find_map(|cred| {
        homes
            .iter()
            .flatten()
            .map(|h| h.join(cred))
            .find(|c| paths.iter().flatten().any(|p| related(c, p)))
    })
}

/// The paths under `dir` that match `pattern` (`/`-separated, `*` any one
/// name) and exist (symlinks not followed at the last name).
fn present_matches(dir: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut found = vec![dir.to_path_buf()];
    for seg in pattern.split('/') {
        let mut next = Vec::new();
        for d in &found {
            if seg == "*" {
                let Ok(entries) = std::fs::read_dir(d) else {
                    continue;
                };
                next.extend(entries.flatten().map(|e| e.path()).filter(|p| is_dir(p)));
            } else {
                next.push(d.join(seg));
            }
        }
        found = next;
    }
    found.retain(|p| std::fs::symlink_metadata(p).is_ok());
    found.sort();
    found
}

fn is_dir(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;
    use terra_policy::{
        CapabilitySet, HostBindings, MirBuilder, Missing, Permission, RootKind, Scope,
    };

    fn host(home: &str) -> HostDirs {
        HostDirs {
            home: Some(PathBuf::from(home)),
            var: |n| (n == "CARGO_HOME").then(|| OsString::from("/opt/cargo")),
        }
    }

    #[test]
    fn presets_resolve_from_the_environment_then_home() {
        let r = find("rust").unwrap().resolve(&host("/home/u")).unwrap();
        let paths: Vec<(Access, &Path)> = r
            .rules
            .iter()
            .map(|r| (r.access, r.path.as_path()))
            .collect();
        // CARGO_HOME's toolchain directories only, never CARGO_HOME itself;
        // the download caches writable, the installed binaries not.
        assert_eq!(
            paths,
            [
                (Access::Read, Path::new("/opt/cargo/bin")),
                (Access::Write, Path::new("/opt/cargo/registry")),
                (Access::Write, Path::new("/opt/cargo/git")),
                (Access::Read, Path::new("/home/u/.rustup"))
            ]
        );
        // Neither directory exists here: no variable points at nothing.
        assert!(r.env.is_empty());
        assert_eq!(
            r.caches,
            [
                (PathBuf::from("/opt/cargo/registry"), None),
                (PathBuf::from("/opt/cargo/git"), None)
            ]
        );
        assert_eq!(
            r.hosts,
            ["index.crates.io", "static.crates.io", "crates.io"]
        );
        let n = find("node").unwrap().resolve(&host("/home/u")).unwrap();
        assert_eq!(n.rules[0].access, Access::Write);
        assert_eq!(n.rules[0].path, Path::new("/home/u/.npm"));
        assert_eq!(n.hosts, ["registry.npmjs.org"]);
        // A cache's variable is set also before the cache exists (the run makes it).
        assert_eq!(
            n.env,
            [(
                OsString::from("npm_config_cache"),
                OsString::from("/home/u/.npm")
            )]
        );
        let py = find("python").unwrap().resolve(&host("/home/u")).unwrap();
        assert_eq!(
            (py.rules[0].access, py.rules[0].path.as_path()),
            (Access::Write, Path::new("/home/u/.cache/pip"))
        );
        assert_eq!(py.hosts, ["pypi.org", "files.pythonhosted.org"]);
        let e = find("perl").unwrap_err().to_string();
        assert!(e.contains("presets: rust, node, python"), "{e}");
    }

    #[test]
    fn a_directory_that_exists_gets_its_variable() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".rustup")).unwrap();
        std::fs::create_dir(d.path().join(".cargo")).unwrap();
        let r = find("rust")
            .unwrap()
            .resolve(&HostDirs {
                home: Some(d.path().to_path_buf()),
                var: |_| None,
            })
            .unwrap();
        assert_eq!(
            r.env,
            [
                (
                    OsString::from("CARGO_HOME"),
                    d.path().join(".cargo").into_os_string()
                ),
                (
                    OsString::from("RUSTUP_HOME"),
                    d.path().join(".rustup").into_os_string()
                )
            ]
        );
    }

    /// Credential files inside the toolchains' own directories (beside the
    /// ones directly in HOME): what each preset must deny or not grant.
    const IN_TOOLCHAINS: &[&str] = &[
        ".nvm/versions/node/v20.1.0/etc/npmrc",
        ".nvm/versions/node/v22.0.0/etc/npmrc",
        ".nvm/versions/io.js/v3.3.1/etc/npmrc",
        ".pyenv/versions/3.12.1/pip.conf",
        ".pyenv/versions/3.12.1/envs/work/pip.conf",
    ];

    /// Toolchain files the presets exist to grant.
    const TOOLCHAIN: &[&str] = &[
        ".cargo/bin/cargo",
        ".cargo/registry/index/x",
        ".cargo/git/db/x",
        ".rustup/toolchains/stable/bin/rustc",
        ".npm/_cacache/x",
        ".nvm/versions/node/v20.1.0/bin/node",
        ".nvm/nvm.sh",
        ".pyenv/versions/3.12.1/bin/python3",
    ];

    /// A fake HOME holding every credential of the table and the toolchains.
    fn fake_home() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(d.path()).unwrap();
        for rel in HOME_CREDENTIALS
            .iter()
            .chain(IN_TOOLCHAINS)
            .chain(TOOLCHAIN)
        {
            let p = home.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "secret-or-tool").unwrap();
        }
        d
    }

    /// Each preset's rules in a plan of their own (as `terra run` adds
    /// them: tree, missing skip), resolved on this host.
    fn plan_of(r: &Resolved) -> terra_policy::SandboxPlan {
        let mut b = MirBuilder::new();
        for rule in &r.rules {
            b.add_rule(
                rule.access,
                RootKind::Host,
                rule.path.to_str().unwrap(),
                Scope::Tree,
                Missing::Skip,
            )
            .unwrap();
        }
        let mir = b.build().unwrap();
        terra_policy::compile_plan(&mir, &HostBindings::default(), CapabilitySet::ALL).unwrap()
    }

    /// The permission of `path` (a file present) under the plan.
    fn permission(plan: &terra_policy::SandboxPlan, path: &Path) -> Permission {
        plan.evaluate(path.to_str().unwrap()).unwrap().permission
    }

    #[test]
    fn no_preset_grants_a_credential_and_every_one_still_grants_its_toolchain() {
        let d = fake_home();
        let home = std::fs::canonicalize(d.path()).unwrap();
        let dirs = HostDirs {
            home: Some(home.clone()),
            var: |_| None,
        };
        let mut granted: Vec<&str> = Vec::new();
        for preset in PRESETS {
            let r = preset.resolve(&dirs).unwrap();
            let plan = plan_of(&r);
            for rel in HOME_CREDENTIALS.iter().chain(IN_TOOLCHAINS) {
                assert_eq!(
                    permission(&plan, &home.join(rel)),
                    Permission::None,
                    "--preset {} exposes ~/{rel}: {:?}",
                    preset.name,
                    r.rules
                );
            }
            granted.extend(
                TOOLCHAIN
                    .iter()
                    .copied()
                    .filter(|rel| permission(&plan, &home.join(rel)) > Permission::None),
            );
        }
        // Twin: every toolchain file is granted by some preset.
        granted.sort();
        let mut all = TOOLCHAIN.to_vec();
        all.sort();
        assert_eq!(granted, all);
    }

    #[test]
    fn a_preset_directory_holding_home_credentials_is_refused() {
        let d = fake_home();
        let home = std::fs::canonicalize(d.path()).unwrap();
        // A variable pointing at HOME itself, or at a parent of a credential.
        for (preset, var) in [
            ("node", "NVM_DIR"),
            ("node", "npm_config_cache"),
            ("python", "PYENV_ROOT"),
            ("rust", "RUSTUP_HOME"),
        ] {
            for target in [home.clone(), home.join(".config"), PathBuf::from("/")] {
                let e = find(preset)
                    .unwrap()
                    .resolve(&with_var(&home, var, &target))
                    .expect_err(&format!("{var}={}", target.display()))
                    .to_string();
                assert!(e.contains("(credentials)"), "{e}");
            }
        }
        // CARGO_HOME=$HOME: only its bin, registry and git are granted,
        // none of which holds a credential of the table.
        let r = find("rust")
            .unwrap()
            .resolve(&with_var(&home, "CARGO_HOME", &home))
            .unwrap();
        let plan = plan_of(&r);
        for rel in HOME_CREDENTIALS {
            assert_eq!(
                permission(&plan, &home.join(rel)),
                Permission::None,
                "{rel}"
            );
        }
    }

    #[test]
    fn the_names_are_the_presets() {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        assert_eq!(names, NAMES);
    }

    #[test]
    fn missing_caches_are_made_and_a_file_in_their_place_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(d.path()).unwrap();
        let dirs = HostDirs {
            home: Some(home.clone()),
            var: |_| None,
        };
        let r = find("rust").unwrap().resolve(&dirs).unwrap();
        assert!(make_caches(&r).unwrap().is_empty());
        assert!(home.join(".cargo/registry").is_dir());
        assert!(home.join(".cargo/git").is_dir());
        // Only the caches: the installed binaries are not made.
        assert!(!home.join(".cargo/bin").exists());
        // Made again: nothing to do.
        make_caches(&r).unwrap();
        let py = find("python").unwrap().resolve(&dirs).unwrap();
        std::fs::create_dir_all(home.join(".cache")).unwrap();
        std::fs::write(home.join(".cache/pip"), "not a directory").unwrap();
        let e = make_caches(&py).unwrap_err().to_string();
        assert!(e.contains("is not a directory"), "{e}");
    }

    #[test]
    fn certificate_variables_pass_with_their_files_readable() {
        let d = fake_home();
        let home = std::fs::canonicalize(d.path()).unwrap();
        let ca = home.join("corp-ca.pem");
        std::fs::write(&ca, "CA").unwrap();
        // Only when set to a path that exists; each toolchain its own.
        for (preset, var) in [
            ("rust", "CARGO_HTTP_CAINFO"),
            ("rust", "SSL_CERT_FILE"),
            ("python", "PIP_CERT"),
            ("python", "REQUESTS_CA_BUNDLE"),
            ("node", "NODE_EXTRA_CA_CERTS"),
        ] {
            let r = find(preset)
                .unwrap()
                .resolve(&with_var(&home, var, &ca))
                .unwrap();
            assert!(
                r.env
                    .contains(&(OsString::from(var), ca.clone().into_os_string())),
                "{preset} {var}: {:?}",
                r.env
            );
            assert_eq!(
                permission(&plan_of(&r), &ca),
                Permission::Read,
                "{preset} {var}"
            );
            // Twin: a missing file passes nothing.
            let r = find(preset)
                .unwrap()
                .resolve(&with_var(&home, var, &home.join("absent.pem")))
                .unwrap();
            assert!(!r.env.iter().any(|(k, _)| k == var), "{preset} {var}");
        }
        // Another toolchain's variable is not this preset's.
        let r = find("node")
            .unwrap()
            .resolve(&with_var(&home, "PIP_CERT", &ca))
            .unwrap();
        assert!(!r.env.iter().any(|(k, _)| k == "PIP_CERT"));
        // A certificate path that is (or lies in) a credential is refused.
        let inside = home.join(".netrc");
        let e = find("python")
            .unwrap()
            .resolve(&with_var(&home, "PIP_CERT", &inside))
            .unwrap_err()
            .to_string();
        assert!(e.contains("(credentials)"), "{e}");
    }

    thread_local! {
        /// The one variable [`with_var`]'s host has.
        static VAR: std::cell::RefCell<Option<(String, OsString)>> = const { std::cell::RefCell::new(None) };
    }

    /// A host whose environment holds only `name=value` (on this thread).
    fn with_var(home: &Path, name: &str, value: &Path) -> HostDirs {
        VAR.with(|v| *v.borrow_mut() = Some((name.to_string(), value.as_os_str().to_owned())));
        HostDirs {
            home: Some(home.to_path_buf()),
            var: |n| {
                VAR.with(|v| {
                    v.borrow()
                        .as_ref()
                        .filter(|(k, _)| k == n)
                        .map(|(_, x)| x.clone())
                })
            },
        }
    }
}
