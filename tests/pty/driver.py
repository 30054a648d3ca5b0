# Drives a command on a pseudo-terminal this script makes, as a terminal
# emulator would: the command runs in a new session with the slave as its
# controlling terminal and standard streams; the steps (JSON, argv[1]) type
# keys, resize the window, wait (bounded) for text, signal the command. The
# report (JSON on stdout) has the output, the exit status and the state of
# this outer terminal afterwards: line discipline, exclusive mode, modes,
# unread input.
import fcntl, json, os, select, signal, struct, sys, termios, time

TIOCGEXCL = 0x80045440
spec = json.loads(sys.argv[1])
master, slave = os.openpty()
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", spec.get("rows", 24), spec.get("cols", 80), 0, 0))
before = termios.tcgetattr(slave)
st = os.fstat(slave)
outer = "%d:%d" % (st.st_dev, st.st_ino)
env = dict(spec.get("env", {}))
env["OUTER_TTY"] = outer
cmd = [a.replace("@OUTER_TTY@", outer) for a in spec["cmd"]]
pid = os.fork()
if pid == 0:
    try:
        os.setsid()
        for fd in (0, 1, 2):
            os.dup2(slave, fd)
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        os.close(master)
        os.close(slave)
        if spec.get("stdin_pipe") is not None:
            r, w = os.pipe()
            os.write(w, spec["stdin_pipe"].encode())
            os.close(w)
            os.dup2(r, 0)
            os.close(r)
        os.execve(cmd[0], cmd, env)
    finally:
        os._exit(127)

buf = b""
pos = 0
status = None
failed = None
raw_seen = []

def pump(limit):
    """Reads what arrives within `limit`; False once nothing more can come."""
    global buf
    r, _, _ = select.select([master], [], [], limit)
    if r:
        try:
            d = os.read(master, 65536)
        except OSError:
            return False
        if not d:
            return False
        buf += d
    return True

def drain():
    """What is left to read once the command ended."""
    global buf
    while select.select([master], [], [], 0.2)[0]:
        try:
            d = os.read(master, 65536)
        except OSError:
            return
        if not d:
            return
        buf += d

def expect(text, limit):
    global pos
    t = text.encode()
    end = time.time() + limit
    while time.time() < end:
        i = buf.find(t, pos)
        if i >= 0:
            pos = i + len(t)
            return True
        if not pump(0.1):
            time.sleep(0.05)
    i = buf.find(t, pos)
    if i >= 0:
        pos = i + len(t)
        return True
    return False

def reap(limit):
    global status
    end = time.time() + limit
    while time.time() < end:
        p, s = os.waitpid(pid, os.WNOHANG)
        if p == pid:
            status = os.waitstatus_to_exitcode(s)
            return True
        pump(0.1)
    return False

for step in spec["steps"]:
    kind = step[0]
    if kind == "expect":
        if not expect(step[1], step[2] if len(step) > 2 else 60):
            failed = "expected %r" % step[1]
            break
    elif kind == "send":
        os.write(master, step[1].encode())
    elif kind == "resize":
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", step[1], step[2], 0, 0))
    elif kind == "retry":
        ok = False
        for _ in range(step[3]):
            os.write(master, step[1].encode())
            if expect(step[2], 1.0):
                ok = True
                break
        if not ok:
            failed = "expected %r after %r" % (step[2], step[1])
            break
    elif kind == "outer_raw":
        lflag = termios.tcgetattr(slave)[3]
        raw_seen.append(not (lflag & termios.ICANON) and not (lflag & termios.ECHO))
    elif kind == "signal":
        os.kill(pid, getattr(signal, step[1]))
    elif kind == "wait":
        if not reap(step[1] if len(step) > 1 else 60):
            failed = "the command did not end"
            break

if status is None:
    if failed is None and not reap(60):
        failed = "the command did not end"
    if status is None:
        os.killpg(pid, signal.SIGKILL)
        reap(10)
def measure(f):
    """One check of the outer terminal; its error in words when it fails."""
    try:
        return f()
    except OSError as e:
        return "error: %s" % e
    except termios.error as e:
        return "error: %s" % (e,)

def int_ioctl(req):
    return struct.unpack("i", fcntl.ioctl(slave, req, struct.pack("i", 0)))[0]

# Whatever the command left unread on the outer terminal (injected input).
pending = measure(lambda: int_ioctl(termios.FIONREAD))
drain()
after = measure(lambda: termios.tcgetattr(slave))
ldisc = measure(lambda: int_ioctl(termios.TIOCGETD))
excl = measure(lambda: int_ioctl(TIOCGEXCL))
json.dump({
    "out": buf.decode("utf-8", "replace"),
    "status": status,
    "failed": failed,
    "ldisc": ldisc,
    "exclusive": excl,
    "modes_restored": before == after,
    "modes_before": repr(before),
    "modes_after": repr(after),
    "pending": pending,
    "raw_during_run": raw_seen,
}, sys.stdout)
