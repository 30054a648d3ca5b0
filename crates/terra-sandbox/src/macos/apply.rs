//! Applying a rendered profile to this process with libsandbox's
//! `sandbox_init_with_parameters` (part of libSystem). The profile text is
//! fixed by the role; every path arrives in the parameter list, given as
//! NUL-terminated `NAME`, `VALUE` pairs ending with a null pointer.

use std::ffi::{c_char, c_int, CStr, CString};

use terra_seatbelt::Profile;

use super::error::LaunchError;

extern "C" {
    fn sandbox_init_with_parameters(
        profile: *const c_char,
        flags: u64,
        parameters: *const *const c_char,
        errorbuf: *mut *mut c_char,
    ) -> c_int;
    fn sandbox_free_error(errorbuf: *mut c_char);
}

pub fn apply(profile: &Profile) -> Result<(), LaunchError> {
    let text = CString::new(profile.text.as_str())
        .map_err(|_| LaunchError::Apply("the profile holds a NUL byte".into()))?;
    let mut owned = Vec::with_capacity(profile.parameters.len() * 2);
    for (name, value) in &profile.parameters {
        for s in [name, value] {
            owned.push(
                CString::new(s.as_str()).map_err(|_| {
                    LaunchError::Apply(format!("parameter {name} holds a NUL byte"))
                })?,
            );
        }
    }
    let mut list: Vec<*const c_char> = owned.iter().map(|s| s.as_ptr()).collect();
    list.push(std::ptr::null());
    let mut error: *mut c_char = std::ptr::null_mut();
    // SAFETY: `text` and every string in `list` are NUL-terminated and live
    // until after the call (`owned`, `text`); `list` ends with a null
    // pointer as the call requires; `error` is a valid place for the call to
    // store an error string, which it allocates.
    let rc = unsafe { sandbox_init_with_parameters(text.as_ptr(), 0, list.as_ptr(), &mut error) };
    if rc == 0 {
        return Ok(());
    }
    let why = if error.is_null() {
        "no reason given".to_string()
    } else {
        // SAFETY: on failure `error` points at a NUL-terminated string the
        // call allocated; it is copied, then released exactly once.
        unsafe {
            let s = CStr::from_ptr(error).to_string_lossy().into_owned();
            sandbox_free_error(error);
            s
        }
    };
    Err(LaunchError::Apply(why))
}
