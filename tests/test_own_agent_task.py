"""A user's own agent environment as a file: `coevolve new-task NAME --agent` writes one that passes
`coevolve check-task` (and its own test), each broken variant is one line naming the method, `coevolve
run` refuses a broken one before any directory or engine, the built-in agent tasks pass the same checks,
and held-out checks compare cases by content when a task declares no case_key. The scaffold's own run
on the real engine is in tests/test_agents_engine.py."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from coevolve.agents.tools import SandboxTool
from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.cli import main
from coevolve.commands.new_task import scaffold
from tasks.agent_check import UNREADABLE, agent_problems
from tasks.base import case_content
from tasks.registry import AGENT_TASKS, agent_task

NO_MODEL = '\n[model]\npath = "/nonexistent/coevolve-test-model"\n'


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def environment(tmp_path: Path, *changes: tuple[str, str]) -> Path:
    """The scaffold's env.py with each (old, new) applied (the old text must be there)."""
    folder = scaffold("guess", tmp_path / "guess_env", agent=True)
    path = folder / "env.py"
    text = path.read_text()
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text)
    return path


def test_the_agent_scaffold_passes_check_task_and_its_own_test(tmp_path, capsys):
    code, out, _ = cli(capsys, "new-task", "guess", "--agent", "--dir", str(tmp_path))
    folder = tmp_path / "guess"
    assert code == 0 and {p.name for p in folder.iterdir()} == {"env.py", "config.toml", "test_env.py"}
    assert "coevolve check-task" in out and "env.py" in out
    code, out, err = cli(capsys, "check-task", str(folder / "env.py"))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("ok  shape: ") and "action_pattern 'guess [1-9][0-9]{0,2}' compiles" in lines[0]
    assert lines[1].startswith("ok  cases: 4 per split (train, eval) drawn twice and equal")
    # an unreadable action every turn: the turn budget is log2(high) + 1 (16: 5, ..., 256: 9)
    episodes = [line for line in lines if line.startswith("ok  episode: ")]
    assert len(episodes) == 4 and all(re.search(r"[5-9] turns of an unreadable action until done, reward 0", e)
                                      for e in episodes[:2]), episodes
    # then random moves of the declared form, one episode per split, on each split's second case
    drawn = [re.search(r"case (\S+): \d turns? of moves drawn from action_pattern \(the first '(guess \d+)'\)", e)
             for e in episodes[2:]]
    assert all(drawn) and [m[1] for m in drawn] == ["train-0-1", "eval-0-1"], episodes
    assert all(re.fullmatch(r"guess [1-9][0-9]{0,2}", m[2]) for m in drawn), episodes
    assert lines[-1] == "guess: passed every check"
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert test.returncode == 0 and "1 passed" in test.stdout, test.stdout + test.stderr


def test_the_agent_scaffold_reports_its_well_formed_share(tmp_path):
    """The scaffold's metrics carry "well_formed", the share of turns with a readable guess, so `coevolve
    eval` of a user's first environment fills its well-formed column rather than showing `-`."""
    from coevolve.agents.evaluate import eval_sampling, evaluate_arm, table
    from coevolve.engine.base import Completion

    class FirstTurnUnreadable:
        """Answers prose on each episode's first turn, then a guess."""

        def chat(self, conversations, sampling, seeds=None, **_):
            return [Completion(text="let me think" if len(c) == 2 else "guess 1") for c in conversations]

    task = agent_task(str(environment(tmp_path)))
    result = evaluate_arm(FirstTurnUnreadable(), task, task.cases("eval", 3, seed=0), "base", k=1,
                          sampling=eval_sampling(8), seed=0)
    shares = [1 - 1 / t.turns for t in result.trajectories]
    assert [t.metrics["well_formed"] for t in result.trajectories] == pytest.approx(shares)
    assert result.well_formed == pytest.approx(sum(shares) / 3) and 0 < result.well_formed < 1
    assert f"{result.well_formed:.2f}" in table([result])


def test_a_scaffold_named_with_underscores_names_its_skill_with_hyphens(tmp_path, capsys):
    """A skill's name (its folder, its SKILL.md) takes hyphens only: the config the scaffold writes loads."""
    from coevolve.commands.run import load_run_config

    code, _, err = cli(capsys, "new-task", "my_game", "--agent", "--dir", str(tmp_path))
    assert code == 0, err
    config = load_run_config(tmp_path / "my_game" / "config.toml", {})
    assert config.agent.skill_name == "my-game-hints" and config.run.task.endswith("my_game/env.py:MyGame")


