//! The object walk's view of the filesystem on Windows, through std::fs:
//! metadata of the entry itself (never followed), reparse points told
//! apart by their attribute.

use std::os::windows::fs::MetadataExt;

use terra_appcontainer::objects::{Kind, Tree};
use windows_sys::Win32::Storage::FileSystem::FILE_ATTRIBUTE_REPARSE_POINT;

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

impl Tree for HostTree {
    fn kind(&self, path: &str) -> Result<Kind, String> {
        std::fs::symlink_metadata(path)
            .map(|md| kind_of(&md))
            .map_err(|e| e.to_string())
    }

    fn children(&self, dir: &str, max: usize) -> Result<Vec<(String, Kind)>, String> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
            let entry = entry.map_err(|e| e.to_string())?;
            let name = entry
                .file_name()
                .into_string()
                .map_err(|n| format!("the entry {n:?} is not valid Unicode"))?;
            let md = std::fs::symlink_metadata(entry.path()).map_err(|e| format!("{name}: {e}"))?;
            out.push((name, kind_of(&md)));
            if out.len() > max {
                break;
            }
        }
        Ok(out)
    }
}
