"""What a run records of its feedback: which failures each prompt showed (step events, candidates.jsonl),
that a step's failure slots show different failures, how many replies copied a failure they were shown,
where each skill version's rules came from, the analysts' cut-off replies and the skill on the progress bar.
Fake engine and sandbox (tests/search_fakes.py): the search logic, no vLLM."""

from __future__ import annotations

from types import SimpleNamespace

from coevolve.base.config import as_dict, dump_toml
from coevolve.base.records import read_summary
from coevolve.base.skillpatch import RuleOrigins
from coevolve.base.skills import load_skill
from coevolve.engine.base import Completion
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search import skill as skills
from coevolve.search.loop import SearchLoop, distinct_failures
from coevolve.search.population import Candidate
from coevolve.search.progress import ProgressBar, skill_label
from coevolve.search.prompts import describe_failure
from search_fakes import FakeEngine, FakeEvaluator, FakeTask
from test_search_context import cut_run, make_config

CRASH = "{crash}\n```python\ndef heuristic(x):\n    raise ValueError('boom')\n```"
INVALID = "{no score}\n```python\ndef heuristic(x):\n    return x\n```"
PROSE = "I would pick the nearest node."


def run(directory, config, engine, resume=False, task=None, on_progress=None):
    store = RunStore.open(directory) if resume else RunStore.create(directory, dump_toml(as_dict(config)))
    loop = SearchLoop(config, store, engine, FakeEvaluator(), task or FakeTask(), on_progress=on_progress)
    return loop.run(), engine


def valid(seed: int) -> str:
    return f"{{idea {seed}}}\n```python\ndef heuristic(x):\n    SCORE = {10 + seed % 1000 / 7:.4f}\n    return SCORE\n```"


class ScriptedEngine(FakeEngine):
    """The first call's replies as given; later calls answer each request with a program of its own, or
    (`copy`) the crash program again wherever the prompt shows a failure and the seed is even."""

    def __init__(self, first: list[str], copy: bool = False) -> None:
        super().__init__()
        self.first, self.copy = first, copy

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        self.calls.append(len(conversations))
        if len(self.calls) == 1:
            return [Completion(text=t, prompt_tokens=1, completion_tokens=1) for t in self.first]
        return [Completion(text=CRASH if self.copy and seed % 2 == 0 and "failed" in c[-1]["content"]
                           else valid(seed), prompt_tokens=1, completion_tokens=1)
                for c, seed in zip(conversations, seeds)]


def cand(id: int, failure: str | None = "exception", message: str = "ValueError: boom",
         duplicate_of: int | None = None, objective: float | None = None) -> Candidate:
    return Candidate(id=id, step=0, operator="i1", parents=[], model_state={"kind": "base"}, code=f"c{id}",
                     failure=failure, message=message, duplicate_of=duplicate_of, objective=objective)


def test_the_failures_shown_skip_a_repeat_of_an_earlier_ones_code_or_message():
    a, copy = cand(1), cand(4, duplicate_of=1)
    same_message = cand(3)  # another program, the same error
    other = cand(2, failure="timeout", message="took too long")
    clone_of_valid = cand(5, failure="duplicate", message="a clone of candidate 6", duplicate_of=6)
    by_id = {c.id: c for c in [a, other, same_message, copy, clone_of_valid, cand(6, None, "", objective=1.0)]}
    # a copy stands for its original (whose report has the error); a clone of a valid program stays itself
    assert [c.id for c in distinct_failures([copy, same_message, a, other, clone_of_valid], by_id)] == [1, 2, 5]
    unexplained = [cand(7, "invalid", ""), cand(8, "invalid", "")]  # no message: told apart by code alone
    assert [c.id for c in distinct_failures(unexplained, {})] == [7, 8]


def test_a_steps_failure_slots_show_different_failures_and_the_logs_say_which(tmp_path):
    # step 0: an unexplained invalid result, a reply with no code, a crash and an exact copy of the crash
    engine = ScriptedEngine([INVALID, PROSE, CRASH, CRASH])
    config = make_config("sample", 8, context={"fingerprint": False})
    run(tmp_path / "r", config, engine=engine)
    candidates = {c["id"]: c for c in read_jsonl(tmp_path / "r" / "candidates.jsonl")}
    assert candidates[4]["duplicate_of"] == 3
    prompts = read_jsonl(tmp_path / "r" / "prompts.jsonl")
    texts = {p["sha256"]: p["messages"][-1]["content"] for p in prompts if "messages" in p}
    step1 = [texts[p["sha256"]] for p in sorted((p for p in prompts if p["step"] == 1), key=lambda p: p["slot"])]
    reports = {i: describe_failure(Candidate.from_dict(candidates[i]), config.context.failure_chars)
               for i in (1, 2, 3)}
    # before: the three most recent (4, 3, 2), so the crash filled three slots of four and 1 was never shown
    assert [[i for i, r in reports.items() if r in text] for text in step1] == [[3], [2], [1], [3]]
    step = [e for e in read_jsonl(tmp_path / "r" / "events.jsonl") if e.get("type") == "step"][1]
    shown = [r["failures_shown"] for r in step["requests"]]
    assert shown == [[3], [2], [1], [3]]
    assert [candidates[i]["failures_shown"] for i in range(5, 9)] == shown
    assert all("failures_shown" not in candidates[i] for i in range(1, 5))  # step 0 showed none: no key


