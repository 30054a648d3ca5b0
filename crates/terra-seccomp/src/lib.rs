//! Every seccomp filter terra installs, generated from one table per role
//! (`tables/*.json`, reviewed in one place; the format is seccompiler's JSON
//! with an `about` per filter and an optional `arch` per rule):
//!
//! - `workload`: what runs in the box is arbitrary, so it is a set of deny
//!   lists (default allow, listed calls fail with an errno);
//! - `landlock-closures`: the landlock backend's extra deny lists;
//! - `supervisor`, `broker`, `box-init`, `box-service`: one allowlist per
//!   role whose default kills the process (SECCOMP_RET_KILL_PROCESS), plus
//!   `absent` (clone3 answered with ENOSYS so the C library uses clone,
//!   whose flags a filter can read).
//!
//! Every compiled program checks the architecture first (a call through
//! another ABI kills the process) and, on x86_64, refuses x32 numbers (bit
//! 30 set) with the filter's own refusal, so no table's bans can be
//! sidestepped through the x32 ABI. ioctl requests are compared on their low
//! 32 bits in every table (checked when a table is read).
#![forbid(unsafe_code)]
#![cfg(target_os = "linux")]

mod describe;
mod table;

use std::collections::BTreeSet;

use seccompiler::{sock_filter, SeccompAction};
pub use seccompiler::{BpfProgram, TargetArch};
pub use table::Kind;

/// The tables, one per role (and the landlock backend's extra deny lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    Workload,
    LandlockClosures,
    Supervisor,
    Broker,
    BoxInit,
    BoxService,
}

impl Table {
    pub const ALL: [Table; 6] = [
        Table::Workload,
        Table::LandlockClosures,
        Table::Supervisor,
        Table::Broker,
        Table::BoxInit,
        Table::BoxService,
    ];

    /// The table's file name without `.json`.
    pub fn name(self) -> &'static str {
        match self {
            Table::Workload => "workload",
            Table::LandlockClosures => "landlock-closures",
            Table::Supervisor => "supervisor",
            Table::Broker => "broker",
            Table::BoxInit => "box-init",
            Table::BoxService => "box-service",
        }
    }

    /// The process the table confines, as reports name it.
    pub fn process(self) -> &'static str {
        match self {
            Table::Workload | Table::LandlockClosures => "the workload",
            Table::Supervisor => "terra __supervisor",
            Table::Broker => "terra __network",
            Table::BoxInit => "terra __vm (the box's init)",
            Table::BoxService => "the box's proxy service",
        }
    }

    pub fn source(self) -> &'static str {
        match self {
            Table::Workload => include_str!("../tables/workload.json"),
            Table::LandlockClosures => include_str!("../tables/landlock-closures.json"),
            Table::Supervisor => include_str!("../tables/supervisor.json"),
            Table::Broker => include_str!("../tables/broker.json"),
            Table::BoxInit => include_str!("../tables/box-init.json"),
            Table::BoxService => include_str!("../tables/box-service.json"),
        }
    }

    fn filters(self) -> Result<Vec<table::Filter>, Error> {
        table::parse(self.name(), self.source())
    }
}

/// Why a table could not be read, compiled or installed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("seccomp table {table}: {message}")]
    Table { table: String, message: String },
    #[error("seccomp table {table}, filter {filter}: {message}")]
    Compile {
        table: &'static str,
        filter: String,
        message: String,
    },
    #[error("seccomp: installing filter {filter}: {source}")]
    Install {
        filter: String,
        source: seccompiler::Error,
    },
}

/// One compiled filter.
#[derive(Debug, Clone)]
pub struct Program {
    /// `TABLE/FILTER`, e.g. `broker/allow`.
    pub name: String,
    pub bpf: BpfProgram,
}

/// The architecture this build runs on.
pub fn native_arch() -> TargetArch {
    #[cfg(target_arch = "x86_64")]
    return TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    return TargetArch::aarch64;
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    compile_error!("terra's seccomp tables cover x86_64 and aarch64");
}

fn arch_name(arch: TargetArch) -> &'static str {
    match arch {
        TargetArch::x86_64 => "x86_64",
        TargetArch::aarch64 => "aarch64",
        TargetArch::riscv64 => "riscv64",
    }
}

