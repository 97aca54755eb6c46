"""End to end on the real engine, sandbox and TSP task: `coevolve run` of the
main job's method (eoh+esopt+trace2skill: every EoH operator, ES updates, skill
refreshes) killed with SIGKILL at a random point, resumed, compared with an
uninterrupted run, with the checks every finished run must pass
(`check_finished_run`; Sample and Sample+ESOpt pass them in test_compare.py's
small real comparison, plain EoH on a served model in test_serving.py). The
module's real sandbox fixture serves test_search_context_engine.py too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.base.records import SearchSummary, read_summary
from coevolve.engine.vllm_engine import resolve_dtype
from conftest import kill_and_resume
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search.runconfig import RunConfig

TINY = {
    "eoh": {"population": 3, "offspring": 2},
    "sample": {"batch": 4, "population": 3},
    "es": {"population": 2, "sigma": 2e-3, "sigma_end": 1e-3, "alpha": 1e-3},
    "sampling": {"max_tokens": 192},
    "sandbox": {"timeout_s": 20, "workers": 2},
    # Free decoding, clones scored: at these budgets the forced signature makes the model echo one
    # program, every ES member gets the same reward and no weight moves. The context is tested with
    # everything on in test_search_context_engine.py.
    "context": {"failures": False, "constrain": False, "fingerprint": False},
}


def tiny_config(method: str, budget: int, seed: int = 0, out: str = "", **extra: dict) -> RunConfig:
    raw = {"run": {"method": method, "task": "tsp_construct", "budget": budget, "seed": seed, "out": out}}
    raw.update(TINY)
    raw.update(extra)
    return build_config(RunConfig, json.loads(json.dumps(raw)))


@pytest.fixture(scope="module")
def sandbox():
    from coevolve.sandbox import Sandbox

    with Sandbox(workers=2, timeout_s=20) as sb:
        yield sb


def check_finished_run(directory: Path, summary: SearchSummary, budget: int, records: list[dict], before: str,
                       engine) -> None:
    """What every finished run holds: the budget spent exactly, its files, and for +esopt runs the updates
    (in the weight type "auto" chose for this machine) that moved the weights from `before`."""
    assert summary.evaluations == budget == sum(summary.ledger.outcomes.values())
    assert summary.ledger.llm_requests == budget and summary.ledger.completion_tokens > 0
    # a skill refresh's analyst requests are charged, not candidates
    assert len(read_jsonl(directory / "candidates.jsonl")) == budget - summary.ledger.outcomes.get("distill", 0)
    for name in ["config.toml", "events.jsonl", "genealogy.json", "summary.json", "progress.png", "timing.json"]:
        assert (directory / name).exists(), name
    assert (directory / "population" / "gen_0000.json").exists()
    if "esopt" in summary.method.split("+"):
        assert len(records) == summary.es.updates >= 1
        assert {r["dtype"] for r in records} == {engine.dtype} == {resolve_dtype("auto", engine.device)}
        # the weights moved exactly when an update had a coefficient to move them by: a run whose members'
        # rewards all tied (every candidate failing alike, as on an AMX Xeon's bf16 in s52) moves nothing
        moved = any(c != 0 for r in records for c in r["coefficients"])
        assert (summary.es.checksum != before) == moved, records
        assert all(r["extra"]["source"] == "coevolve.search" for r in records)
    else:
        assert not records and summary.es is None


@pytest.mark.engine
@pytest.mark.timeout(2400)
def test_sigkill_then_resume_gives_the_uninterrupted_summary(tmp_path, engine):
    """The main job's method (eoh+esopt+trace2skill) through `coevolve run`: uninterrupted in this
    process on the session engine, then killed in an engine process of its own at a random point after
    the first step is logged, resumed in this process to the same summary, weights and skill texts."""
    # i1 3, e1 2, skill refresh, e2 2, m1 (ES) 2, skill refresh: 12 evaluations, the refreshes' analyst
    # requests included
    # skill.keep = "judged": after the first refresh, requests alternate between v001 and no skill (an ES
    # generation's members all see one), and the second refresh judges the two before patching the one kept
    config = tiny_config("eoh+esopt+trace2skill", 12, seed=5,
                         skill={"every": 2, "analysts": 2, "max_tokens": 64, "keep": "judged"})
    path = tmp_path / "c.toml"
    path.write_text(dump_toml(as_dict(config)))

    # a second of jitter at most: the last step (a refresh of two 64-token requests) is short, and the
    # run must not finish before the kill
    run = kill_and_resume(path, tmp_path, "step", 1, "--no-progress", engine=engine)
    full, killed = tmp_path / "full", tmp_path / "killed"
    check_finished_run(full, read_summary(full / "summary.json"), 12, read_jsonl(full / "history.jsonl"),
                       engine.checksum(), engine)
    assert json.loads((killed / "summary.json").read_text()) == run.expected
    assert "evaluations" in run.resumed_output and str(killed) in run.resumed_output
    logged = [e["step"] for e in RunStore(killed).iter_events("step")]
    assert logged == list(range(run.events))  # every step logged once: no evaluation counted twice
    versions = run.expected["context"]["skill_versions"]
    assert [v["version"] for v in versions] == [1, 2]
    for v in versions:
        assert (killed / v["path"]).read_text() == (full / v["path"]).read_text()
    judged, final = run.expected["context"]["skill_trials"]
    assert (judged["challenger"], judged["incumbent"], judged["step"]) == (1, None, versions[1]["step"])
    assert versions[1]["patched"] == judged["kept"] and final["final"] and final["challenger"] == 2
    assert final["step"] == versions[1]["step"]  # the run's last step: the refresh that wrote v002
    trial = [c for c in read_jsonl(killed / "candidates.jsonl") if versions[0]["step"] < c["step"] < versions[1]["step"]]
    # the four requests between the refreshes: e2's two alternate by evaluation number; m1's two ES members,
    # the run's first generation, both show the version on trial (a generation's members see one version)
    assert len(trial) == 4 and [c.get("skill_version") for c in trial] == [
        1 if c["model_state"]["kind"] == "perturbed" or c["id"] % 2 else None for c in trial]
    assert [c["model_state"]["kind"] for c in trial] == ["base", "base", "perturbed", "perturbed"]
    children = judged["children"]
    assert (children["challenger"]["candidates"], children["incumbent"]["candidates"]) == (3, 1)


@pytest.mark.engine
@pytest.mark.timeout(1200)
def test_a_finished_run_given_more_budget_goes_on_from_its_steps(tmp_path, engine):
    """`coevolve run --resume DIR --budget N` on the real engine and sandbox: Sample+ESOpt's steps of
    two perturbed members, 2 evaluations (1 ES update), then 4 (2): the first run's candidates and
    update stay as they were, the rest follow, and the run passes every finished run's checks."""
    from conftest import cli_in_process

    path = tmp_path / "c.toml"
    path.write_text(dump_toml(as_dict(tiny_config("sample+esopt", 2, seed=2))))
    run = tmp_path / "r"
    before = engine.checksum()
    cli_in_process(engine, "run", str(path), "--out", str(run), "--no-progress")
    first = read_jsonl(run / "candidates.jsonl")
    updates = read_jsonl(run / "history.jsonl")
    assert len(first) == 2 and len(updates) == 1
    output = cli_in_process(engine, "run", "--resume", str(run), "--budget", "4", "--no-progress")
    assert "budget 2 -> 4 evaluations" in output and re.search(r"budget raised +2 -> 4 \(--resume --budget", output)
    summary = read_summary(run / "summary.json")
    records = read_jsonl(run / "history.jsonl")
    check_finished_run(run, summary, 4, records, before, engine)
    assert read_jsonl(run / "candidates.jsonl")[:2] == first and records[:1] == updates and len(records) == 2
    events = read_jsonl(run / "events.jsonl")
    assert [e["type"] for e in events if e["type"] in ("end", "extend")] == ["end", "extend", "end"]
