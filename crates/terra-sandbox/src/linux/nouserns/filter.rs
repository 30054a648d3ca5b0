//! The `landlock` backend's seccomp additions, installed after the workload
//! filter every box has (`seccomp::build`). Without namespaces the host's
//! processes, IPC objects and socket families are the workload's own, so the
//! filter draws those boundaries:
//!
//! - always (`host`, errno EPERM): changing another process's limits
//!   (`prlimit64` with a pid and a new limit), priority (`setpriority`
//!   other than PRIO_PROCESS of itself), CPU affinity and scheduling
//!   (`sched_set*` with a pid), I/O priority (`ioprio_set` other than
//!   IOPRIO_WHO_PROCESS of itself) or memory placement (`migrate_pages`,
//!   `move_pages` with a pid); `kcmp`, `pidfd_getfd`, `process_madvise`; and
//!   every SysV IPC and POSIX message-queue call (no IPC namespace: every
//!   segment, semaphore set and queue is the host's). Landlock has no hook
//!   for the first group (a same-uid permission check is all the kernel
//!   does), its ptrace scope already stops the second. EPERM, not EACCES:
//!   it is the kernel's answer to an operation refused whatever the
//!   object's mode, and programs read EACCES from `shmget`/`semget` as "that
//!   key is someone else's" and try the next one (PostgreSQL does), where
//!   EPERM makes them stop and say so;
//! - network `none` (`inet`): `socket(AF_INET | AF_INET6, ...)` fails with
//!   EACCES, so no TCP, UDP or raw socket of the host's network exists in
//!   the workload;
//! - below Landlock ABI 9 (no `RESOLVE_UNIX`, `unix_paths`), connecting to a
//!   pathname Unix socket is not mediated by Landlock: `socket(AF_UNIX, ...)`
//!   fails with EACCES, and so does `socketpair(AF_UNIX, SOCK_DGRAM, ...)`
//!   (a datagram socket can `sendto` any path). Stream and seqpacket
//!   socketpairs stay: they are connected at birth and cannot connect again
//!   (EISCONN). EACCES is socket(2)'s "creating this kind of socket is
//!   denied".
//!
//! The calls on the process itself (pid 0, who 0) and every getter
//! (`getpriority`, `sched_get*`, `ioprio_get`, `prlimit64` without a new
//! limit) stay: they show what /proc/PID/stat, status and limits already
//! show the same uid, and `sched_getaffinity(getpid())` is common.

use seccompiler::BpfProgram;

use super::super::error::SandboxError;
use super::super::seccomp;

/// The filter every run of this backend gets.
const HOST: &str = "host";

/// Which optional additions a run gets (`host` is always installed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closures {
    /// Refuse AF_INET and AF_INET6 sockets (network `none`).
    pub inet: bool,
    /// Refuse AF_UNIX sockets other than stream and seqpacket pairs.
    pub unix_paths: bool,
}

/// The `landlock-closures` filters `closures` selects.
fn names(closures: Closures) -> Vec<&'static str> {
    let mut v = vec![HOST];
    if closures.inet {
        v.push("inet");
    }
    if closures.unix_paths {
        v.push("unix_paths");
    }
    v
}

/// The extra program (the selected filters merged into one).
pub fn build(closures: Closures) -> Result<Vec<BpfProgram>, SandboxError> {
    seccomp::landlock_closures(&names(closures))
}

