from pathlib import Path

import pytest

from coevolve.agents.rollout import derive_seed, load_trajectories, mean_reward, rollout, save_trajectories
from coevolve.agents.skills import Skill
from coevolve.engine.base import Completion, Sampling
from tasks.sudoku import Sudoku


class ScriptedSolver:
    """A Generator that solves sudoku cases it knows, except for the ones in
    `fumble`, where it answers garbage. Records every call."""

    def __init__(self, cases, fumble=()):
        self.solutions = {c.puzzle: c.solution for c in cases}
        self.fumble = set(fumble)
        self.calls = []

    def chat(self, conversations, sampling, seeds=None):
        self.calls.append({"n": len(conversations), "sampling": sampling, "seeds": list(seeds),
                           "conversations": conversations})
        out = []
        for conversation in conversations:
            board = _board(conversation[-1]["content"])
            puzzle = _board(conversation[1]["content"])
            if tuple(map(tuple, puzzle)) in self.fumble:
                out.append(Completion(text="I am not sure."))
                continue
            solution = self.solutions[tuple(map(tuple, puzzle))]
            r, c = next((r, c) for r in range(4) for c in range(4) if board[r][c] == 0)
            out.append(Completion(text=f" set {r + 1} {c + 1} {solution[r][c]}\n"))
        return out


def _board(observation):
    rows = [line.split("|")[1].split() for line in observation.splitlines() if "|" in line]
    return [[0 if v == "." else int(v) for v in row] for row in rows]


def test_all_live_episodes_share_one_call_per_turn_and_finish():
    task = Sudoku(masked=3)
    cases = task.cases("train", 4, seed=0)
    generator = ScriptedSolver(cases, fumble=[cases[3].puzzle])
    sampling = Sampling(temperature=0.5, max_tokens=16, stop=("END",))
    trajectories = rollout(generator, task, cases, sampling, seed=7)
    # solvers finish in 3 turns, the fumbler burns its 9-turn budget alone
    assert [call["n"] for call in generator.calls] == [4, 4, 4] + [1] * 6
    assert [t.reward for t in trajectories] == [1.0, 1.0, 1.0, 0.0]
    assert trajectories[3].turns == 9 and trajectories[3].finish == "turn_budget"
    assert trajectories[0].turns == 3 and trajectories[0].finish == "done"
    assert trajectories[0].metrics["correct_moves"] == 3.0
    assert mean_reward(trajectories) == 0.75
    # per-turn stop strings include the task's and the caller's, max_tokens is kept
    assert generator.calls[0]["sampling"].stop == ("END", "\n\n") and generator.calls[0]["sampling"].max_tokens == 16
    # seeds derive from (seed, episode, turn): distinct within a call, reproducible
    assert generator.calls[0]["seeds"] == [derive_seed(7, i, 0) for i in range(4)]
    assert len(set(generator.calls[0]["seeds"] + generator.calls[1]["seeds"])) == 8
    t = trajectories[0]
    assert [m["role"] for m in t.messages] == ["system", "user"] + ["assistant", "user"] * 3
    assert t.actions[0].startswith("set") and len(t.observations) == 4


def test_skills_change_the_system_prompt_the_agent_sees():
    task = Sudoku(masked=2)
    cases = task.cases("train", 1, seed=0)
    plain, skilled = ScriptedSolver(cases), ScriptedSolver(cases)
    rollout(plain, task, cases, Sampling())
    skill = Skill("corner-first", "Start at a corner.", "- Fill row 1 first.")
    rollout(skilled, task, cases, Sampling(), skills=[skill])
    system_plain = plain.calls[0]["conversations"][0][0]["content"]
    system_skilled = skilled.calls[0]["conversations"][0][0]["content"]
    assert system_plain == task.system_prompt
    assert system_skilled != system_plain and "- Fill row 1 first." in system_skilled


def test_history_window_bounds_the_prompt_but_not_the_record():
    task = Sudoku(masked=4)
    cases = task.cases("train", 1, seed=1)
    generator = ScriptedSolver(cases, fumble=[cases[0].puzzle])
    trajectories = rollout(generator, task, cases, Sampling(), history_turns=1)
    assert max(len(call["conversations"][0]) for call in generator.calls) == 4
    assert len(trajectories[0].messages) == 2 + 2 * 12


def test_markdown_and_jsonl_round_trip(tmp_path: Path):
    task = Sudoku(masked=2)
    cases = task.cases("eval", 2, seed=0)
    trajectories = rollout(ScriptedSolver(cases), task, cases, Sampling(), label="gen 0 member 1")
    jsonl, markdown = save_trajectories(trajectories, tmp_path / "traj" / "gen_000", "Generation 0")
    assert load_trajectories(jsonl) == trajectories
    assert load_trajectories(tmp_path / "traj") == trajectories
    text = markdown.read_text()
    assert text.startswith("# Generation 0") and "mean reward 1.000" in text
    assert text.count("## Episode") == 2 and "**Action 2**" in text and "(gen 0 member 1)" in text


