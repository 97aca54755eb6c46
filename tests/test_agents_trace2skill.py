from pathlib import Path

import pytest

from coevolve.agents.rollout import Trajectory
from coevolve.agents.skills import load_skill, write_skill
from coevolve.agents.trace2skill import distill, merge_hierarchically, parse_lessons, select_traces, transcript
from coevolve.engine.base import Completion


def trace(case_id, reward, task="sudoku", feedback="Illegal: 3 is already in row 1."):
    return Trajectory(
        task=task, case_id=case_id,
        messages=[{"role": "system", "content": "Play sudoku."}, {"role": "user", "content": "Puzzle"}],
        actions=["set 1 1 3", "set 1 2 3"], observations=["Puzzle", feedback, "OK: placed 3 at row 1, column 2."],
        reward=reward, turns=2,
    )


NATO = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
        "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


class Teacher:
    """Scripted teacher: replies from a function of the user message; records calls."""

    def __init__(self, reply):
        self.reply = reply
        self.calls = []

    def chat(self, conversations, sampling, seeds=None):
        self.calls.append(conversations)
        return [Completion(text=self.reply(c[-1]["content"])) for c in conversations]


def test_select_keeps_at_most_one_failure_per_case_and_optional_successes():
    traces = [trace("a", 0), trace("a", 0), trace("b", 0), trace("c", 1), trace("c", 1), trace("d", 1)]
    picked = select_traces(traces)
    assert [(t.case_id, t.reward) for t in picked] == [("a", 0), ("b", 0)]
    picked = select_traces(traces, max_failed_per_case=2, successes=1)
    assert [(t.case_id, t.reward) for t in picked] == [("a", 0), ("a", 0), ("b", 0), ("c", 1)]


def test_parse_lessons_keeps_clean_bullets_and_drops_garbage():
    text = ("Lessons:\n- Check the row before placing a digit.\n* check the row before placing a digit\n"
            "1. Never change a given cell of the puzzle.\n- ok\n---\n# Heading\n- "
            + " ".join(NATO * 2) + "\n- spam spam spam spam spam spam spam")
    lessons = parse_lessons(text)
    assert lessons[:2] == ["Check the row before placing a digit.", "Never change a given cell of the puzzle."]
    assert len(lessons) == 3 and lessons[2].endswith("...") and len(lessons[2]) <= 200
    assert parse_lessons("}{}{ ### 123 ---") == []


def test_transcript_cuts_the_middle_of_long_episodes():
    long = trace("a", 0)
    long.actions, long.observations = ["set 1 1 1"] * 60, ["Puzzle"] + ["Illegal: x"] * 60
    text = transcript(long, limit=600)
    assert "Start:" in text and "Outcome: FAILED" in text and "cut" in text and len(text) < 700


def test_hierarchical_merge_calls_the_teacher_per_level():
    teacher = Teacher(lambda user: "- Merged lesson about rows and columns.\n- Merged lesson about given cells.")
    lists = [[f"Lesson number {i} about sudoku."] for i in range(9)]
    merged = merge_hierarchically(teacher, lists, limit=10, group_size=3)
    assert [len(level) for level in teacher.calls] == [3, 1]  # 9 lists -> 3 -> 1
    assert merged == ["Merged lesson about rows and columns.", "Merged lesson about given cells."]


def test_distill_writes_a_valid_skill_from_a_good_teacher(tmp_path: Path):
    def reply(user):
        if "Merged list:" in user:
            return "- Read the row, column and box before each move.\n- Do not repeat a rejected move."
        return "- Read the row, column and box before each move.\n- Do not repeat a rejected move.\n- Fill forced cells first."

    teacher = Teacher(reply)
    traces = [trace(str(i), 0) for i in range(6)] + [trace("0", 0)]
    skill = distill(teacher, traces, tmp_path / "sudoku-distilled", group_size=4)
    assert len(teacher.calls[0]) == 6  # one analyst per selected trace, in one batched call
    loaded = load_skill(tmp_path / "sudoku-distilled")
    assert loaded.name == "sudoku-distilled" == skill.name
    assert "- Do not repeat a rejected move." in loaded.body


@pytest.mark.parametrize(
    "garbage",
    ["", "---\nname: BAD NAME\n---", "}}}}}}", "```python\nprint(1)\n```", "aaaa " * 500, "\n\n\n"],
)
def test_garbage_teacher_still_yields_a_valid_minimal_skill(tmp_path: Path, garbage):
    teacher = Teacher(lambda user: garbage)
    traces = [trace(str(i), 0, feedback=f"Illegal: {i} is already in row {i}.") for i in range(5)]
    distill(teacher, traces, tmp_path / "fallback-skill")
    skill = load_skill(tmp_path / "fallback-skill")
    # built from the environment's own feedback: digits normalised, duplicates gone
    assert "Avoid this mistake seen in past attempts: Illegal: N is already in row N." in skill.body


def test_update_keeps_lessons_of_the_previous_skill(tmp_path: Path):
    previous = write_skill(tmp_path / "old-skill", "d", "# t\n\n- Keep the old insight about boxes.")
    teacher = Teacher(lambda user: "zzz")  # merge output unusable -> inputs carried forward
    skill = distill(teacher, [trace("a", 0)], tmp_path / "new-skill", previous=previous)
    assert "- Keep the old insight about boxes." in skill.body


def test_distill_rejects_no_trajectories_and_bad_folder_names(tmp_path: Path):
    teacher = Teacher(lambda user: "- A perfectly fine lesson here.")
    with pytest.raises(ValueError, match="at least one trajectory"):
        distill(teacher, [], tmp_path / "x")
    with pytest.raises(ValueError, match="lowercase"):
        distill(teacher, [trace("a", 0)], tmp_path / "Not_Valid")
    assert not (tmp_path / "Not_Valid").exists()


def test_merge_prompts_stay_small_enough_for_a_small_context():
    from coevolve.agents.trace2skill import MERGE_CHARS, merge_conversation

    lists = [[f"{' '.join(NATO[:20])} lesson {i} {j}" for j in range(15)] for i in range(4)]
    conversation = merge_conversation(lists, limit=15)
    assert len(conversation[1]["content"]) < MERGE_CHARS + 400
    assert all(f"List {i + 1}:\n- " in conversation[1]["content"] for i in range(4))  # every list is heard
