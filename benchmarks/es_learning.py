"""ES learning speed, full vs low-rank noise, side by side in one run.

The reward is the one of tests/test_es_learns.py (replies finished within 16
new tokens, dense form, greedy, 16 questions). Both modes use the same seeds,
population, σ schedule and α; each mode runs in a fresh process (one engine
at a time). Printed: the base-weight fitness after every generation, and the
wall seconds spent, so reward per generation and per wall-second compare.

    python benchmarks/es_learning.py [--generations 6] [--population 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(mode: str, generations: int, population: int, sigma: float, alpha: float) -> dict:
    import tempfile

    sys.path.insert(0, str(ROOT / "tests"))
    from test_es_learns import GREEDY, LIMIT, QUESTIONS, measure

    from coevolve.engine.base import MemberJob
    from coevolve.engine.vllm_engine import Engine
    from coevolve.es import ESConfig, ESOpt

    engine = Engine(**({"noise": "lowrank", "rank": 1, "members": population} if mode == "lowrank" else {}))
    conversations = [[{"role": "user", "content": q}] for q in QUESTIONS]
    cfg = ESConfig(population=population, sigma=sigma, sigma_end=sigma / 2, alpha=alpha, generations=generations,
                   noise=mode)
    curve = [{"generation": 0, "fitness": measure(engine)[0], "seconds": 0.0}]
    spent = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        es = ESOpt(cfg, Path(tmp) / "history.jsonl", seed=0)
        for g in range(generations):
            started = time.perf_counter()
            members = es.ask()
            jobs = [MemberJob(m.seed, m.sigma, conversations, GREEDY) for m in members]
            outs = engine.generate_members(jobs)
            rewards = [sum(1 - o.completion_tokens / LIMIT for o in out) / len(out) for out in outs]
            es.tell(engine, members, rewards)
            spent += time.perf_counter() - started
            curve.append({"generation": g + 1, "fitness": measure(engine)[0], "seconds": spent,
                          "member_mean": sum(rewards) / len(rewards)})
    engine.close()
    return {"mode": mode, "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generations", type=int, default=6)
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--sigma", type=float, default=3e-3)
    parser.add_argument("--alpha", type=float, default=3e-3)
    parser.add_argument("--modes", default="full,lowrank")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.generations, args.population, args.sigma, args.alpha)))
        return
    results = {}
    for mode in args.modes.split(","):
        cmd = [sys.executable, __file__, "--child", mode, "--generations", str(args.generations),
               "--population", str(args.population), "--sigma", str(args.sigma), "--alpha", str(args.alpha)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            raise SystemExit(f"{mode} run failed:\n{proc.stderr[-3000:]}")
        results[mode] = json.loads(lines[-1][7:])["curve"]
        print(f"{mode} done", file=sys.stderr, flush=True)
    modes = list(results)
    print(f"ES brevity reward (fitness of the base weights after each update), G={args.population}, "
          f"σ={args.sigma:g}, α={args.alpha:g}, same seeds")
    print(f"{'gen':>4} " + " ".join(f"{m + ' fit':>13} {m + ' s':>11}" for m in modes))
    for g in range(args.generations + 1):
        print(f"{g:>4} " + " ".join(f"{results[m][g]['fitness']:>13.3f} {results[m][g]['seconds']:>11.1f}"
                                    for m in modes))
    for m in modes:
        first, last = results[m][0], results[m][-1]
        gain = last["fitness"] - first["fitness"]
        print(f"{m}: fitness {first['fitness']:.3f} -> {last['fitness']:.3f} in {last['seconds']:.0f} s: "
              f"{gain / args.generations:+.4f} per generation, {gain / last['seconds'] * 60:+.4f} per wall-minute")


if __name__ == "__main__":
    main()
