"""Config loading and validation: every bad field is one line naming it."""

from __future__ import annotations


import tomllib
from pathlib import Path

import pytest

from tasks.registry import is_agent_task

from coevolve.base.errors import UsageError
from coevolve.cli import main
from coevolve.base.config import as_dict, build_config, dump_toml, load_config
from coevolve.commands.run import context_lines
from coevolve.plan import CompareConfig
from coevolve.sandbox import Sandbox
from coevolve.search.methods import run_plan
from coevolve.search.runconfig import RunConfig

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("[es]\nsigma = -1\n", "config error: es.sigma must be > 0 (got -1.0)"),
    ("[es]\nsigmaa = 1\n", "config error: es.sigmaa is not a known field"),
    ("[run]\nbudget = 0\n", "config error: run.budget must be in 1..1000000 (evaluations, or agent "
                            "episodes) (got 0)"),
    ("[run]\nbudget = 'ten'\n", "config error: run.budget must be an integer (got 'ten')"),
    ("[run]\nmethod = 'evo'\n", "config error: run.method must be one of sample, eoh, sample+esopt, eoh+esopt"),
    ("[runn]\n", "config error: runn is not a known section (known: accounting, caps, context, distributed, endpoint, "
               "eoh, es, log, model, reward, run, sample, sampling, sandbox, skill, start)"),
    ("[model]\ndtype = 'float16'\n", "config error: model.dtype must be one of auto, bfloat16, float32 (got 'float16')"),
    ("[accounting]\nclone_retries = 9\n", "config error: accounting.clone_retries must be in 0..8 (got 9)"),
    ("[sandbox]\nseeds = 0\n", "config error: sandbox.seeds must be in 1..64 (got 0)"),
    ("run = 3\n", "config error: run must be a table (got 3)"),
    ("[eoh]\noperators = ['e1', 'x9']\n", "config error: eoh.operators must be one of"),
    ("[es]\nantithetic = 1\n", "config error: es.antithetic must be true or false (got 1)"),
    ("[es]\noperators = ['m1', 'x9']\n", "config error: es.operators must be one of e1, e2, m1, m2, m3, diff, repair (got 'x9')"),
    # issue 25: the context's and caps' bad input, one line each
    ("[skill]\nevery = 0\n", "config error: skill.every must be >= 1"),
    ("[run]\nmethod = 'eoh+trace2skill'\nbudget = 20\n[skill]\nevery = 3\n",
     "config error: skill.every is longer than the run (2 proposal steps under run.budget = 20)"),
    ("[context]\nsimilarity = 0\n", "config error: context.similarity must be in (0, 1] (got 0.0)"),
    ("[context]\nsimilarity = 1.5\n", "config error: context.similarity must be in (0, 1] (got 1.5)"),
    ("[caps]\ncompletion_tokens = 0\n", "config error: caps.completion_tokens must be > 0"),
    ("[caps]\nwall_s = -5\n", "config error: caps.wall_s must be > 0"),
    ("[caps]\npatience = 0\n", "config error: caps.patience must be > 0 (leave it out for no cap) (got 0)"),
    ("[caps]\ntarget = 'low'\n", "config error: caps.target must be a number (got 'low')"),
    ("[endpoint]\nbase_url = 'http://127.0.0.1:9/v1'\nmodel = 'm'\n[caps]\nmoney = 1.0\nprices = { other = [1, 2] }\n",
     "config error: caps.prices has no price for the [endpoint] model 'm'"),
    ("[es]\npopulation = 1\n", "config error: es.population must be >= 2 (or 0: set by the run) (got 1)"),
    ("[es]\ngenerations = 3\n", "config error: es.generations is for agent runs; heuristic runs take their ES "
                                 "generations from the plan (got 3)"),
    ("[reward]\nfailing = -2.0\n", "config error: reward.unparseable must be < reward.failing (got -1.0)"),
    ("[endpoint]\nbase_url = 'http://x'\n", "config error: endpoint.model is required when endpoint.base_url is set"),
    ("[endpoint]\n[proposer]\n", "config error: proposer is the old name of [endpoint]; give only [endpoint]"),
    ("[es\n", "is not valid TOML"),
    # a misspelt name ends with the near one
    ("[es]\nsigmaa = 1\n", "; did you mean 'sigma'?"),
    ("[runn]\n", "; did you mean 'run'?"),
    ("[run]\nmethod = 'eohh'\n", "(got 'eohh'); did you mean 'eoh'?"),
    ("[es]\nnormalise = 'zscor'\n", "(got 'zscor'); did you mean 'zscore'?"),
    ("[eoh]\noperators = ['e1', 'mm2']\n", "(got 'mm2'); did you mean 'm2'?"),
])
def test_bad_configs_name_the_field(tmp_path, text, message):
    with pytest.raises(UsageError) as info:
        load_config(RunConfig, write(tmp_path, text))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_defaults_overrides_and_round_trip(tmp_path):
    config = load_config(RunConfig, write(tmp_path, "[run]\nmethod = 'eoh'\n[es]\nsigma = 2\n"),
                         {"run": {"budget": 7, "seed": 3}})
    assert (config.run.method, config.run.budget, config.run.seed) == ("eoh", 7, 3)
    assert config.es.sigma == 2.0 and isinstance(config.es.sigma, float)  # ints accepted for floats
    assert config.eoh.operators == ["e1", "e2", "m1", "m2"]
    again = build_config(RunConfig, tomllib.loads(dump_toml(as_dict(config))))
    assert as_dict(again) == as_dict(config)


