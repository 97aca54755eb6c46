"""Decision descriptors (issue 20, item 3): a task describes a program's
decisions (its tours, its picks) in the sandbox's trusted worker
(`decision_descriptors`, `describe_decisions`, tasks/base.py behaviour_of);
the values travel with the result (EvalResult / Evaluation / Candidate
`behaviour`), MAP-Elites' grid reads them, and a resumed run reads them back
from its events without scoring again."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from coevolve.runstore import read_jsonl
from coevolve.sandbox.results import EvalResult
from coevolve.search import methods as registry
from tasks.asp import AdmissibleSets, Setting
from tasks.base import behaviour_of, declared_behaviour, described_once, template_function
from tasks.check import shape_problems
from tasks.kp_construct import best_ratio_share
from tasks.registry import get_task
from tasks.tsp_construct import TSPConstruct, crossings, distance_matrix, nearest_share
from test_search_methods import ProfiledTask, _toml, fake_config, fake_run

# the second-nearest city at every step; and, in its own process, an attempt to rewrite how the
# worker describes tours (the worker's copy of the task is not the candidate's to change)
SECOND = '''import tasks.tsp_construct


def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):
    tasks.tsp_construct.TSPConstruct.describe_decisions = lambda self, d, i: {"nearest": 1.0, "crossings": 0.0}
    return unvisited_nodes[1] if len(unvisited_nodes) > 1 else unvisited_nodes[0]
'''
RAISING = '''from tasks.tsp_construct import TSPConstruct


class Raising(TSPConstruct):
    def describe_decisions(self, decisions, instances):
        raise RuntimeError("describe broke")
'''
PARTLY = '''import math

from tasks.tsp_construct import TSPConstruct


class Partly(TSPConstruct):
    def describe_decisions(self, decisions, instances):
        return {"nearest": math.nan, "crossings": 0.25, "undeclared": 1.0}
'''


def test_tsp_descriptors_of_known_tours():
    square = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    assert crossings(np.array([0, 1, 2, 3]), square) == 0
    assert crossings(np.array([0, 2, 1, 3]), square) == 1  # the two diagonals
    line = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0], [6.0, 0.0], [10.0, 0.0]])
    distances = distance_matrix(line)
    assert nearest_share(np.array([0, 1, 2, 3, 4]), distances) == 1.0
    assert nearest_share(np.array([0, 2, 1, 3, 4]), distances) == pytest.approx(2 / 3)  # 0->2 skips 1
    items = np.array([[1.0, 3.0], [1.0, 1.0], [1.0, 2.0]])  # ratios 3, 1, 2
    assert best_ratio_share(np.array([0, 2, 1]), items, 3.0) == 1.0
    assert best_ratio_share(np.array([1, 0]), items, 3.0) == 0.5
    assert best_ratio_share(np.array([], int), items, 3.0) is None


def test_asp_descriptors_of_known_priorities():
    """Setting(3, 1) has two candidate rows, (0, 0, 1) then (0, 0, 2), and its first tenth is one row."""
    task, small = AdmissibleSets(), Setting(3, 1)
    assert task.describe_decisions([np.array([1.0, 1.0])], small) == {"tied": 1.0, "ones": 1.0}  # order keeps (0,0,1)
    assert task.describe_decisions([np.array([0.0, 5.0])], small) == {"tied": 0.0, "ones": 0.0}  # (0,0,2) first
    # Setting(6, 2): 8 rows; two of them share the priority 2, the rest have their own
    assert task.describe_decisions([np.array([2.0, 2.0, 0.5, 0.1, 0.2, 0.3, 0.4, 0.6])], Setting(6, 2))["tied"] == 0.25


def test_a_task_describes_one_evaluation_once_and_anew_for_other_decisions():
    calls = []

    class Counting(TSPConstruct):
        @described_once
        def describe_decisions(self, decisions, instances):
            calls.append(1)
            return {"nearest": float(len(decisions)), "crossings": 0.0}

    task, instances = Counting(), np.zeros((2, 3, 2))
    decisions = [np.array([0, 1, 2]), np.array([0, 2, 1])]
    first = behaviour_of(task, decisions, instances)
    first["nearest"] = -1.0  # a caller's change to its copy reaches nobody else
    assert task.describe_decisions(decisions, instances) == {"nearest": 2.0, "crossings": 0.0} and len(calls) == 1
    assert task.describe_decisions(decisions[:1], instances)["nearest"] == 1.0 and len(calls) == 2  # other objects
    assert task.describe_decisions(list(decisions), instances)["nearest"] == 2.0 and len(calls) == 3


def test_the_trusted_worker_describes_the_decisions_and_survives_a_failing_description(tmp_path):
    """The real sandbox: nearest neighbour's tours are all nearest steps, a second-nearest rule's
    none (whatever its process does to the task's class); a task file whose describe_decisions
    raises scores as before without descriptors, in a worker that goes on; only declared, finite
    values come back."""
    from coevolve.sandbox import Sandbox

    task = get_task("tsp_construct")
    instances = task.instances(*task.train)
    expected = behaviour_of(task, list(task.decide(template_function(task), instances)), instances)
    assert expected["nearest"] == 1.0 and 0.0 < expected["crossings"] < 0.4
    (tmp_path / "raising.py").write_text(RAISING)
    (tmp_path / "partly.py").write_text(PARTLY)
    with Sandbox(workers=1, timeout_s=60) as sandbox:
        template = sandbox.evaluate(task.template, "tsp_construct")
        second = sandbox.evaluate(SECOND, "tsp_construct")
        raising = sandbox.evaluate(task.template, str(tmp_path / "raising.py"))
        partly = sandbox.evaluate(task.template, str(tmp_path / "partly.py"))
        again = sandbox.evaluate(task.template, "tsp_construct")
        test_set = sandbox.evaluate(task.template, "tsp_construct", "test", 20)
    assert test_set.ok and test_set.behaviour is None  # a rescore off the training set is not described
    assert template.ok and template.behaviour == expected
    assert second.ok and second.behaviour["nearest"] == 0.0 and second.behaviour["crossings"] > expected["crossings"]
    assert raising.ok and raising.objective == template.objective and raising.behaviour is None
    assert partly.ok and partly.behaviour == {"crossings": 0.25}
    assert again.ok and again.behaviour == expected
    for bad in ({"nearest": math.nan}, {"nearest": True}, {"nearest": "1"}, [1.0], {}, {1: 1.0}):
        assert EvalResult.from_dict({"failure": None, "objective": 1.0, "behaviour": bad}).behaviour is None
    assert EvalResult.from_dict({"failure": "invalid", "objective": None, "behaviour": expected}).behaviour is None


def test_a_malformed_declaration_is_one_line():
    class NoMethod:
        decision_descriptors = {"x": (0.0, 1.0)}

    class Backwards:
        decision_descriptors = {"x": (1.0, 0.0)}

        def describe_decisions(self, decisions, instances):
            return {"x": 0.5}

    with pytest.raises(ValueError, match="without a describe_decisions"):
        declared_behaviour(NoMethod())
    with pytest.raises(ValueError, match=r"decision_descriptors: expected \{name: \(low, high\)\} with finite low < high"):
        declared_behaviour(Backwards())
    assert behaviour_of(Backwards(), [], []) is None  # the worker never raises for it either

    class BadTSP(type(get_task("tsp_construct"))):
        decision_descriptors = {"nearest": (0.0, math.inf)}

    assert shape_problems(BadTSP()) == ["decision_descriptors: expected {name: (low, high)} with finite low < high, "
                                        "got 'nearest': (0.0, inf)"]  # what run, compare and check-task print
    assert declared_behaviour(get_task("kp_construct")) == {"best_ratio": (0.0, 1.0), "fill": (0.97, 1.0)}


class DecidedTask(ProfiledTask):
    """A fake task whose decisions (each instance's SCORE) are described by their fractional part;
    the description fails for a SCORE whose integer part is 3 modulo 7 (no descriptor then)."""

    decision_descriptors = {"fraction": (0.0, 1.0)}

    def describe_decisions(self, decisions, instances):
        if int(decisions[0]) % 7 == 3:
            raise ValueError("no fraction for this one")
        return {"fraction": float(np.mean([d % 1 for d in decisions]))}


def test_map_elites_grids_the_decision_descriptors_and_a_resume_reads_them_back(tmp_path):
    config = fake_config("map_elites", 29, seed=3, map_elites={"descriptors": ["fraction", "spread"], "bins": 4})
    full, _ = fake_run(tmp_path / "full", config, DecidedTask())
    lines = read_jsonl(tmp_path / "full" / "candidates.jsonl")
    by_id = {c["id"]: c for c in lines}
    described = [c for c in lines if "behaviour" in c]
    assert described and all(c["objective"] is not None for c in described)
    assert any(c["objective"] is not None and "behaviour" not in c for c in lines)  # the failed descriptions
    events = read_jsonl(tmp_path / "full" / "events.jsonl")
    steps = [e for e in events if e["type"] == "step"]
    grid = json.loads((tmp_path / "full" / "population" / f"gen_{len(steps) - 1:04d}.json").read_text())["grid"]
    assert len(grid["cells"]) >= 2 and grid["undescribed"] >= 1
    for cell in grid["cells"]:  # the grid's first coordinate is what the worker described
        assert cell["descriptors"][0] == by_id[cell["id"]]["behaviour"]["fraction"]
    # killed after 3 steps: the resumed run reads the descriptors from the logged results
    d = tmp_path / "k3"
    d.mkdir()
    (d / "config.toml").write_text((tmp_path / "full" / "config.toml").read_text())
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:4]))
    resumed, _ = fake_run(d, config, DecidedTask(), resume=True)
    assert resumed == full
    assert json.loads((d / "population" / f"gen_{len(steps) - 1:04d}.json").read_text())["grid"] == grid
    assert [c.get("behaviour") for c in read_jsonl(d / "candidates.jsonl")] == [c.get("behaviour") for c in lines]


def test_map_elites_knows_the_decision_descriptors_by_name():
    method = registry.make_method(fake_config("map_elites", 10, map_elites={"descriptors": ["fraction", "lines"]}))
    method.check_task(DecidedTask())
    tsp = registry.make_method(fake_config("map_elites", 10, map_elites={"descriptors": ["nearest", "crossings"]}))
    tsp.check_task(get_task("tsp_construct"))
    with pytest.raises(Exception, match=r"'fraction' is not a descriptor of task fake \(known: lines, .*spread, wins\)"):
        method.check_task(ProfiledTask())


def test_a_description_that_fails_on_the_template_is_refused_by_the_task_checker_first(tmp_path, capsys,
                                                                                       monkeypatch):
    from coevolve.cli import main
    from coevolve.engine import pool

    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: pytest.fail("a refused run started its engine"))
    (tmp_path / "failing.py").write_text("from tasks.tsp_construct import TSPConstruct\n\n\n"
                                         "class Failing(TSPConstruct):\n"
                                         "    def describe_decisions(self, decisions, instances):\n"
                                         "        raise ValueError('never')\n")
    path = _toml(tmp_path, "map_elites", "[map_elites]\ndescriptors = ['nearest']\n")
    path.write_text(path.read_text().replace('"tsp_construct"', f'"{tmp_path / "failing.py"}"'))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "describe_decisions(): with the template's decisions raised ValueError: never" in err, err
    assert "failing.py:6" in err and len(err.splitlines()) == 1 and not out.exists()


def test_an_unknown_descriptor_is_one_line_exit_2_before_any_engine(tmp_path, capsys, monkeypatch):
    from coevolve.cli import main
    from coevolve.engine import pool

    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: pytest.fail("a refused run started its engine"))
    path = _toml(tmp_path, "map_elites", "[map_elites]\ndescriptors = ['nearest', 'tangles']\n")
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "map_elites.descriptors: 'tangles' is not a descriptor of task tsp_construct" in err, err
    assert "nearest, crossings" in err and len(err.splitlines()) == 1 and not out.exists()


def test_check_task_says_the_descriptors_it_checked(capsys):
    """A task's decision descriptors are checked on the template (check-task) and, once they pass, named."""
    from coevolve.cli import main

    assert main(["check-task", "--no-sandbox", "tsp_construct"]) == 0
    out = capsys.readouterr().out
    assert "ok  descriptors: describe_decisions() gives a finite nearest, crossings for the template's " in out
    assert main(["check-task", "--no-sandbox", "tsp_aco"]) == 0
    assert "descriptors:" not in capsys.readouterr().out  # declares none
