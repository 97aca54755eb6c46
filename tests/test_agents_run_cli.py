"""`coevolve run` for agent tasks: the config (AgentRunConfig), the dispatch from
run.task, the examples, and one short run on the real engine."""

import json
from pathlib import Path

import pytest

from coevolve.agents.es_agent import resolved_es
from coevolve.agents.runconfig import AgentRunConfig
from coevolve.cli import main
from coevolve.base.config import as_dict, dump_toml, load_config
from coevolve.base.errors import UsageError
from coevolve.base.records import read_summary

ROOT = Path(__file__).resolve().parents[1]
AGENT_EXAMPLES = ["sudoku_esopt", "sudoku_trace2skill", "sudoku_esopt_trace2skill", "math_esopt"]


def run_cli(tmp_path, body: str, *flags: str) -> tuple[int, Path]:
    config = tmp_path / "config.toml"
    config.write_text(body)
    out = tmp_path / "out"
    return main(["run", str(config), "--out", str(out), *flags]), out


AGENT_TASK = ("run.task sudoku is an agent task: its methods are esopt, trace2skill, esopt+trace2skill; this config is "
              "for a heuristic search")


@pytest.mark.parametrize(
    "body, message",
    [
        # a heuristic method or section with an agent task: the kinds named first (s52 walkthrough finding 6)
        ('[run]\ntask = "sudoku"\nmethod = "eoh"\n', f"{AGENT_TASK} (method eoh)"),
        ('[run]\ntask = "sudoku"\nmethod = "eho"\n', "run.method must be one of esopt, trace2skill, esopt+trace2skill"),
        ('[run]\ntask = "sudoku"\nbudget = 10\n', "run.budget must pay at least one round of agent.population x "
                                                   "agent.batch = 64 episodes (got 10)"),
        ('[run]\ntask = "sudoku"\n[agent]\npopulation = 0\n', "agent.population must be >= 1 (got 0)"),
        ('[run]\ntask = "sudoku"\n[agent]\npopulation = 1\nbatch = 2\n', "agent.population must be >= 2 for esopt"),
        ('[run]\ntask = "sudoku"\n[agent]\nshaping = -1\n', "agent.shaping must be >= 0"),
        # a skill's folder and SKILL.md take this name: refused here, not after the first round's distillation
        ('[run]\ntask = "sudoku"\n[agent]\nskill_name = "my_game-hints"\n',
         "agent.skill_name must be lowercase letters, digits and single hyphens (an Agent Skills name) "
         "(got 'my_game-hints')"),
        ('[run]\ntask = "sudoku"\n[sampling]\ntemperature = "hot"\n', "sampling.temperature must be a number"),
        ('[run]\ntask = "sudoku"\n[sampling]\ntop_p = 0\n', "sampling.top_p must be in (0, 1] (got 0.0)"),
        ('[run]\ntask = "sudoku"\n[agent]\ntemperature = 1.0\n', "agent.temperature is not a known field"),
        ('[run]\ntask = "sudoku"\n[agent]\npatience = 3\n', "agent.patience is not a known field"),
        ('[run]\ntask = "sudoku"\n[es]\nsigma = 0\n', "es.sigma must be > 0"),
        ('[run]\ntask = "sudoku"\n[es]\nddof = 3\n', "es.ddof must be 0 or 1 (got 3)"),
        ('[run]\ntask = "sudoku"\n[es]\npopulation = 4\n', "es.population is agent.population in agent runs"),
        ('[run]\ntask = "sudoku"\n[es]\noperators = ["m1"]\n',
         "es.operators is for heuristic runs only; leave it out of agent configs (got ['m1'])"),
        ('[run]\ntask = "sudoku"\n[es]\nantithetic = true\n[agent]\npopulation = 3\n',
         "agent.population must be even when es.antithetic"),
        ('[run]\ntask = "sudoku"\n[task]\nmasked = 16\n',
         "task.masked must be in 1..15 (got 16)"),
        ('[run]\ntask = "react_math"\n[task]\nmasked = 2\n',
         "task.masked is not an option of react_math (its options: problems_file, turns)"),
        ('[run]\ntask = "sudoku"\n[task]\nturns = 2\n', "task.turns is not an option of sudoku"),
        # the constructor's default (masked = 4) says what the option must be, before the constructor runs
        ('[run]\ntask = "sudoku"\n[task]\nmasked = "2"\n', "task.masked must be an integer, as its default 4 is (got '2')"),
        ('[run]\ntask = "sudoku"\n[task]\nmasked = true\n', "task.masked must be an integer, as its default 4 is (got True)"),
        ('[run]\ntask = "react_math"\n[task]\nturns = 2.0\n', "task.turns must be an integer, as its default 4 is (got 2.0)"),
        # counted from the config's folder (here tmp_path), as a task file is
        ('[run]\ntask = "sudoku"\n[skills]\npaths = ["skills/no-such-skill"]\n',
         "skills.paths[0] is not a valid skill: /"),
        ('[run]\ntask = "sudoku"\n[endpoint]\nbase_url = "http://127.0.0.1:9/v1"\n', "endpoint.model is required"),
        ('[run]\ntask = "sudoku"\n[teacher]\nbase_url = "http://127.0.0.1:9/v1"\n', "teacher.model is required"),
        ('[run]\ntask = "sudoku"\n[distributed]\nengines = 0\n', "distributed.engines must be >= 1"),
        ('[run]\ntask = "sudoku"\n[eoh]\npopulation = 4\n', f"{AGENT_TASK} ([eoh])"),
        ('[run]\ntask = "sudoku"\nmethod = "esopt"\n[eoh]\npopulation = 4\n', "eoh is not a known section"),
    ],
)
def test_config_errors_name_the_field_and_leave_no_run_dir(tmp_path, capsys, monkeypatch, body, message):
    monkeypatch.chdir(ROOT)
    rc, out = run_cli(tmp_path, body)
    assert rc == 2
    err = capsys.readouterr().err
    assert f"config error: {message}" in err
    if "no-such-skill" in body:
        assert f"{tmp_path / 'skills' / 'no-such-skill'}: not found (a skill is a folder holding a SKILL.md)" in err
    assert not out.exists()


