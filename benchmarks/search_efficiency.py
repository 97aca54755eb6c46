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
The options, run directories, lock and table it shares with
proposal_efficiency.py are in benchmarks/common.py.

    python benchmarks/search_efficiency.py --tasks tsp_aco tsp_construct --seeds 0 1 2 --budget 96 \\
        --lock /tmp/coevolve-heavy.lock --out runs/search-efficiency
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common  # noqa: E402  (after the repository root is on the path)
from coevolve.base.records import SearchSummary, write_record  # noqa: E402

METHODS: dict[str, dict] = {
    "eoh": {},
    "islands": {"islands": {"over": "eoh", "islands": 3, "reset_every": 32}},
    "map_elites": {"map_elites": {"over": "eoh", "descriptors": ["lines", "branches"], "bins": 5}},
}
TEST_INSTANCES = 64  # the first instances of the test set each run's best is scored on


def method_config(method: str, task: str, seed: int, budget: int, max_tokens: int, population: int) -> dict:
    return {**common.search_config(method, task, seed, budget, max_tokens, population), **METHODS[method]}


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
    write_record(cache, score)  # a TestScore: split, size and the instance limit with the objective
    return score.objective


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
            "distinct_valid": len(distinct), "curve": [list(point) for point in summary.best_so_far], "sign": sign,
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
    body = []
    verdicts = []
    for task in sorted({t for t, _ in rows}):
        eoh = rows.get((task, "eoh"), {})
        for method in METHODS:
            runs = rows.get((task, method))
            if not runs:
                continue
            ms = list(runs.values())
            to_eoh = [reached(m["curve"], eoh[s]["best"], m["sign"]) if s in eoh else None for s, m in runs.items()]
            body.append([
                task, method, str(len(ms)), spread([m["best"] for m in ms]), spread([m["first_beat"] for m in ms]),
                f"{sum(m['first_beat'] is not None for m in ms)}/{len(ms)}",
                spread([m["distinct_valid"] for m in ms]), spread([m["test"] for m in ms]),
                spread(to_eoh) if method != "eoh" else "-"])
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
    return common.markdown_table(head, body) + "\n\n" + "\n".join(f"- {v}" for v in verdicts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = common.make_parser(__doc__, ["tsp_aco", "tsp_construct"], "runs/search-efficiency", "--methods",
                                list(METHODS))
    args = common.parse(parser, argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cells = common.cells(out, args.tasks, args.methods, args.seeds)

    def work(cell: common.Cell, engine, sandbox) -> str:
        raw = method_config(cell.arm, cell.task, cell.seed, args.budget, args.max_tokens, args.population)
        summary = common.run_one(cell.directory, raw, engine, sandbox)
        test_score(cell.directory, cell.task, sandbox)
        return f"best {summary.best and summary.best.objective}"

    began = time.perf_counter()
    if not args.analyse_only:
        common.work_through(args, [c for c in cells if common.finished(c.directory, args.budget) is None
                                   or not (c.directory / "test_score.json").exists()], work)
    rows: dict[tuple[str, str], dict[int, dict]] = {}
    for cell in cells:
        summary = common.finished(cell.directory, args.budget)
        if summary is not None:
            rows.setdefault((cell.task, cell.arm), {})[cell.seed] = measures(cell.directory, summary)
    done = sum(len(r) for r in rows.values())
    text = (f"search efficiency: budget {args.budget}, seeds {args.seeds}, population {args.population}, "
            f"max_tokens {args.max_tokens}, test: the first {TEST_INSTANCES} instances of each task's first test "
            f"size; {done} of {len(cells)} runs finished"
            + ("" if args.analyse_only else f", {time.perf_counter() - began:.0f} s this session")
            + ". Medians with [min..max] over the seeds.\n\n" + report(rows, args.budget))
    common.publish(out, text, {f"{t}/{m}": {str(s): {k: v for k, v in x.items() if k != "curve"}
                                            for s, x in r.items()} for (t, m), r in rows.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
