//! The process mitigation policy every worker is created with
//! (`PROC_THREAD_ATTRIBUTE_MITIGATION_POLICY`, a two-element DWORD64 array),
//! as the `PROCESS_CREATION_MITIGATION_POLICY_*` and `..._POLICY2_*` bit
//! values winbase.h and the UpdateProcThreadAttribute documentation give.
//! windows-sys has no constants for most of them (they are macros), so they
//! are named here once; docs/sandbox-windows.md says why each is on or off.

// ---- first DWORD64 -------------------------------------------------------

/// Images that are not dynamic-base are rebased as if their base collided
/// (mandatory ASLR). Not `..._ALWAYS_ON_REQ_RELOCS` (3 << 8): that refuses
/// images without a relocation section, which some programs still ship.
pub const FORCE_RELOCATE_IMAGES_ALWAYS_ON: u64 = 0x1 << 8;
/// A corrupted heap terminates the process.
pub const HEAP_TERMINATE_ALWAYS_ON: u64 = 0x1 << 12;
/// A random lowest user address (bottom-up ASLR, stacks included).
pub const BOTTOM_UP_ASLR_ALWAYS_ON: u64 = 0x1 << 16;
/// Up to 1 TB of bottom-up variance (only with bottom-up ASLR, 64-bit only).
pub const HIGH_ENTROPY_ASLR_ALWAYS_ON: u64 = 0x1 << 20;
/// A bad handle reference raises an exception at once.
pub const STRICT_HANDLE_CHECKS_ALWAYS_ON: u64 = 0x1 << 24;
/// No Win32k system calls at all (no windows, no GDI, no USER objects).
pub const WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON: u64 = 0x1 << 28;
/// No legacy extension points: AppInit DLLs, Winsock LSPs, global hooks, legacy IMEs.
pub const EXTENSION_POINT_DISABLE_ALWAYS_ON: u64 = 0x1 << 32;
/// Control Flow Guard enforced for images built with it.
pub const CONTROL_FLOW_GUARD_ALWAYS_ON: u64 = 0x1 << 40;
/// No images from remote devices (network shares, WebDAV).
pub const IMAGE_LOAD_NO_REMOTE_ALWAYS_ON: u64 = 0x1 << 52;
/// No images carrying the Low mandatory label (what a sandboxed writer leaves).
pub const IMAGE_LOAD_NO_LOW_LABEL_ALWAYS_ON: u64 = 0x1 << 56;
/// System32 is searched first for DLLs, before the application directory.
pub const IMAGE_LOAD_PREFER_SYSTEM32_ALWAYS_ON: u64 = 0x1 << 60;

/// Left off (named so the rendering can say so): JIT compilers (Node,
/// Java, .NET) need dynamic code.
pub const PROHIBIT_DYNAMIC_CODE_ALWAYS_ON: u64 = 0x1 << 36;
/// Left off: the workload runs the user's own (non-Microsoft) programs.
pub const BLOCK_NON_MICROSOFT_BINARIES_ALWAYS_ON: u64 = 0x1 << 44;

// ---- second DWORD64 ------------------------------------------------------

/// Left off: refuses every image built without CFG, most programs.
pub const POLICY2_STRICT_CONTROL_FLOW_GUARD_ALWAYS_ON: u64 = 0x1 << 8;
/// No indirect-branch-prediction influence from sibling hyperthreads.
pub const POLICY2_RESTRICT_INDIRECT_BRANCH_PREDICTION_ALWAYS_ON: u64 = 0x1 << 16;
/// Speculative Store Bypass disabled (no effect on CPUs without the control).
pub const POLICY2_SPECULATIVE_STORE_BYPASS_DISABLE_ALWAYS_ON: u64 = 0x1 << 24;

