//! Bounded runs and waits: guards against a hang, never timing assertions
//! (the bounds are minutes).

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a run may take before it counts as hung.
pub const HANG_LIMIT: Duration = Duration::from_secs(120);

/// Runs `cmd` to its end with stdout and stderr collected; standard input is
/// whatever `cmd` was given. A run longer than [`HANG_LIMIT`] is killed and
/// the test fails.
pub fn run_bounded(mut cmd: Command) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > HANG_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hung for more than {HANG_LIMIT:?}: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// Exit code, stdout and stderr of `out`, for assertion messages.
pub fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The direct children of process `pid`, whichever of its threads started
/// them (terra's CLI starts its supervisor on a thread); none when it is gone.
pub fn children(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.filter_map(|e| e.ok()).collect::<Vec<_>>())
        .unwrap_or_default();
    tasks
        .iter()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|s| s.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Polls `cond` every 20 ms until it holds; fails the test after two minutes.
pub fn wait_until(mut cond: impl FnMut() -> bool, what: &str) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < HANG_LIMIT, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Counts the lines a helper process writes (on a pipe) that match a pattern:
/// how a server in another process reports each connection it took.
#[derive(Clone)]
pub struct LineCounter {
    count: Arc<AtomicUsize>,
}

impl LineCounter {
    /// Counts, on a thread of its own until `from` ends, the lines `counts`.
    pub fn start(
        from: impl Read + Send + 'static,
        counts: impl Fn(&str) -> bool + Send + 'static,
    ) -> LineCounter {
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(from).lines().map_while(Result::ok) {
                if counts(&l) {
                    c.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        LineCounter { count }
    }

    /// The count once it reached `expect` (the lines arrive through a pipe:
    /// waits for them, at most five seconds), or what it is then.
    pub fn settled(&self, expect: usize) -> usize {
        let until = Instant::now() + Duration::from_secs(5);
        while self.count.load(Ordering::SeqCst) < expect && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.count.load(Ordering::SeqCst)
    }
}
