//! The launch spec's strict encoding and the console relay's filter, with
//! examples and properties.

use proptest::prelude::*;
use terra_appcontainer::relay::{filter, Relay};
use terra_appcontainer::spec::{profile_name, MAX_GRANTS};
use terra_appcontainer::{Grant, GrantKind, LaunchSpec, Peer, Proto, Role, Scope};

fn spec() -> LaunchSpec {
    LaunchSpec {
        role: Role::Workload,
        executable: r"C:\Windows\System32\whoami.exe".into(),
        cwd: r"C:\Users\ann\proj".into(),
        grants: vec![
            Grant {
                kind: GrantKind::Write,
                scope: Scope::Tree,
                path: r"C:\Users\ann\proj".into(),
            },
            Grant {
                kind: GrantKind::Deny,
                scope: Scope::Exact,
                path: r"C:\Users\ann\proj\.env".into(),
            },
        ],
        peers: Vec::new(),
    }
}

#[test]
fn appcontainer_spec_round_trips_exactly() {
    let s = spec();
    let bytes = s.encode();
    assert!(bytes.starts_with(b"terra-appcontainer-launch 1\nrole workload\nexec "));
    assert!(bytes.ends_with(b"\nend\n"));
    assert_eq!(LaunchSpec::decode(&bytes).unwrap(), s);
    let broker = LaunchSpec {
        role: Role::Broker,
        executable: r"C:\Program Files\terra\terra.exe".into(),
        cwd: r"C:\".into(),
        grants: vec![],
        peers: vec![Peer {
            proto: Proto::Udp,
            port: 53,
            allow_private: true,
            host: "10.0.0.53".into(),
        }],
    };
    assert_eq!(LaunchSpec::decode(&broker.encode()).unwrap(), broker);
}

#[test]
fn appcontainer_spec_carries_a_plain_working_directory_never_verbatim() {
    let s = spec();
    let text = String::from_utf8(s.encode()).unwrap();
    let hex = |p: &str| p.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    assert!(
        text.contains(&format!("\ncwd {}\n", hex(r"C:\Users\ann\proj"))),
        "{text}"
    );
    // A verbatim working directory is not canonical: refused by encode's
    // check and by the decoder.
    let mut verbatim = s.clone();
    verbatim.cwd = r"\\?\C:\Users\ann\proj".into();
    assert!(verbatim.validate().is_err());
    let forged = text.replacen(
        &hex(r"C:\Users\ann\proj"),
        &hex(r"\\?\C:\Users\ann\proj"),
        2,
    );
    assert!(LaunchSpec::decode(forged.as_bytes()).is_err());
}

#[test]
fn appcontainer_spec_refuses_malformed_and_non_canonical_bytes() {
    let good = spec().encode();
    let text = String::from_utf8(good.clone()).unwrap();
    let mut bad: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"end\n".to_vec(),
        good[..good.len() - 1].to_vec(), // no final newline
        [&good[..], b"extra"].concat(),  // after end
        text.replacen("launch 1", "launch 2", 1).into_bytes(), // version
        text.replacen("role workload", "role admin", 1).into_bytes(),
        text.replacen("grant write", "grant execute", 1)
            .into_bytes(),
        text.replacen(" tree ", " subtree ", 1).into_bytes(),
        text.replacen("grant write tree ", "grant write tree  ", 1)
            .into_bytes(), // doubled space
        text.to_uppercase().into_bytes(), // hex case and keywords
        text.replacen("\n", "\r\n", 1).into_bytes(),
        [&good[..good.len() - 4], b"peer tcp 443 public 6162\nend\n"].concat(), // peer for a workload
    ];
    // Paths that are not canonical Windows paths, hex-encoded in place.
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    for p in [
        r"C:\Users\ann\proj\",
        r"c:\Users",
        r"\\?\C:\x",
        r"C:\a\..\b",
        "/usr/bin",
        r"C:\con",
    ] {
        bad.push(
            text.replacen(&hex(r"C:\Users\ann\proj"), &hex(p), 1)
                .into_bytes(),
        );
    }
    // Over the limits.
    let mut many = spec();
    many.grants = vec![many.grants[0].clone(); MAX_GRANTS + 1];
    bad.push(many.encode());
    bad.push(vec![b'x'; (1 << 20) + 1]);
    bad.push(vec![0xff, 0xfe]);
    for (i, b) in bad.iter().enumerate() {
        let r = LaunchSpec::decode(b);
        assert!(
            r.is_err(),
            "case {i} accepted: {:?}",
            String::from_utf8_lossy(b)
        );
    }
    // A broker with a write grant.
    let mut broker = spec();
    broker.role = Role::Broker;
    assert!(broker.validate().is_err());
}

