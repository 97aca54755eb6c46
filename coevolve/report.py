"""Tables and plots of a comparison (or of one run), rebuilt from the files on
disk alone: summary.json and test.json of each run. Nothing is rerun.

A comparison's report has, per task and budget, one row per method with the
test objective and the gap to the reference (mean ± std over seeds), the
training valid rate and how many runs produced a heuristic; the methods come
in pairs (Sample / Sample+ESOpt, EoH / EoH+ESOpt), each pair followed by its Δ
row: the relative gap reduction of the +ESOpt variant over its base method.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Iterable

from coevolve.base.config import build_config, read_toml
from coevolve.base.durable import atomic_write_json, atomic_write_text, read_jsonl
from coevolve.base.errors import UsageError
from coevolve.plan import (COMPARE_CONFIG, TEST_SCORES, CompareConfig, arm_plan, baseline_directory, planned_runs,
                           run_state, scored_sets, structural_differences)
from coevolve.runstore import RunStore
from coevolve.search import methods as registry
from coevolve.search.plot import plot_best_so_far, save_figure
from coevolve.stats import band, gap_closed, paper_delta, summarise


BUDGET_STATEMENT = (
    "Every run has the same budget of {budget} evaluations, counted by one ledger "
    "(coevolve/search/ledger.py) for every method: each candidate the LLM is asked for costs one "
    "evaluation whatever becomes of it — initial population, duplicates of earlier code and texts "
    "with no parseable code included. LLM requests and tokens are counted separately and consume no budget."
)


# ----------------------------------------------------------------- loading
def _load_json(path: Path) -> dict | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc})") from None


def collect(root: Path) -> tuple[CompareConfig, list[dict]]:
    """The comparison's config and one record per planned run, from its files."""
    root = Path(root)
    if not (root / COMPARE_CONFIG).exists():
        raise UsageError(f"{root} is not a comparison directory (no {COMPARE_CONFIG})")
    config = build_config(CompareConfig, read_toml(root / COMPARE_CONFIG))
    records = []
    for spec in planned_runs(config):
        directory = spec.directory(root)
        state = run_state(directory)
        summary = _load_json(directory / "summary.json") if state == "finished" else None
        tests = _load_json(directory / TEST_SCORES) if state == "finished" else None
        records.append({"task": spec.task, "method": spec.method, "budget": spec.budget, "seed": spec.seed,
                        "dir": str(directory.relative_to(root)), "state": state, "summary": summary,
                        "scores": {(s["split"], s["size"]): s for s in (tests or {}).get("scores", [])},
                        "best_is": best_starting_point(directory, spec.task) if state == "finished" else None})
    return config, records


def baselines(config: CompareConfig, root: Path) -> dict[tuple[str, str, int], float]:
    """The task template's test objective per (task, split, size), where scored."""
    found = {}
    for task in config.compare.tasks:
        tests = _load_json(baseline_directory(root, task) / TEST_SCORES) or {}
        for s in tests.get("scores", []):
            if s.get("objective") is not None:
                found[(task, s["split"], s["size"])] = s["objective"]
    return found


def _function_shape(code: str, name: str) -> str | None:
    """The named function's AST without its docstring: equal for programs that
    differ only in comments, docstrings and layout."""
    import ast

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


def starting_point(code: str, task_name: str) -> str | None:
    """"template" when `code` is the task's template function (up to comments,
    docstring and layout), "seed" when it is one of the task's seed heuristics
    (a task's optional `seeds`), else None."""
    from tasks.registry import heuristic_task

    task = heuristic_task(task_name)
    mine = _function_shape(code, task.function_name)
    if mine is None:
        return None
    if mine == _function_shape(task.template, task.function_name):
        return "template"
    if any(mine == _function_shape(seed, task.function_name) for seed in getattr(task, "seeds", None) or ()):
        return "seed"
    return None


def at_template(record: dict, split: str, size: int, template: float | None) -> bool:
    """Whether a run's best is, or scores exactly as, the task's starting point."""
    if record["best_is"] is not None:
        return True
    score = record["scores"].get((split, size))
    objective = score and score.get("objective")
    return template is not None and objective is not None and abs(objective - template) <= 1e-9 * max(1.0, abs(template))


