//! The workspace's git metadata is read-only in the box.
//!
//! A workload that can write `.git/hooks/*` or `.git/config`
//! (`core.hooksPath`, `core.fsmonitor`, filters, aliases) plants code that
//! the user's next `git` on the host runs, outside every box. So when the
//! workspace holds a `.git` entry (a directory, or the `gitdir:` file of a
//! worktree or submodule), the run's policy gets `deny-write workspace:.git`
//! (tree, `missing: skip`) beside the workspace's write grant: the box can
//! read it (`git status`, `git log`, `git diff` work) but not change it.
//!
//! The rule is added here, when the run is composed, and not written into
//! the embedded default policy: a policy can only say "deny-write `.git`,
//! also when absent", and an absent denied name is protected from creation
//! (`fs-protect-create`): on the linux backend a placeholder `.git` file for
//! the run, which breaks `git init` and every tool that asks "is this a
//! repository?", and on the landlock backend a refusal of every run in a
//! workspace without `.git`. Adding the rule only when `.git` exists keeps
//! both working; the receipt's overlay and the decision digest record it.
//!
//! Who decides otherwise:
//! - `--write .git` (the workspace's `.git` exactly) lifts it for the run, so
//!   `git commit` inside the box works; `--write` of a path inside `.git` is
//!   refused (it would be read-only anyway: a deny-write wins over a write).
//! - A policy file (`--policy`, a profile) that has a rule on the
//!   workspace's `.git` or below it decides about `.git` itself; any other
//!   policy file gets the protection like the default policy.

use std::io::ErrorKind;
use std::path::Path;

use terra_policy::{Access, Mir, MirBuilder, Missing, RootKind, Scope};

use crate::error::{Error, Result};

/// The name git looks for in the workspace.
pub const GIT: &str = ".git";

/// The line the run's overlay (receipt, dry run) shows for the added rule.
pub const OVERLAY_LINE: &str =
    "deny-write workspace:.git (the workspace's git metadata; --write .git lets the box write it)";

/// What the command line's `--write` rules say about the workspace's `.git`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliGrant {
    /// No `--write` names it.
    None,
    /// `--write .git`: the user lets the box write it.
    Whole,
}

/// Reads one `--write` rule (as resolved by the command line: root and
/// normalized path): `--write .git` grants the whole; a path strictly inside
/// `.git` is refused, naming the fix.
pub fn cli_write(root: RootKind, path: &str, flag: &str) -> Result<CliGrant> {
    if root != RootKind::Workspace {
        return Ok(CliGrant::None);
    }
    let path = terra_policy::model::normalize_path(root, path)
        .map_err(|e| Error::policy(flag.to_string(), e))?;
    if path == GIT {
        return Ok(CliGrant::Whole);
    }
    if path.starts_with(".git/") {
        return Err(Error::Argument(format!(
            "{flag}: the workspace's .git stays read-only in the box (a workload writing its hooks or config \
             plants code your next git runs); --write .git makes all of it writable"
        )));
    }
    Ok(CliGrant::None)
}

/// Whether the policy already has a rule on the workspace's `.git` or below
/// it (a policy file that decided about it).
pub fn policy_names_git(policy: &Mir) -> bool {
    policy.rules().iter().any(|r| {
        r.target.root == RootKind::Workspace
            && (r.target.path == GIT || r.target.path.starts_with(".git/"))
    })
}

/// Whether `workspace` (canonical) holds a `.git` entry of any type. An
/// error other than "absent" refuses: the protection is never guessed away.
pub fn has_git(workspace: &Path) -> Result<bool> {
    let p = workspace.join(GIT);
    match std::fs::symlink_metadata(&p) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOTDIR as i32) => Ok(false),
        Err(e) => Err(Error::io("cannot tell whether the workspace has", &p, e)),
    }
}

