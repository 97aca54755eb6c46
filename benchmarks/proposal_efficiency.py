"""How much of the evaluation budget do proposals waste, and does the context
that learns (issue 25) win it back? Arms on the same budget, tasks and seeds:

    eoh              plain EoH: free decoding, no failures shown, clones scored
    +failures        failures in the next prompt, and the repair operator in the plan
    +constrain       the template's exact def line forced at decoding
    +fingerprint     clones of earlier candidates and of the template rejected unscored
    +trace2skill     eoh+trace2skill: a skill distilled from the run's candidates in every prompt
    all              everything above together

Per arm (mean and standard deviation over seeds): the share of evaluations lost
to parse / signature / syntax / exception / invalid (timeouts, crashes and
memory count as invalid), the valid rate, rejected duplicates, evaluations to
the first program that beats the template, the best objective at the budget,
and seconds per evaluation. Every run is an ordinary run directory under
--out; a finished one is read back, an unfinished one resumed, so the same
command continues after a kill. One engine and one sandbox serve every run.
Runs go seed by seed (every task and arm of seed 0, then seed 1, ...), so a
benchmark stopped early leaves balanced partial results.

    python benchmarks/proposal_efficiency.py --lock /tmp/coevolve-heavy.lock --stop-at 20:40 \
        --tasks tsp_construct tsp_aco --seeds 0 1 2 --budget 96 --out runs/proposal-efficiency

--lock takes the machine's engine lock only while loading the engine and
during each run, so short engine jobs of others interleave between runs;
--stop-at starts no run after that UTC time (the table covers the finished ones).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coevolve.base.records import SearchSummary, read_summary  # noqa: E402  (after the path: run from anywhere)

OFF = {"failures": False, "constrain": False, "fingerprint": False}
ARMS: dict[str, dict] = {
    "eoh": {"method": "eoh", "context": OFF, "repair": False},
    "+failures": {"method": "eoh", "context": {**OFF, "failures": True}, "repair": True},
    "+constrain": {"method": "eoh", "context": {**OFF, "constrain": True}, "repair": False},
    "+fingerprint": {"method": "eoh", "context": {**OFF, "fingerprint": True}, "repair": False},
    "+trace2skill": {"method": "eoh+trace2skill", "context": OFF, "repair": False},
    "all": {"method": "eoh+trace2skill", "context": {"failures": True, "constrain": True, "fingerprint": True},
            "repair": True},
}
LOST = {"parse": "parse", "bad_signature": "signature", "missing_function": "signature", "syntax": "syntax",
        "exception": "exception", "invalid": "invalid", "timeout": "invalid", "crash": "invalid",
        "memory": "invalid"}
COLUMNS = ("parse", "signature", "syntax", "exception", "invalid")


def arm_config(arm: str, task: str, seed: int, budget: int, max_tokens: int, population: int) -> dict:
    spec = ARMS[arm]
    operators = ["e1", "e2", "m1", "m2"] + (["repair"] if spec["repair"] else [])
    return {"run": {"method": spec["method"], "task": task, "budget": budget, "seed": seed},
            "sampling": {"temperature": 0.7, "top_p": 1.0, "max_tokens": max_tokens},
            "eoh": {"population": population, "offspring": population, "operators": operators, "parents": 2},
            "context": dict(spec["context"]),
            "skill": {"every": 3, "analysts": 2, "successes": 1, "max_tokens": 128},
            "sandbox": {"timeout_s": 30}}


def run_one(directory: Path, raw: dict, engine, sandbox) -> SearchSummary:
    from coevolve.base.config import as_dict, build_config, dump_toml
    from coevolve.runstore import RunStore
    from coevolve.search.loop import SearchLoop
    from coevolve.search.runconfig import RunConfig
    from tasks.registry import heuristic_task

    summary = read_summary(directory / "summary.json")
    if summary is not None and summary.evaluations >= raw["run"]["budget"]:
        return summary
    config = build_config(RunConfig, raw)
    store = RunStore.open(directory) if (directory / "config.toml").exists() else RunStore.create(
        directory, dump_toml(as_dict(config)))
    return SearchLoop(config, store, engine, sandbox, heuristic_task(raw["run"]["task"])).run()


def measures(directory: Path, summary: SearchSummary) -> dict:
    from coevolve.runstore import read_jsonl

    candidates = read_jsonl(directory / "candidates.jsonl")
    used = summary.evaluations
    lost = {name: 0 for name in COLUMNS}
    for c in candidates:
        if c["failure"] in LOST:
            lost[LOST[c["failure"]]] += 1
    template = (summary.context or {}).get("template_objective")
    direction = summary.train.direction
    first_beat = None
    if template is not None:
        for c in candidates:
            if c["objective"] is not None and (c["objective"] < template if direction == "min"
                                               else c["objective"] > template):
                first_beat = c["id"]
                break
    timing = json.loads((directory / "timing.json").read_text()) if (directory / "timing.json").exists() else {}
    proposals = len(candidates)
    echoes = sum(c["objective"] is not None and template is not None and abs(c["objective"] - template) < 1e-9
                 for c in candidates)
    return {**{f"lost_{k}": v / used for k, v in lost.items()},
            "valid_rate": sum(c["objective"] is not None for c in candidates) / proposals if proposals else 0.0,
            # valid programs that score exactly what the template scores: mostly the template echoed back
            "template_echo_rate": echoes / proposals if proposals else 0.0,
            "rejected": sum(c["failure"] == "duplicate" for c in candidates),
            "first_beat": first_beat, "best": summary.best and summary.best.objective,
            "s_per_eval": timing.get("total_s", 0.0) / used if used else 0.0}


@contextlib.contextmanager
def held(lock: str) -> Iterator[None]:
    """An exclusive flock on `lock` (the one `flock(1)` takes), or nothing."""
    if not lock:
        yield
        return
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def stop_time(text: str) -> datetime.datetime | None:
    """The next `HH:MM` in UTC (tomorrow's when today's has passed, so a deadline
    after midnight works); ValueError when malformed."""
    if not text:
        return None
    hour, minute = (int(part) for part in text.split(":"))
    now = datetime.datetime.now(datetime.timezone.utc)
    at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return at if at > now else at + datetime.timedelta(days=1)


def fmt(values: list, digits: str = ".2f", percent: bool = False) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    scale = 100.0 if percent else 1.0
    mean = statistics.fmean(present) * scale
    text = f"{mean:{digits}}" + ("%" if percent else "")
    if len(present) > 1:
        text += f" ± {statistics.stdev(present) * scale:{digits}}"
    if len(present) < len(values):
        text += f" ({len(present)}/{len(values)})"
    return text


def table(rows: dict[tuple[str, str], list[dict]]) -> str:
    head = ("task", "arm", "seeds") + tuple(f"lost: {c}" for c in COLUMNS) + (
        "valid rate", "valid = template score", "rejected", "evals to beat template", "best objective", "s / eval")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (task, arm), ms in rows.items():
        cells = [task, arm, str(len(ms))]
        cells += [fmt([m[f"lost_{c}"] for m in ms], ".1f", percent=True) for c in COLUMNS]
        cells += [fmt([m["valid_rate"] for m in ms], ".1f", percent=True),
                  fmt([m["template_echo_rate"] for m in ms], ".1f", percent=True), fmt([m["rejected"] for m in ms], ".1f"),
                  fmt([m["first_beat"] for m in ms], ".0f"), fmt([m["best"] for m in ms], ".4f"),
                  fmt([m["s_per_eval"] for m in ms], ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["tsp_construct", "tsp_aco"])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=96)
    parser.add_argument("--population", type=int, default=6, help="EoH population and offspring per operator")
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument("--out", default="runs/proposal-efficiency")
    parser.add_argument("--model", default="", help="HF checkpoint (default: the embedded model)")
    parser.add_argument("--analyse-only", action="store_true",
                        help="start no engine: tabulate the finished runs under --out")
    parser.add_argument("--lock", default="", help="file to flock while loading the engine and during each run")
    parser.add_argument("--stop-at", default="", help="HH:MM (UTC): start no run after it")
    args = parser.parse_args(argv)
    try:
        stop = stop_time(args.stop_at)
    except ValueError:
        parser.error(f"--stop-at: expected HH:MM (UTC), got {args.stop_at!r}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cells = [(task, arm, seed, out / task / arm.replace("+", "") / f"seed{seed}")
             for seed in args.seeds for task in args.tasks for arm in args.arms]

    began = time.perf_counter()
    rows: dict[tuple[str, str], list[dict]] = {}
    if args.analyse_only:
        for task, arm, seed, directory in cells:
            summary = read_summary(directory / "summary.json")
            if summary is not None:
                rows.setdefault((task, arm), []).append(measures(directory, summary))
    else:
        from coevolve.engine.vllm_engine import Engine
        from coevolve.sandbox import Sandbox

        with held(args.lock):
            engine = Engine(args.model or None)
        try:
            with Sandbox(timeout_s=30) as sandbox:
                for task, arm, seed, directory in cells:
                    if stop is not None and datetime.datetime.now(datetime.timezone.utc) >= stop:
                        print(f"--stop-at {args.stop_at} reached: {task} {arm} seed {seed} and later not run",
                              flush=True)
                        break
                    raw = arm_config(arm, task, seed, args.budget, args.max_tokens, args.population)
                    with held(args.lock):
                        started = time.perf_counter()
                        summary = run_one(directory, raw, engine, sandbox)
                        ran = time.perf_counter() - started
                    m = measures(directory, summary)
                    rows.setdefault((task, arm), []).append(m)
                    print(f"{datetime.datetime.now(datetime.timezone.utc):%H:%M} {task} {arm} seed {seed}: "
                          f"valid {m['valid_rate']:.0%}, best {m['best']}, {ran:.0f} s", flush=True)
        finally:
            engine.close()
    text = (f"proposal efficiency: budget {args.budget}, seeds {args.seeds}, population {args.population}, "
            f"max_tokens {args.max_tokens}, "
            + ("tabulated from the finished runs" if args.analyse_only else f"{time.perf_counter() - began:.0f} s in all")
            + f"\n\n{table(rows)}\n")
    (out / "table.md").write_text(text)
    (out / "measures.json").write_text(json.dumps({f"{t}/{a}": ms for (t, a), ms in rows.items()}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