def verdict(base: dict, variant: dict) -> dict:
    """Can the two arms be told apart on this set? Only when their mean test
    objectives differ by more than the larger of their seeds' standard deviations."""
    a, b = base["objective"], variant["objective"]
    if a["mean"] is None or b["mean"] is None:
        return {"distinct": None, "why": "a method has no scored heuristic"}
    difference = abs(a["mean"] - b["mean"])
    if a["std"] is None or b["std"] is None:
        return {"distinct": None, "difference": difference,
                "why": "fewer than two scored seeds in an arm: no spread to judge by"}
    spread = max(a["std"], b["std"])
    return {"distinct": difference > spread, "difference": difference, "spread": spread,
            "why": (f"the means differ by {fmt_number(difference)}, "
                    f"{'more' if difference > spread else 'no more'} than the seeds' spread ({fmt_number(spread)})")}


# ----------------------------------------------------------------- tables
def _mean_std(values: Iterable[float | None]) -> dict:
    return summarise(list(values)).to_dict()


def aggregate(config: CompareConfig, records: list[dict],
              template: dict[tuple[str, str, int], float] | None = None) -> list[dict]:
    """Per task, budget and test set: one row per method (mean ± std over seeds),
    then one Δ row per method pair present, with whether the pair can be told apart."""
    template = template or {}
    from tasks.registry import heuristic_task

    rows: list[dict] = []
    for task_name in config.compare.tasks:
        sets = scored_sets(config, heuristic_task(task_name))
        for budget in config.compare.budgets:
            for split, size in sets:
                by_method: dict[str, dict] = {}
                for method in config.compare.methods:
                    mine = [r for r in records
                            if (r["task"], r["method"], r["budget"]) == (task_name, method, budget)]
                    done = [r for r in mine if r["summary"] is not None]
                    scores = [r["scores"].get((split, size)) for r in done]
                    row = {
                        "kind": "method", "task": task_name, "budget": budget, "split": split, "size": size,
                        "method": method, "runs": len(mine), "finished": len(done),
                        "with_heuristic": sum(1 for r in done if (r["summary"].get("best") is not None)),
                        "objective": _mean_std(s and s["objective"] for s in scores),
                        "gap": _mean_std(s and s["gap"] for s in scores),
                        "train_valid_rate": _mean_std(r["summary"]["valid_rate"] for r in done),
                        "train_best": _mean_std((r["summary"].get("best") or {}).get("objective") for r in done),
                        "instances": max((s["instances"] for s in scores if s), default=None),
                        "at_template": sum(1 for r in done if at_template(r, split, size,
                                                                         template.get((task_name, split, size)))),
                        "best_is_template": sum(1 for r in done if r["best_is"] == "template"),
                        "dirs": [r["dir"] for r in mine],
                    }
                    by_method[method] = row
                    rows.append(row)
                for base, variant in registry.pairs(list(by_method)):
                    rows.append({"kind": "delta", "task": task_name, "budget": budget, "split": split,
                                 "size": size, "method": f"{base} -> {variant}", "base": base,
                                 "variant": variant,
                                 "delta": paper_delta(by_method[base]["gap"]["mean"],
                                                      by_method[variant]["gap"]["mean"]),
                                 "gap_closed": gap_closed(by_method[base]["gap"]["mean"],
                                                          by_method[variant]["gap"]["mean"]),
                                 **verdict(by_method[base], by_method[variant])})
    return rows


def run_rows(records: list[dict]) -> list[dict]:
    """One flat row per run and test set (a run without scores gets one row)."""
    flat = []
    for r in records:
        summary = r["summary"] or {}
        ledger = summary.get("ledger") or {}
        best = summary.get("best") or {}
        base = {"task": r["task"], "method": r["method"], "budget": r["budget"], "seed": r["seed"],
                "state": r["state"], "dir": r["dir"], "best_is": r["best_is"], "evaluations": summary.get("evaluations"),
                "valid": summary.get("valid"), "valid_rate": summary.get("valid_rate"),
                "train_best": best.get("objective"), "llm_requests": ledger.get("llm_requests"),
                "completion_tokens": ledger.get("completion_tokens"),
                "outcomes": json.dumps(ledger.get("outcomes", {}), sort_keys=True) if ledger else None}
        scores = list(r["scores"].values()) or [None]
        for s in scores:
            flat.append({**base, **{k: (s or {}).get(k) for k in
                                    ("split", "size", "limit", "instances", "objective", "failure",
                                     "reference", "gap")}})
    return flat


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
    return "" if value is None else value


