//! The refusal summary `terra run` prints on stderr when a run ends: how many
//! connections the network broker refused, the first few as `host:port
//! (reason)`, what would admit them, and where the full network log is.
//! Nothing is printed when nothing was refused.
//!
//! It is read from the run's own records after the supervisor ended: the
//! counts from the receipt's `network` object, the examples from the
//! network receipt (`network.jsonl`, one JSON line per attempt), read line by
//! line with a bounded line length.

use std::io::{BufRead, BufReader, Read};

use serde_json::Value;

use crate::runs::RunFiles;

/// Refused attempts quoted by name in the summary.
pub const EXAMPLES: usize = 3;
/// Longest network receipt line read; a longer one is skipped.
const MAX_LINE: u64 = 64 << 10;

/// One refused connection attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `name:port` as the workload asked (or the address when it gave no name).
    pub destination: String,
    pub reason: String,
    /// UDP other than the box's DNS stub: no destination admits it.
    pub udp: bool,
}

/// `1 connection`, `2 connections` (terra-policy's plural forms).
pub fn plural(n: u64, one: &str, many: &str) -> String {
    terra_policy::report::plural(usize::try_from(n).unwrap_or(usize::MAX), one, many)
}

/// Most distinct refusals told apart in one receipt (the count stops there).
const MAX_DISTINCT: usize = 4096;

/// The first `max` distinct refused attempts of a network receipt.
pub fn first_refusals(file: impl Read, max: usize) -> Vec<Refusal> {
    let (mut out, _) = refusals(file, max);
    out.truncate(max);
    out
}

/// The distinct refusals of a network receipt: the first `max` of them,
/// and how many there are (one name asked again and again, as a resolver's
/// or a package manager's retries, is one), up to [`MAX_DISTINCT`].
pub fn refusals(file: impl Read, max: usize) -> (Vec<Refusal>, usize) {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    while seen.len() < MAX_DISTINCT {
        line.clear();
        match reader.by_ref().take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if !line.ends_with(b"\n") && line.len() as u64 == MAX_LINE {
            // Overlong: skip the rest of it.
            let mut rest = Vec::new();
            loop {
                rest.clear();
                match reader.by_ref().take(MAX_LINE).read_until(b'\n', &mut rest) {
                    Ok(0) | Err(_) => return (out, seen.len()),
                    Ok(_) if rest.ends_with(b"\n") => break,
                    Ok(_) => {}
                }
            }
            continue;
        }
        let Ok(v) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        if v["verdict"] != "refused" {
            continue;
        }
        let port = v["port"].as_u64();
        let destination = match (v["name"].as_str(), port, v["address"].as_str()) {
            (Some(n), Some(p), _) => format!("{n}:{p}"),
            (Some(n), None, _) => n.to_string(),
            (None, _, Some(a)) => a.to_string(),
            (None, _, None) => "(unparsed request)".to_string(),
        };
        let udp = v["protocol"] == "udp";
        let refusal = Refusal {
            destination: if udp {
                format!("UDP {destination}")
            } else {
                destination
            },
            reason: v["reason"].as_str().unwrap_or("unknown").to_string(),
            udp,
        };
        // The DNS stub refuses A and AAAA of one name, clients retry: say
        // it once.
        if seen.insert((refusal.destination.clone(), refusal.reason.clone())) && out.len() < max {
            out.push(refusal);
        }
    }
    (out, seen.len())
}

/// What admits a destination refused for `reason`, or None when no flag
/// does (a malformed request, a limit).
fn remedy(reason: &str, r: &Refusal, with_policy: bool) -> Option<String> {
    if r.udp {
        return None;
    }
    let d = &r.destination;
    let has_port = d
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok());
    match reason {
        "no-destination" if has_port => Some(if with_policy {
            format!("add {d} to the policy's network destinations")
        } else {
            format!("--allow-net {d}")
        }),
        "private-address" if has_port => Some(if with_policy {
            format!("allowPrivateAddresses on {d} in the policy")
        } else {
            format!("--allow-net {d},private")
        }),
        _ => None,
    }
}

