"""The evaluation cascade (issue 19, coevolve/search/cascade.py): a task's
declaration checked with one-line errors, the bar against the archive, the
loop's accounting with a fake LLM (budget exact, outcome `cascade` in
candidates, summary, ledger and run table, kill-and-resume equal to an
uninterrupted run), and a file task declaring a cascade scored through the
real sandbox. The real engine runs it in test_own_problem.py (bin_packing)."""

from __future__ import annotations

import json
import re

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search import cascade
from coevolve.search.ledger import Ledger
from coevolve.search.loop import SearchLoop
from coevolve.search.runconfig import RunConfig
from search_fakes import FakeEngine, FakeEvaluator, FakeTask
from tasks.base import Cascade, declared_cascade
from test_own_problem import CONFIG, NO_MODEL, PICK, cli, write


# -- the declaration -------------------------------------------------------------------------------
def pick_with(lines: str) -> str:
    """The toy pick task with class attributes added after `train`."""
    anchor = '    train = ("train", 5)\n'
    assert anchor in PICK
    return PICK.replace(anchor, anchor + "".join(f"    {line}\n" for line in lines.splitlines()))


BAD_CASCADES = {
    "unknown_set": ('cascade_stage = ("quick", 5)', "cascade_stage: ('quick', 5) is not one of splits()"),
    "not_a_pair": ('cascade_stage = "test"', "cascade_stage: expected a (split, size) pair such as (\"quick\", 50), "
                                             "got 'test'"),
    "negative_margin": ('cascade_stage = ("test", 5)\ncascade_margin = -0.1',
                        "cascade_margin: expected a finite number >= 0 (0.1 = within 10%), got -0.1"),
    "unknown_reference": ('cascade_stage = ("test", 5)\ncascade_against = "mean"',
                          "cascade_against: expected one of worst, median, best, got 'mean'"),
    "margin_alone": ("cascade_margin = 0.1", "cascade_margin: set without cascade_stage"),
    "train_itself": ('cascade_stage = ("train", 5)', "cascade_stage: ('train', 5) is the training set itself"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASCADES))
def test_a_bad_cascade_is_one_line_from_check_task(tmp_path, case):
    lines, expected = BAD_CASCADES[case]
    problem = write(tmp_path, "bad.py", pick_with(lines))
    code, _, err = cli("check-task", str(problem), "--no-sandbox")
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


def test_a_bad_cascade_stops_run_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "bad.py", pick_with('cascade_stage = ("test", 5)\ncascade_against = "mean"'))
    config = write(tmp_path, "c.toml", CONFIG.format(task="bad.py", budget=2) + NO_MODEL)
    code, _, err = cli("run", str(config))
    assert code == 2 and "cascade_against: expected one of worst, median, best" in err
    assert not (tmp_path / "runs").exists()


def test_check_task_scores_the_template_on_the_first_stage(tmp_path):
    problem = write(tmp_path, "ok.py", pick_with('cascade_stage = ("test", 5)\ncascade_margin = 0.1'))
    code, out, err = cli("check-task", str(problem))
    assert code == 0, err
    assert "ok  cascade: the template scores" in out and "within 10% of the archive's worst" in out
    assert "ok  sandbox: the template scores" in out and "on its first stage in the real sandbox" in out


def test_declaration_defaults_and_builtin_tasks_have_none():
    from tasks.registry import heuristic_task, list_tasks

    class Declared:
        cascade_stage = ("quick", 50)

    assert declared_cascade(Declared()) == Cascade(("quick", 50), 0.0, "worst")
    assert all(declared_cascade(heuristic_task(name)) is None for name in list_tasks("heuristic"))


# -- the bar ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("direction,against,margin,expected", [
    ("min", "worst", 0.0, 30.0), ("min", "median", 0.1, 22.0), ("min", "best", 0.5, 15.0),
    ("max", "worst", 0.0, 10.0), ("max", "median", 0.1, 18.0), ("max", "best", 0.5, 15.0)])
