"""ES, Trace2Skill and their co-evolution on multi-turn agent tasks, under one
episode budget, on the same run machinery as heuristic search (RunStore,
events.jsonl, the progress bar, `--resume`, `coevolve report`).

Methods (same budget, same cases, same evaluation):
- `esopt`: each generation, every ES member (a seeded weight perturbation)
  plays the same batch of train cases; its fitness is the mean reward; the
  engine's weights take the ES update.
- `trace2skill`: each round plays population x batch episodes with the
  current skills; the trajectories are distilled into a skill.
- `esopt+trace2skill`: ES generations, and a skill distilled from their
  trajectories.

When skills are distilled (`[agent] distill`): "posthoc" (the default,
Trace2Skill's published setting) distils once after the last round from all
training trajectories, best of `distill_seeds` candidates on validation
puzzles; "online" (our extension, the co-evolution interleaving) distils
every `skill_every` rounds (every round for trace2skill) from the latest
round, patching the previous skill. Every turn is decoded under the task's
action format when `[agent] constrained` (default) and the task declares one.

ES methods also stop after `resolved_es(config).generations` generations (the σ
schedule's length). Budget = training episodes (coevolve.search.ledger.Ledger,
one charge per episode). Held-out evaluation (greedy, `eval` split) runs every
`eval_every` rounds and is not charged: it measures, it does not search.

Events: `start` (the config), `seed_skills` (the text of each [skills] folder,
read once: a resume plays these, whatever the folders hold by then, as a
heuristic run's `skill_start`), then, in order within a round: `round` (the
fitness of every member, written before the ES update, as the search loop
writes a step), then `skill` (the distilled SKILL.md text) and `eval`. Every
random choice derives from (seed, round), so resuming replays the logged
rounds from the log, restores the
weights from history.jsonl (ESOpt.resume; an update lost to a kill is
re-applied from the logged fitness) and goes on live: the result equals an
uninterrupted run's. The run dir also holds history.jsonl (ES), eval.jsonl,
trajectories/round_NNN.{md,jsonl}, skills/<name>/SKILL.md and summary.json.
"""

from __future__ import annotations

import dataclasses
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from coevolve.agents.rollout import (Trajectory, derive_seed, drawn_cases, load_trajectories, mean_metrics,
                                     mean_reward, rollout, save_trajectories)
from coevolve.agents.runconfig import AgentRunConfig, read_seed_skills
from coevolve.agents.skills import Skill, SkillError, load_skill, parse_skill_text
from coevolve.agents.tools import SandboxTool
from coevolve.agents.trace2skill import DEFAULT_SAMPLING, DistillSettings, distill, distill_best_of
from coevolve.base.config import as_dict
from coevolve.base.mirror import Mirroring
from coevolve.base.durable import JsonlWriter, atomic_write_json, atomic_write_jsonl, atomic_write_text, read_jsonl
from coevolve.base.records import AgentEvalRound, AgentSummary, write_record
from coevolve.engine.base import Generator, WeightEngine
from coevolve.engine.openai_client import open_endpoint
from coevolve.engine import pool
from coevolve.es.config import ESConfig
from coevolve.es.optimizer import engine_dtype, engine_options, sigma_at
from coevolve.es.start import ResumeError, check_start, start_es, start_event
from coevolve.runstore import RunStore
from coevolve.search.answered import ANSWERED, Answered
from coevolve.search.ledger import Ledger
from coevolve.search.progress import progress_bar

EVENT_VERSION = 1
KIND = "agent"
SEED_SKILLS = "seed_skills"  # the event pinning the [skills] texts a run plays with


@dataclass
class AgentProgress:
    """What the progress bar shows after each round."""

    used: int = 0
    mean_reward: float | None = None  # the round's training episodes
    solved_rate: float | None = None
    sigma: float | None = None
    eval_reward: float | None = None  # the latest held-out evaluation
    replayed: bool = False  # the round reported was replayed from the log: an earlier session's episodes


