"""The progress bar says what it waits for before the first step ends, and a terminal's bar keeps its clock
going: a run's first step (the engine generating on CPU) takes minutes, and the bar sat at `0/T [00:00<?]`
the whole time, read as a hung run (s55 walkthroughs). Into a log the start is a line of its own.

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
from test_search_loop import make_config, run


class Terminal(io.StringIO):
    """stderr as a terminal: the bar redraws in place."""

    def isatty(self) -> bool:
        return True


def step(used: int, replayed: bool = False) -> SimpleNamespace:
    return SimpleNamespace(used=used, replayed=replayed, best=1.0, valid_rate=0.5, sigma=None)


def test_a_logs_first_line_says_the_first_step_and_the_step_after_it_takes_the_word_away(capsys):
    bar = progress_bar(make_config("eoh", 20))  # EoH's initial population: 4 requests
    bar.update_from(step(4))
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("eoh fake:   0%") and lines[0].endswith("now=first step: 4 requests]"), lines
    assert len(lines) == 2 and "now=" not in lines[1] and lines[1].endswith("best=1, valid=50%]"), lines


def test_a_whole_runs_log_starts_with_the_word_once(tmp_path, capsys):
    config = make_config("sample", 10)
    bar = progress_bar(config)
    try:
        run(tmp_path / "r", config)
    finally:
        bar.close()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sample fake:")]
    assert [line.count("now=first step: 5 requests") for line in lines] == [1] + [0] * (len(lines) - 1), lines


def test_a_resumed_run_and_an_agent_run_are_not_told_of_a_first_step(capsys):
    progress_bar(make_config("eoh", 20), resuming=True).close()  # its first live step is not step 0
    arm = progress_bar(make_config("sample", 10), label="arm")  # a comparison's arm, resumed or not: its log says
    arm.update_from(step(5, replayed=True))
    arm.update_from(step(10))
    arm.close()
    progress_bar(build_config(AgentRunConfig, {"run": {"method": "esopt"}}), unit="episode").close()
    lines = capsys.readouterr().err.splitlines()
    assert "now=" not in lines[0] and lines[0].startswith("eoh fake (resumed):"), lines
    arm_lines = [line for line in lines if line.startswith("arm")]
    # its start, then (its first report replayed) the bar resumed after the log's steps: no word of a first step
    assert ["now=" in line for line in arm_lines] == [True] + [False] * (len(arm_lines) - 1), lines
    assert arm_lines[1].startswith("arm (resumed):  50%"), lines
    assert lines[-1].endswith("now=first round]") and "episode" in lines[-1], lines


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
