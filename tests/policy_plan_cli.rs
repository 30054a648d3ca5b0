//! End-to-end tests of the plan commands of `terra policy`: the permissions
//! corpus through the binary (compile, resolve, evaluate), and the other
//! commands' outputs, exit codes and refusals.
// The corpus and refusals use Unix paths and symlinks: Unix only.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use terra_test_support::data::{permission_cases, under, PermissionCase};
use terra_test_support::json::field_strs;

const TERRA: &str = env!("CARGO_BIN_EXE_terra");

fn terra(args: &[&str]) -> Output {
    Command::new(TERRA).args(args).output().expect("run terra")
}

/// terra with the words of `line` (split at spaces) as its arguments, each
/// word `{}` replaced by the next of `values` (which may hold spaces).
fn terra_with(line: &str, values: &[&str]) -> Output {
    let mut values = values.iter();
    let args: Vec<&str> = line
        .split(' ')
        .map(|w| match w {
            "{}" => *values.next().expect("a value for every {}"),
            w => w,
        })
        .collect();
    assert!(values.next().is_none(), "more values than {{}} in {line:?}");
    terra(&args)
}

fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

/// Asserts a failure: exit 1, `terra: <class>: ...` on stderr and, with
/// `--json`, the same class on stdout.
fn assert_refused(o: &Output, class: &str) -> Value {
    assert_eq!(code(o), 1, "stderr: {}", stderr(o));
    let err = stderr(o);
    assert!(
        err.starts_with(&format!("terra: {class}: ")),
        "stderr: {err}"
    );
    if o.stdout.is_empty() {
        return Value::Null;
    }
    let v = stdout_json(o);
    assert_eq!(v["ok"], json!(false));
    assert_eq!(v["error"]["class"], json!(class), "{v}");
    v
}

type Case = PermissionCase;

fn source(c: &Case, root: &str, reversed: bool) -> String {
    let mut rules: Vec<Value> = c
        .rules
        .iter()
        .map(|(access, scope, path, pc)| {
            let mut r = json!({ "access": access, "scope": scope, "path": { "absolute": under(root, path) } });
            if *pc {
                r["missing"] = json!("skip");
            }
            r
        })
        .collect();
    if reversed {
        rules.reverse();
    }
    json!({
        "formatVersion": 3,
        "filesystem": { "default": "deny", "rules": rules },
        "network": { "mode": "none" },
        "process": { "treeConfinement": "required" },
        "root": { "mode": "read-only" }
    })
    .to_string()
}

