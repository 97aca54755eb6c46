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
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from coevolve.agents.rollout import Trajectory
# The patch machinery is shared with heuristic search; these names stay importable from here.
from coevolve.base.skillpatch import (CONDENSE_SYSTEM, DEFAULT_SAMPLING, LESSON_MAX_CHARS,  # noqa: F401
                                      LESSON_MIN_CHARS, MAX_RULES, MAX_SECTIONS, OPS, SKILL_CHARS, Patch, PatchSet,
                                      RuleOrigins, apply_patches, clean_title, condense_conversation, count_origins,
                                      derive_seed, merge_hierarchically, merge_two, parse_lessons, parse_patches,
                                      parse_sections, render_skill_body, section_key, skill_outline)
from coevolve.base.skills import Skill, SkillError, validate_skill, write_skill
from coevolve.engine.base import Generator, Message, Sampling, answered_or_empty

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
TRANSCRIPT_CHARS = 2000  # keeps analyst prompts (skill + trajectory) inside a 2048-token context


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


def feedback_patch(trajectory: Trajectory) -> PatchSet:
    """An error analyst's stand-in built from the environment's own error
    lines in one failed trajectory (used when the teacher proposes nothing usable)."""
    lessons = feedback_lessons([trajectory], limit=3)
    return {"mistakes to avoid": Patch("add", "Mistakes to avoid", tuple((lesson, 1) for lesson in lessons))}


# ------------------------------------------------------------- analysts

def analyst_conversation(trajectory: Trajectory, outline: str) -> list[Message]:
    system = SUCCESS_ANALYST if trajectory.reward >= 1.0 else ERROR_ANALYST
    task_rules = trajectory.messages[0]["content"] if trajectory.messages else ""
    user = (f"The agent's instructions:\n{task_rules[:600]}\n\nThe current skill:\n{outline}\n\n"
            f"The attempt:\n{transcript(trajectory)}\n\nPatch:")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


STAND_INS = "from the environment's own error lines"  # what feedback_patch's rules are, in RuleOrigins


def distill_patches(
    teacher: Generator,
    trajectories: Sequence[Trajectory],
    previous: Skill | None = None,
    settings: DistillSettings = DistillSettings(),
) -> tuple[dict[str, tuple[str, list[str]]], PatchSet, RuleOrigins]:
    """Analysts -> patches -> merged patch -> sections (nothing written), and where their rules came from."""
    if not trajectories:
        raise ValueError("distill needs at least one trajectory")
    traces = select_traces(trajectories, max_failed_per_case=settings.max_failed_per_case,
                           successes=settings.successes)
    sections = parse_sections(previous)
    outline = skill_outline(sections)
    patch_sets: list[PatchSet] = []
    analysed: list[PatchSet] = []  # of them, the analysts' own
    stand_ins: list[PatchSet] = []  # and those made of the environment's error lines
    if traces:
        # an analysis the teacher refuses as too long (a long episode's transcript) found nothing: a failed
        # episode then teaches what the environment said (feedback_patch), as when an analyst finds nothing
        conversations = [analyst_conversation(t, outline) for t in traces]
        completions = answered_or_empty(
            lambda asked: teacher.chat([conversations[i] for i in asked], settings.sampling,
                                       seeds=[derive_seed(settings.seed, "analyst", i) for i in asked]),
            len(traces),
            "every trajectory analysis was refused (an analyst reads a whole episode's transcript); "
            "keep fewer turns (agent.history_turns) or give the teacher a longer context")
        for trace, completion in zip(traces, completions):
            patch = parse_patches(completion.text)
            if patch:
                analysed.append(patch)
            elif trace.reward < 1.0:
                patch = feedback_patch(trace)
                stand_ins.append(patch)
            patch_sets.append(patch)
    merged = merge_hierarchically(teacher, patch_sets, settings.group_size, settings.sampling, settings.seed)
    new_sections = apply_patches(sections, merged)
    if not new_sections:  # nothing survived: the environment's feedback is the skill
        stand_ins.append(feedback_patch_all(traces or list(trajectories)))
        new_sections = apply_patches({}, stand_ins[-1])
    errors = sum(t.reward < 1.0 for t in traces)
    return new_sections, merged, RuleOrigins(len(traces), errors, len(analysed), STAND_INS,
                                             **count_origins(new_sections, analysed, stand_ins, sections))


def feedback_patch_all(trajectories: Sequence[Trajectory]) -> PatchSet:
    lessons = feedback_lessons(trajectories, limit=MAX_RULES)
    return {"mistakes to avoid": Patch("add", "Mistakes to avoid", tuple((lesson, 1) for lesson in lessons))}


def _skill_text(folder_name: str, task: str, sections: dict, source: str, origins: RuleOrigins,
                description: str | None) -> tuple[str, str]:
    if description is None:
        description = f"Rules for the {task} agent task, distilled from its trajectories with Trace2Skill."
    body = render_skill_body(f"{folder_name} (Trace2Skill)", sections, source, origins)
    return description, body


def _source(origins: RuleOrigins, trajectories: Sequence[Trajectory]) -> str:
    return f"{origins.analyses_text()} of {len(trajectories)} {trajectories[0].task} trajectories"


def distill(
    teacher: Generator,
    trajectories: Sequence[Trajectory],
    out_dir: str | Path,
    description: str | None = None,
    previous: Skill | None = None,
    settings: DistillSettings = DistillSettings(),
) -> tuple[Skill, RuleOrigins]:
    """One distillation of `trajectories` into `out_dir/SKILL.md`, patching `previous` when given: the
    written, valid skill and where its rules came from (what `coevolve distill` prints)."""
    out_dir = Path(out_dir)
    sections, _, origins = distill_patches(teacher, trajectories, previous, settings)
    description, body = _skill_text(out_dir.name, trajectories[0].task, sections, _source(origins, trajectories),
                                    origins, description)
    return write_skill(out_dir, description, body), origins


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
    (ties: the lower seed). Returns it and every candidate's score, the chosen one's with where its rules
    came from (`origins`, RuleOrigins' counts: what the run's table says of the skill)."""
    if n < 1:
        raise ValueError(f"distillation seeds must be >= 1, got {n}")
    out_dir = Path(out_dir)
    candidates = []
    for i in range(n):
        seeded = replace(settings, seed=derive_seed(settings.seed, "distill-seed", i))
        sections, _, origins = distill_patches(teacher, trajectories, previous, seeded)
        source = f"{_source(origins, trajectories)} (best of {n} seeds on validation)"
        text, body = _skill_text(out_dir.name, trajectories[0].task, sections, source, origins, description)
        skill = Skill(out_dir.name, " ".join(text.split()), body.strip())
        problems = validate_skill(skill, folder_name=out_dir.name)
        if problems:
            raise SkillError(f"distillation seed {i} built an invalid skill: {'; '.join(problems)}")
        candidates.append((float(score(skill)), i, skill, origins))
    best = max(candidates, key=lambda c: (c[0], -c[1]))
    written = write_skill(out_dir, best[2].description, best[2].body)
    return written, [{"seed_index": i, "validation_score": value, "chosen": i == best[1],
                      **({"origins": asdict(origins)} if i == best[1] else {})}
                     for value, i, _, origins in candidates]
