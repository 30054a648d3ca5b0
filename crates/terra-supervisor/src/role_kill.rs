//! A role killed by its seccomp allowlist (the kernel ends it with SIGSYS:
//! SECCOMP_RET_KILL_PROCESS), in one line for stderr and the receipt:
//! "role terra __network killed by seccomp, syscall 41". The number comes
//! from the kernel's audit record of the kill (type=1326, logged by default),
//! read from /dev/kmsg, which needs CAP_SYSLOG or kernel.dmesg_restrict=0;
//! without it the line says where the number is.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

/// The wait status value (128 + signal) of a process seccomp killed.
pub const KILLED_STATUS: i32 = 128 + terra_seccomp::KILL_SIGNAL;

/// The receipt's line for `process` (host pid `pid`) killed by seccomp.
pub fn line(process: &str, pid: i32) -> String {
    // kauditd prints the record asynchronously: give it a moment.
    for _ in 0..10 {
        match audit_syscall(pid) {
            Lookup::Found(n) => return format!("role {process} killed by seccomp, syscall {n}"),
            Lookup::Unreadable => break,
            Lookup::NotYet => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    format!(
        "role {process} killed by seccomp (SIGSYS), syscall unknown: the number is in the kernel's audit \
         record (type=1326, pid={pid}), which this user cannot read"
    )
}

enum Lookup {
    Found(u64),
    NotYet,
    Unreadable,
}

fn audit_syscall(pid: i32) -> Lookup {
    let Ok(mut kmsg) = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
    else {
        return Lookup::Unreadable;
    };
    let mut found = None;
    // One record per read; EAGAIN at the end, EPIPE when a record was
    // overwritten while reading (go on with the next).
    let mut buf = vec![0u8; 8192];
    loop {
        match kmsg.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if let Some(nr) = parse_record(&String::from_utf8_lossy(&buf[..n]), pid) {
                    found = Some(nr);
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => return Lookup::Unreadable,
        }
    }
    found.map_or(Lookup::NotYet, Lookup::Found)
}

/// The syscall of a seccomp audit record about `pid`, e.g.
/// `6,1,2,-;audit: type=1326 ... pid=42 comm="terra" ... syscall=41 ...`.
fn parse_record(record: &str, pid: i32) -> Option<u64> {
    if !record.contains("type=1326") {
        return None;
    }
    let field = |name: &str| {
        record
            .split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .map(str::to_owned)
    };
    if field("pid=")? != pid.to_string() {
        return None;
    }
    field("syscall=")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_syscall_is_read_from_the_record_of_that_pid() {
        let r =
            "6,903,24893038928,-;audit: type=1326 audit(1796222003.675:24): auid=4294967295 uid=0 \
                 gid=0 ses=4294967295 pid=15580 comm=\"terra\" exe=\"/usr/bin/terra\" sig=31 \
                 arch=c000003e syscall=13 compat=0 ip=0x7fb36cb4711f code=0x80000000\n";
        assert_eq!(parse_record(r, 15580), Some(13));
        assert_eq!(parse_record(r, 1558), None);
        assert_eq!(
            parse_record("6,1,2,-;audit: type=1400 pid=15580 syscall=13", 15580),
            None
        );
    }
}
