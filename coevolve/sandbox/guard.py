"""Restrictions applied inside a candidate's child process, just before its
code runs: kernel rlimits, and Python-level guards. The guards give a weak
model's accidents (a stray os.system, a file written into the repo) a
readable PermissionError; they are not the boundary, since code that sets
out to can undo them (ctypes). The boundary is the kernel's: see
coevolve/sandbox/confine.py. Without root the guards are all that stops
writes, signals and sockets, and the Sandbox warns.
"""

from __future__ import annotations

import builtins
import io
import os
import resource
import socket
import subprocess
from typing import Any, Callable

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _set_limit(which: int, soft: int, hard: int | None = None) -> None:
    _, current_hard = resource.getrlimit(which)
    hard = soft if hard is None else hard
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    try:
        resource.setrlimit(which, (soft, hard))
    except (ValueError, OSError):
        pass  # a limit the platform refuses is skipped; the wall-clock kill still holds


def virtual_memory_bytes() -> int:
    """This process's current address-space size (VmSize)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def apply_limits(memory_mb: int, cpu_seconds: float, file_mb: int = 64) -> None:
    """Kernel limits for the candidate. RLIMIT_AS allows `memory_mb` on top of
    what the warm worker already maps (numpy and cached instances), so the
    budget means the same thing whatever the worker has loaded."""
    _set_limit(resource.RLIMIT_AS, virtual_memory_bytes() + memory_mb * 1024 * 1024)
    cpu = max(1, int(cpu_seconds + 0.999))
    _set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    _set_limit(resource.RLIMIT_FSIZE, file_mb * 1024 * 1024)
    _set_limit(resource.RLIMIT_CORE, 0)
    # Ignored for root (the kernel exempts CAP_SYS_RESOURCE); the fork guard
    # below and the process-group kill cover that case.
    _set_limit(resource.RLIMIT_NPROC, 0)


def _blocked(what: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(f"sandbox: {what} is not allowed in candidate code")

    return refuse


class _PathGuard:
    def __init__(self, workdir: str) -> None:
        self.workdir = os.path.realpath(workdir)

    def check(self, path: Any, dir_fd: int | None = None) -> None:
        if isinstance(path, int):
            return  # an already open descriptor
        path = os.fsdecode(os.fspath(path))
        base = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else os.getcwd()
        resolved = os.path.realpath(os.path.join(base, path))
        if resolved == os.devnull or resolved == self.workdir:
            return
        if not resolved.startswith(self.workdir + os.sep):
            raise PermissionError(
                f"sandbox: writing outside the working directory is not allowed: {path}"
            )

    def wrap_open(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def guarded_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if any(flag in mode for flag in "wax+"):
                self.check(file)
            return original(file, mode, *args, **kwargs)

        return guarded_open

    def wrap_os_open(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def guarded_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
            if flags & _WRITE_FLAGS:
                self.check(path, kwargs.get("dir_fd"))
            return original(path, flags, *args, **kwargs)

        return guarded_os_open

    def wrap_paths(self, original: Callable[..., Any], positions: tuple[int, ...]) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            dir_fd = kwargs.get("dir_fd", kwargs.get("src_dir_fd"))
            for index in positions:
                if index < len(args):
                    self.check(args[index], dir_fd)
            for key in ("path", "src", "dst"):
                if key in kwargs:
                    self.check(kwargs[key], dir_fd)
            return original(*args, **kwargs)

        return guarded


# os functions that modify the file system: name -> positions of path arguments
_PATH_FUNCTIONS = {
    "remove": (0,), "unlink": (0,), "rmdir": (0,), "mkdir": (0,), "mkfifo": (0,),
    "mknod": (0,), "rename": (0, 1), "replace": (0, 1), "link": (1,), "symlink": (1,),
    "chmod": (0,), "chown": (0,), "lchown": (0,), "truncate": (0,), "utime": (0,),
    "removedirs": (0,), "renames": (0, 1),
}

_PROCESS_FUNCTIONS = [
    "system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp",
    "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe",
    "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe",
    "kill", "killpg", "setsid", "setpgid",
]


def install_guards(workdir: str) -> None:
    """Patch the Python-level entry points for writing files, starting
    processes, signalling and opening sockets."""
    paths = _PathGuard(workdir)
    guarded_open = paths.wrap_open(builtins.open)
    builtins.open = guarded_open
    io.open = guarded_open
    os.open = paths.wrap_os_open(os.open)
    for name, positions in _PATH_FUNCTIONS.items():
        if hasattr(os, name):
            setattr(os, name, paths.wrap_paths(getattr(os, name), positions))
    for name in _PROCESS_FUNCTIONS:
        if hasattr(os, name):
            setattr(os, name, _blocked(f"os.{name}"))
    subprocess.Popen = _blocked("starting a subprocess")  # type: ignore[misc]
    socket.socket = _blocked("opening a socket")  # type: ignore[misc]
    socket.socketpair = _blocked("opening a socket")
    socket.create_connection = _blocked("opening a socket")
    socket.create_server = _blocked("opening a socket")
    try:
        import _socket  # CPython's C socket module: absent on some builds

        _socket.socket = _blocked("opening a socket")  # type: ignore[misc]
    except ImportError:
        pass
