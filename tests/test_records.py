"""Typed records (coevolve.base.records): run directories written before them
still read and render (tests/data/old_runs), new files carry their schema
version and run kind, and a damaged record is one line naming file and field."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.base.errors import UsageError
from coevolve.base.records import (SCHEMA_VERSION, AgentEvalRound, AgentSummary, Candidate, Evaluation,
                                   SearchSummary, TestScores, parse, read_record, read_summary)
from coevolve.compare import score_comparison
from coevolve.report import collect, render
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search.loop import SearchLoop
from coevolve.search.runconfig import RunConfig
from search_fakes import FakeEngine, FakeEvaluator, FakeTask

OLD = Path(__file__).parent / "data" / "old_runs"


@pytest.fixture
def old(tmp_path) -> Path:
    """A writable copy: rendering writes report.md and plots next to the records."""
    shutil.copytree(OLD, tmp_path / "old")
    return tmp_path / "old"


def test_every_old_record_reads_as_its_type():
    summaries = {p.relative_to(OLD).parts[0] if p.parts[-3] != "tsp_construct" else p.parent.name: read_summary(p)
                 for p in OLD.rglob("summary.json")}
    assert {k: type(v).__name__ for k, v in summaries.items()} == {
        "sample-b8-s0": "SearchSummary", "sample_esopt-b8-s0": "SearchSummary",
        "agent_before_events": "AgentSummary", "agent_esopt": "AgentSummary"}
    assert all(s.schema_version == 0 for s in summaries.values())  # written before the field existed
    esopt = summaries["sample_esopt-b8-s0"]
    assert esopt.kind == "search" and esopt.es.updates >= 1 and esopt.ledger.used == esopt.evaluations == 8
    assert esopt.best is not None and esopt.best_so_far[-1][1] == esopt.best.objective
    # the pre-kind agent summary: recognised by its held-out evaluations, seed absent
    before = summaries["agent_before_events"]
    assert before.kind == "agent" and before.seed is None and before.eval_last.mean_reward == 0.25
    assert summaries["agent_esopt"].eval_first.progress == 0.5  # a task's own score, kept as an extra key
    for path in OLD.rglob("test.json"):
        scores = read_record(path, TestScores)
        assert scores.schema_version == 0 and scores.by_set()[("test", 20)].limit == 4
    for path in OLD.rglob("candidates.jsonl"):
        candidates = [Candidate.from_dict(line) for line in read_jsonl(path)]
        assert [c.id for c in candidates] == list(range(1, 9))
        assert any(c.valid for c in candidates) and any(c.failure == "parse" for c in candidates)
    for path in OLD.rglob("eval.jsonl"):
        assert [parse(e, AgentEvalRound, path).round for e in read_jsonl(path)]


def test_an_old_comparison_collects_renders_and_is_not_rescored(old):
    root = old / "comparison"
    config, cells = collect(root)
    assert [(c.method, c.state, c.summary.kind) for c in cells] == [("sample", "finished", "search"),
                                                                     ("sample+esopt", "finished", "search")]
    assert all(c.scores[("test", 20)].instances == 4 for c in cells)
    before = {p: p.read_text() for p in root.rglob("test.json")}
    # its test.json files (no schema_version) still match best.py and the settings: nothing is scored again
    score_comparison(config, root, log=lambda line: pytest.fail(f"rescored: {line}"))
    assert {p: p.read_text() for p in root.rglob("test.json")} == before
    render(root)
    results = json.loads((root / "results.json").read_text())
    scored = {r["method"]: r["objective"]["mean"] for r in results["rows"] if r["kind"] == "method"}
    assert scored == {c.method: c.scores[("test", 20)].objective for c in cells}
    report = (root / "report.md").read_text()
    assert "| Sample+ESOpt |" in report and "Runs finished: 2 of 2" in report
    for run in (root / "runs" / "tsp_construct").iterdir():
        render(run)
        text = (run / "report.md").read_text()
        assert re.search(r"^evaluations +8 / 8$", text, re.M) and "| test20 | 4 |" in text


@pytest.mark.parametrize("name", ["agent_before_events", "agent_esopt"])
def test_old_agent_runs_render(old, name):
    render(old / name)
    text = (old / name / "report.md").read_text()
    assert text.startswith("# Agent run:") and "| 0 | 0 |" in text


def test_new_files_say_their_kind_and_version(tmp_path):
    config = build_config(RunConfig, {"run": {"method": "sample", "task": "fake", "budget": 6, "seed": 0},
                                      "sample": {"batch": 3, "population": 4}})
    store = RunStore.create(tmp_path / "r", dump_toml(as_dict(config)))
    returned = SearchLoop(config, store, FakeEngine(), FakeEvaluator(), FakeTask()).run()
    written = json.loads(store.path("summary.json").read_text())
    assert written == returned.to_json() and written["kind"] == "search" and written["schema_version"] == SCHEMA_VERSION
    assert isinstance(read_summary(store.path("summary.json")), SearchSummary)
    lines = read_jsonl(store.candidates_path)
    assert {line["schema_version"] for line in lines} == {SCHEMA_VERSION} and len(lines) == 6
    # the step events log results in the one Evaluation shape (a repeat as its original's id)
    results = [r for e in read_jsonl(store.events_path) if e.get("type") == "step" for r in e["results"]]
    assert all(set(r) in ({"objective", "failure", "message", "seconds"}, {"duplicate_of"}) for r in results)
    assert [Evaluation.model_validate(r).to_event() for r in results] == results


def test_a_repeat_takes_its_originals_outcome():
    original = Candidate(id=1, step=0, operator="i1", parents=[], model_state={"kind": "base"}, code="x")
    original.settle(Evaluation(objective=3.5, seconds=2.0))
    repeat = Candidate(id=2, step=0, operator="i1", parents=[], model_state={"kind": "base"}, code="x", duplicate_of=1)
    repeat.settle(Evaluation(duplicate_of=1), original)
    assert (repeat.objective, repeat.failure, repeat.seconds) == (3.5, None, 0.0)
    with pytest.raises(ValueError):
        repeat.settle(Evaluation(duplicate_of=1))


def test_a_damaged_summary_is_one_line_naming_file_and_field(old):
    path = old / "comparison" / "runs" / "tsp_construct" / "sample-b8-s0" / "summary.json"
    data = json.loads(path.read_text())
    data["valid_rate"] = "most"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError) as error:
        render(path.parent)
    assert str(error.value).startswith(f"{path}: not a valid SearchSummary: valid_rate:") and "\n" not in str(error.value)
    data["kind"] = "robot"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="kind 'robot' is not a run kind"):
        read_summary(path)
    path.write_text("{not json")
    with pytest.raises(UsageError, match="is not valid JSON"):
        read_summary(path)


def test_keys_a_newer_writer_added_survive_a_rewrite():
    summary = json.loads((OLD / "agent_esopt" / "summary.json").read_text())
    summary["future_field"] = {"x": 1}
    record = parse(summary, AgentSummary, "summary.json")
    assert record.to_json()["future_field"] == {"x": 1} and record.to_json()["schema_version"] == SCHEMA_VERSION
