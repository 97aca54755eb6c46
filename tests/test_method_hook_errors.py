"""A user's method whose hook raises (pick, admit, snapshot, ...) stops the run as one line naming the
method file, the hook, the line and the exception, with the steps before it kept; a built-in's
exception keeps its traceback (our bug). `coevolve report` on the unfinished run gives no advice
that `coevolve run --resume` refuses (walkthrough s55, finding 3). The fake engine, no vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search.loop import MethodError, SearchLoop
from coevolve.search.runconfig import RunConfig
from search_fakes import FakeEngine, FakeEvaluator, FakeTask

# a hill climber whose tournament draws more parents than its pool holds from step 2 on: the
# walkthrough's bug (rng.choice without min(k, len(pool)))
BROKEN = '''from typing import Iterator

from coevolve.search.methods import Method, StepSpec


class Broken(Method):
    label = "Broken"

    def steps(self) -> Iterator[StepSpec]:
        yield StepSpec("i1", 2, False, 0)
        generation = 1
        while True:
            yield StepSpec("m1", 2, self.perturbed, generation)
            generation += 1

    def _tournament(self, rng, pool, step):
        k = 2 if step >= 2 else 1
        return [pool[int(i)] for i in rng.choice(len(pool), size=k, replace=False)]

    def pick(self, operator, rng, step, slot):
        best = self.best()
        if operator == "i1" or best is None:
            return []
        return self._tournament(rng, [best], step)[:1]
'''
LINE = 1 + BROKEN.splitlines().index("        return [pool[int(i)] for i in rng.choice(len(pool), size=k, replace=False)]")


def write_broken(folder: Path) -> Path:
    path = folder / "broken_method.py"
    path.write_text(BROKEN)
    return path


def config_for(method: str, budget: int = 10) -> RunConfig:
    raw = {"run": {"method": method, "task": "fake", "budget": budget, "seed": 0}}
    return build_config(RunConfig, raw)


def loop_for(directory: Path, config: RunConfig) -> SearchLoop:
    store = RunStore.create(directory, dump_toml(as_dict(config)))
    return SearchLoop(config, store, FakeEngine(), FakeEvaluator(), FakeTask())


def test_a_method_files_pick_that_raises_is_one_line_naming_file_line_and_hook(tmp_path):
    broken = write_broken(tmp_path)
    with pytest.raises(MethodError) as raised:
        loop_for(tmp_path / "r", config_for(str(broken))).run()
    first, second = str(raised.value).splitlines()
    assert first.startswith(f"method file {broken}: pick() in step 2 raised ValueError: "), first
    assert f"(at {broken}:{LINE}, in _tournament)" in first, first
    assert "start a new run" in second and str(tmp_path / "r") in second, second
    # the steps before it are logged: the run directory keeps what was paid for
    steps = [e["step"] for e in read_jsonl(tmp_path / "r" / "events.jsonl") if e["type"] == "step"]
    assert steps == [0, 1]


def test_an_admit_that_raises_names_admit_and_a_built_in_keeps_its_traceback(tmp_path, monkeypatch):
    broken = write_broken(tmp_path)
    source = BROKEN + "\n    def admit(self, step, candidates, evaluations):\n        raise KeyError(step)\n"
    broken.write_text(source)
    with pytest.raises(MethodError, match=r"admit\(\) in step 0 raised KeyError: 0 \(at "):
        loop_for(tmp_path / "r", config_for(str(broken))).run()

    from coevolve.search.builtin.eoh import EohMethod

    def pick(*args):
        raise ValueError("ours")

    monkeypatch.setattr(EohMethod, "pick", pick)
    with pytest.raises(ValueError, match="ours"):
        loop_for(tmp_path / "b", config_for("eoh", budget=20)).run()


class ClosingFakeEngine(FakeEngine):
    """The fake engine where the CLI builds one (pool.build_engine)."""

    def close(self) -> None:
        pass


def test_coevolve_run_stops_on_it_in_two_lines_and_report_agrees_with_resume(tmp_path, monkeypatch, capsys):
    from coevolve.cli import main
    from coevolve.engine import pool

    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    broken = write_broken(tmp_path)
    config = tmp_path / "c.toml"
    config.write_text(f'[run]\nmethod = "{broken}"\ntask = "tsp_construct"\nbudget = 10\n[context]\nseed_template = true\n')
    run = tmp_path / "r"
    assert main(["run", str(config), "--out", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    first, second = err.strip().splitlines()[-2:]
    assert first.startswith(f"coevolve run: error: method file {broken}: pick() in step 2 raised ValueError"), err
    assert f"{broken}:{LINE}" in first and "start a new run" in second, err
    assert [e["step"] for e in RunStore(run).events() if e["type"] == "step"] == [0, 1]

    # the file fixed: --resume refuses the edited file, and the report does not tell the user to resume
    broken.write_text(BROKEN.replace("k = 2 if step >= 2 else 1", "k = 1"))
    assert main(["run", "--resume", str(run), "--no-progress"]) == 2
    refused = capsys.readouterr().err
    assert f"method file {broken} changed since the run started" in refused, refused
    assert main(["report", str(run)]) == 2
    said = capsys.readouterr().err
    assert "finish it with" not in said and "refuses to finish it" in said, said
    assert f"method file {broken} changed since the run started" in said, said


def test_an_unfinished_runs_report_says_resume_refuses_an_edited_method_file(tmp_path, monkeypatch, capsys):
    """A run killed after its summary was written, before its end event: the report's 'goes on' line
    is not said when --resume would refuse the run's edited method file."""
    from coevolve.cli import main
    from coevolve.engine import pool
    from coevolve.report.rendering import render_run

    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    method = write_broken(tmp_path)
    method.write_text(BROKEN.replace("k = 2 if step >= 2 else 1", "k = 1"))
    config = tmp_path / "c.toml"
    config.write_text(f'[run]\nmethod = "{method}"\ntask = "tsp_construct"\nbudget = 4\n[context]\nseed_template = true\n')
    run = tmp_path / "r"
    assert main(["run", str(config), "--out", str(run), "--no-progress"]) == 0
    # killed before its end event: a log that goes on past nothing, read as unfinished
    events = RunStore(run).events()
    assert events[-1]["type"] == "end"
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:-1]))
    method.write_text(method.read_text() + "\n# edited\n")
    capsys.readouterr()
    report = render_run(run)["report.md"].read_text()
    assert "refuses to go on" in report and "changed since the run started" in report, report
    assert "` goes on" not in report, report
