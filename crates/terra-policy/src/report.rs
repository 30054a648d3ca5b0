//! Reports of the `terra policy` commands, for people (text) and for scripts
//! (JSON): one [`Report`] per successful command, one error object per
//! refusal. The CLI only reads files, calls these and prints the result.

use serde_json::{json, Value};

use crate::compose::Region;
use crate::evaluate::Evaluation;
use crate::{
    capability, Capability, CapabilitySet, Destination, ErrorClass, Mir, PolicyError, Resolution,
    ResolvedRule, Result,
};

/// A command's report: its text, its JSON, and whether it is a valid report
/// with violations (exit 2).
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub violations: bool,
    pub text: String,
    pub json: Value,
}

impl Report {
    fn new(violations: bool, text: String, json: Value) -> Self {
        Report {
            violations,
            text,
            json,
        }
    }

    /// What the command prints: the JSON (see [`json_text`]) or the text.
    pub fn render(&self, json: bool) -> String {
        if json {
            json_text(&self.json)
        } else {
            self.text.clone()
        }
    }
}

/// A JSON report, pretty, with a final newline.
pub fn json_text(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into());
    s.push('\n');
    s
}

fn sha(hex: &str) -> String {
    format!("sha256:{hex}")
}

// ---- format commands: compile, validate, hash, artifact-hash, init ----

/// The `--json` refusal of every `terra policy` command, one shape:
/// `{"ok": false, "error": {"class", "message", "path", "line", "column"}}`.
/// `path` is the file the refusal is about (when known), `line` and `column`
/// where in a JSON source it stands (when the message names a place); a
/// conflict also names both permissions (`before`, `after`), and a
/// non-canonical document also says `"valid": false` at the top.
pub fn error_json(e: &PolicyError, path: Option<&str>) -> Value {
    let (line, column) = match crate::position::first_line_column(e.detail()) {
        Some((l, c)) => (json!(l), json!(c)),
        None => (Value::Null, Value::Null),
    };
    let mut err = json!({
        "class": e.class().as_str(),
        "message": e.detail(),
        "path": path,
        "line": line,
        "column": column,
    });
    if let Some((before, after)) = conflict_permissions(e.detail()) {
        err["before"] = json!(before);
        err["after"] = json!(after);
    }
    let mut v = json!({ "ok": false, "error": err });
    if e.class() == ErrorClass::NonCanonical {
        v["valid"] = Value::Bool(false);
    }
    v
}

/// The JSON of `compile` and `validate`: the MIR's size and digest, and `fields`.
fn mir_json(mir: &Mir, digest: &str, fields: Value) -> Value {
    let mut v = json!({
        "ok": true,
        "bytes": mir.bytes().len(),
        "rules": mir.rules().len(),
        "destinations": mir.destinations().len(),
        "decisionDigest": digest,
    });
    if let (Some(o), Value::Object(extra)) = (v.as_object_mut(), fields) {
        o.extend(extra);
    }
    v
}

/// `1 rule`, `2 rules`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `compile`: `mir` compiled from `source_bytes` (named `source`) and written to `output`.
pub fn compiled(mir: &Mir, source: &str, source_bytes: &[u8], output: &str) -> Report {
    let digest = sha(&mir.decision_digest());
    let text = format!(
        "compiled {source} -> {output} ({}, {}, {})\ndecision digest {digest}\n",
        plural(mir.bytes().len(), "byte", "bytes"),
        plural(mir.rules().len(), "rule", "rules"),
        plural(mir.destinations().len(), "destination", "destinations")
    );
    let fields = json!({
        "output": output,
        "sourceArtifactDigest": sha(&crate::digest::artifact_digest(source_bytes)),
    });
    Report::new(false, text, mir_json(mir, &digest, fields))
}

/// `validate`: `file` decoded as canonical MIR v3.
pub fn validated(mir: &Mir, file: &str) -> Report {
    let digest = sha(&mir.decision_digest());
    let text = format!("valid: {file} is canonical MIR v3 ({digest})\n");
    let fields = json!({ "valid": true, "file": file });
    Report::new(false, text, mir_json(mir, &digest, fields))
}

