"""Issue 25's context logic with the fake engine and evaluator: failures in the
next prompt, the repair operator, clone rejection before the sandbox, the
decoding pattern, trace2skill refresh steps (charged, versioned, resumed) and
caps. The real-engine checks are in test_search_context_engine.py."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.base.errors import UsageError
from coevolve.base.records import read_summary
from coevolve.codeparse import answer_pattern, extract, template_signature
from coevolve.engine.base import Completion
from coevolve.base.skills import parse_skill_text
from coevolve.es.start import ResumeError
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search.fingerprint import CloneIndex, fingerprint
from coevolve.search.loop import SearchLoop
from coevolve.search.prompts import describe_failure
from coevolve.search.methods import format_plan, run_plan
from coevolve.search.population import Candidate
from coevolve.search.runconfig import RunConfig
from coevolve.search.skill import outline
from search_fakes import TEMPLATE, FakeEngine, FakeEvaluator, FakeTask


ROOT = Path(__file__).resolve().parents[1]


def make_config(method: str = "eoh", budget: int = 24, **sections) -> RunConfig:
    raw = {"run": {"method": method, "task": "fake", "budget": budget, "seed": 1},
           "eoh": {"population": 4, "offspring": 3}, "sample": {"batch": 4, "population": 4},
           "es": {"population": 3, "sigma": 0.01, "sigma_end": 0.001, "alpha": 0.1},
           "context": {"fingerprint": True}}  # clone rejection (off by default) is part of what these check
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return build_config(RunConfig, raw)


def run(directory, config, engine=None, resume=False, task=None, endpoint=None):
    store = RunStore.open(directory) if resume else RunStore.create(directory, dump_toml(as_dict(config)))
    engine = engine or FakeEngine()
    evaluator = FakeEvaluator()
    summary = SearchLoop(config, store, engine, evaluator, task or FakeTask(), endpoint=endpoint).run()
    return summary, engine, evaluator


def cut_run(full: Path, directory: Path, events: list[dict]) -> Path:
    """A run directory as a kill would leave it: `full`'s config and these events."""
    directory.mkdir()
    (directory / "config.toml").write_text((full / "config.toml").read_text())
    (directory / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return directory


class RecordingEngine(FakeEngine):
    """Keeps every prompt and constraint it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, object]] = []

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        out = super().chat(conversations, sampling, seeds, constraints)
        for i, c in enumerate(conversations):
            self.seen.append((c[0]["content"], c[-1]["content"], None if constraints is None else constraints[i]))
        return out


# -- fingerprints -------------------------------------------------------------------------
def test_a_renamed_reformatted_clone_has_the_template_fingerprint_and_a_changed_program_does_not():
    clone = ('def score_it(value):  # renamed\n    """Another docstring."""\n    s = 50.00\n    return s\n')
    assert fingerprint(clone).digest == fingerprint(TEMPLATE).digest
    assert fingerprint(TEMPLATE.replace("50.0", "49.0")).digest != fingerprint(TEMPLATE).digest
    assert fingerprint("def f(a):\n    return min(a)\n").digest != fingerprint("def f(a):\n    return max(a)\n").digest
    index = CloneIndex(0.9)
    index.add(0, fingerprint("def f(a, b):\n    x = a * 2 + b\n    y = x - 1\n    return max(x, y, 3)\n"))
    assert index.find(fingerprint("def g(p, q):\n    x = p * 2 + q\n    y = x - 1\n    return max(x, y, 4)\n")) == 0
    assert CloneIndex(1.0).find(fingerprint(TEMPLATE)) is None
    with pytest.raises(ValueError):
        CloneIndex(0.0)


def test_a_clone_of_the_template_is_rejected_before_the_sandbox_and_charged(tmp_path):
    class CloneEngine(FakeEngine):
        def chat(self, conversations, sampling, seeds=None, constraints=None):
            out = super().chat(conversations, sampling, seeds, constraints)
            out[0].text = "{same as before}\n```python\ndef pick(y):\n    '''x'''\n    S = 50.0\n    return S\n```"
            return out

    summary, _, evaluator = run(tmp_path / "r", make_config("sample", 8), engine=CloneEngine())
    candidates = read_jsonl(tmp_path / "r" / "candidates.jsonl")
    rejected = [c for c in candidates if c["failure"] == "duplicate"]
    assert rejected and rejected[0]["duplicate_of"] == 0 and rejected[0]["message"] == "a clone of the task template"
    assert summary.ledger.outcomes["rejected"] == len(rejected) == summary.context["rejected"]
    assert summary.context["rejected_template"] >= 1
    # never scored (the sandbox saw the proposals that were not clones, and the seeded template once)
    assert evaluator.evaluated == summary.ledger.outcomes["evaluated"] + summary.ledger.seeded
    assert summary.evaluations == 8


def test_the_run_table_counts_a_repeated_valid_program_once_and_says_how_much_code_repeated(tmp_path):
    """The fake engine proposes one program (SCORE = 42.0) again and again, and repeats its crash: each
    repeat is charged and counted valid (or failed) as the original was; the table says how many valid
    candidates are programs of their own, counted here from candidates.jsonl's code."""
    from coevolve.report.rendering import _run_rows

    class RepeatingEngine(FakeEngine):
        def chat(self, conversations, sampling, seeds=None, constraints=None):
            out = super().chat(conversations, sampling, seeds, constraints)
            for completion in out[::2]:
                completion.text = "{same}\n```python\ndef heuristic(x):\n    SCORE = 42.0\n    return SCORE\n```"
            return out

    summary, *_ = run(tmp_path / "r", make_config("sample", 24, context={"fingerprint": False}),
                      engine=RepeatingEngine())
    candidates = read_jsonl(tmp_path / "r" / "candidates.jsonl")
    valid_codes = [c["code"] for c in candidates if c["objective"] is not None]
    repeats = len(candidates) - len({c["code"] for c in candidates if c["code"] is not None}) - sum(
        c["code"] is None for c in candidates)
    assert len(valid_codes) > len(set(valid_codes)) and repeats > 0  # the run has what this checks
    assert summary.valid == len(valid_codes) and summary.distinct_valid == len(set(valid_codes))
    table = dict(_run_rows(summary, tmp_path / "r", None))  # run_table's rows (no starting point to look up)
    distinct = len(set(valid_codes))
    repeats_valid = len(valid_codes) - distinct
    assert table["valid"].endswith(f"; {distinct} distinct program{'s' * (distinct != 1)}, "
                                   f"{repeats_valid} repeat{'s' * (repeats_valid != 1)}")
    assert table["repeated code"].startswith(f"{repeats} of 24 evaluations repeated")
    # the repeated crash is the commonest failure, counted with its repeats as the failures row counts it
    crashes = [c for c in candidates if c["failure"] is not None]
    assert summary.failures and table["commonest failures"].endswith(f"({len(crashes)})") == (
        len({c["message"].strip().splitlines()[-1] for c in crashes}) == 1)
    # one repeat is said as one (it said `1 repeats`)
    summary.distinct_valid = summary.valid - 1
    assert dict(_run_rows(summary, tmp_path / "r", None))["valid"].endswith(
        f"; {summary.valid - 1} distinct programs, 1 repeat")
    # a run whose valid candidates are all different says nothing more
    summary.distinct_valid = summary.valid
    assert "distinct" not in dict(_run_rows(summary, tmp_path / "r", None))["valid"]


def test_a_prompt_too_long_for_the_engine_says_what_a_prompt_holds(tmp_path):
    from coevolve.engine.base import ContextLengthError

    class Overflowing(FakeEngine):
        after = 0  # calls answered before the prompts overflow

        def chat(self, conversations, sampling, seeds=None, constraints=None):
            if len(self.calls) >= self.after:
                raise ContextLengthError("a prompt of 2100 tokens does not fit the engine's context of 2048 "
                                         "tokens (request 0 of the call)", 0)
            return super().chat(conversations, sampling, seeds, constraints)

    with pytest.raises(ContextLengthError) as caught:  # the initial population's i1 prompts show no parents
        run(tmp_path / "r", make_config("eoh", 12), engine=Overflowing())
    assert str(caught.value).startswith("a prompt of 2100 tokens does not fit the engine's context of 2048 tokens "
                                        "(request 0 of the call): a fake prompt holds the task's description")
    assert "eoh.parents" not in str(caught.value) and "context.failure_chars" in str(caught.value)
    later = Overflowing()
    later.after = 1  # an e1 step: its prompts show parents, and fewer of them is advice
    with pytest.raises(ContextLengthError) as caught:
        run(tmp_path / "r2", make_config("eoh", 12), engine=later)
    assert "each parent's code and evaluation" in str(caught.value) and "eoh.parents" in str(caught.value)


# -- failures and repair ----------------------------------------------------------------------
def test_a_failure_reaches_the_next_prompt_fenced_with_its_failing_line():
    failed = Candidate(id=3, step=0, operator="i1", parents=[], model_state={"kind": "base"},
                       code="def heuristic(x):\n    y = 1 / 0\n    return y\n", failure="exception",
                       message='Traceback (most recent call last):\n  File "<candidate>", line 2, in heuristic\n'
                               "ZeroDivisionError: division by zero\x1b[2J")
    report = describe_failure(failed, 300)
    assert report.startswith("exception:") and "ZeroDivisionError: division by zero" in report
    assert "failing line: y = 1 / 0" in report and "\x1b" not in report
    assert all(line.startswith("│") for line in report.splitlines()[1:])  # fenced: data, not instructions


def test_prompts_carry_recent_failures_and_repair_requests_carry_their_parent(tmp_path):
    engine = RecordingEngine()
    config = make_config("eoh", 30, eoh={"population": 4, "offspring": 3, "operators": ["e1", "m1", "repair"]})
    summary, *_ = run(tmp_path / "r", config, engine=engine)
    candidates = read_jsonl(tmp_path / "r" / "candidates.jsonl")
    later = [user for _, user, _ in engine.seen[3:]]
    assert any("Recent attempts that failed" in u and "ValueError: boom" in u for u in later)
    repairs = [c for c in candidates if c["operator"] == "repair"]
    assert repairs and summary.context["repair_requests"] == len(repairs)
    by_id = {c["id"]: c for c in candidates}
    assert all(not by_id[c["parents"][0]]["objective"] and by_id[c["parents"][0]]["code"] for c in repairs)
    assert any("Heuristic that failed" in u and "Its error (exception" in u for u in later)
    assert summary.evaluations == 30


def test_failures_are_off_in_the_prompt_when_the_context_says_so(tmp_path):
    engine = RecordingEngine()
    run(tmp_path / "r", make_config("sample", 12, context={"failures": False}), engine=engine)
    assert not any("Recent attempts that failed" in u for _, u, _ in engine.seen)


# -- the answer's shape -----------------------------------------------------------------------------
def test_every_request_is_decoded_under_the_signature_pattern_and_the_prompt_states_it(tmp_path):
    engine = RecordingEngine()
    summary, *_ = run(tmp_path / "r", make_config("eoh+esopt", 20), engine=engine)
    signature, _ = template_signature(TEMPLATE, "heuristic")
    assert signature == "def heuristic(x):"
    assert {c for *_, c in engine.seen} == {answer_pattern(signature)}
    assert all(f"must start with exactly: {signature}" in u for _, u, _ in engine.seen)
    assert summary.context["constrain"] == "on"
    free = RecordingEngine()
    summary, *_ = run(tmp_path / "free", make_config("sample", 8, context={"constrain": False}), engine=free)
    assert {c for *_, c in free.seen} == {None} and summary.context["constrain"] == "off"


def test_a_signature_no_pattern_can_force_falls_back_to_free_decoding_recorded(tmp_path):
    class SplitSignature(FakeTask):
        template = 'def heuristic(\n    x,\n):\n    """Return a score."""\n    SCORE = 50.0\n    return SCORE\n'

    engine = RecordingEngine()
    summary, *_ = run(tmp_path / "r", make_config("sample", 8), engine=engine, task=SplitSignature())
    assert {c for *_, c in engine.seen} == {None}
    assert summary.context["constrain"].startswith("off: the template's def line spans several lines")


def test_the_parser_records_what_it_repaired():
    no_fence = extract("def other(x):\n    return 1\n", "heuristic", TEMPLATE)
    assert no_fence.repairs == ("no fence", "renamed other to heuristic")
    clean = extract("{idea here now}\n```python\ndef heuristic(x):\n    return 1\n```", "heuristic", TEMPLATE)
    assert clean.repairs == ()


def test_every_request_is_kept_as_sent_and_a_repeated_prompt_only_by_its_digest(tmp_path):
    import hashlib

    engine = RecordingEngine()
    summary, *_ = run(tmp_path / "r", make_config("eoh", 12), engine=engine)
    records = read_jsonl(tmp_path / "r" / "prompts.jsonl")
    assert len(records) == len(engine.seen) == summary.ledger.llm_requests  # no re-asks here
    full = {r["sha256"]: r["messages"] for r in records if "messages" in r}
    for record, (system, user, _) in zip(records, engine.seen):
        messages = full[record["sha256"]]
        assert [m["content"] for m in messages] == [system, user]
        assert hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest() == record["sha256"]
    assert len(full) == len({r["sha256"] for r in records}) < len(records)  # i1's batch shares one prompt
    steps = [(r["step"], r["slot"]) for r in records]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    run(tmp_path / "off", make_config("eoh", 12, log={"prompts": False}), engine=RecordingEngine())
    assert not (tmp_path / "off" / "prompts.jsonl").exists()


def test_the_skill_analysts_prompts_are_kept_beside_the_proposals_marked_as_analysts(tmp_path):
    engine = RecordingEngine()
    run(tmp_path / "r", make_config("eoh+trace2skill", 20, skill={"every": 2, "analysts": 2}), engine=engine)
    records = read_jsonl(tmp_path / "r" / "prompts.jsonl")
    full = {r["sha256"]: r["messages"] for r in records if "messages" in r}
    events = read_jsonl(tmp_path / "r" / "events.jsonl")
    refreshes = {e["step"]: len(e["requests"]) for e in events if e["type"] == "step" and e["operator"] == "distill"}
    analysts = [r for r in records if r.get("analyst")]
    assert refreshes and sorted((r["step"], r["slot"]) for r in analysts) == [
        (step, slot) for step, n in sorted(refreshes.items()) for slot in range(n)]
    # each as the teacher received it, in the order it was asked
    sent = [(system, user) for system, user, _ in engine.seen if "analyst" in system]
    assert [tuple(m["content"] for m in full[r["sha256"]]) for r in analysts] == sent
    assert not any(r["step"] in refreshes for r in records if not r.get("analyst"))


def test_a_run_scored_under_several_seeds_says_so_in_its_table(tmp_path):
    from coevolve.report.rendering import context_rows

    summary, *_ = run(tmp_path / "r", make_config("eoh", 12, sandbox={"seeds": 3}), engine=RecordingEngine())
    assert summary.context["scoring_seeds"] == 3
    assert dict(context_rows(summary.context, None))["scoring"] == (
        "each program under 3 seeds of its random generators, the mean kept; one failing seed fails it "
        "([sandbox] seeds)")
    plain, *_ = run(tmp_path / "p", make_config("eoh", 12), engine=RecordingEngine())
    assert "scoring" not in dict(context_rows(plain.context, None))


def test_a_reasoning_block_is_not_taken_for_the_answer():
    """A reasoning model's <think> draft (servers without a reasoning parser send it in the reply) is left
    out: the code after it is the answer; a block never closed was cut off mid-thought, so nothing is."""
    draft = "<think>\nMaybe:\n```python\ndef heuristic(x):\n    return 0\n```\nNo, better:\n</think>\n"
    answer = extract(draft + "{idea here now}\n```python\ndef heuristic(x):\n    return 7\n```", "heuristic",
                     TEMPLATE)
    assert "return 7" in answer.code and "return 0" not in answer.code
    assert answer.repairs == ("reasoning dropped",) and answer.idea == "idea here now"
    assert extract("<think>\nFirst ```python\ndef heuristic(x):\n    return 0\n", "heuristic", TEMPLATE) is None


class CutOffEngine(FakeEngine):
    """Every reply ends at max_tokens, as an engine reports it; a valid program's last line is cut to half."""

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        out = super().chat(conversations, sampling, seeds, constraints)
        for c in out:
            c.finish_reason = "length"
            c.text = c.text.removesuffix("\n```")[:-4]  # "return SCORE" -> "return SC", fence unclosed
        return out


def test_a_reply_cut_off_at_max_tokens_says_so_in_the_candidate_the_prompt_and_the_table(tmp_path):
    from coevolve.codeparse import CUT_OFF, NO_CODE_CUT_OFF
    from coevolve.report.rendering import context_rows

    summary, *_ = run(tmp_path / "r", make_config("sample", 8, sampling={"max_tokens": 99}), engine=CutOffEngine())
    candidates = read_jsonl(tmp_path / "r" / "candidates.jsonl")
    assert all(c["message"] == NO_CODE_CUT_OFF for c in candidates if c["failure"] == "parse")
    assert all(CUT_OFF in c["repairs"] for c in candidates if c["failure"] != "parse")
    # the cut line was dropped and the rest scored: the parser keeps what parses of a cut-off program
    assert any(c["objective"] is not None and "return SC" not in c["code"] for c in candidates)
    cut = summary.context["cut_off"]
    assert cut == {"replies": 8, "valid": sum(c["objective"] is not None for c in candidates), "max_tokens": 99}
    assert CUT_OFF not in summary.context["parser_repairs"]
    row = dict(context_rows(summary.context, summary.stopped))["cut off"]
    assert row.startswith("8 replies ended at sampling.max_tokens = 99 (") and "raise it" in row
    failed = Candidate(id=3, step=0, operator="i1", parents=[], model_state={"kind": "base"}, failure="parse",
                       message=NO_CODE_CUT_OFF)
    assert "ran out of room before its ```python block ended" in describe_failure(failed, 300)


# -- trace2skill ------------------------------------------------------------------------------------------
def test_trace2skill_refreshes_are_planned_charged_versioned_injected_and_resumed(tmp_path):
    config = make_config("eoh+esopt+trace2skill", 30, skill={"every": 2, "analysts": 2})
    plan = run_plan(config)
    assert plan["skill_refreshes"] >= 2 and "skill refreshes" in format_plan(plan)
    engine = RecordingEngine()
    full, *_ = run(tmp_path / "full", config, engine=engine)
    versions = full.context["skill_versions"]
    assert len(versions) == plan["skill_refreshes"]
    assert full.ledger.outcomes["distill"] == plan["distill_requests"]
    assert full.evaluations == 30 == sum(full.ledger.outcomes.values())
    texts = [(tmp_path / "full" / v["path"]).read_text() for v in versions]
    assert all("## Contract" in t and "def heuristic(x)" in t for t in texts)
    # after a refresh every operator prompt carries the skill's sections
    first = outline(parse_skill_text(texts[0]))
    assert "## Contract" in first and any(first in system for system, _, _ in engine.seen)
    assert not any("## Contract" in system for system, _, _ in engine.seen[:3])  # none before the first
    # killed after the first refresh: the resumed run rebuilds the same versions and result
    events = read_jsonl(tmp_path / "full" / "events.jsonl")
    cut = next(i for i, e in enumerate(events) if e.get("operator") == "distill") + 2
    d = cut_run(tmp_path / "full", tmp_path / "killed", events[:cut])
    history = read_jsonl(tmp_path / "full" / "history.jsonl")
    generations = sum(1 for e in events[:cut] if e.get("es"))
    (d / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history[:generations]))
    resumed, *_ = run(d, config, resume=True)
    assert resumed == read_summary(tmp_path / "full" / "summary.json")
    assert [(d / v["path"]).read_text() for v in resumed.context["skill_versions"]] == texts


