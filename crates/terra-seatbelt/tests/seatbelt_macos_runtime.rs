//! What everyday macOS commands need, pinned in the rendered profiles: the
//! macOS runtime read set, terminals, semaphores, process information of
//! the same sandbox only, a listed set of sysctls, the run's mark, the
//! broker's port reached by the activation check, and the roles' own
//! restrictions kept on the roles (docs/sandbox-macos.md).

use terra_seatbelt::runtime::{MACOS_RUNTIME, SYSCTL_NAMES, SYSCTL_PREFIXES};
use terra_seatbelt::{
    declared_capabilities, lower_broker, probes, render, Grant, GrantKind, LaunchSpec, Network,
    Probe, Profile, Role, Scope, MACOS_RESOLVER_FILES,
};

fn workload(grants: Vec<Grant>) -> LaunchSpec {
    LaunchSpec {
        role: Role::Workload,
        network: Network::None,
        executable: "/usr/bin/git".into(),
        mark: Some("/Users/ann/.local/state/terra/runs/r1/tree.mark".into()),
        terminals: vec!["/dev/ttys004".into()],
        grants,
    }
}

/// The parameter's name whose value is `value`.
fn param_of<'a>(p: &'a Profile, value: &str) -> &'a str {
    p.parameters
        .iter()
        .find(|(_, v)| v == value)
        .map(|(k, _)| k.as_str())
        .unwrap_or_else(|| panic!("no parameter has the value {value}: {:?}", p.parameters))
}

/// The profile's lines naming `(param "NAME")`.
fn lines_with<'a>(p: &'a Profile, name: &str) -> Vec<&'a str> {
    let reference = format!("(param \"{name}\")");
    p.text.lines().filter(|l| l.contains(&reference)).collect()
}

#[test]
fn seatbelt_runtime_developer_tools_homebrew_timezone_and_dyld_are_readable() {
    let p = render(&workload(vec![])).unwrap();
    for path in [
        "/Library/Developer/CommandLineTools",
        "/Applications/Xcode.app",
        "/private/var/select",
        "/private/var/db/xcode_select_link",
        "/opt/homebrew",
        "/usr/local",
        "/usr/share/zoneinfo",
        "/private/var/db/timezone",
        "/System/Volumes/Preboot/Cryptexes/OS",
        "/System/Library/dyld",
    ] {
        let name = param_of(&p, path);
        let lines = lines_with(&p, name);
        assert!(
            lines.iter().any(|l| l.starts_with("(allow file-read* (")),
            "{path}: {lines:?}"
        );
        // Read-only: never a write rule on the runtime.
        assert!(
            lines.iter().all(|l| !l.contains("file-write")),
            "{path}: {lines:?}"
        );
    }
    // Programs run from the developer tools and Homebrew; not from the
    // timezone data or the dyld cache.
    for (path, exec) in [
        ("/Library/Developer/CommandLineTools", true),
        ("/opt/homebrew", true),
        ("/usr/local", true),
        ("/private/var/db/timezone", false),
        ("/System/Library/dyld", false),
    ] {
        let name = param_of(&p, path);
        let runs = lines_with(&p, name)
            .iter()
            .any(|l| l.starts_with("(allow process-exec"));
        assert_eq!(runs, exec, "{path}");
    }
    // The xcrun cache is read, never written.
    let xcrun: Vec<&str> = p.text.lines().filter(|l| l.contains("xcrun_db")).collect();
    assert_eq!(xcrun.len(), 1, "{xcrun:?}");
    assert!(
        xcrun[0].starts_with("(allow file-read* (regex"),
        "{xcrun:?}"
    );
}

#[test]
fn seatbelt_a_plan_deny_carves_out_of_the_runtime() {
    let spec = workload(vec![Grant {
        kind: GrantKind::Deny,
        scope: Scope::Tree,
        path: "/opt/homebrew/etc".into(),
    }]);
    let p = render(&spec).unwrap();
    let runtime = param_of(&p, "/opt/homebrew");
    let at = |needle: &str| {
        p.text
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} missing"))
    };
    // Seatbelt applies the last matching rule: the deny comes after.
    assert!(
        at(&format!(
            "(allow file-read* (subpath (param \"{runtime}\")))"
        )) < at("(deny file-read* file-write* process-exec (subpath (param \"GRANT_0\")))")
    );
    // And the runtime's ancestors get metadata only.
    let opt = param_of(&p, "/opt");
    assert_eq!(
        lines_with(&p, opt),
        [format!(
            "(allow file-read-metadata (literal (param \"{opt}\")))"
        )]
    );
}

