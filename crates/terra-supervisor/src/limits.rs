//! Resource limits of a run (`--memory`, `--pids`, `--cpus`,
//! `--max-file-size`): which mechanism enforces each one on this host, the
//! cgroups made for it, and what the run's end says about them.
//!
//! Order of preference per limit: a cgroup v2 child of a delegated subtree
//! (a writable ancestor of the caller's cgroup whose `cgroup.subtree_control`
//! holds the controller), a cgroup v1 child in the controller's own hierarchy
//! (writable: root on hybrid hosts), an rlimit the workload sets on itself
//! (memory: RLIMIT_AS; pids: RLIMIT_NPROC, only where it binds; file size:
//! RLIMIT_FSIZE), else none. A limit is never claimed when nothing applied:
//! the receipt says "none" and `--require-limits` refuses the run.
//!
//! The CLI makes the cgroups (before the supervisor starts) and removes them
//! after it ended; the supervisor joins them itself right before it clones
//! the box and leaves them right after (the box inherits them, and every
//! process it forks stays inside), all before it confines itself.

use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Where every cgroup filesystem is mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The scheduler period terra's CPU quotas use, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// The limits asked for; `None`: not asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Requested {
    /// Bytes.
    pub memory: Option<u64>,
    /// Processes (and threads, for a cgroup).
    pub pids: Option<u64>,
    /// Thousandths of a CPU.
    pub millicpus: Option<u64>,
    /// Bytes.
    pub max_file_size: Option<u64>,
}

impl Requested {
    pub fn is_empty(&self) -> bool {
        *self == Requested::default()
    }
}

/// What enforces one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mechanism {
    #[serde(rename = "cgroup-v2")]
    CgroupV2,
    #[serde(rename = "cgroup-v1")]
    CgroupV1,
    #[serde(rename = "rlimit")]
    Rlimit,
    #[serde(rename = "none")]
    None,
}

/// One limit as the receipt records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limit {
    /// As asked, in words ("64 MiB", "64", "1.5").
    pub requested: String,
    /// The number applied (bytes, processes, thousandths of a CPU).
    pub value: u64,
    pub mechanism: Mechanism,
    /// Why this mechanism (or why none could apply).
    pub detail: String,
}

/// The rlimits the workload sets on itself (terra-sandbox's `Rlimits`,
/// kept here so the request builds on every Unix).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rlimits {
    /// RLIMIT_AS, bytes.
    pub address_space: Option<u64>,
    /// RLIMIT_NPROC.
    pub processes: Option<u64>,
    /// RLIMIT_FSIZE, bytes.
    pub file_size: Option<u64>,
}

/// A cgroup made for one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cgroup {
    /// 1 or 2.
    pub version: u8,
    pub dir: PathBuf,
    /// The v1 controller of its hierarchy, or the v2 controllers set in it.
    pub controllers: Vec<String>,
}

/// Every limit of a run with its mechanism, the cgroups that hold them and
/// the workload's rlimits. Travels in the run request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitPlan {
    pub memory: Option<Limit>,
    pub pids: Option<Limit>,
    pub cpus: Option<Limit>,
    pub max_file_size: Option<Limit>,
    pub cgroups: Vec<Cgroup>,
    pub rlimits: Rlimits,
}

/// Why a limit's value (`--memory 64M`, `--cpus 0.5`, ...) is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("{0:?} is not a size (a number with K, M, G or T)")]
    NotASize(String),
    #[error("{value:?}: unknown unit {unit:?} (K, M, G or T)")]
    UnknownUnit { value: String, unit: String },
    #[error("{0:?} is too large")]
    TooLarge(String),
    #[error("{0:?}: a limit of 0 would stop everything")]
    Zero(String),
    #[error("{0:?} is not a number of CPUs (1, 0.5, 2.25)")]
    NotCpus(String),
    #[error("{0:?}: a limit of 0 CPUs would stop everything")]
    ZeroCpus(String),
    #[error("not a positive number of processes")]
    NotProcesses,
}

