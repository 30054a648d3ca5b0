//! Profile rendering: golden files for each role and mode, plus properties
//! that hold for every spec. `TERRA_BLESS=1` rewrites the golden files.

use proptest::prelude::*;
use terra_seatbelt::path::seatbelt_path;
use terra_seatbelt::runtime::{NEW_PTY_REGEX, XCRUN_CACHE_REGEX};
use terra_seatbelt::{
    lower_broker, render, Grant, GrantKind, LaunchSpec, Network, Profile, Role, Scope, BROKER_PORT,
    MACOS_RESOLVER_FILES,
};

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
        mark: Some("/Users/ann/.local/state/terra/runs/r1/tree.mark".into()),
        terminals: vec!["/dev/ttys003".into()],
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

fn broker(port: u16) -> LaunchSpec {
    lower_broker("/usr/local/bin/terra", port, &MACOS_RESOLVER_FILES).unwrap()
}

#[test]
fn seatbelt_golden_broker() {
    golden("broker", &render(&broker(41234)).unwrap());
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
        ["(allow network-outbound (remote tcp (string-append \"localhost:\" (param \"BROKER_PORT\"))))"]
    );
}

#[test]
fn seatbelt_mediated_port_is_a_parameter_not_text() {
    type Make = fn(u16) -> LaunchSpec;
    let makers: [(&str, Make); 2] = [
        ("workload", |port| workload(Network::Mediated { port })),
        ("broker", broker),
    ];
    for (role, make) in makers {
        // The text is the same whatever the port; only the parameter differs.
        let first = render(&make(1)).unwrap();
        for port in [2, 3128, 41234, u16::MAX] {
            let p = render(&make(port)).unwrap();
            assert_eq!(
                p.text, first.text,
                "{role}: the port {port} changed the text"
            );
            let value: Vec<&str> = p
                .parameters
                .iter()
                .filter(|(k, _)| k == BROKER_PORT)
                .map(|(_, v)| v.as_str())
                .collect();
            assert_eq!(value, [port.to_string()], "{role}");
        }
        assert!(first.text.contains("(param \"BROKER_PORT\")"), "{role}");
    }
    // Only a mediated workload names the broker's port.
    for net in [Network::None, Network::Direct] {
        let p = render(&workload(net)).unwrap();
        assert!(!p.parameters.iter().any(|(k, _)| k == BROKER_PORT));
        assert!(!p.text.contains(BROKER_PORT));
    }
}

#[test]
fn seatbelt_broker_writes_no_file_and_starts_no_process() {
    let text = render(&broker(41234)).unwrap().text;
    assert!(!text.contains("file-write"), "{text}");
    assert!(!text.contains("process-fork"), "{text}");
    // The one exec is the launcher's exec of the broker itself.
    let exec: Vec<&str> = text.lines().filter(|l| l.contains("process")).collect();
    assert_eq!(
        exec,
        ["(allow process-exec (literal (param \"EXECUTABLE\")))"]
    );
    for absent in [
        "(allow default)",
        "signal",
        "mach-lookup",
        "system-socket",
        "sysctl",
    ] {
        assert!(!text.contains(absent), "{absent}: {text}");
    }
}

#[test]
fn seatbelt_broker_network_is_client_and_its_own_port_only() {
    let text = render(&broker(41234)).unwrap().text;
    let net: Vec<&str> = text.lines().filter(|l| l.contains("network")).collect();
    assert_eq!(
        net,
        [
            "(allow network-outbound (remote ip \"*:*\"))",
            "(allow network-inbound (local udp \"*:*\"))",
            "(allow network-inbound (local tcp (string-append \"localhost:\" (param \"BROKER_PORT\"))))",
        ]
    );
    // It binds nothing (terra run bound its listeners) and reaches no Unix socket.
    assert!(!text.contains("network-bind"), "{text}");
    assert!(!text.contains("unix-socket"), "{text}");
    assert!(!text.contains("network*"), "{text}");
}

