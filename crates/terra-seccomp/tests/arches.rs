//! The tables per architecture: every program of both architectures kills a
//! call made through another ABI (i386 and x32's neighbour on x86_64; the
//! 32-bit AArch32 compat ABI on aarch64), x86_64 programs refuse x32
//! numbers and aarch64 ones have no such clause (no x32 there), and a deny
//! list that names a call aarch64 lacks also names what replaces it there,
//! so no ban is lost on aarch64. (src/arches.rs refuses a table whose `arch`
//! lists do not match the calls' existence; its unit tests cover that.)
#![cfg(target_os = "linux")]

use serde_json::Value;
use terra_seccomp::eval::{run, Data};
use terra_seccomp::{compile_for, Table, TargetArch, X32_SYSCALL_BIT};

const AUDIT_X86_64: u32 = 0xc000_003e;
const AUDIT_AARCH64: u32 = 0xc000_00b7;
const AUDIT_I386: u32 = 0x4000_0003;
/// AUDIT_ARCH_ARM: a 32-bit (AArch32 compat) task on an arm64 kernel.
const AUDIT_ARM: u32 = 0x4000_0028;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ALLOW: u32 = 0x7fff_0000;

fn own(arch: TargetArch) -> u32 {
    match arch {
        TargetArch::x86_64 => AUDIT_X86_64,
        TargetArch::aarch64 => AUDIT_AARCH64,
        other => panic!("no table for {other:?}"),
    }
}

#[test]
fn every_program_checks_its_own_architecture_first() {
    for t in Table::ALL {
        for arch in [TargetArch::x86_64, TargetArch::aarch64] {
            for p in compile_for(t, arch, None).unwrap() {
                assert_eq!((p.bpf[0].code, p.bpf[0].k), (0x20, 4), "{}", p.name);
                assert_eq!((p.bpf[1].code, p.bpf[1].k), (0x15, own(arch)), "{}", p.name);
                assert_eq!(p.bpf[2].k, RET_KILL_PROCESS, "{}", p.name);
            }
        }
    }
}

#[test]
fn a_call_through_another_abi_kills_the_process() {
    for t in Table::ALL {
        for arch in [TargetArch::x86_64, TargetArch::aarch64] {
            let foreign = [AUDIT_X86_64, AUDIT_AARCH64, AUDIT_I386, AUDIT_ARM, 0]
                .into_iter()
                .filter(|&a| a != own(arch));
            for p in compile_for(t, arch, None).unwrap() {
                for a in foreign.clone() {
                    for nr in (0..=600).chain([X32_SYSCALL_BIT | 39, u32::MAX]) {
                        let d = Data {
                            nr,
                            arch: a,
                            ..Data::default()
                        };
                        assert_eq!(
                            run(&p.bpf, &d).unwrap(),
                            RET_KILL_PROCESS,
                            "{}: call {nr:#x} of arch {a:#x}",
                            p.name
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn x32_numbers_are_refused_on_x86_64_and_mean_nothing_special_on_aarch64() {
    for t in Table::ALL {
        let x86 = &compile_for(t, TargetArch::x86_64, None).unwrap()[0];
        let arm = &compile_for(t, TargetArch::aarch64, None).unwrap()[0];
        for n in (0..600).step_by(5) {
            let nr = X32_SYSCALL_BIT | n;
            let on = |arch, bpf: &[seccompiler::sock_filter]| {
                run(
                    bpf,
                    &Data {
                        nr,
                        arch,
                        ..Data::default()
                    },
                )
                .unwrap()
            };
            // Every x32 number gets the program's refusal, never allow.
            assert_ne!(
                on(AUDIT_X86_64, &x86.bpf),
                RET_ALLOW,
                "{}: {nr:#x}",
                x86.name
            );
            // On aarch64 such a number is no call: the program answers it
            // as any call it does not name (and the x86_64 clause is absent).
            let unnamed = on(AUDIT_AARCH64, &arm.bpf);
            let beyond = run(
                &arm.bpf,
                &Data {
                    nr: 0x3fff_ffff,
                    arch: AUDIT_AARCH64,
                    ..Data::default()
                },
            )
            .unwrap();
            assert_eq!(unnamed, beyond, "{}: {nr:#x}", arm.name);
        }
        // Right after loading the number: x86_64 tests bit 30, aarch64 not.
        let x32_test = |i: &seccompiler::sock_filter| (i.code, i.k) == (0x35, X32_SYSCALL_BIT);
        assert!(x32_test(&x86.bpf[4]), "{}", x86.name);
        assert!(
            !x32_test(&arm.bpf[4]),
            "{}: an x32 clause on aarch64",
            arm.name
        );
    }
}

/// What the C library and the kernel's generic table use on aarch64 for a
/// call only x86_64 has (the arm64 kernel has no legacy path calls).
fn replacements(call: &str) -> Option<&'static [&'static str]> {
    Some(match call {
        "open" | "creat" => &["openat"],
        "chmod" => &["fchmodat"],
        "chown" | "lchown" => &["fchownat"],
        "mkdir" => &["mkdirat"],
        "mknod" => &["mknodat"],
        "link" => &["linkat"],
        "unlink" | "rmdir" => &["unlinkat"],
        "rename" => &["renameat", "renameat2"],
        "symlink" => &["symlinkat"],
        "readlink" => &["readlinkat"],
        "stat" | "lstat" => &["newfstatat"],
        "access" => &["faccessat"],
        "dup2" => &["dup3"],
        "pipe" => &["pipe2"],
        "poll" => &["ppoll"],
        "select" => &["pselect6"],
        "fork" | "vfork" => &["clone"],
        "epoll_create" => &["epoll_create1"],
        "epoll_wait" => &["epoll_pwait"],
        "eventfd" => &["eventfd2"],
        "inotify_init" => &["inotify_init1"],
        "utimes" | "utime" | "futimesat" => &["utimensat"],
        _ => return None,
    })
}

fn on_aarch64(rule: &Value) -> bool {
    match rule.get("arch") {
        None => true,
        Some(Value::Array(a)) => a.iter().any(|x| x == "aarch64"),
        Some(_) => false,
    }
}

#[test]
fn a_deny_list_bans_on_aarch64_what_replaces_each_x86_64_only_call() {
    let mut checked = 0;
    for t in Table::ALL {
        let table: Value = serde_json::from_str(t.source()).unwrap();
        for (name, filter) in table.as_object().unwrap() {
            // An allowlist may admit less on aarch64 (a missing call kills
            // terra, which the aarch64 guest's tests would show); a deny or
            // notify list must not ban less.
            if filter["match_action"] == "allow" {
                continue;
            }
            let rules = filter["filter"].as_array().unwrap();
            for r in rules.iter().filter(|r| !on_aarch64(r)) {
                let call = r["syscall"].as_str().unwrap();
                let with = replacements(call).unwrap_or_else(|| {
                    panic!(
                        "{}/{name}: {call} is x86_64-only and has no known aarch64 replacement",
                        t.name()
                    )
                });
                for w in with {
                    assert!(
                        rules.iter().any(|o| o["syscall"] == *w && on_aarch64(o)),
                        "{}/{name}: bans {call} on x86_64 only, but not {w} on aarch64",
                        t.name()
                    );
                }
                checked += 1;
            }
        }
    }
    // workload/setid (chmod, creat, mkdir, mknod, open) and no_files (open).
    assert!(checked >= 5, "only {checked} x86_64-only bans checked");
}
