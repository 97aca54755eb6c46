"""What a user's task returns, held to tasks/base.py's contract where the framework reads it (s54
walkthrough): reference() that raises or returns a bare float passed check-task, then lost the run in its
last step (no summary.json, no best.py, a resume that fails again), gave `coevolve eval` a traceback and
would have crashed a comparison's test scoring after every run had finished; score() returning a numeric
string passed check-task, and returning "good", None or an array was blamed on a float() no line of the
user's did; a nan from one instance of instance_scores() was blamed on score(); `compare --plan` passed a
task file edited since the comparison started, which the comparison refuses; a renamed template function
named neither file nor line. Light: the tasks are tests/test_task_code_exits.py's little task file, the runs
ask the stub endpoint (tests/endpoint_stub.py), the sandbox is the real one; no engine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import endpoint_stub
import pytest
import test_task_code_exits
from endpoint_stub import MODEL, completion
from test_task_code_exits import COMPARE, heuristic, one_line

from coevolve import compare
from coevolve.cli import main
from coevolve.dashboard import reader
from coevolve.plan import load_compare_config
from coevolve.sandbox import Sandbox
from tasks.loader import clear_cache, module_name
from tasks.registry import heuristic_task

# their fixtures, found by pytest here: the stub endpoint, no API key, task files resolved afresh
stub, no_key = endpoint_stub.stub, endpoint_stub.no_key
_fresh_task_lookups = test_task_code_exits._fresh_task_lookups

PROGRAM = "def pick(values):\n    return len(values) - 1\n"  # a valid candidate, unlike the template


def task_with(folder: Path, *methods: str) -> Path:
    """The little task file with `methods` appended to its class (a method defined again replaces the first),
    numpy and tasks.base.Reference imported."""
    path = heuristic(folder)
    text = "import numpy as np\nfrom tasks.base import Reference\n" + path.read_text()
    path.write_text(text + "".join("\n" + method for method in methods))
    return path


def line_of(path: Path, text: str) -> int:
    """The last line holding `text`: an appended method is the one the class keeps."""
    return max(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def method(signature: str, *body: str) -> str:
    return f"    def {signature}:\n" + "".join(f"        {line}\n" for line in body)


REFERENCES = {  # case: (reference()'s body, the line's text after "reference(...)", the line it names)
    "raises": (['raise ValueError("no reference for this size")'],
               " raised ValueError: no reference for this size (at {path}:{line}); return None for a set without "
               "one", 'raise ValueError'),
    "float": (["return 12.5"],
              " at {path}:{line} returned 12.5 (a float), expected tasks.base.Reference(value, kind, source) or None "
              "(return None for a set without one)", "def reference"),
}


def reference_task(folder: Path, case: str) -> Path:
    return task_with(folder, method("reference(self, split, size)", *REFERENCES[case][0]))


def reference_line(path: Path, case: str, split: str = "train") -> str:
    _, said, text = REFERENCES[case]
    return f"reference({split!r}, 5)" + said.format(path=path, line=line_of(path, text))


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- reference(): check-task fails on it ----------------------------------------------------------------
@pytest.mark.parametrize("case", sorted(REFERENCES))
def test_check_task_fails_on_a_reference_that_raises_or_returns_a_float(tmp_path, capsys, case):
    """Before: `pick: passed every check`, and the run died as it ended."""
    path = reference_task(tmp_path, case)
    code, out, err = cli(capsys, "check-task", str(path), "--no-sandbox")
    assert code == 2 and "passed every check" not in out, (out, err)
    assert one_line(err) == f"coevolve check-task: error: {reference_line(path, case)}"


def test_check_task_asks_every_splits_smallest_set(tmp_path, capsys):
    """A reference() that has a value for the training set only: the test set a comparison scores is named."""
    path = task_with(tmp_path, method("reference(self, split, size)",
                                      'if split == "test":', '    raise KeyError(split)', "return None"))
    code, _, err = cli(capsys, "check-task", str(path), "--no-sandbox")
    assert code == 2 and one_line(err) == (f"coevolve check-task: error: reference('test', 5) raised KeyError: "
                                           f"'test' (at {path}:{line_of(path, 'raise KeyError')}); return None "
                                           "for a set without one")


def test_check_task_passes_a_reference_or_none_and_says_which(tmp_path, capsys):
    path = task_with(tmp_path, method("reference(self, split, size)",
                            'return Reference(9, "bound", "largest value") if split == "train" else None'))
    code, out, err = cli(capsys, "check-task", str(path), "--no-sandbox")
    assert code == 0, err
    assert "ok  reference: a Reference or None (train 5: 9 (bound, largest value); test 5: none)" in out, out


def test_a_reference_of_a_bad_kind_or_value_is_named(tmp_path):
    from tasks.check import checked_reference

    path = task_with(tmp_path, method("reference(self, split, size)", 'return Reference(float("nan"), "exact", "x") '
                            'if split == "train" else Reference(3.0, "optimal", "x")'))
    task = heuristic_task(str(path))
    where = f"{path}:{line_of(path, 'def reference')}"
    assert checked_reference(task, "train", 5) == (None, f"reference('train', 5) at {where} returned Reference("
                                                         "value=nan, kind='exact', source='x'): its value is nan, "
                                                         "expected a finite number")
    assert checked_reference(task, "test", 5)[1].endswith(
        "its kind is 'optimal', expected one of 'exact', 'best-known', 'bound'")


# -- reference(): a run, eval, the comparison and the dashboard go on without it ---------------------------
def run_toml(folder: Path, base_url: str) -> Path:
    path = folder / "run.toml"
    path.write_text(f'[run]\nmethod = "sample"\ntask = "task.py"\nbudget = 2\nseed = 0\n'
                    f'[sample]\nbatch = 2\npopulation = 2\n[context]\nconstrain = false\n'
                    f'[endpoint]\nbase_url = "{base_url}"\nmodel = "{MODEL}"\n')
    return path


@pytest.mark.parametrize("case", sorted(REFERENCES))
def test_a_run_whose_reference_gives_none_writes_its_summary_and_best(stub, tmp_path, monkeypatch, capsys, case):
    """Before: every candidate scored, then a traceback from the run's last step, no summary.json, no best.py
    (a raise); a bare float passed as the reference the eval and the comparison then crashed on."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(endpoint_stub.REPLIES, "good", (200, "application/json", json.dumps(completion(
        {"role": "assistant", "content": f"```python\n{PROGRAM}```"}))))
    path = reference_task(tmp_path, case)
    code, out, err = cli(capsys, "run", str(run_toml(tmp_path, stub.base_url)), "--out", "out", "--no-progress")
    assert code == 0 and "Traceback" not in err, err
    line = reference_line(path, case)
    assert f"reference          - (none usable: {line})" in out.splitlines(), out  # the run table says why
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["train"]["reference"] is None and summary["train"]["reference_problem"] == line
    assert summary["best"]["objective"] > 0 and summary["best"]["gap"] is None
    assert (tmp_path / "out" / "best.py").read_text().strip().endswith("return len(values) - 1")
    row = reader.HeuristicRun(tmp_path / "out").row()  # the dashboard's: why the run has no gap
    assert row["gap"] is None and row["reference_unavailable"] == line


