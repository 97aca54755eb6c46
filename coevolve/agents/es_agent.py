"""ES, Trace2Skill and their co-evolution on multi-turn agent tasks, under one
episode budget.

Methods (same budget, same cases, same evaluation):
- `esopt`: each generation, every ES member (a seeded weight perturbation)
  plays the same batch of train cases; its fitness is the mean reward; the
  engine's weights take the ES update. With low-rank noise all members'
  episodes advance turn by turn in one batch (one LoRA slot per member).
- `trace2skill`: each round plays population x batch episodes with the
  current skills, then distils the trajectories into a skill that replaces
  the previous distilled one.
- `esopt+trace2skill`: ES generations, and every `skill_every` generations a
  skill update distilled from the latest generation's trajectories.

ES methods also stop after `es_config.generations` generations (the σ
schedule's length). Budget = training episodes (coevolve.search.ledger.Ledger, one charge per
episode). Held-out evaluation (greedy, `eval` split) runs every `eval_every`
rounds and is not charged: it measures, it does not search. The run dir
holds history.jsonl (ES), eval.jsonl, trajectories/round_NNN.{md,jsonl},
skills/<name>/SKILL.md and summary.json.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from coevolve.agents.rollout import Trajectory, derive_seed, mean_metrics, mean_reward, rollout, save_trajectories
from coevolve.agents.skills import Skill
from coevolve.agents.trace2skill import distill
from coevolve.base.durable import append_jsonl, atomic_write_json
from coevolve.engine.base import Generator, Sampling
from coevolve.search.ledger import Ledger

METHODS = ("esopt", "trace2skill", "esopt+trace2skill")


@dataclass
class AgentRunConfig:
    method: str = "esopt"
    budget_episodes: int = 256
    population: int = 8  # ES members per generation; also sizes a trace2skill round
    batch: int = 8  # train cases per member (the fitness batch)
    eval_cases: int = 16
    eval_every: int = 1  # rounds between held-out evaluations
    skill_every: int = 2  # ES generations between skill updates (esopt+trace2skill)
    skill_name: str = "distilled"
    skill_successes: int = 2  # successful traces analysed per skill update, next to the failures
    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.7, max_tokens=24))
    eval_sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.0, max_tokens=24))
    history_turns: int | None = None
    # fitness = mean(reward + shaping * metrics["progress"]); 0 is the paper's
    # binary reward, > 0 gives a weak model whose rewards are all 0 a direction
    shaping: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.shaping < 0:
            raise ValueError(f"shaping must be >= 0, got {self.shaping}")
        for name in ("budget_episodes", "population", "batch", "eval_cases", "eval_every", "skill_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.episodes_per_round > self.budget_episodes:
            raise ValueError(
                f"budget_episodes={self.budget_episodes} is smaller than one round "
                f"(population x batch = {self.episodes_per_round})"
            )

    @property
    def episodes_per_round(self) -> int:
        return self.population * self.batch


def evaluate(
    generator: Generator, task: Any, cfg: AgentRunConfig, skills: Sequence[Skill] = ()
) -> tuple[list[Trajectory], dict[str, float]]:
    """Greedy held-out evaluation on `cfg.eval_cases` cases of the eval split."""
    cases = task.cases("eval", cfg.eval_cases, seed=cfg.seed)
    trajectories = rollout(
        generator, task, cases, cfg.eval_sampling, seed=derive_seed(cfg.seed, "eval"),
        skills=skills, history_turns=cfg.history_turns, label="eval",
    )
    return trajectories, {"mean_reward": mean_reward(trajectories), **mean_metrics(trajectories)}


def run_agent(
    engine: Any,
    task: Any,
    cfg: AgentRunConfig,
    run_dir: str | Path,
    es_config: Any = None,
    skills: Sequence[Skill] = (),
    teacher: Generator | None = None,
) -> dict[str, Any]:
    """Run `cfg.method` until the episode budget cannot pay another round.

    `engine` is the coevolve Engine (ES needs `perturbed` and the update);
    `skills` are fixed seed skills always injected; `teacher` distils skills
    (default: the engine itself at its current weights). Returns the summary
    also written to run_dir/summary.json.
    """
    run_dir = Path(run_dir)
    earlier = [name for name in ("history.jsonl", "eval.jsonl", "summary.json") if (run_dir / name).exists()]
    if earlier:
        raise ValueError(f"{run_dir} already holds a run ({', '.join(earlier)}); choose a new run directory")
    run_dir.mkdir(parents=True, exist_ok=True)
    uses_es = cfg.method in ("esopt", "esopt+trace2skill")
    uses_skills = cfg.method in ("trace2skill", "esopt+trace2skill")
    es = None
    if uses_es:
        from coevolve.es import ESOpt

        if es_config is None:
            raise ValueError(f"method {cfg.method!r} needs es_config (coevolve.es.ESConfig)")
        if es_config.population != cfg.population:
            raise ValueError(f"es_config.population={es_config.population} differs from population={cfg.population}")
        es = ESOpt(es_config, run_dir / "history.jsonl")
    teacher = teacher if teacher is not None else engine
    ledger = Ledger(budget=cfg.budget_episodes)
    distilled: Skill | None = None
    evals: list[dict[str, Any]] = []
    started = time.time()

    def current_skills() -> list[Skill]:
        return [*skills, distilled] if distilled is not None else list(skills)

    def run_eval(round_index: int) -> None:
        trajectories, scores = evaluate(engine, task, cfg, current_skills())
        record = {"round": round_index, "episodes_used": ledger.used, **scores,
                  "skills": [s.name for s in current_skills()], "seconds": round(time.time() - started, 2)}
        evals.append(record)
        append_jsonl(run_dir / "eval.jsonl", record)
        save_trajectories(trajectories, run_dir / "trajectories" / f"eval_{round_index:03d}",
                          f"Held-out evaluation after round {round_index}")

    run_eval(0)
    round_index = 0
    while ledger.grant(cfg.episodes_per_round) == cfg.episodes_per_round:
        if es is not None and es.generation >= es_config.generations:
            break  # the σ schedule is spent; set generations = budget / episodes_per_round
        cases = task.cases("train", cfg.batch, seed=derive_seed(cfg.seed, "train", round_index))
        if es is not None and es_config.noise == "lowrank":
            # the whole population in one batch per turn (one LoRA slot per member)
            members = es.ask()
            trajectories = rollout(
                engine, task, cases, cfg.sampling, seed=derive_seed(cfg.seed, round_index),
                skills=current_skills(), history_turns=cfg.history_turns, label=f"round {round_index}",
                members=members,
            )
            _charge(ledger, trajectories)
            rewards = [fitness(trajectories[i * len(cases):(i + 1) * len(cases)], cfg.shaping)
                       for i in range(len(members))]
            es.tell(engine, members, rewards, extra={
                "episodes_used": ledger.used, "train_metrics": mean_metrics(trajectories),
                "skills": [s.name for s in current_skills()],
            })
        elif es is not None:
            trajectories, rewards = [], []
            members = es.ask()
            for member in members:
                # common random numbers: every member samples with the same
                # seeds, so fitness differences come from the weights alone
                with engine.perturbed(member.seed, member.sigma):
                    played = rollout(
                        engine, task, cases, cfg.sampling, seed=derive_seed(cfg.seed, round_index),
                        skills=current_skills(), history_turns=cfg.history_turns,
                        label=f"round {round_index} member {member.index}",
                    )
                _charge(ledger, played)
                trajectories += played
                rewards.append(fitness(played, cfg.shaping))
            es.tell(engine, members, rewards, extra={
                "episodes_used": ledger.used, "train_metrics": mean_metrics(trajectories),
                "skills": [s.name for s in current_skills()],
            })
        else:
            # the same number of episodes as an ES generation: each case
            # played `population` times with different sampling seeds
            trajectories = []
            for repeat in range(cfg.population):
                played = rollout(
                    engine, task, cases, cfg.sampling, seed=derive_seed(cfg.seed, round_index, repeat),
                    skills=current_skills(), history_turns=cfg.history_turns,
                    label=f"round {round_index} repeat {repeat}",
                )
                _charge(ledger, played)
                trajectories += played
        save_trajectories(trajectories, run_dir / "trajectories" / f"round_{round_index:03d}",
                          f"Round {round_index} ({cfg.method}) training episodes")
        round_index += 1
        if uses_skills and (cfg.method == "trace2skill" or round_index % cfg.skill_every == 0):
            distilled = distill(
                teacher, trajectories, run_dir / "skills" / cfg.skill_name, previous=distilled,
                successes=cfg.skill_successes,
                seed=derive_seed(cfg.seed, "distill", round_index),
            )
        if round_index % cfg.eval_every == 0:
            run_eval(round_index)
    if not evals or evals[-1]["round"] != round_index:
        run_eval(round_index)
    summary = {
        "method": cfg.method,
        "task": task.name,
        "rounds": round_index,
        "ledger": ledger.to_dict(),
        "eval_first": evals[0],
        "eval_last": evals[-1],
        "best_eval_reward": max(e["mean_reward"] for e in evals),
        "skill": str(distilled.path) if distilled is not None else None,
        "config": {k: (asdict(v) if hasattr(v, "__dataclass_fields__") else v) for k, v in vars(cfg).items()},
        "seconds": round(time.time() - started, 2),
    }
    if es is not None:
        summary["checksum"] = engine.checksum()
        summary["noise"] = engine.noise_info() if hasattr(engine, "noise_info") else {"noise": es_config.noise}
    atomic_write_json(run_dir / "summary.json", summary)
    return summary


def fitness(trajectories: Sequence[Trajectory], shaping: float = 0.0) -> float:
    """Mean episode reward, plus `shaping` x the task's "progress" metric."""
    shaped = [t.reward + shaping * t.metrics.get("progress", 0.0) for t in trajectories]
    return sum(shaped) / len(shaped)


def _charge(ledger: Ledger, trajectories: Sequence[Trajectory]) -> None:
    for t in trajectories:
        ledger.charge("solved" if t.reward >= 1.0 else "failed")
