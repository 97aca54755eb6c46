"""An agent comparison probes, before anything is written, the [endpoint] each of its arms will distil
skills on, and its report reads each file once:
- a teacher endpoint that refuses the probe (nothing listens, the model is not served, its key variable
  unset) is one line, named where the TOML set it (compare.arms.NAME.endpoint.KEY for a named arm's own),
  exit 2, no directory, the engine never played (it showed only when the arm first distilled, after the
  arms before it had played, or not at all for a model the server does not serve);
- arms that never distil (base, esopt) and finished runs ask nothing of it;
- `coevolve report` of a run reads its events.jsonl once, and of a comparison its compare.toml once.

No vLLM engine: the sudoku FakeEngine (tests/test_agents_es.py, as tests/test_compare_arm_errors.py
resets it) plays, the endpoint stub (tests/endpoint_stub.py) teaches."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import endpoint_stub

from coevolve.base import durable
from coevolve.base.config import dump_toml
from coevolve.cli import main
from coevolve.report import render, render_comparison
from conftest_server import free_port
from test_agents_compare import tiny_raw
from test_compare_arm_errors import Resettable, contents
import test_report
from test_report_skill_rows import skill_run

MODEL = endpoint_stub.MODEL
stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # the stub's fixtures, found here by pytest
comparison = test_report.comparison  # a hand-made comparison of six finished runs (the fixture)
UNSET = "COEVOLVE_TEST_UNSET_KEY"


def agent_toml(folder: Path, methods: list[str], endpoint: dict | None = None, arms: dict | None = None) -> Path:
    """The tiny agent comparison (tests/test_agents_compare.py) with these arms and [endpoint]."""
    raw = tiny_raw()
    raw["compare"]["methods"] = methods
    if arms:
        raw["compare"]["arms"] = arms
    if endpoint:
        raw["endpoint"] = {"retries": 0, "timeout_s": 10, **endpoint}
    path = folder / "agents.toml"
    path.write_text(dump_toml(raw))
    return path


def compare(config: Path, out: Path, monkeypatch) -> int:
    """`coevolve compare CONFIG --out OUT` in this process, on a fresh fake engine (counted in
    Resettable.played) rather than one it would build."""
    import coevolve.commands.compare as command

    real = command.run_comparison
    monkeypatch.setattr(command, "run_comparison",
                        lambda config, out, **kw: real(config, out, **kw | {"engine": Resettable()}))
    monkeypatch.setattr(Resettable, "played", 0)
    return main(["compare", str(config), "--out", str(out), "--no-progress"])


def taught(endpoint: dict) -> dict:
    """A named arm running trace2skill with its own [endpoint] settings."""
    return {"taught": {"method": "trace2skill", "endpoint": endpoint}}


# each case: (the comparison's [endpoint], its named arms, the line), from the URL nothing listens on and
# the stub's
PROBES = {
    "the comparison's base_url unreachable": lambda dead, up: (
        {"base_url": dead, "model": MODEL}, None, f"endpoint.base_url: cannot reach {dead} ("),
    "an arm's model not served": lambda dead, up: (
        None, taught({"base_url": up, "model": "nope"}),
        f"compare.arms.taught.endpoint.model: {up} does not serve 'nope'; it serves: stub"),
    # refused when its client is made, before the probe asks
    "an arm's key variable unset": lambda dead, up: (
        None, taught({"base_url": up, "model": MODEL, "api_key_env": UNSET}),
        f"compare.arms.taught.endpoint.api_key_env: the environment variable {UNSET} is not set"),
}


@pytest.mark.parametrize("case", list(PROBES))
def test_a_teacher_endpoint_refused_at_the_probe_stops_the_comparison_before_anything(stub, tmp_path, monkeypatch,
                                                                                     capsys, case):
    """The distilling arm comes last, after base and esopt: its endpoint's refusal is still the first
    thing said, one line, exit 2, and nothing was played or written."""
    monkeypatch.delenv(UNSET, raising=False)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    endpoint, arms, said = PROBES[case](dead, stub.base_url)
    config = agent_toml(tmp_path, ["base", "esopt", "taught" if arms else "trace2skill"], endpoint, arms)
    out = tmp_path / "out"
    code = compare(config, out, monkeypatch)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (code, err)
    assert err.startswith(f"coevolve compare: error: {said}"), err
    assert not out.exists() and Resettable.played == 0 and stub.chats == 0


def test_arms_that_never_distil_ask_nothing_of_the_endpoint(tmp_path, monkeypatch, capsys):
    """base and esopt play on the engine alone: a dead [endpoint] they would never call refuses nothing."""
    dead = f"http://127.0.0.1:{free_port()}/v1"
    out = tmp_path / "out"
    code = compare(agent_toml(tmp_path, ["base", "esopt"], {"base_url": dead, "model": MODEL}), out, monkeypatch)
    assert code == 0, capsys.readouterr().err
    assert (out / "report.md").exists() and Resettable.played > 0


def test_a_finished_distilling_run_is_not_probed_again(tmp_path, monkeypatch, capsys):
    """The teacher taught a trace2skill run to its end and is gone since: rerun, the finished comparison
    skips every arm and asks nothing of it."""
    teacher = endpoint_stub.StubServer()
    try:
        config = agent_toml(tmp_path, ["base", "trace2skill"], {"base_url": teacher.base_url, "model": MODEL})
        out = tmp_path / "out"
        assert compare(config, out, monkeypatch) == 0, capsys.readouterr().err
    finally:
        teacher.close()
    before = contents(out / "runs")
    capsys.readouterr()
    assert compare(config, out, monkeypatch) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    assert "trace2skill budget 8 seed 0: trained earlier, skipped" in said and Resettable.played == 0, said
    assert contents(out / "runs") == before


# ------------------------------------------------------------ the report reads each file once
def counted_reads(monkeypatch, name: str) -> Counter[str]:
    """Every read of a file called `name` from here on, by its path: JSON-lines files through
    durable.read_jsonl_from (what read_jsonl and RunStore.events call), others through Path.read_text."""
    reads: Counter[str] = Counter()
    jsonl, text = durable.read_jsonl_from, Path.read_text

    def read_jsonl_from(path, offset):
        if Path(path).name == name:
            reads[str(path)] += 1
        return jsonl(path, offset)

    def read_text(self, *args, **kwargs):
        if self.name == name:
            reads[str(self)] += 1
        return text(self, *args, **kwargs)

    monkeypatch.setattr(durable, "read_jsonl_from", read_jsonl_from)
    monkeypatch.setattr(Path, "read_text", read_text)
    return reads


def test_a_runs_report_reads_its_log_once(comparison, monkeypatch):
    """The run's table has its skill use row (which needs whether its requests name their versions) and
    the notes below it read the log: one read serves both."""
    run = skill_run(comparison / "runs/tsp_construct/sample-b10-s0")
    reads = counted_reads(monkeypatch, "events.jsonl")
    render(run)
    assert "skill use" in (run / "report.md").read_text()
    assert list(reads.values()) == [1], reads


def test_a_comparisons_report_reads_its_compare_toml_once(comparison, monkeypatch):
    reads = counted_reads(monkeypatch, "compare.toml")
    render_comparison(comparison)
    assert list(reads.values()) == [1], reads
    assert json.loads((comparison / "results.json").read_text())["rows"]
