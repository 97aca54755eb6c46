"""What the skill did in finished runs, read back from their directories (nothing is run): per arm
(a comparison's method or named arm, else the run's method), summed over its runs, what
coevolve.report.collecting.skill_use reads from each (a comparison's report shows the same table):
the candidates whose prompt showed a skill and those that showed none after the first skill refresh
(those before it apart: they showed none only because none was written yet), how many of each scored
and how many beat every parent shown, and what the two sides can be compared for; for skill.keep =
"judged", the trials kept, dropped and told apart and the version ahead when each run ended.

    python benchmarks/skill_trials.py DIR [DIR ...]

DIR is a run directory or any folder above run directories (a comparison's --out).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coevolve.base.config import read_toml  # noqa: E402  (after the repository root is on the path)
from coevolve.base.records import read_summary  # noqa: E402
from coevolve.report.collecting import SKILL_SIDES, skill_use  # noqa: E402
from coevolve.search.skill import version_label  # noqa: E402


def run_dirs(roots: list[str]) -> list[Path]:
    found = []
    for root in map(Path, roots):
        found += sorted(p.parent for p in root.rglob("summary.json") if (p.parent / "candidates.jsonl").exists())
    return found


def arm_of(run: Path) -> str:
    """The arm a comparison ran it as (its directory's name, ARM-bBUDGET-sSEED, less budget and seed),
    else its method."""
    named = re.fullmatch(r"(.+)-b\d+-s\d+", run.name)
    return named.group(1) if named else str(read_toml(run / "config.toml")["run"]["method"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+")
    args = parser.parse_args()
    arms: dict[str, list[dict]] = {}
    for run in run_dirs(args.dirs):
        summary = read_summary(run / "summary.json")
        use = skill_use(run, summary)
        if use is not None:
            keep = read_toml(run / "config.toml").get("skill", {}).get("keep", "latest")
            arms.setdefault(f"{arm_of(run)} (skill.keep = {keep})", []).append(
                {**use, "beat": (summary.context or {}).get("beat_template")})
    for arm, runs in sorted(arms.items()):
        print(f"{arm}: {len(runs)} runs, beat the template in {sum(bool(r['beat']) for r in runs)}")
        for side, label in (("before", "before the first refresh"), ("skill", "skill shown"),
                            ("none", "none shown")):
            n, v, i = (sum(r[side][k] for r in runs) for k in ("candidates", "valid", "improved"))
            print(f"  {label:24s} {n:4d} candidates, {v:4d} scored, {i:4d} beat their parents"
                  + (f" ({v / n:.1%} scored, {i / n:.1%} beat)" if n else ""))
        judged = sum(r["judged"] for r in runs)
        if judged:
            kept, told = sum(r["kept"] for r in runs), sum(r["distinct"] for r in runs)
            print(f"  trials judged at a refresh: {judged}, version on trial kept {kept}, dropped {judged - kept}, "
                  f"told apart {told}")
            print(f"  ahead when each run ended: {', '.join(version_label(v) for r in runs for v in r['ahead'])}")
    if arms:
        print(f"\n{SKILL_SIDES}")


if __name__ == "__main__":
    main()