def test_the_scaffolds_skill_line_uncommented_counts_from_its_folder(tmp_path, capsys, monkeypatch):
    """The scaffold's config says its paths are relative to the file: its `# [skills] paths = ["hints"]`,
    uncommented with a hints/SKILL.md beside it, loads from any folder, and is recorded absolute."""
    from coevolve.agents.skills import write_skill
    from coevolve.commands.run import load_run_config

    code, _, err = cli(capsys, "new-task", "my_game", "--agent", "--dir", str(tmp_path))
    assert code == 0, err
    path = tmp_path / "my_game" / "config.toml"
    text = path.read_text()
    assert "the\n# task and skill paths below are relative to this file" in text
    assert '# [skills]\n# paths = ["hints"]\n' in text
    path.write_text(text.replace('# [skills]\n# paths = ["hints"]\n', '[skills]\npaths = ["hints"]\n'))
    write_skill(tmp_path / "my_game" / "hints", "What I know", "# h\n\n## Moves\n- Halve the range each guess.")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_run_config(path, {})
    assert config.skills.paths == [str(tmp_path / "my_game" / "hints")]
    assert [s.name for s in config.seed_skills()] == ["hints"]


def test_the_scaffolds_game_is_played_as_its_docstring_says(tmp_path):
    task = agent_task(str(environment(tmp_path)))
    train, held = task.cases("train", 300, 0), task.cases("eval", 80, 0)
    assert not {case_content(task, c) for c in train} & {case_content(task, c) for c in held}
    case = train[0]
    state, first = task.reset(case)
    assert f"between 1 and {case.high}" in first
    low, high = 1, case.high  # binary search finds it within max_turns
    for _ in range(task.max_turns(case)):
        guess = (low + high) // 2
        answer, done = task.step(state, f"guess {guess}")
        if done:
            break
        low, high = (guess + 1, high) if "higher" in answer else (low, guess - 1)
    assert done and task.reward(state) == 1.0 and task.metrics(state)["progress"] == 1.0
    assert re.fullmatch(task.action_pattern, f"guess {case.secret}")
    state, _ = task.reset(case)
    answer, done = task.step(state, UNREADABLE)
    assert "could not read a guess" in answer and not done and task.metrics(state)["unreadable"] == 1.0


@pytest.mark.parametrize("changes,problem", [
    ([('state.unreadable += 1\n            answer = "I could not read a guess. Reply like: guess 8"',
       'raise ValueError("no guess in the reply")')],
     f"step(): with an action it cannot read ({UNREADABLE!r}) raised ValueError: no guess in the reply"),
    ([('rng = random.Random(f"guess:{split}:{seed}")', "rng = random.Random()")],
     "cases(): not deterministic: cases('train', 4, seed=0) drawn by two instances gave different cases"),
    ([('id=f"{split}-{seed}-{len(out)}"', 'id=f"{split}-{seed}"')],
     "cases(): cases('train', 4, seed=0) repeats ids (train-0)"),
    ([('rng = random.Random(f"guess:{split}:{seed}")', 'rng = random.Random(f"guess:{seed}")'),
      ("if split_of(high, secret) == split and (high, secret) not in seen:", "if (high, secret) not in seen:")],
     "cases(): eval cases are training problems (eval-0-0 = train-0-0"),
    # a move of the declared form the environment cannot take (out of range), found by the drawn moves
    ([("                state.wasted += 1", '                raise IndexError("guess out of range")')],
     "step(): with the move 'guess 85' (of action_pattern's form) raised IndexError: guess out of range"),
    ([("return 1.0 if state.found else 0.0", "return 1.0 if state.found else -1.0")],
     "reward(): expected a number in [0, 1], got -1.0 on case train-0-0"),
    ([('"progress": progress,', '"progress": progress - 1,')],
     "metrics(): progress must be in [0, 1] (agent.shaping adds it to the reward), got -1.0"),
    ([("return math.ceil(math.log2(case.high)) + self.extra_turns", "return 0")],
     "max_turns(): expected an int >= 1, got 0 on case train-0-0"),
    ([('return state, (f"I am thinking', 'return state, None and (f"I am thinking')],
     "reset(): expected (state, first observation: a non-empty str), got an observation None"),
    ([("left.\\n{PROMPT}\", False", "left.\\n{PROMPT}\"")],
     "step(): expected (observation str, done bool), got 'I could not read a guess."),
    ([('action_pattern = "guess [1-9][0-9]{0,2}"', 'action_pattern = "guess [1-9"')],
     "action_pattern: 'guess [1-9' is not a regular expression: unterminated character set"),
    ([("self.system_prompt = (", "self.system_prompt = '' and (")],
     "system_prompt: expected a non-empty str, got ''"),
])
def test_a_broken_environment_is_one_line_naming_the_method(tmp_path, capsys, changes, problem):
    path = environment(tmp_path, *changes)
    code, _, err = cli(capsys, "check-task", str(path))
    assert code == 2 and "Traceback" not in err, err
    assert problem in err.strip().splitlines()[-1], err


