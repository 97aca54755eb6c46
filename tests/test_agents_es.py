"""ES, Trace2Skill and their co-evolution on agent tasks, with a fake engine
(real ESOpt, ledger, rollouts, files) so the control flow is checked fast."""

import dataclasses
import json
import re
from contextlib import contextmanager

import pytest

from coevolve.agents.es_agent import run_agent
from coevolve.agents.runconfig import AgentRunConfig
from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.base.errors import UsageError
from coevolve.engine.base import Completion
from coevolve.runstore import RunStore


class FakeEngine:
    """Solves a sudoku move when its perturbation seed is even, else fumbles:
    members get different fitness, so ES has a direction to follow."""

    def __init__(self):
        self.perturbation = None
        self.updates = []
        self.system_prompts = []
        self.teacher_sampling = []  # (max_tokens, temperature) of each analysis and merge request
        self.device = "fake"

    @contextmanager
    def perturbed(self, seed, sigma):
        assert self.perturbation is None
        self.perturbation = (seed, sigma)
        try:
            yield
        finally:
            self.perturbation = None

    def apply_update(self, seeds, coefficients, alpha):
        assert self.perturbation is None
        self.updates.append((list(seeds), list(coefficients), alpha))

    def checksum(self):
        return f"fake-{len(self.updates)}"

    def noise_info(self):
        return {"noise": "full", "rank": None}

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        out = []
        for conversation in conversations:
            self.system_prompts.append(conversation[0]["content"])
            if conversation[0]["content"].startswith(("You are an error analyst", "You are a success analyst",
                                                      "Merge these rules")):
                self.teacher_sampling.append((sampling.max_tokens, sampling.temperature))
            if conversation[0]["content"].startswith(("You are an error analyst", "You are a success analyst")):
                out.append(Completion(text="ADD Checks: Check the row, the column and the box first."))
            elif conversation[0]["content"].startswith("Merge these rules"):
                out.append(Completion(text="- Check the row, the column and the box first."))
                continue
            good = self.perturbation is None or self.perturbation[0] % 2 == 0
            rows = [line.split("|")[1].split() for line in conversation[-1]["content"].splitlines() if "|" in line]
            empty = [(r, c) for r, row in enumerate(rows) for c, v in enumerate(row) if v == "."]
            if good and empty:
                r, c = empty[0]
                used = {rows[r][k] for k in range(4)} | {rows[k][c] for k in range(4)}
                for rr in range(r - r % 2, r - r % 2 + 2):
                    used |= {rows[rr][cc] for cc in range(c - c % 2, c - c % 2 + 2)}
                value = next(v for v in "1234" if v not in used)
                out.append(Completion(text=f"set {r + 1} {c + 1} {value}"))
            else:
                out.append(Completion(text="hmm"))
        return out


def make_config(method="esopt", budget=26, masked=2, seed=3, es=None, **agent):
    """An agent run config through the config path (checks included)."""
    raw = {"run": {"method": method, "task": "sudoku", "budget": budget, "seed": seed},
           "task": {"masked": masked},
           "agent": {"population": 4, "batch": 3, "eval_cases": 2, **agent},
           "es": {"sigma": 1e-3, "alpha": 1e-3, "generations": 10, **(es or {})}}
    return build_config(AgentRunConfig, raw)


def start(tmp_path, config, name="run"):
    return RunStore.create(tmp_path / name, dump_toml(as_dict(config)))


def play(config, store, engine):
    return run_agent(config, store, engine, config.build_task())


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_esopt_spends_the_budget_in_whole_generations(tmp_path):
    engine = FakeEngine()
    config = make_config(budget=26, eval_every=2)
    store = start(tmp_path, config)
    summary = play(config, store, engine)
    run = store.dir
    assert summary.rounds == 2 and summary.ledger.used == 24  # a third round (36) does not fit
    history = read_jsonl(run / "history.jsonl")
    assert [h["generation"] for h in history] == [0, 1] and len(engine.updates) == 2
    for record, (seeds, _, _) in zip(history, engine.updates):
        assert record["seeds"] == seeds
        # even seeds solve (reward 1), odd seeds fumble (reward 0)
        assert record["rewards"] == [1.0 if s % 2 == 0 else 0.0 for s in seeds]
    assert [e["round"] for e in read_jsonl(run / "eval.jsonl")] == [0, 2]
    assert (run / "trajectories" / "round_000.md").exists()
    assert len(read_jsonl(run / "trajectories" / "round_001.jsonl")) == 12
    assert json.loads((run / "summary.json").read_text())["checksum"] == "fake-2"
    events = store.events()
    assert [e["type"] for e in events] == ["start", "eval", "round", "round", "eval", "end"]
    assert [e["fitness"] for e in events if e["type"] == "round"] == [h["rewards"] for h in history]
    with pytest.raises(UsageError, match="already holds a run"):
        start(tmp_path, config)
    assert len(read_jsonl(run / "history.jsonl")) == 2  # the earlier run is untouched


