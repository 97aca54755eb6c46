"""Do the diversity methods (issue 20) find better heuristics per evaluation
than plain EoH? Three methods on the same budget, tasks and seeds:

    eoh          one population (EoH's prob-rank parents, survival of the best N)
    islands      FunSearch's islands over EoH: the worse half reset from the better half's best
    map_elites   a MAP-Elites grid over EoH (descriptors: lines, branches), parents from the elites

Per method and task, over the seeds: the median and the range (min..max) of
the best train objective at the budget, the evaluations until the template
is first beaten, the number of distinct valid programs, the test-set score
of each run's best (scored in the sandbox, as `coevolve eval`), and the
evaluations each run needed to reach plain EoH's final best of the same
seed. Where two methods' ranges overlap the table says they cannot be told
apart at this size.

Every run is an ordinary run directory under --out: a finished one is read
back, an unfinished one resumed, so the same command continues after a kill.
One engine and one sandbox serve every run; the machine-wide lock
(--lock, fcntl) is taken for each run (and the engine start) and released in
between, so another benchmark can share the machine. --stop-at HH:MM (UTC)
starts no run after that time; the table then covers the finished runs.

    python benchmarks/search_efficiency.py --tasks tsp_aco tsp_construct --seeds 0 1 2 --budget 96 \\
        --lock /tmp/coevolve-heavy.lock --out runs/search-efficiency
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coevolve.base.records import SearchSummary, read_summary  # noqa: E402  (after the path: run from anywhere)

METHODS: dict[str, dict] = {
    "eoh": {},
    "islands": {"islands": {"over": "eoh", "islands": 3, "reset_every": 32}},
    "map_elites": {"map_elites": {"over": "eoh", "descriptors": ["lines", "branches"], "bins": 5}},
}
TEST_INSTANCES = 64  # the first instances of the test set each run's best is scored on


def method_config(method: str, task: str, seed: int, budget: int, max_tokens: int, population: int) -> dict:
    return {"run": {"method": method, "task": task, "budget": budget, "seed": seed},
            "sampling": {"temperature": 0.7, "top_p": 1.0, "max_tokens": max_tokens},
            "eoh": {"population": population, "offspring": population, "parents": 2},
            "sandbox": {"timeout_s": 30}, **METHODS[method]}


@contextlib.contextmanager
def machine_lock(path: str):
    """The machine-wide lock for one heavy step (none when `path` is empty)."""
    if not path:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def finished(directory: Path, budget: int) -> SearchSummary | None:
    summary = read_summary(directory / "summary.json")
    if summary is not None and summary.evaluations >= budget and not summary.stopped:
        return summary
    return None


def run_one(directory: Path, raw: dict, engine, sandbox) -> SearchSummary:
    from coevolve.base.config import as_dict, build_config, dump_toml
    from coevolve.runstore import RunStore
    from coevolve.search.loop import SearchLoop
    from coevolve.search.runconfig import RunConfig
    from tasks.registry import heuristic_task

    config = build_config(RunConfig, raw)
    store = RunStore.open(directory) if (directory / "config.toml").exists() else RunStore.create(
        directory, dump_toml(as_dict(config)))
    return SearchLoop(config, store, engine, sandbox, heuristic_task(raw["run"]["task"])).run()


def test_score(directory: Path, task: str, sandbox) -> float | None:
    """The test objective of the run's best.py (cached in test_score.json)."""
    from coevolve.compare import score_files
    from tasks.registry import heuristic_task

    cache = directory / "test_score.json"
    if cache.exists():
        return json.loads(cache.read_text())["objective"]
    best = directory / "best.py"
    if not best.exists():
        return None
    size = heuristic_task(task).splits()["test"][0]
    (score,) = score_files([(best.read_text(), task, "test", size)], TEST_INSTANCES, sandbox)
    cache.write_text(json.dumps({"split": "test", "size": size, "limit": TEST_INSTANCES, **score}))
    return score["objective"]


def measures(directory: Path, summary: SearchSummary) -> dict:
    from coevolve.runstore import read_jsonl

    candidates = read_jsonl(directory / "candidates.jsonl")
    template = (summary.context or {}).get("template_objective")
    sign = 1.0 if summary.train.direction == "min" else -1.0
    first_beat = next((c["id"] for c in candidates if c["objective"] is not None and template is not None
                       and sign * c["objective"] < sign * template), None)
    distinct = {c["code"] for c in candidates if c["objective"] is not None and c["code"]}
    score = directory / "test_score.json"
    return {"best": summary.best and summary.best.objective, "first_beat": first_beat,
            "distinct_valid": len(distinct), "curve": summary.best_so_far, "sign": sign,
            "test": json.loads(score.read_text())["objective"] if score.exists() else None}


def reached(curve: list, target: float | None, sign: float) -> int | None:
    """Evaluations until the best-so-far curve is at least as good as `target`."""
    if target is None:
        return None
    return next((int(e) for e, v in curve if sign * v <= sign * target), None)


def spread(values: list) -> str:
    present = sorted(v for v in values if v is not None)
    if not present:
        return "-"
    median = statistics.median(present)
    text = f"{median:.4g}" if len(present) == 1 else f"{median:.4g} [{present[0]:.4g}..{present[-1]:.4g}]"
    return text + (f" ({len(present)}/{len(values)})" if len(present) < len(values) else "")


