"""Skill patches, the text machinery of Trace2Skill shared by agent runs
(coevolve.agents.trace2skill) and heuristic search (coevolve.search.skill):
analysts write lines `ADD|EDIT|DELETE <section>: <rule>`; `parse_patches`
keeps the usable ones, `merge_hierarchically` merges patch sets with the
conflict rules below, `apply_patches` applies the merged patch to a skill's
sections and `render_skill_body` assembles the SKILL.md body by code, so the
file is valid whatever the teacher wrote. Conflicts: a delete wins only with
more analysts behind it than the edits and adds of that section together;
edits and adds of one section become one edit, or one add appended to the section when none
edited it (most supported rules first);
a section with more than MAX_RULES rules is condensed by the teacher, or cut
to its best-supported rules when there is no teacher or its answer is unusable.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Sequence

from coevolve.base.errors import plural, word_cut  # distill.py imports plural from here too
from coevolve.base.sampling import Sampling
from coevolve.base.skills import Skill
from coevolve.base.untrusted import without_reasoning

Message = dict  # {"role": ..., "content": ...}, as coevolve.engine.base declares it


def derive_seed(*parts: object) -> int:
    """A 31-bit sampling seed from any tuple of ids (stable across runs)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


CONDENSE_SYSTEM = (
    "Merge these rules for an AI agent into at most {limit} rules without losing any idea. "
    "One rule per line, each line starting with '- '. No other text."
)
OPS = ("add", "edit", "delete")
MAX_RULES = 5  # per section
MAX_SECTIONS = 8

SKILL_CHARS = 1200
LESSON_MIN_CHARS, LESSON_MAX_CHARS = 12, 200
DEFAULT_SAMPLING = Sampling(temperature=0.3, max_tokens=160)

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


_YAML_KEY = re.compile(r"^[a-z_]+:\s")
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)])\s+(.*)$")


def parse_lessons(text: str, limit: int = 20) -> list[str]:
    """Clean one-line lessons from teacher text; garbage yields []."""
    lines = without_reasoning(text)[0].splitlines()
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
        lesson = word_cut(lesson, LESSON_MAX_CHARS)
        key = rule_key(lesson)
        if key in seen:
            continue
        seen.add(key)
        lessons.append(lesson)
        if len(lessons) == limit:
            break
    return lessons



def rule_key(rule: str) -> str:
    """What makes two rules the same rule: case and punctuation aside."""
    return re.sub(r"\W+", " ", rule.lower()).strip()


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
    for line in without_reasoning(text)[0].splitlines():
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
            key = rule_key(rule)
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
    teacher: Any,
    patch_sets: Sequence[PatchSet],
    group_size: int = 4,
    sampling: Sampling = DEFAULT_SAMPLING,
    seed: int = 0,
) -> PatchSet:
    """Merge `group_size` patch sets per node, level by level, until one
    remains; at each level the sections that grew past MAX_RULES are
    condensed by the teacher, one batched call per merged node (None: cut by support)."""
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


def _condense(teacher: Any, node: PatchSet, sampling: Sampling, seed: int) -> PatchSet:
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
            seen = {rule_key(r) for r in out[key][1]}
            extra = [r for r in rules if rule_key(r) not in seen]
            out[key] = (out[key][0], (out[key][1] + extra)[:MAX_RULES])
    # the best-supported sections first when there are too many to keep
    return dict(list(out.items())[:MAX_SECTIONS])


@dataclass(frozen=True)
class RuleOrigins:
    """Where a distilled skill's rules came from, counted as the skill is built (never read back from its
    text), so the line a command prints and the SKILL.md's intro claim only what the analyses gave.
    `stand_in` names the rules made without an analyst where none wrote a usable line; what they are
    made of differs by run kind (a heuristic run's failure kinds, an agent's environment error lines)."""

    analyses: int  # analyst requests made
    errors: int  # of them, error analyses (the rest read successes)
    usable: int  # of them, replies holding a usable patch
    stand_in: str  # where the stand-in rules came from, as words after their count
    contract: int = 0  # written by code from the task (a heuristic's signature and answer shape)
    analysed: int = 0  # proposed by the analysts
    condensed: int = 0  # rewritten by the teacher when a section grew past MAX_RULES
    stand_ins: int = 0
    kept: int = 0  # the patched skill's own rules that stayed

    @property
    def rules(self) -> int:
        return self.contract + self.analysed + self.condensed + self.stand_ins + self.kept

    def analyses_text(self) -> str:
        return f"{self.errors} error and {self.analyses - self.errors} success analyses"

    def summary(self) -> str:
        """`7 rules (3 contract, 4 from the failures' own kinds; 0 of 8 analyses gave a usable rule)`"""
        parts = [f"{n} {what}" for n, what in ((self.contract, "contract"), (self.analysed, "from the analyses"),
                                                (self.condensed, "condensed by the teacher"),
                                                (self.stand_ins, self.stand_in),
                                                (self.kept, "kept from the previous skill")) if n]
        usable = f"{self.usable} of {plural(self.analyses, 'analysis', 'analyses')} gave a usable rule"
        return f"{plural(self.rules, 'rule')} ({', '.join(parts)}{'; ' if parts else ''}{usable})"


def count_origins(sections: dict[str, tuple[str, list[str]]], analysed: Sequence[PatchSet],
                  stand_ins: Sequence[PatchSet], previous: dict[str, tuple[str, list[str]]]) -> dict[str, int]:
    """RuleOrigins' counts of the rules in `sections` (the contract aside): an analyst's rule, else a
    stand-in's, else one the patched skill held; a rule in none of them the teacher wrote condensing."""
    def keys(patch_sets: Sequence[PatchSet]) -> set[str]:
        return {rule_key(r) for s in patch_sets for p in s.values() for r, _ in p.rules}

    sources = (("analysed", keys(analysed)), ("stand_ins", keys(stand_ins)),
               ("kept", {rule_key(r) for _, rules in previous.values() for r in rules}))
    counts = dict.fromkeys(["analysed", "condensed", "stand_ins", "kept"], 0)
    for _, rules in sections.values():
        for rule in rules:
            counts[next((name for name, known in sources if rule_key(rule) in known), "condensed")] += 1
    return counts


def render_skill_body(title: str, sections: dict[str, tuple[str, list[str]]], source: str, origins: RuleOrigins,
                      closing: str = "Apply these rules on every turn.") -> str:
    lines = [f"# {title}", "", f"From {source}: {origins.summary()}. {closing}"]
    for section_title, rules in sections.values():
        lines += ["", f"## {section_title}"] + [f"- {rule}" for rule in rules]
    return "\n".join(lines)


def skill_outline(sections: dict[str, tuple[str, list[str]]], limit: int = SKILL_CHARS) -> str:
    if not sections:
        return "(the skill is empty)"
    text = "\n".join(f"## {title}\n" + "\n".join(f"- {r}" for r in rules) for title, rules in sections.values())
    return text if len(text) <= limit else text[:limit] + "\n[...]"


