"""Low-rank ES brevity (tests/test_es_learns.py) at several sigma/alpha pairs on one engine:
the fitness after each of 4 generations. Usage: python lowrank_calibration.py 3e-3/3e-3 1e-2/1e-2"""
import sys, time, tempfile
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "tests"))
from coevolve.engine.vllm_engine import Engine
from coevolve.engine.base import MemberJob
from coevolve.engine.models import default_model_dir
from coevolve.es import ESConfig, ESOpt
from test_es_learns import QUESTIONS, LIMIT, GREEDY, measure
e = Engine(default_model_dir(), max_model_len=2048, max_num_seqs=64, noise="lowrank", rank=1, members=8)
conv = [[{"role": "user", "content": q}] for q in QUESTIONS]
base = measure(e)
print("base", base, flush=True)
for sigma, alpha in [(float(a), float(b)) for a, b in (x.split("/") for x in sys.argv[1:])]:
    t = time.time()
    es = ESOpt(ESConfig(population=8, sigma=sigma, sigma_end=sigma / 2, alpha=alpha, generations=4, noise="lowrank", rank=1),
               Path(tempfile.mkdtemp()) / "h.jsonl", seed=0)
    curve = []
    for _ in range(4):
        members = es.ask()
        outs = e.generate_members([MemberJob(m.seed, m.sigma, conv, GREEDY) for m in members])
        rewards = [sum(1 - o.completion_tokens / LIMIT for o in out) / len(out) for out in outs]
        es.tell(e, members, rewards)
        curve.append(round(measure(e)[0], 4))
    print(sigma, alpha, "fitness per generation", curve, "finished", measure(e)[1], round(time.time() - t), "s", flush=True)
    e.reset()
e.close()