/// Why RLIMIT_NPROC cannot limit the box (the pids limit's detail in the
/// receipt).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum NprocExempt {
    #[error("no writable pids cgroup; RLIMIT_NPROC would count every process of the caller's uid on the host (the landlock backend has no user namespace), so it is not used")]
    Landlock,
    #[error("no writable pids cgroup; the kernel does not apply RLIMIT_NPROC to processes of the host's root user")]
    Root,
}

/// `64M`, `1G`, `512k`, `1MiB`, `4096`: binary multiples, bytes without a suffix.
pub fn parse_size(s: &str) -> std::result::Result<u64, ValueError> {
    let t = s.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (num, unit) = t.split_at(digits);
    let n: u64 = num.parse().map_err(|_| ValueError::NotASize(s.into()))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(ValueError::UnknownUnit {
                value: s.into(),
                unit: unit.into(),
            })
        }
    };
    let v = n
        .checked_mul(1u64 << shift)
        .ok_or_else(|| ValueError::TooLarge(s.into()))?;
    if v == 0 {
        return Err(ValueError::Zero(s.into()));
    }
    Ok(v)
}

/// `1`, `0.5`, `2.25`: CPUs, to a thousandth.
pub fn parse_cpus(s: &str) -> std::result::Result<u64, ValueError> {
    let bad = || ValueError::NotCpus(s.into());
    let (int, frac) = s.trim().split_once('.').unwrap_or((s.trim(), ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let whole: u64 = int.parse().map_err(|_| bad())?;
    let thousandths: u64 = format!("{frac:0<3}").parse().map_err(|_| bad())?;
    let v = whole
        .checked_mul(1000)
        .and_then(|w| w.checked_add(thousandths))
        .ok_or_else(bad)?;
    if v == 0 {
        return Err(ValueError::ZeroCpus(s.into()));
    }
    Ok(v)
}

/// Bytes in words: "64 MiB" when exact, else the byte count.
pub fn size_words(v: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if v >= 1 << shift && v.is_multiple_of(1 << shift) {
            return format!("{} {unit}", v >> shift);
        }
    }
    format!("{v} bytes")
}

fn cpus_words(m: u64) -> String {
    match m % 1000 {
        0 => format!("{}", m / 1000),
        f => format!("{}.{}", m / 1000, format!("{f:03}").trim_end_matches('0')),
    }
}

/// The limits that nothing enforces, by flag name.
impl LimitPlan {
    pub fn unenforced(&self) -> Vec<&'static str> {
        self.entries()
            .into_iter()
            .filter(|(_, l)| l.mechanism == Mechanism::None)
            .map(|(n, _)| n)
            .collect()
    }

    fn entries(&self) -> Vec<(&'static str, &Limit)> {
        [
            ("--memory", &self.memory),
            ("--pids", &self.pids),
            ("--cpus", &self.cpus),
            ("--max-file-size", &self.max_file_size),
        ]
        .into_iter()
        .filter_map(|(n, l)| l.as_ref().map(|l| (n, l)))
        .collect()
    }

    /// The refusal of `--require-limits`, naming each limit and why.
    pub fn require_all(&self) -> Result<()> {
        let missing: Vec<String> = self
            .entries()
            .into_iter()
            .filter(|(_, l)| l.mechanism == Mechanism::None)
            .map(|(n, l)| format!("{n} {}: {}", l.requested, l.detail))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(Error::Unsupported(format!(
            "--require-limits: no mechanism on this host enforces {}; nothing was started",
            missing.join("; ")
        )))
    }

    /// Removes the run's cgroups (their processes are gone once the
    /// supervisor ended; a cgroup busy a moment longer is retried).
    pub fn remove_cgroups(&self) {
        for cg in self.cgroups.iter().rev() {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match fs::remove_dir(&cg.dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    // EBUSY (16 on Linux and macOS; libc is a Linux-only
                    // dependency here).
                    Err(e) if e.raw_os_error() == Some(16) && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        eprintln!(
                            "terra: cannot remove the run's cgroup {}: {e}",
                            cg.dir.display()
                        );
                        break;
                    }
                }
            }
        }
    }

    /// The supervisor's check of what the request claims: every cgroup a
    /// run-owned directory under the cgroup mount, and every claimed
    /// cgroup mechanism backed by one.
    pub fn validate(&self) -> Result<()> {
        for cg in &self.cgroups {
            let owned = cg.dir.starts_with(CGROUP_ROOT)
                && cg
                    .dir
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("terra-"))
                && !cg.dir.components().any(|c| c.as_os_str() == "..");
            if !owned || !matches!(cg.version, 1 | 2) {
                return Err(Error::Request(format!(
                    "the limits name a cgroup terra did not make: {}",
                    cg.dir.display()
                )));
            }
        }
        for (name, l, ctl) in [
            ("--memory", &self.memory, "memory"),
            ("--pids", &self.pids, "pids"),
            ("--cpus", &self.cpus, "cpu"),
        ] {
            let Some(l) = l else { continue };
            let version = match l.mechanism {
                Mechanism::CgroupV1 => 1,
                Mechanism::CgroupV2 => 2,
                _ => continue,
            };
            if self.cgroup(version, ctl).is_none() {
                return Err(Error::Request(format!(
                    "{name} claims a cgroup v{version} that the request does not hold"
                )));
            }
        }
        Ok(())
    }

    fn cgroup(&self, version: u8, controller: &str) -> Option<&Cgroup> {
        self.cgroups
            .iter()
            .find(|c| c.version == version && c.controllers.iter().any(|n| n == controller))
    }
}

