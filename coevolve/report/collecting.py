"""Collecting: a comparison's (or a run's) typed records from its directory, and
the numbers the report shows, aggregated over seeds. No text layout here
(coevolve.report.rendering) and no drawing (coevolve.report.plots).

Everything is rebuilt from the files on disk alone (summary.json and test.json
of each run, through coevolve.base.records); nothing is rerun.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

from coevolve.base.config import build_config, read_toml
from coevolve.base.errors import UsageError
from coevolve.base.untrusted import clean
from coevolve.base.records import (Candidate, ComparisonCell, ESCounts, SearchSummary, TestScores, read_record,
                                   read_summary)
from coevolve.plan import (COMPARE_CONFIG, TEST_SCORES, AgentCompareConfig, CompareConfig, RunSpec, agent_runs,
                           baseline_directory, compared_pairs, config_class, logged_state, planned_runs, scored_sets)
from coevolve.base.durable import read_jsonl
from coevolve.runstore import RunStore, kept_best_code, log_damage, scored_candidates
from coevolve.search import methods as registry
from coevolve.search.population import better
from coevolve.search.skill import requests_name_versions, shown_counts
from coevolve.stats import (MOST_SEEDS, Summary, gap_closed, paired_change, paper_delta, problem_means, seeds_needed,
                            summarise, welch_difference)
from tasks.base import Direction, HeuristicTask
from tasks.loader import remember_tasks
from tasks.registry import heuristic_task


def fmt_number(value: float | None) -> str:
    """The report's one number format (verdicts here, tables in render)."""
    if value is None:
        return "–"
    return f"{value:.4f}" if abs(value) < 1000 else f"{value:.1f}"


# ----------------------------------------------------------------- loading
class LogRead(NamedTuple):
    """What a comparison's report takes from a finished run's events.jsonl besides its state, from
    collect_logged's one read of it; the log itself is let go (a comparison's logs together hold every
    reply its runs got)."""

    damage: str | None  # why the log cannot be the one its run wrote (runstore.log_damage)
    scored: int  # the candidates its steps scored: what candidates.jsonl should hold (scored_candidates)
    versions_named: bool  # its requests name the skill version each showed (skill.requests_name_versions)


Logs = dict[str, LogRead]  # by the run's cell's dir


def planned_folders(root: Path, raw: dict | None = None) -> tuple[CompareConfig | AgentCompareConfig,
                                                                  list[tuple[RunSpec, Path]]]:
    """A comparison's config, built from its compare.toml as its [compare] kind says (`raw`: the file as a
    caller read it already), and the runs it plans, each with its folder, in the comparison's order: a
    heuristic comparison's every run (plan.planned_runs), an agent comparison's training runs
    (plan.agent_runs: its base arm is scored without a run). What the report collects and the
    dashboard lists."""
    raw = read_toml(Path(root) / COMPARE_CONFIG) if raw is None else raw
    kind = config_class(raw)
    config = build_config(kind, raw)
    specs = agent_runs(config) if kind is AgentCompareConfig else planned_runs(config)
    return config, [(spec, spec.directory(Path(root))) for spec in specs]  # a file task's folder: its name


def collect(root: Path) -> tuple[CompareConfig, list[ComparisonCell]]:
    """The comparison's config and one cell per planned run, from its files."""
    config, cells, _ = collect_logged(root)
    return config, cells


