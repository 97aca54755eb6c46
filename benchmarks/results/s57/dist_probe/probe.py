"""Does an in-process engine (started first, as in the suite) slow a Ray EnginePool, and is it the loader
variables the workers inherit? argv[1]: 'inherit' or 'restore'."""
import os, sys, time
sys.path.insert(0, "/work/main/tests"); sys.path.insert(0, "/work/main")
saved = {n: os.environ.get(n) for n in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
from coevolve.engine.models import default_model_dir
from coevolve.engine.vllm_engine import Engine
from coevolve.engine.pool import EnginePool
import test_distributed as td
t = time.time(); eng = Engine(default_model_dir()); print("plain start", round(time.time() - t, 1), flush=True)
t = time.time(); td.run_es(eng, "/tmp/distprobe/ref.jsonl"); print("plain run_es", round(time.time() - t, 1), flush=True)
eng.reset()
print("loader now", {n: os.environ.get(n) for n in saved}, "at start", saved, flush=True)
if sys.argv[1] == "restore":
    for n, v in saved.items():
        if v is None: os.environ.pop(n, None)
        else: os.environ[n] = v
t = time.time(); pool = EnginePool(2, max_num_seqs=8); print("pool start", round(time.time() - t, 1), flush=True)
for i in range(2):
    t = time.time(); td.run_es(pool, f"/tmp/distprobe/pool{i}.jsonl"); print("pool run_es", round(time.time() - t, 1), flush=True)
pool.close(); eng.close()
