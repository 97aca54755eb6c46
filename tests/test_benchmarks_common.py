"""benchmarks/common.py and the parts of the two search benchmarks that need no
engine: --stop-at, the lock, the table, and reading finished runs back (a run
directory written by the real search loop, with the fake engine)."""

from __future__ import annotations

import argparse
import datetime
import fcntl
import importlib
import json
import sys
from pathlib import Path

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search.loop import SearchLoop
from coevolve.search.runconfig import RunConfig
from search_fakes import FakeEngine, FakeEvaluator, FakeTask

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
common = importlib.import_module("benchmarks.common")
proposal = importlib.import_module("benchmarks.proposal_efficiency")
search = importlib.import_module("benchmarks.search_efficiency")

UTC = datetime.timezone.utc


def test_stop_at_is_the_nearest_such_time_across_midnight_and_malformed_is_a_usage_error():
    at = datetime.datetime(2026, 12, 1, 23, 0, 30, tzinfo=UTC)
    assert common.stop_time("00:15", at) == datetime.datetime(2026, 12, 2, 0, 15, tzinfo=UTC)
    assert common.stop_time("20:40", at) == datetime.datetime(2026, 12, 1, 20, 40, tzinfo=UTC)  # passed: no run
    assert common.stop_time("23:30", at) == datetime.datetime(2026, 12, 1, 23, 30, tzinfo=UTC)
    early = datetime.datetime(2026, 12, 2, 0, 5, tzinfo=UTC)
    assert common.stop_time("23:50", early) == datetime.datetime(2026, 12, 1, 23, 50, tzinfo=UTC)
    assert common.stop_time("", at) is None
    for bad in ("25:00", "9", "ab:cd"):
        with pytest.raises(ValueError):
            common.stop_time(bad, at)
        with pytest.raises(SystemExit) as exit_:
            proposal.main(["--stop-at", bad, "--analyse-only"])
        assert exit_.value.code == 2


def test_the_lock_excludes_another_holder_and_is_released(tmp_path):
    lock = str(tmp_path / "heavy.lock")
    with common.machine_lock(lock):
        with open(lock, "a") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(lock, "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def bench_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    common.add_options(parser, tasks=["fake"], out="unused")
    return common.parse(parser, argv)


def test_nothing_starts_after_stop_at(capsys):
    args = bench_args(["--stop-at", "00:00"])
    args.stop = datetime.datetime.now(UTC) - datetime.timedelta(minutes=1)
    cell = common.Cell("fake", "eoh", 0, Path("/nonexistent"))
    common.work_through(args, [cell], lambda *a: pytest.fail("a run started after --stop-at"))
    assert "--stop-at 00:00 reached: fake eoh seed 0 and later not run" in capsys.readouterr().out


def fake_run(directory: Path, method: str, budget: int) -> dict:
    config = build_config(RunConfig, {"run": {"method": method, "task": "fake", "budget": budget, "seed": 0},
                                      "eoh": {"population": 4, "offspring": 3}})
    store = RunStore.create(directory, dump_toml(as_dict(config)))
    return SearchLoop(config, store, FakeEngine(), FakeEvaluator(), FakeTask()).run()


def test_the_benchmarks_read_finished_runs_back_into_their_tables(tmp_path, capsys):
    out = tmp_path / "out"
    summary = fake_run(out / "fake" / "eoh" / "seed0", "eoh", 12)
    fake_run(out / "fake" / "fingerprint" / "seed0", "eoh", 10)  # short of the budget: not finished
    assert proposal.main(["--analyse-only", "--tasks", "fake", "--arms", "eoh", "+fingerprint", "--seeds", "0",
                          "--budget", "12", "--out", str(out)]) == 0
    measures = json.loads((out / "measures.json").read_text())
    assert list(measures) == ["fake/eoh"]  # the unfinished arm is left out
    (m,) = measures["fake/eoh"]
    candidates = read_jsonl(out / "fake" / "eoh" / "seed0" / "candidates.jsonl")
    assert m["valid_rate"] == summary.valid / len(candidates) and 0 < m["valid_rate"] < 1
    assert m["lost_parse"] == summary.failures.get("parse", 0) / 12
    table = (out / "table.md").read_text()
    lines = table.splitlines()
    assert lines[2].startswith("| task | arm | seeds | lost: parse |") and lines[3] == "|" + "---|" * 16
    assert lines[4].startswith(f"| fake | eoh | 1 | {100 * m['lost_parse']:.1f}% |")
    assert table in capsys.readouterr().out

    # the same run directory read by search_efficiency (its folder names are the methods)
    assert search.main(["--analyse-only", "--tasks", "fake", "--methods", "eoh", "--seeds", "0", "--budget", "12",
                        "--out", str(out)]) == 0
    text = (out / "table.md").read_text()
    assert "1 of 1 runs finished" in text
    best = f"{summary.best.objective:.4g}"
    assert f"| fake | eoh | 1 | {best} |" in text
    assert json.loads((out / "measures.json").read_text())["fake/eoh"]["0"]["best"] == summary.best.objective


def test_search_efficiency_scores_a_runs_best_on_the_test_set_once(tmp_path):
    """The first call scores best.py in the real sandbox and caches a TestScore; the
    next reads the cache (no sandbox at all); a run with no best.py has no score."""
    from coevolve.base.records import TestScore, read_record
    from coevolve.sandbox import Sandbox
    from tasks.registry import heuristic_task

    assert search.test_score(tmp_path, "tsp_construct", sandbox=None) is None
    (tmp_path / "best.py").write_text(heuristic_task("tsp_construct").template)
    with Sandbox(workers=1, timeout_s=120) as sandbox:
        first = search.test_score(tmp_path, "tsp_construct", sandbox)
    cached = read_record(tmp_path / "test_score.json", TestScore)
    assert cached is not None and cached.objective == first and cached.limit == search.TEST_INSTANCES
    assert cached.split == "test" and first > 0
    assert search.test_score(tmp_path, "tsp_construct", sandbox=None) == first  # from the cache
