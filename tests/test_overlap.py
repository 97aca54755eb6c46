"""`[sandbox] overlap`: an endpoint's replies are scored in the real sandbox as they arrive, while
the rest of the step is generated, and the run's records are those of a run without it.

The endpoint here is scripted (its replies are a function of the request seed, and it waits after
each reply until the sandbox has scored it when it hands replies over one by one), so the order of
events proves the overlap without timing anything; the real server's run is in test_serving.py."""

from __future__ import annotations

import hashlib
import json
import threading
import time

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.codeparse import extract
from coevolve.engine.base import Completion
from coevolve.runstore import RunStore, read_jsonl
from coevolve.sandbox import Sandbox
from coevolve.search.loop import SearchLoop
from coevolve.search.runconfig import RunConfig
from tasks.registry import get_task

TSP = get_task("tsp_construct")

PICK = '''import numpy as np


def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):
    order = np.argsort(distance_matrix[current_node][unvisited_nodes])
    return unvisited_nodes[order[min({k}, len(order) - 1)]]
'''
CRASH = '''def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):
    raise ValueError("no")
'''
BROKEN = '''def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):
    return unvisited_nodes[0
'''


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()[:12]


def reply(seed: int) -> tuple[str, str | None]:
    """The scripted reply to a request and the program the loop will find in it (None: prose)."""
    text, program = _reply(seed)
    return text, None if program is None else extract(text, TSP.function_name, TSP.template).code


def _reply(seed: int) -> tuple[str, str | None]:
    kind = seed % 6
    if kind == 0:
        return "I would go to the nearest city.", None
    if kind in (1, 3):  # a program that raises; one that does not parse (and has no fingerprint)
        program = CRASH if kind == 1 else BROKEN
        return f"{{broken}}\n```python\n{program}```", program
    if kind == 2:  # one program for many seeds: scored once, a rejected clone after
        program = PICK.format(k=0)
    else:
        program = PICK.format(k=seed % 7 + 1)
    return f"{{pick}}\n```python\n{program}```", program


class ScriptedEndpoint:
    """Replies one by one, as a server's arrive, each handed to `on_each`; when the run overlaps it waits
    after each reply holding a program until the sandbox has scored that program (so scoring happens
    during generation). Without overlap `on_each` still comes (answered.jsonl keeps each reply), and a
    wait there would be 30 s per program for a scoring that comes only after the step's replies."""

    streams = True

    def __init__(self, log: list, scored: set, lock: threading.Lock, overlap: bool) -> None:
        self.log, self.scored, self.lock, self.overlap = log, scored, lock, overlap

    def chat(self, conversations, sampling, seeds=None, constraints=None, on_each=None):
        out = []
        for index, seed in enumerate(seeds):
            text, program = reply(seed)
            completion = Completion(text=text, prompt_tokens=10, completion_tokens=len(text.split()), model="m")
            with self.lock:
                self.log.append(("reply", seed))
            if on_each is not None:
                on_each(index, completion)
            if self.overlap:
                deadline = time.monotonic() + 30
                while program is not None and _digest(program) not in self.scored and time.monotonic() < deadline:
                    # a program seen in an earlier step is not scored again: nothing to wait for
                    if ("seen", _digest(program)) in self.log:
                        break
                    time.sleep(0.01)
            out.append(completion)
        return out


class Recording:
    """The real sandbox, with a log of what it scored and when, in the endpoint's order."""

    def __init__(self, sandbox: Sandbox, log: list, scored: set, lock: threading.Lock) -> None:
        self.sandbox, self.log, self.scored, self.lock = sandbox, log, scored, lock
        self.workers = sandbox.workers
        self.calls: list[int] = []  # jobs per evaluate_many call

    def evaluate_many(self, jobs):
        self.calls.append(len(jobs))
        results = self.sandbox.evaluate_many(jobs)
        with self.lock:
            for job in jobs:
                self.log.append(("scored", _digest(job[0])))
                self.scored.add(_digest(job[0]))
        return results


def config(overlap: bool) -> RunConfig:
    return build_config(RunConfig, {
        "run": {"method": "eoh", "task": "tsp_construct", "budget": 15, "seed": 4},
        "eoh": {"population": 2, "offspring": 5, "operators": ["e1", "m1"]},
        "sandbox": {"overlap": overlap, "timeout_s": 60},
        "context": {"fingerprint": True},  # clones rejected unscored: the early hook must skip them too
        "endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
    })


def run(directory, overlap: bool, sandbox: Sandbox):
    log, scored, lock = [], set(), threading.Lock()
    endpoint, evaluator = ScriptedEndpoint(log, scored, lock, overlap), Recording(sandbox, log, scored, lock)
    cfg = config(overlap)
    loop = SearchLoop(cfg, RunStore.create(directory, dump_toml(as_dict(cfg))), endpoint, evaluator,
                      get_task("tsp_construct"), endpoint=endpoint)
    original = loop._early

    def early(requests):  # note the programs the hook skips as seen before, for the endpoint's wait
        hook = original(requests)

        def arrived(index, completion):
            _, program = reply(requests[index].seed)
            if program is not None and program in loop.code_seen:
                with lock:
                    log.append(("seen", _digest(program)))
            hook(index, completion)
        return arrived

    loop._early = early
    parses = []
    extract = loop._extract

    def counted(request, completion):  # every parse of a reply, early or by the step
        parses.append(id(completion))
        return extract(request, completion)

    loop._extract = counted
    summary = loop.run()
    return summary, log, evaluator, parses


