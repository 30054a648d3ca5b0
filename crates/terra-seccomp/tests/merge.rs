//! Every merged program decides every call as the kernel would decide it
//! with seccompiler's per-filter programs installed one after another (the
//! strongest action wins; between equals, the filter installed last): run
//! side by side in a BPF interpreter over every call number of the table's
//! architecture, x32 and foreign-architecture numbers, and, for the calls
//! with argument checks, arguments built from every constant the programs
//! compare with (each argument alone, and random mixes).
#![cfg(target_os = "linux")]

use std::collections::BTreeSet;

use terra_seccomp::eval::{run, stacked, trace, Data};
use terra_seccomp::{compile, compile_for, filter_names, reference_for, Table, TargetArch};

const AUDIT_X86_64: u32 = 0xc000_003e;
const AUDIT_AARCH64: u32 = 0xc000_00b7;
const AUDIT_I386: u32 = 0x4000_0003;

/// A small deterministic generator (xorshift64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// Every 32-bit constant the programs compare or mask with, its
/// neighbours, and the usual edges.
fn constants(programs: &[&[seccompiler::sock_filter]]) -> Vec<u32> {
    let mut c = BTreeSet::from([0u32, 1, 2, 0x8000_0000, u32::MAX, u32::MAX - 1]);
    for p in programs {
        for i in p.iter() {
            if matches!(i.code, 0x15 | 0x25 | 0x35 | 0x45 | 0x54) {
                for v in [i.k, i.k.wrapping_sub(1), i.k.wrapping_add(1), !i.k] {
                    c.insert(v);
                }
            }
        }
    }
    c.into_iter().collect()
}

fn args_of(words: [u32; 12]) -> [u64; 6] {
    std::array::from_fn(|i| u64::from(words[2 * i]) | (u64::from(words[2 * i + 1]) << 32))
}

/// Compares the merged program of `table` (filters `only`) with the stack
/// of its reference programs; returns how many calls were compared.
fn compare(table: Table, arch: TargetArch, only: Option<&[&str]>) -> usize {
    let merged = compile_for(table, arch, only).unwrap();
    assert_eq!(merged.len(), 1);
    let merged = &merged[0];
    let refs = reference_for(table, arch, only).unwrap();
    let stack: Vec<&[seccompiler::sock_filter]> = refs.iter().map(|p| p.bpf.as_slice()).collect();
    let own = if arch == TargetArch::x86_64 {
        AUDIT_X86_64
    } else {
        AUDIT_AARCH64
    };
    let mut all: Vec<&[seccompiler::sock_filter]> = stack.clone();
    all.push(&merged.bpf);
    let words = constants(&all);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut compared = 0usize;
    let mut check = |d: &Data| {
        let want = stacked(&stack, d).unwrap_or_else(|e| panic!("{}: reference: {e}", merged.name));
        let got = run(&merged.bpf, d).unwrap_or_else(|e| panic!("{}: merged: {e}", merged.name));
        assert_eq!(
            got, want,
            "{}: call {:#x} (arch {:#x}) args {:x?}: merged {got:#x}, filters one by one {want:#x}",
            merged.name, d.nr, d.arch, d.args
        );
        compared += 1;
    };
    let mut nrs: Vec<u32> = (0..=600).collect();
    nrs.extend([0x3fff_ffff, 0x7fff_ffff, 0x8000_0000, u32::MAX]);
    nrs.extend((0..600).step_by(7).map(|n| 0x4000_0000 | n));
    for arch_value in [own, AUDIT_I386, AUDIT_X86_64 ^ AUDIT_AARCH64 ^ own, 0] {
        for &nr in &nrs {
            let base = Data {
                nr,
                arch: arch_value,
                ..Data::default()
            };
            check(&base);
            // Arguments matter only where a program reads them.
            let reads = all
                .iter()
                .any(|p| trace(p, &base).is_ok_and(|t| t.read_args));
            if arch_value != own || !reads {
                continue;
            }
            // Each argument alone, low word from the constants, high word
            // 0, the same, or all ones.
            for i in 0..6 {
                for &w in &words {
                    for hi in [0, w, u32::MAX] {
                        let mut d = base;
                        d.args[i] = u64::from(w) | (u64::from(hi) << 32);
                        check(&d);
                    }
                }
            }
            // Mixes of arguments.
            for _ in 0..300 {
                let mut ws = [0u32; 12];
                for w in ws.iter_mut() {
                    if !rng.next().is_multiple_of(3) {
                        *w = rng.pick(&words);
                    }
                }
                let mut d = base;
                d.args = args_of(ws);
                check(&d);
            }
        }
    }
    compared
}

#[test]
fn merged_programs_decide_as_the_filters_one_by_one() {
    for table in Table::ALL {
        for arch in [TargetArch::x86_64, TargetArch::aarch64] {
            let n = compare(table, arch, None);
            assert!(n > 2_000, "{}: only {n} calls compared", table.name());
        }
    }
}

#[test]
fn every_subset_the_build_compiles_decides_as_its_filters() {
    for table in Table::ALL {
        let names = filter_names(table).unwrap();
        if names.len() > 3 {
            continue;
        }
        for mask in 1u32..(1 << names.len()) {
            let only: Vec<&str> = names
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, n)| n.as_str())
                .collect();
            compare(table, terra_seccomp::native_arch(), Some(&only));
            let built = terra_seccomp::compile_only(table, &only).unwrap();
            let now = compile_for(table, terra_seccomp::native_arch(), Some(&only)).unwrap();
            assert_eq!(built[0].bpf, now[0].bpf, "{}", built[0].name);
        }
    }
}

/// The point of the merge: the kernel's action cache runs a program once per
/// call number at every install; the dispatch reaches any number in a few
/// steps, where a list walks all its entries.
#[test]
fn merged_programs_reach_any_call_in_few_steps() {
    for table in Table::ALL {
        let merged = &compile(table).unwrap()[0];
        let longest = (0..=600u32)
            .map(|nr| {
                let d = Data {
                    nr,
                    arch: merged.bpf[1].k,
                    ..Data::default()
                };
                trace(&merged.bpf, &d).unwrap().steps_to_args
            })
            .max()
            .unwrap();
        assert!(
            longest <= 40,
            "{}: a call number takes {longest} steps to decide",
            merged.name
        );
    }
}
