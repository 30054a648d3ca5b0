//! terra inside the container runtimes CI jobs use: Debian's docker.io
//! (dockerd started here when none answers) with its default seccomp profile
//! and capabilities, rootless podman as an ordinary user, and bubblewrap
//! with `--disable-userns`. In each, `terra run --backend auto` must run and
//! say which backend it took, `terra doctor` must name the same one, and the
//! enforcement probes that backend declares must hold (tests/containers/probe.sh).
//!
//! The images are built here from a few directories and symlinks (no
//! registry pull); the host's /usr is mounted read-only into them (python3,
//! sh, the probes' tools) with the terra binary under test. A runtime that
//! cannot start is skipped with the reason printed; anything after that
//! must pass.
// Linux only: the container runtimes and the landlock backend.
#![cfg(target_os = "linux")]

mod common;

use common::{command_as, is_root, run_bounded, show, terra_bin, User};

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PROBE: &str = include_str!("containers/probe.sh");

/// Debian's docker client (another one may shadow it earlier on PATH).
const DOCKER: &str = "/usr/bin/docker";
const DOCKERD: &str = "/usr/sbin/dockerd";
const PODMAN: &str = "/usr/bin/podman";
const BWRAP: &str = "/usr/bin/bwrap";
/// The ordinary user rootless podman runs as when the tests run as root
/// (scripts/bootstrap.sh creates it with /etc/subuid and /etc/subgid ranges).
const PODMAN_USER: &str = "terra-podman";

fn skip(what: &str, why: &str) {
    eprintln!("SKIPPED {what}: {why}");
}

/// What one probe.sh run printed.
struct Probed {
    results: HashMap<String, i32>,
    facts: HashMap<String, String>,
    stderr: Vec<String>,
    out: String,
}

impl Probed {
    fn parse(out: &Output) -> Probed {
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut p = Probed {
            results: HashMap::new(),
            facts: HashMap::new(),
            stderr: Vec::new(),
            out: show(out),
        };
        for line in text.lines() {
            let mut w = line.splitn(3, ' ');
            match (w.next(), w.next(), w.next()) {
                (Some("result"), Some(k), Some(v)) => {
                    p.results.insert(k.into(), v.trim().parse().unwrap_or(-1));
                }
                (Some("fact"), Some(k), Some(v)) => {
                    p.facts.insert(k.into(), v.trim().into());
                }
                (Some("stderr"), _, _) => p.stderr.push(line["stderr ".len()..].into()),
                _ => {}
            }
        }
        p
    }

    fn result(&self, name: &str) -> i32 {
        *self
            .results
            .get(name)
            .unwrap_or_else(|| panic!("no result {name}:\n{}", self.out))
    }

    fn fact(&self, name: &str) -> Option<&str> {
        self.facts.get(name).map(String::as_str)
    }

