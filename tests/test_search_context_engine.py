"""Issue 25 on the real engine, sandbox and TSP task (tiny budgets): a
trace2skill run writes skill versions and shows them in the prompts, decodes
every proposal under the exact signature, shows failures in later prompts,
rejects a renamed template clone before the sandbox; a token cap stops a run
that then resumes; a target the seeded template meets stops one before any request; a starting skill
(skill.start) is in every prompt the real engine is sent. (`coevolve run` with trace2skill killed by SIGKILL and
resumed to the same skill texts and summary: test_run_e2e.py.)"""

from __future__ import annotations

import json

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.report import run_table
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search.runconfig import RunConfig
from test_run_e2e import sandbox  # noqa: F401  (the module-scoped real sandbox fixture)

SIGNATURE = "def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):"
CLONE = ("{the nearest city first}\n```python\n"
         "def select_next_node(cur, dest, unvisited, dm):\n"
         "    d = dm[cur][unvisited]  # distances\n"
         "    return unvisited[np.argmin(d)]\n```")


def tiny(method: str, budget: int, seed: int = 0, **extra) -> RunConfig:
    raw = {"run": {"method": method, "task": "tsp_construct", "budget": budget, "seed": seed},
           "eoh": {"population": 3, "offspring": 2, "init": 3},
           "sample": {"batch": 4, "population": 3},
           "sampling": {"max_tokens": 160},
           "skill": {"every": 2, "analysts": 2, "max_tokens": 64},
           "sandbox": {"timeout_s": 20, "workers": 2}}
    for name, values in extra.items():
        raw.setdefault(name, {}).update(values)
    return build_config(RunConfig, json.loads(json.dumps(raw)))


