"""coevolve.base.durable: the one way durable files are written.

The kill tests run a real writer in a subprocess that acknowledges each
completed write on stdout, SIGKILL it at a random moment (records of up to a
few MB make a kill inside a record's write likely), and read the file back:
every acknowledged record must be there, nothing half-written may be, and a
new writer must carry on after the damage.
"""

from __future__ import annotations

import ast
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from coevolve.base import durable
from coevolve.base.durable import (
    CorruptFileError, JsonlWriter, append_jsonl, atomic_write_json, atomic_write_jsonl, atomic_write_text,
    read_jsonl, repair_jsonl,
)

ROOT = Path(__file__).resolve().parents[1]

# Each file kind of a run, written through the module that really writes it.
WRITER = textwrap.dedent(
    """
    import os, random, sys
    kind, path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)

    def record(i):
        # sizes from a few bytes to a few MB: big records take long enough
        # to write that a kill lands inside one
        return {"i": i, "pad": "x" * rng.choice([1, 100, 10_000, 1_000_000, 3_000_000])}

    if kind == "events":  # RunStore's event log and the candidates log
        from coevolve.runstore import RunStore
        writer = RunStore(os.path.dirname(path)).event_writer()
        write = writer.append
    elif kind == "candidates":
        from coevolve.runstore import JsonlWriter
        writer = JsonlWriter(path, truncate=True)
        write = writer.append
    elif kind == "history":  # ES history
        from coevolve.es import history
        write = lambda r: history.append(path, r)
    elif kind == "eval":  # agent runs' eval.jsonl
        from coevolve.base.durable import append_jsonl
        write = lambda r: append_jsonl(path, r)
    elif kind == "trajectories":  # rewritten whole, atomically
        from coevolve.agents.rollout import Trajectory, save_trajectories
        done = []
        def write(r):
            done.append(Trajectory("t", str(r["i"]), [{"role": "system", "content": r["pad"]}], [], ["o"]))
            save_trajectories(done, path[: -len(".jsonl")], "kill test")
    elif kind == "summary":
        from coevolve.base.durable import atomic_write_json
        write = lambda r: atomic_write_json(path, r)
    elif kind == "skill":
        from coevolve.agents.skills import write_skill
        write = lambda r: write_skill(os.path.dirname(path), "kill test", f"version {r['i']}\\n" + r["pad"][:20000], 10**9)
    else:
        raise SystemExit(f"unknown kind {kind}")
    for i in range(10**9):
        write(record(i))
        print(i, flush=True)  # acknowledged: write returned
    """
)

APPEND_KINDS = ["events", "candidates", "history", "eval"]
FILE_NAMES = {"events": "events.jsonl", "candidates": "candidates.jsonl", "history": "history.jsonl",
              "eval": "eval.jsonl", "trajectories": "round_000.jsonl", "summary": "summary.json",
              "skill": "SKILL.md"}