/// Adds `deny-write workspace:.git` to `builder` when the workspace has a
/// `.git`, nothing granted it and the policy did not decide about it;
/// returns whether it did.
pub fn protect(
    builder: &mut MirBuilder,
    policy: &Mir,
    workspace: &Path,
    grant: CliGrant,
) -> Result<bool> {
    if grant == CliGrant::Whole || policy_names_git(policy) || !has_git(workspace)? {
        return Ok(false);
    }
    builder
        .add_rule(
            Access::DenyWrite,
            RootKind::Workspace,
            GIT,
            Scope::Tree,
            Missing::Skip,
        )
        .map_err(|e| Error::policy("the workspace's .git", e))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_policy() -> Mir {
        terra_policy::compile_source(terra_policy::DEFAULT_POLICY_SOURCE.as_bytes()).unwrap()
    }

    fn added(ws: &Path, policy: &Mir, grant: CliGrant) -> bool {
        let mut b = policy.to_builder();
        let did = protect(&mut b, policy, ws, grant).unwrap();
        let with = b.build().unwrap();
        let has_rule = with.rules().iter().any(|r| {
            r.access == Access::DenyWrite
                && r.target.root == RootKind::Workspace
                && r.target.path == GIT
                && r.target.scope == Scope::Tree
        });
        // Added: the rule is there now and the decision changed.
        assert_eq!(did, has_rule && with != *policy);
        did
    }

    #[test]
    fn a_git_entry_of_any_type_is_protected_and_an_absent_one_is_not() {
        let p = default_policy();
        let d = tempfile::tempdir().unwrap();
        assert!(!added(d.path(), &p, CliGrant::None), "no .git: no rule");
        std::fs::create_dir(d.path().join(".git")).unwrap();
        assert!(added(d.path(), &p, CliGrant::None), "a .git directory");
        let f = tempfile::tempdir().unwrap();
        std::fs::write(f.path().join(".git"), "gitdir: /elsewhere\n").unwrap();
        assert!(added(f.path(), &p, CliGrant::None), "a worktree's .git file");
        let l = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/nowhere", l.path().join(".git")).unwrap();
        assert!(added(l.path(), &p, CliGrant::None), "a dangling .git symlink");
    }

    #[test]
    fn the_explicit_grant_and_a_policy_that_names_git_decide_instead() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".git")).unwrap();
        assert!(!added(d.path(), &default_policy(), CliGrant::Whole));
        for (access, path) in [
            (Access::Write, ".git"),
            (Access::DenyWrite, ".git"),
            (Access::Read, ".git/hooks"),
        ] {
            let mut b = default_policy().to_builder();
            b.add_rule(access, RootKind::Workspace, path, Scope::Tree, Missing::Skip)
                .unwrap();
            let own = b.build().unwrap();
            assert!(policy_names_git(&own), "{access} {path}");
            assert!(!added(d.path(), &own, CliGrant::None), "{access} {path}");
        }
        // A name that only starts like it is not it.
        let mut b = default_policy().to_builder();
        b.add_rule(
            Access::Write,
            RootKind::Workspace,
            ".github",
            Scope::Tree,
            Missing::Skip,
        )
        .unwrap();
        assert!(!policy_names_git(&b.build().unwrap()));
    }

    #[test]
    fn cli_writes_are_read_on_segment_boundaries() {
        let w = RootKind::Workspace;
        assert_eq!(cli_write(w, ".git", "--write .git").unwrap(), CliGrant::Whole);
        assert_eq!(cli_write(w, "./.git/", "--write ./.git/").unwrap(), CliGrant::Whole);
        assert_eq!(cli_write(w, "", "--write .").unwrap(), CliGrant::None);
        assert_eq!(cli_write(w, ".gitignore", "--write x").unwrap(), CliGrant::None);
        assert_eq!(
            cli_write(RootKind::Host, ".git", "--write /x").unwrap(),
            CliGrant::None
        );
        let e = cli_write(w, ".git/hooks", "--write .git/hooks").unwrap_err();
        assert!(e.to_string().contains("--write .git makes all of it writable"), "{e}");
    }
}
