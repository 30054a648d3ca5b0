//! The box's own pseudo-terminal: `terra run` driven on a terminal this test
//! makes (`tests/pty/driver.py`, playing the terminal emulator: the command
//! runs in a new session with the slave as its controlling terminal and
//! standard streams).
//!
//! The probe (`tests/pty/probe.py`) tries to break the terminal it was given
//! (line discipline N_NULL, exclusive mode, injected input, other modes);
//! afterwards the operator's (outer) terminal must be as it was: line
//! discipline N_TTY, not exclusive, the same modes, nothing unread. Its
//! positive twin runs an interactive shell: job control, resize, Ctrl-C,
//! Ctrl-Z and `fg`, `tty` naming a device of the box, a raw-mode reader.
//! Every case runs as the caller and, as root, again as uid/gid 65534
//! (setpriv). Waits are bounded waits for expected text, never timings.
// Linux only: runs boxes.
#![cfg(target_os = "linux")]

mod common;

use common::{terra_bin, users, User, NOBODY};

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::{Duration, Instant};

use serde_json::{json, Value};

const DRIVER: &str = include_str!("pty/driver.py");
const PROBE: &str = include_str!("pty/probe.py");
const N_TTY: i64 = 0;

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// One run's host directories: a workspace, home, temp, state and runtime.
struct PtyWorld {
    root: PathBuf,
    ws: PathBuf,
    user: User,
}

