"""`coevolve check-method FILE`: a method file's plan, then its hooks driven twice by the real search
loop with a proposer that needs no model and the real sandbox; PASS, or the method's first fault as
one line (a hook that raised, one still running after --hook-timeout, a draw from a global generator,
two runs with one seed that differ)."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from coevolve.cli import main
from coevolve.commands.check_method import TemplateVariants, varied
from coevolve.commands.check_method_task import TEMPLATE

HILL = '''from typing import Iterator

from pydantic import BaseModel, ConfigDict, Field

from coevolve.search.methods import Method, StepSpec


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    width: int = Field(4, ge=1)


class HillClimb(Method):
    label = "HillClimb"
    section = "hill"
    options = Options

    def steps(self) -> Iterator[StepSpec]:
        width = self.settings().width
        yield StepSpec("i1", width, False, 0)
        generation = 1
        while True:
            yield StepSpec("m1", width, self.perturbed, generation)
            generation += 1

    def pick(self, operator, rng, step, slot):
        ranked = self.ranked()
        if operator == "i1" or not ranked:
            return []
        return [PICK]
'''
GOOD = "ranked[int(rng.integers(len(ranked)))]"


def method_file(folder: Path, pick: str = GOOD, name: str = "hill.py") -> Path:
    path = folder / name
    path.write_text(HILL.replace("[PICK]", f"[{pick}]"))
    return path


def check(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["check-method", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def alarm() -> tuple:
    """SIGALRM's handler and the ITIMER_REAL timer (pytest-timeout's, when it runs with one)."""
    return signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)


def restored(before: tuple, limit: float) -> None:
    """The alarm as it was before a check with --hook-timeout `limit`: the handler itself, and no timer or
    the outer one again, not what was left of a hook's (at most `limit` seconds)."""
    handler, (left, every) = alarm()
    assert handler is before[0] and every == before[1][1]
    assert left == 0.0 if before[1][0] == 0.0 else limit < left <= before[1][0]


def test_a_good_method_passes_with_its_plan_and_each_step(tmp_path, capsys):
    path = method_file(tmp_path)
    code, out, err = check(capsys, str(path))
    assert code == 0, err
    assert out.startswith(f"plan: HillClimb ({path})")  # format_plan, as `coevolve run --plan` prints it
    assert "total: 24 evaluations = T 24" in out
    steps = re.findall(r"step +(\d+) (\w+) +(\d+) requests +archive +(\d+) +parents: (.*)", out)
    assert [(s[0], s[1], s[2]) for s in steps] == [("0", "i1", "4")] + [(str(i), "m1", "4") for i in range(1, 6)]
    assert steps[0][4] == "-, -, -, -"  # i1 shows no parents
    # the variants of the template's constant score differently: the archive fills (EoH's population of 10)
    assert [int(s[3]) for s in steps] == [4, 8, 10, 10, 10, 10]
    assert all(re.fullmatch(r"\d+(, \d+){3}", s[4]) for s in steps[1:])  # one parent each, by id
    assert out.splitlines()[-1].startswith("PASS  6 steps, 24 requests")
    assert err == ""


def test_config_budget_and_seed_reach_the_plan(tmp_path, capsys):
    path = method_file(tmp_path)
    config = tmp_path / "run.toml"
    config.write_text('[run]\nmethod = "eoh"\ntask = "tsp_aco"\nbudget = 500\n\n[hill]\nwidth = 3\n')
    code, out, err = check(capsys, str(path), "--config", str(config), "--budget", "9", "--seed", "4",
                           "--hook-timeout", "1")
    assert code == 0, err
    assert "budget T = 9" in out and "i1 3" in out  # the method's own section from the config
    assert "on " + str(Path(__file__).parents[1] / "coevolve/commands/check_method_task.py") in out  # not tsp_aco
    assert "with seed 4" in out
    assert len(re.findall(r"step +\d+ ", out)) == 3


def test_a_pick_that_raises_is_one_line_naming_the_file_line_and_hook(tmp_path, capsys):
    path = method_file(tmp_path, 'ranked[0] if step < 2 else {}["missing"]')
    line = 1 + HILL.splitlines().index("        return [PICK]")
    before = alarm()
    code, out, err = check(capsys, str(path))
    assert code == 1
    assert out.startswith("plan: HillClimb")  # the plan came first
    assert "PASS" not in out
    assert err.splitlines() == [f"coevolve check-method: error: method file {path}: pick() in step 2 raised "
                                f"KeyError: 'missing' (at {path}:{line})"]
    restored(before, 10)  # the hook's time limit ended with the hook that raised


def test_a_hook_that_never_returns_is_stopped_at_the_limit_naming_its_line(tmp_path, capsys):
    path = method_file(tmp_path, "ranked[0] if step < 2 else [x for x in iter(int, 1)]")  # iter(int, 1): endless
    line = 1 + HILL.splitlines().index("        return [PICK]")
    before = alarm()
    code, out, err = check(capsys, str(path), "--hook-timeout", "1")
    assert code == 1 and out.startswith("plan: HillClimb") and "PASS" not in out
    assert err.splitlines() == [f"coevolve check-method: error: method file {path}: pick() in step 2: still running "
                                f"after 1 s (at {path}:{line}); a loop that never ends? (--hook-timeout S gives "
                                "each hook longer)"]
    restored(before, 1)


