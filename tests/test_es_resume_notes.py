"""A resume of a run with ES says once, on stderr, what it replayed into the weights and what was verified
(`weights: replayed N ES updates from DIR/history.jsonl (checksum verified after each; ...)`, or that no
update was made yet); a new run says nothing of it. history.jsonl records carry the normaliser's settings
(`normalise`, `ddof`, `epsilon`), so `normalised` is checkable against `rewards` from the history alone; a
history written before these fields still resumes.

The line is the command's to print: start_es (library code, called by the search loop and agent runs, so by
comparisons and tests) prints nothing and hands it to the `on_note` it is given, as `coevolve run` passes one;
the replay is logged in events.jsonl as a `replay` event (updates, history file, verified, from_log), which
`coevolve report` reads past.

Why: walkthrough s54 (benchmarks/results/s54/walkthrough_es.md), findings 5 and 6: a resume printed only
`resuming: DIR`, and a reader checking `normalised` had to open config.toml; s55: the line came from library
code, to every caller, and the log did not record the replay. Light: the fake engines of
tests/search_fakes.py and tests/test_agents_es.py, through start_es, the CLI and run_agent; no vLLM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from coevolve.cli import main
from coevolve.engine import pool
from coevolve.es import ESConfig, ESOpt
from coevolve.es.optimizer import EPSILON
from coevolve.es.start import resume_es, start_es
from coevolve.runstore import RunStore, read_jsonl
from search_fakes import FakeEngine
from test_agents_es import FakeEngine as AgentEngine
from test_agents_es import make_config, play, start
from test_history_gaps import CountingEngine, killed_run

CFG = ESConfig(population=4, generations=3)
REWARDS = ([0.0, 1.0, 2.0, 0.5], [1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 1.0, 1.0])


def weight_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("weights:")]


def written(tmp_path: Path) -> tuple[Path, Path, FakeEngine]:
    """Three updates through ESOpt.tell, and a run log that holds events (so start_es sees a resume)."""
    path, log = tmp_path / "history.jsonl", tmp_path / "events.jsonl"
    engine = FakeEngine()
    es = ESOpt(CFG, path, seed=3)
    for rewards in REWARDS:
        es.tell(engine, es.ask(), rewards)
    log.write_text('{"type": "start"}\n')
    return path, log, engine


@pytest.mark.parametrize("normalise, ddof", [("zscore", 1), ("zscore", 0), ("rank", 1)])
def test_a_record_holds_the_normaliser_settings_and_normalised_follows_from_them(tmp_path, normalise, ddof):
    es = ESOpt(ESConfig(population=4, generations=2, normalise=normalise, ddof=ddof), tmp_path / "h.jsonl")
    record = es.tell(FakeEngine(), es.ask(), REWARDS[0])
    assert (record["normalise"], record["ddof"], record["epsilon"]) == (normalise, ddof, EPSILON)
    assert read_jsonl(tmp_path / "h.jsonl")[0] == json.loads(json.dumps(record))
    r = np.asarray(record["rewards"])
    if normalise == "zscore":  # the z-score, from the record's fields only
        expected = (r - r.mean()) / (r.std(ddof=record["ddof"]) + record["epsilon"])
    else:  # centred ranks in [-0.5, 0.5] (no ties here)
        expected = r.argsort().argsort() / (r.size - 1) - 0.5
    assert np.allclose(record["normalised"], expected, rtol=0, atol=1e-12)


def test_a_resume_returns_what_it_replayed_and_verified_and_prints_nothing(tmp_path, capfd):
    path, log, made = written(tmp_path)
    engine = FakeEngine()
    es, note = resume_es(CFG, path, engine, 3, logged_updates=3, log_path=log)
    assert es.generation == 3 and engine.checksum() == made.checksum()
    assert note == f"weights: replayed 3 ES updates from {path} (checksum verified after each; full noise)"
    assert capfd.readouterr() == ("", "")  # library code: the command that resumes says it (on_note)


def test_start_es_prints_nothing_and_hands_the_note_to_whoever_is_told(tmp_path, capfd):
    """start_es, as the search loop and an agent run call it: no line from library code (every comparison,
    every test got one before); the note goes to the `on_note` the command passed down, once."""
    path, log, made = written(tmp_path)
    es = start_es(CFG, path, FakeEngine(), 3, logged_updates=3, log_path=log)
    assert es.generation == 3
    assert capfd.readouterr() == ("", "")
    heard: list[str] = []
    start_es(CFG, path, FakeEngine(), 3, logged_updates=3, log_path=log, on_note=heard.append)
    assert heard == [f"weights: replayed 3 ES updates from {path} (checksum verified after each; full noise)"]
    assert capfd.readouterr() == ("", "")


def test_a_new_run_says_nothing_of_its_weights_and_logs_no_replay(tmp_path, capfd):
    log = tmp_path / "events.jsonl"
    es, note = resume_es(CFG, tmp_path / "history.jsonl", FakeEngine(), 3, logged_updates=0, log_path=log)
    assert es.generation == 0 and note is None
    heard: list[str] = []
    start_es(CFG, tmp_path / "history.jsonl", FakeEngine(), 3, logged_updates=0, log_path=log, on_note=heard.append)
    assert heard == [] and capfd.readouterr() == ("", "")
    assert not log.exists()  # the new run writes its start event itself


def test_a_resume_before_any_update_says_so_and_names_an_update_only_the_log_holds(tmp_path):
    path, log = tmp_path / "history.jsonl", tmp_path / "events.jsonl"
    log.write_text('{"type": "start"}\n')
    assert resume_es(CFG, path, FakeEngine(), 3, logged_updates=0, log_path=log)[1] == \
        f"weights: no ES update in {path} yet: the model's weights as loaded"
    assert resume_es(CFG, path, FakeEngine(), 3, logged_updates=1, log_path=log)[1] == (
        f"weights: no ES update in {path} yet: the model's weights as loaded; "
        f"1 update logged in {log} but not yet in the history, re-applied from the log")
    assert [e for e in read_jsonl(log) if e["type"] == "replay"] == [
        {"type": "replay", "history": str(path), "updates": 0, "verified": 0, "from_log": 0},
        {"type": "replay", "history": str(path), "updates": 0, "verified": 0, "from_log": 1}]


def test_a_history_written_before_the_normaliser_fields_still_resumes(tmp_path):
    path, log, made = written(tmp_path)
    old = [{k: v for k, v in r.items() if k not in ("normalise", "ddof", "epsilon")} for r in read_jsonl(path)]
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    engine = FakeEngine()
    es, note = resume_es(CFG, path, engine, 3, logged_updates=3, log_path=log)
    assert es.generation == 3 and engine.checksum() == made.checksum()
    assert note == f"weights: replayed 3 ES updates from {path} (checksum verified after each; full noise)"
    # the next update goes on as before and records the fields
    record = es.tell(engine, es.ask(), REWARDS[0])
    assert (record["normalise"], record["ddof"], record["epsilon"]) == ("zscore", 1, EPSILON)


def test_coevolve_run_resume_of_an_esopt_run_says_it_once_and_logs_the_replay(tmp_path, monkeypatch, capsys):
    run = killed_run(tmp_path, monkeypatch)  # sample+esopt, Ctrl-C'd after its second ES update
    assert weight_lines(capsys.readouterr().err) == []  # the new run said nothing of its weights
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: CountingEngine())
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"resuming: {run}", err
    assert weight_lines(err) == [
        f"weights: replayed 2 ES updates from {run / 'history.jsonl'} (checksum verified after each; full noise)"], err
    # the session's first record, before the steps it goes on with; the log stays the run's for its readers
    events = read_jsonl(run / "events.jsonl")
    assert [e["type"] for e in events][:4] == ["start", "step", "step", "replay"]
    assert [e for e in events if e["type"] == "replay"] == [
        {"type": "replay", "history": str(run / "history.jsonl"), "updates": 2, "verified": 2, "from_log": 0}]
    assert main(["report", str(run)]) == 0, capsys.readouterr().err
    report = (run / "report.md").read_text()
    assert "not finished" not in report and "log" not in report, report  # no damage or unfinished note
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0  # finished: its table, nothing replayed
    assert weight_lines(capsys.readouterr().err) == []


class ClosingAgentEngine(AgentEngine):
    """The agent runs' fake engine, closed by the CLI that built it."""

    def close(self) -> None:
        pass