/// Decides a mechanism for each limit asked and makes the cgroups.
/// `landlock`: the landlock backend (no user namespace of its own);
/// `uid`: the caller's real uid (the box's); `tag`: unique for this run.
pub fn prepare(req: &Requested, landlock: bool, uid: u32, tag: &str) -> LimitPlan {
    let mut plan = LimitPlan::default();
    if req.is_empty() {
        return plan;
    }
    let name = format!("terra-{tag}");
    let mut wanted: Vec<(&str, String, String)> = Vec::new();
    if let Some(m) = req.memory {
        wanted.push(("memory", "memory.max".into(), m.to_string()));
    }
    if let Some(p) = req.pids {
        wanted.push(("pids", "pids.max".into(), p.to_string()));
    }
    if let Some(c) = req.millicpus {
        let quota = c * (CPU_PERIOD_US / 1000);
        wanted.push(("cpu", "cpu.max".into(), format!("{quota} {CPU_PERIOD_US}")));
    }
    let v2 = v2_cgroup(&name, &wanted);
    let mut done: Vec<&str> = Vec::new();
    if let Some((dir, set)) = v2 {
        done.extend(
            wanted
                .iter()
                .map(|w| w.0)
                .filter(|c| set.iter().any(|s| s == c)),
        );
        if !set.is_empty() {
            plan.cgroups.push(Cgroup {
                version: 2,
                dir,
                controllers: set,
            });
        } else {
            let _ = fs::remove_dir(&dir);
        }
    }
    for (ctl, _, _) in &wanted {
        if done.contains(ctl) {
            continue;
        }
        if let Some(dir) = v1_cgroup(ctl, &name, req) {
            plan.cgroups.push(Cgroup {
                version: 1,
                dir,
                controllers: vec![ctl.to_string()],
            });
        }
    }
    let has = |p: &LimitPlan, v: u8, c: &str| p.cgroup(v, c).map(|g| g.dir.clone());
    let by_cgroup = |p: &LimitPlan, c: &str| -> Option<(Mechanism, String)> {
        has(p, 2, c)
            .map(|d| (Mechanism::CgroupV2, format!("cgroup v2 {}", d.display())))
            .or_else(|| {
                has(p, 1, c).map(|d| (Mechanism::CgroupV1, format!("cgroup v1 {}", d.display())))
            })
    };
    if let Some(m) = req.memory {
        let (mechanism, detail) = by_cgroup(&plan, "memory").unwrap_or_else(|| {
            plan.rlimits.address_space = Some(m);
            (
                Mechanism::Rlimit,
                "RLIMIT_AS of the workload: address space, not resident memory".into(),
            )
        });
        plan.memory = Some(Limit {
            requested: size_words(m),
            value: m,
            mechanism,
            detail,
        });
    }
    if let Some(p) = req.pids {
        let (mechanism, detail) = by_cgroup(&plan, "pids").unwrap_or_else(|| {
            match nproc_binds(landlock, uid) {
                Ok(()) => {
                    plan.rlimits.processes = Some(p);
                    (
                        Mechanism::Rlimit,
                        "RLIMIT_NPROC of the workload: the box's processes of its uid, in its user namespace".into(),
                    )
                }
                Err(why) => (Mechanism::None, why.to_string()),
            }
        });
        plan.pids = Some(Limit {
            requested: p.to_string(),
            value: p,
            mechanism,
            detail,
        });
    }
    if let Some(c) = req.millicpus {
        let (mechanism, detail) = by_cgroup(&plan, "cpu").unwrap_or((
            Mechanism::None,
            "no writable cgroup with the cpu controller, and no rlimit expresses a CPU share"
                .into(),
        ));
        plan.cpus = Some(Limit {
            requested: cpus_words(c),
            value: c,
            mechanism,
            detail,
        });
    }
    if let Some(f) = req.max_file_size {
        plan.rlimits.file_size = Some(f);
        plan.max_file_size = Some(Limit {
            requested: size_words(f),
            value: f,
            mechanism: Mechanism::Rlimit,
            detail: "RLIMIT_FSIZE of the workload".into(),
        });
    }
    plan
}

