"""Config errors that misled or hid the value (config sweep s55 W13, W11, B12): through the real CLI,
exit 2, one line naming the key as the file wrote it.

- A key written under the wrong section is said to be another section's key, not offered the near name
  among the wrong section's own keys (`[es] temperature` was told "did you mean 'operators'?").
- A `model.path` of spaces is refused at validation with the value quoted, not reported later as a
  folder that "does not exist" with the spaces invisible.
- A `ray://` address that is no HOST[:PORT] (no host, a port past 65535) is a config error, not a
  plan warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevolve.base.config import build_config
from coevolve.base.errors import ConfigError
from coevolve.base.sections import DistributedSection, ModelSection
from coevolve.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SEARCH = '[run]\nmethod = "sample+esopt"\ntask = "tsp_construct"\nbudget = 40\n'
AGENT = '[run]\nmethod = "esopt"\ntask = "sudoku"\nbudget = 64\n[agent]\npopulation = 4\nbatch = 4\n'
COMPARE = (EXAMPLES / "compare_quick.toml").read_text()
AGENT_COMPARE = (EXAMPLES / "agents_compare.toml").read_text()
ES_KEYS = ("alpha, antithetic, ddof, generations, noise, normalise, operators, population, proposals_per_member, "
           "rank, schedule, sigma, sigma_end, sigma_steps")


def refused(tmp_path: Path, capsys, text: str, command: str) -> str:
    """`coevolve COMMAND c.toml --plan` on `text`: exit 2 and one stderr line, returned."""
    config = tmp_path / "c.toml"
    config.write_text(text, encoding="utf-8")
    assert main([command, str(config), "--plan"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err.removeprefix(f"coevolve {command}: error: ")


@pytest.mark.parametrize("text, command, line", [
    (SEARCH + "[es]\ntemperature = 0.5\n", "run",
     f"config error: es.temperature is not a known field (known: {ES_KEYS}); it is a key of [sampling] and [skill]"),
    (SEARCH + "[eoh]\nbatch = 10\n", "run", "config error: eoh.batch is not a known field (known: dedup_decimals, "
     "generations, init, init_in_budget, m_multiplier, offspring, operators, parents, parents_with_replacement, "
     "population, show_scores, tie_break); it is a key of [sample]"),
    (SEARCH + "[context]\npopulation = 4\n", "run", "config error: context.population is not a known field (known: "
     "constrain, failure_chars, failures, feedback, fingerprint, seed_template, similarity); it is a key of [eoh], "
     "[es] and [sample]"),
    (AGENT + "\n[es]\ntemperature = 0.5\n", "run",
     f"config error: es.temperature is not a known field (known: {ES_KEYS}); it is a key of [sampling]"),
    (AGENT + "\n[sampling]\nbatch = 4\n", "run", "config error: sampling.batch is not a known field (known: "
     "max_tokens, presence_penalty, stop, temperature, top_k, top_p); it is a key of [agent]"),
    (COMPARE.replace("[test]\n", "[test]\ntemperature = 1.0\n"), "compare", "config error: test.temperature is "
     "not a known field (known: limit, memory_mb, seeds, sizes, split, timeout_s, workers); it is a key of "
     "[sampling] and [skill]"),
    (AGENT_COMPARE.replace("[eval]\n", "[eval]\npopulation = 4\n"), "compare", "config error: eval.population is "
     "not a known field (known: constrained, k, max_tokens, problems); it is a key of [agent] and [es]"),
], ids=["es.temperature", "eoh.batch", "context.population", "agent es.temperature", "agent sampling.batch",
        "test.temperature", "agent compare eval.population"])
def test_a_key_under_the_wrong_section_names_the_section_that_takes_it(tmp_path, capsys, text, command, line):
    assert refused(tmp_path, capsys, text, command) == line


def test_a_named_arm_and_an_old_section_name_are_told_the_same(tmp_path, capsys):
    arm = COMPARE.replace('methods = ["sample", "sample+esopt"]', 'methods = ["sample", "hot"]') + \
        '\n[compare.arms.hot]\nmethod = "sample"\n[compare.arms.hot.es]\ntemperature = 1.0\n'
    assert refused(tmp_path, capsys, arm, "compare").startswith("config error: compare.arms.hot.es.temperature is "
                                                                "not a known field (known: alpha, ")
    assert refused(tmp_path, capsys, arm, "compare").endswith("; it is a key of [sampling] and [skill]")
    old = refused(tmp_path, capsys, SEARCH + "[proposer]\ntop_p = 0.9\n", "run")
    assert old.startswith("config error: proposer.top_p is not a known field (known: api_key_env, base_url, "), old
    assert old.endswith("; it is a key of [sampling]"), old


def test_a_key_no_other_section_takes_keeps_its_near_name(tmp_path, capsys):
    assert refused(tmp_path, capsys, SEARCH + "[es]\nsigmaa = 1e-3\n", "run").endswith("did you mean 'sigma'?")
    # an agent task's options are no section's keys: a `population` there is the task's to judge
    assert "task.population" in refused(tmp_path, capsys, AGENT + "\n[task]\npopulation = 4\n", "run")


@pytest.mark.parametrize("path", ["   ", "models/  "])
def test_a_model_path_of_spaces_is_refused_with_its_value_quoted(tmp_path, capsys, path):
    line = refused(tmp_path, capsys, SEARCH + f'[model]\npath = "{path}"\n', "run")
    assert line == (f"config error: model.path must name a folder, not spaces (got '{tmp_path / path}'); leave it "
                    "out for the embedded model")


@pytest.mark.parametrize("address, problem", [
    ("ray://", 'must be "local", "auto" or "ray://HOST:PORT"'),
    ("ray://127.0.0.1:99999", "must be ray://HOST:PORT with PORT in 1..65535"),
    ("ray://head:0", "must be ray://HOST:PORT with PORT in 1..65535"),
    ("ray://head:port", 'must be "local", "auto" or "ray://HOST:PORT"'),
    ("ray://head:10001/x", 'must be "local", "auto" or "ray://HOST:PORT"'),
])
def test_a_ray_address_that_names_no_host_and_port_is_a_config_error(tmp_path, capsys, address, problem):
    line = refused(tmp_path, capsys, SEARCH + f'[distributed]\naddress = "{address}"\n', "run")
    assert line == f"config error: distributed.address {problem} (got '{address}')"
    compared = refused(tmp_path, capsys, COMPARE + f'\n[distributed]\naddress = "{address}"\n', "compare")
    assert compared == line


@pytest.mark.parametrize("address", ["local", "auto", "ray://head", "ray://10.0.0.1:10001", "ray://head:65535",
                                     "ray://[::1]:10001"])
def test_a_ray_address_of_host_and_port_is_taken(address):
    assert build_config(DistributedSection, {"address": address}, "distributed").address == address


def test_a_blank_path_given_directly_is_refused_too():
    with pytest.raises(ConfigError, match=r"^config error: model.path must name a folder, not spaces \(got ' '\)"):
        build_config(ModelSection, {"path": " "}, "model")
