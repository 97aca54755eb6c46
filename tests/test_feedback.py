"""[context] feedback: what a valid parent's evaluation said besides its score reaches the
proposer. Per instance against the template (a task with instance_scores), and a task's own note
on a program's decisions (`feedback`, computed by the sandbox's trusted worker): the words, the
prompt, the real sandbox, check-task, a run's records and prompts, an older run's resume. (On the
real engine and TSP task: test_search_context_engine.py.)"""

from __future__ import annotations

import pytest

from coevolve.report.rendering import context_rows
from coevolve.runstore import read_jsonl
from coevolve.sandbox.results import EvalResult
from coevolve.search.feedback import against_template, parent_note
from coevolve.search.prompts import Context, operator_messages
from tasks.base import FEEDBACK_CHARS, feedback_of
from test_own_problem import PICK, cli, write
from test_search_context import RecordingEngine, make_config, older_run, run
from test_search_methods import ProfiledTask

# The toy pick task of a user's file, with a note: on how many lists it missed the largest value.
NOTED = PICK + '''
    def feedback(self, decisions, instances):
        missed = sum(values[index] < max(values) for index, values in zip(decisions, instances))
        return f"missed the largest value on {missed} of {len(instances)} lists"
'''
LARGEST = "def pick(values):\n    return max(range(len(values)), key=lambda i: values[i])\n"


class NotedTask(ProfiledTask):
    """The fake task with per-instance objectives, and a note naming what the program decided."""

    def feedback(self, decisions, instances):
        return f"decided {decisions[0]:g} on every instance"


def test_against_template_counts_each_instance_by_the_tasks_direction():
    assert against_template([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], "min") == (
        "the same objective as the task's template on all 3 training instances")
    assert against_template([1.0, 2.0, 3.0 + 1e-12], [1.0, 2.0, 3.0], "min").startswith("the same")
    assert against_template([1.0, 2.0, 3.0], [2.0, 2.0, 2.0], "min") == (
        "against the task's template, per training instance: better on 1, worse on 1, the same on 1 (of 3)")
    assert against_template([1.0, 1.0, 3.0], [2.0, 2.0, 2.0], "max") == (
        "against the task's template, per training instance: better on 1, worse on 2, the same on 0 (of 3)")
    for profile, template in (([1.0], None), (None, [1.0]), ([1.0, 2.0], [1.0]), ([], [])):
        assert against_template(profile, template, "min") == ""
    note = parent_note([1.0, 3.0], [2.0, 2.0], "min", "the task's\x1b[31m note\x07", 300)
    assert note == ("against the task's template, per training instance: better on 1, worse on 1, the same on 0 "
                    "(of 2); the task's note")  # control characters and escapes dropped
    cut = parent_note(None, None, "min", "x" * 500, 40)
    assert len(cut) == 40 and cut.endswith("…")
    assert parent_note(None, None, "min", "  ", 40) == ""


class Parent:
    def __init__(self, code: str, objective: float) -> None:
        self.code, self.idea, self.objective = code, "an idea", objective


def test_the_prompt_shows_each_parents_evaluation_under_its_idea():
    parents = [Parent("def f(x):\n    return 1\n", 3.0), Parent("def f(x):\n    return 2\n", 4.0)]
    args = ("e1", "Minimise.", "def f(x):\n    return 0\n", "f", "min")
    user = operator_messages(*args, parents, context=Context(notes=("first's note", "")))[1]["content"]
    first, second = user.index("Heuristic 1"), user.index("Heuristic 2")
    assert first < user.index("Evaluation: first's note\n```python\ndef f(x):\n    return 1") < second
    assert user.count("Evaluation:") == 1  # the second parent has nothing to say
    plain = operator_messages(*args, parents)[1]["content"]
    assert "Evaluation" not in plain and plain == user.replace("Evaluation: first's note\n", "")
    one = operator_messages("m1", *args[1:], parents[:1], context=Context(notes=("its note",)))[1]["content"]
    assert "Current heuristic (score 3, lower is better). Idea: {an idea}\nEvaluation: its note\n```python" in one