/// Whether RLIMIT_NPROC limits the box: it counts per real uid in the box's
/// user namespace, and the kernel exempts the host's root user from it.
fn nproc_binds(landlock: bool, uid: u32) -> std::result::Result<(), NprocExempt> {
    if landlock {
        return Err(NprocExempt::Landlock);
    }
    if uid == 0 {
        return Err(NprocExempt::Root);
    }
    Ok(())
}

/// The caller's cgroup path in the hierarchy whose `/proc/self/cgroup`
/// line matches `pred` on its controller list.
fn own_path(pred: impl Fn(&str, &str) -> bool) -> Option<(String, PathBuf)> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut f = line.splitn(3, ':');
        let (id, list, path) = (f.next()?, f.next()?, f.next()?);
        pred(id, list).then(|| (list.to_string(), PathBuf::from(path)))
    })
}

/// The v2 mount: `/sys/fs/cgroup` on a unified host, `unified/` on a hybrid one.
fn v2_mount() -> Option<PathBuf> {
    [CGROUP_ROOT, "/sys/fs/cgroup/unified"]
        .into_iter()
        .map(PathBuf::from)
        .find(|d| d.join("cgroup.controllers").is_file())
}

/// A v2 child `name` of the nearest ancestor of the caller's cgroup (itself
/// included) that delegates at least one wanted controller and lets us make
/// a child; the controllers whose limit could be written there.
fn v2_cgroup(name: &str, wanted: &[(&str, String, String)]) -> Option<(PathBuf, Vec<String>)> {
    let mount = v2_mount()?;
    let (_, own) = own_path(|id, list| id == "0" && list.is_empty())?;
    v2_cgroup_in(&mount, &own, name, wanted)
}

