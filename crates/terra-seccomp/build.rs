//! Compiles every table in tables/ for the target architecture when terra
//! is built, so a role installs its filters without parsing JSON or building
//! BPF at run time (that took about 0.2-2 ms per table per run), and a table
//! that breaks a rule fails the build. Each installation is one program: a
//! table's filters merged (src/merge.rs); for a table of at most three
//! filters also every subset of them (the landlock backend installs some of
//! `landlock-closures` only).

// The library uses every field of the shared modules; the build, not all.
#![allow(dead_code)]

#[path = "src/arches.rs"]
mod arches;
#[path = "src/compile.rs"]
mod compile;
#[path = "src/merge.rs"]
mod merge;
#[path = "src/table.rs"]
mod table;

use std::fmt::Write as _;

/// Tables with at most this many filters get every subset compiled.
const SUBSETS_UP_TO: usize = 3;

fn main() {
    println!("cargo:rerun-if-changed=tables");
    println!("cargo:rerun-if-changed=src/table.rs");
    println!("cargo:rerun-if-changed=src/compile.rs");
    println!("cargo:rerun-if-changed=src/merge.rs");
    println!("cargo:rerun-if-changed=src/arches.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => Some(seccompiler::TargetArch::x86_64),
        Ok("aarch64") => Some(seccompiler::TargetArch::aarch64),
        _ => None,
    };
    let mut out = String::from(
        "/// Every installation's program, compiled for this target: (table, its\n\
         /// filters in installation order, whether that is all of them, program).\n\
         static COMPILED: &[(&str, &[&str], bool, &[Insn])] = &[\n",
    );
    if let (true, Some(arch)) = (os == "linux", arch) {
        let mut files: Vec<_> = std::fs::read_dir("tables")
            .expect("tables/")
            .map(|e| e.expect("tables/ entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        for path in files {
            println!("cargo:rerun-if-changed={}", path.display());
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            let source = std::fs::read_to_string(&path).expect("a table");
            let filters =
                compile::ordered(table::parse(&name, &source).unwrap_or_else(|e| panic!("{e}")));
            // Every rule exists exactly on the architectures it names, on
            // whichever target terra is built for.
            for f in &filters {
                arches::check(f).unwrap_or_else(|e| panic!("seccomp table {name}: {e}"));
            }
            // Each filter alone must compile as before (the reference the
            // tests compare the merged programs with).
            for f in &filters {
                compile::filter(f, arch)
                    .unwrap_or_else(|e| panic!("seccomp table {name}, filter {}: {e}", f.name));
            }
            let n = filters.len();
            let subsets: Vec<u32> = if n <= SUBSETS_UP_TO {
                (1..(1u32 << n)).collect()
            } else {
                vec![(1u32 << n) - 1]
            };
            for mask in subsets {
                let chosen: Vec<table::Filter> = filters
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, f)| f.clone())
                    .collect();
                let names: Vec<&str> = chosen.iter().map(|f| f.name.as_str()).collect();
                let bpf = merge::merged(&chosen, arch).unwrap_or_else(|e| {
                    panic!("seccomp table {name}, filters {}: {e}", names.join("+"))
                });
                write!(out, "    ({name:?}, &{names:?}, {}, &[", chosen.len() == n).unwrap();
                for i in bpf {
                    write!(out, "({}, {}, {}, {}), ", i.code, i.jt, i.jf, i.k).unwrap();
                }
                out.push_str("]),\n");
            }
        }
    }
    out.push_str("];\n");
    let dest = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("compiled.rs");
    std::fs::write(dest, out).expect("writing compiled.rs");
}