def test_bar_relative_to_the_archive(direction, against, margin, expected):
    rule = Cascade(("quick", 5), margin, against)
    assert cascade.bar(rule, [20.0, 10.0, 30.0], direction) == pytest.approx(expected)
    assert cascade.bar(rule, [], direction) is None  # nothing to compare with: no bar
    assert cascade.clears(expected, expected, direction)
    assert not cascade.clears(expected + (1 if direction == "min" else -1), expected, direction)


def test_ledger_reclassify_keeps_the_charge():
    ledger = Ledger(3)
    ledger.charge("evaluated")
    ledger.reclassify("evaluated", "cascade")
    assert ledger.used == 1 and ledger.to_dict()["outcomes"] == {"cascade": 1}
    with pytest.raises(ValueError, match="no 'evaluated' charge"):
        ledger.reclassify("evaluated", "cascade")


# -- the loop, with a fake LLM ---------------------------------------------------------------------
class CascadeTask(FakeTask):
    """The fake task (min, objective = the program's SCORE) with a cascade: stage 1 must be within 10% of the median."""

    cascade_stage = ("quick", 2)
    cascade_margin = 0.1
    cascade_against = "median"


class CountingEvaluator(FakeEvaluator):
    """The fake evaluator, remembering which set each job was scored on."""

    def __init__(self) -> None:
        super().__init__()
        self.sets: list[str] = []

    def evaluate_many(self, items):
        self.sets += [split for _, _, split, _ in items]
        return super().evaluate_many(items)


def fake_config(budget: int, method: str = "eoh") -> RunConfig:
    return build_config(RunConfig, {
        "run": {"method": method, "task": "fake", "budget": budget, "seed": 1},
        "eoh": {"population": 4, "offspring": 3}, "sample": {"batch": 5, "population": 4},
        # clones rejected as the runs these checks were written for: the fake proposer repeats itself,
        # and a repeat of a stopped candidate would count in summary.failures but not in the ledger's cascade
        "context": {"fingerprint": True}})


def fake_run(directory, config, task, resume=False):
    store = RunStore.open(directory) if resume else RunStore.create(directory, dump_toml(as_dict(config)))
    evaluator = CountingEvaluator()
    summary = SearchLoop(config, store, FakeEngine(), evaluator, task).run()
    return summary, evaluator


def score_of(code: str) -> float:
    return float(re.search(r"SCORE = (-?[0-9.]+)", code).group(1))


def test_loop_stops_candidates_at_stage_one_and_charges_each_once(tmp_path):
    from coevolve.report import run_table
    from tasks.registry import register_heuristic, unregister

    summary, evaluator = fake_run(tmp_path / "r", fake_config(40), CascadeTask())
    candidates = read_jsonl(tmp_path / "r" / "candidates.jsonl")
    stopped = [c for c in candidates if c["failure"] == "cascade" and c["duplicate_of"] is None]
    assert stopped, "the fake proposer's spread of scores must trip the cascade"
    # budget exact: one charge per request; a stage-1 rejection is one of them, named in the ledger
    ledger = summary.ledger
    assert summary.evaluations == 40 == sum(ledger.outcomes.values())
    assert ledger.outcomes["cascade"] == len(stopped) == summary.failures["cascade"]
    register_heuristic("fake", CascadeTask)  # the run table looks the task up by name
    try:
        assert "cascade " in run_table(summary, tmp_path / "r")
    finally:
        unregister("fake")
    for c in stopped:
        assert c["objective"] is None and c["message"].startswith("stage 1 (quick 2): objective ")
        # it missed the bar: its score is above the archive's median by more than 10%
        needed = float(re.search(r"misses the bar (\S+)", c["message"]).group(1))
        assert score_of(c["code"]) > needed
    # the full set saw only candidates that cleared stage 1 (or came before any archive), and the seeded
    # template, scored before the archive existed
    assert evaluator.sets.count("train") + evaluator.sets.count("quick") == len(evaluator.sets)
    assert evaluator.sets.count("quick") >= len(stopped) and evaluator.sets.count("train") > 0
    valid_train = [c for c in candidates if c["objective"] is not None and c["duplicate_of"] is None]
    assert evaluator.sets.count("train") == len(valid_train) + ledger.seeded + sum(
        c["failure"] == "exception" and not c["message"].startswith("at stage 1") and c["duplicate_of"] is None
        for c in candidates)


