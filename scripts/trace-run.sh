#!/usr/bin/env bash
# Where a `terra run -- /bin/true` spends its time, from the kernel's own
# tracepoints (bpftrace, root): each process's CPU time at its exit
# (sum_exec_runtime, by role: the CLI, `terra __supervisor`, `terra __vm`,
# the box's network service, the workload; bubblewrap's processes for the
# same box beside them), and the median time between the run's events
# (execs, the box's configuration arriving, the workload's fork, exec and
# end, the CLI's exit). Numbers under tracing run slower than without it:
# read the proportions.
#
#   sudo scripts/trace-run.sh [dist/terra] [RUNS]      # default dist/terra, 40
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-dist/terra}")
runs=${2:-40}
command -v bpftrace >/dev/null || { echo "trace-run.sh needs bpftrace" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "trace-run.sh needs root (bpftrace)" >&2; exit 1; }

work=$(mktemp -d -p "$HOME" terra-trace.XXXXXX)
trap 'kill "$tracer" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/ws" "$work/state"

cat >"$work/run.bt" <<'EOF'
tracepoint:sched:sched_process_exec { printf("%llu %d exec %s\n", nsecs / 1000, pid, str(args->filename)); }
tracepoint:sched:sched_process_fork { printf("%llu %d fork %d\n", nsecs / 1000, args->parent_pid, args->child_pid); }
tracepoint:sched:sched_process_exit { printf("%llu %d exit %d %llu\n", nsecs / 1000, pid, tid, curtask->se.sum_exec_runtime / 1000); }
tracepoint:syscalls:sys_exit_recvmsg { printf("%llu %d recvmsg\n", nsecs / 1000, pid); }
EOF
bpftrace "$work/run.bt" >"$work/events" 2>"$work/bpftrace.err" &
tracer=$!
for _ in $(seq 50); do grep -q . "$work/events" 2>/dev/null && break; sleep 0.1; done
sleep 2
(
  cd "$work/ws"
  export XDG_STATE_HOME="$work/state"
  for _ in $(seq "$runs"); do "$bin" run -- /bin/true >/dev/null 2>&1; done
  for _ in $(seq "$runs"); do
    bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin \
      --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev /bin/true
  done
)
sleep 0.5
kill "$tracer"
wait "$tracer" 2>/dev/null || true

python3 - "$work/events" "$bin" "$runs" <<'EOF'
import collections, statistics, sys

path, binary, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
exe, parent = {}, {}
cpu = collections.Counter()
run, timeline = None, []


def role(pid, tid):
    e = exe.get(pid, "")
    thread = "" if pid == tid else ", threads"
    up = exe.get(parent.get(pid), "")
    if e == binary:
        return "CLI" + thread
    if e == "/proc/self/exe":
        return "terra __supervisor" + thread
    if e.startswith("/dev/fd/"):
        return "terra __vm (init)" + thread
    if e == "/bin/true":
        return "workload /bin/true (bwrap)" if up == "/usr/bin/bwrap" or exe.get(parent.get(parent.get(pid))) == "/usr/bin/bwrap" else "workload /bin/true (terra)"
    if e == "/usr/bin/bwrap":
        return "bwrap"
    if not e and up.startswith("/dev/fd/"):
        return "box network service"
    if not e and up == "/usr/bin/bwrap":
        return "bwrap's child"
    return None


for line in open(path):
    f = line.split()
    if len(f) < 3 or not f[0].isdigit():
        continue
    t, pid, kind = int(f[0]), int(f[1]), f[2]
    if kind == "exec":
        exe[pid] = f[3]
        if f[3] == binary:
            run = {"start": t, "cli": pid}
            timeline.append(run)
        elif run is not None and f[3] == "/proc/self/exe":
            run["sup"], run["supervisor exec"] = pid, t
        elif run is not None and f[3].startswith("/dev/fd/"):
            run["init"], run["init exec"] = pid, t
        elif run is not None and f[3] == "/bin/true" and "init" in run:
            run.setdefault("workload exec", t)
    elif kind == "fork":
        child = int(f[3])
        parent[child] = pid
        if run is not None and pid == run.get("init"):
            run.setdefault("workload fork", t)
    elif kind == "recvmsg" and run is not None and pid == run.get("init"):
        run.setdefault("config read", t)
    elif kind == "exit":
        tid, runtime = int(f[3]), int(f[4])
        r = role(pid, tid)
        if r:
            cpu[r] += runtime
        if run is not None and pid == tid:
            for who, name in (("init", "init exit"), ("cli", "CLI exit")):
                if run.get(who) == pid:
                    run.setdefault(name, t)

print(f"CPU time per run (mean of {runs}), us:")
for name, total in sorted(cpu.items(), key=lambda kv: -kv[1]):
    print(f"  {name:32} {total / runs:8.0f}")
terra = sum(v for k, v in cpu.items() if "bwrap" not in k) / runs
box = sum(v for k, v in cpu.items() if "bwrap" in k) / runs
print(f"  {'terra, all':32} {terra:8.0f}\n  {'bubblewrap, all':32} {box:8.0f}")
steps = ["start", "supervisor exec", "init exec", "config read", "workload fork",
         "workload exec", "init exit", "CLI exit"]
print(f"\nterra's timeline (median of {len(timeline)} runs), us since the CLI's exec:")
for a, b in zip(steps, steps[1:]):
    d = [r[b] - r[a] for r in timeline if a in r and b in r]
    if d:
        print(f"  {a:>16} -> {b:<16} {statistics.median(d):7.0f}")
EOF
