//! The little of ELF the vm backend reads: a dynamic executable's
//! interpreter and needed libraries (to put terra and what it loads into
//! the initramfs), the end of its loadable contents (debug sections are
//! left out), and the Xen PVH entry note of a vmlinux (which lets QEMU boot
//! it directly). 64-bit little-endian only; every offset is checked.

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ElfError {
    #[error("not a 64-bit little-endian ELF file")]
    NotElf64,
    #[error("ELF structure out of bounds: {0}")]
    Bounds(&'static str),
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const PT_NOTE: u32 = 4;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
/// XEN_ELFNOTE_PHYS32_ENTRY: the PVH entry point (xen/interface/elfnote.h).
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

fn u16_at(b: &[u8], off: usize) -> Result<u16, ElfError> {
    b.get(off..off + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or(ElfError::Bounds("u16"))
}
fn u32_at(b: &[u8], off: usize) -> Result<u32, ElfError> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(ElfError::Bounds("u32"))
}
fn u64_at(b: &[u8], off: usize) -> Result<u64, ElfError> {
    b.get(off..off + 8)
        .map(|s| {
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            u64::from_le_bytes(a)
        })
        .ok_or(ElfError::Bounds("u64"))
}

#[derive(Debug, Clone, Copy)]
struct Phdr {
    kind: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

fn phdrs(b: &[u8]) -> Result<Vec<Phdr>, ElfError> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return Err(ElfError::NotElf64);
    }
    let phoff = u64_at(b, 32)? as usize;
    let phentsize = u16_at(b, 54)? as usize;
    let phnum = u16_at(b, 56)? as usize;
    if phentsize < 56 || phnum > 4096 {
        return Err(ElfError::Bounds("program headers"));
    }
    (0..phnum)
        .map(|i| {
            let o = phoff
                .checked_add(i * phentsize)
                .ok_or(ElfError::Bounds("program header"))?;
            Ok(Phdr {
                kind: u32_at(b, o)?,
                offset: u64_at(b, o + 8)?,
                vaddr: u64_at(b, o + 16)?,
                filesz: u64_at(b, o + 32)?,
            })
        })
        .collect()
}

fn slice(b: &[u8], off: u64, len: u64) -> Result<&[u8], ElfError> {
    let end = off.checked_add(len).ok_or(ElfError::Bounds("segment"))?;
    b.get(off as usize..end as usize)
        .ok_or(ElfError::Bounds("segment"))
}

/// The interpreter (PT_INTERP) of a dynamic executable; None for a static one.
pub fn interpreter(b: &[u8]) -> Result<Option<String>, ElfError> {
    for p in phdrs(b)? {
        if p.kind == PT_INTERP {
            let s = slice(b, p.offset, p.filesz)?;
            let s = s.split(|c| *c == 0).next().unwrap_or_default();
            return Ok(Some(String::from_utf8_lossy(s).into_owned()));
        }
    }
    Ok(None)
}

/// The DT_NEEDED names of a dynamic object, in order.
pub fn needed(b: &[u8]) -> Result<Vec<String>, ElfError> {
    let ph = phdrs(b)?;
    let Some(dynamic) = ph.iter().find(|p| p.kind == PT_DYNAMIC) else {
        return Ok(Vec::new());
    };
    let d = slice(b, dynamic.offset, dynamic.filesz)?;
    let mut strtab = None;
    let mut names = Vec::new();
    for e in d.chunks_exact(16) {
        let tag = u64_at(e, 0)?;
        let val = u64_at(e, 8)?;
        match tag {
            DT_NULL => break,
            DT_NEEDED => names.push(val),
            DT_STRTAB => strtab = Some(val),
            _ => {}
        }
    }
    let Some(strtab) = strtab else {
        return Ok(Vec::new());
    };
    // The string table's address, as a file offset through its PT_LOAD.
    let load = ph
        .iter()
        .find(|p| p.kind == PT_LOAD && p.vaddr <= strtab && strtab < p.vaddr + p.filesz)
        .ok_or(ElfError::Bounds("DT_STRTAB outside every PT_LOAD"))?;
    let base = (strtab - load.vaddr + load.offset) as usize;
    names
        .into_iter()
        .map(|n| {
            let at = base
                .checked_add(n as usize)
                .ok_or(ElfError::Bounds("DT_NEEDED"))?;
            let s = b.get(at..).ok_or(ElfError::Bounds("DT_NEEDED"))?;
            let s = s.split(|c| *c == 0).next().unwrap_or_default();
            Ok(String::from_utf8_lossy(s).into_owned())
        })
        .collect()
}

/// The executable without what lies after its last segment (the debug
/// sections of an unstripped build, the section headers): enough to run.
pub fn loadable(b: &[u8]) -> Result<Vec<u8>, ElfError> {
    let end = phdrs(b)?
        .iter()
        .map(|p| p.offset.saturating_add(p.filesz))
        .max()
        .unwrap_or(0)
        .max(64) as usize;
    let mut out = b.get(..end).ok_or(ElfError::Bounds("segment"))?.to_vec();
    // No section headers: e_shoff = 0, e_shnum = 0, e_shstrndx = 0.
    out[40..48].fill(0);
    out[60..64].fill(0);
    Ok(out)
}

/// Whether a vmlinux has the Xen PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY),
/// which QEMU needs to boot it without a bzImage's setup code.
pub fn has_pvh_note(b: &[u8]) -> Result<bool, ElfError> {
    for p in phdrs(b)? {
        if p.kind != PT_NOTE {
            continue;
        }
        let mut n = slice(b, p.offset, p.filesz)?;
        while n.len() >= 12 {
            let namesz = u32_at(n, 0)? as usize;
            let descsz = u32_at(n, 4)? as usize;
            let kind = u32_at(n, 8)?;
            let name_end = 12 + namesz.next_multiple_of(4);
            let next = name_end + descsz.next_multiple_of(4);
            if next > n.len() {
                break;
            }
            if namesz == 4 && &n[12..16] == b"Xen\0" && kind == XEN_ELFNOTE_PHYS32_ENTRY {
                return Ok(true);
            }
            n = &n[next..];
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 with the given program headers and trailing bytes.
    fn elf(phdrs: &[(u32, u64, u64, u64)], body: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[40..48].copy_from_slice(&999u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&(phdrs.len() as u16).to_le_bytes());
        for (kind, off, vaddr, size) in phdrs {
            let mut p = vec![0u8; 56];
            p[..4].copy_from_slice(&kind.to_le_bytes());
            p[8..16].copy_from_slice(&off.to_le_bytes());
            p[16..24].copy_from_slice(&vaddr.to_le_bytes());
            p[32..40].copy_from_slice(&size.to_le_bytes());
            b.extend(p);
        }
        b.extend_from_slice(body);
        b
    }

    #[test]
    fn reads_interp_and_needed_of_a_hand_made_object() {
        // Layout: header 64, 3 phdrs (168) -> body at 232.
        let body_at = 64 + 3 * 56;
        let interp = b"/lib64/ld.so\0";
        let strtab_at = body_at + interp.len();
        let strtab = b"\0libc.so.6\0libm.so.6\0";
        let dyn_at = strtab_at + strtab.len();
        let mut dynamic = Vec::new();
        for (t, v) in [
            (DT_NEEDED, 1u64),
            (DT_STRTAB, 0x1000 + strtab_at as u64),
            (DT_NEEDED, 11),
            (DT_NULL, 0),
        ] {
            dynamic.extend(t.to_le_bytes());
            dynamic.extend(v.to_le_bytes());
        }
        let mut body = interp.to_vec();
        body.extend_from_slice(strtab);
        body.extend(&dynamic);
        body.extend_from_slice(&[0xee; 100]); // "debug" after the segments
        let total = (dyn_at + dynamic.len()) as u64;
        let b = elf(
            &[
                (PT_INTERP, body_at as u64, 0, interp.len() as u64),
                (PT_LOAD, 0, 0x1000, total),
                (
                    PT_DYNAMIC,
                    dyn_at as u64,
                    0x1000 + dyn_at as u64,
                    dynamic.len() as u64,
                ),
            ],
            &body,
        );
        assert_eq!(interpreter(&b).unwrap().as_deref(), Some("/lib64/ld.so"));
        assert_eq!(needed(&b).unwrap(), ["libc.so.6", "libm.so.6"]);
        let l = loadable(&b).unwrap();
        assert_eq!(l.len() as u64, total);
        assert_eq!(u64_at(&l, 40).unwrap(), 0);
        assert_eq!(interpreter(&l).unwrap().as_deref(), Some("/lib64/ld.so"));
    }

    #[test]
    fn finds_the_pvh_note_and_refuses_garbage() {
        let mut note = Vec::new();
        note.extend(4u32.to_le_bytes());
        note.extend(4u32.to_le_bytes());
        note.extend(XEN_ELFNOTE_PHYS32_ENTRY.to_le_bytes());
        note.extend(b"Xen\0");
        note.extend(0x1000u32.to_le_bytes());
        let at = 64 + 56;
        let b = elf(&[(PT_NOTE, at as u64, 0, note.len() as u64)], &note);
        assert!(has_pvh_note(&b).unwrap());
        let mut other = note.clone();
        other[8] = 6;
        let b = elf(&[(PT_NOTE, at as u64, 0, other.len() as u64)], &other);
        assert!(!has_pvh_note(&b).unwrap());
        assert_eq!(
            interpreter(
                b"not an elf at all, not at all, no......................................."
            ),
            Err(ElfError::NotElf64)
        );
        // A program header pointing past the end.
        let b = elf(&[(PT_INTERP, 10_000, 0, 5)], &[]);
        assert!(interpreter(&b).is_err());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn reads_this_test_binary() {
        let b = std::fs::read("/proc/self/exe").unwrap();
        let l = loadable(&b).unwrap();
        assert!(l.len() <= b.len());
        if let Some(i) = interpreter(&b).unwrap() {
            assert!(i.starts_with('/'), "{i}");
            assert!(needed(&b).unwrap().iter().any(|n| n.starts_with("libc.")));
        }
    }
}
