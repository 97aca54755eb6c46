"""Does an idle in-process engine (and the OpenAI server) burn CPU? process CPU seconds over idle wall seconds."""
import os, sys, time, resource, subprocess, signal
sys.path.insert(0, "tests")
from coevolve.engine.vllm_engine import Engine
from coevolve.base.sampling import Sampling

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

e = Engine()
e.chat([[{"role": "user", "content": "Write a haiku."}]], Sampling(temperature=0.7, top_p=1.0, max_tokens=32))
for label in ("right after a request", "later"):
    c0, t0 = cpu(), time.time(); time.sleep(15)
    print(f"in-process engine idle ({label}): {cpu()-c0:.2f} CPU s over {time.time()-t0:.1f} s", flush=True)
