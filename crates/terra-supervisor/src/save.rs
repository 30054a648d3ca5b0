//! Saving a command line that worked: `terra run --save-profile NAME`
//! writes the run's policy (the default or given one with the command
//! line's `--read`, `--write`, `--deny`, `--allow-net` and presets in it) as
//! the profile `NAME.json`, and the variables the presets and `--env` set as
//! `NAME.env.json` beside it ([`crate::profile`]); `--export-policy FILE`
//! writes the same policy as a JSON source v3 file. Both are written after
//! a run whose workload exited 0 (or by `--dry-run`), atomically, and an
//! existing file is replaced only with `--force`.
//!
//! The policy is rendered from the run's MIR, so what is saved is exactly
//! what was decided: compiling it again gives the same decision digest.
//! A variable `--env NAME` copied from terra's environment is saved by name
//! only (`null`): its value is read from the environment of each later run,
//! never written to disk.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use terra_policy::{Mir, RootKind};

use crate::error::{Error, Result};
use crate::files::{Existing, Follow};

/// One variable of a saved profile: a value, or None for "copy it from
/// terra's environment at each run".
pub type SavedVar = (OsString, Option<OsString>);

/// The run's policy as JSON source v3.
pub fn policy_source(mir: &Mir) -> Result<Value> {
    let mut rules = Vec::new();
    for r in mir.rules() {
        let t = &r.target;
        let path = match t.root {
            RootKind::MinimalRuntime if t.path.is_empty() => json!({"special": "minimal-runtime"}),
            RootKind::MinimalRuntime => {
                return Err(Error::Argument(format!(
                    "the policy's rule on minimal-runtime path {:?} has no JSON source form",
                    t.path
                )))
            }
            RootKind::Workspace => json!({"root": "workspace", "relative": t.path}),
            RootKind::Temp => json!({"root": "temp", "relative": t.path}),
            RootKind::Host => json!({"absolute": t.path}),
        };
        rules.push(json!({
            "access": r.access.name(),
            "path": path,
            "scope": t.scope.name(),
            "missing": t.missing.name(),
        }));
    }
    let mut network = Map::new();
    network.insert("mode".into(), json!(mir.network().name()));
    if !mir.destinations().is_empty() {
        let allow: Vec<Value> = mir
            .destinations()
            .iter()
            .map(|d| {
                json!({
                    "protocol": "tcp",
                    "host": d.host,
                    "port": d.port,
                    "requireTlsSni": d.require_tls_sni,
                    "allowPrivateAddresses": d.allow_private_addresses,
                })
            })
            .collect();
        network.insert("allow".into(), Value::Array(allow));
    }
    Ok(json!({
        "$schema": "https://schemas.maelys.dev/mir-source/v3/schema.json",
        "formatVersion": 3,
        "filesystem": { "default": "deny", "rules": rules },
        "network": network,
        "process": { "treeConfinement": mir.process_tree().name() },
        "root": { "mode": mir.root_mode().name() },
    }))
}

/// The policy source as the bytes written (pretty JSON, a final newline).
pub fn policy_bytes(mir: &Mir) -> Result<Vec<u8>> {
    let mut b = serde_json::to_vec_pretty(&policy_source(mir)?)
        .map_err(|e| Error::Argument(format!("cannot render the policy: {e}")))?;
    b.push(b'\n');
    Ok(b)
}

/// The variables as `NAME.env.json` holds them.
pub fn env_bytes(vars: &[SavedVar]) -> Result<Vec<u8>> {
    let mut m = Map::new();
    for (k, v) in vars {
        let name = k.to_str().ok_or_else(|| {
            Error::Argument(format!(
                "--save-profile: the variable {k:?} is not UTF-8 and cannot be saved"
            ))
        })?;
        let value = match v {
            None => Value::Null,
            Some(v) => Value::String(
                v.to_str()
                    .ok_or_else(|| {
                        Error::Argument(format!(
                            "--save-profile: the value of {name} is not UTF-8 and cannot be saved"
                        ))
                    })?
                    .to_owned(),
            ),
        };
        m.insert(name.to_owned(), value);
    }
    let mut b = serde_json::to_vec_pretty(&Value::Object(m))
        .map_err(|e| Error::Argument(format!("cannot render the variables: {e}")))?;
    b.push(b'\n');
    Ok(b)
}

/// Where `--save-profile NAME` writes: the profile's file and its
/// variables' file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileTarget {
    pub name: String,
    pub policy: PathBuf,
    pub env: PathBuf,
}

