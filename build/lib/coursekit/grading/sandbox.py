"""Confinement of a grading worker: namespaces, a private root, no privileges, rlimits, seccomp.

Each layer is tried in turn and what held is recorded, because the grader reports the isolation
that was actually in force (and checks it from inside a worker, see ``worker.probe``):

1. Namespaces (Linux): new mount, network, PID, IPC and UTS namespaces; as root directly, else
   inside a new user namespace when the kernel allows unprivileged ones.
2. A private root file system (needs the mount namespace): a tmpfs holding read-only binds of the
   system libraries and the Python runtime only, a fresh ``/proc`` and a small private ``/tmp``.
   Paths the grader names as hidden (the coursekit package, the submissions, the results, extra
   cases) are covered by empty mounts where they fall inside what is visible. The runtime's own
   directories stay visible even inside a hidden one (a virtualenv inside the project).
3. No privileges: as root, a dedicated unprivileged uid per worker slot (so ``RLIMIT_NPROC``
   counts the sandbox alone); in a user namespace, every capability dropped. ``no_new_privs``.
4. Resource limits: CPU time, address space, processes, file size, open files, no core dumps.
5. A seccomp filter: no new sockets of any family (no network, and no abstract Unix sockets,
   even without a network namespace; the worker keeps the one it was given), no ``ptrace``,
   mounts, namespaces, BPF, io_uring or kernel-keyring calls.

The worker loads this file by path, outside the ``coursekit`` package: it imports nothing from it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import signal
import site
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
# Every namespace flag clone() takes, cgroup included. Not CLONE_NEWTIME (0x80, the exit-signal
# bits for clone()): a time namespace needs unshare or clone3, which the seccomp filter refuses.
CLONE_NEW_ANY = 0x7E020000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

NAMESPACES = {"mount": CLONE_NEWNS, "network": CLONE_NEWNET, "pid": CLONE_NEWPID,
              "ipc": CLONE_NEWIPC, "uts": CLONE_NEWUTS}

# What a worker may see of the host: the dynamic linker's configuration and the system libraries.
SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin",
                "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                "/etc/localtime")
DEVICES = ("null", "zero", "full", "random", "urandom")

LINUX = sys.platform.startswith("linux")
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def enc(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def prctl(option: int, arg: int = 0) -> int:
    if not LINUX:
        return -1
    return _libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0))


# ----------------------------------------------------------------------------- namespaces


def enter_namespaces(allow_user_namespace: bool = True) -> list[str]:
    """Unshare every namespace we can; returns their names ('user' when one was needed).

    Called in the keeper process, which then forks the worker: the worker is PID 1 of the new
    PID namespace, so when it dies the kernel kills everything it started.
    """
    if not LINUX:
        return []
    flags = sum(NAMESPACES.values())
    if _libc.unshare(flags) == 0:
        return list(NAMESPACES)
    if not allow_user_namespace:
        return []
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(flags | CLONE_NEWUSER) != 0:
        return []
    try:
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"0 {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"0 {gid} 1")
    except OSError:
        pass  # the namespaces still hold; mounts may fail and are then reported as missing
    return ["user", *NAMESPACES]


# ----------------------------------------------------------------------------- file system


def python_homes() -> list[str]:
    """Where the Python runtime and its packages live: its prefixes (a virtualenv's as well) and
    its site-packages directories."""
    found = [sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix,
             *site.getsitepackages()]
    return [os.path.abspath(p) for p in found if os.path.isdir(p)]


def runtime_paths() -> list[str]:
    """Directories the Python runtime needs: its homes and every import path that exists."""
    return python_homes() + [os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)]


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _make_mountpoint(target: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            open(target, "w").close()


def _bind_readonly(source: str, target: str) -> None:
    _make_mountpoint(target, os.path.isdir(source))
    _mount(source, target, None, MS_BIND | MS_REC)
    # A read-only remount must keep the flags the original mount locks (in a user namespace).
    kept = os.statvfs(source).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | kept)


def build_root(root: str, visible: list[str], hidden: list[str], tmp_mib: int,
               runtime: list[str]) -> list[str]:
    """Switch to a private root holding only ``visible`` (read-only), minus ``hidden``.

    ``root`` is an existing empty directory used as the mount point (its content on the host is
    untouched: everything happens inside this process's mount namespace). A path of ``visible``
    inside a hidden one is left out, unless it is one of ``runtime`` (the Python installation, a
    virtualenv inside the hidden project): those are shown alone, without their surroundings.
    Returns the paths that were hidden because they fell inside something visible.
    """
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    # The private /tmp first, so that what is visible inside the host's /tmp (a virtualenv in a
    # checkout under /tmp) is bound on top of it rather than covered by it.
    os.makedirs(root + "/tmp", exist_ok=True)
    _mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmp_mib}m,mode=1777")
    paths = sorted({os.path.abspath(p) for p in visible if os.path.lexists(p)}, key=len)
    bound: list[str] = []
    for path in paths:
        if any(_inside(path, b) for b in bound):
            continue
        if path not in runtime and any(_inside(path, h) for h in hidden):
            continue
        target = root + path
        if os.path.islink(path) and os.path.dirname(path) == "/":  # merged /usr: /lib -> usr/lib
            os.symlink(os.readlink(path), target)
            continue
        _bind_readonly(path, target)
        bound.append(path)
    covered = []
    for path in hidden:
        path = os.path.abspath(path)
        if not any(_inside(path, b) for b in bound) or not os.path.lexists(path):
            continue
        if os.path.isdir(path):
            _mount("tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
                   "size=4k,mode=555")
        else:
            _mount("/dev/null", root + path, None, MS_BIND)
        covered.append(path)
    os.makedirs(root + "/dev", exist_ok=True)
    for name in DEVICES:
        if os.path.exists("/dev/" + name):
            _make_mountpoint(f"{root}/dev/{name}", is_dir=False)
            _mount("/dev/" + name, f"{root}/dev/{name}", None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    os.makedirs(root + "/proc", exist_ok=True)
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _pivot(root)
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return covered


_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41, "riscv64": 41, "ppc64le": 203,
               "s390x": 217}


def _pivot(root: str) -> None:
    number = _PIVOT_ROOT.get(platform.machine())
    old = root + "/.old-root"
    os.makedirs(old, exist_ok=True)
    if number is None:  # unknown architecture: chroot, which holds once privileges are dropped
        os.chroot(root)
        os.chdir("/")
        return
    _check(_libc.syscall(ctypes.c_long(number), root.encode(), old.encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old-root", MNT_DETACH), "umount old root")
    os.rmdir("/.old-root")


# ----------------------------------------------------------------------------- privileges


def drop_privileges(uid: int | None) -> str:
    """Become ``uid`` (when root outside a user namespace) or drop every capability.

    Returns a description of what holds. Always sets ``no_new_privs``: no setuid program can
    give the privileges back.
    """
    described = ""
    if os.geteuid() == 0 and uid is not None and not _in_user_namespace():
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            described = f"uid {uid}, no capabilities"
        except OSError:
            described = ""
    if not described and not LINUX:
        described = f"uid {os.getuid()}"
    if not described:
        for cap in range(64):
            prctl(PR_CAPBSET_DROP, cap)
        header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
        data = ctypes.create_string_buffer(24)  # two zeroed {effective, permitted, inheritable}
        ok = _libc.syscall(ctypes.c_long(_CAPSET.get(platform.machine(), -1)),
                           ctypes.c_char_p(header), data) == 0
        described = (f"uid {os.getuid()}" + (" (root inside a user namespace)"
                                             if _in_user_namespace() else "")
                     + (", no capabilities" if ok else ", capabilities NOT dropped"))
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    return described


_CAPSET = {"x86_64": 126, "aarch64": 91, "arm64": 91, "riscv64": 91, "ppc64le": 184,
           "s390x": 185}


def _in_user_namespace() -> bool:
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


# ----------------------------------------------------------------------------- limits


def vm_size() -> int:
    """This process's current address-space size in bytes (0 when unknown)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def set_limits(cpu_s: int, memory_mib: int, processes: int, file_mib: int,
               open_files: int) -> dict[str, int]:
    """Hard rlimits; the address space is what the worker holds now plus ``memory_mib``."""
    address_space = vm_size() + (memory_mib << 20)
    wanted = {
        "RLIMIT_CPU": (cpu_s, cpu_s + 1),
        "RLIMIT_AS": (address_space, address_space),
        "RLIMIT_NPROC": (processes, processes),
        "RLIMIT_FSIZE": (file_mib << 20, file_mib << 20),
        "RLIMIT_NOFILE": (open_files, open_files),
        "RLIMIT_CORE": (0, 0),
        "RLIMIT_MSGQUEUE": (0, 0),
    }
    applied = {}
    for name, limits in wanted.items():
        try:
            resource.setrlimit(getattr(resource, name), limits)
            applied[name] = limits[0]
        except (ValueError, OSError, AttributeError):
            pass
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails (EFBIG), no kill
    return applied


# ----------------------------------------------------------------------------- seccomp

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7, "arm64": 0xC00000B7}
# Denied outright (EPERM): tracing and reading other processes, mounts and namespaces, kernel
# modules, BPF, io_uring (it opens sockets without socket()), keyrings, userfaultfd, perf.
_DENY = {
    "x86_64": dict(ptrace=101, process_vm_readv=310, process_vm_writev=311, mount=165,
                   umount2=166, pivot_root=155, chroot=161, unshare=272, setns=308, bpf=321,
                   userfaultfd=323, perf_event_open=298, keyctl=250, add_key=248,
                   request_key=249, io_uring_setup=425, io_uring_enter=426,
                   io_uring_register=427, kexec_load=246, init_module=175, finit_module=313,
                   delete_module=176, open_by_handle_at=304, personality=135, acct=163,
                   swapon=167, swapoff=168, reboot=169),
    "aarch64": dict(ptrace=117, process_vm_readv=270, process_vm_writev=271, mount=40,
                    umount2=39, pivot_root=41, chroot=51, unshare=97, setns=268, bpf=280,
                    userfaultfd=282, perf_event_open=241, keyctl=219, add_key=217,
                    request_key=218, io_uring_setup=425, io_uring_enter=426,
                    io_uring_register=427, kexec_load=104, init_module=105, finit_module=273,
                    delete_module=106, open_by_handle_at=265, personality=92, acct=89,
                    swapon=224, swapoff=225, reboot=142),
}
_SOCKET = {"x86_64": 41, "aarch64": 198}
_CLONE = {"x86_64": 56, "aarch64": 220}
_CLONE3 = 435

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000


