"""An [endpoint]'s replies to the step in progress are kept as they arrive (answered.jsonl,
coevolve/search/answered.py): a run interrupted after part of a step was answered asks only the rest on
resume, and finishes as an uninterrupted run does. A stub server on loopback (tests/endpoint_stub.py)
that records each request, the real CLI path, no engine."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Callable

import endpoint_stub
import pytest
from endpoint_stub import MODEL, StubServer

from coevolve.cli import main
from coevolve.runstore import read_jsonl
from coevolve.search.answered import ANSWERED
from tasks.tsp_construct import TEMPLATE

stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # the stub's fixtures, found here by pytest

BATCH = 3  # requests per step; two steps


def program(body: dict) -> str:
    """A reply that differs by request: the seed picks which of the nearest cities to take."""
    seed = body.get("seed", 0)
    code = TEMPLATE.replace("return unvisited_nodes[np.argmin(distances)]",
                            f"return unvisited_nodes[np.argsort(distances)[min({seed % 5}, len(distances) - 1)]]")
    return f"```python\n{code}\n```"


# sample+trace2skill: step 0 proposes BATCH programs, step 1 is a skill refresh of BATCH analysts (asked of
# the endpoint too: the run has no engine), step 2 proposes BATCH more
DISTILLING = ('method = "sample+trace2skill"', f"budget = {3 * BATCH}",
              f'[skill]\nevery = 1\nanalysts = {BATCH}\nteacher = "endpoint"\n')


def write_config(tmp_path: Path, base_url: str, method: str = 'method = "sample"', budget: str = f"budget = {2 * BATCH}",
                 more: str = "") -> Path:
    path = tmp_path / "run.toml"
    path.write_text(f'[run]\n{method}\ntask = "tsp_construct"\n{budget}\nseed = 0\n{more}'
                    f'[sample]\nbatch = {BATCH}\n[sandbox]\ntimeout_s = 10\n[context]\nconstrain = false\n'
                    f'[endpoint]\nbase_url = "{base_url}"\nmodel = "{MODEL}"\nretries = 0\n'
                    f'concurrency = {BATCH}\ntimeout_s = 120\n')
    return path


def kept(run: Path) -> list[dict]:
    """answered.jsonl's completed lines that parse (a line torn by the test's own reading is left out)."""
    try:
        raw = (run / ANSWERED).read_bytes()
    except FileNotFoundError:
        return []
    lines = []
    for line in raw[: raw.rfind(b"\n") + 1].splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            pass
    return lines


def interrupted(stub: StubServer, config: Path, run: Path, answered: int) -> int:
    """`coevolve run` interrupted (Ctrl-C, as SIGTERM is) in its second step, once `answered` of its
    requests were answered and kept and the others are out, held by the stub. Returns the run's exit code."""
    return interrupt(stub, run, BATCH + answered, 2 * BATCH, 1, answered,
                     lambda: main(["run", str(config), "--out", str(run), "--no-progress"]))


def interrupt(stub: StubServer, run: Path, hold_after: int, sent: int, step: int, answered: int,
              go: Callable[[], object]) -> object:
    """`go()` interrupted (SIGINT in the main thread) once `sent` requests reached the stub, those after
    `hold_after` held there, and `answered` replies of `step` are kept in the run's answered.jsonl.
    Returns what `go` returned (the CLI's exit code: it takes the interrupt)."""
    stub.hold_after = hold_after
    ready = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + 60  # only a run that never keeps its replies waits this long
        while time.monotonic() < deadline:
            if len(stub.bodies) == sent and len([e for e in kept(run) if e.get("step") == step]) == answered:
                ready.set()
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                return
            time.sleep(0.02)
        stub.release.set()  # the run finishes uninterrupted: the test fails on what go returns

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = go()
    finally:
        watcher.join()
        signal.signal(signal.SIGINT, previous)
    assert ready.is_set(), "the run never kept the replies it was given"
    stub.release.set()  # the held requests are answered into a closed call (nobody keeps them)
    stub.hold_after = None
    return result


def untimed(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "seconds" and "time" not in k and not k.endswith("_s")}


def steps(run: Path) -> list[tuple]:
    """Each step's requests, replies and results (less how long a program took)."""
    return [(e["step"], e["requests"], e["completions"], [untimed(r) for r in e["results"]])
            for e in read_jsonl(run / "events.jsonl") if e["type"] == "step"]


