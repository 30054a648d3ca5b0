//! Presets never expose credentials: with a fake HOME holding
//! `~/.cargo/credentials.toml` and `~/.cargo/config.toml` (registry
//! tokens), `terra run --preset rust` cannot read them while the real
//! `cargo --version` and `rustc --version` still run; with an nvm node's
//! global `etc/npmrc` holding a token, `--preset node` cannot read it while
//! the node installation stays readable (the landlock backend, which cannot
//! deny inside a grant, refuses that run instead). As the caller and, as
//! root, as 65534 (the fake HOME's files stay root's, readable by 65534, so
//! only the box can be what stops the read).
#![cfg(target_os = "linux")]

mod common;

use common::{show, terra_as, users, RunDirs, User};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SECRET: &str = "cio-SECRET-TOKEN-31337";

/// The caller's rustup installation: (the `rustup` proxy binary, RUSTUP_HOME,
/// the default toolchain's name), or None when there is none.
fn host_rustup() -> Option<(PathBuf, PathBuf, String)> {
    let home = PathBuf::from(std::env::var_os("HOME")?);
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cargo"));
    let rustup_home = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".rustup"));
    let settings = fs::read_to_string(rustup_home.join("settings.toml")).ok()?;
    let toolchain = settings.lines().find_map(|l| {
        l.strip_prefix("default_toolchain = \"")
            .and_then(|t| t.strip_suffix('"'))
            .map(str::to_string)
    })?;
    let rustup = cargo_home.join("bin/rustup");
    rustup.is_file().then_some((rustup, rustup_home, toolchain))
}

