"""Trace2Skill for heuristic search: a SKILL.md distilled from the run's own
candidates, refreshed every `skill.every` plan steps and shown in every
operator prompt (the +trace2skill methods).

A refresh is one step of the plan: `skill.analysts` teacher requests, each
charged one evaluation. Error analysts read one recent failure (its code,
kind, message and failing line); success analysts read one of the best
programs (idea, code, score). Each proposes a patch (`ADD|EDIT|DELETE
<section>: <rule>`); the patches merge and apply to the previous version
with the machinery the agents use (coevolve.base.skillpatch), without the
teacher's condensing calls, so a refresh makes exactly `analysts` requests
and its result is a pure function of their replies: a resumed run rebuilds
every version from the logged replies. A "Contract" section (the exact
signature and what the function returns, read from the template) is written
by code and never patched away.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, Sequence

from coevolve.base.skillpatch import (DEFAULT_SAMPLING, Patch, PatchSet, RuleOrigins, apply_patches, count_origins,
                                      derive_seed, merge_hierarchically, parse_patches, parse_sections,
                                      render_skill_body, skill_outline)
from coevolve.base.config import config_error
from coevolve.base.skills import Skill, SkillError, load_skill, write_skill
from coevolve.base.untrusted import fence
from coevolve.codeparse import template_signature
from coevolve.engine.base import Message, Sampling
from coevolve.search.ensemble import improved
from coevolve.search.feedback import against_template, same_as_template
from coevolve.search.population import Candidate
from coevolve.search.prompts import describe_failure
from coevolve.stats import proportion_difference

_FORMAT = ("Reply only with lines of these forms:\nADD <section>: <rule>\nEDIT <section>: <rule>\nDELETE <section>\n"
           "Sections are short titles such as Pitfalls, Ideas, Format. One to three lines.")
ERROR_ANALYST = ("You are an error analyst. A program written for the heuristic-design problem below FAILED. "
                 "Propose rules for the program writer's skill that would have prevented the failure. " + _FORMAT)
SUCCESS_ANALYST = ("You are a success analyst. A program written for the heuristic-design problem below "
                   "WORKED and scored well. Propose rules for the program writer's skill that keep what made "
                   "it work. " + _FORMAT)
# a valid program that decided as the template did on every instance: it worked, but its change did nothing
ECHO_ANALYST = ("You are a success analyst. A program written for the heuristic-design problem below WORKED, "
                "but it scored exactly as the task's template on every instance: its change did nothing. Propose "
                "rules for the program writer's skill that keep it working and make a change that matters. "
                + _FORMAT)
CODE_CHARS = 900  # the candidate's code shown to an analyst (the end is cut)
CONTRACT = "contract"
# a distilled skill's description: the one record of the task it was made for (distilled_for reads it back)
DISTILLED = "Rules for writing {} heuristics, distilled with Trace2Skill from this run's own candidates."


def skill_name(task: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-") + "-heuristics"


def distilled_for(skill: Skill) -> str | None:
    """The task a skill was distilled for, as its description names it (`coevolve distill` of a heuristic
    run, or a +trace2skill run's versions); None for a description someone wrote (by hand, or distill's
    --description), which records no task."""
    head, _, tail = DISTILLED.partition("{}")
    found = re.fullmatch(re.escape(head) + "(.+)" + re.escape(tail), skill.description)
    return found.group(1) if found else None


def other_task(skill: Skill, task: str) -> str | None:
    """The task `skill` was distilled for when it is not `task`, else None. Names are compared as skill
    names are made of them (a run's own versions write kp-construct for kp_construct)."""
    made_for = distilled_for(skill)
    return made_for if made_for is not None and skill_name(made_for) != skill_name(task) else None


def task_warning(folder: str, task: str) -> str | None:
    """What a run on `task` says of a skill.start folder distilled for another task (None: not so). Not
    refused: one task's skill tried on another may be the experiment."""
    other = other_task(start_skill(folder), task)
    return None if other is None else (f"skill.start {folder} was distilled for {other}, and this run's task is "
                                       f"{task}: its rules, its Contract's function included, are {other}'s")


def contract_rules(template: str, function_name: str, signature: str) -> list[str]:
    """What the function receives and must return, from the template's def line and docstring."""
    rules = [f"Define exactly {signature.rstrip(':')} and keep every parameter." if signature
             else f"Define the function {function_name} with the template's parameters."]
    for node in ast.walk(ast.parse(template)):
        if isinstance(node, ast.FunctionDef) and node.name == function_name:
            doc = ast.get_docstring(node) or ""
            returns = re.search(r"Returns?:\s*\n\s*(.+)", doc)
            if returns:
                rules.append(f"It must return {returns.group(1).strip().rstrip('.')}.")
    rules.append("Answer with the idea in braces, then one ```python block holding the whole function.")
    return rules


def pick_cases(candidates: Sequence[Candidate], analysts: int, successes: int, recent: int,
               direction: str, template: Sequence[float] | None = None,
               previous: Sequence[int] = ()) -> list[Candidate]:
    """The candidates the `analysts` requests read: up to `successes` of the
    best valid ones among the last `recent`, the rest the most recent
    failures (one per distinct message first); short lists are cycled so
    that there are always exactly `analysts` cases (each request is charged).
    A success that only equals the template (`template`: its per-instance
    objectives, feedback.same_as_template) comes after every other valid one
    (its change did nothing to learn from), and one the previous refresh read
    (`previous`: its cases' ids) after every other that does not (nothing new)."""
    window = list(candidates)[-recent:]
    read = set(previous)
    valid = sorted((c for c in window if c.valid),
                   key=lambda c: (same_as_template(c.profile, template), c.id in read,
                                  c.objective if direction == "min" else -c.objective, c.id))
    failed: list[Candidate] = []
    seen: set[str] = set()
    for c in reversed(window):
        if not c.valid:
            key = f"{c.failure}:{(c.message or '').strip()[-80:]}"
            if key not in seen:
                seen.add(key)
                failed.append(c)
    failed += [c for c in reversed(window) if not c.valid and c not in failed]
    wins = valid[:successes]
    pool = (wins + failed + valid[len(wins):])[:analysts]
    return [pool[i % len(pool)] for i in range(analysts)] if pool else []


def case_text(candidate: Candidate, direction: str, report: str, template: Sequence[float] | None = None) -> str:
    """What an analyst reads of one case; a valid one's outcome says how it did against the template
    (`template`: its per-instance objectives) as a parent's note does."""
    code = candidate.code or "(no code: the answer had no ```python block the parser could use)"
    if len(code) > CODE_CHARS:
        code = code[:CODE_CHARS] + "\n# [... cut ...]"
    head = f"Idea: {{{candidate.idea or 'none'}}}\n```python\n{code.rstrip()}\n```"
    if candidate.valid:
        better = "lower" if direction == "min" else "higher"
        note = against_template(candidate.profile, template, direction)
        return (f"{head}\nOutcome: WORKED, score {candidate.objective:.6g} ({better} is better)"
                + (f"; {note}" if note else ""))
    return f"{head}\nOutcome: FAILED, {report}"


def analyst_messages(candidate: Candidate, description: str, outline: str, direction: str,
                     report: str, template: Sequence[float] | None = None) -> list[Message]:
    system = (ERROR_ANALYST if not candidate.valid else ECHO_ANALYST if same_as_template(candidate.profile, template)
              else SUCCESS_ANALYST)
    user = (f"The problem:\n{description.strip()[:600]}\n\nThe current skill:\n{outline}\n\n"
            f"The program:\n{case_text(candidate, direction, report, template)}\n\nPatch:")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def analyst_conversations(cases: Sequence[Candidate], task: Any, current: str, failure_chars: int,
                          template: Sequence[float] | None = None) -> list[list[Message]]:
    """One analyst conversation per case, each reading the current skill's outline (`outline`);
    `template`: the template's per-instance objectives, for the successes' notes."""
    return [analyst_messages(c, task.description, current, task.direction,
                             describe_failure(c, failure_chars) if not c.valid else "", template) for c in cases]


def analyst_seeds(run_seed: int, step: int | str, count: int) -> list[int]:
    return [derive_seed(run_seed, "skill", step, i) for i in range(count)]


FALLBACK_RULES = {
    "parse": "Always answer with one ```python block that holds the whole function.",
    "duplicate": "Change the logic itself: a renamed or reformatted copy of an earlier program is rejected unscored.",
    "bad_signature": "Keep the function's exact name and parameters.",
    "missing_function": "Keep the function's exact name and parameters.",
}


def fallback_patch(cases: Sequence[Candidate]) -> PatchSet:
    """When no analyst wrote a usable line: the failures' own kinds and last
    message lines become the pitfalls (what a teacher would have said)."""
    rules = []
    for c in cases:
        if c.valid:
            continue
        rule = FALLBACK_RULES.get(c.failure or "")
        if rule is None:
            last = (c.message or "").strip().splitlines()[-1:] or [""]
            # numbers replaced: "line 7" and "line 12" are the same mistake
            line = re.sub(r"\d+", "N", re.sub(r"\s+", " ", fence(last[0], limit=120, prefix=""))).strip()
            rule = f"Avoid this {c.failure} error seen before: {line}" if line else f"Avoid the {c.failure} failure."
        if rule not in rules:
            rules.append(rule)
    return {"pitfalls": Patch("add", "Pitfalls", tuple((r, 1) for r in rules[:5]))} if rules else {}


STAND_INS = "from the failures' own kinds"  # what fallback_patch's rules are, in RuleOrigins


def refreshed(previous: Skill | None, replies: Sequence[str], cases: Sequence[Candidate], contract: list[str],
              subject: str, title: str, source: str) -> tuple[str, str, RuleOrigins]:
    """(description, body, where its rules came from) of the next version from the analysts' replies;
    `subject` is what the rules are for (the task), `title` the skill's heading."""
    sections = parse_sections(previous)
    patches = [parse_patches(text) for text in replies]
    patches = [{k: p for k, p in patch.items() if k != CONTRACT} for patch in patches]  # the contract is code's
    stand_ins = [] if any(patches) else [fallback_patch(cases)]
    merged = merge_hierarchically(None, patches) if any(patches) else stand_ins[0]
    learnt = apply_patches(sections, merged)
    learnt.pop(CONTRACT, None)
    sections.pop(CONTRACT, None)  # the previous version's contract is rewritten, not kept
    errors = sum(not c.valid for c in cases)
    origins = RuleOrigins(len(replies), errors, sum(map(bool, patches)), STAND_INS, contract=len(contract),
                          **count_origins(learnt, patches, stand_ins, sections))
    description = DISTILLED.format(subject)
    body = render_skill_body(f"{title} (Trace2Skill)", {CONTRACT: ("Contract", contract), **learnt}, source, origins,
                             closing="Follow these rules in every program you write.")
    return description, body, origins


def refresh(previous: Skill | None, replies: Sequence[str], cases: Sequence[Candidate], contract: list[str],
            task: str, source: str) -> tuple[str, str]:
    """(description, body) of a run's next version for the task named `task` (task.name, as `coevolve
    distill` names it: tsp_construct, not the folder's tsp-construct); its title is the skill's name."""
    description, body, _ = refreshed(previous, replies, cases, contract, task, skill_name(task), source)
    return description, body


def start_skill(folder: str) -> Skill:
    """skill.start, read: a config error naming it when the folder holds no valid
    SKILL.md, or none of the rules prompts show (`- rule` bullets; prose is not shown)."""
    try:
        skill = load_skill(folder)
    except SkillError as exc:
        raise config_error("skill.start", f"is not a valid skill: {exc}") from None
    if not parse_sections(skill):
        raise config_error("skill.start", "has no rules the prompts can show: write them as `- rule` bullets "
                           "(under `## Section` headings), the form coevolve distill writes", folder)
    return skill


def version_label(version: int | None) -> str:
    return "no skill" if version is None else f"v{version:03d}"


def shown_counts(candidates: Sequence[Candidate], direction: str, seed: float | None = None,
                 since: int | None = None) -> dict[int | None, dict[str, int]]:
    """Per skill version a prompt showed (None: no skill), in order of first use: the candidates, how
    many scored and how many beat every parent shown (ensemble.improved, what a trial counts); only
    those proposed after step `since` when it is given (all remain parents). `seed`: the objective of
    the template seeded as candidate 0 where `candidates` (candidates.jsonl's lines) do not hold it."""
    by_id = {c.id: c for c in candidates}
    if seed is not None:
        by_id[0] = Candidate(id=0, step=-1, operator="template", parents=[], model_state={"kind": "template"},
                             objective=seed)
    counts: dict[int | None, dict[str, int]] = {}
    for c in candidates:
        if c.id <= 0 or (since is not None and c.step <= since):  # the seeded programs: no prompt
            continue
        side = counts.setdefault(c.skill_version, {"candidates": 0, "valid": 0, "improved": 0})
        side["candidates"] += 1
        side["valid"] += c.valid
        side["improved"] += improved(c, (by_id.get(p) for p in c.parents), direction)
    return counts


def requests_name_versions(events: Sequence[dict]) -> bool:
    """Whether a run's log says which skill version each request showed: runs written before it did
    (their candidates have no skill_version, whatever their prompts showed) cannot be counted by version."""
    return any("skill" in r for e in events if e.get("type") == "step" for r in e.get("requests") or ()
               if isinstance(r, dict))


def judge(pool: Sequence[Candidate], incumbent: int | None, challenger: int, since: int,
          direction: str, seed: float | None = None) -> dict[str, Any]:
    """skill.keep = "judged": the trial of the `challenger` version against the `incumbent` (None: no
    skill) over their children proposed after step `since`, when requests began to alternate between
    them, each arm's counted by shown_counts. The challenger is kept when its success rate (scored and
    beat every parent shown) is higher, or equal with a higher scored rate; otherwise the incumbent
    stays, so a version has to show something to replace the one it patched. A greedy choice:
    `interval` is the 95% interval for the difference in success rate (challenger minus incumbent,
    stats.proportion_difference) and `distinct` whether it excludes 0, i.e. whether the two could be
    told apart at all. `pool` holds every candidate the children name as parents (the seeded template
    too, or its objective as `seed`, as shown_counts takes it)."""
    counts = shown_counts(pool, direction, seed, since=since)
    arms = {arm: counts.get(version, {"candidates": 0, "valid": 0, "improved": 0})
            for arm, version in (("incumbent", incumbent), ("challenger", challenger))}

    def rates(arm: dict[str, int]) -> tuple[float, float]:
        return arm["improved"] / max(arm["candidates"], 1), arm["valid"] / max(arm["candidates"], 1)

    shown = arms["challenger"]["candidates"] > 0  # no children: nothing to show, the incumbent stays
    kept = challenger if shown and rates(arms["challenger"]) > rates(arms["incumbent"]) else incumbent
    difference = proportion_difference(arms["incumbent"]["improved"], arms["incumbent"]["candidates"],
                                       arms["challenger"]["improved"], arms["challenger"]["candidates"])
    return {"since": since, "incumbent": incumbent, "challenger": challenger, "children": arms, "kept": kept,
            "interval": None if difference is None else [round(difference.low, 6), round(difference.high, 6)],
            "distinct": difference is not None and difference.distinct}


def trial_line(trial: dict[str, Any]) -> str:
    """One judgement as the run table shows it."""
    inc, ch = trial["incumbent"], trial["challenger"]
    won = trial["kept"] == ch
    if trial.get("final") or trial.get("running"):  # no refresh has judged it (yet): who leads
        head = f"{version_label(ch)} on trial, {version_label(ch if won else inc)} ahead"
    else:
        head = (f"{version_label(ch)} kept over {version_label(inc)}" if won
                else f"{version_label(ch)} dropped, {version_label(inc)} stays")
    children = trial["children"]
    counts = "; ".join(f"{version_label(v)} improved {children[arm]['improved']}/{children[arm]['candidates']} "
                       f"(valid {children[arm]['valid']})" for arm, v in (("challenger", ch), ("incumbent", inc)))
    told = "told apart" if trial["distinct"] else "could not be told apart"
    when = ("so far (running)" if trial.get("running") else "at the end (no refresh)" if trial.get("final")
            else f"at step {trial['step']}")
    return f"{head} {when}: {counts}; {told}"


def rule_count(body: str) -> int:
    return sum(line.startswith("- ") for line in body.splitlines())


def outline(skill: Skill | None) -> str:
    return skill_outline(parse_sections(skill))


def write_version(run_dir: Path, version: int, name: str, description: str, body: str) -> Skill:
    """skills/vNNN/<name>/SKILL.md in the run directory: every version is kept."""
    return write_skill(Path(run_dir) / "skills" / f"v{version:03d}" / name, description, body)



def distill_candidates(teacher: Any, candidates: Sequence[Candidate], task: Any, out_dir: str | Path,
                       previous: Skill | None = None, analysts: int = 4, successes: int = 1, seed: int = 0,
                       sampling: Sampling = DEFAULT_SAMPLING,
                       failure_chars: int = 300, description: str | None = None) -> tuple[Skill, RuleOrigins]:
    """`coevolve distill` on a heuristic run: one refresh over all its candidates,
    written to `out_dir/SKILL.md` (patching `previous` when given), and where its rules came from."""
    cases = pick_cases(candidates, analysts, successes, len(candidates), task.direction)
    if not cases:
        raise ValueError("the run has no candidates to distil")
    completions = teacher.chat(analyst_conversations(cases, task, outline(previous), failure_chars), sampling,
                               seeds=analyst_seeds(seed, "post-hoc", len(cases)))
    signature, _ = template_signature(task.template, task.function_name)
    errors = sum(not c.valid for c in cases)
    out_dir = Path(out_dir)
    written, body, origins = refreshed(previous, [c.text for c in completions], cases,
                                       contract_rules(task.template, task.function_name, signature or ""),
                                       task.name, out_dir.name,
                                       f"{errors} error and {len(cases) - errors} success analyses of "
                                       f"{len(candidates)} {task.name} candidates")
    return write_skill(out_dir, description or written, body), origins
