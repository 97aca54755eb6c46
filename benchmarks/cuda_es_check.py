"""The CUDA path of the ES weight operations, for a GPU machine without vLLM.

The worker extension (coevolve/engine/worker_ext.py) is the only device-specific
ES code; vLLM only hosts it. This script mounts the same extension on a plain
transformers Llama with SmolLM2-135M's shapes (random weights: no download)
and on a ~1B-parameter Llama, on CUDA, and checks/measures:
exact restore, 200 perturb/restore cycles, seed determinism, fp32 update and
bit-exact replay, device scratch memory, perturb+restore time per billion
parameters. Prints one JSON line per check and a summary.

    python benchmarks/cuda_es_check.py
"""

from __future__ import annotations

import json
import time

import torch


def build(hidden: int, layers: int, inter: int, heads: int, kv: int, vocab: int = 49152):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=inter,
                      num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                      tie_word_embeddings=True, max_position_embeddings=2048)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).to("cuda").eval()
    return model


def mount(model):
    from coevolve.engine.worker_ext import WeightsExtension

    class Runner:
        pass

    ext = WeightsExtension()
    ext.model_runner = Runner()
    ext.model_runner.model = model
    return ext


def logits(model) -> torch.Tensor:
    ids = torch.arange(1, 33, device="cuda").unsqueeze(0)
    with torch.no_grad():
        return model(ids).logits.float()


def main() -> None:
    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    small = build(576, 30, 1536, 9, 3)
    ext = mount(small)
    n = ext.es_init()
    results["params_small"] = n
    base_sum, base_logits = ext.es_checksum(), logits(small)
    ext.es_perturb(123, 2e-2)
    results["perturb_changes_logits"] = bool((logits(small) - base_logits).abs().max() > 1e-3)
    ext.es_restore()
    results["restore_exact_checksum"] = ext.es_checksum() == base_sum
    results["restore_exact_logits"] = bool(torch.equal(logits(small), base_logits))
    for i in range(200):
        ext.es_perturb(1000 + i, 1e-3)
        ext.es_restore()
    results["200_cycles_exact"] = ext.es_checksum() == base_sum
    ext.es_perturb(5, 1e-2); a = ext.es_checksum(); ext.es_restore()
    ext.es_perturb(5, 1e-2); b = ext.es_checksum(); ext.es_restore()
    ext.es_perturb(6, 1e-2); c = ext.es_checksum(); ext.es_restore()
    results["same_seed_same"] = a == b
    results["different_seed_differs"] = a != c
    # fp32 update, then replay onto a second copy built from the same init
    updates = [([11, 12, 13, 14], [1.0, -0.5, 0.25, -0.75]), ([21, 22, 23, 24], [0.3, 0.3, -0.6, 0.0])]
    for seeds, coefs in updates:
        ext.es_update(seeds, coefs, 5e-3)
    tuned = ext.es_checksum()
    results["update_moves_weights"] = tuned != base_sum
    del ext, small
    torch.cuda.empty_cache()
    twin = build(576, 30, 1536, 9, 3)
    ext2 = mount(twin)
    ext2.es_init()
    results["twin_starts_equal"] = ext2.es_checksum() == base_sum
    for seeds, coefs in updates:
        ext2.es_update(seeds, coefs, 5e-3)
    results["replay_bit_exact"] = ext2.es_checksum() == tuned
    del ext2, twin
    torch.cuda.empty_cache()

    # ~1B parameters: timing and scratch memory
    big = build(2048, 16, 8192, 32, 8, vocab=65536)
    ext = mount(big)
    n_big = ext.es_init()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(5):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        ext.es_perturb(i, 1e-3)
        ext.es_restore()
        torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
    scratch = torch.cuda.max_memory_allocated() - before
    torch.cuda.synchronize(); t0 = time.perf_counter()
    ext.es_update(list(range(8)), [0.1 * k for k in range(8)], 1e-3)
    torch.cuda.synchronize(); update_s = time.perf_counter() - t0
    results.update({
        "params_big": n_big,
        "weights_mib_big": round(before / 2**20),
        "perturb_restore_s_per_member_big": round(min(times), 3),
        "perturb_restore_s_per_billion": round(min(times) / (n_big / 1e9), 3),
        "es_scratch_peak_mib": round(scratch / 2**20, 1),
        "update_G8_s": round(update_s, 3),
    })
    checks = [k for k, v in results.items() if isinstance(v, bool)]
    results["all_checks_pass"] = all(results[k] for k in checks)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
