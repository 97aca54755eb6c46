"""A history.jsonl whose generations are not 0, 1, 2, ... in order (a record lost from the middle, one
doubled, one moved or relabelled) is refused by replay, naming the file and the line, before any weight
moves and with the file left as it was; so is one that holds more updates than the run's log says were made.

Why: replay applies records by position and the run goes on from their count, so a lost record whose
update was flat (every reward equal: it moved nothing) passed the checksum, and `coevolve run --resume`
then applied the next update twice (walkthrough s53, finding 18). Light: the fake engine of
tests/search_fakes.py, through ESOpt.tell and through the CLI (pool.build_engine patched, as
tests/test_run_lock.py does); no vLLM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from coevolve.cli import main
from coevolve.engine import pool
from coevolve.es import ESConfig, ESOpt, ReplayError, replay
from coevolve.runstore import read_jsonl
from search_fakes import FakeEngine

WHY = "a record is missing or was edited; the run cannot replay its weights"


class CountingEngine(FakeEngine):
    """The fake engine, counting the updates applied to it; the CLI's (close() is called on it)."""

    def __init__(self) -> None:
        super().__init__()
        self.updates = 0

    def apply_update(self, seeds, coefficients, alpha):
        self.updates += 1
        super().apply_update(seeds, coefficients, alpha)

    def close(self) -> None:
        pass


def written_history(tmp_path: Path) -> tuple[Path, list[str], CountingEngine]:
    """Three real updates through ESOpt.tell, the first flat (as in the finding: its loss leaves every
    checksum matching); the file's lines and the engine that made them."""
    path = tmp_path / "history.jsonl"
    engine = CountingEngine()
    es = ESOpt(ESConfig(population=4, generations=3), path, seed=3)
    for rewards in ([1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 2.0, 0.5], [2.0, 0.0, 1.0, 1.0]):
        es.tell(engine, es.ask(), rewards)
    lines = path.read_text().splitlines(keepends=True)
    assert [json.loads(line)["generation"] for line in lines] == [0, 1, 2]
    assert not any(json.loads(lines[0])["coefficients"]) and any(json.loads(lines[1])["coefficients"])
    return path, lines, engine


def relabelled(line: str, generation) -> str:
    record = json.loads(line)
    if generation is None:
        del record["generation"]
    else:
        record["generation"] = generation
    return json.dumps(record) + "\n"


