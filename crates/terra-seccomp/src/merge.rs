//! The filters of one installation merged into one program: for every
//! system call, the action the kernel would take if each filter were
//! installed on its own (the action of highest precedence wins; between
//! equal actions, the filter installed last), decided when terra is built,
//! and reached by a binary search on the call's number.
//!
//! Why not seccompiler's programs as they are: each one tests the call's
//! number against its list one entry after another, and installing a filter
//! makes the kernel run it once for each of the ~460 call numbers to learn
//! which calls it always allows (its action cache). A list of N calls costs
//! about 460 x 2N steps at every install (measured: 0.1-0.35 ms for each
//! role's filters, on every run), and a call with argument checks runs
//! every filter of the stack, each walking its list. The argument checks of
//! each call are still seccompiler's code, copied as it wrote them; only the
//! dispatch and the combination are terra's, and the tests compare every
//! merged program with seccompiler's programs run one after another under
//! the kernel's rule (tests/merge.rs).

use std::collections::BTreeMap;

use seccompiler::{sock_filter, BpfProgram, SeccompAction, TargetArch};
use serde_json::{json, Value};

use super::table::{Filter, Kind, Rule};

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_ALU_AND_K: u16 = 0x54;
const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGT_K: u16 = 0x25;
const BPF_JMP_JGE_K: u16 = 0x35;
const BPF_JMP_JSET_K: u16 = 0x45;
const BPF_RET_K: u16 = 0x06;
/// offsetof(struct seccomp_data, nr) and (.., arch).
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_USER_NOTIF: u32 = 0x7fc0_0000;
/// SECCOMP_RET_ACTION_FULL: the action without its data.
const ACTION_FULL: u32 = 0xffff_0000;
/// The x32 ABI's bit in a system call number.
const X32_BIT: u32 = 0x4000_0000;
/// Errnos that stand for a filter's two actions while seccompiler compiles
/// one call's checks; every return of that code is one of the two.
const STAND_IN_MATCH: u32 = 0xaaa;
const STAND_IN_MISMATCH: u32 = 0xbbb;
const RET_ERRNO: u32 = 0x0005_0000;
/// The kernel's limit on a classic BPF program (BPF_MAXINSNS).
const MAX_LEN: usize = 4096;
/// Calls tested one by one at a leaf of the search.
const LEAF: usize = 3;

/// One filter as the merge sees it.
struct Part {
    matched: u32,
    mismatch: u32,
    /// What the filter answers an x32 number.
    refusal: u32,
    /// The calls it names: their argument checks (None: no condition).
    calls: BTreeMap<u32, Option<Vec<sock_filter>>>,
}

/// One step of a call's decision.
#[derive(Clone, PartialEq)]
enum Step {
    Ret(u32),
    /// Runs filter `part`'s checks of the call; each outcome returns or
    /// goes on to the next step.
    Test {
        part: usize,
        on_match: Option<u32>,
        on_mismatch: Option<u32>,
    },
}

/// An instruction, or a jump to (or the place of) a label.
enum Ins {
    Raw(sock_filter),
    Ja(usize),
    Label(usize),
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Why a table's filters could not be merged into one program.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("no filter to merge")]
    NoFilter,
    /// An action of the table that is not one seccompiler knows.
    #[error("{0}")]
    Action(serde_json::Error),
    /// The one-call source handed to seccompiler did not serialize.
    #[error("{0}")]
    Source(serde_json::Error),
    #[error("{0}")]
    Seccompiler(seccompiler::Error),
    /// A property of the merge's own output or of seccompiler's that the
    /// merge relies on does not hold (a bug, never the table's fault).
    #[error("{0}")]
    Shape(&'static str),
    #[error("the merged program has {len} instructions (the kernel takes {MAX_LEN})")]
    TooLong { len: usize },
    /// A failure about one named call.
    #[error("{call}: {source}")]
    Call {
        call: String,
        source: Box<MergeError>,
    },
    #[error("{call}: two names for call {nr}")]
    TwoNames { call: String, nr: u32 },
    #[error(
        "{call}: instruction {index} of seccompiler's code ({code:#x}) is not one the merge knows"
    )]
    UnknownInstruction {
        call: String,
        index: usize,
        code: u16,
    },
    #[error("{call}: instruction {index} jumps out of the call's code")]
    JumpOut { call: String, index: usize },
}

/// The kernel's order of actions: lower is stronger (`ACTION_ONLY`).
fn strength(ret: u32) -> i32 {
    (ret & ACTION_FULL) as i32
}