@pytest.mark.parametrize("case", sorted(REFERENCES))
def test_eval_scores_without_a_reference_that_gives_none(tmp_path, monkeypatch, capsys, case):
    """Before: a traceback (the raise; a float: `'float' object has no attribute 'value'`) under the header."""
    monkeypatch.chdir(tmp_path)
    path = reference_task(tmp_path, case)
    (tmp_path / "best.py").write_text(PROGRAM)
    code, out, err = cli(capsys, "eval", "best.py", "--task", str(path), "--split", "train")
    assert code == 0, (out, err)
    assert one_line(err) == f"warning: {reference_line(path, case)}; no reference or gap for size 5"
    row = next(line for line in out.splitlines() if line.split()[:1] == ["5"])
    assert row.split()[2:4] == ["-", "-"], out
    assert "reference:" not in out


def test_the_comparisons_test_scores_stand_without_a_reference_that_raises(tmp_path, capsys):
    """Before: the ValueError ended the comparison's scoring, after every run had finished."""
    path = reference_task(tmp_path, "raises")
    with Sandbox(workers=1, timeout_s=60) as sandbox:
        scores = compare.score_files([(PROGRAM, str(path), "train", 5), (PROGRAM, str(path), "train", 5)], 0, sandbox)
    assert [(s.objective is not None, s.reference, s.gap) for s in scores] == [(True, None, None)] * 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"warning: {reference_line(path, 'raises')}; the test scores on train 5 have no "
                                "reference or gap"], err  # once per set