def collect_logged(root: Path, raw: dict | None = None) -> tuple[CompareConfig, list[ComparisonCell], Logs]:
    """`collect`, with what the report's later readers of a finished run's log (failure_rows' damage
    check, skill_rows) take from it, from the read that told the run's state: each run's events.jsonl
    is read once. `raw`: compare.toml as the caller read it already (None: read here)."""
    root = Path(root)
    if raw is None and not (root / COMPARE_CONFIG).exists():
        raise UsageError(f"{root} is not a comparison directory (no {COMPARE_CONFIG})")
    config, runs = planned_folders(root, raw)
    if isinstance(config, AgentCompareConfig):  # its arms are no search runs (coevolve.report.agents)
        raise UsageError(f"{root / COMPARE_CONFIG}: an agent comparison, whose report is its own")
    cells, logs = [], {}
    for spec, directory in runs:
        state, events = logged_state(directory)
        finished = state == "finished"
        summary = read_summary(directory / "summary.json") if finished else None
        if summary is not None and not isinstance(summary, SearchSummary):
            raise UsageError(f"{directory / 'summary.json'}: an {summary.kind} run's summary in a heuristic comparison")
        tests = read_record(directory / TEST_SCORES, TestScores) if finished else None
        cells.append(ComparisonCell(
            task=spec.task, method=spec.method, budget=spec.budget, seed=spec.seed,
            dir=str(directory.relative_to(root)), state=state, summary=summary,
            scores=tests.by_set() if tests else {},
            best_is=best_starting_point(directory, spec.task) if finished else None))
        if finished:
            logs[cells[-1].dir] = LogRead(log_damage(RunStore(directory), events), scored_candidates(events),
                                          requests_name_versions(events))
    return config, cells, logs


def baselines(config: CompareConfig, root: Path) -> dict[tuple[str, str, int], float]:
    """The task template's test objective per (task, split, size), where scored."""
    found = {}
    for task in config.compare.tasks:
        tests = read_record(baseline_directory(root, task) / TEST_SCORES, TestScores)
        for s in tests.scores if tests else []:
            if s.objective is not None:
                found[(task, s.split, s.size)] = s.objective
    return found


