"""The progress bar of a run, heuristic or agent: budget used (evaluations or
episodes) with the run's figures. Shared by `coevolve run` and `coevolve compare`."""

from __future__ import annotations

import re
import sys
import threading
from typing import Any

from coevolve.search.methods import display_name, outside_budget
from coevolve.search.runconfig import RunConfig


RESUMED = " (resumed)"  # the label's mark of a run that goes on from its log
# a terminal's bar redraws its clock this often between steps: a first step of minutes (the engine on CPU)
# otherwise sat at 0/T, 00:00, and read as hung
TICK_S = 1.0


class ProgressBar:
    """tqdm over the budget; `update_from` is the search loop's on_progress
    callback, `update_agent` the agent run's."""

    def __init__(self, total: int, description: str, unit: str = "eval", start: str | None = None) -> None:
        self.unit = unit
        # what the bar says (`now=...`) until the first step is reported: the work it waits for
        self.start = start
        self.tqdm = self._bar(total, description)
        self.replayed: tuple[int, dict[str, str]] | None = None  # (budget used, postfix) the replay reached
        self.postfix: dict[str, str] = {}  # the last step's, which a phase (phase()) adds its word to
        self.closed = threading.Event()
        self.ticker: threading.Thread | None = None
        if sys.stderr.isatty():  # into a log the clock alone is no news (LineFile leaves it out)
            self.ticker = threading.Thread(target=self._tick, name="progress-clock", daemon=True)
            self.ticker.start()

    def _bar(self, total: int, description: str, initial: int = 0) -> Any:
        from tqdm import tqdm  # only when a bar is shown: the CLI's other commands need none of it

        terminal = sys.stderr.isatty()
        # into a log file (nohup, a job's log) each redraw is a line of its own: tqdm's carriage returns
        # made the whole run one line there; the steps still redraw it (set_postfix), the clock at most
        # once a minute; the start word is drawn with the bar's first line, not as a second line after it
        return tqdm(total=total, desc=description, unit=self.unit, initial=initial,
                    file=sys.stderr if terminal else LineFile(sys.stderr), dynamic_ncols=terminal,
                    mininterval=0.1 if terminal else 60.0, ascii=None if terminal else True,
                    postfix={"now": self.start} if self.start else None)

    def _tick(self) -> None:
        while not self.closed.wait(TICK_S):
            self.tqdm.refresh()  # a closed bar (start_after's old one, a moment) draws nothing

    def update(self, used: int, postfix: dict[str, str]) -> None:
        self.start = None
        self.tqdm.update(used - self.tqdm.n)
        self.postfix = postfix
        self.tqdm.set_postfix(postfix, refresh=True)

    def phase(self, what: str | None) -> None:
        """An agent run's live work between rounds (`held-out eval`, `distilling (best of 3, ...)`) runs for
        minutes without moving the bar: its postfix says which (`now=...`); None takes the word away. That
        work is this session's, so a replay before it is over (_end_replay)."""
        shown = dict(self.postfix)
        if what is not None:
            self._end_replay()
            shown = dict(self.postfix)
            shown["now"] = what
        self.tqdm.set_postfix(shown, refresh=True)

    def start_after(self, used: int) -> None:
        """The budget a resumed run replays from its log was spent in earlier sessions: the bar starts
        at it (tqdm's `initial`), so its rate and ETA cover this session's work only; and says
        "(resumed)", whoever made it (a comparison's arm as well as `coevolve run --resume`). Called once,
        when the replay is over (_advance)."""
        total, description, began = self.tqdm.total, self.tqdm.desc, self.tqdm.start_t
        self.start = None  # the work the bar waited for is this session's first step: update() says its end
        self.tqdm.leave = False  # the bar before the replay gives its line to the one after it
        self.tqdm.close()
        self.tqdm = self._bar(total, description if description.endswith(RESUMED) else description + RESUMED, used)
        # made when the first live step has ended: timed from the session's start, so that step's
        # evaluations are not counted as done in no time (a burst of thousands of evals/s)
        self.tqdm.start_t = self.tqdm.last_print_t = began

    def _advance(self, used: int, replayed: bool, postfix: dict[str, str]) -> None:
        """A step (or round) done; one replayed from the log moves where the bar starts rather than its
        rate: the replay's last is kept, and the bar is started after it once, at the first live step
        (or at close, when none came), not made anew for each step replayed."""
        if replayed:
            if self.start is not None:  # the first step was an earlier session's: not the one waited for now
                self.start = None
                self.tqdm.set_postfix({}, refresh=False)
            self.replayed = (used, postfix)
            return
        self._end_replay()
        self.update(used, postfix)

    def _end_replay(self) -> None:
        if self.replayed is not None:
            used, postfix = self.replayed
            self.replayed = None
            self.start_after(used)
            self.update(used, postfix)

    def update_from(self, progress: Any) -> None:
        """coevolve.search.loop.Progress: best objective, valid rate, σ; a step replayed from the
        log (`progress.replayed`) moves where the bar starts rather than its rate (_advance)."""
        postfix = {"best": "-" if progress.best is None else f"{progress.best:.4g}",
                   "valid": f"{progress.valid_rate:.0%}"}
        if progress.sigma is not None:
            postfix["sigma"] = f"{progress.sigma:.2e}"
        skill = skill_label(progress)
        if skill:
            postfix["skill"] = skill
        self._advance(progress.used, progress.replayed, postfix)

    def update_agent(self, progress: Any) -> None:
        """coevolve.agents.es_agent.AgentProgress: the round's mean reward and
        solved rate, σ, and the latest held-out reward; a replayed round moves where the bar
        starts, as a replayed search step does (_advance)."""
        postfix = {"reward": "-" if progress.mean_reward is None else f"{progress.mean_reward:.3f}",
                   "solved": "-" if progress.solved_rate is None else f"{progress.solved_rate:.0%}"}
        if progress.sigma is not None:
            postfix["sigma"] = f"{progress.sigma:.2e}"
        if progress.eval_reward is not None:
            postfix["held-out"] = f"{progress.eval_reward:.3f}"
        self._advance(progress.used, progress.replayed, postfix)

    def close(self) -> None:
        self._end_replay()  # a run that only replayed (killed after its last step) ends showing where it was
        self.closed.set()
        if self.ticker is not None:
            self.ticker.join()
        self.tqdm.close()


