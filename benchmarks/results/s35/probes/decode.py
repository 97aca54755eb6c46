import time
from coevolve.engine.models import default_model_dir
from coevolve.engine.vllm_engine import Engine
from coevolve.base.sampling import Sampling
e = Engine(default_model_dir(), max_model_len=2048, max_num_seqs=64)
print("dtype", e.dtype)
conv = [{"role": "user", "content": "Write a long Python function that sorts a list with quicksort, with comments. " * 3}]
s = Sampling(temperature=0.7, max_tokens=192)
e.chat([conv], s, seeds=[0])
for n in (1, 2, 4, 8, 16):
    t = time.perf_counter()
    out = e.chat([conv] * n, s, seeds=list(range(n)))
    dt = time.perf_counter() - t
    toks = sum(c.completion_tokens for c in out)
    print(f"batch {n}: {dt:.2f} s, {toks} tokens, {toks/dt:.1f} tok/s, per-seq steps/s {max(c.completion_tokens for c in out)/dt:.1f}", flush=True)
e.close()
