# The workload's side of the re-aim probes. argv: mode, the listed echo
# port, the unlisted sentinel ports (127.0.0.1, 127.0.0.2, ::1), a free port.
import ctypes, errno, os, socket, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
mode = sys.argv[1]
P, U4, U4B, U6, FREE = map(int, sys.argv[2:7])
MSG_FASTOPEN = 0x20000000
TCP_FASTOPEN_CONNECT = 30
TCP_REPAIR = 19

def name(e):
    # EOPNOTSUPP by its Linux name (python3 calls the same number ENOTSUP).
    return "EOPNOTSUPP" if e == errno.EOPNOTSUPP else errno.errorcode.get(e, str(e))

def res(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return name(e.errno)

def sa(v6, ip, port):
    if v6:
        return struct.pack("=HHI16sI", socket.AF_INET6, socket.htons(port), 0,
                           socket.inet_pton(socket.AF_INET6, ip), 0)
    return struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton(ip))

UNSPEC = struct.pack("=H14x", socket.AF_UNSPEC)

def raw_connect(fd, addr):
    b = ctypes.create_string_buffer(addr, len(addr))
    return "ok" if libc.connect(fd, b, len(addr)) == 0 else name(ctypes.get_errno())

def handed(v6):
    if v6:
        s = socket.socket(socket.AF_INET6)
        s.connect(("::ffff:127.0.0.1", P))
    else:
        s = socket.create_connection(("127.0.0.1", P))
    return s

def targets(v6):
    if v6:
        return [("::1", U6), ("::ffff:127.0.0.1", U4), ("::ffff:127.0.0.2", U4B)]
    return [("127.0.0.1", U4), ("127.0.0.2", U4B)]

def works(s, tag):
    try:
        s.settimeout(5)  # a socket aimed elsewhere gets no echo
        s.sendall(tag + b"\n")
        return s.recv(100) == b"echo:" + tag + b"\n"
    except OSError:
        return False

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

class msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(iovec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]

class mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", msghdr), ("len", ctypes.c_uint)]

def sendmmsg(s, data, flags, addr):
    buf = ctypes.create_string_buffer(data, len(data))
    a = ctypes.create_string_buffer(addr, len(addr))
    iov = iovec(ctypes.cast(buf, ctypes.c_void_p), len(data))
    m = mmsghdr(msghdr(ctypes.cast(a, ctypes.c_void_p), len(addr), ctypes.pointer(iov), 1, None, 0, 0), 0)
    n = libc.sendmmsg(s.fileno(), ctypes.byref(m), 1, flags)
    if n < 0:
        raise OSError(ctypes.get_errno(), "sendmmsg")
    return m.len  # the bytes sent

def fam(v6):
    return "v6" if v6 else "v4"