def test_a_pattern_constrained_decoding_cannot_enforce_is_said_when_checked(tmp_path, capsys):
    """It passes check-task (a run with agent.constrained = false takes it); the shape line says what the
    default run would meet. Moves are still drawn from it (a word boundary after the number holds)."""
    path = environment(tmp_path, ('action_pattern = "guess [1-9][0-9]{0,2}"', 'action_pattern = r"guess [1-9][0-9]{0,2}\\b"'))
    code, out, err = cli(capsys, "check-task", str(path))
    assert code == 0, err
    shape = out.splitlines()[0]
    assert ("compiles (but it uses a word boundary (\\b, \\B), which constrained decoding cannot enforce: with "
            "agent.constrained = true, the default, a run stops before its first episode") in shape, shape
    assert sum("moves drawn from action_pattern" in line for line in out.splitlines()) == 2


def test_a_run_of_an_environment_that_hangs_on_a_readable_move_stops_naming_its_line(tmp_path, capsys):
    """The unreadable reply passes; a drawn move of the declared form never returns: `coevolve run` stops at
    its check's limit (--check-seconds) with the user's line, before any directory or engine."""
    path = environment(tmp_path, ("            guess = int(match.group(1))\n",
                                  "            while True:\n                pass\n"))
    line = path.read_text().splitlines().index("            while True:") + 2
    config = path.with_name("config.toml")
    config.write_text(config.read_text() + NO_MODEL)
    start = time.monotonic()
    code, _, err = cli(capsys, "run", str(config), "--out", str(tmp_path / "runs"), "--check-seconds", "1")
    last = err.strip().splitlines()[-1]
    assert code == 2 and time.monotonic() - start < 30 and not (tmp_path / "runs").exists(), err
    assert "an episode of case train-0-1 with moves drawn from action_pattern: still running after 1 s" in last, last
    assert f"{path}:{line}" in last or f"{path}:{line - 1}" in last, (last, line)
    assert last.endswith("(`--check-seconds S` gives each check longer, 0 none)"), last


def test_a_step_that_never_returns_ends_at_the_stage_limit_naming_its_line(tmp_path, capsys):
    path = environment(tmp_path, ("        state.turns += 1\n        match", "        while True:\n            pass\n"
                                                                         "        match"))
    line = path.read_text().splitlines().index("        while True:") + 2  # the loop's body line, 1-based
    start = time.monotonic()
    code, _, err = cli(capsys, "check-task", str(path), "--stage-seconds", "1")
    last = err.strip().splitlines()[-1]
    assert code == 2 and time.monotonic() - start < 30, err
    assert "an episode of case train-0-0: still running after 1 s" in last and f"{path}:" in last, err
    assert f"{path}:{line}" in last or f"{path}:{line - 1}" in last, (last, line)


def test_run_refuses_a_broken_environment_before_any_directory_or_engine(tmp_path, capsys):
    path = environment(tmp_path, ("return 1.0 if state.found else 0.0", "return 1.0 if state.found else 7.0"))
    config = path.with_name("config.toml")
    config.write_text(config.read_text() + NO_MODEL)
    code, _, err = cli(capsys, "run", str(config), "--out", str(tmp_path / "runs"))
    assert code == 2 and "Traceback" not in err, err
    assert f"{path}" in err and "reward(): expected a number in [0, 1], got 7.0" in err
    assert not (tmp_path / "runs").exists()


