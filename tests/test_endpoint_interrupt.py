"""Stopping a run on an [endpoint] (s53 walkthrough, findings 1, 9 and 12), against a stub server on
loopback (tests/endpoint_stub.py), no engine:
- Ctrl-C or SIGTERM while the step's requests are out: the process exits at once with the resume line
  (130), sends none of the step's queued requests (a hosted API would charge them, and the resume asks
  them again), waits for none in flight, prints no traceback, and the resume is not refused as a
  second writer of the run directory.
- a request that times out: the resume line says to raise endpoint.timeout_s.
- the run table (and report.md) names the endpoint and its model(s); endpoint.json describes each model
  of an ensemble."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from endpoint_stub import MODEL, model_list, no_key, stub  # noqa: F401  (fixtures)

from coevolve.cli import main
from coevolve.engine.base import Sampling
from coevolve.engine.openai_client import OpenAIGenerator

REPO = Path(__file__).resolve().parent.parent
# `python -m coevolve`, with Python's Ctrl-C handler in place even where the test runner was started with
# SIGINT ignored (a background job of a non-interactive shell), which the child would inherit
LAUNCH = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
          "runpy.run_module('coevolve', run_name='__main__', alter_sys=True)")


def write_config(tmp_path: Path, base_url: str, budget: int, batch: int, endpoint: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(f'[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = {budget}\nseed = 0\n'
                    f'[sample]\nbatch = {batch}\n[sandbox]\ntimeout_s = 10\n[context]\nconstrain = false\n'
                    f'[endpoint]\nbase_url = "{base_url}"\n{endpoint}\n')
    return path


def resume_line(out: Path) -> str:
    return f"every finished step is in {out}: continue with `coevolve run --resume {out}`"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_sends_no_queued_request_and_exits_at_once(stub, tmp_path, capsys, signum):
    stub.delay_s = 20  # a slow server: every reply takes 20 s
    out = tmp_path / "run"
    config = write_config(tmp_path, stub.base_url, budget=6, batch=6,
                          endpoint=f'model = "{MODEL}"\nconcurrency = 2\nretries = 0\ntimeout_s = 60')
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    run = subprocess.Popen([sys.executable, "-c", LAUNCH, "run", str(config), "--out", str(out), "--no-progress"],
                           cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(stub.started) < 2 and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(stub.started) == 2, run.communicate(timeout=30)
        time.sleep(0.5)  # the two requests in flight, four queued behind them
        sent = time.monotonic()
        run.send_signal(signum)
        stdout, err = run.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    # SIGTERM is Ctrl-C on purpose (coevolve/cli.py `_terminated`, docs/sandbox.md): 130 both
    assert run.returncode == 130, err
    assert took < 3, f"exited {took:.1f} s after the signal"
    assert "interrupted" in err and resume_line(out) in err, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    time.sleep(0.5)  # any request the run still had would have arrived by now
    assert len(stub.started) == 2 and all(t < sent for t in stub.started), "a queued request was sent"
    if signum != signal.SIGINT:
        return
    # right away, the run directory is free to resume (the killed process held its writer lock), and the
    # resume asks for the step that was interrupted
    stub.delay_s = 0
    code = main(["run", "--resume", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0 and "being written by another process" not in err, err
    assert json.loads((out / "summary.json").read_text())["evaluations"] == 6


def test_an_interrupted_call_leaves_without_waiting_for_its_requests(stub):
    """The generator alone: an interrupt leaves chat at once; once the two requests it abandoned have been
    answered (3 s), none of the four queued behind them has been sent; the generator answers the next call."""
    stub.delay_s = 3
    generator = OpenAIGenerator(stub.base_url, MODEL, concurrency=2, retries=0, timeout_s=60)
    # to the main thread, as the kernel hands a terminal's Ctrl-C to a process (raise_signal in the timer's
    # thread would not wake the main thread's wait)
    timer = threading.Timer(1.0, lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer.start()
    began = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            generator.chat([[{"role": "user", "content": f"write {i}"}] for i in range(6)],
                           Sampling(temperature=0.0, max_tokens=8))
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - began < 2
    deadline = time.monotonic() + 30
    while stub.chats < 2 and time.monotonic() < deadline:  # the abandoned two are answered (3 s after they came)
        time.sleep(0.05)
    time.sleep(1.0)  # a thread that took a queued request once its answer came would have sent it by now
    assert len(stub.started) == 2 and stub.chats == 2
    stub.delay_s = 0
    replies = generator.chat([[{"role": "user", "content": "write"}]] * 3, Sampling(temperature=0.0, max_tokens=8))
    assert len(replies) == 3 and len(stub.started) == 5


def test_a_timed_out_request_says_to_raise_the_timeout(stub, tmp_path, capsys):
    stub.delay_s = 5  # answering, only slower than timeout_s
    out = tmp_path / "run"
    config = write_config(tmp_path, stub.base_url, budget=2, batch=2,
                          endpoint=f'model = "{MODEL}"\nconcurrency = 2\nretries = 0\ntimeout_s = 1')
    code = main(["run", str(config), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    assert f"coevolve run: error: {stub.base_url} failed 1 times in a row, last: no answer (timed out)" in err
    assert (f"{resume_line(out)} once the endpoint answers (if it is up but slow, raise endpoint.timeout_s in "
            "the run's config.toml first: a resume takes it)") in err, err


def endpoint_rows(table: str) -> list[list[str]]:
    """The run table's `endpoint` rows, as [name, value]."""
    return [line.split(None, 1) for line in table.splitlines() if line.startswith("endpoint ")]


def test_the_run_table_and_report_name_the_endpoint_and_its_model(stub, tmp_path, capsys):
    out = tmp_path / "run"
    config = write_config(tmp_path, stub.base_url, budget=2, batch=2, endpoint=f'model = "{MODEL}"')
    assert main(["run", str(config), "--out", str(out), "--no-progress"]) == 0
    row = [["endpoint", f"{stub.base_url}, model {MODEL}"]]
    assert endpoint_rows(capsys.readouterr().out) == row
    assert main(["report", str(out)]) == 0
    assert endpoint_rows((out / "report.md").read_text()) == row


def test_an_ensembles_row_and_record_name_every_model(stub, tmp_path, capsys):
    stub.models = model_list(MODEL, "other", "unused")
    out = tmp_path / "run"
    config = write_config(tmp_path, stub.base_url, budget=2, batch=2,
                          endpoint=f'models = {{ "{MODEL}" = 0.75, "other" = 0.25 }}')
    assert main(["run", str(config), "--out", str(out), "--no-progress"]) == 0
    assert endpoint_rows(capsys.readouterr().out) == [
        ["endpoint", f"{stub.base_url}, models other 0.25, {MODEL} 0.75 (configured weights)"]]  # as endpoint.json sorts them
    record = json.loads((out / "endpoint.json").read_text())
    assert record["models"] == {MODEL: 0.75, "other": 0.25}
    assert {name: server["id"] for name, server in record["servers"].items()} == {MODEL: MODEL, "other": "other"}
