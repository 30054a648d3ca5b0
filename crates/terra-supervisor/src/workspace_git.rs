//! The workspace's git metadata is read-only in the box.
//!
//! A workload that can write `.git/hooks/*` or `.git/config`
//! (`core.hooksPath`, `core.fsmonitor`, filters, aliases) plants code that
//! the user's next `git` on the host runs, outside every box. So the run's
//! policy gets a `deny-write` rule (tree, `missing: skip`) beside the
//! workspace's write grant for every path in the workspace that the
//! repository's git reads as code or configuration:
//!
//! - the workspace's `.git` (a directory, or the `gitdir:` file of a
//!   worktree or submodule), when it exists;
//! - each submodule's `.git` file (`submodule.NAME.path` in `.gitmodules`)
//!   that exists: the superproject's `git status` follows it;
//! - a hooks directory (`core.hooksPath`, e.g. husky's `.husky/_`) and an
//!   included configuration file (`include.path`, `includeIf.*.path`) that
//!   the repository's or the user's git configuration names inside the
//!   workspace, when they exist. The repository is the one git would find:
//!   the workspace's own, or the checkout the workspace is a directory of.
//!
//! The box can read them (`git status`, `git log`, `git diff` work) but not
//! change, rename or remove them.
//!
//! The rules are added here, when the run is composed, and not written into
//! the embedded default policy: a policy can only say "deny-write `.git`,
//! also when absent", and an absent denied name is protected from creation
//! (`fs-protect-create`): on the linux backend a placeholder `.git` file for
//! the run, which breaks `git init` and every tool that asks "is this a
//! repository?", and on the landlock backend a refusal of every run in a
//! workspace without `.git`. Adding the rules from what exists keeps both
//! working; the receipt's overlay and the decision digest record them.
//!
//! Who decides otherwise:
//! - `--write PATH` naming a protected path exactly (`--write .git`) lifts
//!   that protection for the run, so `git commit` inside the box works;
//!   `--write` of a path strictly inside one is refused (it would stay
//!   read-only: a deny-write wins over a write).
//! - A policy file (`--policy`, a profile) that has a rule on a protected
//!   path or below it decides about that path itself; any other policy file
//!   gets the protection like the default policy.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use terra_policy::{Access, Mir, MirBuilder, Missing, RootKind, Scope};

use crate::error::{Error, Result};

/// The name git looks for.
pub const GIT: &str = ".git";

/// Most configuration files followed through includes (git's own limit is 10 deep).
const MAX_CONFIG_FILES: usize = 32;

/// One workspace path the box may read but not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    /// Relative to the workspace, normalized, never "".
    pub rel: String,
    /// Why, for the overlay line.
    pub why: String,
}

/// The workspace's protected paths, before the command line and the policy
/// had their say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitProtection {
    pub paths: Vec<Protected>,
}

impl GitProtection {
    /// What this workspace's repository needs protected; `home` is the
    /// caller's HOME (for `~/` and the user's git configuration).
    pub fn find(workspace: &Path, home: Option<&Path>) -> Result<GitProtection> {
        let mut paths = Vec::new();
        if exists(&workspace.join(GIT))? {
            paths.push(Protected {
                rel: GIT.into(),
                why: "the workspace's git metadata".into(),
            });
        }
        if let Some(top) = repository_top(workspace)? {
            for (rel, why) in submodule_gitfiles(&top, workspace)? {
                paths.push(Protected { rel, why });
            }
            for (abs, why) in configured_paths(&top, home) {
                let Some(rel) = inside(&abs, workspace) else {
                    continue;
                };
                if rel.is_empty() {
                    return Err(Error::Argument(format!(
                        "{why} names the workspace itself: every file the box writes there would be read by \
                         your next git; run with a policy file that decides what the box may write"
                    )));
                }
                paths.push(Protected { rel, why });
            }
        }
        // A path inside another protected one adds nothing.
        paths.sort_by(|a, b| a.rel.cmp(&b.rel));
        let mut kept: Vec<Protected> = Vec::new();
        for p in paths {
            if !kept.iter().any(|k| same_or_below(&p.rel, &k.rel)) {
                kept.push(p);
            }
        }
        Ok(GitProtection { paths: kept })
    }

