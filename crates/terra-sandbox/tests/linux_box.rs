//! Real boxes with hand-made plans. Each negative probe has a positive twin.
//! As root, `as_unprivileged_user` re-runs this whole binary as uid 65534.
#![cfg(target_os = "linux")]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::probe::{parse, probe};
use common::*;
use terra_policy::{Access, NetworkMode, RootMode, Scope};
use terra_sandbox::linux::{describe_spec, spawn_box_spec, BoxExit, EarlyBox};
use terra_test_support::users::require_root;

/// Runs the probes inside a box made from `w` (the probe program granted).
fn run_probes(w: &mut World, names: &[&str]) -> std::collections::BTreeMap<String, String> {
    let exe = probe_exe();
    w.rules.push(rule(Access::Read, &exe, Scope::Exact));
    w.env.push(("TERRA_PROBE".into(), names.join(",").into()));
    let r = w.sh(&exe.display().to_string());
    ok(&r);
    let m = parse(&r.1);
    assert_eq!(m.len(), names.len(), "probe output:\n{}", r.1);
    m
}

/// Runs every probe of `expect` in one box made from `w`: each group is the
/// result its probes (named, separated by spaces) must give ("EPERM" for a
/// refused call, "ok" for a twin).
fn assert_probes(w: &mut World, expect: &[(&str, &str)]) {
    let names: Vec<&str> = expect
        .iter()
        .flat_map(|(_, n)| n.split_whitespace())
        .collect();
    let m = run_probes(w, &names);
    for (result, names) in expect {
        for n in names.split_whitespace() {
            assert_eq!(m[n], *result, "{n}: {m:?}");
        }
    }
}

#[test]
fn exit_codes_and_signals_propagate() {
    let w = World::new();
    assert_eq!(w.run(&["sh", "-c", "exit 0"]).exit, BoxExit::Code(0));
    assert_eq!(w.run(&["sh", "-c", "exit 7"]).exit, BoxExit::Code(7));
    assert_eq!(
        w.run(&["sh", "-c", "kill -TERM $$"]).exit,
        BoxExit::Signal(libc::SIGTERM)
    );
    assert_eq!(
        w.run(&["sh", "-c", "kill -KILL $$"]).exit,
        BoxExit::Signal(libc::SIGKILL)
    );
    let r = w.run(&["true"]);
    assert_eq!(r.activation, "passed");
}

/// The box's init keeps a few capabilities across its exec (ambient, for an
/// unprivileged caller); the workload ends with every capability set empty
/// and no_new_privs. Runs as root and, rerun, as uid 65534.
#[test]
fn the_workload_holds_no_capability_at_all() {
    let w = World::new();
    let r = w.sh("grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status");
    let text = ok(&r);
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let line = format!("{set}:\t0000000000000000");
        assert!(text.lines().any(|l| l == line), "{set} not empty:\n{text}");
    }
    assert!(text.lines().any(|l| l == "NoNewPrivs:\t1"), "{text}");
    // The twin: the box's init (PID 1 of the box, `terra __vm`) does hold
    // capabilities in its namespace, so the check above can fail.
    let r = w.sh("grep -E '^CapEff:' /proc/1/status; tr '\\0' ' ' < /proc/1/cmdline");
    let text = ok(&r);
    assert!(
        !text.contains("CapEff:\t0000000000000000") && text.contains("CapEff:"),
        "{text}"
    );
    assert!(text.contains("terra __vm"), "{text}");
}

#[test]
fn exec_failures_are_126_and_127() {
    let w = World::new();
    match w.run(&["definitely-not-a-command-terra"]).exit {
        BoxExit::ExecFailed { code: 127, reason } => {
            assert!(reason.contains("not found"), "{reason}")
        }
        other => panic!("expected 127, got {other:?}"),
    }
    let script = w.ws().join("not-executable");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    match w.run(&[script.to_str().unwrap()]).exit {
        BoxExit::ExecFailed { code: 126, reason } => {
            assert!(reason.contains("not-executable"), "{reason}")
        }
        other => panic!("expected 126, got {other:?}"),
    }
    // Twin: the same file made executable runs.
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(w.run(&[script.to_str().unwrap()]).exit, BoxExit::Code(0));
}