#[test]
fn seatbelt_terminals_keep_job_control_and_raw_mode() {
    let p = render(&workload(vec![])).unwrap();
    // The caller's terminal: read, write and ioctl (tcsetattr, TIOCSPGRP).
    let tty = param_of(&p, "/dev/ttys004");
    assert_eq!(tty, "TTY_0");
    assert_eq!(
        lines_with(&p, tty),
        ["(allow file-read* file-write-data file-ioctl (literal (param \"TTY_0\")))"]
    );
    for dev in ["/dev/tty", "/dev/ptmx"] {
        let name = param_of(&p, dev);
        assert!(
            lines_with(&p, name)
                .iter()
                .any(|l| l.contains("file-ioctl")),
            "{dev}"
        );
    }
    assert!(p.text.lines().any(|l| l == "(allow pseudo-tty)"));
    // New pseudo-terminals only with the kernel's pty extension: never any
    // other terminal of the user.
    let ptys: Vec<&str> = p.text.lines().filter(|l| l.contains("ttys")).collect();
    assert_eq!(ptys.len(), 1, "{ptys:?}");
    assert!(
        ptys[0].contains("(require-all") && ptys[0].contains("com.apple.sandbox.pty"),
        "{ptys:?}"
    );
    // Without a terminal there is no TTY parameter at all.
    let mut none = workload(vec![]);
    none.terminals.clear();
    let p = render(&none).unwrap();
    assert!(!p.parameters.iter().any(|(k, _)| k.starts_with("TTY_")));
}

#[test]
fn seatbelt_semaphores_and_process_info_of_the_same_sandbox_only() {
    let p = render(&workload(vec![])).unwrap();
    let lines: Vec<&str> = p.text.lines().collect();
    assert!(lines.contains(&"(allow ipc-posix-sem)"));
    assert!(lines.contains(&"(allow process-info* (target same-sandbox))"));
    assert!(lines.contains(&"(allow signal (target same-sandbox))"));
    // Never about other processes, never shared memory or other IPC.
    for l in &lines {
        if l.contains("process-info") || l.contains("(allow signal") {
            assert!(l.contains("(target same-sandbox)"), "{l}");
        }
        assert!(
            !l.contains("ipc-posix-shm") && !l.contains("ipc-sysv"),
            "{l}"
        );
        assert!(!l.contains("mach-priv-task-port"), "{l}");
    }
}

#[test]
fn seatbelt_sysctls_are_listed_and_never_other_processes() {
    let p = render(&workload(vec![])).unwrap();
    // No blanket rule: every sysctl-read names its sysctls.
    assert!(!p.text.contains("(allow sysctl-read)"));
    assert!(!p.text.contains("sysctl-write"));
    let rule: String = {
        let start = p.text.find("(allow sysctl-read").unwrap();
        let end = start + p.text[start..].find("))\n").unwrap() + 2;
        p.text[start..end].to_string()
    };
    for want in [
        "hw.ncpu",
        "hw.memsize",
        "hw.activecpu",
        "hw.pagesize",
        "kern.osrelease",
        "kern.ostype",
        "kern.version",
        "kern.argmax",
        "kern.hostname",
    ] {
        assert!(
            rule.contains(&format!("(sysctl-name \"{want}\")")),
            "{want}: {rule}"
        );
    }
    assert!(rule.contains("(sysctl-name-prefix \"machdep.cpu.\")"));
    assert!(rule.contains("(sysctl-name-prefix \"hw.optional.\")"));
    // kern.procargs2 gives another process's arguments and environment
    // (terra run's); kern.proc.* its details.
    assert!(!p.text.contains("kern.proc"), "{rule}");
    assert_eq!(
        rule.matches("(sysctl-name").count(),
        SYSCTL_NAMES.len() + SYSCTL_PREFIXES.len()
    );
}

#[test]
fn seatbelt_the_run_mark_is_metadata_only_and_the_antimark_is_never_named() {
    let p = render(&workload(vec![])).unwrap();
    assert_eq!(
        lines_with(&p, "RUN_MARK"),
        ["(allow file-read-metadata (literal (param \"RUN_MARK\")))"]
    );
    assert!(!p.parameters.iter().any(|(_, v)| v.contains("antimark")));
    // No mark, no rule.
    let mut unmarked = workload(vec![]);
    unmarked.mark = None;
    assert!(!render(&unmarked).unwrap().text.contains("RUN_MARK"));
}