def _table_rows_csv(rows: list[dict]) -> list[dict]:
    """Aggregates flattened: each mean ± std becomes two columns."""
    out = []
    for row in rows:
        flat = {}
        for key, value in row.items():
            if isinstance(value, dict) and "mean" in value:
                flat[f"{key}_mean"], flat[f"{key}_std"], flat[f"{key}_n"] = value["mean"], value["std"], value["n"]
            else:
                flat[key] = value
        out.append(flat)
    return out


# ------------------------------------------------------------- formatting
def fmt_number(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.4f}" if abs(value) < 1000 else f"{value:.1f}"


def fmt_mean_std(stats: dict, percent: bool = False) -> str:
    if stats["mean"] is None:
        return "–"
    show = (lambda v: f"{100 * v:.2f}%") if percent else fmt_number
    return show(stats["mean"]) + ("" if stats["std"] is None else f" ± {show(stats['std'])}")


def fmt_delta(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.1f}%"


def _label(method: str) -> str:
    return registry.label(method)


def _ordered_methods(methods: list[str]) -> list[str]:
    """Pairs first (base, then its +ESOpt variant), then anything unpaired."""
    return registry.ordered(methods)


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
    header += ["train valid rate", "runs with a heuristic", "best = template", "runs"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    if any((task_name, split, size) in template for split, size in sets):
        cells = ["Task template (starting point)"]
        for split, size in sets:
            cells += [fmt_number(template.get((task_name, split, size))), ""]
        lines.append("| " + " | ".join(cells + ["", "", "", ""]) + " |")
    methods = _ordered_methods(config.compare.methods)
    base_of = {variant: base for base, variant in registry.pairs(methods)}
    for method in methods:
        per_set = {(r["split"], r["size"]): r for r in mine if r["kind"] == "method" and r["method"] == method}
        cells = [_label(method)]
        for s in sets:
            cells += [fmt_mean_std(per_set[s]["objective"]), fmt_mean_std(per_set[s]["gap"], percent=True)]
        first = per_set[sets[0]]
        at = max(per_set[s]["at_template"] for s in sets)
        cells += [fmt_mean_std(first["train_valid_rate"], percent=True), f"{first['with_heuristic']}/{first['runs']}",
                  f"{at}/{first['finished']}", _links(first["dirs"])]
        lines.append("| " + " | ".join(cells) + " |")
        if base_of.get(method) in methods:
            deltas = {(r["split"], r["size"]): r for r in mine if r["kind"] == "delta" and r["variant"] == method}
            cells = [f"Δ {_label(method)} vs {_label(base_of[method])}"]
            for s in sets:
                d = deltas.get(s) or {}
                told = {True: "", False: " (within the seeds' spread)", None: " (cannot judge)"}[d.get("distinct")]
                cells += ["", fmt_delta(d.get("delta")) + told]
            lines.append("| " + " | ".join(cells + ["", "", "", ""]) + " |")
    return "\n".join(lines)


def conclusions(config: CompareConfig, rows: list[dict], records: list[dict],
                template: dict[tuple[str, str, int], float], unmatched: list[str]) -> list[str]:
    """What the comparison can and cannot conclude, in plain sentences."""
    out = []
    finished = [r for r in records if r["summary"] is not None]
    for task_name in config.compare.tasks:
        mine = [r for r in finished if r["task"] == task_name]
        literal = [r for r in mine if r["best_is"] == "template"]
        seeds = [r for r in mine if r["best_is"] == "seed"]
        if literal:
            out.append(f"{task_name}: {len(literal)} of {len(mine)} finished runs returned the task template itself "
                       "as their best heuristic: they found nothing better than the starting point.")
        if seeds:
            out.append(f"{task_name}: {len(seeds)} of {len(mine)} finished runs returned one of the task's seed "
                       "heuristics as their best.")
        for split, size in list(dict.fromkeys(k[1:] for k in template if k[0] == task_name)):
            same = [r for r in mine if r["best_is"] is None and at_template(r, split, size, template[(task_name, split, size)])]
            if same:
                out.append(f"{task_name} {split}{size}: {len(same)} more runs' best scores exactly what the template "
                           f"scores ({fmt_number(template[(task_name, split, size)])}).")
    for row in rows:
        if row["kind"] != "delta":
            continue
        where = (f"{_label(row['base'])} vs {_label(row['variant'])} on {row['task']} {row['split']}{row['size']} "
                 f"at budget {row['budget']}")
        if row["distinct"] is True:
            out.append(f"{where}: the arms differ: {row['why']} (a few seeds; no significance test).")
        else:
            out.append(f"{where}: cannot be told apart: {row['why']}.")
    if unmatched:
        out.append("The +ESOpt arms are NOT structurally matched to their base methods (allowed knowingly with "
                   "compare.allow_unmatched): " + "; ".join(unmatched) + ". Differences may come from the plans, "
                   "not from ESOpt.")
    return out


def ledger_table(config: CompareConfig, records: list[dict]) -> str:
    """What the budget bought, per method: ledger outcomes and LLM traffic, summed over finished runs."""
    lines = ["| Method | runs | evaluations | evaluated | duplicate | no code (parse) | LLM requests "
             "| completion tokens |", "|---|---|---|---|---|---|---|---|"]
    for method in _ordered_methods(config.compare.methods):
        done = [r["summary"] for r in records if r["method"] == method and r["summary"] is not None]
        ledgers = [s["ledger"] for s in done]
        outcomes = [ledger.get("outcomes", {}) for ledger in ledgers]
        cells = [_label(method), str(len(done)), str(sum(s["evaluations"] for s in done))]
        cells += [str(sum(o.get(k, 0) for o in outcomes)) for k in ("evaluated", "duplicate", "parse")]
        cells += [str(sum(ledger.get("llm_requests", 0) for ledger in ledgers)),
                  str(sum(ledger.get("completion_tokens", 0) for ledger in ledgers))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------- plots
def plot_progress(config: CompareConfig, records: list[dict], task_name: str, budget: int, path: Path) -> Path:
    """Best-so-far training objective vs evaluations: per method the mean over
    seeds, shaded ± one std (from the evaluation where some seed has a valid candidate)."""
    from tasks.registry import heuristic_task

    direction = heuristic_task(task_name).direction
    curves, bands = {}, {}
    for method in _ordered_methods(config.compare.methods):
        runs = [r["summary"] for r in records
                if (r["task"], r["method"], r["budget"]) == (task_name, method, budget) and r["summary"]]
        spread = band([s["best_so_far"] for s in runs], budget)
        label = f"{_label(method)} ({len(runs)} seeds)"
        curves[label] = list(zip(spread.xs, spread.mean))
        bands[label] = (spread.xs, spread.low, spread.high)
    better = "lower" if direction == "min" else "higher"
    return plot_best_so_far(curves, path, budget=budget, bands=bands,
                            title=f"{task_name}, budget {budget}: mean ± std over seeds",
                            ylabel=f"best train objective ({better} is better)")


def plot_test_scores(config: CompareConfig, rows: list[dict], records: list[dict], task_name: str,
                     split: str, size: int, path: Path) -> Path:
    """Final test objective per method: a bar at the mean, a std whisker, a dot per seed;
    one group of bars per budget."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = _ordered_methods(config.compare.methods)
    budgets = config.compare.budgets
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(budgets) * len(methods)), 4), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    shown: list[float] = []  # every value drawn, to zoom the axis on them
    for m, method in enumerate(methods):
        color = colors[m % len(colors)]
        for b, budget in enumerate(budgets):
            x = b + (m - (len(methods) - 1) / 2) * width
            row = next(r for r in rows if r["kind"] == "method" and r["method"] == method
                       and (r["task"], r["budget"], r["split"], r["size"]) == (task_name, budget, split, size))
            stats = row["objective"]
            if stats["mean"] is not None:
                spread = stats["std"] or 0.0
                ax.bar(x, stats["mean"], width * 0.9, color=color, alpha=0.6,
                       label=_label(method) if b == 0 else None, yerr=spread, capsize=3, ecolor="black")
                shown += [stats["mean"] - spread, stats["mean"] + spread]
            seeds = [r["scores"].get((split, size)) for r in records
                     if (r["task"], r["method"], r["budget"]) == (task_name, method, budget)]
            values = [s["objective"] for s in seeds if s and s["objective"] is not None]
            ax.plot([x] * len(values), values, "o", color="black", markersize=3)
            shown += values
    ax.set_xticks(range(len(budgets)), [f"budget {b}" for b in budgets])
    ax.set_ylabel(f"{split}{size} objective")
    ax.set_title(f"{task_name} {split}{size}: best heuristic by training score", fontsize="medium")
    if shown:  # zoom in: differences between methods are small next to the objective itself
        low, high = min(shown), max(shown)
        pad = max((high - low) * 0.15, abs(high) * 0.005, 1e-9)
        ax.set_ylim(low - pad, high + pad)
        ax.legend(loc="best", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no run produced a valid heuristic", ha="center", va="center", transform=ax.transAxes)
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, path)


# --------------------------------------------------------------- rendering
def render_comparison(root: str | Path) -> dict[str, Path]:
    """Write report.md, table.csv, runs.csv, results.json and plots/ for a comparison."""
    from tasks.registry import heuristic_task

    root = Path(root)
    from tasks.loader import remember_tasks, task_label

    remember_tasks(root, "copy")  # file tasks from the comparison's own copies when the originals are gone or changed
    config, records = collect(root)
    template = baselines(config, root)
    rows = aggregate(config, records, template)
    unmatched = structural_differences(config)
    written: dict[str, Path] = {}
    plots: dict[tuple, Path] = {}
    for task_name in config.compare.tasks:
        for budget in config.compare.budgets:
            plots[(task_name, budget)] = plot_progress(config, records, task_name, budget,
                                                       root / "plots" / f"progress-{task_label(task_name)}-b{budget}.png")
        for split, size in scored_sets(config, heuristic_task(task_name)):
            plots[(task_name, split, size)] = plot_test_scores(
                config, rows, records, task_name, split, size, root / "plots" / f"test-{task_label(task_name)}-{split}{size}.png")

    c, t = config.compare, config.test
    finished = sum(1 for r in records if r["state"] == "finished")
    parts = [f"# Comparison: {', '.join(_label(m) for m in c.methods)}",
             "",
             f"Tasks: {', '.join(c.tasks)}. Budgets: {', '.join(map(str, c.budgets))} evaluations. "
             f"Seeds: {', '.join(map(str, c.seeds))}. Runs finished: {finished} of {len(records)}.",
             "",
             " ".join(BUDGET_STATEMENT.format(budget=b) for b in c.budgets[:1]) +
             ("" if len(c.budgets) == 1 else " (The same holds for each budget listed.)") +
             (f" EoH's initial population ({config.eoh.init or config.eoh.population} candidates) is charged "
              "outside the budget, as the paper counts T (eoh.init_in_budget = false): EoH runs spend that many "
              "more evaluations." if not config.eoh.init_in_budget and any(
                  arm_plan(config, c.tasks[0], m, c.budgets[0])["outside_budget"] for m in c.methods)
              else ""),
             "",
             "Each run's heuristic is its best by training objective (best.py, chosen before any test "
             "score exists); it is scored on the test sets below with the same sandbox scoring as "
             "`coevolve eval`. Objective and gap are mean ± sample std over the seeds whose run produced "
             "a heuristic; gap = relative distance to the reference, positive when worse. "
             "Δ = gap of the base method / gap of its +ESOpt variant − 1, from the mean gaps (the "
             "paper's gain, §6: +22.96% means the base method's gap is 22.96% larger); results.json "
             "also holds gap_closed = (base gap − variant gap) / base gap.",
             ""]
    verdicts = conclusions(config, rows, records, template, unmatched)
    if verdicts:
        parts += ["## What this comparison can and cannot conclude", ""] + [f"- {v}" for v in verdicts] + [""]
    if t.limit:
        parts += [f"Test sets cut to their first {t.limit} instances (test.limit; the reference is "
                  "computed on the same cut sets): numbers are not the paper's full-set numbers.", ""]
    for task_name in c.tasks:
        task = heuristic_task(task_name)
        parts += [f"## {task_name} ({'lower' if task.direction == 'min' else 'higher'} is better)", ""]
        references = {(r["split"], r["size"]): (r["reference"], r.get("reference_kind"))
                      for rec in records if rec["task"] == task_name for r in rec["scores"].values()}
        if references:
            parts += ["References: " + "; ".join(
                f"{split}{size} = {fmt_number(value)} ({kind or 'none'})"
                for (split, size), (value, kind) in sorted(references.items())), ""]
        for budget in c.budgets:
            parts += [f"### Budget {budget}", "", markdown_table(config, rows, task_name, budget, template), "",
                      f"![best so far]({plots[(task_name, budget)].relative_to(root)})", ""]
        for split, size in scored_sets(config, task):
            parts += [f"![test scores]({plots[(task_name, split, size)].relative_to(root)})", ""]
    parts += ["## What the budget bought", "", ledger_table(config, records), ""]
    parts += ["## Runs", "", "| task | method | budget | seed | state | valid | train best | best is | directory |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        s = r["summary"] or {}
        valid = f"{s['valid']}/{s['evaluations']}" if s else "–"
        parts.append(f"| {r['task']} | {_label(r['method'])} | {r['budget']} | {r['seed']} | {r['state']} | "
                     f"{valid} | {fmt_number((s.get('best') or {}).get('objective'))} | "
                     f"{STARTING_POINT.get(r['best_is'], '')}"
                     f" | [{r['dir']}]({r['dir']}/) |")
    written["report.md"] = root / "report.md"
    atomic_write_text(written["report.md"], "\n".join(parts) + "\n")
    written["table.csv"] = root / "table.csv"
    _write_csv(written["table.csv"], _table_rows_csv(rows))
    written["runs.csv"] = root / "runs.csv"
    _write_csv(written["runs.csv"], run_rows(records))
    written["results.json"] = root / "results.json"
    atomic_write_json(written["results.json"], {
        "config": {"compare": vars(c), "test": vars(t)},
        "budget_counts": BUDGET_STATEMENT.format(budget="B"),
        "rows": rows, "runs": run_rows(records), "conclusions": verdicts,
        "template": [{"task": k[0], "split": k[1], "size": k[2], "objective": v} for k, v in template.items()],
        "structurally_matched": not unmatched})
    for key, path in plots.items():
        written["plots/" + path.name] = path
    return written


def render_run(directory: str | Path) -> dict[str, Path]:
    """One run: progress.png again from summary.json, and report.md with its
    table (the one `coevolve run` prints) and any test scores."""
    store = RunStore.open(directory)
    summary = _load_json(store.path("summary.json"))
    if summary is None:
        raise UsageError(f"{store.dir} has no summary.json yet: finish it with `coevolve run --resume {store.dir}`")
    if "eval_first" in summary:  # an agent run (written with or without "kind")
        return render_agent_run(store, summary)
    direction = summary["train"]["direction"]
    plot = plot_best_so_far({summary["method"]: [tuple(p) for p in summary["best_so_far"]]},
                            store.path("progress.png"), budget=summary["budget"],
                            title=f"{summary['task']}, {summary['method']}, seed {summary['seed']}",
                            ylabel=f"best train objective ({'lower' if direction == 'min' else 'higher'} is better)")
    parts = [f"# Run: {summary['method']} on {summary['task']}, seed {summary['seed']}", "", "```",
             run_table(summary, store.dir), "```", "", BUDGET_STATEMENT.format(budget=summary["budget"]), ""]
    found = best_starting_point(store.dir, run_task(store, summary["task"]))
    if found:
        parts += [f"**This run's best heuristic is {STARTING_POINT[found]} itself: it found nothing better than "
                  "its starting point.**", ""]
    elif not store.path("best.py").exists():
        parts += ["**This run produced no valid heuristic.**", ""]
    tests = _load_json(store.path(TEST_SCORES))
    if tests and tests.get("scores"):
        parts += ["| test set | instances | objective | reference | gap | failure |", "|---|---|---|---|---|---|"]
        for s in tests["scores"]:
            gap = "–" if s["gap"] is None else f"{100 * s['gap']:.2f}%"
            parts.append(f"| {s['split']}{s['size']} | {s['instances']} | {fmt_number(s['objective'])} | "
                         f"{fmt_number(s['reference'])} | {gap} | {s['failure'] or ''} |")
        parts.append("")
    parts.append("![best so far](progress.png)")
    figures = registry.run_figures(store.config_path, store.dir, direction)  # the method's archive (a heat map...)
    parts += [f"![{name}]({path.name})" for name, path in figures.items()]
    atomic_write_text(store.path("report.md"), "\n".join(parts) + "\n")
    return {"report.md": store.path("report.md"), "progress.png": plot, **{f"{k}.png": v for k, v in figures.items()}}


STARTING_POINT = {"template": "the task template", "seed": "a seed heuristic"}


def run_task(store: RunStore, name: str) -> str:
    """The spec a run's config names its task by (a file task re-found from
    the run directory alone, tasks.loader.remember_tasks); `name` for a run
    whose config has none."""
    from tasks.loader import remember_tasks

    remember_tasks(store.dir, "copy")  # a changed file: the source the run used
    spec = read_toml(store.config_path).get("run", {}).get("task")
    return spec if isinstance(spec, str) and spec else name


def best_starting_point(directory: str | Path, task_name: str) -> str | None:
    """starting_point of a run directory's best.py (None when it has none)."""
    best = Path(directory) / "best.py"
    return starting_point(best.read_text(encoding="utf-8"), task_name) if best.exists() else None


def es_updates(es: dict) -> str:
    """ "12", or "12 (5 with every member's reward equal: no weight moved)"."""
    flat = es.get("flat") or 0  # absent in summaries written before it was counted
    if not flat:
        return str(es["updates"])
    return f"{es['updates']} ({flat} with every member's reward equal: no weight moved)"


def run_table(summary: dict, directory: Path) -> str:
    """The table `coevolve run` prints at the end of a run."""
    best = summary.get("best") or {}
    found = best_starting_point(directory, summary["task"]) if best else None
    train = summary["train"]
    ledger = summary["ledger"]
    gap = best.get("gap")
    rows = [
        ("method", summary["method"]),
        ("task", f"{summary['task']} ({train['split']}{train['size']}, {train['direction']})"),
        ("evaluations", f"{summary['evaluations']} / {summary['budget']}"),
        ("valid", f"{summary['valid']} ({summary['valid_rate']:.1%})"),
        ("failures", ", ".join(f"{k} {v}" for k, v in summary["failures"].items()) or "-"),
        ("best objective", "-" if not best else f"{best['objective']:.6g} (candidate {best['id']}, {best['operator']})"),
        *([("best is", f"{STARTING_POINT[found]} itself: nothing better than the starting point was found")]
          if found else []),
        ("reference", "-" if train["reference"] is None else f"{train['reference']:.6g}"),
        ("gap", "-" if gap is None else f"{gap:.2%}"),
        ("LLM requests", f"{ledger['llm_requests']} ({ledger['prompt_tokens']} prompt + "
                         f"{ledger['completion_tokens']} completion tokens"
                         + (f", {ledger['llm_retries']} retried" if ledger.get("llm_retries") else "") + ")"),
    ]
    if summary.get("es"):
        rows.append(("ES updates", es_updates(summary["es"])))
    rows += context_rows(summary.get("context"), summary.get("stopped"))
    rows.append(("run directory", str(directory)))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in rows)


