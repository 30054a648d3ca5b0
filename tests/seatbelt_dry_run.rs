//! `terra run --backend macos --dry-run` on any host: the profile and its
//! parameters, the command line's rules lowered, the broker's profile of a
//! mediated plan; the refusals around it.
// Linux only: the expectations are a dry run's on Linux (the Mac's resolver
// files in the broker's profile, the refusal of a real run off macOS).
#![cfg(target_os = "linux")]

use std::process::Command;

const POLICY: &str = r#"{"formatVersion":3,"filesystem":{"default":"deny","rules":[
 {"access":"write","path":{"root":"workspace","relative":""},"scope":"tree"},
 {"access":"read","path":{"special":"minimal-runtime"},"scope":"tree"},
 {"access":"deny","path":{"root":"workspace","relative":"secret"},"scope":"tree"}]},
 "network":{"mode":"none"},"process":{"treeConfinement":"disabled"},"root":{"mode":"read-only"}}"#;

fn terra(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_terra"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn seatbelt_dry_run_json_has_profile_and_every_path_as_parameter() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("secret")).unwrap();
    let policy = dir.path().join("p.json");
    std::fs::write(&policy, POLICY).unwrap();
    let out = terra(
        dir.path(),
        &[
            "run",
            "--backend",
            "macos",
            "--dry-run",
            "--json",
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let obj = v.as_object().unwrap();
    let mut keys: Vec<&String> = obj.keys().collect();
    keys.sort();
    assert_eq!(keys, ["backend", "parameters", "profile"]);
    assert_eq!(v["backend"], "macos");
    let profile = v["profile"].as_str().unwrap();
    assert!(profile.starts_with("(version 1)\n(deny default)\n(import \"system.sb\")\n"));
    assert!(
        !without_fixed_patterns(profile).contains('/'),
        "path text in the profile: {profile}"
    );
    let params = v["parameters"].as_object().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let values: Vec<&str> = params.values().map(|p| p.as_str().unwrap()).collect();
    let secret = ws.join("secret");
    for want in [ws.to_str().unwrap(), secret.to_str().unwrap()] {
        // The Linux temp dir is under /tmp: its Seatbelt form is /private/tmp.
        let want = if want.starts_with("/tmp/") {
            format!("/private{want}")
        } else {
            want.to_string()
        };
        assert!(values.contains(&want.as_str()), "{want} not in {values:?}");
    }
    assert!(profile.contains("(deny file-read* file-write* process-exec (subpath (param \"GRANT_"));
}

/// The profile's text without the two fixed patterns that hold a slash
/// (new pseudo-terminals, the xcrun cache): every other path is a parameter.
fn without_fixed_patterns(profile: &str) -> String {
    use terra_seatbelt::runtime::{NEW_PTY_REGEX, XCRUN_CACHE_REGEX};
    profile
        .replace(NEW_PTY_REGEX, "")
        .replace(XCRUN_CACHE_REGEX, "")
}

#[test]
fn seatbelt_dry_run_refuses_what_seatbelt_cannot_enforce() {
    // An ephemeral root needs root-ephemeral-write, which the macos backend
    // does not declare (no overlay of the host's root).
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("secret")).unwrap();
    let policy = dir.path().join("p.json");
    std::fs::write(
        &policy,
        POLICY.replace(
            r#""root":{"mode":"read-only"}"#,
            r#""root":{"mode":"ephemeral-write"}"#,
        ),
    )
    .unwrap();
    let out = terra(
        dir.path(),
        &[
            "run",
            "--backend",
            "macos",
            "--dry-run",
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("root-ephemeral-write"), "{err}");
}

#[cfg(not(target_os = "macos"))]
#[test]
fn seatbelt_backend_run_is_refused_off_macos() {
    let dir = tempfile::tempdir().unwrap();
    let out = terra(dir.path(), &["run", "--backend", "macos", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("backend macos is not available on this OS")
    );
}

/// `--backend macos --dry-run --json` in `dir` with `args` before `-- true`.
fn dry_json(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["run", "--backend", "macos", "--dry-run", "--json"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "true"]);
    let out = terra(dir, &all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn param<'a>(params: &'a serde_json::Value, value: &str) -> Option<&'a str> {
    params
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, v)| v.as_str() == Some(value))
        .map(|(k, _)| k.as_str())
}

