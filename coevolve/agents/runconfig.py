"""The `coevolve run` config for agent tasks (sudoku, sudoku9, react_math, and
any task in tasks.registry.AGENT_TASKS): one model per TOML section; the keys
are listed in docs/agents.md. `run_agent` takes this config itself (as trl's
trainers take their config): no runtime copy of its fields. Validation builds
nothing: `build_task` and `seed_skills` build the task and read the skills, and
`coevolve run` calls both before the run directory exists.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from coevolve.agents.skills import MAX_NAME, NAME_PATTERN, Skill, SkillError, load_skill
from coevolve.base.config import Config, Section, config_error, require
from coevolve.base.errors import did_you_mean
from coevolve.base.logsection import LogSection
from coevolve.base.sampling import MAX_TEMPERATURE, TEMPERATURE, Sampling
from coevolve.base.sections import DistributedSection, EndpointSection, ModelSection, RunSection, task_named
from coevolve.es.config import ESConfig, ESSection
from tasks.loader import looks_like_spec, plugins
from tasks.registry import AGENT_TASKS, HEURISTIC_TASKS, TaskOptionError, agent_task, path_options

METHODS = ("esopt", "trace2skill", "esopt+trace2skill")
ES_METHODS = ("esopt", "esopt+trace2skill")
SKILL_NAME = NAME_PATTERN.pattern  # checked here, not when the first skill is written after a round
# [task] values that configs written before the registry took options held for "the task's default" (the
# built-in tasks' fixed fields then): left out when built, so old run directories still load; only
# exactly these (an int 0, an empty string), so `masked = 0.0` is refused as a float, and a 0 of any other
# option (a user task's `extra_turns = 0`) is passed on as written
LEGACY_DEFAULTS: dict[str, Any] = {"masked": 0, "turns": 0, "problems_file": ""}
LEGACY_TASKS = ("sudoku", "sudoku9", "react_math")


class AgentRun(RunSection):
    method: Literal[METHODS] = "esopt"

    @field_validator("task")
    @classmethod
    def _agent_task(cls, value: str) -> str:
        """A registry name must be an agent task; a file, module or plugin is checked when built."""
        if value in HEURISTIC_TASKS or not (value in AGENT_TASKS or looks_like_spec(value) or value in plugins()):
            raise ValueError(f"must be one of {', '.join(sorted(AGENT_TASKS))}{did_you_mean(value, AGENT_TASKS)}")
        return value


class AgentSection(Section):
    population: int = Field(8, ge=1)  # ES members per generation; also sizes a trace2skill round
    batch: int = Field(8, ge=1)  # train cases per member (the fitness batch)
    eval_cases: int = Field(16, ge=1)
    eval_every: int = Field(1, ge=1)
    skill_every: int = Field(2, ge=1)  # esopt+trace2skill: ES generations between skill updates
    skill_name: str = Field("distilled", pattern=SKILL_NAME, max_length=MAX_NAME,
                            description="lowercase letters, digits and single hyphens (an Agent Skills name)")
    skill_successes: int = Field(2, ge=0)  # success analyses per distillation (the paper's math setting: 0)
    # the teacher's sampling temperature when it analyses traces and merges patches
    # (ours 0.3: steadier small-model output; the paper's Trace2Skill runs it at 1.0)
    teacher_temperature: float = Field(0.3, ge=0, le=MAX_TEMPERATURE, description=TEMPERATURE)
    # the teacher's reply limit for each analysis and merge: 160 suits the embedded model's short patches;
    # a larger served teacher writes longer analyses
    teacher_max_tokens: int = Field(160, ge=1)
    # held-out evaluation; training rollouts sample as [sampling] says
    eval_temperature: float = Field(0.0, ge=0, le=MAX_TEMPERATURE, description=TEMPERATURE)
    history_turns: int | None = Field(None, ge=0)  # keep only the last k (action, observation) pairs in the prompt
    shaping: float = Field(0.0, ge=0)  # fitness = mean(reward + shaping x progress); 0 is the paper's binary reward
    # decode every turn under the task's action format (vLLM structured outputs); a task without one runs free
    constrained: bool = True
    # "posthoc": distil once from the run's trajectories at the end, best of `distill_seeds` on
    # `validation_cases` validation puzzles (Trace2Skill's published setting); "online": every
    # `skill_every` rounds during the run (our extension, the co-evolution interleaving)
    distill: Literal["posthoc", "online"] = "posthoc"
    distill_seeds: int = Field(3, ge=1)
    validation_cases: int = Field(8, ge=1)


class SkillsSection(Section):
    # skill folders, each holding a SKILL.md: a new run counts them from its TOML's folder and
    # records them absolute (coevolve/base/paths.py); an old run's config.toml may hold them
    # relative, read from the working directory as when it started
    paths: list[str] = []


class AgentRunConfig(Config):
    RENAMED: ClassVar[dict[str, str]] = {"teacher": "endpoint"}

    run: AgentRun = AgentRun(task="sudoku", budget=256)  # budget: training episodes; evaluation is not charged
    # keyword arguments of the task's factory; in the built-in tasks masked = 0, turns = 0 and
    # problems_file = "" mean "the task's default" (what configs written before the registry took options said)
    task: dict[str, Any] = {}
    agent: AgentSection = AgentSection()
    # training rollouts; max_tokens is per turn (a Sudoku move is a few tokens)
    sampling: Sampling = Sampling(temperature=0.7, top_p=1.0, max_tokens=24)
    es: ESSection = ESConfig()
    skills: SkillsSection = SkillsSection()
    endpoint: EndpointSection = EndpointSection()
    model: ModelSection = ModelSection()
    distributed: DistributedSection = DistributedSection()
    log: LogSection = LogSection()  # trackers (coevolve/base/mirror.py)

    _task_named = model_validator(mode="before")(classmethod(lambda cls, raw: task_named(raw)))

    @property
    def uses_es(self) -> bool:
        return self.run.method in ES_METHODS

    @property
    def uses_skills(self) -> bool:
        return self.run.method in ("trace2skill", "esopt+trace2skill")

    @property
    def episodes_per_round(self) -> int:
        return self.agent.population * self.agent.batch

    @model_validator(mode="after")
    def _across(self) -> AgentRunConfig:
        """Rules that span sections; the task's own options are checked by `build_task`."""
        require(self.run.budget >= self.episodes_per_round, "run.budget", "must pay at least one round of "
                f"agent.population x agent.batch = {self.episodes_per_round} episodes", self.run.budget)
        require(self.es.population == 0, "es.population",
                "is agent.population in agent runs (it also sizes skill rounds); leave es.population out",
                self.es.population)
        require(self.endpoint.select == "fixed", "endpoint.select", '= "adaptive" is for heuristic runs (their '
                "candidates say which model pays); an agent run's teacher draws by the fixed weights")
        for key in ("proposals_per_member", "operators"):
            require(getattr(self.es, key) == ESConfig.model_fields[key].default, f"es.{key}",
                    "is for heuristic runs only; leave it out of agent configs", getattr(self.es, key))
        if self.uses_es:
            require(self.agent.population >= 2, "agent.population", f"must be >= 2 for {self.run.method}",
                    self.agent.population)
            require(not self.es.antithetic or self.agent.population % 2 == 0, "agent.population",
                    "must be even when es.antithetic", self.agent.population)
        self.model.require_room(self.sampling.max_tokens, "sampling.max_tokens")
        self.model.require_room(self.agent.teacher_max_tokens, "agent.teacher_max_tokens")
        return self

    # ------------------------------------------------------------ builders

    def eval_sampling(self) -> Sampling:
        """Held-out evaluation: [sampling] at agent.eval_temperature (greedy by default)."""
        return dataclasses.replace(self.sampling, temperature=self.agent.eval_temperature)

    def build_task(self, tool: Any = None) -> Any:
        """The environment, with the [task] options; `tool` is the Python tool
        for tasks that run code (coevolve.agents.tools.SandboxTool)."""
        try:
            options = self.task_options()
            for name in path_options(self.run.task):  # a file option naming no file, named as the TOML wrote it
                # its default is None, so the registry's type check lets any value through to the factory
                if name in options and not isinstance(options[name], str):
                    raise config_error(f"task.{name}", "must be a file's path, a string (counted from the config's "
                                       "folder)", options[name])
                if isinstance(options.get(name), str) and not Path(options[name]).expanduser().is_file():
                    raise config_error(f"task.{name}", "names no file (counted from the config's folder)",
                                       options[name])
            return agent_task(self.run.task, options, tool=tool)
        except TaskOptionError as exc:
            raise config_error(f"task.{exc.option}", exc.problem) from None
        except (OSError, TypeError, ValueError) as exc:
            raise config_error("task", f"options do not build {self.run.task}: {exc}") from None

    def task_options(self) -> dict[str, Any]:
        """[task] as the factory's keyword arguments, less a built-in task's legacy "default" values."""
        if self.run.task not in LEGACY_TASKS:
            return dict(self.task)
        return {k: v for k, v in self.task.items()
                if not (k in LEGACY_DEFAULTS and type(v) is type(LEGACY_DEFAULTS[k]) and v == LEGACY_DEFAULTS[k])}

    def seed_skills(self) -> list[Skill]:
        """The [skills] folders, read now (a run reads them once, at its start, and plays the texts its
        log pinned from then on: es_agent.logged_seed_skills); a bad one is a config error naming it."""
        return read_seed_skills(self.skills.paths)


def read_seed_skills(paths: list[str]) -> list[Skill]:
    """[skills] `paths` read (a relative one from the working directory); a bad one is a config error
    naming its skills.paths entry."""
    skills = []
    for i, path in enumerate(paths):
        try:
            skills.append(load_skill(path))
        except SkillError as exc:
            raise config_error(f"skills.paths[{i}]", f"is not a valid skill: {exc}") from None
    return skills
