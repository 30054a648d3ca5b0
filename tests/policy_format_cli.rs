//! `terra policy` format commands against the built binary: compile, validate,
//! inspect, hash, artifact-hash, init; --replace and atomic output; exit codes;
//! the 1 MiB input limit; and every destination corpus case's compile verdict.
// Linux only: the commands write their output files only on Linux in this build.
#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use terra_test_support::data::{
    corpus_cases, own_vector, unhex, vector, PUBLISHED_VECTORS as VECTORS,
};
use terra_test_support::users::make_null_device;

fn terra(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_terra"))
        .args(args)
        .output()
        .expect("run terra")
}

fn terra_p(args: &[&str], paths: &[&Path]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_terra"));
    cmd.args(args);
    for p in paths {
        cmd.arg(p);
    }
    cmd.output().expect("run terra")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(o)))
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A temporary directory holding the published vector `name`'s source as `file`.
fn vector_source(name: &str, file: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join(file);
    std::fs::write(&src, vector(name, "source.json")).unwrap();
    (dir, src)
}

/// `o` exited with `exit` and its message starts with `prefix`.
fn assert_refused(o: &Output, exit: i32, prefix: &str) {
    assert_eq!(code(o), exit, "{}", stderr(o));
    assert!(stderr(o).starts_with(prefix), "{}", stderr(o));
}

