#!/usr/bin/env bash
# The system calls each terra role makes once its seccomp allowlist is
# installed, for reviewing the tables in crates/terra-seccomp/tables/.
# Runs terra under `strace -f -ff` through the paths a run can take — a
# mediated run with curl through the box proxy (HTTP and SOCKS) and
# AF_UNIX and box-local connects the box service runs, network
# none, a pty run (when `script` exists), a --receipt file, a deadline, a
# failing workload, the landlock backend with a daemon, and the same as
# uid 65534 — then prints, per role, the sorted set of calls made after the
# role's last seccomp install (its threads included), and the calls its
# table lacks.
#
#   scripts/trace-roles.sh                  # builds target/debug/terra first
#   TERRA_BIN=dist/terra scripts/trace-roles.sh   # the static (musl) build
#   KEEP=1 scripts/trace-roles.sh           # keeps the trace directory
#
# Exit status 1 when a role made a call its table lacks. Needs root
# (strace of a run that makes user namespaces), strace, curl and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
tables=$PWD/crates/terra-seccomp/tables

if [ -z "${TERRA_BIN:-}" ]; then
  cargo build --locked --bin terra >&2
  TERRA_BIN="${CARGO_TARGET_DIR:-target}/debug/terra"
fi
TERRA_BIN=$(realpath "$TERRA_BIN")
for tool in strace curl python3; do
  command -v "$tool" >/dev/null || { echo "trace-roles: $tool is not installed" >&2; exit 2; }
done

work=$(mktemp -d)
chmod 755 "$work"
if [ -z "${KEEP:-}" ]; then trap 'kill "${srv:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
else trap 'kill "${srv:-0}" 2>/dev/null || true; echo "traces kept in $work" >&2' EXIT; fi
mkdir -p "$work/ws" "$work/state" "$work/traces" "$work/www" "$work/out"
chmod 777 "$work/ws" "$work/state" "$work/out"
echo hello >"$work/www/index.html"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$work/www" "$port" >/dev/null 2>&1 &
srv=$!
for _ in $(seq 50); do curl -s "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done

cat >"$work/policy.json" <<JSON
{"formatVersion": 3,
 "filesystem": {"default": "deny", "rules": [
   {"access": "read", "path": {"special": "minimal-runtime"}, "scope": "tree"},
   {"access": "write", "path": {"root": "workspace", "relative": ""}, "scope": "tree"},
   {"access": "write", "path": {"root": "temp", "relative": ""}, "scope": "tree"}]},
 "network": {"mode": "mediated", "allow": [
   {"protocol": "tcp", "host": "localhost", "port": $port, "allowPrivateAddresses": true},
   {"protocol": "tcp", "host": "127.0.0.1", "port": $port, "allowPrivateAddresses": true}]},
 "process": {"treeConfinement": "required"},
 "root": {"mode": "read-only"}}
JSON
chmod 644 "$work/policy.json"

# run NAME EXPECTED-STATUS [setpriv...] -- terra arguments...
run() {
  local name=$1 want=$2; shift 2
  local pre=()
  while [ "$1" != -- ]; do pre+=("$1"); shift; done
  shift
  local rc=0
  (cd "$work/ws" && XDG_STATE_HOME="$work/state" strace -f -ff -qq --pidns-translation \
    -o "$work/traces/$name" "${pre[@]}" "$TERRA_BIN" "$@") >"$work/out/$name" 2>&1 || rc=$?
  if [ "$rc" != "$want" ]; then
    echo "trace-roles: the $name run ended $rc, not $want:" >&2
    cat "$work/out/$name" >&2
    exit 2
  fi
}
unpriv=(setpriv --reuid=65534 --regid=65534 --clear-groups)
# The box service's own connects: an AF_UNIX socket in the workspace (opened
# through the box's /proc, checked, connected through /proc/self/fd), a
# refused one on the read-only root, a box-local UDP connect.
cat >"$work/ws/unix.py" <<'PY'
import os, socket
p = os.getcwd() + "/trace-%d.sock" % os.getpid()
srv = socket.socket(socket.AF_UNIX); srv.bind(p); srv.listen(1)
c = socket.socket(socket.AF_UNIX); c.connect(p); print("unix connected")
os.unlink(p)
try:
    socket.socket(socket.AF_UNIX).connect("/usr")
