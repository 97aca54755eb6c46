"""`coevolve run --resume DIR --budget N`: a run, finished or not, goes on to N evaluations.

The steps it took stay as they were; where its plan does not depend on the budget, the extended run
is the run that had N from the start (same candidates, same summary), and a kill during the
extension resumes to the same end. Refusals are one line and change nothing."""

from __future__ import annotations

import json

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml, read_toml
from coevolve.base.errors import UsageError
from coevolve.commands.run import extend
from coevolve.dashboard.reader import run_state as dashboard_state
from coevolve.plan import run_state as compare_state
from coevolve.report.rendering import context_rows
from coevolve.runstore import RunStore, ended, read_jsonl
from coevolve.search.loop import SearchLoop
from coevolve.search.runconfig import RunConfig
from search_fakes import FakeEngine, FakeEvaluator, FakeTask


def config(method: str, budget: int, **sections) -> RunConfig:
    return build_config(RunConfig, {
        "run": {"method": method, "task": "fake", "budget": budget, "seed": 3},
        "eoh": {"population": 4, "offspring": 3},
        "sample": {"batch": 5, "population": 4},
        "es": {"population": 4, "sigma": 0.01, "sigma_end": 0.001, "alpha": 0.1}, **sections})


def start(directory, cfg: RunConfig):
    store = RunStore.create(directory, dump_toml(as_dict(cfg)))
    return SearchLoop(cfg, store, FakeEngine(), FakeEvaluator(), FakeTask()).run()


def go_on(directory, budget: int):
    store = RunStore.open(directory)
    raw = read_toml(store.config_path)
    larger = extend(store, raw, build_config(RunConfig, raw), budget)
    return SearchLoop(larger, store, FakeEngine(), FakeEvaluator(), FakeTask()).run()


def candidates(directory) -> list[dict]:
    return [{k: v for k, v in c.items() if k != "seconds"} for c in read_jsonl(directory / "candidates.jsonl")]


@pytest.mark.parametrize("method, small, large", [("sample", 20, 35), ("eoh", 16, 40), ("eoh+trace2skill", 19, 40)])
def test_an_extended_run_is_the_run_that_had_the_larger_budget_from_the_start(tmp_path, method, small, large):
    """Budgets at a step's end: Sample's steps of 5 (20: four); EoH's i1 4, then e1 3, e2 3, m1 3, m2 3 per
    generation (16: one); +trace2skill's refresh after every 4 steps (3 analysts) counts (19: five steps)."""
    start(tmp_path / "grown", config(method, small))
    assert ended(read_jsonl(tmp_path / "grown" / "events.jsonl"))
    grown = go_on(tmp_path / "grown", large)
    fresh = start(tmp_path / "fresh", config(method, large))
    assert grown.evaluations == large == fresh.evaluations
    assert ("budget raised", f"{small} -> {large} (--resume --budget; the steps before stayed as they were)") in \
        context_rows(grown.context, grown.stopped)  # a row of the table `coevolve run` prints
    assert grown.context.pop("extended") == [{"from": small, "budget": large}]  # all it knows of the extension
    assert grown.model_dump(exclude={"timing"}) == fresh.model_dump(exclude={"timing"})
    assert candidates(tmp_path / "grown") == candidates(tmp_path / "fresh")
    events = read_jsonl(tmp_path / "grown" / "events.jsonl")
    assert [e for e in events if e["type"] == "extend"] == [{"type": "extend", "budget": large, "from": small}]
    assert [e["type"] for e in events].count("end") == 2 and ended(events)
    assert read_toml(tmp_path / "grown" / "config.toml")["run"]["budget"] == large


