//! Creating a worker: suspended, in the launch's AppContainer (no
//! capability), with its role's settings (`terra_appcontainer::WorkerSettings`:
//! a role is less privileged, has no children and no Win32k; the workload
//! has neither restriction), inheriting exactly its three standard handles
//! (NUL and two pipes), in its plain working directory, then put into its
//! own job before it runs a single instruction.

use super::error::Error;
use std::fs::File;
use std::os::windows::io::{AsRawHandle, OwnedHandle};

use terra_appcontainer::{Role, WorkerSettings};
use windows_sys::Win32::Foundation::{
    SetHandleInformation, HANDLE, HANDLE_FLAG_INHERIT, WAIT_OBJECT_0,
};
use windows_sys::Win32::Security::{SECURITY_ATTRIBUTES, SECURITY_CAPABILITIES};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, FILE_GENERIC_READ, FILE_SHARE_READ, FILE_SHARE_WRITE, OPEN_EXISTING,
};
use windows_sys::Win32::System::Pipes::CreatePipe;
use windows_sys::Win32::System::Threading::{
    CreateProcessW, DeleteProcThreadAttributeList, GetExitCodeProcess,
    InitializeProcThreadAttributeList, ResumeThread, TerminateProcess, UpdateProcThreadAttribute,
    WaitForSingleObject, INFINITE, PROCESS_INFORMATION,
    PROC_THREAD_ATTRIBUTE_ALL_APPLICATION_PACKAGES_POLICY,
    PROC_THREAD_ATTRIBUTE_CHILD_PROCESS_POLICY, PROC_THREAD_ATTRIBUTE_HANDLE_LIST,
    PROC_THREAD_ATTRIBUTE_MITIGATION_POLICY, PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES,
    STARTF_USESTDHANDLES, STARTUPINFOEXW,
};

use super::job::Job;
use super::util::{last_error, owned, wide, OwnedSid};

/// A worker, created suspended and already in its job.
pub struct Worker {
    pub process: OwnedHandle,
    thread: OwnedHandle,
    pub job: Job,
    pub stdout: Option<File>,
    pub stderr: Option<File>,
}

/// An attribute list, deleted on drop.
struct Attributes(Vec<u64>);

impl Attributes {
    fn new(count: u32) -> Result<Attributes, Error> {
        let mut size = 0usize;
        // SAFETY: a null list asks for the size needed (the call fails with
        // ERROR_INSUFFICIENT_BUFFER and sets `size`).
        unsafe { InitializeProcThreadAttributeList(std::ptr::null_mut(), count, 0, &mut size) };
        if size == 0 {
            return Err(last_error("InitializeProcThreadAttributeList (size)"));
        }
        let mut a = Attributes(vec![0u64; size.div_ceil(8)]);
        // SAFETY: the buffer has at least `size` bytes, 8-byte aligned.
        if unsafe { InitializeProcThreadAttributeList(a.ptr(), count, 0, &mut size) } == 0 {
            // Nothing to delete: do not run Drop on an uninitialized list.
            a.0 = Vec::new();
            return Err(last_error("InitializeProcThreadAttributeList"));
        }
        Ok(a)
    }

    fn ptr(&mut self) -> *mut core::ffi::c_void {
        self.0.as_mut_ptr().cast()
    }

    /// Sets `attribute` to the `size` bytes at `value`.
    ///
    /// # Safety
    /// `value` must point at `size` readable bytes that stay valid and
    /// unchanged until this list is dropped.
    unsafe fn set(
        &mut self,
        attribute: u32,
        value: *const core::ffi::c_void,
        size: usize,
        what: &str,
    ) -> Result<(), Error> {
        // SAFETY: the list is initialized; the caller keeps `value` alive
        // and unchanged for the list's lifetime.
        let ok = unsafe {
            UpdateProcThreadAttribute(
                self.ptr(),
                0,
                attribute as usize,
                value,
                size,
                std::ptr::null_mut(),
                std::ptr::null(),
            )
        };
        if ok == 0 {
            return Err(last_error(&format!("UpdateProcThreadAttribute ({what})")));
        }
        Ok(())
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            // SAFETY: the list was initialized by InitializeProcThreadAttributeList.
            unsafe { DeleteProcThreadAttributeList(self.ptr()) };
        }
    }
}