fn action(v: &Value) -> Result<u32, MergeError> {
    let a: SeccompAction = serde_json::from_value(v.clone()).map_err(MergeError::Action)?;
    Ok(a.into())
}

/// The filters `filters` (in installation order) as one program for `arch`.
pub fn merged(filters: &[Filter], arch: TargetArch) -> Result<BpfProgram, MergeError> {
    if filters.is_empty() {
        return Err(MergeError::NoFilter);
    }
    let parts = filters
        .iter()
        .map(|f| part(f, arch))
        .collect::<Result<Vec<_>, _>>()?;
    let audit_arch = audit_arch(arch)?;
    let mut nrs: Vec<u32> = parts.iter().flat_map(|p| p.calls.keys().copied()).collect();
    nrs.sort_unstable();
    nrs.dedup();
    let default = match decide(&parts, u32::MAX).as_slice() {
        [Step::Ret(k)] => *k,
        _ => return Err(MergeError::Shape("an unnamed call has no constant answer")),
    };
    // Calls answered as every unnamed call is need no branch of their own.
    let special: Vec<(u32, Vec<Step>)> = nrs
        .into_iter()
        .map(|nr| (nr, decide(&parts, nr)))
        .filter(|(_, steps)| steps.as_slice() != [Step::Ret(default)])
        .collect();

    let mut out = vec![
        Ins::Raw(stmt(BPF_LD_W_ABS, DATA_ARCH)),
        Ins::Raw(jump(BPF_JMP_JEQ_K, audit_arch, 1, 0)),
        Ins::Raw(stmt(BPF_RET_K, RET_KILL_PROCESS)),
        Ins::Raw(stmt(BPF_LD_W_ABS, DATA_NR)),
    ];
    if arch == TargetArch::x86_64 {
        let refusal = strongest(parts.iter().map(|p| p.refusal));
        out.push(Ins::Raw(jump(BPF_JMP_JGE_K, X32_BIT, 0, 1)));
        out.push(Ins::Raw(stmt(BPF_RET_K, refusal)));
    }
    let mut labels = 0usize;
    let mut new_label = || {
        labels += 1;
        labels
    };
    // One label per call whose answer is more than a constant.
    let code_labels: BTreeMap<u32, usize> = special
        .iter()
        .filter(|(_, s)| !matches!(s.as_slice(), [Step::Ret(_)]))
        .map(|(nr, _)| (*nr, new_label()))
        .collect();
    search(&mut out, &special, &code_labels, default, &mut new_label);
    for (nr, steps) in &special {
        let Some(&label) = code_labels.get(nr) else {
            continue;
        };
        out.push(Ins::Label(label));
        let step_labels: Vec<usize> = steps.iter().map(|_| new_label()).collect();
        for (i, step) in steps.iter().enumerate() {
            out.push(Ins::Label(step_labels[i]));
            let next = step_labels.get(i + 1).copied();
            match step {
                Step::Ret(k) => out.push(Ins::Raw(stmt(BPF_RET_K, *k))),
                Step::Test {
                    part,
                    on_match,
                    on_mismatch,
                } => {
                    let code = parts[*part].calls[nr]
                        .as_ref()
                        .ok_or(MergeError::Shape("a test of a call without conditions"))?;
                    for ins in code {
                        let outcome = match (ins.code, ins.k) {
                            (BPF_RET_K, k) if k == RET_ERRNO | STAND_IN_MATCH => Some(*on_match),
                            (BPF_RET_K, k) if k == RET_ERRNO | STAND_IN_MISMATCH => {
                                Some(*on_mismatch)
                            }
                            _ => None,
                        };
                        out.push(match outcome {
                            None => Ins::Raw(ins.clone()),
                            Some(Some(k)) => Ins::Raw(stmt(BPF_RET_K, k)),
                            Some(None) => {
                                Ins::Ja(next.ok_or(MergeError::Shape("the last step goes on"))?)
                            }
                        });
                    }
                }
            }
        }
    }
    let program = assemble(out)?;
    if program.len() > MAX_LEN {
        return Err(MergeError::TooLong { len: program.len() });
    }
    Ok(program)
}

/// The strongest of `rets`; between equals, the last (the filter installed last).
fn strongest(rets: impl Iterator<Item = u32>) -> u32 {
    rets.fold(None, |best: Option<u32>, r| match best {
        Some(b) if strength(b) < strength(r) => Some(b),
        _ => Some(r),
    })
    .unwrap_or(RET_KILL_PROCESS)
}

