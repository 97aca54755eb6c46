"""`coevolve eval --task AGENT_TASK ...`: the paper's held-out agent evaluation.

    coevolve eval --task sudoku --run RUN_DIR [--arms base,esopt,skill,both]
                  [--problems 100] [--k 4] [--free] [--seed 0] [--out results.json]

Mean@k, Pass@k and Max@k (k = 4; up to 32) with 95% confidence intervals over
`--problems` held-out problems (the eval split; 100 in the paper), and best-of-j
for j = 1, 2, 4, ... up to k, sampled as the paper does for the task (Sudoku:
temperature 0.7, top-p 0.8, top-k 20, presence penalty 1.5; math: temperature 1,
top-p 1, top-k 40), for each arm: base weights, ES-tuned
weights (the run's history.jsonl), the skills the run distilled (its skills/),
and both. The run's seed skills (`[skills]`, as its log pinned them) go first
in every arm's prompt, base and esopt too, as `coevolve compare` scores the
arms; the header says which skills each arm shows. Each trained arm is then
paired with base per problem, measure by measure. Replies are
decoded under the task's action format unless --free, each turn at most the
run's `[sampling] max_tokens` (without --run: 12, 96 for react_math;
--max-tokens sets it).
Every input is checked before the first episode: the task and its options,
the run directory, SKILL.md files, the held-out split against training, and
the action pattern against the engine.
"""

from __future__ import annotations

import argparse
import time
import tomllib
from pathlib import Path
from typing import Any

from coevolve.agents.evaluate import (ARMS, WEIGHT_ARMS, ArmResult, build_task as build, check_arms, check_heldout,
                                      engine_options_for, eval_sampling, evaluate_arms, paired_changes,
                                      play_order, run_inputs, shown_skills, table)
from coevolve.agents.es_agent import run_seed_skills
from coevolve.agents.rollout import drawn_cases
from coevolve.agents.runconfig import AgentRunConfig
from coevolve.agents.skills import SkillError, load_skill
from coevolve.base.config import build_config, read_toml
from coevolve.base.durable import atomic_write_json
from coevolve.base.errors import ConfigError, UsageError
from coevolve.base.sections import ModelSection, task_named
from coevolve.engine.local import require_model
from coevolve.engine.base import ConstraintError
from coevolve.es import ReplayError
from coevolve.engine import vllm_engine  # as a module: tests stand a fake in for vllm_engine.Engine
from coevolve.report.rendering import change_line


# the defaults of --problems, --k and --seed; the flags default to None, so that eval of a heuristic program
# can tell them given (and refuse them) from not
PROBLEMS, K, SEED = 100, 4, 0
ENGINE_CONTEXT = ModelSection.model_fields["max_len"].default  # the engine's context without a run's max_len
# the flags of this group: eval of a heuristic program refuses them (coevolve/commands/eval.py)
FLAGS = ("option", "run", "history", "skill", "arms", "problems", "k", "free", "max_tokens", "history_turns", "seed",
         "out", "model")


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("agent tasks (sudoku, sudoku9, react_math, your env.py): held-out Mean@k / Pass@k")
    g.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of the task, e.g. masked=1 (sudoku), turns=4 (react_math); repeatable")
    g.add_argument("--run", help="agent run directory: its history.jsonl (ES-tuned weights), and its seed "
                                 "skills ([skills]) and distilled ones (skills/) for the skill arms")
    g.add_argument("--history", help="ES history.jsonl to replay for the esopt/both arms (instead of --run)")
    g.add_argument("--skill", action="append", default=[], metavar="DIR",
                   help="skill folder for the skill/both arms (instead of --run); repeatable")
    g.add_argument("--arms", help="comma-separated, of base,esopt,skill,both (default: every arm the inputs allow)")
    g.add_argument("--problems", type=int, help=f"held-out problems (default {PROBLEMS}, as in the paper)")
    g.add_argument("--k", type=int, help=f"attempts per problem, 1..32 (default {K}); best-of-j is "
                                         "reported for j = 1, 2, 4, ... up to k")
    g.add_argument("--free", action="store_true", help="decode freely instead of under the task's action format")
    g.add_argument("--max-tokens", type=int, help="tokens per turn (default: with --run, the run's [sampling] "
                                                  "max_tokens; else 12, or 96 for react_math)")
    g.add_argument("--history-turns", type=int, metavar="K",
                   help="show each turn's prompt only the last K (action, observation) pairs (default: with --run, "
                        "the run's [agent] history_turns; else the whole episode)")
    g.add_argument("--seed", type=int, help="held-out split seed and sampling seed, >= 0 (default 0)")
    g.add_argument("--out", help="write the results as JSON here")
    g.add_argument("--model", help="HF checkpoint directory (default: the run's [model] path with --run, else the "
                                   "embedded model)")


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`--option KEY=VALUE` pairs as a config's [task] table would hold them: a VALUE that reads as a
    TOML value is one (`4`, `2.5`, `true`, `"x"`), anything else a string (`file.jsonl`)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--option {pair!r}: expected KEY=VALUE")
        try:
            options[key] = tomllib.loads(f"value = {value}")["value"]
        except tomllib.TOMLDecodeError:
            options[key] = value
    return options


