"""A prompt too long for the model, worded anew by the search loop and by an agent rollout (each adds
what made the prompt long and what to change), keeps the origin of the error it rewords: the endpoint's
base_url when a served model refused it. The origin is the error's own attribute, so it survives what
drops Python's implicit __context__: pickling (an engine pool's actors, tests/test_run_origin.py) and
copying.

Why: s55's read of its change ("wrong depth"): both rewording sites dropped the origin and
ContextLengthError.origin recovered it from __context__, which a pickled or copied error no longer has
(it then claimed the in-process engine refused the prompt). Real path: the stub server on loopback
(tests/endpoint_stub.py) behind the real OpenAIGenerator, the real SearchLoop and rollout; no vLLM."""

from __future__ import annotations

import copy
import pickle

import endpoint_stub
import pytest

from coevolve.agents.rollout import rollout
from coevolve.engine.base import ENGINE, ContextLengthError, Sampling
from coevolve.engine.openai_client import OpenAIGenerator
from tasks.sudoku import Sudoku
from test_search_context import make_config, run

stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # its fixtures, where pytest finds them


def served(stub) -> OpenAIGenerator:
    stub.mode = "toolong"  # every chat request refused as longer than the model's context (HTTP 400)
    return OpenAIGenerator(stub.base_url, endpoint_stub.MODEL, retries=0, backoff_s=0.0)


def assert_kept(error: ContextLengthError, base_url: str) -> None:
    assert error.origin == base_url
    assert pickle.loads(pickle.dumps(error)).origin == base_url  # across a process, as from a Ray actor
    assert copy.copy(error).origin == base_url


def test_the_search_loops_rewording_keeps_the_endpoints_origin(stub, tmp_path):
    endpoint = {"base_url": stub.base_url, "model": endpoint_stub.MODEL}
    with pytest.raises(ContextLengthError) as caught:
        run(tmp_path / "r", make_config("eoh", 12, endpoint=endpoint), endpoint=served(stub))
    assert f"{stub.base_url} refused a prompt longer than its model's context" in str(caught.value)
    assert "a fake prompt holds the task's description" in str(caught.value)  # the loop's words
    assert_kept(caught.value, stub.base_url)


def test_an_agent_rollouts_rewording_keeps_the_endpoints_origin(stub):
    task = Sudoku(masked=3)
    cases = task.cases("train", 2, seed=0)
    with pytest.raises(ContextLengthError) as caught:
        rollout(served(stub), task, cases, Sampling(max_tokens=8))
    assert str(caught.value).startswith(f"sudoku: an episode of case {cases[0].id} outgrew the engine's context "
                                        f"at turn 1: {stub.base_url} refused a prompt")  # the rollout's words
    assert_kept(caught.value, stub.base_url)


def test_an_error_worded_without_an_origin_is_the_engines_wherever_it_is_raised(stub):
    """No implicit inheritance: the origin is what the raiser says (ENGINE when it says nothing), not
    whatever error happened to be handled when it was raised."""
    with pytest.raises(ContextLengthError) as caught:
        try:
            served(stub).chat([[{"role": "user", "content": "write"}]], Sampling(temperature=0.0, max_tokens=8))
        except ContextLengthError:
            raise ContextLengthError("a caller's own words") from None
    assert caught.value.origin == ENGINE