def test_resume_after_a_kill_mid_run_gives_the_uninterrupted_result(tmp_path):
    """Cut the event log and history back to a state a kill leaves behind (a
    round logged, its ES update not yet in history.jsonl), then resume."""
    config = make_config(method="esopt+trace2skill", budget=36, eval_every=1, skill_every=1, batch=2)
    whole = play(config, start(tmp_path, config, "whole"), FakeEngine())
    store = start(tmp_path, config, "cut")
    play(config, store, FakeEngine())
    events = store.events_path.read_text().splitlines(keepends=True)
    rounds = [i for i, line in enumerate(events) if '"type": "round"' in line]
    store.events_path.write_text("".join(events[: rounds[1] + 1]) + events[rounds[1] + 1][:20])  # torn tail
    history = store.history_path.read_text().splitlines(keepends=True)
    store.history_path.write_text("".join(history[:1]))
    (store.dir / "summary.json").unlink()
    engine = FakeEngine()
    resumed = play(config, RunStore.open(store.dir), engine)
    assert len(engine.updates) == 4  # 1 replayed from history, 1 re-applied from the log, 2 live
    assert resumed.skill == whole.skill.replace("/whole/", "/cut/")
    assert resumed.model_copy(update={"skill": None}) == whole.model_copy(update={"skill": None})
    assert read_jsonl(store.dir / "history.jsonl") == [
        {**h, "time": r["time"], "update_seconds": r["update_seconds"]}
        for h, r in zip(read_jsonl(tmp_path / "whole" / "history.jsonl"), read_jsonl(store.dir / "history.jsonl"))]
    assert [e["round"] for e in read_jsonl(store.dir / "eval.jsonl")] == [0, 1, 2, 3, 4]
    assert [e["type"] for e in store.events()].count("round") == 4


def test_a_run_without_events_from_before_resume_is_refused_clearly(tmp_path):
    config = make_config()
    store = start(tmp_path, config)
    (store.dir / "eval.jsonl").write_text('{"round": 0}\n')
    with pytest.raises(UsageError, match="written before agent runs kept events.jsonl"):
        play(config, store, FakeEngine())


def test_esopt_stops_when_the_sigma_schedule_ends(tmp_path):
    config = make_config(budget=100, batch=2, eval_cases=1, es={"generations": 3})
    summary = play(config, start(tmp_path, config), FakeEngine())
    assert summary.rounds == 3 and summary.ledger.used == 24


def test_trace2skill_only_distils_and_injects_without_touching_weights(tmp_path):
    engine = FakeEngine()
    config = make_config(method="trace2skill", budget=16, batch=2, eval_cases=1, skill_name="sudoku-learned")
    store = start(tmp_path, config)
    summary = play(config, store, engine)
    assert engine.updates == [] and summary.rounds == 2 and summary.ledger.used == 16
    assert summary.skill.endswith("sudoku-learned")
    assert "Check the row, the column and the box first." in (store.dir / "skills" / "sudoku-learned" / "SKILL.md").read_text()
    evals = read_jsonl(store.dir / "eval.jsonl")
    assert evals[0]["skills"] == [] and evals[-1]["skills"] == ["sudoku-learned"]
    assert any("Skill: sudoku-learned" in p for p in engine.system_prompts)


def test_posthoc_distillation_runs_once_at_the_end_best_of_n_on_validation(tmp_path):
    engine = FakeEngine()
    config = make_config(method="esopt+trace2skill", budget=32, batch=2, eval_cases=1, distill_seeds=3,
                         validation_cases=2)
    store = start(tmp_path, config)
    summary = play(config, store, engine)
    history = read_jsonl(store.dir / "history.jsonl")
    assert [h["extra"]["skills"] for h in history] == [[], [], [], []]  # the ES rounds ran without a skill
    skills = [e for e in read_jsonl(store.dir / "events.jsonl") if e["type"] == "skill"]
    assert len(skills) == 1 and skills[0]["round"] == 4 and skills[0]["mode"] == "posthoc"
    assert len(skills[0]["candidates"]) == 3 and sum(c["chosen"] for c in skills[0]["candidates"]) == 1
    assert summary.eval_last.skills == ["distilled"]  # the final held-out evaluation uses it
    # validation puzzles are played with every candidate skill: 3 candidates x 2 puzzles
    assert sum(p.count("Skill: distilled") for p in engine.system_prompts) >= 6


