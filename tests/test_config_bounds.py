"""Values `--plan` used to accept that the run then crashed on, after writing its directory and loading
the engine, or that silently wasted it (the bad-config sweep, /tmp/sweep_findings.md B1-B6, B10, B11):
each is refused at --plan in one line naming the key, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevolve.cli import main

HEURISTIC_COMPARE = """[compare]
methods = ["sample"]
tasks = ["tsp_construct"]
budgets = [40]
seeds = [0]
"""

AGENT_COMPARE = """[compare]
kind = "agent"
methods = ["base", "esopt"]
tasks = ["sudoku"]
budgets = [128]
seeds = [0]
[agent]
population = 8
batch = 4
"""

ENDPOINT = '[endpoint]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "stub"\n'
AGENT_RUN = '[run]\nmethod = "esopt"\ntask = "sudoku"\nbudget = 64\n'


def refused(tmp_path: Path, capsys, monkeypatch, command: str, text: str) -> str:
    """`coevolve COMMAND CFG --plan` on `text`: exit 2, one stderr line (returned), no file written."""
    monkeypatch.chdir(tmp_path)  # a run directory would land here
    config = tmp_path / "c.toml"
    config.write_text(text)
    before = sorted(tmp_path.rglob("*"))
    assert main([command, str(config), "--plan"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert sorted(tmp_path.rglob("*")) == before
    return err


@pytest.mark.parametrize("command, text, line", [
    # 1: vLLM takes temperatures in [0, 2], and says so only at the first generation
    ("run", "[sampling]\ntemperature = 7\n",
     "sampling.temperature must be in [0, 2] (vLLM's and OpenAI's range) (got 7.0)"),
    ("run", "[skill]\ntemperature = 2.5\n", "skill.temperature must be in [0, 2]"),
    ("run", AGENT_RUN + "[agent]\nteacher_temperature = 3\n", "agent.teacher_temperature must be in [0, 2]"),
    ("run", AGENT_RUN + "[agent]\neval_temperature = 3\n", "agent.eval_temperature must be in [0, 2]"),
    ("run", AGENT_RUN + "[sampling]\ntemperature = 7\n", "sampling.temperature must be in [0, 2]"),
    ("compare", HEURISTIC_COMPARE + "[sampling]\ntemperature = 7\n", "sampling.temperature must be in [0, 2]"),
    ("compare", AGENT_COMPARE + "eval_temperature = 7\n", "agent.eval_temperature must be in [0, 2]"),  # [agent] is last
    # 2: vLLM refuses an empty stop string
    ("run", '[sampling]\nstop = ["\\n", ""]\n', "sampling.stop[1] must not be empty (got '')"),
    ("run", AGENT_RUN + '[sampling]\nstop = [""]\n', "sampling.stop[0] must not be empty"),
    # 3: a dropped minus sign in σ or α; a σ that grows under the cosine schedule
    ("run", '[run]\nmethod = "sample+esopt"\n[es]\nsigma = 1e3\n',
     "es.sigma must be <= 10: the paper uses 1e-3 (a minus sign dropped from the exponent?) (got 1000.0)"),
    ("run", '[run]\nmethod = "sample+esopt"\n[es]\nalpha = 5e4\n',
     "es.alpha must be <= 10: the paper uses 5e-4 (a minus sign dropped from the exponent?) (got 50000.0)"),
    ("run", AGENT_RUN + "[es]\nsigma = 1e-3\nsigma_end = 1e-2\n",
     "es.sigma_end must be <= es.sigma (0.001): the cosine schedule decays σ from es.sigma to es.sigma_end "
     "(got 0.01)"),
    # 4, 5: select() and socket.settimeout() overflow near 9.2e9 s, mid-run
    ("run", "[sandbox]\ntimeout_s = 1e10\n",
     "sandbox.timeout_s must be in (0, 604800] (seconds, a week at most) (got 10000000000.0)"),
    ("compare", HEURISTIC_COMPARE + "[test]\ntimeout_s = 1e10\n", "test.timeout_s must be in (0, 604800]"),
    ("run", ENDPOINT + "timeout_s = 1e10\n", "endpoint.timeout_s must be in (0, 604800]"),
    # 6: the sandbox child's memory rlimit overflows a C long: every candidate fails
    ("run", "[sandbox]\nmemory_mb = 9223372036854775807\n",
     "sandbox.memory_mb must be in 64..16777216 (MB, 16 TiB at most) (got 9223372036854775807)"),
    ("compare", HEURISTIC_COMPARE + "[test]\nmemory_mb = 1000000000000000000\n", "test.memory_mb must be in 64..16777216"),
    # 7: Sandbox() starts every worker before it returns
    ("run", "[sandbox]\nworkers = 1000000000000000000\n",
     "sandbox.workers must be in 0..1024 (0: the sandbox's default) (got 1000000000000000000)"),
    # 8: round(offspring * k) overflows
    ("run", '[run]\nmethod = "eoh"\n[eoh]\nm_multiplier = 1e308\n',
     "eoh.m_multiplier must be in [0, 1000000] (0: scaled to the budget) (got 1e+308)"),
    # 9: held-out turns are decoded by the engine, whose context must hold prompt and reply
    ("compare", AGENT_COMPARE + "[eval]\nmax_tokens = 100000\n",
     "eval.max_tokens must be < model.max_len (2048): a prompt and its reply must fit (got 100000)"),
    # 10: drawn with replacement, the parent list is made before anything is asked
    ("run", '[run]\nmethod = "eoh"\n[eoh]\nparents = 1000000000000000000\nparents_with_replacement = true\n',
     "eoh.parents must be in 1..100 (programs shown in one prompt) (got 1000000000000000000)"),
])
def test_a_value_the_run_would_crash_on_is_refused_at_plan(tmp_path, capsys, monkeypatch, command, text, line):
    err = refused(tmp_path, capsys, monkeypatch, command, text)
    assert f"config error: {line}" in err, err


@pytest.mark.parametrize("command, text", [
    ("run", "[sampling]\ntemperature = 2\n"),
    ("run", '[sampling]\nstop = ["\\n```\\n"]\n'),
    ("run", '[run]\nmethod = "sample+esopt"\n[es]\nsigma = 10\nalpha = 10\nsigma_end = 0\n'),
    ("run", '[run]\nmethod = "sample+esopt"\n[es]\nschedule = "constant"\nsigma = 1e-4\n'),  # sigma_end unread
    ("run", "[sandbox]\ntimeout_s = 604800\nmemory_mb = 16777216\nworkers = 1024\n"),
    ("run", ENDPOINT + "timeout_s = 604800\n"),
    ("run", '[run]\nmethod = "eoh"\n[eoh]\nparents = 100\nparents_with_replacement = true\n'),
    ("compare", AGENT_COMPARE + "[eval]\nmax_tokens = 2047\n"),
])
def test_the_bounds_themselves_still_plan(tmp_path, capsys, monkeypatch, command, text):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text(text)
    assert main([command, str(tmp_path / "c.toml"), "--plan"]) == 0, capsys.readouterr().err
