"""Durable files: the one way coevolve writes anything a later run reads back.

Two shapes, one rule each:

- **Append-only JSON lines** (events, candidates, ES history, evaluations).
  A record is its JSON text *and* the newline after it, written in one call
  and, by default, flushed and fsynced before `append` returns. Whatever
  follows the last newline is the torn tail of a write that never finished:
  readers ignore it (even if it happens to parse, because its writer never
  returned) and the next writer cuts it off, fsyncing the cut, before it
  appends. A malformed line *before* the last newline is damage, not a torn
  write, and reading it is an error that names the file and line.
- **Whole files** (summaries, snapshots, configs, trajectories, reports) are
  replaced atomically: written to a temp file in the same directory,
  fsynced, renamed over the target, and the directory fsynced so the rename
  itself survives a power cut. A reader sees the old file or the new one,
  never half of either.

Both make files with the mode a plain open() gives a new one, 0o666 less the
process's umask (0o644 under the usual 0o022), so everyone who may read one
file of a run directory may read all of them.

fsync policy: `fsync=True` (the default) makes every completed `append`
durable against a crash of the machine, not only of the process. Pass
`fsync=False` only for files that are cheap to recompute; a process kill
(SIGKILL) still loses nothing that `append` returned from, because the
record was handed to the kernel in one write.

A write the file system refuses (full, over quota, read-only, or a folder
not the user's to write) raises its OSError named with the file being
written, which `refused_write` says in one line; a record a full disk cut
short is taken back, so the file stays as a resume reads it.

This is the base layer: it imports nothing from the rest of coevolve.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from coevolve.base.errors import CorruptFileError, UsageError

__all__ = [
    "CorruptFileError", "JsonlWriter", "append_jsonl", "read_jsonl", "read_jsonl_from", "repair_jsonl",
    "atomic_directory", "atomic_path", "atomic_write_bytes", "atomic_write_text", "atomic_write_json", "atomic_write_jsonl",
    "read_json", "FULL", "REFUSING", "refused_write",
]

# A file system that refuses writes: full or over its quota (FULL; a resume goes on once there is room),
# or mounted read-only. Only a write raises these, never a bug in the code, so they are answered with one
# line (refused_write) rather than a traceback.
FULL = (errno.ENOSPC, errno.EDQUOT)
REFUSING = (*FULL, errno.EROFS)
# set on an OSError that one of this module's writes raised, naming the file it was writing: a permission
# error (EACCES) is a refused write only there (elsewhere it may be a bug's, reading a file it should not)
_TARGET = "coevolve_write_target"


@contextmanager
def _naming(target: Path, permission: bool = True) -> Iterator[None]:
    """An OSError of a refused write raised inside names `target`, the file being written: os.write and
    fsync raise one without a file name, and an atomic write's names its temporary file, which the user
    never sees. `permission`: EACCES is this module's own write (making, opening, renaming) and marked
    as a refused write; a caller's code inside (the body of atomic_path) may be reading, and its EACCES
    passes as it was raised."""
    try:
        yield
    except OSError as exc:
        if exc.errno in REFUSING or (permission and exc.errno == errno.EACCES):
            exc.filename, exc.filename2 = str(target), None
            setattr(exc, _TARGET, str(target))
        raise


def refused_write(exc: BaseException) -> str | None:
    """`cannot write PATH: REASON`, one line for a write the file system refused (full, over quota,
    read-only; or a permission denied to one of this module's writes: the folder is not the user's to
    write); None for any other error, which is a bug's and keeps its traceback."""
    if not isinstance(exc, OSError):
        return None
    if exc.errno not in REFUSING and not (exc.errno == errno.EACCES and hasattr(exc, _TARGET)):
        return None
    reason = exc.strerror or os.strerror(exc.errno)
    name = getattr(exc, _TARGET, None) or exc.filename
    return f"cannot write {os.fsdecode(name)}: {reason}" if isinstance(name, (str, bytes)) else \
        f"a write failed: {reason}"


# ------------------------------------------------------------ JSON lines


def _encode(record: Any) -> bytes:
    # sort_keys: equal records give equal bytes, so files diff and hash cleanly
    text = json.dumps(record, sort_keys=True)
    return (text + "\n").encode("utf-8")


def _complete_part(raw: bytes) -> bytes:
    """Everything up to and including the last newline."""
    return raw[: raw.rfind(b"\n") + 1]


def read_jsonl(path: str | Path) -> list[Any]:
    """Every completed record of a JSON-lines file (a missing file has none).
    The torn tail after the last newline is ignored; blank lines are skipped."""
    return read_jsonl_from(path, 0)[0]


def read_jsonl_from(path: str | Path, offset: int) -> tuple[list[Any], int]:
    """The completed records after byte `offset` (the end of an earlier read,
    so a follower parses only what is new) and the offset after them. The
    torn tail is left for the next read."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            raw = handle.read()
    except FileNotFoundError:
        return [], offset
    complete = _complete_part(raw)
    records = []
    for number, line in enumerate(complete.split(b"\n")[:-1], start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            where = f"line {number}" if offset == 0 else f"line {number} after byte {offset}"
            raise CorruptFileError(f"{path}: {where} is not valid JSON ({reason})") from None
    return records, offset + len(complete)


def repair_jsonl(path: str | Path) -> bool:
    """Cut a torn tail so the next append starts on a fresh line; fsync the cut.
    Returns whether anything was cut."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size == 0:
        return False
    with open(path, "r+b") as handle:
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return False
        handle.seek(0)
        keep = len(_complete_part(handle.read()))
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    return True


