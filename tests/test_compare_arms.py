"""Named arms of a comparison (`[compare.arms.NAME]`): a method run with some sections
set otherwise, compared at the same budget with the method it runs (ablations)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.base.errors import UsageError
from coevolve.commands.run import load_run_config
from coevolve.plan import (CompareConfig, RunSpec, arm_lines, compare_config, compared_pairs, comparison_run,
                           load_compare_config, ordered_arms, planned_runs, run_config)

ROOT = Path(__file__).resolve().parents[1]
NO_FEEDBACK = {"method": "eoh", "context": {"feedback": False}, "sampling": {"temperature": 1.0}}


def with_arms(arms: dict, methods: list[str]) -> dict:
    return {"compare": {"methods": methods, "budgets": [20], "seeds": [0], "arms": arms}}


@pytest.mark.parametrize("arm, name, message", [
    ({"method": "eoh", "model": {"path": "x"}}, "a1", "compare.arms.a1.model is not a section an arm may set"),
    ({"method": "eoh", "sandbox": {"timeout_s": 1.0}}, "a1", "compare.arms.a1.sandbox is not a section"),
    ({"method": "eoh", "caps": {"tokens": 10}}, "a1", "compare.arms.a1.caps is not a section"),
    ({"context": {"feedback": False}}, "a1", "compare.arms.a1.method is required"),
    ({"method": "nope"}, "a1", "compare.arms.a1.method must be one of"),
    ({"method": 5}, "a1", "compare.arms.a1.method must be a method's name (got 5)"),
    (5, "a1", "compare.arms.a1 must be a table (got 5)"),
    ({"method": "eoh", "context": {"feedbak": True}}, "a1", "compare.arms.a1.context.feedbak is not a known field"),
    ({"method": "eoh", "context": {"feedback": 3}}, "a1", "compare.arms.a1.context.feedback must be true or false"),
    ({"method": "eoh", "context": 5}, "a1", "compare.arms.a1.context must be a table"),
    ({"method": "eoh", "es": {"noise": "lowrank"}}, "a1", "compare.arms.a1.es.noise is the comparison's"),
    ({"method": "eoh", "es": {"sigma": -1.0}}, "a1", "compare.arms.a1.es.sigma must be > 0"),
    ({"method": "eoh", "start": {"program": "reference", "programs": []}}, "a1",
     "compare.arms.a1.start.program is the comparison's: the starting program is the report's baseline"),
    ({"method": "eoh", "start": {"programz": []}}, "a1", "compare.arms.a1.start.programz is not a known field"),
    ({"method": "eoh"}, "eoh", "compare.arms.eoh is the name of a method"),
    ({"method": "eoh"}, "a+esopt", "compare.arms.a+esopt must be named by letters"),
    ({"method": "eoh"}, "eoh_esopt", "has 'eoh+esopt' and 'eoh_esopt', whose runs would share the folders"),
])
def test_a_bad_arm_names_its_key(arm, name, message):
    raw = with_arms({name: arm}, ["eoh", "eoh+esopt", name])
    with pytest.raises(UsageError, match=re.escape(message)):
        compare_config(raw)


def test_a_name_that_is_neither_a_method_nor_an_arm_lists_the_arms():
    with pytest.raises(UsageError, match=r"compare.methods\[1\] must be one of .*, or a named arm: a1\) "
                                         r"\(got 'a2'\)$"):
        compare_config(with_arms({"a1": {"method": "eoh"}}, ["eoh", "a2"]))
    with pytest.raises(UsageError, match=r"compare.methods\[1\] .* \(got 'eoh-cld'\); did you mean 'eoh-cold'\?$"):
        compare_config(with_arms({"eoh-cold": {"method": "eoh"}}, ["eoh", "eoh-cld"]))
    with pytest.raises(UsageError, match=r"compare.methods\[1\] .* \(got 'samplee'\); did you mean 'sample'\?$"):
        compare_config(with_arms({"a1": {"method": "eoh"}}, ["eoh", "samplee"]))


# one round of 4 episodes each: esopt's 2 members x 2 puzzles, the arm's 4 members x 1 puzzle
AGENT = {"compare": {"kind": "agent", "methods": ["esopt", "esopt-wide"], "tasks": ["sudoku"], "budgets": [4],
                     "seeds": [0], "arms": {"esopt-wide": {"method": "esopt", "agent": {"population": 4, "batch": 1}}}},
         "eval": {"problems": 3, "k": 1, "max_tokens": 8}, "task": {"sudoku": {"masked": 1}},
         "agent": {"population": 2, "batch": 2, "eval_cases": 2}, "sampling": {"max_tokens": 8}}


@pytest.mark.parametrize("arm, message", [
    ({"method": "base"}, "compare.arms.esopt-wide.method must be one of esopt, trace2skill"),
    ({"method": "eoh"}, "compare.arms.esopt-wide.method must be one of esopt, trace2skill"),
    ({"method": "esopt", "model": {"path": "x"}}, "compare.arms.esopt-wide.model is not a section an arm may set"),
    ({"method": "esopt", "es": {"sigma": -1.0}}, "compare.arms.esopt-wide.es.sigma must be > 0"),
    ({"method": "esopt", "agent": {"population": 3}},  # 4 pays no round of 3 x 2: named as the TOML wrote it
     "compare.budgets must pay at least one round of agent.population x agent.batch = 6 episodes (got 4) "
     "(named arm esopt-wide)"),
])
def test_a_bad_agent_arm_names_its_key(arm, message):
    from coevolve.plan import AgentCompareConfig

    raw = json.loads(json.dumps(AGENT))
    raw["compare"]["arms"]["esopt-wide"] = arm
    with pytest.raises(UsageError, match=re.escape(message)):
        build_config(AgentCompareConfig, raw)


def test_an_agent_comparisons_unknown_method_is_named_by_its_place_with_the_near_one():
    from coevolve.plan import AgentCompareConfig

    raw = json.loads(json.dumps(AGENT))
    raw["compare"]["methods"] = ["esopt", "esopt-wid"]
    with pytest.raises(UsageError) as info:
        build_config(AgentCompareConfig, raw)
    assert str(info.value) == ("config error: compare.methods[1] must be one of base, esopt, trace2skill, "
                               "esopt+trace2skill, or a named arm: esopt-wide (got 'esopt-wid'); did you mean "
                               "'esopt-wide'?")


def test_each_arm_runs_its_method_under_its_own_settings_in_its_own_folders(tmp_path):
    config = compare_config(with_arms({"eoh-no-feedback": NO_FEEDBACK}, ["eoh", "eoh-no-feedback", "eoh+esopt"]))
    runs = {spec.method: run_config(config, spec, spec.directory(tmp_path)) for spec in planned_runs(config)}
    assert {name: (c.run.method, c.context.feedback, c.sampling.temperature) for name, c in runs.items()} == {
        "eoh": ("eoh", True, 0.7), "eoh-no-feedback": ("eoh", False, 1.0), "eoh+esopt": ("eoh+esopt", True, 0.7)}
    assert runs["eoh-no-feedback"].run.out.endswith("runs/tsp_construct/eoh-no-feedback-b20-s0")
    # every setting the arm does not name is the comparison's
    same = {k: v for k, v in as_dict(runs["eoh"]).items() if k not in ("run", "context", "sampling")}
    assert same == {k: v for k, v in as_dict(runs["eoh-no-feedback"]).items() if k not in ("run", "context", "sampling")}
    # a Δ row for the arm against the method it runs, as for +ESOpt against its base; tables list each base first
    assert compared_pairs(config) == [("eoh", "eoh+esopt"), ("eoh", "eoh-no-feedback")]
    assert ordered_arms(config) == ["eoh", "eoh+esopt", "eoh-no-feedback"]
    assert arm_lines(config) == ["eoh-no-feedback: EoH with context.feedback = false, sampling.temperature = 1.0"]
    # with Sample compared, every method that is no one's variant is also set against it
    config = compare_config(with_arms({"eoh-no-feedback": NO_FEEDBACK},
                                      ["sample", "eoh", "eoh-no-feedback", "eoh+esopt", "map_elites"]))
    assert compared_pairs(config) == [("eoh", "eoh+esopt"), ("eoh", "eoh-no-feedback"), ("sample", "eoh"),
                                      ("sample", "map_elites")]
    assert ordered_arms(config) == ["sample", "eoh", "eoh+esopt", "eoh-no-feedback", "map_elites"]
    # compare.toml keeps the arms: the report and a rerun read the same comparison
    again = build_config(CompareConfig, tomllib.loads(dump_toml(as_dict(config))))
    assert again.compare.arms == config.compare.arms
    # `coevolve run` on the comparison's file runs its first arm as the comparison would
    first = comparison_run({**with_arms({"eoh-no-feedback": NO_FEEDBACK}, ["eoh-no-feedback", "eoh"])})
    assert first["run"]["method"] == "eoh" and first["context"] == {"feedback": False}


def test_an_arms_file_method_and_skill_count_from_the_toml_folder(tmp_path):
    from test_search_methods import write_toy

    folder = tmp_path / "cfg"
    folder.mkdir()
    toy = write_toy(folder)
    skill = folder / "skills" / "mine"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: mine\ndescription: what I know\n---\n## Rules\n- prefer short edges\n")
    (folder / "c.toml").write_text(
        '[compare]\nmethods = ["eoh", "toyish", "skilled"]\nbudgets = [8]\nseeds = [0]\n'
        f'[compare.arms.toyish]\nmethod = "{toy.name}"\n'
        '[compare.arms.skilled]\nmethod = "eoh"\nskill = { start = "skills/mine" }\n')
    config = load_compare_config(folder / "c.toml")
    assert config.compare.arms["toyish"]["method"] == str(toy.resolve())
    spec = RunSpec("tsp_construct", "skilled", 8, 0)
    assert run_config(config, spec, spec.directory(tmp_path)).skill.start == str(skill.resolve())
    (folder / "c.toml").write_text(
        '[compare]\nmethods = ["eoh", "skilled"]\nbudgets = [8]\nseeds = [0]\n'
        '[compare.arms.skilled]\nmethod = "eoh"\nskill = { start = "skills/none" }\n')
    with pytest.raises(UsageError, match="skills/none"):
        load_compare_config(folder / "c.toml")


def test_the_example_ablation_loads_and_plans():
    from coevolve.commands.compare import print_plan
    from coevolve.plan import arm_runs

    config = load_compare_config(ROOT / "examples" / "compare_context_ablation.toml")
    assert [m for m in config.compare.methods if m in config.compare.arms] == ["eoh-no-feedback", "eoh-no-failures"]
    assert all(a == "eoh" for a, _ in compared_pairs(config))
    print_plan(config, arm_runs(config))  # every arm's plan; raises if an arm's run config does not build


def test_coevolve_run_on_the_comparison_runs_the_arm_it_is_given(capsys):
    from coevolve.commands.run import load_run_config

    path = ROOT / "examples" / "compare_context_ablation.toml"
    named = load_run_config(path, {"run": {"method": "eoh-no-feedback"}})
    assert (named.run.method, named.context.feedback) == ("eoh", False)
    assert "this is its arm eoh (named arm eoh-no-feedback) on tsp_aco" in capsys.readouterr().err
    plain = load_run_config(path, {"run": {"method": "eoh"}})  # the plain method: none of an arm's settings
    assert (plain.run.method, plain.context.feedback, plain.context.failures) == ("eoh", True, True)
    assert load_run_config(path, {"run": {"method": "eoh-no-failures"}}).context.failures is False


def test_an_arms_endpoint_that_does_not_answer_stops_the_comparison_before_anything_is_written(tmp_path):
    from coevolve.compare import run_comparison
    from conftest_server import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    raw = with_arms({"served": {"method": "sample", "endpoint": {"base_url": url, "model": "m"}}}, ["sample", "served"])
    with pytest.raises(UsageError, match=re.escape(f"endpoint.base_url: cannot reach {url}")):
        run_comparison(compare_config(raw), tmp_path / "cmp", log=lambda line: None)
    assert not (tmp_path / "cmp").exists()


# ---------------------------------------------------------------- the real engine
TINY = {
    "compare": {"methods": ["sample", "sample-short"], "tasks": ["tsp_construct"], "budgets": [4], "seeds": [0],
                "arms": {"sample-short": {"method": "sample", "sampling": {"max_tokens": 24}}}},
    "test": {"sizes": [20], "limit": 8, "timeout_s": 120, "workers": 2},
    "sample": {"batch": 4, "population": 3},
    "sampling": {"max_tokens": 64},  # above the arm's 24: what the arm sets shows in the tokens
    "sandbox": {"timeout_s": 20, "workers": 2},
    "context": {"failures": False, "constrain": False, "seed_template": True},
}


@pytest.mark.engine
def test_an_arm_reaches_the_engine_resumes_and_is_reported(tmp_path, engine):
    """A named arm's setting is what its requests ran under on the real engine; the comparison
    stopped between arms goes on with the arm alone; changed arm settings are refused; the report
    has the arm's row, its Δ against the method it runs and what it sets."""
    from coevolve.cli import main
    from coevolve.commands.compare import compare_and_report

    config = build_config(CompareConfig, json.loads(json.dumps(TINY)))
    root = tmp_path / "cmp"

    def stop_at_the_arm(line: str) -> None:
        if "sample-short" in line:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compare_and_report(config, root, engine=engine, log=stop_at_the_arm)
    lines: list[str] = []
    compare_and_report(config, root, engine=engine, log=lines.append)
    assert [line.split(": ")[-1] for line in lines[:2]] == ["finished earlier, skipped", "resuming"]

    ledgers = {name: json.loads((root / "runs" / "tsp_construct" / f"{name}-b4-s0" / "summary.json").read_text())
               ["ledger"] for name in ("sample", "sample-short")}
    short = ledgers["sample-short"]
    assert short["used"] == 4 == ledgers["sample"]["used"]  # the same budget, counted by the one ledger
    # every request of the arm was cut at 24 tokens by the engine; the base arm's ran past 24 (up to 64)
    assert 0 < short["completion_tokens"] <= 24 * short["llm_requests"]
    assert ledgers["sample"]["completion_tokens"] > 24 * ledgers["sample"]["llm_requests"]
    arm_config = tomllib.loads((root / "runs" / "tsp_construct" / "sample-short-b4-s0" / "config.toml").read_text())
    assert arm_config["run"]["method"] == "sample" and arm_config["sampling"]["max_tokens"] == 24

    results = json.loads((root / "results.json").read_text())
    assert [(r["method"], r["finished"]) for r in results["rows"] if r["kind"] == "method"] == [
        ("sample", 1), ("sample-short", 1)]
    assert [(r["base"], r["variant"]) for r in results["rows"] if r["kind"] == "delta"] == [("sample", "sample-short")]
    report = (root / "report.md").read_text()
    assert "| sample-short |" in report and "| Δ sample-short vs Sample |" in report
    assert "- sample-short: Sample with sampling.max_tokens = 24" in report
    assert main(["report", str(root)]) == 0 and (root / "report.md").read_text() == report

    # the arm's settings changed under the same folder: refused, naming the setting, nothing run
    changed = json.loads(json.dumps(TINY))
    changed["compare"]["arms"]["sample-short"]["sampling"]["max_tokens"] = 32
    with pytest.raises(UsageError, match=r"sampling.max_tokens \(24 there, 32 here\)"):
        compare_and_report(build_config(CompareConfig, changed), root, engine=engine, log=lambda line: None)


