//! The windows backend's pure logic: DACL entries per rule kind, the
//! object walk and its cap, capabilities per role, the plan from a real
//! SandboxPlan, its rendering, and the broker wrapper's ledger.

use std::collections::HashMap;
use std::net::SocketAddr;

use terra_appcontainer::dacl::{dacl_entries, Origin, PACKAGE_SID_PLACEHOLDER};
use terra_appcontainer::launch::{declared_capabilities, role_capabilities, LaunchPlan};
use terra_appcontainer::objects::{explicit_entries, scan, Kind, Tree};
use terra_appcontainer::rights::*;
use terra_appcontainer::sockets::{Ledger, LIFETIME_MS, MAX_OPEN};
use terra_appcontainer::{render, Error, Grant, GrantKind, PathStyle, Peer, Proto, Role, Scope};
use terra_policy::Capability;

const W: PathStyle = PathStyle::Windows;

fn grant(kind: GrantKind, scope: Scope, path: &str) -> Grant {
    Grant {
        kind,
        scope,
        path: path.into(),
    }
}

fn plan(grants: Vec<Grant>) -> LaunchPlan {
    LaunchPlan::new(
        W,
        Role::Workload,
        r"C:\Windows\System32\whoami.exe",
        r"C:\",
        r"C:\Program Files\terra\terra.exe",
        grants,
        Vec::new(),
    )
    .unwrap()
}

// ------------------------------------------------------------ DACL entries

#[test]
fn appcontainer_dacl_read_allows_read_and_execute_and_denies_write_delete_permissions() {
    let e = &dacl_entries(&[grant(GrantKind::Read, Scope::Tree, r"C:\tools")], W)[0];
    assert_eq!(e.origin, Origin::Rule(GrantKind::Read));
    assert_eq!(e.allow, FILE_GENERIC_READ | FILE_GENERIC_EXECUTE);
    assert_eq!(
        e.allow & (FILE_WRITE_DATA | FILE_APPEND_DATA | DELETE | WRITE_DAC),
        0
    );
    assert_eq!(
        e.deny,
        FILE_WRITE_DATA
            | FILE_APPEND_DATA
            | FILE_WRITE_EA
            | FILE_WRITE_ATTRIBUTES
            | FILE_DELETE_CHILD
            | DELETE
            | WRITE_DAC
            | WRITE_OWNER
    );
    assert_eq!(e.inheritance, OBJECT_INHERIT_ACE | CONTAINER_INHERIT_ACE);
}

#[test]
fn appcontainer_dacl_write_omits_delete_child_and_denies_permission_changes() {
    let e = &dacl_entries(&[grant(GrantKind::Write, Scope::Tree, r"C:\proj")], W)[0];
    assert_eq!(e.allow, 0x0013_01bf);
    assert_eq!(e.allow & FILE_DELETE_CHILD, 0, "{:?}", right_names(e.allow));
    for needed in [
        FILE_WRITE_DATA,
        FILE_APPEND_DATA,
        DELETE,
        FILE_READ_DATA,
        FILE_EXECUTE,
    ] {
        assert_ne!(e.allow & needed, 0, "{:?}", right_names(needed));
    }
    assert_eq!(e.deny, WRITE_DAC | WRITE_OWNER);
}

#[test]
fn appcontainer_dacl_deny_denies_all_access_and_allows_nothing() {
    let e = &dacl_entries(&[grant(GrantKind::Deny, Scope::Tree, r"C:\proj\secret")], W)[0];
    assert_eq!((e.allow, e.deny), (0, FILE_ALL_ACCESS));
    let e = &dacl_entries(
        &[grant(
            GrantKind::DenyWrite,
            Scope::Exact,
            r"C:\proj\Cargo.lock",
        )],
        W,
    )[0];
    assert_eq!((e.allow, e.deny), (0, DENY_WRITE));
    assert_eq!(e.inheritance, NO_INHERITANCE);
}

