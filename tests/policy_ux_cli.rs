//! `terra policy` commands that fit together (issue 15): JSON sources where
//! MIR was the only input, defaults for the host bindings, line and column in
//! errors, one `--json` error shape, no internal names in the output.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn terra_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_terra"))
        .current_dir(cwd)
        .args(args)
        .output()
        .unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn policy(rules: &str) -> String {
    format!(
        "{{\n  \"formatVersion\": 3,\n  \"filesystem\": {{\n    \"default\": \"deny\",\n    \"rules\": [\n      {rules}\n    ]\n  }},\n  \
         \"network\": {{ \"mode\": \"none\" }},\n  \"process\": {{ \"treeConfinement\": \"required\" }},\n  \
         \"root\": {{ \"mode\": \"read-only\" }}\n}}\n"
    )
}

const WS_READ: &str =
    r#"{ "access": "read", "path": { "root": "workspace", "relative": "" }, "scope": "tree" }"#;
const WS_WRITE: &str =
    r#"{ "access": "write", "path": { "root": "workspace", "relative": "" }, "scope": "tree" }"#;

#[test]
fn hash_inspect_and_validate_take_json_sources() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("p.json");
    std::fs::write(&src, policy(WS_READ)).unwrap();
    let (s, m) = (src.to_str().unwrap(), d.path().join("p.mir"));
    let mir = m.to_str().unwrap();
    let o = terra_in(d.path(), &["policy", "compile", s, "--output", mir]);
    assert!(o.status.success(), "{}", err(&o));
    let hash = |f: &str| out(&terra_in(d.path(), &["policy", "hash", f]));
    assert!(hash(s).starts_with("sha256:"), "{}", hash(s));
    assert_eq!(hash(s), hash(mir));
    let inspect = |f: &str| out(&terra_in(d.path(), &["policy", "inspect", f]));
    assert_eq!(inspect(s), inspect(mir));
    let o = terra_in(d.path(), &["policy", "validate", s, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["valid"].as_bool(), v["format"].as_str()),
        (Some(true), Some("json"))
    );
    // A source that does not compile is refused by all three.
    std::fs::write(&src, policy(r#"{ "access": "read" }"#)).unwrap();
    for cmd in ["hash", "inspect", "validate"] {
        let o = terra_in(d.path(), &["policy", cmd, s]);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {}", err(&o));
    }
}

#[test]
fn errors_give_line_and_column_and_one_json_shape() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("bad.json");
    // The bad value sits on line 6.
    std::fs::write(
        &src,
        policy(r#"{ "access": "read", "path": { "root": "nowhere", "relative": "" }, "scope": "tree" }"#),
    )
    .unwrap();
    let s = src.to_str().unwrap();
    let o = terra_in(
        d.path(),
        &["policy", "compile", s, "--output", "x.mir", "--json"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains(", line 6, column "), "{}", err(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["class"], "format");
    assert_eq!(v["error"]["path"], s);
    assert_eq!(v["error"]["line"], 6);
    assert!(v["error"]["column"].as_u64().unwrap() > 1, "{v}");
    // A missing file: the same shape from a format and a plan command.
    for args in [
        vec!["policy", "hash", "missing.json", "--json"],
        vec!["policy", "resolve", "missing.json", "--json"],
        vec!["policy", "diff", "missing.json", "missing.json", "--json"],
    ] {
        let o = terra_in(d.path(), &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let e = &v["error"];
        assert_eq!(v["ok"], false, "{args:?}: {v}");
        assert_eq!(e["class"], "io", "{args:?}: {v}");
        assert_eq!(e["path"], "missing.json", "{args:?}: {v}");
        assert!(
            e["line"].is_null() && e["column"].is_null(),
            "{args:?}: {v}"
        );
        assert!(
            e["message"].as_str().unwrap().contains("missing.json"),
            "{v}"
        );
    }
}

#[test]
fn resolve_defaults_the_bindings_and_names_the_flag_when_it_cannot() {
    let d = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(d.path()).unwrap().join("proj");
    std::fs::create_dir(&ws).unwrap();
    let src = ws.join("p.json");
    std::fs::write(&src, policy(WS_READ)).unwrap();
    let s = src.to_str().unwrap();
    let o = terra_in(
        &ws,
        &["policy", "evaluate", s, "--path", ws.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("read"), "{}", out(&o));
    // A current directory that no longer exists: no default, the flag is named.
    let gone = ws.join("gone");
    std::fs::create_dir(&gone).unwrap();
    let o = Command::new("sh")
        .current_dir(&gone)
        .args([
            "-c",
            "rmdir \"$PWD\" && exec \"$0\" policy resolve \"$1\"",
            env!("CARGO_BIN_EXE_terra"),
            s,
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(
        err(&o).contains("(give it with --workspace DIR)"),
        "{}",
        err(&o)
    );
}

#[test]
fn diff_never_prints_internal_names() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a.json"), d.path().join("b.json"));
    std::fs::write(&a, policy(WS_READ)).unwrap();
    std::fs::write(&b, policy(WS_WRITE)).unwrap();
    let ws = std::fs::canonicalize(d.path()).unwrap();
    for json in [false, true] {
        let mut args = vec!["policy", "diff", a.to_str().unwrap(), b.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        let o = terra_in(&ws, &args);
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        let text = out(&o);
        assert!(!text.contains("maelys"), "{text}");
        assert!(text.contains(&format!("{}/*", ws.display())), "{text}");
    }
}
