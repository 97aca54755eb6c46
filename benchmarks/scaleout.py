"""Scale-out: wall time of one ES generation's members with 1 engine vs N
engines (Ray actors), same members, same prompts, one run.

Each pool size starts its own private Ray cluster on loopback and is closed
before the next starts, so only one pool's engines hold memory at a time. On
CPU the pool splits this machine's cores between its engines (1 engine gets all
of them), so the ratio answers "is one engine per core group faster than one
engine on all cores?". On a GPU machine each engine gets its own GPU.

    python benchmarks/scaleout.py [--engines 1 2] [--members 8] [--prompts 4] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import json
import time

PROMPTS = [
    "Write a Python function that returns the larger of two numbers.",
    "Explain in one sentence what a heuristic is.",
    "Describe a greedy algorithm for the travelling salesman problem.",
    "What does a knapsack problem ask?",
]


def measure(engines: int, members: int, prompts: int, max_tokens: int) -> dict:
    from coevolve.engine.pool import EnginePool
    from coevolve.engine.base import Sampling
    from coevolve.engine.vllm_engine import MemberJob
    from coevolve.base.noise import member_seed

    conversations = [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(prompts)]
    sampling = Sampling(temperature=0.7, max_tokens=max_tokens)
    seeds = list(range(prompts))
    jobs = [MemberJob(member_seed(0, 0, i), 1e-3, conversations, sampling, request_seeds=seeds)
            for i in range(members)]
    started = time.perf_counter()
    with EnginePool(engines) as pool:
        start_s = time.perf_counter() - started
        # Warm every engine once (first-call kernel setup), outside the timing.
        pool.generate_members(jobs[: len(pool.engines)])
        began = time.perf_counter()
        results = pool.generate_members(jobs)
        generation_s = time.perf_counter() - began
        device = pool.device
    tokens = sum(c.completion_tokens for member in results for c in member)
    return {
        "engines": engines,
        "device": device,
        "start_s": round(start_s, 1),
        "generation_s": round(generation_s, 2),
        "completion_tokens": tokens,
        "tokens_per_s": round(tokens / generation_s, 1),
        "texts": [[c.text for c in member] for member in results],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()

    runs = [measure(n, args.members, args.prompts, args.max_tokens) for n in args.engines]
    base = runs[0]
    for run in runs:
        run["speedup_vs_first"] = round(base["generation_s"] / run["generation_s"], 2)
        run["same_texts_as_first"] = run["texts"] == base["texts"]
    print(json.dumps([{k: v for k, v in run.items() if k != "texts"} for run in runs], indent=2))
    for run in runs[1:]:
        print(f"{args.members} members x {args.prompts} prompts: {base['engines']} engine(s) "
              f"{base['generation_s']:.2f} s, {run['engines']} engines {run['generation_s']:.2f} s, "
              f"speed-up {run['speedup_vs_first']:.2f}x, identical texts: {run['same_texts_as_first']}")


if __name__ == "__main__":
    main()
