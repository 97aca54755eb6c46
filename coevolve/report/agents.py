"""Tables and plot of an agent comparison (`[compare] kind = "agent"`), rebuilt
from its files alone: compare.toml, every arm's heldout.json and the training
runs' summary.json. Nothing is rerun; coevolve.report hands agent comparisons
here (`coevolve report DIR`, and `coevolve compare` after its runs).

Per task and budget, one row per method: Mean@k and Pass@k with 95% intervals,
pooled over the seeds' held-out problems (the same problems for every arm:
the interval covers problems and seeds), each seed's Mean@k beside, and the
well-formed action rate, and the training runs' ES updates with how many were flat (summary.json): an arm
whose every update was flat trained nothing, and its verdict says so. Then what the comparison can conclude: a method is
told apart from the checkpoint ("base") only when, paired per problem (same
seed, same problem, same sampling seeds), a sign test over the problems whose
score changed gives p < 0.05; otherwise the two "cannot be told apart" at
this size.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from coevolve.base.config import build_config, read_toml
from coevolve.base.durable import atomic_write_json, atomic_write_text, read_json
from coevolve.base.errors import UsageError, plural
from coevolve.plan import (COMPARE_CONFIG, HELDOUT_SCORES, AgentCompareConfig, RunSpec, arm_lines, arm_method,
                           base_directory, run_state)
from coevolve.report.collecting import es_counts
from coevolve.search.plot import pyplot, save_figure
from coevolve.stats import Interval, mean_at_k, paired_change, pass_at_k, problem_means
from tasks.loader import task_label

PLOT = "agents.png"


def collect(root: Path) -> tuple[AgentCompareConfig, list[dict]]:
    """The comparison's config and one record per arm (task, method, budget, seed):
    its state and, once scored, its held-out attempts."""
    config = build_config(AgentCompareConfig, read_toml(root / COMPARE_CONFIG))
    c = config.compare
    records = []
    for seed in c.seeds:
        for task in c.tasks:
            for budget in c.budgets:
                for method in c.methods:
                    if method == "base" and budget != c.budgets[0]:
                        continue  # the checkpoint: one arm for every budget
                    spec = RunSpec(task, method, budget, seed)
                    directory = base_directory(root, task, seed) if method == "base" else spec.directory(root)
                    scores = read_json(directory / HELDOUT_SCORES)
                    state = "checkpoint" if method == "base" else run_state(directory)
                    records.append({"task": task, "method": method, "budget": budget, "seed": seed,
                                    "dir": str(directory.relative_to(root)), "state": state,
                                    "attempts": None if scores is None else scores["attempts"],
                                    "well_formed": None if scores is None else scores.get("well_formed"),
                                    **trained(None if method == "base" else read_json(directory / "summary.json"))})
    return config, records


def trained(summary: dict | None) -> dict:
    """What a training run did, from its summary.json: ES updates and how many were flat (every member's
    reward equal, so no weight moved), and whether it distilled a skill. None where it made no ES update
    counts (no ES, or no summary yet)."""
    updates, flat = es_counts((summary or {}).get("es"))
    return {"es_updates": updates, "es_flat": flat, "skill": (summary or {}).get("skill")}


def aggregate(config: AgentCompareConfig, records: list[dict]) -> list[dict]:
    """One row per (task, budget, method) with scored arms: pooled Mean@k / Pass@k."""
    rows = []
    c = config.compare
    for task in c.tasks:
        for budget in c.budgets:
            for method in c.methods:
                mine = [r for r in records if (r["task"], r["method"]) == (task, method) and r["attempts"] is not None
                        and (method == "base" or r["budget"] == budget)]
                if not mine:
                    continue
                pooled = [a for r in mine for a in r["attempts"]]
                formed = [r["well_formed"] for r in mine if r["well_formed"] is not None]
                rows.append({"task": task, "budget": budget, "method": method, "seeds": [r["seed"] for r in mine],
                             "mean": mean_at_k(pooled).to_dict(), "pass": pass_at_k(pooled).to_dict(),
                             "per_seed": {str(r["seed"]): mean_at_k(r["attempts"]).mean for r in mine},
                             "well_formed": sum(formed) / len(formed) if formed else None, **pooled_training(mine)})
    return rows


def pooled_training(mine: list[dict]) -> dict:
    """An arm's ES updates and flat ones summed over its seeds' runs (None without ES), and whether any
    run distilled a skill."""
    counted = [r for r in mine if r.get("es_updates") is not None]
    return {"es_updates": sum(r["es_updates"] for r in counted) if counted else None,
            "es_flat": sum(r["es_flat"] for r in counted) if counted else None,
            "skilled": any(r.get("skill") for r in mine)}


def weights_unmoved(row: dict) -> bool:
    """Every ES update of the arm was flat: its weights are the base's."""
    return row.get("es_updates") is not None and row["es_flat"] == row["es_updates"]