def test_an_old_candidates_line_without_failures_shown_reads_as_none_shown():
    line = cand(1).to_dict()
    assert "failures_shown" not in line
    assert Candidate.from_dict(line).failures_shown == []
    assert Candidate.from_dict({**line, "failures_shown": [3]}).to_dict()["failures_shown"] == [3]


def test_the_summary_counts_replies_that_copied_a_failure_they_were_shown_and_a_resume_counts_the_same(tmp_path):
    engine = ScriptedEngine([CRASH, PROSE, valid(1), valid(2)], copy=True)
    config = make_config("sample", 16, context={"fingerprint": False})
    full, *_ = run(tmp_path / "full", config, engine=engine)
    candidates = read_jsonl(tmp_path / "full" / "candidates.jsonl")
    by_id = {c["id"]: c for c in candidates}
    shown = [c for c in candidates if c.get("failures_shown")]
    copied = [c for c in shown if c["code"] is not None
              and any(by_id[i]["code"] == c["code"] for i in c["failures_shown"])]
    counted = full.context["failures_repeated"]
    assert counted == {"shown": len(shown), "repeated": len(copied)}
    assert 0 < counted["repeated"] < counted["shown"] == 12  # every request after step 0 saw a failure
    events = read_jsonl(tmp_path / "full" / "events.jsonl")
    cut = [i for i, e in enumerate(events) if e.get("type") == "step"][1] + 1  # killed after step 1
    d = cut_run(tmp_path / "full", tmp_path / "killed", events[:cut])
    again = ScriptedEngine([], copy=True)
    again.calls.append(4)  # its first call was the killed run's step 0
    resumed, *_ = run(d, config, engine=again, resume=True)
    assert resumed.context["failures_repeated"] == counted
    assert resumed == read_summary(tmp_path / "full" / "summary.json")


class NamedTask(FakeTask):
    name = "fake_task"  # its skill folder's slug is fake-task


class CutAnalysts(FakeEngine):
    """Every skill analyst's reply ends at max_tokens; the proposals' do not."""

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        out = super().chat(conversations, sampling, seeds, constraints)
        for c, conversation in zip(out, conversations):
            if "analyst" in conversation[0]["content"]:
                c.finish_reason = "length"
        return out


def refreshed_run(directory):
    config = make_config("eoh+esopt+trace2skill", 30, skill={"every": 2, "analysts": 2})
    seen: list[str] = []
    summary, _ = run(directory, config, engine=CutAnalysts(), task=NamedTask(),
                     on_progress=lambda p: seen.append(skill_label(p)))
    assert len(summary.context["skill_versions"]) >= 2
    return summary, seen


def folder(directory, version: dict):
    return directory / version["path"].removesuffix("/SKILL.md")


def test_each_skill_version_in_the_summary_says_where_its_rules_came_from(tmp_path):
    summary, _ = refreshed_run(tmp_path / "r")
    for v in summary.context["skill_versions"]:
        origins = RuleOrigins(**v["origins"])
        assert origins.analyses == 2 and origins.usable == 0  # the fake's analysts write no patch
        assert origins.rules == v["rules"] == skills.rule_count(load_skill(folder(tmp_path / "r", v)).body)
        assert origins.stand_ins > 0 and origins.contract > 0


def test_a_runs_skill_versions_name_the_task_not_its_folders_slug(tmp_path):
    summary, _ = refreshed_run(tmp_path / "r")
    for v in summary.context["skill_versions"]:
        skill = load_skill(folder(tmp_path / "r", v))
        assert "fake-task-heuristics" in v["path"]  # the folder keeps the slug
        assert skills.distilled_for(skill) == "fake_task"  # was fake-task: another task, to the warning


def test_the_analysts_replies_cut_off_are_counted_apart_from_the_candidates(tmp_path):
    summary, _ = refreshed_run(tmp_path / "r")
    versions = summary.context["skill_versions"]
    assert summary.context["analysts_cut_off"] == summary.ledger.outcomes["distill"] == 2 * len(versions)
    assert summary.context["cut_off"]["replies"] == 0  # its meaning unchanged: the candidates' replies


def test_the_progress_reports_the_skill_in_use_and_marks_a_refresh(tmp_path):
    _, seen = refreshed_run(tmp_path / "r")
    first = seen.index("v001 (new)")  # nothing before the first version, the refresh marked, then in use
    assert first > 0 and set(seen[:first]) == {""} and seen[first + 1] == "v001"
    assert "v002 (new)" in seen


def test_the_progress_bar_shows_the_skill_in_use(capsys):
    bar = ProgressBar(10, "test")
    bar.update_from(SimpleNamespace(used=2, replayed=False, best=1.0, valid_rate=0.5, sigma=None,
                                    skill=1, trial=2, refreshed=True))
    assert "skill=v001 vs v002 (new)" in str(bar.tqdm)
    bar.update_from(SimpleNamespace(used=3, replayed=False, best=1.0, valid_rate=0.5, sigma=None))
    assert "skill" not in str(bar.tqdm)  # a caller that says nothing of a skill
    bar.close()
