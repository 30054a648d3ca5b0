#!/usr/bin/env bash
# terra run (issue 4): median wall time of `terra run -- /bin/true` (default
# policy, the product binary: the static musl build of `make build`) against an
# equivalent bubblewrap box, in the same run;
# the supervisor's peak RSS; and the median of each phase terra logs at debug
# level. CLI: compile, resolve; handoff = the supervisor's start (beside the
# CLI's resolving) to the request written; supervisor = that start to the
# run's end. Supervisor: validate = its start (the early box's clone, the
# wait for the request) to the run directory made; spawn = the box's
# configuration handed over; box = from there to init's word on the
# workload's end (mounts, filters, activation, exec, the workload); reap =
# that word to init reaped (the box torn down); teardown = that word to the
# receipts written, the box reaped and the temp directory removed.
#
#   scripts/bench-run.sh                 # runs `make build` first, measures dist/terra
#   TERRA_BIN=path/to/terra RUNS=100 scripts/bench-run.sh   # measures that binary
#
# Uses hyperfine when installed, else a loop timed with `date +%s%N`
# (the two commands alternate, so drift hits both alike). Installs bubblewrap
# with apt-get only when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-100}
WARMUP=${WARMUP:-5}

if [ -z "${TERRA_BIN:-}" ]; then
  # The product: `make build` copies target/<musl>/release/terra to dist/terra,
  # so it must build into the default target directory.
  env -u CARGO_TARGET_DIR make build >&2
  TERRA_BIN=dist/terra
fi
TERRA_BIN=$(realpath "$TERRA_BIN")
case "$(file -b "$TERRA_BIN" 2>/dev/null || true)" in
  *static*) bin_kind="statically linked" ;;
  *dynamic*) bin_kind="dynamically linked"
    echo "note: $TERRA_BIN is dynamically linked; the product is the static build of \`make build\`" >&2 ;;
  *) bin_kind="linkage unknown" ;;
esac

if ! command -v bwrap >/dev/null 2>&1; then
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get install -y -qq bubblewrap >/dev/null 2>&1 ||
    { "${sudo_cmd[@]}" apt-get update -qq >/dev/null && "${sudo_cmd[@]}" apt-get install -y -qq bubblewrap >/dev/null; }
fi

