"""Agent comparisons on the comparison stack (`coevolve compare` with
`[compare] kind = "agent"`): the config, the report rebuilt from the files
alone, and on the real engine a comparison killed with SIGKILL mid-training
(a process of its own), rerun in this process, and re-rendered by `coevolve
report` in a fresh process, with the same table as an uninterrupted
comparison and the killed training run resumed to the uninterrupted one's
summary (the agent runs' SIGKILL test: resume goes through the same
`execute_agent` as `coevolve run --resume`). Kept tiny:
examples/agents_compare.toml shrunk to base vs esopt, one seed, 8 training
episodes, 3 held-out problems x 2 attempts."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_environment, cli_in_process, sigkill_after
from coevolve.base.config import as_dict, build_config, dump_toml, read_toml
from coevolve.base.durable import atomic_write_json
from coevolve.base.errors import UsageError
from coevolve.plan import (COMPARE_CONFIG, HELDOUT_SCORES, AgentCompareConfig, RunSpec, agent_runs, base_directory,
                           comparison_run, load_compare_config)
from coevolve.report import render
from coevolve.runstore import RunStore, read_jsonl
from test_agents_es import FakeEngine as AgentFakeEngine

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "agents_compare.toml"
# the example shrunk: base vs esopt, one seed, 2 rounds of 2 members x 2 puzzles, 3 held-out puzzles x 2 attempts
SHRINK = {"compare": {"methods": ["base", "esopt"], "seeds": [0], "budgets": [8]},
          "eval": {"problems": 3, "k": 2, "max_tokens": 8},
          "agent": {"population": 2, "batch": 2, "eval_cases": 2},
          "sampling": {"max_tokens": 8}}


def tiny_raw() -> dict:
    raw = read_toml(EXAMPLE)
    for section, values in SHRINK.items():
        raw[section].update(values)
    return raw


def test_the_example_loads_as_an_agent_comparison():
    config = load_compare_config(EXAMPLE)
    assert isinstance(config, AgentCompareConfig) and config.compare.kind == "agent"
    assert config.compare.methods == ["base", "esopt", "trace2skill", "esopt+trace2skill"] and config.eval.k == 4
    runs = agent_runs(config)  # base needs no run
    assert {s.method for s in runs} == {"esopt", "trace2skill", "esopt+trace2skill"} and len(runs) == 6
    assert config.task == {"sudoku": {"masked": 1}} and config.sampling.temperature == 1.0
    # `coevolve run PRESET` runs its first training arm
    assert comparison_run(read_toml(EXAMPLE))["run"] == {
        "task": "sudoku", "method": "esopt", "budget": 128, "seed": 0}


@pytest.mark.parametrize("change, message", [
    ({"compare": {"methods": ["base", "magic"]}}, "compare.methods"),
    ({"compare": {"tasks": ["tsp_construct"]}}, "compare.tasks[0]"),
    ({"compare": {"bogus": 1}}, "compare.bogus"),
    ({"compare": {"budget": 8}}, "compare.budget"),
    ({"eval": {"k": 0}}, "eval.k"),
    ({"eval": {"problem": 2}}, "eval.problem is not a known field"),  # named as the TOML names it
    ({"task": {"sudoku9": {"masked": 5}}}, "task.sudoku9"),
    ({"task": {"sudoku": {"masked": 99}}}, "task.sudoku.masked must be in 1..15 (got 99)"),
    ({"compare": {"budgets": [3]}}, "compare.budgets must pay"),  # less than one round of population x batch
])
def test_bad_agent_comparisons_fail_in_one_line_naming_the_field(tmp_path, change, message):
    raw = tiny_raw()
    for section, values in change.items():
        raw.setdefault(section, {}).update(values)
    path = tmp_path / "bad.toml"
    path.write_text(dump_toml(raw))
    with pytest.raises(UsageError, match=re.escape(message)):
        load_compare_config(path)
    done = subprocess.run([sys.executable, "-m", "coevolve.cli", "compare", str(path), "--out", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr and not (tmp_path / "o").exists()


def _fake_scores(root: Path, config: AgentCompareConfig, attempts: dict[tuple[str, int], list]) -> None:
    """heldout.json files as run_agent_comparison writes them (the report reads nothing else of an arm)."""
    for (method, seed), tries in attempts.items():
        spec = RunSpec("sudoku", method, 8, seed)
        directory = base_directory(root, "sudoku", seed) if method == "base" else spec.directory(root)
        atomic_write_json(directory / HELDOUT_SCORES, {"attempts": tries, "well_formed": 1.0})


def test_report_rebuilds_the_table_and_verdicts_from_the_files(tmp_path):
    config = load_compare_config(_tiny(tmp_path))
    config.compare.seeds = [0, 1]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / COMPARE_CONFIG).write_text(dump_toml(as_dict(config)))
    same = [[1, 0], [0, 0], [1, 1]]
    _fake_scores(tmp_path / "c", config, {("base", 0): same, ("base", 1): same, ("esopt", 0): same})
    written = render(tmp_path / "c")
    text = (tmp_path / "c" / "report.md").read_text()
    # the base row pools both seeds (6 problem draws), esopt has one seed scored so far
    assert "| base | 0.500 [" in text and "| 0.500, 0.500 | 1.00 |" in text and "Arms scored: 3 of 4" in text
    # paired per problem on the seed both scored (seed 0's three problems): none changed
    assert ("esopt vs base: cannot be told apart (Mean@2 0.500 vs 0.500; paired per problem, 0 of 3 better, 0 worse, "
            "sign test p = 1)") in text
    assert written["agents.png"].stat().st_size > 1000
    results = json.loads((tmp_path / "c" / "results.json").read_text())
    assert [r["method"] for r in results["rows"]] == ["base", "esopt"] and results["rows"][0]["mean"]["n"] == 6

    solved, failed = [[1, 1]] * 12, [[0, 0]] * 12  # clearly apart
    _fake_scores(tmp_path / "c", config, {("base", 0): failed, ("base", 1): failed,
                                          ("esopt", 0): solved, ("esopt", 1): solved})
    render(tmp_path / "c")
    text = (tmp_path / "c" / "report.md").read_text()
    # 24 problems (12 per seed), all better: 2 / 2^24
    assert ("esopt vs base: Mean@2 higher (1.000 vs 0.000; paired per problem, 24 of 24 better, 0 worse, sign test "
            "p = 1.2e-07)") in text
    # every problem solved: the exact binomial bound, not a zero-width interval; no ES update was flat
    assert "| esopt | 1.000 [0.858, 1.000] | 1.000 [0.858, 1.000] | 1.000, 1.000 | 1.00 | - |" in text

    config.compare.budgets = [8, 16]  # the checkpoint is one arm, shown in every budget's table
    (tmp_path / "c" / COMPARE_CONFIG).write_text(dump_toml(as_dict(config)))
    render(tmp_path / "c")
    text = (tmp_path / "c" / "report.md").read_text()
    assert text.count("| base | 0.000 [") == 2 and text.count("| sudoku | base |") == 2  # two seeds, once each
    assert "Arms scored: 4 of 6" in text and "budget 16: esopt vs base" not in text  # no esopt scored at 16

    # pairing is what tells these apart: base solves half the problems, esopt the same half and half of each
    # other; the pooled intervals overlap (problems vary more than arms), but 12 of 24 problems got better, none
    # worse: 2 / 2^12
    base, esopt = [[1, 1]] * 6 + [[0, 0]] * 6, [[1, 1]] * 6 + [[1, 0]] * 6
    _fake_scores(tmp_path / "c", config, {("base", 0): base, ("base", 1): base, ("esopt", 0): esopt,
                                          ("esopt", 1): esopt})
    render(tmp_path / "c")
    rows = {r["method"]: r["mean"] for r in json.loads((tmp_path / "c" / "results.json").read_text())["rows"]}
    assert rows["esopt"]["low"] < rows["base"]["high"]  # the intervals overlap
    assert ("esopt vs base: Mean@2 higher (0.750 vs 0.500; paired per problem, 12 of 24 better, 0 worse, sign test "
            "p = 0.00049)") in (tmp_path / "c" / "report.md").read_text()


def _tiny(tmp_path: Path) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(dump_toml(tiny_raw()))
    return path


def _compare(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "coevolve.cli", "compare", *args], cwd=ROOT, env=child_environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


@pytest.mark.engine
@pytest.mark.timeout(1200)
def test_agent_comparison_killed_resumed_and_rerendered_equals_an_uninterrupted_one(tmp_path, engine):
    from coevolve.commands.compare import compare_and_report

    config_path = _tiny(tmp_path)
    # uninterrupted, in this process on the session engine (the CLI builds the same engine)
    full = compare_and_report(load_compare_config(config_path, str(tmp_path / "full")), tmp_path / "full",
                              engine=engine, log=lambda line: None)
    run_dir = RunSpec("sudoku", "esopt", 8, 0).directory(full)
    assert len(list(RunStore(run_dir).iter_events("round"))) == 2

    killed = tmp_path / "killed"
    first = _compare(str(config_path), "--out", str(killed))
    sigkill_after(first, RunSpec("sudoku", "esopt", 8, 0).directory(killed) / "events.jsonl", "round", 1,
                  random.Random().uniform(0, 1.0))
    assert (base_directory(killed, "sudoku", 0) / HELDOUT_SCORES).exists()  # the base arm was done before the kill
    assert not (killed / "report.md").exists()
    output = cli_in_process(engine, "compare", str(config_path), "--out", str(killed))  # rerun here
    assert "sudoku base seed 0: scored earlier, skipped" in output  # a finished arm is not rerun
    assert "sudoku esopt budget 8 seed 0: resuming" in output
    spec = RunSpec("sudoku", "esopt", 8, 0)
    arm, full_arm = spec.directory(killed), spec.directory(full)
    assert [e["round"] for e in RunStore(arm).iter_events("round")] == [0, 1]  # every round logged once
    assert [h["generation"] for h in read_jsonl(arm / "history.jsonl")] == [0, 1]  # every update applied once
    # the resumed arm is the uninterrupted one: rewards, updates, held-out rounds and the weights' checksum
    resumed, uninterrupted = (json.loads((d / "summary.json").read_text()) for d in (arm, full_arm))
    for summary in (resumed, uninterrupted):
        summary["config"]["run"].pop("out")
    assert resumed == uninterrupted and resumed["checksum"] and resumed["es"]["updates"] == 2
    expected = json.loads((full / "results.json").read_text())
    assert json.loads((killed / "results.json").read_text()) == expected
    assert expected["rows"][1]["method"] == "esopt" and expected["rows"][1]["mean"]["n"] == 3

    # re-rendered from the files alone, in a fresh process (no engine)
    for name in ("report.md", "results.json", "agents.png"):
        os.remove(killed / name)
    done = subprocess.run([sys.executable, "-m", "coevolve.cli", "report", str(killed)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (killed / "report.md").read_text() == (full / "report.md").read_text()
    assert "Mean@2 [95% CI]" in (killed / "report.md").read_text() and (killed / "agents.png").stat().st_size > 1000


class _Killed(Exception):
    pass


class Resettable(AgentFakeEngine):
    """A comparison's shared fake engine (reset between arms); `crash_at`: the perturbed chat call that
    raises _Killed (a member's turn), a crash mid-training."""

    crash_at: int | None = None

    def reset(self):
        self.updates = []

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        if self.perturbation is not None and self.crash_at is not None:
            self.crash_at -= 1
            if self.crash_at == 0:
                raise _Killed()
        return super().chat(conversations, sampling, seeds, constraints)


def test_the_comparison_flow_resumes_after_a_crash_with_a_fake_engine(tmp_path):
    """The control flow fast (real ESOpt, ledger, rollouts, files; a fake
    engine): a crash mid-training leaves the base arm scored and the run
    partial; rerunning scores nothing twice and gives the uninterrupted table."""
    from coevolve.compare import run_comparison

    config = load_compare_config(_tiny(tmp_path))
    run_comparison(config, tmp_path / "full", engine=Resettable(), log=lambda line: None)
    render(tmp_path / "full")

    crashing = Resettable()
    crashing.crash_at = 3  # in round 1 (round 0 played its 2 members): base scored, training under way
    with pytest.raises(_Killed):
        run_comparison(config, tmp_path / "again", engine=crashing, log=lambda line: None)
    run_dir = RunSpec("sudoku", "esopt", 8, 0).directory(tmp_path / "again")
    assert (base_directory(tmp_path / "again", "sudoku", 0) / HELDOUT_SCORES).exists()
    assert (run_dir / "events.jsonl").exists() and not (run_dir / "summary.json").exists()
    lines: list[str] = []
    run_comparison(config, tmp_path / "again", engine=Resettable(), log=lines.append)
    assert any("base seed 0: scored earlier, skipped" in line for line in lines)
    assert any("esopt budget 8 seed 0: resuming" in line for line in lines)
    render(tmp_path / "again")
    assert (json.loads((tmp_path / "again" / "results.json").read_text())
            == json.loads((tmp_path / "full" / "results.json").read_text()))
    assert (tmp_path / "again" / "report.md").read_text() == (tmp_path / "full" / "report.md").read_text()
    lines.clear()
    run_comparison(config, tmp_path / "again", engine=Resettable(), log=lines.append)  # all done: nothing reruns
    assert all("earlier, skipped" in line for line in lines) and len(lines) == 3


def test_a_seed_skill_that_does_not_read_is_refused_before_anything_is_written(tmp_path):
    """[skills] paths are read when an arm is scored; a comparison checks them first: one line, exit 2, no
    directory (it once left compare.toml behind)."""
    raw = tiny_raw()
    raw["skills"] = {"paths": [str(tmp_path / "nowhere")]}
    path = tmp_path / "bad.toml"
    path.write_text(dump_toml(raw))
    done = subprocess.run([sys.executable, "-m", "coevolve.cli", "compare", str(path), "--out", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "skills.paths[0] is not a valid skill" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_seed_skills_count_from_the_comparisons_folder_as_a_runs_do(tmp_path, monkeypatch):
    """[skills] paths of an agent comparison and of its named arms count from its TOML's folder (as `coevolve
    run`'s do), whatever the working directory; `coevolve run PRESET` runs its first arm with the same."""
    folder = tmp_path / "conf"
    for name in ("hints", "arm-hints"):
        (folder / name).mkdir(parents=True)
        (folder / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: mine\n---\n## Moves\n- Think.\n")
    raw = tiny_raw()
    raw["skills"] = {"paths": ["hints"]}
    raw["compare"]["methods"] = ["base", "mine"]
    raw["compare"]["arms"] = {"mine": {"method": "trace2skill", "skills": {"paths": ["arm-hints"]}}}
    path = folder / "cmp.toml"
    path.write_text(dump_toml(raw))
    monkeypatch.chdir(tmp_path)  # not the TOML's folder
    config = load_compare_config(path)
    assert config.skills.paths == [str((folder / "hints").resolve())]
    assert config.compare.arms["mine"]["skills"]["paths"] == [str((folder / "arm-hints").resolve())]
    run = comparison_run(read_toml(path), base=folder)
    assert run["skills"]["paths"] == [str((folder / "arm-hints").resolve())]


def test_a_run_of_an_older_comparison_with_relative_seed_skills_is_the_same_run(tmp_path, monkeypatch):
    """An agent comparison's runs recorded [skills] paths as written before they counted from the TOML's folder
    (relative, from the working directory): rerun from where it ran, the same folders are the same settings;
    other folders are refused as other settings."""
    from coevolve.agents.runconfig import AgentRunConfig
    from coevolve.compare import existing_config

    monkeypatch.chdir(tmp_path)
    raw = {"run": {"task": "sudoku", "method": "trace2skill", "budget": 64, "seed": 0}, "skills": {"paths": ["skills/x"]}}
    old = tmp_path / "runs" / "old"
    old.mkdir(parents=True)
    (old / "config.toml").write_text(dump_toml(raw))
    now = build_config(AgentRunConfig, {**raw, "skills": {"paths": [str(tmp_path / "skills" / "x")]}})
    assert existing_config(now, old) is not None
    elsewhere = build_config(AgentRunConfig, {**raw, "skills": {"paths": [str(tmp_path / "other" / "x")]}})
    with pytest.raises(UsageError, match="holds a run under other settings: skills.paths"):
        existing_config(elsewhere, old)


def test_a_comparison_recording_its_task_file_relative_renders_from_its_copy(tmp_path, monkeypatch):
    """Agent comparisons written before s50 recorded a file task as given, relative to where `coevolve
    compare` ran (`../game/env.py`): `coevolve report` refused them from anywhere else ("task file not
    found") though tasks.json held the copy. The copy is read, as for a heuristic comparison."""
    from coevolve.cli import main
    from tasks.loader import record_tasks

    monkeypatch.chdir(tmp_path)
    assert main(["new-task", "game", "--agent", "--dir", "work"]) == 0
    monkeypatch.chdir(tmp_path / "work")  # where the comparison ran
    spec = "game/env.py"
    raw = tiny_raw()
    raw["compare"]["tasks"] = [spec]
    raw.pop("task", None)
    root = tmp_path / "work" / "cmp"
    root.mkdir()
    (root / COMPARE_CONFIG).write_text(dump_toml(raw))  # the spec as given, relative to work/
    record_tasks(root, [spec])
    moved = tmp_path / "moved"
    (tmp_path / "work" / "cmp").rename(moved)
    (tmp_path / "work" / "game" / "env.py").unlink()  # the original gone too
    monkeypatch.chdir(tmp_path)
    written = render(moved)
    report = (moved / "report.md").read_text()
    assert "Arms scored: 0 of 2" in report and written["report.md"].exists()
    # titled by the task's name, as its runs' folder is; its file said once, under the heading
    assert "Tasks: game. " in report and "\n## game\n\nTask: `game/env.py`\n" in report, report
    assert report.count("game/env.py") == 1, report
    # the copy it read is said by the command that prints notes (`coevolve report`); rendered here in
    # process, the note is pending: taken here, so no later test's command prints it
    from tasks.loader import copy_notes

    notes = copy_notes()
    assert len(notes) == 1 and notes[0].startswith("task file game/env.py is gone; using the run's copy ("), notes


def test_held_out_prompts_keep_the_history_the_comparisons_agent_section_keeps(tmp_path):
    """[agent] history_turns cuts the held-out prompts of every arm as it cuts the training ones (a 9x9
    episode's whole history outgrows the engine's context), and is part of what a score was made under."""
    from coevolve.compare import run_comparison

    class Measuring(AgentFakeEngine):
        longest = 0

        def reset(self):
            self.updates = []

        def chat(self, conversations, sampling, seeds=None, constraints=None):
            Measuring.longest = max([Measuring.longest, *(len(c) for c in conversations)])
            return super().chat(conversations, sampling, seeds, constraints)

    raw = tiny_raw()
    raw["compare"]["methods"] = ["base"]
    raw["task"] = {"sudoku": {"masked": 4}}  # the fake engine solves a cell a turn: four turns an episode
    path = tmp_path / "agents.toml"
    for turns, longest in ((None, 2 + 2 * 3), (1, 2 + 2)):  # system + first observation + pairs shown
        raw["agent"].pop("history_turns", None)  # the example keeps one turn
        if turns is not None:
            raw["agent"]["history_turns"] = turns
        path.write_text(dump_toml(raw))
        Measuring.longest = 0
        run_comparison(load_compare_config(path), tmp_path / f"cmp-{turns}", engine=Measuring(),
                       log=lambda line: None)
        assert Measuring.longest == longest
        scores = json.loads((base_directory(tmp_path / f"cmp-{turns}", "sudoku", 0) / HELDOUT_SCORES).read_text())
        assert scores["settings"].get("history_turns") == turns
