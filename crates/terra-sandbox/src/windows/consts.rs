//! terra-appcontainer names the Win32 constants it renders and plans with
//! (it is built on every host, without windows-sys). Here, at compile time,
//! every one of them is checked against windows-sys: a wrong value fails
//! the Windows build, and `make lint-cross` on any host.
//!
//! The mitigation policy bits have no windows-sys constants (they are
//! macros in winbase.h); their values are tested in terra-appcontainer
//! against the documented shifts.

use terra_appcontainer::{job as j, rights as r};
use windows_sys::Win32::Security as sec;
use windows_sys::Win32::Storage::FileSystem as fs;
use windows_sys::Win32::System::JobObjects as jo;
use windows_sys::Win32::System::SystemServices as ss;
use windows_sys::Win32::System::Threading as th;
use windows_sys::Win32::System::WindowsProgramming as wp;

macro_rules! same {
    ($($ours:expr => $theirs:expr),+ $(,)?) => {
        $(const _: () = assert!($ours as u64 == $theirs as u64);)+
    };
}

same! {
    r::FILE_READ_DATA => fs::FILE_READ_DATA,
    r::FILE_WRITE_DATA => fs::FILE_WRITE_DATA,
    r::FILE_APPEND_DATA => fs::FILE_APPEND_DATA,
    r::FILE_READ_EA => fs::FILE_READ_EA,
    r::FILE_WRITE_EA => fs::FILE_WRITE_EA,
    r::FILE_EXECUTE => fs::FILE_EXECUTE,
    r::FILE_DELETE_CHILD => fs::FILE_DELETE_CHILD,
    r::FILE_READ_ATTRIBUTES => fs::FILE_READ_ATTRIBUTES,
    r::FILE_WRITE_ATTRIBUTES => fs::FILE_WRITE_ATTRIBUTES,
    r::DELETE => fs::DELETE,
    r::READ_CONTROL => fs::READ_CONTROL,
    r::WRITE_DAC => fs::WRITE_DAC,
    r::WRITE_OWNER => fs::WRITE_OWNER,
    r::SYNCHRONIZE => fs::SYNCHRONIZE,
    r::FILE_GENERIC_READ => fs::FILE_GENERIC_READ,
    r::FILE_GENERIC_WRITE => fs::FILE_GENERIC_WRITE,
    r::FILE_GENERIC_EXECUTE => fs::FILE_GENERIC_EXECUTE,
    r::FILE_ALL_ACCESS => fs::FILE_ALL_ACCESS,
    r::OBJECT_INHERIT_ACE => sec::OBJECT_INHERIT_ACE,
    r::CONTAINER_INHERIT_ACE => sec::CONTAINER_INHERIT_ACE,
    r::NO_INHERITANCE => sec::NO_INHERITANCE,
    j::JOB_OBJECT_LIMIT_ACTIVE_PROCESS => jo::JOB_OBJECT_LIMIT_ACTIVE_PROCESS,
    j::JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION => jo::JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION,
    j::JOB_OBJECT_LIMIT_BREAKAWAY_OK => jo::JOB_OBJECT_LIMIT_BREAKAWAY_OK,
    j::JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK => jo::JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK,
    j::JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE => jo::JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    j::JOB_OBJECT_UILIMIT_HANDLES => jo::JOB_OBJECT_UILIMIT_HANDLES,
    j::JOB_OBJECT_UILIMIT_READCLIPBOARD => jo::JOB_OBJECT_UILIMIT_READCLIPBOARD,
    j::JOB_OBJECT_UILIMIT_WRITECLIPBOARD => jo::JOB_OBJECT_UILIMIT_WRITECLIPBOARD,
    j::JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS => jo::JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS,
    j::JOB_OBJECT_UILIMIT_DISPLAYSETTINGS => jo::JOB_OBJECT_UILIMIT_DISPLAYSETTINGS,
    j::JOB_OBJECT_UILIMIT_GLOBALATOMS => jo::JOB_OBJECT_UILIMIT_GLOBALATOMS,
    j::JOB_OBJECT_UILIMIT_DESKTOP => jo::JOB_OBJECT_UILIMIT_DESKTOP,
    j::JOB_OBJECT_UILIMIT_EXITWINDOWS => jo::JOB_OBJECT_UILIMIT_EXITWINDOWS,
    j::JOB_OBJECT_UILIMIT_IME => ss::JOB_OBJECT_UILIMIT_IME,
    j::CREATE_SUSPENDED => th::CREATE_SUSPENDED,
    j::CREATE_NO_WINDOW => th::CREATE_NO_WINDOW,
    j::CREATE_BREAKAWAY_FROM_JOB => th::CREATE_BREAKAWAY_FROM_JOB,
    j::DETACHED_PROCESS => th::DETACHED_PROCESS,
    j::CREATE_UNICODE_ENVIRONMENT => th::CREATE_UNICODE_ENVIRONMENT,
    j::EXTENDED_STARTUPINFO_PRESENT => th::EXTENDED_STARTUPINFO_PRESENT,
    j::PROCESS_CREATION_CHILD_PROCESS_RESTRICTED => wp::PROCESS_CREATION_CHILD_PROCESS_RESTRICTED,
    j::PROCESS_CREATION_ALL_APPLICATION_PACKAGES_OPT_OUT => wp::PROCESS_CREATION_ALL_APPLICATION_PACKAGES_OPT_OUT,
}

// Every worker job's UI restrictions are every one there is.
const _: () = assert!(j::UI_ALL == ss::JOB_OBJECT_UILIMIT_ALL);
const _: () = assert!(j::ROLE_JOB.ui_restrictions == ss::JOB_OBJECT_UILIMIT_ALL);
const _: () = assert!(j::WORKLOAD_JOB.ui_restrictions == ss::JOB_OBJECT_UILIMIT_ALL);