    /// Reads one `--write` rule (root and path as the command line resolved
    /// it): naming a protected path exactly lifts its protection; a path
    /// strictly inside one is refused, naming the fix.
    pub fn cli_write(&mut self, root: RootKind, path: &str, flag: &str) -> Result<()> {
        if root != RootKind::Workspace {
            return Ok(());
        }
        let path = terra_policy::model::normalize_path(root, path)
            .map_err(|e| Error::policy(flag.to_string(), e))?;
        if let Some(p) = self
            .paths
            .iter()
            .find(|p| path != p.rel && same_or_below(&path, &p.rel))
        {
            return Err(Error::Argument(format!(
                "{flag}: {} stays read-only in the box ({}: a workload writing it plants code your next git \
                 runs); --write {} makes all of it writable",
                p.rel, p.why, p.rel
            )));
        }
        self.paths.retain(|p| p.rel != path);
        Ok(())
    }

    /// Adds a deny-write for each protected path the policy does not name
    /// itself; returns those added.
    pub fn apply(&self, builder: &mut MirBuilder, policy: &Mir) -> Result<Vec<Protected>> {
        let mut added = Vec::new();
        for p in self.paths.iter().filter(|p| !policy_names(policy, &p.rel)) {
            builder
                .add_rule(
                    Access::DenyWrite,
                    RootKind::Workspace,
                    &p.rel,
                    Scope::Tree,
                    Missing::Skip,
                )
                .map_err(|e| Error::policy(format!("deny-write workspace:{}", p.rel), e))?;
            added.push(p.clone());
        }
        Ok(added)
    }
}

impl Protected {
    /// The run's overlay line (receipt, dry run).
    pub fn overlay_line(&self) -> String {
        format!(
            "deny-write workspace:{} ({}; --write {} lets the box write it)",
            self.rel, self.why, self.rel
        )
    }
}

/// Whether the policy has a rule on workspace `rel` or below it.
fn policy_names(policy: &Mir, rel: &str) -> bool {
    policy
        .rules()
        .iter()
        .any(|r| r.target.root == RootKind::Workspace && same_or_below(&r.target.path, rel))
}

/// `p` is `base` or below it, on segment boundaries (relative paths).
fn same_or_below(p: &str, base: &str) -> bool {
    p == base || (p.len() > base.len() && p.starts_with(base) && p.as_bytes()[base.len()] == b'/')
}

/// Whether `p` exists (any type, links not followed). An error other than
/// "absent" refuses: a protection is never guessed away.
fn exists(p: &Path) -> Result<bool> {
    match std::fs::symlink_metadata(p) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOTDIR as i32) => Ok(false),
        Err(e) => Err(Error::io("cannot tell whether there is", p, e)),
    }
}

/// The top of the working tree git would use in `workspace`: the
/// workspace or its nearest ancestor holding a `.git`.
fn repository_top(workspace: &Path) -> Result<Option<PathBuf>> {
    for dir in workspace.ancestors() {
        if exists(&dir.join(GIT))? {
            return Ok(Some(dir.to_path_buf()));
        }
    }
    Ok(None)
}

/// `abs` relative to `workspace` when it lies inside it (lexically, after
/// resolving what exists of it).
fn inside(abs: &Path, workspace: &Path) -> Option<String> {
    let resolved = resolve_existing_prefix(abs);
    let rel = resolved.strip_prefix(workspace).ok()?;
    let rel = rel.to_str()?;
    terra_policy::model::normalize_path(RootKind::Workspace, rel).ok()
}

/// `abs` with `..` and `.` removed lexically and its longest existing
/// prefix canonicalized (symlinks the host has).
fn resolve_existing_prefix(abs: &Path) -> PathBuf {
    let mut lexical = PathBuf::from("/");
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::Normal(n) => lexical.push(n),
            _ => {}
        }
    }
    let mut rest = Vec::new();
    let mut cur = lexical.clone();
    loop {
        if let Ok(real) = std::fs::canonicalize(&cur) {
            let mut out = real;
            out.extend(rest.iter().rev());
            return out;
        }
        match (cur.file_name().map(|n| n.to_owned()), cur.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                cur = parent.to_path_buf();
            }
            _ => return lexical,
        }
    }
}