#[test]
fn appcontainer_dacl_deny_write_inside_write_keeps_every_ancestor_in_place() {
    let grants = [
        grant(GrantKind::Write, Scope::Tree, r"C:\proj"),
        grant(GrantKind::DenyWrite, Scope::Tree, r"C:\proj\.git\hooks"),
        grant(GrantKind::Deny, Scope::Tree, r"C:\proj\.git\secret"),
    ];
    let entries = dacl_entries(&grants, W);
    let kept: Vec<(&str, &str)> = entries
        .iter()
        .filter_map(|e| match &e.origin {
            Origin::KeepsInPlace { target } => Some((e.path.as_str(), target.as_str())),
            _ => None,
        })
        .collect();
    // The write root and .git, each once (the second target shares them).
    assert_eq!(
        kept,
        [
            (r"C:\proj", r"C:\proj\.git\hooks"),
            (r"C:\proj\.git", r"C:\proj\.git\hooks")
        ]
    );
    for e in entries
        .iter()
        .filter(|e| e.origin.name() == "keep-in-place")
    {
        assert_eq!(
            (e.allow, e.deny, e.scope),
            (0, DELETE | WRITE_DAC | WRITE_OWNER, Scope::Exact)
        );
        assert_eq!(e.inheritance, NO_INHERITANCE);
    }
    // The deny-write itself: no allow, every write right denied, inherited below.
    let dw = &entries[1];
    assert_eq!((dw.allow, dw.deny), (0, DENY_WRITE));
    assert_eq!(dw.inheritance, OBJECT_INHERIT_ACE | CONTAINER_INHERIT_ACE);
}

#[test]
fn appcontainer_dacl_read_inside_write_is_kept_in_place_but_outside_is_not() {
    let grants = [
        grant(GrantKind::Write, Scope::Tree, r"C:\proj"),
        grant(GrantKind::Read, Scope::Tree, r"C:\proj\vendor"),
        grant(GrantKind::Read, Scope::Tree, r"C:\tools"),
        // Case differs: still inside on Windows.
        grant(GrantKind::Deny, Scope::Exact, r"C:\PROJ\key.pem"),
    ];
    let entries = dacl_entries(&grants, W);
    let kept: Vec<&str> = entries
        .iter()
        .filter(|e| e.origin.name() == "keep-in-place")
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(kept, [r"C:\proj"]);
    // An exact write grant on a directory keeps nothing in place.
    let entries = dacl_entries(
        &[
            grant(GrantKind::Write, Scope::Exact, r"C:\proj"),
            grant(GrantKind::Deny, Scope::Tree, r"C:\proj\s"),
        ],
        W,
    );
    assert_eq!(entries.len(), 2);
}

#[test]
fn appcontainer_tree_grant_is_one_inheritable_ace_on_its_root() {
    let tree = Fake::new(&[
        (r"C:\w", Kind::Directory),
        (r"C:\w\a.txt", Kind::File),
        (r"C:\w\sub", Kind::Directory),
        (r"C:\w\sub\b.txt", Kind::File),
    ]);
    // A tree: one entry, on the root, inheritable by files and directories.
    let t = dacl_entries(&[grant(GrantKind::Write, Scope::Tree, r"C:\w")], W);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].path, r"C:\w");
    assert_eq!(t[0].inheritance, OBJECT_INHERIT_ACE | CONTAINER_INHERIT_ACE);
    let o = scan(&t, W, &tree).unwrap();
    assert_eq!(o.scanned, 3);
    assert!(o.protected.is_empty());
    // Nothing inherits: no entry of its own for any child.
    assert!(explicit_entries(&t, &o).is_empty());
    // Exact: the object alone, not scanned below.
    let exact = dacl_entries(&[grant(GrantKind::Write, Scope::Exact, r"C:\w")], W);
    assert_eq!(exact[0].inheritance, NO_INHERITANCE);
    assert_eq!(scan(&exact, W, &tree).unwrap().scanned, 0);
}

// ------------------------------------------------------------ the scan

