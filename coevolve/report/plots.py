"""Drawing: a comparison's figures (matplotlib, written atomically through
coevolve.search.plot.save_figure) from collected cells and aggregated rows."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from coevolve.base.errors import plural
from coevolve.base.records import ComparisonCell
from coevolve.plan import CompareConfig, ordered_arms
from coevolve.search.methods import label  # the one label of a method among others
from coevolve.search.plot import LINE_STYLES, pyplot, save_figure
from coevolve.stats import band
from tasks.loader import task_label
from tasks.registry import heuristic_task


def _steps(ax, curve: Sequence[Sequence[float]], end: int, **style):
    """A best-so-far curve [(evaluation, value), ...] as a step line held flat to `end` (runs of one budget
    compare at a glance); the line drawn."""
    xs, ys = [x for x, _ in curve], [y for _, y in curve]
    return ax.step(xs + [max(end, xs[-1])], ys + [ys[-1]], where="post", **style)[0]


def plot_progress(config: CompareConfig, cells: list[ComparisonCell], task_name: str, budget: int,
                  path: Path) -> Path:
    """Best-so-far training objective vs evaluations: per method each seed's curve, thin, and the mean over
    the seeds that found a valid program, shaded ± one std, from the evaluation where every one of them has
    one: a mean over the seeds started so far would jump when a late seed enters it, an improvement no
    run made. Each as far as its runs spent (T, plus what a run charged outside T: EoH's initial
    population under eoh.init_in_budget = false), the axis to the most any arm spent."""
    plt = pyplot()
    direction = heuristic_task(task_name).direction
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    end = budget
    for index, method in enumerate(ordered_arms(config)):
        runs = [c.summary for c in cells
                if (c.task, c.method, c.budget) == (task_name, method, budget) and c.summary is not None]
        spent = budget + max((s.outside_budget for s in runs), default=0)
        end = max(end, spent)
        started = [s.best_so_far for s in runs if s.best_so_far]  # the seeds with a valid program
        if not started:
            continue
        color = f"C{index % 10}"
        if len(started) > 1:
            for curve in started:
                _steps(ax, curve, spent, color=color, linewidth=0.7, alpha=0.45)
        spread = band(started, spent)
        keep = [i for i, n in enumerate(spread.runs) if n == len(started)]  # a suffix: curves only start
        xs, mean = [spread.xs[i] for i in keep], [spread.mean[i] for i in keep]
        name = f"{label(method)} ({plural(len(runs), 'seed')}" + (
            f", {len(started)} with a valid program)" if len(started) < len(runs) else ")")
        if len(started) > 1 and xs[0] > min(curve[0][0] for curve in started):
            name += f", mean from {xs[0]}"
        _steps(ax, list(zip(xs, mean)), spent, color=color, linewidth=2,
               linestyle=LINE_STYLES[index % len(LINE_STYLES)], label=name)
        ax.plot(xs, mean, "o", markersize=3, color=color)
        low, high = [spread.low[i] for i in keep], [spread.high[i] for i in keep]
        ax.fill_between(xs + [spent], low + [low[-1]], high + [high[-1]], step="post", color=color, alpha=0.2,
                        linewidth=0)
    better = "lower" if direction == "min" else "higher"
    ax.set_title(f"{task_label(task_name)}, budget {budget}: mean ± std over seeds"
                 + (f" (some arms spend up to {end})" if end > budget else "")
                 + "\nthin: each seed; the mean from when all seeds with a program have one",
                 fontsize="medium")
    ax.set_xlabel("evaluations")
    ax.set_ylabel(f"best train objective ({better} is better)")
    ax.set_xlim(0, end)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no run produced a valid program", ha="center", va="center", transform=ax.transAxes)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_test_scores(config: CompareConfig, rows: list[dict], cells: list[ComparisonCell], task_name: str,
                     split: str, size: int, path: Path, template: float | None = None) -> Path:
    """Final test objective per method: a bar at the mean, a std whisker, a dot per seed, and under each
    bar how many of its runs gave a heuristic (a run with none has no dot: 1/2 is not 2/2); one group of
    bars per budget; a dashed line at the task template's objective, the starting point to beat."""
    plt = pyplot()
    methods = ordered_arms(config)
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
                       label=label(method) if b == 0 else None, yerr=spread, capsize=3, ecolor="black")
                shown += [stats["mean"] - spread, stats["mean"] + spread]
            seeds = [c.scores.get((split, size)) for c in cells
                     if (c.task, c.method, c.budget) == (task_name, method, budget)]
            values = [s.objective for s in seeds if s is not None and s.objective is not None]
            ax.plot([x] * len(values), values, "o", color="black", markersize=3)
            ax.annotate(f"{len(values)}/{len(seeds)}", (x, 0), xycoords=("data", "axes fraction"),
                        xytext=(0, 3), textcoords="offset points", ha="center", fontsize="x-small")
            shown += values
    if template is not None:
        ax.axhline(template, color="black", linestyle="--", linewidth=1, label="task template")
        shown.append(template)
    ax.set_xticks(range(len(budgets)), [f"budget {b}" for b in budgets])
    ax.set_ylabel(f"{split}{size} objective")
    ax.set_title(f"{task_label(task_name)} {split}{size}: best heuristic by training score", fontsize="medium")
    if shown:  # zoom in: differences between methods are small next to the objective itself
        low, high = min(shown), max(shown)
        pad = max((high - low) * 0.15, abs(high) * 0.005, 1e-9)
        ax.set_ylim(low - pad, high + pad)
        ax.legend(loc="best", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no run produced a valid heuristic", ha="center", va="center", transform=ax.transAxes)
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, path)


