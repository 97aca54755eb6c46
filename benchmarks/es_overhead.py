"""ES overhead, measured side by side in one run on the real engine.

(a) one ES generation (G members x N prompts) vs the same G*N completions
    generated in one batch by stock vLLM, for each noise mode:
    full    = each member perturbed, generated, restored, one after another;
    lowrank = every member a rank-r LoRA slot, all G*N requests in ONE batch;
(b) perturb + restore seconds per member (full), slot writing (lowrank), and
    the ES update of G members in each mode;
(c) peak memory of each (a fresh process each, so peaks do not mask each
    other), and of one backprop fine-tuning step (torch autograd + AdamW,
    fp32 weights, on the same model and the same G*N sequences).

    python benchmarks/es_overhead.py --members 8,32 --prompts 8 --max-tokens 32
    python benchmarks/es_overhead.py --members 16 --prompts 1 --max-tokens 256 --no-backprop
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


def child(mode: str, members: int, prompts: int, max_tokens: int, rank: int = 1, repeats: int = 1) -> dict:
    """Runs in a fresh process: 'plain' = inference only, 'es' = one full-noise
    ES generation, 'lowrank' = one low-rank ES generation, 'backprop' = one
    AdamW step."""
    from coevolve.engine.base import MemberJob, Sampling
    from coevolve.engine.vllm_engine import Engine

    sampling = Sampling(temperature=0.7, max_tokens=max_tokens)
    convs = _conversations(prompts)
    if mode == "plain":
        return _plain_vllm(convs * members, max_tokens, repeats)
    if mode == "backprop":
        return _backprop_step(convs * members, max_tokens, micro=len(convs))
    if mode == "lowrank":
        engine = Engine(noise="lowrank", rank=rank, members=members, max_num_seqs=256)
        result = {"mode": mode, "parameters": engine.num_parameters(), "device": engine.device,
                  **engine.noise_info()}
        engine.chat(convs[:1], Sampling(temperature=0.0, max_tokens=2))  # warm-up, as in the other modes
        rss_after_load = _peak_rss_mb()
        jobs = [MemberJob(1000 + m, 1e-3, convs, sampling, list(range(m * prompts, (m + 1) * prompts)))
                for m in range(members)]
        t0 = time.perf_counter()
        engine._rpc("es_lowrank_load", [(j.seed, j.sigma) for j in jobs])
        result["slot_write_seconds"] = time.perf_counter() - t0
        times = []
        for _ in range(repeats):  # the fastest of a few: this machine's noise only ever adds time
            started = time.perf_counter()
            engine.generate_members(jobs)  # writes the slots again, then one batch
            times.append(time.perf_counter() - started)
        result["seconds"], result["all_seconds"] = min(times), times
        t0 = time.perf_counter()
        engine.apply_update([j.seed for j in jobs], [1.0 - 2 * (m % 2) for m in range(members)], 5e-4)
        result["update_seconds"] = time.perf_counter() - t0
        result["peak_rss_mb"] = _peak_rss_mb()
        result["rss_after_load_mb"] = rss_after_load
        result["gpu_peak_mb"] = _gpu_peak_mb()
        return result
    engine = Engine(max_num_seqs=256)
    result: dict = {"mode": mode, "parameters": engine.num_parameters(), "device": engine.device}
    engine.chat(convs[:1], Sampling(temperature=0.0, max_tokens=2))
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
    t0 = time.perf_counter()
    engine.apply_update([1000 + m for m in range(members)], [1.0 - 2 * (m % 2) for m in range(members)], 5e-4)
    result["update_seconds"] = time.perf_counter() - t0
    result["peak_rss_mb"] = _peak_rss_mb()
    result["rss_after_load_mb"] = rss_after_load
    result["gpu_peak_mb"] = _gpu_peak_mb()
    return result


def _plain_vllm(conversations: list, max_tokens: int, repeats: int = 1) -> dict:
    """Stock vLLM as a user would run it for inference: no worker extension,
    no master copy, vLLM-CPU's own packed linear kernels."""
    import os

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    from coevolve.engine.models import default_model_dir

    llm = LLM(model=str(default_model_dir()), dtype="bfloat16", max_model_len=2048, enforce_eager=True,
              enable_prefix_caching=False, enable_chunked_prefill=False, max_num_batched_tokens=65536,
              max_num_seqs=256)
    tok = llm.get_tokenizer()
    prompts = [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    params = [SamplingParams(temperature=0.7, max_tokens=max_tokens, seed=i) for i in range(len(prompts))]
    llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=2), use_tqdm=False)  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        times.append(time.perf_counter() - started)
    return {"mode": "plain", "seconds": min(times), "all_seconds": times, "peak_rss_mb": _peak_rss_mb(),
            "gpu_peak_mb": _gpu_peak_mb()}