except OSError as e:
    print("unix refused", e.errno)
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect(("127.0.0.1", 9))
PY
chmod 644 "$work/ws/unix.py"
fetch="curl -sS --max-time 20 http://localhost:$port/ && curl -sS --max-time 20 -x socks5h://127.0.0.1:3128 http://localhost:$port/"
# The workload's own connect() (handed off, refused, UDP) and the box's DNS
# stub over UDP and TCP.
fetch="$fetch && curl -sS --max-time 20 --noproxy '*' http://127.0.0.1:$port/ && { getent hosts unlisted.example || true; } && python3 -c '
import socket, struct
t = socket.socket(); t.setblocking(False); t.connect_ex((\"127.0.0.1\", $port))
socket.socket(2, 2).connect_ex((\"192.0.2.1\", 53)); socket.socket().connect_ex((\"192.0.2.1\", 80))
q = struct.pack(\"!HHHHHH\", 7, 256, 1, 0, 0, 0) + b\"\\x07example\\x00\\x00\\x01\\x00\\x01\"
d = socket.create_connection((\"127.0.0.1\", 53)); d.sendall(struct.pack(\"!H\", len(q)) + q); d.recv(512)
'"
fetch="$fetch && python3 unix.py"
for who in root nobody; do
  pre=(); [ "$who" = nobody ] && pre=("${unpriv[@]}")
  run "mediated-$who" 0 "${pre[@]}" -- run --policy "$work/policy.json" -- /bin/sh -c "$fetch"
  grep -q hello "$work/out/mediated-$who" || { echo "trace-roles: curl through the proxy failed ($who)" >&2; exit 2; }
  grep -q "unix connected" "$work/out/mediated-$who" || { echo "trace-roles: the AF_UNIX connect failed ($who)" >&2; exit 2; }
  run "none-$who" 0 "${pre[@]}" -- run --receipt "$work/out/receipt-$who.json" -- /bin/sh -c 'echo none; python3 unix.py; sleep 0.2'
  run "fail-$who" 3 "${pre[@]}" -- run -- /bin/sh -c 'exit 3'
  run "timeout-$who" 137 "${pre[@]}" -- run --timeout 1s -- /bin/sh -c 'trap "" TERM; sleep 30'
  run "landlock-$who" 0 "${pre[@]}" -- run --backend landlock -- /bin/sh -c '(setsid sleep 30 &) ; echo daemon'
  # Resource limits: cgroups where writable (root here), rlimits otherwise;
  # the supervisor reads the cgroup counters once confined.
  run "limits-$who" 0 "${pre[@]}" -- run --memory 64M --pids 64 --max-file-size 1M -- /bin/sh -c 'echo limits'
  run "limits-landlock-$who" 0 "${pre[@]}" -- run --backend landlock --memory 64M --max-file-size 1M -- /bin/sh -c 'echo limits'
done
if command -v script >/dev/null; then
  (cd "$work/ws" && XDG_STATE_HOME="$work/state" script -qec \
    "strace -f -ff -qq --pidns-translation -o '$work/traces/pty' '$TERRA_BIN' run -- /bin/sh -c 'tty; echo pty'" /dev/null) \
    >"$work/out/pty" 2>&1 || echo "trace-roles: the pty run failed (skipped)" >&2
fi

python3 - "$work/traces" "$tables" <<'PY'
import json, os, re, sys
traces, tables = sys.argv[1], sys.argv[2]
ROLE_EXEC = re.compile(r'^execve(?:at)?\((?:\d+, )?"[^"]*", \["terra", "(__\w+)"')
INSTALL = re.compile(r'^(seccomp\(SECCOMP_SET_MODE_FILTER|prctl\(PR_SET_SECCOMP)')
CALL = re.compile(r'^([a-z_0-9]+)\(')
THREAD = re.compile(r'^clone3?\(.*CLONE_THREAD.*= (\d+)(?: /\* (\d+) in strace\'s PID NS \*/)?$')
ROLES = {"__supervisor": "supervisor", "__network": "broker", "__vm": "box-init"}

def lines(path):
    with open(path, errors="replace") as f:
        return f.read().splitlines()

def thread_calls(path, seen, after=0):
    # Threads started after line `after` (the role's last filter install:
    # a thread started before it, such as the box init's network namespace
    # thread, ends before it and runs under no allowlist).
    out = set()
    for l in lines(path)[after:]:
        m = THREAD.match(l)
        if not m:
            continue
        tid = m.group(2) or m.group(1)
        t = re.sub(r'\.\d+$', '.' + tid, path)
        if os.path.exists(t) and t not in seen:
            seen.add(t)
            out |= {c.group(1) for c in map(CALL.match, lines(t)) if c}
            out |= thread_calls(t, seen)
    return out

sets = {}
for name in sorted(os.listdir(traces)):
    path = os.path.join(traces, name)
    ls = lines(path)
    role = None
    for l in ls:
        m = ROLE_EXEC.match(l)
        if m:
            role = ROLES.get(m.group(1))
    # The box's network service: the proxy's accept on fd 6 (mediated), or,
    # with network none, the hand-over on fd 12 in the process that
    # installed the filter (its threads' traces are read with it).
    if role is None and (any(re.match(r'^accept4?\(6,', l) for l in ls) or (
            any(re.match(r'^recvmsg\(12,', l) for l in ls) and any(INSTALL.match(l) for l in ls))):
        role = "box-service"
    if role is None:
        continue
    starts = [i for i, l in enumerate(ls) if INSTALL.match(l)]
    if not starts:
        print(f"trace-roles: {name} ({role}) never installed a filter", file=sys.stderr)
        sets.setdefault(role, set()).add("<no filter installed>")
        continue
    calls = {c.group(1) for c in map(CALL.match, ls[starts[-1] + 1:]) if c}
    sets.setdefault(role, set()).update(calls | thread_calls(path, set(), starts[-1] + 1))

missing_any = False
for role in ["supervisor", "broker", "box-init", "box-service"]:
    with open(os.path.join(tables, role + ".json")) as f:
        table = json.load(f)
    allowed = {r["syscall"] for flt in table.values() if flt["match_action"] == "allow"
               for r in flt["filter"] if "x86_64" in r.get("arch", ["x86_64"])}
    got = sets.get(role, set())
    missing = sorted(got - allowed)
    print(f"{role}: {' '.join(sorted(got)) or '(no trace)'}")
    if missing:
        missing_any = True
        print(f"{role}: NOT IN ITS TABLE: {' '.join(missing)}")
sys.exit(1 if missing_any else 0)
PY