@pytest.mark.server
def test_an_arm_with_its_own_endpoint_is_proposed_by_it(openai_server, tmp_path):
    """Proposer models compared at a matched budget: the comparison's runs ask the real server, the
    named arm's ask it through a proxy that counts them; each run records the endpoint it used."""
    from coevolve.commands.compare import compare_and_report
    from test_serving import FaultProxy

    proxy = FaultProxy(openai_server.base_url)
    raw = {**json.loads(json.dumps(TINY)),
           "compare": {"methods": ["sample", "sample-proxied"], "tasks": ["tsp_construct"], "budgets": [4],
                       "seeds": [0], "arms": {"sample-proxied": {"method": "sample",
                                                                 "endpoint": {"base_url": proxy.base_url}}}},
           "endpoint": {"base_url": openai_server.base_url, "model": openai_server.model}}
    raw["sampling"]["max_tokens"] = 32
    root = tmp_path / "cmp"
    try:
        compare_and_report(build_config(CompareConfig, raw), root, engine=None, log=lambda line: None)
    finally:
        proxy.close()
    runs = root / "runs" / "tsp_construct"
    used = {name: json.loads((runs / f"{name}-b4-s0" / "endpoint.json").read_text())["base_url"]
            for name in ("sample", "sample-proxied")}
    assert used == {"sample": openai_server.base_url, "sample-proxied": proxy.base_url}
    requests = {name: json.loads((runs / f"{name}-b4-s0" / "summary.json").read_text())["ledger"]["llm_requests"]
                for name in used}
    assert requests["sample-proxied"] >= 1 and proxy.forwarded == requests["sample-proxied"]
    assert "- sample-proxied: Sample with endpoint.base_url = " in (root / "report.md").read_text()


