"""Rendering: a comparison's or a run's report from collected records (tables,
CSV, markdown, results.json, and the figures drawn by coevolve.report.plots),
and the table `coevolve run` prints at the end of a run.

A comparison's report has, per task and budget, one row per method with the
test objective and the gap to the reference (mean ± std over seeds), the
training valid rate, the valid programs of their own (repeats left out) and
how many runs produced a heuristic; the methods come in pairs (Sample /
Sample+ESOpt, EoH / EoH+ESOpt), each pair followed by its Δ row: the relative
gap reduction of the +ESOpt variant over its base method.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import fields
from pathlib import Path
from typing import Any, Sequence

from coevolve.agents.es_agent import SEED_SKILLS, logged_seed_skills
from coevolve.agents.skills import SkillError, parse_skill_text
from coevolve.es.start import ResumeError
from coevolve.base.durable import atomic_write_json, atomic_write_text, read_jsonl
from coevolve.base.errors import UsageError, plural
from coevolve.base.records import (AgentEvalRound, AgentSummary, ComparisonCell, ESCounts, SearchSummary, TestScores,
                                   parse, read_record, read_summary)
from coevolve.base.config import read_toml
from coevolve.engine.openai_client import ENDPOINT_RECORD
from coevolve.plan import (COMPARE_CONFIG, SAMPLE, TEST_SCORES, AgentCompareConfig, CompareConfig, arm_lines,
                           arm_plans, arm_runs, arm_spend, compared_pairs, config_class, ordered_arms, scored_sets,
                           spend_reason, structural_differences)
from coevolve.report.agents import render_agent_comparison
from coevolve.report.collecting import (SKILL_SIDES, aggregate, at_template, baselines, collect_logged,
                                        commonest_failures, derived_damage, es_counts, fmt_number, failure_rows,
                                        heldout_change, run_rows, run_starting_point, seeds_worse, skill_rows,
                                        skill_use, TaskBuilder, worse_than_template)
from coevolve.report.plots import plot_differences, plot_progress, plot_test_scores
from coevolve.search import methods as registry
from coevolve.search.methods import label as _label  # a method among others (display_name: on its own)
from coevolve.runstore import RunStore, ended, extended_budget, hold_directory, log_damage, writer_of
from coevolve.search.loop import GLOBAL_DRAW
from coevolve.search.plot import plot_best_so_far, plot_run_progress
from coevolve.search.runconfig import SkillSection
from coevolve.base.skillpatch import RuleOrigins
from coevolve.search.skill import requests_name_versions, rule_count, trial_line, version_label
from tasks.base import Direction
from tasks.loader import RECORD as TASKS, TaskSpecError, locate_files, remember_tasks, task_label
from tasks.registry import heuristic_task

BUDGET_STATEMENT = (
    "{whose} {budget} evaluations, counted by one ledger "
    "(coevolve/search/ledger.py) for every method: each candidate the LLM is asked for costs one "
    "evaluation whatever becomes of it — initial population, duplicates of earlier code and texts "
    "with no parseable code included. LLM requests and tokens are counted separately and consume no budget."
)

EVERY_RUN = "Every run has the same budget of"  # a comparison's; a single run's report says "This run's budget is"


def _write_csv(path: Path, rows: list[dict]) -> None:
    buffer = io.StringIO()
    if rows:
        fields = list(dict.fromkeys(k for row in rows for k in row))
        writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_value(v) for k, v in row.items()})
    atomic_write_text(path, buffer.getvalue())


def _csv_value(value: Any) -> Any:
    if isinstance(value, dict) and "mean" in value:
        return "" if value["mean"] is None else value["mean"]
    if isinstance(value, list):  # e.g. a row's run directories: one cell, ";"-separated, not Python's repr
        return ";".join(map(str, value))
    return "" if value is None else value


def _table_rows_csv(rows: list[dict]) -> list[dict]:
    """Aggregates flattened: each mean ± std becomes two columns."""
    out = []
    for row in rows:
        flat = {}
        for key, value in row.items():
            if isinstance(value, dict) and "mean" in value:
                flat[f"{key}_mean"], flat[f"{key}_std"], flat[f"{key}_n"] = value["mean"], value["std"], value["n"]
            elif key == "interval" and isinstance(value, list):  # a Δ row's Welch interval: two columns
                flat["interval_low"], flat["interval_high"] = value
            else:
                flat[key] = value
        out.append(flat)
    return out


# ------------------------------------------------------------- formatting
def fmt_mean_std(stats: dict, percent: bool = False, count: bool = False) -> str:
    """`mean ± std`; a percentage, a count (mean over runs of a whole number: one decimal at most), or a
    number in the report's format."""
    if stats["mean"] is None:
        return "–"
    show = (lambda v: f"{100 * v:.2f}%") if percent else (lambda v: f"{round(v, 1):g}") if count else fmt_number
    return show(stats["mean"]) + ("" if stats["std"] is None else f" ± {show(stats['std'])}")


def fmt_delta(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.1f}%"


def _links(dirs: list[str]) -> str:
    return " ".join(f"[s{d.rsplit('-s', 1)[-1]}]({d}/)" for d in dirs)


