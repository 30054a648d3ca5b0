//! Plan benchmarks. `cargo bench -p terra-policy --bench plan`.
//!
//! What is measured (wall clock, std::time, median of several runs):
//! - largest plan: 262,144 resolved rules on absent targets. The JSON source
//!   cannot name 4,096 distinct minimal-runtime rules (its minimal-runtime
//!   path has no relative part), so the 4,096 x 64 product is built this way:
//!   one decision of 4,096 workspace rules (`write ""` plus 4,095
//!   `deny "absent-N"` with `missing: skip`) resolved against 64 different
//!   workspace directories (64 `resolve` calls: realpath of every candidate,
//!   lstat walk for every protect-create name, sort, conflict search), then
//!   `Resolution::merge` (sort and conflict search again over all 262,144)
//!   and `into_plan` (capability check).
//! - conflict search over 4,096 and 262,144 synthetic rules (read tree, write
//!   tree below it, deny and deny-write below that; no conflict, so the whole
//!   walk runs), and over the largest plan's own rules.
//! - containment of two 262,144-rule plans (deny-write vs deny of the same
//!   absent targets; the candidate is contained, so every region is compared).
//! - peak memory: VmHWM from /proc/self/status right after the first build of
//!   the largest plan (before anything else runs).

use std::hint::black_box;
use std::time::{Duration, Instant};

use terra_policy::{
    check_conflicts, contains, resolve, Access, CapabilitySet, HostBindings, MirBuilder, Missing,
    Resolution, ResolvedRule, RootKind, Scope,
};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    let mut v = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        black_box(f());
        v.push(t.elapsed());
    }
    median(v)
}

fn status(field: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .map(|l| l[field.len()..].trim().to_string())
        })
        .unwrap_or_else(|| "n/a".into())
}

/// (user, system) CPU seconds of this process so far, from /proc/self/stat
/// (clock ticks, assumed 100 per second as on every Linux terra targets).
fn cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| {
        f.get(i)
            .and_then(|x| x.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
            / 100.0
    };
    // After the command name: state is field 3, utime 14, stime 15 (1-based).
    (tick(11), tick(12))
}

fn big_plan(deny: Access, roots: &[String]) -> Resolution {
    let mut b = MirBuilder::new();
    b.add_rule(
        Access::Write,
        RootKind::Workspace,
        "",
        Scope::Tree,
        Missing::Error,
    )
    .unwrap();
    for i in 1..4096 {
        b.add_rule(
            deny,
            RootKind::Workspace,
            &format!("absent-{i:04}"),
            Scope::Tree,
            Missing::Skip,
        )
        .unwrap();
    }
    let mir = b.build().unwrap();
    assert_eq!(mir.rules().len(), 4096);
    let parts: Vec<Resolution> = roots
        .iter()
        .map(|r| {
            resolve(
                &mir,
                &HostBindings {
                    workspace: Some(r.into()),
                    ..HostBindings::default()
                },
            )
            .unwrap()
        })
        .collect();
    Resolution::merge(parts).unwrap()
}

fn synthetic(n: usize) -> Vec<ResolvedRule> {
    (0..n)
        .map(|i| {
            let g = i / 4;
            let (access, path) = match i % 4 {
                0 => (Access::Read, format!("/bench/g{g}")),
                1 => (Access::Write, format!("/bench/g{g}/w")),
                2 => (Access::Deny, format!("/bench/g{g}/w/secret")),
                _ => (Access::DenyWrite, format!("/bench/g{g}/w/ro")),
            };
            ResolvedRule {
                access,
                path,
                scope: Scope::Tree,
                protect_create: false,
                source_rule: i,
                source_root: RootKind::Host,
            }
        })
        .collect()
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let roots: Vec<String> = (0..64)
        .map(|i| {
            let p = base.join(format!("ws{i:02}"));
            std::fs::create_dir(&p).unwrap();
            p.to_str().unwrap().to_string()
        })
        .collect();

    println!("## terra-policy plan benchmarks");
    let rss_before = status("VmRSS:");
    let (u0, s0) = cpu();
    let t = Instant::now();
    let plan = big_plan(Access::Deny, &roots)
        .into_plan(CapabilitySet::ALL)
        .unwrap();
    let first = t.elapsed();
    let (u1, s1) = cpu();
    let hwm = status("VmHWM:");
    assert_eq!(plan.rules().len(), 262_144);
    println!(
        "largest plan: {} rules; first build {:.3} s wall, {:.2} s user + {:.2} s system CPU",
        plan.rules().len(),
        first.as_secs_f64(),
        u1 - u0,
        s1 - s0
    );
    println!("peak memory after the largest plan: VmHWM {hwm} (VmRSS before it: {rss_before})");
    let (u0, s0) = cpu();
    let d = time(5, || {
        big_plan(Access::Deny, &roots)
            .into_plan(CapabilitySet::ALL)
            .unwrap()
    });
    let (u1, s1) = cpu();
    println!(
        "largest plan (4,096 rules x 64 workspaces = 262,144, absent targets): median {:.3} s of 5; \
         CPU per build (mean): {:.2} s user + {:.2} s system",
        d.as_secs_f64(),
        (u1 - u0) / 5.0,
        (s1 - s0) / 5.0
    );

    for n in [4096usize, 16_384, 262_144] {
        let rules = synthetic(n);
        let runs = if n <= 16_384 { 51 } else { 7 };
        let d = time(runs, || check_conflicts(&rules).unwrap());
        println!(
            "conflict search, {n} synthetic rules: median {:.4} s of {runs}",
            d.as_secs_f64()
        );
    }
    let d = time(7, || check_conflicts(plan.rules()).unwrap());
    println!(
        "conflict search, the largest plan's 262,144 rules: median {:.4} s of 7",
        d.as_secs_f64()
    );

    let boundary = big_plan(Access::DenyWrite, &roots);
    let candidate = plan.resolution();
    let report = contains(&boundary, candidate);
    assert!(report.contained);
    let d = time(5, || contains(&boundary, candidate));
    println!(
        "containment of two 262,144-rule plans ({} + {} rules): median {:.3} s of 5",
        boundary.rules().len(),
        candidate.rules().len(),
        d.as_secs_f64()
    );
    let n = 100_000;
    let paths: Vec<String> = (0..n)
        .map(|i| format!("{}/absent-{:04}/x/y", roots[i % 64], i % 4096))
        .collect();
    let t = Instant::now();
    for p in &paths {
        black_box(plan.evaluate(p).unwrap());
    }
    println!(
        "evaluation on the largest plan: {:.2} us per path ({n} paths of depth 7)",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}