@pytest.mark.engine
def test_an_agent_arm_trains_under_its_settings_and_is_judged_against_its_method(tmp_path, engine):
    """An agent comparison's named arm on the real engine: its population is what played each ES
    generation, both arms are scored on the same held-out problems, and the report judges the arm
    against the checkpoint's absence and against the method it runs."""
    from coevolve.commands.compare import compare_and_report
    from coevolve.plan import AgentCompareConfig
    from coevolve.runstore import read_jsonl

    before = engine.checksum()
    root = compare_and_report(build_config(AgentCompareConfig, json.loads(json.dumps(AGENT))), tmp_path / "cmp",
                              engine=engine, log=lambda line: None)
    assert engine.checksum() == before
    runs = root / "runs" / "sudoku"
    members = {name: [len(h["rewards"]) for h in read_jsonl(runs / f"{name}-b4-s0" / "history.jsonl")]
               for name in ("esopt", "esopt-wide")}
    assert members == {"esopt": [2], "esopt-wide": [4]}  # the members that played the one ES generation
    assert tomllib.loads((runs / "esopt-wide-b4-s0" / "config.toml").read_text())["run"]["method"] == "esopt"
    scores = {name: json.loads((runs / f"{name}-b4-s0" / "heldout.json").read_text()) for name in members}
    assert all(len(s["attempts"]) == 3 for s in scores.values())  # the same 3 held-out problems each
    report = (root / "report.md").read_text()
    arm = "esopt-wide: esopt with agent.population = 4, agent.batch = 1"
    assert f"- {arm}" in report
    assert "sudoku, budget 4: esopt-wide vs esopt: " in report and "| esopt-wide |" in report
    assert json.loads((root / "results.json").read_text())["named_arms"] == [arm]