def test_a_run_killed_under_older_skill_wording_resumes_with_the_version_it_logged(tmp_path):
    """A +trace2skill run killed under code whose skill text read otherwise (s51 changed the intro line)
    refused --resume ("rebuilds another skill than it logged"), losing the run: its prompts showed the
    logged version, so the run goes on with that one."""
    config = make_config("eoh+trace2skill", 30, skill={"every": 2, "analysts": 2})
    run(tmp_path / "full", config)
    events = read_jsonl(tmp_path / "full" / "events.jsonl")
    cut = next(i for i, e in enumerate(events) if e.get("operator") == "distill") + 1
    logged = events[cut - 1]["skill"]["text"]
    older = logged.replace("\nFrom ", "\nDistilled from ", 1)  # the wording before s51
    assert older != logged
    events[cut - 1] = {**events[cut - 1], "skill": {**events[cut - 1]["skill"], "text": older}}
    d = cut_run(tmp_path / "full", tmp_path / "killed", events[:cut])
    resumed, *_ = run(d, config, resume=True)
    assert resumed.evaluations == 30
    first = resumed.context["skill_versions"][0]
    assert (d / first["path"]).read_text() == older


# -- a starting skill (skill.start) -------------------------------------------------------------------------------
START_RULE = "Keep SCORE a plain float constant below 50."


