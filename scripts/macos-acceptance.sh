#!/usr/bin/env bash
# The macos backend's native acceptance run, for a maintainer with a Mac.
#
#   scripts/macos-acceptance.sh                 # on the Mac, from a clone
#   scripts/macos-acceptance.sh user@mac-host   # from anywhere: copies HEAD there over SSH
#
# Builds terra in release mode, signs it with the Hardened Runtime
# (packaging/macos.entitlements; CODESIGN_IDENTITY, default "-" = ad hoc),
# then runs the enforcement probes below, each negative probe with its
# positive twin (the same tool, allowed), so a tool failing for another
# reason cannot pass a "denied" probe. Then everyday commands under the
# default policy: git (a repository of 50,000 files), python3 with
# multiprocessing, make with the C compiler, clang through the xcrun shim, a
# program that spawns children, an interactive shell with job control and
# raw mode (under script(1)), timezone data, the listed sysctls, Ctrl-C
# cleanup, and a setsid + double-fork escapee killed at the run's end.
# Prints one PASS/FAIL/SKIP line per probe and exits non-zero when any
# failed. Probes that show a documented limit (a killed terra run) print
# LIMIT and check that the surviving process stays confined.
set -euo pipefail

if [ "$#" -ge 1 ]; then
  host="$1"
  dir="terra-acceptance-$(date +%s)"
  echo "copying HEAD to $host:$dir"
  git archive --format=tar HEAD | ssh "$host" "mkdir -p '$dir' && tar -x -C '$dir'"
  exec ssh -t "$host" "cd '$dir' && bash scripts/macos-acceptance.sh"
fi

if [ "$(uname -s)" != Darwin ]; then
  echo "macos-acceptance.sh: run it on macOS (or pass an SSH host that is a Mac)" >&2
  exit 2
fi

cd "$(dirname "$0")/.."
cargo build --release --locked --bin terra
bin="$PWD/target/release/terra"
codesign --force --options runtime --timestamp=none \
  --entitlements packaging/macos.entitlements --sign "${CODESIGN_IDENTITY:--}" "$bin"
codesign --verify --strict --verbose=2 "$bin"

work="$(mktemp -d "${TMPDIR:-/tmp}/terra-acc.XXXXXX")"
outside="$(mktemp -d "$HOME/.terra-acc-outside.XXXXXX")"
cleanup() {
  # The host-side HTTP servers (serve() runs in a command substitution's
  # subshell, so their pids are kept in a file).
  if [ -f "$work/servers" ]; then
    while read -r p; do kill "$p" 2>/dev/null || true; done <"$work/servers"
  fi
  rm -rf "$work" "$outside"
}
trap cleanup EXIT
mkdir -p "$work/ws/secret"
echo ok >"$work/ws/file"
echo top-secret >"$work/ws/secret/key"
echo private >"$outside/private"

policy() { # policy NETWORK_JSON [EXTRA_RULE_JSON]
  cat <<JSON
{
  "\$schema": "https://schemas.maelys.dev/mir-source/v3/schema.json",
  "formatVersion": 3,
  "filesystem": {
    "default": "deny",
    "rules": [
      { "access": "write", "path": { "root": "workspace", "relative": "" }, "scope": "tree" },
      { "access": "read", "path": { "special": "minimal-runtime" }, "scope": "tree" },
      { "access": "write", "path": { "root": "temp", "relative": "" }, "scope": "tree" }${2:+,
      $2}
    ]
  },
  "network": $1,
  "process": { "treeConfinement": "disabled" },
  "root": { "mode": "read-only" }
}
JSON
}
policy '{ "mode": "none" }' >"$work/none.json"
policy '{ "mode": "direct" }' >"$work/direct.json"
policy '{ "mode": "none" }' '{ "access": "deny", "path": { "root": "workspace", "relative": "secret" }, "scope": "tree" }' >"$work/deny.json"
cat >"$work/tree.json" <<'JSON'
{
  "$schema": "https://schemas.maelys.dev/mir-source/v3/schema.json",
  "formatVersion": 3,
  "filesystem": { "default": "deny", "rules": [
    { "access": "write", "path": { "root": "workspace", "relative": "" }, "scope": "tree" },
    { "access": "read", "path": { "special": "minimal-runtime" }, "scope": "tree" } ] },
  "network": { "mode": "none" },
  "process": { "treeConfinement": "required" },
  "root": { "mode": "read-only" }
}
JSON

