"""Does vLLM's n-gram speculative decoding (prompt lookup) speed up EoH-style proposals on vLLM-CPU?
One engine at a time: plain, then with speculative_config. Prompts: i1 (template shown) and m1 (parent shown),
the real operator prompts for tsp_construct. Usage: python ngram_probe.py [spec_tokens]"""
import sys, time, types
from coevolve.engine import vllm_engine
from coevolve.engine.vllm_engine import Engine
from coevolve.base.sampling import Sampling
from coevolve.search.prompts import operator_messages
from tasks.registry import get_task

task = get_task("tsp_construct")
parent = types.SimpleNamespace(code=task.template, idea="nearest neighbour", objective=7.5)
i1 = operator_messages("i1", task.description, task.template, task.function_name, task.direction)
m1 = operator_messages("m1", task.description, task.template, task.function_name, task.direction, parents=[parent])
sampling = Sampling(temperature=0.7, top_p=1.0, max_tokens=192, stop=("\n```\n",))
k = int(sys.argv[1]) if len(sys.argv) > 1 else 4
mode = sys.argv[2] if len(sys.argv) > 2 else "spec"

orig = vllm_engine._platform_kwargs
if mode == "spec":
    vllm_engine._platform_kwargs = lambda *a: {**orig(*a), "speculative_config": {
        "method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4, "prompt_lookup_min": 2}}
e = Engine()
e.chat([m1], Sampling(max_tokens=4), seeds=[0])  # warm
for name, conv in (("m1", m1), ("i1", i1)):
    for batch in (1, 4):
        t = time.perf_counter()
        out = e.chat([conv] * batch, sampling, seeds=list(range(100, 100 + batch)))
        dt = time.perf_counter() - t
        toks = sum(o.completion_tokens for o in out)
        print(f"{mode} k={k} {name} batch {batch}: {toks} tokens in {dt:.1f} s = {toks/dt:.1f} tok/s", flush=True)
# determinism: same seeds twice give the same text
a = e.chat([m1] * 2, sampling, seeds=[7, 8]); b = e.chat([m1] * 2, sampling, seeds=[7, 8])
print("same seeds, same text:", [x.text == y.text for x, y in zip(a, b)])
print("sample m1 reply:", a[0].text[:300].replace("\n", "\\n"))
e.close()