def difference_points(rows: list[dict], task_name: str) -> list[tuple[str, float, float, float, bool]]:
    """A task's Δ rows that have Welch's interval (two scored seeds in each arm), as (label, difference,
    low, high, told apart): the variant's mean test objective minus its base's and the interval's ends,
    in % of the base's mean, so that test sets of different scales share one axis."""
    means = {(r["task"], r["budget"], r["split"], r["size"], r["method"]): r["objective"]["mean"]
             for r in rows if r["kind"] == "method"}
    points = []
    for r in rows:
        if r["kind"] != "delta" or r["task"] != task_name or not r.get("interval"):
            continue
        base = means.get((r["task"], r["budget"], r["split"], r["size"], r["base"]))
        if not base:
            continue
        low, high = (100 * v / abs(base) for v in r["interval"])
        points.append((f"{label(r['variant'])} vs {label(r['base'])}, b{r['budget']}, {r['split']}{r['size']}",
                       (low + high) / 2, low, high, bool(r["distinct"])))
    return points


def plot_differences(rows: list[dict], task_name: str, direction: str, path: Path) -> Path:
    """One line per Δ row of the task: the difference of mean test objectives with Welch's 95% interval,
    in % of the base's mean; a line that crosses 0 is a pair that cannot be told apart."""
    plt = pyplot()
    points = difference_points(rows, task_name)
    fig, ax = plt.subplots(figsize=(8.0, 1.6 + 0.45 * max(1, len(points))), dpi=100)
    for y, (name, middle, low, high, apart) in enumerate(reversed(points)):
        color = "tab:blue" if apart else "tab:gray"
        ax.plot([low, high], [y, y], color=color, linewidth=2.5, solid_capstyle="butt")
        ax.plot([middle], [y], "o", color=color)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(points)), [p[0] for p in reversed(points)], fontsize="small")
    better = "left" if direction == "min" else "right"
    ax.set_xlabel(f"variant − base, % of the base's mean ({better} of 0: variant better)", fontsize="small")
    ax.set_title(f"{task_label(task_name)}: Welch's 95% intervals (grey: crosses 0, not told apart)", fontsize="medium")
    if not points:
        ax.text(0.5, 0.5, "no pair has two scored seeds in each arm", ha="center", va="center",
                transform=ax.transAxes)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return save_figure(fig, path)