def build_task(name: str, options: dict[str, Any]) -> Any:
    try:
        return build(name, options)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def run_toml(run_dir: str | Path, task: str) -> Any:
    """The agent run's config.toml in `run_dir` as read (a file that is not TOML or not UTF-8: one line),
    its `[task] name` held as run.task; a run on another task than `task` is refused (its held-out problems
    would be another kind of problem)."""
    path = Path(run_dir) / "config.toml"
    try:
        raw = task_named(read_toml(path))
    except ConfigError as exc:
        raise UsageError(f"{path}: {exc}" if str(path) not in str(exc) else str(exc)) from None
    run = raw.get("run") if isinstance(raw, dict) else None
    if run is not None and not isinstance(run, dict):  # the table that names the task (the rest: run_config)
        raise UsageError(f"{path}: config error: run must be a table (got {run!r})")
    if isinstance(run, dict) and isinstance(run.get("task"), str) and run["task"] != task:
        raise UsageError(f"{run_dir} is a run on task {run['task']!r}, not {task!r}")
    return raw


def run_config(run_dir: str | Path, raw: Any, task: str) -> AgentRunConfig:
    """The run's config.toml (`raw`, run_toml's) validated and built as `coevolve run --resume` builds it:
    a damaged one (not a table, a wrong type) is one line naming the file and key."""
    run = raw.get("run") if isinstance(raw, dict) else None
    if isinstance(run, dict):
        raw = {**raw, "run": {"task": task, **run}}  # a config that names no task: the one evaluated
    try:
        return build_config(AgentRunConfig, raw)
    except ConfigError as exc:
        raise UsageError(f"{Path(run_dir) / 'config.toml'}: {exc}") from None


def check_flags(args: argparse.Namespace) -> None:
    """The numbers given as flags, before anything is read: one line naming the flag and its value."""
    if args.problems is not None and args.problems < 1:
        raise UsageError(f"--problems must be >= 1 (got {args.problems})")
    if args.k is not None and not 1 <= args.k <= 32:
        raise UsageError(f"--k must be in 1..32 (got {args.k})")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UsageError(f"--max-tokens must be >= 1 (got {args.max_tokens})")
    if args.history_turns is not None and args.history_turns < 0:
        raise UsageError(f"--history-turns must be >= 0 (got {args.history_turns})")
    if args.seed is not None and args.seed < 0:
        raise UsageError(f"--seed must be >= 0 (got {args.seed})")
    args.problems = PROBLEMS if args.problems is None else args.problems
    args.k = K if args.k is None else args.k
    args.seed = SEED if args.seed is None else args.seed


