//! What everyday macOS programs need beyond the plan's grants, read-only:
//! the developer tools behind Apple's command shims, Homebrew, timezone
//! data, the dyld shared cache, and the sysctls programs read to learn
//! about the machine. docs/sandbox-macos.md ("The macOS runtime") says where
//! each entry comes from and which peer profiles argue for it.
//!
//! Every entry is read-only (and executable where programs live); the
//! plan's deny and deny-write rules are rendered after these and so still
//! carve out of them. Seatbelt matches paths whether or not they exist, so
//! an entry that is absent on a Mac (Xcode without the Command Line Tools,
//! Homebrew's other prefix) grants nothing there.

use crate::spec::Scope;

/// One read-only path of the macOS runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimePath {
    pub path: &'static str,
    pub scope: Scope,
    /// Programs live below it: `process-exec` too.
    pub exec: bool,
    /// Why a program needs it (shown by the dry run's text form).
    pub why: &'static str,
}

const fn tree(path: &'static str, exec: bool, why: &'static str) -> RuntimePath {
    RuntimePath {
        path,
        scope: Scope::Tree,
        exec,
        why,
    }
}

const fn exact(path: &'static str, why: &'static str) -> RuntimePath {
    RuntimePath {
        path,
        scope: Scope::Exact,
        exec: false,
        why,
    }
}

/// The macOS runtime read set, in Seatbelt's resolved form (/private for
/// /var and /etc).
pub const MACOS_RUNTIME: [RuntimePath; 15] = [
    tree(
        "/Library/Developer/CommandLineTools",
        true,
        "the Command Line Tools: the real git, make, clang, python3 behind the /usr/bin shims",
    ),
    tree(
        "/Applications/Xcode.app",
        true,
        "Xcode's developer directory, when xcode-select points there",
    ),
    tree(
        "/private/var/select",
        false,
        "the shims' selected developer directory and shell (xcode-select, /var/select/sh)",
    ),
    exact(
        "/private/var/db/xcode_select_link",
        "the link xcode-select writes to name the active developer directory",
    ),
    tree(
        "/opt/homebrew",
        true,
        "Homebrew on Apple silicon: its programs and their dylibs",
    ),
    tree(
        "/usr/local",
        true,
        "Homebrew on Intel and other local installs: programs and dylibs",
    ),
    tree(
        "/Library/Frameworks/Python.framework",
        true,
        "the python.org installer's interpreters",
    ),
    tree(
        "/usr/share/zoneinfo",
        false,
        "timezone data (a link into /var/db/timezone)",
    ),
    tree(
        "/private/var/db/timezone",
        false,
        "timezone data, where the zoneinfo link resolves",
    ),
    exact(
        "/private/etc/localtime",
        "the host's timezone (a link into the zoneinfo data)",
    ),
    exact(
        "/private/etc/ssl/cert.pem",
        "the CA bundle of the system's LibreSSL (curl, git over HTTPS)",
    ),
    tree(
        "/System/Volumes/Preboot/Cryptexes/OS",
        false,
        "the dyld shared cache since macOS 13 (in the OS cryptex)",
    ),
    tree(
        "/System/Cryptexes/OS",
        false,
        "the OS cryptex's firmlinked path, also used to map the shared cache",
    ),
    tree(
        "/System/Library/dyld",
        false,
        "the dyld shared cache before macOS 13",
    ),
    tree(
        "/private/var/db/dyld",
        false,
        "the dyld shared cache on older releases",
    ),
];

/// The per-user temp directory's xcrun cache (`xcrun_db`), read-only: the
/// /usr/bin shims look their tool up there first. Its place depends on the
/// user (`confstr(_CS_DARWIN_USER_TEMP_DIR)`), so it is matched by this
/// fixed pattern, the one rule text with a path in it. Writing it is
/// refused: a workload that rewrote it would choose what the host's next
/// `git` or `clang` runs; xcrun then resolves the tool without its cache.
pub const XCRUN_CACHE_REGEX: &str = "^/private/var/folders/[^/]+/[^/]+/T/xcrun_db";

/// Pseudo-terminals the workload itself opens (`openpty`, `script`,
/// `expect`, Python's `pty`): their secondary devices, matched by this
/// fixed pattern and only with the extension the kernel issues to the
/// process that opened the primary (`com.apple.sandbox.pty`), so it never
/// matches another terminal of the user.
pub const NEW_PTY_REGEX: &str = "^/dev/ttys[0-9]+$";

/// The sysctls the workload may read, by exact name. Read by the C
/// library, language runtimes and build tools to size thread pools, pick
/// code paths and print versions (`uname`, `sysconf`, `os.cpu_count()`,
/// `std::thread::available_parallelism`, Go's and Node's CPU probes).
/// Never `kern.procargs2` or `kern.proc.*`: they give other processes'
/// arguments and environment (terra run's included).
pub const SYSCTL_NAMES: [&str; 48] = [
    "hw.activecpu",
    "hw.busfrequency_compat",
    "hw.byteorder",
    "hw.cachelinesize",
    "hw.cachelinesize_compat",
    "hw.cacheconfig",
    "hw.cpufamily",
    "hw.cpufrequency",
    "hw.cpufrequency_compat",
    "hw.cpusubtype",
    "hw.cputype",
    "hw.l1dcachesize",
    "hw.l1dcachesize_compat",
    "hw.l1icachesize",
    "hw.l1icachesize_compat",
    "hw.l2cachesize",
    "hw.l2cachesize_compat",
    "hw.l3cachesize",
    "hw.l3cachesize_compat",
    "hw.logicalcpu",
    "hw.logicalcpu_max",
    "hw.machine",
    "hw.memsize",
    "hw.model",
    "hw.ncpu",
    "hw.nperflevels",
    "hw.packages",
    "hw.pagesize",
    "hw.pagesize_compat",
    "hw.physicalcpu",
    "hw.physicalcpu_max",
    "hw.tbfrequency",
    "hw.tbfrequency_compat",
    "hw.vectorunit",
    "kern.argmax",
    "kern.hostname",
    "kern.maxfilesperproc",
    "kern.maxproc",
    "kern.osproductversion",
    "kern.osrelease",
    "kern.ostype",
    "kern.osvariant_status",
    "kern.osversion",
    "kern.secure_kernel",
    "kern.usrstack64",
    "kern.version",
    "sysctl.proc_cputype",
    "vm.loadavg",
];

/// The sysctls the workload may read, by name prefix: CPU feature flags
/// (`hw.optional.*`: SIMD and atomics probes of compilers and runtimes),
/// performance levels (`hw.perflevel0.*`), and the CPU's brand and features
/// (`machdep.cpu.*`).
pub const SYSCTL_PREFIXES: [&str; 3] = ["hw.optional.", "hw.perflevel", "machdep.cpu."];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::seatbelt_path;

    #[test]
    fn runtime_paths_are_in_seatbelt_form() {
        for r in MACOS_RUNTIME {
            assert_eq!(seatbelt_path(r.path).unwrap(), r.path, "{r:?}");
        }
    }

    #[test]
    fn no_sysctl_of_other_processes() {
        for n in SYSCTL_NAMES.iter().chain(&SYSCTL_PREFIXES) {
            assert!(!n.starts_with("kern.proc"), "{n}");
            assert!(!"kern.proc".starts_with(n), "{n} covers kern.proc*");
        }
    }
}