def start_folder(tmp_path, name="tsp-hints", body=None):
    from coevolve.base.skills import write_skill

    return write_skill(tmp_path / name, "Hints for the fake task.",
                       body or f"# Hints\n\n## Ideas\n- {START_RULE}\n- Return SCORE.\n").path


def test_a_starting_skill_is_shown_from_the_first_request_patched_by_refreshes_and_resumed_from_the_log(tmp_path):
    folder = start_folder(tmp_path)
    config = make_config("eoh+trace2skill", 20, skill={"every": 2, "analysts": 2, "start": str(folder)})
    engine = RecordingEngine()
    full, *_ = run(tmp_path / "full", config, engine=engine)
    # in every proposal's system prompt from the first request on; the analysts see it in theirs
    proposals = [(system, user) for system, user, _ in engine.seen if "analyst" not in system]
    assert len(proposals) < len(engine.seen) and all(START_RULE in system for system, _ in proposals)
    assert all(START_RULE in user for system, user, _ in engine.seen if "analyst" in system)
    start = full.context["skill_start"]
    assert start == {"source": str(folder), "name": "tsp-hints", "rules": 2,
                     "path": "skills/v000/tsp-hints/SKILL.md"}
    assert (tmp_path / "full" / start["path"]).read_text() == (folder / "SKILL.md").read_text()
    first = full.context["skill_versions"][0]
    assert first["version"] == 1 and START_RULE in (tmp_path / "full" / first["path"]).read_text()  # patched
    from coevolve.report.rendering import context_rows

    assert dict(context_rows(full.context, None))["starting skill"].startswith("tsp-hints (2 rules) from ")
    events = read_jsonl(tmp_path / "full" / "events.jsonl")
    assert [e["type"] for e in events[:2]] == ["start", "skill_start"]
    # killed after two steps, the folder then edited: the resume shows the text the run began with
    d = tmp_path / "killed"
    d.mkdir()
    (d / "config.toml").write_text((tmp_path / "full" / "config.toml").read_text())
    cut = next(i for i, e in enumerate(events) if e.get("type") == "step" and e["step"] == 1) + 1
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:cut]))
    (folder / "SKILL.md").write_text((folder / "SKILL.md").read_text().replace(START_RULE, "Return 0."))
    again = RecordingEngine()
    resumed, *_ = run(d, config, engine=again, resume=True)
    assert resumed == full and again.seen
    assert all(START_RULE in system for system, _, _ in again.seen if "analyst" not in system)
    # without one, nothing of it
    plain, *_ = run(tmp_path / "plain", make_config("sample", 8))
    assert plain.context["skill_start"] is None and "starting skill" not in dict(context_rows(plain.context, None))


def test_starting_programs_seed_the_archive_free_are_parents_and_resume_without_their_files(tmp_path):
    """[start] programs: each file's program is scored before the first step (the ledger's `seeded`, never
    in T), enters the archive as candidate -1, -2, ..., is shown as a parent, and is logged with its code:
    a killed run resumes to the same summary after the files are gone."""
    from coevolve.report.rendering import context_rows

    good, crash = tmp_path / "good.py", tmp_path / "crash.py"
    good.write_text("# an earlier run's best\n\ndef heuristic(x):\n    SCORE = 3.5\n    return SCORE\n")
    crash.write_text("def heuristic(x):\n    raise ValueError('no')\n")
    config = make_config("eoh", 12, start={"programs": [str(good), str(crash)]})
    engine = RecordingEngine()
    full, _, evaluator = run(tmp_path / "full", config, engine=engine)
    assert full.evaluations == 12 == full.ledger.used and full.ledger.seeded == 2
    assert full.context["start_programs"] == [
        {"id": -1, "path": str(good), "objective": 3.5, "failure": None},
        {"id": -2, "path": str(crash), "objective": None, "failure": "exception"}]
    row = dict(context_rows(full.context, None))["starting programs"]
    assert row == "2 seeded, not charged: good.py (candidate -1) 3.5; crash.py (candidate -2) failed (exception)"
    candidates = read_jsonl(tmp_path / "full" / "candidates.jsonl")
    assert any(-1 in c["parents"] for c in candidates)  # the valid one is a parent from the first e-step
    assert any("SCORE = 3.5" in user for _, user, _ in engine.seen)
    assert not any(-2 in c["parents"] for c in candidates if c["operator"] != "repair")  # not admitted
    events = read_jsonl(tmp_path / "full" / "events.jsonl")
    seeds = [e for e in events if e["type"] == "seed"]
    assert [(e["id"], e["path"]) for e in seeds] == [(-1, str(good)), (-2, str(crash))]
    assert "SCORE = 3.5" in seeds[0]["code"]
    graph = json.loads((tmp_path / "full" / "genealogy.json").read_text())
    assert {-1, -2} <= {node["id"] for node in graph["nodes"]}
    # killed after its first step, the files gone: the resume reads the programs from the log
    cut = next(i for i, e in enumerate(events) if e["type"] == "step") + 1
    d = cut_run(tmp_path / "full", tmp_path / "killed", events[:cut])
    good.unlink()
    crash.unlink()
    resumed, _, again = run(d, config, resume=True)
    assert resumed == full and again.evaluated < evaluator.evaluated  # the seeds were not scored again
    # a file that is gone before a run starts: one line naming the key
    with pytest.raises(UsageError, match=r"^config error: start.programs\[0\]: cannot read .*good.py: No such file"):
        run(tmp_path / "gone", config)


