//! Setting and removing the DACL entries of a launch, one path at a time.
//!
//! Each entry's path is opened without following reparse points (and
//! refused if it is one now), its DACL read, the launch's ACEs for the
//! package SID merged in with SetEntriesInAclW (deny ACEs before allow
//! ACEs, explicit before inherited), and written back with SetSecurityInfo,
//! which propagates inheritable ACEs to every existing child that inherits
//! ("Automatic Propagation of Inheritable ACEs"; OpenAI Codex grants its
//! writable roots the same way, codex-rs/windows-sandbox-rs/src/acl.rs).
//! So a tree costs one call, whatever its size; what the workload creates
//! inherits the ACEs too. Objects with protected DACLs are given their
//! own entries by the plan (`terra_appcontainer::objects`).
//!
//! Each path is recorded in the ledger before its DACL changes. Removal
//! deletes every ACE naming the package SID from the path and writes the
//! DACL back the same way, so Windows removes the copies it propagated.

use super::error::Error;
use std::os::windows::io::{AsRawHandle, OwnedHandle};

use terra_appcontainer::ledger::Record;
use terra_appcontainer::{DaclEntry, Origin, PathStyle};
use windows_sys::Win32::Foundation::{LocalFree, ERROR_ACCESS_DENIED, HANDLE};
use windows_sys::Win32::Security::Authorization::{
    ConvertStringSidToSidW, GetSecurityInfo, SetEntriesInAclW, SetSecurityInfo, DENY_ACCESS,
    EXPLICIT_ACCESS_W, GRANT_ACCESS, NO_MULTIPLE_TRUSTEE, SE_FILE_OBJECT, TRUSTEE_IS_SID,
    TRUSTEE_IS_UNKNOWN, TRUSTEE_W,
};
use windows_sys::Win32::Security::{
    DeleteAce, GetAce, GetSecurityDescriptorControl, ACE_HEADER, ACL, DACL_SECURITY_INFORMATION,
    PROTECTED_DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR, SE_DACL_PROTECTED,
    UNPROTECTED_DACL_SECURITY_INFORMATION,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, GetFileInformationByHandle, BY_HANDLE_FILE_INFORMATION, FILE_ATTRIBUTE_DIRECTORY,
    FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT,
    FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE, OPEN_EXISTING, READ_CONTROL, WRITE_DAC,
};
use windows_sys::Win32::System::SystemServices::{ACCESS_ALLOWED_ACE_TYPE, ACCESS_DENIED_ACE_TYPE};

use super::ledger;
use super::util::{last_error, owned, verbatim, win32_error, OwnedSid};

/// The paths changed so far; removes the package SID's ACEs when dropped.
pub struct Applied {
    sid: OwnedSid,
    changed: Vec<String>,
}

/// A pointer the call allocated with LocalAlloc, freed on drop.
struct LocalBox(*mut core::ffi::c_void);

impl Drop for LocalBox {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: allocated by the Win32 call that returned it (with
            // LocalAlloc), freed exactly once, here.
            unsafe { LocalFree(self.0) };
        }
    }
}

/// Why an open failed, and whether it was ERROR_ACCESS_DENIED.
struct OpenError(Error, bool);

/// Opens `path` for reading and writing its DACL, never through a reparse
/// point; returns the handle, whether it is a directory and its identity.
fn open(path: &str) -> Result<(OwnedHandle, bool, (u32, u64)), Error> {
    open_or_denied(path).map_err(|e| e.0)
}

fn open_or_denied(path: &str) -> Result<(OwnedHandle, bool, (u32, u64)), OpenError> {
    let w = verbatim(path);
    // SAFETY: `w` is NUL-terminated and outlives the call; no security
    // attributes, no template.
    let h = unsafe {
        CreateFileW(
            w.as_ptr(),
            READ_CONTROL | WRITE_DAC,
            FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
            std::ptr::null(),
            OPEN_EXISTING,
            FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT,
            std::ptr::null_mut(),
        )
    };
    let denied = std::io::Error::last_os_error().raw_os_error() == Some(ERROR_ACCESS_DENIED as i32);
    let h =
        owned(h, &format!("open {path} to change its DACL")).map_err(|e| OpenError(e, denied))?;
    // SAFETY: all-zero is a valid value of the structure the call fills.
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: the handle is valid; `info` is writable.
    if unsafe { GetFileInformationByHandle(h.as_raw_handle(), &mut info) } == 0 {
        return Err(OpenError(
            last_error(&format!("GetFileInformationByHandle {path}")),
            false,
        ));
    }
    if info.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
        return Err(OpenError(
            Error::Refused(format!(
                "{path} is a reparse point now (it was not when resolved): refusing to grant through it"
            )),
            false,
        ));
    }
    let dir = info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY != 0;
    let index = (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow);
    Ok((h, dir, (info.dwVolumeSerialNumber, index)))
}