#[test]
fn compile_reproduces_every_vector() {
    let dir = tempfile::tempdir().unwrap();
    for name in VECTORS {
        let src = dir.path().join(format!("{name}.json"));
        std::fs::write(&src, vector(name, "source.json")).unwrap();
        let out = dir.path().join(format!("{name}.mir"));
        let o = terra_p(&["policy", "compile"], &[&src, Path::new("--output"), &out]);
        assert_eq!(code(&o), 0, "{name}: {}", stderr(&o));
        assert_eq!(
            std::fs::read(&out).unwrap(),
            unhex(vector(name, "mir.hex")),
            "{name}"
        );
        let digest = String::from_utf8(vector(name, "sha256")).unwrap();
        assert!(
            stdout(&o).contains(&format!("decision digest sha256:{}", digest.trim())),
            "{}",
            stdout(&o)
        );

        let o = terra_p(&["policy", "validate"], &[&out]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let o = terra_p(&["policy", "inspect"], &[&out]);
        assert_eq!(code(&o), 0);
        assert_eq!(o.stdout, vector(name, "inspect.json"), "{name}");
        let o = terra_p(&["policy", "hash"], &[&out]);
        assert_eq!(stdout(&o), format!("sha256:{}\n", digest.trim()));
    }
}

#[test]
fn compile_json_output() {
    let (dir, src) = vector_source("mediated", "s.json");
    let out = dir.path().join("s.mir");
    let o = terra_p(
        &["policy", "compile", "--json"],
        &[&src, Path::new("-o"), &out],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json(&o);
    let digest = String::from_utf8(vector("mediated", "sha256")).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["decisionDigest"], format!("sha256:{}", digest.trim()));
    assert_eq!(v["rules"], 1);
    assert_eq!(v["destinations"], 2);
    assert_eq!(v["bytes"], unhex(vector("mediated", "mir.hex")).len());
}

#[test]
fn existing_output_needs_replace() {
    let (dir, src) = vector_source("workspace", "s.json");
    let out = dir.path().join("out.mir");
    std::fs::write(&out, b"precious").unwrap();

    let o = terra_p(&["policy", "compile"], &[&src, Path::new("--output"), &out]);
    assert_refused(&o, 1, "terra: argument: ");
    assert!(stderr(&o).contains("--replace"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");

    let o = terra_p(
        &["policy", "compile", "--json"],
        &[&src, Path::new("--output"), &out],
    );
    assert_eq!(code(&o), 1);
    let v = json(&o);
    assert_eq!(
        (v["ok"].as_bool(), v["error"]["class"].as_str()),
        (Some(false), Some("argument"))
    );
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("already exists"));

    let o = terra_p(
        &["policy", "compile", "--replace"],
        &[&src, Path::new("--output"), &out],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        unhex(vector("workspace", "mir.hex"))
    );
    assert_eq!(listing(dir.path()), vec!["out.mir", "s.json"]);
}

#[test]
fn failed_compile_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, br#"{"formatVersion":3.0}"#).unwrap();
    let out = dir.path().join("new.mir");
    let o = terra_p(&["policy", "compile"], &[&bad, Path::new("--output"), &out]);
    assert_refused(&o, 1, "terra: format: formatVersion");
    assert_eq!(listing(dir.path()), vec!["bad.json"]);

    // An existing output survives a failed --replace compile untouched.
    let old = dir.path().join("old.mir");
    std::fs::write(&old, b"old").unwrap();
    let o = terra_p(
        &["policy", "compile", "--replace"],
        &[&bad, Path::new("--output"), &old],
    );
    assert_eq!(code(&o), 1);
    assert_eq!(std::fs::read(&old).unwrap(), b"old");
    assert_eq!(listing(dir.path()), vec!["bad.json", "old.mir"]);

    // An output that is a directory is refused before anything is written.
    let good = dir.path().join("good.json");
    std::fs::write(&good, vector("minimal", "source.json")).unwrap();
    let target = dir.path().join("taken");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("x"), b"x").unwrap();
    let o = terra_p(
        &["policy", "compile", "--replace"],
        &[&good, Path::new("--output"), &target],
    );
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(
        stderr(&o).starts_with("terra: argument: output ") && stderr(&o).contains("is a directory"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        listing(dir.path()),
        vec!["bad.json", "good.json", "old.mir", "taken"]
    );

    // An output directory that does not exist.
    let o = terra_p(
        &["policy", "compile"],
        &[
            &good,
            Path::new("--output"),
            &dir.path().join("no/such/dir/x.mir"),
        ],
    );
    assert_refused(&o, 1, "terra: io: ");
}

#[test]
fn validate_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let good = unhex(vector("mediated-flags", "mir.hex"));
    let p = dir.path().join("m.mir");

    std::fs::write(&p, &good).unwrap();
    let o = terra_p(&["policy", "validate", "--json"], &[&p]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(
        (v["ok"].as_bool(), v["valid"].as_bool()),
        (Some(true), Some(true))
    );
    let digest = String::from_utf8(vector("mediated-flags", "sha256")).unwrap();
    assert_eq!(v["decisionDigest"], format!("sha256:{}", digest.trim()));

    // Readable but not canonical (an uppercase host): exit 2.
    let mut upper = good.clone();
    upper[43] = b'A';
    std::fs::write(&p, &upper).unwrap();
    let o = terra_p(&["policy", "validate"], &[&p]);
    assert_refused(&o, 2, "terra: non-canonical: ");
    let o = terra_p(&["policy", "validate", "--json"], &[&p]);
    assert_eq!(code(&o), 2);
    let v = json(&o);
    assert_eq!(
        (
            v["ok"].as_bool(),
            v["valid"].as_bool(),
            v["error"]["class"].as_str()
        ),
        (Some(false), Some(false), Some("non-canonical"))
    );

    // The other commands refuse it as a failure (exit 1).
    for cmd in ["inspect", "hash"] {
        let o = terra_p(&["policy", cmd], &[&p]);
        assert_eq!(code(&o), 1, "{cmd}");
        assert!(
            stderr(&o).starts_with("terra: non-canonical: "),
            "{cmd}: {}",
            stderr(&o)
        );
    }

    // Structural damage: exit 1, format.
    std::fs::write(&p, &good[..good.len() - 1]).unwrap();
    let o = terra_p(&["policy", "validate", "--json"], &[&p]);
    assert_refused(&o, 1, "terra: format: ");
    let v = json(&o);
    assert_eq!(
        (v["ok"].as_bool(), v["error"]["class"].as_str()),
        (Some(false), Some("format"))
    );
    assert!(!v["error"]["message"].as_str().unwrap().is_empty());

    // Missing file: exit 1, io.
    let o = terra_p(&["policy", "validate"], &[&dir.path().join("absent.mir")]);
    assert_refused(&o, 1, "terra: io: ");
    // A directory: exit 1, io.
    let o = terra_p(&["policy", "validate"], &[dir.path()]);
    assert_refused(&o, 1, "terra: io: ");
}

#[test]
fn hash_and_artifact_hash() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("abc");
    std::fs::write(&p, b"abc").unwrap();
    // FIPS 180-2 test vector for "abc".
    let abc = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    let o = terra_p(&["policy", "artifact-hash"], &[&p]);
    assert_eq!((code(&o), stdout(&o)), (0, format!("{abc}\n")));
    let o = terra_p(&["policy", "artifact-hash", "--json"], &[&p]);
    assert_eq!(json(&o)["digest"], abc);

    // `hash` wants canonical MIR: "abc" is not.
    let o = terra_p(&["policy", "hash"], &[&p]);
    assert_refused(&o, 1, "terra: format: ");

    let m = dir.path().join("m.mir");
    std::fs::write(&m, unhex(vector("minimal", "mir.hex"))).unwrap();
    let o = terra_p(&["policy", "hash", "--json"], &[&m]);
    let v = json(&o);
    let digest = String::from_utf8(vector("minimal", "sha256")).unwrap();
    assert_eq!(v["digest"], format!("sha256:{}", digest.trim()));
    assert_eq!(v["ok"], true);
    // The artifact digest of MIR bytes is the decision digest of the same bytes.
    let o = terra_p(&["policy", "artifact-hash"], &[&m]);
    assert_eq!(stdout(&o), format!("sha256:{}\n", digest.trim()));
}

