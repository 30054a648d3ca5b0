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

mod arches;
mod compile;
mod describe;
pub mod eval;
mod merge;
pub use merge::MergeError;
mod table;

use std::collections::BTreeSet;

use compile::arch_name;
pub use compile::X32_SYSCALL_BIT;
use seccompiler::sock_filter;
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
    WorkloadNotify,
    VmHost,
}

impl Table {
    pub const ALL: [Table; 8] = [
        Table::Workload,
        Table::LandlockClosures,
        Table::Supervisor,
        Table::Broker,
        Table::BoxInit,
        Table::BoxService,
        Table::WorkloadNotify,
        Table::VmHost,
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
            Table::WorkloadNotify => "workload-notify",
            Table::VmHost => "vm-host",
        }
    }

    /// The process the table confines, as reports name it.
    pub fn process(self) -> &'static str {
        match self {
            Table::Workload | Table::LandlockClosures | Table::WorkloadNotify => "the workload",
            Table::Supervisor => "terra __supervisor",
            Table::Broker => "terra __network",
            Table::BoxInit => "terra __vm (the box's init)",
            Table::BoxService => "the box's network service",
            Table::VmHost => "terra __vm (the vm backend's relay)",
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
            Table::WorkloadNotify => include_str!("../tables/workload-notify.json"),
            Table::VmHost => include_str!("../tables/vm-host.json"),
        }
    }

    fn filters(self) -> Result<Vec<table::Filter>, Error> {
        table::parse(self.name(), self.source()).map_err(|message| Error::Table {
            table: self.name().into(),
            message,
        })
    }

    /// The filters, each rule checked against the architectures its call
    /// exists on (as the build checks them before compiling).
    fn checked_filters(self) -> Result<Vec<table::Filter>, Error> {
        let filters = self.filters()?;
        for f in &filters {
            arches::check(f).map_err(|message| Error::Table {
                table: self.name().into(),
                message: format!("seccomp table {}: {message}", self.name()),
            })?;
        }
        Ok(filters)
    }
}

/// Why a table could not be read, compiled or installed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{message}")]
    Table { table: String, message: String },
    #[error("seccomp table {table}, filter {filter}: {message}")]
    Compile {
        table: &'static str,
        filter: String,
        message: String,
    },
    #[error("seccomp table {table}, filter {filter}: {source}")]
    Merge {
        table: &'static str,
        filter: String,
        source: MergeError,
    },
    #[error("seccomp: installing filter {filter}: {source}")]
    Install {
        filter: String,
        source: seccompiler::Error,
    },
}

/// One compiled program.
#[derive(Debug, Clone)]
pub struct Program {
    /// `TABLE/FILTER+FILTER...`, e.g. `supervisor/absent+allow`: the
    /// filters merged into it, in installation order.
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

/// One BPF instruction as the build script writes it: (code, jt, jf, k).
type Insn = (u16, u8, u8, u32);

include!(concat!(env!("OUT_DIR"), "/compiled.rs"));

/// The program of `table`: all its filters merged into one (see
/// `merge.rs`), compiled for this architecture when terra was built. A
/// Vec, so the tables install alike.
pub fn compile(table: Table) -> Result<Vec<Program>, Error> {
    prebuilt(table, None)
}

/// The program of `table`'s filters named in `only`, merged, compiled when
/// terra was built (a table of at most three filters has every subset).
pub fn compile_only(table: Table, only: &[&str]) -> Result<Vec<Program>, Error> {
    prebuilt(table, Some(only))
}

fn prebuilt(table: Table, only: Option<&[&str]>) -> Result<Vec<Program>, Error> {
    let refuse = |message: String| Error::Table {
        table: table.name().into(),
        message,
    };
    let of_table: Vec<_> = COMPILED
        .iter()
        .filter(|(t, ..)| *t == table.name())
        .collect();
    let Some((_, all, ..)) = of_table.iter().find(|(_, _, full, _)| *full) else {
        return Err(refuse("not compiled into this build".into()));
    };
    for name in only.unwrap_or_default() {
        if !all.contains(name) {
            return Err(refuse(format!("no filter {name}")));
        }
    }
    let (_, names, _, insns) = of_table
        .iter()
        .find(|(_, names, full, _)| match only {
            None => *full,
            Some(o) => names.len() == o.len() && names.iter().all(|n| o.contains(n)),
        })
        .ok_or_else(|| refuse("this set of its filters is not compiled into this build".into()))?;
    Ok(vec![Program {
        name: format!("{}/{}", table.name(), names.join("+")),
        bpf: insns
            .iter()
            .map(|&(code, jt, jf, k)| sock_filter { code, jt, jf, k })
            .collect(),
    }])
}

/// `table` (its filters in `only`, or all) compiled now from its JSON for
/// `arch`, merged as the build merges it (the tests compare the two).
pub fn compile_for(
    table: Table,
    arch: TargetArch,
    only: Option<&[&str]>,
) -> Result<Vec<Program>, Error> {
    let filters: Vec<table::Filter> = compile::ordered(table.checked_filters()?)
        .into_iter()
        .filter(|f| only.is_none_or(|o| o.contains(&f.name.as_str())))
        .collect();
    let names: Vec<&str> = filters.iter().map(|f| f.name.as_str()).collect();
    let name = format!("{}/{}", table.name(), names.join("+"));
    let bpf = merge::merged(&filters, arch).map_err(|source| Error::Merge {
        table: table.name(),
        filter: names.join("+"),
        source,
    })?;
    Ok(vec![Program { name, bpf }])
}

/// `table`'s filters (those in `only`, or all) each compiled on its own by
/// seccompiler, in installation order: what the merged program must decide
/// exactly as (the kernel runs every filter of a stack and takes the
/// strongest action; see `eval::stacked`).
pub fn reference_for(
    table: Table,
    arch: TargetArch,
    only: Option<&[&str]>,
) -> Result<Vec<Program>, Error> {
    let mut out = Vec::new();
    for f in compile::ordered(table.checked_filters()?) {
        if only.is_some_and(|o| !o.contains(&f.name.as_str())) {
            continue;
        }
        let bpf = compile::filter(&f, arch).map_err(|message| Error::Compile {
            table: table.name(),
            filter: f.name.clone(),
            message,
        })?;
        out.push(Program {
            name: format!("{}/{}", table.name(), f.name),
            bpf,
        });
    }
    Ok(out)
}

/// The names of `table`'s filters, in installation order.
pub fn filter_names(table: Table) -> Result<Vec<String>, Error> {
    Ok(compile::ordered(table.filters()?)
        .into_iter()
        .map(|f| f.name)
        .collect())
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
        .filter(|f| f.kind == Kind::Allow)
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
