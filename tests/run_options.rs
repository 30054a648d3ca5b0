//! `terra run`'s command line: options before the command are terra's, a
//! mistyped one is a usage error that starts nothing, and the command begins
//! after `--` or at the first word that is not an option.
// Linux only: `terra run` parses its options only on Linux in this build.
#![cfg(target_os = "linux")]

mod common;

use common::{show, RunDirs, User};
use std::path::PathBuf;
use std::process::{Command, Output};

/// A scratch workspace, state and runtime directory, removed at drop.
struct Scratch(RunDirs);

impl Scratch {
    fn new(name: &str) -> Scratch {
        Scratch(RunDirs::new("terra-runopts", name, User::Caller))
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_terra"));
        self.0.run_env(&mut c, "/usr/bin:/bin");
        c.args(args).output().unwrap()
    }

    fn marker(&self) -> PathBuf {
        self.0.ws.join("ran")
    }
}

#[test]
fn a_mistyped_option_runs_nothing() {
    let s = Scratch::new("typo");
    let cases: [(&[&str], &str); 3] = [
        (
            &["run", "--workspce", "/tmp", "--", "touch", "ran"],
            "--workspace",
        ),
        (&["run", "--verbose", "touch", "ran"], "--verbose"),
        (&["run", "--polciy", "p.json", "touch", "ran"], "--policy"),
    ];
    for (args, hint) in cases {
        let o = s.run(args);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("unexpected argument"),
            "{args:?}: {}",
            show(&o)
        );
        assert!(err.contains(hint), "{args:?} names {hint}: {}", show(&o));
        assert!(!s.marker().exists(), "{args:?} started the workload");
        assert!(
            std::fs::read_dir(&s.0.state).unwrap().next().is_none(),
            "{args:?} left run state behind"
        );
    }
}

#[test]
fn the_command_starts_after_dashdash_or_at_the_first_word() {
    let s = Scratch::new("cmd");
    // Words after the command are the command's, dashes included.
    let o = s.run(&[
        "run",
        "--timeout",
        "30s",
        "sh",
        "-c",
        "echo \"$0\" \"$1\"",
        "-x",
        "--y",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "-x --y\n");
    // After `--`, even a word that looks like an option is the command.
    let o = s.run(&["run", "--", "echo", "--workspce", "--"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "--workspce --\n");
    let o = s.run(&["run", "--", "--not-a-program"]);
    assert_eq!(o.status.code(), Some(127), "{}", show(&o));
}