class Recorder:
    """The real engine, keeping every conversation it is sent; the first
    proposal it returns is replaced by a renamed clone of the template."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.systems: list[str] = []
        self.users: list[str] = []
        self.constraints: list[object] = []
        self.cloned = False

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        self.systems += [c[0]["content"] for c in conversations]
        self.users += [c[-1]["content"] for c in conversations]
        self.constraints += list(constraints) if constraints else [None] * len(conversations)
        extra = {"constraints": constraints} if constraints else {}
        out = self.engine.chat(conversations, sampling, seeds=seeds, **extra)
        if not self.cloned and constraints:
            self.cloned = True
            out[0].text = CLONE
        return out

    def __getattr__(self, name):
        return getattr(self.engine, name)


class CountingSandbox:
    def __init__(self, sandbox) -> None:
        self.sandbox = sandbox
        self.codes: list[str] = []

    def evaluate_many(self, items):
        self.codes += [item[0] for item in items]
        return self.sandbox.evaluate_many(items)


@pytest.mark.engine
@pytest.mark.timeout(900)
def test_trace2skill_on_the_real_engine_shows_skill_and_failures_constrains_and_rejects_clones(
        tmp_path, engine, sandbox):
    from coevolve.search.loop import SearchLoop
    from coevolve.search.prompts import describe_failure
    from coevolve.search.population import Candidate
    from coevolve.search.skill import outline
    from coevolve.base.skills import parse_skill_text
    from tasks.registry import get_task

    # the seed and clone rejection on the real engine too
    config = tiny("eoh+trace2skill", 12, context={"seed_template": True, "fingerprint": True})
    store = RunStore.create(tmp_path / "run", dump_toml(as_dict(config)))
    recorder, counting = Recorder(engine), CountingSandbox(sandbox)
    summary = SearchLoop(config, store, recorder, counting, get_task("tsp_construct")).run()
    candidates = read_jsonl(store.candidates_path)
    context = summary.context

    # budget: proposals and analyst requests, each charged once
    assert summary.evaluations == 12 == sum(summary.ledger.outcomes.values())
    assert summary.ledger.llm_requests == 12
    # the renamed template clone: rejected, charged, never in the sandbox
    first = candidates[0]
    assert first["failure"] == "duplicate" and first["duplicate_of"] == 0 and first["objective"] is None
    assert summary.ledger.outcomes["rejected"] >= 1 and context["rejected_template"] >= 1
    assert not any("def select_next_node(cur, dest" in code for code in counting.codes)
    # the sandbox saw the scored proposals and, once, the template seeded into the archive (not a request)
    assert len(counting.codes) == summary.ledger.outcomes["evaluated"] + 1 and summary.ledger.seeded == 1
    assert context["seed"]["failure"] is None and context["seed"]["objective"] > 0  # a tour length
    # constrained decoding: every proposal request carried the pattern, none failed to parse,
    # and every program keeps the exact signature
    proposals = [c for c, user in zip(recorder.constraints, recorder.users) if "Patch:" not in user]
    assert proposals and all(c is not None for c in proposals) and context["constrain"] == "on"
    assert not any(c["failure"] == "parse" for c in candidates)
    assert all(SIGNATURE in c["code"] for c in candidates if c["code"] and c["id"] != 1)  # 1: the injected clone
    # failures reach later prompts: the exact report (kind, message, failing line) of earlier failures
    reports = {describe_failure(Candidate.from_dict(c), config.context.failure_chars)
               for c in candidates if c["failure"]}
    shown_reports = {r for r in reports if any(r in u for u in recorder.users)}
    assert shown_reports and any("Recent attempts that failed" in u for u in recorder.users)
    # skill versions written, kept, and shown in the operator prompts after the first refresh
    versions = context["skill_versions"]
    assert len(versions) >= 2
    texts = [(store.dir / v["path"]).read_text() for v in versions]
    assert all("## Contract" in t and SIGNATURE.rstrip(":") in t for t in texts)
    shown = outline(parse_skill_text(texts[0]))
    assert any(shown in system for system in recorder.systems)


@pytest.mark.engine
@pytest.mark.timeout(900)
def test_a_template_clone_is_asked_again_free_on_the_real_engine(tmp_path, engine, sandbox):
    """[accounting] clone_retries: the injected renamed template clone is re-asked (same prompt,
    a fresh seed) on the real engine, free of the budget; the sandbox never sees it."""
    from coevolve.search.loop import SearchLoop
    from tasks.registry import get_task

    # 32 tokens: the re-ask's reply is cut off, not a clone again; only the injected clone matters here
    config = tiny("sample", 4, accounting={"clone_retries": 1}, sampling={"max_tokens": 32})
    store = RunStore.create(tmp_path / "run", dump_toml(as_dict(config)))
    recorder, counting = Recorder(engine), CountingSandbox(sandbox)
    summary = SearchLoop(config, store, recorder, counting, get_task("tsp_construct")).run()
    ledger = summary.ledger
    assert summary.evaluations == 4 == ledger.used and ledger.clone_retries >= 1
    assert ledger.llm_requests == 4 + ledger.clone_retries == len(recorder.users)
    (step,) = [e for e in read_jsonl(store.events_path) if e["type"] == "step"]
    assert step["clone_retries"][0]["text"] == CLONE and len(step["clone_retries"]) == ledger.clone_retries
    assert recorder.users[4] == recorder.users[0]  # the re-ask is the first request's prompt again
    assert not any("def select_next_node(cur, dest" in code for code in counting.codes)
    assert "free re-asks" in run_table(summary, store.dir)


@pytest.mark.engine
@pytest.mark.timeout(900)
def test_a_token_cap_stops_a_real_run_that_resumes_when_raised(tmp_path, engine, sandbox):
    from coevolve.search.loop import SearchLoop
    from tasks.registry import get_task

    # 32-token replies: the first step of 4 passes the cap of 40 (stopped after 4 evaluations, as before)
    short = {"max_tokens": 32}
    capped = tiny("sample", 8, caps={"completion_tokens": 40}, sampling=short)
    store = RunStore.create(tmp_path / "run", dump_toml(as_dict(capped)))
    stopped = SearchLoop(capped, store, engine, sandbox, get_task("tsp_construct")).run()
    assert stopped.stopped["cap"] == "completion_tokens" and stopped.evaluations == 4
    raised = tiny("sample", 8, sampling=short)
    store.config_path.write_text(dump_toml(as_dict(raised)))  # the cap raised (removed)
    resumed = SearchLoop(raised, RunStore.open(store.dir), engine, sandbox,
                         get_task("tsp_construct")).run()
    assert resumed.stopped is None and resumed.evaluations == 8
    steps = [e["step"] for e in RunStore(store.dir).iter_events("step")]
    assert steps == [0, 1]  # the first step was served from the log, not generated again
    assert resumed.ledger.completion_tokens > stopped.ledger.completion_tokens
    # caps.target met by the seeded template (scored in the real sandbox; any tour is shorter than
    # 1e6): the run stops before its first request, the template its best
    met = tiny("sample", 8, context={"seed_template": True}, caps={"target": 1e6})
    done = SearchLoop(met, RunStore.create(tmp_path / "met", dump_toml(as_dict(met))), engine, sandbox,
                      get_task("tsp_construct")).run()
    assert done.stopped["cap"] == "target" and done.stopped["used"] == done.best.objective < 1e6
    assert done.evaluations == 0 and done.ledger.llm_requests == 0 and done.best.id == 0


@pytest.mark.engine
@pytest.mark.timeout(600)
def test_a_starting_skill_reaches_the_real_engine_from_the_first_request(tmp_path, engine, sandbox):
    from coevolve.base.skills import write_skill
    from coevolve.search.loop import SearchLoop
    from tasks.registry import get_task

    rule = "Return the nearest unvisited city unless a farther one is much closer to the destination."
    folder = write_skill(tmp_path / "tsp-hints", "Hints for TSP construction.", f"## Ideas\n- {rule}\n").path
    config = tiny("sample", 4, skill={"start": str(folder)})
    recorder = Recorder(engine)
    recorder.cloned = True  # no clone substitution here
    summary = SearchLoop(config, RunStore.create(tmp_path / "run", dump_toml(as_dict(config))), recorder, sandbox,
                         get_task("tsp_construct")).run()
    assert len(recorder.systems) == 4 and all(rule in system for system in recorder.systems)
    assert summary.evaluations == 4 and summary.context["skill_start"]["rules"] == 1
    assert "starting skill" in run_table(summary, tmp_path / "run")


@pytest.mark.engine
@pytest.mark.timeout(600)
def test_each_parents_evaluation_reaches_the_real_engine(tmp_path, engine, sandbox):
    """context.feedback (on by default) on the real engine, sandbox and TSP task: every valid parent an
    operator prompt shows carries its per-instance comparison with the template; the seeded template's
    says it is the same on all 64 instances, which only the profiles the real sandbox hands back can say, and
    then the TSP task's note on its tours."""
    from coevolve.search.loop import SearchLoop
    from tasks.registry import get_task

    # 5: the i1 step, then one e1 step whose prompts show parents (the m1 prompt's form: test_feedback.py)
    config = tiny("eoh", 5, context={"seed_template": True})
    recorder = Recorder(engine)
    recorder.cloned = True  # no clone substitution here
    summary = SearchLoop(config, RunStore.create(tmp_path / "run", dump_toml(as_dict(config))), recorder, sandbox,
                         get_task("tsp_construct")).run()
    assert summary.evaluations == 5
    with_parents = [u for u in recorder.users if "Current heuristic (score" in u or "Heuristic 1 (score" in u]
    assert with_parents  # the e1 step after the first i1 step
    for user in with_parents:
        parents = user.count("Current heuristic (score") + sum(f"Heuristic {i} (score" in user for i in range(1, 9))
        assert user.count("\nEvaluation: ") == parents, user
    count = len(get_task("tsp_construct").instances(*get_task("tsp_construct").train))  # 64 tours of 50 cities
    # then the task's own note, written by the trusted worker from the tours the template built
    assert any(f"Evaluation: the same objective as the task's template on all {count} training instances; its tours "
               "go to the nearest unvisited city at 100% of steps" in u for u in with_parents)


