"""How the dashboard's answers grow with a run's size: the same four requests
(summary, a page of ranked rows, the lineage tree, one candidate with its
diff) on runs of 1,000 and 10,000 candidates, timed side by side in one
process, after the first look has parsed the files.

    .venv/bin/python benchmarks/dashboard_scale.py [--sizes 1000 10000] [--repeats 5]

Prints the median seconds per round of four requests for each size and the
ratio to the smallest: a page-sized answer should grow far slower than the
run. (tests/test_dashboard.py checks that later looks parse nothing; timings
stay here, where a noisy machine cannot fail the suite.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

from coevolve.dashboard import reader
from coevolve.dashboard.app import create_app

CODE = "def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):\n"


def write_run(path: Path, size: int) -> None:
    """A still-running EoH+Trace2Skill run of `size` candidates under skill.keep = "judged", one in five
    valid, each with a parent 20 back, a refresh every 50 steps (so the run page's skill panel counts
    every candidate by version and judges the open trial on each look)."""
    path.mkdir(parents=True)
    (path / "config.toml").write_text('[run]\nmethod = "eoh+trace2skill"\ntask = "tsp_construct"\nbudget = 20\n'
                                      'seed = 0\n[skill]\nkeep = "judged"\n')
    lines = []
    for cid in range(1, size + 1):
        ok = cid % 5 == 0 or cid == 1
        lines.append(json.dumps({
            "id": cid, "step": cid // 20, "operator": "e1" if cid > 1 else "i1",
            "parents": [max(1, cid - 20)] if cid > 1 else [], "model_state": {"kind": "base"},
            "code": CODE + f"    return unvisited_nodes[{cid % 7}]  # {'x' * 800}\n", "idea": f"idea {cid}",
            "objective": 10.0 - cid / 1e5 if ok else None, "failure": None if ok else "exception",
            "message": "" if ok else f"boom {cid}", "seconds": 0.01, "duplicate_of": None, "reward": None,
            "skill_version": (cid // 1000 + 1) if cid % 2 == 0 else (cid // 1000 or None)}))
    (path / "candidates.jsonl").write_text("\n".join(lines) + "\n")
    events = [{"type": "start", "version": 1}]
    for step in range(size // 20 + 1):
        events.append({"type": "step", "step": step, "operator": "e1",
                       "requests": [{"slot": k, "skill": None} for k in range(20)]})
        if step % 50 == 49:  # a refresh: the open trial judged, a new version written
            version = step // 50 + 1
            events.append({"type": "step", "step": step, "operator": "distill", "requests": [],
                           "skill": {"version": version, "step": step, "text": f"- rule {version}"},
                           "trial": {"step": step, "since": step - 50, "incumbent": version - 2 or None,
                                     "challenger": version - 1, "kept": version - 1, "distinct": False,
                                     "interval": [-0.1, 0.2], "children": {
                                         side: {"candidates": 10, "valid": 2, "improved": 1}
                                         for side in ("challenger", "incumbent")}}})
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def one_round(http: TestClient, name: str, size: int) -> float:
    started = time.perf_counter()
    http.get(f"/api/run/{name}").raise_for_status()
    http.get(f"/api/run/{name}/candidates?offset={size - 50}&limit=50&order=rank").raise_for_status()
    http.get(f"/api/run/{name}/tree").raise_for_status()
    http.get(f"/api/run/{name}/candidate/{size}").raise_for_status()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        names = [f"run{size}" for size in args.sizes]
        for name, size in zip(names, args.sizes):
            write_run(Path(tmp) / name, size)
        with TestClient(create_app(reader.Registry.open([tmp]))) as http:
            for name, size in zip(names, args.sizes):
                one_round(http, name, size)  # the first look parses the files
            # rounds interleaved across sizes, so machine noise falls on all of them alike
            times: dict[int, list[float]] = {size: [] for size in args.sizes}
            panel: dict[int, list[float]] = {size: [] for size in args.sizes}
            for _ in range(args.repeats):
                for name, size in zip(names, args.sizes):
                    times[size].append(one_round(http, name, size))
                    run = reader.HeuristicRun(Path(tmp) / name)  # the skill panel alone, on the parsed files
                    started = time.perf_counter()
                    run.skills()
                    panel[size].append(time.perf_counter() - started)
    base = statistics.median(times[args.sizes[0]])
    print("| candidates | median s per 4 requests | ratio to the smallest | of which the skill panel, s |\n"
          "|---|---|---|---|")
    for size in args.sizes:
        median = statistics.median(times[size])
        print(f"| {size} | {median:.3f} | {median / base:.1f} | {statistics.median(panel[size]):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
