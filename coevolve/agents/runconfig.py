"""The `coevolve run` config for agent tasks (sudoku, sudoku9, react_math):
one dataclass per TOML section, each with its rules, read by coevolve.config.

```toml
[run]      method = "esopt" | "trace2skill" | "esopt+trace2skill", task, budget (training episodes), seed, out
[task]     masked (sudoku), turns / problems_file (react_math); 0 or "" keep the task's default
[agent]    the coevolve.agents.es_agent.AgentRunConfig fields (population, batch, eval_cases, ...)
[es]       sigma, sigma_end, schedule, alpha, generations (0: as many as the budget pays), ...
[skills]   paths = ["skills/sudoku-basics"]: seed skills always in the system prompt
[teacher]  base_url, model: an OpenAI-compatible endpoint that distils skills (default: the engine)
[model]    path           [distributed]  engines, address
```
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field
from typing import Any

from coevolve.agents.es_agent import METHODS, AgentRunConfig
from coevolve.agents.skills import Skill, SkillError, load_skill
from coevolve.config import config_error, one_of, require
from coevolve.distributed import DistributedSection
from coevolve.engine.base import Sampling
from coevolve.search.runconfig import ModelSection, ProposerSection

SUDOKU_TASKS = ("sudoku", "sudoku9")


@dataclass
class AgentRunSection:
    method: str = "esopt"
    task: str = "sudoku"
    budget: int = 256  # training episodes; held-out evaluation is not charged
    seed: int = 0
    out: str = ""  # empty: runs/<task>-<method>-seed<seed>-<time>

    def check(self, name: str) -> None:
        from tasks.registry import AGENT_TASKS

        one_of(self.method, METHODS, f"{name}.method")
        one_of(self.task, sorted(AGENT_TASKS), f"{name}.task")
        require(self.budget >= 1, f"{name}.budget", "must be >= 1", self.budget)
        require(self.seed >= 0, f"{name}.seed", "must be >= 0", self.seed)


@dataclass
class TaskOptions:
    """Environment options; which apply depends on run.task (checked by AgentRunFile)."""

    masked: int = 0  # sudoku: masked cells per puzzle (0: 4 for sudoku, 10 for sudoku9)
    turns: int = 0  # react_math: turns per episode (0: the task's default, 4)
    problems_file: str = ""  # react_math: JSONL of {"question", "answer", "split"?}; empty: generated problems

    def check(self, name: str) -> None:
        require(self.masked >= 0, f"{name}.masked", "must be >= 0", self.masked)
        require(self.turns >= 0, f"{name}.turns", "must be >= 0", self.turns)


@dataclass
class AgentSection:
    population: int = 8  # ES members per generation; also sizes a trace2skill round
    batch: int = 8  # train cases per member (the fitness batch)
    eval_cases: int = 16
    eval_every: int = 1
    skill_every: int = 2  # esopt+trace2skill: ES generations between skill updates
    skill_name: str = "distilled"
    skill_successes: int = 2
    eval_temperature: float = 0.0  # held-out evaluation; training rollouts sample as [sampling] says
    history_turns: int | None = None  # keep only the last k (action, observation) pairs in the prompt
    # fitness = mean(reward + shaping x progress); 0 is the paper's binary reward
    shaping: float = 0.0

    def check(self, name: str) -> None:
        for key in ("population", "batch", "eval_cases", "eval_every", "skill_every"):
            require(getattr(self, key) >= 1, f"{name}.{key}", "must be >= 1", getattr(self, key))
        require(self.skill_successes >= 0, f"{name}.skill_successes", "must be >= 0", self.skill_successes)
        require(bool(self.skill_name), f"{name}.skill_name", "must not be empty")
        require(self.eval_temperature >= 0, f"{name}.eval_temperature", "must be >= 0", self.eval_temperature)
        if self.history_turns is not None:
            require(self.history_turns >= 0, f"{name}.history_turns", "must be >= 0", self.history_turns)
        require(self.shaping >= 0, f"{name}.shaping", "must be >= 0", self.shaping)


@dataclass
class AgentEsSection:
    """ES settings; the population is agent.population (it also sizes skill rounds)."""

    sigma: float = 1e-3
    sigma_end: float = 1e-4
    schedule: str = "cosine"
    alpha: float = 5e-4
    generations: int = 0  # 0: run.budget // (population x batch), the generations the budget pays
    normalise: str = "zscore"
    antithetic: bool = False
    noise: str = "full"  # or "lowrank": see coevolve.search.runconfig.EsSection
    rank: int = 1

    def check(self, name: str) -> None:
        require(self.sigma > 0, f"{name}.sigma", "must be > 0", self.sigma)
        require(self.sigma_end > 0, f"{name}.sigma_end", "must be > 0", self.sigma_end)
        one_of(self.schedule, ("cosine", "constant"), f"{name}.schedule")
        require(self.alpha > 0, f"{name}.alpha", "must be > 0", self.alpha)
        require(self.generations >= 0, f"{name}.generations", "must be >= 0", self.generations)
        one_of(self.normalise, ("zscore", "rank"), f"{name}.normalise")
        one_of(self.noise, ("full", "lowrank"), f"{name}.noise")
        require(1 <= self.rank <= 512, f"{name}.rank", "must be in 1..512 (vLLM's LoRA ranks)", self.rank)


@dataclass
class SkillsSection:
    paths: list[str] = field(default_factory=list)  # skill folders, each holding a SKILL.md

    def check(self, name: str) -> None:
        for i, path in enumerate(self.paths):
            try:
                load_skill(path)
            except SkillError as exc:
                raise config_error(f"{name}.paths[{i}]", f"is not a valid skill: {exc}") from None


@dataclass
class AgentRunFile:
    run: AgentRunSection = field(default_factory=AgentRunSection)
    task: TaskOptions = field(default_factory=TaskOptions)
    agent: AgentSection = field(default_factory=AgentSection)
    # training rollouts; max_tokens is per turn (a Sudoku move is a few tokens)
    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.7, top_p=1.0, max_tokens=24))
    es: AgentEsSection = field(default_factory=AgentEsSection)
    skills: SkillsSection = field(default_factory=SkillsSection)
    # the same shape as the heuristic runs' proposer: an optional endpoint
    teacher: ProposerSection = field(default_factory=ProposerSection)
    model: ModelSection = field(default_factory=ModelSection)
    distributed: DistributedSection = field(default_factory=DistributedSection)

    @property
    def uses_es(self) -> bool:
        return self.run.method in ("esopt", "esopt+trace2skill")

    @property
    def episodes_per_round(self) -> int:
        return self.agent.population * self.agent.batch

    def check(self) -> None:
        """Rules that span sections."""
        task, run = self.run.task, self.run
        if task not in SUDOKU_TASKS:
            require(self.task.masked == 0, "task.masked", f"applies to sudoku tasks only, not {task}",
                    self.task.masked)
        else:
            size = 4 if task == "sudoku" else 9
            if self.task.masked:
                require(self.task.masked < size * size, "task.masked", f"must be < {size * size} for {task}",
                        self.task.masked)
        if task != "react_math":
            require(self.task.turns == 0, "task.turns", f"applies to react_math only, not {task}", self.task.turns)
            require(not self.task.problems_file, "task.problems_file", f"applies to react_math only, not {task}",
                    self.task.problems_file)
        require(run.budget >= self.episodes_per_round, "run.budget",
                f"must pay at least one round of agent.population x agent.batch = {self.episodes_per_round} "
                "episodes", run.budget)
        if self.uses_es:
            require(self.agent.population >= 2, "agent.population", f"must be >= 2 for {run.method}",
                    self.agent.population)
            if self.es.antithetic:
                require(self.agent.population % 2 == 0, "agent.population", "must be even when es.antithetic",
                        self.agent.population)

    # ------------------------------------------------------------ builders

    def agent_config(self) -> AgentRunConfig:
        a = self.agent
        return AgentRunConfig(
            method=self.run.method,
            budget_episodes=self.run.budget,
            population=a.population,
            batch=a.batch,
            eval_cases=a.eval_cases,
            eval_every=a.eval_every,
            skill_every=a.skill_every,
            skill_name=a.skill_name,
            skill_successes=a.skill_successes,
            sampling=self.sampling,
            eval_sampling=dataclasses.replace(self.sampling, temperature=a.eval_temperature),
            history_turns=a.history_turns,
            shaping=a.shaping,
            seed=self.run.seed,
        )

    def es_config(self) -> Any:
        """The ESConfig for ES methods, else None."""
        if not self.uses_es:
            return None
        from coevolve.es import ESConfig

        e = self.es
        return ESConfig(
            population=self.agent.population, sigma=e.sigma, sigma_end=e.sigma_end, schedule=e.schedule,
            alpha=e.alpha, generations=e.generations or self.run.budget // self.episodes_per_round,
            normalise=e.normalise, antithetic=e.antithetic, seed=self.run.seed, noise=e.noise, rank=e.rank,
        )

    def build_task(self) -> Any:
        """The environment, with [task] options applied."""
        from tasks.registry import get_task

        name, options = self.run.task, self.task
        if name in SUDOKU_TASKS and options.masked:
            from tasks.sudoku import Sudoku

            return Sudoku(size=4 if name == "sudoku" else 9, masked=options.masked)
        if name == "react_math" and (options.turns or options.problems_file):
            from tasks.react_math import ReactMath

            chosen: dict[str, Any] = {"problems_file": options.problems_file or None}
            if options.turns:
                chosen["turns"] = options.turns
            try:
                return ReactMath(**chosen)
            except (OSError, ValueError) as exc:
                raise config_error("task.problems_file", f"cannot be used: {exc}") from None
        return get_task(name)

    def seed_skills(self) -> list[Skill]:
        return [load_skill(path) for path in self.skills.paths]