/// The DACL of an open object and its control bits; the ACL pointer lives
/// inside the returned LocalBox.
fn read_dacl(h: HANDLE, path: &str) -> Result<(LocalBox, *mut ACL, u16), Error> {
    let mut dacl: *mut ACL = std::ptr::null_mut();
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: the handle is valid; only the DACL is asked; `dacl` and `sd`
    // receive pointers into one LocalAlloc'd descriptor, freed by LocalBox.
    let rc = unsafe {
        GetSecurityInfo(
            h,
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut dacl,
            std::ptr::null_mut(),
            &mut sd,
        )
    };
    if rc != 0 {
        return Err(win32_error(&format!("GetSecurityInfo {path}"), rc));
    }
    let sd = LocalBox(sd);
    if dacl.is_null() {
        return Err(format!(
            "{path} has no DACL (everyone has full access): refusing to give it one"
        )
        .into());
    }
    let mut control = 0u16;
    let mut revision = 0u32;
    // SAFETY: `sd.0` is the valid descriptor the call returned.
    if unsafe { GetSecurityDescriptorControl(sd.0, &mut control, &mut revision) } == 0 {
        return Err(last_error(&format!("GetSecurityDescriptorControl {path}")));
    }
    Ok((sd, dacl, control))
}

/// Writes `acl` as the DACL of `h`, keeping whether it is protected;
/// Windows propagates its inheritable ACEs to the children that inherit.
fn write_dacl(h: HANDLE, acl: *const ACL, control: u16, path: &str) -> Result<(), Error> {
    let protection = if control & SE_DACL_PROTECTED != 0 {
        PROTECTED_DACL_SECURITY_INFORMATION
    } else {
        UNPROTECTED_DACL_SECURITY_INFORMATION
    };
    // SAFETY: `h` is valid with READ_CONTROL | WRITE_DAC; `acl` is a valid
    // ACL that outlives the call; no owner, group or SACL.
    let rc = unsafe {
        SetSecurityInfo(
            h,
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION | protection,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            acl,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(win32_error(&format!("SetSecurityInfo {path}"), rc));
    }
    Ok(())
}

fn trustee(sid: &OwnedSid) -> TRUSTEE_W {
    TRUSTEE_W {
        pMultipleTrustee: std::ptr::null_mut(),
        MultipleTrusteeOperation: NO_MULTIPLE_TRUSTEE,
        TrusteeForm: TRUSTEE_IS_SID,
        TrusteeType: TRUSTEE_IS_UNKNOWN,
        ptstrName: sid.as_psid().cast(),
    }
}

/// Sets the ACEs of `entries`, one path at a time in entry order (a
/// path named by several entries gets all their ACEs in one write), each
/// recorded in `ledger` first. On failure what was set is removed again
/// (by dropping the result) and the failure returned.
pub fn apply(
    entries: &[DaclEntry],
    sid: &OwnedSid,
    sid_text: &str,
    ledger: &mut ledger::File,
) -> Result<Applied, Error> {
    // SAFETY: `sid` is a valid SID by construction.
    let copy = unsafe { OwnedSid::copy_from(sid.as_psid())? };
    let mut applied = Applied {
        sid: copy,
        changed: Vec::new(),
    };
    let style = PathStyle::Windows;
    let mut paths: Vec<&str> = Vec::new();
    for e in entries {
        if !paths.iter().any(|p| style.key(p) == style.key(&e.path)) {
            paths.push(&e.path);
        }
    }
    for path in paths {
        let here: Vec<&DaclEntry> = entries
            .iter()
            .filter(|e| style.key(&e.path) == style.key(path))
            .collect();
        // terra's own executable, granted only so the self-check worker can
        // start: installed where this user may not change its DACL (Program
        // Files), it is left as it is; if the worker then cannot run it, the
        // self-check fails and the launch is refused.
        let optional = here.iter().all(|e| e.origin == Origin::Launcher);
        let (h, dir, _) = match open_or_denied(path) {
            Ok(x) => x,
            Err(OpenError(e, true)) if optional => {
                tracing::debug!("not granting terra's executable: {e}");
                continue;
            }
            Err(OpenError(e, _)) => return Err(e),
        };
        let (_sd, old, control) = read_dacl(h.as_raw_handle(), path)?;
        let mut list = Vec::new();
        for e in &here {
            let inherit = if dir { e.inheritance } else { 0 };
            for (mode, mask) in [(DENY_ACCESS, e.deny), (GRANT_ACCESS, e.allow)] {
                if mask != 0 {
                    list.push(EXPLICIT_ACCESS_W {
                        grfAccessPermissions: mask,
                        grfAccessMode: mode,
                        grfInheritance: inherit,
                        Trustee: trustee(&applied.sid),
                    });
                }
            }
        }
        let mut new: *mut ACL = std::ptr::null_mut();
        // SAFETY: `list` and `old` are valid for the call; `new` receives a
        // LocalAlloc'd ACL, owned by `new_box`.
        let rc = unsafe { SetEntriesInAclW(list.len() as u32, list.as_ptr(), old, &mut new) };
        if rc != 0 {
            return Err(win32_error(&format!("SetEntriesInAclW {path}"), rc));
        }
        let _new_box = LocalBox(new.cast());
        ledger.record(Record::Ace {
            sid: sid_text.to_string(),
            path: path.to_string(),
        })?;
        applied.changed.push(path.to_string());
        write_dacl(h.as_raw_handle(), new, control, path)?;
    }
    Ok(applied)
}

/// Removes every ACE naming the SID written `sid_text` (`S-1-15-2-...`)
/// from `path`: the ledger sweep's undo.
pub fn remove_sid_string(path: &str, sid_text: &str) -> Result<(), Error> {
    let w = super::util::wide(sid_text);
    let mut sid: windows_sys::Win32::Security::PSID = std::ptr::null_mut();
    // SAFETY: `w` is NUL-terminated; `sid` receives a LocalAlloc'd SID,
    // freed by `_owned` below.
    if unsafe { ConvertStringSidToSidW(w.as_ptr(), &mut sid) } == 0 {
        return Err(last_error(&format!("ConvertStringSidToSidW {sid_text}")));
    }
    let _owned = LocalBox(sid);
    // SAFETY: `sid` is the valid SID the call returned.
    let sid = unsafe { OwnedSid::copy_from(sid)? };
    remove_one(path, &sid)
}

impl Applied {
    /// Removes every ACE naming the package SID from the objects changed,
    /// in reverse order; returns what could not be cleaned.
    pub fn remove(mut self) -> Vec<String> {
        self.clean()
    }

    fn clean(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        while let Some(path) = self.changed.pop() {
            if let Err(e) = remove_one(&path, &self.sid) {
                problems.push(e.to_string());
            }
        }
        problems
    }
}

impl Drop for Applied {
    fn drop(&mut self) {
        for p in self.clean() {
            tracing::warn!("cleaning the launch's ACEs: {p}");
        }
    }
}

fn remove_one(path: &str, sid: &OwnedSid) -> Result<(), Error> {
    let (h, _, _) = match open(path) {
        Ok(x) => x,
        // Removed by the workload: nothing of ours is left there.
        Err(_) if std::fs::symlink_metadata(path).is_err() => return Ok(()),
        Err(e) => return Err(e),
    };
    let (_sd, old, control) = read_dacl(h.as_raw_handle(), path)?;
    // SAFETY: `old` is a valid ACL; its header says how many bytes it has.
    let size = usize::from(unsafe { (*old).AclSize });
    let mut copy = vec![0u32; size.div_ceil(4)];
    // SAFETY: `copy` has at least `size` writable bytes and does not
    // overlap the descriptor `old` points into.
    unsafe {
        std::ptr::copy_nonoverlapping(old.cast::<u8>(), copy.as_mut_ptr().cast::<u8>(), size)
    };
    let acl: *mut ACL = copy.as_mut_ptr().cast();
    // SAFETY: `acl` is our copy of a valid ACL.
    let count = u32::from(unsafe { (*acl).AceCount });
    for i in (0..count).rev() {
        let mut ace: *mut core::ffi::c_void = std::ptr::null_mut();
        // SAFETY: `i` is below the ACE count of the valid ACL `acl`.
        if unsafe { GetAce(acl, i, &mut ace) } == 0 {
            return Err(last_error(&format!("GetAce {path}")));
        }
        // SAFETY: GetAce returned a pointer to an ACE inside `copy`, which
        // starts with an ACE_HEADER.
        let kind = u32::from(unsafe { (*ace.cast::<ACE_HEADER>()).AceType });
        if kind != ACCESS_ALLOWED_ACE_TYPE && kind != ACCESS_DENIED_ACE_TYPE {
            continue;
        }
        // An allowed or denied ACE is the header (4 bytes), the mask (4
        // bytes), then the SID.
        // SAFETY: for these two ACE types the SID starts 8 bytes in and
        // lies within the ACE, which lies within `copy`.
        let ace_sid = unsafe { ace.cast::<u8>().add(8) };
        // SAFETY: `ace_sid` points at the ACE's valid SID.
        if unsafe { sid.equals(ace_sid.cast()) } {
            // SAFETY: `i` is a valid index of the ACL we own.
            if unsafe { DeleteAce(acl, i) } == 0 {
                return Err(last_error(&format!("DeleteAce {path}")));
            }
        }
    }
    write_dacl(h.as_raw_handle(), acl, control, path)
}

// Windows only, and not run where this is written (Linux); they need a
// Windows host that may create AppContainer profiles (any desktop user).
#[cfg(test)]
mod tests {
    use super::*;
    use terra_appcontainer::{Grant, GrantKind, Scope};

    /// ACEs of `path`'s DACL that name `sid`.
    fn aces_naming(path: &str, sid: &OwnedSid) -> usize {
        let (h, _, _) = open(path).unwrap();
        let (_sd, dacl, _) = read_dacl(h.as_raw_handle(), path).unwrap();
        // SAFETY: `dacl` is a valid ACL inside `_sd`.
        let count = u32::from(unsafe { (*dacl).AceCount });
        (0..count)
            .filter(|&i| {
                let mut ace: *mut core::ffi::c_void = std::ptr::null_mut();
                // SAFETY: `i` is below the ACE count; the ACE is an allowed
                // or denied one when its type says so, with the SID 8 bytes in.
                unsafe {
                    GetAce(dacl, i, &mut ace);
                    let kind = u32::from((*ace.cast::<ACE_HEADER>()).AceType);
                    (kind == ACCESS_ALLOWED_ACE_TYPE || kind == ACCESS_DENIED_ACE_TYPE)
                        && sid.equals(ace.cast::<u8>().add(8).cast())
                }
            })
            .count()
    }

    #[test]
    fn appcontainer_aces_are_set_for_the_package_and_removed_again() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let root = terra_appcontainer::path::windows_path(root.to_str().unwrap()).unwrap();
        std::fs::create_dir(format!(r"{root}\sub")).unwrap();
        std::fs::write(format!(r"{root}\sub\f.txt"), b"x").unwrap();
        let grants = [
            Grant {
                kind: GrantKind::Write,
                scope: Scope::Tree,
                path: root.clone(),
            },
            Grant {
                kind: GrantKind::Deny,
                scope: Scope::Tree,
                path: format!(r"{root}\sub"),
            },
        ];
        let entries = terra_appcontainer::dacl::dacl_entries(&grants, PathStyle::Windows);
        let profile = super::super::profile::Profile::create(
            super::super::profile::Profile::fresh_name().unwrap(),
        )
        .unwrap();
        let mut book = ledger::File::create().unwrap();
        let sid_text = profile.sid_string().unwrap();
        let applied = apply(&entries, profile.sid(), &sid_text, &mut book).unwrap();
        // The root: allow (write) and deny (permissions) and the deny of
        // DELETE that keeps it in place; the file, by propagation: write's
        // two and deny's one, inherited.
        assert!(aces_naming(&root, profile.sid()) >= 2);
        assert!(aces_naming(&format!(r"{root}\sub\f.txt"), profile.sid()) >= 2);
        assert_eq!(book.ledger.records.len(), 2, "one record per path");
        assert!(applied.remove().is_empty());
        book.remove().unwrap();
        for p in [
            root.clone(),
            format!(r"{root}\sub"),
            format!(r"{root}\sub\f.txt"),
        ] {
            assert_eq!(aces_naming(&p, profile.sid()), 0, "{p}");
        }
    }
}