failures=0
result() { # result NAME OK(0/1) DETAIL
  if [ "$2" = 0 ]; then echo "PASS $1"; else echo "FAIL $1: $3"; failures=$((failures + 1)); fi
}
run() { # run POLICY CMD... (in the workspace)
  (cd "$work/ws" && "$bin" run --policy "$work/$1" -- "${@:2}")
}
cli() { # cli [TERRA RUN OPTIONS...] -- CMD... (the default policy, in the workspace)
  (cd "$work/ws" && "$bin" run "$@")
}
alive() { # alive PIDFILE: the pid in the file is a live process
  local p
  p="$(cat "$1" 2>/dev/null || echo 0)"
  [ "$p" -gt 1 ] && kill -0 "$p" 2>/dev/null
}
json() { # json FILE PYTHON_EXPR (host side): prints the expression over the JSON as d
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}
serve() { # serve: an HTTP server on the host's 127.0.0.1; prints its port
  python3 -m http.server 0 --bind 127.0.0.1 >"$work/http.$RANDOM.log" 2>&1 &
  local pid=$! port=""
  echo "$pid" >>"$work/servers"
  for _ in $(seq 50); do
    port="$(lsof -Pan -p "$pid" -iTCP -sTCP:LISTEN -Fn 2>/dev/null | sed -n 's/^n.*://p' | head -1)"
    [ -n "$port" ] && break
    sleep 0.1
  done
  echo "$port"
}

# --- Files: reads and writes outside the grants, with twins inside.
run none.json cat "$outside/private" >/dev/null 2>&1 && r=1 || r=0
result "read outside grants is denied" $r "read $outside/private"
[ "$(run none.json cat file 2>&1)" = ok ] && r=0 || r=1
result "read inside the workspace works (twin)" $r "cat file"
run none.json sh -c "echo x > '$outside/new'" >/dev/null 2>&1; [ -e "$outside/new" ] && r=1 || r=0
result "write outside grants is denied" $r "$outside/new was created"
run none.json sh -c 'echo x > new' && [ -e "$work/ws/new" ] && r=0 || r=1
result "write inside the workspace works (twin)" $r "ws/new missing"

# Deny inside a grant.
run deny.json cat secret/key >/dev/null 2>&1 && r=1 || r=0
result "deny inside a write grant holds" $r "secret/key was read"
[ "$(run deny.json cat file 2>&1)" = ok ] && r=0 || r=1
result "the rest of the grant stays readable (twin)" $r "cat file"

# The command line's rules on the default policy.
out="$(cd "$work/ws" && "$bin" run -- true 2>&1)" && code=0 || code=$?
[ "$code" = 0 ] && r=0 || r=1
result "the default policy runs (process-tree contained by the sweep)" $r "exit $code: $out"
[ "$(cli --read "$outside" -- cat "$outside/private" 2>&1)" = private ] && r=0 || r=1
result "--read grants a path outside the workspace" $r "cat $outside/private"
cli -- cat "$outside/private" >/dev/null 2>&1 && r=1 || r=0
result "without --read it stays denied (twin)" $r "read $outside/private"
cli --write "$outside" -- sh -c "echo w > '$outside/written'" && [ -e "$outside/written" ] && r=0 || r=1
result "--write grants writing outside the workspace" $r "$outside/written missing"
cli --deny secret -- cat secret/key >/dev/null 2>&1 && r=1 || r=0
result "--deny inside the workspace holds" $r "secret/key was read"
[ "$(cli --deny secret -- cat file 2>&1)" = ok ] && r=0 || r=1
result "--deny leaves the rest readable (twin)" $r "cat file"

