"""check-task on three mistakes a newcomer made with their own task (s52 walkthrough, findings 3, 5, 7):
instances that are plain objects (compared by what they hold, not by identity), a method whose signature
is not the one the framework calls (named with its file and line by the shape check), and an error raised
in a helper of score() (named with the function it is in, as the sandbox names it)."""

from __future__ import annotations

import pytest

from test_own_problem import broken, cli, write

# An instance as a plain object: no __eq__, so `==` is identity; ToyPick's decide() and score() read it
# as a list (len, iteration, indexing).
ROW = '''

class Row:
    """One instance: the values to pick from."""

    def __init__(self, values):
        self.values = values
        self.size = len(values)

    def __len__(self):
        return len(self.values)

    def __iter__(self):
        return iter(self.values)

    def __getitem__(self, index):
        return self.values[index]
'''
SEEDED_ROWS = "return [Row(rng.integers(0, 100, size).tolist()) for _ in range(4)]"


def rows(row: str = ROW, draw: str = SEEDED_ROWS) -> str:
    """ToyPick whose instances are `Row` objects (class text `row`, drawn by `draw`)."""
    return broken("return [rng.integers(0, 100, size).tolist() for _ in range(4)]", draw) + row


@pytest.fixture(autouse=True)
def _fresh_task_lookups():
    """Each test resolves its files afresh, as a new process would."""
    from tasks.loader import clear_cache

    clear_cache()
    yield
    clear_cache()


# -- finding 3: instances that are plain objects ------------------------------------------------
@pytest.mark.parametrize("case,text", [
    ("attributes", rows()),
    ("slots", rows(ROW.replace("    def __init__", '    __slots__ = ("values", "size")\n\n    def __init__'))),
    ("nested", rows(ROW.replace("self.size = len(values)", "self.size = Size(len(values))")
                    + "\n\nclass Size:\n    def __init__(self, n):\n        self.n = n\n")),
])
def test_deterministic_plain_object_instances_pass(tmp_path, case, text):
    """Equal draws of objects without __eq__ (by their __dict__, their __slots__, objects inside objects)
    pass check-task, as they pass `coevolve eval`; before, they were called non-deterministic."""
    problem = write(tmp_path / case, "problem.py", text)
    code, out, err = cli("check-task", str(problem), "--no-sandbox")
    assert code == 0, err
    assert "ok  instances: drawn twice, equal" in out, out


def test_plain_object_instances_that_differ_still_fail(tmp_path):
    problem = write(tmp_path / "random", "problem.py", rows().replace("[size, 0 if split == \"train\" else 1]", "None"))
    code, _, err = cli("check-task", str(problem), "--no-sandbox")
    assert code == 2 and "instances('test', 5): two draws differ; draw from a fixed seed" in err, err


def test_instances_whose_content_cannot_be_compared_are_named(tmp_path):
    """An object that compares by identity and holds a value with no content to compare (a generator):
    check-task says what it cannot compare, where, and what to do, instead of blaming randomness."""
    text = rows(ROW.replace("self.size = len(values)", "self.pending = (v for v in values)"))
    problem = write(tmp_path / "generator", "problem.py", text)
    code, _, err = cli("check-task", str(problem), "--no-sandbox")
    assert code == 2, err
    assert ("instances('train', 5): cannot tell whether two draws are equal: [0].pending is a generator, which "
            "compares by identity and has no content to compare (cannot pickle 'generator' object); ") in err, err
    assert "give your instance class an __eq__ (e.g. make it a dataclass)" in err, err
    assert "global randomness" not in err, err


def test_same_data_compares_objects_by_content():
    """The comparison itself: content, not identity; a cycle ends; types must match; == that cannot
    answer is named."""
    import numpy as np

    from tasks.check import Incomparable, same_data

    class Node:
        def __init__(self, value):
            self.value, self.next = value, None

    class Other(Node):
        pass

    a, b = Node(np.arange(3.0)), Node(np.arange(3.0))
    a.next, b.next = a, b  # a cycle each
    assert same_data(a, b) and same_data([a], [b])
    b.value = np.arange(3.0) + 1
    assert not same_data(a, b)
    assert not same_data(Node(1), Other(1)) and not same_data(Node(1), None)

    class Table:  # an __eq__ that answers with an array, as a DataFrame's does
        def __eq__(self, other):
            return np.array([True, False])

    with pytest.raises(Incomparable, match=r"\[1\] is a Table: its == raised ValueError"):
        same_data([1, Table()], [1, Table()])


