//! `terra run`'s command line: options before the command are terra's, a
//! mistyped one is a usage error that starts nothing, and the command begins
//! after `--` or at the first word that is not an option.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// A scratch workspace, state and runtime directory, removed at drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let root = PathBuf::from(format!("/tmp/terra-runopts-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        for d in ["ws", "state", "runtime", "tmp"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        Scratch(root)
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_terra"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("XDG_STATE_HOME", self.0.join("state"))
            .env("XDG_RUNTIME_DIR", self.0.join("runtime"))
            .env("TMPDIR", self.0.join("tmp"))
            .current_dir(self.0.join("ws"))
            .stdin(Stdio::null())
            .args(args)
            .output()
            .unwrap()
    }

    fn marker(&self) -> PathBuf {
        self.0.join("ws/ran")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
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
        assert_eq!(o.status.code(), Some(125), "{args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("unexpected argument"),
            "{args:?}: {}",
            text(&o)
        );
        assert!(err.contains(hint), "{args:?} names {hint}: {}", text(&o));
        assert!(!s.marker().exists(), "{args:?} started the workload");
        assert!(
            fs::read_dir(s.0.join("state")).unwrap().next().is_none(),
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
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "-x --y\n");
    // After `--`, even a word that looks like an option is the command.
    let o = s.run(&["run", "--", "echo", "--workspce", "--"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "--workspce --\n");
    let o = s.run(&["run", "--", "--not-a-program"]);
    assert_eq!(o.status.code(), Some(127), "{}", text(&o));
}
