"""float32 (the AVX2 EPYC's auto dtype) trajectories of tests/test_es_learns.py's schedules on this CPU."""
import sys, time, tempfile, pathlib
sys.path.insert(0, "/work/main/tests")
import test_es_learns as t
from coevolve.engine.base import MemberJob
from coevolve.engine.vllm_engine import Engine
from coevolve.engine.models import default_model_dir
from coevolve.es import ESConfig, ESOpt
d = pathlib.Path(tempfile.mkdtemp())
e = Engine(default_model_dir(), max_model_len=2048, max_num_seqs=64, dtype="float32")
print("plain dtype", e.dtype, "base", t.measure(e), flush=True)
t0 = time.time()
t.train(e, ESConfig(population=8, sigma=3e-3, sigma_end=1.5e-3, alpha=3e-3, generations=2), d / "h2.jsonl",
        after=lambda g: print(f"full-rank 2-gen schedule, generation {g+1}: {t.measure(e)} ({time.time()-t0:.0f} s)", flush=True))
e.close(); del e
import gc; gc.collect()
e = Engine(default_model_dir(), max_model_len=2048, max_num_seqs=64, dtype="float32", noise="lowrank", rank=1, members=8)
print("lowrank dtype", e.dtype, "base", t.measure(e), flush=True)
conv = [[{"role": "user", "content": q}] for q in t.QUESTIONS]
es = ESOpt(ESConfig(population=8, sigma=1e-2, sigma_end=5e-3, alpha=1e-2, generations=3, noise="lowrank", rank=1), d / "l3.jsonl", seed=0)
t0 = time.time()
for g in range(3):
    ms = es.ask()
    outs = e.generate_members([MemberJob(m.seed, m.sigma, conv, t.GREEDY) for m in ms])
    es.tell(e, ms, [sum(1 - o.completion_tokens / t.LIMIT for o in out) / len(out) for out in outs])
    print(f"lowrank 3-gen schedule, generation {g+1}: {t.measure(e)} ({time.time()-t0:.0f} s)", flush=True)
e.close()
