"""An agent run's end table names the seed skills it played with ([skills], pinned by its seed_skills
event), as the heuristic table names its starting skill (walkthrough s51, finding 9)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from coevolve.agents.es_agent import seed_skills_event
from coevolve.agents.skills import Skill
from coevolve.base.records import read_summary
from coevolve.report.rendering import agent_table

OLD_RUN = Path(__file__).parent / "data" / "old_runs" / "agent_esopt"


def test_the_table_has_a_seed_skills_row_from_the_runs_log(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    summary = read_summary(run / "summary.json")
    assert "seed skills" not in agent_table(summary, run)  # a run without [skills]: no row
    skill = Skill(name="sudoku-mine", description="Rules for sudoku", body="## Moves\n- one\n- two\n")
    with open(run / "events.jsonl", "a") as log:
        log.write(json.dumps(seed_skills_event(["/skills/sudoku-mine"], [skill])) + "\n")
    table = agent_table(summary, run)
    assert "seed skills" in table and "sudoku-mine (2 rules) from /skills/sudoku-mine" in table