def test_an_agent_run_with_es_says_it_once_on_resume_from_the_cli_only(tmp_path, monkeypatch, capsys):
    config = make_config(budget=36, eval_every=1)
    store = start(tmp_path, config)
    play(config, store, AgentEngine())
    assert weight_lines(capsys.readouterr().err) == []  # a new run: nothing
    # as a kill leaves it: two rounds logged, the second's update not yet in history.jsonl
    events = store.events_path.read_text().splitlines(keepends=True)
    rounds = [i for i, line in enumerate(events) if '"type": "round"' in line]
    cut = "".join(events[: rounds[1] + 1])
    store.events_path.write_text(cut)
    first_update = store.history_path.read_text().splitlines(keepends=True)[0]
    store.history_path.write_text(first_update)
    (store.dir / "summary.json").unlink()
    said = (f"weights: replayed 1 ES update from {store.history_path} (checksum verified after each; full noise); "
            f"1 update logged in {store.events_path} but not yet in the history, re-applied from the log")
    library = tmp_path / "library"  # the same cut run, resumed by library code: it goes on and says nothing
    shutil.copytree(store.dir, library)
    play(config, RunStore.open(library), AgentEngine())
    assert weight_lines(capsys.readouterr().err) == []
    store.close()
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingAgentEngine())
    assert main(["run", "--resume", str(store.dir), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"resuming: {store.dir}", err
    assert weight_lines(err) == [said], err
    replays = [e for e in read_jsonl(store.events_path) if e["type"] == "replay"]
    assert replays == [{"type": "replay", "history": str(store.history_path), "updates": 1, "verified": 1,
                        "from_log": 1}]
    assert main(["report", str(store.dir)]) == 0, capsys.readouterr().err
