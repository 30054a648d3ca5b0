# Inside the box, on the box's terminal: looks for a descriptor of the
# operator's terminal (OUTER_TTY is its device:inode), then tries to break
# the terminal it has: line discipline N_NULL, exclusive mode, injected
# input, other modes. Prints what each attempt did; the test judges the
# operator's terminal afterwards.
import fcntl, os, struct, termios

outer = os.environ["OUTER_TTY"]
held = []
for fd in os.listdir("/proc/self/fd"):
    try:
        st = os.stat("/proc/self/fd/" + fd)
    except OSError:
        continue
    if "%d:%d" % (st.st_dev, st.st_ino) == outer:
        held.append(fd)
if held:
    print("TERRA-PROBE-ESCAPED: the workload holds the operator's terminal on fds", held)
fds = [0, 1, 2]
try:
    fds.append(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
except OSError as e:
    print("no /dev/tty:", e)
N_NULL = 27
for fd in fds:
    for name, req, arg in [
        ("TIOCSETD", termios.TIOCSETD, struct.pack("i", N_NULL)),
        ("TIOCEXCL", termios.TIOCEXCL, 0),
        ("TIOCSTI", termios.TIOCSTI, b"X"),
    ]:
        try:
            fcntl.ioctl(fd, req, arg)
            print("did", name, "on", fd)
        except OSError as e:
            print("refused", name, "on", fd, "errno", e.errno)
    try:
        m = termios.tcgetattr(fd)
        m[3] &= ~(termios.ECHO | termios.ICANON | termios.ISIG)
        m[4] = m[5] = termios.B50
        termios.tcsetattr(fd, termios.TCSANOW, m)
        print("did tcsetattr on", fd)
    except termios.error as e:
        print("refused tcsetattr on", fd, e)
print("PROBE" + "-END", flush=True)