#[test]
fn seatbelt_dry_run_lowers_the_command_lines_rules() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(ws.join("out/secret")).unwrap();
    std::fs::create_dir_all(ws.join("ro")).unwrap();
    let extra = tempfile::tempdir().unwrap();
    let extra_path = std::fs::canonicalize(extra.path()).unwrap();
    let v = dry_json(
        &ws,
        &[
            "--no-process-tree",
            "--read",
            extra_path.to_str().unwrap(),
            "--write",
            "out",
            "--deny",
            "out/secret",
        ],
    );
    let profile = v["profile"].as_str().unwrap();
    assert!(
        !without_fixed_patterns(profile).contains('/'),
        "path text in the profile: {profile}"
    );
    let seatbelt = |p: &std::path::Path| {
        let s = p.to_str().unwrap().to_string();
        if s.starts_with("/tmp/") || s.starts_with("/var/") || s.starts_with("/etc/") {
            format!("/private{s}")
        } else {
            s
        }
    };
    let name = |p: &std::path::Path| {
        param(&v["parameters"], &seatbelt(p))
            .unwrap_or_else(|| panic!("{} is not a parameter: {}", p.display(), v["parameters"]))
            .to_string()
    };
    let read = name(&extra_path);
    let write = name(&ws.join("out"));
    let deny = name(&ws.join("out/secret"));
    assert!(profile.contains(&format!("(allow file-read* (subpath (param \"{read}\")))")));
    assert!(profile.contains(&format!(
        "(allow file-read* file-write* (subpath (param \"{write}\")))"
    )));
    assert!(profile.contains(&format!(
        "(deny file-read* file-write* process-exec (subpath (param \"{deny}\")))"
    )));
    // The deny comes after the write grant it carves out of.
    let at = |rule: &str| profile.find(rule).unwrap();
    assert!(at(&format!("(param \"{deny}\")")) > at(&format!("(subpath (param \"{write}\")))")));
    // network none: not one network rule, so no broker.
    assert!(!profile.contains("(allow network"), "{profile}");
    assert!(v.get("broker").is_none());
}

#[test]
fn seatbelt_dry_run_mediated_shows_the_broker_and_its_port_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let v = dry_json(
        dir.path(),
        &["--no-process-tree", "--allow-net", "example.com:443"],
    );
    let mut keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["backend", "broker", "parameters", "profile"]);
    // The workload reaches the broker's port only, named by a parameter.
    let profile = v["profile"].as_str().unwrap();
    let net: Vec<&str> = profile.lines().filter(|l| l.contains("network")).collect();
    assert_eq!(
        net,
        ["(allow network-outbound (remote tcp (string-append \"localhost:\" (param \"BROKER_PORT\"))))"]
    );
    assert_eq!(v["parameters"]["BROKER_PORT"], "0");
    // The broker: terra itself, the resolver files read-only, no write, no
    // fork, a network client that accepts on the same port parameter.
    let broker = v["broker"]["profile"].as_str().unwrap();
    let bp = &v["broker"]["parameters"];
    assert!(
        !broker.contains('/'),
        "path text in the broker profile: {broker}"
    );
    assert!(!broker.contains("file-write"), "{broker}");
    assert!(!broker.contains("process-fork"), "{broker}");
    assert!(broker.contains("(allow network-outbound (remote ip \"*:*\"))"));
    assert!(broker.contains(
        "(allow network-inbound (local tcp (string-append \"localhost:\" (param \"BROKER_PORT\"))))"
    ));
    assert_eq!(bp["BROKER_PORT"], "0");
    for f in ["/private/var/run/resolv.conf", "/private/etc/hosts"] {
        let name = param(bp, f).unwrap_or_else(|| panic!("{f} missing: {bp}"));
        assert!(broker.contains(&format!("(allow file-read* (literal (param \"{name}\")))")));
    }
    // In Seatbelt's form: a build under /tmp or /var is under /private there.
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_terra")).unwrap();
    let exe = terra_seatbelt::path::seatbelt_path(exe.to_str().unwrap()).unwrap();
    assert_eq!(bp["EXECUTABLE"], exe.as_str());
    // The text form names the broker's profile and parameters separately.
    let out = terra(
        dir.path(),
        &[
            "run",
            "--backend",
            "macos",
            "--dry-run",
            "--no-process-tree",
            "--allow-net",
            "example.com:443",
            "--",
            "true",
        ],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("\nbroker profile (terra __network):\n(version 1)\n"),
        "{text}"
    );
    assert!(text.contains("\nbroker parameters:\n"), "{text}");
}

