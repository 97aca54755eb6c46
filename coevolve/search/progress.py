"""The progress bar of one search run: evaluations used of the budget, with
the best objective, valid rate and σ. Shared by `coevolve run` and
`coevolve compare`."""

from __future__ import annotations

import sys

from coevolve.search.runconfig import RunConfig


class ProgressBar:
    """tqdm over evaluations; `update_from` is the loop's on_progress callback."""

    def __init__(self, total: int, description: str) -> None:
        from tqdm import tqdm

        self.tqdm = tqdm(total=total, desc=description, unit="eval", file=sys.stderr, dynamic_ncols=True)

    def update_from(self, progress) -> None:
        self.tqdm.update(progress.used - self.tqdm.n)
        postfix = {"best": "-" if progress.best is None else f"{progress.best:.4g}",
                   "valid": f"{progress.valid_rate:.0%}"}
        if progress.sigma is not None:
            postfix["sigma"] = f"{progress.sigma:.2e}"
        self.tqdm.set_postfix(postfix, refresh=True)

    def close(self) -> None:
        self.tqdm.close()


def progress_bar(config: RunConfig, resuming: bool = False, label: str = "") -> ProgressBar:
    what = label or f"{config.run.method} {config.run.task}"
    return ProgressBar(config.run.budget, what + (" (resumed)" if resuming else ""))
