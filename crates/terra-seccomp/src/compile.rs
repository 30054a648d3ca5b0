//! One filter of a table to a BPF program for one architecture: seccompiler
//! compiles the rules (its program starts with the architecture check), and
//! on x86_64 the x32 refusal goes right after that check. Shared by the
//! build script (every table, compiled for the target when terra is built)
//! and the library (the tests compile each table for every architecture).

use seccompiler::{sock_filter, BpfProgram, SeccompAction, TargetArch};

use super::table::Filter;

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
/// offsetof(struct seccomp_data, arch).
const DATA_ARCH: u32 = 4;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_TRAP: u32 = 0x0003_0000;
const RET_USER_NOTIF: u32 = 0x7fc0_0000;
/// The x32 ABI's bit in a system call number.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

pub fn arch_name(arch: TargetArch) -> &'static str {
    match arch {
        TargetArch::x86_64 => "x86_64",
        TargetArch::aarch64 => "aarch64",
        TargetArch::riscv64 => "riscv64",
    }
}

/// The installation order of a table's filters: deny lists first,
/// allowlists last (installing a filter takes prctl and seccomp calls that
/// an allowlist already in place would not admit).
pub fn ordered(mut filters: Vec<Filter>) -> Vec<Filter> {
    filters.sort_by_key(|f| f.kind == super::table::Kind::Allow);
    filters
}

/// `f` compiled for `arch`.
pub fn filter(f: &Filter, arch: TargetArch) -> Result<BpfProgram, String> {
    let json =
        serde_json::to_vec(&f.seccompiler_json(arch_name(arch))).map_err(|e| e.to_string())?;
    let mut map =
        seccompiler::compile_from_json(json.as_slice(), arch).map_err(|e| e.to_string())?;
    let bpf = map
        .remove(&f.name)
        .ok_or_else(|| "seccompiler returned no program".to_string())?;
    let refusal: SeccompAction =
        serde_json::from_value(f.refusal.clone()).map_err(|e| e.to_string())?;
    let bpf = if f.kind == super::table::Kind::Notify {
        with_user_notif(bpf)
    } else {
        bpf
    };
    if arch == TargetArch::x86_64 {
        with_x32_refusal(bpf, refusal.into())
    } else {
        Ok(bpf)
    }
}

/// A notify list is compiled with `trap` standing for its matched calls
/// (seccompiler has no user-notification action); every such return becomes
/// SECCOMP_RET_USER_NOTIF.
fn with_user_notif(mut bpf: BpfProgram) -> BpfProgram {
    for i in bpf.iter_mut() {
        if i.code == BPF_RET_K && i.k == RET_TRAP {
            i.k = RET_USER_NOTIF;
        }
    }
    bpf
}

/// Inserts, right after seccompiler's architecture check, a test that
/// answers every x32 number with `refusal`. The check shares x86_64's audit
/// architecture with x32, so without this a table's bans would not hold for
/// x32 numbers. Every later jump is relative and forward, so none moves.
fn with_x32_refusal(mut bpf: BpfProgram, refusal: u32) -> Result<BpfProgram, String> {
    let stmt = |code, k| sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let arch_check = bpf.len() > 3
        && bpf[0].code == BPF_LD_W_ABS
        && bpf[0].k == DATA_ARCH
        && bpf[1].code == BPF_JMP_JEQ_K
        && (bpf[1].jt, bpf[1].jf) == (1, 0)
        && bpf[2].code == BPF_RET_K
        && bpf[2].k == RET_KILL_PROCESS
        && bpf[3].code == BPF_LD_W_ABS
        && bpf[3].k == 0;
    if !arch_check {
        return Err("the program does not start with the architecture check".into());
    }
    let x32 = [
        stmt(BPF_LD_W_ABS, 0),
        sock_filter {
            code: BPF_JMP_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        stmt(BPF_RET_K, refusal),
    ];
    bpf.splice(3..3, x32);
    Ok(bpf)
}
