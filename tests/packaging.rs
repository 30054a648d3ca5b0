//! `scripts/package.sh deb|dist` end to end, on the test suite's own build
//! (TERRA_BIN): the package is built into a temp dir (OUT_DIR), unpacked,
//! its files checked where Debian and the tarball layout want them, and the
//! unpacked binary runs a box. Also: the same inputs give the same bytes,
//! and a failed packaging leaves no package behind.
// The packages are Linux ones (dpkg-deb, a Linux binary).
#![cfg(target_os = "linux")]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

use common::{run_bounded, show, RunDirs, User};

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The triple the tarball is named after: the test build is a glibc one.
const TARGET: &str = "x86_64-unknown-linux-gnu";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `scripts/package.sh KIND` on the test build, into `out`.
fn package(kind: &str, bin: &Path, out: &Path) -> Output {
    let mut c = Command::new("bash");
    c.arg(repo().join("scripts/package.sh"))
        .arg(kind)
        .env("TERRA_BIN", bin)
        .env("OUT_DIR", out)
        .env("TARGET", TARGET)
        .current_dir(repo());
    run_bounded(c)
}

/// Runs `cmd`, fails the test with its output unless it succeeds.
fn ok(cmd: Command) -> String {
    let desc = format!("{cmd:?}");
    let out = run_bounded(cmd);
    assert!(out.status.success(), "{desc}: {}", show(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn cmd(program: &str, args: &[&str]) -> Command {
    let mut c = Command::new(program);
    c.args(args);
    c
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_terra"))
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The unpacked `terra` prints its version and runs `true` in the default box.
fn assert_runs(terra: &Path, dirs: &RunDirs) {
    let v = ok(cmd(terra.to_str().unwrap(), &["--version"]));
    assert_eq!(v.trim(), format!("terra {VERSION}"));
    let mut c = Command::new(terra);
    c.args(["run", "--", "true"]);
    dirs.run_env(&mut c, "/usr/bin:/bin");
    let out = run_bounded(c);
    assert!(
        out.status.success(),
        "{terra:?} run -- true: {}",
        show(&out)
    );
}

fn is_gzip(p: &Path) -> bool {
    fs::read(p).is_ok_and(|b| b.starts_with(&[0x1f, 0x8b]))
}

/// A dpkg-deb --info field's value.
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.trim_start().strip_prefix(&format!("{name}: ")))
}

#[test]
fn deb_installs_its_files_where_debian_wants_them_and_runs() {
    let dirs = RunDirs::new("terra-pkg", "deb", User::Caller);
    let out = dirs.root.join("out");
    let built = package("deb", &bin(), &out);
    assert!(built.status.success(), "package.sh deb: {}", show(&built));
    let arch = ok(cmd("dpkg", &["--print-architecture"]));
    let deb = out.join(format!("terra_{VERSION}-1_{}.deb", arch.trim()));
    assert_eq!(
        String::from_utf8_lossy(&built.stdout).trim(),
        deb.to_str().unwrap()
    );
    assert_eq!(files_in(&out), [deb.file_name().unwrap().to_string_lossy()]);

    let info = ok(cmd("dpkg-deb", &["--info", deb.to_str().unwrap()]));
    assert_eq!(field(&info, "Package"), Some("terra"), "{info}");
    assert_eq!(
        field(&info, "Version"),
        Some(format!("{VERSION}-1").as_str())
    );
    assert_eq!(field(&info, "Architecture"), Some(arch.trim()));
    assert!(
        field(&info, "Maintainer").is_some_and(|m| m.contains('@')),
        "{info}"
    );
    assert!(field(&info, "Installed-Size").is_some_and(|s| s.parse::<u64>().is_ok()));
    assert!(field(&info, "Description").is_some(), "{info}");
    // The test build links glibc dynamically: the package says so.
    assert!(
        field(&info, "Depends").is_some_and(|d| d.contains("libc6")),
        "{info}"
    );
    let conffiles = ok(cmd(
        "dpkg-deb",
        &["--info", deb.to_str().unwrap(), "conffiles"],
    ));
    assert_eq!(conffiles.trim(), "/etc/apparmor.d/terra");
    // md5sums names every shipped file but the conffile (dpkg keeps its own).
    let md5sums = ok(cmd(
        "dpkg-deb",
        &["--info", deb.to_str().unwrap(), "md5sums"],
    ));
    assert!(
        md5sums.lines().any(|l| l.ends_with("  usr/bin/terra")),
        "{md5sums}"
    );
    assert!(!md5sums.contains("etc/apparmor.d"), "{md5sums}");
    let contents = ok(cmd("dpkg-deb", &["--contents", deb.to_str().unwrap()]));
    assert!(
        contents.lines().all(|l| l.contains(" root/root ")),
        "every entry is root:root: {contents}"
    );

    let root = dirs.root.join("root");
    ok(cmd(
        "dpkg-deb",
        &["-x", deb.to_str().unwrap(), root.to_str().unwrap()],
    ));
    for f in [
        "usr/bin/terra",
        "usr/share/man/man1/terra.1.gz",
        "usr/share/bash-completion/completions/terra",
        "usr/share/zsh/vendor-completions/_terra",
        "usr/share/fish/vendor_completions.d/terra.fish",
        "etc/apparmor.d/terra",
        "usr/share/doc/terra/copyright",
        "usr/share/doc/terra/changelog.Debian.gz",
        "usr/share/lintian/overrides/terra",
    ] {
        assert!(root.join(f).is_file(), "{f} is missing from the .deb");
    }
    assert!(is_gzip(&root.join("usr/share/man/man1/terra.1.gz")));
    assert!(is_gzip(
        &root.join("usr/share/doc/terra/changelog.Debian.gz")
    ));
    let profile = fs::read_to_string(root.join("etc/apparmor.d/terra")).unwrap();
    assert_eq!(
        profile,
        fs::read_to_string(repo().join("packaging/apparmor/terra")).unwrap()
    );
    let copyright = fs::read_to_string(root.join("usr/share/doc/terra/copyright")).unwrap();
    assert!(copyright.contains("License: Apache-2.0"), "{copyright}");
    assert_runs(&root.join("usr/bin/terra"), &dirs);
    install_and_purge_in_a_scratch_root(&deb, &dirs.root.join("scratch"));

    if have("lintian") {
        // Errors fail; warnings and notes are printed only.
        let mut c = Command::new("lintian");
        c.args(["--tag-display-limit", "0", deb.to_str().unwrap()]);
        let l = run_bounded(c);
        let text = String::from_utf8_lossy(&l.stdout);
        eprintln!("lintian:\n{text}");
        assert!(
            !text.lines().any(|line| line.starts_with("E: ")),
            "lintian reports errors: {}",
            show(&l)
        );
    } else {
        eprintln!("lintian is not installed (scripts/bootstrap.sh installs it): not run");
    }
}

/// dpkg installs the package into an empty root (its maintainer scripts run
/// outside a chroot, and leave this kernel's profiles alone), the installed
/// binary runs, and a purge removes every file, the conffile included.
fn install_and_purge_in_a_scratch_root(deb: &Path, root: &Path) {
    fs::create_dir_all(root.join("var/lib/dpkg/updates")).unwrap();
    fs::create_dir_all(root.join("var/lib/dpkg/info")).unwrap();
    fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    let root_arg = format!("--root={}", root.display());
    let dpkg = |args: &[&str]| {
        let mut c = cmd(
            "dpkg",
            &[
                &root_arg,
                "--force-script-chrootless",
                "--force-depends",
                "--log=/dev/null",
            ],
        );
        c.args(args);
        ok(c)
    };
    dpkg(&["--install", deb.to_str().unwrap()]);
    assert!(root.join("etc/apparmor.d/terra").is_file());
    let v = ok(cmd(
        root.join("usr/bin/terra").to_str().unwrap(),
        &["--version"],
    ));
    assert_eq!(v.trim(), format!("terra {VERSION}"));
    dpkg(&["--purge", "terra"]);
    for gone in [
        "usr/bin/terra",
        "etc/apparmor.d/terra",
        "usr/share/doc/terra/copyright",
    ] {
        assert!(!root.join(gone).exists(), "{gone} is left after purge");
    }
}

#[test]
fn dist_tarball_verifies_its_checksums_and_runs() {
    let dirs = RunDirs::new("terra-pkg", "dist", User::Caller);
    let out = dirs.root.join("out");
    let built = package("dist", &bin(), &out);
    assert!(built.status.success(), "package.sh dist: {}", show(&built));
    let name = format!("terra-{VERSION}-{TARGET}");
    let tarball = format!("{name}.tar.gz");
    assert_eq!(files_in(&out), ["SHA256SUMS".to_string(), tarball.clone()]);

    let mut check = cmd("sha256sum", &["-c", "SHA256SUMS"]);
    check.current_dir(&out);
    ok(check);

    let unpacked = dirs.root.join("unpacked");
    fs::create_dir_all(&unpacked).unwrap();
    ok(cmd(
        "tar",
        &[
            "-C",
            unpacked.to_str().unwrap(),
            "-xzf",
            out.join(&tarball).to_str().unwrap(),
        ],
    ));
    let top = unpacked.join(&name);
    let mut check = cmd("sha256sum", &["--strict", "-c", "SHA256SUMS"]);
    check.current_dir(&top);
    let listed = ok(check);
    let mut want = vec![
        "LICENSE",
        "README.md",
        "bin/terra",
        "share/bash-completion/completions/terra",
        "share/fish/vendor_completions.d/terra.fish",
        "share/man/man1/terra.1",
        "share/zsh/site-functions/_terra",
    ];
    want.sort();
    let mut got: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.strip_suffix(": OK"))
        .collect();
    got.sort();
    assert_eq!(got, want, "SHA256SUMS lists the tarball's files");
    let man = fs::read_to_string(top.join("share/man/man1/terra.1")).unwrap();
    assert!(man.contains("\n.TH terra 1"), "a roff man page: {man}");
    assert_runs(&top.join("bin/terra"), &dirs);

    let listing = ok(cmd("tar", &["-tvzf", out.join(&tarball).to_str().unwrap()]));
    assert!(
        listing.lines().all(|l| l.contains(" 0/0 ")),
        "every entry is owned by 0:0: {listing}"
    );
}

/// Two runs from the same commit give the same bytes (what a rebuilt package
/// is checked against).
#[test]
fn packages_are_reproducible() {
    let dirs = RunDirs::new("terra-pkg", "repro", User::Caller);
    let (a, b) = (dirs.root.join("a"), dirs.root.join("b"));
    for kind in ["deb", "dist"] {
        for out in [&a, &b] {
            let built = package(kind, &bin(), out);
            assert!(
                built.status.success(),
                "package.sh {kind}: {}",
                show(&built)
            );
        }
    }
    let names = files_in(&a);
    assert_eq!(
        names.len(),
        3,
        "a .deb, a tarball and SHA256SUMS: {names:?}"
    );
    assert_eq!(names, files_in(&b));
    for n in &names {
        assert!(
            fs::read(a.join(n)).unwrap() == fs::read(b.join(n)).unwrap(),
            "{n} differs between two runs"
        );
    }
}

/// A packaging that fails part way (TERRA_BIN is not terra: a script that
/// exits 3)
/// exits non-zero and leaves nothing in OUT_DIR; a missing binary too.
#[test]
fn a_failed_packaging_leaves_no_package() {
    let dirs = RunDirs::new("terra-pkg", "fail", User::Caller);
    let broken = dirs.write("broken-terra", "#!/bin/sh\nexit 3\n");
    fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for kind in ["deb", "dist"] {
        for bin in [broken.clone(), dirs.root.join("no-such-terra")] {
            let out = dirs.root.join(format!("out-{kind}"));
            fs::create_dir_all(&out).unwrap();
            let built = package(kind, &bin, &out);
            assert!(
                !built.status.success(),
                "package.sh {kind} with {bin:?} succeeded: {}",
                show(&built)
            );
            assert_eq!(
                files_in(&out),
                Vec::<String>::new(),
                "{kind} left files behind"
            );
        }
    }
}

/// The profile parses (apparmor_parser -Q: no kernel needed). A parser older
/// than AppArmor 4 knows neither abi/4.0 nor `userns,`: then the rest of the
/// profile is checked with abi/3.0, and the test says so.
#[test]
fn the_apparmor_profile_parses() {
    let path = repo().join("packaging/apparmor/terra");
    let text = fs::read_to_string(&path).unwrap();
    for needed in [
        "abi <abi/4.0>,",
        "include <tunables/global>",
        "profile terra /{usr/,usr/local/}bin/terra flags=(unconfined) {",
        "  userns,",
    ] {
        assert!(
            text.lines().any(|l| l == needed),
            "{needed:?} missing from {path:?}"
        );
    }
    if !have("apparmor_parser") {
        eprintln!(
            "apparmor_parser is not installed (scripts/bootstrap.sh installs it): not parsed"
        );
        return;
    }
    let dirs = RunDirs::new("terra-pkg", "aa", User::Caller);
    let to_parse = if Path::new("/etc/apparmor.d/abi/4.0").exists() {
        path
    } else {
        eprintln!("this apparmor_parser predates AppArmor 4: parsing the profile without `userns,`, as abi 3.0");
        let older = text
            .replace("abi <abi/4.0>,", "abi <abi/3.0>,")
            .replace("  userns,\n", "");
        dirs.write("terra", &older)
    };
    let mut c = Command::new("apparmor_parser");
    c.args(["-Q", "-K"]).arg(&to_parse);
    let out = run_bounded(c);
    assert!(
        out.status.success(),
        "apparmor_parser -Q -K {to_parse:?}: {}",
        show(&out)
    );
}

/// `make deb DIST=DIR` in the repository with `CARGO=false`, so any build
/// step fails the make.
fn make_deb(dist: &Path) -> Output {
    let mut c = Command::new("make");
    c.arg("--no-print-directory")
        .arg("deb")
        .arg(format!("DIST={}", dist.display()))
        .arg("CARGO=false")
        .arg(format!("TARGET={TARGET}"))
        .current_dir(repo());
    run_bounded(c)
}

#[test]
fn make_deb_reuses_an_up_to_date_binary_and_rebuilds_a_stale_one() {
    if !have("dpkg-deb") || !have("make") {
        assert!(
            !terra_test_support::users::in_ci(),
            "make and dpkg-deb are needed on the CI host"
        );
        eprintln!("no make or dpkg-deb here: make deb test skipped");
        return;
    }
    let dirs = RunDirs::new("terra-pkg", "make-deb", User::Caller);
    let dist = dirs.root.join("dist");
    fs::create_dir_all(&dist).unwrap();
    // Newer than every source: reused, cargo (false) never runs.
    fs::copy(bin(), dist.join("terra")).unwrap();
    let o = make_deb(&dist);
    assert!(o.status.success(), "{}", show(&o));
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("build --release"),
        "{}",
        show(&o)
    );
    let debs: Vec<_> = files_in(&dist)
        .into_iter()
        .filter(|f| f.ends_with(".deb"))
        .collect();
    assert_eq!(debs.len(), 1, "{}", show(&o));
    // Twin: older than the sources, the binary is rebuilt first (and the
    // stand-in cargo fails the make).
    let old = Command::new("touch")
        .arg("-d")
        .arg("@1")
        .arg(dist.join("terra"))
        .status()
        .unwrap();
    assert!(old.success());
    let o = make_deb(&dist);
    assert!(!o.status.success(), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("false build --release"),
        "{}",
        show(&o)
    );
}
