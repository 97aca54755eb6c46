"""Agent Skills (SKILL.md folders): the format lives in coevolve.base.skills,
shared with heuristic search; these names stay importable from here."""

from coevolve.base.skills import (MAX_DESCRIPTION, MAX_LINES, MAX_NAME, NAME_PATTERN, Skill,  # noqa: F401
                                  SkillError, inject_skills, load_skill, load_skills, parse_skill_text,
                                  render_skill_file, render_skills, validate_skill, write_skill)
