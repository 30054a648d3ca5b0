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
# reason cannot pass a "denied" probe. Inside the sandbox only system tools
# under /usr and /bin run (sh, cat, curl, nc, perl); python3 runs on the host
# side only (its /usr/bin shim execs Xcode's tools, outside the grants).
# Prints one PASS/FAIL/SKIP line per probe and exits non-zero when any
# failed. Probes that show a documented limit (no process-tree containment)
# print LIMIT and check that the escaped process stays confined.
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
    { "access": "write", "path": { "root": "workspace", "relative": "" }, "scope": "tree" } ] },
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
  (cd "$work/ws" && "$bin" run --no-process-tree "$@")
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

# The command line's rules on the default policy (--no-process-tree).
out="$(cd "$work/ws" && "$bin" run -- true 2>&1)" && code=0 || code=$?
[ "$code" = 125 ] && [[ "$out" == *"--no-process-tree"* ]] && r=0 || r=1
result "the default policy is refused, naming --no-process-tree" $r "exit $code: $out"
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
[ "$(json "$work/r.json" '"setsid" in d["processTree"]')" = True ] && r=0 || r=1
result "the receipt says what terra cannot end (processTree)" $r "no processTree"
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

# Process-tree confinement is not declared: a policy requiring it is refused.
out="$(run tree.json true 2>&1)" && code=0 || code=$?
[ "$code" = 125 ] && [[ "$out" == *"process-tree"* ]] && r=0 || r=1
result "a policy requiring process-tree is refused" $r "exit $code: $out"

# The launcher started by hand without a valid spec refuses; every run above
# passed its activation check.
"$bin" __sandbox_launcher --spec-fd 9 --canary /nonexistent -- /usr/bin/true 9</dev/null >/dev/null 2>&1 && r=1 || r=0
result "the launcher refuses a spec that is not a canonical launch spec" $r "it ran"

# The workload's process group ends with it; a process that left the group
# (setsid) outlives the run: the documented limit. It must stay confined.
run none.json sh -c "sleep 30 & echo \$! > grouped; exit 0" || true
p="$(cat "$work/ws/grouped" 2>/dev/null || echo 0)"
sleep 1
kill -0 "$p" 2>/dev/null && r=1 || r=0
result "the rest of the workload's process group is killed when it ends" $r "pid $p still runs"
run none.json perl -MPOSIX -e '
  if (fork() == 0) { POSIX::setsid(); if (fork() == 0) {
    open(my $s, ">", "daemon-started"); close($s); sleep 3;
    open(my $f, ">", "'"$outside"'/late") and print $f "late"; exit 0 } exit 0 }' || true
sleep 5
[ -e "$work/ws/daemon-started" ] && r=0 || r=1
echo "LIMIT a daemonizing child outlives the run (process-tree not declared)"
result "the daemon started (twin of the check below)" $r "no daemon-started marker"
[ -e "$outside/late" ] && r=1 || r=0
result "the daemonized child stays confined" $r "$outside/late was written"

# Kill of the supervisor (terra run itself): the workload lives on (the same
# limit) but stays confined.
(cd "$work/ws" && "$bin" run --policy "$work/none.json" -- sh -c "sleep 3; echo alive > after-kill-inside; echo late > '$outside/after-kill'") &
sup=$!
sleep 1
kill -9 "$sup" 2>/dev/null || true
sleep 4
echo "LIMIT the workload outlives a killed terra run (no parent-death signal on macOS)"
[ -e "$work/ws/after-kill-inside" ] && r=0 || r=1
result "after the supervisor is killed the workload still ran (twin)" $r "no marker inside"
[ -e "$outside/after-kill" ] && r=1 || r=0
result "after the supervisor is killed the workload stays confined" $r "$outside/after-kill was written"

echo
if [ "$failures" -eq 0 ]; then echo "macos acceptance: all probes passed"; else echo "macos acceptance: $failures failed"; fi
[ "$failures" -eq 0 ]
