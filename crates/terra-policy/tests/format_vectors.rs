//! The published vectors, reproduced from source byte for byte, and the decoder
//! judged against an independent reference classifier on every one-byte
//! mutation, every truncation and every appended byte of every vector.

use terra_policy::host::{classify_host, HostKind};
use terra_policy::{compile_source, inspection_json, ErrorClass, Mir};
use terra_test_support::data::{unhex, vector as read, PUBLISHED_VECTORS as VECTORS};

fn mir_bytes(name: &str) -> Vec<u8> {
    unhex(read(name, "mir.hex"))
}

#[test]
fn every_vector_compiles_from_source_byte_for_byte() {
    for name in VECTORS {
        let mir =
            compile_source(&read(name, "source.json")).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(mir.bytes(), &mir_bytes(name)[..], "{name}: MIR bytes");
        let digest = String::from_utf8(read(name, "sha256")).unwrap();
        assert_eq!(
            mir.decision_digest(),
            digest.trim(),
            "{name}: decision digest"
        );
        let inspection = String::from_utf8(read(name, "inspect.json")).unwrap();
        assert_eq!(inspection_json(&mir), inspection, "{name}: inspection JSON");
    }
}

#[test]
fn every_vector_decodes_and_inspects_byte_for_byte() {
    for name in VECTORS {
        let bytes = mir_bytes(name);
        let mir = Mir::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(mir.bytes(), &bytes[..]);
        let inspection = String::from_utf8(read(name, "inspect.json")).unwrap();
        assert_eq!(inspection_json(&mir), inspection, "{name}");
        assert_eq!(
            mir,
            compile_source(&read(name, "source.json")).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn default_policy_compiles_and_says_what_it_promises() {
    use terra_policy::{Access, Missing, NetworkMode, ProcessTree, RootKind, RootMode, Scope};
    let mir = compile_source(terra_policy::DEFAULT_POLICY_SOURCE.as_bytes()).unwrap();
    let rules: Vec<_> = mir
        .rules()
        .iter()
        .map(|r| {
            (
                r.access,
                r.target.root,
                r.target.path.as_str(),
                r.target.scope,
                r.target.missing,
            )
        })
        .collect();
    assert_eq!(
        rules,
        vec![
            (
                Access::Read,
                RootKind::MinimalRuntime,
                "",
                Scope::Tree,
                Missing::Error
            ),
            (
                Access::Write,
                RootKind::Workspace,
                "",
                Scope::Tree,
                Missing::Error
            ),
            (
                Access::Write,
                RootKind::Temp,
                "",
                Scope::Tree,
                Missing::Error
            ),
        ]
    );
    assert_eq!(mir.network(), NetworkMode::None);
    assert_eq!(mir.process_tree(), ProcessTree::Required);
    assert_eq!(mir.root_mode(), RootMode::ReadOnly);
}

// ---------------------------------------------------------------------------
// An independent reference classifier, written from spec section 2 alone: it
// reads the records structurally, then checks the canonical-form rules
// directly (sorted, normalized, lowercase, merge table) instead of rebuilding.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Canonical,
    NonCanonical,
    Format,
}

fn be16(b: &[u8]) -> usize {
    usize::from(u16::from_be_bytes([b[0], b[1]]))
}
fn be32(b: &[u8]) -> usize {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
}

/// Is `path` valid for `root` (code), and is it already in normal form?
fn path_verdict(root: u8, path: &[u8]) -> Verdict {
    let Ok(path) = std::str::from_utf8(path) else {
        return Verdict::Format;
    };
    if path.contains('\0') || path.split('/').any(|s| s == "..") {
        return Verdict::Format;
    }
    // Minimal-runtime (1), workspace (2) and temp (3) paths are relative,
    // host (4) paths absolute.
    let normal = match root {
        4 => {
            if !path.starts_with('/') {
                return Verdict::Format;
            }
            path == "/" || path[1..].split('/').all(|s| !s.is_empty() && s != ".")
        }
        _ => {
            if path.starts_with('/') {
                return Verdict::Format;
            }
            path.is_empty() || path.split('/').all(|s| !s.is_empty() && s != ".")
        }
    };
    if normal {
        Verdict::Canonical
    } else {
        Verdict::NonCanonical
    }
}

fn reference_verdict(b: &[u8]) -> Verdict {
    use Verdict::*;
    if b.len() > 1 << 20
        || b.len() < 20
        || &b[0..4] != b"MMIR"
        || be16(&b[4..]) != 3
        || be16(&b[6..]) != 0
    {
        return Format;
    }
    let rules = be32(&b[8..]);
    let (net, tree, root, reserved) = (b[12], b[13], b[14], b[15]);
    let dests = be32(&b[16..]);
    if rules > 4096
        || dests > 1024
        || !(1..=3).contains(&net)
        || tree > 1
        || !(1..=2).contains(&root)
        || reserved != 0
    {
        return Format;
    }
    if (net == 3) != (dests > 0) {
        return Format;
    }
    let mut canonical = true;
    let mut pos = 20;
    // (root, path, scope, missing, access)
    let mut rule_keys: Vec<(u8, Vec<u8>, u8, u8, u8)> = Vec::new();
    for _ in 0..rules {
        let Some(h) = b.get(pos..pos + 12) else {
            return Format;
        };
        let (kind, access, root, scope, missing) = (h[0], h[1], h[2], h[3], h[4]);
        if kind != 1
            || !(1..=4).contains(&access)
            || !(1..=4).contains(&root)
            || !(1..=2).contains(&scope)
            || !(1..=2).contains(&missing)
            || h[5..8] != [0, 0, 0]
        {
            return Format;
        }
        let len = be32(&h[8..]);
        if len > 4096 {
            return Format;
        }
        let Some(path) = b.get(pos + 12..pos + 12 + len) else {
            return Format;
        };
        match path_verdict(root, path) {
            Format => return Format,
            NonCanonical => canonical = false,
            Canonical => {}
        }
        rule_keys.push((root, path.to_vec(), scope, missing, access));
        pos += 12 + len;
    }
    let mut dest_keys: Vec<(Vec<u8>, u16)> = Vec::new();
    for _ in 0..dests {
        let Some(h) = b.get(pos..pos + 8) else {
            return Format;
        };
        if h[0] != 2 || h[1] != 1 || be16(&h[2..]) == 0 || h[4] & !3 != 0 || h[5] != 0 {
            return Format;
        }
        let len = be16(&h[6..]);
        if !(1..=253).contains(&len) {
            return Format;
        }
        let Some(host) = b.get(pos + 8..pos + 8 + len) else {
            return Format;
        };
        let Ok(host) = std::str::from_utf8(host) else {
            return Format;
        };
        match classify_host(&host.to_ascii_lowercase()) {
            Err(_) => return Format,
            Ok(HostKind::Ipv4Literal) if h[4] & 1 != 0 => return Format,
            Ok(_) => {}
        }
        if host.bytes().any(|c| c.is_ascii_uppercase()) {
            canonical = false;
        }
        dest_keys.push((host.as_bytes().to_vec(), be16(&h[2..]) as u16));
        pos += 8 + len;
    }
    if pos != b.len() {
        return Format;
    }
    // Sorted strictly; the merge table allows per target at most one grant
    // (read or write) plus a deny-write, or a deny alone.
    if rule_keys.windows(2).any(|w| w[0] >= w[1]) || dest_keys.windows(2).any(|w| w[0] >= w[1]) {
        canonical = false;
    }
    let mut i = 0;
    while i < rule_keys.len() {
        let target = |k: &(u8, Vec<u8>, u8, u8, u8)| (k.0, k.1.clone(), k.2, k.3);
        let mut j = i;
        let mut accesses = Vec::new();
        while j < rule_keys.len() && target(&rule_keys[j]) == target(&rule_keys[i]) {
            accesses.push(rule_keys[j].4);
            j += 1;
        }
        accesses.sort();
        let allowed: [&[u8]; 6] = [&[1], &[2], &[3], &[4], &[1, 4], &[2, 4]];
        if !allowed.contains(&accesses.as_slice()) {
            canonical = false;
        }
        i = j;
    }
    if canonical {
        Canonical
    } else {
        NonCanonical
    }
}

fn actual_verdict(bytes: &[u8]) -> Verdict {
    match Mir::decode(bytes) {
        Ok(mir) => {
            assert_eq!(
                mir.bytes(),
                bytes,
                "an accepted document must be its own canonical encoding"
            );
            Verdict::Canonical
        }
        Err(e) => match e.class() {
            ErrorClass::Format => Verdict::Format,
            ErrorClass::NonCanonical => Verdict::NonCanonical,
            other => panic!("decode refused with class {other}: {e}"),
        },
    }
}

/// Counts how often each verdict occurs, to show the mutations reach every class.
#[derive(Default, Debug)]
struct Tally {
    canonical: usize,
    non_canonical: usize,
    format: usize,
}

fn check(bytes: &[u8], what: &str, tally: &mut Tally) {
    let expected = reference_verdict(bytes);
    assert_eq!(actual_verdict(bytes), expected, "{what}: {bytes:02x?}");
    match expected {
        Verdict::Canonical => tally.canonical += 1,
        Verdict::NonCanonical => tally.non_canonical += 1,
        Verdict::Format => tally.format += 1,
    }
}

#[test]
fn reference_classifier_accepts_every_vector() {
    for name in VECTORS {
        assert_eq!(
            reference_verdict(&mir_bytes(name)),
            Verdict::Canonical,
            "{name}"
        );
    }
}

#[test]
fn every_one_byte_mutation_of_every_vector_gets_the_right_verdict() {
    let mut tally = Tally::default();
    for name in VECTORS {
        let original = mir_bytes(name);
        for pos in 0..original.len() {
            for value in 0..=255u8 {
                if value == original[pos] {
                    continue;
                }
                let mut m = original.clone();
                m[pos] = value;
                check(&m, &format!("{name} byte {pos} = {value:#04x}"), &mut tally);
            }
        }
    }
    // The sweep must exercise all three outcomes (a one-byte change can also
    // give another valid document, e.g. network none -> direct).
    assert!(
        tally.canonical > 0 && tally.non_canonical > 0 && tally.format > 0,
        "{tally:?}"
    );
}

#[test]
fn every_truncation_and_every_appended_byte_is_format() {
    for name in VECTORS {
        let original = mir_bytes(name);
        for len in 0..original.len() {
            let e = Mir::decode(&original[..len]).unwrap_err();
            assert_eq!(
                e.class(),
                ErrorClass::Format,
                "{name} truncated to {len}: {e}"
            );
        }
        for value in 0..=255u8 {
            let mut m = original.clone();
            m.push(value);
            let e = Mir::decode(&m).unwrap_err();
            assert_eq!(e.class(), ErrorClass::Format, "{name} + {value:#04x}: {e}");
        }
    }
}

/// Field by field, named: a mutation of every header field and every record
/// field, with the class it must get (`None`: another canonical document).
#[test]
fn named_field_mutations_get_their_class() {
    use ErrorClass::{Format, NonCanonical};
    // deny-write: header 0..20, then 12-byte rules at 20, 32, 44 (path ""),
    // 56 (".git", 16 bytes), 72 ("secrets", 19 bytes).
    let deny = mir_bytes("deny-write");
    // mediated-flags: one rule at 20 (path "src" at 32..35), destinations from
    // 35 (host "api.github.com" at 43).
    let flags = mir_bytes("mediated-flags");
    let set = |base: &[u8], at: usize, v: &[u8]| {
        let mut m = base.to_vec();
        m[at..at + v.len()].copy_from_slice(v);
        m
    };
    let mut swapped = deny[..56].to_vec();
    swapped.extend_from_slice(&deny[72..]);
    swapped.extend_from_slice(&deny[56..72]);
    let cases: Vec<(&str, Vec<u8>, Option<ErrorClass>)> = vec![
        ("magic", set(&deny, 0, b"MMIQ"), Some(Format)),
        ("version 2", set(&deny, 4, &[0, 2]), Some(Format)),
        ("version 4", set(&deny, 4, &[0, 4]), Some(Format)),
        ("header flags", set(&deny, 6, &[0, 1]), Some(Format)),
        ("rule count + 1", set(&deny, 8, &[0, 0, 0, 6]), Some(Format)),
        ("rule count - 1", set(&deny, 8, &[0, 0, 0, 4]), Some(Format)),
        (
            "rule count over 4096",
            set(&deny, 8, &[0, 0, 0x10, 1]),
            Some(Format),
        ),
        ("network 0", set(&deny, 12, &[0]), Some(Format)),
        ("network 4", set(&deny, 12, &[4]), Some(Format)),
        ("network direct", set(&deny, 12, &[2]), None),
        (
            "network mediated without destinations",
            set(&deny, 12, &[3]),
            Some(Format),
        ),
        (
            "network none with destinations",
            set(&flags, 12, &[1]),
            Some(Format),
        ),
        ("process tree 2", set(&deny, 13, &[2]), Some(Format)),
        ("process tree disabled", set(&deny, 13, &[0]), None),
        ("root mode 0", set(&deny, 14, &[0]), Some(Format)),
        ("root mode 3", set(&deny, 14, &[3]), Some(Format)),
        ("reserved", set(&deny, 15, &[1]), Some(Format)),
        (
            "destination count + 1",
            set(&flags, 16, &[0, 0, 0, 5]),
            Some(Format),
        ),
        (
            "destination count over 1024",
            set(&flags, 16, &[0, 0, 4, 1]),
            Some(Format),
        ),
        ("rule kind", set(&deny, 20, &[2]), Some(Format)),
        ("rule access 0", set(&deny, 21, &[0]), Some(Format)),
        ("rule access 5", set(&deny, 21, &[5]), Some(Format)),
        ("rule root 0", set(&deny, 22, &[0]), Some(Format)),
        ("rule root 5", set(&deny, 22, &[5]), Some(Format)),
        ("rule scope 3", set(&deny, 23, &[3]), Some(Format)),
        ("rule missing 0", set(&deny, 24, &[0]), Some(Format)),
        ("rule padding", set(&deny, 25, &[0, 1, 0]), Some(Format)),
        (
            "rule path length",
            set(&deny, 28, &[0, 0, 0, 1]),
            Some(Format),
        ),
        (
            "rule path over 4096",
            set(&deny, 28, &[0, 0, 0x10, 1]),
            Some(Format),
        ),
        (
            "two deny-writes on one target",
            set(&deny, 21, &[4]),
            Some(NonCanonical),
        ),
        (
            "read beside write on one target",
            set(&deny, 33, &[1]),
            Some(NonCanonical),
        ),
        ("records swapped", swapped, Some(NonCanonical)),
        (
            "deny beside other rules",
            set(&deny, 33, &[3]),
            Some(NonCanonical),
        ),
        (
            "rule path not normalized",
            set(&flags, 32, b"./s"),
            Some(NonCanonical),
        ),
        ("rule path '..'", set(&flags, 32, b"../"), Some(Format)),
        (
            "rule path absolute under workspace",
            set(&flags, 32, b"/sr"),
            Some(Format),
        ),
        (
            "rule path not UTF-8",
            set(&flags, 32, &[0xff, b'r', b'c']),
            Some(Format),
        ),
        ("rule path with NUL", set(&flags, 32, b"s\0c"), Some(Format)),
        (
            "rule root host without '/'",
            set(&flags, 22, &[4]),
            Some(Format),
        ),
        // A minimal-runtime rule with a relative path is valid MIR.
        (
            "rule root minimal-runtime with a path",
            set(&flags, 22, &[1]),
            None,
        ),
        (
            "rule root minimal-runtime with an absolute path",
            set(&set(&flags, 22, &[1]), 32, b"/sr"),
            Some(Format),
        ),
        ("rule root temp", set(&flags, 22, &[3]), None),
        ("destination kind", set(&flags, 35, &[1]), Some(Format)),
        ("destination protocol", set(&flags, 36, &[6]), Some(Format)),
        ("destination port 0", set(&flags, 37, &[0, 0]), Some(Format)),
        (
            "destination port changed, order kept",
            set(&flags, 37, &[0, 80]),
            None,
        ),
        (
            "destination flags unknown bit",
            set(&flags, 39, &[4]),
            Some(Format),
        ),
        ("destination flags sni", set(&flags, 39, &[1]), None),
        ("destination padding", set(&flags, 40, &[1]), Some(Format)),
        (
            "destination host length 0",
            set(&flags, 41, &[0, 0]),
            Some(Format),
        ),
        (
            "destination host length 254",
            set(&flags, 41, &[0, 254]),
            Some(Format),
        ),
        (
            "destination host uppercase",
            set(&flags, 43, b"A"),
            Some(NonCanonical),
        ),
        (
            "destination host invalid",
            set(&flags, 43, b"_"),
            Some(Format),
        ),
        (
            "destinations out of order",
            set(&flags, 43, b"z"),
            Some(NonCanonical),
        ),
    ];
    for (what, bytes, class) in cases {
        match class {
            None => {
                let mir = Mir::decode(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(mir.bytes(), &bytes[..], "{what}");
                assert_eq!(reference_verdict(&bytes), Verdict::Canonical, "{what}");
            }
            Some(class) => {
                let e = Mir::decode(&bytes)
                    .err()
                    .unwrap_or_else(|| panic!("{what}: accepted"));
                assert_eq!(e.class(), class, "{what}: {e}");
                let expected = if class == Format {
                    Verdict::Format
                } else {
                    Verdict::NonCanonical
                };
                assert_eq!(reference_verdict(&bytes), expected, "{what}");
            }
        }
    }
}

#[test]
fn oversized_mir_is_format() {
    let mut big = mir_bytes("minimal");
    big.resize((1 << 20) + 1, 0);
    assert_eq!(Mir::decode(&big).unwrap_err().class(), ErrorClass::Format);
}

#[test]
fn decoding_and_compiling_agree_on_a_rich_source() {
    let src = r#"{
      "formatVersion": 3,
      "filesystem": { "default": "deny", "rules": [
        { "access": "read", "path": { "absolute": "/opt//tools/" }, "scope": "exact" },
        { "access": "deny", "path": { "absolute": "/" }, "missing": "skip" },
        { "access": "write", "path": { "root": "temp" } },
        { "access": "read", "path": { "root": "temp" } },
        { "access": "deny-write", "path": { "root": "workspace", "relative": "a/\u00e9\ud83d\ude00" } }
      ] },
      "network": { "mode": "mediated", "allow": [
        { "protocol": "tcp", "host": "10.0.0.1", "port": 65535, "allowPrivateAddresses": true },
        { "protocol": "tcp", "host": "x-1.Example", "port": 1, "requireTlsSni": true }
      ] },
      "process": { "treeConfinement": "disabled" },
      "root": { "mode": "ephemeral-write" }
    }"#;
    let mir = compile_source(src.as_bytes()).unwrap();
    assert_eq!(Mir::decode(mir.bytes()).unwrap(), mir);
    let paths: Vec<&str> = mir.rules().iter().map(|r| r.target.path.as_str()).collect();
    assert_eq!(paths, vec!["a/é😀", "", "/", "/opt/tools"]);
    let hosts: Vec<&str> = mir.destinations().iter().map(|d| d.host.as_str()).collect();
    assert_eq!(hosts, vec!["10.0.0.1", "x-1.example"]);
    let json = inspection_json(&mir);
    assert!(json.contains("\"path\": \"a/é😀\""), "{json}");
    assert!(json.contains("\"mode\": \"ephemeral-write\""), "{json}");
}
