"""Adaptive endpoint ensembles (`[endpoint] select = "adaptive"`): the weights follow each model's
successes in the run, requests are drawn by them from their own seeds, a model that writes prose is
asked less, and a resumed run asks the same models. The loop logic with the fake engine; the real
server in test_serving.py."""

from __future__ import annotations

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.base.errors import ConfigError
from coevolve.engine.openai_client import OpenAIGenerator
from coevolve.report.rendering import context_rows
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search.ensemble import adaptive_weights, improved
from coevolve.search.runconfig import RunConfig
from search_fakes import FakeEngine
from test_search_context import make_config, run

MODELS = {"good": 1.0, "bad": 1.0}


class TwoModels(FakeEngine):
    """An endpoint of two models: requests go to the model the real OpenAIGenerator's draw picks (its
    `pick` and `reweight`, no network); "bad" answers prose, "good" as the fake engine."""

    def __init__(self) -> None:
        super().__init__()
        self.picker = OpenAIGenerator("http://127.0.0.1:9/v1", MODELS)
        self.asked: list[list[str]] = []  # per call

    def reweight(self, weights) -> None:
        self.picker.reweight(weights)

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        out = super().chat(conversations, sampling, seeds, constraints)
        models = [self.picker.pick(seed) for seed in seeds]
        for completion, model in zip(out, models):
            completion.model = model
            if model == "bad":
                completion.text = "I would rather not write code today."
        self.asked.append(models)
        return out


def config(select: str, budget: int = 40, **extra) -> RunConfig:
    return make_config("sample", budget, endpoint={"base_url": "http://127.0.0.1:9/v1", "models": MODELS,
                                                   "select": select}, context={"fingerprint": False}, **extra)


def test_the_prose_model_is_asked_less_as_the_run_learns_and_the_weights_follow_the_record(tmp_path):
    fixed, adaptive = TwoModels(), TwoModels()
    run(tmp_path / "fixed", config("fixed"), endpoint=fixed)
    summary, *_ = run(tmp_path / "adaptive", config("adaptive"), endpoint=adaptive)
    late = lambda endpoint: sum(models.count("bad") for models in endpoint.asked[5:])  # noqa: E731
    assert late(adaptive) < late(fixed) / 2, (late(adaptive), late(fixed))
    # each step's logged weights: configured weight x (1 + successes) / (2 + candidates) of the steps before,
    # recomputed here from candidates.jsonl (a sample candidate has no parent: a success is one that scored)
    candidates = read_jsonl(tmp_path / "adaptive" / "candidates.jsonl")
    for event in RunStore(tmp_path / "adaptive").iter_events("step"):
        before = [c for c in candidates if c["step"] < event["step"]]
        raw = {m: w * (1 + sum(c["objective"] is not None for c in before if c["model_state"]["model"] == m))
               / (2 + sum(c["model_state"]["model"] == m for c in before)) for m, w in MODELS.items()}
        assert event["weights"] == pytest.approx({m: v / sum(raw.values()) for m, v in raw.items()}, abs=1e-6)
    assert not any("weights" in e for e in RunStore(tmp_path / "fixed").iter_events("step"))
    proposers = summary.context["proposers"]
    assert proposers["bad"]["valid"] == proposers["bad"]["improved"] == 0 < proposers["good"]["improved"]
    assert proposers["bad"]["weight"] < 0.2 and proposers["good"]["weight"] + proposers["bad"]["weight"] == 1
    row = dict(context_rows(summary.context, None))["proposers"]
    assert f"bad {proposers['bad']['candidates']} (0 valid, 0 successes; next weight" in row


def test_a_stopped_adaptive_run_resumes_asking_the_same_models(tmp_path):
    run(tmp_path / "full", config("adaptive"), endpoint=TwoModels())
    stopped, *_ = run(tmp_path / "r", config("adaptive", caps={"completion_tokens": 150}), endpoint=TwoModels())
    assert stopped.stopped["cap"] == "completion_tokens" and 0 < stopped.evaluations < 40
    (tmp_path / "r" / "config.toml").write_text(dump_toml(as_dict(config("adaptive"))))
    run(tmp_path / "r", config("adaptive"), endpoint=TwoModels(), resume=True)
    full, resumed = (read_jsonl(tmp_path / name / "candidates.jsonl") for name in ("full", "r"))
    assert [(c["model_state"]["model"], c["code"]) for c in resumed] == [(c["model_state"]["model"], c["code"])
                                                                         for c in full]


class _C:
    def __init__(self, objective, valid=True):
        self.objective, self.valid = objective, valid


def test_a_success_beats_every_scored_parent_and_weights_never_reach_zero():
    assert improved(_C(3.0), [_C(4.0), _C(5.0)], "min") and not improved(_C(4.5), [_C(4.0), _C(5.0)], "min")
    assert improved(_C(6.0), [_C(4.0), _C(5.0)], "max") and not improved(_C(None, False), [], "min")
    assert improved(_C(9.0), [_C(None, False)], "min")  # a repair of a failed program: scoring is the success
    # by hand: a 3 successes of 4 -> (1 + 3) / (2 + 4) = 4/6; b 0 of 4 -> 1/6; normalised 0.8 and 0.2
    assert adaptive_weights({"a": 1.0, "b": 1.0}, {"a": {"improved": 3, "candidates": 4},
                                                   "b": {"improved": 0, "candidates": 4}}) == {"a": 0.8, "b": 0.2}
    # no record yet: the configured weights, normalised
    assert adaptive_weights({"a": 3.0, "b": 1.0}, {m: {"improved": 0, "candidates": 0} for m in "ab"}) == {"a": 0.75,
                                                                                                        "b": 0.25}
    weights = adaptive_weights({"a": 3.0, "b": 1.0}, {"a": {"improved": 0, "candidates": 1000},
                                                      "b": {"improved": 10, "candidates": 10}})
    assert weights["a"] > 0 and weights["b"] > 0.9


@pytest.mark.parametrize("endpoint, message", [
    ({"base_url": "http://x/v1", "model": "m", "select": "adaptive"}, 'endpoint.select = "adaptive" chooses among'),
    ({"base_url": "http://x/v1", "models": {"a": 1.0, "b": 1.0}, "select": "bandit"},
     "endpoint.select must be one of fixed, adaptive (got 'bandit')"),
])
def test_bad_selection_is_one_line_naming_the_key(endpoint, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_config(RunConfig, {"run": {"method": "sample", "budget": 8}, "endpoint": endpoint})


def test_an_agent_run_refuses_an_adaptive_teacher():
    from coevolve.agents.runconfig import AgentRunConfig
    with pytest.raises(ConfigError, match='endpoint.select = "adaptive" is for heuristic runs'):
        build_config(AgentRunConfig, {"endpoint": {"base_url": "http://x/v1", "models": {"a": 1.0, "b": 1.0},
                                                   "select": "adaptive"}})
