import time, torch, os, cProfile, pstats
from coevolve.engine.vllm_engine import Engine
from coevolve.base.sampling import Sampling
e=Engine()
prompt=[{"role":"user","content":"Write a Python function that solves TSP greedily. "*40}]
short=[{"role":"user","content":"Write a Python function."}]
def go(label, n, mt, seeds=True, p=prompt):
    t=time.time()
    outs=e.chat([p]*n, Sampling(temperature=0.7, max_tokens=mt), seeds=list(range(n)) if seeds else None)
    print(label, n, mt, f"{time.time()-t:.2f}s", sum(o.completion_tokens for o in outs), "cached", sum(o.cached_tokens or 0 for o in outs), flush=True)
go("warm",1,8)
go("short-seeds",6,128,True,short)
go("short-noseeds",6,128,False,short)
go("short-seeds1",1,128,True,short)
go("long-seeds-8tok",6,8)
with e.shared_prefixes():
    go("long-shared-8tok",6,8)
pr=cProfile.Profile(); pr.enable()
go("short-seeds-prof",6,128,True,short)
pr.disable(); pstats.Stats(pr).sort_stats("tottime").print_stats(25)