def test_a_comparisons_starting_programs_count_from_its_folder_and_must_define_every_tasks_function(tmp_path):
    (tmp_path / "mine.py").write_text("import numpy as np\n\ndef select_next_node(current_node, destination_node, "
                                      "unvisited_nodes, distance_matrix):\n    return unvisited_nodes[0]\n")
    raw = {"compare": {"methods": ["eoh"], "tasks": ["tsp_construct"], "budgets": [8], "seeds": [0]},
           "start": {"programs": ["mine.py"]}}
    config = compare_config(raw, tmp_path)
    assert config.start.programs == [str((tmp_path / "mine.py").resolve())]
    with pytest.raises(UsageError, match=r"start.programs\[0\]: cannot read .*gone.py"):
        compare_config({**raw, "start": {"programs": ["gone.py"]}}, tmp_path)
    two = {**raw, "compare": {**raw["compare"], "tasks": ["tsp_construct", "kp_construct"]}}
    with pytest.raises(UsageError, match=r"start.programs\[0\]: .*mine.py defines no top-level select_next_item\(\)"):
        compare_config(two, tmp_path)


SELECT_FIRST = ("import numpy as np\n\ndef select_next_node(current_node, destination_node, unvisited_nodes, "
                "distance_matrix):\n    return unvisited_nodes[0]\n")