def test_stage_one_outcomes_one_by_one():
    """Cleared (scored on both, seconds summed), missed the bar (Stopped), failed at
    stage 1 (that failure, never the full set), and no bar with an empty archive."""
    from coevolve.sandbox.results import FailureKind

    task, evaluator = CascadeTask(), CountingEvaluator()
    codes = ["SCORE = 21.0", "SCORE = 40.0", "raise ValueError('boom')"]
    results = cascade.evaluate_many(evaluator, task, codes, [20.0, 30.0, 10.0])
    assert evaluator.sets == ["quick"] * 3 + ["train"]
    assert results[0].objective == 21.0 and results[0].seconds == pytest.approx(0.02)
    assert results[1].failure == "cascade" and results[1].objective is None and results[1].message == (
        "stage 1 (quick 2): objective 40 misses the bar 22 (the archive's median 20, margin 0.1); not scored on train 8")
    assert results[2].failure is FailureKind.EXCEPTION and results[2].message == "at stage 1 (quick 2): ValueError: boom"
    evaluator.sets.clear()
    assert [r.objective for r in cascade.evaluate_many(evaluator, task, codes[:2], [])] == [21.0, 40.0]
    assert evaluator.sets == ["train", "train"]


def test_loop_without_a_cascade_never_scores_a_stage(tmp_path):
    summary, evaluator = fake_run(tmp_path / "r", fake_config(20), FakeTask())
    assert set(evaluator.sets) == {"train"} and "cascade" not in summary.ledger.outcomes


def test_kill_and_resume_reproduces_a_cascaded_run(tmp_path):
    config = fake_config(31)
    full, _ = fake_run(tmp_path / "full", config, CascadeTask())
    events = read_jsonl(tmp_path / "full" / "events.jsonl")
    steps = [e for e in events if e["type"] == "step"]
    assert any(r.get("failure") == "cascade" for e in steps for r in e["results"])
    for kept in range(1, len(steps)):
        d = tmp_path / f"k{kept}"
        d.mkdir()
        (d / "config.toml").write_text((tmp_path / "full" / "config.toml").read_text())
        (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:1 + kept]))
        resumed, evaluator = fake_run(d, config, CascadeTask(), resume=True)
        assert resumed == full, f"kill after {kept} steps"
        assert read_jsonl(d / "candidates.jsonl") == read_jsonl(tmp_path / "full" / "candidates.jsonl")
        live = [r for e in steps[kept:] for r in e["results"] if r.get("failure") == "cascade"]
        assert evaluator.sets.count("quick") >= len(live)  # logged steps were not scored again


# -- a file task with a cascade, through the real sandbox ------------------------------------------
SCORED = '''import numpy as np


class Scored:
    """Minimise the number a heuristic returns (the fake proposer's SCORE), through the real sandbox."""

    name = "scored"
    description = "Return a number; smaller is better."
    function_name = "heuristic"
    template = "def heuristic(x):\\n    SCORE = 50.0\\n    return SCORE\\n"
    direction = "min"
    train = ("train", 4)
    cascade_stage = ("quick", 4)
    cascade_margin = 0.0
    cascade_against = "median"

    def splits(self):
        return {"train": [4], "quick": [4]}

    def instances(self, split, size):
        return [float(i) for i in range(size if split == "train" else 1)]

    def decide(self, fn, instances):
        for x in instances:
            yield float(fn(x))

    def score(self, decisions, instances):
        return float(np.mean(decisions))

    def instance_seconds(self, size):
        return 2.0

    def reference(self, split, size):
        return None
'''