/// A RUSTUP_HOME `user` can read: the caller's own; for 65534 (the
/// caller's may sit under a 0700 home) a copy of the default toolchain
/// made of hard links in `root`.
fn rustup_home_for(user: User, root: &Path) -> PathBuf {
    let (_, rustup_home, toolchain) = host_rustup().unwrap();
    if user == User::Caller {
        return rustup_home;
    }
    let copy = root.join("rustup");
    // rustup's proxies want its directories there, as in the original.
    for d in ["toolchains", "update-hashes", "downloads", "tmp"] {
        fs::create_dir_all(copy.join(d)).unwrap();
    }
    fs::copy(
        rustup_home.join("settings.toml"),
        copy.join("settings.toml"),
    )
    .unwrap();
    let o = Command::new("cp")
        .arg("-al")
        .arg(rustup_home.join("toolchains").join(&toolchain))
        .arg(copy.join("toolchains"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "hard-linking the toolchain: {}",
        show(&o)
    );
    copy
}

/// A fake HOME with `~/.cargo/bin` holding the rustup proxies and token
/// files beside it, all root's (world-readable) when made as root.
fn fake_cargo_home(home: &Path) {
    let (rustup, _, _) = host_rustup().unwrap();
    let bin = home.join(".cargo/bin");
    fs::create_dir_all(&bin).unwrap();
    fs::create_dir_all(home.join(".cargo/registry")).unwrap();
    if fs::hard_link(&rustup, bin.join("rustup")).is_err() {
        fs::copy(&rustup, bin.join("rustup")).unwrap();
    }
    for proxy in ["cargo", "rustc"] {
        std::os::unix::fs::symlink("rustup", bin.join(proxy)).unwrap();
    }
    fs::write(
        home.join(".cargo/credentials.toml"),
        format!("[registry]\ntoken = \"{SECRET}\"\n"),
    )
    .unwrap();
    fs::write(
        home.join(".cargo/config.toml"),
        format!("[registries.corp]\ntoken = \"{SECRET}\"\n"),
    )
    .unwrap();
    for d in [home.join(".cargo"), bin] {
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// `terra run [extra] -- sh -c script` as the run's user, with `vars` in
/// terra's environment.
fn run(dirs: &RunDirs, vars: &[(&str, &Path)], extra: &[&str], script: &str) -> Output {
    let mut c = terra_as(dirs.user, &[]);
    dirs.run_env(&mut c, "/usr/local/bin:/usr/bin:/bin");
    for (k, v) in vars {
        c.env(k, v);
    }
    c.args(["run", "-q"])
        .args(extra)
        .args(["--", "/bin/sh", "-c", script]);
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The host has no rustup toolchain: refused under CI, said elsewhere.
fn have_rustup() -> bool {
    if host_rustup().is_some() {
        return true;
    }
    assert!(
        !terra_test_support::users::in_ci(),
        "the preset tests need rustup's cargo on the CI host"
    );
    eprintln!("no rustup installation here: preset tests skipped");
    false
}

#[test]
fn the_rust_preset_cannot_read_cargo_credentials() {
    if !have_rustup() {
        return;
    }
    for user in users() {
        for backend in ["auto", "landlock"] {
            let dirs = RunDirs::new("terra-preset", "cargo-creds", user);
            dirs.chown_to_user(None);
            fake_cargo_home(&dirs.home);
            let rustup_home = rustup_home_for(user, &dirs.root);
            let cargo = dirs.home.join(".cargo");
            let script = format!(
                "for f in {c}/credentials.toml {c}/config.toml; do \
                   if cat \"$f\"; then echo \"READ: $f\"; fi; \
                   if cp \"$f\" /tmp/x; then echo \"COPIED: $f\"; fi; \
                 done; \
                 ls -a {c}; echo DONE",
                c = cargo.display()
            );
            let o = run(
                &dirs,
                &[("RUSTUP_HOME", &rustup_home)],
                &["--backend", backend, "--preset", "rust"],
                &script,
            );
            let out = text(&o);
            assert!(out.contains("DONE"), "{user:?} {backend}: {}", show(&o));
            assert!(
                !out.contains(SECRET) && !out.contains("READ:") && !out.contains("COPIED:"),
                "{user:?} {backend}: {}",
                show(&o)
            );
        }
    }
}

#[test]
fn the_rust_preset_cannot_read_cargo_credentials_twin() {
    if !have_rustup() {
        return;
    }
    for user in users() {
        for backend in ["auto", "landlock"] {
            let dirs = RunDirs::new("terra-preset", "cargo-twin", user);
            dirs.chown_to_user(None);
            fake_cargo_home(&dirs.home);
            let rustup_home = rustup_home_for(user, &dirs.root);
            let bin = dirs.home.join(".cargo/bin");
            let script = format!(
                "{b}/cargo --version && {b}/rustc --version && echo \"CARGO_HOME=$CARGO_HOME\"",
                b = bin.display()
            );
            let o = run(
                &dirs,
                &[("RUSTUP_HOME", &rustup_home)],
                &["--backend", backend, "--preset", "rust"],
                &script,
            );
            let out = String::from_utf8_lossy(&o.stdout);
            assert_eq!(o.status.code(), Some(0), "{user:?} {backend}: {}", show(&o));
            assert!(
                out.contains("cargo ") && out.contains("rustc "),
                "{user:?} {backend}: {}",
                show(&o)
            );
            assert!(
                out.contains(&format!(
                    "CARGO_HOME={}",
                    dirs.home.join(".cargo").display()
                )),
                "{}",
                show(&o)
            );
        }
    }
}

/// A fake nvm installation: one node whose global npmrc holds a token.
fn fake_nvm(home: &Path) -> (PathBuf, PathBuf) {
    let node = home.join(".nvm/versions/node/v20.0.0");
    fs::create_dir_all(node.join("etc")).unwrap();
    fs::create_dir_all(node.join("bin")).unwrap();
    let npmrc = node.join("etc/npmrc");
    fs::write(
        &npmrc,
        format!("//registry.npmjs.org/:_authToken={SECRET}\n"),
    )
    .unwrap();
    let tool = node.join("bin/node");
    fs::write(&tool, "#!/bin/sh\necho node-v20\n").unwrap();
    fs::set_permissions(&tool, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(home.join(".nvm/nvm.sh"), "nvm() { :; }\n").unwrap();
    (npmrc, tool)
}

#[test]
fn the_node_preset_cannot_read_a_global_npmrc() {
    for user in users() {
        let dirs = RunDirs::new("terra-preset", "npmrc", user);
        dirs.chown_to_user(None);
        let (npmrc, _) = fake_nvm(&dirs.home);
        // The linux backend masks a denied file with an empty one: what
        // matters is that no byte of the token reaches the box.
        let script = format!(
            "cat {n}; if grep -q SECRET-TOKEN {n}; then echo READ; fi; \
             cp {n} /tmp/x 2>/dev/null && grep -q SECRET-TOKEN /tmp/x && echo COPIED; echo DONE",
            n = npmrc.display()
        );
        let o = run(&dirs, &[], &["--preset", "node"], &script);
        let out = text(&o);
        assert!(out.contains("DONE"), "{user:?}: {}", show(&o));
        assert!(
            !out.contains(SECRET) && !out.contains("READ") && !out.contains("COPIED"),
            "{user:?}: {}",
            show(&o)
        );
        // The landlock backend cannot deny inside the grant: refused.
        let o = run(
            &dirs,
            &[],
            &["--backend", "landlock", "--preset", "node"],
            &script,
        );
        assert_eq!(o.status.code(), Some(125), "{user:?}: {}", show(&o));
        assert!(!text(&o).contains(SECRET), "{}", show(&o));
        assert!(text(&o).contains("fs-deny"), "{}", show(&o));
    }
}

#[test]
fn the_node_preset_cannot_read_a_global_npmrc_twin() {
    for user in users() {
        let dirs = RunDirs::new("terra-preset", "npmrc-twin", user);
        dirs.chown_to_user(None);
        let (_, tool) = fake_nvm(&dirs.home);
        let script = format!(
            "{t} && cat {h}/.nvm/nvm.sh && echo \"NVM_DIR=$NVM_DIR\"",
            t = tool.display(),
            h = dirs.home.display()
        );
        let o = run(&dirs, &[], &["--preset", "node"], &script);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{user:?}: {}", show(&o));
        assert!(
            out.contains("node-v20") && out.contains("nvm()"),
            "{}",
            show(&o)
        );
        assert!(
            out.contains(&format!("NVM_DIR={}", dirs.home.join(".nvm").display())),
            "{}",
            show(&o)
        );
    }
}

#[test]
fn the_hint_for_a_program_outside_the_grants_never_suggests_a_credential_tree() {
    for user in users() {
        let dirs = RunDirs::new("terra-preset", "hint", user);
        dirs.chown_to_user(None);
        let cargo_bin = dirs.home.join(".cargo/bin");
        let home_bin = dirs.home.join("bin");
        for (bin, name) in [(&cargo_bin, "cargotool"), (&home_bin, "hometool")] {
            fs::create_dir_all(bin).unwrap();
            let tool = bin.join(name);
            fs::write(&tool, "#!/bin/sh\necho ran\n").unwrap();
            fs::set_permissions(&tool, fs::Permissions::from_mode(0o755)).unwrap();
        }
        fs::write(dirs.home.join(".cargo/credentials.toml"), SECRET).unwrap();
        for (bin, name) in [(&cargo_bin, "cargotool"), (&home_bin, "hometool")] {
            let mut c = terra_as(dirs.user, &[]);
            let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
            dirs.run_env(&mut c, &path);
            c.args(["run", "--", name]);
            let o = c.output().unwrap();
            assert_eq!(o.status.code(), Some(127), "{}", show(&o));
            // The rust preset for cargo's bin; elsewhere the program's own
            // directory, never ~/.cargo or ~ (which hold credentials.toml
            // and ~/.ssh).
            let want = if name == "cargotool" {
                "--preset rust grants it".to_string()
            } else {
                format!("--read {} grants it", bin.display())
            };
            assert!(text(&o).contains(&want), "{user:?}: {}", show(&o));
        }
    }
}

#[test]
fn the_rust_preset_writes_its_download_caches_but_not_its_binaries() {
    if !have_rustup() {
        return;
    }
    for user in users() {
        for backend in ["auto", "landlock"] {
            let dirs = RunDirs::new("terra-preset", "cargo-caches", user);
            fake_cargo_home(&dirs.home);
            // Every file the user's own: only the box can refuse a write.
            dirs.chown_to_user(None);
            let c = dirs.home.join(".cargo");
            assert!(!c.join("git").exists());
            let script = format!(
                "echo crate > {c}/registry/fetched && echo WROTE-REGISTRY; \
                 echo checkout > {c}/git/fetched && echo WROTE-GIT; \
                 echo x > {c}/bin/planted && echo WROTE-BIN; \
                 echo x > {c}/config.toml && echo WROTE-CONFIG; echo DONE",
                c = c.display()
            );
            let o = run(
                &dirs,
                &[],
                &["--backend", backend, "--preset", "rust"],
                &script,
            );
            let out = text(&o);
            assert!(out.contains("DONE"), "{user:?} {backend}: {}", show(&o));
            assert!(
                out.contains("WROTE-REGISTRY") && out.contains("WROTE-GIT"),
                "{user:?} {backend}: {}",
                show(&o)
            );
            // (config.toml: the box may have a private /tmp holding this
            // test's HOME path, so only the host's file says it was kept.)
            assert!(
                !out.contains("WROTE-BIN"),
                "{user:?} {backend}: {}",
                show(&o)
            );
            // The missing git cache was made before the run, and the writes
            // reached the host.
            assert_eq!(
                fs::read_to_string(c.join("git/fetched")).unwrap(),
                "checkout\n"
            );
            assert_eq!(
                fs::read_to_string(c.join("registry/fetched")).unwrap(),
                "crate\n"
            );
            assert!(!c.join("bin/planted").exists());
            assert!(!fs::read_to_string(c.join("config.toml"))
                .unwrap()
                .starts_with("x"));
        }
    }
}

#[test]
fn preset_net_admits_the_presets_registry_hosts_and_needs_a_preset() {
    for user in users() {
        let dirs = RunDirs::new("terra-preset", "preset-net", user);
        dirs.chown_to_user(None);
        let mut c = terra_as(dirs.user, &[]);
        dirs.run_env(&mut c, "/usr/bin:/bin");
        c.args([
            "run",
            "--dry-run",
            "--preset",
            "rust",
            "--preset",
            "python",
            "--preset-net",
            "--",
            "true",
        ]);
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let out = text(&o);
        for want in [
            "preset rust: allow-net index.crates.io:443",
            "preset rust: allow-net static.crates.io:443",
            "preset rust: allow-net crates.io:443",
            "preset python: allow-net pypi.org:443",
            "preset python: allow-net files.pythonhosted.org:443",
        ] {
            assert!(out.contains(want), "{want}: {}", show(&o));
        }
        assert!(!out.contains("registry.npmjs.org"), "{}", show(&o));
        // Twin: without --preset-net no host is admitted.
        let mut c = terra_as(dirs.user, &[]);
        dirs.run_env(&mut c, "/usr/bin:/bin");
        c.args(["run", "--dry-run", "--preset", "rust", "--", "true"]);
        let o = c.output().unwrap();
        assert!(!text(&o).contains("allow-net"), "{}", show(&o));
        // Without a preset it has nothing to admit: refused.
        let mut c = terra_as(dirs.user, &[]);
        dirs.run_env(&mut c, "/usr/bin:/bin");
        c.args(["run", "--preset-net", "--", "true"]);
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(125), "{}", show(&o));
        assert!(text(&o).contains("add --preset NAME"), "{}", show(&o));
    }
}

/// Addresses the broker admits only with `,private` (private, shared,
/// loopback, link-local, documentation and benchmark ranges).
fn non_public(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v) => {
            let [a, b, c, _] = v.octets();
            v.is_private()
                || v.is_loopback()
                || v.is_link_local()
                || v.is_unspecified()
                || v.is_broadcast()
                || v.is_multicast()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && c == 2)
                || (a == 198 && b == 51 && c == 100)
                || (a == 203 && b == 0 && c == 113)
                || (a == 198 && (18..20).contains(&b))
                || a >= 240
        }
        std::net::IpAddr::V6(v) => v.is_loopback() || v.is_unspecified(),
    }
}

/// crates.io's index as reachable from here: None (said on stderr) when
/// it is not, else whether it resolves to a non-public address.
fn crates_io_reachable() -> Option<bool> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<_> = match ("index.crates.io", 443).to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => {
            eprintln!(
                "index.crates.io does not resolve here ({e}): the registry fetch test is skipped"
            );
            return None;
        }
    };
    let reached = addrs.iter().any(|a| {
        std::net::TcpStream::connect_timeout(a, std::time::Duration::from_secs(5)).is_ok()
    });
    if !reached {
        eprintln!(
            "index.crates.io:443 ({addrs:?}) is unreachable here: the registry fetch test is skipped"
        );
        return None;
    }
    Some(addrs.iter().any(|a| non_public(a.ip())))
}