def _seccomp_program(machine: str) -> bytes:
    """A classic-BPF seccomp filter (see the module docstring for what it denies)."""
    # Instructions are (code, jump-if-true label, jump-if-false label, k); labels resolve below.
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
    prog: list[tuple] = [
        (LD, None, None, 4),                          # seccomp_data.arch
        (JEQ, "arch_ok", "deny", _AUDIT_ARCH[machine]),
        ("arch_ok",),
        (LD, None, None, 0),                          # seccomp_data.nr
    ]
    if machine == "x86_64":
        prog.append((JGE, "deny", None, 0x40000000))  # the x32 ABI's numbers
    prog.append((JEQ, "no_socket", None, _SOCKET[machine]))
    prog.append((JEQ, "clone", None, _CLONE[machine]))
    prog.append((JEQ, "nosys", None, _CLONE3))       # flags hidden in memory: make libc use clone
    for number in _DENY[machine].values():
        prog.append((JEQ, "deny", None, number))
    prog += [
        (RET, None, None, _RET_ALLOW),
        ("no_socket",), (RET, None, None, _RET_ERRNO | errno.EACCES),
        ("clone",), (LD, None, None, 16),             # args[0]: the clone flags
        (JSET, "deny", "allow", CLONE_NEW_ANY),
        ("allow",), (RET, None, None, _RET_ALLOW),
        ("deny",), (RET, None, None, _RET_ERRNO | errno.EPERM),
        ("nosys",), (RET, None, None, _RET_ERRNO | errno.ENOSYS),
    ]
    labels, pc = {}, 0
    for ins in prog:
        if len(ins) == 1:
            labels[ins[0]] = pc
        else:
            pc += 1
    out, pc = [], 0
    for ins in prog:
        if len(ins) == 1:
            continue
        code, jt, jf, k = ins
        jt, jf = (0 if label is None else labels[label] - pc - 1 for label in (jt, jf))
        out.append(struct.pack("=HBBI", code, jt, jf, k))
        pc += 1
    return b"".join(out)


def install_seccomp() -> bool:
    """Install the filter for this process and its children; False where unsupported."""
    machine = {"arm64": "aarch64"}.get(platform.machine(), platform.machine())
    if machine not in _AUDIT_ARCH or not LINUX:
        return False
    program = _seccomp_program(machine)
    filters = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program) // 8, ctypes.addressof(filters))
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    result = _libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER),
                         ctypes.byref(fprog), ctypes.c_ulong(0), ctypes.c_ulong(0))
    return result == 0


def kill_uid(uid: int) -> None:
    """Kill every process of ``uid`` (a fork bomb's children); run as root in a helper process."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setresuid(uid, uid, uid)
            for _ in range(100):  # a fork bomb may race the walk; repeat until nothing is left
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
