"""Drawing: a comparison's figures (matplotlib, written atomically through
coevolve.search.plot.save_figure) from collected cells and aggregated rows."""

from __future__ import annotations

from pathlib import Path

from coevolve.base.records import ComparisonCell
from coevolve.plan import CompareConfig, ordered_arms
from coevolve.search import methods as registry
from coevolve.search.plot import plot_best_so_far, save_figure
from coevolve.stats import band
from tasks.registry import heuristic_task

def label(method: str) -> str:
    return registry.label(method)


def plot_progress(config: CompareConfig, cells: list[ComparisonCell], task_name: str, budget: int,
                  path: Path) -> Path:
    """Best-so-far training objective vs evaluations: per method the mean over
    seeds, shaded ± one std (from the evaluation where some seed has a valid candidate)."""
    direction = heuristic_task(task_name).direction
    curves, bands = {}, {}
    for method in ordered_arms(config):
        runs = [c.summary for c in cells
                if (c.task, c.method, c.budget) == (task_name, method, budget) and c.summary is not None]
        spread = band([s.best_so_far for s in runs], budget)
        name = f"{label(method)} ({len(runs)} seeds)"
        curves[name] = list(zip(spread.xs, spread.mean))
        bands[name] = (spread.xs, spread.low, spread.high)
    better = "lower" if direction == "min" else "higher"
    return plot_best_so_far(curves, path, budget=budget, bands=bands,
                            title=f"{task_name}, budget {budget}: mean ± std over seeds",
                            ylabel=f"best train objective ({better} is better)")


def plot_test_scores(config: CompareConfig, rows: list[dict], cells: list[ComparisonCell], task_name: str,
                     split: str, size: int, path: Path) -> Path:
    """Final test objective per method: a bar at the mean, a std whisker, a dot per seed;
    one group of bars per budget."""
    # matplotlib on first drawing (as coevolve.search.plot): `coevolve run`'s end table needs none of it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
