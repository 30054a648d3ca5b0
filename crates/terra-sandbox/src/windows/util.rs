//! Small helpers around Win32: UTF-16 strings, owned handles, errors,
//! randomness, owned SIDs.

use super::error::Error;
use std::os::windows::io::{FromRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::{HANDLE, INVALID_HANDLE_VALUE};
use windows_sys::Win32::Security::Cryptography::{
    BCryptGenRandom, BCRYPT_USE_SYSTEM_PREFERRED_RNG,
};
use windows_sys::Win32::Security::{CopySid, EqualSid, GetLengthSid, IsValidSid, PSID};

/// `s` as a NUL-terminated UTF-16 string.
pub fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(std::iter::once(0)).collect()
}

/// A canonical `X:\...` path as a verbatim (`\\?\`) NUL-terminated UTF-16
/// string: no length limit, no reinterpretation of the name.
pub fn verbatim(path: &str) -> Vec<u16> {
    wide(&format!(r"\\?\{path}"))
}

/// `what` failed, with the thread's last Win32 error.
pub fn last_error(what: &str) -> Error {
    Error::Os {
        call: what.to_string(),
        source: std::io::Error::last_os_error(),
    }
}

/// A Win32 error code returned by value (not through GetLastError).
pub fn win32_error(what: &str, code: u32) -> Error {
    Error::Os {
        call: what.to_string(),
        source: std::io::Error::from_raw_os_error(code as i32),
    }
}

/// Takes ownership of a handle a call returned; null and
/// INVALID_HANDLE_VALUE are failures of `what`.
pub fn owned(handle: HANDLE, what: &str) -> Result<OwnedHandle, Error> {
    if handle.is_null() || handle == INVALID_HANDLE_VALUE {
        return Err(last_error(what));
    }
    // SAFETY: the handle is valid (checked above), was just returned to
    // this process by `what`, and nothing else owns or closes it.
    Ok(unsafe { OwnedHandle::from_raw_handle(handle) })
}

/// 16 bytes from the system's preferred random number generator.
pub fn random16() -> Result<[u8; 16], Error> {
    let mut buf = [0u8; 16];
    // SAFETY: `buf` is writable for its 16 bytes; no algorithm handle is
    // needed with BCRYPT_USE_SYSTEM_PREFERRED_RNG.
    let status = unsafe {
        BCryptGenRandom(
            std::ptr::null_mut(),
            buf.as_mut_ptr(),
            buf.len() as u32,
            BCRYPT_USE_SYSTEM_PREFERRED_RNG,
        )
    };
    if status != 0 {
        return Err(format!("BCryptGenRandom: NTSTATUS 0x{status:08x}").into());
    }
    Ok(buf)
}

/// A SID copied into memory this process owns (u32-aligned, as SIDs are).
pub struct OwnedSid(Vec<u32>);

impl OwnedSid {
    /// Copies the valid SID at `sid`.
    ///
    /// # Safety
    /// `sid` must point at a valid SID for the duration of the call.
    pub unsafe fn copy_from(sid: PSID) -> Result<OwnedSid, Error> {
        // SAFETY: the caller guarantees `sid` points at a SID; IsValidSid
        // only reads it.
        if unsafe { IsValidSid(sid) } == 0 {
            return Err("not a valid SID".into());
        }
        // SAFETY: `sid` is a valid SID (checked above).
        let len = unsafe { GetLengthSid(sid) };
        let mut buf = vec![0u32; (len as usize).div_ceil(4)];
        // SAFETY: `buf` holds at least `len` writable bytes; `sid` is valid.
        if unsafe { CopySid(len, buf.as_mut_ptr().cast(), sid) } == 0 {
            return Err(last_error("CopySid"));
        }
        Ok(OwnedSid(buf))
    }

    /// The SID for calls that take a PSID (they only read it).
    pub fn as_psid(&self) -> PSID {
        self.0.as_ptr() as PSID
    }

    /// True when `other` is the same SID.
    ///
    /// # Safety
    /// `other` must point at a valid SID for the duration of the call.
    pub unsafe fn equals(&self, other: PSID) -> bool {
        // SAFETY: both are valid SIDs (ours by construction, `other` by
        // the caller's guarantee); EqualSid only reads them.
        unsafe { EqualSid(self.as_psid(), other) != 0 }
    }
}
