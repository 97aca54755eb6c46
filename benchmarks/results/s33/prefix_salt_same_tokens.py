"""s33: does a per-request cache_salt with vLLM prefix caching on sample the same tokens as the cache off?
Run twice from the repository root: `python prefix_salt_same_tokens.py off`, then `... salt`; compare
/tmp/prof/salt_off.json with /tmp/prof/salt_salt.json (results: prefix_salt_same_tokens.txt)."""
import sys, json, os
os.makedirs("/tmp/prof", exist_ok=True)
import vllm
mode = sys.argv[1]
_LLM = vllm.LLM
def patched(*a, **k):
    k["enable_prefix_caching"] = mode != "off"
    return _LLM(*a, **k)
vllm.LLM = patched
from vllm import SamplingParams
from coevolve.engine.vllm_engine import Engine
e = Engine()
llm, tok = e.llm, e.tokenizer
qs = ["Write a python function that sorts a list.", "Name three colours and explain each.", "What is 17*23? Think step by step."] * 4
prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False) for q in qs]
if mode == "salt":
    prompts = [{"prompt": p, "cache_salt": f"r{i}"} for i, p in enumerate(prompts)]
params = [SamplingParams(temperature=0.7, max_tokens=96, seed=i) for i in range(len(qs))]
out = [o.outputs[0].text for o in llm.generate(prompts, params, use_tqdm=False)]
if mode == "salt":
    prompts = [{"prompt": p["prompt"], "cache_salt": f"s{i}"} for i, p in enumerate(prompts)]
out2 = [o.outputs[0].text for o in llm.generate(prompts, params, use_tqdm=False)]
json.dump({"a": out, "b": out2}, open(f"/tmp/prof/salt_{mode}.json", "w"))
print("done", mode)