#[test]
fn granted_files_are_visible_and_nothing_else() {
    let w = World::new();
    std::fs::write(w.ws().join("granted.txt"), "granted-content").unwrap();
    let secret = w.host.path().join("secret.txt");
    std::fs::write(&secret, "host-secret").unwrap();
    let r = w.sh(&format!(
        "cat granted.txt; echo; if test -e {s}; then echo SECRET-VISIBLE; else echo secret-absent; fi; \
         if test -e {d}; then echo HOSTDIR-VISIBLE; fi; if test -e /root; then echo ROOT-VISIBLE; fi; \
         if test -e /etc/shadow; then echo SHADOW-VISIBLE; fi; ls /",
        s = secret.display(),
        d = w.host.path().display()
    ));
    let out = ok(&r);
    assert!(out.contains("granted-content"), "{out}");
    assert!(out.contains("secret-absent"), "{out}");
    for bad in [
        "SECRET-VISIBLE",
        "HOSTDIR-VISIBLE",
        "ROOT-VISIBLE",
        "SHADOW-VISIBLE",
        "host-secret",
    ] {
        assert!(!out.contains(bad), "{bad} in {out}");
    }
}

#[test]
fn host_binds_are_nosuid_and_nodev() {
    let w = World::new();
    let r = w.sh(&format!(
        "grep ' {} ' /proc/self/mountinfo; grep ' /dev/null ' /proc/self/mountinfo",
        w.ws().display()
    ));
    let out = ok(&r);
    let (ws_line, null_line) = (out.lines().next().unwrap(), out.lines().nth(1).unwrap());
    let opts = |l: &str| l.split(' ').nth(5).unwrap().to_string();
    assert!(
        opts(ws_line).contains("nosuid") && opts(ws_line).contains("nodev"),
        "{out}"
    );
    assert!(opts(ws_line).starts_with("rw"), "{out}");
    // Twin: the /dev/null node is bound without nodev (or it would not work).
    assert!(!opts(null_line).contains("nodev"), "{out}");
}