/// The files of the profile `name`, refused before the run when one exists
/// and `force` is not given (so no run is spent on a save that would fail).
pub fn profile_target(name: &str, force: bool) -> Result<ProfileTarget> {
    let policy = crate::profile::file_for(name, "--save-profile")?;
    let env = policy.with_file_name(format!("{name}.env.json"));
    let t = ProfileTarget {
        name: name.to_owned(),
        policy,
        env,
    };
    if !force {
        for f in [&t.policy, &t.env] {
            refuse_existing(f, "--save-profile", name)?;
        }
    }
    Ok(t)
}

/// `--export-policy FILE` refused before the run when FILE exists and
/// `force` is not given.
pub fn check_export(file: &Path, force: bool) -> Result<()> {
    if force {
        return Ok(());
    }
    refuse_existing(file, "--export-policy", &file.display().to_string())
}

fn refuse_existing(f: &Path, flag: &str, what: &str) -> Result<()> {
    if std::fs::symlink_metadata(f).is_ok() {
        return Err(Error::Argument(format!(
            "{flag} {what}: {} exists; add --force to replace it",
            f.display()
        )));
    }
    Ok(())
}

fn existing(force: bool) -> Existing {
    if force {
        Existing::ReplaceRegular
    } else {
        Existing::Refuse
    }
}

/// Writes the profile: the policy, and the variables (an older variables
/// file is replaced; with none to save, a forced save removes it so the
/// profile is what this command line was).
pub fn write_profile(t: &ProfileTarget, mir: &Mir, vars: &[SavedVar], force: bool) -> Result<()> {
    let dir = t.policy.parent().unwrap_or(Path::new("/"));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io("cannot make the profiles directory", dir, e))?;
    let label = |p: &Path| format!("--save-profile {}: {}", t.name, p.display());
    // The variables first: a profile never appears without them.
    if vars.is_empty() {
        if force {
            match std::fs::remove_file(&t.env) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("cannot remove", &t.env, e)),
            }
        }
    } else {
        crate::files::write_file(
            &t.env,
            &env_bytes(vars)?,
            0o600,
            Follow::DirComponents,
            existing(force),
            true,
        )
        .map_err(|e| Error::Output(e).context(label(&t.env)))?;
    }
    crate::files::write_file(
        &t.policy,
        &policy_bytes(mir)?,
        0o600,
        Follow::DirComponents,
        existing(force),
        true,
    )
    .map_err(|e| Error::Output(e).context(label(&t.policy)))
}

/// Writes the policy source to `file`.
pub fn export_policy(file: &Path, mir: &Mir, force: bool) -> Result<()> {
    crate::files::write_file(
        file,
        &policy_bytes(mir)?,
        0o644,
        Follow::DirComponents,
        existing(force),
        true,
    )
    .map_err(|e| Error::Output(e).context(format!("--export-policy {}", file.display())))
}

use std::os::unix::fs::DirBuilderExt as _;

#[cfg(test)]
mod tests {
    use super::*;
    use terra_policy::{Access, Missing, NetworkMode, Scope};

    #[test]
    fn the_rendered_source_compiles_to_the_same_decision() {
        let default =
            terra_policy::compile_source(terra_policy::DEFAULT_POLICY_SOURCE.as_bytes()).unwrap();
        let mut b = default.to_builder();
        b.add_rule(
            Access::Read,
            RootKind::Host,
            "/opt/tool",
            Scope::Tree,
            Missing::Skip,
        )
        .unwrap();
        b.add_rule(
            Access::Deny,
            RootKind::Workspace,
            ".git/hooks",
            Scope::Exact,
            Missing::Error,
        )
        .unwrap();
        b.add_rule(
            Access::Write,
            RootKind::Temp,
            "cache",
            Scope::Tree,
            Missing::Error,
        )
        .unwrap();
        b.set_network(NetworkMode::Mediated);
        b.add_destination("pypi.org", 443, false, false).unwrap();
        b.add_destination("mirror.corp", 8443, true, true).unwrap();
        b.set_process_tree(terra_policy::ProcessTree::Disabled);
        for mir in [default.clone(), b.build().unwrap()] {
            let bytes = policy_bytes(&mir).unwrap();
            let again = terra_policy::compile_source(&bytes).unwrap();
            assert_eq!(again.decision_digest(), mir.decision_digest());
            assert_eq!(again.bytes(), mir.bytes());
        }
    }

    #[test]
    fn copied_variables_are_saved_by_name_only() {
        let b = env_bytes(&[
            ("PIP_CERT".into(), Some("/etc/ssl/corp.pem".into())),
            ("GITHUB_TOKEN".into(), None),
        ])
        .unwrap();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["PIP_CERT"], "/etc/ssl/corp.pem");
        assert_eq!(v["GITHUB_TOKEN"], Value::Null);
    }
}
