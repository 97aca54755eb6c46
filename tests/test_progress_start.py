"""The progress bar says the work it waits for: each live step as it starts (the loop's on_phase), an agent
run its first round; a terminal's bar keeps its clock going. A run's step (the engine generating on CPU) takes
minutes, and the bar sat at `0/T [00:00<?]` the whole time, read as a hung run (s55 walkthroughs). Into a log
each new word is a line of its own, the clock alone none.

Real bars (tqdm), real run configs and plans; the search loop's fakes for a whole run."""

from __future__ import annotations

import io
import sys
import time
from types import SimpleNamespace

from coevolve.agents.runconfig import AgentRunConfig
from coevolve.base.config import build_config
from coevolve.search import progress
from coevolve.search.progress import ProgressBar, progress_bar
from test_search_loop import make_config


class Terminal(io.StringIO):
    """stderr as a terminal: the bar redraws in place."""

    def isatty(self) -> bool:
        return True


def step(used: int, replayed: bool = False) -> SimpleNamespace:
    return SimpleNamespace(used=used, replayed=replayed, best=1.0, valid_rate=0.5, sigma=None)


def test_an_agent_runs_log_says_its_first_round_until_it_ends_and_a_resumed_one_does_not(capsys):
    config = build_config(AgentRunConfig, {"run": {"method": "esopt"}})
    bar = progress_bar(config, unit="episode")
    bar.update_agent(SimpleNamespace(used=4, replayed=False, mean_reward=0.5, solved_rate=0.25, sigma=None,
                                     eval_reward=None))
    bar.close()
    progress_bar(config, resuming=True, unit="episode").close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith("now=first round]") and "episode" in lines[0], lines
    assert "now=" not in lines[-1] and "(resumed)" in lines[-1], lines


def test_a_heuristic_bar_waits_for_the_loop_to_say_its_step(capsys):
    """Made once the engine is up, right before the first step, which the loop's on_phase names."""
    progress_bar(make_config("eoh", 20)).close()
    assert "now=" not in capsys.readouterr().err


def test_a_terminals_bar_moves_its_clock_while_the_first_step_runs(monkeypatch):
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    monkeypatch.setattr(progress, "TICK_S", 0.05, raising=False)  # (before the clock: no such thing)
    bar = ProgressBar(20, "eoh tsp")
    try:
        time.sleep(1.3)  # no step reported
        drawn = screen.getvalue()
    finally:
        bar.close()
    assert "0/20 [00:01<?" in drawn and drawn.count("\r") > 5, repr(drawn)
    assert bar.ticker is not None and not bar.ticker.is_alive()  # closed with the bar


def test_each_live_step_says_its_work_as_it_starts_and_a_replayed_one_says_nothing(tmp_path, capsys):
    """The loop's on_phase: every step, not only the first, runs for minutes on the CPU engine; a log shows
    the step's work as it starts and its figures as it ends. Steps replayed from the log say nothing."""
    from coevolve.runstore import RunStore
    from coevolve.search.loop import SearchLoop
    from test_search_loop import FakeEngine, FakeEvaluator, FakeTask
    from coevolve.base.config import as_dict, dump_toml

    def session(config, resume: bool) -> list[str]:
        store = RunStore.open(tmp_path / "r") if resume else RunStore.create(tmp_path / "r", dump_toml(as_dict(config)))
        bar, said = progress_bar(config, resuming=resume), []
        phase = lambda what: (said.append(what), bar.phase(what))  # noqa: E731
        try:
            SearchLoop(config, store, FakeEngine(), FakeEvaluator(), FakeTask(), on_progress=bar.update_from,
                       on_phase=phase).run()
        finally:
            bar.close()
        return said

    said = session(make_config("sample", 10), resume=False)
    assert said == ["step 0: i1 5 requests", "step 1: i1 5 requests"], said
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sample fake:")]
    assert sum("now=step 1: i1 5 requests" in line for line in lines) == 1, lines
    assert "now=" not in lines[-1], lines  # the step's end takes the word away
    # resumed after its end: every step is replayed from the log, none is live work
    assert session(make_config("sample", 10), resume=True) == []


def test_a_log_keeps_a_new_word_whatever_the_rate_looks_like_and_drops_a_clock_alone():
    """A slow rate is drawn `1.04s/eval`, a fast one `3.2eval/s`: the log kept the step's new word only
    after a fast rate (it split the redraw at "/s")."""
    out = io.StringIO()
    log = progress.LineFile(out)
    for rate in ("1.04s/eval", "3.20eval/s"):
        log.write(f"\rx:  50%|#####     | 2/4 [00:02<00:02,  {rate}, best=7.004]")
        log.write(f"\rx:  50%|#####     | 2/4 [00:03<00:02,  {rate}, best=7.004]")  # the clock alone
        log.write(f"\rx:  50%|#####     | 2/4 [00:03<00:02,  {rate}, best=7.004, now=step 1: m1 2 requests]")
    lines = out.getvalue().splitlines()
    assert [line.endswith("now=step 1: m1 2 requests]") for line in lines] == [False, True] * 2, lines
