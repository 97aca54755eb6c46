"""Shared fixtures. One real engine per kind per test session (starting vLLM
costs ~20 s and a second in-process engine would double memory): tests that
need it take the `engine` (or `lowrank_engine`) fixture and must leave its
weights as they found them (tests that move them call `engine.reset()`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from conftest_server import openai_server  # noqa: F401  (one session server for every module)

ROOT = Path(__file__).resolve().parents[1]
# Starting vLLM in this process sets LD_PRELOAD (torch's libgomp) and LD_LIBRARY_PATH in os.environ
# (seen with the low-rank engine). A child started after that loads another OpenMP runtime than the
# same command run from a shell: late in the full suite `coevolve run` sampled other tokens than
# alone (s27). Children get these two as the session found them.
_LOADER_VARIABLES = {name: os.environ.get(name) for name in ("LD_PRELOAD", "LD_LIBRARY_PATH")}


def child_environment(extra: dict | None = None) -> dict:
    """os.environ (with what tests set) for a child process, the loader variables as the session began."""
    env = {**os.environ, **(extra or {})}
    _set_loader_variables(_LOADER_VARIABLES, env)
    return env


@contextlib.contextmanager
def loader_variables_as_the_session_began() -> Iterator[None]:
    """os.environ's loader variables as the session began while the block runs (a Ray cluster started in
    it gives its workers those): under the LD_PRELOAD of libgomp an in-process engine leaves behind, a
    two-engine pool's ES generation took 47 s instead of 12 s here (benchmarks/results/s57)."""
    now = {name: os.environ.get(name) for name in _LOADER_VARIABLES}
    _set_loader_variables(_LOADER_VARIABLES, os.environ)
    try:
        yield
    finally:
        _set_loader_variables(now, os.environ)


def _set_loader_variables(values: dict, env) -> None:
    """`values` into the environment mapping `env`, a None one removed."""
    for name, value in values.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value


@pytest.fixture(autouse=True)
def _no_pending_copy_notes():
    """A copy note a test left pending (a report rendered in process, not through the command that
    prints it) is not the next test's command's to print: drained before each test."""
    from tasks.loader import copy_notes

    copy_notes()
    yield


@pytest.fixture(scope="session")
def model_dir() -> Path:
    from coevolve.engine.models import default_model_dir

    return default_model_dir()


def agreement(a: list[str], b: list[str]) -> int:
    """Characters two greedy decodes of the same prompts agree on from the start, summed over the prompts, and
    one more per prompt where they also agree where to stop (equal texts): a decode that ends where another
    goes on ("...Paris." against "...Paris. I can add") is not as close to it as to an equal one (a tie,
    which `closest` reads as undecided, failed test_es_lowrank in s59's suite)."""
    return sum(len(os.path.commonprefix([x, y])) + (x == y) for x, y in zip(a, b))


def closest(texts: list[str], choices: list[list[str]]) -> int | None:
    """The index of the decode in `choices` that `texts` agrees with most (agreement), None on a tie.
    Where the same weights are decoded by another kernel or in another batch, an exact comparison holds
    only on CPUs whose bf16 GEMMs round alike whatever the packing or batch (an AVX512-BF16 EPYC); on an
    AMX Xeon a heavily perturbed model's greedy near-tie flips (s52). That the decode is the one meant
    (not the unperturbed model, not another member) still shows: it agrees with that one most."""
    scores = [agreement(texts, choice) for choice in choices]
    best = max(scores)
    return scores.index(best) if scores.count(best) == 1 else None


# Low-rank tests need an engine with LoRA slots; a LoRA engine would slow the
# plain tests. At most one engine lives in the process: asking for the other
# kind closes the current one (pytest runs a module's tests together, so the
# switch happens about once per module that needs the other kind).
LOWRANK_SLOTS = 8
_alive: dict[str, object] = {}


def _only(kind: str, build):
    import gc

    for other in [k for k in _alive if k != kind]:
        _alive.pop(other).close()
        gc.collect()
    if kind not in _alive:
        _alive[kind] = build()
    return _alive[kind]


def pytest_collection_modifyitems(items: list) -> None:
    """The modules that use the low-rank engine run last, in their own order: the session then switches
    plain -> low-rank once and never builds the plain engine again (~25 s an engine on 2 cores)."""
    lowrank = {item.module for item in items if "lowrank_engine" in getattr(item, "fixturenames", ())}
    items.sort(key=lambda item: item.module in lowrank)  # stable: every other order is kept


@pytest.fixture(scope="session")
def _close_engines():
    yield
    for kind in list(_alive):
        _alive.pop(kind).close()


def plain_engine(model_dir: Path):
    """The session's plain engine, built on first use (module fixtures call this; tests take `engine`)."""
    from coevolve.engine.vllm_engine import Engine

    return _only("plain", lambda: Engine(model_dir, max_model_len=2048, max_num_seqs=64))


@pytest.fixture
def engine(model_dir, _close_engines):
    return plain_engine(model_dir)


@pytest.fixture
def lowrank_engine(model_dir, _close_engines):
    """A rank-1 low-rank ES engine with LOWRANK_SLOTS member slots."""
    from coevolve.engine.vllm_engine import Engine

    return _only("lowrank", lambda: Engine(model_dir, max_model_len=2048, max_num_seqs=64, noise="lowrank",
                                           rank=1, members=LOWRANK_SLOTS))


