"""Batched multi-turn rollouts of an agent in an AgentTask.

Every live episode's next turn goes into one `generator.chat` call, so a
batch of episodes costs about as many engine calls as its longest episode
has turns. Sampling seeds are derived from (seed, episode, turn): a rollout
is reproducible, and episodes differ from each other.

The task's own code (reset, step, max_turns, reward, metrics) runs here, in
the caller's process: what it raises, or an answer outside the AgentTask
contract (tasks/base.py: step's (observation, done), reward in [0, 1], ...),
stops the rollout with an EnvironmentFailure, one line naming the method, the
task's file and line, the case and the turn.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from coevolve.agents.skills import Skill, inject_skills
from coevolve.base.durable import atomic_write_jsonl, atomic_write_text, read_jsonl
from coevolve.base.errors import UsageError
from coevolve.base.skillpatch import derive_seed  # noqa: F401  (re-exported: agents derive their seeds here)
from coevolve.engine.base import ContextLengthError, Generator, MemberJob, Message, Sampling, shared_prefixes
from tasks.agent_check import answer_problem, cut, metrics_problem, reward_problem, turns_problem
from tasks.check import Exited, StillRunning, shown, time_limit
from tasks.loader import user_frame

# the most one call of the environment's code (reset, step, reward, ...) may take in a rollout: one still running
# is a loop that never ends (it runs in this process; check-task's episodes may not have reached it)
CALL_SECONDS = 300.0


class EnvironmentFailure(UsageError):
    """The task's own code failed during a rollout (a method raised, or answered outside the AgentTask
    contract): no model's fault, so no episode's outcome. One line naming the method, the task's file
    and line, the case and the turn; a command stops with exit status 2 (a run's directory keeps the
    rounds it logged, and `--resume` goes on once the environment is fixed)."""


@dataclass
class Trajectory:
    task: str
    case_id: str
    messages: list[Message]  # the full conversation, system prompt first
    actions: list[str]
    observations: list[str]  # observations[0] is the first one, before any action
    reward: float = 0.0
    turns: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    finish: str = "done"  # "done" before the turn budget ran out, else "turn_budget"
    label: str = ""  # who produced it, e.g. "gen 3 member 5"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trajectory":
        return cls(**data)


def rollout(
    generator: Generator,
    task: Any,
    cases: Sequence[Any],
    sampling: Sampling,
    seed: int = 0,
    skills: Sequence[Skill] = (),
    history_turns: int | None = None,
    label: str = "",
    members: Sequence[Any] | None = None,
    constrained: bool = False,
) -> list[Trajectory]:
    """Play every case to its end, all episodes advancing together.

    `constrained`: every reply is decoded under the task's `action_pattern`
    (see action_constraint), so each turn is a well-formed action.

    `skills` are appended to the task's system prompt (skills.inject_skills).
    `history_turns` keeps only the last k (action, observation) pairs in the prompt, to bound context on long
    episodes; the trajectory always records everything.
    `members` (ES members: objects with index, seed, sigma) plays every case
    under each member, member-major; each turn is one
    `generator.generate_members` call for all members' live episodes, and every
    member samples case k with the same seeds (common random numbers).
    """
    if history_turns is not None and history_turns < 0:
        raise ValueError(f"history_turns must be >= 0 or None, got {history_turns}")
    stop = tuple(dict.fromkeys((*sampling.stop, *getattr(task, "stop", ()))))
    turn_sampling = replace(sampling, stop=stop)
    pattern = action_constraint(task) if constrained else None
    system = inject_skills(task.system_prompt, skills)
    # episode e plays case e % len(cases) under member e // len(cases)
    owners = [None] if members is None else list(members)
    episodes = [(owner, k) for owner in owners for k in range(len(cases))]
    states, trajectories, budgets = [], [], []
    for owner, k in episodes:
        case = cases[k]
        trajectory = Trajectory(task=task.name, case_id=str(case.id), messages=[], actions=[], observations=[],
                                label=label if owner is None else f"{label} member {owner.index}".strip())
        answer = _ask(task, "reset", trajectory, case)
        if not (isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], str)):
            raise _broken(task, "reset", f"expected (state, first observation str), got {shown(answer)}", trajectory)
        state, first = answer
        budget = _ask(task, "max_turns", trajectory, case)  # the case's turn budget: asked once per episode
        problem = turns_problem(budget)
        if problem:
            raise _broken(task, "max_turns", problem, trajectory)
        trajectory.messages += [{"role": "system", "content": system}, {"role": "user", "content": first}]
        trajectory.observations.append(first)
        states.append(state)
        trajectories.append(trajectory)
        budgets.append(budget)
    live = list(range(len(episodes)))
    # every turn sends the system prompt and the conversation so far again: reuse their KV within the rollout
    with shared_prefixes(generator):
        while live:
            conversations = [_prompt(trajectories[i].messages, history_turns) for i in live]
            seeds = [derive_seed(seed, episodes[i][1], trajectories[i].turns) for i in live]
            constraints = None if pattern is None else [pattern] * len(live)
            try:
                if members is not None:
                    completions = _member_turn(generator, episodes, live, conversations, seeds, turn_sampling,
                                               constraints)
                elif constraints is None:
                    completions = generator.chat(conversations, turn_sampling, seeds=seeds)
                else:
                    completions = generator.chat(conversations, turn_sampling, seeds=seeds, constraints=constraints)
            except ContextLengthError as exc:  # what made the prompt long, and what to do about it
                case = f" of case {trajectories[live[exc.index]].case_id}" if members is None else ""
                turn = trajectories[live[0]].turns + 1  # every live episode has taken as many turns
                remedy = ("shorten the task's system prompt or first observation (and any skill it is shown)"
                          if turn == 1 else "keep fewer turns in the prompt (agent.history_turns = k keeps the last "
                                            "k) or shorten the task's observations") + ", or raise [model] max_len"
                raise ContextLengthError(f"{task.name}: an episode{case} outgrew the engine's context at turn {turn}: "
                                         f"{exc}; {remedy}", exc.index, origin=exc.origin) from None
            if len(completions) != len(live):
                raise RuntimeError(f"generator returned {len(completions)} completions for {len(live)} conversations")
            still_live = []
            for i, completion in zip(live, completions):
                trajectory, state = trajectories[i], states[i]
                action = completion.text.strip()
                answer = _ask(task, "step", trajectory, state, action, action=action)
                problem = answer_problem(answer)
                if problem:
                    raise _broken(task, "step", problem, trajectory, action)
                observation, done = answer
                trajectory.turns += 1
                trajectory.actions.append(action)
                trajectory.observations.append(observation)
                trajectory.messages.append({"role": "assistant", "content": action})
                trajectory.messages.append({"role": "user", "content": observation})
                if trajectory.turns >= budgets[i]:
                    done = True
                    trajectory.finish = "turn_budget"
                if done:
                    trajectory.reward, trajectory.metrics = _outcome(task, state, trajectory)
                else:
                    still_live.append(i)
            live = still_live
    return trajectories


def _outcome(task: Any, state: Any, trajectory: Trajectory) -> tuple[float, dict[str, float]]:
    """An ended episode's reward and metrics, each held to its contract."""
    reward = _ask(task, "reward", trajectory, state)
    problem = reward_problem(reward)
    if problem:
        raise _broken(task, "reward", problem, trajectory)
    metrics = _ask(task, "metrics", trajectory, state)
    problem = metrics_problem(metrics)
    if problem:
        raise _broken(task, "metrics", problem, trajectory)
    return float(reward), dict(metrics)