def handle(args: argparse.Namespace) -> int:
    check_flags(args)
    if args.run and (args.history or args.skill):
        raise UsageError("give --run, or --history/--skill, not both")
    options = parse_options(args.option)
    context: dict[str, Any] = {}  # the run's engine context, so its episodes fit here as they did there
    seed_paths: list = []  # the run's [skills] paths: its seed skills, when its log did not pin their texts
    run_tokens: int | None = None  # the run's [sampling] max_tokens: its episodes' replies were cut there
    # the run's [agent] history_turns: its prompts were cut there (a 9x9 episode's whole history outgrows
    # the engine's context within a few turns)
    run_history: int | None = None
    model_said = "--model"
    raw = run_toml(args.run, args.task) if args.run and (Path(args.run) / "config.toml").is_file() else None
    history, distilled, seeds = None, [], []
    if args.run:  # what the run left to evaluate: ES weights, distilled skills
        try:
            history, distilled = run_inputs(args.run)
        except (SkillError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    if raw is not None:
        # the run's own task settings, so the held-out problems are the run's kind of problem
        config = run_config(args.run, raw, args.task)
        trained = config.task_options()
        for key, value in options.items():  # on purpose (docs/agents.md), but not unsaid
            if key in trained and trained[key] != value:
                print(f"note: --option {key}={value} differs from the run's {key}={trained[key]}: the held-out "
                      "problems are another kind than it trained on", flush=True)
        options = {**trained, **options}
        seed_paths = list(config.skills.paths)
        run_tokens = config.sampling.max_tokens
        run_history = config.agent.history_turns
        context = {"max_model_len": config.model.max_len}
        if not args.model and config.model.path:
            # the run's own checkpoint: its ES history replays only onto the weights it was recorded on
            args.model, model_said = config.model.path, f"{Path(args.run) / 'config.toml'}: model.path"
            print(f"model: {args.model} (the run's [model] path; --model picks another)", flush=True)
    task = build_task(args.task, options)
    try:
        if args.run:
            # the run's seed skills ([skills], as its log pinned them), shown to every arm, and the ones it
            # distilled (skills/), shown to the skill arms after them, as `coevolve compare` scores its arms
            try:
                seeds = run_seed_skills(args.run, seed_paths)
            except ConfigError as exc:  # an old run's [skills] folder, read now
                raise UsageError(f"{Path(args.run) / 'config.toml'}: {exc}") from None
            skills, origin = distilled, "distilled"
        else:
            history = Path(args.history) if args.history else None
            skills, origin = [load_skill(s) for s in args.skill], "--skill"
    except (SkillError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    arms = args.arms.split(",") if args.arms else [
        a for a in ARMS if (a not in ("esopt", "both") or history) and (a not in ("skill", "both") or skills)]
    constrained = not args.free and bool(getattr(task, "action_pattern", None))
    if args.max_tokens:
        max_tokens, said = args.max_tokens, "--max-tokens"
    elif run_tokens:
        max_tokens, said = run_tokens, "the run's [sampling] max_tokens"
    else:
        max_tokens, said = (96 if args.task == "react_math" else 12), "the default: 96 for react_math, else 12"
    try:
        check_arms(arms, history, skills)
        heldout = drawn_cases(task, "eval", args.problems, args.seed, "--problems")
        check_heldout(task, heldout, _train_cases(task, len(heldout), args.seed))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    history_turns = args.history_turns if args.history_turns is not None else run_history
    length = context.get("max_model_len", ENGINE_CONTEXT)
    if max_tokens >= length:  # (a run's own max_tokens was checked against its max_len when it started)
        whose = "the run's" if args.run else "the default"
        raise UsageError(f"--max-tokens must be < {length}, the engine's context ({whose} model.max_len): a prompt "
                         f"and its reply must fit (got {max_tokens})")
    if args.model is not None:  # (none: the embedded model, which the engine prepares)
        require_model(ModelSection.model_construct(path=args.model, max_len=length), said=model_said)

    print(f"{args.task} {options or ''}: {len(heldout)} held-out problems x k={args.k}, "
          f"arms {', '.join(arms)}, {'constrained' if constrained else 'free'} decoding, "
          f"at most {max_tokens} tokens per turn ({said})"
          + ("" if history_turns is None else
             f", the last {history_turns} turn{'' if history_turns == 1 else 's'} in each prompt")
          + ("" if history_turns is None or args.history_turns is not None else " (the run's [agent] history_turns)"),
          flush=True)
    # what each arm shows, named with where it came from (shown_skills over (skill, origin) pairs: the
    # same selection evaluate_arms makes)
    seeded, own = [(s, "seed") for s in seeds], [(s, origin) for s in skills]
    shown = {arm: shown_skills(arm, own, seeded) for arm in arms}
    if any(shown.values()):
        print("skills in prompt order: " + "; ".join(
            f"{arm}: " + (", ".join(f"{s.name} ({o})" for s, o in pairs) or "none") for arm, pairs in shown.items()),
            flush=True)
    weights = history if any(a in ("esopt", "both") for a in arms) else None
    engine = vllm_engine.Engine(args.model, **engine_options_for(weights), **context)
    began = time.monotonic()
    # each arm's line as it ends, numbered in playing order (tuned arms first), so that they read as
    # progress: the table after them lists the arms in their own order (they read as a second, shuffled one)
    order = play_order(arms)
    if len(order) > 1:
        moved = WEIGHT_ARMS & set(order) and set(order) - WEIGHT_ARMS
        print(f"arms in playing order{' (the ES-tuned first)' if moved else ''}: {', '.join(order)}", flush=True)
    try:
        results = evaluate_arms(engine, task, heldout, arms, args.k, eval_sampling(max_tokens, task), args.seed,
                                history=history, skills=skills, seed_skills=seeds, constrained=constrained,
                                history_turns=history_turns,
                                on_arm=lambda r: print(f"  [{order.index(r.arm) + 1}/{len(order)}] {r.arm} played: "
                                                       f"Mean@{r.k} {r.mean_at_k}  Pass@{r.k} {r.pass_at_k}",
                                                       flush=True))
    except ConstraintError as exc:
        raise UsageError(str(exc)) from None
    except ReplayError as exc:  # found before any episode: the tuned arms replay first
        raise UsageError(f"{exc}; the history replays only onto the weights it was recorded on: is "
                         f"{args.model or 'the embedded model'} the checkpoint the run trained (its [model] path)?") from None
    finally:
        engine.close()
        close = getattr(task, "close", None)
        if close is not None:
            close()
    print(table(results))
    for line in against_base(results, constrained):
        print(line)
    print(f"took {time.monotonic() - began:.0f} s")
    if args.out:
        atomic_write_json(args.out, {
            "task": args.task, "options": options, "problems": len(heldout), "k": args.k,
            "constrained": constrained, "max_tokens": max_tokens, "history_turns": history_turns, "run": args.run,
            "skills": [{"name": s.name, "origin": o} for s, o in [*seeded, *own]],
            "arm_skills": {arm: [s.name for s, _ in pairs] for arm, pairs in shown.items()},
            "results": [r.to_dict() for r in results]})
    return 0


def against_base(results: list[ArmResult], constrained: bool = False) -> list[str]:
    """Each trained arm against the base weights on the same problems and sampling seeds, paired per
    problem measure by measure (evaluate.paired_changes) with the sign test's verdict, in the run table's
    words (change_line): Mean@k, the mean reward, unnamed as it always was (`skill vs base: +0.250: ...`),
    then the others named (`skill vs base (Pass@4): ...`); [] without a base arm. Under constrained
    decoding well-formed is 1 in every arm by construction, so it is not paired; where no measure of any
    arm moved on any problem, one line says so instead of one `+0.000` line per arm and measure."""
    base = next((r for r in results if r.arm == "base"), None)
    if base is None:
        return []
    pairs = [(result, measure, change) for result in results if result is not base
             for measure, change in paired_changes(base, result) if not (constrained and measure == "well-formed")]
    if pairs and all(change["better"] == change["worse"] == 0 for _, _, change in pairs):
        problems = max(change["cases"] for _, _, change in pairs)
        return [f"no arm differs from the base on any problem ({problems} problems, every measure +0.000)"]
    lines = []
    for result, measure, change in pairs:
        named = "" if measure == f"Mean@{result.k}" else f" ({measure})"
        lines.append(f"{result.arm} vs base{named}: {change_line(change)}")
    return lines


def _train_cases(task: Any, n: int, seed: int) -> list:
    # a problems file smaller than n is checked for overlap when it is read (tasks.react_math.load_problems)
    try:
        return task.cases("train", n, seed=seed)
    except ValueError:
        return []