# ------------------------------------------------------ the starting point
def _function_shape(code: str, name: str) -> str | None:
    """The named function's AST without its docstring: equal for programs that
    differ only in comments, docstrings and layout."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body = body[1:]
            return ast.dump(ast.Module(body=body, type_ignores=[]), annotate_fields=False)
    return None


TaskBuilder = Callable[[str], HeuristicTask]  # a task by its name or spec (tasks.registry.heuristic_task)


def starting_point(code: str, task_name: str, build_task: TaskBuilder | None = None) -> str | None:
    """"template" when `code` is the task's template function (up to comments,
    docstring and layout), "seed" when it is one of the task's seed heuristics
    (a task's optional `seeds`), else None. `build_task`: a caller that keeps
    its tasks built (the dashboard) hands them in, not built again here."""
    task = (build_task or heuristic_task)(task_name)
    mine = _function_shape(code, task.function_name)
    if mine is None:
        return None
    if mine == _function_shape(task.template, task.function_name):
        return "template"
    if any(mine == _function_shape(seed, task.function_name) for seed in getattr(task, "seeds", None) or ()):
        return "seed"
    return None


def best_starting_point(directory: str | Path, task_name: str, build_task: TaskBuilder | None = None) -> str | None:
    """starting_point of a run directory's best.py (None when it has none); "start" when its best is
    one of the run's [start] programs (a negative id in summary.json)."""
    best, summary = Path(directory) / "best.py", Path(directory) / "summary.json"
    if not best.exists():
        return None
    if summary.exists():
        found = read_summary(summary)
        if isinstance(found, SearchSummary) and found.best is not None and found.best.id < 0:
            return "start"
    return starting_point(best.read_text(encoding="utf-8"), task_name, build_task)


def run_starting_point(directory: str | Path, task_label: str, build_task: TaskBuilder | None = None) -> str | None:
    """best_starting_point of a run directory, its task found as the run found it (a user's file task
    is named in the summary only by its label)."""
    return best_starting_point(directory, task_of_run(RunStore.open(directory)) or task_label, build_task)


def derived_damage(store: RunStore, events: list[dict], summary: SearchSummary) -> list[str]:
    """Where a finished run's derived files disagree with its log (`events`, store.events()) and summary,
    one line each: best.py gone while the summary names a best, candidates.jsonl holding another number of
    candidates than the log's steps scored. The report reads them (best.py's starting point, the commonest
    failures), so a file edited or lost since would otherwise change its table without a word."""
    notes = []
    best, held = summary.best, candidates_damage(store, scored_candidates(events))
    if best is not None and not store.path("best.py").exists():
        named = (f"{store.path('best.py')} is missing: summary.json names candidate {best.id} (objective "
                 f"{best.objective:.6g}, step {best.step}) the run's best")
        if best.id == 0 or kept_best_code(store, events, best.id, best.objective) is not None:
            notes.append(f"{named}; `coevolve run --resume {store.dir}` writes it again")
        elif best.id > 0 and held is not None and not registry.uses_es(summary.method):
            # a run without ES replays its log without its engine: the resume writes candidates.jsonl again
            # (loop.rebuild_derived), and best.py from it
            notes.append(f"{named}, and candidates.jsonl lost its code; `coevolve run --resume {store.dir}` writes "
                         "both again from the run's log")
        else:  # what restore_best would say: nothing the run kept holds the program
            where = "its seed event in events.jsonl" if best.id < 0 else f"{store.candidates_path.name} as it scored"
            notes.append(f"{named}, and its code is not in {where} either: the program is lost (the table's "
                         "numbers are the summary's), and `--resume` cannot write it again")
    if held is not None:
        notes.append(held)
    return notes


def candidates_damage(store: RunStore, logged: int, held: int | None = None) -> str | None:
    """Why a run's candidates.jsonl is not the one its log says it wrote (`logged`: the candidates the
    log's steps scored, scored_candidates), in one line: it holds another number of candidates. None when
    they agree. What the report reads from it (the commonest failures, a comparison's failure counts) is
    then not the run's. `held`: the candidates the file holds, as a caller counted them already."""
    held = len(read_jsonl(store.candidates_path)) if held is None else held
    if held == logged:
        return None
    return (f"{store.candidates_path} holds {held} candidate{'s' * (held != 1)} where the run's log holds "
            f"{logged}: it was edited or damaged since the run wrote it, so what the report reads from it "
            "(the commonest failures) is not the run's")


def run_damage(store: RunStore, read: LogRead, held: int) -> str | None:
    """Why what a comparison's report reads from a finished arm run's candidates.jsonl (the failure counts)
    may not be the run's, in one line: its log is damaged (`read`, as collect_logged read it), or
    candidates.jsonl, which holds `held` candidates, disagrees with it (candidates_damage); None when
    nothing is seen. (A log that cannot be read at all stops collect_logged, naming its line.)"""
    return read.damage or candidates_damage(store, read.scored, held)


def task_of_run(store: RunStore, config: dict | None = None) -> str | None:
    """The task spec a run's config names (a file task re-found from the run
    directory alone, tasks.loader.remember_tasks: a changed file reads as the
    source the run used); None when its config names none. `config`: the run's
    config.toml as a caller already read it."""
    remember_tasks(store.dir, "copy")
    spec = (read_toml(store.config_path) if config is None else config).get("run", {}).get("task")
    return spec if isinstance(spec, str) and spec else None


def es_counts(es: ESCounts | dict | None) -> tuple[int | None, int | None]:
    """A summary's ES updates and how many of them were flat (every member's reward equal: no weight
    moved), from its `es` as a typed record or as summary.json holds it (a dict: a summary written before
    flat ones were counted lacks `flat`, which then counts 0); (None, None) without ES updates. The one
    reader of them for the run tables (rendering.es_updates) and the agent comparison's (agents.trained)."""
    if isinstance(es, ESCounts):
        return es.updates, es.flat
    es = es or {}
    return es.get("updates"), (es.get("flat", 0) if "updates" in es else None)


def _scores_as(objective: float, template: float) -> bool:
    # equal up to the rounding two scorings of one program may differ by
    return abs(objective - template) <= 1e-9 * max(1.0, abs(template))


def at_template(cell: ComparisonCell, split: str, size: int, template: float | None) -> bool:
    """Whether a run's best is, or scores exactly as, the task's starting point."""
    if cell.best_is is not None:
        return True
    score = cell.scores.get((split, size))
    objective = score.objective if score else None
    return template is not None and objective is not None and _scores_as(objective, template)


def worse_than_template(objective: float, template: float, direction: Direction) -> bool:
    """Whether a test objective is worse than the template's in the task's direction (a run's best can
    be: with [context] seed_template off the template is not in its archive)."""
    return better(template, objective, direction) and not _scores_as(objective, template)


def seeds_worse(cells: list[ComparisonCell], row: dict, template: float, direction: Direction) -> tuple[int, int]:
    """(seeds whose best scored worse than the template, seeds scored) on an aggregate row's task, budget
    and test set, for the row's method."""
    mine = [c for c in cells if (c.task, c.method, c.budget) == (row["task"], row["method"], row["budget"])
            and c.summary is not None]
    scores = [c.scores.get((row["split"], row["size"])) for c in mine]
    objectives = [s.objective for s in scores if s is not None and s.objective is not None]
    return sum(worse_than_template(o, template, direction) for o in objectives), len(objectives)


# ---------------------------------------------------------- aggregating
def verdict(base: dict, variant: dict) -> dict:
    """Can the two arms be told apart on this set? Only when Welch's 95% interval for the difference
    of their mean test objectives excludes 0 (coevolve/stats.py); and, when it does not, about how many
    seeds per arm would resolve a true difference of the size seen (80% power). Not judged while an
    arm's runs have not all finished (`unfinished`)."""
    unfinished = [row for row in (base, variant) if row.get("finished", 0) < row.get("runs", 0)]
    if unfinished:  # a killed comparison: its missing seeds are not a result to compare
        return {"distinct": None, "unfinished": True,
                "why": "; ".join(f"{row['method']}'s run{'s have' if row['runs'] - row['finished'] > 1 else ' has'} "
                                 f"not finished ({row['finished']} of {row['runs']} done)" for row in unfinished)
                + ": rerun coevolve compare"}
    a, b = base["objective"], variant["objective"]
    if a["mean"] is None or b["mean"] is None:
        return {"distinct": None, "why": "a method has no scored heuristic"}
    difference = abs(a["mean"] - b["mean"])
    welch = welch_difference(Summary(a["n"], a["mean"], a["std"]), Summary(b["n"], b["mean"], b["std"]))
    if welch is None:
        return {"distinct": None, "difference": difference,
                "why": "fewer than two scored seeds in an arm: no spread to judge by"}
    found = {"distinct": welch.distinct, "difference": difference, "spread": max(a["std"], b["std"]),
             "interval": [welch.low, welch.high]}
    if welch.df is None:
        same = difference == 0
        return {**found, "why": (f"every seed of both arms scored {fmt_number(a['mean'])}" if same else
                                 f"the means differ by {fmt_number(difference)} and no seed of either arm varies")}
    needed = None if welch.distinct else seeds_needed(difference, a["std"], b["std"])
    why = (f"the means differ by {fmt_number(difference)}; Welch's 95% interval for the difference, "
           f"[{fmt_number(welch.low)}, {fmt_number(welch.high)}] over {a['n']} and {b['n']} seeds, "
           f"{'excludes' if welch.distinct else 'includes'} 0")
    if not welch.distinct:
        why += (f"; about {needed} seeds per arm would tell a true difference this size apart (80% power)"
                if needed else "; the arms' means are equal" if difference == 0 else
                f"; a difference this size would take more than {MOST_SEEDS} seeds per arm")
    return {**found, "seeds_needed": needed, "why": why}


def delta_note(base: dict, variant: dict, direction: Direction) -> str | None:
    """Why a Δ row has no Δ although both arms have a mean gap: an arm's is ≤ 0 (it reaches or beats
    the reference, as a heuristic reference can be beaten), where a ratio of gaps has no sign to read
    (stats.paper_delta); with the mean objectives, which still say which arm is ahead. None otherwise."""
    gaps = {row["method"]: row["gap"]["mean"] for row in (base, variant)}
    if None in gaps.values() or all(g > 0 for g in gaps.values()):
        return None
    beyond = [m for m, g in gaps.items() if g <= 0]
    who = " and ".join(registry.label(m) for m in beyond)
    verb = ("reach or beat" if len(beyond) > 1 else
            "beats" if gaps[beyond[0]] < 0 else "reaches")
    a, b = base["objective"]["mean"], variant["objective"]["mean"]
    name = registry.label(variant["method"])
    ahead = ("equal" if a == b else "better" if better(b, a, direction) else "worse")
    return (f"n/a: {who} {verb} the reference; by mean objective {name} is {ahead} "
            f"({fmt_number(b)} vs {fmt_number(a)})")


def _mean_std(values: Iterable[float | None]) -> dict:
    return summarise(list(values)).to_dict()


def aggregate(config: CompareConfig, cells: list[ComparisonCell],
              template: dict[tuple[str, str, int], float] | None = None) -> list[dict]:
    """Per task, budget and test set: one row per method (mean ± std over seeds),
    then one Δ row per method pair present, with whether the pair can be told
    apart. Rows are plain dicts: they are results.json's and table.csv's rows."""
    template = template or {}
    rows: list[dict] = []
    for task_name in config.compare.tasks:
        task = heuristic_task(task_name)
        sets = scored_sets(config, task)
        for budget in config.compare.budgets:
            for split, size in sets:
                by_method: dict[str, dict] = {}
                for method in config.compare.methods:
                    mine = [c for c in cells if (c.task, c.method, c.budget) == (task_name, method, budget)]
                    done = [c for c in mine if c.summary is not None]
                    scores = [c.scores.get((split, size)) for c in done]
                    row = {
                        "kind": "method", "task": task_name, "budget": budget, "split": split, "size": size,
                        "method": method, "runs": len(mine), "finished": len(done),
                        "with_heuristic": sum(1 for c in done if c.summary.best is not None),
                        "objective": _mean_std(s and s.objective for s in scores),
                        "gap": _mean_std(s and s.gap for s in scores),
                        "train_valid_rate": _mean_std(c.summary.valid_rate for c in done),
                        # programs of their own: a proposer that repeats one program raises the rate, not this
                        "distinct_valid": _mean_std(c.summary.distinct_valid for c in done),
                        "train_best": _mean_std(c.summary.best and c.summary.best.objective for c in done),
                        "instances": max((s.instances for s in scores if s), default=None),
                        "at_template": sum(1 for c in done if at_template(c, split, size,
                                                                         template.get((task_name, split, size)))),
                        "best_is_template": sum(1 for c in done if c.best_is == "template"),
                        "dirs": [c.dir for c in mine],
                    }
                    by_method[method] = row
                    rows.append(row)
                for base, variant in compared_pairs(config):
                    rows.append({"kind": "delta", "task": task_name, "budget": budget, "split": split,
                                 "size": size, "method": f"{base} -> {variant}", "base": base,
                                 "variant": variant,
                                 "delta": paper_delta(by_method[base]["gap"]["mean"],
                                                      by_method[variant]["gap"]["mean"]),
                                 "gap_closed": gap_closed(by_method[base]["gap"]["mean"],
                                                          by_method[variant]["gap"]["mean"]),
                                 "delta_note": delta_note(by_method[base], by_method[variant], task.direction),
                                 **verdict(by_method[base], by_method[variant])})
    return rows


def run_rows(cells: list[ComparisonCell]) -> list[dict]:
    """One flat row per run and test set (a run without scores gets one row)."""
    flat = []
    for c in cells:
        s = c.summary
        ledger = s.ledger if s else None
        base: dict[str, Any] = {
            "task": c.task, "method": c.method, "budget": c.budget, "seed": c.seed, "state": c.state, "dir": c.dir,
            "best_is": c.best_is, "evaluations": s and s.evaluations, "valid": s and s.valid,
            "valid_rate": s and s.valid_rate, "distinct_valid": s and s.distinct_valid,
            "train_best": s.best.objective if s and s.best else None,
            "llm_requests": ledger and ledger.llm_requests, "completion_tokens": ledger and ledger.completion_tokens,
            "outcomes": json.dumps(ledger.outcomes, sort_keys=True) if ledger else None}
        for score in list(c.scores.values()) or [None]:
            flat.append({**base, **{k: getattr(score, k) if score else None for k in
                                    ("split", "size", "limit", "instances", "objective", "failure",
                                     "reference", "gap")}})
    return flat


# ------------------------------------------------------- the skill's requests
SIDES = ("skill", "none")


def failure_cause(kind: str, message: str) -> str:
    """A failure in one line: what a traceback's last line says ("NameError: name 'd' is not defined"),
    or the kind when the message is empty; cut to 90 characters, cleaned (a candidate wrote it)."""
    lines = [line.strip() for line in clean(message).splitlines() if line.strip()]  # no escapes reach a terminal
    cause = lines[-1] if lines else kind
    return cause if len(cause) <= 90 else cause[:89] + "…"


def commonest_failures(directory: str | Path, most: int = 3) -> list[tuple[str, int]]:
    """`failure_causes` of a run directory's candidates.jsonl."""
    return failure_causes([Candidate.read(r) for r in read_jsonl(Path(directory) / "candidates.jsonl")], most)


def failure_causes(candidates: Iterable[Candidate], most: int = 3) -> list[tuple[str, int]]:
    """The causes that failed most candidates (repeats of failed code included, as in the run table's
    failures row), each with its count; causes that differ only in their numbers (a node index, a
    line) count as one, shown as the commonest exact message of them (the first seen of a tie)."""
    groups: dict[str, Counter[str]] = {}
    for candidate in candidates:
        if candidate.failure is None:
            continue
        cause = failure_cause(candidate.failure, candidate.message)
        groups.setdefault(re.sub(r"-?\d+(?:\.\d+)?", "#", cause), Counter())[cause] += 1
    counts = Counter({key: sum(group.values()) for key, group in groups.items()})
    # the group's first message may be one candidate's while its copies fill the count: show theirs
    return [(groups[key].most_common(1)[0][0], n) for key, n in counts.most_common(most)]


SKILL_SIDES = ("Both sides count only the requests after the first skill refresh: those before it showed no skill "
               "because none was written yet, when the archive was young (their i1 candidates, with no parent to "
               "beat, count as beating their parents when they score), so they are counted apart. Under skill.keep = "
               "\"latest\" every later request shows the newest version, so \"none shown\" stays empty and the "
               "versions follow each other in time: not a comparison (use skill.keep = \"judged\", or compare "
               "arms). Under \"judged\" later requests alternate between the version on trial and the one it "
               "patched, so \"none shown\" is the first trial's incumbent (and any later one where no skill stayed "
               "ahead) while \"skill shown\" pools every version, those judged against each other too: the trial "
               "counts, not the two sides, are the comparison, and an ES generation shows one version to all its "
               "members, so the sides need not be near equal.")


def _add(into: dict[str, int], counts: dict[str, int], sign: int = 1) -> None:
    for key, value in counts.items():
        into[key] = into.get(key, 0) + sign * value


def skill_use(directory: str | Path, summary: SearchSummary,
              versions_named: bool | None = None) -> dict[str, Any] | None:
    """What the skill did in one finished run (None for a run that never showed one, or one written
    before its log named each request's version). `versions`: per version shown (None: no skill), in
    order of first use, over the whole run, the candidates, how many scored and how many beat every
    parent shown (ensemble.improved, what a judged trial counts). `skill` / `none`: the same summed
    into the candidates whose prompt showed a skill and those that showed none, counted only after the
    first refresh (`since`, its step: the requests before it showed none because none existed yet, a
    young archive; they are summed in `before`). Under skill.keep = "judged", its trials judged at
    refreshes, the versions they kept, how many could be told apart, and the version ahead when the
    run ended. `versions_named`: requests_name_versions of the run's log, as a caller read it already."""
    context = summary.context or {}
    if not context.get("skill_versions") and not context.get("skill_start"):
        return None
    if versions_named is None:
        versions_named = requests_name_versions(read_jsonl(Path(directory) / "events.jsonl"))
    if not versions_named:
        return None  # written before requests named their version: what each showed is not known
    candidates = [Candidate.read(c) for c in read_jsonl(Path(directory) / "candidates.jsonl")]
    seed = (context.get("seed") or {}).get("objective")
    direction = summary.train.direction
    refreshes = context.get("skill_versions") or []
    since = refreshes[0]["step"] if refreshes else None
    every = shown_counts(candidates, direction, seed)
    sides: dict[str, dict[str, int]] = {side: {"candidates": 0, "valid": 0, "improved": 0} for side in SIDES}
    before = {"candidates": 0, "valid": 0, "improved": 0}
    for counts in every.values():
        _add(before, counts)
    for version, counts in shown_counts(candidates, direction, seed, since=since).items():
        _add(sides["none" if version is None else "skill"], counts)
        _add(before, counts, -1)
    trials = context.get("skill_trials", [])
    judged = [t for t in trials if not t.get("final")]
    return {**sides, "before": before, "since": since, "versions": list(every.items()),
            "judged": len(judged), "kept": sum(t["kept"] == t["challenger"] for t in judged),
            "distinct": sum(bool(t["distinct"]) for t in judged),
            "ahead": [t["kept"] for t in trials if t.get("final")]}


def skill_rows(root: Path, cells: list[ComparisonCell], logs: Logs) -> list[dict]:
    """skill_use summed over each (task, method, budget)'s finished runs that showed a skill (`logs`: what
    collect_logged read of their logs)."""
    rows: dict[tuple[str, str, int], dict] = {}
    for cell in cells:
        use = (skill_use(root / cell.dir, cell.summary, logs[cell.dir].versions_named)
               if cell.summary is not None else None)
        if use is None:
            continue
        row = rows.setdefault((cell.task, cell.method, cell.budget),
                              {"task": cell.task, "method": cell.method, "budget": cell.budget, "runs": 0,
                               **{side: {"candidates": 0, "valid": 0, "improved": 0} for side in (*SIDES, "before")},
                               "judged": 0, "kept": 0, "distinct": 0, "ahead": []})
        row["runs"] += 1
        for side in (*SIDES, "before"):
            _add(row[side], use[side])
        for key in ("judged", "kept", "distinct"):
            row[key] += use[key]
        row["ahead"] += use["ahead"]
    return list(rows.values())


def failure_rows(root: Path, cells: list[ComparisonCell], logs: Logs, most: int = 3) -> list[dict]:
    """Per (task, method, budget), over its finished runs: how many candidates failed, the commonest
    causes (failure_causes over all of them), and `damage`: a line for each run whose candidates.jsonl
    cannot be taken as the run's (run_damage, from what collect_logged read of its log: `logs`), counted as
    the file holds it."""
    runs: dict[tuple[str, str, int], list[Candidate]] = {}
    damage: dict[tuple[str, str, int], list[str]] = {}
    for cell in cells:
        if cell.summary is not None:
            key = (cell.task, cell.method, cell.budget)
            store = RunStore(root / cell.dir)
            held = read_jsonl(store.candidates_path)
            runs.setdefault(key, []).extend(Candidate.read(r) for r in held)
            note = run_damage(store, logs[cell.dir], len(held))
            damage.setdefault(key, []).extend([note] if note else [])
    return [{"task": task, "method": method, "budget": budget,
             "candidates": len(candidates), "failed": sum(c.failure is not None for c in candidates),
             "causes": failure_causes(candidates, most), "damage": damage[(task, method, budget)]}
            for (task, method, budget), candidates in runs.items()]


def heldout_change(directory: str | Path, first: int, last: int,
                   read: Callable[[Path], list[Any]] | None = None) -> dict[str, Any] | None:
    """An agent run's held-out reward from round `first` to round `last` on the same problems, paired
    per problem (trajectories/eval_NNN.jsonl; a problem's attempts averaged): how many got better, how
    many worse, the mean change and the sign test's p. None when a round's episodes are not on disk or
    the rounds share no problem. `read`: the dashboard's, which parses a file again only when it changed."""
    rounds = []
    for index in (first, last):
        path = Path(directory) / "trajectories" / f"eval_{index:03d}.jsonl"
        if not path.is_file():
            return None
        try:
            rounds.append(problem_means((str(line.get("case_id")), float(line.get("reward", 0.0)))
                                        for line in (read or read_jsonl)(path)))
        except (AttributeError, TypeError, ValueError):  # a file of another shape: no verdict rather than a wrong one
            return None
    return paired_change(*rounds)
