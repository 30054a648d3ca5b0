//! The console relay: each of the worker's output pipes read on its own
//! thread, filtered (`terra_appcontainer::relay`) and written to the
//! launcher's own standard output or error.

use std::fs::File;
use std::io::{Read, Write};
use std::thread::JoinHandle;

use terra_appcontainer::Relay;

/// Which of the launcher's streams a relay writes to.
#[derive(Clone, Copy)]
pub enum To {
    Stdout,
    Stderr,
}

fn write(to: To, bytes: &[u8]) -> std::io::Result<()> {
    match to {
        To::Stdout => {
            let mut o = std::io::stdout().lock();
            o.write_all(bytes)?;
            o.flush()
        }
        To::Stderr => std::io::stderr().lock().write_all(bytes),
    }
}

/// Relays `pipe` to `to` until the worker closes its end.
pub fn spawn(mut pipe: File, to: To) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut relay = Relay::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if write(to, &relay.push(&buf[..n])).is_err() {
                        // Nobody reads the launcher's output any more: keep
                        // draining so the worker never blocks on a full pipe.
                        continue;
                    }
                }
            }
        }
        let _ = write(to, &relay.finish());
    })
}
