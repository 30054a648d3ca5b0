//! The guest's kernel: which one (`--kernel PATH`, a profile's setting, or
//! the newest `/boot/vmlinuz-*` whose modules are installed), its version
//! (from the bzImage header), and its uncompressed vmlinux, taken out of
//! the bzImage so that QEMU boots it directly through its PVH entry note
//! (under TCG this saves the seconds the kernel would spend decompressing
//! itself).

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::elf;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error(
        "{path}: not a bzImage (no \"HdrS\" setup header, or a boot protocol older than 2.08)"
    )]
    NotBzImage { path: String },
    #[error("{path}: {why}")]
    Payload { path: String, why: String },
    #[error("no usable guest kernel: {0}")]
    NoneUsable(String),
}

/// The boot protocol's fields terra reads (Documentation/arch/x86/boot.rst).
const SETUP_SECTS: usize = 0x1f1;
const HEADER_MAGIC: usize = 0x202;
const VERSION: usize = 0x206;
const KERNEL_VERSION: usize = 0x20e;
const PAYLOAD_OFFSET: usize = 0x248;
const PAYLOAD_LENGTH: usize = 0x24c;

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    b.get(o..o + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// The kernel release named in a bzImage's header (`6.1.0-57-amd64`).
pub fn bzimage_version(b: &[u8]) -> Option<String> {
    if b.get(HEADER_MAGIC..HEADER_MAGIC + 4) != Some(b"HdrS") {
        return None;
    }
    let ptr = u16_at(b, KERNEL_VERSION)? as usize;
    let s = b.get(ptr + 0x200..)?;
    let s = s.split(|c| *c == 0).next()?;
    let text = std::str::from_utf8(s).ok()?;
    text.split_whitespace().next().map(str::to_string)
}

/// The compressed payload of a bzImage and its format.
fn payload<'a>(b: &'a [u8], path: &str) -> Result<&'a [u8], KernelError> {
    let not = || KernelError::NotBzImage { path: path.into() };
    if b.get(HEADER_MAGIC..HEADER_MAGIC + 4) != Some(b"HdrS")
        || u16_at(b, VERSION).ok_or_else(not)? < 0x208
    {
        return Err(not());
    }
    let mut sects = *b.get(SETUP_SECTS).ok_or_else(not)? as usize;
    if sects == 0 {
        sects = 4;
    }
    let off = u32_at(b, PAYLOAD_OFFSET).ok_or_else(not)? as usize;
    let len = u32_at(b, PAYLOAD_LENGTH).ok_or_else(not)? as usize;
    let start = (sects + 1) * 512 + off;
    b.get(start..start + len)
        .ok_or_else(|| KernelError::Payload {
            path: path.into(),
            why: "the payload lies outside the file".into(),
        })
}

/// The largest vmlinux terra accepts (the decompressor stops there).
const MAX_VMLINUX: u64 = 512 << 20;

