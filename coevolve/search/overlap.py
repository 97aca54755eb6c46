"""Scoring an endpoint's replies while the rest of the step is generated
(`[sandbox] overlap`, on by default).

A step asks its proposer for all its candidates, then scores them. From an
endpoint the replies come one at a time over seconds or minutes, and the
sandbox sat idle until the last one. With overlap, each reply is parsed as it
arrives and its program handed to the sandbox at once; when the step comes
to score its candidates it takes the results already there and scores only
the rest. What a run records does not change: a program's result is the
sandbox's verdict on that program and set, whenever it runs (its limits are
CPU seconds, with wall-clock backstops far above them, and no more programs
run at once than the sandbox has workers), and the step still builds its
candidates, and charges them, in slot order after generation.

Only what the step would score is started early: a program seen earlier in
the run, or (with context.fingerprint) a clone the step will reject, is
skipped; a program on the first set the step would score it on (the task's
cascade stage when it has one and the archive sets a bar). What is scored
early and then not asked for (a reply the step re-asks for) is sandbox time
spent, never budget. The in-process engine returns a batch at once, so
there is nothing to overlap there.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Sequence

Job = tuple  # (code, task, split, size), as the sandbox's evaluate_many takes them


def _key(job: Job) -> tuple:
    return job[0], job[2], job[3]


class Overlap:
    """One step's early scorings: `submit` a job as its reply arrives (any thread), then score the
    step through `evaluate_many`, which takes each job's early result when there is one."""

    def __init__(self, evaluator: Any, workers: int) -> None:
        self.inner = evaluator
        self.pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="overlap")
        self.started: dict[tuple, Future] = {}
        self.lock = threading.Lock()  # replies arrive on the endpoint's threads
        self.taken = 0  # results the step took from early scorings
        # id(reply) -> (reply, request, its parse), written by the hook: the step takes the parse from here
        self.parsed: dict[int, tuple[Any, Any, Any]] = {}

    def submit(self, job: Job) -> None:
        key = _key(job)
        with self.lock:
            if key not in self.started:  # one program twice in a step is scored once
                self.started[key] = self.pool.submit(lambda: self.inner.evaluate_many([job])[0])

    def evaluate_many(self, jobs: Sequence[Job]) -> list[Any]:
        """Results in the order of `jobs`: the early ones awaited, the others scored now, together."""
        early = {i: self.started[_key(job)] for i, job in enumerate(jobs) if _key(job) in self.started}
        rest = [job for i, job in enumerate(jobs) if i not in early]
        fresh = iter(self.inner.evaluate_many(rest) if rest else [])
        results = [early[i].result() if i in early else next(fresh) for i in range(len(jobs))]
        self.taken += len(early)
        return results

    def close(self) -> None:
        """End the step: scorings not yet begun are dropped; those running finish in their threads
        (or end with the sandbox on an interrupt)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.started.clear()