def _ask(task: Any, method: str, trajectory: Trajectory, *args: Any, action: str | None = None) -> Any:
    """The task's `method`(*args) for `trajectory`'s episode (`action`: the reply step() is given); what it
    raises, or a call still running after CALL_SECONDS (a loop check-task's few episodes did not reach), is
    an EnvironmentFailure naming the method and the user's line (a UsageError passes as it is)."""
    try:
        with time_limit(CALL_SECONDS, f"{method}()"):
            return getattr(task, method)(*args)
    except UsageError:
        raise
    except Exited as exc:  # sys.exit(), os._exit(), its own KeyboardInterrupt: the line it did it on
        raise EnvironmentFailure(f"task {task.name}: {exc} ({_where(trajectory, action)})") from None
    except StillRunning as exc:
        at = user_frame(exc).partition(" (at ")[2]
        raise EnvironmentFailure(f"task {task.name}: {exc} {_where(trajectory, action)}"
                                 f"{f' (at {at}' if at else ''}; a loop that never ends?") from None
    except Exception as exc:
        raised = " ".join(user_frame(exc).splitlines())  # one line, whatever the message holds
        raise EnvironmentFailure(f"task {task.name}: {method}() raised {raised} {_where(trajectory, action)}") from exc


def drawn_cases(task: Any, split: str, n: int, seed: int, asked: str) -> list:
    """The task's `n` cases of `split`; its cases() raising (an environment with fewer problems than were
    asked for, say) is an EnvironmentFailure naming the user's line and `asked`, the setting that asked."""
    try:
        with time_limit(CALL_SECONDS, f"cases({split!r}, {n})"):
            return task.cases(split, n, seed=seed)
    except UsageError:
        raise
    except Exited as exc:
        raise EnvironmentFailure(f"task {task.name}: {exc} (drawing {n} {split} cases for {asked})") from None
    except (Exception, StillRunning) as exc:
        raised = " ".join(user_frame(exc).splitlines())
        raise EnvironmentFailure(f"task {task.name}: cases({split!r}, {n}) raised {raised}; {asked} = {n} asked "
                                 "for them: ask for fewer, or let the task draw more") from None