def _run_and_kill(kind: str, path: Path, rng: random.Random) -> int:
    """Start a writer, let it acknowledge a random number of records, kill it
    at a random moment after that; return the last acknowledged index."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", WRITER, kind, str(path), str(rng.randrange(10**6))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    acked = -1
    try:
        wanted = rng.randrange(1, 5)
        while acked + 1 < wanted:
            line = child.stdout.readline()
            if not line:
                raise AssertionError(f"writer {kind} died early: {child.stderr.read()[-2000:]}")
            acked = int(line)
        time.sleep(rng.uniform(0, 0.05))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        # read through the same buffered reader: readline() above may already
        # hold acknowledgements that communicate() (which reads the raw pipe) would miss
        rest = child.stdout.read()
        child.stderr.read()
    for line in rest.split():
        acked = int(line)
    assert child.returncode == -signal.SIGKILL
    return acked


@pytest.mark.parametrize("kind", APPEND_KINDS)
def test_killed_appender_loses_no_acknowledged_record(tmp_path, kind):
    rng = random.Random(f"append-{kind}")
    path = tmp_path / FILE_NAMES[kind]
    expected: list[int] = []
    torn = 0
    for trial in range(4):
        acked = _run_and_kill(kind, path, rng)
        torn += path.read_bytes()[-1:] not in (b"", b"\n")
        got = [r["i"] for r in read_jsonl(path)]
        if kind == "candidates":  # truncated at every start, like a resumed search loop's log
            expected = []
        # every acknowledged record, in order; at most one more (written, killed before its ack)
        assert got[: len(expected)] == expected, f"trial {trial}: earlier records lost"
        new = got[len(expected):]
        assert new[: acked + 1] == list(range(acked + 1)), f"trial {trial}: acknowledged records lost"
        assert len(new) <= acked + 2, f"trial {trial}: records nobody wrote"
        assert all(len(r["pad"]) in (1, 100, 10_000, 1_000_000, 3_000_000) for r in read_jsonl(path))
        expected = got
    # a writer opened after the kills repairs the tail and appends on a clean line
    append_jsonl(path, {"i": "after"})
    assert [r["i"] for r in read_jsonl(path)] == (expected if kind != "candidates" else got) + ["after"]
    print(f"{kind}: {torn}/4 kills left a torn last line")


@pytest.mark.parametrize("kind", ["trajectories", "summary", "skill"])
def test_killed_atomic_writer_leaves_a_whole_file(tmp_path, kind):
    rng = random.Random(f"atomic-{kind}")
    folder = tmp_path / "skill-name" if kind == "skill" else tmp_path
    folder.mkdir(exist_ok=True)
    path = folder / FILE_NAMES[kind]
    for trial in range(4):
        acked = _run_and_kill(kind, path, rng)
        if kind == "trajectories":
            records = read_jsonl(path)
            assert [int(r["case_id"]) for r in records] in (list(range(acked + 1)), list(range(acked + 2)))
            assert path.with_suffix(".md").read_text().startswith("# kill test")
        elif kind == "summary":
            version = json.loads(path.read_text())["i"]
            assert version in (acked, acked + 1), f"trial {trial}"
        else:
            text = path.read_text()
            assert text.startswith("---") and (f"version {acked}\n" in text or f"version {acked + 1}\n" in text)


# --------------------------------------------------------------- the rules themselves


def test_torn_tail_is_dropped_even_when_it_parses_and_cut_by_the_next_writer(tmp_path):
    path = tmp_path / "log.jsonl"
    with JsonlWriter(path) as log:
        log.append({"a": 1})
    with open(path, "ab") as handle:
        handle.write(b'{"a": 2}')  # complete JSON, but its writer never returned
    assert read_jsonl(path) == [{"a": 1}]
    assert repair_jsonl(path) is True and path.read_bytes() == b'{"a": 1}\n'
    assert repair_jsonl(path) is False
    with open(path, "ab") as handle:
        handle.write(b'{"a": 2, "to')
    with JsonlWriter(path) as log:
        log.append({"a": 3})
    assert read_jsonl(path) == [{"a": 1}, {"a": 3}]


def test_damage_before_the_last_newline_is_an_error_naming_file_and_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"a": 1}\n\nnot json\n{"a": 2}\n')
    with pytest.raises(CorruptFileError, match=r"log\.jsonl: line 3 is not valid JSON"):
        read_jsonl(path)
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_truncating_writer_and_whole_jsonl_use_the_append_encoding(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"old": 1}\n')
    with JsonlWriter(path, truncate=True, fsync=False) as log:
        log.append({"b": 2, "a": 1})
    appended = path.read_bytes()
    atomic_write_jsonl(tmp_path / "w.jsonl", [{"b": 2, "a": 1}])
    assert appended == (tmp_path / "w.jsonl").read_bytes() == b'{"a": 1, "b": 2}\n'


def test_atomic_writes_replace_whole_files_and_leave_no_temp_files(tmp_path):
    atomic_write_text(tmp_path / "sub" / "a.txt", "one")
    atomic_write_text(tmp_path / "sub" / "a.txt", "two")
    atomic_write_json(tmp_path / "sub" / "b.json", {"z": 1, "a": [1.5]})
    assert (tmp_path / "sub" / "a.txt").read_text() == "two"
    assert json.loads((tmp_path / "sub" / "b.json").read_text()) == {"a": [1.5], "z": 1}
    with pytest.raises(RuntimeError):
        with durable.atomic_path(tmp_path / "sub" / "a.txt") as tmp:
            tmp.write_text("half")
            raise RuntimeError("writer failed")
    assert (tmp_path / "sub" / "a.txt").read_text() == "two"
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["a.txt", "b.json"]


@pytest.fixture
def umask():
    """Set the process's umask for one test; the old one is back afterwards."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize("mask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700), (0o002, 0o664, 0o775)])
