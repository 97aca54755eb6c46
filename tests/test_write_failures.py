"""A file system that refuses a write (full, over quota, read-only; a folder not the user's to write) is one
line naming the file and why, never a traceback, and loses nothing (s53 walkthrough, findings 3, 4 and 5):

- `coevolve run` on a disk that fills up: the line, then the resume line ("once there is room"), exit 1;
  the directory resumes to the uninterrupted run's result;
- `coevolve run --resume DIR` on a read-only DIR: refused before the engine loads, exit 2, with the way on
  (a writable copy resumes to the same result);
- `coevolve report DIR` on a read-only DIR: the line and where report writes, exit 1;
- `coevolve distill RUN --out FILE`: refused before any teacher request, as run's --out is;
- any other OSError keeps its traceback (a bug's report).

No root mounts: the disk fills through a stand-in for os.write, and a folder turns read-only through
stand-ins for the calls that write (os.open with a write flag, open() for writing, mkdir, rename, unlink),
raising what the kernel raises. Runs use the fake engine (tests/search_fakes.py) and the real sandbox on
tsp_construct, as tests/test_resume_safety.py does."""

from __future__ import annotations

import builtins
import errno
import io
import os
import re
import shutil
from pathlib import Path

import pytest

from coevolve.base import durable
from coevolve.base.durable import JsonlWriter, atomic_write_text, read_jsonl
from coevolve.cli import main
from coevolve.engine import pool
from coevolve.engine.base import Completion
from search_fakes import FakeEngine

NO_SPACE = os.strerror(errno.ENOSPC)
READ_ONLY = os.strerror(errno.EROFS)


class ClosingFakeEngine(FakeEngine):
    """The fake engine where the CLI builds one (pool.build_engine)."""

    def close(self) -> None:
        pass


class Interrupting(ClosingFakeEngine):
    """Ctrl-C during the run's second generation: its first step is logged, the rest is not."""

    def chat(self, *args, **kwargs):
        if self.calls:
            raise KeyboardInterrupt
        return super().chat(*args, **kwargs)


def no_engine(*args, **kwargs):
    pytest.fail("an engine was built for a run that cannot write its directory")


def config_file(folder: Path) -> Path:
    path = folder / "c.toml"
    path.write_text('[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = 6\n'
                    '[sample]\nbatch = 3\n[sampling]\ntemperature = 0.7\n')
    return path


def whole_run(tmp_path: Path, monkeypatch) -> Path:
    """The run never interrupted, to compare with."""
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    (tmp_path / "whole").mkdir()
    run = tmp_path / "whole" / "r"
    assert main(["run", str(config_file(tmp_path / "whole")), "--out", str(run), "--no-progress"]) == 0
    return run


def candidates(run: Path) -> list[dict]:
    return [{k: v for k, v in c.items() if k != "seconds"} for c in read_jsonl(run / "candidates.jsonl")]


def summary(run: Path) -> dict:
    return durable.read_json(run / "summary.json")  # counts, ledger, failures: no clock time


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def error_lines(err: str) -> list[str]:
    assert "Traceback" not in err, err
    return [line for line in err.strip().splitlines() if not line.startswith(("run directory:", "resuming:"))]


# ------------------------------------------------------------ the stand-ins
class FillingDisk:
    """os.write into `folder` until `room` bytes are written there, then a part of the write that does not
    fit (as the kernel does: a short count), then ENOSPC; writes elsewhere (pipes, the terminal) pass."""

    def __init__(self, folder: Path, room: int) -> None:
        self.folder, self.room = str(folder.resolve()), room
        self.real = os.write

    def __call__(self, fd: int, data) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if not target.startswith(self.folder + os.sep):
            return self.real(fd, data)
        if self.room <= 0:
            raise OSError(errno.ENOSPC, NO_SPACE)  # os.write names no file
        written = self.real(fd, bytes(data[:self.room]))
        self.room -= written
        return written


WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def read_only(monkeypatch, folder: Path) -> None:
    """`folder` as on a read-only mount: every call that would write in it raises EROFS naming the path (mkdir
    of a folder that exists: EEXIST first, as the kernel answers); reading goes on."""
    root = os.path.realpath(folder)

    def inside(path) -> bool:
        if isinstance(path, int):
            return False
        real = os.path.realpath(os.fsdecode(path))
        return real == root or real.startswith(root + os.sep)

    def refuse(path):
        raise OSError(errno.EROFS, READ_ONLY, os.fsdecode(path))

    real_os_open, real_open, real_mkdir = os.open, builtins.open, os.mkdir

    def os_open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & WRITE_FLAGS and inside(path):
            refuse(path)
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

    def py_open(file, mode="r", *args, **kwargs):
        if not isinstance(file, int) and set(mode) & set("wax+") and inside(file):
            refuse(file)
        return real_open(file, mode, *args, **kwargs)

    def mkdir(path, mode=0o777, *, dir_fd=None):
        if inside(path) and not os.path.exists(path):
            refuse(path)
        return real_mkdir(path, mode, dir_fd=dir_fd)

    def refusing(real):
        def call(*paths, **kwargs):
            for path in paths:
                if inside(path):
                    refuse(path)
            return real(*paths, **kwargs)
        return call

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(os, "mkdir", mkdir)
    for name in ("replace", "rename", "unlink", "rmdir", "truncate"):
        monkeypatch.setattr(os, name, refusing(getattr(os, name)))
    monkeypatch.setattr(builtins, "open", py_open)
    monkeypatch.setattr(io, "open", py_open)


# ------------------------------------------------------------ the durable layer
def test_a_record_the_disk_had_no_room_for_is_taken_back_and_the_error_names_the_file(tmp_path, monkeypatch):
    """ENOSPC half way through a record: the error names the file (os.write names none), the part written
    is cut, so the file holds the records before it and the next append (with room again) follows them."""
    from coevolve.base.durable import refused_write

    path = tmp_path / "log.jsonl"
    with JsonlWriter(path) as writer:
        writer.append({"n": 1})
        monkeypatch.setattr(os, "write", FillingDisk(tmp_path, 5))
        with pytest.raises(OSError) as raised:
            writer.append({"n": 2, "text": "x" * 100})
        assert refused_write(raised.value) == f"cannot write {path}: {NO_SPACE}"
        assert path.read_text() == '{"n": 1}\n'
        monkeypatch.undo()
        writer.append({"n": 3})
    assert read_jsonl(path) == [{"n": 1}, {"n": 3}]


def test_a_whole_file_the_disk_had_no_room_for_names_its_target_and_leaves_the_old_one(tmp_path, monkeypatch):
    """An atomic write that fails (here its fsync: a full disk may say so only then) names the file, not
    its temporary one, which is removed; the file written before is whole."""
    from coevolve.base.durable import refused_write

    target = tmp_path / "summary.json"
    atomic_write_text(target, "old\n")

    def full(fd):
        raise OSError(errno.ENOSPC, NO_SPACE)

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as raised:
        atomic_write_text(target, "new\n")
    monkeypatch.undo()
    assert refused_write(raised.value) == f"cannot write {target}: {NO_SPACE}"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"] and target.read_text() == "old\n"


def test_only_a_refused_write_is_one_line(tmp_path, monkeypatch):
    """Full, over quota and read-only anywhere; a permission error only from one of durable's own writes
    (the folder is not the user's); any other OSError (a bug's, or a file the code should not read) is not."""
    from coevolve.base.durable import refused_write

    for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        assert refused_write(OSError(code, os.strerror(code), "x/y")) == f"cannot write x/y: {os.strerror(code)}"
    assert refused_write(OSError(errno.ENOSPC, NO_SPACE)) == f"a write failed: {NO_SPACE}"
    assert refused_write(PermissionError(errno.EACCES, "Permission denied", "x/y")) is None
    assert refused_write(FileNotFoundError(errno.ENOENT, "No such file or directory", "x/y")) is None
    assert refused_write(OSError(errno.EIO, "Input/output error", "x/y")) is None
    assert refused_write(ValueError("x")) is None

    def denied(path, flags, mode=0o777, *, dir_fd=None):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(os, "open", denied)
    target = tmp_path / "report.md"
    with pytest.raises(PermissionError) as raised:
        atomic_write_text(target, "x")  # the temporary file it makes first is named as the target
    assert refused_write(raised.value) == f"cannot write {target}: Permission denied"


def test_any_other_os_error_keeps_its_traceback(tmp_path, monkeypatch):
    from coevolve.commands import report as command

    def broken(directory):
        raise OSError(errno.EIO, "Input/output error", str(directory))

    monkeypatch.setattr(command, "render", broken)
    with pytest.raises(OSError, match="Input/output error"):
        main(["report", str(tmp_path)])

    def denied(directory):  # a permission error not of a write: a bug's, or the user's to see whole
        raise PermissionError(errno.EACCES, "Permission denied", str(directory))

    monkeypatch.setattr(command, "render", denied)
    with pytest.raises(PermissionError):
        main(["report", str(tmp_path)])