#[test]
fn read_only_grant_refuses_writes() {
    let mut w = World::new();
    let ro = open_tempdir();
    std::fs::write(ro.path().join("f"), "original").unwrap();
    w.rules.push(rule(Access::Read, ro.path(), Scope::Tree));
    let r = w.sh(&format!(
        "cat {d}/f; echo; if echo changed > {d}/f; then echo WROTE; fi; if touch {d}/new; then echo CREATED; fi; \
         echo ok > ws-write && cat ws-write",
        d = ro.path().display()
    ));
    let out = ok(&r);
    assert!(out.contains("original"), "{out}");
    assert!(!out.contains("WROTE") && !out.contains("CREATED"), "{out}");
    assert!(
        out.contains("Read-only file system") || out.contains("Permission denied"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(ro.path().join("f")).unwrap(),
        "original"
    );
    assert!(!ro.path().join("new").exists());
    // Twin: the writable workspace took the write.
    assert_eq!(
        std::fs::read_to_string(w.ws().join("ws-write")).unwrap(),
        "ok\n"
    );
}

#[test]
fn deny_masks_files_and_directories() {
    let mut w = World::new();
    let ws = w.ws();
    std::fs::create_dir(ws.join("secret")).unwrap();
    std::fs::write(ws.join("secret/inner.txt"), "inner-secret").unwrap();
    std::fs::write(ws.join("key.txt"), "key-secret").unwrap();
    std::fs::write(ws.join("public.txt"), "public-content").unwrap();
    w.rules
        .push(rule(Access::Deny, &ws.join("secret"), Scope::Tree));
    w.rules
        .push(rule(Access::Deny, &ws.join("key.txt"), Scope::Tree));
    let r = w.sh(
        "cat public.txt; echo; ls -A secret | wc -l; cat key.txt; cat secret/inner.txt; \
         if echo x > key.txt; then echo KEY-WRITTEN; fi; if touch secret/new; then echo SECRET-CREATED; fi",
    );
    let out = ok(&r);
    assert!(out.contains("public-content"), "{out}");
    assert!(
        !out.contains("inner-secret") && !out.contains("key-secret"),
        "{out}"
    );
    assert!(
        !out.contains("KEY-WRITTEN") && !out.contains("SECRET-CREATED"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("key.txt")).unwrap(),
        "key-secret"
    );
    assert!(!ws.join("secret/new").exists());
}

#[test]
fn exact_scope_grants_only_the_path_itself() {
    let mut w = World::new();
    let d = open_tempdir();
    std::fs::write(d.path().join("inside.txt"), "inside-content").unwrap();
    let f = open_tempdir();
    std::fs::write(f.path().join("one.txt"), "one-file").unwrap();
    std::fs::write(f.path().join("sibling.txt"), "sibling-file").unwrap();
    w.rules.push(rule(Access::Read, d.path(), Scope::Exact));
    w.rules
        .push(rule(Access::Read, &f.path().join("one.txt"), Scope::Exact));
    let r = w.sh(&format!(
        "test -d {d} && echo dir-exists; ls -A {d} | wc -l; cat {d}/inside.txt; cat {f}/one.txt; echo; \
         cat {f}/sibling.txt; exit 0",
        d = d.path().display(),
        f = f.path().display()
    ));
    let out = ok(&r);
    assert!(
        out.contains("dir-exists") && out.contains("one-file"),
        "{out}"
    );
    assert!(
        !out.contains("inside-content") && !out.contains("sibling-file"),
        "{out}"
    );
    // Twin: the same directory granted as a tree shows its contents.
    let mut w = World::new();
    w.rules.push(rule(Access::Read, d.path(), Scope::Tree));
    let r = w.sh(&format!("cat {}/inside.txt", d.path().display()));
    assert!(ok(&r).contains("inside-content"));
}

#[test]
fn environment_and_descriptors_are_exactly_as_given() {
    let w = World::new();
    // A descriptor leaked by the caller (not close-on-exec) must not reach the box.
    let f = std::fs::File::open("/dev/null").unwrap();
    // SAFETY: dup of a descriptor we own; the copy is closed below.
    let leaked = unsafe { libc::dup(std::os::fd::AsRawFd::as_raw_fd(&f)) };
    assert!(leaked > 2);
    let out = w.ws().join("env.txt");
    let r = w.run(&[
        "sh",
        "-c",
        &format!("env > {o}; ls /proc/self/fd >> {o}", o = out.display()),
    ]);
    // SAFETY: closing our own copy.
    unsafe { libc::close(leaked) };
    assert_eq!(r.exit, BoxExit::Code(0));
    let text = std::fs::read_to_string(&out).unwrap();
    let mut env: Vec<&str> = text.lines().filter(|l| l.contains('=')).collect();
    env.sort();
    // dash adds PWD for its children; everything else is exactly BoxConfig.env.
    let pwd = format!("PWD={}", w.ws().display());
    assert_eq!(
        env,
        vec!["LC_ALL=C", "PATH=/usr/bin:/bin", pwd.as_str()],
        "{text}"
    );
    let fds: Vec<&str> = text.lines().filter(|l| !l.contains('=')).collect();
    assert_eq!(
        fds,
        vec!["0", "1", "2", "3"],
        "only stdio (and ls's own directory fd): {text}"
    );
    // Twin: the caller really has more variables and descriptors.
    assert!(std::env::vars().count() > 2);
}

#[test]
fn protect_create_placeholder_outside_binds() {
    let mut w = World::new();
    w.root_mode = RootMode::EphemeralWrite;
    let mut pc = rule(Access::Deny, Path::new("/"), Scope::Tree);
    pc.path = "/terra-absent-parent/absent".into();
    pc.protect_create = true;
    w.rules.push(pc);
    let r = w.sh(
        "if mkdir /terra-absent-parent/absent/x; then echo CREATED; fi; ls -A /terra-absent-parent/absent | wc -l; \
         mkdir /terra-other && echo other-created",
    );
    let out = ok(&r);
    assert!(
        !out.contains("CREATED") && out.contains("other-created"),
        "{out}"
    );
    assert!(
        !Path::new("/terra-absent-parent").exists(),
        "nothing created on the host"
    );
}

#[test]
fn deny_under_the_temp_dir_applies_at_slash_tmp_too() {
    let mut w = World::new();
    let tmp = std::fs::canonicalize(w.tmp.path()).unwrap();
    std::fs::write(tmp.join("hidden.txt"), "temp-secret").unwrap();
    w.rules.push(rule(Access::Write, &tmp, Scope::Tree));
    w.rules
        .push(rule(Access::Deny, &tmp.join("hidden.txt"), Scope::Tree));
    let r = w.sh(&format!(
        "cat /tmp/hidden.txt {t}/hidden.txt; echo done",
        t = tmp.display()
    ));
    let out = ok(&r);
    assert!(
        !out.contains("temp-secret") && out.contains("done"),
        "{out}"
    );
    // Twin: without the deny, /tmp shows it.
    w.rules.pop();
    let r = w.sh("cat /tmp/hidden.txt");
    assert!(ok(&r).contains("temp-secret"));
    // The temp dir's host path is under /tmp: it is not bound inside itself
    // again (no loop under /tmp, no mount point made in the host temp dir).
    // (The workspace, also under /tmp here, does get its mount point there.)
    let own = tmp.file_name().unwrap().to_str().unwrap().to_string();
    let r = w.sh("ls -A /tmp");
    let listed = ok(&r);
    assert!(
        listed.contains("hidden.txt") && !listed.lines().any(|l| l == own),
        "{listed}"
    );
    assert!(
        !tmp.join(&own).exists(),
        "a mount point in the host temp dir"
    );
}

#[test]
fn deny_write_rebinds_read_only() {
    let mut w = World::new();
    let ws = w.ws();
    std::fs::create_dir(ws.join("ro")).unwrap();
    std::fs::write(ws.join("ro/f"), "keep").unwrap();
    w.rules
        .push(rule(Access::DenyWrite, &ws.join("ro"), Scope::Tree));
    let r = w.sh(
        "cat ro/f; echo; if echo x > ro/f; then echo RO-WRITTEN; fi; echo y > rw.txt && echo rw-ok",
    );
    let out = ok(&r);
    assert!(out.contains("keep") && out.contains("rw-ok"), "{out}");
    assert!(!out.contains("RO-WRITTEN"), "{out}");
    assert_eq!(std::fs::read_to_string(ws.join("ro/f")).unwrap(), "keep");
}

#[test]
fn tmp_is_the_run_temp_dir_and_root_mode_is_enforced() {
    let w = World::new();
    let r = w.sh("echo t > /tmp/made-in-box && echo tmp-ok; if touch /new-root-file; then echo ROOT-WRITTEN; fi");
    let out = ok(&r);
    assert!(
        out.contains("tmp-ok") && !out.contains("ROOT-WRITTEN"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(w.tmp.path().join("made-in-box")).unwrap(),
        "t\n"
    );
    // Twin: ephemeral-write lets the root take writes, which never reach the host.
    let mut w = World::new();
    w.root_mode = RootMode::EphemeralWrite;
    let out = w.sh("touch /new-root-file && echo root-written");
    assert!(ok(&out).contains("root-written"));
    assert!(!Path::new("/new-root-file").exists());
}

#[test]
fn hostname_and_synthesized_etc() {
    let w = World::new();
    let r = w.sh("hostname; cat /etc/passwd /etc/hosts /etc/resolv.conf /etc/nsswitch.conf; id -u");
    let out = ok(&r);
    assert!(out.lines().next() == Some("terra-box"), "{out}");
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    assert!(out.contains(&format!(":x:{uid}:")), "{out}");
    assert!(out.contains("127.0.0.1\tlocalhost terra-box"), "{out}");
    assert!(
        out.lines().last() == Some(uid.to_string().as_str()),
        "uid kept: {out}"
    );
    // The host passwd has system users that the synthesized one does not.
    let host = std::fs::read_to_string("/etc/passwd").unwrap();
    if host.contains("daemon:") {
        assert!(!out.contains("daemon:"), "{out}");
    }
}

#[test]
fn synthesized_etc_files_are_part_of_a_read_only_root_or_read_only_binds() {
    // Root read-only: written into the box root (no mount), unwritable.
    let w = World::new();
    let script = "grep -c ' /etc/passwd ' /proc/self/mountinfo; \
                  ls -l /etc/passwd | cut -c1-10; \
                  (echo x >> /etc/passwd) 2>/dev/null && echo WROTE; \
                  chmod 666 /etc/passwd 2>/dev/null && echo CHMOD; echo end";
    let out = w.sh(script);
    let text = ok(&out);
    assert!(text.starts_with("0\n-r--r--r--\n"), "{text}");
    assert!(!text.contains("WROTE") && !text.contains("CHMOD"), "{text}");
    // Root ephemeral-write: the synthesized files stay read-only binds.
    let mut w = World::new();
    w.root_mode = RootMode::EphemeralWrite;
    let out = w.sh(script);
    let text = ok(&out);
    assert!(text.starts_with("1\n"), "{text}");
    assert!(!text.contains("WROTE") && !text.contains("CHMOD"), "{text}");
}

#[test]
fn an_early_box_that_is_not_used_is_killed_and_reaped() {
    let early = EarlyBox::spawn(roles(), true).unwrap();
    let pid = early.pid();
    assert!(pid > 0);
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    // The init execs soon after the clone; either name is the box's.
    assert!(!comm.is_empty(), "the early init is alive");
    drop(early);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the early init {pid} is gone, reaped"
    );
}

/// The host's network interfaces (the lines of /proc/net/dev after its header).
fn host_interface_count() -> usize {
    std::fs::read_to_string("/proc/net/dev")
        .unwrap()
        .lines()
        .skip(2)
        .count()
}

#[test]
fn an_early_box_without_the_plans_network_namespace_is_replaced() {
    // Made with a network namespace of its own, started for network direct:
    // the box that runs shares the host's network.
    let host_ifaces = host_interface_count();
    let mut w = World::new();
    w.network = NetworkMode::Direct;
    let out = w.ws().join(".terra-test-out");
    let script = format!(
        "exec >{} 2>&1; tail -n +3 /proc/net/dev | wc -l",
        out.display()
    );
    let report = EarlyBox::spawn(roles(), true)
        .unwrap()
        .start_box_spec(roles(), w.spec(&["/bin/sh", "-c", &script]))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(report.exit, BoxExit::Code(0));
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.trim(), host_ifaces.to_string(), "{text}");
}