/// The summary for a finished run, or None when the broker refused nothing
/// (or the run had no broker).
pub fn refusal_summary(run: &RunFiles, receipt: &serde_json::Value) -> Option<String> {
    let net = receipt.get("network").filter(|n| !n.is_null())?;
    let refused = net["refused"].as_u64().unwrap_or(0);
    if refused == 0 {
        return None;
    }
    let log = net["receipt"].as_str().map_or_else(
        || run.path.join("network.jsonl").display().to_string(),
        str::to_owned,
    );
    let (examples, distinct) = run
        .open("network.jsonl")
        .map(|f| refusals(f, EXAMPLES))
        .unwrap_or_default();
    let with_policy = receipt["policy"]["source"] != "default";
    Some(render(
        refused,
        distinct as u64,
        &examples,
        &log,
        with_policy,
    ))
}

/// The summary text (lines ending in a newline, each starting `terra: `):
/// `refused` attempts to `distinct` destinations (0: the log was not read).
pub fn render(
    refused: u64,
    distinct: u64,
    examples: &[Refusal],
    log: &str,
    with_policy: bool,
) -> String {
    let listed: Vec<String> = examples
        .iter()
        .map(|r| format!("{} ({})", r.destination, r.reason))
        .collect();
    let mut s = if distinct == 0 || distinct == refused {
        format!(
            "terra: the network broker refused {}",
            plural(refused, "connection", "connections")
        )
    } else {
        format!(
            "terra: the network broker refused {} ({})",
            plural(distinct, "destination", "destinations"),
            plural(refused, "attempt", "attempts")
        )
    };
    let more = if distinct == 0 { refused } else { distinct }.saturating_sub(examples.len() as u64);
    if !listed.is_empty() {
        s.push_str(": ");
        s.push_str(&listed.join(", "));
        if more > 0 {
            s.push_str(&format!(" and {more} more"));
        }
    }
    s.push('\n');
    let mut remedies: Vec<String> = examples
        .iter()
        .filter_map(|r| remedy(&r.reason, r, with_policy))
        .collect();
    remedies.dedup();
    if !remedies.is_empty() {
        let how = if with_policy {
            "to admit them"
        } else {
            "to admit them, run with"
        };
        let sep = if with_policy { "; " } else { " " };
        s.push_str(&format!("terra:   {how}: {}\n", remedies.join(sep)));
    }
    s.push_str(&format!(
        "terra:   full log: {log} (or `terra runs show last`)\n"
    ));
    s
}