def test_the_real_sandbox_hands_back_the_tasks_note_on_valid_training_results_only(tmp_path):
    from coevolve.sandbox import Sandbox

    noted = str(write(tmp_path / "noted", "problem.py", NOTED))
    raising = str(write(tmp_path / "raising", "problem.py", NOTED.replace("return f\"missed", "return 1 / 0 or f\"")))
    wrong = str(write(tmp_path / "wrong", "problem.py", NOTED.replace("return f\"missed", "return 3 or f\"")))
    with Sandbox(workers=1, timeout_s=20) as sandbox:
        template = sandbox.evaluate("def pick(values):\n    return 0\n", noted)
        largest = sandbox.evaluate(LARGEST, noted)
        failing = sandbox.evaluate("def pick(values):\n    return 99\n", noted)
        test_set = sandbox.evaluate(LARGEST, noted, "test", 9)
        broken = sandbox.evaluate(LARGEST, raising)
        not_text = sandbox.evaluate(LARGEST, wrong)
    assert template.ok and template.feedback.startswith("missed the largest value on ") and template.feedback.endswith(" of 4 lists")
    assert template.feedback != "missed the largest value on 0 of 4 lists"
    assert largest.ok and largest.feedback == "missed the largest value on 0 of 4 lists"
    assert not failing.ok and failing.feedback == ""
    assert test_set.ok and test_set.feedback == ""  # a rescore off the training set guides no search
    # a note that raises or is not text costs the note, never the score
    assert broken.ok and broken.objective == largest.objective and broken.feedback == ""
    assert not_text.ok and not_text.objective == largest.objective and not_text.feedback == ""
    # what crosses back is cleaned and bounded, and only with a valid result
    carried = EvalResult.from_dict({"failure": None, "objective": 1.0, "feedback": "a\x1b[2Jb" + "c" * 5000})
    assert carried.feedback.startswith("abccc") and len(carried.feedback) == FEEDBACK_CHARS
    assert EvalResult.from_dict({"failure": "invalid", "objective": None, "feedback": "x"}).feedback == ""
    assert feedback_of(object(), [], []) == ""


def test_check_task_shows_the_templates_note_and_names_a_broken_feedback(tmp_path):
    noted = write(tmp_path / "noted", "problem.py", NOTED)
    code, out, err = cli("check-task", "--no-sandbox", str(noted))
    assert code == 0, err
    assert "ok  feedback: the template's note: missed the largest value on " in out
    line = NOTED.splitlines().index("        return f\"missed the largest value on {missed} of {len(instances)} lists\"") + 1
    raising = write(tmp_path / "raising", "problem.py", NOTED.replace("return f\"missed", "return 1 / 0 or f\""))
    code, out, err = cli("check-task", "--no-sandbox", str(raising))
    assert code == 2 and (f"feedback(): with the template's decisions raised ZeroDivisionError: division by zero "
                          f"(at {raising}:{line})") in err
    wrong = write(tmp_path / "wrong", "problem.py", NOTED.replace("return f\"missed", "return 3 or f\""))
    code, out, err = cli("check-task", "--no-sandbox", str(wrong))
    assert code == 2 and 'feedback(): returned int, expected a str ("" for no note)' in err
    attribute = write(tmp_path / "attribute", "problem.py", PICK + "\n    feedback = 'always this'\n")
    code, out, err = cli("check-task", "--no-sandbox", str(attribute))
    assert code == 2 and "feedback: expected a method feedback(decisions, instances) -> str, got 'always this'" in err


def test_eval_prints_the_note_the_proposer_would_read(tmp_path):
    noted = write(tmp_path / "noted", "problem.py", NOTED)
    best = write(tmp_path, "best.py", LARGEST)
    code, out, err = cli("eval", str(best), "--task", str(noted), "--no-reference")
    assert code == 0, err
    assert "the task's note: missed the largest value on 0 of 4 lists" in out  # the training set: the note
    code, out, err = cli("eval", str(best), "--task", str(noted), "--split", "test", "--no-reference")
    assert code == 0 and "the task's note" not in out  # another split: none, as in a run


def evaluations(prompts: list[str]) -> list[str]:
    return [line for prompt in prompts for line in prompt.splitlines() if line.startswith("Evaluation: ")]