#[test]
fn init_prints_the_default_policy_and_it_compiles() {
    let o = terra(&["policy", "init"]);
    assert_eq!(code(&o), 0);
    assert_eq!(stdout(&o), terra_policy::DEFAULT_POLICY_SOURCE);
    let o2 = terra(&["policy", "init", "--json"]);
    assert_eq!(json(&o2)["source"], terra_policy::DEFAULT_POLICY_SOURCE);

    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("default.json");
    std::fs::write(&src, &o.stdout).unwrap();
    let out = dir.path().join("default.mir");
    let o = terra_p(&["policy", "compile"], &[&src, Path::new("--output"), &out]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = terra_p(&["policy", "inspect"], &[&out]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["network"]["mode"], "none");
    assert_eq!(v["root"]["mode"], "read-only");
    assert_eq!(v["process"]["treeConfinement"], "required");
    assert_eq!(v["filesystem"]["rules"].as_array().unwrap().len(), 3);
}

#[test]
fn inputs_over_one_mebibyte_are_refused_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    // A valid source padded with trailing whitespace to 1 MiB + 1 byte.
    let mut src = vector("minimal", "source.json");
    src.resize((1 << 20) + 1, b' ');
    let big = dir.path().join("big.json");
    std::fs::write(&big, &src).unwrap();
    let out = dir.path().join("big.mir");
    let o = terra_p(&["policy", "compile"], &[&big, Path::new("--output"), &out]);
    assert_refused(&o, 1, "terra: limit: ");
    assert!(stderr(&o).contains("1048577 bytes"), "{}", stderr(&o));
    assert!(!out.exists());
    // Exactly 1 MiB compiles.
    src.truncate(1 << 20);
    std::fs::write(&big, &src).unwrap();
    let o = terra_p(&["policy", "compile"], &[&big, Path::new("--output"), &out]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    let mut mir = unhex(vector("minimal", "mir.hex"));
    mir.resize((1 << 20) + 1, 0);
    let bigmir = dir.path().join("big.mir2");
    std::fs::write(&bigmir, &mir).unwrap();
    for cmd in ["validate", "inspect", "hash"] {
        let o = terra_p(&["policy", cmd, "--json"], &[&bigmir]);
        assert_eq!(code(&o), 1, "{cmd}");
        assert!(
            stderr(&o).starts_with("terra: format: "),
            "{cmd}: {}",
            stderr(&o)
        );
        assert!(stderr(&o).contains("1 MiB"), "{cmd}: {}", stderr(&o));
        assert_eq!(json(&o)["error"]["class"], "format");
    }
    let o = terra_p(&["policy", "artifact-hash"], &[&bigmir]);
    assert_refused(&o, 1, "terra: limit: ");
}

#[test]
fn help_explains_the_commands() {
    let o = terra(&["policy", "--help"]);
    let text = stdout(&o);
    for cmd in [
        "compile",
        "validate",
        "inspect",
        "hash",
        "artifact-hash",
        "init",
    ] {
        assert!(text.contains(cmd), "{cmd} missing from:\n{text}");
    }
    let o = terra(&["policy", "compile", "--help"]);
    assert!(
        stdout(&o).contains("--replace") && stdout(&o).contains("atomically"),
        "{}",
        stdout(&o)
    );
    let o = terra(&["policy", "validate", "--help"]);
    assert!(stdout(&o).contains("Exit 2"), "{}", stdout(&o));
}

// ---------------------------------------------------------------------------
// The destination corpus: each case's `compile accepted|refused` must hold, and
// a case that `requires network-host-wildcard` must be refused (wildcards are
// not encodable in MIR v3).

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// Builds a source document from a case's `network` and `destination` lines.
fn corpus_source(case: &str) -> (String, bool) {
    let mut mode = None;
    let mut dests = Vec::new();
    let mut accepted = None;
    let mut wildcard = false;
    for line in case.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["network", m] => mode = Some(m.to_string()),
            ["destination", proto, host, port, flags @ ..] => {
                let mut d = format!(
                    "{{\"protocol\": {}, \"host\": {}, \"port\": {port}",
                    json_str(proto),
                    json_str(host)
                );
                for f in flags {
                    match *f {
                        "require-tls-sni" => d.push_str(", \"requireTlsSni\": true"),
                        "allow-private-addresses" => {
                            d.push_str(", \"allowPrivateAddresses\": true")
                        }
                        other => panic!("unknown destination flag {other}"),
                    }
                }
                d.push('}');
                dests.push(d);
            }
            ["requires", "network-host-wildcard"] => wildcard = true,
            ["requires", other] => panic!("unknown requirement {other}"),
            ["compile", "accepted"] => accepted = Some(true),
            ["compile", "refused"] => accepted = Some(false),
            _ => {}
        }
    }
    let mode = mode.unwrap_or_else(|| "mediated".to_string());
    let network = if mode == "mediated" {
        format!(
            "{{\"mode\": \"mediated\", \"allow\": [{}]}}",
            dests.join(", ")
        )
    } else {
        assert!(dests.is_empty());
        format!("{{\"mode\": {}}}", json_str(&mode))
    };
    let src = format!(
        "{{\"formatVersion\": 3, \"filesystem\": {{\"default\": \"deny\", \"rules\": []}}, \"network\": {network}, \
         \"process\": {{\"treeConfinement\": \"required\"}}, \"root\": {{\"mode\": \"read-only\"}}}}"
    );
    let accepted = accepted.expect("a compile line") && !wildcard;
    (src, accepted)
}

