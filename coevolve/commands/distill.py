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
import dataclasses
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from coevolve.agents.rollout import load_trajectories
from coevolve.agents.trace2skill import DistillSettings, distill, select_traces
from coevolve.base.config import build_config, read_toml
from coevolve.base.durable import atomic_write_bytes, refused_write
from coevolve.base.errors import UsageError
from coevolve.base.sections import EndpointSection
from coevolve.base.skillpatch import DEFAULT_SAMPLING, RuleOrigins, plural
from coevolve.base.skills import SkillError, load_skill, name_problem
from coevolve.engine.base import Sampling
from coevolve.engine.local import INSTALL, engine_installed
from coevolve.engine.openai_client import EndpointError, OpenAIGenerator
from coevolve.engine import vllm_engine  # as a module: tests stand a fake in for vllm_engine.Engine
from coevolve.runstore import read_jsonl
from coevolve.search.population import Candidate
from coevolve.search.progress import ProgressBar
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
    p.add_argument("--max-tokens", type=int, default=DEFAULT_SAMPLING.max_tokens,
                   help=f"the teacher's reply limit per analysis and merge (default {DEFAULT_SAMPLING.max_tokens}, "
                        "for the embedded model; a larger served teacher writes longer analyses)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar over the teacher's requests")
    p.set_defaults(handler=handle)


def trajectory_files(run_dir: Path, include_eval: bool) -> list[Path]:
    if run_dir.is_file():
        if run_dir.name == "candidates.jsonl":  # read as trajectories, its records fail on Python's terms
            raise UsageError(f"{run_dir}: this is a heuristic run's candidates.jsonl: give its run directory "
                             f"({run_dir.parent})")
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
    """--out before any model loads: a folder name a skill may have, no file where the folder goes (found
    only when the skill is written, every teacher request made), and no SKILL.md already there that the
    distillation would replace unasked (a hand-written skill, lost; patching one in place is --previous)."""
    out = Path(args.out)
    problem = name_problem(out.name)
    if problem is not None:
        raise UsageError(f"--out {out}: the folder names the skill, and its {problem}")
    for path in (out, *out.parents):  # a file at --out or above it: the skill is written after the teacher's work
        if path.is_dir():
            break
        if os.path.lexists(path):  # a dangling link is in the way too
            raise UsageError(f"--out: cannot make the directory {out}: a file is in the way ({path})")
    patched = args.previous is not None and Path(args.previous).resolve() == out.resolve()
    if (out / "SKILL.md").exists() and not (patched or args.overwrite):
        raise UsageError(f"--out {out} already holds a SKILL.md: distil into another folder, patch it in place "
                         f"(--previous {out}), or pass --overwrite to replace it")
    check_writable(out)


# more than a SKILL.md holds (at most 80 lines): a full file system that takes an empty file may not take the skill
PROBE_BYTES = 64 * 1024


def check_writable(out: Path) -> None:
    """A file written (and removed) where the skill's first write goes, --out or the nearest folder above it
    that exists: a read-only, full or not-the-user's folder is refused before the teacher's work, not after."""
    folder = next(path for path in (out, *out.parents) if path.is_dir())
    probe = folder / ".coevolve-distill-check"
    try:
        atomic_write_bytes(probe, bytes(PROBE_BYTES))
        probe.unlink()
    except OSError as exc:
        if refused_write(exc) is None:
            raise
        # refused_write's wording, naming the file the user asked for rather than the probe
        reason = exc.strerror or os.strerror(exc.errno)
        raise UsageError(f"--out: cannot write {out / 'SKILL.md'}: {reason}; distil into a writable folder") from None