def _where(trajectory: Trajectory, action: str | None) -> str:
    """The case, who played it and the turn, as the failure lines name them."""
    who = f" ({trajectory.label})" if trajectory.label else ""
    if action is not None:
        return f"on case {trajectory.case_id}{who}, turn {trajectory.turns + 1}, given the reply {cut(action)}"
    if trajectory.messages:
        turns = f"{trajectory.turns} turn{'s' * (trajectory.turns != 1)}"
        return f"on case {trajectory.case_id}{who}, at the end of its episode ({turns})"
    return f"on case {trajectory.case_id}{who}, before its first turn"


def _broken(task: Any, method: str, problem: str, trajectory: Trajectory,
            action: str | None = None) -> EnvironmentFailure:
    """`method` answered outside the contract: what was expected, where, and where the method is defined."""
    return EnvironmentFailure(f"task {task.name}: {method}(): {problem} {_where(trajectory, action)}"
                              f"{_defined_at(task, method)}")


def _defined_at(task: Any, method: str) -> str:
    """` (reward() is at FILE:LINE)`, where the task's method is Python code; else ''."""
    bound = getattr(task, method, None)
    code = getattr(getattr(bound, "__func__", bound), "__code__", None)
    return f" ({method}() is at {code.co_filename}:{code.co_firstlineno})" if code is not None else ""


def action_constraint(task: Any) -> str:
    """The task's declared action format (`action_pattern`), or a ValueError
    naming the task when it declares none."""
    pattern = getattr(task, "action_pattern", None)
    if not pattern:
        raise ValueError(f"task {getattr(task, 'name', task)!r} declares no action_pattern; "
                         "run it without constrained actions")
    return pattern