/// The `--dry-run` lines of `closures`.
pub fn describe(closures: Closures) -> String {
    seccomp::describe_table(
        terra_seccomp::Table::LandlockClosures,
        Some(&names(closures)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use terra_seccomp::eval::{run, Data};

    const NONE: Closures = Closures {
        inet: false,
        unix_paths: false,
    };

    #[cfg(target_arch = "x86_64")]
    const AUDIT_ARCH: u32 = 0xc000_003e;
    #[cfg(target_arch = "aarch64")]
    const AUDIT_ARCH: u32 = 0xc000_00b7;

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

    const PRIO_PROCESS: u64 = 0;
    const PRIO_PGRP: u64 = 1;
    const PRIO_USER: u64 = 2;
    const IOPRIO_WHO_PROCESS: u64 = 1;
    const IOPRIO_WHO_PGRP: u64 = 2;
    const IOPRIO_WHO_USER: u64 = 3;
    /// A pid whose low 32 bits are 0: the kernel reads a pid_t (the
    /// process itself), and so must the filter.
    const HIGH_ONLY: u64 = 1 << 32;

    /// What the program of `closures` answers `nr` with `args`.
    fn answer(closures: Closures, nr: libc::c_long, args: &[u64]) -> u32 {
        let programs = build(closures).unwrap();
        assert_eq!(programs.len(), 1);
        let mut data = Data {
            nr: nr as u32,
            arch: AUDIT_ARCH,
            ..Data::default()
        };
        data.args[..args.len()].copy_from_slice(args);
        run(&programs[0], &data).unwrap()
    }

    #[test]
    fn each_closure_has_its_filter() {
        // `host` alone, then with the socket closures: one program each.
        assert_eq!(build(NONE).unwrap().len(), 1);
        assert!(describe(NONE).contains("landlock-closures/host"));
        assert!(!describe(NONE).contains("AF_INET"));
        let inet = Closures {
            inet: true,
            unix_paths: false,
        };
        assert_eq!(build(inet).unwrap().len(), 1);
        assert!(describe(inet).contains("AF_INET6") && !describe(inet).contains("AF_UNIX"));
        let both = Closures {
            inet: true,
            unix_paths: true,
        };
        assert_eq!(build(both).unwrap().len(), 1);
        assert_ne!(build(both).unwrap(), build(inet).unwrap());
        assert!(describe(both).contains("SOCK_DGRAM"));
        for c in [NONE, inet, both] {
            assert!(describe(c).contains("seccomp EPERM kcmp pidfd_getfd process_madvise shmget"));
        }
    }

    #[test]
    fn limits_of_another_process_cannot_change() {
        let new = 0x7fff_0000u64;
        for c in [
            NONE,
            Closures {
                inet: true,
                unix_paths: true,
            },
        ] {
            // glibc's setrlimit and getrlimit pass pid 0.
            assert_eq!(answer(c, libc::SYS_prlimit64, &[0, 7, new, 0]), ALLOW);
            assert_eq!(
                answer(c, libc::SYS_prlimit64, &[HIGH_ONLY, 7, new, 0]),
                ALLOW
            );
            // A read of another process's limits (/proc/PID/limits shows them).
            assert_eq!(answer(c, libc::SYS_prlimit64, &[4242, 7, 0, new]), ALLOW);
            assert_eq!(answer(c, libc::SYS_prlimit64, &[4242, 7, new, 0]), EPERM);
            assert_eq!(answer(c, libc::SYS_prlimit64, &[4242, 7, new, new]), EPERM);
            // The pointer is compared whole: a new limit at 1 << 32 is one.
            assert_eq!(answer(c, libc::SYS_prlimit64, &[1, 7, HIGH_ONLY, 0]), EPERM);
            assert_eq!(
                answer(c, libc::SYS_prlimit64, &[u64::from(u32::MAX), 7, new, 0]),
                EPERM
            );
        }
    }

    #[test]
    fn priority_only_of_the_process_itself() {
        let nr = libc::SYS_setpriority;
        assert_eq!(answer(NONE, nr, &[PRIO_PROCESS, 0, 10]), ALLOW);
        assert_eq!(answer(NONE, nr, &[PRIO_PROCESS, HIGH_ONLY, 10]), ALLOW);
        assert_eq!(answer(NONE, nr, &[PRIO_PROCESS, 4242, 10]), EPERM);
        // who 0 of a group or a user is every process of the caller's
        // group or uid, host processes included.
        assert_eq!(answer(NONE, nr, &[PRIO_PGRP, 0, 10]), EPERM);
        assert_eq!(answer(NONE, nr, &[PRIO_USER, 0, 10]), EPERM);
        assert_eq!(answer(NONE, nr, &[PRIO_USER, 65534, 10]), EPERM);
        assert_eq!(answer(NONE, nr, &[PRIO_PROCESS | HIGH_ONLY, 0, 10]), ALLOW);
        assert_eq!(answer(NONE, libc::SYS_getpriority, &[PRIO_USER, 0]), ALLOW);
    }

    #[test]
    fn scheduling_and_memory_placement_only_of_the_process_itself() {
        for nr in [
            libc::SYS_sched_setaffinity,
            libc::SYS_sched_setscheduler,
            libc::SYS_sched_setparam,
            libc::SYS_sched_setattr,
            libc::SYS_migrate_pages,
            libc::SYS_move_pages,
        ] {
            assert_eq!(answer(NONE, nr, &[0, 8, 1]), ALLOW, "call {nr}");
            assert_eq!(answer(NONE, nr, &[HIGH_ONLY, 8, 1]), ALLOW, "call {nr}");
            assert_eq!(answer(NONE, nr, &[4242, 8, 1]), EPERM, "call {nr}");
            assert_eq!(
                answer(NONE, nr, &[u64::from(u32::MAX), 8, 1]),
                EPERM,
                "call {nr}"
            );
        }
        for getter in [
            libc::SYS_sched_getaffinity,
            libc::SYS_sched_getscheduler,
            libc::SYS_sched_getparam,
            libc::SYS_sched_getattr,
        ] {
            assert_eq!(answer(NONE, getter, &[4242, 8, 1]), ALLOW, "call {getter}");
        }
    }

    #[test]
    fn io_priority_only_of_the_process_itself() {
        let nr = libc::SYS_ioprio_set;
        let be7 = (2 << 13) | 7;
        assert_eq!(answer(NONE, nr, &[IOPRIO_WHO_PROCESS, 0, be7]), ALLOW);
        assert_eq!(answer(NONE, nr, &[IOPRIO_WHO_PROCESS, 4242, be7]), EPERM);
        assert_eq!(answer(NONE, nr, &[IOPRIO_WHO_PGRP, 0, be7]), EPERM);
        assert_eq!(answer(NONE, nr, &[IOPRIO_WHO_USER, 0, be7]), EPERM);
        assert_eq!(answer(NONE, nr, &[0, 0, be7]), EPERM);
        assert_eq!(
            answer(NONE, libc::SYS_ioprio_get, &[IOPRIO_WHO_USER, 0]),
            ALLOW
        );
    }

    #[test]
    fn no_ipc_object_and_no_look_into_another_process() {
        for nr in [
            libc::SYS_kcmp,
            libc::SYS_pidfd_getfd,
            libc::SYS_process_madvise,
            libc::SYS_shmget,
            libc::SYS_shmat,
            libc::SYS_shmdt,
            libc::SYS_shmctl,
            libc::SYS_semget,
            libc::SYS_semop,
            libc::SYS_semtimedop,
            libc::SYS_semctl,
            libc::SYS_msgget,
            libc::SYS_msgsnd,
            libc::SYS_msgrcv,
            libc::SYS_msgctl,
            libc::SYS_mq_open,
            libc::SYS_mq_unlink,
            libc::SYS_mq_timedsend,
            libc::SYS_mq_timedreceive,
            libc::SYS_mq_notify,
            libc::SYS_mq_getsetattr,
        ] {
            // IPC_PRIVATE (0) too: a private segment is a host object any
            // process of the uid can attach by its id.
            assert_eq!(answer(NONE, nr, &[0, 4096, 0o600]), EPERM, "call {nr}");
        }
        // The box's workload filter already refuses these with EPERM.
        let workload = seccomp::build().unwrap();
        for nr in [libc::SYS_process_vm_readv, libc::SYS_process_vm_writev] {
            let data = Data {
                nr: nr as u32,
                arch: AUDIT_ARCH,
                args: [4242, 0, 0, 0, 0, 0],
                ..Data::default()
            };
            assert_eq!(run(&workload[0], &data).unwrap(), EPERM, "call {nr}");
        }
    }

    #[test]
    fn the_closures_leave_everything_else_alone() {
        let both = Closures {
            inet: true,
            unix_paths: true,
        };
        for (nr, args) in [
            (libc::SYS_getpid, vec![]),
            (libc::SYS_setrlimit, vec![7, 1]),
            (libc::SYS_socketpair, vec![1, 1, 0]),
            (libc::SYS_pidfd_open, vec![4242, 0]),
            (libc::SYS_mbind, vec![1, 1, 0]),
        ] {
            assert_eq!(answer(both, nr, &args), ALLOW, "call {nr}");
        }
    }
}