/// [`v2_cgroup`] on the v2 hierarchy at `mount`, from the cgroup `own`.
fn v2_cgroup_in(
    mount: &Path,
    own: &Path,
    name: &str,
    wanted: &[(&str, String, String)],
) -> Option<(PathBuf, Vec<String>)> {
    let mount = mount.to_path_buf();
    let rel = own.strip_prefix("/").ok()?.to_path_buf();
    let mut dir = mount.join(rel);
    loop {
        if dir.starts_with(&mount) {
            let enabled =
                fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            let delegated: Vec<&str> = enabled.split_whitespace().collect();
            if wanted.iter().any(|w| delegated.contains(&w.0)) {
                let child = dir.join(name);
                if fs::create_dir(&child).is_ok() {
                    let set = wanted
                        .iter()
                        .filter(|w| delegated.contains(&w.0))
                        .filter(|(_, file, value)| write_limit(&child.join(file), value))
                        .map(|w| w.0.to_string())
                        .collect::<Vec<_>>();
                    if set.iter().any(|c| c == "memory") {
                        // Without this the limit would spill into swap.
                        let _ = write_limit(&child.join("memory.swap.max"), "0");
                    }
                    return Some((child, set));
                }
            }
        }
        if dir == mount || !dir.pop() {
            return None;
        }
    }
}

/// A v1 child `name` of the caller's cgroup in `ctl`'s hierarchy, with the
/// limit written (None: no such hierarchy, not writable, or refused).
fn v1_cgroup(ctl: &str, name: &str, req: &Requested) -> Option<PathBuf> {
    let (list, own) = own_path(|id, list| id != "0" && list.split(',').any(|c| c == ctl))?;
    let rel = own.strip_prefix("/").ok()?.to_path_buf();
    let dir = Path::new(CGROUP_ROOT).join(list).join(rel).join(name);
    fs::create_dir(&dir).ok()?;
    let ok = match ctl {
        "memory" => req.memory.is_some_and(|m| {
            let set = write_limit(&dir.join("memory.limit_in_bytes"), &m.to_string());
            // Memory plus swap, where the kernel accounts swap: no spill.
            let _ = write_limit(&dir.join("memory.memsw.limit_in_bytes"), &m.to_string());
            set
        }),
        "pids" => req
            .pids
            .is_some_and(|p| write_limit(&dir.join("pids.max"), &p.to_string())),
        "cpu" => req.millicpus.is_some_and(|c| {
            write_limit(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())
                && write_limit(
                    &dir.join("cpu.cfs_quota_us"),
                    &(c * (CPU_PERIOD_US / 1000)).to_string(),
                )
        }),
        _ => false,
    };
    if !ok {
        let _ = fs::remove_dir(&dir);
        return None;
    }
    Some(dir)
}

fn write_limit(file: &Path, value: &str) -> bool {
    fs::OpenOptions::new()
        .write(true)
        .open(file)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .is_ok()
}

/// The supervisor inside the run's cgroups while it clones the box: the
/// `cgroup.procs` it came from, to go back to.
pub struct Joined {
    back: Vec<fs::File>,
}

/// Moves the calling (single-threaded) process into every cgroup of the
/// plan. Err: one refused; the caller is back where it was.
pub fn join(plan: &LimitPlan) -> Result<Joined> {
    let mut joined = Joined { back: Vec::new() };
    for cg in &plan.cgroups {
        let back = origin_procs(cg)?;
        let procs = cg.dir.join("cgroup.procs");
        if let Err(e) = write_self(&procs) {
            let _ = joined.leave();
            return Err(Error::io("cannot join the run's cgroup", &procs, e));
        }
        joined.back.push(back);
    }
    Ok(joined)
}

impl Joined {
    /// Back into the cgroups the process came from. Err: one refused (the
    /// supervisor would count against the box's limits).
    pub fn leave(self) -> Result<()> {
        let mut first = Ok(());
        for f in self.back.iter().rev() {
            if let Err(e) = (&*f).write_all(b"0") {
                if first.is_ok() {
                    first = Err(Error::op("cannot leave the run's cgroup", e));
                }
            }
        }
        first
    }
}

