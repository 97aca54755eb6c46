"""[compare] baseline (walkthrough: a user's method and EoH got no verdict): two methods that no default
rule pairs (EoH and Islands: neither is the other's variant or named arm, and Sample is not compared)
get a Δ row and Welch's verdict when compare.baseline names one of them, and without it the report says
once that they are not compared pairwise and which key would compare them; `--plan` lists the pairs.

Hand-made comparison directories (tests/test_report.py's fake_run): no engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.base.config import build_config
from coevolve.base.errors import ConfigError
from coevolve.cli import main
from coevolve.compare import CompareConfig
from coevolve.plan import compared_pairs, load_compare_config
from coevolve.report import render_comparison
from test_report_honest_numbers import make_comparison

# tsp_construct: lower is better, test20 reference 4.0; EoH clearly ahead of Islands over two seeds
OBJECTIVES = {("eoh", 0): 4.4, ("eoh", 1): 4.41, ("islands", 0): 5.0, ("islands", 1): 5.02}
NOTE = ('EoH and Islands are not compared pairwise (no Δ row or verdict between them): set [compare] '
        'baseline = "eoh" for a verdict between them.')


def comparison(root: Path, compare: dict) -> Path:
    return make_comparison(root, ["eoh", "islands"], OBJECTIVES, [0, 1], compare)


def rendered(root: Path) -> tuple[str, dict]:
    render_comparison(root)
    return (root / "report.md").read_text(), json.loads((root / "results.json").read_text())


def test_a_baseline_gives_a_delta_row_and_a_verdict(tmp_path):
    report, results = rendered(comparison(tmp_path, {"baseline": "eoh"}))
    deltas = [r for r in results["rows"] if r["kind"] == "delta"]
    assert [(r["base"], r["variant"]) for r in deltas] == [("eoh", "islands")]
    # Δ as every other pair's: the baseline's gap / the method's gap − 1 (gaps 10.1% and 25.25%)
    assert deltas[0]["delta"] == pytest.approx(0.10125 / 0.2525 - 1)
    assert deltas[0]["distinct"] is True
    assert "| Δ Islands vs EoH |" in report
    assert any(c.startswith("EoH vs Islands on tsp_construct test20 at budget 10: the arms differ")
               for c in results["conclusions"]), results["conclusions"]
    assert "also set against EoH (compare.baseline)" in report
    assert NOTE not in report


def test_without_a_baseline_the_report_says_the_methods_are_not_compared(tmp_path):
    report, results = rendered(comparison(tmp_path, {}))
    assert not [r for r in results["rows"] if r["kind"] == "delta"]
    assert results["conclusions"].count(NOTE) == 1
    assert report.count(NOTE) == 1


def test_a_baseline_repeats_no_pair_already_compared(tmp_path):
    config = build_config(CompareConfig, {"compare": {
        "methods": ["sample", "eoh", "eoh+esopt", "islands"], "baseline": "eoh", "tasks": ["tsp_construct"]}})
    # Sample's pairs and eoh+esopt's stay; EoH adds Islands only (Sample vs EoH is there already)
    assert compared_pairs(config) == [("eoh", "eoh+esopt"), ("sample", "eoh"), ("sample", "islands"),
                                      ("eoh", "islands")]


@pytest.mark.parametrize("value", ["eoh+esopt", "tournament"])
def test_a_baseline_must_be_a_compared_method(value):
    with pytest.raises(ConfigError) as error:
        build_config(CompareConfig, {"compare": {"methods": ["eoh", "islands"], "baseline": value}})
    assert str(error.value).startswith("config error: compare.baseline must be one of compare.methods: eoh, "
                                       f"islands (got {value!r})")
    assert "\n" not in str(error.value)


MINE = ("from coevolve.search.methods import Method, StepSpec\n\n\n"
        "class Mine(Method):\n"
        "    label = 'Mine'\n\n"
        "    def steps(self):\n"
        "        yield StepSpec('i1', 2, False, 0)\n"
        "        generation = 1\n"
        "        while True:\n"
        "            yield StepSpec('m1', 2, self.perturbed, generation)\n"
        "            generation += 1\n\n"
        "    def pick(self, operator, rng, step, slot):\n"
        "        best = self.best()\n"
        "        return [] if operator == 'i1' or best is None else [best]\n")


def test_a_file_method_is_the_baseline_as_written(tmp_path):
    """compare_config names a file method absolutely: the baseline written as in methods still names it."""
    (tmp_path / "mine.py").write_text(MINE)
    path = tmp_path / "c.toml"
    path.write_text('[compare]\nmethods = ["mine.py", "eoh"]\nbaseline = "mine.py"\ntasks = ["tsp_construct"]\n'
                    'budgets = [12]\nseeds = [0]\n[test]\nsizes = [20]\n')
    config = load_compare_config(path)
    mine = str((tmp_path / "mine.py").resolve())
    assert config.compare.baseline == mine
    assert compared_pairs(config) == [(mine, "eoh")]


def test_the_plan_lists_the_pairs_it_gives_verdicts_for(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.toml"
    text = ('[compare]\nmethods = ["eoh", "islands"]\ntasks = ["tsp_construct"]\nbudgets = [12]\nseeds = [0]\n'
            '[test]\nsizes = [20]\nlimit = 8\n[eoh]\npopulation = 4\n')
    path.write_text(text)
    assert main(["compare", str(path), "--plan"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "verdicts for: no pair of methods" in out
    assert f"  {NOTE}" in out
    path.write_text(text.replace("seeds = [0]\n", 'seeds = [0]\nbaseline = "eoh"\n'))
    assert main(["compare", str(path), "--plan"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "verdicts for: Islands vs EoH" in out
    assert f"  {NOTE}" not in out
