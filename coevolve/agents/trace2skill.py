"""Trace2Skill, as published: trajectories -> skill patches -> one skill.

1. **Analysts in parallel** (one batched teacher call): an *error analyst*
   per selected failed trajectory (at most `max_failed_per_case` per case)
   and a *success analyst* per selected solved one (up to `successes`). Each
   sees the current skill and one trajectory and proposes a **patch**: lines
   `ADD <section>: <rule>`, `EDIT <section>: <rule>` (the section becomes
   these rules) or `DELETE <section>`.
2. **Hierarchical merge**: patch sets are merged `group_size` at a time,
   level by level, until one remains. Conflicts are resolved by rule, so the
   result never holds two ops on one section: a delete wins only with more
   analysts behind it than the edits and adds of that section together;
   edits and adds of one section become one edit (their rules, most
   supported first); a section with more than `MAX_RULES` rules is condensed
   by the teacher (batched per level), or cut to its most supported rules
   when the teacher's answer is unusable.
3. The merged patch is applied to the previous skill (or an empty one) and
   the SKILL.md is assembled by code, so it is valid whatever the teacher wrote.
4. **Best of N** (`distill_best_of`, N = 3 in the paper): N distillations
   with different analyst seeds, each scored by the agent on a validation
   split; the best is written.

Post-hoc distillation (once, from a run's trajectories) is the paper's
setting and our default; distilling every few rounds during a run
(`esopt+trace2skill`'s interleaving) is our extension. The teacher is any
Generator: the engine itself or an OpenAI-compatible endpoint. A weak
teacher's garbage is filtered at every step; a failed trajectory whose
analyst proposes nothing usable contributes a patch built from the
environment's own error feedback.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from coevolve.agents.rollout import Trajectory, derive_seed
from coevolve.agents.skills import Skill, SkillError, validate_skill, write_skill
from coevolve.engine.base import Generator, Message, Sampling

ERROR_ANALYST = (
    "You are an error analyst. An AI agent FAILED the task below. Propose changes to its skill (its written "
    "rules) that would have prevented the failure. Reply only with lines of these forms:\n"
    "ADD <section>: <rule>\nEDIT <section>: <rule>\nDELETE <section>\n"
    "Sections are short titles such as Moves, Checks, Format. One to three lines."
)
SUCCESS_ANALYST = (
    "You are a success analyst. An AI agent SOLVED the task below. Propose changes to its skill (its written "
    "rules) that keep what made it succeed. Reply only with lines of these forms:\n"
    "ADD <section>: <rule>\nEDIT <section>: <rule>\nDELETE <section>\n"
    "Sections are short titles such as Moves, Checks, Format. One to three lines."
)
CONDENSE_SYSTEM = (
    "Merge these rules for an AI agent into at most {limit} rules without losing any idea. "
    "One rule per line, each line starting with '- '. No other text."
)
OPS = ("add", "edit", "delete")
MAX_RULES = 5  # per section
MAX_SECTIONS = 8
TRANSCRIPT_CHARS = 2000  # keeps analyst prompts (skill + trajectory) inside a 2048-token context
SKILL_CHARS = 1200
LESSON_MIN_CHARS, LESSON_MAX_CHARS = 12, 200
DEFAULT_SAMPLING = Sampling(temperature=0.3, max_tokens=160)


@dataclass(frozen=True)
class DistillSettings:
    """How a distillation runs, passed whole through `distill`,
    `distill_best_of` and `distill_patches`: which traces the analysts read,
    how patches merge, how the teacher samples, and the seed its calls derive from."""

    max_failed_per_case: int = 1  # error analyses per case
    successes: int = 4  # success analyses in all
    group_size: int = 4  # patch sets merged per node of the merge tree
    sampling: Sampling = DEFAULT_SAMPLING
    seed: int = 0


@dataclass(frozen=True)
class Patch:
    """One edit of one section; `support` counts the analysts behind it and
    `rules` carries (rule, support) so merges can rank them."""

    op: str
    section: str
    rules: tuple[tuple[str, int], ...] = ()
    support: int = 1

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"patch op must be one of {OPS}, got {self.op!r}")
        if self.op != "delete" and not self.rules:
            raise ValueError(f"an {self.op} patch needs at least one rule")


PatchSet = dict[str, Patch]  # section key -> its one patch: a merged set has no conflicts by construction


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


def section_key(title: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", title.lower()))


def clean_title(title: str) -> str | None:
    words = re.findall(r"[A-Za-z0-9]+", title)[:5]
    if not words or not any(re.match(r"[A-Za-z]{3,}", w) for w in words):
        return None
    return " ".join(words).capitalize()[:40]


_PATCH_LINE = re.compile(r"^\W*(ADD|EDIT|DELETE)\b\s*(?:section\s*)?[\[\"'<]?([^:\]\">]{1,60})[\]\">']?\s*(?::\s*(.*))?$",
                         re.IGNORECASE)


def parse_patches(text: str) -> PatchSet:
    """The patch an analyst wrote; lines that are not `OP <section>[: rule]`
    with a usable title and rule are dropped (garbage yields {}). Within one
    analyst's patch the later op on a section wins."""
    patches: PatchSet = {}
    titles: dict[str, str] = {}
    for line in text.splitlines():
        match = _PATCH_LINE.match(line.strip())
        if not match:
            continue
        op, title = match.group(1).lower(), clean_title(match.group(2))
        if title is None:
            continue
        key = section_key(title)
        titles.setdefault(key, title)
        if op == "delete":
            patches[key] = Patch("delete", titles[key])
            continue
        rules = parse_lessons(f"- {match.group(3) or ''}", limit=1)
        if not rules:
            continue
        earlier = patches.get(key)
        if earlier is not None and earlier.op != "delete":
            op = "edit" if "edit" in (op, earlier.op) else "add"
            merged = tuple(dict.fromkeys([r for r, _ in earlier.rules] + rules))
            patches[key] = Patch(op, titles[key], tuple((r, 1) for r in merged))
        else:
            patches[key] = Patch(op, titles[key], ((rules[0], 1),))
    return patches