/// Every filter of `table`, compiled for this architecture.
pub fn compile(table: Table) -> Result<Vec<Program>, Error> {
    compile_for(table, native_arch(), None)
}

/// The filters of `table` named in `only`, compiled for this architecture.
pub fn compile_only(table: Table, only: &[&str]) -> Result<Vec<Program>, Error> {
    for name in only {
        if !table.filters()?.iter().any(|f| f.name == *name) {
            return Err(Error::Table {
                table: table.name().into(),
                message: format!("no filter {name}"),
            });
        }
    }
    compile_for(table, native_arch(), Some(only))
}

/// [`compile`] for `arch` (tests compile every table for every architecture).
pub fn compile_for(
    table: Table,
    arch: TargetArch,
    only: Option<&[&str]>,
) -> Result<Vec<Program>, Error> {
    let arch_s = arch_name(arch);
    let mut out = Vec::new();
    // Allowlists go last: installing a filter takes prctl and seccomp calls
    // that an allowlist already in place would not admit.
    let mut filters = table.filters()?;
    filters.sort_by_key(|f| f.kind == Kind::AllowList);
    for f in filters {
        if only.is_some_and(|o| !o.contains(&f.name.as_str())) {
            continue;
        }
        let err = |message: String| Error::Compile {
            table: table.name(),
            filter: f.name.clone(),
            message,
        };
        let json =
            serde_json::to_vec(&f.seccompiler_json(arch_s)).map_err(|e| err(e.to_string()))?;
        let mut map = seccompiler::compile_from_json(json.as_slice(), arch)
            .map_err(|e| err(e.to_string()))?;
        let bpf = map
            .remove(&f.name)
            .ok_or_else(|| err("seccompiler returned no program".into()))?;
        let refusal: SeccompAction =
            serde_json::from_value(f.refusal.clone()).map_err(|e| err(e.to_string()))?;
        let bpf = if arch == TargetArch::x86_64 {
            with_x32_refusal(bpf, refusal.into()).map_err(err)?
        } else {
            bpf
        };
        out.push(Program {
            name: format!("{}/{}", table.name(), f.name),
            bpf,
        });
    }
    Ok(out)
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
/// offsetof(struct seccomp_data, arch).
const DATA_ARCH: u32 = 4;
/// The x32 ABI's bit in a system call number.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

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
        && bpf[2].k == libc::SECCOMP_RET_KILL_PROCESS
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

/// Installs `programs` on the calling thread (and what it starts later), in
/// [`compile`]'s order (allowlists last).
pub fn install(programs: &[Program]) -> Result<(), Error> {
    for p in programs {
        seccompiler::apply_filter(&p.bpf).map_err(|source| Error::Install {
            filter: p.name.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Installs `programs` on every thread of the process (TSYNC).
pub fn install_all_threads(programs: &[Program]) -> Result<(), Error> {
    for p in programs {
        seccompiler::apply_filter_all_threads(&p.bpf).map_err(|source| Error::Install {
            filter: p.name.clone(),
            source,
        })?;
    }
    Ok(())
}

/// The system calls `table`'s allowlists admit on `arch` (with or without
/// conditions); empty for a table of deny lists.
pub fn allowed(table: Table, arch: &str) -> Result<BTreeSet<String>, Error> {
    Ok(table
        .filters()?
        .into_iter()
        .filter(|f| f.kind == Kind::AllowList)
        .flat_map(|f| f.rules)
        .filter(|r| r.exists_on(arch))
        .map(|r| r.syscall)
        .collect())
}

/// The `--dry-run` lines of `table` (the filters given by `only`, or all),
/// written from the table itself.
pub fn describe(table: Table, only: Option<&[&str]>) -> Result<String, Error> {
    let filters: Vec<_> = table
        .filters()?
        .into_iter()
        .filter(|f| only.is_none_or(|o| o.contains(&f.name.as_str())))
        .collect();
    Ok(describe::lines(table, &filters, arch_name(native_arch())))
}

/// How a process ended by a seccomp kill shows in its wait status.
pub const KILL_SIGNAL: i32 = libc::SIGSYS;
