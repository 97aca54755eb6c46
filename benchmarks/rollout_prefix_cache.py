"""Agent rollouts with and without prompt-KV reuse across turns, side by side on one engine.

A rollout opens the engine's `shared_prefixes()` block, so each turn reuses the KV of the
system prompt and conversation the turns before computed (docs/es.md). The "off" arm runs
the same rollouts with the block replaced by nothing (every request then has a salt of its
own, as outside any block). The arms alternate (on, off, off, on, ...) on one engine, so the
machine's drift hits both alike; each round plays the same seeded cases in both arms.

    python benchmarks/rollout_prefix_cache.py --cases 4 --masked 4 --max-tokens 8 --rounds 4
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=4, help="episodes played together")
    parser.add_argument("--masked", type=int, default=4, help="empty cells of each 4x4 sudoku (turns: 3x that)")
    parser.add_argument("--max-tokens", type=int, default=8, help="tokens per action")
    parser.add_argument("--rounds", type=int, default=4, help="alternating pairs of arms")
    args = parser.parse_args(argv)

    from coevolve.agents import rollout as rollout_module
    from coevolve.engine.base import Sampling
    from coevolve.engine.vllm_engine import Engine
    from tasks.sudoku import Sudoku

    engine = Engine(max_num_seqs=64)
    task = Sudoku(size=4, masked=args.masked)
    cases = task.cases("train", args.cases, seed=0)
    sampling = Sampling(temperature=1.0, max_tokens=args.max_tokens)
    shared = rollout_module.shared_prefixes

    def play(arm: str) -> tuple[float, int, int]:
        # the "off" arm: the block replaced by nothing, so no request shares another's KV
        rollout_module.shared_prefixes = shared if arm == "on" else (lambda generator: contextlib.nullcontext())
        try:
            start = time.perf_counter()
            played = rollout_module.rollout(engine, task, cases, sampling, seed=1)
            seconds = time.perf_counter() - start
        finally:
            rollout_module.shared_prefixes = shared
        return seconds, sum(t.turns for t in played), sum(len(a) for t in played for a in t.actions)

    play("on")  # warm-up: the first call pays one-off costs
    times: dict[str, list[float]] = {"on": [], "off": []}
    turns: dict[str, set] = {"on": set(), "off": set()}
    for r in range(args.rounds):
        for arm in (("on", "off") if r % 2 == 0 else ("off", "on")):
            seconds, n_turns, n_chars = play(arm)
            times[arm].append(seconds)
            turns[arm].add((n_turns, n_chars))
            print(f"round {r} {arm:>3}: {seconds:6.2f} s, {n_turns} turns, {n_chars} action characters", flush=True)
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    print(f"median per rollout: shared {on:.2f} s, not shared {off:.2f} s, shared/not shared {on / off:.2f}x")
    print(f"episodes' turns and action lengths per arm: shared {sorted(turns['on'])}, not shared {sorted(turns['off'])}")
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