/// The `.git` files of the repository's submodules (`submodule.*.path` in
/// `top/.gitmodules`) that exist inside the workspace.
fn submodule_gitfiles(top: &Path, workspace: &Path) -> Result<Vec<(String, String)>> {
    let Ok(text) = std::fs::read_to_string(top.join(".gitmodules")) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (key, value) in config_entries(&text) {
        let Some(name) = key
            .strip_prefix("submodule.")
            .and_then(|k| k.strip_suffix(".path"))
        else {
            continue;
        };
        if value.is_empty() || Path::new(&value).is_absolute() {
            continue;
        }
        let gitfile = top.join(&value).join(GIT);
        if !exists(&gitfile)? {
            continue;
        }
        if let Some(rel) = inside(&gitfile, workspace) {
            out.push((rel, format!("the git metadata of submodule {name}")));
        }
    }
    Ok(out)
}

/// Paths the git configuration of the repository at `top` and of the user
/// names as hooks or as more configuration: (absolute path, why).
fn configured_paths(top: &Path, home: Option<&Path>) -> Vec<(PathBuf, String)> {
    let mut files: Vec<PathBuf> = vec![PathBuf::from("/etc/gitconfig")];
    if let Some(h) = home {
        files.push(h.join(".gitconfig"));
        let xdg = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| h.join(".config"));
        files.push(xdg.join("git/config"));
    }
    if let Some((gitdir, common)) = git_dirs(top) {
        files.push(common.join("config"));
        files.push(gitdir.join("config.worktree"));
    }
    let mut out = Vec::new();
    let mut read = 0;
    while let Some(file) = (read < files.len()).then(|| files[read].clone()) {
        read += 1;
        if read > MAX_CONFIG_FILES {
            break;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let dir = file.parent().unwrap_or(Path::new("/")).to_path_buf();
        for (key, value) in config_entries(&text) {
            let include =
                key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path"));
            if key == "core.hookspath" {
                // Only one that exists: a placeholder where a tool (husky)
                // is about to make the directory would break it.
                if let Some(p) = expand(&value, home, top).filter(|p| p.exists()) {
                    out.push((p, format!("core.hooksPath in {}", file.display())));
                }
            } else if include {
                // Only one that exists: an absent one would be held by a
                // placeholder git cannot read (it then refuses to run).
                if let Some(p) = expand(&value, home, &dir).filter(|p| p.exists()) {
                    out.push((p.clone(), format!("include.path in {}", file.display())));
                    if !files.contains(&p) {
                        files.push(p);
                    }
                }
            }
        }
    }
    out
}

/// The git directory and the common directory (`commondir`) of the working
/// tree at `top`: `.git` itself, or where its `gitdir:` file points.
fn git_dirs(top: &Path) -> Option<(PathBuf, PathBuf)> {
    let dotgit = top.join(GIT);
    let gitdir = if std::fs::symlink_metadata(&dotgit).ok()?.is_file() {
        let text = std::fs::read_to_string(&dotgit).ok()?;
        let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
        top.join(target)
    } else {
        dotgit
    };
    let common = match std::fs::read_to_string(gitdir.join("commondir")) {
        Ok(c) => gitdir.join(c.trim()),
        Err(_) => gitdir.clone(),
    };
    Some((gitdir, common))
}

/// A path value of git's configuration made absolute: `~/` against HOME,
/// a relative one against `base`. Other forms (`~user/`, `%(prefix)/`)
/// name nothing in a workspace.
fn expand(value: &str, home: Option<&Path>, base: &Path) -> Option<PathBuf> {
    if value.is_empty() {
        return None;
    }
    if let Some(rest) = value.strip_prefix("~/") {
        return home.map(|h| h.join(rest));
    }
    if value.starts_with('~') || value.starts_with("%(") {
        return None;
    }
    Some(base.join(value))
}