def test_an_arm_starts_from_its_own_programs_counted_from_the_toml_folder(tmp_path):
    folder = tmp_path / "cfg"
    (folder / "earlier").mkdir(parents=True)
    (folder / "earlier" / "best.py").write_text(SELECT_FIRST)
    (folder / "mine.py").write_text(SELECT_FIRST)
    (folder / "c.toml").write_text(
        '[compare]\nmethods = ["eoh", "eoh-warm", "eoh-cold"]\nbudgets = [8]\nseeds = [0]\n'
        '[start]\nprograms = ["mine.py"]\n'
        '[compare.arms.eoh-warm]\nmethod = "eoh"\nstart = { programs = ["earlier/best.py"] }\n'
        '[compare.arms.eoh-cold]\nmethod = "eoh"\nstart = { programs = [] }\n')
    config = load_compare_config(folder / "c.toml")
    warm = str((folder / "earlier" / "best.py").resolve())
    runs = {spec.method: run_config(config, spec, spec.directory(tmp_path)) for spec in planned_runs(config)}
    # the arm's list replaces the comparison's, so an arm can also start cold where the others start warm
    assert {name: c.start.programs for name, c in runs.items()} == {
        "eoh": [str((folder / "mine.py").resolve())], "eoh-warm": [warm], "eoh-cold": []}
    assert {c.start.program for c in runs.values()} == {"template"}  # every arm's baseline is the comparison's
    assert arm_lines(config) == [f"eoh-warm: EoH with start.programs = {json.dumps([warm])}",
                                 "eoh-cold: EoH with start.programs = []"]
    again = build_config(CompareConfig, tomllib.loads(dump_toml(as_dict(config))))
    assert again.compare.arms == config.compare.arms
    # given the TOML's folder (as `coevolve run` on the comparison's file has it), the arm's file is found
    # from any working directory
    raw = tomllib.loads((folder / "c.toml").read_text())
    assert comparison_run(raw, "eoh-warm", folder)["start"]["programs"] == [warm]
    # `coevolve run c.toml --method eoh-warm` from another folder
    assert load_run_config(folder / "c.toml", {"run": {"method": "eoh-warm"}}).start.programs == [warm]


