"""What the skill did in finished runs, read back from their directories (nothing is run): per arm
(a comparison's method or named arm, from each run's config), summed over its runs, the candidates
whose prompt showed a skill and those that showed none, how many of each scored and how many beat
every parent shown (coevolve.search.ensemble.improved, the success a judged trial counts); and for
runs with skill.keep = "judged", their trials: how many kept the version on trial, how many dropped
it, how many could be told apart, and the skill ahead when each run ended.

    python benchmarks/skill_trials.py DIR [DIR ...]

DIR is a run directory or any folder above run directories (a comparison's --out).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coevolve.base.config import read_toml  # noqa: E402  (after the repository root is on the path)
from coevolve.base.records import Candidate, read_summary  # noqa: E402
from coevolve.runstore import read_jsonl  # noqa: E402
from coevolve.search.ensemble import improved  # noqa: E402
from coevolve.search.skill import version_label  # noqa: E402


def run_dirs(roots: list[str]) -> list[Path]:
    found = []
    for root in map(Path, roots):
        found += sorted(p.parent for p in root.rglob("summary.json") if (p.parent / "candidates.jsonl").exists())
    return found


def arm_of(run: Path) -> str:
    """The arm a comparison ran it as (its directory's name less budget and seed), else its method."""
    name = run.name.rsplit("-b", 1)[0] if "-b" in run.name else ""
    config = read_toml(run / "config.toml")
    return name or config["run"]["method"]


def tally(run: Path) -> dict:
    summary = read_summary(run / "summary.json")
    config = read_toml(run / "config.toml")
    candidates = [Candidate.read(c) for c in read_jsonl(run / "candidates.jsonl")]
    by_id = {c.id: c for c in candidates}
    direction = summary.train.direction
    shown: dict[str, dict[str, int]] = {"skill": {}, "none": {}}
    for c in candidates:
        side = shown["none" if c.skill_version is None else "skill"]
        side["candidates"] = side.get("candidates", 0) + 1
        side["valid"] = side.get("valid", 0) + c.valid
        side["improved"] = side.get("improved", 0) + improved(c, (by_id.get(p) for p in c.parents), direction)
    context = summary.context or {}
    trials = context.get("skill_trials", [])
    return {"keep": config.get("skill", {}).get("keep", "latest"), "shown": shown,
            "judged": [t for t in trials if not t.get("final")], "final": [t for t in trials if t.get("final")],
            "beat": context.get("beat_template")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+")
    args = parser.parse_args()
    arms: dict[str, list[dict]] = {}
    for run in run_dirs(args.dirs):
        arms.setdefault(arm_of(run), []).append(tally(run))
    for arm, runs in sorted(arms.items()):
        print(f"{arm}: {len(runs)} runs, skill.keep = {runs[0]['keep']}, beat the template in "
              f"{sum(bool(r['beat']) for r in runs)}")
        for side, label in (("skill", "prompt showed a skill"), ("none", "prompt showed no skill")):
            n, v, i = (sum(r["shown"][side].get(k, 0) for r in runs) for k in ("candidates", "valid", "improved"))
            print(f"  {label:24s} {n:4d} candidates, {v:4d} scored, {i:4d} beat their parents"
                  + (f" ({v / n:.1%} scored, {i / n:.1%} beat)" if n else ""))
        judged = [t for r in runs for t in r["judged"]]
        if judged:
            kept = sum(t["kept"] == t["challenger"] for t in judged)
            print(f"  trials judged at a refresh: {len(judged)}, version on trial kept {kept}, dropped "
                  f"{len(judged) - kept}, told apart {sum(t['distinct'] for t in judged)}")
            ahead = [version_label(t["kept"]) for r in runs for t in r["final"]]
            print(f"  ahead when each run ended: {', '.join(ahead) or '-'}")


if __name__ == "__main__":
    main()
