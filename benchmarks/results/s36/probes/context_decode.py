"""Decode speed against context length on the in-process Engine: one reply of 128 tokens (ignore_eos-like: a
prompt that asks for a long answer; the count is what it gave) after prompts of ~50..1400 tokens, batch 1.
Environment as KEY=VALUE arguments; engine keyword arguments as kw:KEY=VALUE."""
import os, sys, time
kw = {}
for a in sys.argv[1:]:
    k, v = a.split("=", 1)
    if k.startswith("kw:"):
        kw[k[3:]] = int(v) if v.isdigit() else v
    else:
        os.environ[k] = v
from coevolve.engine import vllm_engine
from coevolve.engine.vllm_engine import Engine
from coevolve.base.sampling import Sampling
if kw:
    orig = vllm_engine._platform_kwargs
    vllm_engine._platform_kwargs = lambda *a: {**orig(*a), **kw}
e = Engine()
filler = "def f(x):\n    return x + 1  # a helper that adds one to its argument\n"
s = Sampling(temperature=0.7, top_p=1.0, max_tokens=128)
e.chat([[{"role": "user", "content": "hi"}]], Sampling(max_tokens=4), seeds=[0])
for reps in (0, 12, 30, 60):
    conv = [{"role": "user", "content": filler * reps + "Write a long Python function that sorts a list three ways."}]
    ids = e.tokenizer.apply_chat_template(conv, add_generation_prompt=True)
    n_prompt = len(ids["input_ids"] if hasattr(ids, "keys") else ids)
    t = time.perf_counter()
    e.chat([conv], Sampling(max_tokens=1), seeds=[0])  # the prompt alone (every call has its own cache salt)
    prefill = time.perf_counter() - t
    t = time.perf_counter()
    out = e.chat([conv], s, seeds=[1])
    dt = time.perf_counter() - t
    print(f"{sys.argv[1:] or 'defaults'} prompt {n_prompt:5d} tokens (alone {prefill:.2f} s): {out[0].completion_tokens} tokens in {dt:.2f} s = {1000 * dt / out[0].completion_tokens:.1f} ms/token, {1000 * (dt - prefill) / (out[0].completion_tokens - 1):.1f} ms/token after the prompt", flush=True)
e.close()