def test_an_arms_starting_program_must_define_every_tasks_function_before_any_run(tmp_path):
    (tmp_path / "best.py").write_text(SELECT_FIRST)
    raw = {"compare": {"methods": ["eoh", "eoh-warm"], "tasks": ["tsp_construct", "kp_construct"], "budgets": [8],
                       "seeds": [0], "arms": {"eoh-warm": {"method": "eoh", "start": {"programs": ["best.py"]}}}}}
    with pytest.raises(UsageError) as info:
        compare_config(raw, tmp_path)
    assert str(info.value) == ("config error: compare.arms.eoh-warm.start.programs[0]: "
                               f"{(tmp_path / 'best.py').resolve()} defines no top-level select_next_item(), the "
                               "function the task evolves")
    raw["compare"]["arms"]["eoh-warm"]["start"]["programs"] = ["gone.py"]
    with pytest.raises(UsageError, match=r"^config error: compare.arms.eoh-warm.start.programs\[0\]: cannot read "
                                         r".*gone.py"):
        compare_config(raw, tmp_path)


# ------------------------------------------- an arm's task checks: before anything is written
def own_task(folder: Path) -> Path:
    """A user's task file as `coevolve new-task mytask` writes it (no decision descriptors)."""
    from coevolve.cli import main

    assert main(["new-task", "mytask", "--dir", str(folder)]) == 0
    return folder / "mytask" / "problem.py"


def compare_toml(folder: Path, methods: list[str], arms: str, shared: str = "") -> Path:
    """A small comparison of `folder`'s own task (mytask/problem.py), counted from the TOML's folder."""
    path = folder / "cmp.toml"
    path.write_text(f'[compare]\nmethods = {json.dumps(methods)}\ntasks = ["mytask/problem.py"]\nbudgets = [2]\n'
                    f'seeds = [0]\n{shared}[sample]\nbatch = 2\npopulation = 2\n[test]\nlimit = 3\nworkers = 1\n'
                    f'[sandbox]\nworkers = 1\n{arms}')
    return path


@pytest.mark.parametrize("methods, arms, shared, expected", [
    (["eoh", "eoh-tb"], '[compare.arms.eoh-tb]\nmethod = "eoh"\neoh = { tie_break = ["max ontime"] }\n', "",
     "config error: compare.arms.eoh-tb.eoh.tie_break: 'ontime' is not measured on every program nor a decision "
     "descriptor of task mytask (known: seconds, lines"),
    (["eoh", "me-bad"], '[compare.arms.me-bad]\nmethod = "map_elites"\nmap_elites = { descriptors = ["bogus"] }\n',
     "", "config error: compare.arms.me-bad.map_elites.descriptors: 'bogus' is not a descriptor of task mytask"),
    # the comparison's own [eoh] tie_break, met first in an arm that does not set it: named where it was written
    (["eoh-nf", "eoh"], '[compare.arms.eoh-nf]\nmethod = "eoh"\ncontext = { feedback = false }\n',
     '[eoh]\ntie_break = ["max ontime"]\n', "config error: eoh.tie_break: 'ontime' is not measured on every program"),
])
def test_an_arm_its_task_refuses_is_named_where_written_and_leaves_nothing_behind(tmp_path, capsys, monkeypatch,
                                                                                  methods, arms, shared, expected):
    """A comparison of a user's own task file that an arm's task check refuses (a tie-break or a MAP-Elites
    descriptor the task lacks): one line naming the key where the user wrote it, exit 2, before the engine,
    and no directory or file left: not the --out folder, not a runs/compare-<time> one. --plan refuses it
    with the same line."""
    from coevolve.cli import main
    from coevolve.engine import pool

    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: pytest.fail("a refused comparison started its engine"))
    own_task(tmp_path)
    path = compare_toml(tmp_path, methods, arms, shared)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    for flags in (["--out", str(tmp_path / "out")], [], ["--plan"]):
        assert main(["compare", str(path), *flags]) == 2, flags
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert err.startswith("coevolve compare: error: ") and expected in err, (flags, err)
        assert len(err.splitlines()) == 1, err
        if flags == ["--plan"]:
            assert captured.out == ""  # refused before the plan is printed
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