/// The `section[.subsection].key = value` entries of a git configuration
/// file: section and key lowercased (git compares them without case), the
/// subsection as written, quotes and escapes removed, `\` line
/// continuations joined. A bare key is `true`.
fn config_entries(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut line = line.trim_start().to_string();
        if let Some(rest) = line.strip_prefix('[') {
            let Some(end) = rest.find(']') else { continue };
            let header = &rest[..end];
            section = match header.split_once(char::is_whitespace) {
                Some((name, sub)) => {
                    let sub = sub.trim().trim_matches('"').replace("\\\"", "\"");
                    format!("{}.{sub}", name.to_ascii_lowercase())
                }
                None => match header.split_once('.') {
                    Some((name, sub)) => format!("{}.{}", name.to_ascii_lowercase(), sub),
                    None => header.to_ascii_lowercase(),
                },
            };
            line = rest[end + 1..].trim_start().to_string();
            if line.is_empty() {
                continue;
            }
        }
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') || section.is_empty() {
            continue;
        }
        while line.ends_with('\\') && !line.ends_with("\\\\") {
            line.pop();
            match lines.next() {
                Some(next) => line.push_str(next),
                None => break,
            }
        }
        let (key, raw) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v)),
            None => (line.trim(), None),
        };
        let value = raw.map_or_else(|| "true".to_string(), config_value);
        out.push((format!("{section}.{}", key.to_ascii_lowercase()), value));
    }
    out
}

