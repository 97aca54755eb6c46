"""`coevolve eval --run`'s arms as `coevolve compare` scores them (seed skills in every arm's prompt), each
trained arm paired with base measure by measure, and the one check of a checkpoint (engine/local)."""

from __future__ import annotations

import json

import pytest

from coevolve.agents.evaluate import ArmResult
from coevolve.agents.rollout import Trajectory
from coevolve.cli import main
from coevolve.stats import Interval

SEED_RULE, DISTILLED_RULE = "Pinned rule of the seed skill.", "Rule the run distilled."


class Tracked:
    """An engine for `coevolve eval` whose weights are the run's once its history is replayed (the
    checksum the history recorded), playing every turn with one move and recording, per request, whether
    the weights were tuned and which skill rules its system prompt held."""

    dtype = "bfloat16"
    asked: set[tuple[bool, tuple[str, ...]]] = set()

    def __init__(self, model=None, **kwargs):
        self.tuned = False
        Tracked.asked = set()

    def apply_update(self, seeds, coefficients, alpha):
        self.tuned = True

    def checksum(self):
        return "the run's"

    def reset(self):
        self.tuned = False

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        from coevolve.engine.base import Completion

        for c in conversations:
            Tracked.asked.add((self.tuned, tuple(r for r in (SEED_RULE, DISTILLED_RULE) if r in c[0]["content"])))
        return [Completion(text="set 1 1 1") for _ in conversations]

    def close(self):
        pass


