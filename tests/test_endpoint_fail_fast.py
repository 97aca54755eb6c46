"""The first request of an [endpoint] call that fails for good (a refusal no retry fixes, retries spent on
5xx or broken replies) stops the call: its error is raised at once, the call's queued requests are never
sent and those in flight are not awaited (their replies would be thrown away, yet waited for and paid for).
A prompt too long for the model is the exception: the others' replies are kept for the search's retry. A
stub server on loopback (tests/endpoint_stub.py), the real generator, no engine."""

from __future__ import annotations

import json
import time

import endpoint_stub
import pytest
from endpoint_stub import MODEL, StubServer

from coevolve.cli import main
from coevolve.engine.base import ConstraintError, ContextLengthError, Sampling
from coevolve.engine.openai_client import EndpointError, OpenAIGenerator

stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # the stub's fixtures, found here by pytest

SLOW_S = 1.5  # every reply but the failing one's takes this long


def step(stub: StubServer, retries: int = 0) -> tuple[OpenAIGenerator, list]:
    """A generator at concurrency 2 and a step of 8 requests whose second (index 1) says "fail me"."""
    generator = OpenAIGenerator(stub.base_url, MODEL, concurrency=2, retries=retries, backoff_s=0.01, timeout_s=60)
    return generator, [[{"role": "user", "content": "fail me" if i == 1 else f"write {i}"}] for i in range(8)]


def no_more_sent(stub: StubServer, expected: int) -> None:
    """Once the abandoned in-flight request is answered, its thread takes no queued request."""
    stub.closing.set()  # ends the stub's waits: the request in flight is answered now
    time.sleep(0.5)
    assert len(stub.started) == expected, "a queued request was sent after the call failed"


def test_a_refusal_stops_the_call_and_is_the_error_raised(stub):
    stub.delay_s, stub.mode = SLOW_S, "e500"  # the other requests would fail too, later: theirs is not the error
    stub.fail = {"fail me": "e401"}
    generator, conversations = step(stub)
    began = time.monotonic()
    with pytest.raises(EndpointError, match="refused a request \\(HTTP 401: Incorrect API key provided\\)"):
        generator.chat(conversations, Sampling(temperature=0.0, max_tokens=8))
    assert time.monotonic() - began < SLOW_S / 2  # request 0, in flight, was not awaited
    no_more_sent(stub, 2)  # requests 0 and 1 (0 may reach the stub after 1's refusal); none of the six queued
    stub.delay_s, stub.mode, stub.fail = 0, "good", {}
    replies = generator.chat([[{"role": "user", "content": "write"}]] * 3, Sampling(temperature=0.0, max_tokens=8))
    assert len(replies) == 3 and len(stub.started) == 5  # the generator serves the next call


@pytest.mark.parametrize("mode", ["e500", "html"])
def test_spent_retries_stop_the_call(stub, mode):
    stub.delay_s, stub.fail = SLOW_S, {"fail me": mode}
    generator, conversations = step(stub, retries=2)
    began = time.monotonic()
    with pytest.raises(EndpointError, match="failed 3 times in a row") as caught:
        generator.chat(conversations, Sampling(temperature=0.0, max_tokens=8))
    assert "abandoned" not in str(caught.value)
    assert time.monotonic() - began < SLOW_S / 2
    no_more_sent(stub, 4)  # request 0, and request 1 three times


def test_a_prompt_too_long_still_gets_the_others_replies(stub):
    """Not a failure of the call: the search leans the refused prompt and asks again for it alone."""
    stub.delay_s, stub.fail = 0.1, {"fail me": "toolong"}
    generator, conversations = step(stub)
    with pytest.raises(ContextLengthError) as caught:
        generator.chat(conversations, Sampling(temperature=0.0, max_tokens=8))
    assert caught.value.index == 1 and len(stub.started) == 8
    assert [r is None for r in caught.value.replies] == [i == 1 for i in range(8)]


def test_an_error_in_on_each_stops_the_call(stub):
    stub.delay_s = 0.3
    generator, conversations = step(stub)

    def hook(index: int, completion) -> None:
        raise ValueError(f"hook failed on {index}")

    with pytest.raises(ValueError, match="hook failed on [01]"):
        generator.chat(conversations, Sampling(temperature=0.0, max_tokens=8), on_each=hook)
    no_more_sent(stub, 2)


def test_a_rejected_constraint_says_how_many_requests_were_sent(stub):
    """A server that rejects the decoding constraint: the call stops at the first refusal like any other,
    and the error says how many of its requests went out (the search counts those as requests, then asks
    again decoding freely), not the call's length."""
    stub.delay_s, stub.fail = SLOW_S, {"structured_outputs": "e400"}
    generator = OpenAIGenerator(stub.base_url, MODEL, concurrency=2, retries=0, timeout_s=60)
    conversations = [[{"role": "user", "content": f"write {i}"}] for i in range(8)]
    with pytest.raises(ConstraintError, match="rejected the decoding constraint") as caught:
        generator.chat(conversations, Sampling(temperature=0.0, max_tokens=8), constraints=["a+"] * 8)
    sent = caught.value.requests_sent
    assert 1 <= sent <= 2  # at most one per worker: none of the queued six
    no_more_sent(stub, sent)  # those taken by a worker as the first was refused went out too, and no more


def test_a_run_counts_the_constrained_requests_that_went_out_not_the_steps_length(stub, tmp_path, capsys):
    """The search goes on decoding freely after the refusal; its ledger counts every request the server
    received (before: the step's length for the refused call, though fail-fast sent at most one per worker)."""
    stub.fail = {"structured_outputs": "e400"}
    path = tmp_path / "run.toml"
    path.write_text(f'[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = 8\nseed = 0\n'
                    f'[sample]\nbatch = 8\n[sandbox]\ntimeout_s = 10\n'
                    f'[endpoint]\nbase_url = "{stub.base_url}"\nmodel = "{MODEL}"\nconcurrency = 2\n')
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 0, capsys.readouterr().err
    events = [json.loads(line) for line in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    (refusal,) = [e for e in events if e["type"] == "constrain"]
    assert 1 <= refusal["requests"] <= 2 and refusal["state"].startswith("off: the endpoint did not apply")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    time.sleep(0.5)  # an abandoned in-flight refusal reaches the stub late at most
    assert summary["ledger"]["llm_requests"] == len(stub.started) == refusal["requests"] + 8
