//! README.md's examples, run as written (issue 15): every line of a code
//! block that starts with `terra ` or `dist/terra ` runs through `sh -c` in
//! a scratch project (a cargo crate with a test, a Makefile with `check`),
//! with `terra` and `dist/terra` being this build, and must exit 0. The
//! setup steps before `dist/terra` (`bash scripts/bootstrap.sh`, `make
//! build`) and `make test` are not run here (they install packages, build
//! the release binary, and run this very suite); the test checks that the
//! script and the Makefile targets they name exist.
// The README's commands run through sh: Unix only.
#![cfg(unix)]

use std::fs;
use std::path::Path;
use std::process::Command;

/// The lines of README.md's code blocks.
fn code_lines(readme: &str) -> Vec<String> {
    let mut inside = false;
    let mut lines = Vec::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            inside = !inside;
            continue;
        }
        if inside {
            lines.push(line.to_string());
        }
    }
    lines
}

/// `cmd   # comment` -> `cmd` (no README example has `#` inside a command).
fn without_comment(line: &str) -> &str {
    match line.find("  #") {
        Some(i) => line[..i].trim_end(),
        None => line.trim_end(),
    }
}

fn project(dir: &Path) {
    fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"readme-example\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    fs::create_dir(dir.join("src")).unwrap();
    fs::write(
        dir.join("src/lib.rs"),
        "#[test]\nfn adds() { assert_eq!(1 + 1, 2); }\n",
    )
    .unwrap();
    fs::write(dir.join("Makefile"), "check:\n\techo checked\n").unwrap();
}

#[test]
fn every_readme_example_works_as_written() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = fs::read_to_string(repo.join("README.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("project");
    fs::create_dir(&ws).unwrap();
    project(&ws);
    let bin = dir.path().join("bin");
    fs::create_dir_all(ws.join("dist")).unwrap();
    fs::create_dir(&bin).unwrap();
    let terra = env!("CARGO_BIN_EXE_terra");
    std::os::unix::fs::symlink(terra, bin.join("terra")).unwrap();
    std::os::unix::fs::symlink(terra, ws.join("dist/terra")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let state = dir.path().join("state");
    let mut ran = 0;
    for line in code_lines(&readme) {
        let line = without_comment(&line);
        // `setup && setup && dist/terra ...`: the setup steps are checked, not run.
        let mut command = None;
        for part in line.split(" && ") {
            match part {
                "bash scripts/bootstrap.sh" => assert!(repo.join("scripts/bootstrap.sh").is_file()),
                "make build" | "make test" => {
                    let target = part.trim_start_matches("make ");
                    let makefile = fs::read_to_string(repo.join("Makefile")).unwrap();
                    assert!(
                        makefile.contains(&format!("\n{target}:")),
                        "no make target {target}"
                    );
                }
                p if p.starts_with("terra ") || p.starts_with("dist/terra ") => command = Some(p),
                p => panic!("README example {line:?}: this test does not know how to run {p:?}"),
            }
        }
        let Some(command) = command else { continue };
        let o = Command::new("sh")
            .args(["-c", command])
            .current_dir(&ws)
            .env("PATH", &path)
            .env("XDG_STATE_HOME", &state)
            .env_remove("XDG_CONFIG_HOME")
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "README example {command:?}:\n--- stdout\n{}--- stderr\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        ran += 1;
    }
    assert!(ran >= 7, "only {ran} README examples found");
    // What the examples left: the receipt, the compiled policy.
    assert!(ws.join("r.json").is_file());
    assert!(ws.join("ci.mir").is_file());
}