def context_rows(context: dict | None, stopped: dict | None) -> list[tuple[str, str]]:
    """The run table's rows for issue 25's context (absent from older summaries)."""
    if not context:
        return []
    rows = [("valid per phase", ", ".join(f"{name} {p['valid']}/{p['candidates']}"
                                          + (f" ({p['valid'] / p['candidates']:.0%})" if p["candidates"] else "")
                                          for name, p in context["phases"].items()) or "-"),
            ("decoding", "constrained to the template's def line" if context["constrain"] == "on"
             else context["constrain"])]
    if context["fingerprint"]:
        rows.append(("clones rejected", f"{context['rejected']} unscored ({context['rejected_template']} of the "
                                        "template)"))
    if context["parser_repairs"]:
        rows.append(("parser repairs", ", ".join(f"{k} {v}" for k, v in context["parser_repairs"].items())))
    if context["repair_requests"]:
        rows.append(("repair operator", f"{context['repaired_valid']} of {context['repair_requests']} fixed"))
    versions = context["skill_versions"]
    if versions:
        rows.append(("skill versions", f"{len(versions)}, latest {versions[-1]['path']} "
                                       f"({versions[-1]['rules']} rules)"))
    template = context.get("template_objective")
    if template is not None:
        rows.append(("beat the template", f"{'yes' if context['beat_template'] else 'no'} (template {template:.6g})"))
    if context.get("spend") is not None:
        rows.append(("endpoint spend", f"${context['spend']:.4f}"))
    if stopped:
        rows.append(("stopped early", f"cap {stopped['cap']} reached ({stopped['used']:g} >= {stopped['limit']:g}) "
                                      f"after {stopped['evaluations']} evaluations; raise it in config.toml and "
                                      "--resume to go on"))
    return rows