# --timeout and --receipt.
cli --timeout 2s --receipt "$work/timeout.json" -- sleep 60 && code=0 || code=$?
[ "$code" = 143 ] && [ "$(json "$work/timeout.json" 'd["outcome"]["timedOut"]')" = True ] && r=0 || r=1
result "--timeout stops the workload (SIGTERM, exit 143) and the receipt says so" $r "exit $code"
cli --receipt "$work/r.json" -- true && r=0 || r=1
[ "$r" = 0 ] && [ "$(json "$work/r.json" 'd["backend"], d["activation"], d["outcome"]["exitCode"]')" = "('macos', 'passed', 0)" ] || r=1
result "--receipt writes the receipt (backend macos, activation passed)" $r "$(cat "$work/r.json" 2>/dev/null | head -c 300)"
[ "$(json "$work/r.json" 'd["processTree"].startswith("contained")')" = True ] && r=0 || r=1
result "the receipt says the tree was swept (processTree)" $r "$(json "$work/r.json" 'd.get("processTree")' 2>/dev/null)"
state="$(json "$work/r.json" 'd["runId"]')"
ls "${XDG_STATE_HOME:-$HOME/.local/state}/terra/runs/$state/receipt.json" >/dev/null 2>&1 && r=0 || r=1
result "the run's state directory keeps receipt.json" $r "runs/$state/receipt.json missing"

# --- Network none, with a direct twin, against a listener on the host loopback.
port="$(serve)"
run none.json curl -sS -m 5 "http://127.0.0.1:$port/" >/dev/null 2>&1 && r=1 || r=0
result "network none: IPv4 loopback connect is denied" $r "curl reached 127.0.0.1:$port"
run direct.json curl -sS -m 5 "http://127.0.0.1:$port/" >/dev/null 2>&1 && r=0 || r=1
result "network direct reaches the loopback listener (twin)" $r "curl failed"
listen6='nc -6 -l ::1 47211 & p=$!; sleep 1; kill -0 $p 2>/dev/null && echo listening; kill $p 2>/dev/null; true'
[ "$(run none.json sh -c "$listen6" 2>/dev/null)" = listening ] && r=1 || r=0
result "network none: IPv6 loopback listen is denied" $r "nc listened on ::1"
[ "$(run direct.json sh -c "$listen6" 2>/dev/null)" = listening ] && r=0 || r=1
result "network direct: IPv6 loopback listen works (twin)" $r "nc could not listen on ::1"

# --- Mediated: through the broker only.
other="$(serve)"
med() { cli --allow-net "127.0.0.1:$port" "$@"; }
med --receipt "$work/med.json" -- sh -c "
  curl -sS -m 10 -o /dev/null -w '%{http_code}\n' http://127.0.0.1:$port/;
  curl -sS -m 10 -D - -o /dev/null http://127.0.0.1:$other/ | tr -d '\r' | grep -i '^x-terra-refusal';
  curl -sS -m 5 --noproxy '*' -o /dev/null http://127.0.0.1:$port/ 2>&1 && echo direct-connected || echo direct-refused
