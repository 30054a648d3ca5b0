//! The human description of a table, written from the table (what
//! `terra run --dry-run` prints), so it cannot drift from what is installed.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::table::{Filter, Kind};
use crate::Table;

fn errno_name(n: u64) -> String {
    match n {
        1 => "EPERM".into(),
        13 => "EACCES".into(),
        38 => "ENOSYS".into(),
        93 => "EPROTONOSUPPORT".into(),
        97 => "EAFNOSUPPORT".into(),
        other => format!("errno {other}"),
    }
}

fn action(v: &Value) -> String {
    match v {
        Value::String(s) if s == "kill_process" => "kills the process".into(),
        Value::String(s) => s.clone(),
        Value::Object(m) => match m.get("errno").and_then(Value::as_u64) {
            Some(n) => errno_name(n),
            None => v.to_string(),
        },
        other => other.to_string(),
    }
}

/// Calls listed without conditions, then each conditional call with what it matches.
fn calls(f: &Filter, arch: &str) -> (Vec<String>, BTreeMap<String, Vec<String>>) {
    let mut plain = Vec::new();
    let mut when: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in f.rules.iter().filter(|r| r.exists_on(arch)) {
        if r.conditional {
            when.entry(r.syscall.clone())
                .or_default()
                .push(r.comment.clone().unwrap_or_default());
        } else {
            plain.push(r.syscall.clone());
        }
    }
    (plain, when)
}

pub fn lines(table: Table, filters: &[Filter], arch: &str) -> String {
    let mut s = String::new();
    for f in filters {
        let (plain, when) = calls(f, arch);
        let refusal = action(&f.refusal);
        match f.kind {
            Kind::Deny => {
                s.push_str(&format!(
                    "seccomp {}/{} ({}): default allow\n",
                    table.name(),
                    f.name,
                    f.about
                ));
                if !plain.is_empty() {
                    s.push_str(&format!("seccomp {refusal} {}\n", plain.join(" ")));
                }
                for (call, what) in &when {
                    s.push_str(&format!(
                        "seccomp {refusal} {call} when {}\n",
                        what.join("; ")
                    ));
                }
            }
            Kind::Notify => {
                s.push_str(&format!(
                    "seccomp {}/{} ({}): default allow\n",
                    table.name(),
                    f.name,
                    f.about
                ));
                s.push_str(&format!(
                    "seccomp user notification (the box service decides) {}\n",
                    plain.join(" ")
                ));
                for (call, what) in &when {
                    s.push_str(&format!(
                        "seccomp user notification (the box service decides) {call} when {}\n",
                        what.join("; ")
                    ));
                }
            }
            Kind::Allow => {
                let mut allowed = plain.clone();
                for (call, what) in &when {
                    allowed.push(format!("{call} ({})", what.join("; ")));
                }
                allowed.sort();
                s.push_str(&format!(
                    "seccomp {}/{} ({}): allowlist of {} calls: {}\n",
                    table.name(),
                    f.name,
                    f.about,
                    allowed.len(),
                    allowed.join(", ")
                ));
                s.push_str(&format!(
                    "seccomp any other call of {} {refusal}\n",
                    table.process()
                ));
            }
        }
    }
    if arch == "x86_64" {
        s.push_str(
            "seccomp a call of another architecture kills the process; x32 calls get each filter's refusal\n",
        );
    } else {
        s.push_str("seccomp a call of another architecture kills the process\n");
    }
    s
}