/// The closing lines of a network-none run whose workload failed: the
/// names the box asked for (the receipt's `dnsRefused`), one line each with
/// the flag that would admit it. None when it asked for none.
pub fn dns_summary(receipt: &serde_json::Value, with_policy: bool) -> Option<String> {
    let names: Vec<&str> = receipt["dnsRefused"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .filter(|n| terra_netd::refused::name_of(&terra_netd::refused::line(n)) == Some(*n))
        .collect();
    if names.is_empty() {
        return None;
    }
    let mut s = format!(
        "terra: the network is off (network none) and the box asked for {}:\n",
        plural(names.len() as u64, "name", "names")
    );
    for n in names {
        if with_policy {
            s.push_str(&format!(
                "terra:   {n}: add {n}:443 to the policy's network destinations\n"
            ));
        } else {
            // A preset's registry host: its flag also grants the caches.
            let preset = crate::presets::PRESETS
                .iter()
                .find(|p| p.hosts.contains(&n))
                .map(|p| format!(" (or --preset {} --preset-net)", p.name))
                .unwrap_or_default();
            s.push_str(&format!("terra:   {n}: --allow-net {n}:443{preset}\n"));
        }
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dns_summary_names_each_name_once_with_its_flag() {
        let r = serde_json::json!({"dnsRefused": ["pypi.org", "example.org", "bad name"]});
        assert_eq!(
            dns_summary(&r, false).unwrap(),
            "terra: the network is off (network none) and the box asked for 2 names:\n\
             terra:   pypi.org: --allow-net pypi.org:443 (or --preset python --preset-net)\n\
             terra:   example.org: --allow-net example.org:443\n"
        );
        assert!(dns_summary(&r, true)
            .unwrap()
            .contains("add pypi.org:443 to the policy's network destinations"));
        assert_eq!(
            dns_summary(&serde_json::json!({"dnsRefused": []}), false),
            None
        );
        assert_eq!(dns_summary(&serde_json::json!({}), false), None);
    }

    #[test]
    fn plural_forms() {
        assert_eq!(plural(1, "connection", "connections"), "1 connection");
        assert_eq!(plural(0, "connection", "connections"), "0 connections");
        assert_eq!(plural(2, "run", "runs"), "2 runs");
    }

    #[test]
    fn first_refusals_skip_admitted_unreadable_and_overlong_lines() {
        let mut text = String::new();
        text.push_str("{\"verdict\":\"allowed\",\"name\":\"ok.test\",\"port\":443}\n");
        text.push_str("not json\n");
        text.push_str(&"x".repeat(MAX_LINE as usize * 2));
        text.push('\n');
        text.push_str("{\"verdict\":\"refused\",\"name\":\"a.test\",\"port\":80,\"reason\":\"no-destination\"}\n");
        // The same refusal again (the DNS stub's A and AAAA): said once.
        text.push_str("{\"verdict\":\"refused\",\"name\":\"a.test\",\"port\":80,\"reason\":\"no-destination\"}\n");
        text.push_str("{\"verdict\":\"refused\",\"address\":\"10.0.0.1:443\",\"reason\":\"private-address\"}\n");
        text.push_str("{\"verdict\":\"refused\",\"reason\":\"malformed\"}\n");
        text.push_str("{\"verdict\":\"refused\",\"name\":\"d.test\",\"port\":1,\"reason\":\"no-destination\"}\n");
        let got = first_refusals(text.as_bytes(), 3);
        let shown: Vec<String> = got
            .iter()
            .map(|r| format!("{} ({})", r.destination, r.reason))
            .collect();
        assert_eq!(
            shown,
            [
                "a.test:80 (no-destination)",
                "10.0.0.1:443 (private-address)",
                "(unparsed request) (malformed)"
            ]
        );
    }

    #[test]
    fn retries_of_one_name_count_once() {
        let mut text = String::new();
        for _ in 0..4 {
            text.push_str("{\"verdict\":\"refused\",\"name\":\"index.crates.io\",\"port\":443,\"reason\":\"no-destination\"}\n");
        }
        text.push_str("{\"verdict\":\"refused\",\"name\":\"static.crates.io\",\"port\":443,\"reason\":\"no-destination\"}\n");
        text.push_str("{\"verdict\":\"refused\",\"name\":\"index.crates.io\",\"port\":443,\"reason\":\"no-destination\"}\n");
        let (shown, distinct) = refusals(text.as_bytes(), 1);
        assert_eq!(distinct, 2);
        assert_eq!(shown.len(), 1);
        let s = render(6, 2, &shown, "/l", false);
        assert!(
            s.starts_with("terra: the network broker refused 2 destinations (6 attempts): index.crates.io:443 (no-destination) and 1 more\n"),
            "{s}"
        );
    }

    #[test]
    fn udp_refusals_are_named_and_get_no_remedy() {
        let line = "{\"verdict\":\"refused\",\"protocol\":\"udp\",\"address\":\"192.0.2.1:53\",\"port\":53,\"reason\":\"no-destination\"}\n";
        let got = first_refusals(line.as_bytes(), 3);
        assert_eq!(got[0].destination, "UDP 192.0.2.1:53");
        assert_eq!(remedy("no-destination", &got[0], false), None);
    }

    #[test]
    fn the_summary_names_counts_examples_remedies_and_the_log() {
        let ex = [
            Refusal {
                destination: "a.test:80".into(),
                reason: "no-destination".into(),
                udp: false,
            },
            Refusal {
                destination: "mirror.corp:443".into(),
                reason: "private-address".into(),
                udp: false,
            },
        ];
        let s = render(5, 5, &ex, "/s/net.jsonl", false);
        assert_eq!(
            s,
            "terra: the network broker refused 5 connections: a.test:80 (no-destination), \
             mirror.corp:443 (private-address) and 3 more\n\
             terra:   to admit them, run with: --allow-net a.test:80 --allow-net mirror.corp:443,private\n\
             terra:   full log: /s/net.jsonl (or `terra runs show last`)\n"
        );
        // One name retried: one destination, its attempts counted apart.
        let s = render(4, 1, &ex[..1], "/l", false);
        assert!(
            s.starts_with(
                "terra: the network broker refused 1 destination (4 attempts): a.test:80 (no-destination)\n"
            ),
            "{s}"
        );
        let s = render(1, 1, &ex[..1], "/l", true);
        assert!(
            s.starts_with("terra: the network broker refused 1 connection: a.test:80"),
            "{s}"
        );
        assert!(
            s.contains("add a.test:80 to the policy's network destinations"),
            "{s}"
        );
    }
}