/// The first DWORD64 of a role's mitigation policy (Win32k locked down:
/// the broker imports no user32).
pub const ROLE_POLICY1: u64 = FORCE_RELOCATE_IMAGES_ALWAYS_ON
    | HEAP_TERMINATE_ALWAYS_ON
    | BOTTOM_UP_ASLR_ALWAYS_ON
    | HIGH_ENTROPY_ASLR_ALWAYS_ON
    | STRICT_HANDLE_CHECKS_ALWAYS_ON
    | WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON
    | EXTENSION_POINT_DISABLE_ALWAYS_ON
    | CONTROL_FLOW_GUARD_ALWAYS_ON
    | IMAGE_LOAD_NO_REMOTE_ALWAYS_ON
    | IMAGE_LOAD_NO_LOW_LABEL_ALWAYS_ON
    | IMAGE_LOAD_PREFER_SYSTEM32_ALWAYS_ON;

/// The first DWORD64 of the workload's: the role's without the Win32k
/// lockdown. Console programs import user32.dll (where.exe, whoami.exe,
/// PowerShell, git's tools) and die in their loader with 0xC0000142
/// (STATUS_DLL_INIT_FAILED) when Win32k system calls are disabled; see
/// openai/codex issue 46412 and ziglang/zig pull request 18509.
pub const WORKLOAD_POLICY1: u64 = ROLE_POLICY1 & !WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON;

/// The second DWORD64 of every worker's mitigation policy.
pub const WORKER_POLICY2: u64 = POLICY2_RESTRICT_INDIRECT_BRANCH_PREDICTION_ALWAYS_ON
    | POLICY2_SPECULATIVE_STORE_BYPASS_DISABLE_ALWAYS_ON;

/// A role's policy as UpdateProcThreadAttribute takes it.
pub const ROLE_POLICY: [u64; 2] = [ROLE_POLICY1, WORKER_POLICY2];
/// The workload's.
pub const WORKLOAD_POLICY: [u64; 2] = [WORKLOAD_POLICY1, WORKER_POLICY2];

const POLICY1_NAMES: [(u64, &str); 13] = [
    (
        FORCE_RELOCATE_IMAGES_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_FORCE_RELOCATE_IMAGES_ALWAYS_ON",
    ),
    (
        HEAP_TERMINATE_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_HEAP_TERMINATE_ALWAYS_ON",
    ),
    (
        BOTTOM_UP_ASLR_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_BOTTOM_UP_ASLR_ALWAYS_ON",
    ),
    (
        HIGH_ENTROPY_ASLR_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_HIGH_ENTROPY_ASLR_ALWAYS_ON",
    ),
    (
        STRICT_HANDLE_CHECKS_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_STRICT_HANDLE_CHECKS_ALWAYS_ON",
    ),
    (
        WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON",
    ),
    (
        EXTENSION_POINT_DISABLE_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_EXTENSION_POINT_DISABLE_ALWAYS_ON",
    ),
    (
        PROHIBIT_DYNAMIC_CODE_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_PROHIBIT_DYNAMIC_CODE_ALWAYS_ON",
    ),
    (
        CONTROL_FLOW_GUARD_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_CONTROL_FLOW_GUARD_ALWAYS_ON",
    ),
    (
        BLOCK_NON_MICROSOFT_BINARIES_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_BLOCK_NON_MICROSOFT_BINARIES_ALWAYS_ON",
    ),
    (
        IMAGE_LOAD_NO_REMOTE_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_IMAGE_LOAD_NO_REMOTE_ALWAYS_ON",
    ),
    (
        IMAGE_LOAD_NO_LOW_LABEL_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_IMAGE_LOAD_NO_LOW_LABEL_ALWAYS_ON",
    ),
    (
        IMAGE_LOAD_PREFER_SYSTEM32_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY_IMAGE_LOAD_PREFER_SYSTEM32_ALWAYS_ON",
    ),
];

const POLICY2_NAMES: [(u64, &str); 3] = [
    (
        POLICY2_STRICT_CONTROL_FLOW_GUARD_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY2_STRICT_CONTROL_FLOW_GUARD_ALWAYS_ON",
    ),
    (
        POLICY2_RESTRICT_INDIRECT_BRANCH_PREDICTION_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY2_RESTRICT_INDIRECT_BRANCH_PREDICTION_ALWAYS_ON",
    ),
    (
        POLICY2_SPECULATIVE_STORE_BYPASS_DISABLE_ALWAYS_ON,
        "PROCESS_CREATION_MITIGATION_POLICY2_SPECULATIVE_STORE_BYPASS_DISABLE_ALWAYS_ON",
    ),
];