#[test]
fn a_grant_of_the_root_still_gets_the_boxs_own_proc_and_dev() {
    // The /proc and /dev built before the program came are covered by the
    // root's bind: they are detached and made again over it, in order.
    let mut w = World::new();
    w.rules
        .push(rule(Access::Read, Path::new("/"), Scope::Tree));
    let me = std::process::id();
    let out = w.sh(&format!(
        "ls /proc | grep -c '^[0-9]*$'; test -e /proc/{me} && echo HOST-PID-VISIBLE; \
         wc -c < /proc/kallsyms; ls /dev/pts >/dev/null && echo pts-ok"
    ));
    let text = ok(&out);
    let count: usize = text.lines().next().unwrap().trim().parse().unwrap();
    assert!(count < 10, "only the box's processes: {text}");
    assert!(!text.contains("HOST-PID-VISIBLE"), "{text}");
    assert!(text.contains("\n0\n") && text.contains("pts-ok"), "{text}");
}

#[test]
fn pid_namespace_hides_host_processes() {
    let w = World::new();
    let me = std::process::id();
    let r = w.sh(&format!(
        "echo shell=$$; grep PPid /proc/1/status; ls /proc | grep -c '^[0-9]*$'; \
         if test -e /proc/{me}; then echo HOST-PID-VISIBLE; fi; test -e /proc/self && echo self-ok"
    ));
    let out = ok(&r);
    assert!(
        out.contains("PPid:\t0"),
        "init is PID 1 with no parent inside: {out}"
    );
    assert!(!out.contains("shell=1\n"), "{out}");
    assert!(
        out.contains("self-ok") && !out.contains("HOST-PID-VISIBLE"),
        "{out}"
    );
    let count: usize = out.lines().find_map(|l| l.trim().parse().ok()).unwrap();
    assert!(count < 10, "only the box's processes: {out}");
}

