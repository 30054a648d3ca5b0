//! A classic BPF interpreter for seccomp programs (the instructions
//! seccompiler and the merge write), and the kernel's rule for a stack of
//! filters. The tests run seccompiler's per-filter programs as a stack and
//! the merged program side by side on the same calls.

use seccompiler::sock_filter;

/// `struct seccomp_data` as a program sees it (little-endian, as on
/// x86_64 and aarch64).
#[derive(Debug, Clone, Copy, Default)]
pub struct Data {
    pub nr: u32,
    pub arch: u32,
    pub instruction_pointer: u64,
    pub args: [u64; 6],
}

impl Data {
    fn word(&self, offset: u32) -> Option<u32> {
        let low = |v: u64| v as u32;
        let high = |v: u64| (v >> 32) as u32;
        match offset {
            0 => Some(self.nr),
            4 => Some(self.arch),
            8 => Some(low(self.instruction_pointer)),
            12 => Some(high(self.instruction_pointer)),
            16..=60 if offset.is_multiple_of(4) => {
                let arg = self.args[((offset - 16) / 8) as usize];
                Some(if (offset - 16).is_multiple_of(8) {
                    low(arg)
                } else {
                    high(arg)
                })
            }
            _ => None,
        }
    }
}

/// Why a program could not be run to its answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error("load of offset {offset} at {pc}")]
    Load { offset: u32, pc: usize },
    #[error("instruction {code:#x} at {pc}")]
    Instruction { code: u16, pc: usize },
    #[error("the program ran off its end")]
    RanOff,
    #[error("no program")]
    NoProgram,
}

/// What `program` returns for `data`; Err for an instruction it does not
/// know, a load outside the data, or a jump off the end.
pub fn run(program: &[sock_filter], data: &Data) -> Result<u32, EvalError> {
    trace(program, data).map(|t| t.ret)
}

/// How a program ran.
#[derive(Debug, Clone, Copy)]
pub struct Trace {
    pub ret: u32,
    /// Instructions run before the first load of an argument (or the
    /// return): how far the kernel's action cache follows the program.
    pub steps_to_args: usize,
    /// Whether it loaded an argument or the instruction pointer.
    pub read_args: bool,
}

/// [`run`], telling also how it ran.
pub fn trace(program: &[sock_filter], data: &Data) -> Result<Trace, EvalError> {
    let mut a: u32 = 0;
    let mut pc = 0usize;
    let mut steps = 0usize;
    let mut read_args = false;
    while let Some(i) = program.get(pc) {
        if !read_args {
            steps += 1;
        }
        let next = pc + 1;
        let branch = |taken: bool| next + usize::from(if taken { i.jt } else { i.jf });
        pc = match i.code {
            0x20 => {
                read_args |= i.k >= 8;
                a = data.word(i.k).ok_or(EvalError::Load { offset: i.k, pc })?;
                next
            }
            0x54 => {
                a &= i.k;
                next
            }
            0x05 => next + i.k as usize,
            0x15 => branch(a == i.k),
            0x25 => branch(a > i.k),
            0x35 => branch(a >= i.k),
            0x45 => branch(a & i.k != 0),
            0x06 => {
                return Ok(Trace {
                    ret: i.k,
                    steps_to_args: steps,
                    read_args,
                })
            }
            other => return Err(EvalError::Instruction { code: other, pc }),
        };
    }
    Err(EvalError::RanOff)
}

/// The kernel's answer for a stack of filters (`programs` in installation
/// order): each runs, the strongest action wins (`ACTION_ONLY`, lower is
/// stronger), and between equals the filter installed last.
pub fn stacked(programs: &[&[sock_filter]], data: &Data) -> Result<u32, EvalError> {
    let strength = |r: u32| (r & 0xffff_0000) as i32;
    let mut best: Option<u32> = None;
    for p in programs.iter().rev() {
        let r = run(p, data)?;
        if best.is_none_or(|b| strength(r) < strength(b)) {
            best = Some(r);
        }
    }
    best.ok_or(EvalError::NoProgram)
}