def test_the_dashboard_says_why_a_task_has_no_reference(tmp_path, monkeypatch):
    """Before: a reference() that raised was no reference without a word."""
    monkeypatch.setattr(reader, "_REFERENCES", {})
    path = reference_task(tmp_path, "raises")
    assert reader.reference_of(str(path), "train", 5) == (None, reference_line(path, "raises"))


# -- score() and instance_scores(): a real number, named where it is not ------------------------------
SCORE_RETURNS = {  # what score() returns: the line check-task and the sandbox say (None: accepted)
    "'good'": "returned 'good' (a str), expected a real number (an int or a float, numpy's too; not a bool)",
    "'12.5'": "returned '12.5' (a str), expected a real number (an int or a float, numpy's too; not a bool)",
    "None": "returned None (a NoneType), expected a real number (an int or a float, numpy's too; not a bool)",
    "np.array([1.0])": "returned array([1.]) (a ndarray), expected a real number (an int or a float, numpy's too; "
                       "not a bool)",
    "True": "returned True (a bool), expected a real number (an int or a float, numpy's too; not a bool)",
    "np.float64(2.5)": None, "np.int64(3)": None, "3": None,
}


def score_task(folder: Path, returned: str) -> Path:
    return task_with(folder, method("score(self, decisions, instances)", f"return {returned}"))


@pytest.mark.parametrize("returned", sorted(SCORE_RETURNS))
def test_check_task_names_what_score_returned(tmp_path, capsys, returned):
    """Before: a numeric string passed; "good", None or an array were `score(): ... raised TypeError: float()
    argument must be ...`, naming no line (score() never raised); True passed as 1.0."""
    path = score_task(tmp_path, returned)
    code, out, err = cli(capsys, "check-task", str(path), "--no-sandbox")
    said = SCORE_RETURNS[returned]
    if said is None:
        assert code == 0, err
        return
    assert code == 2, (out, err)
    assert one_line(err) == (f"coevolve check-task: error: score() at {path}:{line_of(path, 'def score')} {said} "
                             "(with the template's decisions on train 5)")


def test_the_sandbox_names_what_score_returned(tmp_path):
    """A candidate's decisions scored to a value that is no number: its `invalid` verdict names score()'s
    line and what came back, as check-task does. Before: `score() raised ValueError: could not convert
    string to float: 'good'`."""
    path = score_task(tmp_path, "'good'")
    with Sandbox(workers=1, timeout_s=60) as sandbox:
        result = sandbox.evaluate(PROGRAM, heuristic_task(str(path)), "train", 5)
    assert result.failure is not None and result.failure.value == "invalid", result
    assert result.message == (f"unusable decisions: score() at {path}:{line_of(path, 'def score')} "
                              f"{SCORE_RETURNS[repr('good')]}")


NAN_AT_2 = (method("instance_scores(self, decisions, instances)",
                   "values = [float(v[i]) for i, v in zip(decisions, instances)]",
                   "values[2] = float('nan')", "return values"),
            method("score(self, decisions, instances)",
                   "return sum(self.instance_scores(decisions, instances)) / len(instances)"))


