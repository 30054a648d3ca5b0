//! The workspace's git metadata under the default policy: a workload cannot
//! plant what the user's next `git` on the host runs (hooks, config, info
//! attributes, the whole `.git` moved or replaced), while the rest of the
//! workspace stays writable and read-only git commands work inside the box;
//! `--write .git` lets `git commit` inside the box work. Worktrees (a `.git`
//! file pointing outside), a workspace inside a bigger checkout, and the
//! landlock backend (refused with the fix named; a workspace without `.git`
//! still runs). As the caller and, as root, as 65534 (the repository then
//! belongs to 65534).
#![cfg(target_os = "linux")]

mod common;

use common::{show, terra_as, users, RunDirs};
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

const GIT: &str = "/usr/local/bin/git";
const OK: &str = "TERRA-PROBE-OK";
const BLOCKED: &str = "TERRA-PROBE-BLOCKED";
const ESCAPED: &str = "TERRA-PROBE-ESCAPED";

const PRELUDE: &str = r#"
esc=0; bad=0
try() { if sh -c "$1" >/dev/null 2>&1; then echo "TERRA-PROBE-ESCAPED: $1"; esc=1; fi; }
blocked() { [ "$esc" = 0 ] && echo TERRA-PROBE-BLOCKED; exit 0; }
need() { if ! sh -c "$1" >/dev/null 2>&1; then echo "TERRA-PROBE-FAILED: $1"; bad=1; fi; }
ok() { [ "$bad" = 0 ] && echo TERRA-PROBE-OK; exit 0; }
export GIT_AUTHOR_NAME=box GIT_AUTHOR_EMAIL=box@example.invalid
export GIT_COMMITTER_NAME=box GIT_COMMITTER_EMAIL=box@example.invalid
"#;