def test_every_built_in_agent_task_passes_the_agent_checks():
    """With the real sandboxed tool, as check-task builds them: react_math's drawn moves include code."""
    lines: list[str] = []
    tool = SandboxTool()
    try:
        for name in sorted(AGENT_TASKS):
            task = agent_task(name, tool=tool)
            assert agent_problems(task, lambda: agent_task(name, tool=tool), lines.append) == [], name
    finally:
        tool.close()
    short = [line for line in lines if re.search(r"turns? of moves drawn from action_pattern", line)]
    long = [line for line in lines if re.search(r"turns? of long moves drawn from action_pattern", line)]
    assert len(short) == 2 * len(AGENT_TASKS), lines
    # react_math's code blocks may run on (a long move per split, on its third case); a Sudoku move may not
    assert [re.search(r"case (\S+):", line)[1] for line in long] == ["train-0-2", "eval-0-2"], long
    assert all("(the first '```python" in line and "characters))" in line for line in long), long  # the code block


def test_held_out_checks_compare_cases_by_content_without_a_case_key():
    """tasks.base.case_content: a task's case_key when it has one; else the case's fields but its id."""
    from coevolve.agents.evaluate import check_heldout

    plain = SimpleNamespace()  # no case_key
    train = [SimpleNamespace(id="train-0", board=(1, 2)), SimpleNamespace(id="train-1", board=(3, 4))]
    held = [SimpleNamespace(id="eval-0", board=(5, 6)), SimpleNamespace(id="eval-1", board=(3, 4))]
    with pytest.raises(ValueError, match=r"overlaps training in 1 of 2 problems \(eval-1 = train train-1\)"):
        check_heldout(plain, held, train)
    check_heldout(plain, held[:1], train)  # disjoint: nothing to say
    keyed = SimpleNamespace(case_key=lambda case: case.id[-1])  # a key that sees only the index
    with pytest.raises(ValueError, match="overlaps training in 2 of 2"):
        check_heldout(keyed, held, train)
    assert case_content(plain, "a string case") == "'a string case'"


def test_an_agent_comparison_refuses_a_broken_environment_before_any_file(tmp_path, capsys):
    path = environment(tmp_path, ('"progress": progress,', '"progress": 2.0,'))
    config = tmp_path / "compare.toml"
    config.write_text(f'[compare]\nkind = "agent"\nmethods = ["base", "esopt"]\ntasks = ["{path}"]\nseeds = [0]\n'
                      'budgets = [16]\n\n[eval]\nproblems = 4\nk = 1\n\n[agent]\npopulation = 4\nbatch = 4\n'
                      + NO_MODEL)
    for flags in (["--out", str(tmp_path / "cmp")], ["--plan"]):  # its plan checks what it would
        code, out, err = cli(capsys, "compare", str(config), *flags)
        assert code == 2 and "Traceback" not in err and not out, err
        assert f"{path}" in err and "metrics(): progress must be in [0, 1]" in err and "got 2.0" in err
    assert not (tmp_path / "cmp").exists()


def test_more_held_out_problems_than_an_environment_has_is_one_line_before_any_file(tmp_path, capsys):
    """The scaffold's guessing game has about 124 distinct held-out problems (one in four of 496): a
    comparison asking for 500 stops at the task's cases() with one line naming the setting that asked."""
    path = environment(tmp_path)
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "distinct {split} problems" in text)
    config = tmp_path / "compare.toml"
    config.write_text(f'[compare]\nkind = "agent"\nmethods = ["base", "esopt"]\ntasks = ["{path}"]\nseeds = [0]\n'
                      'budgets = [16]\n\n[eval]\nproblems = 500\nk = 1\n\n[agent]\npopulation = 4\nbatch = 4\n')
    code, _, err = cli(capsys, "compare", str(config), "--out", str(tmp_path / "cmp"), "--no-progress")
    last = err.strip().splitlines()[-1]
    assert code == 2 and "Traceback" not in err, err
    assert re.fullmatch(rf"coevolve compare: error: task guess: cases\('eval', 500\) raised ValueError: only \d+ distinct "
                        rf"eval problems, 500 asked for \(at {re.escape(str(path))}:{line}\); eval.problems = 500 asked "
                        r"for them: ask for fewer, or let the task draw more", last), last
    assert not (tmp_path / "cmp").exists()
    code, _, err = cli(capsys, "eval", "--task", str(path), "--problems", "500", "--arms", "base")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "task guess: cases('eval', 500) raised ValueError: only " in err and "--problems = 500 asked for them" in err