def test_a_run_keeps_each_note_and_shows_its_parents_evaluations(tmp_path):
    engine = RecordingEngine()
    summary, *_ = run(tmp_path / "on", make_config("eoh", 24), engine=engine, task=NotedTask())
    candidates = read_jsonl(tmp_path / "on" / "candidates.jsonl")
    valid = [c for c in candidates if c["objective"] is not None]
    assert valid and all(c["feedback"].startswith("decided ") for c in valid)
    assert all("feedback" not in c for c in candidates if c["objective"] is None)  # no key: as before
    shown = evaluations([user for _, user, _ in engine.seen])
    assert shown and all(s.startswith("Evaluation: against the task's template, per training instance: ")
                         or s.startswith("Evaluation: the same objective as the task's template") for s in shown)
    notes = {c["feedback"] for c in valid}
    assert all(s.rsplit("; ", 1)[1] in notes for s in shown)  # the parent's own note, after the comparison
    # the step events keep the note, so a resumed run shows the same
    steps = [e for e in read_jsonl(tmp_path / "on" / "events.jsonl") if e["type"] == "step"]
    logged = {r.get("feedback") for e in steps for r in e["results"] if isinstance(r, dict)}
    assert notes <= logged
    assert summary.context["task_notes"] == len(valid)
    assert ("task notes", f"on {len(valid)} of {len(valid)} valid candidates (the task's feedback), shown under "
            "them as parents") in context_rows(summary.context, None)
    off = RecordingEngine()
    run(tmp_path / "off", make_config("eoh", 24, context={"feedback": False}), engine=off, task=NotedTask())
    assert not evaluations([user for _, user, _ in off.seen]) and len(off.seen) == len(engine.seen)


def test_a_run_started_before_feedback_existed_resumes_without_it(tmp_path):
    run(tmp_path / "full", make_config("eoh", 24), task=NotedTask())
    loaded = older_run(tmp_path / "full", tmp_path / "old", "feedback", 2)
    assert loaded.context.feedback  # the key's default: the resume must not apply it
    engine = RecordingEngine()
    resumed, *_ = run(tmp_path / "old", loaded, engine=engine, resume=True, task=NotedTask())
    assert engine.seen and not evaluations([user for _, user, _ in engine.seen])
    assert resumed.evaluations == 24


NOTES_OF_TEMPLATES = {  # what each built-in task's note says of its own template's decisions
    "tsp_construct": "its tours go to the nearest unvisited city at 100% of steps and have 0.11 pairs of crossing "
                     "edges per city",
    "kp_construct": "its packings fill 99.7% of the capacity on average; 100% of its picks took the best value/weight "
                    "ratio of the items that fit",
    "tsp_aco": "of its prior weight (an even prior: 2.0%), the nearest node in 100% of rows; 0% of moves are <= 0",
    "cvrp_aco": "the nearest node in 100% of rows; 0% of moves are <= 0",
    "bpp_aco": "(an even prior: 0.8%); 20% of moves are <= 0",
    "asp": "its priorities tie for 100% of the 2432 candidate rows (11 distinct values; the construction's order "
           "breaks ties); the tenth it ranks first holds 85% 1s, 15% 2s among its non-zero entries",
}


@pytest.mark.parametrize("name", sorted(NOTES_OF_TEMPLATES))
def test_each_built_in_task_writes_a_note_that_follows_the_decisions(name):
    """The built-in heuristic tasks' notes: what they say of the template's decisions, and that another
    program's decisions read otherwise."""
    from tasks.registry import heuristic_task

    task = heuristic_task(name)
    instances = task.instances(*task.train)
    namespace: dict = {}
    exec(task.template, namespace)
    template = feedback_of(task, list(task.decide(namespace[task.function_name], instances)), instances)
    assert NOTES_OF_TEMPLATES[name] in template and len(template) <= 200
    other = {  # the farthest city, the worst ratio, the farthest node most promising, a flat prior
        "tsp_construct": "def f(current_node, destination_node, unvisited_nodes, distance_matrix):\n"
                         "    return unvisited_nodes[-1]\n",
        "kp_construct": "import numpy as np\ndef f(remaining_capacity, weights, values):\n"
                        "    fits = [i for i in range(len(weights)) if weights[i] <= remaining_capacity]\n"
                        "    return min(fits, key=lambda i: values[i] / weights[i]) if fits else None\n",
        "tsp_aco": "def f(distance_matrix):\n    return distance_matrix.copy()\n",
        "cvrp_aco": "def f(distance_matrix, coordinates, demands, capacity):\n    return distance_matrix.copy()\n",
        "bpp_aco": "import numpy as np\ndef f(demands, capacity):\n    return np.ones((len(demands), len(demands)))\n",
        "asp": "def f(el, n, w):\n    return float(sum(x * 3 ** i for i, x in enumerate(el)))\n",  # one value per row
    }[name]
    exec(other, namespace)
    decisions = list(task.decide(namespace["f"], instances))
    task.score(decisions, instances)  # accepted, as the worker has it before the note
    note = feedback_of(task, decisions, instances)
    assert note and NOTES_OF_TEMPLATES[name] not in note
    if name in ("tsp_construct", "tsp_aco", "cvrp_aco"):
        assert " 0% of " in note or "at 0% of steps" in note, note
    if name == "asp":
        assert note.startswith("its priorities tie for 0% of the 2432 candidate rows (2432 distinct values"), note