/// The steps that decide call `nr`: every filter's two possible answers,
/// strongest first (between equals, the filter installed last first); the
/// first that happens is the kernel's answer. An answer that cannot happen
/// is left out, one that always happens ends the list.
fn decide(parts: &[Part], nr: u32) -> Vec<Step> {
    let mut answers: Vec<(u32, usize, bool)> = parts
        .iter()
        .enumerate()
        .flat_map(|(i, p)| [(p.matched, i, true), (p.mismatch, i, false)])
        .collect();
    answers.sort_by_key(|&(ret, i, _)| (strength(ret), std::cmp::Reverse(i)));
    let mut steps = Vec::new();
    // Whether a filter's checks matched, once a step tested them and went on.
    let mut known: Vec<Option<bool>> = vec![None; parts.len()];
    for (ret, i, is_match) in answers {
        // Some(true): this filter's checks match the call.
        let matches = match parts[i].calls.get(&nr) {
            // Not named: the filter's mismatch, always.
            None => Some(false),
            Some(None) => Some(true),
            Some(Some(_)) => known[i],
        };
        match (matches, is_match) {
            (Some(m), _) if m != is_match => {}
            (Some(_), _) => {
                steps.push(Step::Ret(ret));
                return steps;
            }
            (None, true) => {
                steps.push(Step::Test {
                    part: i,
                    on_match: Some(ret),
                    on_mismatch: None,
                });
                known[i] = Some(false);
            }
            (None, false) => {
                steps.push(Step::Test {
                    part: i,
                    on_match: None,
                    on_mismatch: Some(ret),
                });
                known[i] = Some(true);
            }
        }
    }
    // Each filter answers one of its two: the list above always ends in a
    // return. Kept as a guard: a fall-through kills.
    steps.push(Step::Ret(RET_KILL_PROCESS));
    steps
}

/// A binary search on the number in A over `calls` (sorted), jumping to a
/// call's code or returning its constant; any other number gets `default`.
fn search(
    out: &mut Vec<Ins>,
    calls: &[(u32, Vec<Step>)],
    labels: &BTreeMap<u32, usize>,
    default: u32,
    new_label: &mut impl FnMut() -> usize,
) {
    if calls.len() <= LEAF {
        for (nr, steps) in calls {
            out.push(Ins::Raw(jump(BPF_JMP_JEQ_K, *nr, 0, 1)));
            out.push(match (steps.as_slice(), labels.get(nr)) {
                ([Step::Ret(k)], _) => Ins::Raw(stmt(BPF_RET_K, *k)),
                (_, Some(l)) => Ins::Ja(*l),
                (_, None) => Ins::Raw(stmt(BPF_RET_K, RET_KILL_PROCESS)),
            });
        }
        out.push(Ins::Raw(stmt(BPF_RET_K, default)));
        return;
    }
    let mid = calls.len() / 2;
    let low = new_label();
    out.push(Ins::Raw(jump(BPF_JMP_JGE_K, calls[mid].0, 1, 0)));
    out.push(Ins::Ja(low));
    search(out, &calls[mid..], labels, default, new_label);
    out.push(Ins::Label(low));
    search(out, &calls[..mid], labels, default, new_label);
}

/// Resolves the labels: every jump of terra's is forward (a JA's 32-bit offset).
fn assemble(items: Vec<Ins>) -> Result<BpfProgram, MergeError> {
    let mut at = BTreeMap::new();
    let mut pos = 0usize;
    for i in &items {
        match i {
            Ins::Label(l) => {
                at.insert(*l, pos);
            }
            _ => pos += 1,
        }
    }
    let mut out = Vec::with_capacity(pos);
    for i in items {
        match i {
            Ins::Label(_) => {}
            Ins::Raw(r) => out.push(r),
            Ins::Ja(l) => {
                let target = at[&l];
                let here = out.len();
                if target <= here {
                    return Err(MergeError::Shape("a backward jump"));
                }
                out.push(stmt(BPF_JMP_JA, (target - here - 1) as u32));
            }
        }
    }
    Ok(out)
}

const UNKNOWN_SHAPE: &str = "seccompiler's program has an unknown shape";

/// The audit architecture value seccompiler checks for `arch`.
fn audit_arch(arch: TargetArch) -> Result<u32, MergeError> {
    let probe = one_call_program(&[&Rule::plain("getpid")], arch)?;
    Ok(probe[1].k)
}

