//! Policy format benchmarks (plain std::time; medians over ITERATIONS runs).
//!
//!   cargo bench -p terra-policy --bench format
//!
//! - compile a JSON source of 4,096 rules and 1,024 destinations;
//! - decode and validate a MIR of exactly 1 MiB (4,096 rules with long paths
//!   and 1,024 destinations with 253-byte hosts: the largest document the
//!   limits allow is 1,048,576 bytes, the size limit itself);
//! - compute the decision digest of that MIR.

use std::hint::black_box;
use std::time::{Duration, Instant};

use terra_policy::{
    compile_source, Access, Mir, MirBuilder, Missing, NetworkMode, RootKind, Scope,
};

const ITERATIONS: usize = 30;

/// The median and the fastest of ITERATIONS runs (the fastest is the least
/// disturbed by other load on the machine).
fn median(mut f: impl FnMut()) -> (Duration, Duration) {
    f(); // warm-up
    let mut times: Vec<Duration> = (0..ITERATIONS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    (times[ITERATIONS / 2], times[0])
}

fn report(name: &str, (median, min): (Duration, Duration), extra: &str) {
    println!(
        "format/{name} median_ms={:.3} min_ms={:.3} iterations={ITERATIONS}{extra}",
        median.as_secs_f64() * 1e3,
        min.as_secs_f64() * 1e3
    );
}

/// A source of 4,096 distinct rules and 1,024 distinct destinations, in an
/// order that is not the canonical one.
fn big_source() -> String {
    let accesses = ["read", "write", "deny", "deny-write"];
    let rules: Vec<String> = (0..4096)
        .rev()
        .map(|i| {
            format!(
                "    {{ \"access\": \"{}\", \"path\": {{ \"root\": \"workspace\", \"relative\": \"src/module-{i:04}/./lib\" }}, \
                 \"scope\": \"tree\", \"missing\": \"skip\" }}",
                accesses[i % 4]
            )
        })
        .collect();
    let dests: Vec<String> = (0..1024)
        .rev()
        .map(|i| {
            format!(
                "    {{ \"protocol\": \"tcp\", \"host\": \"Host-{i:04}.Registry.Example.com\", \"port\": {}, \
                 \"requireTlsSni\": true }}",
                443 + i % 7
            )
        })
        .collect();
    format!(
        "{{\n  \"formatVersion\": 3,\n  \"filesystem\": {{ \"default\": \"deny\", \"rules\": [\n{}\n  ] }},\n  \
         \"network\": {{ \"mode\": \"mediated\", \"allow\": [\n{}\n  ] }},\n  \
         \"process\": {{ \"treeConfinement\": \"required\" }},\n  \"root\": {{ \"mode\": \"read-only\" }}\n}}\n",
        rules.join(",\n"),
        dests.join(",\n")
    )
}

/// A canonical MIR of exactly 1 MiB.
fn one_mebibyte_mir() -> Mir {
    const TARGET: usize = 1 << 20;
    let mut b = MirBuilder::new();
    b.set_network(NetworkMode::Mediated);
    let mut size = 20;
    for i in 0..1024 {
        // 4 labels: 63 + 63 + 63 + 61 bytes and 3 dots = 253 bytes.
        let host = format!(
            "h{i:04}{}.{}.{}.{}",
            "a".repeat(58),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        assert_eq!(host.len(), 253);
        b.add_destination(&host, 443, true, false).unwrap();
        size += 8 + 253;
    }
    let per_rule = (TARGET - size) / 4096; // record length = 12 + path length
    let mut extra = (TARGET - size) % 4096;
    for i in 0..4096 {
        let mut len = per_rule - 12;
        if extra > 0 {
            len += 1;
            extra -= 1;
        }
        let prefix = format!("p{i:04}/");
        let path = format!("{prefix}{}", "x".repeat(len - prefix.len()));
        b.add_rule(
            Access::Read,
            RootKind::Workspace,
            &path,
            Scope::Tree,
            Missing::Error,
        )
        .unwrap();
    }
    let mir = b.build().unwrap();
    assert_eq!(mir.bytes().len(), TARGET);
    mir
}

fn main() {
    // `cargo bench` passes `--bench`; a filter or other flags are ignored.
    let source = big_source();
    let compiled = compile_source(source.as_bytes()).unwrap();
    assert_eq!(
        (compiled.rules().len(), compiled.destinations().len()),
        (4096, 1024)
    );
    let d = median(|| {
        black_box(compile_source(black_box(source.as_bytes())).unwrap());
    });
    report(
        "compile_4096_rules_1024_dest",
        d,
        &format!(" source_bytes={}", source.len()),
    );

    let mir = one_mebibyte_mir();
    let bytes = mir.bytes().to_vec();
    let d = median(|| {
        black_box(Mir::decode(black_box(&bytes)).unwrap());
    });
    report(
        "decode_validate_1mib",
        d,
        &format!(" mir_bytes={}", bytes.len()),
    );

    let d = median(|| {
        black_box(terra_policy::digest::sha256_hex(black_box(&bytes)));
    });
    report("digest_1mib", d, &format!(" mir_bytes={}", bytes.len()));
}
