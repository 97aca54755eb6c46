from pathlib import Path

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
