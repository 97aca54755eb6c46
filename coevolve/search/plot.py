"""Best-so-far vs evaluations, as a PNG (matplotlib's Agg backend: no display)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Sequence

from coevolve.base.durable import atomic_path
from coevolve.search.methods import display_name

if TYPE_CHECKING:
    from coevolve.base.records import SearchSummary


def pyplot() -> Any:
    """matplotlib.pyplot on its file-only backend (Agg: no display needed), imported on first drawing:
    it is heavy, and `coevolve run`'s start and end table need none of it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def best_so_far(points: Sequence[tuple[int, float]], direction: str) -> list[tuple[int, float]]:
    """Running best of (evaluation, objective) points, one entry per improvement."""
    curve: list[tuple[int, float]] = []
    for evaluation, objective in sorted(points):
        if not curve or (objective < curve[-1][1] if direction == "min" else objective > curve[-1][1]):
            curve.append((evaluation, objective))
    return curve


Band = tuple[Sequence[int], Sequence[float], Sequence[float]]  # (evaluations, low, high), a step function


class Mark(NamedTuple):
    """A level drawn across a best-so-far plot."""

    label: str
    value: float
    style: str = "--"
    color: str = "black"


LINE_STYLES = ("-", "--", ":", "-.")


def plot_best_so_far(curves: Mapping[str, Sequence[tuple[int, float]]], path: str | Path, *,
                     budget: int | None = None, title: str = "", ylabel: str = "best objective",
                     bands: Mapping[str, Band] | None = None, xlabel: str = "evaluations",
                     ylim: tuple[float, float] | None = None, marks: Sequence[Mark] = ()) -> Path:
    """One step line per label; each curve is a best-so-far list of (evaluation, objective),
    drawn as flat until `budget` so that runs of equal budget compare at a glance.
    `bands` shades a spread (e.g. ± std over seeds) around the label's curve, in its colour. `xlabel` names
    what the x axis counts (an agent run's training episodes); `ylim` fixes the y range (a reward's [0, 1],
    so a flat zero curve is drawn at the bottom, not centred on a range below zero); `marks`: levels drawn
    across the plot, each with its legend label (a run's template and reference, plot_run_progress)."""
    fig, ax = pyplot().subplots(figsize=(6, 4), dpi=100)
    for index, (label, curve) in enumerate(curves.items()):
        if not curve:
            continue
        xs = [e for e, _ in curve]
        ys = [v for _, v in curve]
        end = max(budget or xs[-1], xs[-1])
        # a style of its own per curve: two arms that found the same programs draw one line over the
        # other, and a dashed one over a solid one stays visible
        ax.step(xs + [end], ys + [ys[-1]], where="post", label=label, linestyle=LINE_STYLES[index % len(LINE_STYLES)])
        color = ax.lines[-1].get_color()
        ax.plot(xs, ys, "o", markersize=3, color=color)
        if bands and bands.get(label) and len(bands[label][0]):
            bx, low, high = (list(part) for part in bands[label])
            ax.fill_between(bx + [end], low + [low[-1]], high + [high[-1]], step="post", color=color, alpha=0.2,
                            linewidth=0)
    for mark in marks:
        ax.axhline(mark.value, color=mark.color, linestyle=mark.style, linewidth=1.2, label=mark.label)
    ax.set_xlabel(xlabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if budget:
        ax.set_xlim(0, budget)
    if any(curves.values()) or marks:
        ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_run_progress(summary: "SearchSummary", path: str | Path) -> Path:
    """A run's best-so-far training objective, with the task template's training objective (the starting
    point to beat: a curve that never passes it found nothing better) and the training set's reference,
    where the summary has them: what `coevolve run` draws as it ends and `coevolve report` draws again."""
    train, template = summary.train, (summary.context or {}).get("template_objective")
    marks = ([Mark(f"task template ({template:.6g})", template)] if template is not None else []) + \
        ([Mark(f"reference ({train.reference:.6g})", train.reference, ":", "tab:green")]
         if train.reference is not None else [])
    method = display_name(summary.method)  # a method file by its label, as the run table names it
    return plot_best_so_far({method: summary.best_so_far}, path, budget=summary.budget,
                            title=f"{summary.task}, {method}, seed {summary.seed}",
                            ylabel=f"best train objective ({'lower' if train.direction == 'min' else 'higher'} "
                                   "is better)", marks=marks)


def save_figure(fig, path: str | Path) -> Path:
    """Write a PNG atomically (a reader never sees half a file) and free the figure."""
    with warnings.catch_warnings():
        # a figure whose labels cannot fit (many arms, a long title) keeps its layout and is still
        # written: matplotlib's warning would only reach the terminal
        warnings.filterwarnings("ignore", message="Tight layout not applied", category=UserWarning)
        fig.tight_layout()
    path = Path(path)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=path.suffix.lstrip(".") or "png")
    finally:
        pyplot().close(fig)
    return path
