"""Kernel-level confinement of a candidate's process (Linux, x86-64).

Each candidate runs as PID 1 of its own PID namespace, forked by the warm
worker, which itself sits in an empty network namespace. In the child,
before any candidate code:

- its own mount namespace (private propagation): every mount read-only,
  no device nodes (except /dev/null, zero, full, random, urandom) and no
  setuid, a fresh /proc that shows only its namespace, and one writable
  bind mount: its temp dir;
- its own IPC namespace (no SysV shared memory with anyone);
- every capability dropped (bounding, effective, permitted, inheritable,
  ambient) and no_new_privs set: it cannot mount, unshare, remount or
  regain privileges by exec;
- a seccomp filter that refuses creating processes or threads, exec,
  sockets, ptrace, namespace and mount calls, io_uring, bpf, perf and
  open-by-handle with EPERM.

The worker kills the candidate with one SIGKILL to PID 1, which takes the
whole namespace down with it (the kernel kills and reaps every process in
it before the init's exit completes), so nothing a candidate starts can
outlive it.

Everything here needs CAP_SYS_ADMIN: as root the worker has it; otherwise
it first becomes root of its own user namespace where the kernel allows
unprivileged ones (`enter_user_namespace`), which is enough for every step.
Where neither works the worker's probe fails, it falls back to rlimits, the
process group and the Python guards, and the Sandbox warns: see `probe()`
and docs/sandbox.md.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import struct
import sys
from dataclasses import dataclass
from typing import Callable

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4
_SYS_MOUNT_SETATTR = 442
_SYS_CAPSET = 126
_SYS_SECCOMP = 317
_SYS_PIVOT_ROOT = 155
_MNT_DETACH = 2
# the candidate's uid and gid where the namespace has it (root's worker): the
# traditional "nobody", which owns no file a candidate could want
CANDIDATE_UID = 65534
_TEMP_INODES = 16384  # files and directories in a candidate's temp space
# besides the Python installation and sys.path: the system's shared libraries
# (ctypes, sqlite3 and friends load them) and the loader's cache
_SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/localtime")
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 1, 4, 24
_PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 36, 38, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

# x86-64 system calls a heuristic never needs and a hostile one wants.
_REFUSED_SYSCALLS = {
    "socket": 41, "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "ptrace": 101,
    "pivot_root": 155, "chroot": 161, "mount": 165, "umount2": 166, "add_key": 248,
    "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "bpf": 321, "execveat": 322, "userfaultfd": 323,
    "io_uring_setup": 425, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "clone3": 435, "mount_setattr": 442,
}
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000


class ConfinementError(OSError):
    """A confinement step failed (names the step)."""


def _check(result: int, step: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise ConfinementError(errno, f"{step}: {os.strerror(errno)}")


def prctl(option: int, value: int, arg3: int = 0) -> bool:
    return _libc.prctl(option, value, arg3, 0, 0) == 0


def die_with_parent() -> None:
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def become_subreaper() -> bool:
    """Without namespaces, orphans a candidate leaves are re-parented to the
    worker instead of init, so the worker can find and kill them."""
    return prctl(_PR_SET_CHILD_SUBREAPER, 1)


def enter_user_namespace(keep_fds: list[int]) -> str:
    """For a worker without root: become root of a new user namespace (the
    user's uid mapped to 0) and the init of a new PID and mount namespace
    owned by it, with its own /proc. That gives every step below the
    capabilities it needs, over namespaces this worker owns. The original
    process stays behind only to wait and pass on the exit status. "" on
    success, else why not (unprivileged user namespaces disabled, ...)."""
    uid, gid = os.geteuid(), os.getegid()
    if _libc.unshare(CLONE_NEWUSER) != 0:
        return f"no root, and no user namespace: {os.strerror(ctypes.get_errno())}"
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as mapping:  # durable: the kernel's id maps, not a file
                mapping.write(text)
        _check(_libc.unshare(CLONE_NEWPID | CLONE_NEWNS), "unshare(CLONE_NEWPID | CLONE_NEWNS)")
    except OSError as exc:
        return f"no root, and the user namespace is unusable: {exc}"
    pid = os.fork()
    if pid:
        for fd in keep_fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) % 256)
    die_with_parent()
    try:
        _check(_libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
        # /proc of our own PID namespace: the worker reads its children's CPU time there
        _check(_libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None), "mount /proc")
    except OSError as exc:
        return f"no root, and the user namespace is unusable: {exc}"
    return ""


def isolate_network() -> bool:
    """Move the calling worker (and so every child) into an empty network
    namespace. Needs CAP_SYS_ADMIN."""
    return _libc.unshare(CLONE_NEWNET) == 0


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _mount_setattr(path: str, set_flags: int, clear_flags: int, recursive: bool) -> None:
    attr = _MountAttr(set_flags, clear_flags, 0, 0)
    _check(_libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, path.encode(), _AT_RECURSIVE if recursive else 0,
                         ctypes.byref(attr), ctypes.sizeof(attr)), f"mount_setattr {path}")


def _bind(path: str) -> None:
    _check(_libc.mount(path.encode(), path.encode(), None, _MS_BIND, None), f"bind mount {path}")


class _Forker:
    """Forks each candidate as PID 1 of a fresh PID namespace: unshare makes
    the *next* child the init of a new namespace; setns back to our own
    afterwards lets the following unshare create another."""

    def __init__(self) -> None:
        self.own_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)

    def fork(self) -> int:
        _check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
        pid = -1
        try:
            pid = os.fork()
        finally:
            if pid != 0:  # the parent (or a failed fork): future children in our namespace again
                _check(_libc.setns(self.own_namespace, CLONE_NEWPID), "setns back to the worker's PID namespace")
        return pid


def _restrict_mounts(workdir: str) -> None:
    """The fallback view (no tmpfs or pivot_root here): the host's tree, all
    read-only but the temp dir."""
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare(CLONE_NEWNS | CLONE_NEWIPC)")
    # private first: nothing below may propagate to the host's mounts
    _check(_libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
    _bind(workdir)
    devices = [device for device in _DEVICES if os.path.exists(device)]
    for device in devices:
        _bind(device)
    _check(_libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None), "mount /proc")
    _mount_setattr("/", _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NODEV | _MOUNT_ATTR_NOSUID, 0, recursive=True)
    _mount_setattr(workdir, 0, _MOUNT_ATTR_RDONLY, recursive=False)
    for device in devices:
        _mount_setattr(device, 0, _MOUNT_ATTR_NODEV, recursive=False)


def view_paths() -> list[str]:
    """What a candidate's file system shows besides its temp dir, /dev and
    /proc: the Python installation and every sys.path entry inside it or
    named site-/dist-packages (whole), the system libraries, the loader's
    cache, and for any other directory on sys.path only the top-level
    packages and modules this worker imported from it (the project's
    `coevolve` and `tasks`, a test's module), never the directory itself
    (a repository, a home directory). Called in the worker, so the view
    follows its sys.path."""
    # paths as Python spells them (a symlinked lib64 stays where imports look for it)
    wanted: set[str] = set(_SYSTEM_PATHS)
    prefixes = {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    wanted |= prefixes
    partial: list[str] = []
    for entry in sys.path:
        if not entry or not os.path.isabs(entry) or not os.path.isdir(entry):
            continue
        entry = os.path.abspath(entry)
        if any(entry == p or entry.startswith(p + os.sep) for p in prefixes) or \
                os.path.basename(entry) in ("site-packages", "dist-packages"):
            wanted.add(entry)
        else:
            partial.append(entry)
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or not os.path.isabs(path):
            continue
        path = os.path.abspath(path)
        under = [entry for entry in partial if path.startswith(entry + os.sep)]
        if under:  # the deepest entry is the one it was imported through
            entry = max(under, key=len)
            wanted.add(os.path.join(entry, path[len(entry) + 1:].split(os.sep, 1)[0]))
        else:
            # a module from outside sys.path (a task loaded from a file): that file
            # alone; one under a path already wanted is dropped below
            wanted.add(path)
    # the outermost of nested paths is enough (it is bound recursively)
    kept: list[str] = []
    for path in sorted(p for p in wanted if os.path.exists(p) and p != os.sep):  # never the whole tree
        if not kept or not path.startswith(kept[-1].rstrip(os.sep) + os.sep):
            kept.append(path)
    return kept


def _make_stub(path: str, is_dir: bool) -> None:
    os.makedirs(path if is_dir else os.path.dirname(path), mode=0o755, exist_ok=True)
    if not is_dir and not os.path.exists(path):
        # durable: an empty mount point in the sandbox's throwaway root, never read back
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def _build_view(view_root: str, workdir: str, paths: list[str], temp_mb: int, uid: int) -> None:
    """A new root on an empty tmpfs that holds only `paths` (bind mounts,
    read-only), the devices, a fresh /proc and a private tmpfs at the temp
    dir's path (writable, owned by `uid`); then pivot_root into it and drop
    the old root. Everything else of the host, home directories and the
    owner's files included, is not in this mount namespace at all; the temp
    space disappears with it."""
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare(CLONE_NEWNS | CLONE_NEWIPC)")
    _check(_libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
    _check(_libc.mount(b"none", view_root.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                       b"size=4m,nr_inodes=16384,mode=0755"), "tmpfs for the view")
    for path in paths:
        target = view_root + path
        is_dir = os.path.isdir(path)
        _make_stub(target, is_dir)
        _check(_libc.mount(path.encode(), target.encode(), None, _MS_BIND | _MS_REC, None), f"bind {path}")
    devices = [device for device in _DEVICES if os.path.exists(device)]
    for device in devices:
        _make_stub(view_root + device, False)
        _check(_libc.mount(device.encode(), (view_root + device).encode(), None, _MS_BIND, None), f"bind {device}")
    _make_stub(view_root + "/proc", True)
    _check(_libc.mount(b"proc", (view_root + "/proc").encode(), b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None),
           "mount /proc")
    _make_stub(view_root + workdir, True)
    options = f"size={temp_mb}m,nr_inodes={_TEMP_INODES},mode=0700,uid={uid},gid={uid}"
    _check(_libc.mount(b"none", (view_root + workdir).encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                       options.encode()), "tmpfs for the temp dir")
    _mount_setattr(view_root, _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NODEV | _MOUNT_ATTR_NOSUID, 0, recursive=True)
    _mount_setattr(view_root + workdir, 0, _MOUNT_ATTR_RDONLY, recursive=False)
    for device in devices:
        _mount_setattr(view_root + device, 0, _MOUNT_ATTR_NODEV, recursive=False)
    os.chdir(view_root)
    _check(_libc.syscall(_SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", _MNT_DETACH), "detach the old root")
    os.chdir("/")


def _mapped(uid: int) -> bool:
    """Whether `uid` exists in this (possibly user) namespace."""
    try:
        with open("/proc/self/uid_map") as mapping:
            for line in mapping:
                first, _, count = (int(x) for x in line.split())
                if first <= uid < first + count:
                    return True
    except OSError:
        pass
    return False


def _become_unprivileged(uid: int) -> bool:
    """setgroups([]), then gid and uid `uid` (all three of each): no longer
    root, so files owned by root (or anyone) with mode 0600 are closed.
    False where `uid` does not exist in this namespace (a user namespace
    mapping only the owner): the candidate then has the owner's own uid."""
    if not _mapped(uid):
        return False
    if os.getgroups():
        os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    die_with_parent()  # the kernel clears the parent-death signal when credentials change
    return True


def _drop_bounding_set() -> None:
    """Needs CAP_SETPCAP: before the uid changes."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for capability in range(last + 1):
        prctl(_PR_CAPBSET_DROP, capability)
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)


def _drop_capabilities() -> None:
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)  # two (effective, permitted, inheritable) triples of zeros
    _check(_libc.syscall(_SYS_CAPSET, header, data), "capset (drop every capability)")
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _seccomp_program() -> bytes:
    """A classic BPF filter: wrong architecture or x32 calls kill the
    process; the refused calls return EPERM; everything else is allowed."""
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    kill, allow, eperm = 0x80000000, 0x7FFF0000, 0x00050000 | 1

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    numbers = sorted(_REFUSED_SYSCALLS.values())
    program = [
        op(ld_abs, 4),  # seccomp_data.arch
        op(jeq, _AUDIT_ARCH_X86_64, 1, 0),
        op(ret, kill),
        op(ld_abs, 0),  # seccomp_data.nr
        op(jge, _X32_SYSCALL_BIT, 0, 1),
        op(ret, kill),
    ]
    for index, number in enumerate(numbers):
        # jump to the EPERM return (after the remaining compares and the allow) on a match
        program.append(op(jeq, number, len(numbers) - index, 0))
    program += [op(ret, allow), op(ret, eperm)]
    return b"".join(program)


def _install_seccomp() -> None:
    program = _seccomp_program()
    buffer = ctypes.create_string_buffer(program)
    fprog = struct.pack("=HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
    _check(_libc.syscall(_SYS_SECCOMP, 1, 0, fprog), "seccomp filter")  # SECCOMP_SET_MODE_FILTER


@dataclass
class View:
    """How a worker confines its candidates: `hidden` (a pivot_root into a
    view of only `paths`) or the read-only host tree; `root` is the empty
    directory the view is built on; `uid` the candidate's."""

    hidden: bool
    root: str
    paths: list[str]
    uid: int = CANDIDATE_UID
    temp_mb: int = 64
    why_not_hidden: str = ""  # when the hidden view failed here and the read-only host tree is used


def enter(workdir: str, view: View) -> str:
    """In the freshly forked child (PID 1 of its namespace), before any
    candidate code (the caller has joined the memory cgroup): mounts, unprivileged uid, capabilities,
    seccomp. Returns the directory the candidate works in. Raises
    ConfinementError (or OSError)."""
    if view.hidden:
        _build_view(view.root, workdir, view.paths, view.temp_mb, view.uid if _mapped(view.uid) else os.getuid())
    else:
        _restrict_mounts(workdir)
    _drop_bounding_set()
    _become_unprivileged(view.uid)
    _drop_capabilities()
    _install_seccomp()
    return workdir


def probe(scratch: str) -> tuple[str, View | None]:
    """Fork one confined child that does nothing: ("", view) if every step
    works, with the hidden view where tmpfs and pivot_root work, else the
    read-only host view; else (why not, None) and the worker runs
    candidates unconfined and says so."""
    if platform.machine() != "x86_64":
        return f"the seccomp filter is written for x86-64, this machine is {platform.machine()}", None
    if os.geteuid() != 0:
        return "not root: namespaces and mounts need CAP_SYS_ADMIN", None
    root = os.path.join(scratch, ".view")
    os.makedirs(root, mode=0o755, exist_ok=True)
    workdir = os.path.join(scratch, ".probe")
    os.makedirs(workdir, exist_ok=True)
    reasons = []
    views = [View(True, root, view_paths()), View(False, root, [])]
    if os.environ.get("COEVOLVE_SANDBOX_VIEW") == "host":  # how the tests cover the fallback
        reasons, views = ["COEVOLVE_SANDBOX_VIEW=host"], views[1:]
    for view in views:
        reason = _try_child(lambda: enter(workdir, view))
        if not reason:
            os.rmdir(workdir)
            view.why_not_hidden = "; ".join(reasons)
            return "", view
        reasons.append(reason)
    return "; ".join(reasons), None


def _try_child(step: Callable[[], object]) -> str:
    read_end, write_end = os.pipe()
    try:
        forker = _Forker()
    except OSError as exc:
        return f"cannot open the PID namespace: {exc}"
    try:
        pid = forker.fork()
    except OSError as exc:
        return str(exc)
    if pid == 0:
        status = 0
        try:
            os.close(read_end)
            step()
        except BaseException as exc:  # report why, then die
            os.write(write_end, str(exc).encode()[:500])
            status = 1
        os._exit(status)
    os.close(write_end)
    reason = os.read(read_end, 1000).decode(errors="replace")
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if reason or status:
        return reason or f"the probe child exited with status {status}"
    return ""


def forker() -> Callable[[], int]:
    """fork() for candidates: into a fresh PID namespace."""
    return _Forker().fork


def non_dumpable() -> None:
    """Without namespaces, at least keep a same-user candidate from reading
    or writing this worker's memory through /proc/<pid>/mem."""
    prctl(_PR_SET_DUMPABLE, 0)
