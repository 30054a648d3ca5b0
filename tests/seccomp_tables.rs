//! The roles' seccomp tables against their real behaviour: scripts/trace-roles.sh
//! runs terra under strace through the paths a run takes (mediated with
//! curl, none, a pty, --receipt, a deadline, a failing workload, the
//! landlock backend; as root and as 65534) and fails when a role made a
//! call its table lacks — or when a run failed, which is what a role
//! killed by its allowlist looks like.
// strace of the Linux roles: Unix only (it needs Linux to run).
#![cfg(unix)]

use std::process::Command;

#[test]
#[ignore = "needs root: strace of runs that make user namespaces"]
fn every_call_the_roles_make_is_in_their_tables() {
    terra_test_support::users::require_root("strace of the roles");
    let out = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/trace-roles.sh"
        ))
        .env("TERRA_BIN", env!("CARGO_BIN_EXE_terra"))
        .output()
        .expect("bash runs scripts/trace-roles.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for role in ["supervisor:", "broker:", "box-init:", "box-service:"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(role) && !l.contains("(no trace)")),
            "no trace of {role}\n{stdout}"
        );
    }
}