class JsonlWriter:
    """Appends records to a JSON-lines file, one write per record.

    Opening cuts a torn tail left by an earlier killed writer (or, with
    `truncate=True`, starts the file empty)."""

    def __init__(self, path: str | Path, *, truncate: bool = False, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._fd: int | None = None
        with _naming(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            created = not self.path.exists()
            if truncate:
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
            else:
                repair_jsonl(self.path)
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            # a raw descriptor: no userspace buffer can hold half a record; 0o666 less
            # the umask, as open() makes a file (and as the atomic writes below do)
            self._fd = os.open(self.path, flags, 0o666)
        if created or truncate:
            _fsync_dir(self.path.parent)

    def append(self, record: Any) -> None:
        if self._fd is None:
            raise ValueError(f"{self.path}: writer is closed")
        data = _encode(record)
        view = memoryview(data)
        with _naming(self.path):
            try:
                while view:  # os.write may write less than asked (signals, huge records, a disk filling up)
                    written = os.write(self._fd, view)
                    view = view[written:]
            except OSError:
                if len(view) < len(data):
                    self._take_back(len(data) - len(view))
                raise
            if self.fsync:
                os.fsync(self._fd)

    def _take_back(self, written: int) -> None:
        """Cut the `written` bytes of a record that failed half way (a full disk takes part of it): a
        reader would skip the torn tail and the next writer cut it, but a caller that goes on appending
        here would bury it under a newline, as a damaged line. Best effort: the cut itself may fail."""
        try:
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
        except OSError:
            pass

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def make_directory(path: str | Path, what: str) -> Path:
    """`path` and its parents as directories. One that cannot be made (a file
    in the way, no permission) is a UsageError naming `what`, the flag or field
    it came from, rather than a traceback."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            why = f"a file is in the way ({why})"
        raise UsageError(f"{what}: cannot make the directory {path}: {why}") from None
    return path


def append_jsonl(path: str | Path, record: Any, *, fsync: bool = True) -> None:
    """Append one record (opening, repairing and closing the file): for files
    written a record at a time, far apart."""
    with JsonlWriter(path, fsync=fsync) as writer:
        writer.append(record)


# ------------------------------------------------------------ whole files


def _fsync_dir(directory: Path) -> None:
    # makes a create or rename in `directory` durable; not every platform or
    # filesystem lets a directory be opened or fsynced, and then there is
    # nothing more we can do
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _create_beside(path: Path, name: str, suffix: str, create: Callable[[Path], None]) -> Path:
    """A new, uniquely named entry `.{name}.{random}{suffix}` in `path`'s folder, made by
    `create` (which must fail with FileExistsError when the name is taken).

    Not tempfile.mkstemp / mkdtemp: they make the entry 0o600 / 0o700 whatever the
    umask, and the rename would publish that mode, so a colleague or a dashboard under
    another account could read some files of a run and not others. Made here with the
    mode a plain open() or mkdir() asks for (0o666 / 0o777), the kernel applies the
    process's umask (or the folder's default ACL) itself, at creation: no umask is read,
    so nothing has to set it (os.umask is the only way to read it, and it changes it for
    every thread while it does)."""
    for _ in range(100):
        candidate = path.parent / f".{name}.{secrets.token_hex(4)}{suffix}"
        try:
            create(candidate)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name}")


def _create_file(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


def _create_directory(path: Path) -> None:
    os.mkdir(path, 0o777)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside `path` for a writer that wants a file name
    (savefig, safetensors); on a clean exit it is fsynced and renamed over
    `path`, on an exception removed. The file gets the mode open() would give
    it: 0o666 less the umask (0o644 under the usual 0o022)."""
    path = Path(path)
    with _naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _create_beside(path, path.stem, f".tmp{path.suffix}", _create_file)
    try:
        with _naming(path, permission=False):  # the caller's writer, into tmp
            yield tmp
        with _naming(path):
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_jsonl(path: str | Path, records: Iterable[Any]) -> None:
    """A whole JSON-lines file at once, in the same encoding `append` uses."""
    atomic_write_bytes(path, b"".join(_encode(record) for record in records))


def atomic_write_json(path: str | Path, data: Any, *, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(data, indent=indent, sort_keys=True) + "\n")


def read_json(path: str | Path) -> Any:
    """A file `atomic_write_json` wrote; None when it does not exist (an atomic
    write leaves no half file), CorruptFileError naming it when it is not JSON."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CorruptFileError(f"{path} is not valid JSON ({exc})") from None


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield an empty temp directory beside `path`; on a clean exit its files
    are fsynced and it replaces `path` (an old `path` is moved aside first and
    then deleted), on an exception it is removed. A crash never leaves a half
    directory under the final name. The directory gets the mode mkdir() would
    give it: 0o777 less the umask."""
    path = Path(path)
    with _naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        work = _create_beside(path, path.name, ".tmp", _create_directory)
    try:
        with _naming(path, permission=False):  # the caller's writers, into work
            yield work
        with _naming(path):
            for file in work.rglob("*"):
                if file.is_file():
                    fd = os.open(file, os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            _fsync_dir(work)
            old = None
            if path.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
                os.replace(path, old / path.name)
            os.replace(work, path)
        _fsync_dir(path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