def _backprop_step(conversations: list, max_tokens: int, micro: int) -> dict:
    """One fine-tuning step as a GRPO-style trainer would take it: forward and
    backward over the G*N sequences (prompt + max_tokens tokens) in micro-batches
    of `micro` sequences with gradients accumulated (the whole batch at once does
    not fit: fp32 logits alone are sequences x length x 49152 floats), then one
    AdamW step (fp32 weights, gradients and optimizer state)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coevolve.engine.models import default_model_dir

    model_dir = str(default_model_dir())
    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    texts = [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    batch = tok(texts, return_tensors="pt", padding=True)
    completion = torch.randint(0, tok.vocab_size, (len(texts), max_tokens))
    ids = torch.cat([batch["input_ids"], completion], dim=1)
    mask = torch.cat([batch["attention_mask"], torch.ones_like(completion)], dim=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    started = time.perf_counter()
    for lo in range(0, len(texts), micro):
        part = slice(lo, lo + micro)
        loss = model(input_ids=ids[part], attention_mask=mask[part], labels=ids[part]).loss
        (loss * (len(ids[part]) / len(texts))).backward()
    optimizer.step()
    return {"mode": "backprop", "seconds": time.perf_counter() - started, "peak_rss_mb": _peak_rss_mb(),
            "gpu_peak_mb": _gpu_peak_mb(), "tokens": int(ids.numel()), "micro_batch": micro}


def _run_child(mode: str, args: argparse.Namespace, members: int) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--members", str(members), "--rank", str(args.rank),
           "--prompts", str(args.prompts), "--max-tokens", str(args.max_tokens), "--repeats", str(args.repeats)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if not lines:
        # exit -9 with nothing on stderr is the kernel's OOM killer
        why = "killed (SIGKILL: out of memory?)" if proc.returncode == -9 else f"exit {proc.returncode}"
        if mode != "backprop":  # the timing table needs every other mode
            raise SystemExit(f"{mode} run failed, {why}:\n{proc.stderr[-3000:]}")
        print(f"{mode} run failed, {why}:\n{proc.stderr[-3000:]}", file=sys.stderr, flush=True)
        return {"mode": mode, "failed": why}
    return json.loads(lines[-1][7:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", default="8", help="population sizes G, comma-separated (e.g. 8,32)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rank", type=int, default=1, help="low-rank noise rank")
    parser.add_argument("--modes", default="es,lowrank", help="ES modes to measure: es (full noise), lowrank")
    parser.add_argument("--no-backprop", action="store_true", help="skip the AdamW step's memory")
    parser.add_argument("--repeats", type=int, default=3,
                        help="plain and lowrank batches timed this many times, the fastest kept (full mode: once)")
    parser.add_argument("--child", choices=["plain", "es", "lowrank", "backprop"])
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, int(args.members), args.prompts, args.max_tokens, args.rank,
                                               args.repeats)))
        return
    modes = [m for m in args.modes.split(",") if m]
    rows = []
    for g in [int(x) for x in args.members.split(",")]:
        plain = _run_child("plain", args, g)
        results = {mode: _run_child(mode, args, g) for mode in modes}
        rows.append((g, plain, results))
        print(f"G={g}: plain {plain['seconds']:.2f} s; " + "; ".join(
            f"{m} {r['seconds']:.2f} s" for m, r in results.items()), file=sys.stderr, flush=True)
    backprop = None if args.no_backprop else _run_child("backprop", args, rows[-1][0])
    any_result = next(iter(rows[0][2].values()))
    print(f"device {any_result['device']}, {any_result['parameters']:,} parameters, N={args.prompts} prompts per "
          f"member, {args.max_tokens} new tokens, low-rank rank {args.rank}")
    print("(a) one ES generation vs one unperturbed stock-vLLM batch of the same G*N completions "
          f"(plain and lowrank: fastest of {args.repeats}; full: one)")
    print(f"    {'G':>4} {'G*N':>5} {'plain s':>8} " + " ".join(f"{m + ' s':>10} {m + ' x':>10}" for m in modes))
    for g, plain, results in rows:
        print(f"    {g:>4} {g * args.prompts:>5} {plain['seconds']:>8.2f} " + " ".join(
            f"{results[m]['seconds']:>10.2f} {results[m]['seconds'] / plain['seconds']:>9.2f}x" for m in modes))
    print("(b) weight work per generation")
    for g, _, results in rows:
        parts = []
        if "es" in results:
            per = results["es"]["perturb_restore_seconds_per_member"]
            parts.append(f"full: perturb+restore {per:.3f} s/member "
                         f"({per / (results['es']['parameters'] / 1e9):.2f} s per 1e9 params), "
                         f"update {results['es']['update_seconds']:.2f} s")
        if "lowrank" in results:
            parts.append(f"lowrank: writing {g} slots {results['lowrank']['slot_write_seconds']:.2f} s, "
                         f"update {results['lowrank']['update_seconds']:.2f} s")
        print(f"    G={g}: " + "; ".join(parts))
    g, plain, results = rows[-1]
    print(f"(c) peak host RSS at G={g} (each a fresh process)")
    print(f"    plain inference {plain['peak_rss_mb']:.0f} MiB")
    for m, r in results.items():
        print(f"    {m:<8} ES {r['peak_rss_mb']:.0f} MiB: {r['peak_rss_mb'] / plain['peak_rss_mb']:.2f}x plain")
    if "lowrank" in results:
        lr = results["lowrank"]
        print(f"    low-rank covers {lr['covered_elements']:,} elements (every linear weight); frozen "
              f"{lr['frozen_elements']:,}: {', '.join(lr['frozen'])}")
    if backprop is not None and "failed" in backprop:
        print(f"    backprop AdamW step: {backprop['failed']}")
    elif backprop is not None:
        print(f"    backprop AdamW step (fp32, {backprop['tokens']} tokens) {backprop['peak_rss_mb']:.0f} MiB: "
              f"{backprop['peak_rss_mb'] / plain['peak_rss_mb']:.2f}x plain, step {backprop['seconds']:.1f} s "
              f"(micro-batches of {backprop['micro_batch']} sequences, gradients accumulated)")
    for m, r in results.items():
        if r.get("gpu_peak_mb") is not None and plain.get("gpu_peak_mb"):
            print(f"    peak GPU memory: {m} {r['gpu_peak_mb']:.0f} MiB vs plain {plain['gpu_peak_mb']:.0f} MiB")


if __name__ == "__main__":
    main()