/// git on the host, in `dir`, whoever owns the repository.
fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new(git_bin())
        .current_dir(dir)
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args([
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=host",
            "-c",
            "user.email=host@example.invalid",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", show(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn git_bin() -> &'static str {
    if Path::new(GIT).exists() {
        GIT
    } else {
        "git"
    }
}

/// A repository with one commit of `tracked` in `dir`.
fn init_repo(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q"]);
    fs::write(dir.join("tracked"), "one\n").unwrap();
    git(dir, &["add", "tracked"]);
    git(dir, &["commit", "-qm", "first"]);
}

/// `terra run [extra] -- sh -c PRELUDE+script` in the workspace, as the run's user.
fn run(dirs: &RunDirs, extra: &[&str], script: &str) -> Output {
    run_in(dirs, &dirs.ws, extra, script)
}

fn run_in(dirs: &RunDirs, ws: &Path, extra: &[&str], script: &str) -> Output {
    dirs.chown_to_user(None);
    let mut c = terra_as(dirs.user, &[]);
    dirs.run_env(&mut c, "/usr/local/bin:/usr/bin:/bin");
    c.current_dir(ws).args(["run", "-q"]).args(extra).args([
        "--",
        "/bin/sh",
        "-c",
        &format!("{PRELUDE}{script}"),
    ]);
    c.output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every way of changing what the host's git reads from `.git`.
const PLANT: &str = r##"
try 'echo "#!/bin/sh" > .git/hooks/pre-commit'
try 'printf "[core]\n\tfsmonitor = /tmp/x\n" >> .git/config'
try 'git config core.hooksPath /tmp'
try 'cp .git/config c && echo "[core] fsmonitor = x" >> c && mv c .git/config'
try 'mv .git/config .git/config.old'
try 'mv .git/hooks .git/hooks.old'
try 'mkdir -p .git/info && echo "* filter=x" > .git/info/attributes'
try 'ln -s /tmp/x .git/hooks/post-checkout'
try 'chmod 777 .git/config'
try 'mv .git moved-git'
try 'rm -rf .git'
try 'test -e .git || exit 1; mkdir fake && mv fake .git'
blocked
"##;

/// The host's `.git` is what it was: no hook, no new file, the config unchanged.
fn assert_git_unchanged(ws: &Path, config_before: &str, o: &Output) {
    let git_dir = ws.join(".git");
    assert!(git_dir.is_dir(), "{}", show(o));
    assert_eq!(
        fs::read_to_string(git_dir.join("config")).unwrap(),
        config_before,
        "{}",
        show(o)
    );
    assert!(!git_dir.join("hooks/pre-commit").exists(), "{}", show(o));
    assert!(!git_dir.join("hooks/post-checkout").exists(), "{}", show(o));
    assert!(!git_dir.join("info/attributes").exists(), "{}", show(o));
    assert!(!git_dir.join("config.old").exists(), "{}", show(o));
    assert!(!git_dir.join("hooks.old").exists(), "{}", show(o));
    assert!(!ws.join("moved-git").exists(), "{}", show(o));
}

#[test]
fn the_box_cannot_plant_hooks_or_config_in_the_workspace_git() {
    for user in users() {
        let dirs = RunDirs::new("terra-git", "plant", user);
        init_repo(&dirs.ws);
        let before = fs::read_to_string(dirs.ws.join(".git/config")).unwrap();
        let o = run(&dirs, &[], PLANT);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{user:?}: {}", show(&o));
        assert!(
            out.contains(BLOCKED) && !out.contains(ESCAPED),
            "{user:?}: {}",
            show(&o)
        );
        assert_git_unchanged(&dirs.ws, &before, &o);
        // The host's git still sees its one commit.
        assert_eq!(git(&dirs.ws, &["log", "--format=%s"]), "first\n");
    }
}

#[test]
fn the_box_cannot_plant_hooks_or_config_in_the_workspace_git_twin() {
    for user in users() {
        let dirs = RunDirs::new("terra-git", "plant-twin", user);
        init_repo(&dirs.ws);
        // A change the index does not know yet: git status refreshes the
        // index's stat data, which it cannot write back here.
        fs::write(dirs.ws.join("tracked"), "two\n").unwrap();
        let o = run(
            &dirs,
            &[],
            r#"
            need 'echo new > untracked'
            need 'mkdir -p hooks && echo x > hooks/pre-commit'
            need 'echo "[core]" > config'
            need 'git status --porcelain | grep -qx " M tracked"'
            need 'git status --porcelain | grep -qx "?? untracked"'
            need 'git log --format=%s | grep -qx first'
            need 'git diff | grep -qx "+two"'
            need 'git rev-parse --show-toplevel'
            need 'cat .git/config .git/HEAD'
            ok
            "#,
        );
        assert!(stdout(&o).contains(OK), "{user:?}: {}", show(&o));
        assert_eq!(
            fs::read_to_string(dirs.ws.join("untracked")).unwrap(),
            "new\n"
        );
    }
}

#[test]
fn an_explicit_write_grant_lets_git_commit_inside_the_box() {
    for user in users() {
        let dirs = RunDirs::new("terra-git", "commit", user);
        init_repo(&dirs.ws);
        let o = run(
            &dirs,
            &["--write", ".git"],
            r#"
            need 'echo two > tracked'
            need 'git add tracked'
            need 'git commit -qm "from the box"'
            ok
            "#,
        );
        assert!(stdout(&o).contains(OK), "{user:?}: {}", show(&o));
        assert_eq!(
            git(&dirs.ws, &["log", "--format=%s"]),
            "from the box\nfirst\n",
            "the commit is on the host"
        );
        assert_eq!(git(&dirs.ws, &["status", "--porcelain"]), "");
        // The dry run names the grant and no deny-write.
        let o = run(&dirs, &["--dry-run", "--write", ".git"], "true");
        let out = stdout(&o);
        assert!(out.contains("+ write workspace:.git"), "{}", show(&o));
        assert!(!out.contains("deny-write workspace:.git"), "{}", show(&o));
    }
}

#[test]
fn a_write_grant_inside_git_is_refused_not_silently_read_only() {
    for user in users() {
        let dirs = RunDirs::new("terra-git", "inside", user);
        init_repo(&dirs.ws);
        for path in [".git/hooks", "./.git/config"] {
            let o = run(&dirs, &["--write", path], "echo RAN");
            assert_eq!(o.status.code(), Some(125), "{path}: {}", show(&o));
            assert!(!stdout(&o).contains("RAN"));
            assert!(
                String::from_utf8_lossy(&o.stderr)
                    .contains("--write .git makes all of it writable"),
                "{}",
                show(&o)
            );
        }
    }
}

#[test]
fn a_worktree_cannot_rewrite_its_gitdir_file_nor_reach_the_main_repository() {
    for user in users() {
        let dirs = RunDirs::new("terra-git", "worktree", user);
        let main = dirs.root.join("main");
        init_repo(&main);
        // The workspace is a linked worktree: its .git is a file naming a
        // gitdir inside main/.git, outside the workspace.
        fs::remove_dir(&dirs.ws).unwrap();
        git(&main, &["worktree", "add", "-q", dirs.ws.to_str().unwrap()]);
        let gitfile = fs::read_to_string(dirs.ws.join(".git")).unwrap();
        assert!(gitfile.starts_with("gitdir: "), "{gitfile}");
        let main_config = fs::read_to_string(main.join(".git/config")).unwrap();
        let script = format!(
            r#"
            try 'echo "gitdir: /tmp/planted" > .git'
            try 'rm -f .git'
            try 'mv .git elsewhere'
            try 'echo x >> {main}/.git/config'
            try 'echo x > {main}/.git/hooks/pre-commit'
            blocked
            "#,
            main = main.display()
        );
        let o = run(&dirs, &[], &script);
        let out = stdout(&o);
        assert!(
            out.contains(BLOCKED) && !out.contains(ESCAPED),
            "{user:?}: {}",
            show(&o)
        );
        assert_eq!(fs::read_to_string(dirs.ws.join(".git")).unwrap(), gitfile);
        assert_eq!(
            fs::read_to_string(main.join(".git/config")).unwrap(),
            main_config
        );
        assert!(!main.join(".git/hooks/pre-commit").exists());
        // Twin: the worktree's files are writable.
        let o = run(&dirs, &[], "need 'echo two > tracked'\nok");
        assert!(stdout(&o).contains(OK), "{user:?}: {}", show(&o));
        assert_eq!(
            fs::read_to_string(dirs.ws.join("tracked")).unwrap(),
            "two\n"
        );
    }
}

#[test]
fn a_workspace_inside_a_checkout_cannot_reach_the_checkouts_git() {
    for user in users() {
        let dirs = RunDirs::new("terra-git", "sub", user);
        init_repo(&dirs.ws);
        let sub = dirs.ws.join("sub");
        fs::create_dir(&sub).unwrap();
        let before = fs::read_to_string(dirs.ws.join(".git/config")).unwrap();
        let o = run_in(
            &dirs,
            &sub,
            &[],
            r#"
            try 'echo x >> ../.git/config'
            try 'echo x > ../.git/hooks/pre-commit'
            try 'git status'
            blocked
            "#,
        );
        let out = stdout(&o);
        assert!(
            out.contains(BLOCKED) && !out.contains(ESCAPED),
            "{user:?}: {}",
            show(&o)
        );
        assert_git_unchanged(&dirs.ws, &before, &o);
        // Twin: the sub-directory workspace is writable (and no .git rule
        // was added: it has none of its own).
        let o = run_in(&dirs, &sub, &[], "need 'echo new > file'\nok");
        assert!(stdout(&o).contains(OK), "{user:?}: {}", show(&o));
        let o = run_in(&dirs, &sub, &["--dry-run"], "true");
        assert!(!stdout(&o).contains(".git"), "{}", show(&o));
    }
}

#[test]
fn the_landlock_backend_refuses_a_workspace_git_and_names_the_fix() {
    for user in users() {
        let dirs = RunDirs::new("terra-git", "landlock", user);
        init_repo(&dirs.ws);
        let before = fs::read_to_string(dirs.ws.join(".git/config")).unwrap();
        let o = run(&dirs, &["--backend", "landlock"], "echo x >> .git/config");
        assert_eq!(o.status.code(), Some(125), "{user:?}: {}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("fs-deny-write") && err.contains("pass --write .git"),
            "{}",
            show(&o)
        );
        assert_eq!(
            fs::read_to_string(dirs.ws.join(".git/config")).unwrap(),
            before
        );
    }
}

#[test]
fn the_landlock_backend_refuses_a_workspace_git_and_names_the_fix_twin() {
    for user in users() {
        // No .git: the landlock backend runs the default policy.
        let dirs = RunDirs::new("terra-git", "landlock-twin", user);
        let o = run(
            &dirs,
            &["--backend", "landlock"],
            "need 'echo new > file'\nok",
        );
        assert!(stdout(&o).contains(OK), "{user:?}: {}", show(&o));
        // With the explicit grant it runs and git commits.
        init_repo(&dirs.ws);
        let o = run(
            &dirs,
            &["--backend", "landlock", "--write", ".git"],
            "need 'echo two > tracked'\nneed 'git commit -qam boxed'\nok",
        );
        assert!(stdout(&o).contains(OK), "{user:?}: {}", show(&o));
        assert_eq!(git(&dirs.ws, &["log", "--format=%s"]), "boxed\nfirst\n");
    }
}

/// A repository whose configuration names hooks and configuration inside
/// the working tree (husky's `core.hooksPath`, an `include.path`), with a
/// submodule: returns the workspace's protected files and their contents.
fn repo_with_configured_paths(dirs: &RunDirs) -> Vec<(std::path::PathBuf, String)> {
    let lib = dirs.root.join("lib");
    init_repo(&lib);
    init_repo(&dirs.ws);
    let ws = &dirs.ws;
    fs::create_dir_all(ws.join(".husky/_")).unwrap();
    fs::write(ws.join(".husky/_/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    fs::write(ws.join(".gitconfig"), "[alias]\n\tst = status\n").unwrap();
    git(ws, &["config", "core.hooksPath", ".husky/_"]);
    git(ws, &["config", "include.path", "../.gitconfig"]);
    git(
        ws,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            lib.to_str().unwrap(),
            "vendor/lib",
        ],
    );
    git(ws, &["commit", "-qam", "with a submodule"]);
    [".husky/_/pre-commit", ".gitconfig", "vendor/lib/.git"]
        .iter()
        .map(|rel| {
            let p = ws.join(rel);
            let text = fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

#[test]
fn the_box_cannot_write_what_the_repository_configuration_names_in_the_workspace() {
    for user in users() {
        let dirs = RunDirs::new("terra-git", "configured", user);
        let protected = repo_with_configured_paths(&dirs);
        let o = run(
            &dirs,
            &[],
            r#"
            try 'echo "echo pwned" >> .husky/_/pre-commit'
            try 'echo x > .husky/_/post-checkout'
            try 'mv .husky/_ .husky/old'
            try 'rm -rf .husky'
            try 'printf "[core]\n\tfsmonitor = ./x\n" >> .gitconfig'
            try 'mv .gitconfig old && echo "[core] fsmonitor = x" > .gitconfig'
            try 'echo "gitdir: ../../planted" > vendor/lib/.git'
            try 'rm -f vendor/lib/.git'
            try 'mv vendor/lib vendor/moved'
            blocked
            "#,
        );
        let out = stdout(&o);
        assert!(
            out.contains(BLOCKED) && !out.contains(ESCAPED),
            "{user:?}: {}",
            show(&o)
        );
        for (p, text) in &protected {
            assert_eq!(&fs::read_to_string(p).unwrap(), text, "{}", p.display());
        }
        assert!(!dirs.ws.join(".husky/_/post-checkout").exists());
        // The dry run names each, with why.
        let o = run(&dirs, &["--dry-run"], "true");
        let out = stdout(&o);
        for line in [
            "+ deny-write workspace:.husky/_ (core.hooksPath in ",
            "+ deny-write workspace:.gitconfig (include.path in ",
            "+ deny-write workspace:vendor/lib/.git (the git metadata of submodule vendor/lib",
        ] {
            assert!(out.contains(line), "{line}\n{}", show(&o));
        }
    }
}

#[test]
fn the_box_cannot_write_what_the_repository_configuration_names_in_the_workspace_twin() {
    for user in users() {
        let dirs = RunDirs::new("terra-git", "configured-twin", user);
        repo_with_configured_paths(&dirs);
        let o = run(
            &dirs,
            &[],
            r#"
            need 'echo two > tracked'
            need 'echo more > .husky/notes'
            need 'echo x > vendor/lib/new-file'
            need 'git st --porcelain | grep -qx " M tracked"'
            need 'git submodule status'
            ok
            "#,
        );
        assert!(stdout(&o).contains(OK), "{user:?}: {}", show(&o));
        // Lifted one by one by naming them.
        let o = run(
            &dirs,
            &["--write", ".husky/_", "--write", ".gitconfig"],
            "need 'echo x > .husky/_/post-checkout'\nneed 'echo \"# ok\" >> .gitconfig'\nok",
        );
        assert!(stdout(&o).contains(OK), "{user:?}: {}", show(&o));
    }
}
