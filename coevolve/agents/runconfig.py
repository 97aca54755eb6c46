"""The `coevolve run` config for agent tasks (sudoku, sudoku9, react_math, and
any task in tasks.registry.AGENT_TASKS): one dataclass per TOML section, each
with its rules, read by coevolve.base.config. `run_agent` takes this config
itself (as trl's trainers take their config): no runtime copy of its fields.

```toml
[run]      method = "esopt" | "trace2skill" | "esopt+trace2skill", task, budget (training episodes), seed, out
[task]     options of the task's factory, e.g. masked (sudoku), turns / problems_file (react_math)
[agent]    population, batch, eval_cases, eval_every, eval_temperature, shaping, ...
[sampling] temperature, top_p, top_k, max_tokens (per turn) of the training rollouts
[es]       sigma, sigma_end, schedule, alpha, generations (0: as many as the budget pays), ...
           (coevolve.es.config.ESConfig, the section heuristic runs read too)
[skills]   paths = ["skills/sudoku-basics"]: seed skills always in the system prompt
[endpoint] base_url, model: an OpenAI-compatible endpoint that distils skills (default: the engine);
           formerly [teacher]
[model]    path           [distributed]  engines, address
```
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from coevolve.agents.skills import Skill, SkillError, load_skill
from coevolve.base.config import config_error, one_of, require
from coevolve.base.logsection import LogSection
from coevolve.base.sections import DistributedSection, EndpointSection, ModelSection
from coevolve.engine.base import Sampling
from coevolve.es.config import ESConfig

METHODS = ("esopt", "trace2skill", "esopt+trace2skill")
DISTILL_MODES = ("posthoc", "online")


@dataclass
class AgentRunSection:
    method: str = "esopt"
    task: str = "sudoku"
    budget: int = 256  # training episodes; held-out evaluation is not charged
    seed: int = 0
    out: str = ""  # empty: runs/<task>-<method>-seed<seed>-<time>

    def check(self, name: str) -> None:
        from tasks.registry import AGENT_TASKS, is_agent_task

        one_of(self.method, METHODS, f"{name}.method")
        if not is_agent_task(self.task):  # a file, module or plugin agent task passes (tasks/loader.py)
            one_of(self.task, sorted(AGENT_TASKS), f"{name}.task")
        require(self.budget >= 1, f"{name}.budget", "must be >= 1", self.budget)
        require(self.seed >= 0, f"{name}.seed", "must be >= 0", self.seed)


@dataclass
class AgentSection:
    population: int = 8  # ES members per generation; also sizes a trace2skill round
    batch: int = 8  # train cases per member (the fitness batch)
    eval_cases: int = 16
    eval_every: int = 1
    skill_every: int = 2  # esopt+trace2skill: ES generations between skill updates
    skill_name: str = "distilled"
    skill_successes: int = 2  # success analyses per distillation (the paper's math setting: 0, successes excluded)
    # the teacher's sampling temperature when it analyses traces and merges patches
    # (ours 0.3: steadier small-model output; the paper's Trace2Skill runs it at 1.0)
    teacher_temperature: float = 0.3
    eval_temperature: float = 0.0  # held-out evaluation; training rollouts sample as [sampling] says
    history_turns: int | None = None  # keep only the last k (action, observation) pairs in the prompt
    # fitness = mean(reward + shaping x progress); 0 is the paper's binary reward
    shaping: float = 0.0
    # decode every turn under the task's action format (vLLM structured outputs); a task without one runs free
    constrained: bool = True
    # "posthoc": distil once from the run's trajectories at the end, best of `distill_seeds` on
    # `validation_cases` validation puzzles (Trace2Skill's published setting); "online": every
    # `skill_every` rounds during the run (our extension, the co-evolution interleaving)
    distill: str = "posthoc"
    distill_seeds: int = 3
    validation_cases: int = 8

    def check(self, name: str) -> None:
        one_of(self.distill, DISTILL_MODES, f"{name}.distill")
        for key in ("population", "batch", "eval_cases", "eval_every", "skill_every", "distill_seeds",
                    "validation_cases"):
            require(getattr(self, key) >= 1, f"{name}.{key}", "must be >= 1", getattr(self, key))
        require(self.skill_successes >= 0, f"{name}.skill_successes", "must be >= 0", self.skill_successes)
        require(bool(self.skill_name), f"{name}.skill_name", "must not be empty")
        require(self.eval_temperature >= 0, f"{name}.eval_temperature", "must be >= 0", self.eval_temperature)
        require(self.teacher_temperature >= 0, f"{name}.teacher_temperature", "must be >= 0",
                self.teacher_temperature)
        if self.history_turns is not None:
            require(self.history_turns >= 0, f"{name}.history_turns", "must be >= 0", self.history_turns)
        require(self.shaping >= 0, f"{name}.shaping", "must be >= 0", self.shaping)


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
class AgentRunConfig:
    RENAMED: ClassVar[dict[str, str]] = {"teacher": "endpoint"}  # old name, read with a deprecation message

    run: AgentRunSection = field(default_factory=AgentRunSection)
    # keyword arguments of the task's factory; 0 and "" mean "the task's default"
    # (what configs written before the registry took options said)
    task: dict[str, Any] = field(default_factory=dict)
    agent: AgentSection = field(default_factory=AgentSection)
    # training rollouts; max_tokens is per turn (a Sudoku move is a few tokens)
    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.7, top_p=1.0, max_tokens=24))
    es: ESConfig = field(default_factory=ESConfig)
    skills: SkillsSection = field(default_factory=SkillsSection)
    endpoint: EndpointSection = field(default_factory=EndpointSection)
    model: ModelSection = field(default_factory=ModelSection)
    distributed: DistributedSection = field(default_factory=DistributedSection)
    log: LogSection = field(default_factory=LogSection)  # trackers (coevolve/dashboard/mirror.py)

    @property
    def uses_es(self) -> bool:
        return self.run.method in ("esopt", "esopt+trace2skill")

    @property
    def uses_skills(self) -> bool:
        return self.run.method in ("trace2skill", "esopt+trace2skill")

    @property
    def episodes_per_round(self) -> int:
        return self.agent.population * self.agent.batch

    def check(self) -> None:
        """Rules that span sections; the task's own options are checked by building it."""
        run = self.run
        require(run.budget >= self.episodes_per_round, "run.budget",
                f"must pay at least one round of agent.population x agent.batch = {self.episodes_per_round} "
                "episodes", run.budget)
        require(self.es.population == 0, "es.population",
                "is agent.population in agent runs (it also sizes skill rounds); leave es.population out",
                self.es.population)
        search_defaults = ESConfig()
        for key in ("proposals_per_member", "operators"):
            require(getattr(self.es, key) == getattr(search_defaults, key), f"es.{key}",
                    "is for heuristic runs only; leave it out of agent configs", getattr(self.es, key))
        if self.uses_es:
            require(self.agent.population >= 2, "agent.population", f"must be >= 2 for {run.method}",
                    self.agent.population)
            if self.es.antithetic:
                require(self.agent.population % 2 == 0, "agent.population", "must be even when es.antithetic",
                        self.agent.population)
        self.build_task()  # bad [task] options fail here, before any run directory exists

    # ------------------------------------------------------------ builders

    def eval_sampling(self) -> Sampling:
        """Held-out evaluation: [sampling] at agent.eval_temperature (greedy by default)."""
        return dataclasses.replace(self.sampling, temperature=self.agent.eval_temperature)

    def task_options(self) -> dict[str, Any]:
        return {k: v for k, v in self.task.items() if not (v == 0 or v == "") or isinstance(v, bool)}

    def build_task(self, tool: Any = None) -> Any:
        """The environment, with the [task] options; `tool` is the Python tool
        for tasks that run code (coevolve.agents.tools.SandboxTool)."""
        from tasks.registry import TaskOptionError, agent_task

        try:
            return agent_task(self.run.task, self.task_options(), tool=tool)
        except TaskOptionError as exc:
            raise config_error(f"task.{exc.option}", exc.problem) from None
        except (OSError, TypeError, ValueError) as exc:
            raise config_error("task", f"options do not build {self.run.task}: {exc}") from None

    def seed_skills(self) -> list[Skill]:
        return [load_skill(path) for path in self.skills.paths]
