#!/usr/bin/env bash
# Transparent egress (issue 13), measured in one run against the direct path:
#  - throughput: 1 GiB from a client to a sink server on the host's
#    127.0.0.1, the client on the host (direct loopback) and in the box
#    through a handed-off connection (its own connect(), no proxy), 5 rounds
#    alternating direct and handoff; medians and the median of the per-round
#    ratios;
#  - connect latency: median time of one connect() (and close) over 500, on
#    the host and in the box (judge + broker connect + hand-off);
#  - DNS stub: median time of one A question for a pinned name over 500
#    (UDP to the box's 127.0.0.1:53), after the first one pinned it.
# The client is the same python3 program in both places. The name is taken
# from the host's /etc/hosts (a 127.x name the box does not know itself);
# without one the DNS part is skipped.
#
#   scripts/bench-handoff.sh                 # builds target/release/terra first
#   TERRA_BIN=dist/terra scripts/bench-handoff.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${TERRA_BIN:-}" ]; then
  cargo build --release --locked --bin terra >&2
  TERRA_BIN="${CARGO_TARGET_DIR:-target}/release/terra"
fi
TERRA_BIN=$(realpath "$TERRA_BIN")

work=$(mktemp -d)
chmod 755 "$work"
trap 'kill "${srv:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/ws" "$work/state"

cat >"$work/server.py" <<'PY'
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(512)
print(s.getsockname()[1], flush=True)
def serve(c):
    with c:
        buf = bytearray(1 << 20)
        total = 0
        while True:
            n = c.recv_into(buf)
            if not n:
                break
            total += n
        if total:
            c.sendall(b"ok")
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY

cat >"$work/ws/client.py" <<'PY'
import socket, statistics, struct, sys, time
port, name, what = int(sys.argv[1]), sys.argv[2], sys.argv[3]
GIB = 1 << 30
chunk = memoryview(bytearray(4 << 20))
def throughput():
    s = socket.create_connection(("127.0.0.1", port))
    t = time.perf_counter()
    left = GIB
    while left:
        n = s.send(chunk[: min(left, len(chunk))])
        left -= n
    s.shutdown(socket.SHUT_WR)
    assert s.recv(2) == b"ok"
    dt = time.perf_counter() - t
    s.close()
    return GIB / dt / 1e6
if what == "throughput":
    print(f"throughput_MBps {throughput():.0f}")
    sys.exit(0)
lat = []
for _ in range(500):
    s = socket.socket()
    t = time.perf_counter()
    s.connect(("127.0.0.1", port))
    lat.append(time.perf_counter() - t)
    s.close()
print(f"connect_ms {statistics.median(lat) * 1e3:.3f}")
if name != "-":
    q = struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0\0\1\0\1"
    d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    d.connect(("127.0.0.1", 53))
    d.settimeout(10)
    d.send(q); d.recv(512)  # the first answer pins the name
    dns = []
    for _ in range(500):
        t = time.perf_counter()
        d.send(q)
        r = d.recv(512)
        dns.append(time.perf_counter() - t)
        assert r[3] & 0xF == 0, "NOERROR expected"
    print(f"dns_ms {statistics.median(dns) * 1e3:.3f}")
PY

python3 "$work/server.py" >"$work/port" &
srv=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port")

# A host-only name for the DNS stub: in the host's /etc/hosts on 127.x, not
# one the box's own /etc/hosts answers (localhost, the box's host name).
name=$(awk '$1 ~ /^127\./ {for (i = 2; i <= NF; i++) print $i}' /etc/hosts \
  | grep -v -x -e localhost -e terra -e 'localhost\..*' | head -1 || true)
name=${name:--}

box() {
  (cd "$work/ws" && XDG_STATE_HOME="$work/state" "$TERRA_BIN" run --quiet "${allow[@]}" \
    -- python3 client.py "$port" "$@")
}
allow=(--allow-net "127.0.0.1:$port,private")
[ "$name" != - ] && allow+=(--allow-net "$name:$port,private")
get() { awk -v k="$1" '$1 == k {print $2}' <<<"$2"; }
td=() tb=()
for round in 1 2 3 4 5; do
  td+=("$(get throughput_MBps "$(python3 "$work/ws/client.py" "$port" - throughput)")")
  tb+=("$(get throughput_MBps "$(box "$name" throughput)")")
  echo "round $round: direct ${td[-1]} MB/s, handoff ${tb[-1]} MB/s"
done
direct=$(python3 "$work/ws/client.py" "$port" - latency)
boxed=$(box "$name" latency)
echo "direct: $direct"
echo "handoff: $boxed"
python3 - "${td[*]}" "${tb[*]}" "$(get connect_ms "$direct")" "$(get connect_ms "$boxed")" "$(get dns_ms "$boxed")" <<'PY'
import statistics, sys
td = [float(x) for x in sys.argv[1].split()]
tb = [float(x) for x in sys.argv[2].split()]
cd, cb, dns = sys.argv[3:]
ratio = statistics.median(b / d for b, d in zip(tb, td))
print(f"throughput: handoff median {statistics.median(tb):.0f} MB/s, direct median {statistics.median(td):.0f} MB/s; "
      f"median of the per-round ratios {100 * ratio:.1f}% (goal >= 98%)")
print(f"connect: handoff {cb} ms, direct {cd} ms, added {float(cb) - float(cd):.3f} ms (goal <= 0.3 ms)")
print(f"DNS stub, pinned name: {dns or 'skipped (no host-only name in /etc/hosts)'} ms (goal <= 0.2 ms)")
PY
