//! The job objects and process-creation settings of a launch, with the
//! values winnt.h, jobapi2.h and winbase.h document (the native launcher
//! checks them against windows-sys at compile time).
//!
//! Three jobs: the **launcher job**, made by `terra run` for
//! `terra __sandbox_launcher`, kills the launcher when `terra run` ends
//! however it ends. The **workload job**, made by the launcher for the
//! user's command, admits its whole process tree (a build starts compilers,
//! `git` starts `sh`, Python's multiprocessing starts workers), lets none of
//! it break away, and kills all of it when the launcher's handle closes.
//! A **role job** (the broker's, and the self-check worker of a role) holds
//! exactly one process. Every worker job blocks the desktop, the clipboard,
//! global atoms and USER handles of other processes.
//!
//! The split follows Chromium's job levels (sandbox/win/src/job.cc,
//! `JobLevel`): only its two strictest levels (kLockdown, kLimitedUser) set
//! an active-process limit of one; kInteractive and kUnprotected keep
//! KILL_ON_JOB_CLOSE and no process limit, which is what a workload that
//! runs a toolchain needs. OpenAI Codex's Windows sandbox likewise puts the
//! command in one kill-on-close job with no process limit
//! (codex-rs/windows-sandbox README, "Restricted token sandbox").
//!
//! Windows refuses UI restrictions on a job nested in another, so a worker
//! is created with CREATE_BREAKAWAY_FROM_JOB out of the launcher job (which
//! allows exactly that: JOB_OBJECT_LIMIT_BREAKAWAY_OK) and put into its own
//! worker job, its only job, before it runs. The chain still holds: `terra
//! run` ends -> its job kills the launcher -> the launcher's handle to the
//! worker job closes -> the worker is killed.

/// `JOBOBJECT_BASIC_LIMIT_INFORMATION.LimitFlags`: ActiveProcessLimit applies.
pub const JOB_OBJECT_LIMIT_ACTIVE_PROCESS: u32 = 0x0000_0008;
/// An unhandled exception ends the process (no error-reporting dialog
/// holding it alive).
pub const JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION: u32 = 0x0000_0400;
/// Processes may break away from the job (never set by terra).
pub const JOB_OBJECT_LIMIT_BREAKAWAY_OK: u32 = 0x0000_0800;
/// Children are silently created outside the job (never set by terra).
pub const JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK: u32 = 0x0000_1000;
/// Every process of the job ends when the last handle to the job closes.
pub const JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE: u32 = 0x0000_2000;

/// `JOBOBJECT_BASIC_UI_RESTRICTIONS.UIRestrictionsClass` bits.
pub const JOB_OBJECT_UILIMIT_HANDLES: u32 = 0x0001;
pub const JOB_OBJECT_UILIMIT_READCLIPBOARD: u32 = 0x0002;
pub const JOB_OBJECT_UILIMIT_WRITECLIPBOARD: u32 = 0x0004;
pub const JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS: u32 = 0x0008;
pub const JOB_OBJECT_UILIMIT_DISPLAYSETTINGS: u32 = 0x0010;
pub const JOB_OBJECT_UILIMIT_GLOBALATOMS: u32 = 0x0020;
pub const JOB_OBJECT_UILIMIT_DESKTOP: u32 = 0x0040;
pub const JOB_OBJECT_UILIMIT_EXITWINDOWS: u32 = 0x0080;
pub const JOB_OBJECT_UILIMIT_IME: u32 = 0x0100;

/// `CreateProcessW` flags.
pub const CREATE_SUSPENDED: u32 = 0x0000_0004;
/// A console of the worker's own, without a window: the workload's console
/// children attach to it instead of each opening a new console window, and
/// it is never the user's console.
pub const CREATE_NO_WINDOW: u32 = 0x0800_0000;
/// Out of the launcher job, into the worker's own (see the module's text).
pub const CREATE_BREAKAWAY_FROM_JOB: u32 = 0x0100_0000;
/// No console at all (the roles): never attached to the user's.
pub const DETACHED_PROCESS: u32 = 0x0000_0008;
pub const CREATE_UNICODE_ENVIRONMENT: u32 = 0x0000_0400;
pub const EXTENDED_STARTUPINFO_PRESENT: u32 = 0x0008_0000;

