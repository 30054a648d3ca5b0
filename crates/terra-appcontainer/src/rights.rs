//! File access rights and ACE inheritance flags, with the values winnt.h
//! documents, and the access masks terra grants and denies per rule kind.
//!
//! The native launcher checks at compile time that each constant equals the
//! windows-sys one (`terra-sandbox/src/windows/consts.rs`), so a typo here
//! fails the Windows build (and `make lint-cross` on any host).

/// Read a file's data; list a directory.
pub const FILE_READ_DATA: u32 = 0x0000_0001;
/// Write a file's data; create a file in a directory.
pub const FILE_WRITE_DATA: u32 = 0x0000_0002;
/// Append to a file; create a subdirectory in a directory.
pub const FILE_APPEND_DATA: u32 = 0x0000_0004;
pub const FILE_READ_EA: u32 = 0x0000_0008;
pub const FILE_WRITE_EA: u32 = 0x0000_0010;
/// Execute a file; traverse a directory.
pub const FILE_EXECUTE: u32 = 0x0000_0020;
/// Delete any child of a directory, whatever the child's own DACL says.
pub const FILE_DELETE_CHILD: u32 = 0x0000_0040;
pub const FILE_READ_ATTRIBUTES: u32 = 0x0000_0080;
pub const FILE_WRITE_ATTRIBUTES: u32 = 0x0000_0100;
/// Delete (and rename) the object itself.
pub const DELETE: u32 = 0x0001_0000;
pub const READ_CONTROL: u32 = 0x0002_0000;
/// Change the object's DACL.
pub const WRITE_DAC: u32 = 0x0004_0000;
/// Change the object's owner.
pub const WRITE_OWNER: u32 = 0x0008_0000;
pub const SYNCHRONIZE: u32 = 0x0010_0000;

/// READ_CONTROL | FILE_READ_DATA | FILE_READ_ATTRIBUTES | FILE_READ_EA | SYNCHRONIZE.
pub const FILE_GENERIC_READ: u32 =
    READ_CONTROL | FILE_READ_DATA | FILE_READ_ATTRIBUTES | FILE_READ_EA | SYNCHRONIZE;
/// READ_CONTROL | FILE_WRITE_DATA | FILE_WRITE_ATTRIBUTES | FILE_WRITE_EA | FILE_APPEND_DATA | SYNCHRONIZE.
pub const FILE_GENERIC_WRITE: u32 = READ_CONTROL
    | FILE_WRITE_DATA
    | FILE_WRITE_ATTRIBUTES
    | FILE_WRITE_EA
    | FILE_APPEND_DATA
    | SYNCHRONIZE;
/// READ_CONTROL | FILE_READ_ATTRIBUTES | FILE_EXECUTE | SYNCHRONIZE.
pub const FILE_GENERIC_EXECUTE: u32 =
    READ_CONTROL | FILE_READ_ATTRIBUTES | FILE_EXECUTE | SYNCHRONIZE;
/// Every file right: STANDARD_RIGHTS_REQUIRED | SYNCHRONIZE | 0x1FF.
pub const FILE_ALL_ACCESS: u32 = 0x000F_0000 | SYNCHRONIZE | 0x1FF;

/// ACE flag: files created in the directory inherit the ACE.
pub const OBJECT_INHERIT_ACE: u32 = 0x1;
/// ACE flag: directories created in the directory inherit the ACE.
pub const CONTAINER_INHERIT_ACE: u32 = 0x2;
/// ACE flags: the ACE applies to the object alone.
pub const NO_INHERITANCE: u32 = 0x0;

/// What a read grant allows: read and execute.
pub const ALLOW_READ: u32 = FILE_GENERIC_READ | FILE_GENERIC_EXECUTE;
/// What a write grant allows: read, write, execute and delete the object
/// itself; never FILE_DELETE_CHILD (which would let the workload delete a
/// denied child whatever its own DACL says), WRITE_DAC or WRITE_OWNER.
pub const ALLOW_WRITE: u32 = ALLOW_READ | FILE_GENERIC_WRITE | DELETE;
/// The permission rights, denied on every entry: a DACL terra set cannot be
/// rewritten from inside.
pub const DENY_PERMISSIONS: u32 = WRITE_DAC | WRITE_OWNER;
/// What read-only means: no data, attribute or EA write, no delete of the
/// object or of its children, no permission change.
pub const DENY_WRITE: u32 = FILE_WRITE_DATA
    | FILE_APPEND_DATA
    | FILE_WRITE_EA
    | FILE_WRITE_ATTRIBUTES
    | FILE_DELETE_CHILD
    | DELETE
    | DENY_PERMISSIONS;
