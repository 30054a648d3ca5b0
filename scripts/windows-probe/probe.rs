//! The probe scripts/windows-acceptance.ps1 runs inside (and outside) the
//! windows backend: one operation per run, exit 0 when it succeeded, 3 when
//! it failed (the error on stderr), 2 for a bad command line. Standard
//! library only (plus two kernel32 calls), so it loads no Win32k library
//! and starts under the worker's Win32k lockdown.
//!
//! Built by the acceptance script with `rustc -O probe.rs`; not part of
//! terra's workspace.
//!
//! ```text
//! probe read PATH            read a file
//! probe write PATH           create or truncate a file and write to it
//! probe delete PATH          delete a file or an empty directory
//! probe rename FROM TO       rename
//! probe connect HOST:PORT    TCP connect (5 s)
//! probe listen ADDR:PORT     bind and listen
//! probe spawn PROGRAM        start a child process
//! probe controls             print escape sequences and control characters
//! probe console              try to attach the parent's console
//! probe sleep SECONDS PIDFILE  write this process's id to PIDFILE, then sleep
//! probe exit CODE            exit with CODE
//! ```

use std::io::Write;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

#[link(name = "kernel32")]
extern "system" {
    fn AttachConsole(process_id: u32) -> i32;
    fn FreeConsole() -> i32;
}

const ATTACH_PARENT_PROCESS: u32 = u32::MAX;

fn outcome(r: std::io::Result<()>) -> i32 {
    match r {
        Ok(()) => {
            println!("ok");
            0
        }
        Err(e) => {
            eprintln!("failed: {e}");
            3
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let code = match a.as_slice() {
        ["read", path] => outcome(std::fs::read(path).map(drop)),
        ["write", path] => outcome(std::fs::write(path, b"written by the probe\n")),
        ["delete", path] => outcome(
            std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path)),
        ),
        ["rename", from, to] => outcome(std::fs::rename(from, to)),
        ["connect", addr] => outcome((|| {
            let addr = addr
                .to_socket_addrs()?
                .next()
                .ok_or_else(|| std::io::Error::other("no address"))?;
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map(drop)
        })()),
        ["listen", addr] => outcome(TcpListener::bind(addr).map(drop)),
        ["spawn", program] => outcome(std::process::Command::new(program).status().map(drop)),
        ["controls"] => {
            let mut o = std::io::stdout().lock();
            let _ = o.write_all(b"esc:\x1b[31mred\x1b[0m bel:\x07 osc:\x1b]0;title\x07 ");
            let _ = o.write_all("c1:\u{9b}31m lone-cr:hidden\rshown crlf:\r\n".as_bytes());
            let _ = o.write_all("utf8: h\u{e9}llo \u{65e5}\u{672c}\n".as_bytes());
            0
        }
        ["console"] => {
            // SAFETY: plain calls; a console attached here is freed at once.
            let attached = unsafe { AttachConsole(ATTACH_PARENT_PROCESS) } != 0;
            if attached {
                // SAFETY: detaches the console just attached.
                unsafe { FreeConsole() };
                println!("attached");
                0
            } else {
                eprintln!("failed: {}", std::io::Error::last_os_error());
                3
            }
        }
        ["sleep", secs, pidfile] => match secs.parse::<u64>() {
            Ok(s) => {
                if let Err(e) = std::fs::write(pidfile, std::process::id().to_string()) {
                    eprintln!("failed: pid file: {e}");
                    std::process::exit(3);
                }
                std::thread::sleep(Duration::from_secs(s));
                0
            }
            Err(_) => 2,
        },
        ["exit", c] => c.parse::<i32>().unwrap_or(2),
        _ => {
            eprintln!("usage: probe read|write|delete|rename|connect|listen|spawn|controls|console|sleep|exit ...");
            2
        }
    };
    std::process::exit(code);
}
