"""Every config the repository holds loads through the config models: each TOML
under examples/ (recursively), the files the dataclass config code wrote before
configs moved to pydantic (tests/data/old_configs: a run directory's
config.toml and a comparison's compare.toml, as old directories hold them),
and the old spellings (`[proposer]`, `[teacher]`, `[run] task`). The repository
commits no run directory, so those three stand in for them."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from coevolve.agents.runconfig import AgentRunConfig
from coevolve.base.config import as_dict, build_config, dump_toml, read_toml
from coevolve.base.errors import UsageError
from coevolve.es.config import upgraded
from coevolve.commands.run import config_class, load_run_config
from coevolve.plan import CompareConfig, load_compare_config
from coevolve.es.start import same_run_settings
from coevolve.search.runconfig import RunConfig

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").rglob("*.toml"))
OLD = ROOT / "tests" / "data" / "old_configs"
# keys added to an existing section after those files were written, at their defaults
ADDED_SINCE = {"context": {"seed_template": False, "feedback": True}, "model": {"dtype": "auto", "max_len": 2048}, "accounting": {"clone_retries": 0},
               "skill": {"start": "", "keep": "latest"}, "endpoint": {"models": {}, "select": "fixed", "timeout_s": 300.0},
               "sandbox": {"overlap": True, "seeds": 1}, "start": {"programs": []}, "test": {"seeds": 1},
               "eoh": {"tie_break": []}, "distributed": {"tensor_parallel_size": 1},
               "agent": {"teacher_max_tokens": 160}}


def with_added(raw: dict) -> dict:
    """An old file's config as the code writes it today: the keys added since at their defaults, and
    es.rank only under low-rank noise (every directory recorded it before [es] became a union)."""
    today = {k: {**v, **ADDED_SINCE[k]} if k in ADDED_SINCE and isinstance(v, dict) else v for k, v in raw.items()}
    return {**today, "es": upgraded(today["es"])} if "es" in today else today


def test_the_examples_are_all_found():
    names = {p.relative_to(ROOT / "examples").as_posix() for p in EXAMPLES}
    assert {"paper/tsp.toml", "paper/agents/sudoku_esopt.toml", "problems/bin_packing/config.toml",
            "tsp_sample.toml", "sudoku_esopt.toml", "compare_quick.toml"} <= names
    assert len(EXAMPLES) >= 40


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.relative_to(ROOT / "examples").as_posix())
def test_every_example_loads_and_round_trips(path, tmp_path):
    raw = read_toml(path)
    configs = [load_run_config(path, {})]  # a comparison preset runs its first arm
    if "compare" in raw:
        configs.append(load_compare_config(path, out=str(tmp_path)))
    for config in configs:
        again = build_config(type(config), tomllib.loads(dump_toml(as_dict(config))))
        assert as_dict(again) == as_dict(config)


@pytest.mark.parametrize("name, kind", [("search_run.toml", RunConfig), ("agent_run.toml", AgentRunConfig)])
def test_an_old_run_directory_loads_and_its_settings_still_match(name, kind):
    """What `--resume` does: the class from the task, then the start event's
    config (the file, as written) must be the loaded one's, key for key."""
    raw = read_toml(OLD / name)
    config = build_config(config_class(raw), raw)
    assert isinstance(config, kind)
    assert same_run_settings(raw, as_dict(config))
    # written again, the file is the same, plus the sections and keys added since at their defaults ([log])
    again = tomllib.loads(dump_toml(as_dict(config)))
    assert {key: again[key] for key in raw} == with_added(raw) and set(again) - set(raw) <= {"log"}


def test_an_old_comparison_loads_as_report_reads_it():
    raw = read_toml(OLD / "compare.toml")
    config = build_config(CompareConfig, raw)
    assert config.compare.methods == ["eoh", "eoh+esopt"] and config.test.limit == 8
    # written again, the file is the same but for the comparison kind (issue 21 item 3), named arms and the
    # baseline added since
    assert tomllib.loads(dump_toml(as_dict(config))) == {**with_added(raw), "compare": {
        "kind": "heuristic", "arms": {}, "baseline": "", **raw["compare"]}}


def test_old_section_names_still_read_with_a_warning():
    with pytest.warns(FutureWarning, match=r"\[teacher\] is deprecated, call it \[endpoint\]"):
        config = build_config(AgentRunConfig, {"teacher": {"base_url": "http://x/v1", "model": "m"}})
    assert config.endpoint.model == "m"
    with pytest.raises(UsageError, match=r"teacher is the old name of \[endpoint\]; give only \[endpoint\]"):
        build_config(AgentRunConfig, {"teacher": {}, "endpoint": {}})