@pytest.mark.engine
@pytest.mark.timeout(600)
def test_replies_cut_off_at_max_tokens_on_the_real_engine_are_named_in_the_run_table(tmp_path, engine, sandbox):
    """24 tokens hold the idea and the exact def line at most: every reply ends at max_tokens, and the
    candidates, the summary and the run table say so (a larger sampling.max_tokens is the remedy)."""
    from coevolve.codeparse import CUT_OFF, NO_CODE_CUT_OFF
    from coevolve.search.loop import SearchLoop
    from tasks.registry import get_task

    config = tiny("sample", 4, sampling={"max_tokens": 24})
    store = RunStore.create(tmp_path / "run", dump_toml(as_dict(config)))
    summary = SearchLoop(config, store, engine, sandbox, get_task("tsp_construct")).run()
    (step,) = [e for e in read_jsonl(store.events_path) if e["type"] == "step"]
    assert [c["finish_reason"] for c in step["completions"]] == ["length"] * 4
    candidates = read_jsonl(store.dir / "candidates.jsonl")
    assert all(c["message"] == NO_CODE_CUT_OFF or CUT_OFF in c["repairs"] for c in candidates), candidates
    assert summary.context["cut_off"] == {"replies": 4, "valid": 0, "max_tokens": 24}
    assert "4 replies ended at sampling.max_tokens = 24 (0 of them still scored" in run_table(summary, store.dir)


@pytest.mark.engine
@pytest.mark.timeout(600)
def test_a_prompt_past_the_context_leaves_out_the_skill_on_the_real_engine(tmp_path, engine, sandbox):
    """LEAN with the real tokenizer: with [model] max_len between the prompt's length without the starting
    skill and with it, every request leaves the skill out (level 3) and is sent at a length that fits."""
    from coevolve.base.skills import write_skill
    from coevolve.search.loop import SearchLoop
    from tasks.registry import get_task

    rules = "\n".join(f"- Rule {i}: prefer the city whose distance to the destination is smallest." for i in range(12))
    folder = write_skill(tmp_path / "tsp-long", "Long hints for TSP construction.", f"## Ideas\n{rules}\n").path

    short = {"max_tokens": 16}  # only the prompts are measured: the replies may be cut off

    def prompt_tokens(config, name):
        store = RunStore.create(tmp_path / name, dump_toml(as_dict(config)))
        SearchLoop(config, store, engine, sandbox, get_task("tsp_construct")).run()
        (step,) = [e for e in read_jsonl(store.events_path) if e["type"] == "step"]
        return step, {c["prompt_tokens"] for c in step["completions"]}

    _, (shown,) = prompt_tokens(tiny("sample", 4, skill={"start": str(folder)}, sampling=short), "with")
    _, (plain,) = prompt_tokens(tiny("sample", 4, sampling=short), "without")
    assert shown > plain + 100
    limit = (shown + plain) // 2
    step, sent = prompt_tokens(tiny("sample", 4, skill={"start": str(folder)}, model={"max_len": limit},
                                      sampling=short), "fit")
    assert [r.get("lean") for r in step["requests"]] == [3] * 4 and sent == {plain}
    summary = json.loads((tmp_path / "fit" / "summary.json").read_text())
    assert summary["context"]["leaned"] == {"requests": 4, "max_len": limit, "refused": 0}