class MeasuringEngine(RecordingEngine):
    """Measures prompts as a real engine does (`prompt_lengths`); here a prompt that shows a failure report or
    the starting skill is past any context, every other one short."""

    def prompt_lengths(self, conversations):
        return [10_000 if any("Recent attempts that failed" in m["content"] or START_RULE in m["content"]
                              for m in c) else 10 for c in conversations]


def test_a_prompt_too_long_for_the_context_leaves_parts_out_until_it_fits_and_resumes_the_same(tmp_path):
    """LEAN: the failure report goes first, then the parents' notes, then the skill: a prompt that showed both
    is sent at level 3, recorded per request and counted; the others are sent untouched; a killed run resumes
    to the same summary."""
    from coevolve.report.rendering import context_rows

    config = make_config("eoh", 20, skill={"start": str(start_folder(tmp_path))})
    engine = MeasuringEngine()
    full, *_ = run(tmp_path / "full", config, engine=engine)
    assert engine.seen and not any(START_RULE in system or "Recent attempts that failed" in user
                                   for system, user, _ in engine.seen)
    requests = [r for e in read_jsonl(tmp_path / "full" / "events.jsonl") if e["type"] == "step" for r in e["requests"]]
    assert {r.get("lean", 0) for r in requests} == {3}  # every prompt showed the starting skill
    assert all(r["skill"] is None for r in requests)  # and each says it showed none
    assert full.context["leaned"] == {"requests": len(requests), "max_len": 2048, "refused": 0}
    row = dict(context_rows(full.context, None))["prompts shortened"]
    assert row.startswith(f"{len(requests)} requests left parts out to fit [model] max_len = 2048 (")
    events = read_jsonl(tmp_path / "full" / "events.jsonl")
    cut = next(i for i, e in enumerate(events) if e["type"] == "step" and e["step"] == 1) + 1
    resumed, *_ = run(cut_run(tmp_path / "full", tmp_path / "killed", events[:cut]), config,
                      engine=MeasuringEngine(), resume=True)
    assert resumed == full
    # without the skill only the prompts that show a failure are too long: they leave out just that
    only = MeasuringEngine()
    run(tmp_path / "failures", make_config("eoh", 20), engine=only)
    levels = [r.get("lean", 0) for e in read_jsonl(tmp_path / "failures" / "events.jsonl") if e["type"] == "step"
              for r in e["requests"]]
    assert set(levels) == {0, 1} and not any("Recent attempts that failed" in user for _, user, _ in only.seen)
    # an engine that measures nothing (an endpoint, a pool) sends prompts as they are
    plain = RecordingEngine()
    untouched, *_ = run(tmp_path / "plain", config, engine=plain)
    assert all(START_RULE in system for system, _, _ in plain.seen) and untouched.context["leaned"]["requests"] == 0