def in_child(f):
    """f() run in a forked child; its printed result comes back through a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = f()
        except Exception as e:
            out = "error " + repr(e)
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    out = os.read(r, 1000).decode()
    os.waitpid(pid, 0)
    return out

def reaim(fd, v6, ip, port):
    return raw_connect(fd, UNSPEC) + " " + raw_connect(fd, sa(v6, ip, port))

if mode == "connect":
    for v6 in (False, True):
        for ip, port in targets(v6):
            s = handed(v6)
            print(fam(v6), "connect", ip, reaim(s.fileno(), v6, ip, port), works(s, b"c"))
            s.close()
        # A child that inherited the socket (fork), and another process
        # that was sent it (SCM_RIGHTS).
        ip, port = targets(v6)[0]
        s = handed(v6)
        print(fam(v6), "fork", in_child(lambda: reaim(s.fileno(), v6, ip, port)), works(s, b"f"))
        s.close()
        # The receiver is forked before the socket exists: it only ever
        # holds the descriptor it was sent.
        a, b = socket.socketpair()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            _, fds, _, _ = socket.recv_fds(b, 10, 1)
            os.write(w, reaim(fds[0], v6, ip, port).encode())
            os._exit(0)
        os.close(w)
        s = handed(v6)
        socket.send_fds(a, [b"s"], [s.fileno()])
        got = os.read(r, 1000).decode()
        os.waitpid(pid, 0)
        print(fam(v6), "scm_rights", got, works(s, b"s"))
        s.close()
    # The twin: a socket of the box's own is disconnected and connected anew.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    c = socket.create_connection(srv.getsockname())
    print("box-socket", raw_connect(c.fileno(), UNSPEC), raw_connect(c.fileno(), sa(False, *srv.getsockname())))

elif mode == "fastopen":
    for v6 in (False, True):
        for ip, port in targets(v6):
            s = handed(v6)
            print(fam(v6), "sendto", ip, raw_connect(s.fileno(), UNSPEC),
                  res(lambda: s.sendto(b"x", MSG_FASTOPEN, (ip, port))),
                  res(lambda: s.sendmsg([b"x"], [], MSG_FASTOPEN, (ip, port))),
                  res(lambda: sendmmsg(s, b"x", MSG_FASTOPEN, sa(v6, ip, port))),
                  res(lambda: s.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN_CONNECT, 1)),
                  works(s, b"t"))
            s.close()
            # A fresh socket of the box: the filter answers, not the state.
            f = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET)
            print(fam(v6), "fresh", ip,
                  res(lambda: f.sendto(b"x", MSG_FASTOPEN, (ip, port))),
                  res(lambda: f.sendmsg([b"x"], [], MSG_FASTOPEN, (ip, port))),
                  res(lambda: sendmmsg(f, b"x", MSG_FASTOPEN, sa(v6, ip, port))),
                  res(lambda: f.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN_CONNECT, 1)))
            f.close()
    params = ctypes.create_string_buffer(120)
    r = libc.syscall(425, 4, params)  # io_uring_setup
    print("io_uring", "ok" if r >= 0 else name(ctypes.get_errno()))

elif mode == "send":
    for v6 in (False, True):
        for ip, port in targets(v6):
            s = handed(v6)
            a = s.sendto(b"to\n", 0, (ip, port))
            r1 = s.recv(100)
            b = s.sendmsg([b"msg\n"], [], 0, (ip, port))
            r2 = s.recv(100)
            c = sendmmsg(s, b"mmsg\n", 0, sa(v6, ip, port))
            r3 = s.recv(100)
            print(fam(v6), "send", ip, a, r1 == b"echo:to\n", b, r2 == b"echo:msg\n", c, r3 == b"echo:mmsg\n")
            s.close()

elif mode == "bind":
    for v6 in (False, True):
        s = handed(v6)
        here = ("::", FREE) if v6 else ("127.0.0.1", FREE)
        connected = (res(lambda: s.bind(here)), res(lambda: s.listen(4)))
        # TCP_REPAIR could set new addresses; it needs CAP_NET_ADMIN over the
        # host's network namespace, which nothing in the box has.
        print(fam(v6), "repair", res(lambda: s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, 1)))
        # The connection ends (the server closes, so do we): the socket is
        # in TCP_CLOSE, where a port connect() picked would be given back.
        s.sendall(b"close\n")
        s.shutdown(socket.SHUT_RDWR)
        s.recv(100)
        time.sleep(0.2)
        ended = (res(lambda: s.bind(here)), res(lambda: s.listen(4)),
                 reaim(s.fileno(), v6, *targets(v6)[0]))
        print(fam(v6), "bind", *connected, "ended", *ended, s.getsockname()[1] != FREE)
        s.close()
    # The twin: a socket of the box's own binds and listens.
    t = socket.socket()
    print("box-socket", res(lambda: t.bind(("127.0.0.1", FREE))), res(lambda: t.listen(4)))
elif mode == "race":
    # One thread swaps descriptor 100 between a handed socket whose
    # connection ended and a fresh AF_UNIX socket of the box, and the
    # address between that socket's path and a free host port, while this
    # thread binds descriptor 100 with it: the handed socket never gets
    # the port, whatever check a bind() might pass first.
    import threading
    h = socket.create_connection(("127.0.0.1", P))
    h.sendall(b"close\n")
    h.shutdown(socket.SHUT_RDWR)
    h.recv(10)
    time.sleep(0.2)
    inet = sa(False, "127.0.0.1", FREE)
    path = os.path.join(os.getcwd(), "race.sock").encode()
    unix = struct.pack("=H", socket.AF_UNIX) + path + b"\0"
    n = max(len(inet), len(unix))
    inet, unix = inet.ljust(n, b"\0"), unix.ljust(n, b"\0")
    buf = ctypes.create_string_buffer(unix, n)
    u = socket.socket(socket.AF_UNIX)
    os.dup2(u.fileno(), 100)
    stop = False
    def flip():
        while not stop:
            ctypes.memmove(buf, inet, n)
            os.dup2(h.fileno(), 100)
            ctypes.memmove(buf, unix, n)
            os.dup2(u.fileno(), 100)
    threading.Thread(target=flip, daemon=True).start()
    for i in range(2000):
        if os.path.exists("race.sock"):
            os.unlink("race.sock")
        libc.bind(100, buf, n)
        if h.getsockname()[1] == FREE:
            break
    stop = True
    print("race", "squatted" if h.getsockname()[1] == FREE else "port-free", i + 1)

elif mode == "unixbind":
    # The box's own sockets bind as the kernel would bind them.
    os.umask(0o077)
    def listen_and_reach(addr):
        s = socket.socket(socket.AF_UNIX)
        got = res(lambda: s.bind(addr))
        if got == "ok":
            s.listen(1)
            c = socket.socket(socket.AF_UNIX)
            c.connect(s.getsockname() or addr)
            got += " reached"
        return s, got
    s1, r1 = listen_and_reach("rel.sock")
    st = os.stat("rel.sock")
    print("unix relative", r1, oct(st.st_mode & 0o777), st.st_uid == os.getuid())
    s2, r2 = listen_and_reach(os.path.abspath("abs.sock"))
    print("unix absolute", r2)
    print("unix again", res(lambda: socket.socket(socket.AF_UNIX).bind("rel.sock")))
    s3, r3 = listen_and_reach("\0terra-reaim-abstract")
    print("unix abstract", r3, res(lambda: socket.socket(socket.AF_UNIX).bind("\0terra-reaim-abstract")))
    a = socket.socket(socket.AF_UNIX)
    print("unix autobind", res(lambda: a.bind("")), a.getsockname()[:1] == "\0" or a.getsockname()[:1] == b"\0")
    print("unix read-only", res(lambda: socket.socket(socket.AF_UNIX).bind("/usr/terra-reaim.sock")))
    print("unix no-dir", res(lambda: socket.socket(socket.AF_UNIX).bind("no/such/dir.sock")))
    d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    print("unix dgram", res(lambda: d.bind("dgram.sock")))
    t4 = socket.socket()
    print("inet", res(lambda: t4.bind(("127.0.0.1", 0))), res(lambda: t4.bind(("127.0.0.1", 0))))
    t6 = socket.socket(socket.AF_INET6)
    print("inet6", res(lambda: t6.bind(("::1", 0))))
    t0 = socket.socket()
    un = struct.pack("=HH4s8x", socket.AF_UNSPEC, socket.htons(0), socket.inet_aton("0.0.0.0"))
    b = ctypes.create_string_buffer(un, 16)
    print("inet unspec-any", "ok" if libc.bind(t0.fileno(), b, 16) == 0 else name(ctypes.get_errno()))
    t1 = socket.socket()
    print("inet short", "ok" if libc.bind(t1.fileno(), b, 8) == 0 else name(ctypes.get_errno()))
    t2 = socket.socket(socket.AF_INET6)
    v4 = ctypes.create_string_buffer(sa(False, "127.0.0.1", 0) + b"\0" * 12, 28)
    print("inet6 family", "ok" if libc.bind(t2.fileno(), v4, 28) == 0 else name(ctypes.get_errno()))
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    print("netlink", res(lambda: nl.bind((0, 0))))
print("done")
