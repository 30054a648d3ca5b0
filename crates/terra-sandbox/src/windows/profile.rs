//! The AppContainer profile of one launch: a fresh name, created once,
//! its package SID derived and checked, deleted when the launch ends in
//! order. A name whose profile already exists is refused, never reused.

use super::error::Error;
use windows_sys::Win32::Foundation::{LocalFree, ERROR_ALREADY_EXISTS};
use windows_sys::Win32::Security::Authorization::ConvertSidToStringSidW;
use windows_sys::Win32::Security::Isolation::{
    CreateAppContainerProfile, DeleteAppContainerProfile, DeriveAppContainerSidFromAppContainerName,
};
use windows_sys::Win32::Security::{FreeSid, PSID};

use super::util::{last_error, random16, wide, OwnedSid};

/// HRESULT_FROM_WIN32(ERROR_ALREADY_EXISTS).
const HRESULT_ALREADY_EXISTS: i32 = (0x8007_0000u32 | ERROR_ALREADY_EXISTS) as i32;

pub struct Profile {
    name: String,
    sid: OwnedSid,
    /// Deleted already ([`Profile::delete`]): nothing left for Drop.
    deleted: bool,
}

impl Profile {
    /// A fresh profile name (`terra.` and 32 random hex digits): recorded
    /// in the ledger before the profile is made.
    pub fn fresh_name() -> Result<String, Error> {
        Ok(terra_appcontainer::spec::profile_name(&random16()?))
    }

    /// Creates the profile `name` (from [`Profile::fresh_name`]), with no
    /// capability; a name whose profile exists is refused.
    pub fn create(name: String) -> Result<Profile, Error> {
        if !terra_appcontainer::spec::is_profile_name(&name) {
            return Err(format!("{name:?} is not a profile name terra makes").into());
        }
        let wname = wide(&name);
        let description = wide("terra: one launch of terra __sandbox_launcher");
        let mut created: PSID = std::ptr::null_mut();
        // SAFETY: the strings are NUL-terminated and outlive the call; no
        // capability array (null, count 0); `created` receives a SID the
        // call allocates, freed below with FreeSid.
        let hr = unsafe {
            CreateAppContainerProfile(
                wname.as_ptr(),
                wname.as_ptr(),
                description.as_ptr(),
                std::ptr::null(),
                0,
                &mut created,
            )
        };
        if hr == HRESULT_ALREADY_EXISTS {
            return Err(format!(
                "the AppContainer profile {name} already exists; profile names are never reused"
            )
            .into());
        }
        if hr < 0 || created.is_null() {
            return Err(format!("CreateAppContainerProfile {name}: HRESULT 0x{hr:08x}").into());
        }
        // SAFETY: `created` is the valid SID the call returned.
        let copied = unsafe { OwnedSid::copy_from(created) };
        // SAFETY: `created` was allocated by CreateAppContainerProfile and
        // is freed exactly once, here.
        unsafe { FreeSid(created) };
        // From here on Drop deletes the profile.
        let profile = Profile {
            name,
            sid: copied?,
            deleted: false,
        };
        let mut derived: PSID = std::ptr::null_mut();
        // SAFETY: `wname` is NUL-terminated; `derived` receives a SID the
        // call allocates, freed below.
        let hr = unsafe { DeriveAppContainerSidFromAppContainerName(wname.as_ptr(), &mut derived) };
        if hr < 0 || derived.is_null() {
            return Err(format!(
                "DeriveAppContainerSidFromAppContainerName {}: HRESULT 0x{hr:08x}",
                profile.name
            )
            .into());
        }
        // SAFETY: `derived` is the valid SID the call returned.
        let same = unsafe { profile.sid.equals(derived) };
        // SAFETY: allocated by the call above, freed exactly once.
        unsafe { FreeSid(derived) };
        if !same {
            return Err(format!(
                "the package SID of {} differs from the one derived from its name",
                profile.name
            )
            .into());
        }
        Ok(profile)
    }

    /// Deletes the profile now, saying whether that worked.
    pub fn delete(mut self) -> Result<(), Error> {
        self.deleted = true;
        delete(&self.name)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn sid(&self) -> &OwnedSid {
        &self.sid
    }

    /// The package SID as text (`S-1-15-2-...`).
    pub fn sid_string(&self) -> Result<String, Error> {
        let mut text: *mut u16 = std::ptr::null_mut();
        // SAFETY: the SID is valid; `text` receives a string the call
        // allocates with LocalAlloc, freed below.
        if unsafe { ConvertSidToStringSidW(self.sid.as_psid(), &mut text) } == 0 {
            return Err(last_error("ConvertSidToStringSidW"));
        }
        // SAFETY: `text` is a NUL-terminated UTF-16 string from the call.
        let s = unsafe {
            let len = (0..).take_while(|&i| *text.add(i) != 0).count();
            String::from_utf16_lossy(std::slice::from_raw_parts(text, len))
        };
        // SAFETY: allocated by ConvertSidToStringSidW, freed exactly once.
        unsafe { LocalFree(text.cast()) };
        Ok(s)
    }
}

/// Deletes the profile `name` (one terra made); a profile that is gone
/// already is not an error.
pub fn delete(name: &str) -> Result<(), Error> {
    if !terra_appcontainer::spec::is_profile_name(name) {
        return Err(format!("{name:?} is not a profile name terra makes").into());
    }
    let wname = wide(name);
    // SAFETY: `wname` is NUL-terminated and outlives the call.
    let hr = unsafe { DeleteAppContainerProfile(wname.as_ptr()) };
    // HRESULT_FROM_WIN32(ERROR_NOT_FOUND) or (ERROR_FILE_NOT_FOUND): gone.
    if hr < 0 && hr != 0x8007_0490u32 as i32 && hr != 0x8007_0002u32 as i32 {
        return Err(format!("DeleteAppContainerProfile {name}: HRESULT 0x{hr:08x}").into());
    }
    Ok(())
}

impl Drop for Profile {
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        if let Err(e) = delete(&self.name) {
            tracing::warn!("{e}");
        }
    }
}

// Windows only; not run where this is written (Linux).
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appcontainer_profiles_are_fresh_and_their_sid_is_a_package_sid() {
        let a = Profile::create(Profile::fresh_name().unwrap()).unwrap();
        let b = Profile::create(Profile::fresh_name().unwrap()).unwrap();
        assert_ne!(a.name(), b.name());
        assert!(terra_appcontainer::spec::is_profile_name(a.name()));
        let sid = a.sid_string().unwrap();
        assert!(sid.starts_with("S-1-15-2-"), "{sid}");
        assert_ne!(sid, b.sid_string().unwrap());
    }
}
