//! Names of the bits set in a flag word, for the dry run: the named bits in
//! table order, then any unnamed rest in hex (one helper for the job
//! limits, UI restrictions and creation flags, and the mitigation policies).

use std::ops::{BitAnd, BitAndAssign, Not};

pub(crate) fn names<T>(table: &[(T, &'static str)], bits: T) -> Vec<String>
where
    T: Copy + Default + PartialEq + BitAnd<Output = T> + BitAndAssign + Not<Output = T>,
    T: std::fmt::LowerHex,
{
    let zero = T::default();
    let mut out = Vec::new();
    let mut rest = bits;
    for &(bit, name) in table {
        if bits & bit != zero {
            out.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != zero {
        let width = std::mem::size_of::<T>() * 2;
        out.push(format!("0x{rest:0width$x}"));
    }
    out
}
