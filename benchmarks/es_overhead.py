"""ES overhead, measured side by side in one run on the real engine.

(a) one ES generation (G members x N prompts, each member perturbed, generated,
    restored) vs the same G*N completions generated in one batch by stock vLLM;
(b) perturb + restore seconds per member, and per billion parameters;
(c) peak memory of an ES generation vs stock vLLM inference (each in a fresh
    process, so the peaks do not mask each other).

    python benchmarks/es_overhead.py [--members 8] [--prompts 8] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

PROMPTS = [
    "Write a Python function that returns the larger of two numbers.",
    "Explain in one sentence what a heuristic is.",
    "Give three tips for solving Sudoku.",
    "What is the capital of Italy?",
    "Describe a greedy algorithm for the travelling salesman problem.",
    "List two prime numbers above 50.",
    "What does a knapsack problem ask?",
    "Name a sorting algorithm and its complexity.",
]


def _conversations(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(n)]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _gpu_peak_mb() -> float | None:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return None


def child(mode: str, members: int, prompts: int, max_tokens: int) -> dict:
    """Runs in a fresh process: 'plain' = inference only, 'es' = one ES generation."""
    from coevolve.engine.base import Sampling
    from coevolve.engine.vllm_engine import Engine

    sampling = Sampling(temperature=0.7, max_tokens=max_tokens)
    convs = _conversations(prompts)
    if mode == "plain":
        return _plain_vllm(convs * members, max_tokens)
    engine = Engine()
    result: dict = {"mode": mode, "parameters": engine.num_parameters(), "device": engine.device}
    rss_after_load = _peak_rss_mb()
    perturb_seconds = 0.0
    started = time.perf_counter()
    for m in range(members):
        t0 = time.perf_counter()
        engine.perturb(1000 + m, 1e-3)
        perturb_seconds += time.perf_counter() - t0
        engine.chat(convs, sampling, seeds=list(range(m * prompts, (m + 1) * prompts)))
        t0 = time.perf_counter()
        engine.restore()
        perturb_seconds += time.perf_counter() - t0
    result["seconds"] = time.perf_counter() - started
    result["perturb_restore_seconds_per_member"] = perturb_seconds / members
    result["peak_rss_mb"] = _peak_rss_mb()
    result["rss_after_load_mb"] = rss_after_load
    result["gpu_peak_mb"] = _gpu_peak_mb()
    return result


def _plain_vllm(conversations: list, max_tokens: int) -> dict:
    """Stock vLLM as a user would run it for inference: no worker extension,
    no master copy, vLLM-CPU's own packed linear kernels."""
    import os

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    from coevolve.engine.models import default_model_dir

    llm = LLM(model=str(default_model_dir()), dtype="bfloat16", max_model_len=2048, enforce_eager=True,
              enable_prefix_caching=False, enable_chunked_prefill=False, max_num_batched_tokens=65536)
    tok = llm.get_tokenizer()
    prompts = [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    params = [SamplingParams(temperature=0.7, max_tokens=max_tokens, seed=i) for i in range(len(prompts))]
    started = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    return {"mode": "plain", "seconds": time.perf_counter() - started, "peak_rss_mb": _peak_rss_mb(),
            "gpu_peak_mb": _gpu_peak_mb()}


def _run_child(mode: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--members", str(args.members),
           "--prompts", str(args.prompts), "--max-tokens", str(args.max_tokens)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"{mode} run failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][7:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--child", choices=["plain", "es"])
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.members, args.prompts, args.max_tokens)))
        return
    plain = _run_child("plain", args)
    es = _run_child("es", args)
    billions = es["parameters"] / 1e9
    per_member = es["perturb_restore_seconds_per_member"]
    print(f"device {es['device']}, {es['parameters']:,} parameters, G={args.members} members x N={args.prompts} prompts, "
          f"{args.max_tokens} new tokens")
    print(f"(a) ES generation {es['seconds']:.2f} s vs one unperturbed batch of {args.members * args.prompts} "
          f"{plain['seconds']:.2f} s: ratio {es['seconds'] / plain['seconds']:.2f}x")
    print(f"(b) perturb+restore {per_member:.3f} s per member = {per_member / billions:.2f} s per billion parameters")
    print(f"(c) peak host RSS: ES {es['peak_rss_mb']:.0f} MiB vs plain {plain['peak_rss_mb']:.0f} MiB: "
          f"ratio {es['peak_rss_mb'] / plain['peak_rss_mb']:.2f}x "
          f"(fp32 master copy of θ = {es['parameters'] * 4 / 2**20:.0f} MiB lives in host RAM)")
    if es.get("gpu_peak_mb") is not None:
        print(f"    peak GPU memory: ES {es['gpu_peak_mb']:.0f} MiB vs plain {plain['gpu_peak_mb']:.0f} MiB: "
              f"ratio {es['gpu_peak_mb'] / plain['gpu_peak_mb']:.3f}x")


if __name__ == "__main__":
    main()
