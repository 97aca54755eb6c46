"""`coevolve run` of an agent config on the real engine, killed with SIGKILL at
a random point, resumed with `--resume`, compared with an uninterrupted run:
the same summary (weights checksum included), every round logged once. Kept
tiny (4x4 sudoku with one masked cell, 8-token actions) for 2 CPU cores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import kill_and_resume
from coevolve.runstore import RunStore, read_jsonl

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """
[run]
method = "esopt"
task = "sudoku"
budget = 12
seed = 4

[task]
masked = 1

[agent]
population = 2
batch = 2
eval_cases = 2
eval_every = 2
history_turns = 1
shaping = 0.5

[sampling]
temperature = 1.0
max_tokens = 8

[es]
sigma = 0.01
sigma_end = 0.005
alpha = 0.002
"""


def _without_out(summary: dict) -> dict:
    summary["config"]["run"].pop("out")
    return summary


@pytest.mark.engine
@pytest.mark.timeout(1800)
def test_agent_run_sigkill_then_resume_gives_the_uninterrupted_summary(tmp_path, engine):
    path = tmp_path / "agent.toml"
    path.write_text(CONFIG)

    # killed at a random point after the engine is up and the first round is logged
    run = kill_and_resume(path, tmp_path, "round", 1.5, engine=engine)  # uninterrupted in this process
    output, expected, rounds = run.full_output, run.expected, run.events
    assert "episode" in output and "reward=" in output and "solved=" in output and "sigma=" in output  # the bar
    assert rounds == 3 and expected["es"]["updates"] == 3
    got = json.loads((tmp_path / "killed" / "summary.json").read_text())
    assert _without_out(got) == _without_out(expected)
    assert "weights checksum" in run.resumed_output and str(tmp_path / "killed") in run.resumed_output
    logged = [e["round"] for e in RunStore(tmp_path / "killed").iter_events("round")]
    assert logged == list(range(rounds))  # every round logged once: no episode counted twice
    history = read_jsonl(tmp_path / "killed" / "history.jsonl")
    assert [h["generation"] for h in history] == list(range(rounds))

    report = subprocess.run([sys.executable, "-m", "coevolve.cli", "report", str(tmp_path / "killed")], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "killed" / "report.md").read_text()
    assert "held-out mean reward" in text and "esopt" in text
