"""Trace2Skill: distil agent trajectories into one Agent Skill.

1. select traces: at most `max_failed_per_case` failures per (task, case),
   optionally a few successes;
2. analysts (one teacher call per trace, batched) write short lessons;
3. lesson lists are merged hierarchically, `group_size` lists per teacher
   call, level by level, until one list remains;
4. the SKILL.md is assembled by code from the merged lessons, so it is valid
   whatever the teacher wrote.

The teacher is any Generator: the local engine or an OpenAI-compatible
endpoint. A weak teacher's garbage is filtered at every step; when a step
yields no usable lesson, its inputs are carried forward unchanged, and when
no lesson survives at all the skill is built from the environment's own
feedback lines seen in the failed traces.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Sequence

from coevolve.agents.rollout import Trajectory, derive_seed
from coevolve.agents.skills import MAX_LINES, Skill, write_skill
from coevolve.engine.base import Generator, Message, Sampling

ANALYST_SYSTEM = (
    "You review one attempt of an AI agent at a task. Write 2 to 4 short, general lessons that would help "
    "the agent do better next time. One lesson per line, each line starting with '- '. No other text."
)
MERGE_SYSTEM = (
    "You merge lists of lessons for an AI agent into one list. Remove duplicates, keep the most useful "
    "general lessons, at most {limit}. One lesson per line, each line starting with '- '. No other text."
)
TRANSCRIPT_CHARS = 2400  # keeps analyst prompts inside a 2048-token context
MERGE_CHARS = 3200  # likewise for merge prompts
LESSON_MIN_CHARS, LESSON_MAX_CHARS = 12, 200
DEFAULT_SAMPLING = Sampling(temperature=0.3, max_tokens=200)


def select_traces(
    trajectories: Sequence[Trajectory], max_failed_per_case: int = 1, successes: int = 0
) -> list[Trajectory]:
    """Failed traces (reward < 1), at most `max_failed_per_case` per (task,
    case), then up to `successes` successful ones (one per case)."""
    failed: dict[tuple[str, str], list[Trajectory]] = {}
    solved: dict[tuple[str, str], Trajectory] = {}
    for t in trajectories:
        key = (t.task, t.case_id)
        if t.reward < 1.0:
            bucket = failed.setdefault(key, [])
            if len(bucket) < max_failed_per_case:
                bucket.append(t)
        else:
            solved.setdefault(key, t)
    picked = [t for bucket in failed.values() for t in bucket]
    picked += list(solved.values())[:successes]
    return picked


def transcript(trajectory: Trajectory, limit: int = TRANSCRIPT_CHARS) -> str:
    """Compact text of one episode; the middle is cut when too long, since the
    start (the problem) and the end (how it failed) matter most."""
    parts = [f"Start:\n{trajectory.observations[0]}"]
    for turn, (action, observation) in enumerate(zip(trajectory.actions, trajectory.observations[1:]), start=1):
        parts.append(f"Turn {turn} action: {action[:300]}\nFeedback: {observation[:300]}")
    outcome = "SOLVED" if trajectory.reward >= 1.0 else "FAILED"
    parts.append(f"Outcome: {outcome} (reward {trajectory.reward:g}, {trajectory.turns} turns)")
    text = "\n".join(parts)
    if len(text) <= limit:
        return text
    head, tail = text[: limit // 2], text[-limit // 2 :]
    return f"{head}\n[... middle of the episode cut ...]\n{tail}"


def analyst_conversation(trajectory: Trajectory) -> list[Message]:
    task_rules = trajectory.messages[0]["content"] if trajectory.messages else ""
    user = f"The agent's instructions were:\n{task_rules[:800]}\n\nThe attempt:\n{transcript(trajectory)}\n\nLessons:"
    return [{"role": "system", "content": ANALYST_SYSTEM}, {"role": "user", "content": user}]


def merge_conversation(lesson_lists: Sequence[Sequence[str]], limit: int) -> list[Message]:
    # each list gets an equal share of MERGE_CHARS, so a merge prompt always
    # fits a small model's context; a list's first lessons are its best
    share = MERGE_CHARS // max(1, len(lesson_lists))
    blocks = []
    for lessons in lesson_lists:
        kept, used = [], 0
        for lesson in lessons:
            if kept and used + len(lesson) > share:
                break
            kept.append(f"- {lesson}")
            used += len(lesson) + 3
        blocks.append("\n".join(kept))
    user = "\n\n".join(f"List {i + 1}:\n{block}" for i, block in enumerate(blocks)) + "\n\nMerged list:"
    return [{"role": "system", "content": MERGE_SYSTEM.format(limit=limit)}, {"role": "user", "content": user}]


_YAML_KEY = re.compile(r"^[a-z_]+:\s")
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)])\s+(.*)$")


def parse_lessons(text: str, limit: int = 20) -> list[str]:
    """Clean one-line lessons from teacher text; garbage yields []."""
    lines = text.splitlines()
    bullets = [m.group(1) for m in map(_BULLET.match, lines) if m]
    candidates = bullets if bullets else [s for line in lines for s in re.split(r"(?<=[.!?])\s+", line)]
    lessons: list[str] = []
    seen: set[str] = set()
    for raw in candidates:
        lesson = " ".join(raw.replace("`", "'").split()).strip(" -*")
        if lesson.startswith("#") or "---" in lesson or lesson.endswith(":") or _YAML_KEY.match(lesson):
            continue  # headings, separators, "Lessons:" labels, echoed front matter
        words = re.findall(r"[A-Za-z]{2,}", lesson)
        distinct = len({w.lower() for w in words})
        if len(lesson) < LESSON_MIN_CHARS or len(words) < 4 or distinct < max(3, len(words) // 4):
            continue
        if len(lesson) > LESSON_MAX_CHARS:
            lesson = lesson[: LESSON_MAX_CHARS - 3].rsplit(" ", 1)[0] + "..."
        key = re.sub(r"\W+", " ", lesson.lower()).strip()
        if key in seen:
            continue
        seen.add(key)
        lessons.append(lesson)
        if len(lessons) == limit:
            break
    return lessons


def feedback_lessons(trajectories: Sequence[Trajectory], limit: int = 6) -> list[str]:
    """Lessons from the environment's own error feedback, most frequent first
    (the fallback when the teacher gives nothing usable)."""
    counts: Counter[str] = Counter()
    for t in trajectories:
        for observation in t.observations[1:]:
            first = observation.splitlines()[0].strip() if observation.strip() else ""
            if re.match(r"^(Illegal|Invalid|Error|No code)", first):
                counts[re.sub(r"\d+", "N", first)] += 1
    lessons = [f"Avoid this mistake seen in past attempts: {line}" for line, _ in counts.most_common(limit)]
    if not lessons:
        lessons = ["Follow the action format in the instructions exactly, one action per turn."]
    return lessons


def _dedupe(lessons: Sequence[str], limit: int) -> list[str]:
    return parse_lessons("\n".join(f"- {lesson}" for lesson in lessons), limit=limit)


def merge_hierarchically(
    teacher: Generator,
    lesson_lists: list[list[str]],
    limit: int,
    group_size: int = 4,
    sampling: Sampling = DEFAULT_SAMPLING,
    seed: int = 0,
) -> list[str]:
    """Merge `group_size` lists per teacher call, level by level (each level is
    one batched call), until one list remains."""
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2, got {group_size}")
    lists = [lessons for lessons in lesson_lists if lessons]
    level = 0
    while len(lists) > 1:
        groups = [lists[i : i + group_size] for i in range(0, len(lists), group_size)]
        to_merge = [g for g in groups if len(g) > 1]
        completions = teacher.chat(
            [merge_conversation(g, limit) for g in to_merge],
            sampling,
            seeds=[derive_seed(seed, "merge", level, i) for i in range(len(to_merge))],
        )
        merged_iter = iter(completions)
        next_lists = []
        for group in groups:
            if len(group) == 1:
                next_lists.append(group[0])
                continue
            merged = parse_lessons(next(merged_iter).text, limit=limit)
            # a merge that lost almost everything is garbage: keep the inputs instead
            if len(merged) < min(2, sum(map(len, group))):
                merged = _dedupe([lesson for lessons in group for lesson in lessons], limit)
            next_lists.append(merged)
        lists = next_lists
        level += 1
    return _dedupe(lists[0], limit) if lists else []


def build_body(title: str, lessons: Sequence[str], source: str) -> str:
    lines = [f"# {title}", "", f"Lessons distilled from {source}. Apply them on every turn.", ""]
    lines += [f"- {lesson}" for lesson in lessons]
    return "\n".join(lines)


def existing_lessons(skill: Skill | None) -> list[str]:
    if skill is None:
        return []
    return [m.group(1).strip() for m in map(_BULLET.match, skill.body.splitlines()) if m]


def distill(
    teacher: Generator,
    trajectories: Sequence[Trajectory],
    out_dir: str | Path,
    description: str | None = None,
    previous: Skill | None = None,
    max_failed_per_case: int = 1,
    successes: int = 0,
    max_lessons: int = 15,
    group_size: int = 4,
    sampling: Sampling = DEFAULT_SAMPLING,
    seed: int = 0,
) -> Skill:
    """Distil `trajectories` (plus the lessons of `previous`, when updating a
    skill) into `out_dir/SKILL.md`; returns the written, valid skill."""
    out_dir = Path(out_dir)
    if not trajectories:
        raise ValueError("distill needs at least one trajectory")
    max_lessons = min(max_lessons, MAX_LINES - 12)
    traces = select_traces(trajectories, max_failed_per_case=max_failed_per_case, successes=successes)
    lesson_lists: list[list[str]] = []
    if previous is not None and existing_lessons(previous):
        lesson_lists.append(_dedupe(existing_lessons(previous), max_lessons))
    if traces:
        completions = teacher.chat(
            [analyst_conversation(t) for t in traces],
            sampling,
            seeds=[derive_seed(seed, "analyst", i) for i in range(len(traces))],
        )
        lesson_lists += [parse_lessons(c.text, limit=6) for c in completions]
    lessons = merge_hierarchically(teacher, lesson_lists, max_lessons, group_size, sampling, seed)
    if not lessons:
        lessons = feedback_lessons(traces or trajectories)
    task = trajectories[0].task
    if description is None:
        description = f"Lessons for the {task} agent task, distilled from its trajectories with Trace2Skill."
    source = f"{len(traces)} selected of {len(trajectories)} {task} trajectories"
    body = build_body(f"{out_dir.name} (Trace2Skill)", lessons, source)
    return write_skill(out_dir, description, body)
