//! terra-box-probe: the program the box tests execute inside a box (and
//! outside, as the twin). `TERRA_PROBE=name,name,...` names the probes; it
//! prints one `PROBE name=result` line for each (see probe.rs). Built only
//! with the `test-support` feature; the tests find it as
//! `CARGO_BIN_EXE_terra-box-probe`.

mod probe;

fn main() {
    let list = std::env::var("TERRA_PROBE").unwrap_or_default();
    if list.is_empty() {
        eprintln!(
            "terra-box-probe: set TERRA_PROBE=name,name,... (the probes of tests/common/probe.rs)"
        );
        std::process::exit(2);
    }
    for name in list.split(',') {
        println!("PROBE {name}={}", probe::probe(name));
    }
}