def agent_table(summary: dict, directory: Path) -> str:
    """The table `coevolve run` prints at the end of an agent run."""
    first, last = summary["eval_first"], summary["eval_last"]
    ledger = summary["ledger"]

    def scores(e: dict) -> str:
        progress = f", progress {e['progress']:.3f}" if "progress" in e else ""
        return f"reward {e['mean_reward']:.3f}{progress} (round {e['round']})"

    rows = [
        ("method", summary["method"]),
        ("task", summary["task"]),
        ("rounds", str(summary["rounds"])),
        ("episodes", f"{ledger['used']} / {ledger['budget']}"),
        ("held-out before", scores(first)),
        ("held-out after", scores(last)),
        ("best held-out reward", f"{summary['best_eval_reward']:.3f}"),
        ("distilled skill", summary["skill"] or "-"),
    ]
    if summary.get("es"):
        rows.append(("ES updates", es_updates(summary["es"])))
    if "checksum" in summary:
        rows.append(("weights checksum", str(summary["checksum"])))
    rows.append(("run directory", str(directory)))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in rows)


def render_agent_run(store: RunStore, summary: dict) -> dict[str, Path]:
    """An agent run: the table `coevolve run` prints and the held-out reward per
    round (from eval.jsonl, which runs before events.jsonl also wrote)."""
    evals = read_jsonl(store.path("eval.jsonl"))
    curve = [(e["episodes_used"], e["mean_reward"]) for e in evals]
    plot = plot_best_so_far({summary["method"]: curve}, store.path("progress.png"),
                            budget=summary["ledger"]["budget"],
                            title=f"{summary['task']}, {summary['method']}, seed {summary.get('seed', '?')}",
                            ylabel="held-out mean reward (higher is better)")
    parts = [f"# Agent run: {summary['method']} on {summary['task']}", "", "```",
             agent_table(summary, store.dir), "```", "",
             "Budget: training episodes, one ledger charge per episode; held-out evaluation is not charged.", "",
             "| round | episodes | held-out mean reward | skills |", "|---|---|---|---|"]
    parts += [f"| {e['round']} | {e['episodes_used']} | {e['mean_reward']:.3f} | {', '.join(e.get('skills', [])) or '-'} |"
              for e in evals]
    parts += ["", "![held-out reward](progress.png)"]
    atomic_write_text(store.path("report.md"), "\n".join(parts) + "\n")
    return {"report.md": store.path("report.md"), "progress.png": plot}


def render(directory: str | Path) -> dict[str, Path]:
    """A comparison directory or a run directory, whichever `directory` is."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(f"directory not found: {directory}")
    if (directory / COMPARE_CONFIG).exists():
        return render_comparison(directory)
    return render_run(directory)