def test_an_agent_comparisons_task_file_counts_from_its_tomls_folder(tmp_path, capsys, monkeypatch):
    """compare.tasks = ["../game/env.py"] in cmp/compare.toml: the comparison, its --plan and `coevolve run`
    of one of its arms find the file from any working directory, and name it absolutely from then on (its
    [task."<spec>"] options with it)."""
    import os

    from coevolve.commands.run import load_run_config
    from coevolve.plan import load_compare_config

    path = environment(tmp_path / "game")
    relative = os.path.relpath(path, tmp_path / "cmp")
    (tmp_path / "cmp").mkdir()
    config = tmp_path / "cmp" / "compare.toml"
    config.write_text(f'[compare]\nkind = "agent"\nmethods = ["base", "esopt"]\ntasks = ["{relative}"]\n'
                      f'seeds = [0]\nbudgets = [16]\n\n[eval]\nproblems = 4\nk = 1\n\n[agent]\npopulation = 4\n'
                      f'batch = 4\n\n[task."{relative}"]\nextra_turns = 2\n')
    # neither the TOML's folder nor a sibling of it, from where "../game/..." would name the same file (the
    # validator once loaded the task from the working directory: tmp_path / "game" let that pass)
    (tmp_path / "elsewhere" / "deeper").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "elsewhere" / "deeper")
    loaded = load_compare_config(config)
    spec = loaded.compare.tasks[0]
    assert spec.startswith(str(path.resolve())) and loaded.task == {spec: {"extra_turns": 2}}, (spec, loaded.task)
    # as the comparison writes it to its folder and reads it back to report: the spec's key quoted (it was
    # written bare, `/tmp/.../env.py:Guess = {...}`, which no TOML reader takes: the trained arms unreported)
    again = build_config(type(loaded), tomllib.loads(dump_toml(as_dict(loaded))))
    assert as_dict(again) == as_dict(loaded)
    code, out, err = cli(capsys, "compare", str(config), "--plan")
    assert code == 0 and "1 training run: 1 method" in out, err
    run = load_run_config(config, {"run": {"method": "esopt"}})
    assert run.run.task == spec and run.task == {"extra_turns": 2}
    # a file that is not there from the TOML's folder is named with the folder it was looked for in
    config.write_text(config.read_text().replace(relative, "../game/gone/env.py"))
    code, _, err = cli(capsys, "compare", str(config), "--plan")
    assert code == 2 and err.strip().endswith("config error: compare.tasks[0]: task file not found: "
                                              f"../game/gone/env.py (looked in {config.parent})"), err


@pytest.mark.parametrize("method, distill", [("esopt", "posthoc"), ("esopt+trace2skill", "online"),
                                           ("trace2skill", "posthoc")])
def test_an_agent_runs_plan_is_what_the_run_plays(tmp_path, capsys, monkeypatch, method, distill):
    """`coevolve run --plan` of an agent run (the scaffold's game, the Guesser engine for the run): its
    rounds, skill distillations and held-out rounds are the ones the run's log then holds."""
    from coevolve.engine import pool
    from coevolve.runstore import RunStore

    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: Guesser())
    path = environment(tmp_path)
    config = path.with_name("config.toml")
    flags = ["--method", method, "--budget", "48"]
    text = config.read_text()
    assert 'distill = "online"' in text and "skill_every = 1\n" in text
    config.write_text(text.replace('distill = "online"', f'distill = "{distill}"')
                      .replace("skill_every = 1\n", "skill_every = 2\neval_every = 2\n"))
    code, plan, err = cli(capsys, "run", str(config), *flags, "--plan")
    assert code == 0 and not (tmp_path / "run").exists(), err
    rounds = int(re.search(r"budget 48 training episodes: (\d+) rounds", plan)[1])
    evals = [int(r) for r in re.search(r"eval cases at rounds? ([\d, ]+) \(not charged\)", plan)[1].split(", ")]
    code, _, err = cli(capsys, "run", str(config), *flags, "--out", str(tmp_path / "run"), "--no-progress")
    assert code == 0, err
    events = RunStore.open(tmp_path / "run").events()
    assert sum(e["type"] == "round" for e in events) == rounds, plan
    assert [e["round"] for e in events if e["type"] == "eval"] == evals, plan
    distilled = [e["round"] for e in events if e["type"] == "skill"]
    if "trace2skill" in method:
        said = re.search(r"skill: distilled (?:online after rounds? ([\d, ]+),|once after round (\d+))", plan)
        assert distilled == [int(r) for r in (said[1] or said[2]).split(", ")], (plan, distilled)
    else:
        assert "skill:" not in plan and not distilled


