"""A memory cgroup per candidate, where the machine lets the worker make one.

`RLIMIT_AS` counts address space only: memory held in anonymous files
(memfd), in tmpfs or in dirtied page cache escapes it. A memory cgroup
counts all of it. The worker looks for a memory controller it can write:

- cgroup v2: the nearest cgroup, from its own up to the mount's root, whose
  `cgroup.subtree_control` enables `memory` (children made there get
  `memory.max`); on a systemd host as root that is the root cgroup;
- cgroup v1 (hybrid hierarchies): its own cgroup of the `memory` hierarchy
  (`memory.limit_in_bytes`).

Each candidate gets a fresh child cgroup with the limit, which the child
joins (writes 0 to its `cgroup.procs`) before any candidate code; the
kernel's OOM killer then ends it when it goes over, and the worker reads the
`oom_kill` count to say `memory`. Where there is no such controller (no
root, a container without delegation) `find()` says why, the worker keeps
the rlimit alone and the Sandbox warns.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import time

log = logging.getLogger(__name__)


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount point, root inside the hierarchy, fstype, super options)."""
    found = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            before, _, after = line.partition(" - ")
            fields, tail = before.split(), after.split()
            if len(fields) >= 5 and len(tail) >= 3:
                found.append((fields[4], fields[3], tail[0], set(tail[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """controller list ("" for v2) -> this process's cgroup path."""
    paths = {}
    with open("/proc/self/cgroup") as groups:
        for line in groups:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            paths[controllers] = path
    return paths


def _inside(mount_point: str, root: str, path: str) -> str:
    relative = path[len(root):] if root != "/" and path.startswith(root) else path
    return os.path.join(mount_point, relative.lstrip("/"))


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


class MemoryCgroups:
    """Makes, joins, reads and removes per-candidate memory cgroups under
    `parent` (`version` 1 or 2)."""

    def __init__(self, parent: str, version: int) -> None:
        self.parent, self.version = parent, version
        self._names = itertools.count()
        # workers in their own PID namespace are all pid 1: the pid alone would let two sandboxes pick the
        # same cgroup name (and share a limit or fail on mkdir)
        self._tag = f"{os.getpid()}-{secrets.token_hex(4)}"

    @property
    def kind(self) -> str:
        return f"cgroup v{self.version}"

    def create(self, limit_bytes: int) -> str:
        path = os.path.join(self.parent, f"coevolve-{self._tag}-{next(self._names)}")
        os.mkdir(path)
        try:
            if self.version == 2:
                with open(os.path.join(path, "memory.max"), "w") as limit:  # durable: kernel interface
                    limit.write(str(limit_bytes))
                with open(os.path.join(path, "memory.swap.max"), "w") as swap:  # durable: kernel interface
                    swap.write("0")
            else:
                with open(os.path.join(path, "memory.limit_in_bytes"), "w") as limit:  # durable: kernel interface
                    limit.write(str(limit_bytes))
                # durable: kernel interface
                with open(os.path.join(path, "memory.memsw.limit_in_bytes"), "w") as swap:
                    swap.write(str(limit_bytes))  # memory + swap: no way around the limit through swap
        except OSError as exc:
            if "swap" not in str(exc.filename):  # no swap accounting here: nothing to close
                self.remove(path)
                raise
        return path

    @staticmethod
    def join(path: str) -> None:
        """In the child: move this process into `path`."""
        with open(os.path.join(path, "cgroup.procs"), "w") as procs:  # durable: kernel interface, not a file
            procs.write("0")

    def oom_kills(self, path: str) -> int:
        """How many times the kernel's OOM killer acted in `path`."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in _read(os.path.join(path, name)).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
            if self.version == 1:  # older v1 kernels: no count, but failures to charge
                return int(_read(os.path.join(path, "memory.failcnt")) != "0\n")
        except (OSError, ValueError):
            pass
        return 0

    @staticmethod
    def remove(path: str) -> None:
        """rmdir once its processes are gone; a failure is logged, never raised."""
        for attempt in range(50):
            try:
                os.rmdir(path)
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if attempt == 49:
                    log.warning("sandbox: could not remove the memory cgroup %s: %s", path, exc)
                    return
                time.sleep(0.01)  # the kernel may still be tearing down the dead namespace


def _try(parent: str, version: int) -> MemoryCgroups | None:
    cgroups = MemoryCgroups(parent, version)
    try:
        cgroups.remove(cgroups.create(64 << 20))
    except OSError:
        return None
    return cgroups


def find() -> tuple[MemoryCgroups | None, str]:
    """A writable memory controller for candidates, or (None, why not)."""
    try:
        mounts, own = _mounts(), _own_paths()
    except OSError as exc:
        return None, f"cannot read this process's cgroups: {exc}"
    for mount_point, root, fstype, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        directory = _inside(mount_point, root, own[""])
        while directory.startswith(mount_point):
            try:
                enabled = _read(os.path.join(directory, "cgroup.subtree_control")).split()
            except OSError:
                enabled = []
            if "memory" in enabled:
                found = _try(directory, 2)
                if found is not None:
                    return found, ""
            if directory.rstrip("/") == mount_point.rstrip("/"):
                break
            directory = os.path.dirname(directory.rstrip("/"))
    for mount_point, root, fstype, options in mounts:
        if fstype != "cgroup" or "memory" not in options:
            continue
        path = next((p for controllers, p in own.items() if "memory" in controllers.split(",")), None)
        if path is not None:
            found = _try(_inside(mount_point, root, path), 1)
            if found is not None:
                return found, ""
    return None, "no memory cgroup this process may create (needs root and a memory controller, " \
                 "or a delegated cgroup v2 subtree)"
