//! Profile rendering: golden files for each role and mode, plus properties
//! that hold for every spec. `TERRA_BLESS=1` rewrites the golden files.

use proptest::prelude::*;
use terra_seatbelt::path::seatbelt_path;
use terra_seatbelt::{render, Grant, GrantKind, LaunchSpec, Network, Profile, Role, Scope};

fn grant(kind: GrantKind, scope: Scope, path: &str) -> Grant {
    Grant {
        kind,
        scope,
        path: path.into(),
    }
}

fn workload(network: Network) -> LaunchSpec {
    LaunchSpec {
        role: Role::Workload,
        network,
        executable: "/usr/local/bin/terra".into(),
        grants: vec![
            grant(GrantKind::Read, Scope::Tree, "/usr"),
            grant(GrantKind::Write, Scope::Tree, "/Users/ann/project"),
            grant(
                GrantKind::Write,
                Scope::Tree,
                "/private/var/folders/xy/T/terra-1",
            ),
            grant(GrantKind::Read, Scope::Exact, "/private/etc/hosts"),
            grant(GrantKind::DenyWrite, Scope::Tree, "/Users/ann/project/.git"),
            grant(GrantKind::Deny, Scope::Tree, "/Users/ann/project/secrets"),
        ],
    }
}

fn golden(name: &str, profile: &Profile) {
    let actual = format!(
        "{}--- parameters\n{}",
        profile.text,
        profile.parameter_lines()
    );
    let path = format!("{}/tests/golden/{name}.sb", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("TERRA_BLESS").is_some() {
        std::fs::write(&path, &actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(actual, expected, "golden file {path} differs");
}

#[test]
fn seatbelt_golden_workload_network_none() {
    golden("workload-none", &render(&workload(Network::None)).unwrap());
}

#[test]
fn seatbelt_golden_workload_network_mediated() {
    golden(
        "workload-mediated",
        &render(&workload(Network::Mediated { port: 41234 })).unwrap(),
    );
}

#[test]
fn seatbelt_golden_workload_network_direct() {
    golden(
        "workload-direct",
        &render(&workload(Network::Direct)).unwrap(),
    );
}

#[test]
fn seatbelt_golden_broker() {
    let spec = LaunchSpec {
        role: Role::Broker,
        network: Network::Mediated { port: 41234 },
        executable: "/usr/local/bin/terra".into(),
        grants: vec![grant(
            GrantKind::Read,
            Scope::Exact,
            "/private/etc/ssl/cert.pem",
        )],
    };
    golden("broker", &render(&spec).unwrap());
}

#[test]
fn seatbelt_profile_denies_by_default_and_imports_system_sb() {
    for net in [
        Network::None,
        Network::Direct,
        Network::Mediated { port: 9 },
    ] {
        let text = render(&workload(net)).unwrap().text;
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("(version 1)"));
        assert_eq!(lines.next(), Some("(deny default)"));
        assert_eq!(lines.next(), Some("(import \"system.sb\")"));
        assert!(!text.contains("(allow default)"));
    }
}

#[test]
fn seatbelt_network_none_has_no_network_allow() {
    let text = render(&workload(Network::None)).unwrap().text;
    assert!(!text.contains("(allow network"));
    assert!(!text.contains("system-socket"));
}

#[test]
fn seatbelt_network_mediated_allows_only_the_broker_port() {
    let text = render(&workload(Network::Mediated { port: 41234 }))
        .unwrap()
        .text;
    let net: Vec<&str> = text.lines().filter(|l| l.contains("network")).collect();
    assert_eq!(
        net,
        ["(allow network-outbound (remote tcp \"localhost:41234\"))"]
    );
}

#[test]
fn seatbelt_network_direct_allows_network() {
    let text = render(&workload(Network::Direct)).unwrap().text;
    assert!(text.lines().any(|l| l == "(allow network*)"));
}

#[test]
fn seatbelt_denies_come_after_every_grant() {
    // Seatbelt applies the last matching rule: a deny placed before a grant
    // that covers it would be overridden.
    let text = render(&workload(Network::None)).unwrap().text;
    let lines: Vec<&str> = text.lines().collect();
    let last_allow = lines
        .iter()
        .rposition(|l| l.starts_with("(allow file-read*"))
        .unwrap();
    let first_deny = lines
        .iter()
        .position(|l| l.starts_with("(deny file"))
        .unwrap();
    assert!(first_deny > last_allow, "{text}");
}

#[test]
fn seatbelt_ancestors_get_metadata_only_rules() {
    let p = render(&workload(Network::None)).unwrap();
    let value = |name: &str| {
        p.parameters
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let ancestors: Vec<String> = p
        .parameters
        .iter()
        .filter(|(k, _)| k.starts_with("ANCESTOR_"))
        .map(|(_, v)| v.clone())
        .collect();
    for a in [
        "/",
        "/Users",
        "/Users/ann",
        "/private",
        "/private/var/folders/xy/T",
        "/private/etc",
    ] {
        assert!(
            ancestors.iter().any(|x| x == a),
            "{a} missing from {ancestors:?}"
        );
    }
    for (k, _) in p
        .parameters
        .iter()
        .filter(|(k, _)| k.starts_with("ANCESTOR_"))
    {
        let rule = format!("(allow file-read-metadata (literal (param \"{k}\")))");
        assert!(p.text.lines().any(|l| l == rule), "{k}: {rule} missing");
        assert!(
            p.text.matches(&format!("\"{k}\"")).count() == 1,
            "{k} used beyond metadata"
        );
    }
    assert_eq!(value("ANCESTOR_0").as_deref(), Some("/"));
}

#[test]
fn seatbelt_broker_refuses_writes_and_non_mediated_networks() {
    let mut spec = LaunchSpec {
        role: Role::Broker,
        network: Network::Direct,
        executable: "/usr/local/bin/terra".into(),
        grants: Vec::new(),
    };
    assert!(render(&spec).is_err());
    spec.network = Network::Mediated { port: 1 };
    let text = render(&spec).unwrap().text;
    assert!(!text.contains("file-write"), "{text}");
    assert!(!text.contains("process-fork"), "{text}");
    spec.grants
        .push(grant(GrantKind::Write, Scope::Tree, "/Users"));
    assert!(render(&spec).is_err());
}

#[test]
fn seatbelt_tmp_var_etc_are_canonicalised_to_private() {
    assert_eq!(seatbelt_path("/tmp/x").unwrap(), "/private/tmp/x");
    assert_eq!(seatbelt_path("/var/db").unwrap(), "/private/var/db");
    assert_eq!(seatbelt_path("/etc").unwrap(), "/private/etc");
}

fn arb_path() -> impl Strategy<Value = String> {
    // Components with the characters SBPL would care about: quotes,
    // parentheses, backslashes, semicolons, spaces.
    prop::collection::vec("[a-zA-Z0-9 \"()\\\\;#|._-]{1,8}", 1..5).prop_filter_map(
        "normal path",
        |cs| {
            let p = format!("/{}", cs.join("/"));
            seatbelt_path(&p).ok()
        },
    )
}

fn arb_spec() -> impl Strategy<Value = LaunchSpec> {
    let kind = prop_oneof![
        Just(GrantKind::Read),
        Just(GrantKind::Write),
        Just(GrantKind::Deny),
        Just(GrantKind::DenyWrite)
    ];
    let scope = prop_oneof![Just(Scope::Tree), Just(Scope::Exact)];
    let net = prop_oneof![
        Just(Network::None),
        Just(Network::Direct),
        (1u16..).prop_map(|port| Network::Mediated { port })
    ];
    (
        arb_path(),
        net,
        prop::collection::vec((kind, scope, arb_path()), 0..8),
    )
        .prop_map(|(executable, network, g)| LaunchSpec {
            role: Role::Workload,
            network,
            executable,
            grants: g
                .into_iter()
                .map(|(kind, scope, path)| Grant { kind, scope, path })
                .collect(),
        })
}

proptest! {
    #[test]
    fn seatbelt_profile_has_no_path_text(spec in arb_spec()) {
        let p = render(&spec).unwrap();
        // Not one slash: every path, fixed or from the plan, is a parameter.
        prop_assert!(!p.text.contains('/'), "{}", p.text);
        for g in &spec.grants {
            prop_assert!(!p.text.contains(&g.path));
        }
    }

    #[test]
    fn seatbelt_every_grant_is_a_parameter(spec in arb_spec()) {
        let p = render(&spec).unwrap();
        for (i, g) in spec.grants.iter().enumerate() {
            let name = format!("GRANT_{i}");
            prop_assert!(p.parameters.iter().any(|(k, v)| *k == name && *v == g.path));
            let reference = format!("(param \"{name}\")");
            prop_assert!(p.text.contains(&reference));
        }
        prop_assert!(p.parameters.iter().any(|(k, v)| k == "EXECUTABLE" && *v == spec.executable));
        // Every parameter the text names is defined, once.
        let mut names: Vec<&String> = p.parameters.iter().map(|(k, _)| k).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        prop_assert_eq!(names.len(), n);
    }

    #[test]
    fn seatbelt_launch_spec_round_trips(spec in arb_spec()) {
        let bytes = spec.encode();
        prop_assert_eq!(LaunchSpec::decode(&bytes).unwrap(), spec);
    }
}

#[test]
fn seatbelt_launch_spec_rejects_non_canonical_bytes() {
    let spec = workload(Network::Mediated { port: 80 });
    let good = spec.encode();
    assert_eq!(LaunchSpec::decode(&good).unwrap(), spec);
    let text = String::from_utf8(good).unwrap();
    for bad in [
        text.replace("mediated 80", "mediated 080"),
        text.replace("mediated 80", "mediated 0"),
        text.replace("role workload", "role admin"),
        text.replace("\nend\n", "\n"),
        text.replace("grant read", "grant  read"),
        format!("{text}x"),
        // /tmp is not the form Seatbelt matches.
        text.replace(&hexs("/usr"), &hexs("/tmp")),
        text.replace(&hexs("/usr"), &hexs("/usr").to_uppercase()),
    ] {
        assert!(
            LaunchSpec::decode(bad.as_bytes()).is_err(),
            "accepted {bad}"
        );
    }
}

fn hexs(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The fuzz target's seeds are canonical specs (so fuzzing starts from
/// inputs the decoder accepts).
#[test]
fn seatbelt_fuzz_seeds_are_canonical_launch_specs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds/seatbelt_launch_spec");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let spec = LaunchSpec::decode(&bytes).unwrap();
        assert_eq!(spec.encode(), bytes);
        n += 1;
    }
    assert!(n >= 2, "seeds missing in {}", dir.display());
}