#[test]
fn permissions_corpus_end_to_end() {
    for c in permission_cases() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("fs");
        std::fs::create_dir(&root).unwrap();
        let root = root.to_str().unwrap().to_string();
        c.make_nodes(&root);
        for reversed in [false, true] {
            let src = base.join(format!("policy-{reversed}.json"));
            std::fs::write(&src, source(&c, &root, reversed)).unwrap();
            let mir = base.join(format!("policy-{reversed}.mir"));
            let out = terra(&[
                "policy",
                "compile",
                src.to_str().unwrap(),
                "--output",
                mir.to_str().unwrap(),
            ]);
            assert_eq!(code(&out), 0, "{}: compile: {}", c.name, stderr(&out));
            // The MIR file and the JSON source are both accepted as POLICY.
            for policy in [&mir, &src] {
                let policy = policy.to_str().unwrap();
                let out = terra(&["policy", "resolve", policy, "--json"]);
                match &c.refused {
                    None => {
                        assert_eq!(code(&out), 0, "{}: resolve: {}", c.name, stderr(&out));
                        let v = stdout_json(&out);
                        let required: Vec<&str> = v["required"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_str().unwrap())
                            .collect();
                        let mut extra: Vec<&str> = required
                            .iter()
                            .copied()
                            .filter(|x| *x == "fs-protect-create" || *x == "fs-deny-write")
                            .collect();
                        extra.sort();
                        let mut want: Vec<&str> = c.requires.iter().map(String::as_str).collect();
                        want.sort();
                        assert_eq!(extra, want, "{}: requires", c.name);
                        let pcs = v["rules"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter(|r| r["protectCreate"] == json!(true));
                        assert_eq!(
                            pcs.count(),
                            c.rules.iter().filter(|r| r.3).count(),
                            "{}",
                            c.name
                        );
                        // Everything required is enough; one capability less is a violation (exit 2).
                        let all: Vec<&str> = required.clone();
                        let check = |available: &[&str]| {
                            let mut args = vec!["policy", "resolve", policy, "--json"];
                            args.extend(["--check", "--available"]);
                            args.extend_from_slice(available);
                            terra(&args)
                        };
                        let ok = check(&all);
                        assert_eq!(code(&ok), 0, "{}: {}", c.name, stderr(&ok));
                        let short = check(&all[1..]);
                        assert_eq!(code(&short), 2, "{}", c.name);
                        let sv = stdout_json(&short);
                        assert_eq!(sv["missing"], json!([all[0]]), "{}", c.name);
                        assert_eq!(sv["blockers"].as_array().unwrap().len(), 1);
                        for (path, perm, reason) in &c.queries {
                            let q = under(&root, path);
                            let out =
                                terra(&["policy", "evaluate", policy, "--path", &q, "--json"]);
                            assert_eq!(
                                code(&out),
                                0,
                                "{}: evaluate {path}: {}",
                                c.name,
                                stderr(&out)
                            );
                            let e = stdout_json(&out);
                            assert_eq!(
                                (
                                    e["permission"].as_str().unwrap(),
                                    e["reason"].as_str().unwrap()
                                ),
                                (perm.as_str(), reason.as_str()),
                                "{}: {path}",
                                c.name
                            );
                            assert_eq!(
                                e["decisiveRule"].is_null(),
                                reason == "default-deny",
                                "{}: {path}",
                                c.name
                            );
                            assert_eq!(e["digest"], v["digest"]);
                        }
                    }
                    Some((before, after)) => {
                        let v = assert_refused(&out, "conflict");
                        let want = format!("before={before} after={after}");
                        assert!(
                            stderr(&out).contains(&want),
                            "{}: {} lacks {want}",
                            c.name,
                            stderr(&out)
                        );
                        assert_eq!(
                            (v["error"]["before"].as_str(), v["error"]["after"].as_str()),
                            (Some(before.as_str()), Some(after.as_str())),
                            "{}",
                            c.name
                        );
                        for (path, _, _) in &c.queries {
                            let out = terra(&[
                                "policy",
                                "evaluate",
                                policy,
                                "--path",
                                &under(&root, path),
                            ]);
                            assert_refused(&out, "conflict");
                            assert!(stderr(&out).contains(&want), "{}", c.name);
                        }
                    }
                }
            }
        }
    }
}

struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(dir.join("ws/src")).unwrap();
        std::fs::create_dir_all(dir.join("ws/.git")).unwrap();
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        Fixture { _tmp: tmp, dir }
    }
    fn path(&self, rel: &str) -> String {
        self.dir.join(rel).to_str().unwrap().to_string()
    }
    fn write(&self, name: &str, v: Value) -> String {
        let p = self.path(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    }
    fn ws(&self) -> String {
        self.path("ws")
    }
}

fn policy(rules: Value, network: Value, root: &str, tree: &str) -> Value {
    json!({
        "formatVersion": 3,
        "filesystem": { "default": "deny", "rules": rules },
        "network": network,
        "process": { "treeConfinement": tree },
        "root": { "mode": root }
    })
}

/// A policy of `rules` with network none, root read-only and the process
/// tree confined.
fn local_policy(rules: Value) -> Value {
    policy(rules, json!({ "mode": "none" }), "read-only", "required")
}

fn ws_rule(access: &str, rel: &str) -> Value {
    json!({ "access": access, "path": { "root": "workspace", "relative": rel } })
}