def test_bad_problems_file_is_a_config_error(tmp_path, capsys):
    problems = tmp_path / "problems.jsonl"
    problems.write_text('{"question": "1+1?"}\n')
    rc, out = run_cli(tmp_path, f'[run]\ntask = "react_math"\n[task]\nproblems_file = "{problems}"\n')
    assert rc == 2
    err = capsys.readouterr().err
    assert "config error: task.problems_file is not a usable problems file: " in err
    assert "problems.jsonl:1: missing field 'answer'" in err
    assert not out.exists()


def test_flags_choose_and_override_like_heuristic_runs(tmp_path, capsys):
    # --task turns a heuristic example into an agent run, whose config has no [sample]
    # (its [sampling] is the one both kinds of run share)
    rc = main(["run", str(ROOT / "examples" / "tsp_sample.toml"), "--task", "sudoku", "--out", str(tmp_path / "a")])
    assert rc == 2 and f"config error: {AGENT_TASK} (method sample, [sample], [sandbox])" in capsys.readouterr().err
    # --method is checked against the agent methods; --budget against one round
    example = str(ROOT / "examples" / "sudoku_esopt.toml")
    assert main(["run", example, "--method", "eoh+esopt", "--out", str(tmp_path / "b")]) == 2
    assert f"{AGENT_TASK} (method eoh+esopt)" in capsys.readouterr().err
    assert main(["run", example, "--method", "esopr", "--out", str(tmp_path / "b")]) == 2
    assert "run.method must be one of esopt" in capsys.readouterr().err
    assert main(["run", example, "--budget", "4", "--out", str(tmp_path / "c")]) == 2
    assert "run.budget must pay at least one round" in capsys.readouterr().err
    overrides = {"run": {"method": "trace2skill", "budget": 64, "seed": 3, "out": "x"}, "model": {"path": "/m"}}
    config = load_config(AgentRunConfig, example, overrides)
    assert (config.run.method, config.run.budget, config.run.seed, config.model.path) == ("trace2skill", 64, 3, "/m")
    assert resolved_es(config) is None


def test_resume_of_an_agent_run_from_before_events_is_refused_clearly(tmp_path, capsys):
    run_dir = tmp_path / "agent-run"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text(dump_toml(as_dict(AgentRunConfig())))
    (run_dir / "summary.json").write_text("{}")
    assert main(["run", "--resume", str(run_dir)]) == 2
    assert "written before agent runs kept events.jsonl" in capsys.readouterr().err