/// `validate` of a JSON source: it compiles to canonical MIR v3.
pub fn validated_source(mir: &Mir, file: &str) -> Report {
    let digest = sha(&mir.decision_digest());
    let text = format!(
        "valid: {file} is a JSON source v3 policy; it compiles to canonical MIR v3 ({digest})\n"
    );
    let fields = json!({ "valid": true, "file": file, "format": "json" });
    Report::new(false, text, mir_json(mir, &digest, fields))
}

fn digest_report(basis: &str, hex: &str) -> Report {
    let digest = sha(hex);
    let json = json!({ "ok": true, "algorithm": "sha256", "basis": basis, "digest": digest });
    Report::new(false, format!("{digest}\n"), json)
}

/// `hash`: the decision digest of a canonical MIR.
pub fn decision_hash(mir: &Mir) -> Report {
    digest_report("canonical-mir-v3-bytes", &mir.decision_digest())
}

/// `artifact-hash`: the digest of any bytes.
pub fn artifact_hash(bytes: &[u8]) -> Report {
    digest_report("artifact-bytes", &crate::digest::artifact_digest(bytes))
}

/// `init`: terra's default policy source.
pub fn init() -> Report {
    let source = crate::DEFAULT_POLICY_SOURCE;
    Report::new(
        false,
        source.to_string(),
        json!({ "ok": true, "source": source }),
    )
}

// ---- plan commands: capabilities, resolve, evaluate, restrict, contains, diff, overlaps ----

/// `before=X after=Y` out of a conflict message.
fn conflict_permissions(message: &str) -> Option<(String, String)> {
    let start = message.find("(before=")?;
    let rest = &message[start + 1..];
    let end = rest.find(')')?;
    let mut words = rest[..end].split_whitespace();
    let before = words.next()?.strip_prefix("before=")?;
    let after = words.next()?.strip_prefix("after=")?;
    Some((before.to_string(), after.to_string()))
}

fn rule_json(r: &ResolvedRule) -> Value {
    json!({
        "access": r.access.name(),
        "scope": r.scope.name(),
        "path": r.path,
        "protectCreate": r.protect_create,
        "sourceRule": r.source_rule,
        "sourceRoot": r.source_root.name(),
    })
}

fn rule_text(r: &ResolvedRule) -> String {
    let protect = if r.protect_create {
        " (protect-create)"
    } else {
        ""
    };
    format!("{} {} {}{protect}", r.access, r.scope, r.path)
}

fn destination_json(d: &Destination) -> Value {
    json!({
        "protocol": "tcp",
        "host": d.host,
        "port": d.port,
        "requireTlsSni": d.require_tls_sni,
        "allowPrivateAddresses": d.allow_private_addresses,
    })
}

fn destinations_json(ds: &[Destination]) -> Vec<Value> {
    ds.iter().map(destination_json).collect()
}

fn destination_text(d: &Destination) -> String {
    let mut s = format!("tcp {}:{}", d.host, d.port);
    if d.require_tls_sni {
        s.push_str(" require-tls-sni");
    }
    if d.allow_private_addresses {
        s.push_str(" allow-private-addresses");
    }
    s
}

/// The names of the capabilities missing (with `--check`) and one blocker per name.
fn missing(missing: Option<Vec<Capability>>) -> (Option<Vec<&'static str>>, Vec<String>) {
    let names: Option<Vec<&str>> = missing.map(|m| m.into_iter().map(|c| c.name()).collect());
    let blockers = names
        .iter()
        .flatten()
        .map(|c| format!("missing capability {c}"))
        .collect();
    (names, blockers)
}

