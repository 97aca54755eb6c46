"""benchmarks/agents_compare.py without an engine: every arm's run config builds through the same
path the script takes before it loads the engine (`agent_config`, the config `coevolve run` reads).
The script once stopped there with `agent.temperature is not a known field` after the sampling keys
moved to [sampling]; nothing ran it between."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
script = importlib.import_module("benchmarks.agents_compare")


@pytest.mark.parametrize("argv", [[], ["--size", "9", "--masked", "10", "--max-tokens", "64", "--skill-every", "2"],
                                  ["--distill", "posthoc", "--shaping", "0"]])
def test_every_arm_builds_its_run_config_from_the_scripts_arguments(argv):
    args = script.parse_args(argv)
    for method in script.METHODS:
        config = script.agent_config(args, method)
        assert config.run.method == method and config.run.budget == args.budget
        assert config.run.task == ("sudoku" if args.size == 4 else "sudoku9")
        assert config.sampling.temperature == 1.0 and config.sampling.max_tokens == args.max_tokens
        assert config.agent.skill_every == args.skill_every and config.agent.distill == args.distill
        assert config.agent.shaping == args.shaping and config.agent.history_turns == 1
        assert config.es.sigma == args.sigma and config.es.alpha == args.alpha
    assert script.parse_args([]).distill == "online"  # --skill-every takes effect by default