def test_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="config file not found"):
        load_config(RunConfig, tmp_path / "nope.toml")


def test_every_example_config_is_valid():
    examples = sorted((ROOT / "examples").glob("*.toml"))
    run_examples = [
        p for p in examples
        if "[run]" in p.read_text() and not is_agent_task(tomllib.loads(p.read_text())["run"]["task"])
    ]  # agent examples are checked in test_agents_run_cli.py
    assert len(run_examples) >= 4
    methods = set()
    for path in run_examples:
        config = load_config(RunConfig, path)
        methods.add(config.run.method)
    assert methods >= {"sample", "eoh", "sample+esopt", "eoh+esopt", "eoh+esopt+trace2skill"}


def test_cli_bad_config_exits_2_with_one_line(tmp_path, capsys):
    code = main(["run", str(write(tmp_path, "[es]\nsigma = -1\n")), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == "coevolve run: error: config error: es.sigma must be > 0 (got -1.0)"
    assert not (tmp_path / "r").exists()


def test_cli_missing_model_exits_2_before_any_directory(tmp_path, capsys):
    """A [model] path (--model) that names no checkpoint is one line naming the field, before a run or
    comparison directory exists; a run whose endpoint answers every request never reads the model."""
    heuristic, agent = ROOT / "examples" / "tsp_eoh_esopt.toml", ROOT / "examples" / "sudoku_esopt.toml"
    for argv in (["run", str(heuristic), "--model", "/nonexistent/m", "--out", str(tmp_path / "r")],
                 ["run", str(agent), "--model", str(tmp_path), "--out", str(tmp_path / "a")],
                 ["compare", str(write(tmp_path, '[model]\npath = "/nonexistent/m"\n[compare]\nmethods = ["sample"]\n'
                                       'tasks = ["tsp_construct"]\nbudgets = [4]\nseeds = [0]\n')),
                  "--out", str(tmp_path / "cmp")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "error: config error: model.path: model directory " in err, err
        assert ("does not exist" if "nonexistent" in err else "has no config.json") in err, err
    assert not any((tmp_path / name).exists() for name in ("r", "a", "cmp"))
    endpoint = write(tmp_path, '[run]\nmethod = "sample"\n[model]\npath = "/nonexistent/m"\n'
                               '[endpoint]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    assert main(["run", str(endpoint), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "model.path" not in err and "127.0.0.1:9" in err, err


def test_a_context_past_the_models_own_is_one_line_before_any_directory(tmp_path, capsys):
    """SmolLM2-135M-Instruct was trained on 8192 tokens (its model card; max_position_embeddings in the
    shipped GGUF's metadata): [model] max_len 8193 is refused by run, agent run and compare, and by the
    engine itself before vLLM starts; 8192 passes."""
    from coevolve.base.sections import ModelSection
    from coevolve.engine.local import require_model
    from coevolve.engine.models import ModelError
    from coevolve.engine.vllm_engine import Engine

    expected = "config error: model.max_len must be <= 8192, the model's own context (max_position_embeddings in "
    long = '\n[model]\nmax_len = 8193\n'
    heuristic = tmp_path / "h.toml"
    heuristic.write_text((ROOT / "examples" / "tsp_eoh_esopt.toml").read_text() + long)
    agent = tmp_path / "a.toml"
    # (its seed skill named from anywhere: the copy is not beside ../skills)
    agent.write_text((ROOT / "examples" / "sudoku_esopt.toml").read_text().replace('"../skills/', f'"{ROOT}/skills/')
                     + long)
    compare = write(tmp_path, '[compare]\nmethods = ["sample"]\ntasks = ["tsp_construct"]\nbudgets = [4]\n'
                              'seeds = [0]' + long)
    for argv in (["run", str(heuristic), "--out", str(tmp_path / "r")], ["run", str(agent), "--out", str(tmp_path / "a")],
                 ["compare", str(compare), "--out", str(tmp_path / "cmp")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and expected in err and err.endswith("config.json) (got 8193)"), err
    assert not any((tmp_path / name).exists() for name in ("r", "a", "cmp"))
    assert require_model(ModelSection(max_len=8192)) is None
    with pytest.raises(ModelError, match=r"model.max_len must be <= 8192.*\(got 9000\)"):
        Engine(max_model_len=9000)


@pytest.mark.parametrize("config,limit", [
    ({"max_position_embeddings": 4096}, (4096, "max_position_embeddings")),
    ({"max_position_embeddings": 4096, "n_positions": 2048}, (2048, "n_positions")),  # the least wins
    ({"text_config": {"max_position_embeddings": 32768}, "vision_config": {}}, (32768, "max_position_embeddings")),
    ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, None),
    ({"max_position_embeddings": 8192, "rope_parameters": {"rope_theta": 1e5, "rope_type": "default"}},
     (8192, "max_position_embeddings")),
    ({"hidden_size": 64}, None),
    # as vLLM reads them: model_max_length, when given, wins even over a smaller key (Command-R's config)
    ({"max_position_embeddings": 8192, "model_max_length": 131072}, (131072, "model_max_length")),
    ({"n_positions": 1024, "seq_len": 512}, (512, "seq_len")),
])
def test_the_context_a_checkpoint_declares(tmp_path, config, limit):
    import json

    from coevolve.engine.models import context_limit

    (tmp_path / "config.json").write_text(json.dumps(config))
    assert context_limit(tmp_path) == limit


def test_cli_output_directory_blocked_by_a_file_is_one_line(tmp_path, capsys):
    """--out (run, compare) or new-task --dir where a file is in the way: one line naming the flag, exit 2."""
    (tmp_path / "f").write_text("mine")
    compare = write(tmp_path, '[compare]\nmethods = ["sample"]\ntasks = ["tsp_construct"]\n'
                              'budgets = [4]\nseeds = [0]\n')
    for argv, flag in ((["run", str(ROOT / "examples" / "tsp_eoh_esopt.toml"), "--out", str(tmp_path / "f")],
                        "run.out (--out)"),
                       (["run", str(ROOT / "examples" / "tsp_eoh_esopt.toml"), "--out", str(tmp_path / "f" / "r")],
                        "run.out (--out)"),
                       (["compare", str(compare), "--out", str(tmp_path / "f")], "(compare.out, --out)"),
                       (["new-task", "mine", "--dir", str(tmp_path / "f")], "new-task --dir")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{flag}: cannot make the directory " in err, err
        assert "a file is in the way" in err, err
    assert (tmp_path / "f").read_text() == "mine"


def test_ctrl_c_during_a_run_says_how_to_resume_and_exits_130(tmp_path, capsys, monkeypatch):
    """KeyboardInterrupt inside the run (here raised in place of the loop; the real engine's Ctrl-C then
    --resume: benchmarks/results/s38/interrupt_resume.txt): the resume command, exit 130, no traceback."""
    from coevolve.commands import run as command

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "execute", interrupted)
    config = write(tmp_path, '[run]\nmethod = "sample"\nbudget = 4\n')
    assert main(["run", str(config), "--out", str(tmp_path / "r"), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert f"interrupted\nevery finished step is in {tmp_path / 'r'}: continue with `coevolve run --resume " \
           f"{tmp_path / 'r'}`" in err and "Traceback" not in err, err


def test_a_kill_during_a_run_stops_it_as_ctrl_c_does(tmp_path, capsys, monkeypatch):
    """SIGTERM (`kill`, a scheduler's preemption) inside the run: the same resume line and exit 130, and the
    handler the process had before is back afterwards."""
    import os
    import signal
    import time

    from coevolve.commands import run as command

    def killed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the signal arrives here
        raise AssertionError("SIGTERM did not stop the run")

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(command, "execute", killed)
    config = write(tmp_path, '[run]\nmethod = "sample"\nbudget = 4\n')
    assert main(["run", str(config), "--out", str(tmp_path / "r"), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert f"interrupted\nevery finished step is in {tmp_path / 'r'}: continue with `coevolve run --resume " \
           f"{tmp_path / 'r'}`" in err and "Traceback" not in err, err
    assert signal.getsignal(signal.SIGTERM) is before


def test_cli_refuses_an_existing_run_and_resume_of_nothing(tmp_path, capsys):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.toml").write_text("")
    assert main(["run", str(write(tmp_path, "")), "--out", str(tmp_path / "r")]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert main(["run", "--resume", str(tmp_path / "missing")]) == 2
    assert "run directory not found" in capsys.readouterr().err
    config = write(tmp_path, "")  # the config file given where the run's directory goes
    for argv in (["run", "--resume", str(config)], ["eval", "--run", str(config)], ["report", str(config)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{config} is a file; give the run's" in err, (argv, err)


def test_old_proposer_section_is_read_as_endpoint_with_a_deprecation_message(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text('[run]\ntask = "tsp_construct"\n[proposer]\nbase_url = "http://x/v1"\nmodel = "m"\n')
    with pytest.warns(FutureWarning, match=r"\[proposer\] is deprecated, call it \[endpoint\]"):
        config = load_config(RunConfig, path)
    assert (config.endpoint.base_url, config.endpoint.model) == ("http://x/v1", "m")


@pytest.mark.parametrize("text", ["[run]\nmethod = 'annealing'\n", "[es]\nzzz = 1\n", "[qqq]\n"])
def test_no_near_name_no_guess(tmp_path, text):
    with pytest.raises(UsageError) as info:
        load_config(RunConfig, write(tmp_path, text))
    assert "did you mean" not in str(info.value)


def test_an_unknown_task_is_named_before_the_kind_is_chosen(tmp_path, capsys):
    """A misspelt agent task made a heuristic config that refused its agent method (run.method must be
    one of sample, eoh, ...): the task is named first, with both kinds' tasks."""
    code = main(["run", str(write(tmp_path, "[run]\ntask = 'sudok'\nmethod = 'esopt'\n")), "--plan"])
    err = capsys.readouterr().err
    assert code == 2 and "config error: run.task: unknown task 'sudok'" in err and "run.method" not in err
    assert "agent: react_math, sudoku, sudoku9" in err and err.rstrip().endswith("did you mean 'sudoku'?")


def test_the_plan_says_the_most_the_endpoints_replies_can_cost(tmp_path, capsys):
    """caps.prices: every request the endpoint answers at its max_tokens, at the dearest model's completion
    price; with no engine in the run the analysts ask the endpoint too (skill.teacher "engine" or not)."""
    text = ("[run]\nmethod = 'eoh+trace2skill'\ntask = 'tsp_construct'\nbudget = 60\n"
            "[endpoint]\nbase_url = 'http://127.0.0.1:9/v1'\nmodels = { a = 1.0, b = 1.0 }\n"
            "[caps]\nprices = { a = [0.1, 0.5], b = [0.2, 0.6] }\n")
    assert main(["run", str(write(tmp_path, text)), "--plan"]) == 0
    out = capsys.readouterr().out
    # 60 = 10 i1 + 10 e1 + 10 e2 + 10 m1 + 3 analysts + 10 m2 + 7 e1: 57 proposals, 3 analysts
    most = (57 * 384 + 3 * 160) * 0.6 / 1e6
    assert (f"endpoint replies cost at most ${most:.4f}: 57 requests x sampling.max_tokens 384 + 3 analysts x "
            "skill.max_tokens 160 at $0.6 per 1M completion tokens") in out
    esopt = text.replace("eoh+trace2skill", "eoh+esopt")  # perturbed steps run on the local engine: free
    assert main(["run", str(write(tmp_path, esopt)), "--plan"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "endpoint replies cost" in x)
    assert "x skill.max_tokens" not in line and ": 40 requests x" in line, line


def test_a_runs_sandbox_and_a_comparisons_test_sets_take_their_seeds_from_the_config():
    """[sandbox] seeds and [test] seeds reach the sandboxes built from them (tests/test_sandbox.py scores with them)."""
    compared = build_config(CompareConfig, {"sandbox": {"seeds": 3}, "test": {"seeds": 2}})
    with Sandbox.from_section(compared.sandbox) as run, Sandbox.from_section(compared.test) as test:
        assert (run.seeds, test.seeds) == (3, 2)
    with Sandbox.from_section(build_config(RunConfig, {}).sandbox) as default:
        assert default.seeds == 1
    # --plan says what it costs
    seeded = build_config(RunConfig, {"run": {"method": "sample", "budget": 4}, "sandbox": {"seeds": 3}})
    assert context_lines(seeded, run_plan(seeded))[-1].startswith(
        "each program is scored 3 times, its random generators seeded 0..2, and judged by the mean")
    plain = build_config(RunConfig, {"run": {"method": "sample", "budget": 4}})
    assert not any("scored" in line for line in context_lines(plain, run_plan(plain)))