/// The names of the bits set in a first-DWORD64 policy.
pub fn policy1_names(bits: u64) -> Vec<String> {
    crate::bits::names(&POLICY1_NAMES, bits)
}

/// The names of the bits set in a second-DWORD64 policy.
pub fn policy2_names(bits: u64) -> Vec<String> {
    crate::bits::names(&POLICY2_NAMES, bits)
}

/// Left off for the workload only.
pub const WORKLOAD_LEFT_OFF: (&str, &str) = (
    "PROCESS_CREATION_MITIGATION_POLICY_WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON",
    "the workload only: console programs that import user32.dll die at load with 0xC0000142; the roles keep it",
);

/// The policies terra leaves off for every worker, with why (the rendering lists them).
pub const LEFT_OFF: [(&str, &str); 5] = [
    (
        "PROCESS_CREATION_MITIGATION_POLICY_PROHIBIT_DYNAMIC_CODE_ALWAYS_ON",
        "JIT compilers (Node, Java, .NET) need dynamic code",
    ),
    (
        "PROCESS_CREATION_MITIGATION_POLICY_BLOCK_NON_MICROSOFT_BINARIES_ALWAYS_ON",
        "the workload runs programs Microsoft did not sign",
    ),
    (
        "PROCESS_CREATION_MITIGATION_POLICY_FORCE_RELOCATE_IMAGES_ALWAYS_ON_REQ_RELOCS",
        "refuses images without relocations, which some programs ship",
    ),
    (
        "PROCESS_CREATION_MITIGATION_POLICY2_STRICT_CONTROL_FLOW_GUARD_ALWAYS_ON",
        "refuses every image built without CFG",
    ),
    (
        "PROCESS_CREATION_MITIGATION_POLICY2_CET_USER_SHADOW_STACKS_ALWAYS_ON",
        "left at the system's default (not verified on Windows)",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appcontainer_mitigation_bits_are_exact() {
        assert_eq!(ROLE_POLICY1, 0x1110_0101_1111_1100);
        assert_eq!(WORKER_POLICY2, 0x0000_0000_0101_0000);
        assert_eq!(ROLE_POLICY, [ROLE_POLICY1, WORKER_POLICY2]);
        // The workload's differs by the Win32k lockdown alone.
        assert_eq!(WORKLOAD_POLICY1, 0x1110_0101_0111_1100);
        assert_eq!(
            ROLE_POLICY1 ^ WORKLOAD_POLICY1,
            WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON
        );
        // The ones left off are really off.
        for off in [
            PROHIBIT_DYNAMIC_CODE_ALWAYS_ON,
            BLOCK_NON_MICROSOFT_BINARIES_ALWAYS_ON,
        ] {
            assert_eq!(ROLE_POLICY1 & off, 0);
        }
        // ALWAYS_ON_REQ_RELOCS is 3 << 8: only the ALWAYS_ON bit of it is set.
        assert_eq!(ROLE_POLICY1 & (0x3 << 8), 0x1 << 8);
        assert_eq!(
            WORKER_POLICY2 & POLICY2_STRICT_CONTROL_FLOW_GUARD_ALWAYS_ON,
            0
        );
    }

    #[test]
    fn appcontainer_mitigation_names_cover_the_worker_policy() {
        let n1 = policy1_names(ROLE_POLICY1);
        assert_eq!(n1.len(), 11);
        assert!(n1
            .iter()
            .all(|n| n.starts_with("PROCESS_CREATION_MITIGATION_POLICY_")));
        assert!(n1.contains(
            &"PROCESS_CREATION_MITIGATION_POLICY_WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON".to_string()
        ));
        assert_eq!(policy2_names(WORKER_POLICY2).len(), 2);
        assert_eq!(policy1_names(1 << 2), ["0x0000000000000004"]);
    }
}
