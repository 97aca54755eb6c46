"""A method file's own mistakes, said at `coevolve run --plan` as one line naming the file (exit 2,
nothing written), and its label in the plan's head. The method files are written into tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

HEAD = '''
from typing import Iterator
from pydantic import BaseModel, ConfigDict, Field
from coevolve.search.methods import Method, StepSpec


class GaOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    width: int = Field(2, ge=1)


class TournamentGA(Method):
    label = "TournamentGA"
    section = "tga"
    options = GaOptions
'''
GOOD_STEPS = '''
    def steps(self) -> Iterator[StepSpec]:
        yield StepSpec("i1", self.settings().width, False, 0)
        generation = 1
        while True:
            yield STEP
            generation += 1
'''
GOOD = HEAD + GOOD_STEPS.replace("STEP", 'StepSpec("m1", 2, self.perturbed, generation)')


def write(folder: Path, name: str, text: str, section: bool = True) -> tuple[Path, Path]:
    method = folder / name
    method.write_text(text)
    config = folder / "c.toml"
    config.write_text(f'[run]\nmethod = "{method}"\ntask = "tsp_construct"\nbudget = 12\n'
                      + ("[tga]\nwidth = 2\n" if section else ""))
    return method, config


def line_of(text: str, snippet: str) -> int:
    """The line `snippet` begins on in `text` (1-based), as Python reports it."""
    return text[:text.index(snippet)].count("\n") + 1


def plan(config: Path, capsys) -> tuple[int, str, str]:
    from coevolve.cli import main

    code = main(["run", str(config), "--plan"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def refused(config: Path, capsys, folder: Path) -> str:
    code, _, err = plan(config, capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert not (folder / "runs").exists()
    return err


# -- 1: a method file that fails to load, with its own section in the config --------------------------
@pytest.mark.parametrize("text,expected", [
    (GOOD.replace("def steps(self) -> Iterator[StepSpec]:", "def steps(self) -> Iterator[StepSpec]"),
     "importing it failed: SyntaxError at {method}:"),
    ("import numpyy\n" + GOOD, "importing it failed: ModuleNotFoundError: No module named 'numpyy'"),
], ids=["syntax", "import"])
def test_a_method_file_that_fails_to_load_says_why_though_the_config_has_its_section(tmp_path, capsys,
                                                                                     text, expected):
    """Before: `config error: tga is not a known section (known: ...)`, the file's error never shown."""
    method, config = write(tmp_path, "ga.py", text)
    err = refused(config, capsys, tmp_path)
    assert expected.format(method=method) in err and "not a known section" not in err, err


def test_a_compared_method_file_that_fails_to_load_is_named_by_compare_methods(tmp_path, capsys):
    """In a comparison the key that lists the method is compare.methods, not run.method."""
    from coevolve.cli import main

    method, _ = write(tmp_path, "ga.py", "import numpyy\n" + GOOD)
    config = tmp_path / "cmp.toml"
    config.write_text(f'[compare]\nmethods = ["{method}", "eoh"]\ntasks = ["tsp_construct"]\nbudgets = [12]\n'
                      'seeds = [0]\n[tga]\nwidth = 2\n')
    assert main(["compare", str(config), "--plan"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"coevolve compare: error: config error: compare.methods {method}: importing it failed: "
                          "ModuleNotFoundError"), err


def test_a_wrong_class_in_a_method_spec_is_named_though_the_config_has_its_section(tmp_path, capsys):
    method, config = write(tmp_path, "ga.py", GOOD)
    config.write_text(config.read_text().replace(f'"{method}"', f'"{method}:HillClimb"'))
    err = refused(config, capsys, tmp_path)
    assert "no method class 'HillClimb' (method classes in the file: TournamentGA)" in err, err


# -- 2: mistakes in steps() ----------------------------------------------------------------------------
def test_a_method_without_steps_is_one_line_naming_its_class_and_file(tmp_path, capsys):
    """Before: a NotImplementedError traceback from coevolve/search/methods.py, exit status 1."""
    method, config = write(tmp_path, "ga.py", HEAD)
    err = refused(config, capsys, tmp_path)
    assert f"method TournamentGA ({method}:{line_of(HEAD, 'class TournamentGA')}) defines no steps()" in err, err


@pytest.mark.parametrize("step,expected", [
    ('("m1", 2, False, generation)', "is ('m1', 2, False, 1), not a StepSpec"),  # before: TypeError '<'
    ('StepSpec("m1", -3, False, generation)', "asks for count = -3 candidates"),  # before: '-3 evaluations'
    ('StepSpec("m1", 0, False, generation)', "asks for count = 0 candidates"),  # before: a run that stops at once
    ('StepSpec("m1", 2.5, False, generation)', "asks for count = 2.5 candidates"),
    ('StepSpec("crossover", 2, False, generation)', "has operator 'crossover': known operators: i1, e1"),
    ('StepSpec("m1", 2, "yes", generation)', "has perturbed = 'yes'"),
], ids=["tuple", "negative", "zero", "fraction", "operator", "perturbed"])
def test_a_bad_step_is_one_line_naming_the_method_the_yield_and_the_step(tmp_path, capsys, step, expected):
    text = HEAD + GOOD_STEPS.replace("STEP", step)
    method, config = write(tmp_path, "ga.py", text)
    err = refused(config, capsys, tmp_path)
    yielded = line_of(text, f"yield {step}")
    assert f"method TournamentGA: its step 1, yielded at {method}:{yielded}, {expected}" in err, err


def test_a_bad_first_step_of_a_steps_list_names_where_steps_is_defined(tmp_path, capsys):
    """A steps() that returns a list has no yield to point at: the line it is defined on."""
    text = HEAD + '''
    def steps(self):
        return [StepSpec("i1", 0, False, 0)]
'''
    method, config = write(tmp_path, "ga.py", text)
    err = refused(config, capsys, tmp_path)
    assert f"its step 0, yielded at {method}:{line_of(text, 'def steps')}, asks for count = 0" in err, err


# -- 3: the plan's head names a file method by its label -------------------------------------------------
def test_the_plan_names_a_method_file_by_its_label_and_path(tmp_path, capsys):
    method, config = write(tmp_path, "ga.py", GOOD)
    code, out, err = plan(config, capsys)
    assert code == 0, err
    assert out.startswith(f"plan: TournamentGA ({method}) on tsp_construct, budget T = 12"), out


def test_the_plan_names_a_built_in_method_as_given(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text('[run]\nmethod = "eoh"\ntask = "tsp_construct"\nbudget = 12\n')
    code, out, err = plan(config, capsys)
    assert code == 0 and out.startswith("plan: eoh on tsp_construct, budget T = 12"), (out, err)