def test_every_arm_of_a_run_shows_its_seed_skills_as_compare_scores_it(tmp_path, capsys, monkeypatch):
    """An esopt+trace2skill run with a seed skill: compare shows the seed skills to every arm (base and
    esopt too) and the distilled ones to the skill arms after them; eval shows each arm the same, says
    so in its header and its --out, and pairs each trained arm with base per measure."""
    import coevolve.engine.vllm_engine as vllm_engine
    from coevolve.agents.es_agent import seed_skills_event
    from coevolve.agents.skills import write_skill
    from coevolve.base import noise

    monkeypatch.setattr(vllm_engine, "Engine", Tracked)
    seed = write_skill(tmp_path / "sudoku-mine", "Mine", f"# m\n\n## Moves\n- {SEED_RULE}")
    run = tmp_path / "run"
    write_skill(run / "skills" / "distilled", "Distilled", f"# d\n\n## Moves\n- {DISTILLED_RULE}")
    (run / "config.toml").write_text('[run]\nmethod = "esopt+trace2skill"\ntask = "sudoku"\n\n[task]\nmasked = 1\n\n'
                                     f'[skills]\npaths = ["{seed.path}"]\n')
    (run / "events.jsonl").write_text(json.dumps(seed_skills_event([str(seed.path)], [seed])) + "\n")
    (run / "history.jsonl").write_text(json.dumps({
        "generation": 0, "seeds": [1, 2], "coefficients": [1.0, -1.0], "alpha": 0.001, "checksum": "the run's",
        "noise": "full", "noise_version": noise.NOISE_VERSION, "dtype": "bfloat16"}) + "\n")
    out = tmp_path / "eval.json"
    assert main(["eval", "--task", "sudoku", "--run", str(run), "--problems", "2", "--k", "1",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # (tuned weights?, the skill rules in the prompt, in order): base, esopt, skill, both
    assert Tracked.asked == {(False, (SEED_RULE,)), (True, (SEED_RULE,)),
                             (False, (SEED_RULE, DISTILLED_RULE)), (True, (SEED_RULE, DISTILLED_RULE))}
    assert ("skills in prompt order: base: sudoku-mine (seed); esopt: sudoku-mine (seed); skill: sudoku-mine "
            "(seed), distilled (distilled); both: sudoku-mine (seed), distilled (distilled)\n") in printed
    written = json.loads(out.read_text())
    assert written["arm_skills"] == {"base": ["sudoku-mine"], "esopt": ["sudoku-mine"],
                                     "skill": ["sudoku-mine", "distilled"], "both": ["sudoku-mine", "distilled"]}
    assert written["skills"] == [{"name": "sudoku-mine", "origin": "seed"}, {"name": "distilled", "origin": "distilled"}]
    # every arm played the same move: nothing changed on any measure, said once
    assert "no arm differs from the base on any problem (2 problems, every measure +0.000)" in printed
    assert "esopt vs base" not in printed
    # each arm's line as it ends reads as progress, numbered in the order played (the tuned arms first: it
    # printed `  esopt: ...`, `  both: ...`, `  base: ...`, `  skill: ...` before a table in another order)
    lines = printed.splitlines()
    played = [line.split()[1] for line in lines if line.startswith("  [") and " played: Mean@1 " in line]
    assert "arms in playing order (the ES-tuned first): esopt, both, base, skill" in lines, printed
    assert [line.split("]")[0] for line in lines if line.startswith("  [")] == ["  [1/4", "  [2/4", "  [3/4", "  [4/4"]
    assert played == ["esopt", "both", "base", "skill"], printed
    assert [line.split()[1] for line in lines if line.startswith("| ") and "Mean@" not in line] == \
        ["base", "esopt", "skill", "both"]  # the table: its own order, after the progress lines


def arm(name: str, played: dict[str, list[tuple[float, float]]]) -> ArmResult:
    """An arm's result from problem -> its attempts as (reward, well-formed rate), k = 2."""
    trajectories = [Trajectory(task="x", case_id=case, messages=[], actions=[], observations=[""], reward=reward,
                               metrics={"well_formed": formed})
                    for case, attempts in played.items() for reward, formed in attempts]
    return ArmResult(name, 2, len(played), Interval(1, 0, 0, 0), Interval(1, 0, 0, 0), None, trajectories)


def test_an_option_that_changes_the_runs_own_is_said(tmp_path, capsys, monkeypatch):
    """--run with --option overriding the run's own task option scores another kind of problem than it
    trained on: allowed, and said in a note (before: only the header's options dict showed it)."""
    import coevolve.engine.vllm_engine as vllm_engine
    from coevolve.base import noise

    monkeypatch.setattr(vllm_engine, "Engine", Tracked)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text('[run]\nmethod = "esopt"\ntask = "sudoku"\n\n[task]\nmasked = 1\n')
    (run / "events.jsonl").write_text("")
    (run / "history.jsonl").write_text(json.dumps({
        "generation": 0, "seeds": [1, 2], "coefficients": [1.0, -1.0], "alpha": 0.001, "checksum": "the run's",
        "noise": "full", "noise_version": noise.NOISE_VERSION, "dtype": "bfloat16"}) + "\n")
    for given, said in (("masked=2", True), ("masked=1", False)):
        assert main(["eval", "--task", "sudoku", "--run", str(run), "--option", given, "--problems", "2",
                     "--k", "1", "--arms", "base"]) == 0
        printed = capsys.readouterr().out
        note = ("note: --option masked=2 differs from the run's masked=1: the held-out problems are another kind "
                "than it trained on")
        assert (note in printed) == said, printed


def test_each_trained_arm_is_paired_with_base_on_every_measure_of_the_table():
    """Graded rewards: Mean@2, Pass@2 (reward 1), Max@2 and the well-formed rate each move on their own,
    and each is said in the run table's words (change_line)."""
    from coevolve.commands.agent_eval import against_base

    base = arm("base", {f"p{i}": [(0.0, 0.5), (0.5, 0.5)] for i in range(6)})
    skill = arm("skill", {**{f"p{i}": [(0.25, 1.0), (1.0, 1.0)] for i in range(3)},
                          **{f"p{i}": [(0.75, 0.5), (0.75, 0.5)] for i in range(3, 6)}})
    assert against_base([base, skill]) == [
        "skill vs base: +0.438: 6 of 6 problems better, 0 worse; told apart (sign test p = 0.031)",
        "skill vs base (Pass@2): +0.500: 3 of 6 problems better, 0 worse; cannot be told apart (sign test p = 0.25)",
        "skill vs base (Max@2): +0.375: 6 of 6 problems better, 0 worse; told apart (sign test p = 0.031)",
        "skill vs base (well-formed): +0.250: 3 of 6 problems better, 0 worse; cannot be told apart "
        "(sign test p = 0.25)"]


def test_a_checkpoint_is_checked_one_way_and_named_by_who_gave_it(tmp_path):
    """engine/local.require_model is the one check of a [model] path: a config's key by default
    (`coevolve run`, comparisons), the flag or run file that gave it when `coevolve eval` asks."""
    from coevolve.base.errors import UsageError
    from coevolve.base.sections import ModelSection
    from coevolve.engine.local import require_model

    gone = ModelSection.model_construct(path=str(tmp_path / "gone"), max_len=2048)
    with pytest.raises(UsageError) as config:
        require_model(gone)
    assert str(config.value) == f"config error: model.path: model directory {str(tmp_path / 'gone')!r} does not exist"
    with pytest.raises(UsageError) as flag:
        require_model(gone, said="--model")
    assert str(flag.value) == f"--model: model directory {str(tmp_path / 'gone')!r} does not exist"


class Measuring(Tracked):
    """Tracked, also keeping the most messages any one turn's prompt held."""

    longest = 0

    def __init__(self, model=None, **kwargs):
        super().__init__(model, **kwargs)
        Measuring.longest = 0

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        Measuring.longest = max([Measuring.longest, *(len(c) for c in conversations)])
        return super().chat(conversations, sampling, seeds, constraints)


def test_held_out_prompts_keep_the_history_the_run_kept(tmp_path, capsys, monkeypatch):
    """A run that kept one turn of history in its prompts ([agent] history_turns = 1: a 9x9 episode's
    whole history outgrows the engine's context) is scored the same way by `coevolve eval --run`, and
    `--history-turns` picks another; without it every turn would resend the whole episode."""
    import coevolve.engine.vllm_engine as vllm_engine
    from coevolve.base import noise

    monkeypatch.setattr(vllm_engine, "Engine", Measuring)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text('[run]\nmethod = "esopt"\ntask = "sudoku"\n\n[task]\nmasked = 4\n\n'
                                     '[agent]\nhistory_turns = 1\n')
    (run / "events.jsonl").write_text("")
    (run / "history.jsonl").write_text(json.dumps({
        "generation": 0, "seeds": [1, 2], "coefficients": [1.0, -1.0], "alpha": 0.001, "checksum": "the run's",
        "noise": "full", "noise_version": noise.NOISE_VERSION, "dtype": "bfloat16"}) + "\n")
    longest = {}
    for flags in ([], ["--history-turns", "3"]):
        out = tmp_path / "eval.json"
        assert main(["eval", "--task", "sudoku", "--run", str(run), "--arms", "base", "--problems", "2", "--k", "1",
                     "--out", str(out), *flags]) == 0
        header = capsys.readouterr().out.splitlines()[0]
        longest[tuple(flags)] = Measuring.longest
        assert json.loads(out.read_text())["history_turns"] == (3 if flags else 1)
        assert header.endswith("the last 3 turns in each prompt" if flags else
                               "the last 1 turn in each prompt (the run's [agent] history_turns)"), header
    # system + first observation + one (action, observation) pair; three pairs with --history-turns 3
    assert longest == {(): 4, ("--history-turns", "3"): 8}
    assert main(["eval", "--task", "sudoku", "--run", str(run), "--history-turns", "-1"]) == 2
    assert capsys.readouterr().err == "coevolve eval: error: --history-turns must be >= 0 (got -1)\n"