def test_a_step_the_old_budget_cut_short_stays_short_and_a_killed_extension_resumes(tmp_path):
    """Sample+ESOpt asks es.population = 4 per step: budget 13 cuts the fourth step to 1 (too few
    members for an update); at 25 the run goes on with whole steps after it. Killed after its first
    new step, the extension resumes (plain --resume) to the same end."""
    start(tmp_path / "grown", config("sample+esopt", 13))
    grown = go_on(tmp_path / "grown", 25)
    steps = [e for e in read_jsonl(tmp_path / "grown" / "events.jsonl") if e["type"] == "step"]
    assert [len(s["requests"]) for s in steps] == [4, 4, 4, 1, 4, 4, 4]
    assert grown.evaluations == 25
    # sigma: the steps already taken keep theirs; the new ones follow the schedule over the longer plan
    sigmas = [s["es"]["members"][0]["sigma"] for s in steps if s.get("es")]
    assert sigmas[2] < sigmas[3]  # the warm restart at the extension

    events = read_jsonl(tmp_path / "grown" / "events.jsonl")
    cut = next(i for i, e in enumerate(events) if e["type"] == "step" and e["step"] == 4)  # the first new step
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "config.toml").write_text((tmp_path / "grown" / "config.toml").read_text())
    (killed / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:cut + 1]))
    (killed / "history.jsonl").write_text("".join(
        line for line in (tmp_path / "grown" / "history.jsonl").read_text().splitlines(keepends=True)[:4]))
    assert not ended(read_jsonl(killed / "events.jsonl"))  # extended after its end: running again
    (killed / "summary.json").write_text((tmp_path / "grown" / "summary.json").read_text())  # the first end's
    assert dashboard_state(killed, read_jsonl(killed / "events.jsonl"), 0.0) == "stopped"
    assert compare_state(killed) == "partial"  # a comparison would resume it, not skip it
    # its report says the summary it shows is the first end's, and how to go on
    from coevolve.report.rendering import render_run
    report = render_run(killed)["report.md"].read_text()
    assert (f"**This run is not finished: its extension to 25 evaluations (`--resume --budget`) has not finished; "
            f"the table is the summary it last wrote. `coevolve run --resume {killed}` goes on.**") in report, report
    resumed = SearchLoop(build_config(RunConfig, read_toml(killed / "config.toml")), RunStore.open(killed),
                         FakeEngine(), FakeEvaluator(), FakeTask()).run()
    assert resumed.model_dump(exclude={"timing"}) == grown.model_dump(exclude={"timing"})
    assert candidates(killed) == candidates(tmp_path / "grown")


def test_refusals_are_one_line_and_change_nothing(tmp_path):
    start(tmp_path / "r", config("eoh", 16))
    before = {p.name: p.read_bytes() for p in (tmp_path / "r").iterdir() if p.is_file()}
    store = RunStore.open(tmp_path / "r")
    raw = read_toml(store.config_path)
    cfg = build_config(RunConfig, raw)
    with pytest.raises(UsageError, match="--budget 10 is below the run's budget of 16"):
        extend(store, raw, cfg, 10)
    scaled = tmp_path / "scaled"
    start(scaled, config("eoh", 16, eoh={"population": 4, "offspring": 3, "m_multiplier": 0, "generations": 2}))
    raw_scaled = read_toml(scaled / "config.toml")
    # the paper's k = T / (2 x offspring x generations) - 1: 16 / 12 - 1 = 0.33 -> m1 asks round(3 x 0.33) = 1;
    # at 40, 40 / 12 - 1 = 2.33 -> 7
    with pytest.raises(UsageError, match=r"cannot give .*scaled a budget of 40: its plan depends on the budget: step 3 "
                                         r"would be m1 x 7 .* where the run planned m1 x 1 .*m_multiplier = 0"):
        extend(RunStore.open(scaled), raw_scaled, build_config(RunConfig, raw_scaled), 40)
    assert {p.name: p.read_bytes() for p in (tmp_path / "r").iterdir() if p.is_file()} == before
    # the same budget again: nothing to add
    extend(store, raw, cfg, 16)
    assert {p.name: p.read_bytes() for p in (tmp_path / "r").iterdir() if p.is_file()} == before


def test_a_half_done_extension_is_mended_by_asking_again(tmp_path):
    """Killed between the config and the event: a plain resume refuses the mix, and asking for the
    same budget again appends the event and goes on."""
    start(tmp_path / "r", config("sample", 20))
    store = RunStore.open(tmp_path / "r")
    raw = read_toml(store.config_path)
    store.config_path.write_text(dump_toml({**raw, "run": {**raw["run"], "budget": 30}}))  # the config alone
    with pytest.raises(UsageError, match=r"run.budget was 20, is now 30; .* --budget 30`"):
        SearchLoop(build_config(RunConfig, read_toml(store.config_path)), store, FakeEngine(), FakeEvaluator(),
                   FakeTask()).run()
    summary = go_on(tmp_path / "r", 30)
    assert summary.evaluations == 30
    assert [e for e in read_jsonl(store.events_path) if e["type"] == "extend"] == [
        {"type": "extend", "budget": 30, "from": 20}]