# ------------------------------------------------------------ run: the disk fills up
@pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
def test_a_disk_that_fills_up_mid_run_is_one_line_and_the_run_resumes_to_the_same_result(
        tmp_path, monkeypatch, capsys, share):
    whole = whole_run(tmp_path, monkeypatch)
    appended = sum(p.stat().st_size for p in whole.glob("*.jsonl"))  # what the run appends, all told
    run = tmp_path / "r"
    config = config_file(tmp_path)
    capsys.readouterr()
    monkeypatch.setattr(os, "write", FillingDisk(tmp_path / "r", int(appended * share)))
    code = main(["run", str(config), "--out", str(run), "--no-progress"])
    err = capsys.readouterr().err
    monkeypatch.undo()  # room again (and the engine stand-in with it: set again)
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    assert code == 1, err
    lines = error_lines(err)
    assert len(lines) == 2, err
    names = "|".join(p.name for p in whole.glob("*.jsonl"))
    assert re.fullmatch(re.escape(f"coevolve run: error: cannot write {run}/") + f"({names})"
                        + re.escape(f": {NO_SPACE}"), lines[0]), lines[0]
    assert lines[1] == (f"every finished step is in {run}: continue with `coevolve run --resume {run}` once there "
                        "is room")
    # nothing torn: every log ends on a whole record
    for log in run.glob("*.jsonl"):
        text = log.read_bytes()
        assert not text or text.endswith(b"\n"), log
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0, capsys.readouterr().err
    assert candidates(run) == candidates(whole)
    assert summary(run) == summary(whole)


# ------------------------------------------------------------ run --resume: a read-only run directory
def test_a_resume_on_a_read_only_run_directory_is_refused_before_the_engine_and_a_copy_resumes(
        tmp_path, monkeypatch, capsys):
    whole = whole_run(tmp_path, monkeypatch)
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: Interrupting())
    run = tmp_path / "r"
    assert main(["run", str(config_file(tmp_path)), "--out", str(run), "--no-progress"]) == 130
    capsys.readouterr()
    before = snapshot(run)
    monkeypatch.setattr(pool, "build_engine", no_engine)
    read_only(monkeypatch, run)
    code = main(["run", "--resume", str(run), "--no-progress"])
    err = capsys.readouterr().err
    monkeypatch.undo()
    assert code == 2, err
    assert error_lines(err) == [
        f"coevolve run: error: cannot write {run / 'events.jsonl'}: {READ_ONLY}",
        f"every finished step is in {run}: continue with `coevolve run --resume {run}` once it can be written, "
        "or resume a copy of it in a writable place"], err
    assert snapshot(run) == before
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    assert main(["run", "--resume", str(copy), "--no-progress"]) == 0, capsys.readouterr().err
    assert candidates(copy) == candidates(whole)
    assert summary(copy) == summary(whole)


# ------------------------------------------------------------ report: a read-only run directory
def test_report_on_a_read_only_run_directory_is_one_line(tmp_path, monkeypatch, capsys):
    run = whole_run(tmp_path, monkeypatch)
    capsys.readouterr()
    before = snapshot(run)
    read_only(monkeypatch, run)
    code = main(["report", str(run)])
    out, err = capsys.readouterr()
    monkeypatch.undo()
    assert code == 1, err
    assert error_lines(err) == [f"coevolve report: error: cannot write {run / 'progress.png'}: {READ_ONLY}; report "
                                f"writes its files into {run}: report a copy of it in a writable place"], err
    assert snapshot(run) == before


# ------------------------------------------------------------ distill: a file where --out goes
class CountingTeacher:
    """An endpoint's stand-in (distill's OpenAIGenerator) that counts the requests it answers."""

    requests = 0

    def __init__(self, *args, **kwargs) -> None:
        pass

    def probe(self) -> None:
        pass

    def chat(self, conversations, sampling, seeds=None, **kwargs):
        CountingTeacher.requests += len(conversations)
        return [Completion(text="No patch.", prompt_tokens=1, completion_tokens=2) for _ in conversations]


@pytest.mark.parametrize("out", ["taken", "taken/skill"])
def test_distill_into_a_file_is_refused_before_any_teacher_request(tmp_path, monkeypatch, capsys, out):
    from coevolve.commands import distill as command

    run = whole_run(tmp_path, monkeypatch)
    (tmp_path / "taken").write_text("a file\n")
    monkeypatch.setattr(command, "OpenAIGenerator", CountingTeacher)
    monkeypatch.setattr(CountingTeacher, "requests", 0)
    capsys.readouterr()
    code = main(["distill", str(run), "--out", str(tmp_path / out), "--endpoint-base-url", "http://127.0.0.1:9/v1",
                 "--endpoint-model", "m", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert error_lines(err) == [f"coevolve distill: error: --out: cannot make the directory {tmp_path / out}: a file "
                                f"is in the way ({tmp_path / 'taken'})"], err
    assert CountingTeacher.requests == 0
    assert (tmp_path / "taken").read_text() == "a file\n"