/// What a new user does: `cargo build` of a crate with three dependencies,
/// none of them cached, with one preset flag and one network flag.
#[test]
fn cargo_build_fetches_three_crates_with_the_preset_and_preset_net() {
    if !have_rustup() {
        return;
    }
    let Some(private) = crates_io_reachable() else {
        return;
    };
    let net = if private {
        eprintln!("index.crates.io resolves to a non-public address here: --preset-net=private");
        "--preset-net=private"
    } else {
        "--preset-net"
    };
    for user in users() {
        let dirs = RunDirs::new("terra-preset", "cargo-fetch", user);
        fake_cargo_home(&dirs.home);
        dirs.write(
            "ws/Cargo.toml",
            "[package]\nname = \"fetch3\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nitoa = \"1\"\nryu = \"1\"\ncfg-if = \"1\"\n",
        );
        dirs.write(
            "ws/src/main.rs",
            "fn main() { cfg_if::cfg_if! { if #[cfg(unix)] { let mut b = itoa::Buffer::new(); \
             let mut r = ryu::Buffer::new(); println!(\"{} {}\", b.format(3), r.format(0.5)); } } }\n",
        );
        dirs.chown_to_user(None);
        let rustup_home = rustup_home_for(user, &dirs.root);
        let mut c = terra_as(dirs.user, &[]);
        let path = format!("{}:/usr/bin:/bin", dirs.home.join(".cargo/bin").display());
        dirs.run_env(&mut c, &path);
        c.env("RUSTUP_HOME", &rustup_home)
            .args(["run", "--preset", "rust", net, "--timeout", "300s", "--"])
            .args(["cargo", "run", "-q"]);
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{user:?}: {}", show(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            "3 0.5\n",
            "{}",
            show(&o)
        );
        // Fetched into the caller's registry cache, not the box's temp.
        let cache = dirs.home.join(".cargo/registry/cache");
        let n = fs::read_dir(&cache)
            .unwrap()
            .flatten()
            .flat_map(|d| fs::read_dir(d.path()).unwrap().flatten())
            .count();
        assert!(
            n >= 3,
            "{n} crate files in {}: {}",
            cache.display(),
            show(&o)
        );
    }
}