class NarrowEndpoint(RecordingEngine):
    """An endpoint whose model refuses, as a server does (HTTP 400), each prompt that shows a failure report or
    the starting skill: the call ends in ContextLengthError holding the other requests' replies
    (coevolve/engine/openai_client.py; tests/test_serving.py asks a real server)."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0
        self.refusals: list[tuple[int, str]] = []  # (seed, prompt) of each refused request

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        from coevolve.engine.base import ContextLengthError

        too_long = [any("Recent attempts that failed" in m["content"] or START_RULE in m["content"] for m in c)
                    for c in conversations]
        fitting = [c for c, long in zip(conversations, too_long) if not long]
        answered = iter(super().chat(fitting, sampling, [s for s, long in zip(seeds, too_long) if not long],
                                     None if constraints is None else [p for p, long in zip(constraints, too_long)
                                                                       if not long]) if fitting else [])
        replies = [None if long else next(answered) for long in too_long]
        if not any(too_long):
            return replies
        self.refused += sum(too_long)
        self.refusals += [(s, json.dumps(c)) for s, c, long in zip(seeds, conversations, too_long) if long]
        raise ContextLengthError("http://127.0.0.1:9/v1 refused a prompt longer than its model's context",
                                 too_long.index(True), replies=replies)


def test_an_endpoints_refused_prompts_are_leaned_and_asked_again_alone(tmp_path):
    """An endpoint's tokenizer is not ours to measure: a prompt its model refuses is leaned one LEAN part more and
    asked again alone, the others' replies kept; recorded, counted and resumed as the engine's leaned requests."""
    endpoint = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    config = make_config("eoh", 20, skill={"start": str(start_folder(tmp_path))}, endpoint=endpoint)
    served = NarrowEndpoint()
    full, *_ = run(tmp_path / "full", config, endpoint=served)
    assert served.seen and served.refused and not any(START_RULE in system or "Recent attempts that failed" in user
                                                      for system, user, _ in served.seen)
    events = read_jsonl(tmp_path / "full" / "events.jsonl")
    requests = [r for e in events if e["type"] == "step" for r in e["requests"]]
    assert {r.get("lean", 0) for r in requests} == {3}  # every prompt showed the starting skill
    assert full.context["leaned"]["requests"] == len(requests) == full.ledger.used
    assert full.context["leaned"]["refused"] == served.refused
    from coevolve.report.rendering import context_rows

    row = dict(context_rows(full.context, None))["prompts shortened"]
    assert row.startswith(f"{len(requests)} requests left parts out to fit [model] max_len = 2048 or the endpoint "
                          f"model's context (which refused {served.refused} prompts) (")
    # the refusals reached the endpoint and count as requests; each leaned prompt differs from the one refused
    # before it (a part the prompt does not show is skipped, not sent again to be refused again)
    assert served.refused >= len(requests) and full.ledger.llm_requests == len(requests) + served.refused
    assert len(set(served.refusals)) == len(served.refusals)
    prompts = [r for r in read_jsonl(tmp_path / "full" / "prompts.jsonl") if "messages" in r]
    assert prompts and not any(START_RULE in m["content"] for r in prompts for m in r["messages"])
    cut = next(i for i, e in enumerate(events) if e["type"] == "step" and e["step"] == 1) + 1
    resumed, *_ = run(cut_run(tmp_path / "full", tmp_path / "killed", events[:cut]), config,
                      endpoint=NarrowEndpoint(), resume=True)
    assert resumed == full
    # only the prompts that show a failure are refused without the skill; the rest go once, untouched
    only = NarrowEndpoint()
    run(tmp_path / "failures", make_config("eoh", 20, endpoint=endpoint), endpoint=only)
    levels = [r.get("lean", 0) for e in read_jsonl(tmp_path / "failures" / "events.jsonl") if e["type"] == "step"
              for r in e["requests"]]
    assert set(levels) == {0, 1} and only.refused == levels.count(1)
    # a prompt refused with every part left out stops the run, saying what a prompt holds
    class Closed(NarrowEndpoint):
        def chat(self, conversations, sampling, seeds=None, constraints=None):
            from coevolve.engine.base import ContextLengthError
            raise ContextLengthError("http://127.0.0.1:9/v1 refused a prompt longer than its model's context", 0,
                                     replies=[None] * len(conversations))

    with pytest.raises(UsageError, match="refused a prompt longer than its model's context: a fake prompt holds"):
        run(tmp_path / "closed", make_config("eoh", 20, endpoint=endpoint), endpoint=Closed())


def test_a_bad_starting_skill_is_one_line_naming_skill_start_before_any_run_directory(tmp_path, monkeypatch, capsys):
    from coevolve.cli import main
    from coevolve.commands.run import load_run_config

    (tmp_path / "empty").mkdir()
    start_folder(tmp_path, "prose", "# Hints\n\nWrite short programs that return a constant.\n")
    cases = {"missing": "missing: not found (a skill is a folder holding a SKILL.md)",
             "empty": "no SKILL.md in this skill folder",
             "prose": "skill.start has no rules the prompts can show"}
    monkeypatch.chdir(tmp_path)
    for folder, message in cases.items():
        config = tmp_path / "c.toml"
        config.write_text(f'[run]\nmethod = "sample"\nbudget = 4\n[skill]\nstart = "{folder}"\n'
                          '[model]\npath = "/nonexistent/model"\n')
        assert main(["run", str(config), "--out", "r", "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and message in err, (folder, err)
        assert not (tmp_path / "r").exists()
    # a relative folder counts from the TOML's folder, and the run's config names it absolutely
    start_folder(tmp_path / "conf", "hints")
    (tmp_path / "conf" / "c.toml").write_text('[run]\nmethod = "sample"\n[skill]\nstart = "hints"\n')
    assert load_run_config(tmp_path / "conf" / "c.toml", {}).skill.start == str((tmp_path / "conf" / "hints").resolve())
    # --skill counts from the working directory, over the TOML's
    flag = load_run_config(tmp_path / "conf" / "c.toml", {"skill": {"start": "conf"}})
    assert flag.skill.start == str((tmp_path / "conf").resolve())
    assert main(["run", str(tmp_path / "conf" / "c.toml"), "--skill", "nowhere", "--out", "r2"]) == 2
    assert "skill.start is not a valid skill: " in capsys.readouterr().err and not (tmp_path / "r2").exists()
    assert main(["run", str(ROOT / "examples" / "sudoku_esopt.toml"), "--skill", "conf", "--out", "r2"]) == 2
    assert "--skill is for heuristic runs" in capsys.readouterr().err
    # --plan says what the run starts from and what may end it early
    with open(tmp_path / "conf" / "c.toml", "a") as config:
        config.write("[caps]\ntarget = 6.5\npatience = 3\n")
    assert main(["run", str(tmp_path / "conf" / "c.toml"), "--plan"]) == 0
    out = capsys.readouterr().out
    assert f"  every prompt shows the skill {(tmp_path / 'conf' / 'hints').resolve()} (skill.start)\n" in out
    assert out.endswith("  may stop early, before a step, at: target 6.5, patience 3\n")
    assert not (tmp_path / "r2").exists()


# -- judged skill versions (skill.keep = "judged") --------------------------------------------------------------
class SkillSensitiveEngine(RecordingEngine):
    """Answers a proposal with a valid program, each better than the last, when its system prompt holds
    `helps`, and with prose when it holds `hurts`; otherwise as the fake engine does."""

    def __init__(self, helps: str = "", hurts: str = "") -> None:
        super().__init__()
        self.helps, self.hurts, self.written = helps, hurts, 0

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        out = super().chat(conversations, sampling, seeds, constraints)
        for i, c in enumerate(conversations):
            system = c[0]["content"]
            if "analyst" in system:
                continue
            if self.helps and self.helps in system:
                self.written += 1
                text = f"{{better}}\n```python\ndef heuristic(x):\n    SCORE = {40 - self.written * 0.5}\n    return SCORE\n```"
                out[i] = type(out[i])(text=text, prompt_tokens=1, completion_tokens=1)
            elif self.hurts and self.hurts in system:
                out[i] = type(out[i])(text="No code today.", prompt_tokens=1, completion_tokens=1)
        return out


def test_a_judged_starting_skill_is_shown_to_every_other_request_and_kept_when_its_children_do_better(tmp_path):
    from coevolve.report.rendering import context_rows

    folder = start_folder(tmp_path)
    config = make_config("sample", 16, skill={"start": str(folder), "keep": "judged"})
    engine = SkillSensitiveEngine(helps=START_RULE)
    summary, *_ = run(tmp_path / "r", config, engine=engine)
    lines = read_jsonl(tmp_path / "r" / "candidates.jsonl")
    # requests alternate by evaluation number: odd ones show the version on trial (v000), even ones none
    assert [c.get("skill_version") for c in lines] == [0 if c["id"] % 2 else None for c in lines]
    assert all(("skill_version" in c) == bool(c["id"] % 2) for c in lines)  # no key: no skill shown
    shown = [system for system, _, _ in engine.seen]
    assert sum(START_RULE in s for s in shown) == 8 == len(shown) - 8
    assert all(c["objective"] is not None for c in lines if c["id"] % 2)  # the fake writes a valid program
    (trial,) = summary.context["skill_trials"]
    unskilled = [c for c in lines if not c["id"] % 2]
    assert trial == {"step": lines[-1]["step"], "since": -1, "incumbent": None, "challenger": 0, "kept": 0,
                     # sample's requests have no parents: a success is a program that scored
                     "children": {"challenger": {"candidates": 8, "valid": 8, "improved": 8},
                                  "incumbent": {"candidates": 8, "valid": sum(c["objective"] is not None
                                                                              for c in unskilled),
                                                "improved": sum(c["objective"] is not None for c in unskilled)}},
                     "interval": trial["interval"], "distinct": True, "final": True}
    row = dict(context_rows(summary.context, None))["skill trial"]
    assert row.startswith("v000 on trial, v000 ahead at the end (no refresh): v000 improved 8/8 (valid 8); no skill ")
    assert row.endswith("; told apart")


def test_under_a_judged_trial_an_es_generation_shows_one_version_to_all_its_members(tmp_path):
    """ES z-scores its members' rewards against each other, so they differ only in weights: every
    member of a generation sees the same version; generations alternate (the first: the one on trial),
    and base-weight requests still alternate by evaluation number."""
    folder = start_folder(tmp_path)
    config = make_config("sample+esopt", 36, skill={"start": str(folder), "keep": "judged"},
                         sample={"batch": 6, "population": 4}, es={"population": 3})
    summary, *_ = run(tmp_path / "r", config, engine=SkillSensitiveEngine(helps=START_RULE))
    lines = read_jsonl(tmp_path / "r" / "candidates.jsonl")
    generations: dict[int, set] = {}
    for c in lines:
        if c["model_state"]["kind"] == "perturbed":
            generations.setdefault(c["model_state"]["es_generation"], set()).add(c.get("skill_version"))
        else:
            assert c.get("skill_version") == (0 if c["id"] % 2 else None)
    assert len(generations) >= 2 and summary.es.updates == len(generations)
    assert [generations[g] for g in sorted(generations)] == [{0} if g % 2 == 0 else {None} for g in sorted(generations)]


def test_a_judged_refresh_drops_a_version_whose_children_did_worse_patches_the_one_kept_and_resumes(tmp_path):
    from coevolve.report.rendering import context_rows

    # every skill hurts: a prompt showing one (its Contract section) gets prose back
    config = make_config("eoh+trace2skill", 30, skill={"every": 2, "analysts": 2, "keep": "judged"})
    full, *_ = run(tmp_path / "full", config, engine=SkillSensitiveEngine(hurts="## Contract"))
    lines = read_jsonl(tmp_path / "full" / "candidates.jsonl")
    versions, trials = full.context["skill_versions"], full.context["skill_trials"]
    assert len(versions) >= 2 and trials
    for version, trial in zip(versions[1:], trials):  # each refresh judged the version before it first
        assert trial["challenger"] == version["version"] - 1 and trial["step"] == version["step"]
        assert trial["kept"] is None and version["patched"] is None  # dropped: the next patches no skill again
        children = trial["children"]
        mine = [c for c in lines if trial["since"] < c["step"] < trial["step"]]
        assert children["challenger"]["candidates"] == sum(c.get("skill_version") == trial["challenger"] for c in mine)
        assert children["challenger"]["valid"] == 0 < children["incumbent"]["valid"]
        assert children["challenger"]["candidates"] + children["incumbent"]["candidates"] == len(mine)
    # before the first refresh no request shows a skill; after it, half of them do
    first = versions[0]["step"]
    assert all("skill_version" not in c for c in lines if c["step"] < first)
    later = [c for c in lines if c["step"] > first]
    assert {c.get("skill_version") for c in later} >= {None, 1}
    assert all(c["objective"] is None for c in later if "skill_version" in c)
    last = trials[-1]  # the last version, on trial when the run ended: judged as it stands
    assert last["final"] and last["challenger"] == versions[-1]["version"] and last["since"] == versions[-1]["step"]
    assert len(trials) == len(versions)
    rows = [value for name, value in context_rows(full.context, None) if name == "skill trial"]
    assert len(rows) == len(trials) and rows[0].startswith(f"v001 dropped, no skill stays at step {trials[0]['step']}:")
    assert last["kept"] is None  # the run's skill to carry on is the one ahead, not the latest
    assert dict(context_rows(full.context, None))["skill versions"].endswith("; ahead when the run ended: no skill")
    # killed after the first refresh's next step: the resumed run judges and patches the same
    events = read_jsonl(tmp_path / "full" / "events.jsonl")
    cut = next(i for i, e in enumerate(events) if e.get("operator") == "distill") + 2
    d = cut_run(tmp_path / "full", tmp_path / "killed", events[:cut])
    resumed, *_ = run(d, config, engine=SkillSensitiveEngine(hurts="## Contract"), resume=True)
    assert resumed == read_summary(tmp_path / "full" / "summary.json")
    assert read_jsonl(d / "candidates.jsonl") == lines
    # each request's version is in its step's log, and a replay that would show another is refused
    steps = [e for e in events[:cut] if e.get("type") == "step"]
    assert [r["skill"] for e in steps for r in e["requests"] if e["operator"] != "distill"] == [
        c.get("skill_version") for c in lines if c["step"] <= steps[-1]["step"]]
    last = json.loads(json.dumps(steps[-1]))
    last["requests"][0]["skill"] = 7
    tampered = cut_run(tmp_path / "full", tmp_path / "tampered", events[:cut - 1] + [last])
    with pytest.raises(ResumeError, match="does not replay the same requests"):
        run(tampered, config, engine=SkillSensitiveEngine(hurts="## Contract"), resume=True)
    # a log written before requests named their version replays as before
    stripped = [{**e, "requests": [{k: v for k, v in r.items() if k != "skill"} for r in e["requests"]]}
                if e.get("type") == "step" else e for e in events[:cut]]
    old = cut_run(tmp_path / "full", tmp_path / "old", stripped)
    assert run(old, config, engine=SkillSensitiveEngine(hurts="## Contract"), resume=True)[0] == resumed


def test_a_trial_keeps_the_challenger_only_when_its_children_did_better():
    from coevolve.search.skill import judge

    def child(id_, version, objective, parents=()):
        return Candidate(id=id_, step=3, operator="m1", parents=list(parents), model_state={"kind": "base"},
                         code="x", objective=objective, skill_version=version)

    parent = Candidate(id=1, step=1, operator="i1", parents=[], model_state={"kind": "base"}, code="x", objective=10.0)

    def kept(*children):
        return judge([parent, *children], None, 1, 2, "min")["kept"]

    # no success either side: the scored rate decides (0 of 2 against 2 of 3 scored): the incumbent stays
    assert kept(child(2, 1, None), child(3, 1, None), child(4, None, 12.0), child(5, None, 11.0),
                child(6, None, None)) is None
    # 1 of 2 beat its parent against 1 of 3: the challenger
    assert kept(child(2, 1, 9.0, [1]), child(3, 1, 12.0, [1]), child(4, None, 9.5, [1]), child(5, None, 11.0, [1]),
                child(6, None, 13.0, [1])) == 1
    # equal in both: the incumbent; no children of the challenger: the incumbent
    assert kept(child(2, 1, 9.0, [1]), child(3, None, 9.0, [1])) is None
    assert kept(child(2, None, 12.0, [1])) is None
    # children before the trial began (step <= since) and other versions' are not counted
    early = Candidate(id=7, step=2, operator="m1", parents=[1], model_state={"kind": "base"}, code="x",
                      objective=1.0, skill_version=1)
    trial = judge([parent, early, child(2, 0, 1.0, [1]), child(3, 1, 11.0, [1])], None, 1, 2, "min")
    assert trial["children"] == {"incumbent": {"candidates": 0, "valid": 0, "improved": 0},
                                 "challenger": {"candidates": 1, "valid": 1, "improved": 0}}


def test_the_requests_each_version_showed_are_counted_against_the_seeded_template_too():
    from coevolve.search.skill import shown_counts

    def line(id_, version, objective, parents=()):
        return Candidate(id=id_, step=1, operator="m1", parents=list(parents), model_state={"kind": "base"},
                         code="x", objective=objective, skill_version=version)

    lines = [line(1, None, 6.0), line(2, 1, 5.0, [0]), line(3, 1, 7.0, [1]), line(4, None, None, [1])]
    # parent 0 (the seeded template, not in candidates.jsonl) scored 4.0: candidate 2 did not beat it
    assert shown_counts(lines, "min", seed=4.0) == {None: {"candidates": 2, "valid": 1, "improved": 1},
                                                    1: {"candidates": 2, "valid": 2, "improved": 0}}
    # without the seed's score, a parent the file does not hold is no bar: 2 counts as a success
    assert shown_counts(lines, "min")[1] == {"candidates": 2, "valid": 2, "improved": 1}
    assert list(shown_counts(lines, "min")) == [None, 1]  # in order of first use


def test_skill_versions_alternate_under_trial_and_replace_under_latest():
    """The state the loop and the dashboard share: which version each evaluation shows, and what a
    verdict changes (versions known by number only, as the dashboard reads them from a log)."""
    from coevolve.search.skill_versions import SkillVersions

    judged = SkillVersions(judged=True)
    assert [judged.for_request(n) for n in range(3)] == [None, None, None]  # nothing on trial
    judged.add(0, None, -1)
    assert [judged.for_request(n) for n in range(4)] == [0, None, 0, None]  # even evaluations: the challenger
    judged.settle(None, {"kept": None})  # dropped: no skill stays current
    assert judged.current is None and judged.challenger is None and judged.trials == [{"kept": None}]
    judged.add(1, None, 5)
    assert (judged.challenger, judged.since, judged.for_request(7), judged.for_request(8)) == (1, 5, None, 1)
    latest = SkillVersions(judged=False)
    latest.add(1, None, 3)
    latest.add(2, None, 6)
    assert latest.current == 2 and latest.challenger is None and {latest.for_request(n) for n in range(4)} == {2}
    assert latest.standing([], 6, "min") is None and latest.judge([], 6, "min") is None


def test_judging_needs_a_skill_to_judge():
    from coevolve.base.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        make_config("eoh", 12, skill={"keep": "judged"})
    assert "skill.keep" in str(caught.value) and "+trace2skill method or skill.start" in str(caught.value)
    with pytest.raises(ConfigError, match="skill.keep"):
        make_config("eoh+trace2skill", 12, skill={"keep": "best"})
    judged = make_config("eoh+trace2skill", 30, skill={"keep": "judged", "every": 2, "analysts": 2})
    plan = run_plan(judged)
    steps = plan["steps"]
    first = next(i for i, s in enumerate(steps) if s["operator"] == "distill")
    before = sum(s["count"] for s in steps[:first])  # no skill yet: nothing on trial
    # one trial per refresh after the first, and the last version's at the end
    assert len(plan["skill_trials"]) == plan["skill_refreshes"]
    assert sum(plan["skill_trials"]) == 30 - plan["distill_requests"] - before
    assert "requests (half a side); " in format_plan(plan)  # no ES: an even split
    with_es = run_plan(make_config("eoh+esopt+trace2skill", 30, skill={"keep": "judged", "every": 2, "analysts": 2}))
    assert with_es["es_updates"] and "of them showing the version on trial: an ES generation's members all see one version" in format_plan(with_es)
    assert run_plan(make_config("eoh+trace2skill", 30, skill={"every": 2}))["skill_trials"] == []  # latest
    assert run_plan(make_config("sample", 16, skill={"keep": "judged", "start": "x"}))["skill_trials"] == [16]


# -- caps -------------------------------------------------------------------------------------------------------
def test_a_token_cap_stops_at_a_step_boundary_and_a_raised_cap_resumes_to_the_uncapped_result(tmp_path):
    config = make_config("eoh", 24)
    full, *_ = run(tmp_path / "full", config)
    capped = make_config("eoh", 24, caps={"completion_tokens": 40})
    stopped, *_ = run(tmp_path / "r", capped)
    assert stopped.stopped["cap"] == "completion_tokens" and stopped.evaluations < 24
    assert stopped.ledger.completion_tokens >= 40
    events = read_jsonl(tmp_path / "r" / "events.jsonl")
    assert events[-1]["type"] == "stop" and not any(e["type"] == "end" for e in events)
    # raise the cap in the run's config.toml (caps are not part of what must match) and resume
    (tmp_path / "r" / "config.toml").write_text(dump_toml(as_dict(config)))
    resumed, engine, _ = run(tmp_path / "r", config, resume=True)
    assert resumed.stopped is None
    assert resumed.model_dump(exclude={"context"}) == full.model_dump(exclude={"context"})


def test_a_wall_clock_cap_stops_the_run(tmp_path):
    summary, *_ = run(tmp_path / "r", make_config("eoh", 24, caps={"wall_s": 1e-9}))
    assert summary.stopped["cap"] == "wall_s" and summary.evaluations == 0


def test_a_money_cap_prices_endpoint_requests(tmp_path):
    config = make_config("sample", 12, endpoint={"base_url": "http://127.0.0.1:9/v1", "model": "m"},
                         caps={"money": 1e-4, "prices": {"m": [1.0, 2.0]}})
    summary, engine, _ = run(tmp_path / "r", config, endpoint=FakeEngine())
    assert summary.stopped["cap"] == "money" and summary.evaluations == 4  # one batch of 4, then over
    assert summary.context["spend"] == pytest.approx(summary.ledger.prompt_tokens * 1e-6
                                                        + summary.ledger.completion_tokens * 2e-6)


def test_a_run_with_no_engine_prices_its_analysts_too(tmp_path):
    """With the endpoint as the run's only generator, skill.teacher = "engine" asks the endpoint too: the
    analysts' replies are priced as the proposals' are (they once went unpriced)."""
    config = make_config("sample+trace2skill", 12, endpoint={"base_url": "http://127.0.0.1:9/v1", "model": "m"},
                         skill={"every": 2, "analysts": 2}, caps={"money": 1.0, "prices": {"m": [1.0, 2.0]}})
    served = FakeEngine()
    summary, *_ = run(tmp_path / "r", config, engine=served, endpoint=served)
    assert summary.ledger.outcomes["distill"] > 0
    assert summary.context["spend"] == pytest.approx(summary.ledger.prompt_tokens * 1e-6
                                                        + summary.ledger.completion_tokens * 2e-6)


class PickyTeacher(FakeEngine):
    """An endpoint whose model refuses (HTTP 400, too long) every second skill analyst's prompt of a call, or all
    of them: the proposals are answered."""

    def __init__(self, refuse_all: bool = False, engine: bool = False) -> None:
        super().__init__()
        self.refuse_all, self.engine, self.refused = refuse_all, engine, 0
        self.seen: set[int] = set()
        self.long: set[int] = set()  # the seeds of the analysts whose prompts are too long

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        from coevolve.engine.base import ContextLengthError

        # an analyst first asked second, fourth, ... of a call is too long, and stays so when the engine's
        # retry asks it again in a shorter call
        analyst = ["analyst" in c[0]["content"] for c in conversations]
        self.long.update(s for i, s in enumerate(seeds) if analyst[i] and i % 2 == 1 and s not in self.seen)
        self.seen.update(seeds)
        refused = [a and (self.refuse_all or s in self.long) for a, s in zip(analyst, seeds)]
        if self.engine and any(refused):  # the in-process engine refuses the whole call, naming the long ones
            self.refused += sum(refused)
            too_long = [i for i, r in enumerate(refused) if r]
            raise ContextLengthError.prompt(2100, 2048, too_long[0], too_long)
        replies = super().chat(conversations, sampling, seeds, constraints)
        if not any(refused):
            return replies
        self.refused += sum(refused)
        raise ContextLengthError("http://127.0.0.1:9/v1 refused a prompt longer than its model's context",
                                 refused.index(True), replies=[None if r else c for r, c in zip(refused, replies)])


def test_a_skill_analyst_the_endpoint_refuses_as_too_long_found_nothing_and_the_refresh_goes_on(tmp_path):
    config = make_config("sample+trace2skill", 12, endpoint={"base_url": "http://127.0.0.1:9/v1", "model": "m"},
                         skill={"every": 2, "analysts": 2, "teacher": "endpoint"})
    teacher = PickyTeacher()
    full, *_ = run(tmp_path / "r", config, engine=FakeEngine(), endpoint=teacher)
    events = read_jsonl(tmp_path / "r" / "events.jsonl")
    refreshes = [e for e in events if e["type"] == "step" and e["operator"] == "distill"]
    empty = [c for e in refreshes for c in e["completions"] if c["finish_reason"] == "context_length"]
    assert teacher.refused and len(empty) == teacher.refused and all(c["text"] == "" for c in empty)
    assert all(e["skill"] is not None for e in refreshes)  # each refresh wrote a version from the others
    assert full.ledger.outcomes["distill"] == sum(len(e["requests"]) for e in refreshes)  # charged as asked
    cut = next(i for i, e in enumerate(events) if e is refreshes[0]) + 1
    resumed, *_ = run(cut_run(tmp_path / "r", tmp_path / "killed", events[:cut]), config, engine=FakeEngine(),
                      endpoint=PickyTeacher(), resume=True)
    assert resumed == full
    with pytest.raises(UsageError, match="every skill analyst's prompt was refused"):
        run(tmp_path / "all", config, engine=FakeEngine(), endpoint=PickyTeacher(refuse_all=True))


def test_a_skill_analyst_the_in_process_engine_refuses_as_too_long_found_nothing_and_the_refresh_goes_on(tmp_path):
    """The engine refuses a whole call, naming every prompt too long for it: the analysts are asked again
    without those (each with its own seed), which found nothing, as an endpoint's refused ones did."""
    config = make_config("sample+trace2skill", 12, skill={"every": 2, "analysts": 2})
    engine = PickyTeacher(engine=True)
    full, *_ = run(tmp_path / "r", config, engine=engine)
    events = read_jsonl(tmp_path / "r" / "events.jsonl")
    refreshes = [e for e in events if e["type"] == "step" and e["operator"] == "distill"]
    empty = [c for e in refreshes for c in e["completions"] if c["finish_reason"] == "context_length"]
    assert engine.refused and len(empty) == engine.refused and all(c["text"] == "" for c in empty)
    answered = [c for e in refreshes for c in e["completions"] if c["finish_reason"] != "context_length"]
    assert answered and all(e["skill"] is not None for e in refreshes)
    cut = next(i for i, e in enumerate(events) if e is refreshes[0]) + 1
    resumed, *_ = run(cut_run(tmp_path / "r", tmp_path / "killed", events[:cut]), config,
                      engine=PickyTeacher(engine=True), resume=True)
    assert resumed == full
    with pytest.raises(UsageError, match="request 0 of the call.*every skill analyst's prompt was refused"):
        run(tmp_path / "all", config, engine=PickyTeacher(refuse_all=True, engine=True))