def test_a_nan_from_one_instance_names_instance_scores_and_the_index(tmp_path, capsys):
    """Before: check-task said `score(): the template's objective is nan`, the sandbox `objective is nan`."""
    path = task_with(tmp_path, *NAN_AT_2)
    said = (f"instance_scores() at {path}:{line_of(path, 'def instance_scores')} gave nan at index 2 (of 4 "
            "instances), expected a finite number")
    code, _, err = cli(capsys, "check-task", str(path), "--no-sandbox")
    assert code == 2 and one_line(err) == (f"coevolve check-task: error: {said} (with the template's decisions "
                                           "on train 5)")
    declared = task_with(tmp_path, *NAN_AT_2, "    score_is_instance_mean = True\n")
    clear_cache()
    sys.modules.pop(module_name(declared), None)  # the file rewritten: imported afresh
    with Sandbox(workers=1, timeout_s=60) as sandbox:
        result = sandbox.evaluate(PROGRAM, heuristic_task(str(declared)), "train", 5)
    assert result.failure is not None and result.message == said, result


# -- compare --plan: an edited task file, as the comparison refuses it --------------------------------
def test_compare_plan_refuses_a_task_file_edited_since_the_comparison_started(stub, tmp_path, monkeypatch, capsys):
    """Before: `--plan` printed the plan (exit 0) while the comparison refused the edited file."""
    monkeypatch.chdir(tmp_path)
    path = heuristic(tmp_path)
    model = '[model]\npath = "/nonexistent/coevolve-test-model"\n'
    assert model in COMPARE  # asked of the stub instead: no engine, no checkpoint
    (tmp_path / "compare.toml").write_text(COMPARE.replace(model, f'[endpoint]\nbase_url = "{stub.base_url}"\n'
                                                                  f'model = "{MODEL}"\n'))
    compare.begin(load_compare_config("compare.toml", "cmp"), tmp_path / "cmp")  # tasks.json, as a comparison's
    code, out, err = cli(capsys, "compare", "compare.toml", "--out", "cmp", "--plan")
    assert code == 0, (out, err)
    path.write_text(path.read_text() + "# edited\n")
    clear_cache()
    for plan in (["--plan"], []):
        code, out, err = cli(capsys, "compare", "compare.toml", "--out", "cmp", *plan)
        assert code == 2 and not out, (plan, out, err)
        assert one_line(err).startswith(f"coevolve compare: error: task file {path} changed since the comparison "
                                        "started"), (plan, err)


# -- a renamed template function: the file and the line ----------------------------------------------
@pytest.mark.parametrize("quoted", ["escaped", "triple"])
def test_a_renamed_template_function_names_the_file_and_line(tmp_path, capsys, quoted):
    path = heuristic(tmp_path)
    if quoted == "escaped":
        text = path.read_text().replace('template = "def pick(', 'template = "def choose(')
    else:
        text = path.read_text().replace('template = "def pick(values):\\n    return 0\\n"',
                                        'template = """import math\n\n\ndef choose(values):\n    return 0\n"""')
    assert text != path.read_text()
    path.write_text(text)
    code, _, err = cli(capsys, "check-task", str(path), "--no-sandbox")
    assert code == 2 and one_line(err) == (
        "coevolve check-task: error: template: does not define function_name 'pick' at top level (it defines: "
        f"choose); its def is at {path}:{line_of(path, 'def choose(')}: name it pick, or set function_name = "
        "'choose'")


def test_an_error_raised_inside_numpy_names_the_users_line_not_numpys(tmp_path):
    """numpy's random generator is compiled: its frame names numpy/random/_generator.pyx, a path relative to
    its package, which counted as the user's file (a method hook's error named numpy's line; s55 method
    walkthrough). The user's own file is the one named."""
    import importlib.util

    from tasks.loader import user_frame

    path = tmp_path / "mine.py"
    path.write_text("import numpy\n\n\ndef pick(pool):\n    return numpy.random.default_rng(0).choice(len(pool), size=5, "
                    "replace=False)\n")
    spec = importlib.util.spec_from_file_location("mine_s55", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(ValueError) as caught:
        module.pick([1, 2])
    assert user_frame(caught.value).endswith(f"(at {path}:5)"), user_frame(caught.value)
