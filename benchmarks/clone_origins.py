"""Where a benchmark's rejected clones came from, read back from finished run
directories (nothing is run): per task and arm, summed over seeds, how many
proposals the fingerprint rejected, of them clones of the template itself
(duplicate_of 0), of the request's own parent, and of any program that scores
exactly the template's objective (the template, or a program equivalent to
it); which operators produced them; how often a parent-taking operator drew
from an archive holding at most one program (it then shows that one program
to every request); how often EoH fell back to i1 after the first step (its
archive was empty); and whether the run beat the template.

    python benchmarks/clone_origins.py RUNS_DIR [--tasks ...] [--arms ...]

RUNS_DIR is a proposal_efficiency.py --out directory (TASK/ARM/seedN).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common  # noqa: E402  (after the repository root is on the path)
from coevolve.runstore import read_jsonl  # noqa: E402

OPERATORS = ("i1", "e1", "e2", "m1", "m2", "repair")


def archive_sizes(directory: Path, seeded: bool) -> dict[int, int]:
    """Programs in the archive before each step (step 0: the seed alone, or nothing)."""
    sizes = {0: int(seeded)}
    for path in (directory / "population").glob("gen_*.json"):
        snapshot = json.loads(path.read_text())
        sizes[snapshot["step"] + 1] = len(snapshot.get("population", []))
    return sizes


def count_run(directory: Path) -> Counter:
    summary = json.loads((directory / "summary.json").read_text())
    context = summary.get("context") or {}
    template = context.get("template_objective")
    seed = context.get("seed")
    candidates = read_jsonl(directory / "candidates.jsonl")
    objective = {c["id"]: c["objective"] for c in candidates}
    if seed:
        objective[0] = seed["objective"]
    sizes = archive_sizes(directory, bool(seed and seed["objective"] is not None))
    n: Counter = Counter(runs=1, candidates=len(candidates), beat=int(bool(context.get("beat_template"))))
    for c in candidates:
        n["valid"] += c["objective"] is not None
        if c["step"] > 0 and c["operator"] == "i1":
            n["i1_again"] += 1
        if c["parents"] and c["operator"] != "repair":
            n["parent_requests"] += 1
            n["one_program"] += sizes.get(c["step"], 0) <= 1
        if c["failure"] != "duplicate":
            continue
        original = c["duplicate_of"]
        n["rejected"] += 1
        n[f"by_{c['operator']}"] += 1
        n["of_template"] += original == 0
        n["of_own_parent"] += original in c["parents"]
        n["of_template_score"] += original == 0 or (template is not None and objective.get(original) is not None
                                                    and abs(objective[original] - template) < 1e-9)
    return n


def table(root: Path, tasks: list[str], arms: list[str]) -> str:
    head = ("task", "arm", "runs", "valid", "rejected", "of the template", "of own parent",
            "of a template-scoring program", "rejected by " + "/".join(OPERATORS),
            "parent requests on a <= 1-program archive", "i1 again (empty archive)", "beat template")
    body = []
    for task in tasks:
        for arm in arms:
            total: Counter = Counter()
            for directory in sorted((root / task / arm).glob("seed*")):
                if (directory / "summary.json").exists():
                    total += count_run(directory)
            if not total["runs"]:
                continue
            body.append([task, arm, str(total["runs"]), f"{total['valid']}/{total['candidates']}",
                         str(total["rejected"]), str(total["of_template"]), str(total["of_own_parent"]),
                         str(total["of_template_score"]), "/".join(str(total[f"by_{o}"]) for o in OPERATORS),
                         f"{total['one_program']}/{total['parent_requests']}", str(total["i1_again"]),
                         f"{total['beat']}/{total['runs']}"])
    return common.markdown_table(head, body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path)
    parser.add_argument("--tasks", nargs="+", default=["tsp_construct", "tsp_aco"])
    parser.add_argument("--arms", nargs="+", default=["eoh", "constrain", "failures", "fingerprint", "trace2skill",
                                                      "all"])
    args = parser.parse_args(argv)
    print(f"clone origins in {args.runs} (summed over the finished seeds)\n\n{table(args.runs, args.tasks, args.arms)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