/// The `cgroup.procs` of the caller's current cgroup in `cg`'s hierarchy.
fn origin_procs(cg: &Cgroup) -> Result<fs::File> {
    let dir = match cg.version {
        2 => {
            let mount = v2_mount().ok_or_else(|| Error::Request("no cgroup v2 mount".into()))?;
            let (_, own) = own_path(|id, list| id == "0" && list.is_empty())
                .ok_or_else(|| Error::Request("no cgroup v2 line in /proc/self/cgroup".into()))?;
            mount.join(own.strip_prefix("/").unwrap_or(&own))
        }
        _ => {
            let ctl = cg.controllers.first().map(String::as_str).unwrap_or("");
            let (list, own) =
                own_path(|id, list| id != "0" && list.split(',').any(|c| c == ctl))
                    .ok_or_else(|| Error::Request(format!("no cgroup v1 {ctl} hierarchy")))?;
            Path::new(CGROUP_ROOT)
                .join(list)
                .join(own.strip_prefix("/").unwrap_or(&own))
        }
    };
    fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
        .map_err(|e| Error::op("cannot open the supervisor's own cgroup", e))
}

fn write_self(procs: &Path) -> std::io::Result<()> {
    // "0" is the writing process itself.
    fs::OpenOptions::new()
        .write(true)
        .open(procs)?
        .write_all(b"0")
}

/// The counters that say a limit acted, opened before the supervisor
/// confines itself and read at the run's end.
#[derive(Default)]
pub struct Watch {
    /// memory.events (v2: `oom_kill N`) or memory.oom_control (v1: `oom_kill N`).
    oom: Option<fs::File>,
    /// pids.events (`max N`: forks refused at the limit), both versions.
    pids: Option<fs::File>,
}

/// What a limit did to a run, for the receipt and the message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    pub oom_kills: u64,
    pub forks_refused: u64,
}

impl Watch {
    pub fn open(plan: &LimitPlan) -> Watch {
        let open = |v: u8, ctl: &str, file: &str| {
            plan.cgroup(v, ctl)
                .and_then(|c| fs::File::open(c.dir.join(file)).ok())
        };
        Watch {
            oom: open(2, "memory", "memory.events")
                .or_else(|| open(1, "memory", "memory.oom_control")),
            pids: open(2, "pids", "pids.events").or_else(|| open(1, "pids", "pids.events")),
        }
    }

    pub fn effects(&self) -> Effects {
        Effects {
            oom_kills: self.oom.as_ref().map_or(0, |f| counter(f, "oom_kill")),
            forks_refused: self.pids.as_ref().map_or(0, |f| counter(f, "max")),
        }
    }
}

/// The value of `key` in a flat-keyed cgroup file ("key value" lines).
fn counter(f: &fs::File, key: &str) -> u64 {
    let mut buf = [0u8; 1024];
    let n = f.read_at(&mut buf, 0).unwrap_or(0);
    parse_counter(&String::from_utf8_lossy(&buf[..n]), key)
}