/// The uncompressed vmlinux inside a bzImage, checked to be an ELF file
/// with the PVH entry note. XZ and zstd payloads (Debian, Ubuntu); others
/// are refused with their name.
pub fn extract_vmlinux(b: &[u8], path: &str) -> Result<Vec<u8>, KernelError> {
    let p = payload(b, path)?;
    let err = |why: String| KernelError::Payload {
        path: path.into(),
        why,
    };
    // The x86 build appends the uncompressed size (le32) to XZ and zstd payloads.
    let sized = |p: &[u8]| -> Option<(Vec<u8>, usize)> {
        let n = p.len().checked_sub(4)?;
        let size = u32::from_le_bytes([p[n], p[n + 1], p[n + 2], p[n + 3]]) as usize;
        Some((p[..n].to_vec(), size))
    };
    let (out, expected) = if p.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        let (stream, size) = sized(p).ok_or_else(|| err("a truncated XZ payload".into()))?;
        let mut out = Vec::with_capacity(size.min(MAX_VMLINUX as usize));
        lzma_rust2::XzReader::new(&stream[..], false)
            .take(MAX_VMLINUX + 1)
            .read_to_end(&mut out)
            .map_err(|e| err(format!("XZ payload: {e}")))?;
        (out, Some(size))
    } else if p.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let (stream, size) = sized(p).ok_or_else(|| err("a truncated zstd payload".into()))?;
        let mut out = Vec::with_capacity(size.min(MAX_VMLINUX as usize));
        let mut dec = ruzstd::decoding::StreamingDecoder::new(&stream[..])
            .map_err(|e| err(format!("zstd payload: {e}")))?;
        (&mut dec)
            .take(MAX_VMLINUX + 1)
            .read_to_end(&mut out)
            .map_err(|e| err(format!("zstd payload: {e}")))?;
        (out, Some(size))
    } else {
        let magic: Vec<String> = p.iter().take(4).map(|b| format!("{b:02x}")).collect();
        return Err(err(format!(
            "a payload compressed with something other than XZ or zstd (magic {}); pass a kernel built with \
             CONFIG_KERNEL_XZ or CONFIG_KERNEL_ZSTD",
            magic.join(" ")
        )));
    };
    if out.len() as u64 > MAX_VMLINUX {
        return Err(err(format!(
            "the vmlinux is larger than {MAX_VMLINUX} bytes"
        )));
    }
    if let Some(n) = expected {
        if n != out.len() {
            return Err(err(format!(
                "the payload decompressed to {} bytes, its trailer says {n}",
                out.len()
            )));
        }
    }
    match elf::has_pvh_note(&out) {
        Ok(true) => Ok(out),
        Ok(false) => Err(err(
            "its vmlinux has no Xen PVH entry note (CONFIG_PVH): QEMU cannot boot it directly"
                .into(),
        )),
        Err(e) => Err(err(format!("its payload is not a vmlinux: {e}"))),
    }
}

/// A kernel release, compared part by part (numbers as numbers).
pub fn version_key(v: &str) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut num = String::new();
    let mut text = String::new();
    for c in v.chars() {
        if c.is_ascii_digit() {
            if !text.is_empty() {
                out.push((0, std::mem::take(&mut text)));
            }
            num.push(c);
        } else {
            if !num.is_empty() {
                out.push((num.parse().unwrap_or(u64::MAX), String::new()));
                num.clear();
            }
            text.push(c);
        }
    }
    if !num.is_empty() {
        out.push((num.parse().unwrap_or(u64::MAX), String::new()));
    }
    if !text.is_empty() {
        out.push((0, text));
    }
    out
}

/// A kernel terra can boot: its image, its release and its modules directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub image: PathBuf,
    pub release: String,
    pub modules: PathBuf,
}