def test_a_steps_that_never_yields_is_stopped_while_planning(tmp_path, capsys):
    path = tmp_path / "endless.py"
    path.write_text(HILL.replace("[PICK]", f"[{GOOD}]").replace("        width = self.settings().width\n",
                                                                  "        while True: pass\n"))
    line = 1 + path.read_text().splitlines().index("        while True: pass")
    code, out, err = check(capsys, str(path), "--hook-timeout", "1")
    assert code == 1 and out == ""  # before the plan is printed: steps() is what --plan runs
    assert err.splitlines() == [f"coevolve check-method: error: method file {path}: its plan: still running after "
                                f"1 s (at {path}:{line}); a loop that never ends? (--hook-timeout S gives each "
                                "hook longer)"]


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "inf", "2e6"])
def test_a_hook_timeout_not_a_positive_number_of_seconds_is_refused(tmp_path, capsys, seconds):
    code, out, err = check(capsys, str(method_file(tmp_path)), f"--hook-timeout={seconds}")
    assert code == 2 and out == ""  # refused before the method is loaded
    assert err.splitlines() == ["coevolve check-method: error: --hook-timeout must be a number of seconds in "
                                f"(0, 1000000] (got {float(seconds):g})"]


def test_a_method_file_that_does_not_import_is_the_loaders_error(tmp_path, capsys):
    path = tmp_path / "broken.py"
    path.write_text("def broken(:\n")
    code, out, err = check(capsys, str(path))
    assert code == 2 and out == ""
    assert err.strip() == (f"coevolve check-method: error: config error: run.method {path}: importing it failed: "
                           f"SyntaxError at {path}:1: invalid syntax")
    code, out, err = check(capsys, str(tmp_path / "nope.py"))
    assert code == 2 and err.strip() == (f"coevolve check-method: error: {tmp_path / 'nope.py'}: method file not "
                                         f"found: {tmp_path / 'nope.py'}")


def test_a_draw_from_the_global_random_module_is_flagged(tmp_path, capsys):
    path = method_file(tmp_path, "ranked[__import__('random').randrange(len(ranked))]")
    code, out, err = check(capsys, str(path))
    assert code == 1 and "PASS" not in out
    # the loop's own line (search/loop.py global_draw_note), which a run only warns with
    assert len(err.splitlines()) == 1
    assert err.startswith(f"coevolve check-method: error: method file {path} drew from the global random module "
                          "in pick()")


def test_numpys_global_generator_is_flagged_too(tmp_path, capsys):
    path = method_file(tmp_path, "ranked[__import__('numpy').random.randint(len(ranked))]")
    code, _, err = check(capsys, str(path))
    assert code == 1 and "numpy's global np.random in pick()" in err


def test_a_method_that_picks_differently_with_the_same_seed_is_flagged(tmp_path, capsys):
    # a generator of its own, unseeded: no global state moves, but two runs pick differently
    path = method_file(tmp_path, "ranked[__import__('random').Random().randrange(len(ranked))]")
    code, out, err = check(capsys, str(path))
    assert code == 1 and "PASS" not in out
    assert len(err.splitlines()) == 1
    assert re.fullmatch(rf"coevolve check-method: error: method file {re.escape(str(path))}: not deterministic: "
                        r"two runs with seed 0 picked differently at step \d+ request \d+: m1 with parents "
                        r"\[\d+\], then m1 with parents \[\d+\]; .*\n", err)


def test_the_proposer_varies_only_the_templates_float_constants_by_seed():
    assert varied(TEMPLATE, 7) == varied(TEMPLATE, 7)
    changed = [(a, b) for a, b in zip(TEMPLATE.splitlines(), varied(TEMPLATE, 7).splitlines()) if a != b]
    assert len(changed) == 1 and changed[0][0] == "    GUESS = 1.0"
    assert 0.5 <= float(changed[0][1].split("=")[1]) < 1.5
    assert varied(TEMPLATE, 7) != varied(TEMPLATE, 8)
    assert varied("def f(x):\n    return x[0] + 0x1F\n", 3) == "def f(x):\n    return x[0] + 0x1F\n"
    reply = TemplateVariants(TEMPLATE).chat([[{"role": "user", "content": "?"}]], None, seeds=[7])[0].text
    assert varied(TEMPLATE, 7) in reply and reply.startswith("{variant 7}\n```python\n")


def test_an_agent_task_is_refused(capsys):
    code, out, err = check(capsys, "esopt", "--task", "sudoku", "--budget", "64")
    assert code == 2 and out == ""
    assert err.strip() == "coevolve check-method: error: sudoku is an agent task: methods search heuristic tasks"


def test_a_hook_that_calls_sys_exit_is_one_line_saying_a_methods_code_must_not_exit(tmp_path, capsys):
    path = method_file(tmp_path, 'ranked[0] if step < 2 else __import__("sys").exit(3)')
    line = 1 + HILL.splitlines().index("        return [PICK]")
    code, out, err = check(capsys, str(path), "--hook-timeout", "5")
    assert code == 1 and "PASS" not in out  # not a silent end with the hook's own status 3
    assert len(err.splitlines()) == 1, err
    assert f"exited the process (sys.exit(3)) at {path}:{line}" in err
    assert err.rstrip().endswith("a method's code must return a value or raise an exception, not exit"), err