#[test]
fn a_presets_certificate_variable_reaches_the_box_with_its_file() {
    for user in users() {
        for backend in ["auto", "landlock"] {
            let dirs = RunDirs::new("terra-preset", "certs", user);
            let ca = dirs.write("corp/ca.pem", "-----CORP CA-----\n");
            dirs.chown_to_user(None);
            let script = "echo \"PIP_CERT=$PIP_CERT\"; cat \"$0\"";
            let go = |extra: &[&str]| {
                let mut c = terra_as(dirs.user, &[]);
                dirs.run_env(&mut c, "/usr/bin:/bin");
                c.env("PIP_CERT", &ca)
                    .args(["run", "-q", "--backend", backend])
                    .args(extra)
                    .args(["--", "/bin/sh", "-c", script])
                    .arg(&ca);
                c.output().unwrap()
            };
            let o = go(&["--preset", "python"]);
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                out.contains(&format!("PIP_CERT={}", ca.display()))
                    && out.contains("-----CORP CA-----"),
                "{user:?} {backend}: {}",
                show(&o)
            );
            // Twin: without the preset neither the variable nor the file.
            let o = go(&[]);
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                out.contains("PIP_CERT=\n") && !out.contains("CORP CA"),
                "{user:?} {backend}: {}",
                show(&o)
            );
        }
    }
}