def training_note(row: dict) -> str:
    """What the arm's training did, where that changes how its verdict reads: nothing at all (every ES
    update flat and no skill), only its skill, or some flat updates; "" otherwise."""
    updates, flat = row.get("es_updates"), row.get("es_flat")
    if weights_unmoved(row):
        why = f"all {updates} ES updates were flat (every member's reward equal), so its weights are the base's"
        return f"trained nothing: {why}" if not row.get("skilled") else f"only its skill differs: {why}"
    return f"{flat} of {updates} ES updates flat" if flat else ""


def es_cell(row: dict) -> str:
    """The report table's ES-updates cell: `2 (2 flat: no weight moved)`, `4 (1 flat)`, `4`, or `-`."""
    updates, flat = row.get("es_updates"), row.get("es_flat")
    if updates is None:
        return "-"
    if weights_unmoved(row):
        return f"{updates} ({flat} flat: no weight moved)"
    return f"{updates} ({flat} flat)" if flat else str(updates)


def problem_scores(records: list[dict], task: str, method: str, budget: int) -> dict[str, float]:
    """One arm's mean reward per held-out problem, keyed by seed and problem (every arm of a seed plays
    the same problems in the same order with the same sampling seeds, so two arms pair by key)."""
    mine = [r for r in records if (r["task"], r["method"]) == (task, method) and r["attempts"] is not None
            and (method == "base" or r["budget"] == budget)]
    return problem_means((f"{r['seed']}:{i}", score) for r in mine for i, tries in enumerate(r["attempts"])
                         for score in tries)


def conclusions(config: AgentCompareConfig, rows: list[dict], records: list[dict]) -> list[str]:
    """Each trained method against the checkpoint (a named arm also against the method it runs), per
    task and budget, paired per problem: told apart only when the sign test over the problems whose
    score changed gives p < 0.05 (stats.paired_change, as an agent run's table and `coevolve eval`)."""
    k = config.eval.k
    out = []
    for row in rows:
        for other in ("base", arm_method(config, row["method"])):
            base = next((r for r in rows if (r["task"], r["budget"], r["method"]) == (row["task"], row["budget"], other)),
                        None)
            if row["method"] == other or base is None:
                continue
            a, b = row["mean"], base["mean"]
            where = f"{task_label(row['task'])}, budget {row['budget']}: {row['method']} vs {other}"
            change = paired_change(problem_scores(records, row["task"], other, row["budget"]),
                                   problem_scores(records, row["task"], row["method"], row["budget"]))
            if change is None:
                out.append(f"{where}: cannot judge (no seed scored both; Mean@{k} {a['mean']:.3f} vs "
                           f"{b['mean']:.3f}).")
                continue
            paired = (f"paired per problem, {change['better']} of {change['cases']} better, {change['worse']} worse, "
                      f"sign test p = {change['p']:.2g}")
            note = training_note(row)
            if weights_unmoved(row) and not row.get("skilled"):
                # "cannot be told apart" would read as "ES does not help": nothing was trained
                out.append(f"{where}: {note} (Mean@{k} {a['mean']:.3f} vs {b['mean']:.3f}; {paired}).")
                continue
            paired += f"; {note}" if note else ""
            if change["p"] < 0.05:
                out.append(f"{where}: Mean@{k} {'higher' if change['better'] > change['worse'] else 'lower'} "
                           f"({a['mean']:.3f} vs {b['mean']:.3f}; {paired}).")
            else:
                out.append(f"{where}: cannot be told apart (Mean@{k} {a['mean']:.3f} vs {b['mean']:.3f}; {paired}).")
    return out


def _iv(d: dict) -> str:
    return str(Interval(d["n"], d["mean"], d["low"], d["high"]))