def test_replies_are_scored_as_they_arrive_and_the_run_is_the_same(tmp_path):
    with Sandbox(workers=2, timeout_s=60) as sandbox:
        on, log, evaluator, parses = run(tmp_path / "on", True, sandbox)
        off, off_log, off_evaluator, off_parses = run(tmp_path / "off", False, sandbox)
    # each reply is parsed once: the step takes the hook's parse
    assert len(parses) == len(off_parses) == on.ledger.llm_requests

    timeless = lambda path: [{k: v for k, v in c.items() if k != "seconds"} for c in read_jsonl(path)]
    assert timeless(tmp_path / "on" / "candidates.jsonl") == timeless(tmp_path / "off" / "candidates.jsonl")
    assert on.model_dump(exclude={"timing"}) == off.model_dump(exclude={"timing"})
    scored = on.ledger.outcomes["evaluated"]
    assert scored >= 5 and on.valid >= 3 and on.ledger.outcomes.get("rejected", 0) >= 1
    assert {"syntax", "exception"} <= set(on.failures)
    timing = json.loads((tmp_path / "on" / "timing.json").read_text())
    assert timing["overlapped"] == scored  # every program the steps scored was started as its reply arrived
    assert "overlapped" not in json.loads((tmp_path / "off" / "timing.json").read_text())
    # each program was scored before the next reply came, and no program was scored twice
    scorings = [entry[1] for entry in log if entry[0] == "scored"]
    assert len(scorings) == len(set(scorings)) == scored
    replies = [at for at, entry in enumerate(log) if entry[0] == "reply"]
    first_seen: set = set()
    for at, end in zip(replies, replies[1:] + [len(log)]):
        _, program = reply(log[at][1])
        if program is None or _digest(program) in first_seen:
            continue
        first_seen.add(_digest(program))
        assert ("scored", _digest(program)) in log[at + 1:end], (log[at], log[at:end])
    assert set(evaluator.calls) == {1}  # one early scoring per program; nothing left for the step to score
    # without overlap the sandbox is asked once per step, after all its replies: fewer calls than programs
    assert sum(off_evaluator.calls) == scored and len(off_evaluator.calls) < scored and max(off_evaluator.calls) >= 2
    assert off_log[:2] == [entry for entry in off_log if entry[0] == "reply"][:2]  # i1's two replies, then scoring


def test_an_interrupted_endpoint_run_stops_promptly_and_resumes_to_the_same_run(tmp_path):
    """`coevolve run` against a slow loopback endpoint (benchmarks/endpoint_overlap.py's: a program per
    request seed after ~1 s) with overlap on: Ctrl-C in the middle of a step ends the process with 130
    while replies are in flight and programs are being scored early, and `--resume` finishes it with the
    same candidates as a run never interrupted."""
    import importlib
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    bench = importlib.import_module("benchmarks.endpoint_overlap")
    server = bench.serve(1.0, 0.5)
    full = process = None
    try:
        toml = tmp_path / "c.toml"
        toml.write_text(bench.config(f"http://127.0.0.1:{server.server_address[1]}/v1", True, 24, 8, 4))
        env = {**os.environ, "OPENAI_API_KEY": "none"}
        command = [sys.executable, "-m", "coevolve.cli", "run", str(toml), "--no-progress", "--out"]
        # the uninterrupted run goes on beside the interrupted one and its resume (the same server answers
        # both, a function of the request seed; a run's records do not depend on its timing): its end is
        # awaited before the two runs' candidates are compared
        full_err = open(tmp_path / "full.err", "w")  # a file, not a pipe nobody reads while it runs
        full = subprocess.Popen(command + [str(tmp_path / "full")], cwd=root, env=env, stdout=subprocess.DEVNULL,
                                stderr=full_err, text=True)
        full_err.close()
        killed = tmp_path / "killed"
        # with Python's Ctrl-C handler in place even where the test runner was started with SIGINT ignored (a
        # background job of a non-interactive shell), which the child would inherit and never be interrupted
        launch = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                  "runpy.run_module('coevolve', run_name='__main__', alter_sys=True)")
        process = subprocess.Popen([sys.executable, "-c", launch, *command[3:], str(killed)], cwd=root, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
                e["type"] == "step" for e in (read_jsonl(killed / "events.jsonl") if (killed / "events.jsonl").exists()
                                              else [])):
            time.sleep(0.1)
        time.sleep(1.5)  # into the second step: replies arriving, the first ones being scored
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)  # in flight: ~1 s replies and ~1 s scorings, nothing longer
        assert process.returncode == 130, err[-2000:]
        steps = [e for e in read_jsonl(killed / "events.jsonl") if e["type"] == "step"]
        assert 1 <= len(steps) < 3 and not (killed / "summary.json").exists()

        resumed = subprocess.run([sys.executable, "-m", "coevolve.cli", "run", "--resume", str(killed), "--no-progress"],
                                 cwd=root, env=env, capture_output=True, text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert full.wait(timeout=300) == 0, (tmp_path / "full.err").read_text()[-2000:]
    finally:
        for child in (full, process):
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
        server.shutdown()
    timeless = lambda path: [{k: v for k, v in c.items() if k != "seconds"} for c in read_jsonl(path)]
    assert timeless(killed / "candidates.jsonl") == timeless(tmp_path / "full" / "candidates.jsonl")
    assert len(timeless(killed / "candidates.jsonl")) == 24