/// Filter `f` with each call it names and that call's checks, compiled by
/// seccompiler one call at a time.
fn part(f: &Filter, arch: TargetArch) -> Result<Part, MergeError> {
    let (matched, mismatch) = f.actions();
    let matched = if f.kind == Kind::Notify {
        RET_USER_NOTIF
    } else {
        action(matched)?
    };
    let mismatch = action(mismatch)?;
    let refusal = action(&f.refusal)?;
    let arch_name = super::compile::arch_name(arch);
    let mut by_name: BTreeMap<&str, Vec<&Rule>> = BTreeMap::new();
    for r in f.rules.iter().filter(|r| r.exists_on(arch_name)) {
        by_name.entry(r.syscall.as_str()).or_default().push(r);
    }
    let mut calls = BTreeMap::new();
    for (name, rules) in by_name {
        let bpf = one_call_program(&rules, arch).map_err(|e| MergeError::Call {
            call: name.to_string(),
            source: Box::new(e),
        })?;
        // Arch check (3), load nr, test nr: then the call's code.
        let nr = match bpf.get(4) {
            Some(i) if i.code == BPF_JMP_JEQ_K && (i.jt, i.jf) == (0, 1) => i.k,
            _ => {
                return Err(MergeError::Call {
                    call: name.to_string(),
                    source: Box::new(MergeError::Shape(UNKNOWN_SHAPE)),
                })
            }
        };
        let code = bpf[5..].to_vec();
        check_code(name, &code)?;
        let conditional = rules.iter().any(|r| r.conditional);
        if calls.insert(nr, conditional.then_some(code)).is_some() {
            return Err(MergeError::TwoNames {
                call: name.to_string(),
                nr,
            });
        }
    }
    Ok(Part {
        matched,
        mismatch,
        refusal,
        calls,
    })
}

/// seccompiler's program for `rules` (all of one call) with stand-in errnos
/// for match and mismatch.
fn one_call_program(rules: &[&Rule], arch: TargetArch) -> Result<BpfProgram, MergeError> {
    let source = json!({ "one": {
        "mismatch_action": { "errno": STAND_IN_MISMATCH },
        "match_action": { "errno": STAND_IN_MATCH },
        "filter": rules.iter().map(|r| r.seccompiler_json()).collect::<Vec<_>>(),
    }});
    let text = serde_json::to_vec(&source).map_err(MergeError::Source)?;
    let mut map =
        seccompiler::compile_from_json(text.as_slice(), arch).map_err(MergeError::Seccompiler)?;
    let bpf = map
        .remove("one")
        .ok_or(MergeError::Shape("seccompiler returned no program"))?;
    let shape = bpf.len() > 5
        && bpf[0].code == BPF_LD_W_ABS
        && bpf[0].k == DATA_ARCH
        && bpf[1].code == BPF_JMP_JEQ_K
        && bpf[2].code == BPF_RET_K
        && bpf[2].k == RET_KILL_PROCESS
        && bpf[3].code == BPF_LD_W_ABS
        && bpf[3].k == DATA_NR;
    if !shape {
        return Err(MergeError::Shape(UNKNOWN_SHAPE));
    }
    Ok(bpf)
}

/// A call's code may only load the call's data, mask, compare, jump forward
/// and return one of the two stand-ins: nothing that reads A before loading
/// it from the call or keeps state between calls.
fn check_code(name: &str, code: &[sock_filter]) -> Result<(), MergeError> {
    for (i, ins) in code.iter().enumerate() {
        let ok = match ins.code {
            BPF_LD_W_ABS => ins.k.is_multiple_of(4) && ins.k < 64,
            BPF_ALU_AND_K | BPF_JMP_JA => true,
            BPF_JMP_JEQ_K | BPF_JMP_JGT_K | BPF_JMP_JGE_K | BPF_JMP_JSET_K => true,
            BPF_RET_K => {
                ins.k == RET_ERRNO | STAND_IN_MATCH || ins.k == RET_ERRNO | STAND_IN_MISMATCH
            }
            _ => false,
        };
        if !ok {
            return Err(MergeError::UnknownInstruction {
                call: name.to_string(),
                index: i,
                code: ins.code,
            });
        }
        // Every jump lands inside the call's code.
        let reach = |off: u32| i + 1 + off as usize;
        let lands = match ins.code {
            BPF_JMP_JA => reach(ins.k) < code.len(),
            BPF_JMP_JEQ_K | BPF_JMP_JGT_K | BPF_JMP_JGE_K | BPF_JMP_JSET_K => {
                reach(u32::from(ins.jt)) < code.len() && reach(u32::from(ins.jf)) < code.len()
            }
            _ => true,
        };
        if !lands {
            return Err(MergeError::JumpOut {
                call: name.to_string(),
                index: i,
            });
        }
    }
    Ok(())
}