/// `--backend macos --dry-run --json` with the default policy (no
/// `--policy`, no `--no-process-tree`), for `cmd`, in `dir` with `env`.
fn default_plan(
    dir: &std::path::Path,
    env: &[(&str, &str)],
    extra: &[&str],
    cmd: &[&str],
) -> serde_json::Value {
    let mut args = vec!["run", "--backend", "macos", "--dry-run", "--json"];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(cmd);
    let out = Command::new(env!("CARGO_BIN_EXE_terra"))
        .current_dir(dir)
        .envs(env.iter().copied())
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn seatbelt_dry_run_default_policy_git_status_is_a_plan_with_the_tree_contained() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let state_home = std::fs::canonicalize(state.path()).unwrap();
    let git = ["/usr/bin/git", "/usr/local/bin/git", "/bin/sh"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap();
    let v = default_plan(
        dir.path(),
        &[("XDG_STATE_HOME", state_home.to_str().unwrap())],
        &[],
        &[git, "status"],
    );
    let profile = v["profile"].as_str().unwrap();
    let params = &v["parameters"];
    // The workload builds: it forks and execs, under the listed sysctls.
    assert!(
        profile.lines().any(|l| l == "(allow process-fork)"),
        "{profile}"
    );
    assert!(!profile.contains("(allow sysctl-read)"), "{profile}");
    assert!(!profile.contains("kern.proc"), "{profile}");
    // The tree: the run's mark in the run's own state directory, metadata
    // only, found by the sweep at the end.
    let mark = params["RUN_MARK"].as_str().unwrap();
    let want = terra_seatbelt::path::seatbelt_path(
        state_home
            .join("terra/runs/RUN-ID/tree.mark")
            .to_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(mark, want);
    assert!(profile.contains("(allow file-read-metadata (literal (param \"RUN_MARK\")))"));
    // The macOS runtime: the developer tools behind /usr/bin/git, Homebrew.
    for p in [
        "/Library/Developer/CommandLineTools",
        "/private/var/select",
        "/opt/homebrew",
    ] {
        assert!(param(params, p).is_some(), "{p} missing: {params}");
    }
    // Without a terminal on any standard descriptor, no terminal is granted.
    assert!(!params
        .as_object()
        .unwrap()
        .keys()
        .any(|k| k.starts_with("TTY_")));
}

#[test]
fn seatbelt_dry_run_grants_the_callers_terminal() {
    // Under script(1) standard input and error are a pseudo-terminal: the
    // plan grants exactly that device (read, write, ioctl).
    if Command::new("script").arg("--version").output().is_err() {
        panic!("script(1) (util-linux) is needed for this test");
    }
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("plan.json");
    let cmd = format!(
        "{} run --backend macos --dry-run --json -- true > {}",
        env!("CARGO_BIN_EXE_terra"),
        out_file.display()
    );
    let status = Command::new("script")
        .current_dir(dir.path())
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    let tty = v["parameters"]["TTY_0"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", v["parameters"]));
    assert!(tty.starts_with("/dev/pts/"), "{tty}");
    assert!(
        v["parameters"].get("TTY_1").is_none(),
        "one device, named once"
    );
    let profile = v["profile"].as_str().unwrap();
    assert!(profile
        .contains("(allow file-read* file-write-data file-ioctl (literal (param \"TTY_0\")))"));
    assert!(profile.lines().any(|l| l == "(allow pseudo-tty)"));
}

#[test]
fn seatbelt_dry_run_presets_apply_on_macos() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(home.path()).unwrap();
    std::fs::create_dir_all(home.join(".cargo/registry")).unwrap();
    std::fs::create_dir_all(home.join(".rustup")).unwrap();
    let cargo_home = home.join(".cargo");
    let rustup_home = home.join(".rustup");
    let v = default_plan(
        dir.path(),
        &[
            ("HOME", home.to_str().unwrap()),
            ("CARGO_HOME", cargo_home.to_str().unwrap()),
            ("RUSTUP_HOME", rustup_home.to_str().unwrap()),
        ],
        &["--preset", "rust"],
        &["true"],
    );
    let params = &v["parameters"];
    let profile = v["profile"].as_str().unwrap();
    // The toolchain is read-only (the host's next build runs it); the
    // registry is the preset's download cache, writable.
    for (p, writable) in [
        (home.join(".rustup"), false),
        (home.join(".cargo/registry"), true),
    ] {
        let p = terra_seatbelt::path::seatbelt_path(p.to_str().unwrap()).unwrap();
        let name = param(params, &p).unwrap_or_else(|| panic!("{p} missing: {params}"));
        let rule = if writable {
            format!("(allow file-read* file-write* (subpath (param \"{name}\")))")
        } else {
            format!("(allow file-read* (subpath (param \"{name}\")))")
        };
        assert!(profile.contains(&rule), "{p}: {rule}");
        assert_eq!(
            profile.contains(&format!("file-write* (subpath (param \"{name}\"))")),
            writable,
            "{p}"
        );
    }
    // Never CARGO_HOME itself (credentials.toml lives there).
    let cargo_home =
        terra_seatbelt::path::seatbelt_path(home.join(".cargo").to_str().unwrap()).unwrap();
    let granted = params
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("GRANT_"))
        .any(|(_, v)| v.as_str() == Some(cargo_home.as_str()));
    assert!(!granted, "{params}");
}

#[test]
fn seatbelt_dry_run_mediated_workload_forks_and_its_broker_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let v = default_plan(
        dir.path(),
        &[],
        &["--allow-net", "example.com:443"],
        &["true"],
    );
    let workload = v["profile"].as_str().unwrap();
    let broker = v["broker"]["profile"].as_str().unwrap();
    assert!(workload.lines().any(|l| l == "(allow process-fork)"));
    assert!(workload.lines().any(|l| l == "(allow ipc-posix-sem)"));
    for role_only in [
        "process-fork",
        "pseudo-tty",
        "ipc-posix-sem",
        "sysctl",
        "RUN_MARK",
    ] {
        assert!(
            !broker.contains(role_only),
            "broker has {role_only}: {broker}"
        );
    }
}

#[test]
fn seatbelt_dry_run_no_process_tree_is_not_with_a_policy_file() {
    // The opt-out stays for the default policy (recorded in the digest);
    // a policy file says what it needs itself.
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.json");
    std::fs::write(&policy, POLICY).unwrap();
    let out = terra(
        dir.path(),
        &[
            "run",
            "--backend",
            "macos",
            "--dry-run",
            "--no-process-tree",
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("treeConfinement"));
}
