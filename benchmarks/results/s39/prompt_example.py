"""The user prompt of a finished run's first e/m request with valid parents, rebuilt as the loop builds
it under context.feedback (each valid parent's `Evaluation:` line): the parents are scored again in the
real sandbox for their per-instance objectives (the same as the run's, to the bit). Shows what the
proposer read. Usage: .venv/bin/python benchmarks/results/s39/prompt_example.py RUN_DIR"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from coevolve.sandbox import Sandbox  # noqa: E402
from coevolve.search.feedback import parent_note  # noqa: E402
from coevolve.search.prompts import Context, operator_messages  # noqa: E402
from tasks.base import template_profile  # noqa: E402
from tasks.registry import get_task  # noqa: E402

run = Path(sys.argv[1])
config = json.loads((run / "events.jsonl").read_text().splitlines()[0])["config"]
task = get_task(config["run"]["task"])
candidates = {c["id"]: c for c in map(json.loads, (run / "candidates.jsonl").read_text().splitlines())}
child = next(c for c in candidates.values() if c["operator"] in ("e1", "e2", "m1", "m2")
             and all(candidates[p]["objective"] is not None for p in c["parents"]))
parents = [candidates[p] for p in child["parents"]]
with Sandbox(workers=1, timeout_s=120) as sandbox:
    results = [sandbox.evaluate(p["code"], task.name) for p in parents]
assert all(r.objective == p["objective"] for r, p in zip(results, parents))
template = template_profile(task)
notes = tuple(parent_note(r.profile, template, task.direction, r.feedback, config["context"]["failure_chars"])
              for r in results)


class Parent:
    def __init__(self, c: dict) -> None:
        self.code, self.idea, self.objective = c["code"], c["idea"], c["objective"]


messages = operator_messages(child["operator"], task.description, task.template, task.function_name, task.direction,
                             [Parent(p) for p in parents], context=Context(notes=notes))
print(f"# {run}: the prompt of candidate {child['id']} ({child['operator']}, parents {child['parents']}), "
      "without the failure report and signature line the run's prompt also had")
print(messages[1]["content"])