/// A filesystem as a table of paths and kinds, and the protected ones.
struct Fake {
    kinds: HashMap<String, Kind>,
    protected: std::collections::HashSet<String>,
}

impl Fake {
    fn new(entries: &[(&str, Kind)]) -> Fake {
        Fake {
            kinds: entries.iter().map(|(p, k)| (p.to_string(), *k)).collect(),
            protected: Default::default(),
        }
    }
}

impl Tree for Fake {
    fn kind(&self, path: &str) -> std::io::Result<Kind> {
        self.kinds
            .get(path)
            .copied()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    }
    fn children(&self, dir: &str) -> std::io::Result<Vec<(String, Kind)>> {
        let prefix = format!("{dir}\\");
        let mut out: Vec<(String, Kind)> = self
            .kinds
            .iter()
            .filter_map(|(p, k)| {
                p.strip_prefix(&prefix)
                    .filter(|rest| !rest.contains('\\'))
                    .map(|n| (n.to_string(), *k))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
    fn protected(&self, path: &str) -> std::io::Result<bool> {
        Ok(self.protected.contains(path))
    }
}

#[test]
fn appcontainer_grants_have_no_object_cap_50000_files_are_one_ace() {
    // A repository of 50,000 files (node_modules, target/, .venv): the old
    // launcher refused anything past 16,384 objects.
    let mut v: Vec<(String, Kind)> = vec![(r"C:\repo".to_string(), Kind::Directory)];
    for d in 0..50 {
        v.push((format!(r"C:\repo\d{d:02}"), Kind::Directory));
        for f in 0..1000 {
            v.push((format!(r"C:\repo\d{d:02}\f{f:04}"), Kind::File));
        }
    }
    let tree = Fake {
        kinds: v.into_iter().collect(),
        protected: Default::default(),
    };
    let e = dacl_entries(&[grant(GrantKind::Write, Scope::Tree, r"C:\repo")], W);
    let o = scan(&e, W, &tree).unwrap();
    assert_eq!(o.scanned, 50 + 50_000);
    assert!(explicit_entries(&e, &o).is_empty());
    assert_eq!(e.len(), 1);
}

#[test]
fn appcontainer_protected_dacls_inside_a_tree_get_explicit_aces_only_there() {
    let mut tree = Fake::new(&[
        (r"C:\w", Kind::Directory),
        (r"C:\w\plain.txt", Kind::File),
        (r"C:\w\keys", Kind::Directory),
        (r"C:\w\keys\k.pem", Kind::File),
        (r"C:\w\secret", Kind::Directory),
        (r"C:\w\secret\s.txt", Kind::File),
    ]);
    tree.protected.insert(r"C:\w\keys".into());
    tree.protected.insert(r"C:\w\secret\s.txt".into());
    let e = dacl_entries(
        &[
            grant(GrantKind::Write, Scope::Tree, r"C:\w"),
            grant(GrantKind::Deny, Scope::Tree, r"C:\w\secret"),
        ],
        W,
    );
    let o = scan(&e, W, &tree).unwrap();
    let paths: Vec<&str> = o.protected.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, [r"C:\w\keys", r"C:\w\secret\s.txt"]);
    // s.txt lies below both the write tree and the deny tree.
    assert_eq!(o.protected[1].entries, [0, 1]);
    let x = explicit_entries(&e, &o);
    let rows: Vec<(&str, &str, u32, u32, u32)> = x
        .iter()
        .map(|d| {
            (
                d.path.as_str(),
                d.scope.name(),
                d.allow,
                d.deny,
                d.inheritance,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            // A protected directory: inheritable again, so its own
            // children are covered by propagation from it.
            (
                r"C:\w\keys",
                "tree",
                ALLOW_WRITE,
                DENY_PERMISSIONS,
                OBJECT_INHERIT_ACE | CONTAINER_INHERIT_ACE
            ),
            (
                r"C:\w\secret\s.txt",
                "exact",
                ALLOW_WRITE,
                DENY_PERMISSIONS,
                0
            ),
            (r"C:\w\secret\s.txt", "exact", 0, DENY_ALL, 0),
        ]
    );
    assert!(x.iter().all(|d| matches!(
        &d.origin,
        Origin::Protected { root, .. } if root.starts_with(r"C:\w")
    )));
}

#[test]
fn appcontainer_scan_skips_reparse_points_and_refuses_a_reparse_root() {
    let mut tree = Fake::new(&[
        (r"C:\w", Kind::Directory),
        (r"C:\w\link", Kind::ReparsePoint),
        (r"C:\w\link\inside", Kind::File),
        (r"C:\w\ok", Kind::File),
        (r"C:\j", Kind::ReparsePoint),
    ]);
    tree.protected.insert(r"C:\w\link\inside".into());
    let e = dacl_entries(&[grant(GrantKind::Write, Scope::Tree, r"C:\w")], W);
    let o = scan(&e, W, &tree).unwrap();
    assert_eq!(o.scanned, 1);
    assert_eq!(o.skipped, [r"C:\w\link"]);
    // Nothing behind the link is touched, protected or not.
    assert!(o.protected.is_empty());
    let e = dacl_entries(&[grant(GrantKind::Read, Scope::Tree, r"C:\j")], W);
    let err = scan(&e, W, &tree).unwrap_err();
    assert!(err.to_string().contains("reparse point"), "{err}");
}

// ------------------------------------------------------------ capabilities

#[test]
fn appcontainer_capabilities_per_role_are_none() {
    assert!(role_capabilities(Role::Workload).is_empty());
    assert!(role_capabilities(Role::Broker).is_empty());
    let d = declared_capabilities();
    assert_eq!(
        d.names(),
        [
            "fs-read",
            "fs-write",
            "fs-deny",
            "network-none",
            "process-tree",
            "fs-deny-write"
        ]
    );
    for c in [
        Capability::NetworkDirect,
        Capability::NetworkMediated,
        Capability::RootEphemeralWrite,
        Capability::FsProtectCreate,
        Capability::NetworkRequireTlsSni,
        Capability::NetworkPrivateAddresses,
    ] {
        assert!(!d.contains(c), "{c}");
    }
}

#[test]
fn appcontainer_self_check_executable_is_granted_only_when_nothing_covers_it() {
    let p = plan(vec![grant(GrantKind::Write, Scope::Tree, r"C:\proj")]);
    let last = p.entries.last().unwrap();
    assert_eq!(last.origin, Origin::Launcher);
    assert_eq!(
        (last.path.as_str(), last.scope),
        (r"C:\Program Files\terra\terra.exe", Scope::Exact)
    );
    assert_eq!((last.allow, last.deny), (ALLOW_READ, DENY_WRITE));
    let p = plan(vec![grant(
        GrantKind::Read,
        Scope::Tree,
        r"c:\program files\terra",
    )]);
    assert!(p.entries.iter().all(|e| e.origin != Origin::Launcher));
    let err = LaunchPlan::new(
        W,
        Role::Workload,
        r"C:\x.exe",
        r"C:\",
        r"C:\t\terra.exe",
        vec![grant(GrantKind::Deny, Scope::Tree, r"C:\t")],
        Vec::new(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("self-check worker could not start"),
        "{err}"
    );
}

#[test]
fn appcontainer_plan_refuses_non_windows_paths_and_workload_peers() {
    let err = LaunchPlan::new(
        W,
        Role::Workload,
        "/usr/bin/true",
        r"C:\",
        r"C:\t.exe",
        vec![],
        vec![],
    )
    .unwrap_err();
    assert!(matches!(err, Error::Path { .. }), "{err}");
    let peer = Peer {
        proto: Proto::Tcp,
        port: 443,
        allow_private: false,
        host: "example.com".into(),
    };
    assert!(LaunchPlan::new(
        W,
        Role::Workload,
        r"C:\x.exe",
        r"C:\",
        r"C:\t.exe",
        vec![],
        vec![peer]
    )
    .is_err());
}

// ------------------------------------------------------------ from a SandboxPlan

#[cfg(unix)]
const POLICY: &str = r#"{"formatVersion":3,"filesystem":{"default":"deny","rules":[
 {"access":"write","path":{"root":"workspace","relative":""},"scope":"tree"},
 {"access":"deny-write","path":{"root":"workspace","relative":"locked"},"scope":"tree"},
 {"access":"deny","path":{"root":"workspace","relative":"secret"},"scope":"tree"}]},
 "network":{"mode":"none"},"process":{"treeConfinement":"required"},"root":{"mode":"read-only"}}"#;

#[cfg(unix)]
fn sandbox_plan(
    dir: &std::path::Path,
    source: &str,
) -> terra_policy::Result<terra_policy::SandboxPlan> {
    let mir = terra_policy::compile_source(source.as_bytes())?;
    let bindings = terra_policy::HostBindings {
        workspace: Some(dir.to_path_buf()),
        temp: None,
        minimal_roots: Vec::new(),
        mediator: None,
    };
    terra_policy::compile_plan(&mir, &bindings, declared_capabilities())
}

#[cfg(unix)]
#[test]
fn appcontainer_lowers_a_resolved_plan_with_foreign_paths_as_given() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("locked")).unwrap();
    std::fs::create_dir(d.path().join("secret")).unwrap();
    let ws = std::fs::canonicalize(d.path()).unwrap();
    let ws = ws.to_str().unwrap();
    let sp = sandbox_plan(d.path(), POLICY).unwrap();
    let p = terra_appcontainer::lower_plan(
        &sp,
        PathStyle::Foreign,
        &terra_appcontainer::Host {
            executable: &format!("{ws}/tool"),
            cwd: ws,
            launcher: "/usr/local/bin/terra",
            system_dirs: &[],
        },
    )
    .unwrap();
    let rows: Vec<(String, String, u32, u32)> = p
        .entries
        .iter()
        .map(|e| (e.origin.name().to_string(), e.path.clone(), e.allow, e.deny))
        .collect();
    assert_eq!(
        rows,
        [
            (
                "write".into(),
                ws.to_string(),
                ALLOW_WRITE,
                DENY_PERMISSIONS
            ),
            ("deny-write".into(), format!("{ws}/locked"), 0, DENY_WRITE),
            ("deny".into(), format!("{ws}/secret"), 0, DENY_ALL),
            ("keep-in-place".into(), ws.to_string(), 0, DENY_DELETE),
            (
                "launcher".into(),
                "/usr/local/bin/terra".into(),
                ALLOW_READ,
                DENY_WRITE
            ),
        ]
    );
    // Foreign paths have no launch spec.
    assert!(p.spec().is_err());
    // The text says so.
    let text = render::text(&p, sp.decision_digest(), "linux", None, &[]);
    assert!(text.contains("NOT Windows-canonical"), "{text}");
}

