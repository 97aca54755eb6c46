"""`coevolve distill RUN_DIR --out skills/NAME`: Trace2Skill over the
trajectories an agent run saved (RUN_DIR/trajectories/*.jsonl), or over the
candidates a heuristic run saved (RUN_DIR/candidates.jsonl: failures with
their kind, message and failing line, the best programs), written as
an Agent Skill folder: error and success analysts propose patches to the
skill (--previous: the skill they patch), merged hierarchically. The skill is written by the local engine (the
embedded model or --model) or by any OpenAI-compatible endpoint
(--endpoint-base-url; --teacher-base-url is its old name)."""

from __future__ import annotations

import argparse
from pathlib import Path

from coevolve.agents.rollout import load_trajectories
from coevolve.agents.trace2skill import DistillSettings, distill
from coevolve.base.config import read_toml
from coevolve.base.errors import UsageError
from coevolve.base.skills import SkillError, load_skill, name_problem
from coevolve.engine.local import INSTALL, engine_installed
from coevolve.engine.openai_client import EndpointError, OpenAIGenerator
from coevolve.engine import vllm_engine  # as a module: tests stand a fake in for vllm_engine.Engine
from coevolve.runstore import read_jsonl
from coevolve.search.population import Candidate
from coevolve.search.skill import distill_candidates
from tasks.registry import UnknownTask, heuristic_task


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("distill", help="distil an agent run's trajectories or a heuristic run's candidates "
                                              "into a SKILL.md (Trace2Skill)",
                              description=__doc__)
    p.add_argument("run_dir", help="agent run directory (holds trajectories/), one trajectories .jsonl file, "
                                   "or a heuristic run directory (holds candidates.jsonl)")
    p.add_argument("--out", required=True, help="skill folder to write, e.g. skills/sudoku-distilled")
    p.add_argument("--endpoint-base-url", "--teacher-base-url", dest="endpoint_base_url",
                   help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--endpoint-model", "--teacher-model", dest="endpoint_model",
                   help="model name at the endpoint (required with --endpoint-base-url)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    p.add_argument("--model", help="local HF checkpoint that distils (default: the embedded model)")
    p.add_argument("--previous", help="existing skill folder that the analysts patch (add / edit / delete sections)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a SKILL.md already in --out (by default refused, unless --out is --previous)")
    p.add_argument("--description", help="skill description (default: generated)")
    p.add_argument("--successes", type=int, default=4, help="success analysts: solved traces analysed next to the failures (default 4)")
    p.add_argument("--max-failed-per-case", type=int, default=1,
                   help="agent runs: failed trajectories analysed per case (default 1)")
    p.add_argument("--include-eval", action="store_true", help="also use held-out evaluation trajectories")
    p.add_argument("--seed", type=int, default=0, help="sampling seed of the analysts' requests (default 0)")
    p.set_defaults(handler=handle)


def trajectory_files(run_dir: Path, include_eval: bool) -> list[Path]:
    if run_dir.is_file():
        return [run_dir]
    folder = run_dir / "trajectories"
    if not folder.is_dir():
        raise UsageError(f"{run_dir}: neither trajectories/ (an agent run) nor candidates.jsonl (a heuristic run) "
                         "is here: give a run directory or one trajectories .jsonl file")
    files = sorted(p for p in folder.glob("*.jsonl") if include_eval or not p.name.startswith("eval_"))
    if not files:
        raise UsageError(f"{folder}: no trajectory .jsonl files")
    return files


def check_out(args: argparse.Namespace) -> None:
    """--out before any model loads: a folder name a skill may have, and no SKILL.md already there that the
    distillation would replace unasked (a hand-written skill, lost; patching one in place is --previous)."""
    out = Path(args.out)
    problem = name_problem(out.name)
    if problem is not None:
        raise UsageError(f"--out {out}: the folder names the skill, and its {problem}")
    patched = args.previous is not None and Path(args.previous).resolve() == out.resolve()
    if (out / "SKILL.md").exists() and not (patched or args.overwrite):
        raise UsageError(f"--out {out} already holds a SKILL.md: distil into another folder, patch it in place "
                         f"(--previous {out}), or pass --overwrite to replace it")


def handle(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not run_dir.exists():
        raise UsageError(f"{run_dir}: no such run directory or file")
    check_out(args)
    if args.endpoint_base_url and not args.endpoint_model:
        raise UsageError("--endpoint-model is required with --endpoint-base-url")
    if args.successes < 0 or args.max_failed_per_case < 1:
        raise UsageError("--successes must be >= 0 and --max-failed-per-case >= 1")
    if run_dir.is_dir() and (run_dir / "candidates.jsonl").exists() and not (run_dir / "trajectories").exists():
        return distill_heuristic_run(args, run_dir)
    try:
        trajectories = [t for f in trajectory_files(run_dir, args.include_eval) for t in load_trajectories(f)]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not trajectories:
        raise UsageError(f"{run_dir}: the trajectory files hold no episodes")
    previous = previous_skill(args)

    generator, engine = teacher(args)
    try:
        skill = distill(
            generator, trajectories, args.out, description=args.description, previous=previous,
            settings=DistillSettings(max_failed_per_case=args.max_failed_per_case, successes=args.successes,
                                     seed=args.seed),
        )
    except (SkillError, EndpointError) as exc:  # EndpointError: the endpoint stopped answering
        raise UsageError(str(exc)) from None
    finally:
        if engine is not None:
            engine.close()
    rules = sum(line.startswith("- ") for line in skill.body.splitlines())
    sections = sum(line.startswith("## ") for line in skill.body.splitlines())
    print(f"wrote {Path(args.out) / 'SKILL.md'}: {_count(rules, 'rule')} in {_count(sections, 'section')} from "
          f"{_count(len(trajectories), 'trajectory', 'trajectories')}")
    return 0


def previous_skill(args: argparse.Namespace):
    """The --previous skill the analysts patch, or None."""
    try:
        return load_skill(args.previous) if args.previous else None
    except SkillError as exc:
        raise UsageError(f"--previous: {exc}") from None


def teacher(args: argparse.Namespace):
    """(the generator that distils, the engine to close afterwards or None).
    An endpoint is probed first (unreachable server, wrong model or key: one
    line before any work); the local model needs the vLLM engine installed."""
    if args.endpoint_base_url:
        generator = OpenAIGenerator(args.endpoint_base_url, args.endpoint_model, api_key_env=args.api_key_env)
        generator.probe()
        return generator, None
    if not engine_installed():
        raise UsageError(f"distilling with the local model needs the vLLM engine, which is not installed here; "
                         f"{INSTALL}, or distil with --endpoint-base-url")
    engine = vllm_engine.Engine(args.model or None)
    return engine, engine


def distill_heuristic_run(args: argparse.Namespace, run_dir: Path) -> int:
    """A heuristic run: error analysts on its failures, success analysts on its
    best programs (--successes of them, 1 at least when any is valid)."""
    try:
        task = heuristic_task(str(read_toml(run_dir / "config.toml").get("run", {}).get("task", "")))
    except (UnknownTask, OSError) as exc:
        raise UsageError(f"{run_dir}/config.toml: {exc}") from None
    candidates = [Candidate.from_dict(c) for c in read_jsonl(run_dir / "candidates.jsonl")]
    if not candidates:
        raise UsageError(f"{run_dir}/candidates.jsonl holds no candidates")
    previous = previous_skill(args)
    failures = sum(not c.valid for c in candidates)
    analysts = min(len(candidates), args.successes + max(1, min(failures, 4)))
    generator, engine = teacher(args)
    try:
        skill = distill_candidates(generator, candidates, task, args.out, previous=previous, analysts=analysts,
                                   successes=args.successes, seed=args.seed)
    except (SkillError, ValueError, EndpointError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        if engine is not None:
            engine.close()
    rules = sum(line.startswith("- ") for line in skill.body.splitlines())
    print(f"wrote {Path(args.out) / 'SKILL.md'}: {_count(rules, 'rule')} from {analysts} analyses of {len(candidates)} "
          f"{task.name} candidates")
    return 0


def _count(n: int, noun: str, plural: str = "") -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
