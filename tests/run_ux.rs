//! The first hour of a new user (issue 15): what `terra run` says after a
//! run (the refusal summary, the temp directory removed), what it refuses by
//! default (a current directory that is $HOME, /, /tmp or a parent of
//! $HOME), `--allow-net` for private literals, `,private` and wildcards, and
//! `terra runs` (list, show, prune, never following a planted symlink).
// Unix run directories, users and symlinks: Unix only.
#![cfg(unix)]

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{run_bounded, show, RunDirs, User};
use serde_json::Value;
use terra_test_support::http::HttpServer;

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn dirs(name: &str) -> RunDirs {
    RunDirs::new("terra-ux", name, User::Caller)
}

/// `terra ARGS` in the run's environment, from `cwd` (default: the workspace).
fn terra_in(d: &RunDirs, cwd: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_terra"));
    d.run_env(&mut c, PATH);
    if let Some(cwd) = cwd {
        c.current_dir(cwd);
    }
    c.args(args);
    run_bounded(c)
}

fn terra(d: &RunDirs, args: &[&str]) -> Output {
    terra_in(d, None, args)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn base(d: &RunDirs) -> PathBuf {
    d.state.join("terra/runs")
}

fn run_ids(d: &RunDirs) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(base(d))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

// ------------------------------------------------------------ refusal summary

#[test]
fn the_refusal_summary_names_what_was_refused_and_quiet_silences_it() {
    let d = dirs("summary");
    let curl = "curl -s -o /dev/null http://unlisted.test:8080/; curl -s -o /dev/null http://other.test:81/; true";
    let o = terra(
        &d,
        &[
            "run",
            "--allow-net",
            "listed.test:443",
            "--",
            "sh",
            "-c",
            curl,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "terra: the network broker refused 2 connections: unlisted.test:8080 (no-destination), \
             other.test:81 (no-destination)\n"
        ),
        "{}",
        show(&o)
    );
    assert!(
        err.contains(
            "to admit them, run with: --allow-net unlisted.test:8080 --allow-net other.test:81"
        ),
        "{}",
        show(&o)
    );
    let id = run_ids(&d).pop().unwrap();
    let log = base(&d).join(&id).join("network.jsonl");
    assert!(
        err.contains(&format!("full log: {}", log.display())),
        "{}",
        show(&o)
    );
    // --quiet: the same refusals, no summary.
    let o = terra(
        &d,
        &[
            "run",
            "--quiet",
            "--allow-net",
            "listed.test:443",
            "--",
            "sh",
            "-c",
            curl,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(!stderr(&o).contains("refused"), "{}", show(&o));
    // Nothing refused, nothing said.
    let o = terra(&d, &["run", "--allow-net", "listed.test:443", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(!stderr(&o).contains("refused"), "{}", show(&o));
}

#[test]
fn one_names_retries_are_one_destination_in_the_summary() {
    let d = dirs("summary-retries");
    // A client that retries: the same name three times, another once.
    let curl = "for i in 1 2 3; do curl -s -o /dev/null http://unlisted.test:8080/; done; \
                curl -s -o /dev/null http://other.test:81/; true";
    let o = terra(
        &d,
        &[
            "run",
            "--allow-net",
            "listed.test:443",
            "--",
            "sh",
            "-c",
            curl,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "terra: the network broker refused 2 destinations (4 attempts): unlisted.test:8080 \
             (no-destination), other.test:81 (no-destination)\n"
        ),
        "{}",
        show(&o)
    );
    // Each destination's remedy once.
    assert_eq!(
        err.matches("--allow-net unlisted.test:8080").count(),
        1,
        "{}",
        show(&o)
    );
}

#[test]
fn allow_net_without_a_port_suggests_https() {
    let d = dirs("allow-net-port");
    let o = terra(&d, &["run", "--allow-net", "pypi.org", "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(
        stderr(&o).contains("for HTTPS give --allow-net pypi.org:443"),
        "{}",
        show(&o)
    );
}

// ------------------------------------------------------------ --allow-net

#[test]
fn a_private_literal_is_admitted_a_private_name_needs_the_opt_in() {
    let srv = HttpServer::start();
    let d = dirs("private");
    let p = srv.port;
    let fetch = |dest: &str, url: &str| {
        terra(
            &d,
            &[
                "run",
                "--allow-net",
                dest,
                "--",
                "curl",
                "-sS",
                "--max-time",
                "30",
                url,
            ],
        )
    };
    // The user named the loopback address: admitted.
    let o = fetch(
        &format!("127.0.0.1:{p}"),
        &format!("http://127.0.0.1:{p}/lit"),
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(stdout(&o), "from-host /lit");
    // A name that resolves to it: refused, and the summary says how to opt in.
    let o = fetch(
        &format!("localhost:{p}"),
        &format!("http://localhost:{p}/name"),
    );
    assert!(!stdout(&o).contains("from-host"), "{}", show(&o));
    assert!(
        stderr(&o).contains(&format!("localhost:{p} (private-address)")),
        "{}",
        show(&o)
    );
    assert!(
        stderr(&o).contains(&format!("--allow-net localhost:{p},private")),
        "{}",
        show(&o)
    );
    // The opt-in admits it.
    let o = fetch(
        &format!("localhost:{p},private"),
        &format!("http://localhost:{p}/optin"),
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(stdout(&o), "from-host /optin");
    assert_eq!(srv.hits(), 2);
}

#[test]
fn the_private_opt_in_is_in_the_decision_digest() {
    let d = dirs("digest");
    let digest = |dest: &str| {
        let o = terra(&d, &["run", "--dry-run", "--allow-net", dest, "--", "true"]);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        stdout(&o)
            .lines()
            .find_map(|l| l.strip_prefix("decision digest: "))
            .unwrap()
            .to_string()
    };
    let plain = digest("mirror.test:443");
    let private = digest("mirror.test:443,private");
    assert_ne!(plain, private);
    assert_eq!(digest("10.0.0.1:443"), digest("10.0.0.1:443,private"));
}

#[test]
fn a_wildcard_destination_is_refused_with_the_exact_names() {
    let d = dirs("wildcard");
    let o = terra(
        &d,
        &[
            "run",
            "--allow-net",
            "*.example.com:443",
            "--",
            "touch",
            "ran",
        ],
    );
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    let err = stderr(&o);
    assert!(err.contains("cannot be encoded in MIR v3"), "{err}");
    assert!(err.contains("--allow-net example.com:443"), "{err}");
    assert!(!d.ws.join("ran").exists());
    // Its twin: an exact name runs.
    let o = terra(
        &d,
        &[
            "run",
            "--allow-net",
            "example.com:443",
            "--",
            "touch",
            "ran",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(d.ws.join("ran").exists());
}

// ------------------------------------------------------------ safe defaults

#[test]
fn a_broad_current_directory_is_refused_without_workspace() {
    let d = dirs("broad");
    let cases: [(&Path, &str); 4] = [
        (&d.home, "your home directory"),
        (&d.root, "a parent of your home directory"),
        (Path::new("/"), "the whole host"),
        (Path::new("/tmp"), "the shared temp directory"),
    ];
    for (cwd, words) in cases {
        let o = terra_in(&d, Some(cwd), &["run", "--", "sh", "-c", "touch ran"]);
        assert_eq!(o.status.code(), Some(125), "{cwd:?}: {}", show(&o));
        let err = stderr(&o);
        assert!(
            err.contains(words) && err.contains("--workspace"),
            "{cwd:?}: {err}"
        );
        assert!(!cwd.join("ran").exists(), "{cwd:?}: the workload ran");
    }
    // Twins: --workspace names the home on purpose; a project directory runs.
    let o = terra_in(
        &d,
        Some(&d.home),
        &[
            "run",
            "--workspace",
            d.home.to_str().unwrap(),
            "--",
            "touch",
            "ran",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(d.home.join("ran").exists());
    let o = terra(&d, &["run", "--", "touch", "ran"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(d.ws.join("ran").exists());
}

#[test]
fn a_workspace_under_tmp_is_warned_about() {
    let d = dirs("tmpws");
    // RunDirs live under /tmp.
    let o = terra(&d, &["run", "--backend", "linux", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        stderr(&o).contains("is under /tmp, but the box has a private /tmp"),
        "{}",
        show(&o)
    );
    let o = terra(&d, &["run", "--quiet", "--backend", "linux", "--", "true"]);
    assert!(!stderr(&o).contains("under /tmp"), "{}", show(&o));
}

/// The run's temp directory as the newest receipt names it.
fn last_temp(d: &RunDirs) -> PathBuf {
    let id = run_ids(d).pop().unwrap();
    let r: Value =
        serde_json::from_slice(&fs::read(base(d).join(id).join("receipt.json")).unwrap()).unwrap();
    PathBuf::from(r["hostBindings"]["temp"].as_str().unwrap())
}

#[test]
fn the_temp_directory_is_removed_after_any_run_unless_kept() {
    // A failed run no longer keeps its temp directory (it filled /tmp):
    // removed like any other, only --keep-temp keeps it.
    let d = dirs("keeptemp");
    let fail = "echo npm-log > /tmp/npm-debug.log; exit 3";
    let o = terra(&d, &["run", "--", "sh", "-c", fail]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    assert!(!last_temp(&d).exists(), "{}", show(&o));
    assert!(!stderr(&o).contains("kept"), "{}", show(&o));
    let o = terra(&d, &["run", "--", "false"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(!last_temp(&d).exists(), "{}", show(&o));
    // --rm-temp (the default) is still accepted.
    let o = terra(&d, &["run", "--rm-temp", "--", "sh", "-c", fail]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    assert!(!last_temp(&d).exists());
    // Success: removed.
    let o = terra(&d, &["run", "--", "sh", "-c", "echo x > /tmp/f"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(!last_temp(&d).exists());
    // --keep-temp: kept after a failure and after success, without a note.
    let o = terra(&d, &["run", "--keep-temp", "--", "sh", "-c", fail]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let temp = last_temp(&d);
    assert_eq!(
        fs::read_to_string(temp.join("npm-debug.log")).unwrap(),
        "npm-log\n"
    );
    assert!(!stderr(&o).contains("kept"), "{}", show(&o));
    let _ = fs::remove_dir_all(&temp);
    let o = terra(
        &d,
        &["run", "--keep-temp", "--", "sh", "-c", "echo x > /tmp/f"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(last_temp(&d).join("f").exists());
    let _ = fs::remove_dir_all(last_temp(&d));
    // Both flags: a usage error, nothing runs.
    let o = terra(
        &d,
        &["run", "--keep-temp", "--rm-temp", "--", "touch", "ran"],
    );
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(!d.ws.join("ran").exists());
}

// ------------------------------------------------------------ terra runs

#[test]
fn runs_lists_shows_and_prunes() {
    let d = dirs("runs");
    let o = terra(&d, &["runs"]);
    assert_eq!(stdout(&o), "no runs recorded yet\n", "{}", show(&o));
    let o = terra(&d, &["run", "--", "sh", "-c", "exit 4"]);
    assert_eq!(o.status.code(), Some(4), "{}", show(&o));
    let o = terra(&d, &["run", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = terra(&d, &["runs", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{}", show(&o));
    assert_eq!(rows[0]["argv"][0], "true");
    assert_eq!(rows[0]["exitCode"], 0);
    assert_eq!(rows[1]["exitCode"], 4);
    assert_eq!(rows[1]["backend"], rows[0]["backend"]);
    assert!(rows[0]["durationMs"].is_u64(), "{rows:?}");
    assert_eq!(rows[0]["refused"], 0);
    let text = stdout(&terra(&d, &["runs"]));
    assert!(text.starts_with("ID "), "{text}");
    assert!(text.contains(" sh -c exit 4\n"), "{text}");
    // show: the newest by default, one by id, an unknown one refused.
    let o = terra(&d, &["runs", "show"]);
    assert!(stdout(&o).contains("\"runId\""), "{}", show(&o));
    let older = rows[1]["id"].as_str().unwrap();
    let o = terra(&d, &["runs", "show", older, "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["receipt"]["outcome"]["exitCode"], 4);
    let o = terra(&d, &["runs", "show", "../../etc"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(stderr(&o).contains("is not a run id"), "{}", show(&o));
    // An old run is pruned by the next run's defaults (14 days).
    let old = base(&d).join("20000101T000000Z-1-00000000");
    fs::create_dir(&old).unwrap();
    fs::write(old.join("receipt.json"), "{}").unwrap();
    let o = terra(&d, &["run", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(!old.exists(), "the old run stayed");
    assert_eq!(run_ids(&d).len(), 3);
    // prune --keep 1 keeps the newest only.
    let o = terra(&d, &["runs", "prune", "--keep", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(stdout(&o).contains("removed 2 runs"), "{}", show(&o));
    assert_eq!(run_ids(&d).len(), 1);
}

#[test]
fn pruning_never_follows_a_symlink_planted_in_the_state_directory() {
    let d = dirs("plant");
    let o = terra(&d, &["run", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // A run-id-named symlink to a directory outside, with a receipt in it,
    // and a run directory whose receipt is a symlink to an outside file.
    let outside = d.root.join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("receipt.json"), "{\"runId\":\"planted\"}").unwrap();
    fs::write(outside.join("precious"), "keep me").unwrap();
    let link = base(&d).join("20000101T000000Z-2-00000000");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let linked_file = base(&d).join("20000101T000000Z-3-00000000");
    fs::create_dir(&linked_file).unwrap();
    std::os::unix::fs::symlink(outside.join("precious"), linked_file.join("receipt.json")).unwrap();
    // Listing skips the symlinked run and reads no receipt through a link.
    let o = terra(&d, &["runs", "--json"]);
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    let ids: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(!ids.contains(&"20000101T000000Z-2-00000000"), "{ids:?}");
    assert!(!stdout(&o).contains("planted"), "{}", show(&o));
    let o = terra(&d, &["runs", "show", "20000101T000000Z-2-00000000"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    // Pruning everything: the link stays, its target untouched; the run
    // directory goes with its link inside (unlinked, not followed).
    let o = terra(&d, &["runs", "prune", "--keep", "0", "--max-age-days", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        fs::read_to_string(outside.join("precious")).unwrap(),
        "keep me"
    );
    assert!(outside.join("receipt.json").exists());
    assert!(!linked_file.exists());
    assert_eq!(run_ids(&d), ["20000101T000000Z-2-00000000"]);
}

// ------------------------------------------------------------ finding the tools

#[test]
fn a_program_outside_the_grants_is_named_with_the_flag() {
    let d = dirs("notfound");
    let tools = d.root.join("tools");
    let tool = d.write("tools/bin/mytool", "#!/bin/sh\necho tool-ran\n");
    fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{PATH}", tools.join("bin").display());
    let run = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_terra"));
        d.run_env(&mut c, &path);
        c.args(args);
        run_bounded(c)
    };
    let hint = format!(
        "mytool is {} on the host, outside every grant of the box; --read {} grants it",
        tool.display(),
        tools.display()
    );
    let o = run(&["run", "--", "mytool"]);
    assert_eq!(o.status.code(), Some(127), "{}", show(&o));
    assert!(stderr(&o).contains(&hint), "{}", show(&o));
    // --dry-run says it before anything runs.
    let o = run(&["run", "--dry-run", "--", "mytool"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        stdout(&o).contains(&format!("program:         NOT IN THE BOX: {hint}")),
        "{}",
        show(&o)
    );
    // The flag it names makes it run.
    let tools_s = tools.to_str().unwrap();
    let o = run(&["run", "--read", tools_s, "--", "mytool"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(stdout(&o), "tool-ran\n");
    let o = run(&["run", "--dry-run", "--read", tools_s, "--", "mytool"]);
    assert!(
        stdout(&o).contains(&format!("program:         {} (granted)", tool.display())),
        "{}",
        show(&o)
    );
    // A program the host does not have either: no hint.
    let o = run(&["run", "--", "terra-surely-no-such-program"]);
    assert_eq!(o.status.code(), Some(127), "{}", show(&o));
    assert!(!stderr(&o).contains("outside every grant"), "{}", show(&o));
}

// ------------------------------------------------------------ presets and profiles

/// `terra ARGS` with extra environment variables.
fn terra_env(d: &RunDirs, path: &str, vars: &[(&str, &Path)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_terra"));
    d.run_env(&mut c, path);
    for (k, v) in vars {
        c.env(k, v);
    }
    c.args(args);
    run_bounded(c)
}

#[test]
fn the_rust_preset_grants_binaries_read_only_caches_writable_and_is_in_the_digest() {
    let d = dirs("preset");
    let cargo_home = d.root.join("cargo");
    let rustup_home = d.root.join("rustup");
    // CARGO_HOME itself is not granted (it holds credentials.toml); its
    // bin is, read-only, and its registry (the download cache) writable.
    let tool = d.write(
        "cargo/bin/faux-cargo",
        "#!/bin/sh\ncat \"$RUSTUP_HOME/toolchain\"; echo \"CARGO_HOME=$CARGO_HOME\"\n\
         for f in bin/poisoned registry/poisoned; do \
           if touch \"$CARGO_HOME/$f\" 2>/dev/null; then echo \"WROTE $f\"; fi; done\n",
    );
    fs::create_dir_all(cargo_home.join("registry")).unwrap();
    fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    d.write("rustup/toolchain", "stable\n");
    let path = format!("{}:{PATH}", cargo_home.join("bin").display());
    let vars = [
        ("CARGO_HOME", cargo_home.as_path()),
        ("RUSTUP_HOME", rustup_home.as_path()),
    ];
    let o = terra_env(
        &d,
        &path,
        &vars,
        &["run", "--preset", "rust", "--", "faux-cargo"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "stable\nCARGO_HOME={}\nWROTE registry/poisoned\n",
            cargo_home.display()
        ),
        "bin read, registry written: {}",
        show(&o)
    );
    assert!(!cargo_home.join("bin/poisoned").exists());
    assert!(cargo_home.join("registry/poisoned").exists());
    // Without the preset the toolchain is outside every grant.
    let o = terra_env(&d, &path, &vars, &["run", "--", "faux-cargo"]);
    assert_eq!(o.status.code(), Some(127), "{}", show(&o));
    // The preset's rules are in the MIR: the decision digest differs.
    let digest = |args: &[&str]| {
        let o = terra_env(&d, &path, &vars, args);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let out = stdout(&o);
        assert!(
            !args.contains(&"--preset") || out.contains("+ preset rust: read "),
            "{out}"
        );
        out.lines()
            .find_map(|l| l.strip_prefix("decision digest: "))
            .unwrap()
            .to_string()
    };
    assert_ne!(
        digest(&["run", "--dry-run", "--", "true"]),
        digest(&["run", "--dry-run", "--preset", "rust", "--", "true"])
    );
    // Unknown presets, and presets with a policy file, are refused.
    let o = terra(&d, &["run", "--preset", "perl", "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(
        stderr(&o).contains("presets: rust, node, python"),
        "{}",
        show(&o)
    );
    let p = d.write("p.json", terra_policy::DEFAULT_POLICY_SOURCE);
    let o = terra(
        &d,
        &[
            "run",
            "--policy",
            p.to_str().unwrap(),
            "--preset",
            "rust",
            "--",
            "true",
        ],
    );
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(
        stderr(&o).contains("--preset grants in the policy file"),
        "{}",
        show(&o)
    );
    // terra presets lists them.
    let o = terra(&d, &["presets", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rust", "node", "python"]);
}

#[test]
fn profiles_come_from_the_config_directory_never_the_workspace() {
    let d = dirs("profile");
    let config = d.root.join("config");
    let extra = d.root.join("extra");
    fs::create_dir_all(&extra).unwrap();
    fs::write(extra.join("data"), "from-extra\n").unwrap();
    let policy = terra_policy::DEFAULT_POLICY_SOURCE.replace(
        "\"rules\": [",
        &format!(
            "\"rules\": [\n      {{ \"access\": \"read\", \"path\": {{ \"absolute\": \"{}\" }}, \"scope\": \"tree\" }},",
            extra.display()
        ),
    );
    d.write("config/terra/profiles/ci.json", &policy);
    let vars = [("XDG_CONFIG_HOME", config.as_path())];
    let cat = ["cat", extra.join("data").to_str().unwrap()].map(str::to_owned);
    let run = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.push("--");
        all.extend(cat.iter().map(String::as_str));
        terra_env(&d, PATH, &vars, &all)
    };
    let o = run(&["run", "--profile", "ci"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(stdout(&o), "from-extra\n");
    // Without it, the embedded default: not readable.
    let o = run(&["run"]);
    assert_ne!(o.status.code(), Some(0), "{}", show(&o));
    // default.json is used when no policy is named.
    d.write("config/terra/profiles/default.json", &policy);
    let o = run(&["run"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = terra_env(&d, PATH, &vars, &["run", "--dry-run", "--", "true"]);
    assert!(
        stdout(&o).contains("profiles/default.json (json"),
        "{}",
        show(&o)
    );
    // Names cannot leave the directory; a missing profile is named.
    for (name, words) in [("../ci", "letters, digits"), ("nope", "no profile")] {
        let o = run(&["run", "--profile", name]);
        assert_eq!(o.status.code(), Some(125), "{}", show(&o));
        assert!(stderr(&o).contains(words), "{name}: {}", show(&o));
    }
    // A configuration directory inside the workspace is the repository's choice: refused.
    let ws_config = d.ws.join("config");
    fs::create_dir_all(ws_config.join("terra/profiles")).unwrap();
    fs::write(ws_config.join("terra/profiles/ci.json"), &policy).unwrap();
    let o = terra_env(
        &d,
        PATH,
        &[("XDG_CONFIG_HOME", &ws_config)],
        &["run", "--profile", "ci", "--", "true"],
    );
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(
        stderr(&o).contains("must not choose its own sandbox"),
        "{}",
        show(&o)
    );
}

// ------------------------------------------------------------ --save-profile

#[test]
fn save_profile_keeps_a_command_line_that_worked() {
    use std::os::unix::fs::PermissionsExt;
    let d = dirs("save-profile");
    let data = d.root.join("data");
    fs::create_dir_all(&data).unwrap();
    fs::write(data.join("f"), "granted-data\n").unwrap();
    let read = data.to_str().unwrap();
    let profiles = d.home.join(".config/terra/profiles");
    let script = "cat \"$0\"; echo \"FOO=$FOO COPIED=$COPIED\"";
    let f = data.join("f");
    let f = f.to_str().unwrap();
    // Twin first: without the grant the file is not there.
    let o = terra(&d, &["run", "--", "sh", "-c", script, f]);
    assert!(!stdout(&o).contains("granted-data"), "{}", show(&o));
    // A failed run saves nothing.
    let o = terra(
        &d,
        &["run", "--read", read, "--save-profile", "p", "--", "false"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        stderr(&o).contains("not saved: the profile p"),
        "{}",
        show(&o)
    );
    assert!(!profiles.join("p.json").exists());
    // The run that works is saved, with its variables (a copied one by name).
    let mut c = Command::new(env!("CARGO_BIN_EXE_terra"));
    d.run_env(&mut c, PATH);
    c.env("COPIED", "from-env").args([
        "run",
        "--read",
        read,
        "--env",
        "FOO=bar",
        "--env",
        "COPIED",
        "--save-profile",
        "p",
        "--export-policy",
        "exported.json",
        "--",
        "sh",
        "-c",
        script,
        f,
    ]);
    let o = run_bounded(c);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(stderr(&o).contains("saved the profile p"), "{}", show(&o));
    let saved = profiles.join("p.json");
    assert_eq!(
        fs::metadata(&saved).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let env: Value =
        serde_json::from_slice(&fs::read(profiles.join("p.env.json")).unwrap()).unwrap();
    assert_eq!(env["FOO"], "bar");
    assert_eq!(
        env["COPIED"],
        Value::Null,
        "a copied value is never written"
    );
    assert!(!fs::read_to_string(profiles.join("p.env.json"))
        .unwrap()
        .contains("from-env"));
    // Run again with the profile: the grant and the variables are back.
    let mut c = Command::new(env!("CARGO_BIN_EXE_terra"));
    d.run_env(&mut c, PATH);
    c.env("COPIED", "again")
        .args(["run", "--profile", "p", "--", "sh", "-c", script, f]);
    let o = run_bounded(c);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        stdout(&o),
        "granted-data\nFOO=bar COPIED=again\n",
        "{}",
        show(&o)
    );
    // A copied variable that is not set refuses the run.
    let o = terra(&d, &["run", "--profile", "p", "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(stderr(&o).contains("COPIED"), "{}", show(&o));
    // The exported policy is the same decision.
    let o = terra(
        &d,
        &[
            "run",
            "--policy",
            "exported.json",
            "--",
            "sh",
            "-c",
            script,
            f,
        ],
    );
    assert!(stdout(&o).contains("granted-data"), "{}", show(&o));
    // Existing files are refused before the run, unless --force.
    let before = fs::read(&saved).unwrap();
    let o = terra(&d, &["run", "--save-profile", "p", "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert!(stderr(&o).contains("add --force"), "{}", show(&o));
    let o = terra(
        &d,
        &["run", "--export-policy", "exported.json", "--", "true"],
    );
    assert_eq!(o.status.code(), Some(125), "{}", show(&o));
    assert_eq!(fs::read(&saved).unwrap(), before);
    let o = terra(&d, &["run", "--save-profile", "p", "--force", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // Replaced: this command line had no grant and no variables.
    assert_ne!(fs::read(&saved).unwrap(), before);
    assert!(!profiles.join("p.env.json").exists());
    let o = terra(&d, &["run", "--profile", "p", "--", "sh", "-c", script, f]);
    assert!(!stdout(&o).contains("granted-data"), "{}", show(&o));
}

// ------------------------------------------------------------ stripped environment

#[test]
fn a_failed_workload_names_the_variables_the_box_did_not_get() {
    let d = dirs("dropped-env");
    let run = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_terra"));
        d.run_env(&mut c, PATH);
        c.env("CORP_TOKEN", "value-31337")
            .env("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
            .env("PASSED_ON", "x")
            .args(args);
        run_bounded(c)
    };
    let o = run(&["run", "--env", "PASSED_ON", "--", "sh", "-c", "exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    let err = stderr(&o);
    let note = err
        .lines()
        .find(|l| l.contains("did not get these variables"))
        .unwrap_or_else(|| panic!("{}", show(&o)));
    assert!(note.contains("the workload exited 3"), "{note}");
    assert!(
        note.contains(" CORP_TOKEN") && note.contains(" SSL_CERT_FILE"),
        "{note}"
    );
    // Names only; what was passed is not named.
    assert!(!err.contains("value-31337"), "{err}");
    assert!(
        !note.contains("PASSED_ON") && !note.contains(" PATH"),
        "{note}"
    );
    assert!(
        err.contains("SSL_CERT_FILE name certificates: --preset"),
        "{err}"
    );
    // Twin: a workload that succeeds gets no such note, nor does --quiet.
    let o = run(&["run", "--", "true"]);
    assert!(!stderr(&o).contains("did not get"), "{}", show(&o));
    let o = run(&["run", "-q", "--", "false"]);
    assert!(!stderr(&o).contains("did not get"), "{}", show(&o));
}