def test_file_task_cascade_through_the_real_sandbox(tmp_path):
    from coevolve.sandbox import Sandbox
    from tasks.registry import heuristic_task

    problem = write(tmp_path / "elsewhere", "problem.py", SCORED)
    code, _, err = cli("check-task", str(problem))
    assert code == 0, err
    config = fake_config(15, method="sample")
    store = RunStore.create(tmp_path / "r", dump_toml(as_dict(config)))
    killed = tmp_path / "killed"
    with Sandbox(workers=1, timeout_s=20) as sandbox:
        summary = SearchLoop(config, store, FakeEngine(), sandbox, heuristic_task(str(problem))).run()
        # killed after two steps, then resumed: the same outcomes, the same summary
        events = read_jsonl(store.events_path)
        killed.mkdir()
        (killed / "config.toml").write_text(store.config_path.read_text())
        (killed / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:3]))
        resumed = SearchLoop(config, RunStore.open(killed), FakeEngine(), sandbox, heuristic_task(str(problem))).run()
    assert resumed == summary
    timeless = lambda path: [{k: v for k, v in c.items() if k != "seconds"} for c in read_jsonl(path)]  # wall time
    assert timeless(killed / "candidates.jsonl") == timeless(store.candidates_path)
    candidates = read_jsonl(store.candidates_path)
    stopped = [c for c in candidates if c["failure"] == "cascade"]
    assert stopped and summary.ledger.outcomes["cascade"] == len(stopped)
    assert summary.evaluations == 15 == sum(summary.ledger.outcomes.values())
    for c in stopped:  # the stage score the sandbox gave is the program's SCORE, and it missed the bar
        shown = float(re.search(r"objective (\S+) misses the bar (\S+)", c["message"]).group(1))
        assert shown == pytest.approx(score_of(c["code"]), rel=1e-5)
    assert all(c["objective"] == pytest.approx(score_of(c["code"])) for c in candidates if c["objective"] is not None)


def test_compare_ledger_table_counts_stage_one_rejections():
    from types import SimpleNamespace

    from coevolve.report.rendering import ledger_table

    config = SimpleNamespace(compare=SimpleNamespace(methods=["sample"], arms={}, baseline=""))

    def cell(evaluations: int, outcomes: dict) -> SimpleNamespace:  # the fields ledger_table reads of a ComparisonCell
        ledger = SimpleNamespace(outcomes=outcomes, llm_requests=evaluations, completion_tokens=9)
        return SimpleNamespace(method="sample", summary=SimpleNamespace(evaluations=evaluations, ledger=ledger))

    table = ledger_table(config, [cell(6, {"evaluated": 3, "cascade": 2, "parse": 1})])
    header, rule, row = table.splitlines()
    assert "stopped at stage 1 (cascade)" in header and rule.count("---") == 9
    assert row.split("|")[4:8] == [" 3 ", " 0 ", " 1 ", " 2 "]
    plain = ledger_table(config, [cell(4, {"evaluated": 4})])
    assert "cascade" not in plain and plain.splitlines()[1].count("---") == 8


def test_es_reward_of_a_stage_one_rejection_is_valid_but_worse():
    from coevolve.search.population import Candidate
    from coevolve.search.reward import candidate_reward
    from coevolve.search.runconfig import RewardSection

    levels = RewardSection()
    stopped = Candidate(id=1, step=1, operator="i1", parents=[], model_state={}, code="x", failure="cascade")
    crashed = Candidate(id=2, step=1, operator="i1", parents=[], model_state={}, code="x", failure="exception")
    worse = Candidate(id=3, step=1, operator="i1", parents=[], model_state={}, code="x", objective=1e9)
    assert candidate_reward(crashed, 1.0, "min", levels) < candidate_reward(stopped, 1.0, "min", levels) \
        <= candidate_reward(worse, 1.0, "min", levels)