class MemberSolver(ScriptedSolver):
    """Offers generate_members: members with sigma < 0 fumble every move."""

    def __init__(self, cases):
        super().__init__(cases)
        self.member_calls = []

    def generate_members(self, jobs):
        self.member_calls.append([(job.seed, job.sigma, len(job.conversations), list(job.request_seeds or []))
                                  for job in jobs])
        out = []
        for job in jobs:
            texts = self.chat(job.conversations, job.sampling, job.request_seeds)
            out.append([Completion(text="no idea") for _ in texts] if job.sigma < 0 else texts)
        return out


def test_members_advance_together_in_one_call_per_turn_with_common_seeds():
    from coevolve.es import Member

    task = Sudoku(masked=3)
    cases = task.cases("train", 2, seed=0)
    generator = MemberSolver(cases)
    members = [Member(0, 11, 0.1), Member(1, 11, -0.1), Member(2, 12, 0.1)]
    trajectories = rollout(generator, task, cases, Sampling(temperature=0.5, max_tokens=16), seed=7,
                           label="round 0", members=members)
    # member-major: member 0's cases, then member 1's, then member 2's
    assert [t.label for t in trajectories] == ["round 0 member 0"] * 2 + ["round 0 member 1"] * 2 + \
        ["round 0 member 2"] * 2
    assert [t.reward for t in trajectories] == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    # one generate_members call per turn, every member a job (in member order)
    # while any of its episodes lives; 3 turns for solvers, 9 for the fumbler
    assert len(generator.member_calls) == 9
    first = generator.member_calls[0]
    assert [(seed, sigma, n) for seed, sigma, n, _ in first] == [(11, 0.1, 2), (11, -0.1, 2), (12, 0.1, 2)]
    # common random numbers: case k samples with the same seed under every member
    assert first[0][3] == first[1][3] == first[2][3] == [derive_seed(7, k, 0) for k in range(2)]
    assert [n for _, _, n, _ in generator.member_calls[-1]] == [0, 2, 0]


def test_an_episode_that_outgrows_the_context_is_named_with_its_turn_and_the_remedy():
    """The engine's ContextLengthError (tests/test_engine.py) gains the case, the turn and what to change."""
    import pytest

    from coevolve.engine.base import ContextLengthError

    task = Sudoku(masked=3)
    cases = task.cases("train", 2, seed=0)

    class Outgrown(ScriptedSolver):
        def chat(self, conversations, sampling, seeds=None):
            if len(self.calls) == 1:  # the second turn: the second episode's prompt is the long one
                raise ContextLengthError("a prompt of 2100 tokens does not fit the engine's context of 2048 tokens "
                                         "(request 1 of the call)", 1)
            return super().chat(conversations, sampling, seeds)

    with pytest.raises(ContextLengthError) as caught:
        rollout(Outgrown(cases, fumble=[c.puzzle for c in cases]), task, cases, Sampling(max_tokens=8))
    assert str(caught.value) == (
        f"sudoku: an episode of case {cases[1].id} outgrew the engine's context at turn 2: a prompt of 2100 tokens "
        "does not fit the engine's context of 2048 tokens (request 1 of the call); keep fewer turns in the prompt "
        "(agent.history_turns = k keeps the last k) or shorten the task's observations, or raise [model] max_len")


# ------------------------------------------------- the environment's own code failing during a rollout


class Backend(Sudoku):
    """Raises only on the solving move: check-task's unreadable and random moves never reach it."""

    def step(self, state, action_text):
        observation, done = super().step(state, action_text)
        if done and self.reward(state) == 1.0:
            raise RuntimeError("scoring backend unavailable")
        return observation, done


class Generous(Sudoku):
    """reward() outside the contract once solved: `paid` where the real reward is 1."""

    paid: object = 1.5

    def reward(self, state):
        return self.paid if super().reward(state) == 1.0 else 0.0


class Terse(Sudoku):
    """step() answering the observation alone."""

    def step(self, state, action_text):
        return super().step(state, action_text)[0]


def _line(text):
    """This file's line holding `text` (1-based)."""
    return next(n for n, line in enumerate(Path(__file__).read_text().splitlines(), 1) if text in line)


def _failure(task, generator, cases, **kwargs):
    from coevolve.agents.rollout import EnvironmentFailure
    from coevolve.base.errors import UsageError

    with pytest.raises(EnvironmentFailure) as caught:
        rollout(generator, task, cases, Sampling(max_tokens=8), **kwargs)
    message = str(caught.value)
    assert isinstance(caught.value, UsageError) and "\n" not in message, message  # one line, exit status 2
    return message


