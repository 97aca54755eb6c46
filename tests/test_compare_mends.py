"""What a comparison says when an arm's generator refuses it, and how often its report reads each arm's log:
- an endpoint a named arm set for itself that refuses the comparison's opening probe (nothing listens
  there, the model is not served, its key variable unset) is named where the arm set it
  (compare.arms.NAME.endpoint.KEY), not as the comparison's `endpoint.KEY`;
- a decoding constraint refused while an arm runs or is scored (ConstraintError: the endpoint's HTTP 400,
  or the in-process engine's refusal) is one line naming the arm's directory and the rerun line, exit 1, as
  an endpoint that stops answering is; the arms finished before it keep what they wrote;
- `coevolve report` of a comparison reads each arm run's events.jsonl once.

No vLLM engine: the endpoint stub (tests/endpoint_stub.py), the sudoku FakeEngine for agent arms
(tests/test_agents_es.py) and a fake engine for heuristic arms."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import endpoint_stub

from coevolve.base import durable
from coevolve.base.config import dump_toml, read_toml
from coevolve.cli import main
from coevolve.engine.base import Completion, ConstraintError
from coevolve.engine.openai_client import OpenAIGenerator
from coevolve.plan import HELDOUT_SCORES, RunSpec, base_directory, compare_config
from coevolve.report import render_comparison
from conftest_server import free_port
from tasks.tsp_construct import TEMPLATE
import test_compare_arm_errors
from test_compare_arm_errors import Resettable, contents
import test_report
from test_report_damage import candidate, logged_arm

MODEL = endpoint_stub.MODEL
stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # the stub's fixtures, found here by pytest
comparison = test_report.comparison  # a hand-made comparison of six finished runs (the fixture)
agent_comparison = test_compare_arm_errors.agent_comparison  # base vs esopt, seed 0, finished (the fixture)


# ------------------------------------------------------------ an arm's endpoint refused at the probe
def two_arms(folder: Path, near: dict, far: dict, endpoint: dict | None = None) -> Path:
    """A comparison of two named arms, each running Sample with its own [endpoint] settings laid over
    the comparison's (`endpoint`: its own [endpoint], if any)."""
    raw = {"compare": {"methods": ["near", "far"], "tasks": ["tsp_construct"], "budgets": [2], "seeds": [0],
                       "arms": {"near": {"method": "sample", "endpoint": near},
                                "far": {"method": "sample", "endpoint": far}}},
           "sample": {"batch": 2, "population": 2}, "sandbox": {"timeout_s": 10, "workers": 1},
           "test": {"limit": 2, "workers": 1}, "context": {"constrain": False},
           "model": {"path": "/nonexistent/coevolve-test-model"},
           **({"endpoint": endpoint} if endpoint else {})}
    path = folder / "cmp.toml"
    path.write_text(dump_toml(raw))
    return path


# each case: (arm far's endpoint settings, the comparison's [endpoint], the line), from the URL nothing
# listens on and the stub's; arm near's endpoint is the stub, which answers
PROBES = {
    "its base_url unreachable": lambda dead, up: (
        {"base_url": dead, "model": MODEL}, None, f"compare.arms.far.endpoint.base_url: cannot reach {dead} ("),
    "its model not served": lambda dead, up: (
        {"base_url": up, "model": "nope"}, None,
        f"compare.arms.far.endpoint.model: {up} does not serve 'nope'; it serves: stub"),
    # refused when its client is made, before the probe asks
    "its key variable unset": lambda dead, up: (
        {"base_url": up, "model": MODEL, "api_key_env": "COEVOLVE_TEST_UNSET_KEY"}, None,
        "compare.arms.far.endpoint.api_key_env: the environment variable COEVOLVE_TEST_UNSET_KEY is not set"),
    # the arm sets only its model: the base_url is the comparison's key, the arm named at the line's end
    "the comparison's base_url unreachable": lambda dead, up: (
        {"model": "other"}, {"base_url": dead, "model": MODEL}, f"endpoint.base_url: cannot reach {dead} ("),
}


