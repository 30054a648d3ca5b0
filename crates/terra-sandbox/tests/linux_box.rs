//! Real boxes with hand-made plans.
#![cfg(target_os = "linux")]

mod common;
use common::*;
use terra_sandbox::linux::BoxExit;

#[test]
fn smoke_exit_code() {
    let w = World::new();
    let r = w.sh("echo hello; id -u; hostname; cat /proc/1/cmdline | tr '\\0' ' '; echo; ls /");
    println!("{:?}\n{}", r.0, r.1);
    ok(&r);
    let r = w.run(&["sh", "-c", "exit 7"]);
    assert_eq!(r.exit, BoxExit::Code(7));
}
