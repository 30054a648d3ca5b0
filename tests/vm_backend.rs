//! The vm backend (`terra run --backend vm`) end to end: real QEMU guests
//! under the host's kernel image, as the caller and, when the caller is
//! root, as uid 65534. Each case is a negative probe with its positive twin
//! in the same guest (a boot costs seconds under TCG, so a case boots once
//! or twice). A host without QEMU or a kernel fails these tests (with what
//! to install); it never passes them untested.
#![cfg(target_os = "linux")]

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    command_as, is_root, require_root, run_bounded, show, terra_bin, users, RunDirs, User,
};
use serde_json::Value;
use terra_test_support::http::HttpServer;

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A cache shared by the cases of one user (the vmlinux and initramfs are
/// made once per terra build), owned by that user, 0700.
fn cache_dir(user: User) -> PathBuf {
    let d = PathBuf::from(format!("/tmp/terra-vm-tests-cache-{}", user.uid()));
    if !d.exists() {
        let _ = fs::create_dir(&d);
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
        if user == User::Nobody {
            std::os::unix::fs::chown(&d, Some(user.uid()), Some(user.uid())).unwrap();
        }
    }
    d
}

/// The host has what the vm backend needs, or the test fails saying what.
fn require_vm() {
    assert!(
        Path::new("/usr/bin/qemu-system-x86_64").exists() || Path::new("/usr/bin/qemu-system-aarch64").exists(),
        "the vm backend's tests need QEMU: apt-get install qemu-system-x86 (scripts/bootstrap.sh does)"
    );
    let kernels = fs::read_dir("/boot")
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("vmlinuz-"))
                .count()
        })
        .unwrap_or(0);
    assert!(
        kernels > 0,
        "the vm backend's tests need a kernel: apt-get install linux-image-amd64 (scripts/bootstrap.sh does)"
    );
}

struct Vm {
    dirs: RunDirs,
}

impl Vm {
    fn new(name: &str, user: User) -> Vm {
        require_vm();
        let dirs = RunDirs::new("terra-vm", name, user);
        fs::create_dir_all(dirs.root.join("out")).unwrap();
        fs::set_permissions(dirs.root.join("out"), fs::Permissions::from_mode(0o777)).unwrap();
        Vm { dirs }
    }

    fn receipt_path(&self) -> PathBuf {
        self.dirs.root.join("out/receipt.json")
    }

    /// `terra run --backend vm FLAGS -- ARGV` in the workspace.
    fn command(&self, flags: &[&str], argv: &[&str]) -> Command {
        self.dirs.chown_to_user(None);
        let user = self.dirs.user;
        let mut cmd = command_as(user, None, &[], &terra_bin(user));
        cmd.args(["run", "--backend", "vm", "--rm-temp", "--receipt"])
            .arg(self.receipt_path())
            .arg("--workspace")
            .arg(&self.dirs.ws)
            .args(flags)
            .arg("--")
            .args(argv);
        self.dirs.run_env(&mut cmd, PATH);
        cmd.env("XDG_CACHE_HOME", cache_dir(user));
        let _ = fs::remove_file(self.receipt_path());
        cmd
    }

    fn run(&self, flags: &[&str], argv: &[&str]) -> Output {
        run_bounded(self.command(flags, argv))
    }

    fn receipt(&self, out: &Output) -> Value {
        let text = fs::read_to_string(self.receipt_path())
            .unwrap_or_else(|e| panic!("no receipt ({e}): {}", show(out)));
        serde_json::from_str(&text).unwrap()
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every process below `pid` (children, their children, ...).
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces; cut at the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        if let Some(ppid) = rest
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u32>().ok())
        {
            parent_of.push((p, ppid));
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for (c, pp) in &parent_of {
            if *pp == p {
                out.push(*c);
                todo.push(*c);
            }
        }
    }
    out
}

fn is_qemu(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        c.split('\0')
            .next()
            .is_some_and(|a| a.contains("qemu-system"))
    })
}

