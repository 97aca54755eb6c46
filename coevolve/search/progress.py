"""The progress bar of a run, heuristic or agent: budget used (evaluations or
episodes) with the run's figures. Shared by `coevolve run` and `coevolve compare`."""

from __future__ import annotations

import sys
from typing import Any


class ProgressBar:
    """tqdm over the budget; `update_from` is the search loop's on_progress
    callback, `update_agent` the agent run's."""

    def __init__(self, total: int, description: str, unit: str = "eval") -> None:
        from tqdm import tqdm  # only when a bar is shown: the CLI's other commands need none of it

        self.tqdm = tqdm(total=total, desc=description, unit=unit, file=sys.stderr, dynamic_ncols=True)

    def update(self, used: int, postfix: dict[str, str]) -> None:
        self.tqdm.update(used - self.tqdm.n)
        self.tqdm.set_postfix(postfix, refresh=True)

    def update_from(self, progress: Any) -> None:
        """coevolve.search.loop.Progress: best objective, valid rate, σ."""
        postfix = {"best": "-" if progress.best is None else f"{progress.best:.4g}",
                   "valid": f"{progress.valid_rate:.0%}"}
        if progress.sigma is not None:
            postfix["sigma"] = f"{progress.sigma:.2e}"
        self.update(progress.used, postfix)

    def update_agent(self, progress: Any) -> None:
        """coevolve.agents.es_agent.AgentProgress: the round's mean reward and
        solved rate, σ, and the latest held-out reward."""
        postfix = {"reward": "-" if progress.mean_reward is None else f"{progress.mean_reward:.3f}",
                   "solved": "-" if progress.solved_rate is None else f"{progress.solved_rate:.0%}"}
        if progress.sigma is not None:
            postfix["sigma"] = f"{progress.sigma:.2e}"
        if progress.eval_reward is not None:
            postfix["held-out"] = f"{progress.eval_reward:.3f}"
        self.update(progress.used, postfix)

    def close(self) -> None:
        self.tqdm.close()


def progress_bar(config: Any, resuming: bool = False, label: str = "", unit: str = "eval") -> ProgressBar:
    """The bar of a run config (RunConfig, or AgentRunConfig with unit="episode":
    both have [run] budget, method, task)."""
    what = (label or f"{config.run.method} {config.run.task}") + (" (resumed)" if resuming else "")
    return ProgressBar(config.run.budget, what, unit)