def ledger(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    return {k: summary[k] for k in ("evaluations", "llm", "best_objective", "best_id", "outcomes") if k in summary}


@pytest.fixture
def reference(tmp_path_factory) -> Path:
    """The same run, uninterrupted, against its own stub."""
    server = StubServer()
    server.content = program
    folder = tmp_path_factory.mktemp("reference")
    try:
        run = folder / "run"
        assert main(["run", str(write_config(folder, server.base_url)), "--out", str(run), "--no-progress"]) == 0
        assert len(server.bodies) == 2 * BATCH
    finally:
        server.close()
    return run


def test_a_resume_asks_only_the_requests_whose_replies_were_not_kept(stub, tmp_path, reference, capsys):
    stub.content = program
    run = tmp_path / "run"
    assert interrupted(stub, write_config(tmp_path, stub.base_url), run, answered=2) == 130
    held = stub.bodies[2 * BATCH - 1]  # the stub answered requests in the order they came, and held the last
    first = len(stub.bodies)
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0, capsys.readouterr().err
    asked = stub.bodies[first:]
    # the step's one unanswered request, nothing else: not the two kept, not the logged first step
    assert [b["seed"] for b in asked] == [held["seed"]] and asked[0]["messages"] == held["messages"]
    assert steps(run) == steps(reference)
    assert ([untimed(c) for c in read_jsonl(run / "candidates.jsonl")]
            == [untimed(c) for c in read_jsonl(reference / "candidates.jsonl")])
    assert ledger(run) == ledger(reference) and ledger(run)["evaluations"] == 2 * BATCH
    assert (run / ANSWERED).read_bytes() == b""


def test_a_kept_reply_to_a_prompt_that_changed_is_asked_again(stub, tmp_path):
    stub.content = program
    run = tmp_path / "run"
    assert interrupted(stub, write_config(tmp_path, stub.base_url), run, answered=2) == 130
    # each kept reply now answers another prompt (a task's description edited, say): none matches
    lines = [{**e, "key": "0" * 64} for e in read_jsonl(run / ANSWERED)]
    (run / ANSWERED).write_text("".join(json.dumps(e) + "\n" for e in lines))
    first = len(stub.bodies)
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0
    assert len(stub.bodies) - first == BATCH


def test_a_damaged_line_does_not_stop_the_resume(stub, tmp_path, reference, capsys):
    stub.content = program
    run = tmp_path / "run"
    assert interrupted(stub, write_config(tmp_path, stub.base_url), run, answered=2) == 130
    good, bad = read_jsonl(run / ANSWERED)
    # one kept reply garbled, a line of no entry, and a torn tail: only the good one is served
    (run / ANSWERED).write_text(json.dumps(good) + "\n" + json.dumps(bad)[:40] + "}\n[1, 2]\n" + "\x00{\"step")
    first = len(stub.bodies)
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0, capsys.readouterr().err
    assert len(stub.bodies) - first == BATCH - 1
    assert steps(run) == steps(reference)
    assert (run / ANSWERED).read_bytes() == b""


def test_after_a_step_the_file_is_empty(stub, tmp_path):
    # the run stops in its second step (the stub refuses its requests, for good): the first step's replies
    # were kept as they came, and the file emptied once its event was logged
    stub.content = program
    stub.good_first, stub.mode = BATCH, "e401"
    run = tmp_path / "run"
    assert main(["run", str(write_config(tmp_path, stub.base_url)), "--out", str(run), "--no-progress"]) == 1
    assert [e["step"] for e in read_jsonl(run / "events.jsonl") if e["type"] == "step"] == [0]
    assert (run / ANSWERED).exists() and (run / ANSWERED).read_bytes() == b""


def test_an_interrupted_skill_refresh_asks_only_the_analysts_not_answered(stub, tmp_path, tmp_path_factory, capsys):
    server = StubServer()  # the uninterrupted reference
    server.content = program
    folder = tmp_path_factory.mktemp("reference")
    try:
        reference = folder / "run"
        assert main(["run", str(write_config(folder, server.base_url, *DISTILLING)), "--out", str(reference),
                     "--no-progress"]) == 0, capsys.readouterr().err
        assert len(server.bodies) == 3 * BATCH
    finally:
        server.close()
    stub.content = program
    run = tmp_path / "run"
    assert interrupted(stub, write_config(tmp_path, stub.base_url, *DISTILLING), run, answered=2) == 130
    held = stub.bodies[2 * BATCH - 1]  # the refresh's third analyst
    first = len(stub.bodies)
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0, capsys.readouterr().err
    asked = stub.bodies[first:]
    # the one analyst not answered, then the last step's proposals: not the two analysts kept
    assert [b["seed"] for b in asked[:1]] == [held["seed"]] and asked[0]["messages"] == held["messages"]
    assert len(asked) == 1 + BATCH
    assert steps(run) == steps(reference)
    refresh = [e for e in read_jsonl(run / "events.jsonl") if e["type"] == "step" and e["step"] == 1]
    assert refresh[0]["skill"]["text"] == [e for e in read_jsonl(reference / "events.jsonl")
                                           if e["type"] == "step" and e["step"] == 1][0]["skill"]["text"]
    assert ledger(run) == ledger(reference)
    assert (run / ANSWERED).read_bytes() == b""


# -- an agent run's teacher (Trace2Skill's analysts on the endpoint); the agent's episodes on test_agents_es's
# fake engine, the teacher through the real OpenAI client to the stub
def analysis(body: dict) -> str:
    """An analyst's reply that differs by request (its seed), so a reply served to the wrong one shows."""
    return f"ADD Checks {body.get('seed', 0) % 97}: Check the row, the column and the box first."


def agent_config(base_url: str):
    from coevolve.agents.runconfig import AgentRunConfig
    from coevolve.base.config import build_config

    # posthoc: one distillation at the end, best of 3 seeds, each asking 2 analysts (6 requests, 2 at a time)
    return build_config(AgentRunConfig, {
        "run": {"method": "trace2skill", "task": "sudoku", "budget": 12, "seed": 3}, "task": {"masked": 2},
        "agent": {"population": 4, "batch": 3, "eval_cases": 2, "distill": "posthoc"},
        "endpoint": {"base_url": base_url, "model": MODEL, "retries": 0, "concurrency": 3, "timeout_s": 120}})


def play_agent(config, store):
    from test_agents_es import FakeEngine

    from coevolve.agents.es_agent import run_agent
    from coevolve.engine.openai_client import open_endpoint

    with store:
        return run_agent(config, store, FakeEngine(), config.build_task(), endpoint=open_endpoint(config.endpoint))


def test_an_interrupted_agent_distillation_asks_only_the_analysts_not_answered(stub, tmp_path):
    from coevolve.base.config import as_dict, dump_toml
    from coevolve.runstore import RunStore

    server = StubServer()  # the uninterrupted reference
    server.content = analysis
    try:
        config = agent_config(server.base_url)
        whole = play_agent(config, RunStore.create(tmp_path / "whole", dump_toml(as_dict(config))))
        assert len(server.bodies) == 6
    finally:
        server.close()
    stub.content = analysis
    config = agent_config(stub.base_url)
    run = tmp_path / "run"

    def go() -> str:
        try:
            play_agent(config, RunStore.create(run, dump_toml(as_dict(config))))
        except KeyboardInterrupt:
            return "interrupted"
        return "finished"

    # the third seed's two analysts are out, held; the first two seeds' four replies are kept
    assert interrupt(stub, run, 4, 6, 1, 4, go) == "interrupted"
    held = stub.bodies[4:6]
    assert [e["step"] for e in read_jsonl(run / ANSWERED)] == [1] * 4  # the round the skill is distilled at
    first = len(stub.bodies)
    resumed = play_agent(config, RunStore.open(run, write=True))
    asked = stub.bodies[first:]
    # the two analysts not answered, nothing else
    assert sorted(b["seed"] for b in asked) == sorted(b["seed"] for b in held)
    assert sorted(json.dumps(b["messages"]) for b in asked) == sorted(json.dumps(b["messages"]) for b in held)
    # the same evaluations (the configs differ only in the stub's address, the skill's path in the folder)
    assert resumed.model_dump(exclude={"config", "skill"}) == whole.model_dump(exclude={"config", "skill"})
    skill, reference = ([e for e in read_jsonl(folder / "events.jsonl") if e["type"] == "skill"]
                        for folder in (run, tmp_path / "whole"))
    assert skill == reference  # the same candidates (each seed's skill and score) and the same one chosen
    assert (run / ANSWERED).read_bytes() == b""  # emptied once the skill's event was logged