/// The newest `vmlinuz-RELEASE` in `boot_names` (file names in /boot) whose
/// modules directory `has_modules(release)` says is installed; or why none.
pub fn newest(
    boot: &Path,
    boot_names: &[String],
    modules_root: &Path,
    has_modules: &dyn Fn(&Path) -> bool,
) -> Result<Candidate, KernelError> {
    let mut found: Vec<Candidate> = Vec::new();
    let mut without = Vec::new();
    for n in boot_names {
        let Some(release) = n.strip_prefix("vmlinuz-") else {
            continue;
        };
        if release.is_empty() || release.contains('/') || release.ends_with(".old") {
            continue;
        }
        let modules = modules_root.join(release);
        if has_modules(&modules) {
            found.push(Candidate {
                image: boot.join(n),
                release: release.to_string(),
                modules,
            });
        } else {
            without.push(release.to_string());
        }
    }
    found.sort_by_key(|c| version_key(&c.release));
    found.pop().ok_or_else(|| {
        KernelError::NoneUsable(if without.is_empty() {
            format!(
                "no {}/vmlinuz-* on this host; install one (Debian: apt-get install linux-image-amd64) or pass \
                 --kernel PATH",
                boot.display()
            )
        } else {
            format!(
                "{}/vmlinuz-{} has no modules.dep under {} (run `depmod {}`, or install the kernel's modules package)",
                boot.display(),
                without.join(", vmlinuz-"),
                modules_root.display(),
                without[0]
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bz(payload: &[u8], version: &str) -> Vec<u8> {
        let mut b = vec![0u8; 0x1000];
        b[SETUP_SECTS] = 3;
        b[HEADER_MAGIC..HEADER_MAGIC + 4].copy_from_slice(b"HdrS");
        b[VERSION..VERSION + 2].copy_from_slice(&0x20fu16.to_le_bytes());
        b[KERNEL_VERSION..KERNEL_VERSION + 2].copy_from_slice(&0x300u16.to_le_bytes());
        let v = format!("{version} (builder@host) #1 SMP\0");
        b[0x500..0x500 + v.len()].copy_from_slice(v.as_bytes());
        b[PAYLOAD_OFFSET..PAYLOAD_OFFSET + 4].copy_from_slice(&16u32.to_le_bytes());
        b[PAYLOAD_LENGTH..PAYLOAD_LENGTH + 4]
            .copy_from_slice(&(payload.len() as u32).to_le_bytes());
        b.truncate(4 * 512 + 16);
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn the_header_names_the_release_and_unknown_payloads_are_refused() {
        let b = bz(b"\x1f\x8b\x08\x00rest", "6.1.0-57-amd64");
        assert_eq!(bzimage_version(&b).as_deref(), Some("6.1.0-57-amd64"));
        let e = extract_vmlinux(&b, "k").unwrap_err().to_string();
        assert!(
            e.contains("1f 8b 08 00") && e.contains("CONFIG_KERNEL_XZ"),
            "{e}"
        );
        assert!(matches!(
            extract_vmlinux(b"MZ not a kernel", "k"),
            Err(KernelError::NotBzImage { .. })
        ));
        assert!(bzimage_version(b"short").is_none());
        // A payload length past the end.
        let mut b = bz(b"xx", "1");
        b[PAYLOAD_LENGTH..PAYLOAD_LENGTH + 4].copy_from_slice(&1000u32.to_le_bytes());
        assert!(extract_vmlinux(&b, "k").is_err());
    }

    #[test]
    fn a_corrupt_xz_payload_is_refused() {
        let mut p = vec![0xfd, b'7', b'z', b'X', b'Z', 0, 1, 2, 3, 4, 5];
        p.extend(100u32.to_le_bytes());
        let e = extract_vmlinux(&bz(&p, "1"), "k").unwrap_err().to_string();
        assert!(e.contains("XZ payload"), "{e}");
    }

    #[test]
    fn the_newest_release_with_modules_wins() {
        let names: Vec<String> = [
            "vmlinuz-6.1.0-9-amd64",
            "vmlinuz-6.1.0-57-amd64",
            "vmlinuz-6.10.0-1-amd64",
            "config-6.10.0-1-amd64",
            "vmlinuz-6.12.0-1-amd64",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let has = |p: &Path| !p.ends_with("6.12.0-1-amd64");
        let c = newest(Path::new("/boot"), &names, Path::new("/lib/modules"), &has).unwrap();
        assert_eq!(c.release, "6.10.0-1-amd64");
        assert_eq!(c.image, Path::new("/boot/vmlinuz-6.10.0-1-amd64"));
        let none = newest(
            Path::new("/boot"),
            &names[..1],
            Path::new("/lib/modules"),
            &|_| false,
        )
        .unwrap_err()
        .to_string();
        assert!(none.contains("depmod 6.1.0-9-amd64"), "{none}");
        let empty = newest(Path::new("/boot"), &[], Path::new("/lib/modules"), &|_| {
            true
        })
        .unwrap_err()
        .to_string();
        assert!(
            empty.contains("apt-get install linux-image-amd64"),
            "{empty}"
        );
        assert!(version_key("6.1.0-57") > version_key("6.1.0-9"));
    }
}