#[test]
fn network_none_has_only_loopback() {
    let w = World::new();
    let out = w.sh("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
    assert_eq!(ok(&out).trim(), "lo");
    // Twin: network direct is the host network namespace.
    let host_ifaces = host_interface_count();
    let mut w = World::new();
    w.network = NetworkMode::Direct;
    let out = w.sh("tail -n +3 /proc/net/dev | wc -l");
    assert_eq!(ok(&out).trim(), host_ifaces.to_string());
}

#[test]
fn seccomp_refuses_listed_calls() {
    let mut w = World::new();
    let refused = concat!(
        "unshare mount keyctl bpf ptrace ",
        "io_uring tiocsti tiocsti_high_bits clone_newns clone_newuser",
    );
    assert_probes(
        &mut w,
        &[
            ("EPERM", refused),
            ("ENOSYS", "clone3"),
            // Twins: unlisted calls and unlisted ioctls behave normally.
            ("EBADF", "tiocgwinsz_badfd"),
            ("ok", "clone_plain getppid"),
        ],
    );
    // Twin outside the box: keyctl works on the host, so EPERM above is the filter.
    assert_eq!(probe("keyctl"), "ok");
}

#[test]
fn seccomp_refuses_setid_modes_and_keeps_ordinary_ones() {
    let mut w = World::new();
    let refused = concat!(
        "chmod_setuid fchmod_setgid fchmodat2_setgid fchmodat_setuid_high_bits ",
        "openat_creat_setuid openat_tmpfile_setgid mkdirat_setgid mknodat_setuid",
    );
    let twins = "chmod_plain chmod_sticky_dir openat_creat_plain openat_nocreat_modebits";
    assert_probes(
        &mut w,
        &[("EPERM", refused), ("ok", twins), ("ENOSYS", "openat2")],
    );
    // Twin outside the box: the same calls work on the host.
    assert_eq!(probe("chmod_setuid"), "ok");
    assert_eq!(probe("fchmod_setgid"), "ok");
}

#[test]
fn seccomp_allows_only_the_plan_socket_families() {
    let mut w = World::new();
    let refused_af = concat!(
        "socket_vsock socket_packet socket_alg ",
        "socket_vsock_high_bits socketpair_inet socketpair_vsock",
    );
    let twins = "socket_netlink_route socket_unix_flags socket_inet socketpair_unix";
    assert_probes(
        &mut w,
        &[
            ("EAFNOSUPPORT", refused_af),
            ("EPROTONOSUPPORT", "socket_netlink_audit"),
            ("ok", twins),
        ],
    );
}

/// As root, the box starts without the caller's supplementary groups (here
/// from a multi-threaded caller: the test harness). Only this
/// test's thread gets the extra group, through the raw system call.
#[test]
#[ignore = "needs root: an unprivileged caller cannot drop them (SECURITY.md)"]
fn supplementary_groups_are_dropped_as_root() {
    require_root("supplementary_groups_are_dropped_as_root");
    let mut w = World::new();
    let before = probe("groups");
    let set = |groups: &[libc::gid_t]| {
        // SAFETY: pointer and count describe `groups`; only this thread changes.
        let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
        assert_eq!(r, 0, "setgroups: {}", std::io::Error::last_os_error());
    };
    let saved: Vec<libc::gid_t> = before
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    set(&[4243, 4244]);
    // Twin: the thread really holds them.
    let held = probe("groups");
    let m = run_probes(&mut w, &["groups"]);
    set(&saved);
    assert_eq!(held, "4243,4244");
    assert_eq!(m["groups"], "", "{m:?}");
}

#[test]
fn activation_check_passes_and_can_fail() {
    let w = World::new();
    let r = w.run(&["true"]);
    assert_eq!(
        (r.exit.clone(), r.activation.as_str()),
        (BoxExit::Code(0), "passed")
    );
    // Deliberately grant the canary: the box must refuse to start the workload.
    let mut w = World::new();
    w.rules
        .push(rule(Access::Read, &w.canary.clone(), Scope::Exact));
    let marker = w.ws().join("ran");
    let r = w.run(&["touch", marker.to_str().unwrap()]);
    match &r.exit {
        BoxExit::Refused(why) => assert!(why.contains("canary"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_ne!(r.activation, "passed");
    assert!(!marker.exists(), "the workload must not have run");
}

#[test]
fn activation_waits_for_the_canary_gate() {
    use std::io::Write;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    // The caller creates the canary only after the box started, in a granted
    // directory: once it exists the box can see it. The check must run after
    // the caller's word and refuse (a check before it would pass vacuously).
    let mut w = World::new();
    let late = w.host.path().join("late");
    std::fs::create_dir(&late).unwrap();
    w.rules.push(rule(Access::Read, &late, Scope::Tree));
    w.canary = std::fs::canonicalize(&late).unwrap().join("canary");
    let marker = w.ws().join("ran");
    let (gate, mut word) = UnixStream::pair().unwrap();
    let mut spec = w.spec(&["touch", marker.to_str().unwrap()]);
    spec.canary_gate = Some(OwnedFd::from(gate));
    let handle = spawn_box_spec(common::roles(), spec).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    std::fs::write(&w.canary, "created late").unwrap();
    word.write_all(b"x").unwrap();
    match handle.wait().unwrap().exit {
        BoxExit::Refused(why) => assert!(why.contains("canary"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!marker.exists(), "the workload must not have run");

    // Twin: the word after an absent canary lets the workload run.
    let w = World::new();
    let (gate, mut word) = UnixStream::pair().unwrap();
    let mut spec = w.spec(&["true"]);
    spec.canary_gate = Some(OwnedFd::from(gate));
    let handle = spawn_box_spec(common::roles(), spec).unwrap();
    word.write_all(b"x").unwrap();
    let r = handle.wait().unwrap();
    assert_eq!(
        (r.exit, r.activation.as_str()),
        (BoxExit::Code(0), "passed")
    );

    // No word at all (the caller's end closed): refused, nothing runs.
    let w = World::new();
    let marker = w.ws().join("ran");
    let (gate, word) = UnixStream::pair().unwrap();
    let mut spec = w.spec(&["touch", marker.to_str().unwrap()]);
    spec.canary_gate = Some(OwnedFd::from(gate));
    let handle = spawn_box_spec(common::roles(), spec).unwrap();
    drop(word);
    match handle.wait().unwrap().exit {
        BoxExit::Refused(why) => assert!(why.contains("before the canary existed"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!marker.exists(), "the workload must not have run");
}

#[test]
fn activation_tcp_canary() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut w = World::new();
    w.canary_tcp = Some(listener.local_addr().unwrap());
    let r = w.run(&["true"]);
    assert_eq!(
        (r.exit, r.activation.as_str()),
        (BoxExit::Code(0), "passed")
    );
    // Twin: with the host network the canary listener is reachable, so the check fails.
    w.network = NetworkMode::Direct;
    match w.run(&["true"]).exit {
        BoxExit::Refused(why) => assert!(why.contains("TCP"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn landlock_is_reported() {
    let w = World::new();
    let r = w.run(&["true"]);
    let host = terra_sandbox::linux::host_support();
    assert_eq!(r.landlock_abi.is_some(), host.landlock_abi.is_some());
    if let Some(abi) = r.landlock_abi {
        assert!((1..=6).contains(&abi));
    }
}

#[test]
fn network_none_keeps_in_box_loopback_and_hides_the_hosts() {
    // A listener on the host's loopback: the box must not reach it. Inside the
    // box, a server and client on the box's own loopback must work (test
    // suites do this), so Landlock puts no TCP rule on the workload.
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host.local_addr().unwrap().port();
    let w = World::new();
    let script = format!(
        "python3 -c '\nimport socket\ns = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(1)\n\
         c = socket.create_connection(s.getsockname()); a, _ = s.accept(); c.sendall(b\"hi\")\n\
         print(\"inbox\", a.recv(2).decode())\n\
         try:\n    socket.create_connection((\"127.0.0.1\", {host_port}), timeout=5); print(\"host reached\")\n\
         except OSError as e:\n    print(\"host\", e.errno)\n'"
    );
    let out = w.sh(&script);
    let text = ok(&out);
    assert!(text.contains("inbox hi"), "{text}");
    assert!(
        text.contains(&format!("host {}", libc::ECONNREFUSED)),
        "{text}"
    );
    assert!(!text.contains("host reached"), "{text}");
    drop(host);
}

#[test]
fn signals_are_forwarded_to_the_workload() {
    let w = World::new();
    let ready = w.ws().join("ready");
    let script = format!(
        "trap 'echo got-term > term.txt; exit 3' TERM; touch {}; while :; do sleep 1; done",
        ready.display()
    );
    let h = spawn_box_spec(common::roles(), w.spec(&["sh", "-c", &script])).unwrap();
    wait_until(|| ready.exists(), "the workload to start");
    // SAFETY: signalling the box init we started.
    unsafe { libc::kill(h.pid(), libc::SIGTERM) };
    let r = h.wait().unwrap();
    assert_eq!(r.exit, BoxExit::Code(3));
    assert_eq!(
        std::fs::read_to_string(w.ws().join("term.txt")).unwrap(),
        "got-term\n"
    );
}

fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
        })
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .count()
}

#[test]
fn killing_the_caller_kills_the_box() {
    let w = World::new();
    let marker = format!(
        "{}.{}",
        1000 + std::process::id() % 1000,
        std::process::id()
    );
    let spec = w.spec(&["sleep", &marker]);
    // The "caller" is a forked child of the test that starts the box and waits.
    // SAFETY: the child only starts the box, waits and exits.
    let caller = unsafe { libc::fork() };
    if caller == 0 {
        let code = match spawn_box_spec(common::roles(), spec).and_then(|h| h.wait()) {
            Ok(_) => 0,
            Err(_) => 1,
        };
        // SAFETY: leaving the forked child.
        unsafe { libc::_exit(code) };
    }
    drop(spec);
    wait_until(|| processes_with(&marker) > 0, "the workload to start");
    // SAFETY: killing our own child, then reaping it.
    unsafe {
        libc::kill(caller, libc::SIGKILL);
        libc::waitpid(caller, std::ptr::null_mut(), 0);
    }
    // Bounded wait for the kernel to deliver the parent-death signals.
    for _ in 0..500 {
        if processes_with(&marker) == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        processes_with(&marker),
        0,
        "the workload outlived its caller"
    );
}

#[test]
fn describe_shows_the_program() {
    let mut w = World::new();
    let ws = w.ws();
    w.rules.push(rule(Access::Deny, &ws, Scope::Tree));
    let text = describe_spec(&w.spec(&["true"]));
    assert!(text.contains("bind dir  /usr"), "{text}");
    assert!(
        text.contains(&format!("mask dir  {}", ws.display())),
        "{text}"
    );
    assert!(
        text.contains("seccomp EPERM") && text.contains("landlock fs"),
        "{text}"
    );
    assert!(
        text.contains("proc      /proc") && text.contains("readonly  / (root mode read-only)"),
        "{text}"
    );
}

/// A protect-create inside a writable bind is masked at a placeholder that
/// terra run makes on the host (terra-supervisor's `placeholders`); handed
/// to the box without one, the mask has nothing to cover and the box
/// refuses: nothing is created on the host.
#[test]
fn protect_create_without_its_placeholder_is_refused() {
    let mut w = World::new();
    let mut r = rule(Access::Deny, &w.ws(), Scope::Tree);
    r.path = format!("{}/absent-dir", r.path);
    r.protect_create = true;
    w.rules.push(r);
    match spawn_box_spec(common::roles(), w.spec(&["true"])) {
        Err(_) => {}
        Ok(h) => {
            let r = h.wait().unwrap();
            assert!(matches!(r.exit, BoxExit::Refused(_)), "{:?}", r.exit);
        }
    }
    assert!(
        !w.ws().join("absent-dir").exists(),
        "nothing created on the host"
    );
}

#[test]
fn declared_capabilities_follow_the_broker() {
    use terra_policy::Capability as C;
    let without = terra_sandbox::linux::declared_capabilities(false);
    let with = terra_sandbox::linux::declared_capabilities(true);
    for c in [
        C::FsRead,
        C::FsWrite,
        C::FsDeny,
        C::FsDenyWrite,
        C::NetworkNone,
        C::NetworkDirect,
        C::ProcessTree,
        C::RootEphemeralWrite,
        C::FsProtectCreate,
    ] {
        assert!(without.contains(c) && with.contains(c), "{c}");
    }
    for c in [
        C::NetworkMediated,
        C::NetworkRequireTlsSni,
        C::NetworkPrivateAddresses,
    ] {
        assert!(!without.contains(c) && with.contains(c), "{c}");
    }
}

#[test]
fn host_support_reports_user_namespaces() {
    use terra_sandbox::linux::CheckId;
    let s = terra_sandbox::linux::host_support();
    assert!(
        s.passed(CheckId::UserNamespaces),
        "{:?} (these tests need user namespaces)",
        s.checks
    );
    assert!(s.usable(), "{:?}", s.checks);
    assert!(s.checks.iter().any(|c| c.id == CheckId::Seccomp));
    // Each check once.
    let mut ids: Vec<_> = s.checks.iter().map(|c| c.id.name()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), s.checks.len(), "{:?}", s.checks);
}

/// As root: the whole suite again as an unprivileged user (uid/gid 65534).
#[test]
#[ignore = "needs root: runs this suite again as uid 65534"]
fn as_unprivileged_user() {
    rerun_unprivileged("as_unprivileged_user");
}
