"""Agent Skills: folders holding a SKILL.md with YAML front matter (`name`,
`description`) and a markdown body of instructions. Skills are appended to an
agent's system prompt. Writing goes through `write_skill`, which refuses to
produce an invalid file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from coevolve.base.durable import atomic_write_text

NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_LINES = 80  # whole file, front matter included


class SkillError(ValueError):
    """A SKILL.md or skill folder that breaks the format rules."""


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    body: str
    path: Path | None = None

    def text(self) -> str:
        return render_skill_file(self.name, self.description, self.body)


def render_skill_file(name: str, description: str, body: str) -> str:
    description = " ".join(description.split())
    return f"---\nname: {name}\ndescription: {description}\n---\n\n{body.strip()}\n"


def parse_skill_text(text: str, source: str = "SKILL.md") -> Skill:
    """Parse front matter and body; raises SkillError naming the problem."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillError(f"{source}: must start with a '---' front matter line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise SkillError(f"{source}: front matter is not closed by '---'") from None
    fields: dict[str, str] = {}
    for number, line in enumerate(lines[1:end], start=2):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise SkillError(f"{source}:{number}: front matter line is not 'key: value'")
        fields[key.strip()] = value.strip().strip("'\"")
    for key in ("name", "description"):
        if not fields.get(key):
            raise SkillError(f"{source}: front matter lacks {key!r}")
    body = "\n".join(lines[end + 1 :]).strip()
    return Skill(name=fields["name"], description=fields["description"], body=body)


def name_problem(name: str) -> str | None:
    """What is wrong with a skill's name (its folder's name), or None."""
    if not NAME_PATTERN.match(name) or len(name) > MAX_NAME:
        return f"name {name!r} must be lowercase letters, digits and single hyphens (<= {MAX_NAME})"
    return None


def validate_skill(skill: Skill, folder_name: str | None = None, max_lines: int = MAX_LINES) -> list[str]:
    """Every broken format rule, as readable messages (empty list = valid)."""
    problem = name_problem(skill.name)
    problems = [problem] if problem else []
    if folder_name is not None and skill.name != folder_name:
        problems.append(f"name {skill.name!r} must equal the folder name {folder_name!r}")
    if not skill.description.strip() or len(skill.description) > MAX_DESCRIPTION:
        problems.append(f"description must be 1..{MAX_DESCRIPTION} characters")
    if "\n" in skill.description or skill.description.strip().startswith(("|", ">")):
        problems.append("description must be one line of plain text")
    if not skill.body.strip():
        problems.append("body is empty")
    if "\n---" in "\n" + skill.body:
        problems.append("body must not contain a '---' line (it would read as front matter)")
    total = len(skill.text().splitlines())
    if total > max_lines:
        problems.append(f"SKILL.md has {total} lines, the limit is {max_lines}")
    return problems


def load_skill(folder: str | Path, max_lines: int = MAX_LINES) -> Skill:
    """Load and validate `folder/SKILL.md`. `folder` may name that SKILL.md itself: the path a run
    table prints for a version goes to --skill as it is."""
    given = Path(folder)
    folder = given.parent if given.name == "SKILL.md" and given.is_file() else given
    file = folder / "SKILL.md"
    if not given.exists():
        raise SkillError(f"{given}: not found (a skill is a folder holding a SKILL.md)")
    if not folder.is_dir():
        raise SkillError(f"{given}: a file, not a skill folder (give the folder holding a SKILL.md, or the SKILL.md)")
    if not file.is_file():
        raise SkillError(f"{given}: no SKILL.md in this skill folder")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        where = f"byte {exc.object[exc.start]:#04x} at position {exc.start}"
        raise SkillError(f"{file} is not UTF-8 text ({where}); SKILL.md files must be UTF-8") from None
    except OSError as exc:
        raise SkillError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    skill = parse_skill_text(text, source=str(file))
    problems = validate_skill(skill, folder_name=folder.name, max_lines=max_lines)
    if problems:
        raise SkillError(f"{file}: " + "; ".join(problems))
    return Skill(skill.name, skill.description, skill.body, path=folder)


def write_skill(folder: str | Path, description: str, body: str, max_lines: int = MAX_LINES) -> Skill:
    """Validate, then write `folder/SKILL.md` atomically (name = folder name).
    Nothing is written when the skill is invalid."""
    folder = Path(folder)
    skill = Skill(name=folder.name, description=" ".join(description.split()), body=body.strip())
    problems = validate_skill(skill, folder_name=folder.name, max_lines=max_lines)
    if problems:
        raise SkillError(f"{folder}: refusing to write an invalid SKILL.md: " + "; ".join(problems))
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "SKILL.md", skill.text())
    return Skill(skill.name, skill.description, skill.body, path=folder)


def load_skills(folders: Sequence[str | Path]) -> list[Skill]:
    return [load_skill(folder) for folder in folders]


def render_skills(skills: Sequence[Skill]) -> str:
    """The text appended to the system prompt for these skills."""
    blocks = [f"## Skill: {s.name}\n{s.description}\n\n{s.body.strip()}" for s in skills]
    return "\n\n".join(blocks)


def inject_skills(system_prompt: str, skills: Sequence[Skill]) -> str:
    """The system prompt with the skills appended (unchanged when none)."""
    text = render_skills(skills)
    return f"{system_prompt}\n\n{text}" if text else system_prompt