" >"$work/med.out" 2>&1 || true
grep -qx 200 "$work/med.out" && r=0 || r=1
result "mediated: a listed host is reached through the broker" $r "$(cat "$work/med.out")"
grep -qi '^x-terra-refusal: no-destination' "$work/med.out" && r=0 || r=1
result "mediated: an unlisted one is refused with its reason" $r "$(cat "$work/med.out")"
grep -qx direct-refused "$work/med.out" && r=0 || r=1
result "mediated: a direct loopback connect (no proxy) is refused" $r "$(cat "$work/med.out")"
med -- sh -c "curl -sS -m 5 --noproxy '*' -o /dev/null http://127.0.0.1:$((port + 1))/ 2>&1; nc -z -w 2 127.0.0.1 22 2>&1" >"$work/med2.out" 2>&1 && r=1 || r=0
grep -qi "not permitted" "$work/med2.out" || r=1
result "mediated: other loopback ports are refused by the profile (EPERM)" $r "$(cat "$work/med2.out")"
a="$(json "$work/med.json" 'd["network"]["admitted"], d["network"]["refusedByReason"].get("no-destination", 0)' 2>/dev/null || true)"
[ "$a" = "(1, 1)" ] && r=0 || r=1
result "mediated: the receipt counts one admitted and one refused" $r "$a"
lines="$(json "$work/med.json" 'd["network"]["receipt"]' 2>/dev/null || true)"
[ -n "$lines" ] && head -1 "$lines" | grep -q 'client sent nothing' && r=0 || r=1
result "mediated: the activation check reached the broker's port (its first receipt line)" $r "$(head -1 "$lines" 2>/dev/null)"
[ -n "$lines" ] && grep -q "\"verdict\":\"allowed\"" "$lines" && grep -q "\"path\":\"relay\"" "$lines" && r=0 || r=1
result "mediated: network.jsonl holds the broker's receipt lines" $r "$lines"
if curl -sS -m 10 -o /dev/null https://example.com/ 2>/dev/null; then
  cli --allow-net example.com:443 -- curl -sS -m 20 -o /dev/null -w '%{http_code}\n' https://example.com/ >"$work/net.out" 2>&1 && r=0 || r=1
  result "mediated: a listed internet name is resolved and reached by the broker" $r "$(cat "$work/net.out")"
  cli --allow-net example.com:443 -- curl -sS -m 20 -o /dev/null https://example.org/ >/dev/null 2>&1 && r=1 || r=0
  result "mediated: an unlisted internet name is refused (twin)" $r "example.org was reached"
else
  echo "SKIP mediated internet probes: this Mac cannot reach https://example.com/ itself"
fi

# A policy requiring process-tree runs.
out="$(run tree.json true 2>&1)" && code=0 || code=$?
[ "$code" = 0 ] && r=0 || r=1
result "a policy requiring process-tree runs" $r "exit $code: $out"

# The launcher started by hand without a valid spec refuses; every run above
# passed its activation check.
"$bin" __sandbox_launcher --spec-fd 9 --canary /nonexistent -- /usr/bin/true 9</dev/null >/dev/null 2>&1 && r=1 || r=0
result "the launcher refuses a spec that is not a canonical launch spec" $r "it ran"

# The workload's process group ends with it.
run none.json sh -c "sleep 30 & echo \$! > grouped; exit 0" || true
sleep 1
alive "$work/ws/grouped" && r=1 || r=0
result "the rest of the workload's process group is killed when it ends" $r "pid $(cat "$work/ws/grouped") still runs"

# The setsid + double-fork escape: killed at the run's end by the sweep
# (the grandchild carries the run's profile), with a twin under
# --no-process-tree that outlives the run and stays confined.
escape='if (fork() == 0) { POSIX::setsid(); if (fork() == 0) {
    open(my $p, ">", $ARGV[0]); print $p "$$\n"; close($p); sleep 4;
    open(my $f, ">", $ARGV[1]) and print $f "late"; exit 0 } exit 0 }
  sleep 1;'
rm -f "$work/ws/escapee" "$work/ws/escaped-late"
run tree.json perl -MPOSIX -e "$escape" escapee escaped-late || true
[ -s "$work/ws/escapee" ] && r=0 || r=1
result "the double-forked escapee started (twin of the check below)" $r "no escapee pid"
alive "$work/ws/escapee" && r=1 || r=0
result "a setsid + double-fork escapee is killed at the run's end" $r "pid $(cat "$work/ws/escapee" 2>/dev/null) still runs"
sleep 5
[ -e "$work/ws/escaped-late" ] && r=1 || r=0
result "the escapee never wrote after the run ended" $r "escaped-late exists"
rm -f "$work/ws/escapee" "$work/ws/escaped-late"
cli --no-process-tree -- perl -MPOSIX -e "$escape" escapee "$outside/escaped-late" || true
alive "$work/ws/escapee" && r=0 || r=1
echo "LIMIT with --no-process-tree a daemonizing child outlives the run (asked for)"
result "with --no-process-tree the escapee outlives the run (twin)" $r "it was killed"
sleep 5
[ -e "$outside/escaped-late" ] && r=1 || r=0
result "the surviving escapee stays confined" $r "$outside/escaped-late was written"