/// One value: quotes removed, escapes decoded, an unquoted comment cut,
/// surrounding blanks trimmed.
fn config_value(raw: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('b') => {
                    out.pop();
                }
                Some(o) => out.push(o),
                None => {}
            },
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_policy() -> Mir {
        terra_policy::compile_source(terra_policy::DEFAULT_POLICY_SOURCE.as_bytes()).unwrap()
    }

    fn canonical_tempdir() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = std::fs::canonicalize(d.path()).unwrap();
        (d, p)
    }

    fn rels(g: &GitProtection) -> Vec<&str> {
        g.paths.iter().map(|p| p.rel.as_str()).collect()
    }

    /// The deny-write rules `apply` adds to the default policy.
    fn added(g: &GitProtection, policy: &Mir) -> Vec<String> {
        let mut b = policy.to_builder();
        let lines = g.apply(&mut b, policy).unwrap();
        assert!(lines.iter().all(|p| p.overlay_line().contains(&p.rel)));
        let with = b.build().unwrap();
        let rules: Vec<String> = with
            .rules()
            .iter()
            .filter(|r| r.access == Access::DenyWrite && r.target.root == RootKind::Workspace)
            .map(|r| r.target.path.clone())
            .collect();
        assert_eq!(lines.len(), rules.len());
        rules
    }

    #[test]
    fn a_git_entry_of_any_type_is_protected_and_an_absent_one_is_not() {
        let (_d, ws) = canonical_tempdir();
        let g = GitProtection::find(&ws, None).unwrap();
        assert!(g.paths.is_empty(), "no .git: nothing");
        std::fs::create_dir(ws.join(".git")).unwrap();
        let g = GitProtection::find(&ws, None).unwrap();
        assert_eq!(added(&g, &default_policy()), [".git"]);
        let (_f, wt) = canonical_tempdir();
        std::fs::write(wt.join(".git"), "gitdir: /elsewhere\n").unwrap();
        assert_eq!(rels(&GitProtection::find(&wt, None).unwrap()), [".git"]);
        let (_l, ln) = canonical_tempdir();
        std::os::unix::fs::symlink("/nowhere", ln.join(".git")).unwrap();
        assert_eq!(rels(&GitProtection::find(&ln, None).unwrap()), [".git"]);
    }

    #[test]
    fn hooks_paths_includes_and_submodules_inside_the_workspace_are_protected() {
        let (_d, ws) = canonical_tempdir();
        let (_h, home) = canonical_tempdir();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::create_dir_all(ws.join(".husky/_")).unwrap();
        std::fs::create_dir_all(ws.join("vendor/lib")).unwrap();
        std::fs::write(
            ws.join("vendor/lib/.git"),
            "gitdir: ../../.git/modules/lib\n",
        )
        .unwrap();
        std::fs::write(
            ws.join(".gitmodules"),
            "[submodule \"lib\"]\n\tpath = vendor/lib\n\turl = x\n[submodule \"gone\"]\n\tpath = gone\n",
        )
        .unwrap();
        std::fs::write(
            ws.join(".git/config"),
            "[core]\n\tbare = false\n\thooksPath = .husky/_ # husky\n\
             [include]\n\tpath = ../.gitconfig\n[includeIf \"gitdir:/x/\"]\n\tpath = \"../shared/extra.cfg\"\n",
        )
        .unwrap();
        // The included file names more: followed.
        // (An absent hooks directory is left alone.)
        std::fs::write(
            ws.join(".gitconfig"),
            "[Core]\n\tHooksPath = tools/hooks\n[core]\n\thooksPath = absent/hooks\n",
        )
        .unwrap();
        std::fs::create_dir_all(ws.join("tools/hooks")).unwrap();
        // The user's own configuration, outside and inside the workspace.
        std::fs::write(
            home.join(".gitconfig"),
            format!(
                "[include]\n\tpath = ~/more.cfg\n\tpath = {}/team.cfg\n",
                ws.display()
            ),
        )
        .unwrap();
        // (An absent include, shared/extra.cfg, is left alone.)
        std::fs::write(ws.join("team.cfg"), "").unwrap();
        let g = GitProtection::find(&ws, Some(&home)).unwrap();
        assert_eq!(
            rels(&g),
            [
                ".git",
                ".gitconfig",
                ".husky/_",
                "team.cfg",
                "tools/hooks",
                "vendor/lib/.git"
            ]
        );
        assert_eq!(added(&g, &default_policy()).len(), 6);
    }

    #[test]
    fn a_workspace_inside_a_checkout_gets_what_the_checkout_names_in_it() {
        let (_d, top) = canonical_tempdir();
        std::fs::create_dir_all(top.join(".git")).unwrap();
        std::fs::create_dir_all(top.join("pkg/hooks")).unwrap();
        std::fs::write(
            top.join(".git/config"),
            "[core]\n\thooksPath = pkg/hooks\n[include]\n\tpath = ../other.cfg\n",
        )
        .unwrap();
        let ws = top.join("pkg");
        // The checkout's .git is outside the workspace (not in the box);
        // its hooks directory is inside.
        assert_eq!(rels(&GitProtection::find(&ws, None).unwrap()), ["hooks"]);
        // A hooks path naming the workspace itself is refused.
        std::fs::write(top.join(".git/config"), "[core]\n\thooksPath = pkg\n").unwrap();
        let e = GitProtection::find(&ws, None).unwrap_err().to_string();
        assert!(e.contains("names the workspace itself"), "{e}");
    }

    #[test]
    fn the_explicit_grant_and_a_policy_that_names_the_path_decide_instead() {
        let (_d, ws) = canonical_tempdir();
        std::fs::create_dir(ws.join(".git")).unwrap();
        let found = GitProtection::find(&ws, None).unwrap();
        let mut g = found.clone();
        g.cli_write(RootKind::Workspace, "./.git/", "--write ./.git/")
            .unwrap();
        assert!(added(&g, &default_policy()).is_empty());
        let mut g = found.clone();
        g.cli_write(RootKind::Workspace, "", "--write .").unwrap();
        g.cli_write(RootKind::Workspace, ".gitignore", "--write .gitignore")
            .unwrap();
        g.cli_write(RootKind::Host, ".git", "--write /x").unwrap();
        assert_eq!(g, found, "none of these is .git");
        let e = g
            .cli_write(RootKind::Workspace, ".git/hooks", "--write .git/hooks")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--write .git makes all of it writable"), "{e}");
        for (access, path) in [
            (Access::Write, ".git"),
            (Access::DenyWrite, ".git"),
            (Access::Read, ".git/hooks"),
        ] {
            let mut b = default_policy().to_builder();
            b.add_rule(
                access,
                RootKind::Workspace,
                path,
                Scope::Tree,
                Missing::Skip,
            )
            .unwrap();
            let own = b.build().unwrap();
            let mut with = own.to_builder();
            assert!(
                found.apply(&mut with, &own).unwrap().is_empty(),
                "{access} {path}"
            );
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
        assert_eq!(added(&found, &b.build().unwrap()), [".git"]);
    }

    #[test]
    fn config_values_are_read_as_git_reads_them() {
        let e = config_entries(
            "# c\n[core] hooksPath = \"a b\" ; c\n[Section \"Sub.X\"]\n\tKey\n\
             [x.y]\n\tk = one\\\n two\n[z]\n\tv = a\\\"b\\\\c\n",
        );
        assert_eq!(
            e,
            [
                ("core.hookspath".to_string(), "a b".to_string()),
                ("section.Sub.X.key".to_string(), "true".to_string()),
                ("x.y.k".to_string(), "one two".to_string()),
                ("z.v".to_string(), "a\"b\\c".to_string()),
            ]
        );
    }
}