#[test]
fn destination_corpus_compile_verdicts() {
    let cases = corpus_cases("destinations", 20);
    let dir = tempfile::tempdir().unwrap();
    let (mut accepted, mut refused) = (0, 0);
    for (name, text) in &cases {
        let (src, expect_accepted) = corpus_source(text);
        let src_path = dir.path().join(format!("{name}.json"));
        std::fs::write(&src_path, &src).unwrap();
        let out = dir.path().join(format!("{name}.mir"));
        let o = terra_p(
            &["policy", "compile", "--json"],
            &[&src_path, Path::new("--output"), &out],
        );
        if expect_accepted {
            assert_eq!(code(&o), 0, "{name}: {}\n{src}", stderr(&o));
            assert!(out.exists(), "{name}");
            accepted += 1;
        } else {
            assert_eq!(code(&o), 1, "{name} must be refused:\n{src}");
            assert_eq!(
                json(&o)["error"]["class"],
                "argument",
                "{name}: {}",
                stderr(&o)
            );
            assert!(!out.exists(), "{name}");
            refused += 1;
        }
    }
    assert!(
        accepted > 0 && refused > 0,
        "accepted {accepted}, refused {refused}"
    );
}

// ---------------------------------------------------------------------------
// Inspection JSON is valid JSON for any UTF-8 path: read it back with
// serde_json and compare every field with the decision.

