"""Do the edit patterns (coevolve.search.edits.edit_pattern) compile in the in-process engine's grammar
backend for real parents, and do the embedded model's constrained edits apply? Parents: the valid
programs of the s41 diff comparison's runs (DIR/runs/*/*/candidates.jsonl) and the tsp_construct template.
Each parent gets one diff prompt as the loop builds it, decoded under its pattern.
Usage: python edit_patterns_check.py COMPARISON_DIR"""
import collections
import json
import sys
from pathlib import Path

from coevolve.base.sampling import Sampling
from coevolve.engine.models import default_model_dir
from coevolve.engine.vllm_engine import Engine
from coevolve.search.edits import EditError, edit_pattern, edited
from coevolve.search.prompts import Context, operator_messages
from tasks.registry import get_task

task = get_task("tsp_construct")
parents = {task.template: 7.0}
for path in sorted(Path(sys.argv[1]).glob("runs/*/*/candidates.jsonl")):
    for line in path.read_text().splitlines():
        c = json.loads(line)
        if c["objective"] is not None and c["code"]:
            parents.setdefault(c["code"], c["objective"])


class P:
    def __init__(self, code, objective):
        self.code, self.objective, self.idea = code, objective, "a parent"


engine = Engine(default_model_dir(), max_model_len=2048, max_num_seqs=64)
items = list(parents.items())
outcomes = collections.Counter()
reasons = collections.Counter()
for start in range(0, len(items), 8):
    chunk = items[start:start + 8]
    conversations = [operator_messages("diff", task.description, task.template, task.function_name, "min",
                                       [P(code, obj)], context=Context()) for code, obj in chunk]
    patterns = [edit_pattern(code) for code, _ in chunk]
    replies = engine.chat(conversations, Sampling(temperature=0.7, max_tokens=384), seeds=list(range(start, start + len(chunk))),
                          constraints=patterns)
    for (code, _), reply in zip(chunk, replies):
        try:
            program = edited(reply.text, code, task.function_name, task.template)
            outcomes["applied" if program.code != code else "unchanged"] += 1
        except EditError as exc:
            outcomes["failed"] += 1
            reasons[str(exc)[:60]] += 1
print(f"parents {len(items)} (patterns compiled for all: no ConstraintError)")
print("outcomes", dict(outcomes))
print("failures", reasons.most_common(5))
print("example reply:\n" + replies[0].text)