def test_target_and_patience_stop_on_the_search_itself_and_resume_to_the_uncapped_result(tmp_path):
    """caps.target: the best train objective reached it (<= here: the fake task minimises);
    caps.patience: that many plan steps in a row found nothing better. Either stops before the
    next step; removing it from config.toml and resuming gives the uncapped run."""
    config = make_config("eoh", 24)
    full, *_ = run(tmp_path / "full", config)
    first_best = min(c["objective"] for c in read_jsonl(tmp_path / "full" / "candidates.jsonl")
                     if c["objective"] is not None and c["step"] == 0)
    target, *_ = run(tmp_path / "t", make_config("eoh", 24, caps={"target": first_best}))
    step0 = sum(1 for c in read_jsonl(tmp_path / "full" / "candidates.jsonl") if c["step"] == 0)
    assert target.stopped == {"cap": "target", "used": first_best, "limit": first_best, "step": 1,
                              "evaluations": step0, "direction": "min"}
    assert target.best.objective == first_best and target.evaluations == step0
    from coevolve.report.rendering import context_rows

    shown = dict(context_rows(target.context, target.stopped))["stopped early"]
    assert shown.startswith(f"cap target reached (the best {first_best:.6g} <= {first_best:g}) after {step0} ")
    # a target the template meets stops before the first request
    seeded, *_ = run(tmp_path / "s", make_config("eoh", 24, caps={"target": 50.0}, context={"seed_template": True}))
    assert seeded.stopped["cap"] == "target" and seeded.stopped["step"] == 0 and seeded.evaluations == 0

    patient, *_ = run(tmp_path / "p", make_config("eoh", 24, caps={"patience": 1}))
    stop = patient.stopped
    assert stop["cap"] == "patience" and stop["used"] >= 1 and patient.evaluations < 24
    made = [c for c in read_jsonl(tmp_path / "p" / "candidates.jsonl") if c["objective"] is not None]
    best_step = min(made, key=lambda c: c["objective"])["step"]
    assert stop["step"] == best_step + 2  # the step after the best's improved nothing; then it stopped
    assert "cap patience reached (no better objective for 1 plan step)" in dict(
        context_rows(patient.context, stop))["stopped early"]
    for directory in ("t", "p"):
        (tmp_path / directory / "config.toml").write_text(dump_toml(as_dict(config)))
        resumed, *_ = run(tmp_path / directory, config, resume=True)
        assert resumed.stopped is None
        assert resumed.model_dump(exclude={"context"}) == full.model_dump(exclude={"context"}), directory


