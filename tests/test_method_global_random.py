"""A user's method that draws from Python's global `random` (or numpy's global np.random) instead of the
`rng` it is handed is warned once, one line naming the method file and the hook, and the run's log
records it; a resume whose replay then picks otherwise is refused naming that cause, not "different code
or config". The same method drawing from `rng` is not warned, nor is a built-in.

Real CLI path (coevolve.cli.main) against the stub endpoint (tests/endpoint_stub.py), the real sandbox
on tsp_construct; no engine."""

from __future__ import annotations

import json
import random
from pathlib import Path

import endpoint_stub
import numpy as np
import pytest

from coevolve.cli import main
from coevolve.report.rendering import render_run
from test_endpoint_replies import write_config

stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # its fixtures, where pytest finds them

# a hill climber that flips a coin for m1's parent: without one the request is i1, so a coin that falls
# otherwise on resume changes the logged requests
METHOD = '''from coevolve.search.methods import Method, StepSpec
DRAW


class Coin(Method):
    def steps(self):
        yield StepSpec("i1", 2, False, 0)
        generation = 1
        while True:
            yield StepSpec("m1", 2, False, generation)
            generation += 1

    def pick(self, operator, rng, step, slot):
        best = self.best()
        if operator == "i1" or best is None:
            return []
        return [best] if COIN < 0.5 else []
'''
GLOBAL = METHOD.replace("DRAW", "import random").replace("COIN", "random.random()")
NUMPY = METHOD.replace("DRAW", "import numpy as np").replace("COIN", "np.random.random()")
OWN_RNG = METHOD.replace("DRAW", "").replace("COIN", "rng.random()")


def run_method(tmp_path: Path, base_url: str, source: str | None, capsys) -> tuple[Path, int, str]:
    """`coevolve run` of a budget-8 run of `source` (None: the built-in sample) against the stub."""
    tmp_path.mkdir(exist_ok=True)
    config = write_config(tmp_path, base_url)
    text = config.read_text().replace("budget = 4", "budget = 8")
    if source is not None:
        method = tmp_path / "coin.py"
        method.write_text(source)
        text = text.replace('method = "sample"', f'method = "{method}"')
    config.write_text(text)
    out = tmp_path / "run"
    code = main(["run", str(config), "--out", str(out), "--no-progress"])
    return out, code, capsys.readouterr().err


def warnings_in(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


def events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def test_a_method_drawing_from_global_random_is_warned_once_naming_file_and_hook(stub, tmp_path, capsys):
    out, code, err = run_method(tmp_path, stub.base_url, GLOBAL, capsys)
    assert code == 0, err
    assert warnings_in(err) == [f"warning: method file {tmp_path / 'coin.py'} drew from the global random module "
                                "in pick(): a resumed run will not repeat it; draw from the rng it is handed"], err
    recorded = [e for e in events(out) if e["type"] == "global_random"]
    assert [(e["hook"], e["drew"]) for e in recorded] == [("pick", "the global random module")]
    report = render_run(out)["report.md"].read_text()  # the run's report says so to whoever reads it later
    assert "**Not reproducible from its seed: method file" in report, report


# a draw in start(), before the log is open, is recorded after the start event (events[0] stays the start);
# one in parents(), which the base pick() calls, names parents(): the hook the user wrote; steps() is checked
# as the loop takes each step from it
IN_START = OWN_RNG.replace("    def pick(", """    def start(self, task):
        super().start(task)
        import random
        self.order = random.sample(range(4), 4)

    def pick(""")
IN_PARENTS = (OWN_RNG.split("    def pick(")[0] + """    def parents(self, operator, population, rng):
        import random
        best = self.best()
        return [] if operator == "i1" or best is None or random.random() < 0.5 else [best]
""")

IN_STEPS = OWN_RNG.replace('        yield StepSpec("i1", 2, False, 0)', """        import random
        yield StepSpec("i1", 2 if random.random() < 2 else 1, False, 0)""")


@pytest.mark.parametrize("source, hook", [(IN_START, "start"), (IN_PARENTS, "parents"), (IN_STEPS, "steps")])
def test_the_hook_named_is_the_one_the_method_wrote(stub, tmp_path, capsys, source, hook):
    out, code, err = run_method(tmp_path, stub.base_url, source, capsys)
    assert code == 0, err
    way = "the rng it is handed" if hook == "parents" else "a generator of its own seeded from run.seed"
    assert len(warnings_in(err)) == 1 and f"module in {hook}(): a resumed run will not repeat it; draw from {way}" \
        in warnings_in(err)[0], err
    logged = events(out)
    assert logged[0]["type"] == "start"
    assert [e["hook"] for e in logged if e["type"] == "global_random"] == [hook]


def test_numpys_global_generator_is_named(stub, tmp_path, capsys):
    _, code, err = run_method(tmp_path, stub.base_url, NUMPY, capsys)
    assert code == 0, err
    assert [w.split(" drew from ")[1].split(":")[0] for w in warnings_in(err)] == ["numpy's global np.random in pick()"]


def test_the_same_method_drawing_from_its_rng_and_a_built_in_are_not_warned(stub, tmp_path, capsys):
    out, code, err = run_method(tmp_path / "own", stub.base_url, OWN_RNG, capsys)
    assert code == 0, err
    assert warnings_in(err) == [], err
    assert "global_random" not in {e["type"] for e in events(out)}
    assert "drew from" not in err, err
    assert "Not reproducible" not in render_run(out)["report.md"].read_text()
    _, code, err = run_method(tmp_path / "sample", stub.base_url, None, capsys)
    assert code == 0 and "drew from" not in err, err


def test_a_resume_that_replays_other_draws_is_refused_naming_the_method_and_the_cause(stub, tmp_path, capsys):
    stub.mode, stub.good_first = "e500", 6  # three steps answered, then the endpoint fails: the run stops
    random.seed(1)
    out, code, err = run_method(tmp_path, stub.base_url, GLOBAL, capsys)
    assert code == 1, err
    assert len(warnings_in(err)) == 1, err
    stub.mode = "good"
    random.seed(2)  # a new session's global generator (a new process's comes from the OS)
    code = main(["run", "--resume", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    refusal = [line for line in err.splitlines() if "does not replay the same requests" in line]
    assert len(refusal) == 1, err
    assert refusal[0].endswith(f": method file {tmp_path / 'coin.py'} drew from the global random module in "
                               "pick(), which a resume does not repeat; fix the method and start a new run"), err
    assert warnings_in(err) == [], err  # said once a run: the refusal says it now
    assert [e["type"] for e in events(out)].count("global_random") == 1


def test_the_check_costs_little_against_a_request():
    """global_generators() runs twice around each of a user's hooks (a request's pick among them)."""
    import timeit

    from coevolve.search.loop import global_generators

    np.random.seed(0)
    seconds = timeit.timeit(global_generators, number=200) / 200
    assert seconds < 0.005, seconds