impl PtyWorld {
    fn new(name: &str, user: User) -> PtyWorld {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let root = PathBuf::from(format!(
            "/tmp/terra-pty-{}-{name}-{user:?}-{n}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&root);
        let ws = root.join("ws");
        for d in ["ws", "home", "tmp", "state", "runtime"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        fs::write(root.join("driver.py"), DRIVER).unwrap();
        fs::write(ws.join("probe.py"), PROBE).unwrap();
        for p in walk(&root) {
            let mode = if p.is_dir() { 0o755 } else { 0o644 };
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            if user == User::Nobody {
                std::os::unix::fs::lchown(&p, Some(NOBODY), Some(NOBODY)).unwrap();
            }
        }
        PtyWorld { root, ws, user }
    }

    /// Runs `terra run <args>` under the driver with `steps`; returns the
    /// driver's report. `extra` is merged into the driver's spec.
    fn drive(&self, args: &[&str], steps: Value, extra: Value) -> Value {
        let mut cmd: Vec<String> = Vec::new();
        if self.user == User::Nobody {
            cmd.extend(
                [
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                ]
                .map(String::from),
            );
            cmd[0] = "/usr/bin/setpriv".into();
        }
        cmd.push(terra_bin(self.user).display().to_string());
        cmd.push("run".into());
        cmd.extend(
            [
                "--workspace",
                &self.ws.display().to_string(),
                "--env",
                "OUTER_TTY=@OUTER_TTY@",
                "--env",
                "TERM=xterm",
            ]
            .map(String::from),
        );
        cmd.extend(args.iter().map(|a| a.to_string()));
        let r = |d: &str| self.root.join(d).display().to_string();
        let mut spec = json!({
            "cmd": cmd,
            "env": {
                "PATH": "/usr/bin:/bin",
                "HOME": r("home"),
                "TMPDIR": r("tmp"),
                "XDG_STATE_HOME": r("state"),
                "XDG_RUNTIME_DIR": r("runtime"),
                "LANG": "C.UTF-8",
                "TERM": "xterm",
            },
            "steps": steps,
        });
        if let (Some(s), Value::Object(e)) = (spec.as_object_mut(), extra) {
            s.extend(e);
        }
        let mut c = Command::new("/usr/bin/python3");
        c.arg(self.root.join("driver.py"))
            .arg(spec.to_string())
            .current_dir(&self.ws)
            .stdin(Stdio::null());
        let o = bounded(c);
        let text = String::from_utf8_lossy(&o.stdout);
        match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => panic!(
                "the driver gave no report ({e}):\n{text}\n{}",
                String::from_utf8_lossy(&o.stderr)
            ),
        }
    }
}

impl Drop for PtyWorld {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn walk(p: &Path) -> Vec<PathBuf> {
    let mut v = vec![p.to_path_buf()];
    if p.is_dir() {
        for e in fs::read_dir(p).unwrap().flatten() {
            v.extend(walk(&e.path()));
        }
    }
    v
}

/// Runs a command with a hang limit (the driver bounds its own waits).
fn bounded(mut c: Command) -> Output {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    let pid = child.id();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    let watchdog = std::thread::spawn(move || {
        let start = Instant::now();
        while !d2.load(Ordering::SeqCst) {
            if start.elapsed() > Duration::from_secs(300) {
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, Ordering::SeqCst);
    watchdog.join().unwrap();
    out
}

/// What the run did to the operator's terminal, in words (empty: nothing).
fn outer_damage(r: &Value) -> Vec<String> {
    let mut v = Vec::new();
    if r["ldisc"].as_i64() != Some(N_TTY) {
        v.push(format!(
            "TERRA-PROBE-ESCAPED: the operator's terminal has line discipline {} (N_TTY is 0)",
            r["ldisc"]
        ));
    }
    if r["exclusive"].as_i64() != Some(0) {
        v.push("TERRA-PROBE-ESCAPED: the operator's terminal is left exclusive (TIOCEXCL)".into());
    }
    if r["modes_restored"] != json!(true) {
        v.push(format!(
            "TERRA-PROBE-ESCAPED: the operator's terminal modes changed: {} -> {}",
            r["modes_before"], r["modes_after"]
        ));
    }
    if r["pending"].as_i64() != Some(0) {
        v.push(format!(
            "TERRA-PROBE-ESCAPED: {} bytes of input left on the operator's terminal",
            r["pending"]
        ));
    }
    v
}

fn out(r: &Value) -> String {
    r["out"].as_str().unwrap_or_default().replace("\r\n", "\n")
}

#[test]
fn probe_cannot_break_the_operators_terminal() {
    for user in users() {
        let fx = PtyWorld::new("probe", user);
        let r = fx.drive(
            &["--", "python3", "probe.py"],
            json!([["expect", "PROBE-END", 60], ["wait", 60]]),
            json!({}),
        );
        let text = out(&r);
        let damage = outer_damage(&r);
        assert!(
            damage.is_empty() && !text.contains("TERRA-PROBE-ESCAPED"),
            "{user:?}: {damage:?}\n{text}\n{r}"
        );
        assert_eq!(r["failed"], Value::Null, "{user:?}: {text}\n{r}");
        assert_eq!(r["status"], json!(0), "{user:?}: {text}");
        // The attempts reached a real terminal (the box's own): exclusive mode
        // and mode changes work there; line disciplines and injected input are
        // refused by the seccomp filter (EPERM).
        for fd in 0..=3 {
            for want in [
                format!("did TIOCEXCL on {fd}\n"),
                format!("did tcsetattr on {fd}\n"),
                format!("refused TIOCSETD on {fd} errno 1\n"),
                format!("refused TIOCSTI on {fd} errno 1\n"),
            ] {
                assert!(text.contains(&want), "{user:?}: no {want:?} in\n{text}");
            }
        }
    }
}

/// The interactive twin: a shell with job control on the box's terminal.
#[test]
fn interactive_shell_on_the_box_terminal() {
    let py_raw = concat!(
        "python3 -c 'import sys,tty,termios; m=termios.tcgetattr(0); tty.setraw(0); ",
        "print(\"RAW\"\"READY\", flush=True); c=sys.stdin.read(1); ",
        "termios.tcsetattr(0, termios.TCSANOW, m); print(\"got\", repr(c))'\n"
    );
    for user in users() {
        let fx = PtyWorld::new("shell", user);
        let r = fx.drive(
            &[
                "--env",
                "PS1=PR> ",
                "--",
                "bash",
                "--norc",
                "--noprofile",
                "-i",
            ],
            json!([
                ["expect", "PR> ", 60],
                ["outer_raw"],
                // `tty` names the box's own device, which exists in the box.
                [
                    "send",
                    "t=$(tty); test -c \"$t\" && echo \"PTS\"\"OK $t\"\n"
                ],
                ["expect", "PTSOK /dev/pts/"],
                ["expect", "PR> "],
                // The operator's window changes: the box's terminal follows.
                ["resize", 33, 97],
                ["retry", "stty size\n", "33 97", 30],
                ["expect", "PR> "],
                ["send", "sleep 100 &\n"],
                ["expect", "PR> "],
                ["send", "jobs\n"],
                ["expect", "Running"],
                ["expect", "PR> "],
                // Ctrl-C interrupts the foreground job only.
                ["send", "sh -c \"echo S\"\"TART; exec sleep 50\"\n"],
                ["expect", "START"],
                ["send", "\u{3}"],
                ["expect", "PR> "],
                ["send", "echo rc=$?\n"],
                ["expect", "rc=130"],
                ["expect", "PR> "],
                // Ctrl-Z suspends it, `fg` resumes it.
                ["send", "sh -c \"echo Z\"\"START; exec sleep 60\"\n"],
                ["expect", "ZSTART"],
                ["send", "\u{1a}"],
                ["expect", "Stopped"],
                ["expect", "PR> "],
                ["send", "fg\n"],
                ["expect", "exec sleep 60\""],
                // (bash names the job before it hands it the terminal: a
                // Ctrl-C in between is bash's, so it is repeated.)
                ["retry", "\u{3}", "PR> ", 30],
                ["send", "jobs\n"],
                ["expect", "Running"],
                ["expect", "PR> "],
                // A raw-mode reader gets one key, unbuffered.
                ["send", py_raw],
                ["expect", "RAWREADY"],
                ["send", "q"],
                ["expect", "got 'q'"],
                ["expect", "PR> "],
                ["send", "exit 7\n"],
                ["wait", 60]
            ]),
            json!({"rows": 24, "cols": 200}),
        );
        let text = out(&r);
        assert_eq!(r["failed"], Value::Null, "{user:?}:\n{text}\n{r}");
        assert_eq!(r["status"], json!(7), "{user:?}:\n{text}");
        assert_eq!(
            r["raw_during_run"],
            json!([true]),
            "{user:?}: the operator's terminal was not in raw mode while the box ran"
        );
        let damage = outer_damage(&r);
        assert!(damage.is_empty(), "{user:?}: {damage:?}\n{text}");
    }
}

/// The operator's terminal modes come back however the run ends.
#[test]
fn operator_terminal_modes_restored_on_every_end() {
    let ready = "echo RE\"\"ADY; exec sleep 100";
    let cases: Vec<(&str, Vec<&str>, Value, i64)> = vec![
        (
            "normal exit",
            vec!["--", "sh", "-c", "echo RE\"\"ADY; read x; exit 3"],
            json!([
                ["expect", "READY"],
                ["outer_raw"],
                ["send", "x\n"],
                ["wait", 60]
            ]),
            3,
        ),
        (
            "workload killed by a signal",
            vec!["--", "sh", "-c", "echo RE\"\"ADY; read x; kill -KILL $$"],
            json!([
                ["expect", "READY"],
                ["outer_raw"],
                ["send", "x\n"],
                ["wait", 60]
            ]),
            137,
        ),
        (
            "timeout",
            vec!["--timeout", "2s", "--", "sh", "-c", ready],
            json!([["expect", "READY"], ["outer_raw"], ["wait", 60]]),
            143,
        ),
        (
            "terra gets SIGTERM",
            vec!["--", "sh", "-c", ready],
            json!([
                ["expect", "READY"],
                ["outer_raw"],
                ["signal", "SIGTERM"],
                ["wait", 60]
            ]),
            143,
        ),
        (
            "terra gets SIGHUP",
            vec!["--", "sh", "-c", ready],
            json!([
                ["expect", "READY"],
                ["outer_raw"],
                ["signal", "SIGHUP"],
                ["wait", 60]
            ]),
            129,
        ),
    ];
    for user in users() {
        for (what, args, steps, code) in &cases {
            let fx = PtyWorld::new("restore", user);
            let r = fx.drive(args, steps.clone(), json!({}));
            let text = out(&r);
            assert_eq!(r["failed"], Value::Null, "{user:?} {what}:\n{text}\n{r}");
            assert_eq!(r["status"], json!(code), "{user:?} {what}:\n{text}");
            assert_eq!(
                r["raw_during_run"],
                json!([true]),
                "{user:?} {what}: the operator's terminal was not in raw mode during the run"
            );
            let damage = outer_damage(&r);
            assert!(damage.is_empty(), "{user:?} {what}: {damage:?}\n{text}");
        }
    }
}

/// stdin a pipe, stdout and stderr the terminal: the pipe stays the
/// workload's stdin, only the terminal descriptors get the box's terminal,
/// and the operator's terminal is never put in raw mode.
#[test]
fn piped_stdin_stays_a_pipe_with_a_terminal_stdout() {
    let script = concat!(
        "read l; echo \"got $l\"; [ -t 0 ] || echo \"STDIN\"\"PIPE\"; ",
        "[ -t 1 ] && [ -t 2 ] && echo \"OUT\"\"TTY $(readlink /proc/$$/fd/1)\"; ",
        "read m || echo \"E\"\"OF\""
    );
    for user in users() {
        let fx = PtyWorld::new("pipe", user);
        let r = fx.drive(
            &["--", "sh", "-c", script],
            json!([
                ["expect", "got hello"],
                ["outer_raw"],
                ["expect", "STDINPIPE"],
                ["expect", "OUTTTY /dev/pts/"],
                ["expect", "EOF"],
                ["wait", 60]
            ]),
            json!({"stdin_pipe": "hello\n"}),
        );
        let text = out(&r);
        assert_eq!(r["failed"], Value::Null, "{user:?}:\n{text}\n{r}");
        assert_eq!(r["status"], json!(0), "{user:?}:\n{text}");
        assert_eq!(r["raw_during_run"], json!([false]), "{user:?}: {text}");
        let damage = outer_damage(&r);
        assert!(damage.is_empty(), "{user:?}: {damage:?}\n{text}");
    }
}