# The workspace (and the state directory) live under $HOME, like a project
# checkout. A workspace under TMPDIR would make every box create its mount
# points inside the run's host temp directory, which is bound at /tmp (on this
# machine's ext4 about 0.6 ms a run more); BENCH_HOME=/tmp measures that case.
work=$(mktemp -d -p "${BENCH_HOME:-$HOME}" terra-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws" "$work/state"
cd "$work/ws"
export XDG_STATE_HOME="$work/state"

# Let the file system settle first: the build that usually precedes this
# script (make bench) creates and deletes thousands of files, and on an ext4
# without a journal (this machine's root) every new inode is then placed after
# a scan past the inodes deleted in the last seconds (measured: up to 2 ms a
# run of terra's mkdir/create work right after a build). sync cleans the
# inode tables, after which that window is 5 s.
sync
sleep "${SETTLE:-10}"

terra_cmd=("$TERRA_BIN" run -- /bin/true)
bwrap_cmd=(bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin
  --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev /bin/true)

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

"${terra_cmd[@]}" || { echo "terra run -- /bin/true failed" >&2; exit 1; }
"${bwrap_cmd[@]}" || { echo "bwrap failed" >&2; exit 1; }

if command -v hyperfine >/dev/null 2>&1; then
  # hyperfine runs one command's samples, then the other's: a drift of this
  # machine's speed would favour one side. So: ROUNDS rounds of RUNS/ROUNDS
  # runs each, the order swapped every round, and the medians of all samples.
  ROUNDS=${ROUNDS:-4}
  per=$(( (RUNS + ROUNDS - 1) / ROUNDS ))
  method="hyperfine -N, $ROUNDS rounds of --warmup $WARMUP --runs $per, the order swapped each round; medians of all $((per * ROUNDS)) samples per command"
  for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then pair=("${terra_cmd[*]}" "${bwrap_cmd[*]}"); else pair=("${bwrap_cmd[*]}" "${terra_cmd[*]}"); fi
    hyperfine -N --warmup "$WARMUP" --runs "$per" --export-json "$work/h$r.json" "${pair[@]}" >&2
  done
  read -r terra_ms bwrap_ms < <(python3 -c '
import json, statistics, sys
terra, files = sys.argv[1], sys.argv[2:]
t, b = [], []
for f in files:
    for x in json.load(open(f))["results"]:
        (t if x["command"] == terra else b).extend(x["times"])
print(round(statistics.median(t) * 1000, 3), round(statistics.median(b) * 1000, 3))' "${terra_cmd[*]}" "$work"/h*.json)
else
  method="loop of $RUNS alternating runs timed with date +%s%N ($WARMUP warm-up runs each)"
  for _ in $(seq "$WARMUP"); do "${terra_cmd[@]}"; "${bwrap_cmd[@]}"; done
  : >"$work/terra.ns"; : >"$work/bwrap.ns"
  for _ in $(seq "$RUNS"); do
    t0=$(date +%s%N); "${terra_cmd[@]}"; t1=$(date +%s%N)
    "${bwrap_cmd[@]}"; t2=$(date +%s%N)
    echo $((t1 - t0)) >>"$work/terra.ns"
    echo $((t2 - t1)) >>"$work/bwrap.ns"
  done
  terra_ms=$(awk '{print $1/1e6}' "$work/terra.ns" | median)
  bwrap_ms=$(awk '{print $1/1e6}' "$work/bwrap.ns" | median)
fi
ratio=$(awk -v a="$terra_ms" -v b="$bwrap_ms" 'BEGIN {printf "%.2f", a / b}')

# Phases and the supervisor's VmHWM, from debug logs.
: >"$work/phases.log"
for _ in $(seq "$RUNS"); do
  TERRA_LOG=debug "${terra_cmd[@]}" 2>>"$work/phases.log"
done
sed -i 's/\x1b\[[0-9;]*m//g' "$work/phases.log"
phase_rows=""
for phase in compile resolve handoff validate spawn box reap teardown supervisor; do
  # (A phase an older binary does not log is n/a.)
  m=$({ grep -o "phase=\"$phase\" ms=[0-9.e-]*" "$work/phases.log" || true; } | sed 's/.*ms=//' | median)
  phase_rows+="| $phase | $m |"$'\n'
done
hwm_med=$(grep -o 'vm_hwm_kb=[0-9]*' "$work/phases.log" | cut -d= -f2 | median)
hwm_max=$(grep -o 'vm_hwm_kb=[0-9]*' "$work/phases.log" | cut -d= -f2 | sort -n | tail -1)

# Max RSS of the whole run as GNU time sees it (the CLI and what it waited for).
time_rss="n/a"
if [ -x /usr/bin/time ]; then
  time_rss=$(/usr/bin/time -v "${terra_cmd[@]}" 2>&1 >/dev/null | awk -F': ' '/Maximum resident set size/ {print $2}')
fi

cpu=$(lscpu 2>/dev/null | awk -F': *' '/Model name/ {print $2; exit}')
cat <<EOF
### $(date -u +%Y-%m-%d) — $(nproc) CPUs (${cpu:-unknown}), $(uname -sr)

Command: \`scripts/bench-run.sh\` (RUNS=$RUNS), binary \`$TERRA_BIN\` ($bin_kind); method: $method.

| command | median wall time (ms) |
|---|---|
| \`terra run -- /bin/true\` (default policy) | $terra_ms |
| \`bwrap --unshare-all --die-with-parent --ro-bind /usr /usr ... /bin/true\` | $bwrap_ms |
| ratio terra / bwrap (issue 12: goal <= 1.2) | $ratio |

Supervisor peak RSS (VmHWM at exit): median ${hwm_med} KiB, max ${hwm_max} KiB.
Maximum RSS reported by \`/usr/bin/time -v\` for one whole run: ${time_rss} KiB.

Per-phase median latency over $RUNS runs (\`TERRA_LOG=debug\`), in ms:

| phase | median (ms) |
|---|---|
${phase_rows}
EOF
