//! Every request line of every destination corpus case, judged by the matcher
//! with the destinations in written and in reversed order; and every case's
//! `compile` line against the pattern parser and the MIR builder.

use std::path::PathBuf;

use terra_netd::{judge, Pattern, Reason, Request, Verdict};
use terra_policy::{MirBuilder, NetworkMode};

fn corpus_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../spec/corpus/destinations"
    ))
}

#[derive(Debug)]
struct Dest {
    host: String,
    port: u16,
    sni: bool,
    private: bool,
}

#[derive(Debug)]
struct Req {
    line: String,
    name: String,
    port: u16,
    sni: Option<String>,
    private: bool,
    expect: Verdict,
}

#[derive(Debug, Default)]
struct Case {
    mode: Option<NetworkMode>,
    dests: Vec<Dest>,
    requests: Vec<Req>,
    compile: Option<bool>,
    wildcard_required: bool,
}

fn parse_case(text: &str) -> Case {
    let mut case = Case::default();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w[0] {
            "network" => {
                assert_eq!(w.len(), 2, "{line}");
                case.mode = Some(NetworkMode::from_name(w[1]).expect(line));
            }
            "destination" => {
                assert_eq!(w[1], "tcp", "{line}");
                let mut d = Dest {
                    host: w[2].to_owned(),
                    port: w[3].parse().expect(line),
                    sni: false,
                    private: false,
                };
                for flag in &w[4..] {
                    match *flag {
                        "require-tls-sni" => d.sni = true,
                        "allow-private-addresses" => d.private = true,
                        other => panic!("unknown flag {other} in {line}"),
                    }
                }
                case.dests.push(d);
            }
            "requires" => {
                assert_eq!(w[1], "network-host-wildcard", "{line}");
                case.wildcard_required = true;
            }
            "request" => {
                assert_eq!(w[1], "tcp", "{line}");
                let sni = match w[4].strip_prefix("sni=").expect(line) {
                    "absent" => None,
                    s => Some(s.to_owned()),
                };
                let mut i = 5;
                let private = w[i] == "private";
                if private {
                    i += 1;
                }
                let expect = match w[i] {
                    "allowed" => {
                        assert_eq!(w.len(), i + 1, "{line}");
                        Verdict::Allowed
                    }
                    "refused" => {
                        assert_eq!(w.len(), i + 2, "{line}");
                        Verdict::Refused(Reason::from_name(w[i + 1]).expect(line))
                    }
                    other => panic!("unknown verdict {other} in {line}"),
                };
                case.requests.push(Req {
                    line: line.to_owned(),
                    name: w[2].to_owned(),
                    port: w[3].parse().expect(line),
                    sni,
                    private,
                    expect,
                });
            }
            "compile" => {
                case.compile = Some(match w[1] {
                    "accepted" => true,
                    "refused" => false,
                    other => panic!("unknown compile result {other}"),
                })
            }
            other => panic!("unknown directive {other} in {line}"),
        }
    }
    case
}

fn cases() -> Vec<(String, Case)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(corpus_dir()).expect("destination corpus present") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("case") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        out.push((
            path.file_name().unwrap().to_string_lossy().into_owned(),
            parse_case(&text),
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn every_request_line_in_both_orders() {
    let mut judged = 0;
    for (file, case) in cases() {
        let mode = case.mode.unwrap_or(NetworkMode::Mediated);
        let patterns: Result<Vec<Pattern>, terra_netd::matcher::PatternError> = case
            .dests
            .iter()
            .map(|d| Pattern::parse(&d.host, d.port, d.sni, d.private))
            .collect();
        if case.requests.is_empty() {
            continue;
        }
        let patterns = patterns.unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut reversed = patterns.clone();
        reversed.reverse();
        for r in &case.requests {
            let request = Request {
                name: &r.name,
                port: r.port,
                sni: r.sni.as_deref(),
                resolves_private: r.private,
            };
            assert_eq!(
                judge(mode, &patterns, &request),
                r.expect,
                "{file}: {}",
                r.line
            );
            assert_eq!(
                judge(mode, &reversed, &request),
                r.expect,
                "{file} (reversed): {}",
                r.line
            );
            judged += 1;
        }
    }
    // 40 request lines in the corpus as published; a check that cannot fail is a defect.
    assert!(judged >= 40, "only {judged} request lines judged");
}

#[test]
fn compile_lines() {
    let all = cases();
    assert!(all.len() >= 22, "corpus has {} cases", all.len());
    for (file, case) in all {
        let expect = case
            .compile
            .unwrap_or_else(|| panic!("{file}: no compile line"));
        let patterns_ok = case
            .dests
            .iter()
            .all(|d| Pattern::parse(&d.host, d.port, d.sni, d.private).is_ok());
        assert_eq!(patterns_ok, expect, "{file}: matcher pattern parser");
        // MIR v3: wildcards are never encodable; everything else as the case says.
        let mut b = MirBuilder::new();
        let mode = case.mode.unwrap_or(NetworkMode::Mediated);
        b.set_network(mode);
        let mut mir_ok = true;
        for d in &case.dests {
            if d.host.contains('*') {
                mir_ok = false;
            }
            if b.add_destination(&d.host, d.port, d.sni, d.private)
                .is_err()
            {
                mir_ok = false;
            }
        }
        if mir_ok {
            mir_ok = b.build().is_ok();
        }
        let mir_expect = expect && !case.wildcard_required;
        assert_eq!(mir_ok, mir_expect, "{file}: MIR builder");
    }
}