# each damage: the file's new lines from the intact ones, and what the refusal says of which line
DAMAGE = {
    "first deleted (flat: the checksum holds)": (lambda l: [l[1], l[2]], "line 1 holds generation 1 where generation 0"),
    "middle deleted": (lambda l: [l[0], l[2]], "line 2 holds generation 2 where generation 1"),
    "one doubled": (lambda l: [l[0], l[1], l[1], l[2]], "line 3 holds generation 1 where generation 2"),
    "two swapped": (lambda l: [l[1], l[0], l[2]], "line 1 holds generation 1 where generation 0"),
    "last moved first": (lambda l: [l[2], l[0], l[1]], "line 1 holds generation 2 where generation 0"),
    "blank line, then a gap": (lambda l: [l[0], "\n", l[2]], "line 3 holds generation 2 where generation 1"),
    "generation relabelled": (lambda l: [l[0], relabelled(l[1], 5), l[2]], "line 2 holds generation 5 where generation 1"),
    "generation as a float": (lambda l: [l[0], relabelled(l[1], 1.0), l[2]], "line 2 holds generation 1.0 where generation 1"),
    "generation as text": (lambda l: [l[0], relabelled(l[1], "1"), l[2]], 'line 2 holds generation "1" where generation 1'),
    "generation removed": (lambda l: [l[0], relabelled(l[1], None), l[2]], "line 2 holds no generation where generation 1"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_history_out_of_sequence_is_refused_naming_the_line_before_any_weight_moves(tmp_path, damage):
    path, lines, _ = written_history(tmp_path)
    edit, says = DAMAGE[damage]
    path.write_text("".join(edit(lines)) + '{"generation": 3, "se')  # and a torn tail, left as it is
    before = path.read_bytes()
    for call in (lambda engine: replay(path, engine),
                 lambda engine: ESOpt.resume(ESConfig(population=4, generations=3), path, engine, seed=3)):
        engine = CountingEngine()
        with pytest.raises(ReplayError) as refusal:
            call(engine)
        assert str(refusal.value) == f"{path}: {says} was expected: {WHY}"
        assert engine.updates == 0 and not engine.weights.any()  # no weight moved
        assert path.read_bytes() == before  # nothing cut or appended


def test_a_record_that_is_not_an_object_is_named_too(tmp_path):
    path, lines, _ = written_history(tmp_path)
    path.write_text(lines[0] + "[1, 2]\n" + lines[2])
    engine = CountingEngine()
    with pytest.raises(ReplayError) as refusal:
        replay(path, engine)
    assert str(refusal.value) == (f"{path}: line 2 is not an ES update record where generation 1 was expected: "
                                  "the file was edited; the run cannot replay its weights")
    assert engine.updates == 0


def test_an_intact_history_still_replays_blank_lines_and_torn_tail_and_all(tmp_path):
    path, lines, made = written_history(tmp_path)
    path.write_text(lines[0] + "\n" + lines[1] + lines[2] + '{"generation": 3, "se')
    engine = CountingEngine()
    resumed = ESOpt.resume(ESConfig(population=4, generations=3), path, engine, seed=3)
    assert resumed.generation == 3 and engine.checksum() == made.checksum()
    assert path.read_text().endswith(lines[2])  # the torn tail is cut once the history replays


def test_a_history_with_more_updates_than_the_log_is_refused_naming_both_files(tmp_path):
    path, _, made = written_history(tmp_path)
    log = tmp_path / "events.jsonl"
    engine = CountingEngine()
    with pytest.raises(ReplayError) as refusal:
        ESOpt.resume(ESConfig(population=4, generations=3), path, engine, seed=3, logged_updates=2, log_path=log)
    assert str(refusal.value) == (f"{path} holds 3 ES updates but {log} logged 2: the history has updates the log "
                                  "does not (the log lost steps, or the history is another run's); "
                                  "the run cannot replay its weights")
    assert engine.updates == 0
    # as many as the log, or fewer (a kill between the log and the update, or a lost tail): the loop re-applies
    # what the history lacks from the log's members and rewards
    for logged in (3, 4, 6):
        engine = CountingEngine()
        resumed = ESOpt.resume(ESConfig(population=4, generations=3), path, engine, seed=3, logged_updates=logged,
                               log_path=log)
        assert resumed.generation == 3 and engine.checksum() == made.checksum()


# -- through the CLI: a killed sample+esopt run whose history lost its first (flat) record -------------------

# seed 7: the fake engine's first ES update is flat and its second is not (checked below)
RUN_TOML = '[run]\nmethod = "sample+esopt"\ntask = "tsp_construct"\nbudget = 12\nseed = 7\n[sample]\nbatch = 4\n'


class KilledAfterTwoUpdates(CountingEngine):
    """Ctrl-C at the first chat after the run's second ES update: history [gen 0, gen 1], the third step unlogged."""

    def chat(self, *args, **kwargs):
        if self.updates == 2:
            raise KeyboardInterrupt
        return super().chat(*args, **kwargs)


def killed_run(tmp_path: Path, monkeypatch) -> Path:
    """A sample+esopt run Ctrl-C'd after its second ES update (KilledAfterTwoUpdates)."""
    config = tmp_path / "c.toml"
    config.write_text(RUN_TOML)
    run = tmp_path / "r"
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: KilledAfterTwoUpdates())
    assert main(["run", str(config), "--out", str(run), "--no-progress"]) == 130
    return run


def test_resume_of_a_killed_run_whose_history_lost_its_first_record_is_refused(tmp_path, monkeypatch, capsys):
    run = killed_run(tmp_path, monkeypatch)
    history_path = run / "history.jsonl"
    records = read_jsonl(history_path)
    assert [r["generation"] for r in records] == [0, 1]
    assert not any(records[0]["coefficients"]) and any(records[1]["coefficients"])  # the first update moved nothing
    assert [e["type"] for e in read_jsonl(run / "events.jsonl")] == ["start", "step", "step"]

    intact = tmp_path / "intact"  # the same kill, untouched, resumes (the setup is a resumable run)
    shutil.copytree(run, intact)
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: CountingEngine())
    assert main(["run", "--resume", str(intact), "--no-progress"]) == 0, capsys.readouterr().err
    assert [r["generation"] for r in read_jsonl(intact / "history.jsonl")] == [0, 1, 2]

    history_path.write_text("".join(history_path.read_text().splitlines(keepends=True)[1:]))
    kept = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    built: list[CountingEngine] = []

    def build(*args, **kwargs):
        built.append(CountingEngine())
        return built[-1]

    monkeypatch.setattr(pool, "build_engine", build)
    capsys.readouterr()
    code = main(["run", "--resume", str(run), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    # the CLI's "resuming: DIR" announcement (printed before the engine loads), then the one line of the refusal
    said = [line for line in err.strip().splitlines() if not line.startswith("resuming: ")]
    assert said == [f"coevolve run: error: cannot continue the run: {history_path}: line 1 holds generation 1 where "
                    f"generation 0 was expected: {WHY}"], err
    assert all(engine.updates == 0 and not np.any(engine.weights) for engine in built)  # no weight moved
    assert {name: (run / name).read_bytes() for name in kept} == kept  # nothing appended, nothing cut
    assert [r["generation"] for r in read_jsonl(history_path)] == [1]


def test_resume_of_a_run_whose_log_lost_its_last_update_is_refused(tmp_path, monkeypatch, capsys):
    """The log's last step (holding the second update) lost, its history whole: the log reads as a run
    killed one step earlier, and without the count the history's extra update was kept while the step
    ran again, continuing from the wrong generation."""
    run = killed_run(tmp_path, monkeypatch)
    events = run / "events.jsonl"
    events.write_text("".join(events.read_text().splitlines(keepends=True)[:-1]))  # start, step 0
    kept = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: CountingEngine())
    capsys.readouterr()
    assert main(["run", "--resume", str(run), "--no-progress"]) == 2
    said = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("resuming: ")]
    assert said == [f"coevolve run: error: cannot continue the run: {run / 'history.jsonl'} holds 2 ES updates but "
                    f"{events} logged 1: the history has updates the log does not (the log lost steps, or the "
                    "history is another run's); the run cannot replay its weights"], said
    assert {name: (run / name).read_bytes() for name in kept} == kept