def test_durable_files_take_the_mode_open_gives_under_the_umask(tmp_path, umask, mask, file_mode, dir_mode):
    """Every file of a run directory is readable by whoever the umask lets read a plain
    open()'s file: atomic writes (summary.json, best.py, config.toml) and appends
    (events.jsonl) alike, a rewrite included; a whole directory as mkdir() makes one."""
    umask(mask)
    atomic_write_json(tmp_path / "summary.json", {"a": 1})
    atomic_write_json(tmp_path / "summary.json", {"a": 2})  # replaced: the new file's mode too
    atomic_write_text(tmp_path / "best.py", "x = 1\n")
    with durable.atomic_path(tmp_path / "plot.png") as tmp:
        tmp.write_bytes(b"png")
    append_jsonl(tmp_path / "events.jsonl", {"i": 0})
    with JsonlWriter(tmp_path / "candidates.jsonl", truncate=True, fsync=False) as log:
        log.append({"i": 0})
    with durable.atomic_directory(tmp_path / "model") as work:
        (work / "config.json").write_text("{}")
    open(tmp_path / "plain.txt", "w").close()
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"summary.json": file_mode, "best.py": file_mode, "plot.png": file_mode,
                     "events.jsonl": file_mode, "candidates.jsonl": file_mode, "plain.txt": file_mode,
                     "model": dir_mode}