/// `capabilities`: what `mir` requires, checked against `available` (`--check`).
pub fn capabilities(mir: &Mir, available: Option<CapabilitySet>) -> Report {
    let required = capability::required_capabilities(mir);
    let conditional: Vec<&str> = if capability::may_require_protect_create(mir) {
        vec!["fs-protect-create"]
    } else {
        vec![]
    };
    let (missing, blockers) = missing(available.map(|a| required.missing_from(a)));
    let mut text = String::new();
    for c in required.names() {
        text.push_str(c);
        text.push('\n');
    }
    for c in &conditional {
        text.push_str(&format!(
            "{c} (conditional: when resolution keeps an absent deny or deny-write)\n"
        ));
    }
    if let Some(m) = &missing {
        if m.is_empty() {
            text.push_str("check: every required capability is available\n");
        } else {
            text.push_str(&format!("check: missing {}\n", m.join(", ")));
        }
    }
    let json = json!({
        "ok": blockers.is_empty(),
        "digest": mir.decision_digest(),
        "required": required.names(),
        "conditional": conditional,
        "available": available.map(|a| a.names()),
        "missing": missing,
        "blockers": blockers,
    });
    Report::new(!blockers.is_empty(), text, json)
}

/// `resolve`: the plan of `res`, checked against `available` (`--check`).
pub fn resolved(res: &Resolution, available: Option<CapabilitySet>) -> Result<Report> {
    let required = res.required_capabilities();
    let (missing, blockers) = missing(available.map(|a| res.missing_capabilities(a)));
    if let Some(a) = available {
        if blockers.is_empty() {
            // The same check the runtime makes; it cannot fail here.
            res.clone().into_plan(a)?;
        }
    }
    let mut text = format!("digest: {}\n", res.decision_digest());
    text.push_str(&format!("network: {}", res.network()));
    if let Some(m) = res.mediator() {
        text.push_str(&format!(" (mediator {m})"));
    }
    text.push('\n');
    for d in res.destinations() {
        text.push_str(&format!("  allow {}\n", destination_text(d)));
    }
    text.push_str(&format!(
        "root: {}\nprocess tree: {}\n",
        res.root_mode(),
        res.process_tree()
    ));
    text.push_str(&format!("rules ({}):\n", res.rules().len()));
    for r in res.rules() {
        text.push_str(&format!("  {}\n", rule_text(r)));
    }
    text.push_str(&format!("omitted ({}):\n", res.omitted().len()));
    for o in res.omitted() {
        text.push_str(&format!("  {} {} (missing, skipped)\n", o.access, o.path));
    }
    text.push_str(&format!(
        "required capabilities: {}\n",
        required.names().join(", ")
    ));
    if let Some(m) = &missing {
        let m = if m.is_empty() {
            "none".to_string()
        } else {
            m.join(", ")
        };
        text.push_str(&format!("missing capabilities: {m}\n"));
    }
    let json = json!({
        "ok": blockers.is_empty(),
        "digest": res.decision_digest(),
        "network": {
            "mode": res.network().name(),
            "mediator": res.mediator(),
            "allow": destinations_json(res.destinations()),
        },
        "root": { "mode": res.root_mode().name() },
        "process": { "treeConfinement": res.process_tree().name() },
        "rules": res.rules().iter().map(rule_json).collect::<Vec<_>>(),
        "omitted": res.omitted().iter().map(|o| json!({
            "access": o.access.name(), "path": o.path, "sourceRule": o.source_rule,
        })).collect::<Vec<_>>(),
        "required": required.names(),
        "available": available.map(|a| a.names()),
        "missing": missing,
        "blockers": blockers,
    });
    Ok(Report::new(!blockers.is_empty(), text, json))
}

/// `evaluate`: the permission of `path` under `res`.
pub fn evaluation(res: &Resolution, path: &str) -> Result<Report> {
    let Evaluation {
        permission,
        reason,
        decisive,
        applicable,
    } = res.evaluate(path)?;
    let rule = decisive.map(|i| &res.rules()[i]);
    let text = format!(
        "{permission} {reason}{} [{applicable} applicable rule{}]\n",
        rule.map(|r| format!(" ({})", rule_text(r)))
            .unwrap_or_default(),
        if applicable == 1 { "" } else { "s" }
    );
    let json = json!({
        "ok": true,
        "digest": res.decision_digest(),
        "path": path,
        "permission": permission.name(),
        "reason": reason.name(),
        "decisiveRule": rule.map(rule_json),
        "applicable": applicable,
    });
    Ok(Report::new(false, text, json))
}