def run_python(code: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a script in a fresh interpreter (for checks that need a fresh engine)."""
    full_env = child_environment(env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=full_env, cwd=ROOT
    )


def start_run(*args: str) -> subprocess.Popen:
    """`coevolve run ARGS` in its own session (so a SIGKILL takes its whole group)."""
    return subprocess.Popen([sys.executable, "-m", "coevolve.cli", "run", *args], cwd=ROOT, env=child_environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


@dataclass
class KillResume:
    """An uninterrupted run and the same run SIGKILLed and resumed."""

    expected: dict  # the uninterrupted run's summary.json
    full_output: str
    events: int  # events of the kind killed at, in the uninterrupted run's log
    killed_dir: Path
    resumed_output: str


def kill_and_resume(config: Path, root: Path, kind: str, jitter_s: float, *flags: str, engine) -> KillResume:
    """Run `config` to the end in root/full; run it again in root/killed,
    SIGKILL it after a random number (at least one, fewer than the full run's)
    of `kind` events plus up to `jitter_s` seconds, then `--resume` it. Each
    run must exit 0; the killed one must not have written its summary. The
    uninterrupted and the resumed runs are `coevolve run` in this process on
    the session's `engine`; the killed run is a process of its own, so what it
    sampled before the kill must also be what this process samples."""
    import json

    from coevolve.runstore import RunStore

    full_output = cli_in_process(engine, "run", str(config), "--out", str(root / "full"), *flags)
    events = len(list(RunStore(root / "full").iter_events(kind)))
    kill_run(config, root / "killed", kind, events, jitter_s, *flags)
    resumed_output = cli_in_process(engine, "run", "--resume", str(root / "killed"), *flags)
    return KillResume(json.loads((root / "full" / "summary.json").read_text()), full_output, events,
                      root / "killed", resumed_output)


def coevolve_here(*argv: str, engine=None, cwd: Path | None = None,
                  merged: bool = False) -> subprocess.CompletedProcess:
    """`coevolve ARGV` by main() in this process (in `cwd`), where a process of its own is not what is
    tested: its exit status and stdout and stderr as a child's would be (`merged`: both in stdout in the
    order written, as stderr=STDOUT gives them). With `engine`, the command is lent that engine where it
    builds one (`_lent`)."""
    import io

    from coevolve.cli import main

    out = io.StringIO()
    err = out if merged else io.StringIO()
    here = Path.cwd()
    with contextlib.ExitStack() as stack:
        if engine is not None:
            stack.enter_context(_lent(engine))
        stack.callback(os.chdir, here)
        os.chdir(cwd or here)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    return subprocess.CompletedProcess(["coevolve", *argv], code, out.getvalue(), "" if merged else err.getvalue())


@contextlib.contextmanager
def _lent(engine) -> Iterator[None]:
    """While the block runs, a command that builds an engine gets `engine` (it must ask for the session's
    kind); the command neither closes it nor leaves it moved: reset after."""
    from coevolve.engine import pool
    from coevolve.engine.vllm_engine import resolve_dtype

    class Borrowed:
        def __getattr__(self, name):
            return getattr(engine, name)

        def close(self) -> None:
            pass

    def borrow(model=None, section=None, **kwargs) -> Borrowed:
        asked = (kwargs.get("noise", "full"), resolve_dtype(kwargs.get("dtype", "auto"), engine.device),
                 kwargs.get("max_model_len", 2048))
        assert asked == (engine.noise, engine.dtype, engine.max_model_len), \
            f"the command asks for a {asked} engine, not the session's"
        return Borrowed()

    saved = pool.build_engine
    pool.build_engine = borrow
    try:
        yield
    finally:
        pool.build_engine = saved
        engine.reset()


def cli_in_process(engine, *argv: str, cwd: Path | None = None) -> str:
    """`coevolve ARGV` here with `engine` lent (coevolve_here): its stdout and stderr together. It must exit 0."""
    done = coevolve_here(*argv, engine=engine, cwd=cwd, merged=True)
    assert done.returncode == 0, done.stdout
    return done.stdout


def kill_run(config: Path, directory: Path, kind: str, events: int, jitter_s: float, *flags: str) -> None:
    """`coevolve run CONFIG --out DIRECTORY`, SIGKILLed after a random number (at least one, fewer
    than `events`: the uninterrupted run's) of `kind` events plus up to `jitter_s` seconds; it must
    not have written its summary."""
    import random

    killed = start_run(str(config), "--out", str(directory), *flags)
    sigkill_after(killed, directory / "events.jsonl", kind, random.Random().randint(1, events - 1), jitter_s)
    assert not (directory / "summary.json").exists()


def sigkill_after(process: subprocess.Popen, events_path: Path, kind: str, count: int, jitter_s: float) -> None:
    """SIGKILL a `coevolve run` (started in its own session) once its event log
    holds `count` events of `kind`, plus up to `jitter_s` seconds, so the kill
    lands somewhere inside the next step or round."""
    import random
    import signal
    import time

    from coevolve.runstore import read_jsonl

    deadline = time.time() + 600
    while time.time() < deadline and process.poll() is None:
        if events_path.exists() and sum(1 for e in read_jsonl(events_path) if e["type"] == kind) >= count:
            break
        time.sleep(0.1)
    time.sleep(random.Random().uniform(0, jitter_s))
    assert process.poll() is None, "the run ended before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
