"""`coevolve eval` for agent tasks: the held-out protocol's inputs are checked
before any engine starts or episode runs (the engine path: test_agents_engine.py)."""

from __future__ import annotations

import json
import re

import pytest

from coevolve.agents.evaluate import attempts_of, check_heldout
from coevolve.agents.rollout import Trajectory
from coevolve.cli import main
from tasks.sudoku import Sudoku


def eval_args(*extra: str) -> list[str]:
    return ["eval", "--task", "sudoku", "--option", "masked=1", "--problems", "4", *extra]


def test_bad_inputs_fail_before_any_episode(tmp_path, capsys, monkeypatch):
    import coevolve.engine.vllm_engine as vllm_engine

    def no_engine(*args, **kwargs):
        raise AssertionError("an engine started although the inputs were bad")

    monkeypatch.setattr(vllm_engine, "Engine", no_engine)
    cases = [
        (eval_args("--run", str(tmp_path / "missing")), "no such run directory"),
        (eval_args("--run", str(tmp_path)), "neither ES weights"),
        (eval_args("--arms", "base,magic"), "arms must be some of base, esopt, skill, both"),
        (eval_args("--arms", "esopt"), "need ES-tuned weights"),
        (eval_args("--arms", "skill"), "need a skill"),
        (eval_args("--history", str(tmp_path / "nope.jsonl"), "--arms", "esopt"), "no such ES history file"),
        (eval_args("--option", "bogus=1"), "task.bogus is not an option of sudoku"),
        (eval_args("--option", "masked=99"), "masked must be in 1..15"),
        # values read as TOML values, checked against the constructor's defaults (masked = 4)
        (eval_args("--option", "masked=abc"), "task.masked must be an integer, as its default 4 is (got 'abc')"),
        (eval_args("--option", "masked=2.5"), "task.masked must be an integer, as its default 4 is (got 2.5)"),
        (eval_args("--option", "masked"), "expected KEY=VALUE"),
        (["eval", "prog.py", "--task", "sudoku"], "agent task: eval takes no program file"),
        (["eval", "--task", "tsp_construct"], "give the Python file"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv
    # an invalid SKILL.md in the run directory names the file
    bad = tmp_path / "run" / "skills" / "distilled"
    bad.mkdir(parents=True)
    (bad / "SKILL.md").write_text("no front matter\n")
    assert main(eval_args("--run", str(tmp_path / "run"))) == 2
    assert "SKILL.md: must start with a '---' front matter line" in capsys.readouterr().err
    # a problems file whose held-out split overlaps training
    problems = tmp_path / "p.jsonl"
    problems.write_text(json.dumps({"id": "a", "question": "What is 2 + 2?", "answer": "4", "split": "train"}) + "\n"
                        + json.dumps({"id": "b", "question": "what is 2 + 2?", "answer": "4", "split": "eval"}) + "\n")
    assert main(["eval", "--task", "react_math", "--option", f"problems_file={problems}", "--problems", "1"]) == 2
    assert "overlaps training" in capsys.readouterr().err


def test_check_heldout_compares_content_not_ids():
    task = Sudoku(masked=2)
    heldout = task.cases("eval", 5)
    check_heldout(task, heldout, task.cases("train", 50))
    renamed = [type(c)(id=f"train-copy-{i}", puzzle=c.puzzle, solution=c.solution) for i, c in enumerate(heldout[:2])]
    with pytest.raises(ValueError, match="overlaps training in 2 of 5 problems"):
        check_heldout(task, heldout, renamed)


def test_attempts_are_grouped_per_problem():
    def t(reward):
        return Trajectory(task="x", case_id="c", messages=[], actions=[], observations=[""], reward=reward)

    # k = 2 rounds over 3 problems: round a holds problems 0, 1, 2 in order
    trajectories = [t(1), t(0), t(0), t(1), t(1), t(0)]
    assert attempts_of(trajectories, 3, 2) == [[1, 1], [0, 1], [0, 0]]
    with pytest.raises(ValueError, match="expected 3 x 3"):
        attempts_of(trajectories, 3, 3)


def test_eval_takes_the_task_settings_of_the_run(tmp_path, capsys, monkeypatch):
    import coevolve.engine.vllm_engine as vllm_engine

    monkeypatch.setattr(vllm_engine, "Engine", lambda *a, **k: (_ for _ in ()).throw(AssertionError("engine")))
    run = tmp_path / "run"
    (run / "skills").mkdir(parents=True)
    (run / "config.toml").write_text('[run]\nmethod = "trace2skill"\ntask = "sudoku9"\n\n[task]\nmasked = 5\n')
    assert main(["eval", "--task", "sudoku", "--run", str(run)]) == 2
    assert "is a run on task 'sudoku9', not 'sudoku'" in capsys.readouterr().err


def test_eval_of_an_agent_run_takes_no_seeds_from_its_config(tmp_path, capsys, monkeypatch):
    """`--run DIR` alone finds the agent task in DIR's config.toml; its [sandbox] seeds are a heuristic
    run's setting, so they are not taken (the run goes on to its own checks), and --seeds is refused."""
    import coevolve.engine.vllm_engine as vllm_engine

    monkeypatch.setattr(vllm_engine, "Engine", lambda *a, **k: (_ for _ in ()).throw(AssertionError("engine")))
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text('[run]\nmethod = "trace2skill"\ntask = "sudoku"\n\n[sandbox]\nseeds = 3\n')
    assert main(["eval", "--run", str(run)]) == 2
    assert "holds neither ES weights" in capsys.readouterr().err
    assert main(["eval", "--run", str(run), "--seeds", "2"]) == 2
    assert "--seeds is for heuristic tasks" in capsys.readouterr().err


def test_each_trained_arm_is_paired_with_base_per_problem():
    from coevolve.agents.evaluate import ArmResult
    from coevolve.commands.agent_eval import against_base
    from coevolve.stats import Interval

    def arm(name, rewards):  # rewards: problem -> its attempts
        played = [Trajectory(task="x", case_id=case, messages=[], actions=[], observations=[""], reward=r)
                  for case, attempts in rewards.items() for r in attempts]
        return ArmResult(name, 2, len(rewards), Interval(1, 0, 0, 0), Interval(1, 0, 0, 0), None, played)

    base = arm("base", {f"p{i}": [0.0, 0.0] for i in range(7)})
    skill = arm("skill", {**{f"p{i}": [1.0, 1.0] for i in range(6)}, "p6": [0.0, 0.0]})
    worse = arm("esopt", {**{f"p{i}": [0.0, 0.0] for i in range(6)}, "p6": [0.0, 0.0]})
    assert against_base([base, skill, worse]) == [  # (Max@2 is Pass@2 with 0/1 rewards: not said twice)
        "skill vs base: +0.857: 6 of 7 problems better, 0 worse; told apart (sign test p = 0.031)",
        "skill vs base (Pass@2): +0.857: 6 of 7 problems better, 0 worse; told apart (sign test p = 0.031)",
        "esopt vs base: +0.000: 0 of 7 problems better, 0 worse; cannot be told apart (sign test p = 1)",
        "esopt vs base (Pass@2): +0.000: 0 of 7 problems better, 0 worse; cannot be told apart (sign test p = 1)"]
    assert against_base([skill, worse]) == []  # no base arm: nothing to pair with


def skill_run(tmp_path, monkeypatch, model_table: str) -> tuple:
    """A trace2skill run directory on sudoku with `model_table` as its [model], and the engine replaced by
    one that records how it was asked for and stops the command (a UsageError) before any episode."""
    import coevolve.engine.vllm_engine as vllm_engine
    from coevolve.agents.skills import write_skill
    from coevolve.base.errors import UsageError

    asked: list[tuple] = []

    def engine(model, **kwargs):
        asked.append((model, kwargs))
        raise UsageError("stop here: the engine was asked for")

    monkeypatch.setattr(vllm_engine, "Engine", engine)
    run = tmp_path / "run"
    write_skill(run / "skills" / "sudoku-moves", "Moves", "# m\n\n## Moves\n- Fill the only empty cell.")
    (run / "config.toml").write_text('[run]\nmethod = "trace2skill"\ntask = "sudoku"\n\n[task]\nmasked = 1\n\n'
                                     f"[model]\n{model_table}")
    return run, asked


def test_eval_of_a_run_builds_the_engine_with_the_runs_context(tmp_path, capsys, monkeypatch):
    """A run trained with `[model] max_len = 4096` had episodes that long: its held-out evaluation gets
    the same context."""
    run, asked = skill_run(tmp_path, monkeypatch, "max_len = 4096\n")
    assert main(["eval", "--task", "sudoku", "--run", str(run), "--problems", "2", "--k", "1"]) == 2
    assert asked[0][1].get("max_model_len") == 4096 and "stop here" in capsys.readouterr().err


def checkpoint(path):
    """A folder that passes for an HF checkpoint (config.json, a weights file with a whole safetensors header,
    of no tensors): what `coevolve eval` checks of --model before it builds the engine (engine/local.require_model)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(len(b"{}").to_bytes(8, "little") + b"{}")
    return str(path)


def test_eval_of_a_run_loads_the_runs_own_checkpoint(tmp_path, capsys, monkeypatch):
    """Its ES history replays only onto the weights it was recorded on: the run's [model] path is the
    default, said in one line; --model picks another."""
    tuned, other = checkpoint(tmp_path / "checkpoints" / "tuned"), checkpoint(tmp_path / "x")
    run, asked = skill_run(tmp_path, monkeypatch, f'path = "{tuned}"\n')
    assert main(["eval", "--task", "sudoku", "--run", str(run), "--problems", "2", "--k", "1"]) == 2
    assert f"model: {tuned} (the run's [model] path; --model picks another)" in capsys.readouterr().out
    assert main(["eval", "--task", "sudoku", "--run", str(run), "--problems", "2", "--k", "1", "--model", other]) == 2
    assert [model for model, _ in asked] == [tuned, other]


def test_a_checkpoint_other_than_the_runs_is_found_before_any_episode(tmp_path, capsys, monkeypatch):
    """The tuned arms go first: the history's checksum after its first generation is checked against the
    engine given before an episode is played (here no episode may start), with what to check."""
    import coevolve.engine.vllm_engine as vllm_engine
    from coevolve.base import noise

    class OtherWeights:
        dtype, resets = "bfloat16", 0

        def __init__(self, model, **kwargs):
            pass

        def apply_update(self, seeds, coefficients, alpha):
            pass

        def checksum(self):
            return "not the run's"

        def chat(self, *args, **kwargs):
            raise AssertionError("an episode was played")

        def reset(self):
            OtherWeights.resets += 1

        def close(self):
            pass

    monkeypatch.setattr(vllm_engine, "Engine", OtherWeights)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text('[run]\nmethod = "esopt"\ntask = "sudoku"\n\n[task]\nmasked = 1\n')
    (run / "history.jsonl").write_text(json.dumps({
        "generation": 0, "seeds": [1, 2], "coefficients": [1.0, -1.0], "alpha": 0.001, "checksum": "the run's",
        "noise": "full", "noise_version": noise.NOISE_VERSION, "dtype": "bfloat16"}) + "\n")
    other = checkpoint(tmp_path / "other")
    code = main(["eval", "--task", "sudoku", "--run", str(run), "--problems", "2", "--k", "1", "--model", other])
    err = capsys.readouterr().err
    assert code == 2 and "checksum mismatch after generation 0; the history replays only onto the weights it was " \
                          f"recorded on: is {other} the checkpoint the run trained (its [model] path)?" in err, err
    assert OtherWeights.resets == 1  # the engine put back to its checkpoint all the same


class Recording:
    """An engine for `coevolve eval` that plays every turn with one move and records each request's
    system prompt and reply limit."""

    asked: list[tuple[str, int]] = []

    def __init__(self, model=None, **kwargs):
        Recording.asked = []

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        from coevolve.engine.base import Completion

        Recording.asked += [(c[0]["content"], sampling.max_tokens) for c in conversations]
        return [Completion(text="set 1 1 1") for _ in conversations]

    def reset(self):
        pass

    def close(self):
        pass


def test_eval_of_a_run_plays_its_seed_and_distilled_skills_at_its_max_tokens(tmp_path, capsys, monkeypatch):
    """The skill arms play with the skills the run played with: its seed skills (the texts its log pinned,
    not the folder as edited since; an old run without that log reads its [skills] folder), then the one it
    distilled, as `coevolve compare` scores the run; each turn at most the run's [sampling] max_tokens.
    The header says both; the last line says what its number is."""
    import coevolve.engine.vllm_engine as vllm_engine
    from coevolve.agents.es_agent import seed_skills_event
    from coevolve.agents.skills import write_skill

    monkeypatch.setattr(vllm_engine, "Engine", Recording)
    seed = write_skill(tmp_path / "sudoku-mine", "Mine", "# m\n\n## Moves\n- Pinned rule of the seed skill.")
    run = tmp_path / "run"
    write_skill(run / "skills" / "distilled", "Distilled", "# d\n\n## Moves\n- Rule the run distilled.")
    (run / "config.toml").write_text('[run]\nmethod = "trace2skill"\ntask = "sudoku"\n\n[task]\nmasked = 1\n\n'
                                     f'[sampling]\nmax_tokens = 20\n\n[skills]\npaths = ["{seed.path}"]\n')
    (run / "events.jsonl").write_text(json.dumps(seed_skills_event([str(seed.path)], [seed])) + "\n")
    write_skill(seed.path, "Mine", "# m\n\n## Moves\n- Edited after the run started.")
    assert main(["eval", "--task", "sudoku", "--run", str(run), "--problems", "2", "--k", "1", "--arms", "skill"]) == 0
    out = capsys.readouterr().out
    assert "at most 20 tokens per turn (the run's [sampling] max_tokens)" in out
    assert "skills in prompt order: skill: sudoku-mine (seed), distilled (distilled)\n" in out
    assert re.fullmatch(r"took \d+ s", out.strip().splitlines()[-1]), out
    prompts = {prompt for prompt, _ in Recording.asked}
    assert {tokens for _, tokens in Recording.asked} == {20} and len(prompts) == 1
    prompt = prompts.pop()
    assert "Edited after" not in prompt
    assert prompt.index("Pinned rule of the seed skill.") < prompt.index("Rule the run distilled.")
    # a run from before seed skills were logged: its [skills] folder, read now; --max-tokens still decides
    (run / "events.jsonl").unlink()
    assert main(["eval", "--task", "sudoku", "--run", str(run), "--problems", "2", "--k", "1", "--arms", "skill",
                 "--max-tokens", "9"]) == 0
    assert "at most 9 tokens per turn (--max-tokens)" in capsys.readouterr().out
    assert {tokens for _, tokens in Recording.asked} == {9}
    assert all("Edited after the run started." in prompt for prompt, _ in Recording.asked)
    # a run that kept its default reply length (24, AgentRunConfig's) is evaluated at it
    (run / "config.toml").write_text('[run]\nmethod = "trace2skill"\ntask = "sudoku"\n\n[task]\nmasked = 1\n')
    assert main(["eval", "--task", "sudoku", "--run", str(run), "--problems", "2", "--k", "1", "--arms", "skill"]) == 0
    out = capsys.readouterr().out
    assert "at most 24 tokens per turn (the run's [sampling] max_tokens)" in out
    assert "skills in prompt order: skill: distilled (distilled)\n" in out


def test_eval_without_a_run_keeps_its_default_reply_length(tmp_path, capsys, monkeypatch):
    import coevolve.engine.vllm_engine as vllm_engine
    from coevolve.agents.skills import write_skill

    monkeypatch.setattr(vllm_engine, "Engine", Recording)
    skill = write_skill(tmp_path / "rules", "Rules", "# r\n\n## Moves\n- Fill the only empty cell.")
    assert main(eval_args("--k", "1", "--skill", str(skill.path))) == 0
    out = capsys.readouterr().out
    assert "at most 12 tokens per turn (the default: 96 for react_math, else 12)" in out
    assert "skills in prompt order: base: none; skill: rules (--skill)\n" in out
    assert {tokens for _, tokens in Recording.asked} == {12}


def test_eval_of_a_run_names_its_broken_seed_skill(tmp_path, capsys, monkeypatch):
    import coevolve.engine.vllm_engine as vllm_engine
    from coevolve.agents.skills import write_skill

    monkeypatch.setattr(vllm_engine, "Engine", lambda *a, **k: (_ for _ in ()).throw(AssertionError("engine")))
    run = tmp_path / "run"
    write_skill(run / "skills" / "distilled", "Distilled", "# d\n\n## Moves\n- Rule the run distilled.")
    (run / "config.toml").write_text('[run]\nmethod = "trace2skill"\ntask = "sudoku"\n\n'
                                     f'[skills]\npaths = ["{tmp_path / "gone"}"]\n')
    assert main(eval_args("--run", str(run))) == 2
    assert (f"{run / 'config.toml'}: config error: skills.paths[0] is not a valid skill: {tmp_path / 'gone'}: "
            "not found") in capsys.readouterr().err
