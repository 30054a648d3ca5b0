//! Property tests of the format: random valid models round-trip through the
//! codec and through JSON source; rule and destination order never matters;
//! random and mutated inputs never panic the decoder or the source parser.

use proptest::prelude::*;
use terra_policy::{
    compile_source, inspection_json, Access, Mir, MirBuilder, Missing, NetworkMode, ProcessTree,
    RootKind, RootMode, Scope,
};

#[derive(Debug, Clone)]
struct RuleSpec {
    access: Access,
    root: RootKind,
    /// As written (maybe unnormalized); normalization happens in the builder.
    path: String,
    scope: Option<Scope>,
    missing: Option<Missing>,
}

#[derive(Debug, Clone)]
struct DestSpec {
    host: String,
    port: u16,
    sni: Option<bool>,
    private: Option<bool>,
}

#[derive(Debug, Clone)]
struct ModelSpec {
    rules: Vec<RuleSpec>,
    network: NetworkMode,
    dests: Vec<DestSpec>,
    tree: ProcessTree,
    root_mode: RootMode,
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["a", "b", "src", ".git", "é", "文", "q\"b\\", "x y", "...", "..a"])
            .prop_map(str::to_string),
        1 => Just(String::new()),
        1 => Just(".".to_string()),
        1 => "[a-z0-9_.-]{1,8}".prop_filter("not ..", |s| s != ".."),
    ]
}

fn rule() -> impl Strategy<Value = RuleSpec> {
    (
        prop::sample::select(Access::ALL.to_vec()),
        prop::sample::select(RootKind::ALL.to_vec()),
        prop::collection::vec(segment(), 0..4),
        prop::option::of(prop::sample::select(Scope::ALL.to_vec())),
        prop::option::of(prop::sample::select(Missing::ALL.to_vec())),
    )
        .prop_map(|(access, root, segments, scope, missing)| {
            let joined = segments.join("/");
            let path = match root {
                RootKind::MinimalRuntime => String::new(),
                RootKind::Host => format!("/{joined}"),
                _ => joined.trim_start_matches('/').to_string(),
            };
            RuleSpec {
                access,
                root,
                path,
                scope,
                missing,
            }
        })
}

fn host() -> impl Strategy<Value = (String, bool)> {
    prop_oneof![
        3 => prop::collection::vec("[a-zA-Z]([a-zA-Z0-9-]{0,3}[a-zA-Z0-9])?", 1..4)
            .prop_map(|labels| (labels.join("."), false)),
        1 => any::<[u8; 4]>().prop_map(|o| (format!("{}.{}.{}.{}", o[0], o[1], o[2], o[3]), true)),
    ]
}

fn dest() -> impl Strategy<Value = DestSpec> {
    (
        host(),
        prop_oneof![Just(443u16), Just(80u16), 1u16..=65535],
        any::<Option<bool>>(),
        any::<Option<bool>>(),
    )
        .prop_map(|((host, ipv4), port, sni, private)| DestSpec {
            host,
            port,
            sni: if ipv4 { sni.map(|_| false) } else { sni },
            private,
        })
}

fn model() -> impl Strategy<Value = ModelSpec> {
    (
        prop::collection::vec(rule(), 0..24),
        prop::sample::select(NetworkMode::ALL.to_vec()),
        prop::collection::vec(dest(), 1..12),
        prop::sample::select(ProcessTree::ALL.to_vec()),
        prop::sample::select(RootMode::ALL.to_vec()),
    )
        .prop_map(|(rules, network, dests, tree, root_mode)| ModelSpec {
            rules,
            network,
            dests: if network == NetworkMode::Mediated {
                dests
            } else {
                Vec::new()
            },
            tree,
            root_mode,
        })
}