class ShorterEachCall(FakeEngine):
    """Every program scores 30.0; each call's are one line shorter than the last call's: under
    tie_break = ["min lines"] every step wins the tie-break and improves nothing."""

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        pads = max(0, 12 - len(self.calls))
        self.calls.append(len(conversations))
        padding = ["".join(f"    pad{i} = {seed}\n" for i in range(pads)) for seed in seeds]
        return [Completion(text=f"```python\ndef heuristic(x):\n{lines}    SCORE = 30.0\n    return SCORE\n```",
                           prompt_tokens=1, completion_tokens=1) for lines in padding]


def test_patience_counts_steps_since_the_best_objective_not_since_a_tie_break_win(tmp_path):
    """caps.patience: a later program of the best's objective that wins only the tie-break (fewer lines)
    becomes the best but is no better: the steps after the objective was first reached count."""
    config = make_config("sample", 40, caps={"patience": 2}, eoh={"tie_break": ["min lines"]})
    summary, *_ = run(tmp_path / "r", config, engine=ShorterEachCall())
    assert summary.best.objective == 30.0 and summary.best.step == 2  # the tie-break winner of the last step run
    assert summary.stopped == {"cap": "patience", "used": 2, "limit": 2, "step": 3, "evaluations": 12}


def test_coevolve_distill_works_on_a_heuristic_run(tmp_path, monkeypatch):
    """`coevolve distill RUN_DIR` on a heuristic run directory: analysts read its
    candidates (the fake teacher writes nothing usable, so the failures' own
    kinds become the pitfalls) and a valid SKILL.md with the contract is written."""
    import argparse

    from coevolve.base.skills import load_skill
    from coevolve.commands import distill as command

    config = make_config("eoh", 20)
    config.run.task = "tsp_construct"
    summary, *_ = run(tmp_path / "r", make_config("eoh", 20))
    (tmp_path / "r" / "config.toml").write_text(dump_toml(as_dict(config)))
    monkeypatch.setattr(command, "teacher", lambda args: (FakeEngine(), None))
    args = argparse.Namespace(run_dir=str(tmp_path / "r"), out=str(tmp_path / "skills" / "tsp-learnt"),
                              endpoint_base_url=None, endpoint_model=None, api_key_env="X", model=None,
                              previous=None, description=None, successes=1, max_failed_per_case=1,
                              include_eval=False, seed=0, max_tokens=160, no_progress=True)
    assert command.handle(args) == 0
    skill = load_skill(tmp_path / "skills" / "tsp-learnt")
    assert "## Contract" in skill.body and "def select_next_node(current_node" in skill.body
    assert "## Pitfalls" in skill.body