def apart(a: list, b: list) -> bool:
    """Two methods' values can be told apart here only when their ranges do not overlap."""
    a, b = [v for v in a if v is not None], [v for v in b if v is not None]
    return bool(a and b) and (max(a) < min(b) or max(b) < min(a))


def report(rows: dict[tuple[str, str], dict[int, dict]], budget: int) -> str:
    head = ("task", "method", "seeds", "best train objective", "evals to beat template", "template beaten",
            "distinct valid programs", "test objective (best.py)", "evals to EoH's final best (same seed)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    verdicts = []
    for task in sorted({t for t, _ in rows}):
        eoh = rows.get((task, "eoh"), {})
        for method in METHODS:
            runs = rows.get((task, method))
            if not runs:
                continue
            ms = list(runs.values())
            to_eoh = [reached(m["curve"], eoh[s]["best"], m["sign"]) if s in eoh else None for s, m in runs.items()]
            lines.append("| " + " | ".join([
                task, method, str(len(ms)), spread([m["best"] for m in ms]), spread([m["first_beat"] for m in ms]),
                f"{sum(m['first_beat'] is not None for m in ms)}/{len(ms)}",
                spread([m["distinct_valid"] for m in ms]), spread([m["test"] for m in ms]),
                spread(to_eoh) if method != "eoh" else "-"]) + " |")
            if method != "eoh" and eoh:
                for key, what in (("best", "best train objective"), ("test", "test objective")):
                    mine, theirs = [m[key] for m in ms], [m[key] for m in eoh.values()]
                    if all(v is None for v in mine) or all(v is None for v in theirs):
                        verdicts.append(f"{task}: no {what} to compare {method} with eoh on (no run has one).")
                    elif not apart(mine, theirs):
                        verdicts.append(f"{task}: {method} and eoh cannot be told apart on the {what} "
                                        f"(their ranges over {len(ms)} and {len(eoh)} seeds overlap).")
                    else:
                        better = statistics.median(v for v in mine if v is not None) * ms[0]["sign"] < \
                            statistics.median(v for v in theirs if v is not None) * ms[0]["sign"]
                        verdicts.append(f"{task}: {method} is {'better' if better else 'worse'} than eoh on the {what} "
                                        f"in every seed (the ranges do not overlap; {len(ms)} seeds is still few).")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {v}" for v in verdicts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["tsp_aco", "tsp_construct"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=96)
    parser.add_argument("--population", type=int, default=6, help="EoH population and offspring per operator")
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument("--out", default="runs/search-efficiency")
    parser.add_argument("--lock", default="", help="a lock file taken (fcntl) for each run and the engine start")
    parser.add_argument("--stop-at", default="", help="HH:MM UTC: start no run after this time")
    parser.add_argument("--analyse-only", action="store_true", help="start no engine: tabulate the finished runs")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # seeds outermost: a benchmark stopped early holds every method on the first seeds
    cells = [(task, method, seed, out / task / method / f"seed{seed}")
             for seed in args.seeds for task in args.tasks for method in args.methods]

    def too_late() -> bool:
        if not args.stop_at:
            return False
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M")
        return now >= args.stop_at

    began = time.perf_counter()
    todo = [c for c in cells if finished(c[3], args.budget) is None or not (c[3] / "test_score.json").exists()]
    if todo and not args.analyse_only and not too_late():
        from coevolve.engine.vllm_engine import Engine
        from coevolve.sandbox import Sandbox

        with machine_lock(args.lock):
            engine = Engine(None)
        try:
            with Sandbox(timeout_s=30) as sandbox:
                for task, method, seed, directory in todo:
                    if too_late():
                        print(f"--stop-at {args.stop_at}: no more runs", flush=True)
                        break
                    started = time.perf_counter()
                    with machine_lock(args.lock):
                        if too_late():  # the wait for the lock may have passed --stop-at
                            print(f"--stop-at {args.stop_at}: no more runs", flush=True)
                            break
                        summary = finished(directory, args.budget) or run_one(
                            directory, method_config(method, task, seed, args.budget, args.max_tokens,
                                                     args.population), engine, sandbox)
                        test_score(directory, task, sandbox)
                    best = summary.best and summary.best.objective
                    print(f"{task} {method} seed {seed}: best {best}, {time.perf_counter() - started:.0f} s", flush=True)
        finally:
            engine.close()
    rows: dict[tuple[str, str], dict[int, dict]] = {}
    for task, method, seed, directory in cells:
        summary = finished(directory, args.budget)
        if summary is not None:
            rows.setdefault((task, method), {})[seed] = measures(directory, summary)
    done = sum(len(r) for r in rows.values())
    text = (f"search efficiency: budget {args.budget}, seeds {args.seeds}, population {args.population}, "
            f"max_tokens {args.max_tokens}, test: the first {TEST_INSTANCES} instances of each task's first test "
            f"size; {done} of {len(cells)} runs finished"
            + ("" if args.analyse_only else f", {time.perf_counter() - began:.0f} s this session")
            + ". Medians with [min..max] over the seeds.\n\n" + report(rows, args.budget))
    (out / "table.md").write_text(text)
    (out / "measures.json").write_text(json.dumps(
        {f"{t}/{m}": {str(s): {k: v for k, v in x.items() if k != "curve"} for s, x in r.items()}
         for (t, m), r in rows.items()}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