def test_the_teacher_writes_at_its_own_reply_limit(tmp_path):
    """agent.teacher_max_tokens is every analysis and merge request's limit (160 when not given), beside
    agent.teacher_temperature; a limit leaving the model no room for the prompt is refused naming the key."""
    limits = []
    for name, agent in (("default", {}), ("set", {"teacher_max_tokens": 48, "teacher_temperature": 0.9})):
        engine = FakeEngine()
        config = make_config(method="trace2skill", budget=16, batch=2, eval_cases=1, distill="online", **agent)
        play(config, start(tmp_path, config, name), engine)
        assert engine.teacher_sampling, name  # analysts and merges were asked
        limits.append(set(engine.teacher_sampling))
    assert limits == [{(160, 0.3)}, {(48, 0.9)}]
    with pytest.raises(UsageError, match=r"agent\.teacher_max_tokens must be < model\.max_len \(2048\)"):
        make_config(teacher_max_tokens=2048)


def test_bad_distill_mode_is_a_config_error():
    with pytest.raises(Exception, match="agent.distill must be one of"):
        make_config(distill="sometimes")


def test_coevolution_alternates_es_generations_and_skill_updates(tmp_path):
    engine = FakeEngine()
    config = make_config(method="esopt+trace2skill", budget=32, batch=2, eval_cases=1, skill_every=2,
                         distill="online")
    store = start(tmp_path, config)
    play(config, store, engine)
    history = read_jsonl(store.dir / "history.jsonl")
    # online (our extension): the skill appears after generation 1 (skill_every=2) and is used from generation 2 on
    assert [h["extra"]["skills"] for h in history] == [[], [], ["distilled"], ["distilled"]]
    assert len(engine.updates) == 4


def test_shaping_adds_the_progress_metric_to_the_fitness(tmp_path):
    config = make_config(budget=8, batch=2, eval_cases=1, shaping=0.5)
    store = start(tmp_path, config)
    play(config, store, FakeEngine())
    record = read_jsonl(store.dir / "history.jsonl")[0]
    # solvers: reward 1 + 0.5 * progress 1; fumblers: every reply unparsed, no right cell
    assert record["rewards"] == [1.5 if s % 2 == 0 else 0.0 for s in record["seeds"]]


def test_progress_reports_episodes_reward_solved_rate_and_sigma(tmp_path):
    config = make_config(budget=24, batch=3)
    seen = []
    run_agent(config, start(tmp_path, config), FakeEngine(), config.build_task(),
              on_progress=lambda p: seen.append(dataclasses.replace(p)))
    assert [p.used for p in seen] == [12, 24]
    # half the members (even seeds) solve every puzzle
    assert all(p.mean_reward == p.solved_rate for p in seen) and all(0 < p.solved_rate < 1 for p in seen)
    assert all(p.sigma is not None and p.sigma > 0 for p in seen)


def test_a_resumed_run_marks_its_replayed_rounds_so_the_bar_starts_after_them(tmp_path):
    """A resumed agent run's bar counted its replayed rounds as this session's episodes (its rate and
    ETA as if they took no time), as a heuristic run's did: the rounds read from the log are marked."""
    config = make_config(budget=36, batch=3)
    store = start(tmp_path, config)
    play(config, store, FakeEngine())
    events = store.events_path.read_text().splitlines(keepends=True)
    rounds = [i for i, line in enumerate(events) if '"type": "round"' in line]
    store.events_path.write_text("".join(events[: rounds[1] + 1]))  # killed after round 1
    store.history_path.write_text("".join(store.history_path.read_text().splitlines(keepends=True)[:2]))
    (store.dir / "summary.json").unlink()
    seen = []
    run_agent(config, RunStore.open(store.dir), FakeEngine(), config.build_task(),
              on_progress=lambda p: seen.append((p.used, p.replayed)))
    assert seen == [(12, True), (24, True), (36, False)]


@pytest.mark.parametrize("raw, message", [
    ({"run": {"method": "magic"}}, "run.method must be one of"),
    ({"agent": {"shaping": -1}}, "agent.shaping must be >= 0"),
    ({"run": {"budget": 10}, "agent": {"population": 4, "batch": 3}}, "run.budget must pay at least one round"),
    ({"task": {"masked": 16}}, "task.masked must be in 1..15 (got 16)"),
    ({"task": {"turns": 2}}, "task.turns is not an option of sudoku (its options: masked, size)"),
    ({"run": {"task": "tsp_construct"}}, "run.task must be one of"),
])
def test_bad_configs_are_rejected_clearly(raw, message):
    with pytest.raises(UsageError, match=re.escape(f"config error: {message}")):
        build_config(AgentRunConfig, raw).build_task()  # the task's options are checked by building it