    /// The checks every environment shares; returns the backend auto took.
    fn check(&self, env: &str) -> String {
        let o = &self.out;
        assert_eq!(self.result("run"), 0, "{env}: terra run failed\n{o}");
        assert_eq!(self.fact("ran"), Some("yes"), "{env}\n{o}");
        let backend = self.fact("backend").unwrap_or("").to_string();
        assert!(
            backend == "linux" || backend == "landlock",
            "{env}: {backend}\n{o}"
        );
        assert_eq!(self.fact("activation"), Some("passed"), "{env}\n{o}");
        // doctor decides as run does.
        assert_eq!(self.result("doctor"), 0, "{env}\n{o}");
        assert_eq!(
            self.fact("doctor-auto"),
            Some(backend.as_str()),
            "{env}: doctor disagrees with run\n{o}"
        );
        // auto says on stderr what it took when it is not linux, and what
        // that backend cannot confine.
        if backend == "landlock" {
            let said = self.stderr.join("\n");
            assert!(
                said.contains("backend landlock (auto: user namespaces are unavailable")
                    && said.contains("It cannot confine: it sees the host's process list"),
                "{env}\n{o}"
            );
        }
        // fs-read and fs-write (both backends).
        assert_ne!(self.result("read-outside"), 0, "{env}: read escaped\n{o}");
        assert_eq!(self.result("read-granted"), 0, "{env}\n{o}");
        assert_ne!(self.result("write-outside"), 0, "{env}: write escaped\n{o}");
        assert_eq!(self.fact("write-outside-landed"), None, "{env}\n{o}");
        assert_eq!(self.result("write-workspace"), 0, "{env}\n{o}");
        assert_eq!(
            self.fact("write-workspace-landed"),
            Some("yes"),
            "{env}\n{o}"
        );
        // network-none: the listener answers outside the box only.
        assert_eq!(self.result("connect-outside-terra"), 0, "{env}\n{o}");
        assert_ne!(
            self.result("connect-in-box"),
            0,
            "{env}: connect escaped\n{o}"
        );
        // process-tree.
        assert_eq!(self.result("daemon-run"), 0, "{env}\n{o}");
        assert_eq!(
            self.fact("daemon-survived"),
            None,
            "{env}: a daemon outlived the run\n{o}"
        );
        match backend.as_str() {
            "linux" => {
                assert_ne!(self.result("read-denied"), 0, "{env}: deny escaped\n{o}");
                assert_eq!(self.result("read-undenied"), 0, "{env}\n{o}");
                assert_eq!(
                    self.result("mediated"),
                    0,
                    "{env}: the broker did not start\n{o}"
                );
            }
            _ => {
                assert_eq!(self.result("mediated"), 125, "{env}\n{o}");
                assert_eq!(
                    self.fact("mediated-says-instead"),
                    Some("yes"),
                    "{env}\n{o}"
                );
            }
        }
        backend
    }
}

/// An image root: merged-/usr symlinks (the host's /usr is mounted over
/// /usr), the probes' directories, a secret outside every grant. Written
/// as a tar file for `docker import` / `podman import`.
fn image_tar(dir: &Path) -> PathBuf {
    let root = dir.join("rootfs");
    let _ = fs::remove_dir_all(&root);
    for d in [
        "usr",
        "etc",
        "tmp",
        "proc",
        "sys",
        "dev",
        "root",
        "w",
        "srv/secret",
        "srv/out",
    ] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    for (link, to) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        std::os::unix::fs::symlink(to, root.join(link)).unwrap();
    }
    for f in ["passwd", "group"] {
        fs::copy(Path::new("/etc").join(f), root.join("etc").join(f)).unwrap();
    }
    fs::write(root.join("srv/secret/token"), "s3cret\n").unwrap();
    for d in ["tmp", "w", "srv/out"] {
        fs::set_permissions(root.join(d), fs::Permissions::from_mode(0o1777)).unwrap();
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    let tar = dir.join("rootfs.tar");
    let out = run_bounded({
        let mut c = Command::new("tar");
        c.arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(&tar)
            .args(["--owner=0", "--group=0", "."]);
        c
    });
    assert!(out.status.success(), "{}", show(&out));
    fs::set_permissions(&tar, fs::Permissions::from_mode(0o644)).unwrap();
    tar
}