def test_an_agent_runs_plan_says_its_product_is_one_rounds_episodes(tmp_path, capsys):
    """`coevolve run --plan` of the scaffold's game (budget 32, 2 rounds of 4 x 4): the product is the
    episodes of each round, not the budget's (it read `... = 16 episodes` after `budget 32`)."""
    config = environment(tmp_path).with_name("config.toml")
    code, plan, err = cli(capsys, "run", str(config), "--plan")
    assert code == 0, err
    assert ("budget 32 training episodes: 2 rounds of agent.population 4 x agent.batch 4 = 16 episodes each\n"
            in plan), plan
    code, plan, err = cli(capsys, "run", str(config), "--budget", "20", "--plan")  # one round: no "each"
    assert code == 0, err
    assert ("budget 20 training episodes: 1 round of agent.population 4 x agent.batch 4 = 16 episodes "
            "(4 left unspent)\n" in plan), plan


def test_check_task_builds_an_agent_task_with_its_options(tmp_path, capsys):
    path = environment(tmp_path)
    code, out, err = cli(capsys, "check-task", str(path))
    default = int(re.search(r"case train-0-0: (\d+) turns", out).group(1))
    code, out, err = cli(capsys, "check-task", str(path), "--option", "extra_turns=3")
    assert code == 0, err
    assert f"case train-0-0: {default + 2} turns of an unreadable action" in out  # the default is 1 extra turn
    code, _, err = cli(capsys, "check-task", str(path), "--option", "colour=3")
    assert code == 2 and "--option colour: is not an option of" in err and "(its options: extra_turns)" in err
    code, _, err = cli(capsys, "check-task", str(path), "--option", "extra_turns=99")
    assert code == 2 and "extra_turns must be in 0..10, got 99" in err and "env.py:" in err
    code, _, err = cli(capsys, "check-task", "tsp_construct", "--option", "size=3")
    assert code == 2 and "heuristic tasks take no options" in err


def test_a_step_that_breaks_on_a_long_move_is_found_by_the_long_moves(tmp_path, capsys):
    """A pattern that lets a reply run on (`guess [0-9]+`) also gets an episode per split of long moves of
    its form: a `step` that indexes a fixed table by the number's length breaks there, named with the
    move (cut, with its length) and the user's line; short moves alone would pass it."""
    path = environment(tmp_path, ('action_pattern = "guess [1-9][0-9]{0,2}"', 'action_pattern = "guess [0-9]+"'),
                       ("            guess = int(match.group(1))\n",
                        "            guess = int(match.group(1))\n            width = (1, 2, 3, 4, 5, 6, 7, 8)[len(match.group(1))]\n"))
    code, out, err = cli(capsys, "check-task", str(path))
    last = err.strip().splitlines()[-1]
    assert code == 2 and re.search(r"turns? of moves drawn from action_pattern", out), out + err  # short ones pass
    assert re.search(r"step\(\): with the move 'guess \d{34}'\.\.\. \(\d+ characters\) \(of action_pattern's form\) "
                     r"raised IndexError: tuple index out of range", last), last
    assert f"{path}:" in last and "case train-0-2" in last, last