/// The QEMU process under `pid`, once it exists (at most two minutes).
fn qemu_under(pid: u32) -> u32 {
    let start = Instant::now();
    loop {
        if let Some(q) = descendants(pid).into_iter().find(|p| is_qemu(*p)) {
            return q;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no QEMU appeared under pid {pid}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until process `pid` no longer exists, or is a zombie no
/// one reaps yet; fails when it still runs after 30 s.
fn assert_gone(pid: u32, what: &str) {
    let start = Instant::now();
    loop {
        let state = fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        let alive = state.as_ref().is_some_and(|s| {
            s.rfind(')')
                .and_then(|i| s[i + 2..].chars().next())
                .is_some_and(|c| c != 'Z')
                && is_qemu(pid)
        });
        if !alive {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: QEMU (pid {pid}) is still running"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn expected_accelerator() -> &'static str {
    let cpu = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let virt = cpu.split_whitespace().any(|w| w == "vmx" || w == "svm");
    let kvm = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    if kvm && virt && !Path::new("/sys/module/kvm_pvm").exists() {
        "kvm"
    } else {
        "tcg"
    }
}

fn sha256_of(path: &str) -> String {
    let o = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

// ------------------------------------------------------------- the basics

#[test]
fn exit_status_stdio_and_a_workspace_write_reach_the_host() {
    for user in users() {
        let vm = Vm::new("basics", user);
        let input = vm.dirs.root.join("input.txt");
        fs::write(&input, "from-host\n").unwrap();
        fs::set_permissions(&input, fs::Permissions::from_mode(0o644)).unwrap();
        let mut cmd = vm.command(
            &[],
            &[
                "sh",
                "-c",
                "read l; echo \"got:$l\"; echo err-line >&2; id -u; echo written > out.txt; exit 3",
            ],
        );
        cmd.stdin(Stdio::from(fs::File::open(&input).unwrap()));
        let out = run_bounded(cmd);
        assert_eq!(out.status.code(), Some(3), "{user:?}: {}", show(&out));
        assert_eq!(
            stdout(&out),
            format!("got:from-host\n{}\n", user.uid()),
            "{user:?}: {}",
            show(&out)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("err-line"),
            "{}",
            show(&out)
        );
        let written = vm.dirs.ws.join("out.txt");
        assert_eq!(fs::read_to_string(&written).unwrap(), "written\n");
        assert_eq!(
            fs::metadata(&written).unwrap().uid(),
            user.uid(),
            "owned by the caller on the host"
        );
        let r = vm.receipt(&out);
        assert_eq!(r["backend"], "vm", "{r}");
        assert_eq!(r["activation"], "passed", "{r}");
        assert_eq!(r["outcome"]["exitCode"], 3, "{r}");
        assert_eq!(r["vm"]["engine"], "qemu", "{r}");
        assert!(
            r["vm"]["engineVersion"].as_str().unwrap().contains("QEMU"),
            "{r}"
        );
        assert_eq!(r["vm"]["accelerator"], expected_accelerator(), "{r}");
        let kernel = r["vm"]["kernel"].as_str().unwrap();
        assert_eq!(
            r["vm"]["kernelSha256"].as_str().unwrap(),
            sha256_of(kernel),
            "{r}"
        );
    }
}

/// Megabytes each way cross the control channel intact (its frames are at
/// most 64 KiB each).
#[test]
fn megabytes_of_stdin_and_stdout_cross_the_channel_intact() {
    let vm = Vm::new("bulk", User::Caller);
    let input = vm.dirs.root.join("input.bin");
    let data: Vec<u8> = (0..6_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    fs::write(&input, &data).unwrap();
    let mut cmd = vm.command(
        &[],
        &[
            "sh",
            "-c",
            "sha256sum | cut -d' ' -f1; head -c 20000000 /dev/zero",
        ],
    );
    cmd.stdin(Stdio::from(fs::File::open(&input).unwrap()));
    let out = run_bounded(cmd);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let digest = sha256_of(input.to_str().unwrap());
    let (line, rest) = out.stdout.split_at(65);
    assert_eq!(String::from_utf8_lossy(line), format!("{digest}\n"));
    assert_eq!(rest.len(), 20_000_000);
    assert!(rest.iter().all(|b| *b == 0));
}

#[test]
fn a_signal_ends_the_workload_as_128_plus_n_and_exec_failures_keep_their_codes() {
    let vm = Vm::new("signal", User::Caller);
    let out = vm.run(&[], &["sh", "-c", "echo before; kill -KILL $$; echo after"]);
    assert_eq!(out.status.code(), Some(137), "{}", show(&out));
    assert_eq!(stdout(&out), "before\n");
    let r = vm.receipt(&out);
    assert_eq!(r["outcome"]["signal"], 9, "{r}");
    let out = vm.run(&[], &["surely-not-a-command-here"]);
    assert_eq!(out.status.code(), Some(127), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not found"),
        "{}",
        show(&out)
    );
}

/// With stdin and stdout on a terminal (here `script`'s), the workload gets
/// a terminal of the guest's own as its controlling terminal; the twin is
/// every other case, whose stdio are pipes.
#[test]
fn a_caller_terminal_gives_the_workload_a_guest_terminal() {
    for user in users() {
        let vm = Vm::new("tty", user);
        let inner = vm.command(
            &[],
            &[
                "sh",
                "-c",
                "tty; test -t 0 && test -t 1 && echo both-terminals; exit 5",
            ],
        );
        let mut line = vec![inner.get_program().to_string_lossy().into_owned()];
        line.extend(inner.get_args().map(|a| a.to_string_lossy().into_owned()));
        let quoted: Vec<String> = line
            .iter()
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &quoted.join(" "), "/dev/null"]);
        vm.dirs.run_env(&mut cmd, PATH);
        cmd.env("XDG_CACHE_HOME", cache_dir(user));
        // script copies its stdin to the terminal: an open, silent pipe.
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let keep = child.stdin.take();
        let out = child.wait_with_output().unwrap();
        drop(keep);
        assert_eq!(out.status.code(), Some(5), "{user:?}: {}", show(&out));
        let text = stdout(&out);
        assert!(
            text.contains("/dev/pts/0") && text.contains("both-terminals"),
            "{user:?}: {text}"
        );
    }
}

// ------------------------------------------------------------- files

#[test]
fn a_read_only_grant_refuses_writes_and_still_reads() {
    for user in users() {
        let vm = Vm::new("readonly", user);
        let ro = vm.dirs.write("ro/file.txt", "ro-data\n");
        let ro_dir = ro.parent().unwrap().to_str().unwrap().to_string();
        let script = format!(
            "cat {ro_dir}/file.txt; \
             if echo x > {ro_dir}/file.txt 2>/dev/null; then echo WROTE; else echo refused; fi; \
             if touch {ro_dir}/new 2>/dev/null; then echo CREATED; else echo refused; fi; \
             if rm -f {ro_dir}/file.txt 2>/dev/null && [ ! -e {ro_dir}/file.txt ]; then echo REMOVED; else echo refused; fi; \
             echo ok > ws.txt && echo workspace-writable"
        );
        let out = vm.run(&["--read", &ro_dir], &["sh", "-c", &script]);
        assert_eq!(out.status.code(), Some(0), "{user:?}: {}", show(&out));
        assert_eq!(
            stdout(&out),
            "ro-data\nrefused\nrefused\nrefused\nworkspace-writable\n",
            "{user:?}: {}",
            show(&out)
        );
        assert_eq!(fs::read_to_string(&ro).unwrap(), "ro-data\n");
        assert!(!vm.dirs.root.join("ro/new").exists());
    }
}

#[test]
fn secrets_outside_the_grants_and_denied_paths_stay_hidden() {
    for user in users() {
        let vm = Vm::new("hidden", user);
        let secret = vm.dirs.write("secret.txt", "top-secret\n");
        vm.dirs.write("ws/public.txt", "public\n");
        vm.dirs.write("ws/private/key.txt", "private-key\n");
        let script = format!(
            "cat public.txt; cat {} 2>/dev/null || echo no-secret; ls -A private | wc -l; \
             cat private/key.txt 2>/dev/null || echo no-key; \
             if touch private/planted 2>/dev/null; then echo PLANTED; else echo refused; fi",
            secret.display()
        );
        let deny = vm.dirs.ws.join("private");
        let out = vm.run(&["--deny", deny.to_str().unwrap()], &["sh", "-c", &script]);
        assert_eq!(out.status.code(), Some(0), "{user:?}: {}", show(&out));
        assert_eq!(
            stdout(&out),
            "public\nno-secret\n0\nno-key\nrefused\n",
            "{user:?}: {}",
            show(&out)
        );
        assert!(!vm.dirs.ws.join("private/planted").exists());
    }
}

// ------------------------------------------------------------- network

const NET_PROBE: &str = r#"
import socket, sys
port = int(sys.argv[1])
def attempt(host, p):
    try:
        socket.create_connection((host, p), timeout=3).close()
        return "connected"
    except OSError as e:
        return type(e).__name__
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
print("guest-loopback", attempt("127.0.0.1", srv.getsockname()[1]))
print("host-loopback", attempt("127.0.0.1", port))
print("host-alias", attempt("10.0.2.2", port))
print("interfaces", " ".join(sorted(n for _, n in socket.if_nameindex())))
"#;

#[test]
fn network_none_gives_no_route_to_the_host() {
    for user in users() {
        let vm = Vm::new("netnone", user);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port().to_string();
        let out = vm.run(&[], &["python3", "-c", NET_PROBE, &port]);
        assert_eq!(out.status.code(), Some(0), "{user:?}: {}", show(&out));
        let text = stdout(&out);
        assert!(
            text.contains("guest-loopback connected"),
            "the twin: {text}"
        );
        assert!(
            text.contains("host-loopback ConnectionRefusedError"),
            "{text}"
        );
        assert!(!text.contains("host-alias connected"), "{text}");
        assert!(text.contains("interfaces lo\n"), "no NIC at all: {text}");
        assert!(listener.accept().is_err(), "the host listener was reached");
    }
}

#[test]
fn mediated_reaches_a_listed_server_through_the_broker_and_nothing_else() {
    for user in users() {
        let vm = Vm::new("mediated", user);
        let listed = HttpServer::start();
        let unlisted = HttpServer::start();
        let allow = format!("127.0.0.1:{}", listed.port);
        let script = format!(
            "curl -sS -m 20 http://127.0.0.1:{}/hello; echo; \
             curl -sS -m 20 -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{}/; \
             curl -sS -m 5 --noproxy '*' http://10.0.2.2:{}/ >/dev/null 2>&1 && echo DIRECT || echo no-direct",
            listed.port, unlisted.port, listed.port
        );
        let out = vm.run(&["--allow-net", &allow], &["sh", "-c", &script]);
        assert_eq!(out.status.code(), Some(0), "{user:?}: {}", show(&out));
        assert_eq!(
            stdout(&out),
            "from-host /hello\n403\nno-direct\n",
            "{user:?}: {}",
            show(&out)
        );
        assert!(listed.hits() >= 1);
        assert_eq!(unlisted.hits(), 0, "the unlisted server was reached");
        let r = vm.receipt(&out);
        assert!(r["network"]["admitted"].as_u64().unwrap() >= 1, "{r}");
        assert!(r["network"]["refused"].as_u64().unwrap() >= 1, "{r}");
    }
}

// ------------------------------------------------------------- lifecycle

#[test]
fn the_deadline_stops_the_guest_and_its_qemu() {
    let vm = Vm::new("timeout", User::Caller);
    let mut cmd = vm.command(&["--timeout", "4s"], &["sleep", "100"]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let qemu = qemu_under(child.id());
    let out = child.wait_with_output().unwrap();
    assert!(
        matches!(out.status.code(), Some(143) | Some(137)),
        "{}",
        show(&out)
    );
    assert_eq!(vm.receipt(&out)["outcome"]["timedOut"], true);
    assert_gone(qemu, "after the deadline");
}

/// `kill -9` of the CLI while the guest boots, and of the supervisor once
/// the workload runs: no QEMU is left either way.
#[test]
fn kill_9_of_the_cli_or_the_supervisor_leaves_no_qemu() {
    for user in users() {
        for victim in ["cli", "supervisor"] {
            let vm = Vm::new("kill9", user);
            let mut cmd = vm.command(&[], &["sh", "-c", "echo started > started.txt; sleep 100"]);
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            let mut child = cmd.spawn().unwrap();
            let qemu = qemu_under(child.id());
            let pid = if victim == "cli" {
                // setpriv execs terra: the child is the CLI itself.
                child.id()
            } else {
                let started = vm.dirs.ws.join("started.txt");
                common::wait_until(|| started.exists(), "the workload to start");
                descendants(child.id())
                    .into_iter()
                    .find(|p| {
                        fs::read_to_string(format!("/proc/{p}/cmdline"))
                            .is_ok_and(|c| c.contains("__supervisor"))
                    })
                    .expect("the supervisor")
            };
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
            assert_gone(qemu, &format!("{user:?}: kill -9 of the {victim}"));
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A guest that does not report on its control channel in time is killed
/// and the run refused: no boot is that fast, so a 50 ms deadline trips it.
#[test]
fn a_guest_that_does_not_report_in_time_is_killed_and_the_run_refused() {
    let vm = Vm::new("ready", User::Caller);
    let mut cmd = vm.command(&["--vm-ready-timeout", "50ms"], &["true"]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let qemu = qemu_under(child.id());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("did not report on its control channel within 50 ms"),
        "{err}"
    );
    assert_eq!(vm.receipt(&out)["activation"], "not run");
    assert_gone(qemu, "after the ready deadline");
}

/// The guest's roles refuse on the host: `__vm_guest` is only PID 1 of the
/// guest kernel on its initramfs, `__vm_forward` only QEMU's child on a socket.
#[test]
fn the_guest_roles_refuse_to_run_on_the_host() {
    for (role, args, words) in [
        ("__vm_guest", vec![], "does nothing elsewhere"),
        ("__vm_forward", vec!["127.0.0.1:3128"], "not a socket"),
        ("__vm_forward", vec!["192.0.2.1:80"], "loopback"),
    ] {
        let out = Command::new(terra_bin(User::Caller))
            .arg(role)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{role}: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(words),
            "{role}: {}",
            show(&out)
        );
    }
}

// ------------------------------------------------------------- refusals

#[test]
fn a_kernel_that_cannot_boot_is_refused_with_advice() {
    let vm = Vm::new("nokernel", User::Caller);
    let out = vm.run(&["--kernel", "/nonexistent/vmlinuz"], &["true"]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/vmlinuz") && err.contains("--kernel"),
        "{err}"
    );
    let not_kernel = vm.dirs.write("not-a-kernel", "just text\n");
    let out = vm.run(&["--kernel", not_kernel.to_str().unwrap()], &["true"]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a bzImage"),
        "{}",
        show(&out)
    );
}

#[test]
fn a_profile_names_the_kernel_and_the_command_line_wins() {
    let vm = Vm::new("profile", User::Caller);
    let profiles = vm.dirs.home.join(".config/terra/profiles");
    fs::create_dir_all(&profiles).unwrap();
    let policy = Command::new(terra_bin(User::Caller))
        .args(["policy", "init"])
        .output()
        .unwrap();
    fs::write(profiles.join("vmp.json"), &policy.stdout).unwrap();
    fs::write(
        profiles.join("vmp.limits.json"),
        r#"{"vmKernel": "/nonexistent/from-profile"}"#,
    )
    .unwrap();
    let out = vm.run(&["--profile", "vmp"], &["true"]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/from-profile"),
        "{}",
        show(&out)
    );
    let out = vm.run(
        &["--profile", "vmp", "--kernel", "/nonexistent/from-flag"],
        &["true"],
    );
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/from-flag") && !err.contains("from-profile"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root: hides /boot in a mount namespace of its own"]
fn a_host_without_a_kernel_is_told_what_to_install() {
    require_root("hiding /boot");
    let vm = Vm::new("noboot", User::Caller);
    let inner = vm.command(&[], &["true"]);
    // The same command, under `unshare -m` with an empty tmpfs on /boot.
    let mut line = vec![inner.get_program().to_string_lossy().into_owned()];
    line.extend(inner.get_args().map(|a| a.to_string_lossy().into_owned()));
    let quoted: Vec<String> = line
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount -t tmpfs none /boot && exec {}",
            quoted.join(" ")
        ));
    vm.dirs.run_env(&mut cmd, PATH);
    cmd.env("XDG_CACHE_HOME", cache_dir(User::Caller));
    let out = run_bounded(cmd);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("apt-get install linux-image-amd64") && err.contains("--kernel"),
        "{err}"
    );
}

#[test]
fn the_dry_run_prints_the_qemu_command_line_without_user_networking_unless_mediated() {
    let vm = Vm::new("dryrun", User::Caller);
    let out = vm.run(&["--dry-run"], &["true"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let text = stdout(&out);
    assert!(
        text.contains("qemu-system") && text.contains("-nic\n    none"),
        "{text}"
    );
    assert!(!text.contains("user,id=net0"), "{text}");
    let out = vm.run(&["--dry-run", "--allow-net", "127.0.0.1:9"], &["true"]);
    let text = stdout(&out);
    assert!(text.contains("user,id=net0,restrict=on"), "{text}");
    assert_eq!(text.matches("guestfwd=").count(), 1, "{text}");
    assert!(is_root() || !text.is_empty());
}