fn check_inspection_reads_back(mir: &terra_policy::Mir) {
    let text = terra_policy::inspection_json(mir);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
    assert_eq!(v["identity"]["decisionDigest"], mir.decision_digest());
    let rules = v["filesystem"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), mir.rules().len());
    for (r, j) in mir.rules().iter().zip(rules) {
        assert_eq!(j["path"].as_str(), Some(r.target.path.as_str()), "{text}");
        assert_eq!(j["access"].as_str(), Some(r.access.name()));
        assert_eq!(j["root"].as_str(), Some(r.target.root.name()));
    }
    // Each path is escaped exactly as the reference escapes it: `"` and `\`
    // with a backslash, every byte below 0x20 and DEL as \u00xx (lowercase
    // hex, no short escapes), every other byte verbatim.
    for r in mir.rules() {
        let line = format!("\"path\": {},", reference_escape(&r.target.path));
        assert!(text.contains(&line), "{line} not in:\n{text}");
    }
}

/// The reference's JSON string escaping, byte by byte.
fn reference_escape(s: &str) -> String {
    let mut out = Vec::from(&b"\""[..]);
    for &b in s.as_bytes() {
        match b {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.push(b'"');
    String::from_utf8(out).unwrap()
}

#[test]
fn inspection_json_escapes_any_utf8_path() {
    use terra_policy::{Access, MirBuilder, Missing, RootKind, Scope};
    let mut tricky: Vec<String> = (1u8..0x20).map(|b| format!("c{}", char::from(b))).collect();
    tricky.extend(
        [
            "q\"uote",
            "back\\slash",
            "del\u{7f}",
            "\u{2028}\u{2029}",
            "é文😀",
            "\u{feff}",
            "\u{85}nel",
            "a b",
        ]
        .map(String::from),
    );
    let mut b = MirBuilder::new();
    for p in &tricky {
        b.add_rule(
            Access::Read,
            RootKind::Workspace,
            p,
            Scope::Tree,
            Missing::Error,
        )
        .unwrap();
    }
    check_inspection_reads_back(&b.build().unwrap());

    // Pseudo-random UTF-8 paths (a fixed LCG, so a failure reproduces).
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as u32
    };
    for _ in 0..300 {
        let mut b = MirBuilder::new();
        for _ in 0..(next() % 8) {
            let len = next() % 12;
            let path: String = (0..len)
                .filter_map(|_| {
                    let c = match next() % 4 {
                        0 => next() % 0x80,
                        1 => next() % 0x800,
                        2 => next() % 0x1_0000,
                        _ => next() % 0x11_0000,
                    };
                    char::from_u32(c).filter(|&c| c != '\0')
                })
                .collect();
            if path.split('/').any(|s| s == "..") || path.starts_with('/') {
                continue;
            }
            b.add_rule(
                Access::Write,
                RootKind::Temp,
                &path,
                Scope::Exact,
                Missing::Skip,
            )
            .unwrap();
        }
        check_inspection_reads_back(&b.build().unwrap());
    }
}

#[test]
fn compile_and_inspect_a_path_with_escapes_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("p.json");
    let source = r#"{"formatVersion":3,"filesystem":{"default":"deny","rules":[
        {"access":"read","path":{"root":"workspace","relative":"q\"b\\c\u0001\t\ud83d\ude00\/x"}}]},
        "network":{"mode":"none"},"process":{"treeConfinement":"required"},"root":{"mode":"read-only"}}"#;
    std::fs::write(&src, source).unwrap();
    let out = dir.path().join("p.mir");
    let o = terra_p(&["policy", "compile"], &[&src, Path::new("--output"), &out]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = terra_p(&["policy", "inspect"], &[&out]);
    assert!(
        stdout(&o).contains(r#""path": "q\"b\\c\u0001\u0009😀/x","#),
        "{}",
        stdout(&o)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["filesystem"]["rules"][0]["path"],
        "q\"b\\c\u{1}\t\u{1f600}/x"
    );
}

#[test]
fn inspect_prints_control_bytes_and_del_as_the_reference_does() {
    // A workspace rule with the path a<DEL>b<TAB>c<LF>d, as MIR bytes.
    let path = b"a\x7fb\tc\nd";
    let mut mir = b"MMIR\x00\x03\x00\x00\x00\x00\x00\x01\x01\x01\x01\x00\x00\x00\x00\x00".to_vec();
    mir.extend_from_slice(&[1, 1, 2, 2, 1, 0, 0, 0, 0, 0, 0, path.len() as u8]);
    mir.extend_from_slice(path);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.mir");
    std::fs::write(&file, &mir).unwrap();
    let o = terra_p(&["policy", "inspect"], &[&file]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("\n        \"path\": \"a\\u007fb\\u0009c\\u000ad\",\n"),
        "{text}"
    );
    assert!(!text.contains('\u{7f}') && !text.contains('\t'), "{text}");
}

#[test]
fn inspect_validate_and_hash_a_minimal_runtime_relative_vector() {
    let read = |ext: &str| own_vector("minimal-runtime-relative", ext);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.mir");
    std::fs::write(&file, unhex(read("mir.hex"))).unwrap();
    let o = terra_p(&["policy", "validate"], &[&file]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = terra_p(&["policy", "inspect"], &[&file]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(o.stdout, read("inspect.json"));
    let o = terra_p(&["policy", "hash"], &[&file]);
    let digest = String::from_utf8(read("sha256")).unwrap();
    assert_eq!(stdout(&o), format!("sha256:{}\n", digest.trim()));
}

/// `compile` reports the first refusal in document order, whichever it is.
#[test]
fn compile_reports_the_first_of_two_refusals() {
    let bad_fs = r#""filesystem":{"default":"deny","rules":[{"access":"read","path":{"root":"workspace","relative":"a/../b"}}]}"#;
    let bad_root = r#""root":{"mode":"rw"}"#;
    let rest =
        r#""formatVersion":3,"network":{"mode":"none"},"process":{"treeConfinement":"required"}"#;
    let dir = tempfile::tempdir().unwrap();
    for (first, second, named, marker) in [
        (
            bad_fs,
            bad_root,
            "filesystem.rules[0].path.relative",
            r#""a/../b""#,
        ),
        (bad_root, bad_fs, "root.mode", r#""rw""#),
    ] {
        let source = format!("{{{first},{rest},{second}}}");
        let offset = source.find(marker).unwrap();
        let src = dir.path().join("p.json");
        std::fs::write(&src, &source).unwrap();
        let out = dir.path().join("p.mir");
        let o = terra_p(
            &["policy", "compile", "--json"],
            &[&src, Path::new("--output"), &out],
        );
        assert_eq!(code(&o), 1, "{}", stderr(&o));
        // Single-line sources: the column is the offset plus one.
        let want = format!(
            "terra: format: {named} (byte offset {offset}, line 1, column {}): ",
            offset + 1
        );
        assert!(stderr(&o).starts_with(&want), "{want} vs {}", stderr(&o));
        let v = json(&o);
        assert_eq!(v["error"]["class"], "format");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(&want["terra: format: ".len()..]),
            "{v}"
        );
        assert_eq!(v["error"]["line"], 1, "{v}");
        assert_eq!(v["error"]["column"], offset + 1, "{v}");
        assert_eq!(v["error"]["path"], src.display().to_string(), "{v}");
        assert!(!out.exists());
    }
}

#[test]
fn compile_output_is_never_a_symlink_fifo_or_device() {
    use std::os::unix::fs::FileTypeExt;
    let (dir, src) = vector_source("minimal", "p.json");
    // A symlink to a file (as /dev/stdout is a symlink): neither the link
    // nor its target changes.
    let target = dir.path().join("target");
    std::fs::write(&target, b"keep").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    // A FIFO: refused before anything opens it (a reader-less FIFO would
    // block an open for writing forever).
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut outputs = vec![(link.clone(), "a symlink"), (fifo.clone(), "a FIFO")];
    // A character device of our own (the same node as /dev/null), as root.
    let dev = dir.path().join("null");
    let has_dev = make_null_device(&dev);
    if has_dev {
        outputs.push((dev.clone(), "a character device"));
    }
    for (out, kind) in &outputs {
        for replace in [false, true] {
            let mut args = vec!["policy", "compile"];
            if replace {
                args.push("--replace");
            }
            let o = terra_p(&args, &[&src, Path::new("--output"), out]);
            assert_eq!(
                code(&o),
                1,
                "{} replace={replace}: {}",
                out.display(),
                stderr(&o)
            );
            assert!(
                stderr(&o).contains(kind) && stderr(&o).contains("regular files only"),
                "{}",
                stderr(&o)
            );
        }
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    if has_dev {
        assert!(std::fs::symlink_metadata(&dev)
            .unwrap()
            .file_type()
            .is_char_device());
    }
    let mut expected = vec!["fifo", "link", "p.json", "target"];
    if has_dev {
        expected.insert(2, "null");
    }
    assert_eq!(listing(dir.path()), expected, "no temporary file left");
}

#[test]
fn compile_removes_temporary_files_of_killed_compiles() {
    // A compile killed before it finished (the naming of earlier versions,
    // `.out.mir.terra-tmp-PID-0`, of a pid that no longer runs) leaves a
    // partial file; the next compile into that directory removes it, and
    // leaves none of its own (the output is written as an anonymous file and
    // linked into place, so it has no name until it is complete).
    let (dir, src) = vector_source("minimal", "p.json");
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = format!(".out.mir.terra-tmp-{dead}-0");
    std::fs::write(dir.path().join(&stale), b"MMIR partial").unwrap();
    let out = dir.path().join("out.mir");
    for args in [
        &["policy", "compile"][..],
        &["policy", "compile", "--replace"][..],
    ] {
        let o = terra_p(args, &[&src, Path::new("--output"), &out]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert_eq!(listing(dir.path()), vec!["out.mir", "p.json"]);
        std::fs::write(dir.path().join(&stale), b"MMIR partial").unwrap();
    }
}

#[test]
fn endless_inputs_are_refused_at_the_limit() {
    // /dev/zero and a FIFO fed forever: refused once 1 MiB + 1 byte was read.
    let o = terra(&[
        "policy",
        "compile",
        "/dev/zero",
        "--output",
        "/nonexistent/x",
    ]);
    assert_refused(&o, 1, "terra: limit: /dev/zero is more than 1048576 bytes");
    let o = terra(&["policy", "validate", "/dev/zero"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("1 MiB"), "{}", stderr(&o));
}
