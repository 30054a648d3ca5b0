//! Job objects: the workload's (its tree, killed with the launcher's
//! handle), a role's (one process), and the launcher's (killed with
//! `terra run`; the launcher proves it is in this very job through a
//! query-only handle `terra run` lets it inherit).

use super::error::Error;
use std::os::windows::io::{AsHandle, AsRawHandle, OwnedHandle};

use terra_appcontainer::job::JobLimits;
use windows_sys::Win32::Foundation::{DuplicateHandle, HANDLE};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, IsProcessInJob, JobObjectBasicUIRestrictions,
    JobObjectExtendedLimitInformation, QueryInformationJobObject, SetInformationJobObject,
    TerminateJobObject, JOBOBJECT_BASIC_UI_RESTRICTIONS, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
};
use windows_sys::Win32::System::SystemServices::JOB_OBJECT_QUERY;
use windows_sys::Win32::System::Threading::GetCurrentProcess;

use super::util::{last_error, owned};

/// A job object this process holds the only handle to.
pub struct Job(OwnedHandle);

impl Job {
    /// A new unnamed job with `limits`.
    pub fn new(limits: &JobLimits) -> Result<Job, Error> {
        // SAFETY: no security attributes (the handle is not inheritable),
        // no name.
        let h = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        let job = Job(owned(h, "CreateJobObjectW")?);
        // SAFETY: an all-zero JOBOBJECT_EXTENDED_LIMIT_INFORMATION is a
        // valid value (no limits), then the ones asked are set.
        let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        info.BasicLimitInformation.LimitFlags = limits.limit_flags;
        info.BasicLimitInformation.ActiveProcessLimit = limits.active_processes;
        // SAFETY: the job handle is valid; `info` is the structure the
        // class names, with its exact size.
        let ok = unsafe {
            SetInformationJobObject(
                job.raw(),
                JobObjectExtendedLimitInformation,
                (&info as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
                std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        };
        if ok == 0 {
            return Err(last_error("SetInformationJobObject (limits)"));
        }
        if limits.ui_restrictions != 0 {
            let ui = JOBOBJECT_BASIC_UI_RESTRICTIONS {
                UIRestrictionsClass: limits.ui_restrictions,
            };
            // SAFETY: as above, for the UI restrictions class.
            let ok = unsafe {
                SetInformationJobObject(
                    job.raw(),
                    JobObjectBasicUIRestrictions,
                    (&ui as *const JOBOBJECT_BASIC_UI_RESTRICTIONS).cast(),
                    std::mem::size_of::<JOBOBJECT_BASIC_UI_RESTRICTIONS>() as u32,
                )
            };
            if ok == 0 {
                return Err(last_error("SetInformationJobObject (UI restrictions)"));
            }
        }
        Ok(job)
    }

    /// The raw handle (for the console control handler, which may only
    /// terminate the job).
    pub fn raw(&self) -> HANDLE {
        self.0.as_raw_handle()
    }

    /// A second handle to this job with JOB_OBJECT_QUERY access only,
    /// inheritable: `terra run` hands it to the launcher, which can ask
    /// IsProcessInJob with it and do nothing else.
    pub fn inheritable_query_handle(&self) -> Result<OwnedHandle, Error> {
        let mut h: HANDLE = std::ptr::null_mut();
        // SAFETY: both process handles are this process's pseudo handle; the
        // job handle is valid; `h` receives the new handle.
        let ok = unsafe {
            DuplicateHandle(
                GetCurrentProcess(),
                self.raw(),
                GetCurrentProcess(),
                &mut h,
                JOB_OBJECT_QUERY,
                1,
                0,
            )
        };
        if ok == 0 {
            return Err(last_error("DuplicateHandle (the launcher job, query only)"));
        }
        owned(h, "DuplicateHandle")
    }

    /// Ends every process of the job with `code`.
    pub fn terminate(&self, code: u32) -> Result<(), Error> {
        // SAFETY: this job's handle is open while `self` lives.
        unsafe { terminate_raw(self.raw(), code) }
    }

    /// Puts `process` (a handle with PROCESS_SET_QUOTA | PROCESS_TERMINATE)
    /// into the job.
    pub fn assign(&self, process: &impl AsHandle) -> Result<(), Error> {
        let process = process.as_handle().as_raw_handle();
        // SAFETY: both handles are valid for the duration of the call (the
        // borrow keeps `process` open).
        if unsafe { AssignProcessToJobObject(self.raw(), process) } == 0 {
            return Err(last_error("AssignProcessToJobObject"));
        }
        Ok(())
    }

    /// True when `process` is in this job.
    pub fn contains(&self, process: &impl AsHandle) -> Result<bool, Error> {
        let process = process.as_handle().as_raw_handle();
        let mut inside = 0;
        // SAFETY: both handles are valid; `inside` receives the answer.
        if unsafe { IsProcessInJob(process, self.raw(), &mut inside) } == 0 {
            return Err(last_error("IsProcessInJob"));
        }
        Ok(inside != 0)
    }
}

/// Ends every process of the job `job` with `code`.
///
/// # Safety
/// `job` must be a job handle this process holds open for the call.
pub unsafe fn terminate_raw(job: HANDLE, code: u32) -> Result<(), Error> {
    // SAFETY: the caller guarantees `job` is an open job handle.
    if unsafe { TerminateJobObject(job, code) } == 0 {
        return Err(last_error("TerminateJobObject"));
    }
    Ok(())
}

/// True when this process is in the job `job` names: a handle value the
/// launcher inherited from `terra run` (`--job`). A value that names no job
/// handle of this process fails (never "any job").
pub fn current_in(job: usize) -> Result<bool, Error> {
    let job = job as HANDLE;
    if job.is_null() {
        return Err("no job handle was handed to the launcher".into());
    }
    let mut inside = 0;
    // SAFETY: the pseudo handle of this process and a handle value, which
    // the kernel checks (ERROR_INVALID_HANDLE, or a handle that is not a
    // job, fail); `inside` receives the answer.
    if unsafe { IsProcessInJob(GetCurrentProcess(), job, &mut inside) } == 0 {
        return Err(last_error("IsProcessInJob (terra run's job)"));
    }
    Ok(inside != 0)
}

/// True when this process is in some job (the self-check worker's own
/// check; it then compares the limits of that job).
pub fn current_in_any() -> Result<bool, Error> {
    let mut inside = 0;
    // SAFETY: the pseudo handle of this process and no job handle (any
    // job) are valid arguments; `inside` receives the answer.
    if unsafe { IsProcessInJob(GetCurrentProcess(), std::ptr::null_mut(), &mut inside) } == 0 {
        return Err(last_error("IsProcessInJob"));
    }
    Ok(inside != 0)
}

/// The limits of the job this process is in (the innermost one).
pub fn current_limits() -> Result<JobLimits, Error> {
    // SAFETY: all-zero is a valid value of the structure the call fills.
    let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: a null job handle names this process's job; `info` is the
    // structure of the class with its exact size.
    let ok = unsafe {
        QueryInformationJobObject(
            std::ptr::null_mut(),
            JobObjectExtendedLimitInformation,
            (&mut info as *mut JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            std::ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(last_error("QueryInformationJobObject (limits)"));
    }
    let mut ui = JOBOBJECT_BASIC_UI_RESTRICTIONS {
        UIRestrictionsClass: 0,
    };
    // SAFETY: as above, for the UI restrictions class.
    let ok = unsafe {
        QueryInformationJobObject(
            std::ptr::null_mut(),
            JobObjectBasicUIRestrictions,
            (&mut ui as *mut JOBOBJECT_BASIC_UI_RESTRICTIONS).cast(),
            std::mem::size_of::<JOBOBJECT_BASIC_UI_RESTRICTIONS>() as u32,
            std::ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(last_error("QueryInformationJobObject (UI restrictions)"));
    }
    Ok(JobLimits {
        limit_flags: info.BasicLimitInformation.LimitFlags,
        active_processes: info.BasicLimitInformation.ActiveProcessLimit,
        ui_restrictions: ui.UIRestrictionsClass,
    })
}

// Windows only; not run where this is written (Linux).
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appcontainer_a_worker_job_holds_nothing_until_assigned() {
        let job = Job::new(&terra_appcontainer::job::ROLE_JOB).unwrap();
        let me = std::process::Command::new("cmd.exe")
            .args(["/c", "exit", "0"])
            .spawn()
            .unwrap();
        assert!(!job.contains(&me).unwrap());
        let _ = { me }.wait();
    }
}