def markdown_table(config: CompareConfig, rows: list[dict], task_name: str, budget: int,
                   template: dict[tuple[str, str, int], float] | None = None) -> str:
    """The paper-style table of one task and budget: the task template (every
    run's starting point), a row per method linking its runs, each +ESOpt variant
    followed by its Δ row against its base method and whether the two can be told apart."""
    template = template or {}
    mine = [r for r in rows if r["task"] == task_name and r["budget"] == budget]
    sets = list(dict.fromkeys((r["split"], r["size"]) for r in mine))
    header = ["Method"]
    for split, size in sets:
        header += [f"{split}{size} objective", f"{split}{size} gap"]
    header += ["train valid rate", "distinct valid", "runs with a heuristic", "best = template", "runs"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    if any((task_name, split, size) in template for split, size in sets):
        cells = ["Task template (starting point)"]
        for split, size in sets:
            cells += [fmt_number(template.get((task_name, split, size))), ""]
        lines.append("| " + " | ".join(cells + [""] * 5) + " |")
    methods = ordered_arms(config)
    bases_of: dict[str, list[str]] = {}  # a method with a base and compare.baseline has a Δ row for each
    for base, variant in compared_pairs(config):
        bases_of.setdefault(variant, []).append(base)
    for method in methods:
        per_set = {(r["split"], r["size"]): r for r in mine if r["kind"] == "method" and r["method"] == method}
        cells = [_label(method)]
        for s in sets:
            cells += [fmt_mean_std(per_set[s]["objective"]), fmt_mean_std(per_set[s]["gap"], percent=True)]
        first = per_set[sets[0]]
        at = max(per_set[s]["at_template"] for s in sets)
        cells += [fmt_mean_std(first["train_valid_rate"], percent=True), fmt_mean_std(first["distinct_valid"], count=True),
                  f"{first['with_heuristic']}/{first['runs']}",
                  f"{at}/{first['finished']}", _links(first["dirs"])]
        lines.append("| " + " | ".join(cells) + " |")
        for base in bases_of.get(method, []):
            deltas = {(r["split"], r["size"]): r for r in mine
                      if r["kind"] == "delta" and (r["base"], r["variant"]) == (base, method)}
            cells = [f"Δ {_label(method)} vs {_label(base)}"]
            for s in sets:
                d = deltas.get(s) or {}
                told = {True: "", False: " (cannot be told apart)", None: " (cannot judge)"}[d.get("distinct")]
                cells += ["", (d.get("delta_note") or fmt_delta(d.get("delta"))) + told]
            lines.append("| " + " | ".join(cells + [""] * 5) + " |")
    return "\n".join(lines)


def _worse_than_template(row: dict, records: list[ComparisonCell], template: float | None,
                         direction: Direction) -> list[str]:
    """The line for an arm whose mean test objective is worse than the task template's (the table's
    starting-point row), saying whether every seed or only the mean is: the runs ended below where they
    started, which the template rows alone leave the reader to notice."""
    mean = row["objective"]["mean"]
    if template is None or mean is None or not worse_than_template(mean, template, direction):
        return []
    worse, scored = seeds_worse(records, row, template, direction)
    where = f"{task_label(row['task'])} {row['split']}{row['size']} at budget {row['budget']}"
    numbers = f"mean {fmt_number(mean)} vs {fmt_number(template)}"
    if worse == scored == row["runs"]:
        return [f"{where}: every seed of {_label(row['method'])} ended worse than the task template ({numbers}): "
                "its best heuristics are worse than the program its runs started from."]
    return [f"{where}: {_label(row['method'])}'s mean test objective is worse than the task template's ({numbers}; "
            f"{worse} of {scored} scored seeds worse): on average its best heuristic is worse than the program its "
            "runs started from."]


def _not_scored(row: dict, records: list[ComparisonCell]) -> int:
    """How many of an aggregate row's finished runs with a heuristic have no score on its test set at all:
    a comparison killed before its test scoring, which scores them when it runs again."""
    return sum(1 for c in records if (c.task, c.method, c.budget) == (row["task"], row["method"], row["budget"])
               and c.summary is not None and c.summary.best is not None and (row["split"], row["size"]) not in c.scores)


def _unscored(row: dict, made: int, records: list[ComparisonCell], rerun: str) -> list[str]:
    """What `_fewer_seeds` says of a test set on which fewer than the `made` heuristics have a test
    objective: not scored yet (the comparison's test scoring has not reached them), or scored without one."""
    where = f"on {row['split']}{row['size']}"
    waiting = _not_scored(row, records)
    scored, n = made - waiting, row["objective"]["n"]
    if not waiting:
        return [f"{where} only {n} of them scored"]
    said = [f"{where} {'' if waiting == made else f'{waiting} of them '}not scored yet ({rerun} to score "
            f"{'it' if waiting == 1 else 'them'})"]
    if n < scored:  # scored, yet without a test objective (the heuristic failed on the test set)
        said.append(f"{where} only {n} of the other {scored} scored")
    return said


def _fewer_seeds(rows: list[dict], records: list[ComparisonCell], rerun: str) -> list[str]:
    """A line per arm and budget of a task (`rows`: its method rows) whose means are over fewer seeds than
    it planned: the runs that produced no valid program are left out of them, so one lucky seed can stand
    for the arm, which the table's mean ± std alone does not show; nor do the runs not scored yet on a
    test set (`rerun`: how to score them)."""
    out = []
    arms: dict[tuple[str, int], list[dict]] = {}
    for row in rows:
        arms.setdefault((row["method"], row["budget"]), []).append(row)
    for (method, budget), sets in arms.items():
        first = sets[0]
        made, runs = first["with_heuristic"], first["runs"]
        unscored = [line for r in sets if r["objective"]["n"] < made for line in _unscored(r, made, records, rerun)]
        if made == runs and not unscored:
            continue
        where = f"{task_label(first['task'])} at budget {budget}: {_label(method)}"
        waiting = first["runs"] - first["finished"]
        said = f"{made} of {plural(runs, 'seed')} produced a valid program" + (
            f" ({waiting} not finished)" if waiting else "")
        # every seed made one: the line is only about the test sets below, not the seeds the means leave out
        mean = ("" if made == runs else "; it has no mean to compare" if made == 0 else
                "; its mean is that one seed's" if made == 1 else f"; its means are over those {made}")
        scored = "".join(f"; {line}" for line in unscored)
        out.append(f"{where}: {said}{mean}{scored}.")
    return out


def conclusions(config: CompareConfig, rows: list[dict], records: list[ComparisonCell],
                template: dict[tuple[str, str, int], float], unmatched: list[str],
                spend: Sequence[dict] = (), root: Path | None = None) -> list[str]:
    """What the comparison can and cannot conclude, in plain sentences. `spend`: the arms that spend
    other than T (plan.arm_spend); a Δ whose two arms spend differently says so. `root`: the comparison
    directory, which the way to score runs not scored yet names."""
    out = []
    rerun = f"rerun `coevolve compare CONFIG --out {root}`" if root is not None else "rerun coevolve compare"
    spent = {(e["task"], e["budget"], e["arm"]): e["evaluations"] for e in spend}
    finished = [r for r in records if r.summary is not None]
    for task_name in config.compare.tasks:
        name = task_label(task_name)  # a file task by its name, as its runs' folder is: not its path
        mine = [r for r in finished if r.task == task_name]
        literal = [r for r in mine if r.best_is == "template"]
        seeds = [r for r in mine if r.best_is == "seed"]
        if literal:
            out.append(f"{name}: {len(literal)} of {len(mine)} finished runs returned the task template itself "
                       "as their best heuristic: they found nothing better than the starting point.")
        if seeds:
            out.append(f"{name}: {len(seeds)} of {len(mine)} finished runs returned one of the task's seed "
                       "heuristics as their best.")
        starts = [r for r in mine if r.best_is == "start"]
        if starts:
            out.append(f"{name}: {len(starts)} of {len(mine)} finished runs returned one of their starting "
                       "programs ([start] programs) as their best: they found nothing better than where they began.")
        for method in config.compare.methods:  # runs whose method never had a parent to build on
            runs = [r for r in mine if r.method == method]
            alone = [r for r in runs if (r.summary.context or {}).get("parentless", {}).get("asked", 0) > 0 and
                     r.summary.context["parentless"]["requests"] == r.summary.context["parentless"]["asked"]]
            if alone:
                out.append(f"{name}: in {len(alone)} of {len(runs)} finished {_label(method)} runs every request "
                           "for an operator that builds on parents was asked as i1 (no valid program to build on): "
                           "those runs searched as Sample does.")
        for split, size in list(dict.fromkeys(k[1:] for k in template if k[0] == task_name)):
            same = [r for r in mine if r.best_is is None and at_template(r, split, size, template[(task_name, split, size)])]
            if same:
                whose = "1 more run's" if len(same) == 1 else f"{len(same)} more runs'"
                out.append(f"{name} {split}{size}: {whose} best scores exactly what the template "
                           f"scores ({fmt_number(template[(task_name, split, size)])}).")
        direction = heuristic_task(task_name).direction
        for row in rows:
            if row["kind"] == "method" and row["task"] == task_name:
                out += _worse_than_template(row, records, template.get((task_name, row["split"], row["size"])),
                                            direction)
        out += _fewer_seeds([r for r in rows if r["kind"] == "method" and r["task"] == task_name], records, rerun)
    for row in rows:
        if row["kind"] != "delta":
            continue
        where = (f"{_label(row['base'])} vs {_label(row['variant'])} on {task_label(row['task'])} "
                 f"{row['split']}{row['size']} at budget {row['budget']}")
        base, variant = (spent.get((row["task"], row["budget"], row[k]), row["budget"]) for k in ("base", "variant"))
        unequal = (f" (not budget-matched: {_label(row['variant'])} spent {plural(variant, 'evaluation')} a run, "
                   f"{_label(row['base'])} {base})" if base != variant else "")
        # Δ's table cell names the arm beyond the reference; here why a ratio of gaps is no measure there
        beyond = (f" Δ is {row['delta_note']}: with a gap ≤ 0 a ratio of gaps has no sign to read, so the "
                  "mean objectives are the measure." if row.get("delta_note") else "")
        if row.get("unfinished"):
            out.append(f"{where}: not compared yet: {row['why']}.")
        elif row["distinct"] is True:
            out.append(f"{where}: the arms differ: {row['why']}{unequal}.{beyond}")
        else:
            out.append(f"{where}: cannot be told apart: {row['why']}{unequal}.{beyond}")
    if unmatched:
        out.append("The +ESOpt arms are NOT structurally matched to their base methods (allowed knowingly with "
                   "compare.allow_unmatched): " + "; ".join(unmatched) + ". Differences may come from the plans, "
                   "not from ESOpt.")
    return out


def unpaired_line(config: CompareConfig) -> str | None:
    """The sentence for the compared methods in no pair (plan.compared_pairs), which get no Δ row and
    no verdict, with the compare.baseline that would give them one; None when every method is paired
    (or only one is compared). Said once: the pairs are the same at every task and budget."""
    methods = config.compare.methods
    paired = {m for pair in compared_pairs(config) for m in pair}
    alone = [m for m in methods if m not in paired]
    if len(methods) < 2 or not alone:
        return None
    # a built-in name is the likelier yardstick (EoH against a user's file method), else the first alone
    plain = [m for m in methods if registry.is_method(m)]
    suggest = next((m for m in alone if m in plain), plain[0] if len(alone) == 1 and plain else alone[0])
    if len(alone) == 1:
        whom = f"{_label(alone[0])} is compared pairwise with no other method (no Δ row or verdict)"
        between = f"{_label(alone[0])} and each other method"
    else:
        names = [_label(m) for m in alone]
        whom = f"{', '.join(names[:-1])} and {names[-1]} are not compared pairwise (no Δ row or verdict between them)"
        between = "them"
    return f"{whom}: set [compare] baseline = {json.dumps(suggest)} for a verdict between {between}."


def budget_sentence(config: CompareConfig, spend: list[dict], budget: int | str) -> str:
    """The report's (and results.json's) sentence on the budget: every run's T (`budget`: the first, or
    "B") and how the ledger counts it, then each arm that spends other than T (`spend`, plan.arm_spend)
    and why, and whether the arms therefore spend unequally."""
    c = config.compare
    same = "" if len(c.budgets) == 1 else " (The same holds for each budget listed.)"
    if not spend:
        return BUDGET_STATEMENT.format(whose=EVERY_RUN, budget=budget) + same
    cells = {(task, b) for task in c.tasks for b in c.budgets}
    groups: dict[tuple[str, int, str], list[tuple[str, int]]] = {}  # (arm, its spend - T, why) -> where
    for e in spend:
        outside = e["outside_budget"] and e["evaluations"] == e["budget"] + e["outside_budget"]
        why = ("its initial population, charged outside T as the paper counts T"
               + (f" ({e['setting']})" if e["setting"] else "")) if outside else spend_reason(e)
        groups.setdefault((e["arm"], e["evaluations"] - e["budget"], why), []).append((e["task"], e["budget"]))
    said = [f"{_label(arm)} spends {abs(more)} {'more' if more > 0 else 'fewer'} "
            f"{'evaluation' if abs(more) == 1 else 'evaluations'} than T: {why}"
            + ("" if set(where) == cells
               else " (at " + ", ".join(f"{task_label(t)} budget {b}" for t, b in where) + ")")
            for (arm, more, why), where in groups.items()]
    return (BUDGET_STATEMENT.format(whose="Every run's budget T is", budget=budget) + same
            + " " + "; ".join(said) + "."
            + (" So the arms do not spend the same evaluations: a difference between them may come from the "
               "evaluations, not the method." if any(e["unequal"] for e in spend) else ""))


def ledger_table(config: CompareConfig, records: list[ComparisonCell]) -> str:
    """What the budget bought, per method: ledger outcomes and LLM traffic, summed over finished runs."""
    # a task's evaluation cascade (coevolve/search/cascade.py) stops some candidates at stage 1: a column then
    kinds = ["evaluated", "duplicate", "parse"]
    if any(r.summary is not None and r.summary.ledger.outcomes.get("cascade") for r in records):
        kinds.append("cascade")
    # +trace2skill: the analysts' evaluations make no candidate, so the valid rate per evaluation is lower
    # than per candidate and the arms' train valid rates are not like for like
    analysts = any(r.summary is not None and analyst_evaluations(r.summary) for r in records)
    if analysts:
        kinds.append(registry.DISTILL)
    lines = ["| Method | runs | evaluations | evaluated | duplicate | no code (parse) | "
             + ("stopped at stage 1 (cascade) | " if "cascade" in kinds else "")
             + ("skill analysts | valid of the candidates | " if analysts else "")
             + "LLM requests | completion tokens |", "|---" * (5 + len(kinds) + analysts) + "|"]
    for method in ordered_arms(config):
        done = [r.summary for r in records if r.method == method and r.summary is not None]
        ledgers = [s.ledger for s in done]
        cells = [_label(method), str(len(done)), str(sum(s.evaluations for s in done))]
        cells += [str(sum(ledger.outcomes.get(k, 0) for ledger in ledgers)) for k in kinds]
        if analysts:
            valid, made = sum(s.valid for s in done), sum(s.evaluations - analyst_evaluations(s) for s in done)
            cells.append(f"{valid} of {made}" + (f" ({valid / made:.1%})" if made else ""))
        cells += [str(sum(ledger.llm_requests for ledger in ledgers)),
                  str(sum(ledger.completion_tokens for ledger in ledgers))]
        lines.append("| " + " | ".join(cells) + " |")
    if analysts:
        lines += ["", "Skill analysts: evaluations spent on a skill refresh's analyst requests, which make no "
                      "candidate; the table's train valid rate counts them as evaluations that were not valid, "
                      "valid of the candidates leaves them out."]
    return "\n".join(lines)


def analyst_evaluations(summary: Any) -> int:
    """The evaluations a run's skill refreshes spent on analyst requests (its ledger's distill outcome):
    charged as candidates are, though they make none."""
    return summary.ledger.outcomes.get(registry.DISTILL, 0)


# --------------------------------------------------------------- rendering
def still_running(directory: Path, writer: str) -> str:
    """The line `coevolve report` refuses a run or a comparison with while `writer` (writer_of) writes it."""
    return f"{directory} is still running ({writer}): report it once it has finished"


def render_comparison(root: str | Path) -> dict[str, Path]:
    """Write report.md, table.csv, runs.csv, results.json and plots/ for a comparison. `coevolve compare`
    writes the same files: a comparison another process runs is refused (`still_running`), and the report
    holds the comparison's writer lock from its first read to its last write, so a `coevolve compare`
    started meanwhile is refused rather than outlived by a report of the runs as they stood before it.
    The process running the comparison shares its own lock (its report at the end)."""
    root = Path(root)
    writer = writer_of(root)
    if writer is not None:
        raise UsageError(still_running(root, writer))
    release = hold_directory(root, f"`coevolve report {root}`")
    try:
        return _render_comparison(root)
    finally:
        release()


def _render_comparison(root: Path) -> dict[str, Path]:
    # file tasks from the comparison's own copies when the originals are gone or changed (an agent
    # comparison's too: one written before its task paths were recorded absolute names them relative to
    # where it was run); method files likewise
    remember_tasks(root, "copy")
    registry.remember_methods(root, "copy")
    raw = read_toml(root / COMPARE_CONFIG)  # read once: the kind, then the config collect_logged builds
    if config_class(raw) is AgentCompareConfig:  # agent arms: their own tables
        return render_agent_comparison(root)
    config, records, logs = collect_logged(root, raw)
    template = baselines(config, root)
    rows = aggregate(config, records, template)
    unmatched = structural_differences(config)
    # what each arm spends, from the plans `--plan` prints and the comparison warned of before it ran
    spend = arm_spend(config, arm_plans(arm_runs(config)))
    written: dict[str, Path] = {}
    plots: dict[tuple, Path] = {}
    for task_name in config.compare.tasks:
        for budget in config.compare.budgets:
            plots[(task_name, budget)] = plot_progress(config, records, task_name, budget,
                                                       root / "plots" / f"progress-{task_label(task_name)}-b{budget}.png")
        for split, size in scored_sets(config, heuristic_task(task_name)):
            plots[(task_name, split, size)] = plot_test_scores(
                config, rows, records, task_name, split, size,
                root / "plots" / f"test-{task_label(task_name)}-{split}{size}.png", template.get((task_name, split, size)))
        if compared_pairs(config):
            plots[(task_name, "differences")] = plot_differences(
                rows, task_name, heuristic_task(task_name).direction,
                root / "plots" / f"differences-{task_label(task_name)}.png")

    c, t = config.compare, config.test
    finished = sum(1 for r in records if r.state == "finished")
    parts = [f"# Comparison: {', '.join(_label(m) for m in c.methods)}",
             "",
             f"Tasks: {', '.join(map(task_label, c.tasks))}. Budgets: {', '.join(map(str, c.budgets))} evaluations. "
             f"Seeds: {', '.join(map(str, c.seeds))}. Runs finished: {finished} of {len(records)}.",
             "",
             budget_sentence(config, spend, c.budgets[0]),
             "",
             "Each run's heuristic is its best by training objective (best.py, chosen before any test "
             "score exists); it is scored on the test sets below with the same sandbox scoring as "
             "`coevolve eval`. Objective and gap are mean ± sample std over the seeds whose run produced "
             "a heuristic; gap = relative distance to the reference, positive when worse. "
             + (("Δ = gap of the base method / gap of its +ESOpt variant − 1, from the mean gaps (the "
                 "paper's gain, §6: +22.96% means the base method's gap is 22.96% larger); results.json "
                 "also holds gap_closed = (base gap − variant gap) / base gap. Where an arm's mean gap is ≤ 0 "
                 "(it reaches or beats the reference, which a heuristic reference allows) Δ is n/a: a ratio "
                 "of gaps then has no sign to read, and the row gives the mean objectives instead."
                 + (" Every other method is set against Sample the same way (Sample's gap / its gap − 1)."
                    if SAMPLE in c.methods else "")
                 + (f" Every other method is also set against {_label(c.baseline)} (compare.baseline) the same way "
                    f"({_label(c.baseline)}'s gap / its gap − 1), where the two are not a pair already."
                    if c.baseline else ""))
                if compared_pairs(config) else ""),
             ""]
    if c.arms:
        parts += ["Named arms run a method with some settings otherwise; every other setting is the comparison's, "
                  "the same for every arm, and a named arm's Δ row compares it with the method it runs, as a "
                  "+ESOpt variant's with its base:", ""] + [f"- {line}" for line in arm_lines(config)] + [""]
    verdicts = conclusions(config, rows, records, template, unmatched, spend, root)
    verdicts += [line for line in [unpaired_line(config)] if line]  # once: the pairs are every task's and budget's
    if verdicts:
        parts += ["## What this comparison can and cannot conclude", ""] + [f"- {v}" for v in verdicts] + [""]
    if t.limit:
        parts += [f"Test sets cut to their first {t.limit} instances (test.limit; the reference is "
                  "computed on the same cut sets): numbers are not the paper's full-set numbers.", ""]
    if t.seeds > 1:
        parts += [f"Each best heuristic's test objective is its mean under {t.seeds} seeds of its random "
                  "generators (test.seeds), as the starting point's.", ""]
    if config.sandbox.seeds > 1:
        parts += [f"The runs scored each program under {config.sandbox.seeds} seeds of its random generators and "
                  "kept the mean (sandbox.seeds): the training objectives are means.", ""]
    for task_name in c.tasks:
        task = heuristic_task(task_name)
        name = task_label(task_name)  # a file task by its name (its runs' folder), not its path
        parts += [f"## {name} ({'lower' if task.direction == 'min' else 'higher'} is better)", ""]
        if name != task_name:  # ... and one line says which file it is
            parts += [f"Task: `{task_name}`", ""]
        references = {(s.split, s.size): (s.reference, s.reference_kind)
                      for rec in records if rec.task == task_name for s in rec.scores.values()}
        if references:
            parts += ["References: " + "; ".join(
                f"{split}{size} = {fmt_number(value)} ({kind or 'none'})"
                for (split, size), (value, kind) in sorted(references.items())), ""]
        for budget in c.budgets:
            parts += [f"### Budget {budget}", "", markdown_table(config, rows, task_name, budget, template), "",
                      f"![best so far]({plots[(task_name, budget)].relative_to(root)})", ""]
        for split, size in scored_sets(config, task):
            parts += [f"![test scores]({plots[(task_name, split, size)].relative_to(root)})", ""]
        if (task_name, "differences") in plots:
            parts += ["Each pair's difference of mean test objectives (variant − base, % of the base's mean) with "
                      "Welch's 95% interval: a line that crosses 0 is a pair the seeds cannot tell apart.", "",
                      f"![differences]({plots[(task_name, 'differences')].relative_to(root)})", ""]
    parts += ["## What the budget bought", "", ledger_table(config, records), ""]
    failures = failure_rows(root, records, logs)
    if any(r["failed"] or r["damage"] for r in failures):  # a damaged arm may have lost its failed lines
        parts += ["## Why candidates failed", "", failure_table(failures), ""]
    skill = skill_rows(root, records, logs)
    if skill:
        parts += ["## What the skill's requests did", "", skill_table(skill), ""]
    directions = {task_name: heuristic_task(task_name).direction for task_name in c.tasks}  # built once each
    parts += ["## Runs", "", "| task | method | budget | seed | state | valid | train best | best is | directory |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        s = r.summary
        valid = f"{s.valid}/{s.evaluations}" if s else "–"
        if s and s.distinct_valid is not None and s.distinct_valid != s.valid:
            valid += f" ({s.distinct_valid} distinct)"
        parts.append(f"| {task_label(r.task)} | {_label(r.method)} | {r.budget} | {r.seed} | {r.state} | "
                     f"{valid} | {fmt_number(s.best.objective if s and s.best else None)} | "
                     f"{best_is_cell(r, template, directions[r.task])}"
                     f" | [{r.dir}]({r.dir}/) |")
    written["report.md"] = root / "report.md"
    atomic_write_text(written["report.md"], "\n".join(parts) + "\n")
    written["table.csv"] = root / "table.csv"
    _write_csv(written["table.csv"], _table_rows_csv(rows))
    written["runs.csv"] = root / "runs.csv"
    _write_csv(written["runs.csv"], run_rows(records))
    written["results.json"] = root / "results.json"
    atomic_write_json(written["results.json"], {
        "config": {"compare": vars(c), "test": vars(t)},
        "budget_counts": budget_sentence(config, spend, "B"),
        "rows": rows, "runs": run_rows(records), "conclusions": verdicts, "named_arms": arm_lines(config),
        "template": [{"task": k[0], "split": k[1], "size": k[2], "objective": v} for k, v in template.items()],
        # matched: each +ESOpt arm plans the steps its base method does, and every arm spends the same
        # evaluations at each task and budget (docs/compare.md, "What is compared, and how fairly")
        "structurally_matched": not unmatched and not any(e["unequal"] for e in spend),
        "off_budget_arms": spend,  # each arm that spends other than T (plan.arm_spend)
        "skill": skill,  # what the skill's requests did, per arm (collecting.skill_rows; [] without a skill)
        "failures": failures})  # why each arm's candidates failed (collecting.failure_rows)
    for key, path in plots.items():
        written["plots/" + path.name] = path
    return written


def failure_table(rows: list[dict]) -> str:
    """collecting.failure_rows as markdown: what killed the candidates each arm paid for."""
    lines = ["Failed candidates of the finished runs (repeats of failed code included) and the commonest causes: "
             "a traceback's last line, or the check that refused the answer; causes that differ only in their "
             "numbers count as one.", "",
             "| task | method | budget | failed | commonest causes |", "|---|---|---|---|---|"]
    for r in rows:
        causes = "; ".join(f"`{cause.replace('|', '/').replace('`', chr(39))}` ({n})" for cause, n in r["causes"])
        lines.append(f"| {task_label(r['task'])} | {_label(r['method'])} | {r['budget']} | {r['failed']} of "
                     f"{r['candidates']} | {causes or '–'} |")
    # as a single run's report notes it (collecting.run_damage): the row counts the file as it is now
    lines += [f"\n**{note}.**" for r in rows for note in r["damage"]]
    return "\n".join(lines)


def skill_table(rows: list[dict]) -> str:
    """collecting.skill_rows as markdown, with what its two sides can be compared for."""

    def side(counts: dict) -> str:
        n = counts["candidates"]
        return f"{counts['valid']} / {counts['improved']} of {n}" if n else "–"

    lines = ["Candidates whose prompt showed a skill, and those that showed none: how many scored / how many "
             "beat every parent shown. " + SKILL_SIDES, "",
             "| task | method | budget | runs | before the first refresh | skill shown | none shown | trials judged "
             "| kept | told apart | ahead at the end |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ahead = ", ".join(version_label(v) for v in r["ahead"]) or "–"
        lines.append(f"| {task_label(r['task'])} | {_label(r['method'])} | {r['budget']} | {r['runs']} | "
                     f"{side(r['before'])} | {side(r['skill'])} | {side(r['none'])} | {r['judged'] or '–'} | "
                     f"{r['kept'] if r['judged'] else '–'} | "
                     f"{r['distinct'] if r['judged'] else '–'} | {ahead} |")
    return "\n".join(lines)


def _resume_refusal(store: RunStore) -> str | None:
    """The line `coevolve run --resume` refuses the run with for a task or method file edited since the run
    started (tasks.loader.locate_files, the resume's own check), or None: the advice to resume a run must
    not be one its resume refuses."""
    for record, what, flag in ((TASKS, "task", "--task-changed"), (registry.RECORD, "method", None)):
        try:
            locate_files(store.dir, record, what, "refuse", flag)
        except TaskSpecError as exc:
            return str(exc)
    return None


def render_run(directory: str | Path) -> dict[str, Path]:
    """One run: progress.png again from summary.json, and report.md with its
    table (the one `coevolve run` prints) and any test scores. As render_comparison: a run another
    process writes is refused (`still_running`), and the report holds the run's writer lock from its
    first read to its last write, so a `coevolve run --resume` started meanwhile is refused rather than
    outlived by a report of the run as it stood before it."""
    store = RunStore.open(directory)
    # every refusal before the hold, which would leave a lock file in a folder that is no run (new-task's)
    if not store.path("summary.json").exists() and not store.events_path.exists():
        raise UsageError(f"{store.dir} is not a run directory (no events.jsonl, no summary.json): give a run's "
                         "or a comparison's directory")
    writer = store.writer()  # a run still going: resuming it would make two writers (refused)
    if writer is not None:
        raise UsageError(still_running(store.dir, writer))
    if read_summary(store.path("summary.json")) is None:
        raise UsageError(f"{store.dir} has no summary.json yet: " + (
            f"`coevolve run --resume {store.dir}` refuses to finish it: {refusal}"
            if (refusal := _resume_refusal(store)) else f"finish it with `coevolve run --resume {store.dir}`"))
    store.hold(f"`coevolve report {store.dir}`")
    with store:
        return _render_run(store, read_summary(store.path("summary.json")))  # read again, under the hold


def _render_run(store: RunStore, summary: SearchSummary | AgentSummary) -> dict[str, Path]:
    if isinstance(summary, AgentSummary):
        return render_agent_run(store, summary)
    direction = summary.train.direction
    plot = plot_run_progress(summary, store.path("progress.png"))
    found = run_starting_point(store.dir, summary.task) if summary.best else None
    events = store.events()  # read once: the skill use row and the damage notes below both take it
    parts = [f"# Run: {registry.display_name(summary.method)} on {summary.task}, seed {summary.seed}", "", "```",
             _table(_run_rows(summary, store.dir, found, requests_name_versions(events))), "```", "",
             BUDGET_STATEMENT.format(whose="This run's budget is", budget=summary.budget),
             ""]
    damage = log_damage(store, events)
    if damage is not None:  # an emptied or edited log: not a run "killed before its end"
        parts += [f"**{damage}. The table is the summary the run last wrote.**", ""]
    elif ended(events) or (summary.stopped is not None and events and events[-1].get("type") == "stop"):
        # the summary is the log's last word (a run stopped by a cap ends on its stop event): the files
        # derived with it should say what the log says
        for note in derived_damage(store, events, summary):
            parts += [f"**{note}.**", ""]
    elif summary.stopped is None:  # given more budget, or killed, after this summary
        more = extended_budget(events)
        going = f"its extension to {more} evaluations (`--resume --budget`) has not finished" if more else \
            "its log goes on past this summary (it was killed before its end)"
        refusal = _resume_refusal(store)
        then = (f"`coevolve run --resume {store.dir}` refuses to go on: {refusal}" if refusal else
                f"`coevolve run --resume {store.dir}` goes on")
        parts += [f"**This run is not finished: {going}; the table is the summary it last wrote. {then}.**", ""]
    drew = next((e for e in events if e.get("type") == GLOBAL_DRAW), None)
    if drew is not None:  # the run is not a function of its seed: a reader comparing seeds should know
        parts += [f"**Not reproducible from its seed: {drew.get('note', 'its method drew from a global generator')}.**",
                  ""]
    if found:
        parts += [f"**This run's best heuristic is {STARTING_POINT[found]} itself: it found nothing better than "
                  "its starting point.**", ""]
    elif summary.best is None:
        parts += ["**This run produced no valid heuristic.**", ""]
    tests = read_record(store.path(TEST_SCORES), TestScores)
    if tests and tests.scores:
        parts += ["| test set | instances | objective | reference | gap | failure |", "|---|---|---|---|---|---|"]
        for s in tests.scores:
            gap = "–" if s.gap is None else f"{100 * s.gap:.2f}%"
            parts.append(f"| {s.split}{s.size} | {s.instances} | {fmt_number(s.objective)} | "
                         f"{fmt_number(s.reference)} | {gap} | {s.failure or ''} |")
        parts.append("")
    parts.append("![best so far](progress.png)")
    figures = registry.run_figures(store.config_path, store.dir, direction)  # the method's archive (a heat map...)
    parts += [f"![{name}]({path.name})" for name, path in figures.items()]
    atomic_write_text(store.path("report.md"), "\n".join(parts) + "\n")
    return {"report.md": store.path("report.md"), "progress.png": plot, **{f"{k}.png": v for k, v in figures.items()}}


STARTING_POINT = {"template": "the task template", "seed": "a seed heuristic",
                  "start": "a starting program ([start] programs)"}
SCORES_AS_TEMPLATE = "a program scoring as the task template"


WORSE_THAN_TEMPLATE = "a program worse than the task template"


def best_is_cell(cell: ComparisonCell, template: dict, direction: Direction) -> str:
    """The Runs table's "best is": a starting point the run returned, or a program of its own that
    scores exactly as the template on every test set (left blank, it read as a better program; the
    conclusions count it among the runs whose best scores what the template scores), or one that scores
    worse than the template on every test set it was scored on (blank, it read as a find)."""
    if cell.best_is is not None:
        return STARTING_POINT.get(cell.best_is, "")
    sets = [(split, size) for (task, split, size) in template if task == cell.task]
    if sets and all(at_template(cell, split, size, template[(cell.task, split, size)]) for split, size in sets):
        return SCORES_AS_TEMPLATE
    scored = [(cell.scores[s].objective, template[(cell.task, *s)]) for s in sets
              if s in cell.scores and cell.scores[s].objective is not None]
    if scored and all(worse_than_template(objective, mine, direction) for objective, mine in scored):
        return WORSE_THAN_TEMPLATE
    return ""


def es_updates(es: ESCounts) -> str:
    """ "12", or "12 (5 with every member's reward equal: no weight moved)"."""
    updates, flat = es_counts(es)
    if not flat:
        return str(updates)
    return f"{updates} ({flat} with every member's reward equal: no weight moved)"


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in rows)


def run_table(summary: SearchSummary, directory: Path) -> str:
    """The table `coevolve run` prints at the end of a run."""
    return _table(run_table_rows(summary, directory))


def run_table_rows(summary: SearchSummary, directory: Path,
                   build_task: TaskBuilder | None = None) -> list[tuple[str, str]]:
    """run_table's (name, value) rows, for a reader that lays them out itself (the dashboard, which hands
    in `build_task`, its own once-per-name builds: the task is built only when the best is compared with
    its template)."""
    found = run_starting_point(directory, summary.task, build_task) if summary.best else None
    return _run_rows(summary, directory, found)


def _run_rows(summary: SearchSummary, directory: Path, found: str | None,
              versions_named: bool | None = None) -> list[tuple[str, str]]:
    """run_table's rows; `found`: what the best is the starting point of (run_starting_point);
    `versions_named`: as skill_use_rows takes it."""
    best = summary.best
    train = summary.train
    ledger = summary.ledger
    gap = best.gap if best else None
    rows = [
        ("method", registry.display_name(summary.method)),
        ("task", f"{summary.task} ({train.split}{train.size}, {train.direction})"),
        # as the run's plan says it (`total: 16 evaluations = T 12 + 4 initial`): 16 / 12 alone reads as overspent
        ("evaluations", f"{summary.evaluations} / {summary.budget}"
                        + (f" (+ {summary.outside_budget} initial outside T)" if summary.outside_budget else "")),
        ("valid", valid_line(summary) + _distinct(summary)),
        ("failures", ", ".join(f"{k} {v}" for k, v in summary.failures.items()) or "-"),
        *([("commonest failures", "; ".join(f"{cause} ({n})" for cause, n in commonest_failures(directory)))]
          if summary.failures else []),
        *([("repeated code", f"{ledger.outcomes['duplicate']} of {summary.evaluations} evaluations repeated an "
                             "earlier candidate's code (charged, its score reused)")]
          if ledger.outcomes.get("duplicate") else []),
        ("best objective", "-" if not best else f"{best.objective:.6g} (candidate {best.id}, {best.operator})"),
        *([("best is", f"{STARTING_POINT[found]} itself: nothing better than the starting point was found")]
          if found else []),
        ("reference", f"{train.reference:.6g}" if train.reference is not None else
         f"- (none usable: {train.reference_problem})" if train.reference_problem else "-"),
        ("gap", "-" if gap is None else f"{gap:.2%}"),
        ("LLM requests", f"{ledger.llm_requests} ({ledger.prompt_tokens} prompt + "
                         f"{ledger.completion_tokens} completion tokens"
                         + (f", {ledger.llm_retries} retried" if ledger.llm_retries else "") + ")"),
        *endpoint_rows(directory),
    ]
    if ledger.parse_retries or ledger.clone_retries:
        rows.append(("free re-asks", f"{ledger.parse_retries} of unparseable replies, {ledger.clone_retries} of "
                                     "clones (not charged to the budget)"))
    if summary.es:
        rows.append(("ES updates", es_updates(summary.es)))
    context = context_rows(summary.context, summary.stopped, skill_max_tokens(summary, directory),
                           best=best.objective if best else None, direction=train.direction)
    named = [name for name, _ in context]
    at = max((i + 1 for i, name in enumerate(named) if name in ("starting skill", "skill versions", "skill trial")),
             default=len(named))
    rows += context[:at] + skill_use_rows(summary, directory, versions_named) + context[at:]
    rows.append(("run directory", str(directory)))
    return rows


def skill_max_tokens(summary: SearchSummary, directory: Path) -> int | None:
    """The run's skill.max_tokens from its config.toml, read only where analysts' replies ended at it
    (None: none did, or the file is gone)."""
    config = Path(directory) / "config.toml"
    if not (summary.context or {}).get("analysts_cut_off") or not config.is_file():
        return None
    return read_toml(config).get("skill", {}).get("max_tokens", SKILL_MAX_TOKENS)


def valid_line(summary: SearchSummary) -> str:
    """The run's valid candidates and its valid rate (summary.json's valid_rate: per evaluation); where
    skill analysts spent evaluations, which make no candidate, the rate per candidate first."""
    analysts = analyst_evaluations(summary)
    if not analysts:
        return f"{summary.valid} ({summary.valid_rate:.1%})"
    made = summary.evaluations - analysts
    rate = f" ({summary.valid / made:.1%})" if made else ""
    return (f"{summary.valid} of {made} candidates{rate}; {summary.valid_rate:.1%} of the {summary.evaluations} "
            f"evaluations, {analysts} went to skill analysts")


def skill_use_rows(summary: SearchSummary, directory: Path,
                   versions_named: bool | None = None) -> list[tuple[str, str]]:
    """The `skill use` row under skill.keep = "latest": per version shown (and no skill), its candidates,
    how many scored and how many beat every parent shown, with why that is no comparison. None under
    "judged" (its trial rows count the versions over the same steps: one source of those numbers), nor
    for a run that showed no skill or whose log does not name each request's version. `versions_named`:
    requests_name_versions of the run's log where the caller read it already (None: read here)."""
    context = summary.context or {}
    if context.get("skill_trials"):
        return []
    use = skill_use(directory, summary, versions_named)
    if use is None:
        return []
    shown = ", ".join(f"{trial_label(version, context)} {c['candidates']} ({c['valid']} valid, {c['improved']} beat)"
                      for version, c in use["versions"])
    before = ("" if use["since"] is None else
              f"; no skill = the requests before the first refresh, at step {use['since']}, when the archive was young")
    why = ("every request showed the one skill: nothing to compare it with" if len(use["versions"]) == 1 else
           f"the versions follow each other in time (skill.keep = \"latest\"{before}), so this is not a comparison")
    return [("skill use", f"{shown}: candidates shown each, how many scored and how many beat every parent shown "
                          f"(without parents, scoring counts as beating them). {why[0].upper() + why[1:]}: "
                          "use skill.keep = \"judged\", or compare arms")]


def endpoint_rows(directory: Path) -> list[tuple[str, str]]:
    """The `endpoint` row of a run that asked an [endpoint] (its endpoint.json, which the run writes before
    its first step): the URL and the model, or an ensemble's models with their configured weights. No row
    without one, nor when the file cannot be read (the rest of the table is still the run's)."""
    try:
        record = json.loads((Path(directory) / ENDPOINT_RECORD).read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(record, dict) or not record.get("base_url"):
        return []
    models = record.get("models")
    if isinstance(models, dict) and len(models) > 1:
        named = "models " + ", ".join(f"{name} {weight:g}" if isinstance(weight, (int, float)) else str(name)
                                      for name, weight in models.items()) + " (configured weights)"
    else:
        named = f"model {record.get('model')}"
    return [("endpoint", f"{record['base_url']}, {named}")]


def _distinct(summary: SearchSummary) -> str:
    """How many of the valid candidates are programs of their own: a run whose proposer repeats one
    program (on the embedded model, often the template) counts each repeat as valid."""
    distinct = summary.distinct_valid
    if distinct is None or distinct == summary.valid:
        return ""
    repeats = summary.valid - distinct
    return f"; {distinct} distinct program{'s' * (distinct != 1)}, {repeats} repeat{'s' * (repeats != 1)}"


def trial_label(version: int | None, context: dict) -> str:
    """A version no refresh wrote: the starting skill's file, or no skill."""
    start = context.get("skill_start")
    return start["path"] if version == 0 and start else version_label(version)


PHASES = ("prompt steps", "ES generations")  # the order a run makes them in (summary.json sorts its keys)
SKILL_MAX_TOKENS = SkillSection.model_fields["max_tokens"].default  # a run's config.toml without [skill] max_tokens


def in_phase_order(phases: dict[str, Any]) -> list[tuple[str, Any]]:
    """A run's phases in one order, whether read live or from summary.json (written with sorted keys)."""
    return sorted(phases.items(), key=lambda item: PHASES.index(item[0]) if item[0] in PHASES else len(PHASES))


def origins_text(versions: list[dict]) -> str:
    """The latest version's rules, and where they came from when the summary says (`origins`, a RuleOrigins'
    counts; absent from older summaries: ` (5 rules)`): `: 5 rules (3 contract, 2 from the failures' own
    kinds; 0 of 2 analyses gave a usable rule)`, and how many of all refreshes' analyses did where there
    were more: a user reads "5 rules" as 5 things the model learnt, which stand-ins are not."""
    latest = versions[-1]
    if not isinstance(latest.get("origins"), dict):
        return f" ({plural(latest['rules'], 'rule')})"
    names = {f.name for f in fields(RuleOrigins)}
    text = RuleOrigins(**{k: v for k, v in latest["origins"].items() if k in names}).summary()
    counted = [v["origins"] for v in versions if isinstance(v.get("origins"), dict)]
    if len(counted) > 1:
        usable, made = (sum(o.get(k, 0) for o in counted) for k in ("usable", "analyses"))
        text += f"; all {len(counted)} refreshes: {usable} of {made} analyses usable"
    return ": " + text


def context_rows(context: dict | None, stopped: dict | None, skill_max_tokens: int | None = None, *,
                 best: float | None = None, direction: Direction | None = None) -> list[tuple[str, str]]:
    """The run table's rows for issue 25's context (absent from older summaries). `skill_max_tokens`: the
    run's skill.max_tokens, named where skill analysts' replies ended at it. `best`: the run's best training
    objective, and `direction` the task's: the `beat the template` row then says when the best is worse."""
    if not context:
        return []
    rows = [("valid per phase", ", ".join(f"{name} {p['valid']}/{p['candidates']}"
                                          + (f" ({p['valid'] / p['candidates']:.0%})" if p["candidates"] else "")
                                          for name, p in in_phase_order(context["phases"])) or "-"),
            ("decoding", "constrained to the template's def line" if context["constrain"] == "on"
             else context["constrain"])]
    if context["fingerprint"]:
        rows.append(("clones rejected", f"{context['rejected']} unscored ({context['rejected_template']} of the "
                                        "template)"))
    if context["parser_repairs"]:
        rows.append(("parser repairs", ", ".join(f"{k} {v}" for k, v in context["parser_repairs"].items())))
    parentless = context.get("parentless")  # absent from older summaries
    if parentless and parentless["requests"]:
        n, asked = parentless["requests"], parentless["asked"]
        rows.append(("no parent yet", f"{n} of {asked} requests for an operator that builds on parents were asked "
                                      "as i1: the archive held no valid program to build on"
                                      + (" (all of them: the run searched as Sample does)" if n == asked else "")))
    lean = context.get("leaned")  # absent from older summaries
    if lean and lean["requests"]:
        refused = lean.get("refused", 0)
        endpoint = (f" or the endpoint model's context (which refused {refused} prompt{'s' * (refused != 1)})"
                    if refused else "")
        rows.append(("prompts shortened", f"{lean['requests']} request{'s' * (lean['requests'] != 1)} left parts "
                                          f"out to fit [model] max_len = {lean['max_len']}{endpoint} (as far as "
                                          "needed, in order: the failure report, the parents' notes, the skill, all "
                                          "parents but the first; each step event's requests say how far)"))
    ties = context.get("tie_break")  # only under [eoh] tie_break
    if ties:
        tied = ties["tied"]
        rows.append(("tie-break", f"{', '.join(ties['ties'])} (eoh.tie_break): " + (
            f"the best won it over {tied} program{'s' if tied != 1 else ''} of its objective" if tied
            else "no other program had the best's objective")))
    if context.get("scoring_seeds", 1) > 1:  # absent from older summaries
        rows.append(("scoring", f"each program under {context['scoring_seeds']} seeds of its random generators, "
                                "the mean kept; one failing seed fails it ([sandbox] seeds)"))
    cut = context.get("cut_off")  # absent from older summaries
    analysts = context.get("analysts_cut_off") or 0  # likewise
    said = []
    if cut and cut["replies"]:
        scored = (("it still scored, with what parsed" if cut["valid"] else "it scored nothing")
                  if cut["replies"] == 1 else f"{cut['valid']} of them still scored, with what parsed")
        said.append(f"{cut['replies']} repl{'y' if cut['replies'] == 1 else 'ies'} ended at sampling.max_tokens = "
                    f"{cut['max_tokens']} ({scored})")
    if analysts:
        limit = "" if skill_max_tokens is None else f" = {skill_max_tokens}"
        said.append(f"{analysts} skill analyst repl{'y' if analysts == 1 else 'ies'} ended at skill.max_tokens{limit}")
    if said:
        rows.append(("cut off", "; ".join(said) + f"; raise {'it' if len(said) == 1 else 'them'} for longer answers"))
    if context["repair_requests"]:
        rows.append(("repair operator", f"{context['repaired_valid']} of {context['repair_requests']} fixed"))
    if context.get("proposers"):  # an endpoint ensemble
        rows.append(("proposers", ", ".join(
            f"{name} {p['candidates']} ({p['valid']} valid"
            # older summaries: no count
            + (f", {plural(p['improved'], 'success', 'successes')}" if "improved" in p else "")
            + (f"; next weight {p['weight']:.2f}" if "weight" in p else "") + ")"  # an adaptive ensemble
            for name, p in context["proposers"].items())
            # ensemble.improved's rule: a first-step (i1) candidate has no parent to beat
            + ("; a success scored and beat every scored parent it was shown (one without any: scored)"
               if any("improved" in p for p in context["proposers"].values()) else "")))
    if context.get("extended"):  # `coevolve run --resume DIR --budget N`
        rows.append(("budget raised", ", ".join(f"{e['from']} -> {e['budget']}" for e in context["extended"])
                     + " (--resume --budget; the steps before stayed as they were)"))
    edits = context.get("edits")
    if edits:  # the edit operator's answers
        rows.append(("edit answers", f"{edits['requests']}: {edits['applied']} applied as blocks, {edits['whole']} "
                                     f"whole programs, {edits['failed']} did not apply; {edits['valid']} valid"))
    if context.get("task_notes"):
        valid = sum(p["valid"] for p in context["phases"].values())
        rows.append(("task notes", f"on {context['task_notes']} of {valid} valid candidates (the task's feedback), "
                                   "shown under them as parents"))
    start = context.get("skill_start")
    if start:
        rows.append(("starting skill", f"{start['name']} ({plural(start['rules'], 'rule')}) from {start['source']}, "
                                       f"kept as {start['path']}"))
    versions = context["skill_versions"]
    trials = context.get("skill_trials", [])
    if versions:
        ahead = trials[-1]["kept"] if trials else versions[-1]["version"]
        kept = next((v for v in versions if v["version"] == ahead), None)
        judged = ("" if not trials or ahead == versions[-1]["version"]  # skill.keep = "judged": the one to carry on
                  else f"; ahead when the run ended: {kept['path'] if kept else trial_label(ahead, context)}")
        rows.append(("skill versions", f"{len(versions)}, latest {versions[-1]['path']}{origins_text(versions)}"
                                       f"{judged}"))
    for trial in trials:  # skill.keep = "judged"
        rows.append(("skill trial", trial_line(trial)))
    repeated = context.get("failures_repeated")  # absent from older summaries
    if repeated and repeated["shown"]:
        rows.append(("failure feedback", f"{repeated['repeated']} of {repeated['shown']} requests shown a failure "
                                         "returned a failed program unchanged"))
    starts = context.get("start_programs")  # absent from older summaries
    if starts:
        rows.append(("starting programs", f"{len(starts)} seeded, not charged: " + "; ".join(
            f"{Path(s['path']).name} (candidate {s['id']}) "
            + (f"{s['objective']:.6g}" if s["objective"] is not None else f"failed ({s['failure']})")
            for s in starts)))
    template = context.get("template_objective")
    if template is not None:
        rows.append(("beat the template", beat_template_text(context, template, best, direction)))
    if context.get("spend") is not None:
        rows.append(("endpoint spend", f"${context['spend']:.4f}"))
    if stopped:
        used, limit, cap = stopped["used"], stopped["limit"], stopped["cap"]
        if cap == "target":
            reached = f"the best {used:.6g} {'<=' if stopped.get('direction') == 'min' else '>='} {limit:g}"
        elif cap == "patience":
            reached = f"no better objective for {used:g} plan step{'' if used == 1 else 's'}"
        else:
            reached = f"{used:g} >= {limit:g}"
        rows.append(("stopped early", f"cap {cap} reached ({reached}) after "
                                      f"{plural(stopped['evaluations'], 'evaluation')}; "
                                      "raise it in config.toml and --resume to go on"))
    return rows


def beat_template_text(context: dict, template: float, best: float | None, direction: Direction | None) -> str:
    """The `beat the template` row: yes, or no, and when the best scores worse than the template (the
    run's best can: with [context] seed_template off the template is not in its archive) that it is the
    template that is the better program; a bare "no" read as "equal"."""
    seeded = ", seeded into the archive, not charged" if context.get("seed") else ""
    if context["beat_template"]:
        return f"yes (template {template:.6g}{seeded})"
    if best is not None and direction is not None and worse_than_template(best, template, direction):
        return f"no: WORSE than the template ({best:.6g} vs {template:.6g}{seeded}): the template is the better program"
    return f"no (template {template:.6g}{seeded})"


def agent_table(summary: AgentSummary, directory: Path) -> str:
    """The table `coevolve run` prints at the end of an agent run."""
    first, last = summary.eval_first, summary.eval_last
    ledger = summary.ledger

    def scores(e: Any) -> str:
        progress = getattr(e, "progress", None)
        shown = f", progress {progress:.3f}{progress_parts(e, summary.config)}" if progress is not None else ""
        return f"reward {e.mean_reward:.3f}{shown} (round {e.round})"

    protocol = heldout_protocol(summary.config)

    rows = [
        ("method", summary.method),
        ("task", summary.task),
        ("rounds", str(summary.rounds)),
        ("episodes", f"{ledger.used} / {ledger.budget}"),
        # a row of its own, not in the labels: the table's column stays as wide as before
        *([("held-out protocol", protocol)] if protocol else []),
        ("held-out before", scores(first)),
        ("held-out after", scores(last)),
        *([("held-out change", change_line(change))] if (change := heldout_change(directory, first.round, last.round))
          and first.round != last.round else []),
        ("best held-out reward", f"{summary.best_eval_reward:.3f}"),
        *seed_skill_rows(directory),
        ("distilled skill", distilled_skill_text(summary.skill, directory)),
    ]
    if summary.es:
        rows.append(("ES updates", es_updates(summary.es)))
    if summary.checksum is not None:
        rows.append(("weights checksum", summary.checksum))
    rows.append(("run directory", str(directory)))
    return _table(rows)


# what a task's dense "progress" is made of, as the table names them: progress 0.5 under constrained decoding
# is "well-formed by construction, nothing right", not halfway
PROGRESS_PARTS = (("cells_right_fraction", "right cells"), ("answered", "answered"))


def progress_parts(e: Any, config: dict) -> str:
    """` (well-formed 1.00 (constrained), right cells 0.00)`: the eval's components of progress that it
    holds; "" for an eval (or an older file) without them."""
    parts = []
    well_formed = getattr(e, "well_formed", None)
    if well_formed is not None:
        constrained = (config.get("agent") or {}).get("constrained", False)
        parts.append(f"well-formed {well_formed:.2f}{' (constrained)' if constrained else ''}")
    parts += [f"{name} {value:.2f}" for key, name in PROGRESS_PARTS if (value := getattr(e, key, None)) is not None]
    return f" ({', '.join(parts)})" if parts else ""


def heldout_protocol(config: dict) -> str:
    """`greedy, 16 problems`: how the run's held-out rows were scored, which differs from a comparison's
    sampled Mean@k; "" for a summary without its config."""
    agent = config.get("agent") or {}
    if "eval_cases" not in agent:
        return ""
    temperature = agent.get("eval_temperature", 0.0)
    how = "greedy" if not temperature else f"T {temperature:g}"
    cases = agent["eval_cases"]
    return f"{how}, {cases} problem{'s' * (cases != 1)} per evaluation"


def distilled_skill_text(path: str | None, directory: Path) -> str:
    """The distilled skill's path, its rules and where they came from (the run's last skill event: its
    `origins`, logged since online distillation records them, else the rules counted in its text), and
    whether best-of-N validation could tell its candidates apart."""
    if not path:
        return "-"
    logged = [e for e in read_jsonl(Path(directory) / "events.jsonl") if e.get("type") == "skill"]
    if not logged or not isinstance(logged[-1].get("text"), str):
        return path
    event = logged[-1]
    if isinstance(event.get("origins"), dict):
        text = origins_text([{"origins": event["origins"]}])
    else:
        try:
            text = f" ({plural(rule_count(parse_skill_text(event['text'], 'skill event').body), 'rule')})"
        except SkillError:
            text = ""  # a damaged event: the path alone, as before
    scores = [c.get("validation_score") for c in event.get("candidates") or []]
    if len(scores) > 1 and len(set(scores)) == 1:
        # equal scores mean validation chose nothing: the lowest seed is kept by the tie rule
        text += f"; {len(scores)} candidates tied on validation: first kept"
    return path + text


def seed_skill_rows(directory: Path) -> list[tuple[str, str]]:
    """The `seed skills` row of an agent run's table: each [skills] folder as the run's log pinned it (its
    seed_skills event), named with its rules as the heuristic table's `starting skill` row; none for a run
    without seed skills, or one written before the event existed."""
    events_path = Path(directory) / "events.jsonl"
    events = read_jsonl(events_path)
    try:
        skills = logged_seed_skills(events, events_path)
    except ResumeError:
        return []  # a damaged event: the run's resume says so, the table goes without the row
    if not skills:
        return []
    paths = [entry.get("path") for e in events if e.get("type") == SEED_SKILLS for entry in e["skills"]]
    return [("seed skills", "; ".join(f"{skill.name} ({plural(rule_count(skill.body), 'rule')}) from {path}"
                                      for skill, path in zip(skills, paths)))]


def change_line(change: dict) -> str:
    """heldout_change in words: the mean change, the problems that moved, whether that tells anything."""
    told = ("told apart" if change["p"] < 0.05 else "cannot be told apart") + f" (sign test p = {change['p']:.2g})"
    return (f"{change['change']:+.3f}: {change['better']} of {change['cases']} problems better, {change['worse']} "
            f"worse; {told}")


def render_agent_run(store: RunStore, summary: AgentSummary) -> dict[str, Path]:
    """An agent run: the table `coevolve run` prints and the held-out reward per
    round (from eval.jsonl, which runs before events.jsonl also wrote)."""
    path = store.path("eval.jsonl")
    evals = [parse(e, AgentEvalRound, f"{path} line {n}") for n, e in enumerate(read_jsonl(path), start=1)]
    curve = [(e.episodes_used, e.mean_reward) for e in evals]
    plot = plot_best_so_far({summary.method: curve}, store.path("progress.png"),
                            budget=summary.ledger.budget,
                            title=f"{summary.task}, {summary.method}, seed {'?' if summary.seed is None else summary.seed}",
                            ylabel="held-out mean reward (higher is better)",
                            xlabel="training episodes", ylim=(0.0, 1.0))  # a reward lies in [0, 1]
    parts = [f"# Agent run: {summary.method} on {summary.task}", "", "```",
             agent_table(summary, store.dir), "```", "",
             "Budget: training episodes, one ledger charge per episode; held-out evaluation is not charged.", "",
             "| round | episodes | held-out mean reward | skills |", "|---|---|---|---|"]
    parts += [f"| {e.round} | {e.episodes_used} | {e.mean_reward:.3f} | {', '.join(e.skills) or '-'} |"
              for e in evals]
    parts += ["", "![held-out reward](progress.png)"]
    atomic_write_text(store.path("report.md"), "\n".join(parts) + "\n")
    return {"report.md": store.path("report.md"), "progress.png": plot}


def render(directory: str | Path) -> dict[str, Path]:
    """A comparison directory or a run directory, whichever `directory` is."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(f"{directory} is a file; give the run's or comparison's directory" if directory.exists()
                         else f"directory not found: {directory}")
    if (directory / COMPARE_CONFIG).exists():
        return render_comparison(directory)
    if not (directory / "config.toml").exists():
        # a folder of runs (runs/, which the dashboard takes): say which folders below it this command takes
        below, more = reportable_below(directory)
        listed = (f"; below it: {', '.join(map(str, below))}{' and more' if more else ''}: give one of them"
                  if below else "")
        raise UsageError(f"{directory} is neither a comparison directory (no {COMPARE_CONFIG}) nor a run directory "
                         f"(no config.toml){listed}")
    return render_run(directory)


def reportable_below(directory: Path, most: int = 4, depth: int = 3, visits: int = 2000) -> tuple[list[Path], bool]:
    """Up to `most` comparison or run directories below `directory`, nearest first (a found one's own
    folders not searched: its runs are in its report), and whether there are more. The search goes at most
    `depth` levels down and looks into at most `visits` folders, hidden ones skipped: a mistyped path to a
    big tree answers at once."""
    found: list[Path] = []
    level = [directory]
    for _ in range(depth):
        deeper = []
        for parent in level:
            try:
                children = sorted(p for p in parent.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:  # unreadable: nothing to list from it
                continue
            for child in children:
                visits -= 1
                if visits < 0:  # searched no further: there may be more
                    return found[:most], bool(found)
                if (child / COMPARE_CONFIG).exists() or (child / "config.toml").exists():
                    found.append(child)
                    if len(found) > most:
                        return found[:most], True
                else:
                    deeper.append(child)
        level = deeper
    return found, False