def test_an_arm_its_method_cannot_run_on_a_task_is_named_by_its_method_key():
    from coevolve.plan import arm_runs, check_arms

    def check(raw: dict) -> None:
        config = compare_config(raw)
        check_arms(config, arm_runs(config))

    raw = with_arms({"par": {"method": "pareto"}}, ["eoh", "par"])
    raw["compare"]["tasks"] = ["asp"]
    with pytest.raises(UsageError) as info:
        check(raw)
    assert str(info.value).startswith("config error: compare.arms.par.method: pareto draws parents by the "
                                      "instances they win; task asp gives no per-instance objectives")
    raw["compare"].update(methods=["eoh", "pareto"], arms={})  # a plain method: named as `coevolve run` names it
    with pytest.raises(UsageError, match=r"^config error: run.method: pareto draws parents"):
        check(raw)


def test_an_arms_refusal_naming_no_key_names_the_arm():
    from coevolve.plan import arm_error

    config = compare_config(with_arms({"eoh-nf": NO_FEEDBACK}, ["eoh", "eoh-nf"]))
    refused = UsageError("task t: describe() of the template gave descriptors that are not finite numbers")
    assert str(arm_error(config, "eoh-nf", refused)) == f"{refused} (named arm eoh-nf)"
    assert arm_error(config, "eoh", refused) is refused  # a plain method's: as it is
    # a key the arm sets is named under it; one it takes from the comparison stays the comparison's
    assert str(arm_error(config, "eoh-nf", UsageError("config error: sampling.temperature: too hot"))) == \
        "config error: compare.arms.eoh-nf.sampling.temperature: too hot"
    assert str(arm_error(config, "eoh-nf", UsageError("config error: sampling.top_p: too wide"))) == \
        "config error: sampling.top_p: too wide"


