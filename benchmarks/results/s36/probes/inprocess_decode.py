"""The in-process Engine's decode speed (one 192-token reply, then 4 at once) under the environment given as
KEY=VALUE arguments, and the thread binding vLLM logged. Usage: python inprocess_decode.py [KEY=VALUE ...]"""
import os, sys, time
for a in sys.argv[1:]:
    k, v = a.split("=", 1); os.environ[k] = v
t0 = time.time()
from coevolve.engine.vllm_engine import Engine
from coevolve.base.sampling import Sampling
e = Engine()
print(f"{sys.argv[1:] or 'defaults'}: engine up in {time.time() - t0:.1f} s", flush=True)
conv = [{"role": "user", "content": "Write a long Python function that sorts a list three ways."}]
s = Sampling(temperature=0.7, top_p=1.0, max_tokens=192)
e.chat([conv], Sampling(max_tokens=8), seeds=[0])
for n in (1, 4):
    t = time.perf_counter()
    out = e.chat([conv] * n, s, seeds=list(range(1, n + 1)))
    dt = time.perf_counter() - t
    toks = sum(c.completion_tokens for c in out)
    print(f"  {n} at once: {toks} tokens in {dt:.1f} s = {toks / dt:.1f} tok/s, {max(c.completion_tokens for c in out) / dt:.1f} steps/s", flush=True)
e.close()
