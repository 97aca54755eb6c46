"""A prompt past the model's context stops a run, and what `coevolve run` advises depends on who refused it:
a served model (a server started with a longer --max-model-len lets `--resume` go on) or the in-process
engine (its context is the run's [model] max_len, which a resume keeps: make a new run). ContextLengthError
carries that as `origin` (ENGINE, or the endpoint's base_url), set where it is raised and kept through every
rewording (the search loop's, an agent rollout's, an engine pool's, the analysts' answered_or_empty); the
CLI reads it, never the message.

Why: s55 finding 2: `commands/run._outgrown` looked for the config's endpoint URL in the message, so a config
whose base_url ends in "/" (the client drops it before naming itself) was told a resume would stop again,
and an engine's message that happened to quote the URL would be told to resume. Real CLI path: the stub
server on loopback (tests/endpoint_stub.py), the real OpenAIGenerator and sandbox; no vLLM."""

from __future__ import annotations

import pickle

import endpoint_stub
import pytest

from coevolve.cli import main
from coevolve.commands.run import _outgrown
from coevolve.engine.base import ENGINE, ContextLengthError, Sampling, answered_or_empty
from coevolve.engine.openai_client import OpenAIGenerator
from coevolve.runstore import RunStore
from test_endpoint_replies import MODEL, write_config
from test_write_failures import error_lines

stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # its fixtures, where pytest finds them

RESUME = "continue with `coevolve run --resume"
NEW_RUN = "a resume keeps the config the run started with and would stop here again: make the change in a new run"


def test_a_served_refusal_is_told_to_resume_though_the_configs_url_ends_in_a_slash(stub, tmp_path, capsys):
    stub.mode, stub.good_first = "toolong", 2  # step 0 (two candidates) is answered; step 1's prompts are too long
    out = tmp_path / "run"
    code = main(["run", str(write_config(tmp_path, stub.base_url + "/")), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1, err
    lines = error_lines(err)
    assert lines[0].startswith(f"coevolve run: error: {stub.base_url} refused a prompt"), err  # no slash: the client's
    assert lines[1] == (f"every finished step is in {out}: continue with `coevolve run --resume {out}` once its "
                        "server takes longer prompts (--max-model-len); the other changes make a new run, since a "
                        "resume keeps the config the run started with"), err


@pytest.mark.parametrize("origin, message, advice", [
    (ENGINE, "a prompt of 2100 tokens does not fit the engine's context of 2048 tokens (the task quotes "
             "http://127.0.0.1:9/v1)", NEW_RUN),
    ("http://127.0.0.1:9/v1", "the served model refused a prompt longer than its context", RESUME),
])
def test_the_advice_follows_the_origin_not_the_words(tmp_path, capsys, origin, message, advice):
    store = RunStore.create(tmp_path / "run", "")
    assert _outgrown(store, ContextLengthError(message, 0, origin=origin)) == 1
    err = capsys.readouterr().err
    assert error_lines(err)[0] == f"coevolve run: error: {message}", err
    assert advice in error_lines(err)[1], err


def test_the_endpoint_names_itself_as_origin_and_every_rewording_keeps_it(stub):
    stub.mode = "toolong"
    served = OpenAIGenerator(stub.base_url + "/", MODEL, retries=0, backoff_s=0.0)
    with pytest.raises(ContextLengthError) as caught:
        served.chat([[{"role": "user", "content": "write"}]] * 2, Sampling(temperature=0.0, max_tokens=8))
    refused = caught.value
    assert refused.origin == stub.base_url and refused.replies == [None, None]
    # the search loop's and an agent rollout's rewordings: tests/test_context_origin.py, through the real code
    assert refused.shifted(4).origin == stub.base_url  # an engine pool's part of a call
    assert pickle.loads(pickle.dumps(refused)).origin == stub.base_url  # from a Ray actor

    def refuse(asked):  # the analysts' way on: every request refused is one error, still the server's
        raise ContextLengthError("refused", 0, origin=stub.base_url, replies=[None] * len(asked))

    with pytest.raises(ContextLengthError, match="none fits") as caught:
        answered_or_empty(refuse, 2, "none fits")
    assert caught.value.origin == stub.base_url


def test_the_engines_measure_is_the_engines_through_a_pool_and_pickling():
    measured = ContextLengthError.prompt(2100, 2048, 1, [1])
    assert measured.origin == ENGINE
    assert pickle.loads(pickle.dumps(measured.shifted(3))).origin == ENGINE
    assert ContextLengthError("a caller's own words").origin == ENGINE  # nothing said: the in-process engine


@pytest.mark.engine
def test_the_real_engines_refusal_is_the_engines(engine):
    """The in-process vLLM engine's own refusal (it counts the prompts once vLLM refused the call)."""
    long = [{"role": "user", "content": "word " * 3000}]
    with pytest.raises(ContextLengthError) as caught:
        engine.chat([long], Sampling(temperature=0.0, max_tokens=4), seeds=[0])
    assert caught.value.origin == ENGINE and caught.value.tokens > engine.max_model_len
