#!/usr/bin/env bash
# Network broker (issue 5): the relay benchmark of terra-netd, then the extra
# start-up of `terra run` with a mediated policy over network none: median
# wall time of `terra run -- /bin/true` (default policy, network none) and of
# `terra run --allow-net example.com:443 -- /bin/true` (the same policy with
# one mediated destination: the broker is started, confirms, and is reaped),
# alternating, release build. Goal: difference < 5 ms.
#
#   scripts/bench-net.sh                       # builds target/release/terra first
#   TERRA_BIN=dist/terra RUNS=100 SKIP_RELAY=1 scripts/bench-net.sh
#
# Uses hyperfine when installed, else a loop timed with `date +%s%N`. Nothing
# leaves the machine: /bin/true opens no connection.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-50}
WARMUP=${WARMUP:-5}

if [ -z "${SKIP_RELAY:-}" ]; then
  cargo bench --locked -p terra-netd --bench relay
fi

if [ -z "${TERRA_BIN:-}" ]; then
  cargo build --release --locked --bin terra >&2
  TERRA_BIN="${CARGO_TARGET_DIR:-target}/release/terra"
fi
TERRA_BIN=$(realpath "$TERRA_BIN")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws" "$work/state"
cd "$work/ws"
export XDG_STATE_HOME="$work/state"

none_cmd=("$TERRA_BIN" run -- /bin/true)
med_cmd=("$TERRA_BIN" run --allow-net example.com:443 -- /bin/true)

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

"${none_cmd[@]}" || { echo "terra run -- /bin/true failed" >&2; exit 1; }
"${med_cmd[@]}" || { echo "terra run --allow-net ... -- /bin/true failed" >&2; exit 1; }

if command -v hyperfine >/dev/null 2>&1; then
  method="hyperfine -N --warmup $WARMUP --runs $RUNS"
  hyperfine -N --warmup "$WARMUP" --runs "$RUNS" --export-json "$work/h.json" \
    "${none_cmd[*]}" "${med_cmd[*]}" >&2
  read -r none_ms med_ms < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"]
print(*(round(x["median"] * 1000, 3) for x in r))' "$work/h.json")
else
  method="loop of $RUNS alternating runs timed with date +%s%N ($WARMUP warm-up runs each)"
  for _ in $(seq "$WARMUP"); do "${none_cmd[@]}"; "${med_cmd[@]}"; done
  : >"$work/none.ns"; : >"$work/med.ns"
  for _ in $(seq "$RUNS"); do
    t0=$(date +%s%N); "${none_cmd[@]}"; t1=$(date +%s%N)
    "${med_cmd[@]}"; t2=$(date +%s%N)
    echo $((t1 - t0)) >>"$work/none.ns"
    echo $((t2 - t1)) >>"$work/med.ns"
  done
  none_ms=$(awk '{print $1/1e6}' "$work/none.ns" | median)
  med_ms=$(awk '{print $1/1e6}' "$work/med.ns" | median)
  # Median of the per-pair differences too (the pairs ran back to back).
  pair_ms=$(paste "$work/none.ns" "$work/med.ns" | awk '{print ($2-$1)/1e6}' | median)
fi
diff_ms=$(awk -v a="$med_ms" -v b="$none_ms" 'BEGIN {printf "%.3f", a - b}')

# Where the extra time goes: the supervisor's broker phases at debug level
# (broker-start: fork of the role to its "ready"; broker-stop: from the box's
# end to the broker reaped).
: >"$work/phases.log"
for _ in $(seq "$RUNS"); do
  TERRA_LOG=debug "${med_cmd[@]}" 2>>"$work/phases.log"
done
sed -i 's/\x1b\[[0-9;]*m//g' "$work/phases.log"
start_ms=$(grep -o 'phase="broker-start" ms=[0-9.e-]*' "$work/phases.log" | sed 's/.*ms=//' | median)
stop_ms=$(grep -o 'phase="broker-stop" ms=[0-9.e-]*' "$work/phases.log" | sed 's/.*ms=//' | median)

cpu=$(lscpu 2>/dev/null | awk -F': *' '/Model name/ {print $2; exit}')
cat <<EOF
### $(date -u +%Y-%m-%d) — start-up with a mediated policy, $(nproc) CPUs (${cpu:-unknown}), $(uname -sr)

Command: \`scripts/bench-net.sh\` (RUNS=$RUNS), binary \`$TERRA_BIN\`; method: $method.

| command | median wall time (ms) |
|---|---|
| \`terra run -- /bin/true\` (network none) | $none_ms |
| \`terra run --allow-net example.com:443 -- /bin/true\` (mediated: broker started, confirmed, reaped) | $med_ms |
| extra start-up of mediated (difference of the medians; goal < 5 ms) | $diff_ms |
| median of the per-pair differences | ${pair_ms:-n/a} |

Supervisor phases over $RUNS mediated runs (\`TERRA_LOG=debug\`), medians: broker-start ${start_ms} ms (role fork to its \`ready\`: namespaces, read-only root, capability drop, startup message, Landlock, seccomp), broker-stop ${stop_ms} ms (box ended to broker reaped).
EOF
