//! Real programs in the default box, as the caller and (as root) as uid
//! 65534: the hardening (seccomp, socket families, set-id refusal, masked
//! /proc) must keep ordinary development work running. Each case is a shell
//! script that prints `REAL-OK` only when every step worked; a second run in
//! the same workspace sees what the first one wrote.
// Linux only: runs boxes.
#![cfg(target_os = "linux")]

mod common;

use std::process::Output;

use common::{terra_as, users, RunDirs, User};

/// A workspace (and state, runtime, home, temp) under /tmp, owned by the
/// run's user; removed at drop.
struct Scratch(RunDirs);

impl Scratch {
    fn new(name: &str, user: User) -> Scratch {
        let dirs = RunDirs::new("terra-real", name, user);
        dirs.chown_to_user(None);
        Scratch(dirs)
    }

    fn run(&self, script: &str) -> Output {
        let mut cmd = terra_as(self.0.user, &[]);
        cmd.args(["run", "--timeout", "300s", "--", "/bin/sh", "-c"])
            .arg(format!("set -eu\n{script}\necho REAL-OK\n"));
        self.0.run_env(&mut cmd, "/usr/local/bin:/usr/bin:/bin");
        cmd.output().unwrap()
    }
}

fn assert_real_ok(what: &str, user: User, out: &Output) {
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.code() == Some(0) && so.contains("REAL-OK"),
        "{what} failed as {user:?}: exit {:?}\n--- stdout\n{so}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `first`, then `second` in the same workspace, as every user.
fn twice(name: &str, first: &str, second: &str) {
    for user in users() {
        let s = Scratch::new(name, user);
        assert_real_ok(name, user, &s.run(first));
        assert_real_ok(&format!("{name} (second run)"), user, &s.run(second));
    }
}

#[test]
fn c_compiler_and_make() {
    twice(
        "cc-make",
        r#"
printf '#include <stdio.h>\nint main(void){puts("hello from cc");return 0;}\n' > hello.c
printf 'hello: hello.c\n\tcc -O2 -o hello hello.c\n' > Makefile
make
./hello | grep -qx 'hello from cc'
"#,
        r#"
make | grep -q 'up to date'
touch hello.c && make && ./hello >/dev/null
"#,
    );
}

#[test]
fn git_history_in_the_workspace() {
    twice(
        "git",
        r#"
git init -q repo && cd repo
git config user.email t@example.invalid && git config user.name terra
echo one > f && git add f && git commit -qm one
git log --oneline | grep -q one
"#,
        r#"
cd repo && echo two >> f && git commit -qam two
test "$(git rev-list --count HEAD)" = 2
git status --porcelain | wc -l | grep -qx 0
"#,
    );
}

#[test]
fn archives_tar_xz_zip() {
    twice(
        "archives",
        r#"
mkdir -p src/sub && echo data > src/sub/file && chmod +x src/sub/file
tar -cJf a.tar.xz src && rm -rf src && tar -xJf a.tar.xz
test -x src/sub/file
zip -qr a.zip src && rm -rf src && unzip -q a.zip && cat src/sub/file | grep -qx data
xz -k src/sub/file && xz -dc src/sub/file.xz | grep -qx data
"#,
        r#"
tar -xJf a.tar.xz && unzip -qo a.zip && test -f src/sub/file.xz
"#,
    );
}

#[test]
fn python_threads_subprocesses_and_shared_memory() {
    twice(
        "python",
        r#"
cat > p.py <<'PY'
import threading, subprocess, multiprocessing as mp
from multiprocessing import shared_memory
out = []
ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
assert sorted(out) == list(range(8))
assert subprocess.run(["echo", "sub"], capture_output=True, text=True).stdout == "sub\n"
shm = shared_memory.SharedMemory(create=True, size=16)
shm.buf[0] = 42
other = shared_memory.SharedMemory(name=shm.name)
assert other.buf[0] == 42
other.close(); shm.close(); shm.unlink()
def sq(x): return x * x
if __name__ == "__main__":
    with mp.Pool(2) as pool:
        assert pool.map(sq, range(5)) == [0, 1, 4, 9, 16]
    print("python ok")
PY
python3 p.py | grep -qx 'python ok'
"#,
        r#"
python3 p.py | grep -qx 'python ok'
"#,
    );
}

#[test]
fn node_and_sqlite() {
    twice(
        "node-sqlite",
        r#"
node -e 'const cp=require("child_process"); const fs=require("fs"); fs.writeFileSync("n.txt", cp.execSync("echo node").toString())'
grep -qx node n.txt
sqlite3 db.sqlite 'create table t(x); insert into t values (1),(2);'
test "$(sqlite3 db.sqlite 'select sum(x) from t')" = 3
"#,
        r#"
sqlite3 db.sqlite 'insert into t values (3);'
test "$(sqlite3 db.sqlite 'select sum(x) from t')" = 6
node -e 'require("fs").accessSync("n.txt")'
"#,
    );
}

#[test]
fn chmod_and_links_in_the_workspace() {
    twice(
        "links",
        r#"
printf '#!/bin/sh\necho script ran\n' > s.sh && chmod +x s.sh && ./s.sh | grep -qx 'script ran'
chmod 644 s.sh && ! ./s.sh 2>/dev/null && chmod 755 s.sh
mkdir -p d && ln -s ../s.sh d/link && d/link | grep -qx 'script ran'
ln s.sh hard && test "$(stat -c %h s.sh)" = 2
mkfifo pipe && test -p pipe
"#,
        r#"
./d/link | grep -qx 'script ran' && rm hard pipe && test "$(stat -c %h s.sh)" = 1
"#,
    );
}