fn build(spec: &ModelSpec) -> Mir {
    let mut b = MirBuilder::new();
    for r in &spec.rules {
        b.add_rule(
            r.access,
            r.root,
            &r.path,
            r.scope.unwrap_or(Scope::Tree),
            r.missing.unwrap_or(Missing::Error),
        )
        .unwrap();
    }
    b.set_network(spec.network);
    for d in &spec.dests {
        b.add_destination(
            &d.host,
            d.port,
            d.sni.unwrap_or(false),
            d.private.unwrap_or(false),
        )
        .unwrap();
    }
    b.set_process_tree(spec.tree).set_root_mode(spec.root_mode);
    b.build().unwrap()
}

fn json_string(s: &str, escape_all: bool) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '/' if escape_all => o.push_str("\\/"),
            c if escape_all && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    o.push_str(&format!("\\u{unit:04X}"));
                }
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Renders a source document; `escape_all` writes non-ASCII and '/' as escapes.
fn source(spec: &ModelSpec, rules: &[RuleSpec], dests: &[DestSpec], escape_all: bool) -> String {
    let rules: Vec<String> = rules
        .iter()
        .map(|r| {
            let path = match r.root {
                RootKind::MinimalRuntime => "{\"special\": \"minimal-runtime\"}".to_string(),
                RootKind::Host => format!("{{\"absolute\": {}}}", json_string(&r.path, escape_all)),
                RootKind::Workspace | RootKind::Temp if r.path.is_empty() && escape_all => {
                    format!("{{\"root\": \"{}\"}}", r.root.name())
                }
                _ => format!(
                    "{{\"relative\": {}, \"root\": \"{}\"}}",
                    json_string(&r.path, escape_all),
                    r.root.name()
                ),
            };
            let mut o = format!("{{\"path\": {path}, \"access\": \"{}\"", r.access.name());
            if let Some(s) = r.scope {
                o.push_str(&format!(", \"scope\": \"{}\"", s.name()));
            }
            if let Some(m) = r.missing {
                o.push_str(&format!(", \"missing\": \"{}\"", m.name()));
            }
            o.push('}');
            o
        })
        .collect();
    let network = if spec.network == NetworkMode::Mediated {
        let ds: Vec<String> = dests
            .iter()
            .map(|d| {
                let mut o = format!(
                    "{{\"host\": {}, \"protocol\": \"tcp\", \"port\": {}",
                    json_string(&d.host, false),
                    d.port
                );
                if let Some(s) = d.sni {
                    o.push_str(&format!(", \"requireTlsSni\": {s}"));
                }
                if let Some(p) = d.private {
                    o.push_str(&format!(", \"allowPrivateAddresses\": {p}"));
                }
                o.push('}');
                o
            })
            .collect();
        format!(
            "{{\"allow\": [\n{}\n], \"mode\": \"mediated\"}}",
            ds.join(",\n")
        )
    } else {
        format!("{{\"mode\": \"{}\"}}", spec.network.name())
    };
    format!(
        "{{\n \"root\": {{\"mode\": \"{}\"}},\n \"filesystem\": {{\"rules\": [\n{}\n], \"default\": \"deny\"}},\n \
         \"network\": {network},\n \"process\": {{\"treeConfinement\": \"{}\"}},\n \"formatVersion\": 3\n}}\n",
        spec.root_mode.name(),
        rules.join(",\n"),
        spec.tree.name()
    )
}

