//! Network none on the linux backend: the box's DNS stub refuses every
//! name and says each one once on a pipe the supervisor gave the box
//! (`BoxConfig::dns_report`). The supervisor passes each line on to its
//! standard error as it comes (the caller sees it at once) and keeps the
//! names for the receipt (`dnsRefused`), which `terra run` turns into its
//! closing lines.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Longest line read from the box; a longer one is dropped.
const MAX_LINE: u64 = 1024;
/// Most names kept (the stub says at most 64).
const MAX_NAMES: usize = 64;

/// The reader of one run's pipe.
pub struct Reader {
    names: Arc<Mutex<Vec<String>>>,
    done: mpsc::Receiver<()>,
}

/// A new pipe: the read end is read by a thread from now on; the write end
/// goes to the box.
pub fn start() -> std::io::Result<(Reader, OwnedFd)> {
    let (r, w) = std::io::pipe()?;
    let names = Arc::new(Mutex::new(Vec::new()));
    let (tx, done) = mpsc::channel();
    let kept = Arc::clone(&names);
    std::thread::Builder::new()
        .name("terra-dns-names".into())
        .spawn(move || {
            read_lines(r, &kept, &mut std::io::stderr());
            let _ = tx.send(());
        })?;
    Ok((Reader { names, done }, OwnedFd::from(w)))
}

/// Reads `from` to its end: each line that names a refused name is passed
/// on to `to` and its name kept.
fn read_lines(from: impl Read, names: &Mutex<Vec<String>>, to: &mut impl Write) {
    let mut reader = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.by_ref().take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let Ok(text) = std::str::from_utf8(&line) else {
            continue;
        };
        let Some(name) = terra_netd::refused::name_of(text) else {
            continue;
        };
        let mut kept = names.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < MAX_NAMES && !kept.iter().any(|n| n == name) {
            kept.push(name.to_owned());
            let _ = to.write_all(terra_netd::refused::line(name).as_bytes());
        }
    }
}

impl Reader {
    /// The names said, once the box closed the pipe (waiting at most
    /// `wait` for that: the box's teardown may still be under way).
    pub fn finish(self, wait: Duration) -> Vec<String> {
        let _ = self.done.recv_timeout(wait);
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        names.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use terra_netd::refused::line;

    #[test]
    fn lines_pass_on_once_and_their_names_are_kept() {
        let mut text = String::new();
        text.push_str(&line("pypi.org"));
        text.push_str("garbage\n");
        text.push_str(&"x".repeat(3000));
        text.push('\n');
        text.push_str(&line("pypi.org"));
        text.push_str(&line("index.crates.io"));
        let names = Mutex::new(Vec::new());
        let mut out = Vec::new();
        read_lines(text.as_bytes(), &names, &mut out);
        assert_eq!(*names.lock().unwrap(), ["pypi.org", "index.crates.io"]);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{}{}", line("pypi.org"), line("index.crates.io"))
        );
    }
}