def test_a_step_that_raises_mid_run_is_one_line_naming_it_the_users_line_the_case_and_the_turn():
    task = Backend(masked=3)
    cases = task.cases("train", 2, seed=0)
    generator = ScriptedSolver(cases)
    message = _failure(task, generator, cases, label="round 0")
    # the third move solves the first case: step() raised there, before the other episode's turn
    r, c = [(r, c) for r in range(4) for c in range(4) if cases[0].puzzle[r][c] == 0][2]  # filled in order
    reply = f"set {r + 1} {c + 1} {cases[0].solution[r][c]}"
    assert message == (f"task sudoku: step() raised RuntimeError: scoring backend unavailable (at {__file__}:"
                       f"{_line('scoring backend unavailable')}) on case {cases[0].id} (round 0), turn 3, given the "
                       f"reply {reply!r}")
    assert len(generator.calls) == 3


def test_a_step_failure_under_es_members_names_the_member():
    from coevolve.es import Member

    task = Backend(masked=3)
    cases = task.cases("train", 2, seed=0)
    members = [Member(0, 11, -0.1), Member(1, 12, 0.1)]  # member 0 fumbles every move; member 1 solves
    message = _failure(task, MemberSolver(cases), cases, label="round 4", members=members)
    assert f"on case {cases[0].id} (round 4 member 1), turn 3, given the reply 'set " in message, message


@pytest.mark.parametrize("paid,shown", [(1.5, "1.5"), (float("nan"), "nan"), (-0.25, "-0.25"), ("1", "'1'"),
                                        (None, "None"), (True, "True (a bool: return 1.0 or 0.0)")])
def test_a_reward_outside_0_1_is_one_line_naming_reward_the_value_and_the_case(paid, shown):
    """Before the fix a reward of 1.5 was taken as it came: a held-out mean of 1.5 / 8 and exit status 0."""
    task = Generous(masked=3)
    task.paid = paid
    cases = task.cases("eval", 2, seed=0)
    message = _failure(task, ScriptedSolver(cases), cases)
    defined = _line("def reward(self, state):")
    assert message == (f"task sudoku: reward(): expected a number in [0, 1], got {shown} on case {cases[0].id}, at "
                       f"the end of its episode (3 turns) (reward() is at {__file__}:{defined})")


def test_a_step_answer_of_another_shape_is_one_line_naming_what_was_expected():
    task = Terse(masked=2)
    cases = task.cases("train", 1, seed=0)
    message = _failure(task, ScriptedSolver(cases), cases)
    assert message.startswith("task sudoku: step(): expected (observation str, done bool), got 'OK: placed ")
    assert f"on case {cases[0].id}, turn 1, given the reply 'set " in message
    assert message.endswith(f"(step() is at {__file__}:{_line('return super().step(state, action_text)[0]') - 1})")


@pytest.mark.parametrize("method,where", [
    ("reset", "before its first turn"), ("max_turns", "before its first turn"),
    ("reward", "at the end of its episode (6 turns)"), ("metrics", "at the end of its episode (6 turns)"),
])
def test_every_method_a_rollout_calls_is_named_when_it_raises(method, where):
    """Each named as itself (a step() that calls the broken method is step()'s failure, at the same line)."""
    task = Sudoku(masked=2)
    cases = task.cases("train", 1, seed=0)
    assert task.max_turns(cases[0]) == 6

    def broken(*args):
        raise KeyError(f"no {method} here")

    setattr(task, method, broken)
    message = _failure(task, ScriptedSolver(cases, fumble=[cases[0].puzzle]), cases)  # to the turn budget
    line = _line('raise KeyError(f"no {method} here")')
    assert message == (f"task sudoku: {method}() raised KeyError: 'no {method} here' (at {__file__}:{line}) on case "
                       f"{cases[0].id}, {where}")


@pytest.mark.parametrize("method,value,problem", [
    ("reset", "just text", "expected (state, first observation str), got 'just text'"),
    ("max_turns", 0, "expected an int >= 1, got 0"),
    ("metrics", {"progress": 2.0}, "progress must be in [0, 1] (agent.shaping adds it to the reward), got 2.0"),
    ("metrics", {"moves": float("inf")}, "expected a dict of names to finite numbers; its entry 'moves' is inf"),
    ("metrics", {**{f"m{i}": 1.0 for i in range(30)}, "solved": True},  # named, though the dict is long
     "expected a dict of names to finite numbers; its entry 'solved' is True (a bool: give 1.0 or 0.0)"),
])
def test_other_answers_outside_the_contract_are_named(method, value, problem):
    task = Sudoku(masked=2)
    cases = task.cases("train", 1, seed=0)
    setattr(task, method, lambda *args: value)
    message = _failure(task, ScriptedSolver(cases), cases)
    assert message.startswith(f"task sudoku: {method}(): {problem} on case {cases[0].id}, "), message