#[test]
fn seatbelt_roles_keep_their_restrictions_the_workload_gets_what_a_build_needs() {
    let w = render(&workload(vec![])).unwrap().text;
    for needed in [
        "(allow process-fork)",
        "(allow pseudo-tty)",
        "(allow ipc-posix-sem)",
    ] {
        assert!(w.lines().any(|l| l == needed), "workload lacks {needed}");
    }
    let broker = lower_broker("/usr/local/bin/terra", 4000, &MACOS_RESOLVER_FILES).unwrap();
    let b = render(&broker).unwrap();
    for forbidden in [
        "process-fork",
        "pseudo-tty",
        "ipc-posix",
        "process-info",
        "sysctl",
        "file-write",
        "file-ioctl",
        "RUNTIME_",
        "RUN_MARK",
        "(allow signal",
    ] {
        assert!(!b.text.contains(forbidden), "broker has {forbidden}");
    }
    // The broker's only exec is the launcher's exec of terra itself.
    let execs: Vec<&str> = b
        .text
        .lines()
        .filter(|l| l.contains("process-exec"))
        .collect();
    assert_eq!(
        execs,
        ["(allow process-exec (literal (param \"EXECUTABLE\")))"]
    );
}

#[test]
fn seatbelt_a_broker_spec_with_a_mark_or_a_terminal_is_refused() {
    let mut b = lower_broker("/usr/local/bin/terra", 4000, &MACOS_RESOLVER_FILES).unwrap();
    b.terminals.push("/dev/ttys001".into());
    assert!(b.validate().is_err());
    b.terminals.clear();
    b.mark = Some("/private/tmp/m".into());
    assert!(b.validate().is_err());
    // Four terminals are more than standard input, output and error.
    let mut w = workload(vec![]);
    w.terminals = (0..4).map(|i| format!("/dev/ttys00{i}")).collect();
    assert!(w.validate().is_err());
    // A terminal outside Seatbelt's form is refused, as a grant would be.
    let mut w = workload(vec![]);
    w.terminals = vec!["/dev/../dev/ttys001".into()];
    assert!(w.validate().is_err());
}

#[test]
fn seatbelt_launch_spec_carries_mark_and_terminals_canonically() {
    let spec = workload(vec![]);
    let bytes = spec.encode();
    assert_eq!(LaunchSpec::decode(&bytes).unwrap(), spec);
    let text = String::from_utf8(bytes).unwrap();
    // The mark before the terminals; a second mark, or the order swapped, is not canonical.
    let mark_line = text.lines().find(|l| l.starts_with("mark ")).unwrap();
    let tty_line = text.lines().find(|l| l.starts_with("tty ")).unwrap();
    assert!(text.find(mark_line) < text.find(tty_line));
    for bad in [
        text.replace(tty_line, &format!("{tty_line}\n{mark_line}")),
        text.replace(mark_line, &format!("{mark_line}\n{mark_line}")),
    ] {
        assert!(LaunchSpec::decode(bad.as_bytes()).is_err(), "{bad}");
    }
}

#[test]
fn seatbelt_activation_reaches_the_broker_port_and_nothing_else() {
    let mut spec = workload(vec![]);
    spec.network = Network::Mediated { port: 41234 };
    let p = probes(&spec, "/private/var/run/terra/c").unwrap();
    assert!(p.contains(&Probe::ReachBroker("127.0.0.1:41234".parse().unwrap())));
    for other in ["127.0.0.1:41235", "[::1]:41235"] {
        assert!(
            p.contains(&Probe::Connect(other.parse().unwrap())),
            "{other}"
        );
    }
    for ip in ["127.0.0.1:0", "[::1]:0"] {
        assert!(p.contains(&Probe::Listen(ip.parse().unwrap())), "{ip}");
    }
    assert_eq!(p.iter().filter(|p| p.must_succeed()).count(), 1);
    // The broker itself reaches nothing by probe: it may connect anywhere.
    let broker = lower_broker("/usr/local/bin/terra", 41234, &MACOS_RESOLVER_FILES).unwrap();
    let b = probes(&broker, "/private/var/run/terra/c").unwrap();
    assert!(b.iter().all(|p| !p.must_succeed()));
}

#[test]
fn seatbelt_declares_process_tree() {
    for broker in [false, true] {
        let d = declared_capabilities(broker);
        assert!(d.contains(terra_policy::Capability::ProcessTree));
        assert!(!d.contains(terra_policy::Capability::RootEphemeralWrite));
    }
}

#[test]
fn seatbelt_runtime_count_matches_the_rendered_parameters() {
    let p = render(&workload(vec![])).unwrap();
    let n = p
        .parameters
        .iter()
        .filter(|(k, _)| k.starts_with("RUNTIME_"))
        .count();
    assert_eq!(n, MACOS_RUNTIME.len());
}
