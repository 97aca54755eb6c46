"""The paper's agent evaluation protocol: held-out Mean@k, Pass@k, Max@k and
best-of-k.

Every held-out problem is attempted k times (k = 4 in the paper) with the
paper's sampling for the task (its `paper_sampling`: Sudoku temperature 0.7,
top-p 0.8, top-k 20, presence penalty 1.5; math temperature 1, top-p 1, top-k
40; coevolve.base.sampling); Mean@k averages the k rewards of a problem,
Pass@k counts a problem solved when any attempt solved it, Max@k takes its
best reward (graded rewards), and best-of-j for j = 1, 2, 4, ..., k (the
paper's Figure 7 goes to 32) estimates the expected best of j attempts from
the k; all are reported over problems with a 95% confidence interval
(coevolve.stats).

The four arms of an agent comparison share one engine and one held-out set:
`base` (the checkpoint), `esopt` (ES-tuned weights, replayed from a run's
history.jsonl), `skill` (base weights with the distilled skill in the system
prompt) and `both`; seed skills are shown to every arm, before the arm's
own (as `coevolve compare` scores them). Everything that can be wrong with
the inputs (overlapping splits, a missing history or skill, an action pattern
the engine rejects) is checked before the first episode.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence, TypeVar

from coevolve.agents.rollout import Trajectory, action_constraint, derive_seed, rollout
from coevolve.agents.skills import Skill, load_skill
from coevolve.agents.tools import SandboxTool
from coevolve.base.sampling import PAPER_EVAL, Sampling
from coevolve.es.history import read as read_history
from coevolve.es.optimizer import dtype_for, dtype_of, engine_options, replay
from coevolve.stats import Interval, best_of_k, max_at_k, mean_at_k, paired_change, pass_at_k, problem_means
from tasks.base import case_content
from tasks.registry import AGENT_TASKS, TaskOptionError, UnknownTask, agent_task

ARMS = ("base", "esopt", "skill", "both")
WEIGHT_ARMS = {"esopt", "both"}  # need ES-tuned weights
SKILL_ARMS = {"skill", "both"}
T = TypeVar("T")


@dataclass
class ArmResult:
    arm: str
    k: int
    problems: int
    mean_at_k: Interval
    pass_at_k: Interval
    well_formed: float | None  # share of turns that were readable actions (tasks that report it)
    trajectories: list[Trajectory] = field(default_factory=list, repr=False)
    max_at_k: Interval | None = None
    best_of: dict[int, Interval] = field(default_factory=dict)  # j -> best-of-j estimated from the k attempts

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "k": self.k, "problems": self.problems,
                f"mean@{self.k}": self.mean_at_k.to_dict(), f"pass@{self.k}": self.pass_at_k.to_dict(),
                f"max@{self.k}": None if self.max_at_k is None else self.max_at_k.to_dict(),
                "best_of": {str(j): v.to_dict() for j, v in self.best_of.items()},
                "well_formed": self.well_formed}


BEST_OF = (1, 2, 4, 8, 16, 32)  # the paper's repeated-sampling profile (Figure 7)
MAX_K = 32


def eval_sampling(max_tokens: int, task: Any = None) -> Sampling:
    """The paper's evaluation sampling for `task` (its `paper_sampling`, else
    PAPER_EVAL) with the task's per-turn reply length."""
    return replace(getattr(task, "paper_sampling", None) or PAPER_EVAL, max_tokens=max_tokens)


def build_task(name: str, options: dict[str, Any]) -> Any:
    """The agent task `name` built with `options` (tasks that run Python get
    the sandboxed tool); ValueError names a bad task or option."""
    try:
        return agent_task(name, options, tool=SandboxTool() if AGENT_TASKS.get(name) and
                          AGENT_TASKS[name].python_tool else None)
    except UnknownTask as exc:
        raise ValueError(str(exc)) from None
    except TaskOptionError as exc:
        raise ValueError(str(exc)) from None
    except (OSError, TypeError, ValueError) as exc:
        raise ValueError(f"task {name!r} with options {options}: {exc}") from None


def check_heldout(task: Any, heldout: Sequence[Any], train: Sequence[Any]) -> None:
    """ValueError naming the first held-out cases that are also training cases
    (compared by content, not by id: tasks.base.case_content)."""
    train_keys = {case_content(task, c): c.id for c in train}
    shared = [(c.id, train_keys[case_content(task, c)]) for c in heldout if case_content(task, c) in train_keys]
    if shared:
        shown = ", ".join(f"{h} = train {t}" for h, t in shared[:5])
        raise ValueError(f"the held-out split overlaps training in {len(shared)} of {len(heldout)} problems ({shown})")
    ids = [c.id for c in heldout]
    if len(set(ids)) != len(ids):
        raise ValueError("the held-out split has duplicate problem ids")


