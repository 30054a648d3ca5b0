#!/usr/bin/env python3
"""Start-up of `terra run -- /bin/true` for several terra binaries and an
equivalent bubblewrap box, interleaved: every iteration runs each arm once,
the order reversed every other iteration, so a machine whose speed drifts
(this one's moves by tens of percent within minutes) slows every arm alike.

    python3 scripts/bench-interleaved.py 200 base=/tmp/terra-base new=dist/terra

Each arm has a state directory of its own (pruning included, as in real
use); the workspace is the current directory (run it from under $HOME: a
workspace under /tmp costs every box extra mount points). Prints each arm's
median and mean wall time (posix_spawn to waitpid) and its ratio to bwrap.
"""
import os
import statistics
import sys
import tempfile
import time

WARMUP = 5
BWRAP = [
    "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
    "/bin/true",
]


def timed(argv, env, devnull):
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]
    start = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions)
    _, status = os.waitpid(pid, 0)
    elapsed = (time.perf_counter() - start) * 1000
    if status != 0:
        sys.exit(f"{argv[0]} failed (wait status {status}): nothing measured")
    return elapsed


def main():
    if len(sys.argv) < 3 or not sys.argv[1].isdigit():
        sys.exit(__doc__)
    iterations = int(sys.argv[1])
    arms = []
    for spec in sys.argv[2:]:
        name, sep, path = spec.partition("=")
        if not sep or not name or name == "bwrap" or not os.access(path, os.X_OK):
            sys.exit(f"{spec!r}: expected NAME=PATH to an executable terra")
        arms.append((name, os.path.realpath(path)))
    devnull = os.open(os.devnull, os.O_RDWR)
    samples = {name: [] for name, _ in arms}
    samples["bwrap"] = []
    with tempfile.TemporaryDirectory(prefix="terra-bench-state.") as states:
        envs = {}
        for name, _ in arms:
            env = dict(os.environ)
            env["XDG_STATE_HOME"] = os.path.join(states, name)
            os.mkdir(env["XDG_STATE_HOME"])
            envs[name] = env
        for i in range(WARMUP + iterations):
            order = arms + [("bwrap", None)]
            if i % 2:
                order.reverse()
            for name, path in order:
                if path is None:
                    ms = timed(BWRAP, dict(os.environ), devnull)
                else:
                    ms = timed([path, "run", "--", "/bin/true"], envs[name], devnull)
                if i >= WARMUP:
                    samples[name].append(ms)
    reference = statistics.median(samples["bwrap"])
    for name, values in samples.items():
        median = statistics.median(values)
        print(
            f"{name:10} median {median:6.2f} ms  mean {statistics.mean(values):6.2f} ms"
            f"  ratio to bwrap {median / reference:.2f}"
        )


if __name__ == "__main__":
    main()