def handle(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not run_dir.exists():
        raise UsageError(f"{run_dir}: no such run directory or file")
    check_out(args)
    if args.endpoint_base_url and not args.endpoint_model:
        raise UsageError("--endpoint-model is required with --endpoint-base-url")
    if args.successes < 0 or args.max_failed_per_case < 1:
        raise UsageError("--successes must be >= 0 and --max-failed-per-case >= 1")
    if args.max_tokens < 1:
        raise UsageError(f"--max-tokens must be >= 1 (got {args.max_tokens})")
    if run_dir.is_dir() and (run_dir / "candidates.jsonl").exists() and not (run_dir / "trajectories").exists():
        return distill_heuristic_run(args, run_dir)
    try:
        trajectories = [t for f in trajectory_files(run_dir, args.include_eval) for t in load_trajectories(f)]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not trajectories:
        raise UsageError(f"{run_dir}: the trajectory files hold no episodes")
    previous = previous_skill(args)
    settings = DistillSettings(max_failed_per_case=args.max_failed_per_case, successes=args.successes,
                               seed=args.seed, sampling=teacher_sampling(args))
    analysts = len(select_traces(trajectories, settings.max_failed_per_case, settings.successes))
    generator, engine = teacher(args)
    try:
        with watched(generator, analysts, f"distill {trajectories[0].task}", args.no_progress) as watched_teacher:
            _, origins = distill(watched_teacher, trajectories, args.out, description=args.description,
                                 previous=previous, settings=settings)
    except (SkillError, EndpointError) as exc:  # EndpointError: the endpoint stopped answering
        raise UsageError(str(exc)) from None
    finally:
        if engine is not None:
            engine.close()
    report(args.out, origins, plural(len(trajectories), "trajectory", "trajectories"))
    return 0


def report(out: str, origins: RuleOrigins, what: str) -> None:
    """The one line both run kinds end with: where the rules came from, counted as they were made."""
    print(f"wrote {Path(out) / 'SKILL.md'}: {origins.summary()} from {what}")


class WatchedTeacher:
    """The teacher behind a bar over its requests, on stderr like a run's. An endpoint's replies arrive
    one by one (`streams`), and the bar counts each; the engine answers the analysts' batch at once
    (asked one at a time, it would lose its batching), so there the bar moves when the call returns,
    and meanwhile a ticker redraws it, so that its clock shows the wait is the teacher's."""

    def __init__(self, generator: Any, bar: ProgressBar) -> None:
        self.generator, self.bar = generator, bar
        self.lock = threading.Lock()  # an endpoint's replies arrive on its request threads

    def chat(self, conversations: list, sampling: Any, seeds: list[int] | None = None,
             constraints: Any = None) -> list:
        streams = getattr(self.generator, "streams", False)
        extra: dict[str, Any] = {"constraints": constraints} if constraints else {}
        if streams:
            extra["on_each"] = lambda index, completion: self.advance(1)
        done = threading.Event()
        ticker = threading.Thread(target=self.tick, args=(done,), daemon=True)
        ticker.start()
        try:
            completions = self.generator.chat(conversations, sampling, seeds=seeds, **extra)
        finally:
            done.set()
            ticker.join()
        if not streams:
            self.advance(len(conversations))
        return completions

    def advance(self, requests: int) -> None:
        with self.lock:
            used = self.bar.tqdm.n + requests
            # condensing calls come after the analysts: the total grows to count them
            self.bar.tqdm.total = max(self.bar.tqdm.total, used)
            self.bar.update(used, {})

    def tick(self, done: threading.Event) -> None:
        while not done.wait(1.0):
            with self.lock:
                self.bar.tqdm.refresh()


@contextmanager
def watched(generator: Any, analysts: int, label: str, quiet: bool) -> Iterator[Any]:
    """The generator behind a bar over its requests, closed afterwards (`quiet`, --no-progress: the
    generator itself)."""
    if quiet:
        yield generator
        return
    bar = ProgressBar(analysts, label, unit="request")
    try:
        yield WatchedTeacher(generator, bar)
    finally:
        bar.close()


def previous_skill(args: argparse.Namespace):
    """The --previous skill the analysts patch, or None."""
    try:
        return load_skill(args.previous) if args.previous else None
    except SkillError as exc:
        raise UsageError(f"--previous: {exc}") from None


# the keys an endpoint's errors name, as this command takes them
ENDPOINT_FLAGS = {"endpoint.base_url": "--endpoint-base-url", "endpoint.model": "--endpoint-model",
                  "endpoint.api_key_env": "--api-key-env"}


def flags_named(message: str) -> str:
    """An [endpoint] error as distill's user gave the values: its flags in place of the TOML keys."""
    message = message.removeprefix("config error: ")
    for key, flag in ENDPOINT_FLAGS.items():
        message = message.replace(key, flag)
    return message


def teacher(args: argparse.Namespace):
    """(the generator that distils, the engine to close afterwards or None).
    An endpoint is probed first (unreachable server, wrong model or key: one
    line before any work); the local model needs the vLLM engine installed."""
    if args.endpoint_base_url:
        try:  # the [endpoint] section's checks (an http(s) URL first), then the probe, named by their flags
            section = build_config(EndpointSection, {"base_url": args.endpoint_base_url, "model": args.endpoint_model,
                                                     "api_key_env": args.api_key_env}, "endpoint")
            generator = OpenAIGenerator(section.base_url, section.model, api_key_env=section.api_key_env)
            generator.probe()
        except UsageError as exc:  # ConfigError and EndpointConfigError
            raise UsageError(flags_named(str(exc))) from None
        return generator, None
    if not engine_installed():
        raise UsageError(f"distilling with the local model needs the vLLM engine, which is not installed here; "
                         f"{INSTALL}, or distil with --endpoint-base-url")
    engine = vllm_engine.Engine(args.model or None)
    return engine, engine


def teacher_sampling(args: argparse.Namespace) -> Sampling:
    """The analysts' and merges' sampling: the runs' default, at --max-tokens."""
    return dataclasses.replace(DEFAULT_SAMPLING, max_tokens=args.max_tokens)


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
        with watched(generator, analysts, f"distill {task.name}", args.no_progress) as watched_teacher:
            _, origins = distill_candidates(watched_teacher, candidates, task, args.out, previous=previous,
                                            analysts=analysts, successes=args.successes, seed=args.seed,
                                            sampling=teacher_sampling(args), description=args.description)
    except (SkillError, ValueError, EndpointError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        if engine is not None:
            engine.close()
    report(args.out, origins, f"{len(candidates)} {task.name} candidates")
    return 0