def attempts_of(trajectories: Sequence[Trajectory], problems: int, k: int) -> list[list[float]]:
    """Rewards grouped per problem: trajectories come as k rounds of the problems in order."""
    if len(trajectories) != problems * k:
        raise ValueError(f"expected {problems} x {k} trajectories, got {len(trajectories)}")
    return [[trajectories[a * problems + p].reward for a in range(k)] for p in range(problems)]


def evaluate_arm(
    generator: Any,
    task: Any,
    heldout: Sequence[Any],
    arm: str,
    k: int = 4,
    sampling: Sampling = PAPER_EVAL,
    seed: int = 0,
    skills: Sequence[Skill] = (),
    constrained: bool = False,
    history_turns: int | None = None,
) -> ArmResult:
    """k attempts at every held-out problem in one batched rollout. Attempt a
    of problem p samples with seeds derived from (seed, a, p): the arms see
    the same seeds, so their difference is the weights and the skill."""
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be in 1..{MAX_K}, got {k}")
    cases = [case for _ in range(k) for case in heldout]
    trajectories = rollout(generator, task, cases, sampling, seed=derive_seed(seed, "heldout"), skills=skills,
                           history_turns=history_turns, label=f"eval {arm}", constrained=constrained)
    attempts = attempts_of(trajectories, len(heldout), k)
    formed = [t.metrics["well_formed"] for t in trajectories if "well_formed" in t.metrics]
    return ArmResult(arm, k, len(heldout), mean_at_k(attempts), pass_at_k(attempts),
                     sum(formed) / len(formed) if formed else None, trajectories, max_at_k(attempts),
                     {j: best_of_k(attempts, j) for j in BEST_OF if j <= k})


def evaluate_arms(
    engine: Any,
    task: Any,
    heldout: Sequence[Any],
    arms: Sequence[str] = ARMS,
    k: int = 4,
    sampling: Sampling = PAPER_EVAL,
    seed: int = 0,
    history: str | Path | None = None,
    skills: Sequence[Skill] = (),
    constrained: bool = False,
    train: Sequence[Any] = (),
    history_turns: int | None = None,
    on_arm: Any = None,
    seed_skills: Sequence[Skill] = (),
) -> list[ArmResult]:
    """Mean@k / Pass@k of each arm on one held-out set, each arm showing
    shown_skills (`seed_skills` to all, `skills` to the skill arms). The tuned
    arms run first: replaying the ES history checks its checksums against this
    engine before any episode, so weights other than the ones it was recorded
    on (another checkpoint) are found at once; the engine is then reset to the
    checkpoint for the base-weight arms."""
    check_arms(arms, history, skills)
    check_heldout(task, heldout, train)
    if constrained:
        pattern = action_constraint(task)
        check = getattr(engine, "check_constraints", None)
        if check is not None:
            check([pattern])
    if any(a in WEIGHT_ARMS for a in arms):
        if not read_history(history):
            raise ValueError(f"{history}: no ES generations recorded; the esopt arms would equal base")
    results: list[ArmResult] = []
    tuned = False
    try:
        for arm in play_order(arms):
            if arm in WEIGHT_ARMS and not tuned:
                tuned = True  # before: a replay that fails part-way has moved the weights too
                replay(history, engine)
            elif arm not in WEIGHT_ARMS and tuned:
                engine.reset()
                tuned = False
            result = evaluate_arm(engine, task, heldout, arm, k, sampling, seed,
                                  shown_skills(arm, skills, seed_skills), constrained, history_turns)
            results.append(result)
            if on_arm is not None:
                on_arm(result)
    finally:
        if tuned:
            engine.reset()
    return sorted(results, key=lambda r: ARMS.index(r.arm))


def play_order(arms: Sequence[str]) -> list[str]:
    """The order evaluate_arms plays `arms` in (its results come back in ARMS order): the ES-tuned arms
    first, so the history is replayed once and checked against the engine before any episode."""
    return [a for a in ARMS if a in arms and a in WEIGHT_ARMS] + [a for a in ARMS if a in arms and a not in WEIGHT_ARMS]


def shown_skills(arm: str, skills: Sequence[T], seed_skills: Sequence[T] = ()) -> list[T]:
    """The skills `arm` shows, in prompt order: the seed skills, which `coevolve compare` shows every arm
    (the run started from them, whatever it trained), then, for the skill arms, their own (a run's
    distilled skills, --skill folders). Any items: the command passes (skill, origin) pairs to say them."""
    return [*seed_skills, *(skills if arm in SKILL_ARMS else ())]