#[test]
fn appcontainer_profile_names_never_repeat_for_different_randomness() {
    assert_ne!(profile_name(&[1; 16]), profile_name(&[2; 16]));
}

fn path_strategy() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!['C', 'D', 'Z']),
        prop::collection::vec("[a-zA-Z0-9_é ()+-]{1,8}[a-z0-9]", 0..5),
    )
        .prop_map(|(d, parts)| {
            if parts.is_empty() {
                format!("{d}:\\")
            } else {
                format!("{d}:\\{}", parts.join("\\"))
            }
        })
        .prop_filter("not a reserved name", |p| {
            terra_appcontainer::path::windows_path(p).as_deref() == Ok(p.as_str())
        })
}

proptest! {
    #[test]
    fn appcontainer_spec_round_trip_property(
        exe in path_strategy(),
        grants in prop::collection::vec((0u8..4, any::<bool>(), path_strategy()), 0..20),
    ) {
        let s = LaunchSpec {
            role: Role::Workload,
            executable: exe.clone(),
            cwd: exe,
            grants: grants.into_iter().map(|(k, t, path)| Grant {
                kind: [GrantKind::Read, GrantKind::Write, GrantKind::Deny, GrantKind::DenyWrite][k as usize],
                scope: if t { Scope::Tree } else { Scope::Exact },
                path,
            }).collect(),
            peers: Vec::new(),
        };
        let bytes = s.encode();
        prop_assert_eq!(LaunchSpec::decode(&bytes).unwrap(), s);
    }

    #[test]
    fn appcontainer_spec_decoder_never_panics_and_accepts_only_canonical(data in prop::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(s) = LaunchSpec::decode(&data) {
            prop_assert_eq!(s.encode(), data);
        }
    }
}

// ------------------------------------------------------------ console relay

fn f(s: &[u8]) -> String {
    String::from_utf8(filter(s)).unwrap()
}

#[test]
fn appcontainer_console_filter_defuses_escape_sequences() {
    assert_eq!(f(b"\x1b[31mred\x1b[0m"), "^[[31mred^[[0m");
    // OSC 52 (clipboard write) and a title set, ended by BEL or ST.
    assert_eq!(f(b"\x1b]52;c;aGk=\x07"), "^[]52;c;aGk=^G");
    assert_eq!(f(b"\x1b]0;title\x1b\\"), "^[]0;title^[\\");
    // Device status and answer-back requests, which make a terminal type.
    assert_eq!(f(b"\x1b[6n\x05"), "^[[6n^E");
}

#[test]
fn appcontainer_console_filter_replaces_c0_del_and_c1() {
    assert_eq!(f(b"a\x00b\x08c\x7fd"), "a^@b^Hc^?d");
    // C1 as UTF-8 (CSI U+009B, NEL U+0085) and as raw bytes.
    assert_eq!(f("x\u{9b}31my\u{85}".as_bytes()), "x\u{fffd}31my\u{fffd}");
    assert_eq!(f(b"x\x9b31m"), "x\u{fffd}31m");
    // TAB and LF pass.
    assert_eq!(f(b"a\tb\nc"), "a\tb\nc");
}

