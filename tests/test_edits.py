"""The `diff` operator: SEARCH/REPLACE blocks applied to the parent, all or none, located in the
parent before any is applied, re-indented by one shift, and a failure that says which block and
which line; the loop decodes edit requests freely, shows why an edit failed in the next prompt,
counts edit answers and resumes them. The fake engine drives the loop logic; the last test runs
the real engine, sandbox and TSP task."""

from __future__ import annotations

import json
import re

import pytest

from coevolve.base.config import as_dict, dump_toml
from coevolve.codeparse import answer_pattern, template_signature
from coevolve.report.rendering import context_rows
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search import operators
from coevolve.engine.base import ConstraintError
from coevolve.search.edits import SEARCH, WHOLE, EditError, edit_pattern, edited
from coevolve.search.prompts import EDIT_SYSTEM, operator_messages
from search_fakes import TEMPLATE, FakeEngine
from test_run_e2e import sandbox  # noqa: F401  (the module-scoped real sandbox fixture)
from test_search_context import make_config, run

PARENT = '''import numpy as np


def f(a, b):
    x = 1
    for i in range(3):
        x += i
    return x
'''
START = "import numpy as np\n\n\ndef f(a, b):\n    return 1\n"


def block(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def edit(*blocks: str, idea: str = "{count the loop twice as fast}") -> str:
    return idea + "\n" + "".join(blocks)


def failure(text: str) -> str:
    with pytest.raises(EditError) as caught:
        edited(text, PARENT, "f", START)
    return str(caught.value)


# -- applying blocks ---------------------------------------------------------------------------------
def test_blocks_apply_to_the_parent_and_keep_the_rest_of_it():
    out = edited(edit(block("    x = 1", "    x = 2"), block("        x += i", "        x += 2 * i")), PARENT, "f", START)
    assert out.code == PARENT.replace("x = 1", "x = 2").replace("x += i", "x += 2 * i")
    assert out.idea == "count the loop twice as fast" and out.repairs == ()


def test_a_block_at_the_wrong_depth_is_shifted_with_its_replacement():
    # copied out of the loop at column 0: both sides move by the loop body's indentation
    out = edited(edit(block("for i in range(3):\n    x += i", "for i in range(5):\n    x -= i\nx *= 2")),
                 PARENT, "f", START)
    assert "    for i in range(5):\n        x -= i\n    x *= 2\n    return x\n" in out.code
    assert out.repairs == ("reindented edit block 1 by 4 columns",)
    # trailing spaces in the reply never matter
    assert edited(edit(block("    x = 1   ", "    x = 3")), PARENT, "f", START).code.count("x = 3") == 1


def test_blocks_are_located_in_the_parent_before_any_is_applied():
    # block 2's SEARCH is what block 1 writes, not the parent's text: applied one after the other it
    # would match (aider issue 3964); here it is not in the heuristic, and nothing is applied
    message = failure(edit(block("    x = 1", "    x = 5"), block("    x = 5", "    x = 6")))
    assert message == "edit block 2's SEARCH is not in the heuristic: no line of it reads `x = 5`; copy the lines exactly"


@pytest.mark.parametrize("text, expected", [
    (edit(block("    y = 1", "    y = 2")), "edit block 1's SEARCH is not in the heuristic: no line of it reads `y = 1`"),
    (edit(block("        x += i\n    x = 1", "")), "its lines are there, but not together in this order"),
    (edit(block("    x += i", "")), None),  # matched below (a 4-column shift of line 7 only)
    (edit(block("    x = 1\n    for i in range(3):", "z"), block("    for i in range(3):", "q")),
     "edit blocks 1 and 2 change overlapping lines; make them one block"),
    (edit(block("", "    q = 1")), "edit block 1 has nothing under SEARCH"),
    ("{idea}\n<<<<<<< SEARCH\n    x = 1\n=======\n    x = 2\n", "edit block 1 is not closed with >>>>>>> REPLACE"),
    ("I would change the loop.", "the answer had no <<<<<<< SEARCH ... >>>>>>> REPLACE blocks"),
    (edit(block("def f(a, b):", "def g(a, b):")), None),  # renamed back by the parser (a recorded repair)
])
def test_what_cannot_be_applied_says_which_block_and_why(text, expected):
    if expected is None:
        edited(text, PARENT, "f", START)
        return
    assert expected in failure(text)


def test_a_search_that_matches_several_places_asks_for_more_lines():
    doubled = PARENT.replace("    return x\n", "    x = 1\n    return x\n")
    with pytest.raises(EditError, match="matches 2 places in the heuristic; copy more lines"):
        edited(edit(block("    x = 1", "    x = 0")), doubled, "f", START)


def test_an_edit_whose_idea_echoes_the_answer_format_has_none():
    from coevolve.search.prompts import instructions

    echoed = edit(block("    x = 1", "    x = 2"), idea="{your idea in one sentence, then one or more edit blocks}")
    assert edited(echoed, PARENT, "f", START, instructions("f")).idea == ""
    assert edited(edit(block("    x = 1", "    x = 2")), PARENT, "f", START, instructions("f")).idea == \
        "count the loop twice as fast"


def test_a_reply_with_a_whole_function_and_no_blocks_is_taken_as_a_program():
    out = edited("{a constant answer is enough}\n```python\ndef f(a, b):\n    return 3\n```", PARENT, "f", START)
    assert out.code == "import numpy as np\n\ndef f(a, b):\n    return 3\n" and out.repairs == (WHOLE,)


def test_an_edit_that_removes_the_function_is_no_program():
    with pytest.raises(EditError, match="no longer defines f"):
        edited(edit(block(PARENT.split("\n\n\n")[1].rstrip(), "")), PARENT, "f", START)


# -- the operator and its prompt ------------------------------------------------------------------------
class _Parent:
    code, idea, objective = PARENT, "a counting loop", 3.0


def test_the_edit_prompt_shows_its_parent_and_the_block_format_and_no_signature_pattern():
    messages = operator_messages("diff", "Minimise f.", START, "f", "min", [_Parent()],
                                 context=operators_context())
    system, user = messages[0]["content"], messages[1]["content"]
    assert system == EDIT_SYSTEM and "```python\n" + PARENT.strip() + "\n```" in user
    assert "<<<<<<< SEARCH\nlines copied exactly from the heuristic above\n=======\n" in user
    assert "must start with exactly" not in user and "keep the function f and its signature" in user
    with pytest.raises(ValueError, match="needs at least one parent"):
        operator_messages("diff", "Minimise f.", START, "f", "min", [])


def operators_context():
    from coevolve.search.prompts import Context
    return Context(signature="def f(a, b):")


def test_an_edit_operator_must_edit_exactly_one_parent():
    from coevolve.base.errors import UsageError
    with pytest.raises(UsageError, match="edits exactly one scored parent"):
        operators.Operator("edit2", "Edit both.", None, answer="blocks")
    with pytest.raises(UsageError, match="answer must be one of program, blocks"):
        operators.Operator("patch", "Patch.", 1, answer="patch")
    assert operators.answer_of("diff") == "blocks" and operators.answer_of("template") == "program"


# -- in the loop (fake engine and evaluator) ------------------------------------------------------------
class EditingEngine(FakeEngine):
    """Answers edit requests with blocks on the SCORE line of the parent it is shown: most apply, every
    third names a line the parent does not have, every fifth is a whole program; other requests as
    FakeEngine. Keeps each request's system prompt, user prompt and decoding pattern."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, object]] = []

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        out = super().chat(conversations, sampling, seeds, constraints)
        for i, (conversation, seed) in enumerate(zip(conversations, seeds)):
            system, user = conversation[0]["content"], conversation[-1]["content"]
            self.seen.append((system, user, None if constraints is None else constraints[i]))
            if system != EDIT_SYSTEM:
                continue
            value = float(re.search(r"SCORE = (-?[0-9.]+)", user).group(1))
            if seed % 3 == 0:
                out[i].text = edit(block("    SCORE = 999.0", "    SCORE = 1.0"))
            elif seed % 5 == 0:
                out[i].text = "{a fixed score}\n```python\ndef heuristic(x):\n    SCORE = 7.5\n    return SCORE\n```"
            else:
                out[i].text = edit(block(f"SCORE = {value}", f"SCORE = {round(value - 1 - seed % 7, 6)}"))
        return out


def test_edit_requests_are_decoded_under_their_parents_lines_applied_and_failures_reach_the_next_prompt(tmp_path):
    config = make_config("eoh", 24, eoh={"population": 4, "offspring": 3, "operators": ["diff"]})
    engine = EditingEngine()
    summary, *_ = run(tmp_path / "r", config, engine=engine)
    pattern = answer_pattern(template_signature(TEMPLATE, "heuristic")[0])
    for system, user, constraint in engine.seen:  # an edit under its parent's pattern, a program under the signature's
        parent = user.split("```python\n", 1)[1].split("\n```", 1)[0] if system == EDIT_SYSTEM else None
        assert constraint == (edit_pattern(parent) if parent is not None else pattern)
        assert parent is None or re.search(r"SCORE = -?[0-9.]+", constraint)  # the parent's own lines
    candidates = read_jsonl(tmp_path / "r" / "candidates.jsonl")
    by_id = {c["id"]: c for c in candidates}
    edits = [c for c in candidates if c["operator"] == "diff"]
    applied = [c for c in edits if c["code"] is not None and WHOLE not in c["repairs"]]
    failed = [c for c in edits if c["failure"] == "parse"]
    whole = [c for c in edits if WHOLE in c["repairs"]]
    assert applied and failed and whole
    for c in applied:  # the parent's program with its SCORE line changed, nothing else
        parent = by_id[c["parents"][0]]["code"]
        assert re.sub(r"SCORE = -?[0-9.]+", "S", c["code"]) == re.sub(r"SCORE = -?[0-9.]+", "S", parent)
        assert c["code"] != parent
    for c in failed:
        assert c["message"] == ("the edit did not apply: edit block 1's SEARCH is not in the heuristic: no line of "
                                "it reads `SCORE = 999.0`; copy the lines exactly")
    later = [u for s, u, _ in engine.seen[len(engine.seen) // 2:]]
    assert any("parse:\n" in u and "the edit did not apply" in u for u in later)  # a failed sibling, said why
    assert summary.context["edits"] == {"requests": len(edits), "applied": len(applied), "whole": len(whole),
                                        "failed": len(failed), "valid": sum(c["objective"] is not None for c in edits)}
    rows = dict(context_rows(summary.context, None))
    assert rows["edit answers"].startswith(f"{len(edits)}: {len(applied)} applied as blocks, {len(whole)} whole")


class RefusingEngine(EditingEngine):
    """An engine whose grammar backend rejects the edit patterns (the program pattern passes)."""

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        if constraints and any(c and SEARCH in c for c in constraints):
            raise ConstraintError("the backend cannot compile this pattern")
        return super().chat(conversations, sampling, seeds, constraints)


def test_an_engine_that_rejects_edit_patterns_decodes_edits_freely_from_then_on_and_resumes_so(tmp_path):
    config = make_config("eoh", 24, eoh={"population": 4, "offspring": 3, "operators": ["diff", "m1"]})
    engine = RefusingEngine()
    summary, *_ = run(tmp_path / "r", config, engine=engine)
    assert summary.evaluations == 24
    events = read_jsonl(tmp_path / "r" / "events.jsonl")
    refused = [e for e in events if e["type"] == "edit_constrain"]
    assert len(refused) == 1 and "cannot compile" in refused[0]["state"]
    assert {c for s, _, c in engine.seen if s == EDIT_SYSTEM} == {None}  # every edit sent was decoded freely
    assert {c for s, _, c in engine.seen if s != EDIT_SYSTEM} == {answer_pattern(template_signature(TEMPLATE, "heuristic")[0])}
    # killed after the refusal: the resumed run decodes edits freely without asking again
    steps = [i for i, e in enumerate(events) if e["type"] == "step"]
    again = tmp_path / "again"
    again.mkdir()
    (again / "config.toml").write_text((tmp_path / "r" / "config.toml").read_text())
    cut = steps[-2]
    (again / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:cut]))
    resumed_engine = RefusingEngine()
    run(again, config, engine=resumed_engine, resume=True)
    assert read_jsonl(again / "candidates.jsonl") == read_jsonl(tmp_path / "r" / "candidates.jsonl")
    assert not any(e["type"] == "edit_constrain" for e in read_jsonl(again / "events.jsonl")[cut:])


def test_an_endpoint_that_rejects_edit_patterns_has_the_refused_requests_counted_and_resumed(tmp_path):
    config = make_config("eoh", 24, eoh={"population": 4, "offspring": 3, "operators": ["diff", "m1"]},
                         endpoint={"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    summary, *_ = run(tmp_path / "r", config, endpoint=RefusingEngine())
    events = read_jsonl(tmp_path / "r" / "events.jsonl")
    refused = next(e for e in events if e["type"] == "edit_constrain")
    replies = sum(len(e["completions"]) for e in events if e["type"] == "step")
    assert refused["requests"] >= 1 and summary.ledger.llm_requests == replies + refused["requests"]
    again = tmp_path / "again"
    again.mkdir()
    (again / "config.toml").write_text((tmp_path / "r" / "config.toml").read_text())
    (again / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:-3]))
    resumed, *_ = run(again, config, endpoint=RefusingEngine(), resume=True)
    assert resumed.ledger == summary.ledger


def test_with_constrained_decoding_off_edits_are_decoded_freely(tmp_path):
    engine = EditingEngine()
    run(tmp_path / "r", make_config("eoh", 12, eoh={"population": 4, "offspring": 3, "operators": ["diff"]},
                                    context={"constrain": False}), engine=engine)
    assert any(s == EDIT_SYSTEM for s, _, _ in engine.seen) and {c for *_, c in engine.seen} == {None}


def test_a_stopped_run_of_edits_resumes_to_the_uninterrupted_candidates(tmp_path):
    config = make_config("eoh", 24, eoh={"population": 4, "offspring": 3, "operators": ["diff", "m1"]})
    run(tmp_path / "full", config, engine=EditingEngine())
    capped = make_config("eoh", 24, eoh={"population": 4, "offspring": 3, "operators": ["diff", "m1"]},
                         caps={"completion_tokens": 120})
    stopped, *_ = run(tmp_path / "r", capped, engine=EditingEngine())
    assert stopped.stopped["cap"] == "completion_tokens" and stopped.evaluations < 24
    (tmp_path / "r" / "config.toml").write_text(dump_toml(as_dict(config)))
    run(tmp_path / "r", config, engine=EditingEngine(), resume=True)
    full = read_jsonl(tmp_path / "full" / "candidates.jsonl")
    resumed = read_jsonl(tmp_path / "r" / "candidates.jsonl")
    assert [(c["id"], c["code"], c["message"]) for c in resumed] == [(c["id"], c["code"], c["message"]) for c in full]


def test_edit_is_listed_among_the_operators_a_config_may_name():
    config = make_config("eoh+esopt", 24, eoh={"population": 4, "offspring": 3, "operators": ["e1", "diff"]},
                         es={"operators": ["diff"]})
    assert config.es.operators == ["diff"]


# -- on the real engine, sandbox and TSP task -------------------------------------------------------------
class InjectingRecorder:
    """The real engine, keeping each request's system prompt, pattern and parent; the first diff reply whose
    parent's last `return` line is unique is replaced by an edit that names it at column 0 (so it must be
    re-indented) and splits it in two lines, which changes the program but not what it computes."""

    def __init__(self, engine) -> None:
        self.engine, self.seen, self.injected = engine, [], None

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        extra = {"constraints": constraints} if constraints else {}
        out = self.engine.chat(conversations, sampling, seeds=seeds, **extra)
        for i, conversation in enumerate(conversations):
            system, user = conversation[0]["content"], conversation[-1]["content"]
            parent = user.split("```python\n", 1)[1].split("\n```", 1)[0] if system == EDIT_SYSTEM else None
            self.seen.append((system, None if constraints is None else constraints[i], parent))
            if system != EDIT_SYSTEM or self.injected is not None:
                continue
            returns = [line for line in parent.splitlines() if line.strip().startswith("return ")]
            if returns and parent.splitlines().count(returns[-1]) == 1:
                expression = returns[-1].strip().removeprefix("return ")
                self.injected = (parent, returns[-1])
                out[i].text = edit(block(f"return {expression}", f"chosen = {expression}\nreturn chosen"),
                                   idea="{name the chosen city before returning it}")
        return out


@pytest.mark.engine
@pytest.mark.timeout(900)
def test_diff_on_the_real_engine_is_decoded_under_its_parents_lines_and_an_applied_edit_scores_as_its_parent(tmp_path, engine,
                                                                                             sandbox):
    from coevolve.base.config import build_config
    from coevolve.report import run_table
    from coevolve.search.loop import SearchLoop
    from coevolve.search.runconfig import RunConfig
    from tasks.registry import get_task

    config = build_config(RunConfig, {
        "run": {"method": "eoh", "task": "tsp_construct", "budget": 7, "seed": 0},
        "eoh": {"population": 3, "offspring": 3, "init": 1, "operators": ["diff"]},
        "sampling": {"max_tokens": 160}, "context": {"seed_template": True},
        "sandbox": {"timeout_s": 20, "workers": 2}})
    recorder = InjectingRecorder(engine)
    summary = SearchLoop(config, RunStore.create(tmp_path / "run", dump_toml(as_dict(config))), recorder, sandbox,
                         get_task("tsp_construct")).run()
    assert summary.evaluations == 7
    signature, _ = template_signature(get_task("tsp_construct").template, "select_next_node")
    assert {c for s, c, _ in recorder.seen if s != EDIT_SYSTEM} == {answer_pattern(signature)}
    assert all(c == edit_pattern(p) for s, c, p in recorder.seen if s == EDIT_SYSTEM)  # its parent's lines
    candidates = read_jsonl(tmp_path / "run" / "candidates.jsonl")
    by_id = {c["id"]: c for c in candidates}
    diffs = [c for c in candidates if c["operator"] == "diff"]
    assert len(diffs) == 6 and recorder.injected is not None
    parent_code, line = recorder.injected
    indent = line[:len(line) - len(line.lstrip())]
    mine = next(c for c in diffs if c["idea"] == "name the chosen city before returning it")
    expression = line.strip().removeprefix("return ")
    assert parent_code.replace(line, f"{indent}chosen = {expression}\n{indent}return chosen") in mine["code"]
    assert mine["repairs"] == [f"reindented edit block 1 by {len(indent)} columns"]
    # scored in the real sandbox: the same tours as its parent, so the same objective, exactly
    parent = mine["parents"][0]  # 0: the seeded template, scored in the sandbox too
    expected = summary.context["seed"]["objective"] if parent == 0 else by_id[parent]["objective"]
    assert mine["objective"] == expected is not None
    # decoded under its parent's pattern, the small model's every edit applies, unless max_tokens cut the
    # reply inside its replacement lines (the pattern allows 8 of them; which replies run long depends on the
    # engine's batches, so on what the session ran before: bf16 is not batch-invariant, results/s37)
    steps = [e for e in read_jsonl(tmp_path / "run" / "events.jsonl") if e["type"] == "step"]
    cut = sum(c["finish_reason"] == "length" for e in steps if e["operator"] == "diff" for c in e["completions"])
    for c in diffs:
        assert WHOLE not in c["repairs"] and (c["code"] is not None or c["message"].endswith(
            "is not closed with >>>>>>> REPLACE (the reply was cut off at sampling.max_tokens)")), c["message"]
    edits = summary.context["edits"]
    assert edits["requests"] == 6 and edits["whole"] == 0 and edits["failed"] <= cut  # every failure a cut-off
    assert edits["applied"] + edits["failed"] == 6
    assert "edit answers" in run_table(summary, tmp_path / "run")