@pytest.mark.parametrize("case", list(PROBES))
def test_an_arms_endpoint_refused_at_the_opening_probe_is_named_by_the_arm(stub, tmp_path, capsys, monkeypatch,
                                                                          case):
    """Arm far's endpoint refuses the probe: the one line says which arm's settings it was (where the
    arm wrote them), exit 2, and nothing is written."""
    monkeypatch.delenv("COEVOLVE_TEST_UNSET_KEY", raising=False)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    far, comparisons, said = PROBES[case](dead, stub.base_url)
    config = two_arms(tmp_path, {"base_url": stub.base_url, "model": MODEL}, far, comparisons)
    out = tmp_path / "out"
    code = main(["compare", str(config), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (code, err)
    assert err.startswith(f"coevolve compare: error: {said}"), err
    assert err.rstrip().endswith("(named arm far)") == (comparisons is not None), err
    assert not out.exists()


def test_a_finished_heuristic_comparison_reruns_while_its_endpoint_is_down(stub, tmp_path, capsys):
    """Its finished runs ask nothing of their endpoints, so the rerun (everything skipped, the report
    rendered again) does not probe them, as an agent comparison's does not: before, a server gone since
    refused the rerun (exit 2)."""
    up = {"base_url": stub.base_url, "model": MODEL}
    config, out = two_arms(tmp_path, up, up), tmp_path / "out"
    assert main(["compare", str(config), "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    stub.close()
    code = main(["compare", str(config), "--out", str(out), "--no-progress"])
    said = capsys.readouterr()
    assert code == 0, said.err
    assert (said.out + said.err).count("finished earlier, skipped") == 2, said


# ------------------------------------------------------------ a decoding constraint refused mid-comparison
class EndpointChecked(Resettable):
    """Plays Sudoku as the fake engine does; its constraint check is an endpoint's: the OpenAI client's
    one-token constrained request to the stub server, which refuses it (HTTP 400)."""

    def __init__(self, base_url: str) -> None:
        super().__init__()
        self.client = OpenAIGenerator(base_url, MODEL, retries=0)

    def check_constraints(self, patterns):
        self.client.check_constraints(patterns)


class EndpointPlayed(Resettable):
    """Plays on the stub server through the OpenAI client (no check first): the stub answers a constrained
    turn with the TSP template, which the client finds does not match the action pattern."""

    def __init__(self, base_url: str) -> None:
        super().__init__()
        self.client = OpenAIGenerator(base_url, MODEL, retries=0)

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        return self.client.chat(conversations, sampling, seeds, constraints)


# how the endpoint treats the constraint: (the stub's mode, the engine, what the line says after the URL)
REFUSALS = {
    "rejected when checked": ("e400", EndpointChecked, "rejected the decoding constraint 'set [1-4] [1-4] [1-4]' "
                                                       "(HTTP 400: structured outputs are not supported)"),
    "ignored in play": ("good", EndpointPlayed, "ignored the decoding constraint 'set [1-4] [1-4] [1-4]' (reply "),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_constraint_the_endpoint_refuses_names_the_arm_and_keeps_the_finished_ones(agent_comparison, stub, capsys,
                                                                                     monkeypatch, case):
    """Seed 0's arms finished earlier; seed 1 is added and its first arm's constrained scoring is refused
    by the endpoint: one line naming that arm's directory, the rerun line, exit 1; seed 0's arms stay
    as they were."""
    import coevolve.commands.compare as command

    config_path, root = agent_comparison
    raw = read_toml(config_path)
    raw["compare"]["seeds"] = [0, 1]
    config_path.write_text(dump_toml(raw))
    before = contents(root / "runs")
    stub.mode, playing, said = REFUSALS[case]
    engine = playing(stub.base_url)
    real = command.run_comparison  # the command's own run, on this engine rather than one it would build
    monkeypatch.setattr(command, "run_comparison",
                        lambda config, out, **kw: real(config, out, **kw | {"engine": engine}))
    code = main(["compare", str(config_path), "--out", str(root), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, (code, err)
    refused = base_directory(root, "sudoku", 1)
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"coevolve compare: error: {refused}: {stub.base_url} {said}"), err
    assert lines[1:] == [f"every finished run is in {root}: continue with `coevolve compare {config_path} --out "
                         f"{root}` once its engine or endpoint takes the decoding constraint"], err
    assert not (refused / HELDOUT_SCORES).exists()
    now = contents(root / "runs")
    assert {k: v for k, v in now.items() if k in before} == before  # seed 0's arms: not a byte changed
    assert (base_directory(root, "sudoku", 0) / HELDOUT_SCORES).exists()
    assert (RunSpec("sudoku", "esopt", 8, 0).directory(root) / HELDOUT_SCORES).exists()


class RefusingEngine:
    """An in-process engine whose grammar backend refuses every decoding constraint (as vLLM refuses a
    pattern it cannot compile), and answers the task's template when asked without one."""

    def __init__(self) -> None:
        self.calls = 0

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        self.calls += 1
        if constraints and any(constraints):
            raise ConstraintError("vLLM rejected a decoding constraint: the grammar backend cannot compile it")
        return [Completion(text=f"```python\n{TEMPLATE}\n```") for _ in conversations]

    def reset(self):
        pass

    def close(self):
        pass


def test_a_constraint_the_engine_rejects_mid_run_names_the_run(tmp_path):
    """A heuristic arm on the engine: the refusal, raised from the search loop mid-run, names the run."""
    from coevolve.compare import ArmError, run_comparison

    raw = {"compare": {"methods": ["sample"], "tasks": ["tsp_construct"], "budgets": [2], "seeds": [0]},
           "sample": {"batch": 2, "population": 2}, "sandbox": {"timeout_s": 10, "workers": 1},
           "test": {"limit": 2, "workers": 1}, "context": {"constrain": True}}
    root = tmp_path / "cmp"
    engine = RefusingEngine()
    with pytest.raises(ArmError) as stopped:
        run_comparison(compare_config(raw), root, engine=engine, log=lambda line: None, progress=False)
    run_dir = RunSpec("tsp_construct", "sample", 2, 0).directory(root)
    assert str(stopped.value) == (f"{run_dir}: vLLM rejected a decoding constraint: the grammar backend cannot "
                                  "compile it"), str(stopped.value)
    assert stopped.value.when == "once its engine or endpoint takes the decoding constraint"
    assert engine.calls == 1 and (run_dir / "events.jsonl").exists()  # the run began: its directory stays


# ------------------------------------------------------------ the report reads each arm's log once
def test_a_comparisons_report_reads_each_arms_log_once(comparison, monkeypatch):
    """collect reads each run's events.jsonl (its state); the failure counts' damage check and, for a
    run that showed a skill, the skill table take that read rather than reading the log again."""
    runs = comparison / "runs" / "tsp_construct"
    for arm in runs.iterdir():
        logged_arm(arm, [candidate(1, "exception"), candidate(2, None)])
    skilled = runs / "sample-b10-s0" / "summary.json"  # its skill table reads the log for each request's version
    summary = json.loads(skilled.read_text())
    summary["context"] = {"skill_versions": [{"version": 1, "step": 0}], "skill_start": None, "skill_trials": []}
    skilled.write_text(json.dumps(summary))
    reads: Counter[str] = Counter()
    real = durable.read_jsonl_from

    def counted(path, offset):
        if Path(path).name == "events.jsonl":
            reads[str(Path(path).parent.relative_to(comparison))] += 1
        return real(path, offset)

    monkeypatch.setattr(durable, "read_jsonl_from", counted)
    render_comparison(comparison)
    assert len(reads) == 6 and set(reads.values()) == {1}, reads
    failures = json.loads((comparison / "results.json").read_text())["failures"]
    assert [(f["method"], f["failed"], f["damage"]) for f in failures] == [("sample", 3, []), ("sample+esopt", 3, [])]