/// `PROC_THREAD_ATTRIBUTE_CHILD_PROCESS_POLICY`: no child processes, a
/// property of a role's token (never set for the workload).
pub const PROCESS_CREATION_CHILD_PROCESS_RESTRICTED: u32 = 0x01;
/// `PROC_THREAD_ATTRIBUTE_ALL_APPLICATION_PACKAGES_POLICY`: the worker is
/// a less-privileged AppContainer (LPAC): ACEs for ALL APPLICATION PACKAGES
/// (S-1-15-2-1) do not apply to it.
pub const PROCESS_CREATION_ALL_APPLICATION_PACKAGES_OPT_OUT: u32 = 0x01;

/// One job's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLimits {
    /// `LimitFlags` of `JOBOBJECT_EXTENDED_LIMIT_INFORMATION`.
    pub limit_flags: u32,
    /// `ActiveProcessLimit` (meaningful with JOB_OBJECT_LIMIT_ACTIVE_PROCESS).
    pub active_processes: u32,
    /// `JOBOBJECT_BASIC_UI_RESTRICTIONS.UIRestrictionsClass`.
    pub ui_restrictions: u32,
}

/// Every job UI restriction there is (JOB_OBJECT_UILIMIT_ALL).
pub const UI_ALL: u32 = JOB_OBJECT_UILIMIT_HANDLES
    | JOB_OBJECT_UILIMIT_READCLIPBOARD
    | JOB_OBJECT_UILIMIT_WRITECLIPBOARD
    | JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS
    | JOB_OBJECT_UILIMIT_DISPLAYSETTINGS
    | JOB_OBJECT_UILIMIT_GLOBALATOMS
    | JOB_OBJECT_UILIMIT_DESKTOP
    | JOB_OBJECT_UILIMIT_EXITWINDOWS
    | JOB_OBJECT_UILIMIT_IME;

/// The workload's job: its whole tree, no process limit, no breakaway,
/// killed when the launcher's handle closes. A job nested inside it (cargo
/// and MSBuild make their own) is allowed: Windows refuses UI limits only
/// on the inner job (AssignProcessToJobObject), not on this outer one.
pub const WORKLOAD_JOB: JobLimits = JobLimits {
    limit_flags: JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION | JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    active_processes: 0,
    ui_restrictions: UI_ALL,
};

/// A role's job: one process, killed when the launcher's handle closes.
pub const ROLE_JOB: JobLimits = JobLimits {
    limit_flags: JOB_OBJECT_LIMIT_ACTIVE_PROCESS
        | JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION
        | JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    active_processes: 1,
    ui_restrictions: UI_ALL,
};

/// The launcher's job, made by `terra run`: killed with `terra run`; the
/// launcher's workers break away into their own jobs (never silently: only
/// with CREATE_BREAKAWAY_FROM_JOB, which only the launcher passes).
pub const LAUNCHER_JOB: JobLimits = JobLimits {
    limit_flags: JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION
        | JOB_OBJECT_LIMIT_BREAKAWAY_OK
        | JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    active_processes: 0,
    ui_restrictions: 0,
};

/// How a role's worker is created: no console at all.
pub const ROLE_CREATION_FLAGS: u32 = CREATE_SUSPENDED
    | DETACHED_PROCESS
    | CREATE_UNICODE_ENVIRONMENT
    | EXTENDED_STARTUPINFO_PRESENT
    | CREATE_BREAKAWAY_FROM_JOB;

/// How the workload is created: a windowless console of its own that its
/// console children share (a console-less parent would make Windows open a
/// new console window for each console child).
pub const WORKLOAD_CREATION_FLAGS: u32 = CREATE_SUSPENDED
    | CREATE_NO_WINDOW
    | CREATE_UNICODE_ENVIRONMENT
    | EXTENDED_STARTUPINFO_PRESENT
    | CREATE_BREAKAWAY_FROM_JOB;

const LIMIT_NAMES: [(u32, &str); 5] = [
    (
        JOB_OBJECT_LIMIT_ACTIVE_PROCESS,
        "JOB_OBJECT_LIMIT_ACTIVE_PROCESS",
    ),
    (
        JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION,
        "JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION",
    ),
    (
        JOB_OBJECT_LIMIT_BREAKAWAY_OK,
        "JOB_OBJECT_LIMIT_BREAKAWAY_OK",
    ),
    (
        JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK,
        "JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK",
    ),
    (
        JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
        "JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE",
    ),
];