def test_the_base_layer_imports_nothing_from_the_rest_of_coevolve():
    """durable may use its own layer (coevolve.base.errors), nothing above it;
    tests/test_layers.py checks the same rule for every module."""
    tree = ast.parse(Path(durable.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    above = {name for name in imported if name.startswith(("coevolve", "tasks")) and not name.startswith("coevolve.base")}
    assert not above


# What writes a file, found on the syntax tree (comments and strings cannot hide
# or fake one): methods that write or move a path, calls that copy, sync or
# save, and opens for writing (a mode with w, a, x or +; os.open with a
# writing flag; a mode the scan cannot read counts as writing).
WRITE_METHODS = {"write_text", "write_bytes", "touch", "savefig", "save_pretrained", "to_csv"}
WRITE_CALLS = {"os.replace", "os.rename", "os.renames", "os.fsync", "os.fdatasync", "os.truncate", "os.link",
               "os.symlink", "shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree", "shutil.move",
               "np.save", "np.savez", "numpy.save", "torch.save", "save_file", "pickle.dump"}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}
# Writes inside these blocks go to the temp path durable publishes atomically.
DURABLE_BLOCKS = {"atomic_path", "atomic_directory"}
EXEMPT = "# durable:"  # on the line or the one above, then the reason the write needs no durability


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _opens_for_writing(call: ast.Call, name: str, assigned: dict[str, ast.AST]) -> bool:
    if name == "os.open":
        flags = call.args[1] if len(call.args) > 1 else None
        if isinstance(flags, ast.Name):  # a name assigned once in the module: read what it holds
            flags = assigned.get(flags.id)
        return flags is None or any(isinstance(n, (ast.Name, ast.Attribute)) and _dotted(n).split(".")[-1] in WRITE_FLAGS
                                    for n in ast.walk(flags))
    if name not in ("open", "io.open", "os.fdopen") and not (name.endswith(".open") and isinstance(call.func, ast.Attribute)):
        return False
    builtin = name in ("open", "io.open", "os.fdopen")
    mode = next((k.value for k in call.keywords if k.arg == "mode"), None)
    if mode is None:
        position = 1 if builtin else 0
        mode = call.args[position] if len(call.args) > position else ast.Constant("r")
    if not isinstance(mode, ast.Constant) or not isinstance(mode.value, str):
        # a mode the scan cannot read: writing, for open(); X.open(name) is another
        # class's constructor (RunStore.open) unless it names a mode
        return builtin or any(k.arg == "mode" for k in call.keywords)
    return any(flag in mode.value for flag in "wax+")


def file_writes(source: str) -> list[tuple[int, str]]:
    """(line, what) for every file write outside a durable block, not exempted with a reason."""
    lines = source.splitlines()
    found: list[tuple[int, str]] = []

    def exempt(number: int) -> bool:
        for text in lines[max(0, number - 2):number]:
            reason = text.partition(EXEMPT)[2].strip()
            if reason:
                return True
        return False

    def visit(node: ast.AST, durable_block: bool) -> None:
        if isinstance(node, (ast.With, ast.AsyncWith)):
            durable_block = durable_block or any(
                isinstance(item.context_expr, ast.Call)
                and _dotted(item.context_expr.func).split(".")[-1] in DURABLE_BLOCKS for item in node.items)
        if isinstance(node, ast.Call) and not durable_block:
            name = _dotted(node.func)
            method = node.func.attr if isinstance(node.func, ast.Attribute) else ""
            # Path.rename / Path.replace take one argument (str.replace takes two or more)
            moves = method in ("rename", "replace") and len(node.args) == 1 and not node.keywords
            if (method in WRITE_METHODS or name in WRITE_CALLS or moves or _opens_for_writing(node, name, assigned)) \
                    and not exempt(node.lineno):
                found.append((node.lineno, name or method))
        for child in ast.iter_child_nodes(node):
            visit(child, durable_block)

    tree = ast.parse(source)
    targets = [(node.targets[0].id, node.value) for node in ast.walk(tree)
               if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)]
    assigned = {name: value for name, value in targets if [n for n, _ in targets].count(name) == 1}
    visit(tree, False)
    return found


def test_the_write_scan_sees_every_way_of_writing():
    writes = file_writes(textwrap.dedent('''
        Path("a").write_text("x")
        path.write_bytes(b"x")
        open(p, "w").write("x")
        open(p, mode="ab")
        with path.open("r+") as handle: pass
        os.open(p, os.O_WRONLY | os.O_CREAT)
        os.replace(a, b); tmp.rename(b); shutil.copy2(a, b); fig.savefig(p)
        open(p, mode); path.open(mode=m)
        flags = os.O_RDWR; os.open(p, flags); os.open(p, unknown)
        open(p); open(p, "rb"); path.open(); text.replace("a", "b"); os.open(p, os.O_RDONLY)
        with atomic_path(p) as tmp:
            tmp.write_text("x")
        # durable: a kernel interface, not a file
        open("/proc/self/uid_map", "w")
        open(q, "w")  # durable:
        '''))
    assert [line for line, _ in writes] == [2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 9, 9, 10, 10, 16]


def test_no_other_module_writes_durable_files_its_own_way():
    """Every file write in coevolve/ and tasks/ goes through coevolve.base.durable
    (or into the temp path of its atomic_path / atomic_directory), or says on
    its line why it needs no durability."""
    offenders = []
    for file in [*(ROOT / "coevolve").rglob("*.py"), *(ROOT / "tasks").rglob("*.py")]:
        if file == Path(durable.__file__):
            continue
        source = file.read_text()
        for number, name in file_writes(source):
            offenders.append(f"{file.relative_to(ROOT)}:{number}: {name}: {source.splitlines()[number - 1].strip()}")
    assert offenders == []