def evaluate(generator: Generator, task: Any, config: AgentRunConfig,
             skills: Sequence[Skill] = ()) -> tuple[list[Trajectory], dict[str, float]]:
    """Greedy held-out evaluation on `agent.eval_cases` cases of the eval split."""
    cases = drawn_cases(task, "eval", config.agent.eval_cases, config.run.seed, "agent.eval_cases")
    constrained = config.agent.constrained and bool(getattr(task, "action_pattern", None))
    trajectories = rollout(
        generator, task, cases, config.eval_sampling(), seed=derive_seed(config.run.seed, "eval"),
        skills=skills, history_turns=config.agent.history_turns, label="eval", constrained=constrained,
    )
    return trajectories, {"mean_reward": mean_reward(trajectories), **mean_metrics(trajectories)}


def run_agent(
    config: AgentRunConfig,
    store: RunStore,
    engine: WeightEngine | Generator,
    task: Any,
    endpoint: Generator | None = None,
    on_progress: Callable[[AgentProgress], None] | None = None,
    on_phase: Callable[[str | None], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> AgentSummary:
    """Run (or resume) `config.run.method` in `store` until the episode budget
    cannot pay another round. `engine` must be a WeightEngine for ES methods;
    `endpoint` distils skills (default: the engine at its current weights).
    `on_note`: told a resume's `weights:` line (es.start.start_es).
    Returns the summary also written to summary.json."""
    return _AgentRun(config, store, engine, task, endpoint or engine, on_progress, on_phase, on_note).run()


def execute(config: AgentRunConfig, store: RunStore, engine: Any = None, *, progress: bool = True,
            resuming: bool = False, label: str = "", on_note: Callable[[str], None] | None = None) -> AgentSummary:
    """Run (or resume) an agent config in `store` with its task, endpoint and
    progress bar: what `coevolve run` and `coevolve compare` both call. A given
    `engine` is used and left open (its weights keep the run's updates: reset it
    afterwards); otherwise one is built and closed."""
    check_run_dir(store, config)
    tool = SandboxTool()
    task = config.build_task(tool=tool)
    endpoint = open_endpoint(config.endpoint)
    own_engine = engine is None
    if own_engine:
        es_options = (engine_options(config.es.noise, config.es.rank, config.agent.population)
                      if config.uses_es else {})
        engine = pool.build_engine(config.model.path or None, config.distributed,
                                   dtype=engine_dtype(config.model.dtype, store.history_path),
                                   max_model_len=config.model.max_len, **es_options)
    bar = progress_bar(config, resuming, label=label, unit="episode") if progress else None
    try:
        with Mirroring(config.log, store.dir, "max") as mirror:  # [log] trackers, at every round boundary
            return run_agent(config, store, engine, task, endpoint=endpoint,
                             on_progress=mirror.after(bar.update_agent if bar else None),
                             on_phase=bar.phase if bar else None, on_note=on_note)
    finally:
        if bar:
            bar.close()
        tool.close()
        if own_engine:
            engine.close()


class _AgentRun:
    def __init__(self, config: AgentRunConfig, store: RunStore, engine: Any, task: Any, distiller: Generator,
                 on_progress: Callable[[AgentProgress], None] | None,
                 on_phase: Callable[[str | None], None] | None = None,
                 on_note: Callable[[str], None] | None = None) -> None:
        self.config, self.store, self.engine, self.task = config, store, engine, task
        self.distiller = distiller
        self.on_progress = on_progress
        self.on_phase = on_phase
        self.on_note = on_note
        self.ledger = Ledger(budget=config.run.budget)
        self.seed_skills: list[Skill] = []  # [skills], as the run's log pinned them (run())
        self.distilled: Skill | None = None
        self.evals: list[dict[str, Any]] = []
        self.progress = AgentProgress()
        self.es: Any = None

    # ------------------------------------------------------------------ run
    def run(self) -> AgentSummary:
        config, store = self.config, self.store
        events = store.events()
        check_run_dir(store, config, events)
        self.es = self._start_es(events)
        started = time.time()
        self.earlier_s = earlier_seconds(store.path("timing.json"))  # the sessions before a resume
        rounds = {e["round"]: e for e in events if e.get("type") == "round"}
        skills = {e["round"]: e for e in events if e.get("type") == "skill"}
        evals = {e["round"]: e for e in events if e.get("type") == "eval"}
        if self.constrained:  # a pattern the engine rejects fails here, before any episode
            check = getattr(self.engine, "check_constraints", None)
            if check is not None:
                check([self.task.action_pattern])
        pinned = logged_seed_skills(events, store.events_path)
        self.seed_skills = config.seed_skills() if pinned is None else pinned
        with store.event_writer() as log:
            if not events:
                log.append(start_event(KIND, EVENT_VERSION, as_dict(config)))
            if pinned is None and config.skills.paths:  # read once; a resume plays these texts
                log.append(seed_skills_event(config.skills.paths, self.seed_skills))
            self._eval(0, evals.get(0), log, started)
            round_index = 0
            online = config.agent.distill == "online"
            while self._can_play(round_index):
                trajectories = self._round(round_index, rounds.get(round_index), log)
                self.progress.replayed = round_index in rounds  # the bar starts after the replayed rounds
                round_index += 1
                if config.uses_skills and online and (config.run.method == "trace2skill"
                                                      or round_index % config.agent.skill_every == 0):
                    self._distill(round_index, trajectories, skills.get(round_index), log)
                if config.uses_skills and not online and not self._can_play(round_index):
                    self._distill_posthoc(round_index, skills.get(round_index), log)
                if round_index % config.agent.eval_every == 0:
                    self._eval(round_index, evals.get(round_index), log, started)
                self._phase(None)  # an online distillation without an eval after it is over too
                self._report()
            if self.evals[-1]["round"] != round_index:
                self._eval(round_index, evals.get(round_index), log, started)
            summary = self._summary(round_index, started)
            if not any(e.get("type") == "end" for e in events):
                log.append({"type": "end", "rounds": round_index, "episodes": self.ledger.used})
        self._write_timing(started)
        write_record(store.path("summary.json"), summary)
        return summary

    def _start_es(self, events: list[dict]) -> Any:
        es = resolved_es(self.config)
        # each logged round is one ES update, logged before history.jsonl holds it
        logged = sum(1 for e in events if e.get("type") == "round")
        return None if es is None else start_es(es, self.store.history_path, self.engine, self.config.run.seed,
                                                logged_updates=logged, log_path=self.store.events_path,
                                                on_note=self.on_note)

    def _can_play(self, round_index: int) -> bool:
        """Whether the budget pays round `round_index` (and, for ES, the σ
        schedule has a generation left: set generations = budget / episodes_per_round)."""
        if self.ledger.remaining < self.config.episodes_per_round:
            return False
        return self.es is None or round_index < self.es.cfg.generations

    def skills(self) -> list[Skill]:
        return [*self.seed_skills, self.distilled] if self.distilled is not None else list(self.seed_skills)

    # ---------------------------------------------------------------- a round
    def _round(self, index: int, logged: dict | None, log: JsonlWriter) -> list[Trajectory]:
        """Play one round (or take it from the log), charge it, tell ES."""
        config = self.config
        path = self.store.path("trajectories") / f"round_{index:03d}"
        members = []
        if self.es is not None:
            told = self.es.generation  # generations already in history.jsonl (replayed on resume)
            self.es.generation = index
            members = self.es.ask()
            self.es.generation = max(told, index)
        if logged is not None:
            _check_logged(self.store, index, logged, members)
            trajectories = load_trajectories(path.with_suffix(".jsonl"))
            fitness = logged["fitness"]
        else:
            trajectories, fitness = self._play(index, members)
            save_trajectories(trajectories, path, f"Round {index} ({config.run.method}) training episodes")
        for t in trajectories:
            self.ledger.charge("solved" if t.reward >= 1.0 else "failed")
        solved = sum(t.reward >= 1.0 for t in trajectories) / len(trajectories)
        self.progress.used = self.ledger.used
        self.progress.mean_reward = mean_reward(trajectories)
        self.progress.solved_rate = solved
        self.progress.sigma = abs(members[0].sigma) if members else None
        if logged is None:
            log.append({  # before the ES update: a kill in between re-applies it on resume
                "type": "round", "round": index, "episodes_used": self.ledger.used,
                "members": [{"index": m.index, "seed": m.seed, "sigma": m.sigma} for m in members],
                "fitness": fitness, "mean_reward": self.progress.mean_reward, "solved_rate": solved,
                "train_metrics": mean_metrics(trajectories), "skills": [s.name for s in self.skills()],
            })
        if self.es is not None and self.es.generation == index:  # not yet in history.jsonl
            self.es.tell(self.engine, members, fitness, extra={
                "episodes_used": self.ledger.used, "train_metrics": mean_metrics(trajectories),
                "skills": [s.name for s in self.skills()],
            })
        return trajectories

    def _play(self, index: int, members: Sequence[Any]) -> tuple[list[Trajectory], list[float]]:
        config, engine = self.config, self.engine
        common = dict(skills=self.skills(), history_turns=config.agent.history_turns,
                      constrained=self.constrained)
        trajectories: list[Trajectory] = []
        fitness: list[float] = []
        cases = drawn_cases(self.task, "train", config.agent.batch, derive_seed(config.run.seed, "train", index),
                            "agent.batch")
        if members and self.es.cfg.noise == "lowrank":
            # the whole population in one batch per turn (one LoRA slot per member),
            # member-major (member i's episodes are trajectories[i * batch:(i + 1) * batch]);
            # every member samples with the same seeds, as below
            trajectories = rollout(engine, self.task, cases, config.sampling, seed=derive_seed(config.run.seed, index),
                                   label=f"round {index}", members=members, **common)
            fitness = [shaped_fitness(trajectories[i * len(cases):(i + 1) * len(cases)], config.agent.shaping)
                       for i in range(len(members))]
        elif members:
            for member in members:
                # common random numbers: every member samples with the same
                # seeds, so fitness differences come from the weights alone
                with engine.perturbed(member.seed, member.sigma):
                    played = rollout(engine, self.task, cases, config.sampling,
                                     seed=derive_seed(config.run.seed, index),
                                     label=f"round {index} member {member.index}", **common)
                trajectories += played
                fitness.append(shaped_fitness(played, config.agent.shaping))
        else:
            # the same number of episodes as an ES generation: each case
            # played `population` times with different sampling seeds
            for repeat in range(config.agent.population):
                played = rollout(engine, self.task, cases, config.sampling,
                                 seed=derive_seed(config.run.seed, index, repeat),
                                 label=f"round {index} repeat {repeat}", **common)
                trajectories += played
        return trajectories, fitness

    # ------------------------------------------------------- skills and evals
    def _distill(self, round_index: int, trajectories: list[Trajectory], logged: dict | None,
                 log: JsonlWriter) -> None:
        config = self.config
        folder = self.store.path("skills") / config.agent.skill_name
        if logged is not None:  # SKILL.md may hold a later round's skill: restore this one's
            atomic_write_text(folder / "SKILL.md", logged["text"])
            self.distilled = load_skill(folder)
            return
        self._phase("distilling")
        with self._teacher(round_index) as teacher:
            self.distilled, origins = distill(teacher, trajectories, folder, previous=self.distilled,
                                              settings=self._distill_settings(round_index))
            # the counts the table prints (`2 rules (2 from the environment's own error lines; ...)`)
            log.append({"type": "skill", "round": round_index, "name": self.distilled.name,
                        "origins": dataclasses.asdict(origins),
                        "text": (folder / "SKILL.md").read_text(encoding="utf-8")})

    @contextmanager
    def _teacher(self, round_index: int) -> Iterator[Generator]:
        """Who distils round `round_index`'s skill. An endpoint's replies are kept in answered.jsonl as they
        arrive and served to a resume of this distillation (a hosted teacher would bill them twice, and a
        distillation asks it many times); the file is emptied once the block, which logs the skill's event,
        ends. The engine bills nothing: asked again."""
        if self.distiller is self.engine:
            yield self.distiller
            return
        with Answered(self.store.path(ANSWERED), round_index) as answered:
            yield answered.serving(self.distiller, round_index)
            answered.clear()

    def _distill_posthoc(self, round_index: int, logged: dict | None, log: JsonlWriter) -> None:
        """Trace2Skill's published setting: one distillation from every
        training trajectory of the run, best of `distill_seeds` seeds scored
        on validation puzzles (train split, drawn apart from the rounds' cases)."""
        config = self.config
        folder = self.store.path("skills") / config.agent.skill_name
        if logged is not None:
            atomic_write_text(folder / "SKILL.md", logged["text"])
            self.distilled = load_skill(folder)
            return
        self._phase(f"distilling (best of {config.agent.distill_seeds}, "
                    f"{config.agent.validation_cases} validation puzzles)")
        trajectories = [t for path in sorted(self.store.path("trajectories").glob("round_*.jsonl"))
                        for t in load_trajectories(path)]
        validation = drawn_cases(self.task, "train", config.agent.validation_cases,
                                 derive_seed(config.run.seed, "validation"), "agent.validation_cases")

        def score(skill: Skill) -> float:
            played = rollout(self.engine, self.task, validation, config.eval_sampling(),
                             seed=derive_seed(config.run.seed, "validation"), skills=[*self.seed_skills, skill],
                             history_turns=config.agent.history_turns, label="validation",
                             constrained=self.constrained)
            # the dense progress metric breaks ties when no candidate solves anything
            return mean_reward(played) + 0.01 * mean_metrics(played).get("progress", 0.0)

        with self._teacher(round_index) as teacher:
            self.distilled, candidates = distill_best_of(teacher, trajectories, folder, score,
                                                         n=config.agent.distill_seeds,
                                                         settings=self._distill_settings(round_index))
            chosen = next((c.pop("origins") for c in candidates if "origins" in c), None)  # as online logs it
            log.append({"type": "skill", "round": round_index, "name": self.distilled.name, "mode": "posthoc",
                        "candidates": candidates, **({"origins": chosen} if chosen is not None else {}),
                        "text": (folder / "SKILL.md").read_text(encoding="utf-8")})

    def _distill_settings(self, round_index: int) -> DistillSettings:
        return DistillSettings(successes=self.config.agent.skill_successes,
                               sampling=dataclasses.replace(DEFAULT_SAMPLING,
                                                            temperature=self.config.agent.teacher_temperature,
                                                            max_tokens=self.config.agent.teacher_max_tokens),
                               seed=derive_seed(self.config.run.seed, "distill", round_index))

    @property
    def constrained(self) -> bool:
        return self.config.agent.constrained and bool(getattr(self.task, "action_pattern", None))

    def _eval(self, round_index: int, logged: dict | None, log: JsonlWriter, started: float) -> None:
        if logged is None:
            self._phase("held-out eval")
            began = time.time()
            trajectories, scores = evaluate(self.engine, self.task, self.config, self.skills())
            # `seconds`: since this process started (older files hold only it); `eval_s`: the evaluation's own
            record = {"round": round_index, "episodes_used": self.ledger.used, **scores,
                      "skills": [s.name for s in self.skills()], "seconds": round(time.time() - started, 2),
                      "eval_s": round(time.time() - began, 2)}
            save_trajectories(trajectories, self.store.path("trajectories") / f"eval_{round_index:03d}",
                              f"Held-out evaluation after round {round_index}")
            log.append({"type": "eval", **record})
            self._phase(None)
        else:
            record = {k: v for k, v in logged.items() if k != "type"}
        self.evals.append(record)
        self.progress.eval_reward = record["mean_reward"]
        # derived from the events: rewritten whole, so a resumed run holds each evaluation once
        atomic_write_jsonl(self.store.path("eval.jsonl"),
                           [AgentEvalRound.model_validate(e).to_json() for e in self.evals])
        self._write_timing(started)  # at each evaluation too: a killed session's time up to here is kept

    def _phase(self, phase: str | None) -> None:
        """Tell the bar what runs now between rounds (minutes with no round to count); None: it is over."""
        if self.on_phase is not None:
            self.on_phase(phase)

    def _write_timing(self, started: float) -> None:
        """timing.json: `total_s` summed over every session of the run (a resume adds to it), `session_s`
        this session's own."""
        session = time.time() - started
        atomic_write_json(self.store.path("timing.json"),
                          {"total_s": round(self.earlier_s + session, 3), "session_s": round(session, 3)})

    def _report(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.progress)

    def _summary(self, rounds: int, started: float) -> AgentSummary:
        """A pure function of the config (wall-clock times go to timing.json), so
        a resumed run's summary equals an uninterrupted one's."""
        def timeless(e: dict) -> dict:
            return {k: v for k, v in e.items() if k not in ("seconds", "eval_s")}

        es = self.es is not None
        return AgentSummary(
            method=self.config.run.method, task=self.task.name, seed=self.config.run.seed,
            budget=self.config.run.budget, rounds=rounds, ledger=self.ledger.to_dict(),
            eval_first=timeless(self.evals[0]), eval_last=timeless(self.evals[-1]),
            evals=[{"round": e["round"], "episodes_used": e["episodes_used"], "mean_reward": e["mean_reward"]}
                   for e in self.evals],
            best_eval_reward=max(e["mean_reward"] for e in self.evals),
            skill=str(self.distilled.path) if self.distilled is not None else None,
            config=as_dict(self.config),
            checksum=self.engine.checksum() if es else None,
            es={"updates": self.es.generation, "flat": self.es.flat} if es else None,
            noise=self.engine.noise_info() if es else None)


def sigma_plan(es: ESConfig, rounds: int) -> str:
    """The σ a run's generations play, as the plan says it: a schedule of one generation (or constant)
    plays its start alone, and one cut short by the budget stops before σ_end."""
    if es.schedule == "constant" or es.generations <= 1:
        return f"σ {es.sigma:g} ({'constant' if es.schedule == 'constant' else 'one generation'})"
    said = f"σ {es.sigma:g} -> {es.sigma_end:g} ({es.schedule}) over {es.generations} generations"
    if rounds < es.generations:
        said += f", {sigma_at(es, rounds - 1):g} at the last one played"
    return said


def resolved_es(config: AgentRunConfig) -> ESConfig | None:
    """The run's [es] section with what an agent run decides: the population
    is agent.population, generations (when 0) as many as the budget pays.
    None for methods without ES."""
    if not config.uses_es:
        return None
    return config.es.resolve(population=config.agent.population,
                             generations=config.run.budget // config.episodes_per_round)


def plan_lines(config: AgentRunConfig) -> list[str]:
    """What an agent run will play, as `coevolve run --plan` prints it: the rounds the budget pays (and the
    σ schedule allows), ES, skill distillation and the held-out evaluations, by the loop's own rules
    (AgentRun.run: `_can_play`, the distil and eval conditions)."""
    a, per_round = config.agent, config.episodes_per_round
    es = resolved_es(config)
    rounds = config.run.budget // per_round if es is None else min(config.run.budget // per_round, es.generations)
    lines = [f"plan: {config.run.method} on {config.run.task}, budget {config.run.budget} training episodes: "
             f"{rounds} round{'s' * (rounds != 1)} of agent.population {a.population} x agent.batch {a.batch} = "
             # "each": the product is one round's episodes, not the budget's (which reads as if 32 were 16)
             f"{per_round} episodes{' each' * (rounds != 1)}"
             + (f" ({config.run.budget - rounds * per_round} left unspent)"
                if config.run.budget > rounds * per_round else "")]
    if es is not None:
        lines.append(f"  ES: {rounds} generation{'s' * (rounds != 1)} of {es.population} members, {es.noise} noise, "
                     f"{sigma_plan(es, rounds)}, α {es.alpha:g}")
    if config.uses_skills:
        if a.distill == "online":
            every = 1 if config.run.method == "trace2skill" else a.skill_every
            at = [r for r in range(1, rounds + 1) if r % every == 0]
            lines.append(f"  skill: distilled online after round{'s' * (len(at) != 1)} {', '.join(map(str, at)) or 'none'}"
                         ", each patching the last")
        else:
            lines.append(f"  skill: distilled once after round {rounds} from all its trajectories, the best of "
                         f"{a.distill_seeds} on {a.validation_cases} validation cases (agent.distill = \"posthoc\")")
    evals = sorted({0, rounds, *range(a.eval_every, rounds + 1, a.eval_every)})
    lines.append(f"  held-out: {a.eval_cases} eval cases at round{'s' * (len(evals) != 1)} "
                 f"{', '.join(map(str, evals))} (not charged)")
    if config.skills.paths:
        lines.append(f"  every prompt shows the seed skills {', '.join(config.skills.paths)} ([skills] paths)")
    return lines


def earlier_seconds(path: Path) -> float:
    """The run time an earlier session left in timing.json (0 for a new run or one without the file); a
    damaged file counts as none: timing is told, never needed to resume."""
    try:
        return float(json.loads(path.read_text(encoding="utf-8")).get("total_s", 0.0))
    except (OSError, ValueError, AttributeError, TypeError):
        return 0.0


def shaped_fitness(trajectories: Sequence[Trajectory], shaping: float = 0.0) -> float:
    """Mean episode reward, plus `shaping` x the task's "progress" metric."""
    shaped = [t.reward + shaping * t.metrics.get("progress", 0.0) for t in trajectories]
    return sum(shaped) / len(shaped)


def seed_skills_event(paths: Sequence[str], skills: Sequence[Skill]) -> dict[str, Any]:
    """The event that pins a run's [skills]: each folder's SKILL.md text as the run read it at its start."""
    return {"type": SEED_SKILLS,
            "skills": [{"path": path, "name": skill.name, "text": skill.text()} for path, skill in zip(paths, skills)]}


def logged_seed_skills(events: Sequence[dict], source: str | Path = "events.jsonl") -> list[Skill] | None:
    """The seed skills a run's log pinned (its "seed_skills" event), in [skills] order; None when the
    log holds none (a new run, one without [skills], or one started before the event existed: those
    read their folders). A damaged text is a ResumeError naming `source`."""
    logged = next((e for e in events if e.get("type") == SEED_SKILLS), None)
    if logged is None:
        return None
    try:
        return [parse_skill_text(entry["text"], f"{source}: seed skill {entry.get('path')}")
                for entry in logged["skills"]]
    except (KeyError, TypeError, SkillError) as exc:
        raise ResumeError(f"{source}: the seed_skills event cannot be read ({exc})") from None


def run_seed_skills(run_dir: str | Path, paths: Sequence[str]) -> list[Skill]:
    """The seed skills the agent run in `run_dir` played with: the texts its log pinned, else (a run
    from before they were logged) its [skills] `paths` read now, counted as the run counted them (an
    absolute path; an old run's relative one from the working directory). A folder that is not a valid
    skill is a ConfigError naming its skills.paths entry."""
    events_path = Path(run_dir) / "events.jsonl"
    pinned = logged_seed_skills(read_jsonl(events_path), events_path)
    if pinned is not None:
        return pinned
    return read_seed_skills(list(paths))


def _versioned(store: RunStore) -> bool:
    """Whether the run's summary or held-out rounds carry a schema_version: records gained one after agent
    runs began keeping events.jsonl, so a run without a log that has one lost it."""
    try:
        rows = read_jsonl(store.path("eval.jsonl"))[:1] if store.path("eval.jsonl").exists() else []
        summary = store.path("summary.json")
        if summary.exists():
            rows.append(json.loads(summary.read_text()))
    except (OSError, ValueError):  # unreadable: not evidence of either kind
        return False
    return any(isinstance(row, dict) and "schema_version" in row for row in rows)


def check_run_dir(store: RunStore, config: AgentRunConfig, events: list[dict] | None = None) -> None:
    """Refuse, before any engine starts, a directory this run cannot continue."""
    events = store.events() if events is None else events
    if not events:
        earlier = [n for n in ("history.jsonl", "eval.jsonl", "summary.json") if store.path(n).exists()]
        if earlier and _versioned(store):  # written by a coevolve that kept the log: it was lost since
            state = "is empty" if store.events_path.exists() else "is missing"
            raise ResumeError(f"{store.events_path} {state} while {store.dir} holds {', '.join(earlier)}: the run's "
                              "log was lost, and nothing can be replayed from it; put back its events.jsonl from a "
                              f"copy, or start a new run with another --out")
        if earlier:
            raise ResumeError(f"{store.dir} holds an agent run written before agent runs kept events.jsonl "
                              f"({', '.join(earlier)}); it cannot be resumed: start a new run with another --out")
    check_start(store, events, as_dict(config), kind=KIND, version=EVENT_VERSION, renamed=type(config).RENAMED)


def _check_logged(store: RunStore, index: int, logged: dict, members: Sequence[Any]) -> None:
    planned = [{"index": m.index, "seed": m.seed, "sigma": m.sigma} for m in members]
    if logged["members"] != planned:
        raise ResumeError(f"{store.events_path}: round {index} does not replay the same ES members; "
                          "the run directory was changed or written by another version")