/// `restrict`: the narrowed `mir`, written to `output`.
pub fn restricted(mir: &Mir, output: &str) -> Report {
    let text = format!(
        "wrote {output} ({} bytes, digest {})\n",
        mir.bytes().len(),
        mir.decision_digest()
    );
    let json = json!({
        "ok": true,
        "output": output,
        "digest": mir.decision_digest(),
        "bytes": mir.bytes().len(),
        "rules": mir.rules().len(),
        "network": mir.network().name(),
        "root": mir.root_mode().name(),
        "process": mir.process_tree().name(),
    });
    Report::new(false, text, json)
}

/// A region's path as users read it: a named path, or `<dir>/*` for the
/// paths below `<dir>` that no rule names (never the internal witness name).
fn region_path(r: &Region) -> String {
    if r.named {
        r.path.clone()
    } else {
        crate::conflict::witness_shown(&r.path)
    }
}

fn region_json(r: &Region, first: &str, second: &str) -> Value {
    let mut v = json!({ "path": region_path(r), "named": r.named });
    v[first] = json!(r.first.name());
    v[second] = json!(r.second.name());
    v
}

fn region_text(r: &Region, first: &str, second: &str) -> String {
    format!(
        "  {}{}: {first} {}, {second} {}\n",
        region_path(r),
        if r.named {
            ""
        } else {
            " (paths no rule names)"
        },
        r.first,
        r.second
    )
}

/// A headline, then one line per region.
fn regions_text(headline: &str, regions: &[Region], first: &str, second: &str) -> String {
    let mut text = format!("{headline}\n");
    for r in regions {
        text.push_str(&region_text(r, first, second));
    }
    text
}

fn regions_json(regions: &[Region], first: &str, second: &str) -> Vec<Value> {
    regions
        .iter()
        .map(|r| region_json(r, first, second))
        .collect()
}

/// `contains`: whether candidate `c` grants nothing beyond boundary `b`
/// (violations when it does).
pub fn containment(b: &Resolution, c: &Resolution) -> Report {
    let report = crate::contains(b, c);
    let (contained, regions, settings) = (report.contained, report.regions, report.settings);
    let headline = ["not contained", "contained"][usize::from(contained)];
    let mut text = regions_text(headline, &regions, "boundary", "candidate");
    for s in &settings {
        text.push_str(&format!("  {s}\n"));
    }
    let blockers: Vec<String> = regions
        .iter()
        .map(|r| region_text(r, "boundary", "candidate").trim().to_string())
        .chain(settings.iter().cloned())
        .collect();
    let json = json!({
        "ok": contained,
        "contained": contained,
        "boundaryDigest": b.decision_digest(),
        "candidateDigest": c.decision_digest(),
        "regions": regions_json(&regions, "boundary", "candidate"),
        "settings": settings,
        "blockers": blockers,
    });
    Report::new(!contained, text, json)
}

fn pair<T: std::fmt::Display>(p: &Option<(T, T)>) -> Value {
    match p {
        Some((a, b)) => json!({ "before": a.to_string(), "after": b.to_string() }),
        None => Value::Null,
    }
}

/// `diff`: what changes from `b` to `a`; with `check`, violations when `a`
/// grants anything `b` does not.
pub fn difference(b: &Resolution, a: &Resolution, check: bool) -> Report {
    let report = crate::diff(b, a);
    let violations = check && !report.widened.is_empty();
    let s = &report.settings;
    let mut text = String::new();
    if report.is_empty() {
        text.push_str("no differences\n");
    }
    if !report.regions.is_empty() {
        text.push_str(&format!("regions ({}):\n", report.regions.len()));
        for r in &report.regions {
            text.push_str(&region_text(r, "before", "after"));
        }
    }
    if let Some((x, y)) = s.network {
        text.push_str(&format!("network: {x} -> {y}\n"));
    }
    for d in &s.destinations_only_first {
        text.push_str(&format!("destination removed: {}\n", destination_text(d)));
    }
    for d in &s.destinations_only_second {
        text.push_str(&format!("destination added: {}\n", destination_text(d)));
    }
    if let Some((x, y)) = s.root {
        text.push_str(&format!("root: {x} -> {y}\n"));
    }
    if let Some((x, y)) = s.process_tree {
        text.push_str(&format!("process tree: {x} -> {y}\n"));
    }
    if check {
        if report.widened.is_empty() {
            text.push_str("check: nothing widened\n");
        } else {
            text.push_str("check: widened\n");
            for w in &report.widened {
                text.push_str(&format!("  {w}\n"));
            }
        }
    }
    let json = json!({
        "ok": !violations,
        "identical": report.is_empty(),
        "beforeDigest": b.decision_digest(),
        "afterDigest": a.decision_digest(),
        "regions": regions_json(&report.regions, "before", "after"),
        "network": pair(&s.network),
        "destinationsRemoved": destinations_json(&s.destinations_only_first),
        "destinationsAdded": destinations_json(&s.destinations_only_second),
        "root": pair(&s.root),
        "process": pair(&s.process_tree),
        "widened": report.widened,
        "blockers": if check { report.widened.clone() } else { Vec::new() },
    });
    Report::new(violations, text, json)
}

