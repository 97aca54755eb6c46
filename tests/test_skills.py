from pathlib import Path

import pytest

from coevolve.agents.skills import (
    MAX_LINES, Skill, SkillError, inject_skills, load_skill, parse_skill_text, validate_skill, write_skill,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["sudoku-basics", "math-react"])
def test_shipped_seed_skills_follow_the_format(name):
    skill = load_skill(REPO / "skills" / name)
    assert skill.name == name and skill.description and skill.body
    assert len((REPO / "skills" / name / "SKILL.md").read_text().splitlines()) <= MAX_LINES


def test_every_folder_under_skills_is_a_valid_skill():
    folders = [p for p in (REPO / "skills").iterdir() if p.is_dir()]
    assert folders
    for folder in folders:
        load_skill(folder)


def test_round_trip_and_atomic_valid_write(tmp_path: Path):
    skill = write_skill(tmp_path / "my-skill", "Does things.\n  Well.", "- one\n- two")
    assert skill.description == "Does things. Well."
    again = load_skill(tmp_path / "my-skill")
    assert (again.name, again.description, again.body) == ("my-skill", "Does things. Well.", "- one\n- two")
    assert not list((tmp_path / "my-skill").glob("*.tmp"))


@pytest.mark.parametrize(
    "folder,description,body,problem",
    [
        ("Bad_Name", "d", "b", "lowercase"),
        ("ok-name", "", "b", "description"),
        ("ok-name", "d", "", "body is empty"),
        ("ok-name", "d", "x\n---\ny", "'---'"),
        ("ok-name", "d", "\n".join(f"- line {i}" for i in range(90)), "the limit is 80"),
    ],
)
def test_invalid_skills_are_never_written(tmp_path: Path, folder, description, body, problem):
    with pytest.raises(SkillError, match=problem):
        write_skill(tmp_path / folder, description, body)
    assert not (tmp_path / folder / "SKILL.md").exists()


@pytest.mark.parametrize(
    "text,problem",
    [
        ("name: x\n", "must start with"),
        ("---\nname: x\n", "not closed"),
        ("---\nname: x\n---\nbody", "lacks 'description'"),
        ("---\njust words\n---\nbody", "not 'key: value'"),
    ],
)
def test_parse_errors_name_the_problem(text, problem):
    with pytest.raises(SkillError, match=problem):
        parse_skill_text(text)


def test_name_must_equal_the_folder(tmp_path: Path):
    folder = tmp_path / "real-name"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: other-name\ndescription: d\n---\nbody\n")
    with pytest.raises(SkillError, match="folder name 'real-name'"):
        load_skill(folder)
    with pytest.raises(SkillError, match="no SKILL.md"):
        load_skill(tmp_path)
    with pytest.raises(SkillError, match=r"nowhere: not found \(a skill is a folder holding a SKILL.md\)"):
        load_skill(tmp_path / "nowhere")


def test_injection_appends_skills_to_the_system_prompt():
    skill = Skill("a-skill", "When to use it.", "- Do X first.")
    assert inject_skills("Rules.", []) == "Rules."
    prompt = inject_skills("Rules.", [skill])
    assert prompt.startswith("Rules.\n\n") and "a-skill" in prompt and "- Do X first." in prompt
    assert validate_skill(skill) == []