def _member_turn(generator: Any, episodes: list, live: list[int], conversations: list, seeds: list[int],
                 sampling: Sampling, constraints: list[str] | None = None) -> list:
    """One turn of every live episode, grouped into one job per member (in
    member order, so job j is member j's LoRA slot), in one call."""
    by_member: dict[int, list[int]] = {}
    for position, i in enumerate(live):
        by_member.setdefault(episodes[i][0].index, []).append(position)
    jobs, order = [], []
    for owner in dict.fromkeys(owner for owner, _ in episodes):
        positions = by_member.get(owner.index, [])
        jobs.append(MemberJob(owner.seed, owner.sigma, [conversations[p] for p in positions], sampling,
                              [seeds[p] for p in positions],
                              None if constraints is None else [constraints[p] for p in positions]))
        order.append(positions)
    completions: list = [None] * len(live)
    for positions, texts in zip(order, generator.generate_members(jobs)):
        for p, c in zip(positions, texts):
            completions[p] = c
    return completions


def _prompt(messages: list[Message], history_turns: int | None) -> list[Message]:
    # messages = system, first observation, then (assistant, user) pairs
    # always a copy: the trajectory keeps growing after the generator saw it
    if history_turns is None or len(messages) <= 2 + 2 * history_turns:
        return list(messages)
    return messages[:2] + (messages[-2 * history_turns :] if history_turns else [])


def mean_reward(trajectories: Sequence[Trajectory]) -> float:
    if not trajectories:
        raise ValueError("mean_reward of no trajectories")
    return sum(t.reward for t in trajectories) / len(trajectories)


def mean_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    keys = sorted({k for t in trajectories for k in t.metrics})
    return {k: sum(t.metrics.get(k, 0.0) for t in trajectories) / len(trajectories) for k in keys}


# ---------------------------------------------------------------- storage


def to_markdown(trajectories: Sequence[Trajectory], title: str = "Trajectories") -> str:
    """Human-readable transcript: the system prompt once, then every episode."""
    lines = [f"# {title}", ""]
    if trajectories:
        lines += ["## System prompt", "", "```text", trajectories[0].messages[0]["content"], "```", ""]
        solved = sum(t.reward > 0 for t in trajectories)
        lines += [f"{len(trajectories)} episodes, mean reward {mean_reward(trajectories):.3f}, solved {solved}", ""]
    for n, t in enumerate(trajectories):
        label = f" ({t.label})" if t.label else ""
        metrics = ", ".join(f"{k}={v:g}" for k, v in sorted(t.metrics.items()))
        lines += [f"## Episode {n}: {t.task} case {t.case_id}{label}", ""]
        lines += [f"reward {t.reward:g}, turns {t.turns}, finish {t.finish}; {metrics}", ""]
        lines += ["**Observation 0**", "", "```text", t.observations[0], "```", ""]
        for turn, (action, observation) in enumerate(zip(t.actions, t.observations[1:]), start=1):
            lines += [f"**Action {turn}**", "", "```text", action, "```", ""]
            lines += [f"**Observation {turn}**", "", "```text", observation, "```", ""]
    return "\n".join(lines)


def save_trajectories(trajectories: Sequence[Trajectory], path_stem: str | Path, title: str) -> tuple[Path, Path]:
    """Write `<stem>.jsonl` (machine-readable, for distill) and `<stem>.md`
    (for people), each atomically."""
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    jsonl = stem.with_suffix(".jsonl")
    markdown = stem.with_suffix(".md")
    atomic_write_jsonl(jsonl, (t.to_dict() for t in trajectories))
    atomic_write_text(markdown, to_markdown(trajectories, title))
    return jsonl, markdown


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Trajectories from one .jsonl file or every .jsonl below a directory."""
    path = Path(path)
    files = sorted(path.rglob("*.jsonl")) if path.is_dir() else [path]
    out = []
    for file in files:
        for number, data in enumerate(read_jsonl(file), start=1):
            try:
                out.append(Trajectory.from_dict(data))
            except (TypeError, AttributeError) as exc:
                raise ValueError(f"{file}:{number}: not a trajectory record ({exc})") from None
    return out