fn parse_counter(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units_and_refuse_nonsense() {
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("8k"), Ok(8192));
        for bad in ["", "M", "-1M", "1.5G", "12X", "0", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(size_words(64 << 20), "64 MiB");
        assert_eq!(size_words(1000), "1000 bytes");
    }

    #[test]
    fn cpus_parse_to_thousandths() {
        assert_eq!(parse_cpus("1"), Ok(1000));
        assert_eq!(parse_cpus("0.5"), Ok(500));
        assert_eq!(parse_cpus("2.25"), Ok(2250));
        for bad in ["", "0", "0.0001", "-1", "a", "1.2.3", ".x"] {
            assert!(parse_cpus(bad).is_err(), "{bad}");
        }
        assert_eq!(cpus_words(1500), "1.5");
        assert_eq!(cpus_words(2000), "2");
    }

    #[test]
    fn counters_read_their_key_only() {
        let events = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(parse_counter(events, "oom_kill"), 2);
        assert_eq!(parse_counter(events, "max"), 3);
        assert_eq!(
            parse_counter("oom_kill_disable 0\nunder_oom 0\n", "oom_kill"),
            0
        );
    }

    #[test]
    fn nothing_asked_makes_nothing() {
        let p = prepare(&Requested::default(), false, 1000, "unit-none");
        assert_eq!(p, LimitPlan::default());
        assert!(p.require_all().is_ok());
    }

    #[test]
    fn file_size_is_an_rlimit_and_pids_is_never_claimed_for_root_without_a_cgroup() {
        let p = prepare(
            &Requested {
                max_file_size: Some(1 << 20),
                ..Requested::default()
            },
            false,
            0,
            "unit-fsize",
        );
        let f = p.max_file_size.as_ref().unwrap();
        assert_eq!(f.mechanism, Mechanism::Rlimit);
        assert_eq!(p.rlimits.file_size, Some(1 << 20));
        assert!(p.cgroups.is_empty());
        assert!(nproc_binds(false, 0).is_err());
        assert!(nproc_binds(true, 1000).is_err());
        assert!(nproc_binds(false, 1000).is_ok());
    }

    #[test]
    fn v2_takes_the_nearest_ancestor_that_delegates_a_wanted_controller() {
        let root = std::env::temp_dir().join(format!("terra-v2-walk-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        // root delegates memory and pids, user.slice only cpu, the caller's
        // scope (a leaf with processes) nothing.
        for (dir, enabled) in [
            ("", "cpu memory pids"),
            ("user.slice", "cpu"),
            ("user.slice/me.scope", ""),
        ] {
            fs::create_dir_all(root.join(dir)).unwrap();
            fs::write(root.join(dir).join("cgroup.subtree_control"), enabled).unwrap();
        }
        let own = Path::new("/user.slice/me.scope");
        let want = |c: &'static str| vec![(c, format!("{c}.max"), "1".to_string())];
        let (child, _) = v2_cgroup_in(&root, own, "terra-a", &want("memory")).unwrap();
        assert_eq!(child, root.join("terra-a"));
        let (child, _) = v2_cgroup_in(&root, own, "terra-b", &want("cpu")).unwrap();
        assert_eq!(child, root.join("user.slice/terra-b"));
        assert!(v2_cgroup_in(&root, own, "terra-c", &want("io")).is_none());
        // Outside the mount, nothing is made.
        assert!(v2_cgroup_in(&root, Path::new("relative"), "terra-d", &want("memory")).is_none());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn validate_refuses_foreign_cgroups_and_unbacked_claims() {
        let mut p = LimitPlan {
            cgroups: vec![Cgroup {
                version: 1,
                dir: "/sys/fs/cgroup/memory/terra-x".into(),
                controllers: vec!["memory".into()],
            }],
            ..LimitPlan::default()
        };
        assert!(p.validate().is_ok());
        p.cgroups[0].dir = "/sys/fs/cgroup/memory/user.slice".into();
        assert!(p.validate().is_err());
        p.cgroups[0].dir = "/etc/terra-x".into();
        assert!(p.validate().is_err());
        p.cgroups.clear();
        p.pids = Some(Limit {
            requested: "64".into(),
            value: 64,
            mechanism: Mechanism::CgroupV2,
            detail: String::new(),
        });
        assert!(p.validate().is_err());
        p.pids.as_mut().unwrap().mechanism = Mechanism::None;
        assert!(p.validate().is_ok());
        assert!(p.require_all().is_err());
        assert_eq!(p.unenforced(), ["--pids"]);
    }
}