@pytest.mark.parametrize("name", AGENT_EXAMPLES)
def test_examples_build_their_run(name, monkeypatch, tmp_path):
    from coevolve.commands.run import load_run_config

    monkeypatch.chdir(tmp_path)  # `coevolve run examples/NAME.toml` from any folder: its paths count from examples/
    config = load_run_config(ROOT / "examples" / f"{name}.toml", {})
    task = config.build_task()
    assert task.name == config.run.task
    if config.run.task == "sudoku":
        assert task.masked == config.task["masked"]
    es = resolved_es(config)
    if config.uses_es:
        # generations = 0 in the file: as many as the budget pays
        assert es.population == config.agent.population
        assert es.generations == config.run.budget // config.episodes_per_round
    else:
        assert es is None
    assert [s.name for s in config.seed_skills()] == [Path(p).name for p in config.skills.paths]
    assert all(Path(p).is_absolute() and Path(p).parent == ROOT / "skills" for p in config.skills.paths)
    # what a run directory stores reads back as the same config
    written = tmp_path / "config.toml"
    written.write_text(dump_toml(as_dict(config)))
    assert load_config(AgentRunConfig, written) == config


@pytest.mark.engine
def test_short_es_run_from_the_example_on_the_real_engine(engine, tmp_path):
    """examples/sudoku_esopt.toml shrunk to one generation, through `coevolve run` on the session engine:
    the progress bar, the end-of-run table, the run's files, and `coevolve report` of the directory.
    (Skill distillation on the engine is slow on 2 cores; the trace2skill path is covered by the agents'
    engine and server tests. A SIGKILL mid-training and the resume: test_agents_compare.py.)"""
    from conftest import cli_in_process
    from coevolve.report import agent_table

    overrides = {"run": {"budget": 4, "out": str(tmp_path / "run")}, "task": {"masked": 1},
                 "agent": {"population": 2, "batch": 2, "eval_cases": 2}, "sampling": {"max_tokens": 8},
                 "es": {"sigma": 1e-2, "sigma_end": 5e-3, "alpha": 2e-3}}
    from coevolve.commands.run import load_run_config

    config = load_run_config(ROOT / "examples" / "sudoku_esopt.toml", overrides)  # [skills] paths made absolute
    path = tmp_path / "config.toml"
    path.write_text(dump_toml(as_dict(config)))
    before = engine.checksum()
    output = cli_in_process(engine, "run", str(path), cwd=tmp_path)
    assert engine.checksum() == before
    assert "episode" in output and "reward=" in output and "solved=" in output and "sigma=" in output  # the bar
    run_dir = tmp_path / "run"
    assert load_config(AgentRunConfig, run_dir / "config.toml") == config
    summary = read_summary(run_dir / "summary.json")
    assert summary.rounds == 1 and summary.ledger.used == 4 and summary.ledger.budget == 4
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert len(history) == 1 and len(history[0]["rewards"]) == 2
    assert history[0]["extra"]["skills"] == ["sudoku-basics"]  # the seed skill from [skills] was in the prompt
    assert summary.checksum == history[0]["checksum"]
    evals = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    assert [e["round"] for e in evals] == [0, 1]
    assert agent_table(summary, run_dir) in output  # the end-of-run table
    # its held-out change, paired per problem, recounted here from the two rounds' episodes
    per_round = []
    for index in (0, 1):
        lines = (run_dir / "trajectories" / f"eval_{index:03d}.jsonl").read_text().splitlines()
        rewards: dict[str, list[float]] = {}
        for t in map(json.loads, lines):
            rewards.setdefault(t["case_id"], []).append(t["reward"])
        per_round.append({case: sum(v) / len(v) for case, v in rewards.items()})
    better = sum(per_round[1][case] > per_round[0][case] for case in per_round[0])
    worse = sum(per_round[1][case] < per_round[0][case] for case in per_round[0])
    assert f"held-out change       {evals[1]['mean_reward'] - evals[0]['mean_reward']:+.3f}: {better} of 2 problems " \
           f"better, {worse} worse; cannot be told apart" in output  # two problems never tell anything
    assert "4 / 4" in output and summary.checksum in output and str(run_dir) in output

    assert main(["report", str(run_dir)]) == 0
    text = (run_dir / "report.md").read_text()
    assert "held-out mean reward" in text and "esopt" in text and "| 1 | 4 |" in text

    # `--resume` of the finished run has nothing to run: its table, from the files
    finished = cli_in_process(engine, "run", "--resume", str(run_dir), cwd=ROOT)
    assert f"{run_dir} has finished: nothing to resume\n" in finished and "resuming" not in finished
    assert agent_table(summary, run_dir) in finished
    # killed just before its end: `--resume` replays its round and update from the files; the summary it
    # prints and writes again is the same (the table holds the rewards, rounds and the weights' checksum)
    events = (run_dir / "events.jsonl").read_text().splitlines(keepends=True)
    assert json.loads(events[-1])["type"] == "end"
    (run_dir / "events.jsonl").write_text("".join(events[:-1]))
    resumed = cli_in_process(engine, "run", "--resume", str(run_dir), cwd=ROOT)
    assert "resuming" in resumed and agent_table(summary, run_dir) in resumed
    assert read_summary(run_dir / "summary.json") == summary