fn inheritable() -> SECURITY_ATTRIBUTES {
    SECURITY_ATTRIBUTES {
        nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
        lpSecurityDescriptor: std::ptr::null_mut(),
        bInheritHandle: 1,
    }
}

/// A pipe whose write end the worker inherits; the read end stays here,
/// not inheritable.
fn pipe(what: &str) -> Result<(File, OwnedHandle), Error> {
    let sa = inheritable();
    let mut read: HANDLE = std::ptr::null_mut();
    let mut write: HANDLE = std::ptr::null_mut();
    // SAFETY: `read` and `write` receive new handles; `sa` outlives the call.
    if unsafe { CreatePipe(&mut read, &mut write, &sa, 0) } == 0 {
        return Err(last_error(&format!("CreatePipe ({what})")));
    }
    let read = owned(read, "CreatePipe")?;
    let write = owned(write, "CreatePipe")?;
    // SAFETY: `read` is a valid handle this process owns.
    if unsafe { SetHandleInformation(read.as_raw_handle(), HANDLE_FLAG_INHERIT, 0) } == 0 {
        return Err(last_error("SetHandleInformation"));
    }
    Ok((File::from(read), write))
}

/// An inheritable handle to the NUL device, read-only.
fn nul() -> Result<OwnedHandle, Error> {
    let sa = inheritable();
    let name = wide("NUL");
    // SAFETY: `name` is NUL-terminated; `sa` outlives the call.
    let h = unsafe {
        CreateFileW(
            name.as_ptr(),
            FILE_GENERIC_READ,
            FILE_SHARE_READ | FILE_SHARE_WRITE,
            &sa,
            OPEN_EXISTING,
            0,
            std::ptr::null_mut(),
        )
    };
    owned(h, "open NUL")
}

/// The environment block: every variable of this process (terra run chose
/// them), sorted by name without case, as CreateProcessW wants.
pub fn environment_block() -> Vec<u16> {
    use std::os::windows::ffi::OsStrExt;
    let mut vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
    vars.sort_by_key(|(k, _)| k.to_string_lossy().to_uppercase());
    let mut block = Vec::new();
    for (k, v) in vars {
        block.extend(k.encode_wide());
        block.push(u16::from(b'='));
        block.extend(v.encode_wide());
        block.push(0);
    }
    if block.is_empty() {
        block.push(0);
    }
    block.push(0);
    block
}