# -- finding 5: a method's signature differs from the call the framework makes -------------------
SIGNATURES = {
    "score": ("def score(self, decisions, instances):", "def score(self, decisions):",
              "score(self, decisions) at {at} takes 1 argument; the framework calls score(decisions, instances)"),
    "decide": ("def decide(self, fn, instances):", "def decide(self, instances):",
               "decide(self, instances) at {at} takes 1 argument; the framework calls decide(fn, instances)"),
    "instances": ("def instances(self, split, size):", "def instances(self, split, size, seed):",
                  "instances(self, split, size, seed) at {at} takes 3 arguments; "
                  "the framework calls instances(split, size)"),
    "keyword": ("def score(self, decisions, instances):", "def score(self, decisions, instances, *, weight):",
                "score(self, decisions, instances, *, weight) at {at} needs the keyword argument weight; "
                "the framework calls score(decisions, instances)"),
    "optional": ("    def instance_seconds(self, size):",
                 "    def instance_scores(self, decisions):\n        return []\n\n"
                 "    def instance_seconds(self, size):",
                 "instance_scores(self, decisions) at {at} takes 1 argument; "
                 "the framework calls instance_scores(decisions, instances)"),
}


@pytest.mark.parametrize("case", sorted(SIGNATURES))
def test_a_wrong_signature_is_named_by_the_shape_check(tmp_path, case):
    """Before: `ok  shape` then a bare `TypeError: ...score() takes 2 positional arguments but 3 were given`."""
    old, new, expected = SIGNATURES[case]
    text = broken(old, new)
    problem = write(tmp_path / case, "problem.py", text)
    name = new.strip().removeprefix("def ").split("(")[0] if case != "optional" else "instance_scores"
    line = text[:text.index(f"def {name}(")].count("\n") + 1
    code, out, err = cli("check-task", str(problem), "--no-sandbox")
    assert code == 2 and "ok  shape" not in out, out + err
    assert err.strip().splitlines() == [f"coevolve check-task: error: {expected.format(at=f'{problem}:{line}')}"], err


@pytest.mark.parametrize("old,new", [
    ("def score(self, decisions, instances):", "def score(self, *args):\n        decisions, instances = args"),
    ("def score(self, decisions, instances):", "def score(self, decisions, instances, weight=1.0, **options):"),
    ("def decide(self, fn, instances):", "def decide(self, fn, instances=None, /):"),
    ("def instance_seconds(self, size):", "@staticmethod\n    def instance_seconds(size):"),
])
def test_signatures_the_framework_can_call_pass(tmp_path, old, new):
    """*args, **kwargs, defaults, positional-only parameters and static methods all take the call."""
    problem = write(tmp_path / "ok", "problem.py", broken(old, new))
    code, out, err = cli("check-task", str(problem), "--no-sandbox")
    assert code == 0 and "method signatures" in out, out + err


# -- finding 7: an error in a function score() calls names that function ----------------------
def test_an_error_in_a_helper_of_score_names_the_helper_as_the_sandbox_does(tmp_path):
    """score() calling instance_scores(), which raises: check-task names the line and the function, as
    the sandbox's verdict does for a candidate (`... (at problem.py:N, in instance_scores)`)."""
    from coevolve.sandbox import Sandbox

    text = broken("    def score(self, decisions, instances):",
                  "    def instance_scores(self, decisions, instances):\n"
                  "        return [float({1: values[1]}[index]) for index, values in zip(decisions, instances)]\n\n"
                  "    def score(self, decisions, instances):\n"
                  "        return sum(self.instance_scores(decisions, instances)) / len(instances)\n\n"
                  "    def _unused(self, decisions, instances):")
    problem = write(tmp_path / "helper", "problem.py", text)
    line = text[:text.index("return [float({1: ")].count("\n") + 1
    code, _, err = cli("check-task", str(problem), "--no-sandbox")
    assert code == 2, err
    assert (f"score(): with the template's decisions raised KeyError: 0 (at {problem}:{line}, in instance_scores)"
            in err), err
    # the sandbox says the same of a program that decides as the template does
    with Sandbox(workers=1, timeout_s=20) as sandbox:
        result = sandbox.evaluate("def pick(values):\n    return 0\n", str(problem))
    assert result.message.endswith(f"KeyError: 0 (at {problem}:{line}, in instance_scores)"), result.message