#[test]
fn seatbelt_broker_reads_only_its_resolver_files() {
    let p = render(&broker(41234)).unwrap();
    let reads: Vec<&str> = p
        .text
        .lines()
        .filter(|l| l.starts_with("(allow file-read"))
        .collect();
    let mut want = vec!["(allow file-read* (literal (param \"EXECUTABLE\")))".to_string()];
    for (i, f) in MACOS_RESOLVER_FILES.iter().enumerate() {
        want.push(format!(
            "(allow file-read* (literal (param \"GRANT_{i}\")))"
        ));
        assert!(p
            .parameters
            .contains(&(format!("GRANT_{i}"), f.to_string())));
    }
    // The rest is metadata of the files' ancestors.
    let (rules, meta): (Vec<&str>, Vec<&str>) = reads
        .into_iter()
        .partition(|l| !l.starts_with("(allow file-read-metadata"));
    assert_eq!(rules, want);
    assert!(meta
        .iter()
        .all(|l| l.starts_with("(allow file-read-metadata (literal (param \"ANCESTOR_")));
    // A write grant, a deny or a tree grant of another kind is refused.
    let mut spec = broker(41234);
    for kind in [GrantKind::Write, GrantKind::Deny, GrantKind::DenyWrite] {
        spec.grants[0].kind = kind;
        assert!(render(&spec).is_err(), "{kind:?}");
    }
    assert!(lower_broker("/usr/local/bin/terra", 1, &["etc/hosts"]).is_err());
    assert!(lower_broker("bin/terra", 1, &[]).is_err());
    // /etc and /var are rendered in their /private form.
    let s = lower_broker(
        "/usr/local/bin/terra",
        1,
        &["/etc/hosts", "/var/run/resolv.conf"],
    )
    .unwrap();
    let paths: Vec<&str> = s.grants.iter().map(|g| g.path.as_str()).collect();
    assert_eq!(
        paths,
        ["/private/etc/hosts", "/private/var/run/resolv.conf"]
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
        mark: None,
        terminals: Vec::new(),
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
        prop::option::of(arb_path()),
        prop::collection::vec(arb_path(), 0..=3),
        prop::collection::vec((kind, scope, arb_path()), 0..8),
    )
        .prop_map(|(executable, network, mark, terminals, g)| LaunchSpec {
            role: Role::Workload,
            network,
            executable,
            mark,
            terminals,
            grants: g
                .into_iter()
                .map(|(kind, scope, path)| Grant { kind, scope, path })
                .collect(),
        })
}

proptest! {
    #[test]
    fn seatbelt_broker_profile_has_no_path_text(
        exe in arb_path(),
        files in prop::collection::vec(arb_path(), 0..4),
        port in 1u16..,
    ) {
        let files: Vec<&str> = files.iter().map(String::as_str).collect();
        let spec = lower_broker(&exe, port, &files).unwrap();
        let p = render(&spec).unwrap();
        prop_assert!(!p.text.contains('/'), "{}", p.text);
        for (i, g) in spec.grants.iter().enumerate() {
            let name = format!("GRANT_{i}");
            prop_assert!(p.parameters.iter().any(|(k, v)| *k == name && *v == g.path));
        }
        prop_assert!(!p.text.contains("file-write"));
    }

    #[test]
    fn seatbelt_profile_has_no_path_text(spec in arb_spec()) {
        let p = render(&spec).unwrap();
        // Not one slash outside the two fixed patterns (new ptys, the
        // xcrun cache): every path, fixed or from the plan, is a parameter.
        let rest = p.text.replace(NEW_PTY_REGEX, "").replace(XCRUN_CACHE_REGEX, "");
        prop_assert!(!rest.contains('/'), "{}", p.text);
        for g in &spec.grants {
            prop_assert!(!rest.contains(&g.path));
        }
        for t in spec.mark.iter().chain(&spec.terminals) {
            prop_assert!(!rest.contains(t.as_str()));
            prop_assert!(p.parameters.iter().any(|(_, v)| v == t));
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
