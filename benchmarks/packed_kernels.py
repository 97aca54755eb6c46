"""Packed CPU kernels vs plain F.linear, side by side in one engine.

The engine decodes on vLLM's packed GEMM kernels over a copy of the live weights
and drops that copy at every weight write (coevolve/engine/worker_ext.py). This
measures what that buys and costs, alternating the two arms (packed, plain,
plain, packed, ...) so the machine's drift hits both alike:

- decode: the same seeded batch generated at each batch size, seconds and tokens/s;
- an ES generation: G members, each perturbed, generated and restored (the
  packed arm pays one repack per member);
- one repack and one perturbation, in seconds.

    python benchmarks/packed_kernels.py --batches 1,8,32 --max-tokens 128 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import time

PROMPTS = [
    "Write a Python function that returns the larger of two numbers.",
    "Describe a greedy algorithm for the travelling salesman problem.",
    "Give three tips for solving Sudoku.",
    "Name a sorting algorithm and its complexity.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="passes per arm (alternating)")
    parser.add_argument("--members", type=int, default=4, help="ES members in the generation arm")
    args = parser.parse_args()

    from coevolve.engine.base import Sampling
    from coevolve.engine.vllm_engine import Engine

    engine = Engine(max_num_seqs=64)
    sampling = Sampling(temperature=0.7, max_tokens=args.max_tokens)
    batches = [int(b) for b in args.batches.split(",")]
    print(f"device {engine.device}, {engine.num_parameters():,} parameters, {engine._rpc('es_kernels')}")

    def tokens_of_one_batch(size: int) -> int:
        convs = [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(size)]
        return sum(c.completion_tokens for c in engine.chat(convs, sampling, seeds=list(range(size))))

    def decode(size: int) -> tuple[float, int]:
        started = time.perf_counter()
        tokens = tokens_of_one_batch(size)
        return time.perf_counter() - started, tokens

    def es_generation(size: int) -> tuple[float, int]:
        started, tokens = time.perf_counter(), 0
        for member in range(args.members):
            with engine.perturbed(1000 + member, 1e-3):
                tokens += tokens_of_one_batch(size)
        return time.perf_counter() - started, tokens

    cases = [(f"decode, batch {b}", decode, b) for b in batches]
    cases.append((f"ES generation, {args.members} members x batch 8", es_generation, 8))
    decode(1)  # warm-up
    order = [True, False, False, True] * ((args.rounds + 1) // 2)
    for name, work, size in cases:
        seconds: dict[bool, list[float]] = {True: [], False: []}
        tokens: dict[bool, int] = {}
        for packed in order[:2 * args.rounds]:
            engine._rpc("es_set_packing", packed)
            s, t = work(size)
            seconds[packed].append(s)
            tokens[packed] = t
        on, off = statistics.median(seconds[True]), statistics.median(seconds[False])
        print(f"{name:40s} plain {off:7.2f} s  packed {on:7.2f} s  plain/packed {off / on:5.2f}x  "
              f"({tokens[False]} / {tokens[True]} tokens; all: plain {seconds[False]}, packed {seconds[True]})",
              flush=True)

    engine._rpc("es_set_packing", True)
    repack = []
    for seed in range(3):
        started = time.perf_counter()
        engine.perturb(seed, 1e-3)
        perturb_s = time.perf_counter() - started
        engine.restore()
        started = time.perf_counter()
        engine._rpc("es_pack")
        repack.append((time.perf_counter() - started, perturb_s))
    print(f"one repack {statistics.median(r[0] for r in repack):.3f} s, one perturbation "
          f"{statistics.median(r[1] for r in repack):.3f} s (medians of 3)")
    engine.close()


if __name__ == "__main__":
    main()