def test_the_cli_takes_budget_with_resume_only_for_heuristic_searches(tmp_path, capsys, monkeypatch):
    from coevolve.cli import main
    from coevolve.engine import pool

    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: pytest.fail("a refused run started its engine"))
    start(tmp_path / "r", config("sample", 20))
    assert main(["run", "--resume", str(tmp_path / "r"), "--seed", "4"]) == 2
    assert "--resume takes only the run directory (and --budget N" in capsys.readouterr().err
    assert main(["run", "--resume", str(tmp_path / "r"), "--budget", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--budget 5 is below the run's budget of 20: --resume --budget only raises it")
    assert len(err.splitlines()) == 1
    # --plan shows what the run would go on with, and writes nothing
    assert main(["run", "--resume", str(tmp_path / "r"), "--budget", "30", "--plan"]) == 0
    assert "budget T = 30" in capsys.readouterr().out
    assert read_toml(tmp_path / "r" / "config.toml")["run"]["budget"] == 20
    assert not [e for e in read_jsonl(tmp_path / "r" / "events.jsonl") if e["type"] == "extend"]




def test_the_cli_reads_the_config_once_and_rewrites_it_in_its_own_shape(tmp_path, monkeypatch):
    """`run --resume DIR --budget N` as the CLI resolves it: config.toml is read once, and written back as
    it was but for the budget (a hand-edited `[task] name` stays there, not moved to run.task)."""
    from coevolve.cli import build_parser
    from coevolve.commands import run

    start(tmp_path / "r", config("sample", 20))
    path = tmp_path / "r" / "config.toml"
    raw = read_toml(path)
    by_name = {**raw, "run": {k: v for k, v in raw["run"].items() if k != "task"}, "task": {"name": "fake"}}
    path.write_text(dump_toml(by_name))
    reads = []
    monkeypatch.setattr(run, "read_toml", lambda p: reads.append(p) or read_toml(p))
    monkeypatch.setattr(run, "check_generators", lambda config: None)  # no engine here: the config is the point
    args = build_parser().parse_args(["run", "--resume", str(tmp_path / "r"), "--budget", "30"])
    larger, _, resuming = run.resolve_config(args)
    assert resuming and larger.run.budget == 30 and larger.run.task == "fake"
    assert reads == [path]
    assert read_toml(path) == {**by_name, "run": {**by_name["run"], "budget": 30}}


def test_the_plan_of_an_extension_reads_the_config_once(tmp_path, capsys, monkeypatch):
    """`run --resume DIR --budget N --plan`: the stored config is read and built once and the larger one
    derived from it; a plan that depends on the budget is refused as the run refuses it."""
    from coevolve.cli import main
    from coevolve.commands import run

    start(tmp_path / "r", config("sample", 20))
    start(tmp_path / "scaled", config("eoh", 16, eoh={"population": 4, "offspring": 3, "m_multiplier": 0,
                                                   "generations": 2}))
    reads = []
    monkeypatch.setattr(run, "read_toml", lambda p: reads.append(p) or read_toml(p))
    assert main(["run", "--resume", str(tmp_path / "r"), "--budget", "30", "--plan"]) == 0
    assert "budget T = 30" in capsys.readouterr().out
    assert reads == [tmp_path / "r" / "config.toml"]
    assert main(["run", "--resume", str(tmp_path / "scaled"), "--budget", "40", "--plan"]) == 2
    assert "scaled a budget of 40: its plan depends on the budget" in capsys.readouterr().err
    # a smaller budget: the plan says what the run says, not a plan the run would refuse
    assert main(["run", "--resume", str(tmp_path / "r"), "--budget", "10", "--plan"]) == 2
    assert "--budget 10 is below the run's budget of 20: --resume --budget only raises it" in capsys.readouterr().err
    # an agent run's plan is refused a budget as the run is
    from coevolve.agents.runconfig import AgentRunConfig

    RunStore.create(tmp_path / "agent", dump_toml(as_dict(AgentRunConfig())))
    assert main(["run", "--resume", str(tmp_path / "agent"), "--budget", "512", "--plan"]) == 2
    assert "an agent run's rounds and its ES schedule are planned from its budget" in capsys.readouterr().err


def test_a_run_that_never_started_takes_the_budget_in_its_config_alone(tmp_path):
    """A directory with its config.toml but no step yet (killed while loading the model): nothing to
    extend in its log, which must still begin with its start event."""
    store = RunStore.create(tmp_path / "r", dump_toml(as_dict(config("sample", 20))))
    raw = read_toml(store.config_path)
    larger = extend(store, raw, build_config(RunConfig, raw), 30)
    assert larger.run.budget == 30 and store.events() == []
    summary = SearchLoop(larger, store, FakeEngine(), FakeEvaluator(), FakeTask()).run()
    assert summary.evaluations == 30 and read_jsonl(store.events_path)[0]["type"] == "start"


def test_a_comparisons_run_is_not_extended_behind_its_back(tmp_path):
    """runs/<task>/<arm>-b<budget>-s<seed> under a comparison's folder: its budget is the comparison's."""
    root = tmp_path / "cmp"
    root.mkdir()
    (root / "compare.toml").write_text("")
    start(root / "runs" / "fake" / "sample-b20-s3", config("sample", 20))
    store = RunStore.open(root / "runs" / "fake" / "sample-b20-s3")
    before = store.config_path.read_text()
    raw = read_toml(store.config_path)
    with pytest.raises(UsageError, match=r"is a run of the comparison in .*cmp, whose budgets are its arms': add 30 "
                                         r"to \[compare\] budgets there"):
        extend(store, raw, build_config(RunConfig, raw), 30)
    assert store.config_path.read_text() == before
