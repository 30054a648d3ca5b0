//! The initramfs: an uncompressed cpio archive in the "newc" format, which
//! the kernel unpacks into its rootfs before it runs `rdinit`.
//!
//! Each entry is a 110-byte ASCII header (magic `070701` and thirteen
//! 8-digit hexadecimal fields), the NUL-terminated name padded to a multiple
//! of 4, then the data padded to a multiple of 4; the archive ends with the
//! entry `TRAILER!!!`.

/// An archive being written in memory.
#[derive(Debug, Default)]
pub struct Writer {
    out: Vec<u8>,
    ino: u32,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    fn entry(&mut self, name: &str, mode: u32, nlink: u32, data: &[u8]) {
        self.ino += 1;
        let name = name.trim_start_matches('/');
        let fields = [
            self.ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime: fixed, so the archive is reproducible
            data.len() as u32,
            0,
            0,
            0,
            0,
            name.len() as u32 + 1,
            0, // check
        ];
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    /// A directory (its parents must have been added first).
    pub fn dir(&mut self, path: &str, perm: u32) {
        self.entry(path, S_IFDIR | (perm & 0o7777), 2, &[]);
    }

    /// A regular file.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) {
        self.entry(path, S_IFREG | (perm & 0o7777), 1, data);
    }

    /// Adds the directories of `path` not yet in `made`, outermost first.
    pub fn parents(&mut self, path: &str, made: &mut std::collections::BTreeSet<String>) {
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let mut cur = String::new();
        for p in &parts[..parts.len().saturating_sub(1)] {
            cur.push('/');
            cur.push_str(p);
            if made.insert(cur.clone()) {
                self.dir(&cur, 0o755);
            }
        }
    }

    /// The archive with its trailer.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, 1, &[]);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader of what `Writer` makes, for the test only.
    fn read(mut b: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut off = 0usize;
        loop {
            assert_eq!(&b[..6], b"070701");
            let field = |i: usize| {
                u32::from_str_radix(std::str::from_utf8(&b[6 + 8 * i..14 + 8 * i]).unwrap(), 16)
                    .unwrap()
            };
            let (mode, size, namesize) = (field(1), field(6) as usize, field(11) as usize);
            let name = std::str::from_utf8(&b[110..110 + namesize - 1])
                .unwrap()
                .to_string();
            assert_eq!(b[110 + namesize - 1], 0);
            let data_at = (110 + namesize).next_multiple_of(4);
            let data = b[data_at..data_at + size].to_vec();
            let next = (data_at + size).next_multiple_of(4);
            off += next;
            assert_eq!(off % 4, 0);
            b = &b[next..];
            if name == "TRAILER!!!" {
                assert!(b.is_empty());
                return out;
            }
            out.push((name, mode, data));
        }
    }

    #[test]
    fn writes_newc_entries_with_padding_and_a_trailer() {
        let mut w = Writer::new();
        let mut made = Default::default();
        w.parents("/lib/modules/a.ko", &mut made);
        w.file("/lib/modules/a.ko", 0o644, b"abcde");
        w.file("/terra", 0o755, b"");
        w.parents("/lib/x", &mut made);
        let got = read(&w.finish());
        let names: Vec<_> = got.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["lib", "lib/modules", "lib/modules/a.ko", "terra"]);
        assert_eq!(got[2].1, S_IFREG | 0o644);
        assert_eq!(got[2].2, b"abcde");
        assert_eq!(got[0].1, S_IFDIR | 0o755);
        assert_eq!(got[3].1, S_IFREG | 0o755);
    }

    #[test]
    fn the_same_input_gives_the_same_bytes() {
        let make = || {
            let mut w = Writer::new();
            w.file("/x", 0o600, b"1");
            w.finish()
        };
        assert_eq!(make(), make());
    }
}
