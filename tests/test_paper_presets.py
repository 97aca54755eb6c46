"""examples/paper/: the Table 5 presets plan what the paper runs, and
`coevolve compare` refuses +ESOpt arms that are not structurally matched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coevolve.base.errors import UsageError
from coevolve.base.config import build_config
from coevolve.plan import CompareConfig, arm_plan, check_structure, load_compare_config, structural_differences

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted((ROOT / "examples" / "paper").glob("*.toml"))

# The paper's numbers (zz1358m/Agentic-ESOpt, scripts/ahd/run_four_method_ahd.sh and
# run_eoh_ahd.py): EoH population 10, 25 generations, k = T / 500 - 1; ES directions
# per m1/m2 update = 10 k; Sample batches of 20, one ES update per batch.
PAPER = {
    1000: {"eoh_k": 1, "eoh_m": 10, "eoh_updates": 50, "sample_steps": 50},
    2000: {"eoh_k": 3, "eoh_m": 30, "eoh_updates": 50, "sample_steps": 100},
}


def test_there_is_a_preset_per_table5_task_and_one_for_all():
    names = {p.stem for p in PRESETS}
    assert names == {"table5", "tsp", "kp", "asp"}
    tasks = {p.stem: load_compare_config(p).compare.tasks for p in PRESETS}
    assert tasks["table5"] == ["tsp_construct", "kp_construct", "asp"]


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_plans_match_the_paper(path):
    config = load_compare_config(path)
    c = config.compare
    assert c.methods == ["sample", "sample+esopt", "eoh", "eoh+esopt"] and c.seeds == [0, 1, 2]
    assert c.budgets == [1000, 2000]
    assert (config.sampling.temperature, config.sampling.top_p, config.sampling.max_tokens) == (1.0, 0.98, 768)
    assert config.sampling.stop == ()  # the reference stops at no string
    assert config.es.ddof == 0 and config.reward.kind == "paper" and config.es.alpha == 5e-4
    # the reference's σ: cosine 1e-3 -> 0, one step per EoH generation; its free parse re-asks; its ASP seed
    assert (config.es.sigma, config.es.sigma_end, config.es.sigma_steps) == (1e-3, 0.0, "generation")
    assert config.accounting.parse_retries == 4 and config.start.program == "reference"
    assert config.eoh.parents_with_replacement and config.eoh.dedup_decimals == 5 and not config.eoh.show_scores
    # the reference's free decoding: no failures shown, no forced signature, clones scored (issue 25), and
    # a population that starts empty (no seeded template)
    assert not (config.context.failures or config.context.constrain or config.context.fingerprint
                or config.context.seed_template or config.context.feedback)
    for task in c.tasks:
        for budget in c.budgets:
            paper = PAPER[budget]
            sample = arm_plan(config, task, "sample", budget)
            assert [(s["operator"], s["count"]) for s in sample["steps"]] == [("i1", 20)] * paper["sample_steps"]
            assert sample["evaluations"] == budget and sample["es_updates"] == 0
            ses = arm_plan(config, task, "sample+esopt", budget)
            assert ses["es_updates"] == paper["sample_steps"] and ses["directions"] == [20]
            assert ses["evaluations"] == budget
            for method in ("eoh", "eoh+esopt"):
                plan = arm_plan(config, task, method, budget)
                assert plan["m_multiplier"] == paper["eoh_k"]
                assert plan["outside_budget"] == 10 and plan["evaluations"] == budget + 10
                steps = plan["steps"]
                assert (steps[0]["operator"], steps[0]["count"]) == ("i1", 10)
                assert plan["generations"] == 25
                one = [(s["operator"], s["count"]) for s in steps if s["generation"] == 1]
                assert one == [("e1", 10), ("e2", 10), ("m1", paper["eoh_m"]), ("m2", paper["eoh_m"])]
                assert sum(s["count"] for s in steps[1:]) == budget
            esopt = arm_plan(config, task, "eoh+esopt", budget)
            assert esopt["es_updates"] == paper["eoh_updates"] and esopt["directions"] == [paper["eoh_m"]]
            assert all(s["perturbed"] == (s["operator"] in ("m1", "m2")) for s in esopt["steps"])
    assert structural_differences(config) == []


def test_mismatched_arms_are_refused_naming_the_difference():
    raw = {"compare": {"methods": ["eoh", "eoh+esopt"], "budgets": [60]},
           "eoh": {"population": 4, "offspring": 5}, "es": {"population": 4}}
    config = build_config(CompareConfig, raw)
    differences = structural_differences(config)
    assert len(differences) == 1
    assert "step 3" in differences[0] and "eoh asks 5 m1 candidates, eoh+esopt 4 m1" in differences[0]
    assert "es.population 4" in differences[0]
    with pytest.raises(UsageError, match="not structurally matched"):
        check_structure(config)
    config.compare.allow_unmatched = True
    assert check_structure(config) == differences
    # following the plan (es.population = 0) matches by construction
    raw["es"] = {"population": 0}
    assert structural_differences(build_config(CompareConfig, raw)) == []


def test_cli_plan_prints_and_refuses_without_running(tmp_path):
    exe = [sys.executable, "-m", "coevolve"]
    done = subprocess.run([*exe, "compare", str(ROOT / "examples/paper/tsp.toml"), "--plan"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "generations 1-25 (25x): e1 10, e2 10, m1 30 (ES, 30 directions), m2 30 (ES, 30 directions)" in done.stdout
    assert "total: 2010 evaluations = T 2000 + 10 initial" in done.stdout
    assert "batches 1-50 (50x): i1 20 (ES, 20 directions)" in done.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('[compare]\nmethods = ["sample", "sample+esopt"]\nbudgets = [40]\nseeds = [0]\n'
                   '[sample]\nbatch = 10\n[es]\npopulation = 4\n')
    done = subprocess.run([*exe, "compare", str(bad), "--out", str(tmp_path / "out")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "sample asks 10 i1 candidates, sample+esopt 4 i1" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
    # a comparison preset runs one of its arms: the first listed unless flags pick another
    done = subprocess.run([*exe, "run", str(ROOT / "examples/paper/tsp.toml"), "--plan", "--method", "eoh+esopt"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "arm eoh+esopt on tsp_construct, budget 1000, seed 0" in done.stderr
    assert "m1 10 (ES, 10 directions)" in done.stdout and "total: 1010 evaluations = T 1000 + 10 initial" in done.stdout
    done = subprocess.run([*exe, "compare", str(ROOT / "examples/paper/table5.toml"), "--plan"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert ("tsp_construct: test20 (1000 instances), test50 (1000 instances)\n"
            "  kp_construct: test50 (1000 instances, capacity 12.5), test100 (1000 instances, capacity 25)\n"
            "  asp: test (15, 10), test (21, 15)") in done.stdout
    done = subprocess.run([*exe, "run", str(ROOT / "examples/tsp_eoh_esopt.toml"), "--plan", "--budget", "25"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    # 6 + 6 + 6 + 6 (m1, one update) + 1 (m2 cut to one member: base weights, no update)
    assert done.returncode == 0 and "ES updates: 1" in done.stdout and "total: 25 evaluations = T 25" in done.stdout


AGENT_PRESETS = sorted((ROOT / "examples" / "paper" / "agents").glob("*.toml"))


@pytest.mark.parametrize("path", AGENT_PRESETS, ids=lambda p: p.stem)
def test_agent_presets_carry_the_papers_settings(path):
    """App. D: Sudoku G = 32 on the same 32 puzzles, 100 generations, σ 1e-3 -> 2.5e-4,
    T 0.7 / top-p 0.8 / top-k 20 / presence 1.5, 64 tokens per turn; math G = 16 x 16
    problems, 25 generations, σ 1e-3 -> 5e-4, T 1 / top-p 1 / top-k 40 / presence 2,
    50 turns of 4096 tokens; α 5e-4 and z-scores for both; Trace2Skill for math:
    successes excluded, teacher at T 1, three distillation seeds, after training."""
    from coevolve.commands.run import load_run_config

    config = load_run_config(str(path), {})
    s, es, agent = config.sampling, config.es, config.agent
    assert (es.alpha, es.normalise, es.schedule, es.sigma) == (5e-4, "zscore", "cosine", 1e-3)
    assert es.ddof == 0  # the reference's math and Sudoku runs (population std, epsilon 1e-8)
    if config.run.task == "sudoku9":
        assert (agent.population, agent.batch, es.generations, es.sigma_end) == (32, 32, 100, 2.5e-4)
        assert (s.temperature, s.top_p, s.top_k, s.presence_penalty, s.max_tokens) == (0.7, 0.8, 20, 1.5, 64)
        assert agent.eval_temperature == 0.7 and config.run.budget == 100 * 32 * 32
        # the paper's turn prompt: the puzzle, the last move's feedback, the board; the whole history of 30
        # turns outgrows even 8192 tokens (benchmarks/results/s53/sudoku9_context.md)
        assert agent.history_turns == 1
    else:
        assert config.run.task == "react_math" and config.task["turns"] == 50
        assert (agent.population, agent.batch, es.generations, es.sigma_end) == (16, 16, 25, 5e-4)
        assert (s.temperature, s.top_p, s.top_k, s.presence_penalty, s.max_tokens) == (1.0, 1.0, 40, 2.0, 4096)
        assert agent.eval_temperature == 1.0 and config.run.budget == 25 * 16 * 16
    if config.uses_skills:
        assert (agent.distill, agent.distill_seeds, agent.skill_successes, agent.teacher_temperature) == \
            ("posthoc", 3, 0, 1.0)


def test_evaluation_samples_as_the_paper_does_per_task():
    from coevolve.agents.evaluate import eval_sampling
    from tasks.registry import agent_task

    sudoku = eval_sampling(64, agent_task("sudoku9", {}))
    assert (sudoku.temperature, sudoku.top_p, sudoku.top_k, sudoku.presence_penalty) == (0.7, 0.8, 20, 1.5)
    math_ = eval_sampling(96, agent_task("react_math", {}))
    assert (math_.temperature, math_.top_p, math_.top_k, math_.max_tokens) == (1.0, 1.0, 40, 96)


def test_the_plan_counts_test_sets_without_drawing_them(monkeypatch):
    """--plan lists Table 5's test sets from their draw plans: no instance is drawn."""
    from coevolve.plan import test_set_lines
    from tasks.base import SeededSets

    def refuse(self, split, size):
        raise AssertionError(f"--plan drew {split}{size}")

    monkeypatch.setattr(SeededSets, "get", refuse)
    config = build_config(CompareConfig, {"compare": {"tasks": ["tsp_construct", "kp_construct", "cvrp_aco"]},
                                          "test": {"limit": 100}})
    assert test_set_lines(config) == [
        "tsp_construct: test20 (100 instances), test50 (100 instances)",
        "kp_construct: test50 (100 instances, capacity 12.5), test100 (100 instances, capacity 25)",
        "cvrp_aco: test20 (64 instances), test50 (64 instances), test100 (64 instances)"]
