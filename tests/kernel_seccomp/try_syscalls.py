"""Run inside a life by Debian's /usr/bin/python3 (visible through the /usr bind): tries
what the test asks and prints one JSON object. Flatpak tests its filter the same way.

argv[1]: a JSON object {"calls": [[label, number, [args...]], ...], "probe": [...names]}.
Each call is made raw (libc ``syscall``) and reported as 0 (it returned >= 0) or its
errno name. A call that created a child by clone returns 0 there: the child exits at
once. ``probe`` names what else to measure (see PROBES).
"""

import ctypes
import errno
import json
import os
import resource
import socket
import sys
import threading

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def call(number, args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in args))
    if result == 0 and os.getpid() != PID:
        os._exit(0)  # a clone that went through: the child leaves at once
    if result >= 0:
        return 0
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def count_until_failure(make, cap):
    """How many ``make()`` succeed (kept open) before one fails, at most ``cap``."""
    held, error = [], None
    while len(held) < cap:
        try:
            held.append(make())
        except OSError as exc:
            error = errno.errorcode.get(exc.errno, str(exc.errno))
            break
    return held, error


def inotify_instance():
    fd = libc.inotify_init()
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return fd


def inotify_watches(cap):
    fd = inotify_instance()
    folder = "/tmp/watched"
    os.makedirs(folder, exist_ok=True)
    count, error = 0, None
    while count < cap:
        path = f"{folder}/{count}"
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        if libc.inotify_add_watch(fd, path.encode(), 0x2) < 0:  # IN_MODIFY
            error = errno.errorcode.get(ctypes.get_errno(), "?")
            break
        count += 1  # (the file stays: unlinking it would end its watch)
    return count, error


def keyring(request):
    """The session keyring as the life sees it: its id, whether the named keys are found
    in it (and their payload), after leaving a key of its own there if asked."""
    def keyctl(*args):
        ctypes.set_errno(0)
        result = libc.syscall(ctypes.c_long(SYS_KEYCTL), *args)
        return result if result >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")

    out = {"session": keyctl(ctypes.c_long(0), ctypes.c_long(-3), ctypes.c_long(0))}
    for name in request.get("find_keys", []):
        found = keyctl(ctypes.c_long(10), ctypes.c_long(-3), b"user", name.encode(),
                       ctypes.c_long(0))
        if isinstance(found, int):
            buffer = ctypes.create_string_buffer(256)
            size = keyctl(ctypes.c_long(11), ctypes.c_long(found), buffer, ctypes.c_long(256))
            found = buffer.raw[:size].decode() if isinstance(size, int) else size
        out[name] = found
    leave = request.get("leave_key")
    if leave:
        ctypes.set_errno(0)
        made = libc.syscall(ctypes.c_long(SYS_ADD_KEY), b"user", leave.encode(), b"left",
                            ctypes.c_long(4), ctypes.c_long(-3))
        out["left"] = made if made >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
    return out


def foreign_abi():
    """getpid through the i386 gate (int 0x80) of this 64-bit process."""
    import mmap
    code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"  # mov eax, 20; int 0x80; ret
    memory = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    memory.write(code)
    address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    result = ctypes.CFUNCTYPE(ctypes.c_int)(address)()
    return result if result >= 0 else errno.errorcode.get(-result, str(result))


def probes(names, caps, request):
    out, keep = {}, []
    if "keyring" in names:
        out["keyring"] = keyring(request)
    if "i386" in names:
        out["i386"] = foreign_abi()
    if "status" in names:
        with open("/proc/self/status") as status:
            out["seccomp"] = [line.split()[1] for line in status if line.startswith("Seccomp:")]
    if "nofile" in names:
        out["nofile"] = list(resource.getrlimit(resource.RLIMIT_NOFILE))
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 16, 1 << 16))
            out["nofile_raise"] = "raised"
        except (OSError, ValueError) as exc:
            out["nofile_raise"] = type(exc).__name__
        held, error = count_until_failure(lambda: os.open("/dev/null", os.O_RDONLY),
                                          caps["files"])
        out["files"] = [len(held), error]
        for fd in held:
            os.close(fd)
    if "rlimits" in names:
        out["rlimits"] = {name: list(resource.getrlimit(getattr(resource, name)))
                          for name in ("RLIMIT_MSGQUEUE", "RLIMIT_SIGPENDING")}
        libc.mq_open.restype = ctypes.c_int
        ctypes.set_errno(0)
        queue = libc.mq_open(b"/ouro-test", os.O_CREAT | os.O_RDWR, 0o600, None)
        out["mq_open"] = 0 if queue >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
    if "ptys" in names:
        held, error = count_until_failure(os.openpty, caps["ptys"])
        out["ptys"] = [len(held), error]
        keep.append(held)
    if "inotify" in names:
        held, error = count_until_failure(inotify_instance, caps["inotify"])
        out["inotify"] = [len(held), error]
        keep.append(held)
    if "watches" in names:
        out["watches"] = list(inotify_watches(caps["watches"]))
    if "threads" in names:
        box = []
        worker = threading.Thread(target=lambda: box.append(1))
        worker.start()
        worker.join()
        out["threads"] = box == [1]
    if "spawn" in names:
        import subprocess
        out["spawn"] = subprocess.run(["/bin/echo", "spawned"], capture_output=True,
                                      check=False).stdout.decode().strip()
    if "fork" in names:
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return out, keep


PID = os.getpid()
SYS_ADD_KEY, SYS_KEYCTL = 248, 250  # x86_64


def main():
    request = json.loads(sys.argv[1])
    results = {label: call(number, args) for label, number, args in request.get("calls", [])}
    out, keep = probes(set(request.get("probe", [])), request.get("caps", {}), request)
    out["calls"] = results
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    if request.get("notify"):  # hold everything until the host has probed
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as door:
            door.settimeout(60)
            door.connect(request["notify"])
            door.sendall(b"holding\n")
            door.recv(16)
    del keep


if __name__ == "__main__":
    main()