# Ctrl-C on a terminal (script(1) gives terra run one; ^C is typed into
# it): the line discipline sends SIGINT to the workload's group, the
# terminal's foreground group. Background children (which a non-interactive
# sh keeps from SIGINT) and a setsid child are gone when terra run returns.
rm -f "$work/ws/bg" "$work/ws/sess"
(sleep 3; printf '\003'; sleep 1) |
  (cd "$work/ws" && script -q /dev/null "$bin" run -- /bin/sh -c \
    'sleep 300 & echo $! > bg; perl -MPOSIX -e "POSIX::setsid(); sleep 300" & echo $! > sess; sleep 300') \
  >/dev/null 2>&1 || true
sleep 1
[ -s "$work/ws/sess" ] && r=0 || r=1
result "the Ctrl-C workload started its children (twin of the check below)" $r "no pid files"
if alive "$work/ws/bg" || alive "$work/ws/sess"; then r=1; else r=0; fi
result "Ctrl-C leaves no process of the run behind" $r "bg $(cat "$work/ws/bg" 2>/dev/null), sess $(cat "$work/ws/sess" 2>/dev/null)"

# --- Everyday commands under the default policy.
# git in a repository of 50,000 files, through the /usr/bin shim (xcrun).
repo="$work/repo"
mkdir -p "$repo"
(cd "$repo" && git init -q && for d in $(seq 0 99); do mkdir "d$d"; (cd "d$d" && for f in $(seq 0 499); do echo "$d $f" >"f$f"; done); done &&
  git add -A && git -c user.name=t -c user.email=t@t commit -qm files)
echo change >"$repo/d7/f7"
out="$(cd "$repo" && "$bin" run -- /usr/bin/git status --porcelain 2>&1)" && code=0 || code=$?
[ "$code" = 0 ] && [ "$out" = " M d7/f7" ] && r=0 || r=1
result "git status in a repository of 50,000 files" $r "exit $code: $(echo "$out" | head -5)"
n="$(cd "$repo" && "$bin" run -- /usr/bin/git ls-files 2>/dev/null | wc -l | tr -d ' ')"
[ "$n" = 50000 ] && r=0 || r=1
result "git ls-files sees all 50,000 files" $r "$n"

# python3 with multiprocessing (POSIX semaphores, process-info of its children).
out="$(cli -- /usr/bin/python3 -c 'import multiprocessing as m
if __name__ == "__main__":
    with m.Pool(3) as p: print(sum(p.map(abs, range(-10, 10))))' 2>&1)" && code=0 || code=$?
[ "$out" = 100 ] && r=0 || r=1
result "python3 multiprocessing.Pool works" $r "exit $code: $out"

# make with the C compiler, and clang through the shim.
cat >"$work/ws/hello.c" <<'C'
#include <stdio.h>
int main(void) { puts("hello from cc"); return 0; }
C
printf 'hello: hello.c\n\tcc -O1 -o hello hello.c\n' >"$work/ws/Makefile"
out="$(cli -- /bin/sh -c '/usr/bin/make -s && ./hello' 2>&1)" && code=0 || code=$?
[ "$out" = "hello from cc" ] && r=0 || r=1
result "make builds and runs a C program" $r "exit $code: $out"
cli -- /usr/bin/clang --version >/dev/null 2>&1 && r=0 || r=1
result "clang runs through the xcrun shim" $r "clang --version failed"