/// With network none a first `cargo build` fails at once, naming the host
/// and the flag, instead of retrying for about 11 s.
#[test]
fn cargo_without_a_network_fails_at_once_and_names_the_registry() {
    if !have_rustup() {
        return;
    }
    for user in users() {
        let dirs = RunDirs::new("terra-preset", "cargo-none", user);
        fake_cargo_home(&dirs.home);
        dirs.write(
            "ws/Cargo.toml",
            "[package]\nname = \"none3\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nitoa = \"1\"\n",
        );
        dirs.write("ws/src/main.rs", "fn main() {}\n");
        dirs.chown_to_user(None);
        let rustup_home = rustup_home_for(user, &dirs.root);
        let mut c = terra_as(dirs.user, &[]);
        let path = format!("{}:/usr/bin:/bin", dirs.home.join(".cargo/bin").display());
        dirs.run_env(&mut c, &path);
        c.env("RUSTUP_HOME", &rustup_home)
            .args(["run", "-q", "--preset", "rust", "--", "cargo", "build"]);
        let t0 = std::time::Instant::now();
        let o = c.output().unwrap();
        let took = t0.elapsed();
        assert_ne!(o.status.code(), Some(0), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            err.matches("terra: network none: index.crates.io was asked for")
                .count(),
            1,
            "{user:?}: {}",
            show(&o)
        );
        assert!(
            err.contains("--allow-net index.crates.io:443"),
            "{}",
            show(&o)
        );
        assert!(!err.contains("spurious network error"), "{}", show(&o));
        assert!(
            took < std::time::Duration::from_secs(5),
            "{took:?}: {}",
            show(&o)
        );
    }
}