class SkillReader(FakeEngine):
    """Plays as FakeEngine only when the system prompt holds RULE (the seed skill as first written);
    under any other seed skill every reply fumbles, so the skill played shows in every number."""

    RULE = "Fill the first empty cell with the digit its row lacks."

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        out = []
        for conversation in conversations:
            if conversation[0]["content"].startswith("You are") or self.RULE in conversation[0]["content"]:
                out += super().chat([conversation], sampling)
            else:
                self.system_prompts.append(conversation[0]["content"])
                out.append(Completion(text="hmm"))
        return out

    def close(self):
        pass


def seed_skill(folder, rule=SkillReader.RULE):
    from coevolve.agents.skills import write_skill

    return write_skill(folder, "What the player knows", f"# moves\n\n## Moves\n- {rule}")


def test_seed_skills_are_pinned_in_the_log_and_a_resume_plays_the_logged_text(tmp_path):
    """[skills] is read once, at the run's start, into a seed_skills event; a run killed after a round and
    resumed after its SKILL.md was edited plays the logged text and reaches the uninterrupted run's summary."""
    seed = seed_skill(tmp_path / "sudoku-mine")

    def config_of():
        raw = as_dict(make_config(budget=24, batch=2, eval_cases=2))
        return build_config(AgentRunConfig, {**raw, "skills": {"paths": [str(seed.path)]}})

    config = config_of()
    whole = play(config, start(tmp_path, config, "whole"), SkillReader())
    assert whole.eval_first.mean_reward > 0  # the skill's rule makes the player play
    store = start(tmp_path, config, "cut")
    play(config, store, SkillReader())
    events = store.events()
    assert [e["type"] for e in events[:2]] == ["start", "seed_skills"]
    assert events[1]["skills"] == [{"path": str(seed.path), "name": "sudoku-mine", "text": seed.text()}]
    lines = store.events_path.read_text().splitlines(keepends=True)
    first_round = next(i for i, line in enumerate(lines) if '"type": "round"' in line)
    store.events_path.write_text("".join(lines[: first_round + 1]))  # killed after round 0's event
    store.history_path.write_text(store.history_path.read_text().splitlines(keepends=True)[0])
    (store.dir / "summary.json").unlink()
    seed_skill(seed.path, "Answer with a bare digit.")  # edited after the run started
    engine = SkillReader()
    resumed = play(config_of(), RunStore.open(store.dir), engine)
    assert resumed == whole
    assert engine.system_prompts and all(SkillReader.RULE in p for p in engine.system_prompts
                                         if not p.startswith("You are"))
    assert [e["type"] for e in store.events()].count("seed_skills") == 1
    # the folder is not read on resume: it may be gone
    (seed.path / "SKILL.md").unlink()
    seed.path.rmdir()
    assert play(config_of(), RunStore.open(store.dir), SkillReader()) == whole


def test_a_run_logged_before_seed_skills_were_pinned_reads_its_folders_and_pins_them(tmp_path):
    """An old run directory (no seed_skills event) resumes from its [skills] folders as before; the texts
    read then are logged, so a later resume plays them too."""
    seed = seed_skill(tmp_path / "sudoku-mine")
    raw = as_dict(make_config(budget=24, batch=2, eval_cases=2))
    config = build_config(AgentRunConfig, {**raw, "skills": {"paths": [str(seed.path)]}})
    store = start(tmp_path, config)
    whole = play(config, store, SkillReader())
    old = [line for line in store.events_path.read_text().splitlines(keepends=True) if "seed_skills" not in line]
    store.events_path.write_text("".join(old))
    assert play(config, RunStore.open(store.dir), SkillReader()) == whole
    assert [e for e in store.events() if e["type"] == "seed_skills"][0]["skills"][0]["text"] == seed.text()


def test_a_run_without_seed_skills_logs_no_seed_skills_event(tmp_path):
    config = make_config(budget=12, batch=3)
    store = start(tmp_path, config)
    play(config, store, FakeEngine())
    assert "seed_skills" not in [e["type"] for e in store.events()]


@pytest.mark.parametrize("damage", ["deleted", "emptied"])
def test_a_run_whose_log_was_lost_is_refused_as_lost_not_as_old(tmp_path, damage):
    """A run this coevolve wrote (its records carry schema_version) and whose events.jsonl was then
    deleted or emptied: the refusal says the log was lost and how to put it back, not that the run is
    from before agent runs kept a log (what it said before)."""
    config = make_config(budget=12)
    store = start(tmp_path, config)
    play(config, store, FakeEngine())
    assert (store.dir / "eval.jsonl").exists()
    if damage == "deleted":
        store.events_path.unlink()
    else:
        store.events_path.write_text("")
    state = "is missing" if damage == "deleted" else "is empty"
    with pytest.raises(UsageError, match=f"events.jsonl {state} while .* the run's log was lost"):
        play(config, store, FakeEngine())
