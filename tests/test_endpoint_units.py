"""The engine-or-endpoint decision and the endpoint client's rules, without a
server (tests/test_serving.py runs them against a real one)."""

from __future__ import annotations

import pytest

from coevolve.base.errors import UsageError
from coevolve.base.sections import EndpointSection
from coevolve.engine import local
from coevolve.engine.base import Completion
from coevolve.engine.openai_client import EndpointConfigError, api_key, is_loopback
from coevolve.search.ledger import Ledger

SERVED = EndpointSection(base_url="http://127.0.0.1:8000/v1", model="m")


def test_only_es_or_a_missing_endpoint_needs_the_engine():
    assert not local.needs_engine(False, SERVED)
    assert local.needs_engine(True, SERVED)
    assert local.needs_engine(False, EndpointSection())


def test_a_run_the_install_cannot_run_is_refused_with_what_to_install(monkeypatch):
    monkeypatch.setattr(local, "engine_installed", lambda: False)
    local.require_engine("eoh", False, SERVED)  # context-only on an endpoint: fine without vLLM
    cases = [("eoh+esopt", True, SERVED, False, "moves the model's weights (ES)"),
             ("sample", False, EndpointSection(), False, "without an [endpoint] base_url"),
             ("trace2skill", False, SERVED, True, "the agents play on the local vLLM engine")]
    for method, es, endpoint, students, why in cases:
        with pytest.raises(UsageError) as refused:
            local.require_engine(method, es, endpoint, students=students)
        message = str(refused.value)
        assert why in message and "pip install 'coevolve[cpu]'" in message and "\n" not in message
    monkeypatch.setattr(local, "engine_installed", lambda: True)
    local.require_engine("eoh+esopt", True, SERVED)


def test_the_api_key_rules(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("COEVOLVE_UNIT_KEY", raising=False)
    assert is_loopback("http://localhost:8000/v1") and is_loopback("http://127.0.0.1/v1")
    assert not is_loopback("https://api.openai.com/v1")
    assert api_key("http://127.0.0.1:8000/v1", "OPENAI_API_KEY") == "EMPTY"  # a local server takes any key
    with pytest.raises(EndpointConfigError, match="endpoint.api_key_env: the environment variable OPENAI_API_KEY"):
        api_key("https://api.example.com/v1", "OPENAI_API_KEY")
    with pytest.raises(EndpointConfigError, match="COEVOLVE_UNIT_KEY is not set"):
        api_key("http://127.0.0.1:8000/v1", "COEVOLVE_UNIT_KEY")  # a variable the config names must be set
    monkeypatch.setenv("COEVOLVE_UNIT_KEY", "sk-test")
    assert api_key("https://api.example.com/v1", "COEVOLVE_UNIT_KEY") == "sk-test"


def test_retries_are_counted_apart_from_the_budget():
    ledger = Ledger(budget=2)
    ledger.record_llm([Completion("a", 10, 5, retries=2), Completion("b", 10, 5)])
    ledger.charge("evaluated")
    assert (ledger.llm_requests, ledger.llm_retries, ledger.used) == (2, 2, 1)
    assert ledger.to_dict()["llm_retries"] == 2


def test_endpoint_retries_must_not_be_negative():
    with pytest.raises(UsageError, match="endpoint.retries"):
        EndpointSection(base_url="http://127.0.0.1/v1", model="m", retries=-1).check("endpoint")


def test_the_endpoint_timeout_must_be_positive_and_reaches_the_client():
    from coevolve.base.config import build_config
    from coevolve.engine.openai_client import open_endpoint

    with pytest.raises(UsageError, match=r"^config error: endpoint.timeout_s must be in \(0, 604800\] \(seconds, a week at most\) \(got 0.0\)$"):
        build_config(EndpointSection, {"base_url": "http://127.0.0.1:9/v1", "model": "m", "timeout_s": 0}, "endpoint")
    client = open_endpoint(EndpointSection(base_url="http://127.0.0.1:9/v1", model="m", timeout_s=42, retries=5))
    assert client.client.timeout == 42.0 and client.retries == 5


@pytest.mark.parametrize("raw, message", [
    ({"base_url": "http://x/v1", "model": "a", "models": {"b": 1.0}}, "endpoint.models is an ensemble in place of"),
    ({"base_url": "http://x/v1", "models": {"a": 0.0}}, "endpoint.models.a must be a weight > 0"),
    ({"base_url": "http://x/v1"}, "endpoint.model is required when endpoint.base_url is set (or endpoint.models"),
])
def test_an_ensemble_is_checked_naming_its_key(raw, message):
    from coevolve.base.config import build_config

    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_config(EndpointSection, raw, "endpoint")


def test_an_ensemble_draws_each_requests_model_from_its_seed_by_weight():
    from collections import Counter

    from coevolve.engine.openai_client import OpenAIGenerator

    generator = OpenAIGenerator("http://127.0.0.1:1/v1", {"small": 4.0, "big": 1.0})
    picks = [generator.pick(seed) for seed in range(2000)]
    assert picks == [generator.pick(seed) for seed in range(2000)]  # the same seed, the same model (resume)
    assert Counter(picks)["big"] / len(picks) == pytest.approx(0.2, abs=0.03)
    assert generator.pick(None) == "small" == generator.model  # unseeded requests: the first model
    assert OpenAIGenerator("http://127.0.0.1:1/v1", "only").pick(7) == "only"
    section = EndpointSection(base_url="http://x/v1", models={"small": 4.0, "big": 1.0})
    assert section.choices == {"small": 4.0, "big": 1.0} and SERVED.choices == {"m": 1.0}


def test_each_reply_is_priced_at_its_own_models_price():
    from coevolve.base.config import build_config
    from coevolve.search.runconfig import RunConfig

    raw = {"endpoint": {"base_url": "http://x/v1", "models": {"small": 1.0, "big": 1.0}},
           "caps": {"money": 1.0, "prices": {"small": [1.0, 2.0]}}}
    with pytest.raises(UsageError, match="caps.prices has no price for the \\[endpoint\\] model 'big'"):
        build_config(RunConfig, raw)


def test_answered_or_empty_asks_again_without_what_an_engine_measured_too_long():
    """An engine refuses a whole call naming its too-long requests (`too_long`; an engine pool one part's at a
    time): they become empty replies, the rest is asked again, each request with its own seed; when the rest is
    refused too, the error names the request by its place in the whole call."""
    from coevolve.engine.base import REFUSED_LONG, ContextLengthError, answered_or_empty

    long = {1, 3}
    calls = []

    def chat(asked):
        calls.append(list(asked))
        too_long = [i for i, request in enumerate(asked) if request in long]
        if too_long:
            raise ContextLengthError.prompt(2100, 2048, too_long[0], too_long[:1])  # one part's at a time
        return [Completion(f"reply {request}") for request in asked]

    replies = answered_or_empty(chat, 4, "none fits")
    assert calls == [[0, 1, 2, 3], [0, 2, 3], [0, 2]]
    assert [r.text for r in replies] == ["reply 0", "", "reply 2", ""]
    assert {r.finish_reason for r in replies[1::2]} == {REFUSED_LONG}
    long.update({0, 2})
    with pytest.raises(ContextLengthError, match=r"request 3 of the call\): none fits") as caught:
        answered_or_empty(chat, 4, "none fits")
    assert caught.value.index == 3  # the last asked alone: request 3, not 0 of its one-request call
