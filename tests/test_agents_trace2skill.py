from pathlib import Path

import pytest

from coevolve.agents.rollout import Trajectory
from coevolve.agents.skills import load_skill, write_skill
from coevolve.agents.trace2skill import (DistillSettings, Patch, apply_patches, distill, distill_best_of,
                                        merge_hierarchically, merge_two, parse_lessons, parse_patches, parse_sections, select_traces, transcript)
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

    def chat(self, conversations, sampling, seeds=None, constraints=None):
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


def add(section, *rules, support=1):
    return Patch("add", section, tuple((r, support) for r in rules), support)


def test_parse_patches_reads_add_edit_delete_and_drops_garbage():
    text = ("Here is my patch:\nADD Moves: Check the row and the column before each move.\n"
            "EDIT Format: Reply with exactly one move like set 1 2 3.\nDELETE Old tips\n"
            "ADD ???: x\nREMOVE Moves\nADD Checks: ok\n")
    patches = parse_patches(text)
    assert set(patches) == {"moves", "format", "old tips"}
    assert patches["moves"].op == "add" and patches["moves"].rules == (
        ("Check the row and the column before each move.", 1),)
    assert patches["format"].op == "edit" and patches["old tips"].op == "delete"
    assert parse_patches("}}}} " * 50) == {} and parse_patches("") == {}


def test_a_reasoning_teachers_thinking_is_not_read_as_its_patch_or_lessons():
    """A reasoning model as teacher (servers without a reasoning parser send <think> in the reply): drafts
    in its thinking are not rules; a reply cut off while thinking holds none."""
    thinking = "<think>\nADD Moves: Always guess the first empty cell quickly.\n- Guessing works well enough here.\n"
    answer = "</think>\nADD Moves: Check the row and the column before each move.\n"
    assert [r for r, _ in parse_patches(thinking + answer)["moves"].rules] == [
        "Check the row and the column before each move."]
    assert parse_patches(thinking) == {} and parse_lessons(thinking) == []
    assert parse_lessons(thinking + "</think>\n- Never change a given cell of the puzzle.") == [
        "Never change a given cell of the puzzle."]


def test_merge_resolves_conflicts_by_support():
    rule = "Check the row and the column before each move."
    # edits and adds of one section become one edit, the rule most analysts gave first
    merged = merge_two({"moves": add("Moves", rule)},
                       {"moves": Patch("edit", "Moves", (("Fill the forced cells first of all.", 1), (rule, 1)))})
    assert merged["moves"].op == "edit" and merged["moves"].rules[0] == (rule, 2) and merged["moves"].support == 2
    # a delete loses against more analysts keeping the section, wins with more behind it
    keep = merge_two({"moves": Patch("delete", "Moves")}, {"moves": add("Moves", rule, support=2)})
    assert keep["moves"].op == "add"
    gone = merge_two({"moves": Patch("delete", "Moves", support=3)}, {"moves": add("Moves", rule, support=2)})
    assert gone["moves"].op == "delete" and gone["moves"].support == 3
    tie = merge_two({"moves": Patch("delete", "Moves")}, {"moves": add("Moves", rule)})
    assert tie["moves"].op == "add"  # a tie keeps the section: deleting needs a majority


def test_hierarchical_merge_is_one_patch_per_section_and_condenses_per_level():
    teacher = Teacher(lambda user: "- Merged rule about rows and columns.\n- Merged rule about given cells.")
    sets = [{"moves": add("Moves", f"Lesson number {i} about sudoku rows.")} for i in range(9)]
    merged = merge_hierarchically(teacher, sets, group_size=3)
    assert list(merged) == ["moves"]
    # level 1: 3 nodes of 3 rules (no condensation); level 2: 9 rules > MAX_RULES -> one teacher call
    assert [len(level) for level in teacher.calls] == [1]
    assert [r for r, _ in merged["moves"].rules] == ["Merged rule about rows and columns.",
                                                     "Merged rule about given cells."]
    # without a teacher (or with garbage) the best-supported rules are kept
    cut = merge_hierarchically(None, sets, group_size=3)
    assert len(cut["moves"].rules) == 5


def test_apply_patches_adds_edits_and_deletes_sections(tmp_path: Path):
    previous = write_skill(tmp_path / "old-skill", "d",
                           "# t\n\n## Moves\n- Keep the old insight about boxes.\n\n## Old tips\n- Guess when unsure.")
    sections = parse_sections(previous)
    assert sections == {"moves": ("Moves", ["Keep the old insight about boxes."]),
                        "old tips": ("Old tips", ["Guess when unsure."])}
    out = apply_patches(sections, {"moves": add("Moves", "Read the empty cells list first."),
                                   "old tips": Patch("delete", "Old tips"),
                                   "format": Patch("edit", "Format", (("Reply with one move only.", 1),))})
    assert out == {"moves": ("Moves", ["Keep the old insight about boxes.", "Read the empty cells list first."]),
                   "format": ("Format", ["Reply with one move only."])}
    assert sections["moves"][1] == ["Keep the old insight about boxes."]  # the input is not changed
    # a skill written before sections existed: its bullets are the General section
    legacy = write_skill(tmp_path / "legacy", "d", "# t\n\n- An old lesson about rows.")
    assert parse_sections(legacy) == {"general": ("General", ["An old lesson about rows."])}