fn shuffled_spec() -> impl Strategy<Value = (ModelSpec, Vec<RuleSpec>, Vec<DestSpec>)> {
    model().prop_flat_map(|m| {
        let rules = Just(m.rules.clone()).prop_shuffle();
        let dests = Just(m.dests.clone()).prop_shuffle();
        (Just(m), rules, dests)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_models_round_trip(spec in model()) {
        let mir = build(&spec);
        let decoded = Mir::decode(mir.bytes()).unwrap();
        prop_assert_eq!(decoded.bytes(), mir.bytes());
        prop_assert_eq!(&decoded, &mir);
        prop_assert_eq!(inspection_json(&decoded), inspection_json(&mir));
    }

    #[test]
    fn source_compiles_to_the_builders_bytes(spec in model()) {
        let mir = build(&spec);
        for escape_all in [false, true] {
            let src = source(&spec, &spec.rules, &spec.dests, escape_all);
            let compiled = compile_source(src.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}\n{src}")))?;
            prop_assert_eq!(compiled.bytes(), mir.bytes());
        }
    }

    #[test]
    fn rule_and_destination_order_never_changes_the_bytes((spec, rules, dests) in shuffled_spec()) {
        let a = compile_source(source(&spec, &spec.rules, &spec.dests, false).as_bytes()).unwrap();
        let b = compile_source(source(&spec, &rules, &dests, false).as_bytes()).unwrap();
        prop_assert_eq!(a.bytes(), b.bytes());
        prop_assert_eq!(a.decision_digest(), b.decision_digest());
    }

    #[test]
    fn random_bytes_never_panic_the_decoder(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(mir) = Mir::decode(&bytes) {
            prop_assert_eq!(mir.bytes(), &bytes[..]);
        }
    }

    #[test]
    fn random_headers_never_panic_the_decoder(
        header in prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(2u8), Just(3u8), any::<u8>()], 20),
        body in prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(2u8), any::<u8>()], 0..200),
    ) {
        let mut bytes = b"MMIR\0\x03\0\0".to_vec();
        bytes.extend_from_slice(&header[8..]);
        bytes.extend_from_slice(&body);
        if let Ok(mir) = Mir::decode(&bytes) {
            prop_assert_eq!(mir.bytes(), &bytes[..]);
        }
    }

    #[test]
    fn mutated_mir_never_panics_the_decoder(
        spec in model(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..6),
    ) {
        let mut bytes = build(&spec).bytes().to_vec();
        for (at, value, op) in edits {
            let i = at.index(bytes.len() + 1);
            match op {
                0 if i < bytes.len() => bytes[i] = value,
                1 => bytes.insert(i, value),
                2 if i < bytes.len() => { bytes.remove(i); }
                _ => bytes.truncate(i),
            }
        }
        match Mir::decode(&bytes) {
            Ok(mir) => prop_assert_eq!(mir.bytes(), &bytes[..]),
            Err(e) => prop_assert!(
                matches!(e.class(), terra_policy::ErrorClass::Format | terra_policy::ErrorClass::NonCanonical),
                "unexpected class {}", e
            ),
        }
    }

    #[test]
    fn random_strings_never_panic_the_source_parser(s in any::<String>()) {
        let _ = compile_source(s.as_bytes());
    }

    #[test]
    fn random_token_soup_never_panics_the_source_parser(
        tokens in prop::collection::vec(prop::sample::select(vec![
            "{", "}", "[", "]", ":", ",", " ", "\"", "\\", "\\u", "d800", "\\udc00", "0", "3", "-", ".", "e",
            "null", "true", "false", "\"formatVersion\"", "\"filesystem\"", "\"rules\"", "\"network\"",
            "\"mode\"", "\"allow\"", "\"path\"", "\"root\"", "\"workspace\"", "\"relative\"", "\"access\"",
            "\"read\"", "\"host\"", "\"port\"", "443", "\"mediated\"", "\"a.com\"", "\u{feff}", "\u{e9}",
        ]), 0..80),
    ) {
        let s: String = tokens.concat();
        let _ = compile_source(s.as_bytes());
    }

    #[test]
    fn mutated_sources_never_panic_and_accepted_ones_round_trip(
        spec in model(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<bool>()), 1..4),
    ) {
        let mut bytes = source(&spec, &spec.rules, &spec.dests, false).into_bytes();
        for (at, value, insert) in edits {
            let i = at.index(bytes.len());
            if insert { bytes.insert(i, value) } else { bytes[i] = value }
        }
        if let Ok(mir) = compile_source(&bytes) {
            prop_assert_eq!(Mir::decode(mir.bytes()).unwrap(), mir);
        }
    }
}
