# Runs inside a container (or bubblewrap): `terra run --backend auto`, `terra
# doctor`, and the enforcement probes of the backend auto took. Prints one
# `result NAME EXIT` line per probe and the facts as `fact NAME VALUE`; the
# test (tests/containers.rs) judges them.
#
# Environment: TERRA (the binary), BASE (a directory this user may write,
# outside the default grants), SECRET (a readable file outside every grant),
# OUT (a directory this user may write, outside every grant).
set -u
uid=$(id -u)
ws="$BASE/ws-$uid"
rm -rf "$ws" "$BASE/home-$uid"
mkdir -p "$ws" "$BASE/home-$uid"
cd "$ws" || exit 90
export HOME="$BASE/home-$uid" XDG_STATE_HOME="$BASE/home-$uid/state"
result() { echo "result $1 $2"; }
json() { /usr/bin/python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }

"$TERRA" run --backend auto --receipt "$ws/receipt.json" -- sh -c 'echo TERRA-RAN' >run.out 2>run.err
result run $?
grep -q TERRA-RAN run.out && echo "fact ran yes"
sed 's/^/stderr /' run.err
echo "fact backend $(json "$ws/receipt.json" 'v["backend"]')"
echo "fact activation $(json "$ws/receipt.json" 'v["activation"]')"
"$TERRA" doctor --json >doctor.json
result doctor $?
echo "fact doctor-auto $(json doctor.json 'v["auto"]["backend"]')"
backend=$(json "$ws/receipt.json" 'v["backend"]')

# fs-read: a file outside every grant, then granted.
"$TERRA" run -q -- cat "$SECRET" >/dev/null 2>&1
result read-outside $?
"$TERRA" run -q --read "$(dirname "$SECRET")" -- cat "$SECRET" >/dev/null 2>&1
result read-granted $?

# fs-write: outside every grant nothing lands; the workspace is written.
out="$OUT/escape-$uid"
rm -f "$out"
"$TERRA" run -q -- sh -c "echo x > '$out'" >/dev/null 2>&1
result write-outside $?
[ -e "$out" ] && echo "fact write-outside-landed yes"
"$TERRA" run -q -- sh -c 'echo x > in-workspace' >/dev/null 2>&1
result write-workspace $?
[ -e in-workspace ] && echo "fact write-workspace-landed yes"

# network-none: a listener on loopback, reachable from outside the box.
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
open("port", "w").write(str(s.getsockname()[1]))
time.sleep(60)' &
listener=$!
i=0; while [ ! -s port ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
port=$(cat port)
connect="import socket; socket.create_connection(('127.0.0.1', $port), timeout=5).close()"
/usr/bin/python3 -c "$connect"
result connect-outside-terra $?
"$TERRA" run -q -- /usr/bin/python3 -c "$connect" >/dev/null 2>&1
result connect-in-box $?
kill "$listener" 2>/dev/null

# process-tree: a daemon that left the session is gone after the run.
"$TERRA" run -q -- sh -c 'setsid sleep 3171 </dev/null >/dev/null 2>&1 & exit 0' >/dev/null 2>&1
result daemon-run $?
sleep 0.3
if ps -eo args | grep -q '^sleep 3171'; then
  echo "fact daemon-survived yes"
  pkill -f '^sleep 3171'
fi

# fs-deny, where the backend declares it: a denied directory inside the
# workspace, then the same read without the deny.
if [ "$backend" = linux ]; then
  mkdir -p secret && echo s3cret >secret/token
  "$TERRA" run -q --deny "$ws/secret" -- cat secret/token >/dev/null 2>&1
  result read-denied $?
  "$TERRA" run -q -- cat secret/token >/dev/null 2>&1
  result read-undenied $?
fi

# Mediated networking: the broker starts on the linux backend; the landlock
# backend refuses with what to do instead.
"$TERRA" run -q --allow-net example.com:443 -- sh -c 'test -n "$HTTPS_PROXY"' >mediated.out 2>mediated.err
result mediated $?
grep -q 'Instead: (1) let terra create user namespaces' mediated.err && echo "fact mediated-says-instead yes"
exit 0