def check_arms(arms: Sequence[str], history: str | Path | None, skills: Sequence[Skill]) -> None:
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        raise ValueError(f"arms must be some of {', '.join(ARMS)} (got {', '.join(arms) or 'none'})")
    if any(a in WEIGHT_ARMS for a in arms):
        if history is None:
            raise ValueError("the esopt and both arms need ES-tuned weights: give a run's history.jsonl")
        if not Path(history).is_file():
            raise ValueError(f"{history}: no such ES history file")
    if any(a in SKILL_ARMS for a in arms) and not skills:
        raise ValueError("the skill and both arms need a skill of their own: a run's distilled skills/ or a "
                         "skill folder (seed skills go to every arm)")


def problem_scores(result: ArmResult) -> dict[str, dict[str, float]]:
    """Each measure of an arm per held-out problem (measure -> problem -> score), what pairing two arms
    pairs: Mean@k, Pass@k and Max@k of the problem's k attempts, each the stats measure on that one
    problem (so the pairing scores a problem as the table does), and, for a task that reports it, the
    problem's well-formed action rate."""
    attempts: dict[str, list[float]] = {}
    for t in result.trajectories:
        attempts.setdefault(t.case_id, []).append(t.reward)
    scores = {f"{name}@{result.k}": {problem: measure([a]).mean for problem, a in attempts.items()}
              for name, measure in (("Mean", mean_at_k), ("Pass", pass_at_k), ("Max", max_at_k))}
    formed = problem_means((t.case_id, t.metrics["well_formed"]) for t in result.trajectories
                           if "well_formed" in t.metrics)
    return {**scores, **({"well-formed": formed} if formed else {})}


def paired_changes(before: ArmResult, after: ArmResult) -> list[tuple[str, dict[str, Any]]]:
    """`after` against `before` on the same problems, per measure of problem_scores (Mean@k first):
    (measure, stats.paired_change). Max@k is left out where it is Pass@k in both arms (0/1 rewards)."""
    scores = [problem_scores(before), problem_scores(after)]
    high, solved = f"Max@{after.k}", f"Pass@{after.k}"
    changes = []
    for measure in scores[1]:
        if measure not in scores[0] or (measure == high and all(s[high] == s[solved] for s in scores)):
            continue
        change = paired_change(scores[0][measure], scores[1][measure])
        if change is not None:
            changes.append((measure, change))
    return changes


def table(results: Sequence[ArmResult]) -> str:
    """A markdown table: arm, Mean@k, Pass@k, Max@k [95% CI], best-of-j for the
    paper's j up to k (means), well-formed action rate."""
    k = results[0].k if results else 4
    js = [j for j in BEST_OF if j <= k]
    lines = [f"| arm | Mean@{k} [95% CI] | Pass@{k} [95% CI] | Max@{k} [95% CI] | "
             + " | ".join(f"best-of-{j}" for j in js) + " | well-formed |",
             "|---|---|---|---|" + "---|" * len(js) + "---|"]
    for r in results:
        formed = "-" if r.well_formed is None else f"{r.well_formed:.2f}"
        best = " | ".join(f"{r.best_of[j].mean:.3f}" if j in r.best_of else "-" for j in js)
        lines.append(f"| {r.arm} | {r.mean_at_k} | {r.pass_at_k} | {r.max_at_k or '-'} | {best} | {formed} |")
    return "\n".join(lines)


def engine_options_for(history: str | Path | None) -> dict[str, Any]:
    """Engine keyword arguments that replaying `history` needs (a low-rank
    history replays only on an engine with the same noise mode and rank, and
    any history only in the weight type it was recorded in)."""
    if history is None:
        return {}
    records = read_history(history)
    if not records:
        return {}
    first = records[0]
    return {**engine_options(first.get("noise", "full"), first.get("rank") or 1, first.get("population", 1)),
            "dtype": dtype_for("auto", dtype_of(records))}


def run_inputs(run_dir: str | Path | None) -> tuple[Path | None, list[Skill]]:
    """An agent run directory's ES history (None when it holds no ES
    generation) and its distilled skills (skills/<name>/SKILL.md, each
    validated: an invalid SKILL.md is a SkillError naming the file)."""
    if run_dir is None:
        return None, []
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir}: no such run directory")
    history = run_dir / "history.jsonl"
    has_history = history.is_file() and history.stat().st_size > 0
    folder = run_dir / "skills"
    skills = [load_skill(d) for d in sorted(folder.iterdir()) if d.is_dir()] if folder.is_dir() else []
    if not has_history and not skills:
        raise ValueError(f"{run_dir}: holds neither ES weights (history.jsonl) nor a distilled skill (skills/)")
    return (history if has_history else None), skills