/// `overlaps`: what `f` and `s` both grant.
pub fn overlap(f: &Resolution, s: &Resolution) -> Report {
    let report = crate::overlaps(f, s);
    let (overlapping, network) = (report.overlapping, report.network);
    let (regions, common_destinations) = (report.regions, report.common_destinations);
    let headline = ["disjoint", "overlapping"][usize::from(overlapping)];
    let mut text = regions_text(headline, &regions, "first", "second");
    if network {
        text.push_str(&format!(
            "network: both reach it ({} / {})\n",
            f.network(),
            s.network()
        ));
        for d in &common_destinations {
            text.push_str(&format!("  common {}\n", destination_text(d)));
        }
    }
    let json = json!({
        "ok": true,
        "overlapping": overlapping,
        "firstDigest": f.decision_digest(),
        "secondDigest": s.decision_digest(),
        "regions": regions_json(&regions, "first", "second"),
        "network": network,
        "commonDestinations": destinations_json(&common_destinations),
    });
    Report::new(false, text, json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile_source;
    // The tests that resolve on a canonical temp directory are Unix only.
    #[cfg(unix)]
    use crate::{resolve, testing::tmp, HostBindings};

    /// A source v3 policy with `rules` (a JSON array).
    fn policy(rules: &str) -> Mir {
        let src = format!(
            r#"{{"formatVersion": 3, "filesystem": {{"default": "deny", "rules": {rules}}},
               "network": {{"mode": "none"}}, "root": {{"mode": "read-only"}},
               "process": {{"treeConfinement": "required"}}}}"#
        );
        compile_source(src.as_bytes()).unwrap()
    }

    fn runtime_read() -> Mir {
        policy(r#"[{"access": "read", "path": {"special": "minimal-runtime"}}]"#)
    }

    #[cfg(unix)]
    fn resolved_on(mir: &Mir, root: &str) -> Resolution {
        let host = HostBindings {
            minimal_roots: vec![root.into()],
            ..HostBindings::default()
        };
        resolve(mir, &host).unwrap()
    }

    #[test]
    fn json_text_is_pretty_with_one_final_newline() {
        let s = json_text(&json!({ "a": 1 }));
        assert_eq!(s, "{\n  \"a\": 1\n}\n");
    }

    #[test]
    fn render_picks_json_or_text() {
        let r = init();
        assert_eq!(r.render(false), crate::DEFAULT_POLICY_SOURCE);
        let v: Value = serde_json::from_str(&r.render(true)).unwrap();
        assert_eq!(v["source"], crate::DEFAULT_POLICY_SOURCE);
        assert!(!r.violations);
    }

    #[test]
    fn plan_refusal_names_both_permissions_of_a_conflict() {
        let e = PolicyError::Conflict("/a means x (before=read after=none); split it".into());
        let v = error_json(&e, Some("p.json"));
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["class"], "conflict");
        assert_eq!(v["error"]["before"], "read");
        assert_eq!(v["error"]["after"], "none");
        assert_eq!(v["error"]["path"], "p.json");
        let plain = error_json(&PolicyError::Io("gone".into()), None);
        assert_eq!(plain["error"]["message"], "gone");
        assert!(plain["error"].get("before").is_none());
        assert_eq!(conflict_permissions("(before=read)"), None);
        assert_eq!(conflict_permissions("(after=x before=y)"), None);
    }

    #[test]
    fn counts_have_their_plural_forms() {
        assert_eq!(plural(1, "destination", "destinations"), "1 destination");
        assert_eq!(plural(0, "rule", "rules"), "0 rules");
        let text = compiled(&runtime_read(), "s.json", b"{}", "o.mir").text;
        assert!(text.contains(", 1 rule, 0 destinations)"), "{text}");
    }

    #[test]
    fn format_refusal_says_invalid_only_when_non_canonical() {
        let nc = error_json(&PolicyError::NonCanonical("unsorted".into()), None);
        assert_eq!(nc["valid"], false);
        assert_eq!(nc["error"]["class"], "non-canonical");
        let f = error_json(
            &PolicyError::Format("x (byte offset 9, line 2, column 3): short".into()),
            Some("s.json"),
        );
        assert!(f.get("valid").is_none());
        assert_eq!(
            (
                &f["error"]["line"],
                &f["error"]["column"],
                &f["error"]["path"]
            ),
            (&json!(2), &json!(3), &json!("s.json"))
        );
        assert!(f["error"]["path"].is_string());
    }

    #[test]
    fn hashes_and_validation_carry_the_digest() {
        let mir = runtime_read();
        let digest = format!("sha256:{}", mir.decision_digest());
        let h = decision_hash(&mir);
        assert_eq!(h.text, format!("{digest}\n"));
        assert_eq!(h.json["basis"], "canonical-mir-v3-bytes");
        let v = validated(&mir, "p.mir");
        assert_eq!(
            v.text,
            format!("valid: p.mir is canonical MIR v3 ({digest})\n")
        );
        assert_eq!(v.json["decisionDigest"], digest.as_str());
        assert_eq!(v.json["rules"], mir.rules().len());
        assert_eq!(
            artifact_hash(b"x").json["digest"],
            format!("sha256:{}", crate::digest::artifact_digest(b"x"))
        );
    }

    #[test]
    fn a_missing_capability_is_a_violation() {
        let mir = runtime_read();
        let none = capabilities(&mir, Some(CapabilitySet::EMPTY));
        assert!(none.violations);
        assert_eq!(none.json["ok"], false);
        assert!(none.text.contains("check: missing "));
        let all = capabilities(&mir, Some(capability::required_capabilities(&mir)));
        assert!(!all.violations);
        assert!(all
            .text
            .ends_with("check: every required capability is available\n"));
        assert!(!capabilities(&mir, None).violations);
    }

    #[cfg(unix)]
    #[test]
    fn containment_and_widening_are_violations() {
        let (_d, root) = tmp();
        let narrow = resolved_on(&policy("[]"), &root);
        let wide = resolved_on(&runtime_read(), &root);
        let not = containment(&narrow, &wide);
        assert!(not.violations);
        assert!(not.text.starts_with("not contained\n"));
        let count = |k: &str| not.json[k].as_array().map_or(0, Vec::len);
        assert!(count("regions") > 0);
        assert_eq!(count("blockers"), count("regions") + count("settings"));
        assert!(!containment(&wide, &narrow).violations);

        let widened = difference(&narrow, &wide, true);
        assert!(widened.violations);
        assert!(widened.text.contains("check: widened\n"));
        assert!(!difference(&narrow, &wide, false).violations);
        let same = difference(&wide, &wide, true);
        assert!(!same.violations);
        assert_eq!(same.text, "no differences\ncheck: nothing widened\n");

        let both = overlap(&wide, &wide);
        assert!(both.text.starts_with("overlapping\n"));
        assert_eq!(overlap(&narrow, &wide).json["overlapping"], false);
    }

    // A canonical temp directory (terra-test-support's, Unix only).
    #[cfg(unix)]
    #[test]
    fn evaluation_names_the_decisive_rule() {
        let (_d, root) = tmp();
        let res = resolved_on(&runtime_read(), &root);
        let r = evaluation(&res, &root).unwrap();
        assert_eq!(r.json["permission"], "read");
        assert_eq!(r.json["decisiveRule"]["path"], root.as_str());
        assert!(r.text.ends_with("[1 applicable rule]\n"), "{}", r.text);
    }
}
