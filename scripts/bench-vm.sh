#!/usr/bin/env bash
# The vm backend (issue 17): wall time of `terra run --backend vm -- /bin/true`
# (median of RUNS, after one run that fills the cache), QEMU's peak resident
# set size during a run, and the 9p share's read throughput with 1 MiB reads
# of a SIZE_MB file in the workspace; the load average before and after
# (other builds on the same cores change every number here).
#
#   scripts/bench-vm.sh                          # make build first, measures dist/terra
#   TERRA_BIN=path/to/terra RUNS=9 scripts/bench-vm.sh
#
# Needs QEMU and a kernel (scripts/bootstrap.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-5}
SIZE_MB=${SIZE_MB:-256}

if [ -z "${TERRA_BIN:-}" ]; then
  env -u CARGO_TARGET_DIR make build >&2
  TERRA_BIN=dist/terra
fi
TERRA_BIN=$(realpath "$TERRA_BIN")

work=$(mktemp -d -p "${BENCH_HOME:-$HOME}" terra-bench-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws"
cd "$work/ws"
run() { "$TERRA_BIN" run --backend vm --rm-temp --quiet "$@"; }

echo "binary:  $TERRA_BIN ($(file -b "$TERRA_BIN" | cut -d, -f1-2))"
echo "machine: $(nproc) CPUs, $(uname -r); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$TERRA_BIN" run --backend vm --dry-run -- true | grep -E '^  (engine|accelerator|kernel):' || true

# The first run fills the cache (vmlinux, initramfs) for this binary.
t0=$(date +%s%N); run -- /bin/true; t1=$(date +%s%N)
echo "first run (fills the cache when absent): $(( (t1 - t0) / 1000000 )) ms"

times=()
for _ in $(seq "$RUNS"); do
  t0=$(date +%s%N); run -- /bin/true; t1=$(date +%s%N)
  times+=($(( (t1 - t0) / 1000000 )))
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
median=$(printf '%s\n' "$sorted" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
echo "terra run --backend vm -- /bin/true: runs ${times[*]} ms; median of $RUNS: $median ms"

# QEMU's peak RSS: VmHWM of the run's QEMU, read until it exits.
# The QEMU below process $1 (other runs on this machine have their own).
qemu_below() {
  local q p
  for q in $(pgrep -f qemu-system || true); do
    p=$q
    while [ -n "$p" ] && [ "$p" -gt 1 ]; do
      [ "$p" = "$1" ] && { echo "$q"; return; }
      p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null || true)
    done
  done
}
run -- sh -c 'sleep 2' &
cli=$!
peak=0
# Sample the run's QEMU every 20 ms while the run lasts.
while kill -0 "$cli" 2>/dev/null; do
  qemu=$(qemu_below "$cli")
  if [ -n "$qemu" ]; then
    v=$(awk '/^VmHWM:/ {print $2}' "/proc/$qemu/status" 2>/dev/null || true)
    if [ -n "$v" ] && [ "$v" -gt "$peak" ]; then peak=$v; fi
  fi
  sleep 0.02
done
wait "$cli" || true
echo "QEMU peak RSS (VmHWM) during \`sleep 2\`: $(( peak / 1024 )) MiB (guest RAM 256 MiB by default)"

# 9p throughput: 1 MiB reads of a SIZE_MB file in the workspace, twice in
# one guest (the second read hits the host's page cache, as the first
# usually does too: the file was just written).
head -c "$((SIZE_MB << 20))" /dev/urandom > big.bin
run -- sh -c 'for i in 1 2; do dd if=big.bin of=/dev/null bs=1M 2>&1 | tail -1; done'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
