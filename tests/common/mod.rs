//! Helpers shared by the end-to-end tests of the terra binary: the shared
//! test support (users, run directories, bounded runs) and the binary itself,
//! for the caller and, when the caller is root, for uid/gid 65534.
// Each test binary uses a part of this module.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub use terra_test_support::dirs::RunDirs;
pub use terra_test_support::process::{run_bounded, show, wait_until};
pub use terra_test_support::users::{command_as, is_root, require_root, users, User, NOBODY};

/// The terra binary `user` runs: the build for the caller; for 65534 a copy in
/// a world-readable 0755 directory under /tmp (the build tree may sit under a
/// 0700 home), named after the build and this test binary, so repeated runs
/// reuse it and suites running in parallel keep their own.
///
/// `TERRA_E2E_BIN` runs the suites against another build instead (e.g. the
/// static musl release binary, `make build` -> dist/terra; relative to the
/// repository), for both users: give a path uid 65534 can execute.
pub fn terra_bin(user: User) -> PathBuf {
    static COPY: OnceLock<PathBuf> = OnceLock::new();
    if let Some(bin) = std::env::var_os("TERRA_E2E_BIN").filter(|b| !b.is_empty()) {
        return std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join(&bin))
            .unwrap_or_else(|e| panic!("TERRA_E2E_BIN {bin:?}: {e}"));
    }
    let built = PathBuf::from(env!("CARGO_BIN_EXE_terra"));
    match user {
        User::Caller => built,
        User::Nobody => COPY
            .get_or_init(|| {
                let me = std::env::current_exe().unwrap();
                let suite = me.file_name().unwrap().to_string_lossy().into_owned();
                terra_test_support::users::world_readable_copy(
                    &built,
                    &format!("terra-bin-{suite}-"),
                )
            })
            .clone(),
    }
}

/// `terra` as `user` (through setpriv for 65534), `via` (a program and its
/// arguments) started as that user in front of it.
pub fn terra_as(user: User, via: &[&str]) -> Command {
    command_as(user, None, via, &terra_bin(user))
}