/// A fresh directory world-readable (the rootless user reads the image tar).
fn test_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(format!(
        "/tmp/terra-containers-{}-{name}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// The environment probe.sh reads inside an image built by [`image_tar`].
const IMAGE_ENV: [(&str, &str); 4] = [
    ("TERRA", "/terra"),
    ("BASE", "/w"),
    ("SECRET", "/srv/secret/token"),
    ("OUT", "/srv/out"),
];

// ------------------------------------------------------------------ docker

/// A dockerd this test started (stopped on drop), or None when one answers
/// at the default socket already.
struct Dockerd {
    child: Option<Child>,
    host: String,
    dir: PathBuf,
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            // SIGTERM: dockerd stops its containerd and containers.
            // SAFETY: kill() on the pid of our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(20) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn docker(d: &Dockerd) -> Command {
    let mut c = Command::new(DOCKER);
    c.args(["-H", &d.host]);
    c
}

fn answers(host: &str) -> bool {
    Command::new(DOCKER)
        .args(["-H", host, "info", "--format", "{{.ServerVersion}}"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The daemon to use: the running one, else one started here with its own
/// socket, data and exec roots (no bridge, no iptables: the containers run
/// with `--network none`). Err: why none can start.
fn start_dockerd() -> Result<Dockerd, String> {
    if !Path::new(DOCKER).exists() || !Path::new(DOCKERD).exists() {
        return Err(format!(
            "{DOCKER} or {DOCKERD} is missing (scripts/bootstrap.sh installs docker.io)"
        ));
    }
    let default = "unix:///var/run/docker.sock".to_string();
    if answers(&default) {
        return Ok(Dockerd {
            child: None,
            host: default,
            dir: PathBuf::new(),
        });
    }
    if !is_root() {
        return Err(
            "no dockerd answers at /var/run/docker.sock and starting one needs root".into(),
        );
    }
    let dir = PathBuf::from(format!(
        "/var/lib/terra-test-dockerd-{}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let host = format!("unix://{}/docker.sock", dir.display());
    let log = fs::File::create(dir.join("dockerd.log")).unwrap();
    let child = Command::new(DOCKERD)
        .arg("--host")
        .arg(&host)
        .arg("--data-root")
        .arg(dir.join("data"))
        .arg("--exec-root")
        .arg(dir.join("exec"))
        .arg("--pidfile")
        .arg(dir.join("dockerd.pid"))
        .args(["--iptables=false", "--ip6tables=false", "--bridge=none"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {DOCKERD}: {e}"))?;
    let mut d = Dockerd {
        child: Some(child),
        host,
        dir,
    };
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        if answers(&d.host) {
            return Ok(d);
        }
        if let Some(Ok(Some(status))) = d.child.as_mut().map(Child::try_wait) {
            let log = fs::read_to_string(d.dir.join("dockerd.log")).unwrap_or_default();
            d.child = None;
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            return Err(format!("dockerd exited ({status}): {}", tail.join(" | ")));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err("dockerd did not answer within 60 s".into())
}

/// An image imported into a docker-compatible runtime (docker, podman):
/// `cli` makes the runtime's command line. Removed again on drop.
struct Image<'a> {
    cli: &'a dyn Fn() -> Command,
    name: String,
    dir: PathBuf,
}

impl<'a> Image<'a> {
    /// Imports [`image_tar`]'s root as `name`: Err with the runtime's
    /// output when it cannot.
    fn import(cli: &'a dyn Fn() -> Command, what: &str, name: String) -> Result<Image<'a>, String> {
        let dir = test_dir(what);
        let tar = image_tar(&dir);
        let mut c = cli();
        c.arg("import").arg(&tar).arg(&name);
        let out = run_bounded(c);
        let image = Image { cli, name, dir };
        if out.status.success() {
            Ok(image)
        } else {
            Err(format!("{what} import failed: {}", show(&out)))
        }
    }

    /// probe.sh in a container of this image: `user` for `--user`, `opts`
    /// the runtime options under test.
    fn probe(&self, user: Option<&str>, opts: &[&str], terra: &Path) -> Probed {
        let mut c = (self.cli)();
        c.args(["run", "--rm", "--network", "none"]);
        if let Some(u) = user {
            c.args(["--user", u]);
        }
        c.args(opts);
        c.args(["-v", "/usr:/usr:ro", "-v"]);
        c.arg(format!("{}:/terra:ro", terra.display()));
        for (k, v) in IMAGE_ENV {
            c.args(["-e", &format!("{k}={v}")]);
        }
        c.args([self.name.as_str(), "sh", "-c", PROBE]);
        Probed::parse(&run_bounded(c))
    }
}

impl Drop for Image<'_> {
    fn drop(&mut self) {
        let mut c = (self.cli)();
        c.args(["rmi", &self.name]);
        let _ = run_bounded(c);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn docker_default_profile_auto_runs_and_enforces() {
    let t0 = Instant::now();
    let d = match start_dockerd() {
        Ok(d) => d,
        Err(why) => return skip("docker", &why),
    };
    let cli = || docker(&d);
    let image = Image::import(
        &cli,
        "docker",
        format!("terra-test-root:{}", std::process::id()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let terra = terra_bin(User::Nobody);

    // The default seccomp profile and capabilities, as root and as 65534.
    for user in [None, Some("65534:65534")] {
        let p = image.probe(user, &[], &terra);
        let env = format!("docker default, user {user:?}");
        assert_eq!(p.check(&env), "landlock", "{env}: {}", p.out);
    }
    // Without the filter but with /proc masked the procfs mount fails.
    let p = image.probe(None, &["--security-opt", "seccomp=unconfined"], &terra);
    assert_eq!(
        p.check("docker seccomp=unconfined"),
        "landlock",
        "{}",
        p.out
    );
    assert!(
        p.stderr.join("\n").contains("container-proc-masked"),
        "{}",
        p.out
    );
    // Where the runtime lets terra make its namespaces, auto takes linux
    // and mediated networking starts (docs/ci.md).
    // (apparmor=unconfined: where AppArmor confines containers, docker-default
    // refuses the box's mounts.)
    let unconfined = [
        "--security-opt",
        "seccomp=unconfined",
        "--security-opt",
        "systempaths=unconfined",
        "--security-opt",
        "apparmor=unconfined",
    ];
    let p = image.probe(None, &unconfined, &terra);
    assert_eq!(p.check("docker unconfined"), "linux", "{}", p.out);
    // A privileged container (what some CI runners offer) is the host's
    // initial user namespace with a container marker: the probe decides.
    let p = image.probe(Some("65534:65534"), &["--privileged"], &terra);
    assert_eq!(p.check("docker privileged, 65534"), "linux", "{}", p.out);

    drop(image);
    drop(d);
    eprintln!("docker: {:.1} s", t0.elapsed().as_secs_f64());
}

// ------------------------------------------------------------------ podman

/// podman as an ordinary user: the caller when not root, else
/// [`PODMAN_USER`] through setpriv with a clean environment.
fn podman(home: &Path) -> Command {
    if !is_root() {
        return Command::new(PODMAN);
    }
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={PODMAN_USER}"),
        &format!("--regid={PODMAN_USER}"),
        "--init-groups",
        "env",
        "-i",
    ]);
    c.arg(format!("HOME={}", home.display()));
    c.args(["PATH=/usr/bin:/bin", &format!("USER={PODMAN_USER}"), PODMAN]);
    c.current_dir(home);
    c
}

/// The rootless user's home, or why podman cannot run rootless here.
fn podman_home() -> Result<PathBuf, String> {
    if !Path::new(PODMAN).exists() {
        return Err(format!(
            "{PODMAN} is missing (scripts/bootstrap.sh installs podman)"
        ));
    }
    if !Path::new("/usr/bin/newuidmap").exists() {
        return Err("newuidmap is missing (scripts/bootstrap.sh installs uidmap)".into());
    }
    if !is_root() {
        return std::env::var_os("HOME")
            .map(PathBuf::from)
            .ok_or_else(|| "HOME is not set".to_string());
    }
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    let home = passwd
        .lines()
        .find(|l| l.starts_with(&format!("{PODMAN_USER}:")))
        .and_then(|l| l.split(':').nth(5))
        .map(PathBuf::from)
        .ok_or_else(|| {
            format!("the user {PODMAN_USER} is missing (scripts/bootstrap.sh creates it)")
        })?;
    let subuid = fs::read_to_string("/etc/subuid").unwrap_or_default();
    if !subuid
        .lines()
        .any(|l| l.starts_with(&format!("{PODMAN_USER}:")))
    {
        return Err(format!(
            "/etc/subuid has no range for {PODMAN_USER} (scripts/bootstrap.sh adds it)"
        ));
    }
    Ok(home)
}

fn podman_args(c: &mut Command) {
    // No systemd here: cgroupfs and a file event log.
    c.args(["--cgroup-manager=cgroupfs", "--events-backend=file"]);
}

#[test]
fn rootless_podman_auto_runs_and_enforces() {
    let t0 = Instant::now();
    let home = match podman_home() {
        Ok(h) => h,
        Err(why) => return skip("podman", &why),
    };
    let cli = || {
        let mut c = podman(&home);
        podman_args(&mut c);
        c
    };
    let image = match Image::import(
        &cli,
        "podman",
        format!("localhost/terra-test-root:{}", std::process::id()),
    ) {
        Ok(i) => i,
        // The runtime cannot start (its storage or user namespace).
        Err(why) => return skip("podman", &why),
    };
    let terra = terra_bin(User::Nobody);
    let run = |opts: &[&str]| image.probe(None, opts, &terra);
    // The default profile: rootless, as root inside the container (the
    // podman user outside) and as 65534 (a subordinate id).
    for user in [None, Some("65534:65534")] {
        let p = image.probe(user, &[], &terra);
        let env = format!("podman rootless default, user {user:?}");
        assert_eq!(p.check(&env), "landlock", "{env}: {}", p.out);
    }
    // Unmasked /proc and no filter: the linux backend (docs/ci.md).
    let p = run(&[
        "--security-opt",
        "seccomp=unconfined",
        "--security-opt",
        "unmask=ALL",
        "--security-opt",
        "apparmor=unconfined",
    ]);
    assert_eq!(p.check("podman rootless unconfined"), "linux", "{}", p.out);

    drop(image);
    eprintln!("podman: {:.1} s", t0.elapsed().as_secs_f64());
}

// -------------------------------------------------------------- bubblewrap

/// `bwrap --unshare-user --disable-userns`: a nested user namespace whose
/// limit is reached (unshare fails with ENOSPC); auto must take landlock.
#[test]
fn bubblewrap_without_user_namespaces_auto_takes_landlock() {
    if !Path::new(BWRAP).exists() {
        return skip(
            "bubblewrap",
            &format!("{BWRAP} is missing (scripts/bootstrap.sh installs bubblewrap)"),
        );
    }
    let dir = test_dir("bwrap");
    let base = dir.join("base");
    let secret = dir.join("secret");
    let out_dir = dir.join("out");
    for d in [&base, &secret, &out_dir] {
        fs::create_dir_all(d).unwrap();
        fs::set_permissions(d, fs::Permissions::from_mode(0o1777)).unwrap();
    }
    fs::write(secret.join("token"), "s3cret\n").unwrap();
    // The host's tree in a user namespace that may not make another.
    let bwrap = |user: User| {
        let mut c = command_as(user, None, &[], Path::new(BWRAP));
        c.args([
            "--unshare-user",
            "--disable-userns",
            "--dev-bind",
            "/",
            "/",
            "--",
        ]);
        c
    };
    for user in common::users() {
        let terra = terra_bin(user);
        let mut c = bwrap(user);
        c.args(["sh", "-c", PROBE]);
        c.env("TERRA", &terra)
            .env("BASE", &base)
            .env("SECRET", secret.join("token"))
            .env("OUT", &out_dir);
        let out = run_bounded(c);
        let p = Probed::parse(&out);
        let env = format!("bwrap --disable-userns as {user:?}");
        if user == User::Caller && p.results.is_empty() {
            let _ = fs::remove_dir_all(&dir);
            return skip("bubblewrap", &format!("bwrap cannot start: {}", show(&out)));
        }
        assert_eq!(p.check(&env), "landlock", "{}", p.out);
        let said = p.stderr.join("\n");
        assert!(
            said.contains("userns-limit-reached") && said.contains("ENOSPC"),
            "{env}: {}",
            p.out
        );
        // Named, the linux backend is refused, never swapped, and the
        // refusal leads to the doctor and to auto.
        let mut c = bwrap(user);
        c.arg(&terra)
            .args(["run", "-q", "--backend", "linux", "--", "true"]);
        c.current_dir(&base);
        let out = run_bounded(c);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{env}: {}", show(&out));
        assert!(
            err.contains("ENOSPC") && err.contains("terra doctor"),
            "{env}: {err}"
        );
    }
    let _ = fs::remove_dir_all(&dir);
}
