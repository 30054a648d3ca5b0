//! The ecosystem's habits (issue 15): shell completions and the man page
//! generated from terra's own command line, colours only on a terminal and
//! never with NO_COLOR.

use std::process::{Command, Output};

fn terra(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_terra"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn completions_for_every_shell_follow_the_command_line() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let o = terra(&["completions", shell]);
        assert!(o.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&o.stdout);
        for word in ["runs", "presets", "allow-net", "rm-temp", "preset"] {
            assert!(text.contains(word), "{shell} lacks {word}");
        }
        // The hidden roles are not offered.
        assert!(
            !text.contains("__vm") && !text.contains("__supervisor"),
            "{shell}"
        );
    }
    // The bash script is valid bash and registers the completion.
    let o = Command::new("bash")
        .args([
            "-c",
            "source <(\"$0\" completions bash) && complete -p terra",
            env!("CARGO_BIN_EXE_terra"),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("-F _terra terra"));
    let o = terra(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn the_man_page_is_roff_with_every_subcommand() {
    let o = terra(&["man"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(".TH terra 1"), "{text}");
    for section in [
        "TERRA RUN",
        "TERRA RUNS",
        "TERRA POLICY",
        "TERRA PRESETS",
        "TERRA COMPLETIONS",
    ] {
        assert!(text.contains(&format!(".SH \"{section}\"")), "{section}");
    }
    assert!(
        text.contains("\\-\\-allow\\-net"),
        "run's options are listed"
    );
    assert!(!text.contains("__vm"));
    // One page: no reference to a terra-run(1) or any other page that does
    // not exist.
    assert!(!text.contains("(1)"), "a man page reference: {text}");
    for section in [
        ".SH EXAMPLES",
        ".SH \"EXIT STATUS\"",
        ".SH FILES",
        ".SH \"SEE ALSO\"",
    ] {
        assert!(text.contains(section), "{section}");
    }
    for code in [".B 125", ".B 126", ".B 127", ".B 128+N"] {
        assert!(text.contains(code), "{code}");
    }
    assert!(text.contains("terra run \\-\\-preset rust \\-\\-preset\\-net"));
}

/// What bash completes for `terra WORDS...` (the last word being completed),
/// with `terra` on PATH and the profiles of `config`.
fn bash_completes(words: &[&str], config: &std::path::Path) -> Vec<String> {
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_terra"))
        .parent()
        .unwrap()
        .to_owned();
    let script = format!(
        "source <(terra completions bash) && COMP_WORDS=(terra {w}) && COMP_CWORD={n} && \
         _terra terra \"${{COMP_WORDS[$COMP_CWORD]}}\" \"${{COMP_WORDS[$COMP_CWORD-1]}}\" && \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        w = words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        n = words.len()
    );
    let o = Command::new("bash")
        .args(["-c", &script])
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
        .env("XDG_CONFIG_HOME", config)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

#[test]
fn completions_offer_presets_backends_and_profiles() {
    let config = tempfile::tempdir().unwrap();
    let profiles = config.path().join("terra/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    for f in [
        "ci.json",
        "rust-dev.json",
        "ci.limits.json",
        "ci.env.json",
        "notes.txt",
    ] {
        std::fs::write(profiles.join(f), "{}").unwrap();
    }
    assert_eq!(
        bash_completes(&["run", "--preset", ""], config.path()),
        ["node", "python", "rust"]
    );
    assert_eq!(
        bash_completes(&["run", "--backend", "l"], config.path()),
        ["landlock", "linux"]
    );
    // The profiles as they are when completing (not the sidecars).
    assert_eq!(
        bash_completes(&["run", "--profile", ""], config.path()),
        ["ci", "rust-dev"]
    );
    std::fs::write(profiles.join("new.json"), "{}").unwrap();
    assert_eq!(
        bash_completes(&["run", "--profile", "n"], config.path()),
        ["new"]
    );
    // zsh and fish read the same list.
    for shell in ["zsh", "fish"] {
        let o = terra(&["completions", shell]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains("terra profiles --names"),
            "{shell}: --profile's values"
        );
        assert!(
            text.contains("landlock") && text.contains("python"),
            "{shell}"
        );
    }
    // Offered, not enforced by the parser: an unknown preset is terra's
    // refusal (exit 125, its own message).
    let o = terra(&["run", "--preset", "perl", "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no such preset"));
}

/// terra's stderr when its debug log runs, on a terminal (through
/// script(1)) or piped.
fn debug_stderr(terminal: bool, no_color: Option<&str>) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    // stderr to where stdout went (the terminal or the pipe), stdout away.
    let line = format!(
        "{} --log-level debug run --dry-run -- true 2>&1 >/dev/null",
        env!("CARGO_BIN_EXE_terra")
    );
    let mut c = if terminal {
        let mut c = Command::new("script");
        c.args(["-qec", &line, "/dev/null"]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &line]);
        c
    };
    c.current_dir(dir.path()).env_remove("NO_COLOR");
    if let Some(v) = no_color {
        c.env("NO_COLOR", v);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("DEBUG"),
        "the log ran"
    );
    o.stdout
}

#[test]
fn colours_only_on_a_terminal_and_never_with_no_color() {
    let esc = |b: &[u8]| b.contains(&0x1b);
    assert!(esc(&debug_stderr(true, None)), "a terminal gets colours");
    assert!(!esc(&debug_stderr(true, Some("1"))), "NO_COLOR=1");
    assert!(
        esc(&debug_stderr(true, Some(""))),
        "an empty NO_COLOR does not count"
    );
    assert!(!esc(&debug_stderr(false, None)), "piped");
}