def test_error_and_success_analysts_run_in_one_batch_and_patch_the_skill(tmp_path: Path):
    def reply(user):
        if "Merged rules:" in user:
            return "zzz"
        return "ADD Moves: Read the row, column and box before each move.\nDELETE Luck"

    teacher = Teacher(reply)
    previous = write_skill(tmp_path / "prev", "d", "# t\n\n## Luck\n- Guess boldly when unsure.")
    traces = [trace(str(i), 0) for i in range(4)] + [trace("9", 1.0)]
    skill, _ = distill(teacher, traces, tmp_path / "sudoku-distilled", previous=previous,
                       settings=DistillSettings(successes=1))
    first = teacher.calls[0]
    assert len(first) == 5  # 4 error analysts and 1 success analyst, one batched call
    assert sum("error analyst" in c[0]["content"] for c in first) == 4
    assert sum("success analyst" in c[0]["content"] for c in first) == 1
    assert all("Guess boldly when unsure." in c[1]["content"] for c in first)  # analysts see the current skill
    loaded = load_skill(tmp_path / "sudoku-distilled")
    assert "## Moves\n- Read the row, column and box before each move." in loaded.body
    assert "Luck" not in loaded.body  # five analysts deleted it, none kept it
    assert loaded.name == skill.name == "sudoku-distilled"


class NarrowTeacher(Teacher):
    """An endpoint that refuses (HTTP 400, too long) the analyses of the traces whose feedback names a number in
    `refuse`, answering the rest, as OpenAIGenerator.chat does (ContextLengthError.replies)."""

    def __init__(self, reply, refuse, engine=False):
        super().__init__(reply)
        self.refuse, self.engine, self.sizes = refuse, engine, []

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        from coevolve.engine.base import ContextLengthError

        refused = [any(f"Illegal: {i} is" in c[-1]["content"] for i in self.refuse) for c in conversations]
        self.sizes.append(len(conversations))
        if self.engine and any(refused):  # the in-process engine refuses the whole call, naming the long ones
            self.refused = sum(refused)
            too_long = [i for i, r in enumerate(refused) if r]
            raise ContextLengthError.prompt(2100, 2048, too_long[0], too_long)
        replies = super().chat(conversations, sampling, seeds, constraints)
        if self.engine:
            return replies
        self.refused = sum(refused)
        if not any(refused):
            return replies
        raise ContextLengthError("http://127.0.0.1:9/v1 refused a prompt longer than its model's context",
                                 refused.index(True), replies=[None if r else c for r, c in zip(refused, replies)])


@pytest.mark.parametrize("engine", [False, True], ids=["endpoint", "engine"])
def test_an_analysis_the_teacher_refuses_as_too_long_found_nothing_and_the_others_patch(tmp_path: Path, engine):
    """An endpoint answers the others in the same call; the in-process engine refuses the whole call, naming
    the long ones, and the others are asked again without them."""
    from coevolve.base.errors import UsageError

    reply = lambda user: "ADD Moves: Read the row, column and box before each move."  # noqa: E731
    traces = [trace(str(i), 0, feedback=f"Illegal: {i} is already in row {i}.") for i in range(3)]
    teacher = NarrowTeacher(reply, refuse={"1"}, engine=engine)
    distill(teacher, traces, tmp_path / "partly")
    assert teacher.refused == 1 and teacher.sizes == ([3, 2] if engine else [3])
    body = load_skill(tmp_path / "partly").body
    assert "Read the row, column and box before each move." in body
    with pytest.raises(UsageError, match="every trajectory analysis was refused"):
        distill(NarrowTeacher(reply, refuse={"0", "1", "2"}, engine=engine), traces, tmp_path / "none")


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


def test_best_of_n_keeps_the_seed_that_scores_best_on_validation(tmp_path: Path):
    replies = iter(["ADD Moves: Rule from the first distillation seed.",
                    "ADD Moves: Rule from the second distillation seed.",
                    "ADD Moves: Rule from the third distillation seed."])
    teacher = Teacher(lambda user: next(replies))
    scores = {"first": 0.2, "second": 0.6, "third": 0.4}
    seen = []

    def score(skill):
        seen.append(skill.body)
        return next(v for k, v in scores.items() if f"from the {k} " in skill.body)

    skill, table = distill_best_of(teacher, [trace("a", 0)], tmp_path / "best", score, n=3)
    assert len(seen) == 3 and "second distillation seed" in skill.body
    assert [row["chosen"] for row in table] == [False, True, False]
    assert ["origins" in row for row in table] == [False, True, False]  # where the kept skill's rules came from
    assert load_skill(tmp_path / "best").body == skill.body
    with pytest.raises(ValueError, match="seeds must be >= 1"):
        distill_best_of(teacher, [trace("a", 0)], tmp_path / "best", score, n=0)


def test_distill_rejects_no_trajectories_and_bad_folder_names(tmp_path: Path):
    teacher = Teacher(lambda user: "ADD Moves: A perfectly fine rule here.")
    with pytest.raises(ValueError, match="at least one trajectory"):
        distill(teacher, [], tmp_path / "x")
    with pytest.raises(ValueError, match="lowercase"):
        distill(teacher, [trace("a", 0)], tmp_path / "Not_Valid")
    assert not (tmp_path / "Not_Valid").exists()


def test_analyst_prompts_stay_small_enough_for_a_small_context():
    from coevolve.agents.trace2skill import analyst_conversation, skill_outline

    long = trace("a", 0, feedback=" ".join(NATO) * 20)
    long.actions = [" ".join(NATO)] * 40
    long.observations = ["Puzzle"] + [" ".join(NATO) * 5] * 40
    sections = {f"s{i}": (f"Section {i}", [" ".join(NATO[:12])] * 5) for i in range(8)}
    conversation = analyst_conversation(long, skill_outline(sections))
    assert len(conversation[1]["content"]) < 4200  # about 1,100 tokens of a 2,048-token context