class Guesser:
    """A fake engine that plays the scaffold's game by binary search, reading the conversation (ES moves
    nothing here: every member plays alike)."""

    device = "fake"

    def __init__(self):
        self.updates = 0

    def perturbed(self, seed, sigma):
        from contextlib import nullcontext

        return nullcontext()

    def apply_update(self, seeds, coefficients, alpha):
        self.updates += 1

    def checksum(self):
        return f"guesser-{self.updates}"

    def noise_info(self):
        return {"noise": "full", "rank": None}

    def close(self):
        pass

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        from coevolve.engine.base import Completion

        out = []
        for conversation in conversations:
            low, high = 1, int(re.search(r"between 1 and (\d+)", conversation[1]["content"])[1])
            for reply, answer in zip(conversation[2::2], conversation[3::2]):
                guess = int(reply["content"].split()[1])
                low, high = (guess + 1, high) if "too low" in answer["content"] else (low, guess - 1)
            out.append(Completion(text=f"guess {(low + high) // 2}"))
        return out


@pytest.mark.parametrize("change,marker,failure,kept", [
    # step() raising only on a right guess of a training case: check-task's episodes never guess right
    (("                state.found = True\n",
      '                if state.case.id.startswith("train"):\n'
      '                    raise RuntimeError("scoring backend unavailable")\n                state.found = True\n'),
     'raise RuntimeError("scoring backend unavailable")',
     r"task guess: step\(\) raised RuntimeError: scoring backend unavailable \(at {path}:{line}\) on case "
     r"train-\S+ \(round 0 member 0\), turn \d+, given the reply 'guess \d+'",
     ["start", "eval"]),  # the held-out round before training was played and logged
    # reward() outside [0, 1] once solved: before, a held-out mean of 1.5 x solved and exit status 0
    (("return 1.0 if state.found else 0.0", "return 1.5 if state.found else 0.0"),
     "def reward(self, state: State) -> float:",
     r"task guess: reward\(\): expected a number in \[0, 1\], got 1\.5 on case eval-\S+ \(eval\), at the end "
     r"of its episode \(\d turns?\) \(reward\(\) is at {path}:{line}\)",
     ["start"]),
    # step() never returning on a right guess of a training case: the rollout's limit on one call
    # (rollout.CALL_SECONDS, 2 s here) names it and the user's line, where the run would hang with no word
    (("                state.found = True\n",
      '                while state.case.id.startswith("train"):\n                    pass\n'
      '                state.found = True\n'),
     'while state.case.id.startswith("train"):',
     r"task guess: step\(\): still running after 2 s on case train-\S+ \(round 0 member 0\), turn \d+, given the "
     r"reply 'guess \d+' \(at {path}:{line}\); a loop that never ends\?",
     ["start", "eval"]),
])
def test_an_environment_failing_during_a_run_is_one_line_and_a_resume_goes_on_once_fixed(
        tmp_path, capsys, monkeypatch, change, marker, failure, kept):
    """Past check-task (whose episodes do not reach it), the run stops at the environment's failure with one
    line (exit status 2) naming the method, the file's line, the case and the turn; the run directory keeps
    what was logged, and `--resume --task-changed` with the fixed file goes on to the end."""
    from coevolve.agents import rollout
    from coevolve.engine import pool
    from coevolve.runstore import RunStore
    from tasks.loader import clear_cache, module_name

    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: Guesser())
    monkeypatch.setattr(rollout, "CALL_SECONDS", 2.0)
    fixed = environment(tmp_path / "fixed").read_text()
    path = environment(tmp_path, change)
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if marker in text)
    run = tmp_path / "run"
    code, _, err = cli(capsys, "run", str(path.with_name("config.toml")), "--method", "esopt", "--out", str(run),
                       "--no-progress")
    last = err.strip().splitlines()[-1]
    assert code == 2 and "Traceback" not in err, err
    assert re.fullmatch("coevolve run: error: " + failure.format(path=re.escape(str(path)), line=line), last), last
    assert [e["type"] for e in RunStore.open(run).events()] == kept
    path.write_text(fixed)  # the fix; a fresh process would import it anew
    clear_cache()
    monkeypatch.delitem(sys.modules, module_name(path), raising=False)
    code, out, err = cli(capsys, "run", "--resume", str(run), "--task-changed", "--no-progress")
    assert code == 0, err
    assert "episodes              32 / 32" in out and "held-out after        reward 1.000" in out, out
    events = [e["type"] for e in RunStore.open(run).events()]
    assert events[:len(kept)] == kept and events[len(kept)] == "task_changed" and events[-1] == "end", events
    assert events.count("eval") == 3 and events.count("round") == 2, events