def test_report_renders_an_agent_run_written_before_events(tmp_path, capsys):
    """The layout agent runs had before the shared run machinery: config.toml
    with [teacher], summary.json without "kind", eval.jsonl."""
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text('[run]\ntask = "sudoku"\n[task]\nmasked = 0\n[teacher]\nbase_url = ""\n')
    evals = [{"round": 0, "episodes_used": 0, "mean_reward": 0.0, "skills": [], "seconds": 1.0},
             {"round": 2, "episodes_used": 128, "mean_reward": 0.25, "skills": ["distilled"], "seconds": 9.0}]
    (run_dir / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    (run_dir / "summary.json").write_text(json.dumps({
        "method": "trace2skill", "task": "sudoku", "rounds": 2,
        "ledger": {"budget": 128, "used": 128, "outcomes": {"failed": 128}},
        "eval_first": evals[0], "eval_last": evals[1], "best_eval_reward": 0.25,
        "skill": str(run_dir / "skills" / "distilled"), "config": {}, "seconds": 10.0}))
    assert main(["report", str(run_dir)]) == 0
    text = (run_dir / "report.md").read_text()
    assert "| 2 | 128 | 0.250 | distilled |" in text and "128 / 128" in text
    assert (run_dir / "progress.png").stat().st_size > 0


def test_an_agent_run_logged_before_es_settings_were_shared_still_resumes(tmp_path):
    # Agent start events written before [es] became the one ESConfig lack population,
    # ddof, proposals_per_member and operators: their defaults keep the old behaviour.
    from coevolve.agents.es_agent import KIND, check_run_dir
    from coevolve.runstore import RunStore

    config = load_config(AgentRunConfig, ROOT / "examples" / "sudoku_esopt.toml")
    logged = as_dict(config)
    for key in ("population", "ddof", "proposals_per_member", "operators"):
        logged["es"].pop(key)
    store = RunStore.create(tmp_path / "old", dump_toml(as_dict(config)))
    with store.event_writer() as log:
        log.append({"type": "start", "kind": KIND, "version": 1, "config": logged})
    check_run_dir(store, config)  # accepted
    logged["es"]["sigma"] *= 2
    changed = RunStore.create(tmp_path / "changed", dump_toml(as_dict(config)))
    with changed.event_writer() as log:
        log.append({"type": "start", "kind": KIND, "version": 1, "config": logged})
    with pytest.raises(UsageError, match="edited since the run started: es.sigma was 0.006, is now 0.003"):
        check_run_dir(changed, config)


def test_the_engines_context_is_the_configs_model_max_len(tmp_path, capsys, monkeypatch):
    """`[model] max_len` reaches the engine `coevolve run` builds (an agent run, whose episodes grow turn by
    turn; heuristic runs and comparisons pass it the same way); out of bounds it is one line."""
    from coevolve.engine import pool

    asked = {}

    def build(model=None, section=None, **kwargs):
        asked.update(kwargs)
        raise UsageError("stop here: the engine was asked for")

    monkeypatch.setattr(pool, "build_engine", build)
    config = tmp_path / "c.toml"
    config.write_text(f'[run]\ntask = "sudoku"\nbudget = 4\nout = "{tmp_path / "run"}"\n[agent]\npopulation = 2\n'
                      'batch = 2\n[model]\nmax_len = 4096\n')
    assert main(["run", str(config)]) == 2
    assert asked["max_model_len"] == 4096 and "stop here" in capsys.readouterr().err
    config.write_text('[run]\ntask = "sudoku"\n[model]\nmax_len = 100\n')
    assert main(["run", str(config)]) == 2
    assert "model.max_len must be in 256..1048576 (got 100)" in capsys.readouterr().err


def test_skills_paths_count_from_the_configs_folder_and_are_recorded_absolute(tmp_path, monkeypatch):
    """As `[skill] start`, a task file and `[model] path`: the run directory's config.toml names the folders
    from anywhere. A relative path that names a folder only from the working directory (where configs
    counted it before) is one line saying how to write it now."""
    from coevolve.agents.skills import write_skill
    from coevolve.base.errors import ConfigError
    from coevolve.commands.run import load_run_config

    folder = tmp_path / "game"
    write_skill(folder / "hints", "Hints", "# h\n\n## Moves\n- Fill the only empty cell.")
    (folder / "config.toml").write_text('[run]\ntask = "sudoku"\n[skills]\npaths = ["hints"]\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_run_config(folder / "config.toml", {})
    assert config.skills.paths == [str(folder / "hints")]
    assert [s.name for s in config.seed_skills()] == ["hints"]
    # a run directory's config.toml written before (relative) reads as it did: from the working directory
    assert load_config(AgentRunConfig, folder / "config.toml").skills.paths == ["hints"]
    # written from the working directory (tmp_path): said, with the path that counts from the config's folder
    write_skill(tmp_path / "skills" / "shared", "Shared", "# s\n\n## Moves\n- Fill the only empty cell.")
    (folder / "config.toml").write_text('[run]\ntask = "sudoku"\n[skills]\npaths = ["skills/shared"]\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"skills.paths\[0\] counts from the config's folder .*game\), where "
                                          r"'skills/shared' is not found; from the working directory it is: "
                                          r"write '../skills/shared'"):
        load_run_config(folder / "config.toml", {})


def test_an_agent_run_resumes_from_another_folder_under_the_skill_it_started_with(tmp_path, monkeypatch, capsys):
    """`coevolve run` in the config's folder, killed after a round; the seed skill's SKILL.md is edited and
    `coevolve run --resume` is given from another folder: it resumes (the path is absolute in the run's
    config.toml) and plays the text the run started with (its seed_skills event), to the uninterrupted
    run's summary."""
    from coevolve.engine import pool
    from test_agents_es import SkillReader, seed_skill

    folder = tmp_path / "game"
    seed = seed_skill(folder / "sudoku-mine")
    (folder / "config.toml").write_text(
        '[run]\ntask = "sudoku"\nmethod = "esopt"\nbudget = 24\nseed = 3\n[task]\nmasked = 2\n'
        '[agent]\npopulation = 4\nbatch = 2\neval_cases = 2\n[es]\nsigma = 1e-3\nalpha = 1e-3\ngenerations = 10\n'
        '[skills]\npaths = ["sudoku-mine"]\n')
    monkeypatch.setattr(pool, "build_engine", lambda model=None, section=None, **kwargs: SkillReader())
    monkeypatch.chdir(folder)
    for name in ("whole", "cut"):
        assert main(["run", "config.toml", "--out", str(tmp_path / name), "--no-progress"]) == 0
    whole, cut = read_summary(tmp_path / "whole" / "summary.json"), tmp_path / "cut"
    events = (cut / "events.jsonl").read_text().splitlines(keepends=True)
    first_round = next(i for i, line in enumerate(events) if '"type": "round"' in line)
    (cut / "events.jsonl").write_text("".join(events[: first_round + 1]))
    (cut / "history.jsonl").write_text((cut / "history.jsonl").read_text().splitlines(keepends=True)[0])
    (cut / "summary.json").unlink()
    seed_skill(seed.path, "Answer with a bare digit.")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["run", "--resume", str(cut), "--no-progress"]) == 0, capsys.readouterr().err
    resumed = read_summary(cut / "summary.json")
    assert resumed.config["skills"]["paths"] == [str(seed.path)]
    assert resumed.model_dump(exclude={"config"}) == whole.model_dump(exclude={"config"})
    assert resumed.eval_last.mean_reward > 0  # under the edited skill it would be 0


def test_only_an_agent_run_that_distils_asks_its_endpoint_first(tmp_path):
    """An agent run's [endpoint] is its teacher: only a skill method distils on it. Before the run
    directory exists, `coevolve run` probes it for those (a dead one refused, named), not for an esopt
    run, which never calls it (before: refused for a server it would never ask, as an agent comparison's
    arm is not: coevolve/compare.py probe_teachers)."""
    from coevolve.base.config import build_config
    from coevolve.commands.run import check_generators
    from coevolve.engine.openai_client import EndpointConfigError
    from conftest_server import free_port

    dead = {"base_url": f"http://127.0.0.1:{free_port()}/v1", "model": "teacher"}
    esopt = build_config(AgentRunConfig, {"run": {"task": "sudoku", "method": "esopt"}, "endpoint": dead})
    assert check_generators(esopt) is None
    distils = build_config(AgentRunConfig, {"run": {"task": "sudoku", "method": "trace2skill"}, "endpoint": dead})
    with pytest.raises(EndpointConfigError, match=r"^endpoint\.base_url: cannot reach "):
        check_generators(distils)