/// Creates `program` with `command_line` as a suspended worker of `role`
/// in the AppContainer of `package`, in the working directory `cwd` (a
/// plain `X:\...` path; none: the launcher's), and puts it into a new job
/// of the role's limits.
pub fn create_suspended(
    program: &str,
    command_line: &str,
    environment: &[u16],
    cwd: Option<&str>,
    package: &OwnedSid,
    role: Role,
) -> Result<Worker, Error> {
    let settings = WorkerSettings::of(role);
    if !settings.capabilities.is_empty() {
        return Err(format!(
            "the {} role names capability SIDs, which this launcher does not grant",
            role.name()
        )
        .into());
    }
    let job = Job::new(&settings.job)?;
    let stdin = nul()?;
    let (stdout, stdout_w) = pipe("stdout")?;
    let (stderr, stderr_w) = pipe("stderr")?;
    let inherit: [HANDLE; 3] = [
        stdin.as_raw_handle(),
        stdout_w.as_raw_handle(),
        stderr_w.as_raw_handle(),
    ];
    let capabilities = SECURITY_CAPABILITIES {
        AppContainerSid: package.as_psid(),
        Capabilities: std::ptr::null_mut(),
        CapabilityCount: 0,
        Reserved: 0,
    };
    let lpac: Option<u32> = settings.all_application_packages_policy;
    let mitigation: [u64; 2] = settings.mitigation;
    let child_policy: Option<u32> = settings.child_process_policy;
    let count = 3 + u32::from(lpac.is_some()) + u32::from(child_policy.is_some());
    let mut attributes = Attributes::new(count)?;
    // SAFETY: every value lives on this stack frame until after
    // CreateProcessW, and `attributes` is dropped before them (declared
    // after them); sizes are the values' own.
    unsafe {
        attributes.set(
            PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES,
            (&capabilities as *const SECURITY_CAPABILITIES).cast(),
            std::mem::size_of::<SECURITY_CAPABILITIES>(),
            "security capabilities",
        )?;
        if let Some(lpac) = &lpac {
            attributes.set(
                PROC_THREAD_ATTRIBUTE_ALL_APPLICATION_PACKAGES_POLICY,
                (lpac as *const u32).cast(),
                std::mem::size_of::<u32>(),
                "less-privileged AppContainer",
            )?;
        }
        attributes.set(
            PROC_THREAD_ATTRIBUTE_MITIGATION_POLICY,
            mitigation.as_ptr().cast(),
            std::mem::size_of::<[u64; 2]>(),
            "mitigation policy",
        )?;
        if let Some(child_policy) = &child_policy {
            attributes.set(
                PROC_THREAD_ATTRIBUTE_CHILD_PROCESS_POLICY,
                (child_policy as *const u32).cast(),
                std::mem::size_of::<u32>(),
                "child process policy",
            )?;
        }
        attributes.set(
            PROC_THREAD_ATTRIBUTE_HANDLE_LIST,
            inherit.as_ptr().cast(),
            std::mem::size_of::<[HANDLE; 3]>(),
            "handle list",
        )?;
    }
    // SAFETY: all-zero is a valid STARTUPINFOEXW; the fields used are set.
    let mut si: STARTUPINFOEXW = unsafe { std::mem::zeroed() };
    si.StartupInfo.cb = std::mem::size_of::<STARTUPINFOEXW>() as u32;
    si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
    si.StartupInfo.hStdInput = inherit[0];
    si.StartupInfo.hStdOutput = inherit[1];
    si.StartupInfo.hStdError = inherit[2];
    si.lpAttributeList = attributes.ptr();
    let app = wide(program);
    let mut line = wide(command_line);
    let dir = cwd.map(wide);
    // SAFETY: all-zero is a valid PROCESS_INFORMATION for the call to fill.
    let mut pi: PROCESS_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: `app`, `dir` and `environment` are NUL-terminated (the block
    // ends with two NULs) and outlive the call; `line` is a writable
    // NUL-terminated buffer as CreateProcessW requires; `si` and its
    // attribute list are valid; handles are inherited only from the list.
    let ok = unsafe {
        CreateProcessW(
            app.as_ptr(),
            line.as_mut_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            1,
            settings.creation_flags,
            environment.as_ptr().cast(),
            dir.as_ref().map_or(std::ptr::null(), |d| d.as_ptr()),
            &si.StartupInfo,
            &mut pi,
        )
    };
    if ok == 0 {
        return Err(last_error(&format!("CreateProcessW {program}")));
    }
    let process = owned(pi.hProcess, "CreateProcessW (process)")?;
    let thread = owned(pi.hThread, "CreateProcessW (thread)")?;
    // The worker holds its own copies now.
    drop((stdin, stdout_w, stderr_w));
    let worker = Worker {
        process,
        thread,
        job,
        stdout: Some(stdout),
        stderr: Some(stderr),
    };
    if let Err(e) = worker.job.assign(&worker.process) {
        worker.kill();
        return Err(format!(
            "{e}: the worker could not be put into its own job (is terra run inside a job that does not allow \
             breakaway? Windows refuses UI restrictions on a nested job)"
        ).into());
    }
    Ok(worker)
}

impl Worker {
    /// Lets the worker run.
    pub fn resume(&self) -> Result<(), Error> {
        // SAFETY: the thread handle is valid and was created suspended.
        if unsafe { ResumeThread(self.thread.as_raw_handle()) } == u32::MAX {
            return Err(last_error("ResumeThread"));
        }
        Ok(())
    }

    /// Ends the worker (it may not have run yet).
    pub fn kill(&self) {
        // SAFETY: the process handle is valid.
        unsafe { TerminateProcess(self.process.as_raw_handle(), 1) };
    }

    /// Waits for the worker to end; its exit code.
    pub fn wait(&self) -> Result<u32, Error> {
        // SAFETY: the process handle is valid.
        if unsafe { WaitForSingleObject(self.process.as_raw_handle(), INFINITE) } != WAIT_OBJECT_0 {
            return Err(last_error("WaitForSingleObject"));
        }
        let mut code = 0u32;
        // SAFETY: the process handle is valid; `code` is writable.
        if unsafe { GetExitCodeProcess(self.process.as_raw_handle(), &mut code) } == 0 {
            return Err(last_error("GetExitCodeProcess"));
        }
        Ok(code)
    }
}
