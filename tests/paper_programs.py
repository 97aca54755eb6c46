"""The paper's published heuristics (tests/data/paper_programs/: the curated
EoH+AgenticESOpt1000 programs of zz1358m/Agentic-ESOpt), loaded as test data."""

from __future__ import annotations

import re
from pathlib import Path

PROGRAMS = Path(__file__).parent / "data" / "paper_programs"


def load(path: Path, name: str):
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace[name]


def recorded_train(path: Path) -> float:
    """The train objective in the file's header, un-negated (the reference minimises)."""
    return -float(re.search(r"^# train_objective: (\S+)$", path.read_text(), re.M).group(1))