#[test]
fn appcontainer_console_filter_keeps_crlf_and_defuses_a_lone_cr() {
    assert_eq!(f(b"one\r\ntwo\r\n"), "one\r\ntwo\r\n");
    assert_eq!(f(b"secret\rpublic"), "secret^Mpublic");
    assert_eq!(f(b"end\r"), "end^M");
    assert_eq!(f(b"\r\r\n"), "^M\r\n");
    // A CR LF split between two reads is still CR LF.
    let mut r = Relay::new();
    let mut out = r.push(b"line\r");
    assert_eq!(out, b"line");
    out.extend(r.push(b"\nnext"));
    out.extend(r.finish());
    assert_eq!(out, b"line\r\nnext");
    // A CR followed by anything else after the split is a lone CR.
    let mut r = Relay::new();
    let mut out = r.push(b"a\r");
    out.extend(r.push(b"b"));
    assert_eq!(out, b"a^Mb");
}

#[test]
fn appcontainer_console_filter_keeps_utf8_intact_across_reads() {
    let text = "héllo wörld → 日本語 🦀\n";
    assert_eq!(f(text.as_bytes()), text);
    let bytes = text.as_bytes();
    for cut in 0..bytes.len() {
        let mut r = Relay::new();
        let mut out = r.push(&bytes[..cut]);
        out.extend(r.push(&bytes[cut..]));
        out.extend(r.finish());
        assert_eq!(String::from_utf8(out).unwrap(), text, "cut at {cut}");
    }
    // Invalid bytes become U+FFFD, an incomplete character at the end too.
    assert_eq!(f(b"a\xffb"), "a\u{fffd}b");
    assert_eq!(f(b"a\xe6\x97"), "a\u{fffd}");
}

proptest! {
    #[test]
    fn appcontainer_console_filter_output_has_no_control_characters(
        data in prop::collection::vec(any::<u8>(), 0..300),
        cuts in prop::collection::vec(0usize..300, 0..6),
    ) {
        let whole = filter(&data);
        let text = String::from_utf8(whole.clone()).expect("valid UTF-8");
        let chars: Vec<char> = text.chars().collect();
        for (i, c) in chars.iter().enumerate() {
            let ok = !c.is_control() || *c == '\t' || *c == '\n'
                || (*c == '\r' && chars.get(i + 1) == Some(&'\n'));
            prop_assert!(ok, "control {:?} at {} in {:?}", c, i, text);
        }
        // Any split into reads gives the same output.
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
        cuts.sort();
        let mut r = Relay::new();
        let mut out = Vec::new();
        let mut at = 0;
        for c in cuts {
            out.extend(r.push(&data[at..c]));
            at = c;
        }
        out.extend(r.push(&data[at..]));
        out.extend(r.finish());
        prop_assert_eq!(out, whole);
    }

    #[test]
    fn appcontainer_console_filter_passes_printable_text_unchanged(s in "[^\\p{Cc}]{0,200}") {
        prop_assert_eq!(f(s.as_bytes()), s);
    }
}

#[test]
fn appcontainer_fuzz_seeds_are_valid_specs() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/seeds/appcontainer_launch_spec"
    );
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        LaunchSpec::decode(&bytes).unwrap();
        n += 1;
    }
    assert_eq!(n, 2);
}

proptest! {
    #[test]
    fn appcontainer_command_line_round_trips_any_argv(
        program in "[^\u{0}\"]{0,12}",
        args in prop::collection::vec("[^\u{0}]{0,12}", 0..6),
    ) {
        let mut argv = vec![program];
        argv.extend(args);
        let line = terra_appcontainer::cmdline::command_line(r"C:\bin\p.exe", &argv).unwrap();
        prop_assert_eq!(terra_appcontainer::cmdline::split(&line), argv);
    }
}
