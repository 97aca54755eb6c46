"""Bad config input (audit 3, items C1, C2, C5-C8, B7, B9, B10): one line naming the TOML key, the value
and what was expected, exit 2, no traceback, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coevolve.base.config import build_config
from coevolve.base.errors import UsageError
from coevolve.base.skills import SkillError, load_skill
from coevolve.cli import main

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "c.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def refused(tmp_path: Path, capsys, text: str | bytes, *extra: str) -> str:
    """`coevolve run CFG --plan` on `text`: exit 2, one stderr line (returned), no file written."""
    config = write(tmp_path, text)
    before = sorted(tmp_path.rglob("*"))
    assert main(["run", str(config), "--plan", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert sorted(tmp_path.rglob("*")) == before
    return err


def planned(tmp_path: Path, capsys, text: str) -> str:
    assert main(["run", str(write(tmp_path, text)), "--plan"]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


# C1 ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("data, where", [
    (b"# caf\xe9\n[run]\nbudget = 10\n", "byte 0xe9 at position 5"),
    (b'[run]\nmethod = "\xff\xfe"\n', "byte 0xff at position 16"),
])
def test_a_config_that_is_not_utf8_is_one_line(tmp_path, capsys, data, where):
    err = refused(tmp_path, capsys, data)
    assert err.endswith(f"config error: {tmp_path / 'c.toml'} is not UTF-8 text ({where}); TOML files must be UTF-8")


# C2 ------------------------------------------------------------------------------------------------------
def test_a_skill_that_is_not_utf8_is_a_skill_error_naming_the_file(tmp_path, capsys):
    folder = tmp_path / "badskill"
    folder.mkdir()
    (folder / "SKILL.md").write_bytes(b"---\nname: x\xff\n---\n")
    with pytest.raises(SkillError, match=r"badskill/SKILL.md is not UTF-8 text \(byte 0xff at position 11\)"):
        load_skill(folder)
    err = refused(tmp_path, capsys, f'[skill]\nstart = "{folder}"\n')
    assert "config error: skill.start is not a valid skill: " in err and "SKILL.md is not UTF-8 text" in err


# C6 ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ('[run]\nmethod = "islands"\n[islands]\nislands = "4"\n', "islands.islands must be an integer (got '4')"),
    ('[run]\nmethod = "islands"\n[islands]\nislands = 4.0\n', "islands.islands must be an integer (got 4.0)"),
    ('[run]\nmethod = "islands"\n[islands]\nreset_every = true\n', "islands.reset_every must be an integer (got True)"),
    ('[run]\nmethod = "islands"\n[islands]\nsize = true\n', "islands.size must be an integer (got True)"),
    ('[run]\nmethod = "map_elites"\n[map_elites]\nbins = "6"\n', "map_elites.bins must be an integer (got '6')"),
    ('[run]\nmethod = "pareto"\n[pareto]\nsize = "3"\n', "pareto.size must be an integer (got '3')"),
    ('[run]\nmethod = "pareto"\n[pareto]\nsize = true\n', "pareto.size must be an integer (got True)"),
])
def test_method_sections_coerce_nothing(tmp_path, capsys, text, message):
    assert refused(tmp_path, capsys, text).endswith(f"config error: {message}")


def test_method_sections_still_take_an_int_for_a_float(tmp_path, capsys):
    planned(tmp_path, capsys, '[run]\nmethod = "map_elites"\nbudget = 40\n[map_elites]\nranges = { lines = [1, 30] }\n')


# C8 ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, key, value", [
    ("[sampling]\nmax_tokens = 100000\n", "sampling.max_tokens", 100000),
    ("[sampling]\nmax_tokens = 2048\n", "sampling.max_tokens", 2048),
    ("[model]\nmax_len = 512\n[sampling]\nmax_tokens = 600\n", "sampling.max_tokens", 600),
    ("[skill]\nmax_tokens = 100000\n", "skill.max_tokens", 100000),
    # an [endpoint] answers the base requests, but ES's perturbed ones are the engine's
    ('[run]\nmethod = "eoh+esopt"\n[endpoint]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
     "[sampling]\nmax_tokens = 4096\n", "sampling.max_tokens", 4096),
])
def test_a_reply_longer_than_the_engines_context_is_refused(tmp_path, capsys, text, key, value):
    err = refused(tmp_path, capsys, text)
    max_len = 512 if "max_len = 512" in text else 2048
    assert err.endswith(f"config error: {key} must be < model.max_len ({max_len}): a prompt and its reply must fit "
                        f"(got {value})")


def test_long_replies_from_an_endpoint_alone_need_no_engine_context(tmp_path, capsys):
    planned(tmp_path, capsys, '[run]\nmethod = "eoh"\nbudget = 20\n[endpoint]\nbase_url = "http://127.0.0.1:9/v1"\n'
                              'model = "m"\n[sampling]\nmax_tokens = 4096\n')


# C5 ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("budget", ["9223372036854775807", "1_000_001"])
def test_an_absurd_budget_is_refused_before_planning(tmp_path, capsys, budget):
    err = refused(tmp_path, capsys, f"[run]\nbudget = {budget}\n")
    assert err.endswith(f"config error: run.budget must be in 1..1000000 (evaluations, or agent episodes) "
                        f"(got {int(budget)})")


# C7 ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, runs", [
    ('[run]\nmethod = "eoh+esopt"\nbudget = 48\n[eoh]\npopulation = 6\noffspring = 6\n[es]\noperators = ["m3"]\n',
     "e1, e2, m1, m2"),
    ('[run]\nmethod = "eoh+esopt"\nbudget = 48\n[eoh]\noperators = ["e1", "e2"]\n', "e1, e2"),
    ('[run]\nmethod = "islands+esopt"\nbudget = 48\n[es]\noperators = ["m3"]\n', "e1, e2, m1, m2"),
])
def test_es_operators_naming_none_the_plan_runs_are_refused(tmp_path, capsys, text, runs):
    err = refused(tmp_path, capsys, text)
    assert f"config error: es.operators names no operator eoh.operators runs (it runs: {runs}): ES would move " \
           "no weights" in err


def test_es_operators_some_of_which_the_plan_runs_pass(tmp_path, capsys):
    """The default m1, m2 with m2 dropped from eoh.operators: ES perturbs m1."""
    planned(tmp_path, capsys, '[run]\nmethod = "eoh+esopt"\nbudget = 48\n[eoh]\noperators = ["e1", "e2", "m1"]\n')


@pytest.mark.parametrize("method", ["sample+esopt", "eoh+esopt", "islands+esopt", "map_elites+esopt",
                                    "pareto+esopt", "sample"])
def test_es_operators_defaults_pass_under_every_method(tmp_path, capsys, method):
    planned(tmp_path, capsys, f'[run]\nmethod = "{method}"\nbudget = 60\n')


# B7 ------------------------------------------------------------------------------------------------------
def test_a_misspelt_key_in_a_renamed_section_is_named_where_written(tmp_path, capsys):
    err = refused(tmp_path, capsys, '[run]\ntask = "tsp_construct"\n[proposer]\nconcurency = 2\n')
    assert err.endswith("config error: proposer.concurency is not a known field (known: api_key_env, base_url, "
                        "concurrency, model, models, retries, select, timeout_s); did you mean 'concurrency'?")


def test_a_renamed_section_warns_in_one_clean_line(tmp_path):
    config = write(tmp_path, '[run]\ntask = "tsp_construct"\nbudget = 20\n[proposer]\nbase_url = "http://x/v1"\n'
                             'model = "m"\n')
    done = subprocess.run([sys.executable, "-m", "coevolve.cli", "run", str(config), "--plan"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ("warning: config: [proposer] is deprecated, call it [endpoint] "
                           "(read as [endpoint] this time)\n")


# B9 / B10 --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ('[es]\nnoise = "lowrnk"\n', "es.noise must be one of full, lowrank (got 'lowrnk'); did you mean 'lowrank'?"),
    ('[es]\nnoise = "flul"\n', "es.noise must be one of full, lowrank (got 'flul'); did you mean 'full'?"),
    ('[run]\nmethod = "map_elites"\n[map_elites]\ndescriptors = ["lines", "branches", "calls", "constants"]\n',
     "map_elites.descriptors must list at most 3 values (got ['lines', 'branches', 'calls', 'constants'])"),
    ('[run]\nmethod = "map_elites"\n[map_elites]\nranges = { lines = [5.0] }\n',
     "map_elites.ranges.lines must be [low, high] with low < high (got [5.0])"),
    ('[run]\nmethod = "map_elites"\n[map_elites]\nranges = { lines = [5.0, 1.0] }\n',
     "map_elites.ranges.lines must be [low, high] with low < high (got [5.0, 1.0])"),
    ('[endpoint]\nbase_url = "http://x/v1"\nmodels = { "" = 1.0 }\n',
     "endpoint.models names a model with an empty name; give each model's name as the endpoint knows it (got '')"),
    ('[endpoint]\nmodel = "gpt-4o-mini"\n',
     "endpoint.base_url is required when endpoint.model or endpoint.models is set (without it the engine's own "
     "model answers every request and the endpoint model is ignored)"),
    ('[endpoint]\nmodels = { a = 1.0, b = 2.0 }\n', "endpoint.base_url is required when endpoint.model"),
    # a URL without its scheme was read, then failed as "cannot reach ...; is the server running?"
    ('[endpoint]\nbase_url = "localhost:8000/v1"\nmodel = "m"\n', "endpoint.base_url must be an http:// or "
     "https:// URL, such as http://127.0.0.1:8000/v1 (got 'localhost:8000/v1')"),
    ('[endpoint]\nbase_url = "http://"\nmodel = "m"\n', "endpoint.base_url must be an http:// or https:// URL"),
])
def test_error_lines_read_as_ours(tmp_path, capsys, text, message):
    assert f"config error: {message}" in refused(tmp_path, capsys, text)


def test_a_string_too_long_says_how_many_characters():
    from coevolve.agents.runconfig import AgentRunConfig

    with pytest.raises(UsageError) as info:
        build_config(AgentRunConfig, {"run": {"task": "sudoku"}, "agent": {"skill_name": "a" * 100}})
    assert str(info.value).startswith("config error: agent.skill_name must be at most 64 characters (got 'aaa")


def test_a_map_elites_range_for_no_descriptor_is_refused(tmp_path, capsys):
    err = refused(tmp_path, capsys, '[run]\nmethod = "map_elites"\n[map_elites]\nranges = { brnaches = [0, 9] }\n')
    assert err.endswith("config error: map_elites.ranges.brnaches names no descriptor of map_elites.descriptors "
                        "(lines, branches); did you mean 'branches'?")


# a method's own table left over from a config written for that method -----------------------------------
@pytest.mark.parametrize("method, table", [("eoh", "[map_elites]\nbins = 4\n"), ("sample+esopt", "[islands]\nislands = 2\n"),
                                           ("map_elites", "[pareto]\nsize = 3\n")])
def test_a_table_only_another_method_reads_is_named_as_that(tmp_path, capsys, method, table):
    section = owner = table[1:table.index("]")]
    err = refused(tmp_path, capsys, f'[run]\nmethod = "{method}"\nbudget = 48\n{table}')
    assert err == (f"coevolve run: error: config error: {section} is read by method {owner} only, which run.method does not name: "
                   f"remove [{section}], or run {owner}"), err
    planned(tmp_path, capsys, f'[run]\nmethod = "{owner}"\nbudget = 48\n{table}')  # its own method reads it


# an [es] written for a method without ES was read silently: the user believed the weights were trained
@pytest.mark.parametrize("text, note", [
    ('[run]\nmethod = "eoh"\nbudget = 20\n[es]\nsigma = 0.01\n[reward]\ngain = 3.0\n',
     "note: [es] and [reward] are not read: run.method = 'eoh' trains no weights (ES runs under eoh+esopt)"),
    ('[run]\nmethod = "eoh+trace2skill"\nbudget = 200\n[es]\nsigma = 0.01\n',
     "note: [es] is not read: run.method = 'eoh+trace2skill' trains no weights (ES runs under "
     "eoh+esopt+trace2skill)"),
    ('[run]\ntask = "sudoku"\nmethod = "trace2skill"\nbudget = 16\n[agent]\npopulation = 2\nbatch = 2\n'
     '[es]\nsigma = 0.01\n',
     "note: [es] is not read: run.method = 'trace2skill' trains no weights (ES runs under esopt or "
     "esopt+trace2skill)"),
])
def test_es_sections_a_method_without_es_never_reads_are_noted(tmp_path, capsys, text, note):
    assert main(["run", str(write(tmp_path, text)), "--plan"]) == 0
    assert note in capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("text", ['[run]\nmethod = "eoh+esopt"\nbudget = 20\n[es]\nsigma = 0.01\n',
                                  '[run]\nmethod = "eoh"\nbudget = 20\n'])
def test_no_note_where_es_reads_its_section_or_none_is_given(tmp_path, capsys, text):
    assert main(["run", str(write(tmp_path, text)), "--plan"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_a_config_errors_key_is_read_once_for_every_holder():
    """`error_key` splits the line `config_error` makes; `keys_under` names the key under its holder,
    a list index and all, and leaves a line naming no key as it is."""
    from coevolve.base.config import config_error, error_key, keys_under
    from coevolve.base.errors import ConfigError

    assert error_key("config error: es.sigma must be > 0 (got -1.0)") == ("es.sigma", " must be > 0 (got -1.0)")
    assert error_key("config error: compare.methods[1] must be") == ("compare.methods", "[1] must be")
    assert error_key("task t: describe() failed") is None
    with pytest.raises(ConfigError, match=r"^config error: compare\.arms\.a\.skills\.paths\[0\] is not a folder$"):
        with keys_under("compare.arms.a"):
            raise config_error("skills.paths[0]", "is not a folder")
    with pytest.raises(ConfigError, match=r"^no key here$"):
        with keys_under("compare.arms.a"):
            raise ConfigError("no key here")