def test_a_refused_comparison_fixed_runs_with_its_edited_task_and_bars_named_by_arm(tmp_path, capsys, monkeypatch):
    """The newcomer's sequence, with the fake engine and the real sandbox: refused by an arm's tie-break,
    the config fixed and the task file edited, the same --out runs (no 'changed since' from a record the
    refused attempt left); each progress bar names its arm; --no-progress shows none; a rerun with an
    arm's setting changed is refused before anything is written (compare.toml kept)."""
    from coevolve.cli import main
    from coevolve.engine import pool
    from search_fakes import FakeEngine

    class Engine(FakeEngine):
        def close(self) -> None:
            pass

    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: Engine())
    problem = own_task(tmp_path)
    arm = '[compare.arms.sample-tb]\nmethod = "sample"\neoh = {{ tie_break = ["{tie}"] }}\n'
    path = compare_toml(tmp_path, ["sample", "sample-tb"], arm.format(tie="max ontime"))
    out = tmp_path / "out"
    assert main(["compare", str(path), "--out", str(out)]) == 2 and not out.exists()
    compare_toml(tmp_path, ["sample", "sample-tb"], arm.format(tie="min lines"))
    problem.write_text(problem.read_text() + "\n# edited after the refusal\n")
    capsys.readouterr()
    assert main(["compare", str(path), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "changed since" not in err
    assert "sample-tb mytask seed 0: " in err and "sample mytask seed 0: " in err  # each bar by its arm
    (recorded,) = json.loads((out / "tasks.json").read_text()).values()
    assert (out / recorded["copy"]).read_text() == problem.read_text()  # the edited file is the one run

    quiet = tmp_path / "quiet"
    assert main(["compare", str(path), "--out", str(quiet), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "eval/s" not in captured.err and "%|" not in captured.err, captured.err
    assert "[2/2]" in captured.out and (quiet / "report.md").exists()

    # the arm's settings changed under the same folder: refused before any run, compare.toml as it was
    before = (out / "compare.toml").read_text()
    (tmp_path / "cmp.toml").write_text(path.read_text().replace('"min lines"', '"max lines"'))
    assert main(["compare", str(path), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds a run under other settings: eoh.tie_break" in err and len(err.splitlines()) == 1, err
    assert (out / "compare.toml").read_text() == before
    # the task file edited after the comparison ran: a rerun is refused in a comparison's words
    (tmp_path / "cmp.toml").write_text(path.read_text().replace('"max lines"', '"min lines"'))
    problem.write_text(problem.read_text() + "\n# edited after the comparison\n")
    assert main(["compare", str(path), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"task file {problem.resolve()} changed since the comparison started" in err, err
    assert "restore it (the comparison's copy: " in err and "compare the edited file in a new comparison" in err


def test_a_rerun_that_lists_less_says_what_leaves_the_report(tmp_path):
    """compare.toml listed sample, eoh and seeds 0, 1; the rerun lists sample and seed 0: both said (their
    runs stay on disk); listing more, or the same, says nothing."""
    from coevolve.base.config import as_dict, dump_toml
    from coevolve.compare import dropped_lines

    def config(methods, seeds):
        return compare_config({"compare": {"methods": methods, "tasks": ["tsp_construct"], "budgets": [8],
                                           "seeds": seeds}})

    (tmp_path / "compare.toml").write_text(dump_toml(as_dict(config(["sample", "eoh"], [0, 1]))))
    runs = tmp_path / "runs"
    assert dropped_lines(tmp_path, config(["sample"], [0])) == [
        f"compare.methods no longer lists eoh: the runs made for it stay under {runs} but leave the report (list "
        "them again to bring them back)",
        f"compare.seeds no longer lists 1: the runs made for it stay under {runs} but leave the report (list them "
        "again to bring them back)"]
    assert dropped_lines(tmp_path, config(["sample", "eoh", "map_elites"], [0, 1])) == []
    assert dropped_lines(tmp_path / "new", config(["sample"], [0])) == []  # a first run: nothing before


def test_a_plan_with_no_esopt_arm_does_not_claim_one_matched(tmp_path, capsys):
    from coevolve.cli import main

    config = tmp_path / "c.toml"
    config.write_text('[compare]\nmethods = ["sample", "eoh"]\ntasks = ["tsp_construct"]\nbudgets = [8]\nseeds = [0]\n')
    assert main(["compare", str(config), "--plan"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("structural check: no method here with its +esopt variant (an M and M+esopt pair), nothing to match "
                                "(each arm's plan is above)")
    assert "every +ESOpt arm" not in out


def test_a_users_task_is_titled_by_its_name_and_its_file_said_once(tmp_path, capsys, monkeypatch):
    """A comparison of a user's task file (the fake engine, the real sandbox): the progress lines, the bars,
    report.md's heading and rows name it `mytask`, as its folder runs/mytask/ does (they named it by its full
    spec, `/tmp/.../mytask/problem.py:Mytask`); one line under the heading says which file it is, and the
    files the dashboard and `coevolve report` read back keep the spec."""
    import csv

    from coevolve.cli import main
    from coevolve.engine import pool
    from search_fakes import FakeEngine

    class Engine(FakeEngine):
        def close(self) -> None:
            pass

    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: Engine())
    spec = f"{own_task(tmp_path).resolve()}:Mytask"
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["compare", str(compare_toml(tmp_path, ["sample"], "")), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "[1/1] mytask sample budget 2 seed 0: running\n" in printed.out, printed.out
    assert "sample mytask seed 0: " in printed.err and spec not in printed.out + printed.err
    for rendered in (False, True):  # as the comparison wrote it, then re-rendered by `coevolve report`
        report = (out / "report.md").read_text()
        assert "Tasks: mytask. " in report and f"## mytask (lower is better)\n\nTask: `{spec}`\n" in report, report
        assert "| mytask | Sample | 2 | 0 | finished |" in report
        assert report.count(spec) == 1, report  # the file, said once
        with open(out / "runs.csv", newline="") as f:
            assert [row["task"] for row in csv.DictReader(f)] == [spec]  # what readers match on: kept
        if not rendered:
            assert main(["report", str(out)]) == 0