def say(line: str) -> None:
    """One line on stderr, kept clear of a progress bar already showing there (tqdm.write): a run's and a
    comparison arm's notes (the loop's on_note)."""
    from tqdm import tqdm  # as ProgressBar: only when a line is said

    tqdm.write(line, file=sys.stderr)


# tqdm's clock in a redraw: `[00:02<00:02,  1.04s/eval` or `[00:00<?, ?eval/s` (elapsed, remaining, rate)
CLOCK = re.compile(r"\[[0-9:]+<[0-9:?]+(,\s*[^,\]]*)?")


class LineFile:
    """A file that writes each of tqdm's redraws as a line (what follows its carriage return), for a
    stream that is no terminal."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.last = ""  # closing redraws the bar as it stood: once in the log

    def write(self, text: str) -> None:
        shown = text.replace("\r", "").rstrip()
        # a redraw that says nothing new but the clock (elapsed<remaining, rate) is left out; the postfix
        # after them is news (a step's figures, the word of the step that starts)
        state = CLOCK.sub("[", shown)
        if shown and state != self.last:
            self.stream.write(shown + "\n")
            self.last = state

    def flush(self) -> None:
        self.stream.flush()


def skill_label(progress: Any) -> str:
    """The skill in use, as the bar shows it: `v002`, `v001 vs v002` while v002 is on trial (skill.keep =
    "judged"), `(new)` on the step that wrote it; "" before the first version."""
    current, trial = getattr(progress, "skill", None), getattr(progress, "trial", None)
    if current is None and trial is None:
        return ""
    label = "none" if current is None else f"v{current:03d}"
    if trial is not None:
        label += f" vs v{trial:03d}"
    return label + (" (new)" if getattr(progress, "refreshed", False) else "")


def progress_bar(config: Any, resuming: bool = False, label: str = "", unit: str = "eval") -> ProgressBar:
    """The bar of a run config (RunConfig, or AgentRunConfig with unit="episode":
    both have [run] budget, method, task). A heuristic run's total is what its ledger charges: T and
    what its method charges outside T (EoH's initial population under eoh.init_in_budget = false)."""
    what = (label or f"{display_name(config.run.method)} {config.run.task}") + (RESUMED if resuming else "")
    if not isinstance(config, RunConfig):
        return ProgressBar(config.run.budget, what, unit, start=None if resuming else "first round")
    # the loop reports `used` from its ledger, outside charges included: a total of T alone ran to 12/12
    # and then went on as a bare `16eval`. Each live step says its work as it starts (the loop's on_phase),
    # the first one too: the bar is made once the engine is up, right before it
    return ProgressBar(config.run.budget + outside_budget(config), what, unit)