def feedback_patch(trajectory: Trajectory) -> PatchSet:
    """An error analyst's stand-in built from the environment's own error
    lines in one failed trajectory (used when the teacher proposes nothing usable)."""
    lessons = feedback_lessons([trajectory], limit=3)
    return {"mistakes to avoid": Patch("add", "Mistakes to avoid", tuple((lesson, 1) for lesson in lessons))}


def merge_two(a: PatchSet, b: PatchSet) -> PatchSet:
    """One patch per section out of two sets, by the conflict rules in the module doc."""
    out: PatchSet = dict(a)
    for key, patch in b.items():
        if key not in out:
            out[key] = patch
            continue
        out[key] = _resolve(out[key], patch)
    return out


def _resolve(x: Patch, y: Patch) -> Patch:
    deletes = sum(p.support for p in (x, y) if p.op == "delete")
    keeps = sum(p.support for p in (x, y) if p.op != "delete")
    title = x.section
    if deletes > keeps:
        return Patch("delete", title, support=deletes)
    if not keeps:  # two deletes
        return Patch("delete", title, support=deletes)
    counts: Counter[str] = Counter()
    order: dict[str, str] = {}
    for p in (x, y):
        if p.op == "delete":
            continue
        for rule, support in p.rules:
            key = re.sub(r"\W+", " ", rule.lower()).strip()
            order.setdefault(key, rule)
            counts[key] += support
    ranked = tuple((order[k], n) for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    op = "edit" if any(p.op == "edit" for p in (x, y)) else "add"
    return Patch(op, title, ranked, support=keeps)


def condense_conversation(rules: Sequence[str], limit: int) -> list[Message]:
    listing = "\n".join(f"- {rule}" for rule in rules)
    return [{"role": "system", "content": CONDENSE_SYSTEM.format(limit=limit)},
            {"role": "user", "content": f"Rules:\n{listing}\n\nMerged rules:"}]


def merge_hierarchically(
    teacher: Generator | None,
    patch_sets: Sequence[PatchSet],
    group_size: int = 4,
    sampling: Sampling = DEFAULT_SAMPLING,
    seed: int = 0,
) -> PatchSet:
    """Merge `group_size` patch sets per node, level by level, until one
    remains; at each level the sections that grew past MAX_RULES are
    condensed by the teacher in one batched call (None: cut by support)."""
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2, got {group_size}")
    sets = [s for s in patch_sets if s]
    level = 0
    while len(sets) > 1:
        merged = []
        for i in range(0, len(sets), group_size):
            node: PatchSet = {}
            for s in sets[i: i + group_size]:
                node = merge_two(node, s)
            merged.append(node)
        sets = [_condense(teacher, node, sampling, derive_seed(seed, "condense", level, n))
                for n, node in enumerate(merged)]
        level += 1
    return sets[0] if sets else {}


def _condense(teacher: Generator | None, node: PatchSet, sampling: Sampling, seed: int) -> PatchSet:
    crowded = [k for k, p in node.items() if p.op != "delete" and len(p.rules) > MAX_RULES]
    if not crowded:
        return node
    answers = [None] * len(crowded)
    if teacher is not None:
        completions = teacher.chat([condense_conversation([r for r, _ in node[k].rules], MAX_RULES) for k in crowded],
                                   sampling, seeds=[derive_seed(seed, i) for i in range(len(crowded))])
        answers = [parse_lessons(c.text, limit=MAX_RULES) for c in completions]
    out = dict(node)
    for key, answer in zip(crowded, answers):
        patch = node[key]
        # a condensation that lost most rules is garbage: keep the best-supported ones
        if not answer or len(answer) < min(2, MAX_RULES):
            out[key] = replace(patch, rules=patch.rules[:MAX_RULES])
        else:
            support = max(n for _, n in patch.rules)
            out[key] = replace(patch, rules=tuple((rule, support) for rule in answer))
    return out


# ------------------------------------------------------------ skill sections

_HEADING = re.compile(r"^##\s+(.+?)\s*$")


def parse_sections(skill: Skill | None) -> dict[str, tuple[str, list[str]]]:
    """A skill body as {section key: (title, rules)}: `## Title` headings,
    `- rule` bullets. Bullets before any heading form a "General" section."""
    sections: dict[str, tuple[str, list[str]]] = {}
    if skill is None:
        return sections
    title = "General"
    for line in skill.body.splitlines():
        heading = _HEADING.match(line)
        if heading:
            title = clean_title(heading.group(1)) or "General"
            continue
        bullet = _BULLET.match(line)
        if bullet:
            sections.setdefault(section_key(title), (title, []))[1].append(bullet.group(1).strip())
    return sections


def apply_patches(sections: dict[str, tuple[str, list[str]]], patches: PatchSet) -> dict[str, tuple[str, list[str]]]:
    """The sections after one merged patch (a new dict; the input is unchanged)."""
    out = {k: (title, list(rules)) for k, (title, rules) in sections.items()}
    for key, patch in patches.items():
        rules = [r for r, _ in patch.rules]
        if patch.op == "delete":
            out.pop(key, None)
        elif patch.op == "edit" or key not in out:
            out[key] = (out.get(key, (patch.section, []))[0], rules[:MAX_RULES])
        else:
            seen = {re.sub(r"\W+", " ", r.lower()).strip() for r in out[key][1]}
            extra = [r for r in rules if re.sub(r"\W+", " ", r.lower()).strip() not in seen]
            out[key] = (out[key][0], (out[key][1] + extra)[:MAX_RULES])
    # the best-supported sections first when there are too many to keep
    return dict(list(out.items())[:MAX_SECTIONS])


def render_skill_body(title: str, sections: dict[str, tuple[str, list[str]]], source: str) -> str:
    lines = [f"# {title}", "", f"Distilled from {source}. Apply these rules on every turn."]
    for section_title, rules in sections.values():
        lines += ["", f"## {section_title}"] + [f"- {rule}" for rule in rules]
    return "\n".join(lines)


def skill_outline(sections: dict[str, tuple[str, list[str]]], limit: int = SKILL_CHARS) -> str:
    if not sections:
        return "(the skill is empty)"
    text = "\n".join(f"## {title}\n" + "\n".join(f"- {r}" for r in rules) for title, rules in sections.values())
    return text if len(text) <= limit else text[:limit] + "\n[...]"


# ------------------------------------------------------------- analysts

def analyst_conversation(trajectory: Trajectory, outline: str) -> list[Message]:
    system = SUCCESS_ANALYST if trajectory.reward >= 1.0 else ERROR_ANALYST
    task_rules = trajectory.messages[0]["content"] if trajectory.messages else ""
    user = (f"The agent's instructions:\n{task_rules[:600]}\n\nThe current skill:\n{outline}\n\n"
            f"The attempt:\n{transcript(trajectory)}\n\nPatch:")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def distill_patches(
    teacher: Generator,
    trajectories: Sequence[Trajectory],
    previous: Skill | None = None,
    settings: DistillSettings = DistillSettings(),
) -> tuple[dict[str, tuple[str, list[str]]], PatchSet, dict[str, int]]:
    """Analysts -> patches -> merged patch -> sections (nothing written)."""
    if not trajectories:
        raise ValueError("distill needs at least one trajectory")
    traces = select_traces(trajectories, max_failed_per_case=settings.max_failed_per_case,
                           successes=settings.successes)
    sections = parse_sections(previous)
    outline = skill_outline(sections)
    patch_sets: list[PatchSet] = []
    usable = 0
    if traces:
        completions = teacher.chat([analyst_conversation(t, outline) for t in traces], settings.sampling,
                                   seeds=[derive_seed(settings.seed, "analyst", i) for i in range(len(traces))])
        for trace, completion in zip(traces, completions):
            patch = parse_patches(completion.text)
            usable += bool(patch)
            if not patch and trace.reward < 1.0:
                patch = feedback_patch(trace)
            patch_sets.append(patch)
    merged = merge_hierarchically(teacher, patch_sets, settings.group_size, settings.sampling, settings.seed)
    new_sections = apply_patches(sections, merged)
    if not new_sections:  # nothing survived: the environment's feedback is the skill
        new_sections = apply_patches({}, feedback_patch_all(traces or list(trajectories)))
    errors = sum(t.reward < 1.0 for t in traces)
    return new_sections, merged, {"error": errors, "success": len(traces) - errors, "usable": usable}


def feedback_patch_all(trajectories: Sequence[Trajectory]) -> PatchSet:
    lessons = feedback_lessons(trajectories, limit=MAX_RULES)
    return {"mistakes to avoid": Patch("add", "Mistakes to avoid", tuple((lesson, 1) for lesson in lessons))}


def _skill_text(folder_name: str, task: str, sections: dict, source: str, description: str | None) -> tuple[str, str]:
    if description is None:
        description = f"Rules for the {task} agent task, distilled from its trajectories with Trace2Skill."
    body = render_skill_body(f"{folder_name} (Trace2Skill)", sections, source)
    return description, body


def distill(
    teacher: Generator,
    trajectories: Sequence[Trajectory],
    out_dir: str | Path,
    description: str | None = None,
    previous: Skill | None = None,
    settings: DistillSettings = DistillSettings(),
) -> Skill:
    """One distillation of `trajectories` into `out_dir/SKILL.md`, patching
    `previous` when given; returns the written, valid skill."""
    out_dir = Path(out_dir)
    sections, _, counts = distill_patches(teacher, trajectories, previous, settings)
    source = (f"{counts['error']} error and {counts['success']} success analyses of {len(trajectories)} "
              f"{trajectories[0].task} trajectories")
    description, body = _skill_text(out_dir.name, trajectories[0].task, sections, source, description)
    return write_skill(out_dir, description, body)


def distill_best_of(
    teacher: Generator,
    trajectories: Sequence[Trajectory],
    out_dir: str | Path,
    score: Any,
    n: int = 3,
    description: str | None = None,
    previous: Skill | None = None,
    settings: DistillSettings = DistillSettings(),
) -> tuple[Skill, list[dict[str, Any]]]:
    """N distillations with different analyst seeds; `score(skill) -> float`
    rates each on a validation split (higher is better; the agent playing
    validation cases with the skill). The best is written to `out_dir`
    (ties: the lower seed). Returns it and every candidate's score."""
    if n < 1:
        raise ValueError(f"distillation seeds must be >= 1, got {n}")
    out_dir = Path(out_dir)
    candidates = []
    for i in range(n):
        seeded = replace(settings, seed=derive_seed(settings.seed, "distill-seed", i))
        sections, _, counts = distill_patches(teacher, trajectories, previous, seeded)
        source = (f"{counts['error']} error and {counts['success']} success analyses of {len(trajectories)} "
                  f"{trajectories[0].task} trajectories (best of {n} seeds on validation)")
        text, body = _skill_text(out_dir.name, trajectories[0].task, sections, source, description)
        skill = Skill(out_dir.name, " ".join(text.split()), body.strip())
        problems = validate_skill(skill, folder_name=out_dir.name)
        if problems:
            raise SkillError(f"distillation seed {i} built an invalid skill: {'; '.join(problems)}")
        candidates.append((float(score(skill)), i, skill))
    best = max(candidates, key=lambda c: (c[0], -c[1]))
    written = write_skill(out_dir, best[2].description, best[2].body)
    return written, [{"seed_index": i, "validation_score": value, "chosen": i == best[1]}
                     for value, i, _ in candidates]
