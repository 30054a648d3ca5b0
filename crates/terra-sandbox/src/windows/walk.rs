//! The scan's view of the filesystem on Windows (`terra_appcontainer::objects`):
//! metadata of the entry itself (never followed), reparse points told
//! apart by their attribute, and whether an object's DACL is protected.

use std::os::windows::fs::MetadataExt;
use std::os::windows::io::AsRawHandle;

use terra_appcontainer::objects::{Kind, Tree};
use windows_sys::Win32::Foundation::LocalFree;
use windows_sys::Win32::Security::Authorization::{GetSecurityInfo, SE_FILE_OBJECT};
use windows_sys::Win32::Security::{
    GetSecurityDescriptorControl, DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR,
    SE_DACL_PROTECTED,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_BACKUP_SEMANTICS,
    FILE_FLAG_OPEN_REPARSE_POINT, FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE,
    OPEN_EXISTING, READ_CONTROL,
};

use super::error::Error;
use super::util::{owned, verbatim};

pub struct HostTree;

fn kind_of(md: &std::fs::Metadata) -> Kind {
    if md.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0 || md.file_type().is_symlink() {
        Kind::ReparsePoint
    } else if md.is_dir() {
        Kind::Directory
    } else {
        Kind::File
    }
}

fn io_err(e: Error) -> std::io::Error {
    match e {
        Error::Os { source, .. } => source,
        other => std::io::Error::other(other.to_string()),
    }
}

impl Tree for HostTree {
    fn kind(&self, path: &str) -> std::io::Result<Kind> {
        std::fs::symlink_metadata(path).map(|md| kind_of(&md))
    }

    fn children(&self, dir: &str) -> std::io::Result<Vec<(String, Kind)>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().into_string().map_err(|n| {
                std::io::Error::other(format!("the entry {n:?} is not valid Unicode"))
            })?;
            let md = std::fs::symlink_metadata(entry.path())?;
            out.push((name, kind_of(&md)));
        }
        Ok(out)
    }

    fn protected(&self, path: &str) -> std::io::Result<bool> {
        let w = verbatim(path);
        // SAFETY: `w` is NUL-terminated and outlives the call; READ_CONTROL
        // only, never through a reparse point.
        let h = unsafe {
            CreateFileW(
                w.as_ptr(),
                READ_CONTROL,
                FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                std::ptr::null(),
                OPEN_EXISTING,
                FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT,
                std::ptr::null_mut(),
            )
        };
        let h = owned(h, &format!("open {path} to read its DACL")).map_err(io_err)?;
        let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
        // SAFETY: the handle is valid; only the descriptor is asked for,
        // LocalAlloc'd by the call and freed below.
        let rc = unsafe {
            GetSecurityInfo(
                h.as_raw_handle(),
                SE_FILE_OBJECT,
                DACL_SECURITY_INFORMATION,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut sd,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc as i32));
        }
        let (mut control, mut revision) = (0u16, 0u32);
        // SAFETY: `sd` is the valid descriptor the call returned.
        let ok = unsafe { GetSecurityDescriptorControl(sd, &mut control, &mut revision) };
        let failed = (ok == 0).then(std::io::Error::last_os_error);
        // SAFETY: allocated by GetSecurityInfo, freed exactly once.
        unsafe { LocalFree(sd) };
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(control & SE_DACL_PROTECTED != 0)
    }
}