#[cfg(unix)]
#[test]
fn appcontainer_refuses_plans_needing_what_it_does_not_declare() {
    let d = tempfile::tempdir().unwrap();
    for (source, missing) in [
        (
            POLICY.replace(r#""mode":"none""#, r#""mode":"direct""#),
            "network-direct",
        ),
        (
            POLICY.replace(r#""mode":"read-only""#, r#""mode":"ephemeral-write""#),
            "root-ephemeral-write",
        ),
    ] {
        std::fs::create_dir_all(d.path().join("locked")).unwrap();
        std::fs::create_dir_all(d.path().join("secret")).unwrap();
        let err = sandbox_plan(d.path(), &source).unwrap_err().to_string();
        assert!(err.contains(missing), "{err}");
    }
}

// ------------------------------------------------------------ rendering

#[test]
fn appcontainer_render_json_has_every_part_of_the_launch() {
    let p = plan(vec![
        grant(GrantKind::Write, Scope::Tree, r"C:\proj"),
        grant(GrantKind::Deny, Scope::Tree, r"C:\proj\secret"),
    ]);
    let v = render::json(&p, "sha256:00", "windows", None, &[]);
    assert_eq!(v["backend"], "windows");
    assert_eq!(v["pathsWindowsCanonical"], true);
    assert_eq!(v["capabilities"], serde_json::json!([]));
    // The workload's job: its tree, killed on close, no process limit.
    assert_eq!(v["workerJob"]["activeProcessLimit"], 0);
    assert_eq!(v["workerJob"]["limitFlags"]["value"], "0x00002400");
    assert_eq!(v["workerJob"]["uiRestrictions"]["value"], "0x000001ff");
    assert_eq!(v["creationFlags"]["value"], "0x09080404");
    assert_eq!(v["childProcessPolicy"], serde_json::Value::Null);
    assert_eq!(
        v["mitigationPolicy"]["policy1"]["value"],
        "0x1110010101111100"
    );
    // The broker role stays locked down.
    let b = &v["processes"]["broker"];
    assert_eq!(b["job"]["activeProcessLimit"], 1);
    assert_eq!(b["childProcessPolicy"]["value"], "0x00000001");
    assert_eq!(b["win32k"], "locked down");
    assert_eq!(b["lessPrivileged"], true);
    assert_eq!(v["processes"]["workload"]["win32k"], "allowed");
    assert_eq!(
        v["mitigationPolicy"]["policy2"]["value"],
        "0x0000000001010000"
    );
    assert_eq!(v["console"]["stdin"], "NUL");
    assert_eq!(v["objects"]["cap"], serde_json::Value::Null);
    let dacl = v["dacl"].as_array().unwrap();
    assert_eq!(dacl.len(), 4); // write, deny, keep-in-place, launcher
    assert_eq!(dacl[1]["path"], r"C:\proj\secret");
    assert_eq!(dacl[1]["sid"], PACKAGE_SID_PLACEHOLDER);
    assert_eq!(dacl[1]["deny"]["mask"], "0x001f01ff");
    assert_eq!(dacl[1]["allow"]["rights"], serde_json::json!([]));
    assert_eq!(dacl[2]["keepsInPlace"], r"C:\proj\secret");
    assert!(!dacl[0]["allow"]["rights"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("FILE_DELETE_CHILD")));
}

// ------------------------------------------------------------ broker ledger

fn no_private(ip: std::net::IpAddr) -> bool {
    ip.is_loopback() || matches!(ip, std::net::IpAddr::V4(v) if v.is_private())
}

fn ledger() -> Ledger {
    Ledger::new(
        vec![
            Peer {
                proto: Proto::Tcp,
                port: 443,
                allow_private: false,
                host: "example.com".into(),
            },
            Peer {
                proto: Proto::Tcp,
                port: 5432,
                allow_private: true,
                host: "db.internal".into(),
            },
        ],
        no_private,
    )
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn appcontainer_broker_sockets_need_an_approval_matching_a_peer() {
    let mut l = ledger();
    // No approval: refused.
    assert!(l.open(1, Proto::Tcp, addr("93.184.216.34:443"), 0).is_err());
    let id = l
        .approve(0, Proto::Tcp, addr("93.184.216.34:443"), 0)
        .unwrap();
    // Another address than the approved one: refused; the approved one: once.
    assert!(l
        .open(id, Proto::Tcp, addr("93.184.216.35:443"), 1)
        .is_err());
    l.open(id, Proto::Tcp, addr("93.184.216.34:443"), 1)
        .unwrap();
    assert!(l
        .open(id, Proto::Tcp, addr("93.184.216.34:443"), 2)
        .is_err());
    l.done(id);
    assert_eq!(l.held(), 0);
    // Wrong port, protocol, peer index; private address for a public peer.
    assert!(l
        .approve(0, Proto::Tcp, addr("93.184.216.34:80"), 0)
        .is_err());
    assert!(l
        .approve(0, Proto::Udp, addr("93.184.216.34:443"), 0)
        .is_err());
    assert!(l
        .approve(7, Proto::Tcp, addr("93.184.216.34:443"), 0)
        .is_err());
    let e = l
        .approve(0, Proto::Tcp, addr("127.0.0.1:443"), 0)
        .unwrap_err();
    assert!(e.to_string().contains("private"), "{e}");
    // A peer that allows private addresses.
    assert!(l.approve(1, Proto::Tcp, addr("10.0.0.5:5432"), 0).is_ok());
}

#[test]
fn appcontainer_broker_sockets_at_most_64_at_a_time_for_30_seconds() {
    let mut l = ledger();
    let ids: Vec<u64> = (0..MAX_OPEN)
        .map(|i| {
            l.approve(0, Proto::Tcp, addr(&format!("93.184.216.{}:443", i + 1)), 0)
                .unwrap()
        })
        .collect();
    let e = l
        .approve(0, Proto::Tcp, addr("93.184.217.1:443"), 0)
        .unwrap_err();
    assert!(e.to_string().contains("64"), "{e}");
    l.open(ids[0], Proto::Tcp, addr("93.184.216.1:443"), 10)
        .unwrap();
    l.done(ids[0]);
    assert!(l
        .approve(0, Proto::Tcp, addr("93.184.217.1:443"), 10)
        .is_ok());
    // Just before the lifetime nothing expires; at it the 63 old ones do.
    assert!(l.expire(LIFETIME_MS - 1).is_empty());
    let old = l.expire(LIFETIME_MS);
    assert_eq!(old.len(), MAX_OPEN - 1);
    assert_eq!(l.held(), 1);
    // An approval used after its lifetime is refused.
    let mut l = ledger();
    let id = l
        .approve(0, Proto::Tcp, addr("93.184.216.34:443"), 5)
        .unwrap();
    let e = l
        .open(id, Proto::Tcp, addr("93.184.216.34:443"), 5 + LIFETIME_MS)
        .unwrap_err();
    assert!(e.to_string().contains("expired"), "{e}");
}

#[cfg(unix)]
#[test]
fn appcontainer_minimal_runtime_is_listed_not_granted_and_never_written() {
    let d = tempfile::tempdir().unwrap();
    let sys = d.path().join("sys");
    std::fs::create_dir(&sys).unwrap();
    let compile = |access: &str| {
        let source = format!(
            r#"{{"formatVersion":3,"filesystem":{{"default":"deny","rules":[
             {{"access":"{access}","path":{{"special":"minimal-runtime"}},"scope":"tree"}}]}},
             "network":{{"mode":"none"}},"process":{{"treeConfinement":"required"}},"root":{{"mode":"read-only"}}}}"#
        );
        let mir = terra_policy::compile_source(source.as_bytes()).unwrap();
        let bindings = terra_policy::HostBindings {
            workspace: None,
            temp: None,
            minimal_roots: vec![sys.clone()],
            mediator: None,
        };
        terra_policy::compile_plan(&mir, &bindings, declared_capabilities()).unwrap()
    };
    let sys_s = std::fs::canonicalize(&sys).unwrap();
    let sys_s = sys_s.to_str().unwrap().to_string();
    let host = terra_appcontainer::Host {
        executable: &format!("{sys_s}/sh"),
        cwd: &sys_s,
        launcher: "/t/terra",
        system_dirs: &[],
    };
    let p = terra_appcontainer::lower_plan(&compile("read"), PathStyle::Foreign, &host).unwrap();
    let sys = std::fs::canonicalize(&sys).unwrap();
    assert_eq!(p.baseline, [sys.to_str().unwrap()]);
    assert!(p.grants.is_empty());
    assert!(
        p.entries.iter().all(|e| e.origin == Origin::Launcher),
        "{:?}",
        p.entries
    );
    let e =
        terra_appcontainer::lower_plan(&compile("write"), PathStyle::Foreign, &host).unwrap_err();
    assert!(e.to_string().contains("minimal-runtime"), "{e}");
}