def markdown(config: AgentCompareConfig, rows: list[dict], records: list[dict], verdicts: list[str]) -> str:
    c, e, k = config.compare, config.eval, config.eval.k
    scored = sum(r["attempts"] is not None for r in records)
    lines = [f"# Agent comparison: held-out Mean@{k} / Pass@{k}", "",
             f"Tasks: {', '.join(map(task_label, c.tasks))}. Budgets: {', '.join(map(str, c.budgets))} training episodes per run. "
             f"Seeds: {', '.join(map(str, c.seeds))}. Arms scored: {scored} of {len(records)}.", "",
             f"Every arm plays the same {plural(e.problems, 'held-out problem')} per task (eval split), k = "
             f"{plural(k, 'attempt')} each "
             f"with the same sampling seeds, {'constrained' if e.constrained else 'free'} decoding, "
             f"{e.max_tokens} tokens a turn. base is the checkpoint (no training). Intervals: 95%, over problems "
             "pooled over seeds.", ""]
    if c.arms:
        lines += ["Named arms train a method with some settings otherwise (every other setting is the comparison's) "
                  "and are judged against base and against the method they run:", ""]
        lines += [f"- {line}" for line in arm_lines(config)] + [""]
    if verdicts:
        lines += ["## What this comparison can and cannot conclude", ""] + [f"- {v}" for v in verdicts] + [""]
    for task in c.tasks:
        options = config.task.get(task, {})
        name = task_label(task)  # a file task by its name (its runs' folder), not its path
        lines += [f"## {name}" + (f" ({', '.join(f'{key}={v}' for key, v in options.items())})" if options else ""), ""]
        if name != task:  # ... and one line says which file it is
            lines += [f"Task: `{task}`", ""]
        for budget in c.budgets:
            lines += [f"### Budget {budget}", "",
                      f"| method | Mean@{k} [95% CI] | Pass@{k} [95% CI] | Mean@{k} per seed | well-formed "
                      "| ES updates |",
                      "|---|---|---|---|---|---|"]
            for row in (r for r in rows if r["task"] == task and r["budget"] == budget):
                per_seed = ", ".join(f"{v:.3f}" for v in row["per_seed"].values())
                formed = "-" if row["well_formed"] is None else f"{row['well_formed']:.2f}"
                lines.append(f"| {row['method']} | {_iv(row['mean'])} | {_iv(row['pass'])} | {per_seed} | {formed} "
                             f"| {es_cell(row)} |")
            lines.append("")
    lines += [f"![Mean@{k} / Pass@{k}]({PLOT})", "", "## Arms", "",
              "| task | method | budget | seed | state | scored | directory |", "|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {task_label(r['task'])} | {r['method']} | {'-' if r['method'] == 'base' else r['budget']} | {r['seed']} | "
                     f"{r['state']} | {'yes' if r['attempts'] is not None else 'no'} | [{r['dir']}]({r['dir']}/) |")
    return "\n".join(lines) + "\n"


def _flat(row: dict) -> dict:
    """A table row for CSV: each interval as mean, low, high columns."""
    flat: dict[str, Any] = {"kind": "method"}
    for key, value in row.items():
        if isinstance(value, dict) and "low" in value:
            flat.update({f"{key}_mean": value["mean"], f"{key}_low": value["low"], f"{key}_high": value["high"]})
        else:
            flat[key] = " ".join(map(str, value.values() if isinstance(value, dict) else value)) \
                if isinstance(value, (dict, list)) else value
    return flat


def _csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return buffer.getvalue()


def plot(config: AgentCompareConfig, rows: list[dict], path: Path) -> Path:
    """Mean@k and Pass@k bars with their intervals, one panel per task and budget."""
    plt = pyplot()
    panels = [(t, b) for t in config.compare.tasks for b in config.compare.budgets]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (task, budget) in zip(axes[0], panels):
        mine = [r for r in rows if r["task"] == task and r["budget"] == budget]
        xs = range(len(mine))
        for offset, key, label in ((-0.18, "mean", f"Mean@{config.eval.k}"), (0.18, "pass", f"Pass@{config.eval.k}")):
            means = [r[key]["mean"] for r in mine]
            errors = [[m - r[key]["low"] for m, r in zip(means, mine)], [r[key]["high"] - m for m, r in zip(means, mine)]]
            ax.bar([x + offset for x in xs], means, width=0.34, yerr=errors, capsize=3, label=label)
        ax.set_xticks(list(xs), [r["method"] for r in mine], rotation=20, fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(f"{task_label(task)}, budget {budget}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    return path


def render_agent_comparison(root: str | Path) -> dict[str, Path]:
    """Write report.md, results.json and agents.png for an agent comparison."""
    root = Path(root)
    if not (root / COMPARE_CONFIG).exists():
        raise UsageError(f"{root} is not a comparison directory (no {COMPARE_CONFIG})")
    config, records = collect(root)
    rows = aggregate(config, records)
    verdicts = conclusions(config, rows, records)
    written = {"report.md": root / "report.md", "results.json": root / "results.json",
               "table.csv": root / "table.csv", "runs.csv": root / "runs.csv"}
    atomic_write_text(written["report.md"], markdown(config, rows, records, verdicts))
    # the dashboard lists a comparison's table and runs from these two files
    atomic_write_text(written["table.csv"], _csv([_flat(row) for row in rows]))
    atomic_write_text(written["runs.csv"], _csv([{key: r[key] for key in ("task", "method", "budget", "seed", "state",
                                                                            "dir")} for r in records]))
    atomic_write_json(written["results.json"], {
        # without compare.out: the directory may move, and a rerun elsewhere holds the same results
        "kind": "agent", "config": {"compare": {k: v for k, v in vars(config.compare).items() if k != "out"},
                                    "eval": vars(config.eval)},
        "rows": rows, "conclusions": verdicts, "named_arms": arm_lines(config),
        "arms": [{key: v for key, v in r.items() if key != "attempts"} | {"scored": r["attempts"] is not None}
                 for r in records]})
    if rows:
        written[PLOT] = plot(config, rows, root / PLOT)
    return written
