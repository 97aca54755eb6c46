"""MAP-Elites (quality-diversity): a grid over behaviour descriptors, one
elite per cell, parents drawn across the cells.

A program's descriptors are computed on the trusted side, from its source
text (never run here), its train objective and its per-instance objectives.
Generic ones need nothing from the task: `lines` (non-blank, non-comment
lines), `branches` (if/for/while, conditional expressions and
comprehensions), `calls` and `constants` (numeric literals). Two more read
the program's score profile, which the sandbox's trusted worker hands back
for a task with `instance_scores` (every built-in but ASP): `spread`, the
coefficient of variation of its per-instance objectives (how unevenly it
does across instances), and `wins`, the share of instances on which it beats
the task's template (the template's profile computed here, in process: our
own code). A task may declare its own, of two kinds. From its decisions (the
tours, the picks): `decision_descriptors` {name: (low, high)} and a method
`describe_decisions(decisions, instances) -> {name: value}`, which the
sandbox's trusted worker calls on the decisions it has just scored and hands
back with the objective (EvalResult.behaviour, kept in the step event and in
candidates.jsonl, so a resumed run reads them back without scoring again); a
program they fail for simply has none. From the source: a `descriptors`
attribute {name: (low, high)} and a method `describe(code, objective) ->
{name: value}`, computed here.
Each descriptor's range is cut into `bins` equal cells (values outside go to
the edge cells); a program whose descriptors are not all finite stays out
of the grid.

The inner method (EoH or Sample) gives the plan and the parent rule, applied
to the elites (EoH: prob-rank over the elites of all cells). The grid is
written after every step (population/gen_NNNN.json, "grid") and drawn as a
heat map of the best objective per cell by `coevolve report RUN_DIR`.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import BaseModel, Field, field_validator, model_validator

from coevolve.base.config import STRICT, config_error
from coevolve.base.errors import UsageError, did_you_mean
from coevolve.base.records import Grid, GridCell, MapElitesSnapshot
from coevolve.search.builtin.over import OverMethod
from coevolve.search.methods import method_section
from coevolve.search.plot import pyplot, save_figure
from coevolve.search.population import Candidate, Population, better, outranks
from tasks.base import declared_behaviour, template_profile

GENERIC: dict[str, tuple[float, float]] = {"lines": (1.0, 60.0), "branches": (0.0, 16.0), "calls": (0.0, 40.0),
                                           "constants": (0.0, 30.0)}
# from the per-instance objectives (EvalResult.profile); default ranges: a relative spread of 0-20%, a share
PROFILE: dict[str, tuple[float, float]] = {"spread": (0.0, 0.2), "wins": (0.0, 1.0)}


def generic_descriptors(code: str) -> dict[str, float]:
    """The descriptors every program has, from its source alone."""
    lines = sum(1 for line in code.splitlines() if line.strip() and not line.strip().startswith("#"))
    try:
        nodes = list(ast.walk(ast.parse(code)))
    except (SyntaxError, ValueError):
        nodes = []
    kinds = (ast.If, ast.For, ast.While, ast.IfExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    return {"lines": float(lines),
            "branches": float(sum(isinstance(n, kinds) for n in nodes)),
            "calls": float(sum(isinstance(n, ast.Call) for n in nodes)),
            "constants": float(sum(isinstance(n, ast.Constant) and isinstance(n.value, (int, float))
                                   and not isinstance(n.value, bool) for n in nodes))}


class MapElitesOptions(BaseModel):
    """[map_elites]"""

    model_config = STRICT  # as every section: nothing coerced ("4", 4.0 and true are not ints)

    over: Literal["eoh", "sample"] = "eoh"  # the method whose plan and parent rule run on the grid
    descriptors: list[str] = Field(default_factory=lambda: ["lines", "branches"], min_length=1, max_length=3)
    bins: int = Field(6, ge=2, le=64)  # cells per descriptor
    ranges: dict[str, list[float]] = Field(default_factory=dict)  # {descriptor: [low, high]}: overrides its range

    @field_validator("ranges")
    @classmethod
    def _ranges(cls, value: dict[str, list[float]]) -> dict[str, list[float]]:
        for name, pair in value.items():
            if len(pair) != 2 or not pair[0] < pair[1]:
                raise config_error(f"map_elites.ranges.{name}", "must be [low, high] with low < high", pair)
        return value

    @model_validator(mode="after")
    def _ranges_used(self) -> MapElitesOptions:
        for name in self.ranges:  # a range no grid axis reads is a misspelt or forgotten descriptor
            if name not in self.descriptors:
                raise config_error(f"map_elites.ranges.{name}", "names no descriptor of map_elites.descriptors "
                                   f"({', '.join(self.descriptors)})", hint=did_you_mean(name, self.descriptors))
        return self


def profile_descriptors(profile: Sequence[float] | None, template: Sequence[float] | None,
                        direction: str) -> dict[str, float]:
    """`spread` and `wins` of a per-instance profile (none without one; `wins` needs the template's
    profile of the same length). A non-finite value stays in: the caller keeps such a program out."""
    if not profile:
        return {}
    values = np.asarray(profile, dtype=float)
    mean = float(values.mean())
    out = {"spread": float(values.std() / abs(mean)) if mean != 0 else math.nan}
    if template is not None and len(template) == len(values):
        base = np.asarray(template, dtype=float)
        out["wins"] = float(np.mean(values < base if direction == "min" else values > base))
    return out


def task_descriptors(task: Any) -> dict[str, tuple[float, float]]:
    declared = getattr(task, "descriptors", None)
    return dict(declared) if isinstance(declared, dict) else {}


def decision_descriptors(task: Any) -> dict[str, tuple[float, float]]:
    """The task's descriptors of decisions (tasks.base.declared_behaviour), a malformed declaration
    one line."""
    try:
        return declared_behaviour(task)
    except ValueError as exc:
        raise UsageError(f"task {getattr(task, 'name', task)}: {exc}") from None


def known_descriptors(task: Any) -> dict[str, tuple[float, float]]:
    """Every descriptor a program of `task` may have, with its default range (a task's own names win)."""
    return {**GENERIC, **PROFILE, **decision_descriptors(task), **task_descriptors(task)}


class MapElitesMethod(OverMethod):
    label = "MAP-Elites"
    section = "map_elites"
    options = MapElitesOptions

    @classmethod
    def check(cls, config: Any) -> None:
        opts = method_section(config, cls.section, cls.options)
        if len(set(opts.descriptors)) != len(opts.descriptors):
            raise config_error("map_elites.descriptors", "must not repeat a descriptor", opts.descriptors)

    def check_task(self, task: Any) -> None:
        """Every descriptor is generic or the task's, with a finite range, and the task's
        describe_decisions() and describe() give finite numbers for its template."""
        super().check_task(task)
        declared = task_descriptors(task)
        decided = decision_descriptors(task)
        known = known_descriptors(task)
        for name in self.opts.descriptors:
            if name not in known:
                raise UsageError(f"config error: map_elites.descriptors: {name!r} is not a descriptor of task "
                                 f"{getattr(task, 'name', task)} (known: {', '.join(known)})")
            low, high = self.opts.ranges.get(name, known[name])
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise UsageError(f"task {getattr(task, 'name', task)}: descriptor {name!r} range ({low}, {high}) "
                                 "is not two finite numbers, low < high")
        # that the template's per-instance objectives and decision descriptors are finite numbers is the
        # task checker's (coevolve/commands/check_task.py), which `run` and `compare` call first
        needs_profile = any(name in PROFILE and name not in {**decided, **declared} for name in self.opts.descriptors)
        if needs_profile and not callable(getattr(task, "instance_scores", None)):
            raise UsageError(f"config error: map_elites.descriptors: {', '.join(PROFILE)} read per-instance "
                             f"objectives; task {getattr(task, 'name', task)} gives none (no instance_scores())")
        if any(name in declared for name in self.opts.descriptors):
            values = self._task_values(task, task.template, None)
            bad = {k: v for k, v in values.items() if k in self.opts.descriptors and not _finite(v)}
            if bad:
                raise UsageError(f"task {getattr(task, 'name', task)}: describe() of the template gave descriptors "
                                 f"that are not finite numbers: {bad}")

    def plan_notes(self) -> dict:
        return {**self.inner.plan_notes(), "descriptors": list(self.opts.descriptors), "bins": self.opts.bins}

    def plan_lines(self) -> list[str]:
        return [f"MAP-Elites over {self.opts.over}: a {' x '.join([str(self.opts.bins)] * len(self.opts.descriptors))} "
                f"grid over {', '.join(self.opts.descriptors)}"]

    # archive
    def start(self, task: Any) -> None:
        super().start(task)
        own = {**decision_descriptors(task), **task_descriptors(task)}
        known = known_descriptors(task)
        self.ranges = [tuple(self.opts.ranges.get(n, known.get(n, (0.0, 1.0)))) for n in self.opts.descriptors]
        # the template's profile, when a descriptor compares with it (`wins`)
        self.template = (template_profile(task, self.config.sandbox.seeds) if "wins" in self.opts.descriptors and "wins" not in own
                         else None)
        self.grid: dict[tuple[int, ...], Candidate] = {}
        self.values: dict[int, list[float]] = {}
        self.undescribed = 0

    def _task_values(self, task: Any, code: str, objective: float | None) -> dict[str, float]:
        describe = getattr(task, "describe", None)
        if describe is None:
            return {}
        try:
            values = describe(code, objective)
        except Exception:  # a task's describe() that fails on a program: the program stays out of the grid
            return {name: math.nan for name in task_descriptors(task)}
        return {str(k): v for k, v in dict(values).items()}

    def describe(self, candidate: Candidate) -> list[float] | None:
        values = generic_descriptors(candidate.code or "")
        values.update(profile_descriptors(candidate.profile, self.template, self.direction))
        values.update(candidate.behaviour or {})  # from its decisions, by the sandbox's trusted worker
        if set(self.opts.descriptors) & set(task_descriptors(self.task)):  # the task's own (its names win)
            values.update(self._task_values(self.task, candidate.code or "", candidate.objective))
        out = [values.get(name) for name in self.opts.descriptors]
        return [float(v) for v in out] if all(_finite(v) for v in out) else None

    def cell(self, values: list[float]) -> tuple[int, ...]:
        bins = self.opts.bins
        return tuple(min(bins - 1, max(0, int(math.floor((v - low) / (high - low) * bins))))
                     for v, (low, high) in zip(values, self.ranges))

    def admit(self, step: int, candidates: Sequence[Candidate], evaluations: int) -> None:
        for candidate in candidates:
            if candidate.duplicate_of is not None or not candidate.valid:
                continue
            values = self.describe(candidate)
            if values is None:
                self.undescribed += 1
                continue
            self.values[candidate.id] = values
            where = self.cell(values)
            held = self.grid.get(where)
            if held is None or outranks(self.rank, candidate, held):  # equal: the earlier stays
                self.grid[where] = candidate

    def elites(self) -> Population:
        ranked = sorted(self.grid.values(), key=self.rank)
        return Population(max(1, len(ranked)), self.direction, members=ranked,
                          with_replacement=self.config.eoh.parents_with_replacement,
                          ties=tuple(self.config.eoh.tie_break))

    def pick(self, operator: str, rng: np.random.Generator, step: int, slot: int) -> list[Candidate]:
        return self.inner.parents(operator, self.elites(), rng)

    def ranked(self) -> list[Candidate]:
        return sorted(self.grid.values(), key=self.rank)

    def members(self) -> list[Candidate]:
        return self.ranked()

    def snapshot(self) -> dict:
        cells = [GridCell(cell=list(where), id=c.id, objective=c.objective, descriptors=self.values[c.id])
                 for where, c in sorted(self.grid.items())]
        grid = Grid(descriptors=list(self.opts.descriptors), bins=self.opts.bins,
                    ranges=[[float(v) for v in r] for r in self.ranges], cells=cells, undescribed=self.undescribed)
        return MapElitesSnapshot(population=self.elites().snapshot(), grid=grid).to_json()


    def figures(self, run_dir: Path) -> dict[str, Path]:
        snapshots = sorted((Path(run_dir) / "population").glob("gen_*.json"))
        if not snapshots:
            return {}
        grid = json.loads(snapshots[-1].read_text()).get("grid")
        if not grid:
            return {}
        return {"map_elites": heat_map(grid, Path(run_dir) / "map_elites.png", self.direction)}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def heat_map(grid: dict, path: Path, direction: str) -> Path:
    """The best objective per cell over the first two descriptors (a one-descriptor grid is one row)."""
    plt = pyplot()
    bins, names = grid["bins"], grid["descriptors"]
    table = np.full((bins, bins) if len(names) > 1 else (1, bins), np.nan)
    for cell in grid["cells"]:
        x = cell["cell"][0]
        y = cell["cell"][1] if len(names) > 1 else 0
        value = cell["objective"]
        old = table[y, x]
        if math.isnan(old) or better(value, old, direction):
            table[y, x] = value
    fig, ax = plt.subplots(figsize=(5.5, 4.5), dpi=100)
    image = ax.imshow(table, origin="lower", cmap="viridis_r" if direction == "min" else "viridis", aspect="auto")
    fig.colorbar(image, ax=ax, label=f"best train objective ({'lower' if direction == 'min' else 'higher'} is better)")
    (low, high) = grid["ranges"][0]
    ax.set_xlabel(f"{names[0]} ({low:g} to {high:g} in {bins} cells)")
    if len(names) > 1:
        low, high = grid["ranges"][1]
        ax.set_ylabel(f"{names[1]} ({low:g} to {high:g} in {bins} cells)")
    ax.set_title(f"MAP-Elites grid: {len(grid['cells'])} of {bins ** min(2, len(names))} cells filled")
    return save_figure(fig, path)