const UI_NAMES: [(u32, &str); 9] = [
    (JOB_OBJECT_UILIMIT_HANDLES, "JOB_OBJECT_UILIMIT_HANDLES"),
    (
        JOB_OBJECT_UILIMIT_READCLIPBOARD,
        "JOB_OBJECT_UILIMIT_READCLIPBOARD",
    ),
    (
        JOB_OBJECT_UILIMIT_WRITECLIPBOARD,
        "JOB_OBJECT_UILIMIT_WRITECLIPBOARD",
    ),
    (
        JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS,
        "JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS",
    ),
    (
        JOB_OBJECT_UILIMIT_DISPLAYSETTINGS,
        "JOB_OBJECT_UILIMIT_DISPLAYSETTINGS",
    ),
    (
        JOB_OBJECT_UILIMIT_GLOBALATOMS,
        "JOB_OBJECT_UILIMIT_GLOBALATOMS",
    ),
    (JOB_OBJECT_UILIMIT_DESKTOP, "JOB_OBJECT_UILIMIT_DESKTOP"),
    (
        JOB_OBJECT_UILIMIT_EXITWINDOWS,
        "JOB_OBJECT_UILIMIT_EXITWINDOWS",
    ),
    (JOB_OBJECT_UILIMIT_IME, "JOB_OBJECT_UILIMIT_IME"),
];

const CREATION_NAMES: [(u32, &str); 6] = [
    (CREATE_SUSPENDED, "CREATE_SUSPENDED"),
    (DETACHED_PROCESS, "DETACHED_PROCESS"),
    (CREATE_NO_WINDOW, "CREATE_NO_WINDOW"),
    (CREATE_UNICODE_ENVIRONMENT, "CREATE_UNICODE_ENVIRONMENT"),
    (EXTENDED_STARTUPINFO_PRESENT, "EXTENDED_STARTUPINFO_PRESENT"),
    (CREATE_BREAKAWAY_FROM_JOB, "CREATE_BREAKAWAY_FROM_JOB"),
];

pub fn limit_names(bits: u32) -> Vec<String> {
    crate::bits::names(&LIMIT_NAMES, bits)
}

pub fn ui_names(bits: u32) -> Vec<String> {
    crate::bits::names(&UI_NAMES, bits)
}

pub fn creation_names(bits: u32) -> Vec<String> {
    crate::bits::names(&CREATION_NAMES, bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appcontainer_role_job_holds_one_process_and_no_ui() {
        assert_eq!(ROLE_JOB.limit_flags, 0x2408);
        assert_eq!(ROLE_JOB.active_processes, 1);
        assert_eq!(ROLE_JOB.ui_restrictions, 0x1ff);
        for job in [ROLE_JOB, WORKLOAD_JOB] {
            for never in [
                JOB_OBJECT_LIMIT_BREAKAWAY_OK,
                JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK,
            ] {
                assert_eq!(job.limit_flags & never, 0);
            }
            assert_ne!(job.limit_flags & JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, 0);
        }
        // The launcher's workers leave its job only when asked, never silently.
        assert_eq!(LAUNCHER_JOB.limit_flags, 0x2c00);
        assert_eq!(
            LAUNCHER_JOB.limit_flags & JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK,
            0
        );
        assert_eq!(
            ui_names(ROLE_JOB.ui_restrictions).len(),
            9,
            "desktop, clipboard, atoms, USER handles and the rest"
        );
    }

    #[test]
    fn appcontainer_workload_job_admits_a_process_tree() {
        assert_eq!(WORKLOAD_JOB.limit_flags, 0x2400);
        assert_eq!(
            WORKLOAD_JOB.limit_flags & JOB_OBJECT_LIMIT_ACTIVE_PROCESS,
            0
        );
        assert_eq!(WORKLOAD_JOB.active_processes, 0);
        assert_eq!(
            limit_names(WORKLOAD_JOB.limit_flags),
            [
                "JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION",
                "JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE"
            ]
        );
    }

    #[test]
    fn appcontainer_workers_are_created_suspended() {
        assert_eq!(ROLE_CREATION_FLAGS, 0x0108_040c);
        assert_eq!(
            creation_names(ROLE_CREATION_FLAGS),
            [
                "CREATE_SUSPENDED",
                "DETACHED_PROCESS",
                "CREATE_UNICODE_ENVIRONMENT",
                "EXTENDED_STARTUPINFO_PRESENT",
                "CREATE_BREAKAWAY_FROM_JOB"
            ]
        );
        // A role has no console; the workload a windowless one of its own.
        assert_eq!(ROLE_CREATION_FLAGS & CREATE_NO_WINDOW, 0);
        assert_eq!(WORKLOAD_CREATION_FLAGS, 0x0908_0404);
        assert_eq!(WORKLOAD_CREATION_FLAGS & DETACHED_PROCESS, 0);
        assert_ne!(WORKLOAD_CREATION_FLAGS & CREATE_SUSPENDED, 0);
    }
}