# A program that spawns children and waits for them.
out="$(cli -- /bin/sh -c 'for i in 1 2 3 4; do (echo "child $i") & done; wait' 2>&1 | sort | tr '\n' ' ')"
[ "$out" = "child 1 child 2 child 3 child 4 " ] && r=0 || r=1
result "a program spawns children and waits for them" $r "$out"

# Timezone data and the listed sysctls; no other process's environment.
out="$(cli --env TZ=America/New_York -- /bin/date +%Z 2>&1)"
[[ "$out" == E?T ]] && r=0 || r=1
result "timezone data is readable (TZ=America/New_York)" $r "$out"
out="$(cli -- /usr/sbin/sysctl -n hw.ncpu kern.osrelease 2>&1 | head -1)"
[ "$out" -ge 1 ] 2>/dev/null && r=0 || r=1
result "listed sysctls are readable (hw.ncpu)" $r "$out"
secret="terra-acc-$RANDOM$RANDOM"
out="$(cd "$work/ws" && TERRA_ACC_SECRET="$secret" "$bin" run -- /bin/ps -A -wwE -o command= 2>&1 || true)"
[[ "$out" == *"$secret"* ]] && r=1 || r=0
result "the workload cannot read terra run's environment (kern.procargs2)" $r "ps showed the secret"

# An interactive shell with job control and raw mode, on a pseudo-terminal.
printf 'sleep 30 &\njobs\nkill %%1\nstty raw -echo && stty sane && echo RAW-OK\nexit\n' |
  script -q "$work/typescript" "$bin" run -- /bin/bash -i >/dev/null 2>&1 || true
tr -d '\r' <"$work/typescript" >"$work/typescript.txt"
grep -q 'no job control' "$work/typescript.txt" && r=1 || r=0
grep -q '^\[1\]' "$work/typescript.txt" || r=1
grep -q 'RAW-OK' "$work/typescript.txt" || r=1
result "an interactive shell has job control and raw mode" $r "$(tail -20 "$work/typescript.txt")"
out="$(cli -- /usr/bin/script -q /dev/null /bin/sh -c 'tty' 2>&1 | tr -d '\r')"
[[ "$out" == /dev/ttys* ]] && r=0 || r=1
result "the workload opens a pseudo-terminal of its own (script)" $r "$out"

# Kill of the supervisor (terra run itself) under a policy requiring
# process-tree: the reaper's input ends with terra run, and it sweeps.
rm -f "$work/ws/tree-after-kill"
(cd "$work/ws" && exec "$bin" run --policy "$work/tree.json" -- sh -c "sleep 3; echo alive > tree-after-kill") &
sup=$!
sleep 1
kill -9 "$sup" 2>/dev/null || true
sleep 4
[ -e "$work/ws/tree-after-kill" ] && r=1 || r=0
result "a terra run killed with SIGKILL: its reaper ends the workload" $r "the workload wrote after terra run was killed"

# The same with treeConfinement disabled (no reaper): the workload lives on
# but stays confined.
(cd "$work/ws" && "$bin" run --policy "$work/none.json" -- sh -c "sleep 3; echo alive > after-kill-inside; echo late > '$outside/after-kill'") &
sup=$!
sleep 1
kill -9 "$sup" 2>/dev/null || true
sleep 4
echo "LIMIT with treeConfinement disabled the workload outlives a terra run killed with SIGKILL"
[ -e "$work/ws/after-kill-inside" ] && r=0 || r=1
result "after the supervisor is killed the workload still ran (twin)" $r "no marker inside"
[ -e "$outside/after-kill" ] && r=1 || r=0
result "after the supervisor is killed the workload stays confined" $r "$outside/after-kill was written"

echo
if [ "$failures" -eq 0 ]; then echo "macos acceptance: all probes passed"; else echo "macos acceptance: $failures failed"; fi
[ "$failures" -eq 0 ]