def test_the_task_is_named_in_task_or_in_run_not_both():
    assert build_config(RunConfig, {"task": {"name": "kp_construct"}}).run.task == "kp_construct"
    agent = build_config(AgentRunConfig, {"task": {"name": "sudoku", "masked": 2}})
    assert (agent.run.task, agent.task) == ("sudoku", {"masked": 2})
    assert "name" not in as_dict(agent)["task"] and as_dict(agent)["run"]["task"] == "sudoku"
    with pytest.raises(UsageError, match="config error: task.name and run.task both name the task; give only one"):
        build_config(RunConfig, {"task": {"name": "kp_construct"}, "run": {"task": "tsp_construct"}})
    with pytest.raises(UsageError, match="config error: task.size is not a known field .*heuristic tasks take no"):
        build_config(RunConfig, {"task": {"name": "kp_construct", "size": 3}})
    with pytest.raises(UsageError, match="config error: run.task must be one of"):
        build_config(AgentRunConfig, {"task": {"name": "tsp_construct"}})


def test_a_task_file_named_in_task_counts_from_the_tomls_folder(tmp_path):
    shutil.copy(ROOT / "examples" / "problems" / "bin_packing" / "problem.py", tmp_path / "problem.py")
    (tmp_path / "c.toml").write_text('[task]\nname = "problem.py"\n[run]\nmethod = "sample"\nbudget = 4\n')
    config = load_run_config(tmp_path / "c.toml", {})
    assert isinstance(config, RunConfig) and config.run.task.startswith(str((tmp_path / "problem.py").resolve()))


def test_a_model_folder_is_made_absolute_as_the_task_is(tmp_path, monkeypatch):
    """[model] path counts from the TOML's folder and --model from the working directory, as a task file
    does; the run's config.toml then names it, so --resume and `coevolve eval --run` find it from any
    folder. The embedded model's names stay as they are."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "c.toml").write_text('[run]\nmethod = "sample"\nbudget = 4\n[model]\npath = "ckpt"\n')
    assert load_run_config(tmp_path / "configs" / "c.toml", {}).model.path == str(tmp_path / "configs" / "ckpt")
    monkeypatch.chdir(tmp_path)
    flag = load_run_config(tmp_path / "configs" / "c.toml", {"model": {"path": "~/m"}})
    assert flag.model.path == str(Path("~/m").expanduser().resolve())
    assert load_run_config(tmp_path / "configs" / "c.toml", {"model": {"path": "other"}}).model.path == str(
        tmp_path / "other")
    for name in ("default", "smollm2-135m-instruct"):
        assert load_run_config(tmp_path / "configs" / "c.toml", {"model": {"path": name}}).model.path == name
    # a comparison's counts from the comparison's TOML
    from coevolve.plan import load_compare_config

    (tmp_path / "configs" / "cmp.toml").write_text(
        '[compare]\nmethods = ["eoh"]\ntasks = ["tsp_construct"]\nbudgets = [4]\nseeds = [0]\n'
        '[model]\npath = "ckpt"\n')
    compared = load_compare_config(tmp_path / "configs" / "cmp.toml")
    assert compared.model.path == str(tmp_path / "configs" / "ckpt")


@pytest.mark.parametrize("raw, message", [
    ({"es": {"noise": "half"}}, "es.noise must be one of full, lowrank (got 'half')"),
    ({"es": {"noise": "lowrank", "rank": 600}}, "es.rank must be in 1..512 (vLLM's LoRA ranks) (got 600)"),
    ({"es": {"rank": 4}}, 'es.rank is for es.noise = "lowrank" only (got 4)'),
    ({"es": {"noise": "half"}}, "es.noise must be one of full, lowrank (got 'half')"),
    ({"es": {"noise": "lowrank", "ranks": 4}}, "es.ranks is not a known field (known: alpha, antithetic, ddof,"),
    ({"es": {"sigma": float("inf")}}, "es.sigma must be finite (got inf)"),
    ({"sampling": {"stop": "x"}}, "sampling.stop must be a list (got 'x')"),
    ({"sampling": {"tmp": 1}}, "sampling.tmp is not a known field (known: max_tokens, presence_penalty, stop,"),
    ({"eoh": {"dedup_decimals": 16}}, "eoh.dedup_decimals must be in -1..15 (-1: exact) (got 16)"),
    ({"caps": {"prices": {"m": [1.0]}}}, "caps.prices.m must be [USD per 1M prompt tokens, USD per 1M completion"),
    ({"start": {"program": "seed"}}, "start.program must be one of template, reference (got 'seed')"),
    ({"distributed": {"address": "10.0.0.1"}}, 'distributed.address must be "local", "auto" or "ray://HOST:PORT"'),
])
def test_messages_name_the_key_the_value_and_what_it_must_be(raw, message):
    with pytest.raises(UsageError) as info:
        build_config(RunConfig, raw)
    assert str(info.value).startswith(f"config error: {message}") and "\n" not in str(info.value)


@pytest.mark.parametrize("kind", [RunConfig, AgentRunConfig])
def test_a_resume_may_change_how_requests_reach_the_endpoint_and_nothing_else_there(kind):
    """Both run kinds: timeout_s, retries and concurrency may change between sessions (a run that died of
    timeouts goes on with more time); the model asked may not."""
    logged = as_dict(build_config(kind, {"endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}))
    changed = as_dict(build_config(kind, {"endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "m",
                                                       "timeout_s": 900, "retries": 8, "concurrency": 2}}))
    assert same_run_settings(logged, changed)
    other = as_dict(build_config(kind, {"endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "other"}}))
    assert not same_run_settings(logged, other)