def test_an_endpoint_that_cannot_constrain_falls_back_to_free_decoding_recorded_and_resumes(tmp_path):
    from coevolve.engine.base import ConstraintError

    class NoConstraints(FakeEngine):
        def chat(self, conversations, sampling, seeds=None, constraints=None):
            if constraints:
                raise ConstraintError("this server ignores structured_outputs")
            return super().chat(conversations, sampling, seeds)

    config = make_config("sample", 12, endpoint={"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    summary, *_ = run(tmp_path / "r", config, endpoint=NoConstraints())
    assert summary.context["constrain"] == ("off: the endpoint did not apply the decoding constraint, replies decode "
                                            "freely (this server ignores structured_outputs)")
    events = read_jsonl(tmp_path / "r" / "events.jsonl")
    assert [e["requests"] for e in events if e["type"] == "constrain"] == [4]
    assert summary.ledger.llm_requests == 12 + 4  # the refused batch counts as requests
    assert summary.evaluations == 12
    again, *_ = run(tmp_path / "r", config, resume=True, endpoint=NoConstraints())
    assert again == summary


def test_word_cut_stops_at_a_word():
    from coevolve.base.errors import word_cut

    assert word_cut("use a vLLM server", 100) == "use a vLLM server"
    assert word_cut("off: the endpoint ignored it; use a vLLM server", 33) == "off: the endpoint ignored it;..."
    assert len(word_cut("x " * 400, 300)) <= 300


# -- the seeded template ----------------------------------------------------------------------------------
class FirstStepFailsEngine(RecordingEngine):
    """Its first call (EoH's i1 step) gets no code at all: what a small model's first proposals often are.
    Every later prompt is kept, so a test sees which parents reached the operators."""

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        first = not self.calls
        out = super().chat(conversations, sampling, seeds, constraints)
        if first:
            for completion in out:
                completion.text = "I would pick the nearest node."
        return out


def test_the_seeded_template_is_a_parent_from_the_first_step_and_never_a_request(tmp_path):
    engine = FirstStepFailsEngine()
    summary, _, evaluator = run(tmp_path / "r", make_config("eoh", 13, context={"seed_template": True}), engine=engine)
    events = read_jsonl(tmp_path / "r" / "events.jsonl")
    assert [e["type"] for e in events[:2]] == ["start", "seed"] and events[1]["result"]["objective"] == 50.0
    first = json.loads((tmp_path / "r" / "population" / "gen_0000.json").read_text())
    assert [m["id"] for m in first["population"]] == [0] and "SCORE = 50.0" in first["population"][0]["code"]
    candidates = read_jsonl(tmp_path / "r" / "candidates.jsonl")
    assert all(c["failure"] == "parse" for c in candidates if c["step"] == 0)
    # the step after: EoH's e1 on the template, shown in its prompt, not the parentless i1 again
    after = [c for c in candidates if c["step"] == 1]
    assert after and all(c["operator"] == "e1" and c["parents"] == [0] for c in after)
    assert any("Return a score." in prompt for _, prompt, _ in engine.seen[4:])
    # not a proposal: every charge is a request, the seed is counted apart and scored once
    ledger = summary.ledger
    assert summary.evaluations == 13 == sum(ledger.outcomes.values()) == ledger.llm_requests == sum(engine.calls)
    assert ledger.seeded == 1 and evaluator.evaluated == ledger.outcomes["evaluated"] + 1
    assert [c["id"] for c in candidates] == list(range(1, 14))
    assert summary.context["seed"] == {"id": 0, "objective": 50.0, "failure": None}

    # without the seed the archive is empty after the failed i1 step, and EoH asks i1 again
    plain = make_config("eoh", 13, context={"seed_template": False})
    unseeded, _, evaluator = run(tmp_path / "plain", plain, engine=FirstStepFailsEngine())
    later = [c for c in read_jsonl(tmp_path / "plain" / "candidates.jsonl") if c["step"] == 1]
    assert all(c["operator"] == "i1" and c["parents"] == [] for c in later)
    assert unseeded.ledger.seeded == 0 and unseeded.context["seed"] is None
    assert evaluator.evaluated == unseeded.ledger.outcomes["evaluated"]
    assert not any(e["type"] == "seed" for e in read_jsonl(tmp_path / "plain" / "events.jsonl"))


def test_a_run_nothing_beats_reports_the_template_as_its_best(tmp_path):
    class WorseEngine(FakeEngine):  # every program scores 60: worse than the template's 50 (minimised)
        def chat(self, conversations, sampling, seeds=None, constraints=None):
            out = super().chat(conversations, sampling, seeds, constraints)
            for i, completion in enumerate(out):
                completion.text = f"{{worse}}\n```python\ndef heuristic(x):\n    S = 60.0 + {i}\n    return S\n```"
            return out

    summary, *_ = run(tmp_path / "r", make_config("eoh", 10, context={"seed_template": True}), engine=WorseEngine())
    assert summary.best.id == 0 and summary.best.objective == 50.0 and summary.context["beat_template"] is False
    assert "the task's template, seeded" in (tmp_path / "r" / "best.py").read_text()
    from coevolve.report.rendering import context_rows

    assert ("beat the template", "no (template 50, seeded into the archive, not charged)") in context_rows(
        summary.context, None)


def test_the_seed_is_restored_from_its_event_on_resume_and_scored_again_only_when_it_was_lost(tmp_path):
    config = make_config("eoh+esopt", 20, context={"seed_template": True})
    full, *_ = run(tmp_path / "full", config)
    events = read_jsonl(tmp_path / "full" / "events.jsonl")

    def killed(name: str, kept: list[dict]) -> tuple:
        d = tmp_path / name
        d.mkdir()
        (d / "config.toml").write_text((tmp_path / "full" / "config.toml").read_text())
        (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in kept))
        return run(d, config, resume=True)

    # killed before the seed's event: scored again, the same run
    resumed, _, evaluator = killed("no-seed", events[:1])
    assert resumed == full and evaluator.evaluated == full.ledger.outcomes["evaluated"] + 1
    # killed after it: restored, not scored (the sandbox sees only the steps'
    # programs); a logged score the sandbox would not give shows it comes from the log
    events[1]["result"]["objective"] = 49.5
    resumed, _, evaluator = killed("seeded", events[:2])
    assert evaluator.evaluated == full.ledger.outcomes["evaluated"]
    assert resumed.context["seed"]["objective"] == 49.5 and resumed.ledger.seeded == 1


def older_run(full: Path, old: Path, key: str, steps: int) -> RunConfig:
    """`old`: the first `steps` steps of the run in `full`, as a run started before [context] `key`
    existed logged them (no key in its config.toml nor in its start event); its config, loaded today."""
    events = read_jsonl(full / "events.jsonl")
    del events[0]["config"]["context"][key]
    old.mkdir()
    text = (full / "config.toml").read_text()
    line = next(line for line in text.splitlines(keepends=True) if line.startswith(f"{key} = "))
    (old / "config.toml").write_text(text.replace(line, ""))
    cut = [e for e in events if e["type"] == "step"][steps]
    (old / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:events.index(cut)]))
    return build_config(RunConfig, tomllib.loads((old / "config.toml").read_text()))


def test_a_run_started_before_the_seed_existed_resumes_without_it(tmp_path):
    config = make_config("eoh", 16, context={"seed_template": False})
    full, *_ = run(tmp_path / "full", config)
    old = tmp_path / "old"
    loaded = older_run(tmp_path / "full", old, "seed_template", 3)
    assert not loaded.context.seed_template  # the key's default (off since s27)
    loaded.context.seed_template = True  # as a default turned on later would read it: the resume must not apply it
    resumed, _, evaluator = run(old, loaded, resume=True)
    assert resumed.ledger.seeded == 0 and resumed.context["seed"] is None
    assert resumed.model_dump(exclude={"context"}) == full.model_dump(exclude={"context"})


@pytest.mark.parametrize("method,sections", [("islands", {"islands": {"islands": 3}}),
                                             ("map_elites", {"map_elites": {"descriptors": ["lines"], "bins": 4}}),
                                             ("sample", {})])
def test_every_method_admits_the_seed_by_its_own_rule(tmp_path, method, sections):
    summary, *_ = run(tmp_path / "r", make_config(method, 12, context={"seed_template": True}, **sections), engine=FirstStepFailsEngine())
    first = json.loads((tmp_path / "r" / "population" / "gen_0000.json").read_text())
    assert [m["id"] for m in first["population"]] == [0]
    if method == "islands":  # each island starts from it, as FunSearch's islands start from the initial program
        assert first["islands"] == [[0], [0], [0]]
    if method == "map_elites":
        assert [c["id"] for c in first["grid"]["cells"]] == [0]
    assert summary.evaluations == 12 == summary.ledger.llm_requests and summary.ledger.seeded == 1
