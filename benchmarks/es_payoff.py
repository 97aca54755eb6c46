"""Does low-rank weight co-evolution pay on heuristic design? Two arms, same plan, same seeds:

    sample        G proposals per step from the base weights
    sample+esopt  G proposals per step, one per low-rank ES member, all in one batch,
                  then one ES update from the members' rewards

Each arm is an ordinary `coevolve run` (its own run directory, resumable: run the
same command again after a kill and it continues). At the end it prints, per arm,
the valid-candidate rate, the template-echo rate and the best objective in the
first and the last `--window` steps, and the wall time per step.

    flock /tmp/coevolve-heavy.lock python benchmarks/es_payoff.py --task tsp_aco \
        --members 16 --generations 30 --out runs/payoff-tsp_aco
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ARMS = ("sample", "sample+esopt")


def config_text(task: str, method: str, members: int, generations: int, seed: int, max_tokens: int,
                timeout_s: float, rank: int) -> str:
    """One TOML for either arm: the same steps of `members` proposals; the ES arm adds
    one low-rank ES generation per step (one proposal per member)."""
    text = (f'[run]\nmethod = "{method}"\ntask = "{task}"\nbudget = {members * generations}\nseed = {seed}\n\n'
            f"[sampling]\ntemperature = 0.7\ntop_p = 1.0\nmax_tokens = {max_tokens}\n\n"
            f"[sample]\nbatch = {members}\npopulation = 10\n\n[sandbox]\ntimeout_s = {timeout_s}\n")
    if method.endswith("+esopt"):
        text += (f'\n[es]\npopulation = {members}\nproposals_per_member = 1\nsigma = 1e-3\nsigma_end = 1e-4\n'
                 f'schedule = "cosine"\nalpha = 5e-4\nnoise = "lowrank"\nrank = {rank}\n')
    return text


def run_arm(out: Path, args: argparse.Namespace, method: str) -> Path:
    run_dir = out / method.replace("+", "_")
    if (run_dir / "summary.json").exists() and json.loads((run_dir / "summary.json").read_text()).get(
            "evaluations", 0) >= args.members * args.generations:
        print(f"{method}: already finished in {run_dir}", flush=True)
        return run_dir
    config = out / f"{method.replace('+', '_')}.toml"
    config.write_text(config_text(args.task, method, args.members, args.generations, args.seed,
                                  args.max_tokens, args.timeout_s, args.rank))
    cmd = [sys.executable, "-m", "coevolve", "run"]
    cmd += ["--resume", str(run_dir)] if (run_dir / "config.toml").exists() else [str(config), "--out", str(run_dir)]
    print(f"{method}: {' '.join(cmd[1:])}", flush=True)
    began = time.monotonic()
    done = subprocess.run(cmd + ["--no-progress"], capture_output=True, text=True)
    print(f"{method}: exit {done.returncode} after {time.monotonic() - began:.0f} s", flush=True)
    if done.returncode != 0:
        raise SystemExit(f"{method} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return run_dir


def window_stats(records: list[dict], steps: list[int], task: str) -> dict:
    from coevolve.report import starting_point

    chosen = [r for r in records if r["step"] in steps]
    valid = [r for r in chosen if r.get("objective") is not None]
    echo = [starting_point(r.get("code") or "", task) == "template" for r in valid]
    return {"steps": [min(steps), max(steps)], "candidates": len(chosen), "valid": len(valid),
            "valid_rate": len(valid) / len(chosen) if chosen else 0.0,
            "template_echoes": sum(echo),
            "best": min((r["objective"] for r in valid), default=None),
            "best_not_template": min((r["objective"] for r, e in zip(valid, echo) if not e), default=None)}


def analyse(run_dir: Path, task: str, window: int) -> dict:
    records = [json.loads(line) for line in (run_dir / "candidates.jsonl").read_text().splitlines() if line.strip()]
    steps = sorted({r["step"] for r in records})
    # a run still going (or killed) has no summary yet: its candidates are still worth a look
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    timing = json.loads((run_dir / "timing.json").read_text()) if (run_dir / "timing.json").exists() else {}
    blocks = [steps[i:i + window] for i in range(0, len(steps), window)]
    valid_by_block = [window_stats(records, block, task)["valid"] for block in blocks]
    best = min((r for r in records if r.get("objective") is not None), key=lambda r: r["objective"], default=None)
    return {"run_dir": str(run_dir), "steps": len(steps), "evaluations": len(records),
            "valid_by_block": valid_by_block,
            "best_step": None if best is None else best["step"],
            "first": window_stats(records, steps[:window], task), "last": window_stats(records, steps[-window:], task),
            "all": window_stats(records, steps, task), "best": summary.get("best"), "timing": timing,
            "es": summary.get("es")}


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.5f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="tsp_aco")
    p.add_argument("--members", type=int, default=16, help="proposals per step = ES members (default 16)")
    p.add_argument("--generations", type=int, default=30, help="steps (= ES generations in the ES arm)")
    p.add_argument("--window", type=int, default=5, help="first / last steps compared (default 5)")
    p.add_argument("--max-tokens", type=int, default=384)
    p.add_argument("--timeout-s", type=float, default=60.0)
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arms", default=",".join(ARMS), help="which arms to run (default both)")
    p.add_argument("--analyse-only", action="store_true", help="print the table of the runs in --out")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    arms = [a for a in args.arms.split(",") if a]
    for arm in arms:
        if arm not in ARMS:
            raise SystemExit(f"--arms: unknown arm {arm!r} (choose from {', '.join(ARMS)})")
    if not args.analyse_only:
        for arm in arms:
            run_arm(out, args, arm)
    results = {}
    for arm in arms:
        run_dir = out / arm.replace("+", "_")
        if (run_dir / "candidates.jsonl").exists():
            results[arm] = analyse(run_dir, args.task, args.window)
    print(f"\n{args.task}: {args.members} proposals per step, seed {args.seed}; first vs last {args.window} steps")
    header = ["arm", "steps", "valid first", "valid last", "template echoes first/last", "best first",
              "best last", "best non-template first/last", "valid all", "best all (step)", "s per step"]
    rows = []
    for arm, r in results.items():
        f, l = r["first"], r["last"]
        per_step = r["timing"].get("total_s", 0) / max(r["steps"], 1)
        rows.append([arm, str(r["steps"]), f"{f['valid']}/{f['candidates']} ({f['valid_rate']:.0%})",
                     f"{l['valid']}/{l['candidates']} ({l['valid_rate']:.0%})",
                     f"{f['template_echoes']}/{l['template_echoes']}", fmt(f["best"]), fmt(l["best"]),
                     f"{fmt(f['best_not_template'])} / {fmt(l['best_not_template'])}",
                     f"{r['all']['valid']}/{r['all']['candidates']} ({r['all']['valid_rate']:.0%})",
                     f"{fmt(r['all']['best'])} ({r['best_step']})", f"{per_step:.0f}"])
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(x.ljust(w) for x, w in zip(row, widths)))
    for arm, r in results.items():
        print(f"{arm}: valid candidates per {args.window} steps: {r['valid_by_block']}")
    (out / "payoff.json").write_text(json.dumps(results, indent=2))
    print(f"results: {out / 'payoff.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
