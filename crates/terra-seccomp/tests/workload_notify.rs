//! The workload-notify table as a program: connect() and sendto() with an
//! address go to the box network service, while TCP Fast Open (which
//! connects without a connect() call) is refused on every socket before the
//! service could be asked.
#![cfg(target_os = "linux")]

use terra_seccomp::eval::{run, Data};
use terra_seccomp::{compile, Table};

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_USER_NOTIF: u32 = 0x7fc0_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const MSG_FASTOPEN: u64 = 0x2000_0000;
const TCP_FASTOPEN_CONNECT: u64 = 30;

fn decide(nr: i64, args: [u64; 6]) -> u32 {
    let programs = compile(Table::WorkloadNotify).expect("the table compiles");
    assert_eq!(programs.len(), 1, "one merged program: {programs:?}");
    let bpf = &programs[0].bpf;
    let data = Data {
        nr: nr as u32,
        arch: bpf[1].k,
        args,
        ..Data::default()
    };
    run(bpf, &data).expect("the program runs")
}

fn eopnotsupp() -> u32 {
    RET_ERRNO | libc::EOPNOTSUPP as u32
}

#[test]
fn fast_open_is_refused_on_every_send_call_and_its_socket_option() {
    let addr = 0x7000_0000;
    let flags = MSG_FASTOPEN | libc::MSG_NOSIGNAL as u64;
    // sendto(fd, buf, len, flags, addr, addrlen), with and without an address.
    assert_eq!(
        decide(libc::SYS_sendto, [3, 1, 1, flags, addr, 16]),
        eopnotsupp()
    );
    assert_eq!(
        decide(libc::SYS_sendto, [3, 1, 1, flags, 0, 0]),
        eopnotsupp()
    );
    // sendmsg(fd, msg, flags), sendmmsg(fd, vec, n, flags).
    assert_eq!(
        decide(libc::SYS_sendmsg, [3, 1, flags, 0, 0, 0]),
        eopnotsupp()
    );
    assert_eq!(
        decide(libc::SYS_sendmmsg, [3, 1, 1, flags, 0, 0]),
        eopnotsupp()
    );
    // setsockopt(fd, IPPROTO_TCP, TCP_FASTOPEN_CONNECT, ...).
    let tcp = libc::IPPROTO_TCP as u64;
    assert_eq!(
        decide(
            libc::SYS_setsockopt,
            [3, tcp, TCP_FASTOPEN_CONNECT, 1, 4, 0]
        ),
        eopnotsupp()
    );
}

#[test]
fn the_same_calls_without_fast_open_are_untouched_or_go_to_the_service() {
    let addr = 0x7000_0000;
    let nosig = libc::MSG_NOSIGNAL as u64;
    assert_eq!(
        decide(libc::SYS_connect, [3, addr, 16, 0, 0, 0]),
        RET_USER_NOTIF
    );
    // bind() and listen() are the kernel's: a handed socket keeps the port
    // the box bound it to, and stays connected.
    assert_eq!(decide(libc::SYS_bind, [3, addr, 16, 0, 0, 0]), RET_ALLOW);
    assert_eq!(decide(libc::SYS_listen, [3, 16, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(
        decide(libc::SYS_sendto, [3, 1, 1, nosig, addr, 16]),
        RET_USER_NOTIF
    );
    assert_eq!(decide(libc::SYS_sendto, [3, 1, 1, nosig, 0, 0]), RET_ALLOW);
    assert_eq!(decide(libc::SYS_sendmsg, [3, 1, nosig, 0, 0, 0]), RET_ALLOW);
    assert_eq!(
        decide(libc::SYS_sendmmsg, [3, 1, 1, nosig, 0, 0]),
        RET_ALLOW
    );
    let tcp = libc::IPPROTO_TCP as u64;
    let nodelay = libc::TCP_NODELAY as u64;
    assert_eq!(
        decide(libc::SYS_setsockopt, [3, tcp, nodelay, 1, 4, 0]),
        RET_ALLOW
    );
    // Option 30 at another level (SOL_SOCKET's SO_PEERSEC, say) is not Fast Open.
    let sol = libc::SOL_SOCKET as u64;
    assert_eq!(
        decide(
            libc::SYS_setsockopt,
            [3, sol, TCP_FASTOPEN_CONNECT, 1, 4, 0]
        ),
        RET_ALLOW
    );
}