/// What deny means: everything.
pub const DENY_ALL: u32 = FILE_ALL_ACCESS;
/// What an ancestor of a denied path inside a writable tree gets: it cannot
/// be deleted or renamed, so the denied object cannot be moved away and a
/// fresh one made in its place.
pub const DENY_DELETE: u32 = DELETE | DENY_PERMISSIONS;

/// Every named right, in bit order: what [`right_names`] spells.
const NAMES: [(u32, &str); 14] = [
    (FILE_READ_DATA, "FILE_READ_DATA"),
    (FILE_WRITE_DATA, "FILE_WRITE_DATA"),
    (FILE_APPEND_DATA, "FILE_APPEND_DATA"),
    (FILE_READ_EA, "FILE_READ_EA"),
    (FILE_WRITE_EA, "FILE_WRITE_EA"),
    (FILE_EXECUTE, "FILE_EXECUTE"),
    (FILE_DELETE_CHILD, "FILE_DELETE_CHILD"),
    (FILE_READ_ATTRIBUTES, "FILE_READ_ATTRIBUTES"),
    (FILE_WRITE_ATTRIBUTES, "FILE_WRITE_ATTRIBUTES"),
    (DELETE, "DELETE"),
    (READ_CONTROL, "READ_CONTROL"),
    (WRITE_DAC, "WRITE_DAC"),
    (WRITE_OWNER, "WRITE_OWNER"),
    (SYNCHRONIZE, "SYNCHRONIZE"),
];

/// The names of the rights in `mask`, in bit order. Every bit of a mask
/// terra builds has a name; an unnamed bit would be spelled in hex.
pub fn right_names(mask: u32) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = mask;
    for (bit, name) in NAMES {
        if mask & bit != 0 {
            out.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        out.push(format!("0x{rest:08x}"));
    }
    out
}

/// The names of ACE inheritance flags (`NO_INHERITANCE` when none).
pub fn inheritance_names(flags: u32) -> Vec<&'static str> {
    let mut out = Vec::new();
    if flags & OBJECT_INHERIT_ACE != 0 {
        out.push("OBJECT_INHERIT_ACE");
    }
    if flags & CONTAINER_INHERIT_ACE != 0 {
        out.push("CONTAINER_INHERIT_ACE");
    }
    if out.is_empty() {
        out.push("NO_INHERITANCE");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appcontainer_rights_have_the_documented_values() {
        assert_eq!(FILE_GENERIC_READ, 0x0012_0089);
        assert_eq!(FILE_GENERIC_WRITE, 0x0012_0116);
        assert_eq!(FILE_GENERIC_EXECUTE, 0x0012_00a0);
        assert_eq!(FILE_ALL_ACCESS, 0x001f_01ff);
        assert_eq!(ALLOW_READ, 0x0012_00a9);
        assert_eq!(ALLOW_WRITE, 0x0013_01bf);
        assert_eq!(DENY_WRITE, 0x000d_0156);
    }

    #[test]
    fn appcontainer_write_never_allows_delete_child_or_permissions() {
        for bad in [FILE_DELETE_CHILD, WRITE_DAC, WRITE_OWNER] {
            assert_eq!(ALLOW_WRITE & bad, 0, "{:?}", right_names(bad));
            assert_eq!(ALLOW_READ & bad, 0);
        }
        // Read-only denies every write, delete and permission right.
        for w in [
            FILE_WRITE_DATA,
            FILE_APPEND_DATA,
            FILE_WRITE_EA,
            FILE_WRITE_ATTRIBUTES,
            FILE_DELETE_CHILD,
            DELETE,
            WRITE_DAC,
            WRITE_OWNER,
        ] {
            assert_ne!(DENY_WRITE & w, 0, "{:?}", right_names(w));
        }
        // ... and leaves reading alone.
        assert_eq!(DENY_WRITE & ALLOW_READ, 0);
    }

    #[test]
    fn appcontainer_right_names_spell_every_bit() {
        assert_eq!(
            right_names(ALLOW_READ),
            [
                "FILE_READ_DATA",
                "FILE_READ_EA",
                "FILE_EXECUTE",
                "FILE_READ_ATTRIBUTES",
                "READ_CONTROL",
                "SYNCHRONIZE"
            ]
        );
        assert_eq!(right_names(0x0200_0000), ["0x02000000"]);
        assert!(right_names(0).is_empty());
        assert_eq!(
            inheritance_names(3),
            ["OBJECT_INHERIT_ACE", "CONTAINER_INHERIT_ACE"]
        );
        assert_eq!(inheritance_names(0), ["NO_INHERITANCE"]);
    }
}