#[test]
fn capabilities_command() {
    let f = Fixture::new();
    let p = f.write(
        "p.json",
        policy(
            json!([ws_rule("write", ""), { "access": "deny", "path": { "root": "workspace", "relative": ".env" }, "missing": "skip" }]),
            json!({ "mode": "mediated", "allow": [{ "protocol": "tcp", "host": "example.com", "port": 443, "requireTlsSni": true }] }),
            "ephemeral-write",
            "disabled",
        ),
    );
    let out = terra(&["policy", "capabilities", &p, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!(
        v["required"],
        json!([
            "fs-write",
            "fs-deny",
            "network-mediated",
            "root-ephemeral-write",
            "network-require-tls-sni"
        ])
    );
    assert_eq!(v["conditional"], json!(["fs-protect-create"]));
    assert_eq!(v["blockers"], json!([]));
    assert_eq!(v["digest"].as_str().unwrap().len(), 64);
    let out = terra_with(
        "policy capabilities {} --check --available fs-write,fs-deny network-mediated",
        &[&p],
    );
    assert_eq!(code(&out), 2);
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains("missing root-ephemeral-write, network-require-tls-sni"));
    let out = terra_with("policy capabilities {} --json --check --available fs-write fs-deny network-mediated root-ephemeral-write network-require-tls-sni", &[&p]);
    assert_eq!(code(&out), 0);
    assert_eq!(stdout_json(&out)["missing"], json!([]));
    let out = terra_with("policy capabilities {} --check --available fs-bogus", &[&p]);
    assert_refused(&out, "argument");
    // Without --mediator, a mediated policy binds terra's own broker.
    let out = terra(&["policy", "resolve", &p, "--workspace", &f.ws(), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout_json(&out)["network"]["mediator"],
        json!("terra-netd/1")
    );
    let out = terra_with(
        "policy resolve {} --workspace {} --mediator netd --json",
        &[&p, &f.ws()],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!(v["network"]["mediator"], json!("netd"));
    assert_eq!(v["rules"][1]["path"], json!(f.path("ws/.env")));
    assert_eq!(v["rules"][1]["protectCreate"], json!(true));
    let out = terra(&[
        "policy",
        "resolve",
        &p,
        "--workspace",
        &f.ws(),
        "--mediator",
        "a b",
    ]);
    assert_refused(&out, "argument");
}

#[test]
fn resolve_refusals_and_host_options() {
    let f = Fixture::new();
    let p = f.write(
        "p.json",
        local_policy(json!([ws_rule("read", ""), { "access": "write", "path": { "root": "temp" } }, { "access": "read", "path": { "special": "minimal-runtime" } }, { "access": "read", "path": { "root": "workspace", "relative": "gone" }, "missing": "skip" }])),
    );
    // Without host options: the current directory, the system temp
    // directory and terra's own mediator are bound, as `terra run` binds them.
    // (Two sibling directories: wherever the suite runs, neither holds the other.)
    std::fs::create_dir_all(f.path("here")).unwrap();
    std::fs::create_dir_all(f.path("systemp")).unwrap();
    let out = Command::new(TERRA)
        .args(["policy", "resolve", &p, "--json"])
        .current_dir(f.path("here"))
        .env("TMPDIR", f.path("systemp"))
        .output()
        .expect("run terra");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let cwd = std::fs::canonicalize(f.path("here")).unwrap();
    let temp = std::fs::canonicalize(f.path("systemp")).unwrap();
    let v = stdout_json(&out);
    let paths: Vec<&str> = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&cwd.to_str().unwrap()), "{paths:?}");
    assert!(paths.contains(&temp.to_str().unwrap()), "{paths:?}");
    let out = terra_with(
        "policy resolve {} --workspace {} --temp {} --minimal-root {} --minimal-root {} --json",
        &[
            &p,
            &f.ws(),
            &f.path("tmp"),
            &f.path("ws/src"),
            &f.path("ws/.git"),
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = stdout_json(&out);
    let paths = field_strs(&v["rules"], "path");
    assert_eq!(paths.len(), 4);
    assert!(
        paths.contains(&f.path("ws/src").as_str()) && paths.contains(&f.path("ws/.git").as_str())
    );
    assert_eq!(v["omitted"][0]["path"], json!(f.path("ws/gone")));
    // Default minimal-runtime roots when none are given.
    let out = terra_with(
        "policy resolve {} --workspace {} --temp {} --json",
        &[&p, &f.ws(), &f.path("tmp")],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    if Path::new("/usr").is_dir() {
        let v = stdout_json(&out);
        assert!(v["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["path"] == json!("/usr")));
    }
    // A binding that is not a directory; a missing target with missing: error.
    std::fs::write(f.path("file"), b"").unwrap();
    assert_refused(
        &terra_with(
            "policy resolve {} --workspace {} --temp {}",
            &[&p, &f.path("file"), &f.path("tmp")],
        ),
        "argument",
    );
    let q = f.write("q.json", local_policy(json!([ws_rule("read", "nope")])));
    assert_refused(
        &terra(&["policy", "resolve", &q, "--workspace", &f.ws(), "--json"]),
        "missing",
    );
    // Symlink escape.
    std::os::unix::fs::symlink(f.path("tmp"), f.path("ws/out")).unwrap();
    let e = f.write("e.json", local_policy(json!([ws_rule("read", "out")])));
    assert_refused(
        &terra(&["policy", "resolve", &e, "--workspace", &f.ws()]),
        "format",
    );
    // Symlink loop.
    std::os::unix::fs::symlink(f.path("ws/l2"), f.path("ws/l1")).unwrap();
    std::os::unix::fs::symlink(f.path("ws/l1"), f.path("ws/l2")).unwrap();
    let l = f.write("l.json", local_policy(json!([ws_rule("read", "l1/x")])));
    assert_refused(
        &terra(&["policy", "resolve", &l, "--workspace", &f.ws()]),
        "io",
    );
    // Inputs over 1 MiB are refused before parsing; bad input is refused by the parser.
    let big = f.path("big.json");
    std::fs::write(&big, vec![b' '; (1 << 20) + 1]).unwrap();
    let out = terra(&["policy", "resolve", &big, "--json"]);
    assert_refused(&out, "limit");
    assert_refused(
        &terra(&["policy", "evaluate", &big, "--path", "/"]),
        "limit",
    );
    std::fs::write(f.path("bad.json"), b"{}").unwrap();
    assert_refused(
        &terra(&["policy", "resolve", &f.path("bad.json")]),
        "format",
    );
    std::fs::write(f.path("bad.mir"), b"MMIR\0\x03").unwrap();
    assert_refused(&terra(&["policy", "resolve", &f.path("bad.mir")]), "format");
    assert_refused(&terra(&["policy", "resolve", &f.path("absent.json")]), "io");
}

#[test]
fn evaluate_command() {
    let f = Fixture::new();
    let p = f.write(
        "p.json",
        local_policy(json!([ws_rule("write", ""), ws_rule("deny-write", ".git")])),
    );
    let out = terra_with(
        "policy evaluate {} --workspace {} --path {} --json",
        &[&p, &f.ws(), &f.path("ws/.git/HEAD")],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!(v["permission"], json!("read"));
    assert_eq!(v["reason"], json!("deny-write-rule"));
    assert_eq!(v["decisiveRule"]["access"], json!("deny-write"));
    assert_eq!(v["decisiveRule"]["path"], json!(f.path("ws/.git")));
    assert_eq!(v["applicable"], json!(2));
    let out = terra_with(
        "policy evaluate {} --workspace {} --path {}",
        &[&p, &f.ws(), &f.path("ws/src")],
    );
    assert_eq!(code(&out), 0);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("read-write write-rule"));
    let out = terra_with(
        "policy evaluate {} --workspace {} --path /etc --json",
        &[&p, &f.ws()],
    );
    let v = stdout_json(&out);
    assert_eq!(
        (v["permission"].as_str(), v["reason"].as_str()),
        (Some("none"), Some("default-deny"))
    );
    assert!(v["decisiveRule"].is_null());
    for bad in ["relative", "/a/", "/a//b", "/a/./b", "/a/../b"] {
        assert_refused(
            &terra_with(
                "policy evaluate {} --workspace {} --path {} --json",
                &[&p, &f.ws(), bad],
            ),
            "non-canonical",
        );
    }
}

#[test]
fn restrict_command() {
    let f = Fixture::new();
    let base = f.write(
        "base.json",
        policy(
            json!([ws_rule("write", "")]),
            json!({ "mode": "mediated", "allow": [
                { "protocol": "tcp", "host": "a.example", "port": 443 },
                { "protocol": "tcp", "host": "b.example", "port": 443, "allowPrivateAddresses": true }] }),
            "ephemeral-write",
            "disabled",
        ),
    );
    let overlay = f.write(
        "overlay.json",
        policy(
            json!([ws_rule("deny", "secret"), ws_rule("deny-write", ".git")]),
            json!({ "mode": "mediated", "allow": [
                { "protocol": "tcp", "host": "b.example", "port": 443, "requireTlsSni": true, "allowPrivateAddresses": true }] }),
            "read-only",
            "disabled",
        ),
    );
    let out_path = f.path("out.mir");
    let out = terra(&[
        "policy", "restrict", &base, &overlay, "--output", &out_path, "--json",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!(v["rules"], json!(3));
    assert_eq!(v["network"], json!("mediated"));
    assert_eq!(v["root"], json!("read-only"));
    assert_eq!(v["process"], json!("disabled"));
    let bytes = std::fs::read(&out_path).unwrap();
    assert!(bytes.starts_with(b"MMIR"));
    // The written MIR is accepted by the format commands and by resolve.
    let insp = terra(&["policy", "inspect", &out_path]);
    assert_eq!(code(&insp), 0, "{}", stderr(&insp));
    let iv = stdout_json(&insp);
    assert_eq!(
        iv["network"]["allow"],
        json!([{ "protocol": "tcp", "host": "b.example", "port": 443, "requireTlsSni": true, "allowPrivateAddresses": true }])
    );
    std::fs::create_dir(f.path("ws/secret")).unwrap();
    let out = terra_with(
        "policy evaluate {} --workspace {} --mediator m --path {} --json",
        &[&out_path, &f.ws(), &f.path("ws/secret/x")],
    );
    assert_eq!(
        stdout_json(&out)["reason"],
        json!("deny-rule"),
        "{}",
        stderr(&out)
    );
    // An existing output needs --replace; nothing else is left behind.
    let again = terra(&["policy", "restrict", &base, &overlay, "--output", &out_path]);
    assert_refused(&again, "argument");
    assert!(stderr(&again).contains("--replace"));
    let out = terra_with(
        "policy restrict {} {} --output {} --replace",
        &[&base, &overlay, &out_path],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(std::fs::read(&out_path).unwrap(), bytes);
    let leftovers: Vec<_> = std::fs::read_dir(&f.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // An overlay that grants is refused, and no output is written.
    let bad = terra_with(
        "policy restrict {} {} --output {}",
        &[&overlay, &base, &f.path("bad.mir")],
    );
    assert_refused(&bad, "argument");
    assert!(!Path::new(&f.path("bad.mir")).exists());
}

#[test]
fn comparison_commands() {
    let f = Fixture::new();
    let none = json!({ "mode": "none" });
    let wide = f.write(
        "wide.json",
        policy(
            json!([ws_rule("write", "")]),
            json!({ "mode": "direct" }),
            "read-only",
            "required",
        ),
    );
    let narrow = f.write(
        "narrow.json",
        policy(
            json!([
                ws_rule("read", ""),
                ws_rule("write", "src"),
                ws_rule("deny", ".git")
            ]),
            none.clone(),
            "read-only",
            "required",
        ),
    );
    let other = f.write(
        "other.json",
        policy(
            json!([{ "access": "write", "path": { "root": "temp" } }]),
            none,
            "read-only",
            "required",
        ),
    );
    let host = [
        "--workspace".to_string(),
        f.ws(),
        "--temp".to_string(),
        f.path("tmp"),
    ];
    let run = |args: &[&str]| {
        let mut v: Vec<&str> = vec!["policy"];
        v.extend_from_slice(args);
        v.extend(host.iter().map(String::as_str));
        terra(&v)
    };
    // contains
    let out = run(&["contains", &wide, &narrow, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["contained"], json!(true));
    let out = run(&["contains", &narrow, &wide, "--json"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!(v["contained"], json!(false));
    let regions = v["regions"].as_array().unwrap();
    assert!(
        regions.contains(
            &json!({ "path": f.ws(), "named": true, "boundary": "read", "candidate": "read-write" })
        ),
        "{v}"
    );
    assert!(regions.contains(&json!({ "path": f.path("ws/.git"), "named": true, "boundary": "none", "candidate": "read-write" })), "{v}");
    assert!(v["settings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s.as_str().unwrap().contains("network direct")));
    // diff
    let out = run(&["diff", &narrow, &narrow, "--check", "--json"]);
    assert_eq!(code(&out), 0);
    assert_eq!(stdout_json(&out)["identical"], json!(true));
    let out = run(&["diff", &wide, &narrow, "--check", "--json"]);
    assert_eq!(
        code(&out),
        0,
        "narrowing passes --check: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v = stdout_json(&out);
    assert_eq!(v["network"], json!({ "before": "direct", "after": "none" }));
    assert!(!v["regions"].as_array().unwrap().is_empty());
    let out = run(&["diff", &narrow, &wide, "--check", "--json"]);
    assert_eq!(code(&out), 2);
    let v = stdout_json(&out);
    assert!(!v["widened"].as_array().unwrap().is_empty());
    assert_eq!(v["blockers"], v["widened"]);
    let out = run(&["diff", &narrow, &wide]);
    assert_eq!(code(&out), 0, "without --check a diff is a report");
    // overlaps
    let out = run(&["overlaps", &wide, &narrow, "--json"]);
    assert_eq!(code(&out), 0);
    let v = stdout_json(&out);
    assert_eq!(v["overlapping"], json!(true));
    assert_eq!(v["network"], json!(false));
    let out = run(&["overlaps", &wide, &other, "--json"]);
    let v = stdout_json(&out);
    assert_eq!(v["overlapping"], json!(false), "{v}");
    assert_eq!(v["regions"], json!([]));
    // Comparison commands resolve both plans with the same defaults as resolve.
    let out = terra(&["policy", "contains", &wide, &narrow, "--json"]);
    assert_ne!(code(&out), 1, "{}", stderr(&out));
    assert!(stdout_json(&out)["contained"].is_boolean());
}

/// A minimal-runtime rule with a relative path (valid MIR the JSON source
/// cannot write): resolved below every `--minimal-root`, evaluated there.
#[test]
fn minimal_runtime_relative_rule_resolves_and_evaluates_end_to_end() {
    let vectors =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/terra-policy/tests/vectors");
    let hex = std::fs::read_to_string(vectors.join("minimal-runtime-relative.mir.hex")).unwrap();
    let hex = hex.trim();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let t = tempfile::tempdir().unwrap();
    let d = std::fs::canonicalize(t.path()).unwrap();
    let d = d.to_str().unwrap();
    for sub in ["a/lib/x", "b/lib", "c"] {
        std::fs::create_dir_all(format!("{d}/{sub}")).unwrap();
    }
    let policy = format!("{d}/p.mir");
    std::fs::write(&policy, &bytes).unwrap();
    let (a, b, c) = (format!("{d}/a"), format!("{d}/b"), format!("{d}/c"));
    let out = terra_with(
        "policy resolve {} --minimal-root {} --minimal-root {} --json",
        &[&policy, &a, &b],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = stdout_json(&out);
    let rules: Vec<(String, String)> = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap().to_string(),
                r["sourceRoot"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        rules,
        vec![
            (format!("{a}/lib"), "minimal-runtime".to_string()),
            (format!("{b}/lib"), "minimal-runtime".to_string())
        ]
    );
    for (path, want) in [
        (format!("{a}/lib/x"), "read"),
        (format!("{b}/lib"), "read"),
        (a.clone(), "none"),
        (format!("{a}/libx"), "none"),
    ] {
        let out = terra_with(
            "policy evaluate {} --path {} --minimal-root {} --minimal-root {} --json",
            &[&policy, &path, &a, &b],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(stdout_json(&out)["permission"], json!(want), "{path}");
    }
    // A root without lib: the rule says missing: error.
    let out = terra_with(
        "policy resolve {} --minimal-root {} --minimal-root {} --json",
        &[&policy, &a, &c],
    );
    let v = assert_refused(&out, "missing");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{c}/lib")),
        "{v}"
    );
}
