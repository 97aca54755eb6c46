"""The fitness of tests/test_es_learns.py's full-noise run after every generation, at population 8 (the
test's) and 6, on one engine, one after the other: how much margin the test's assertion has, and whether a
smaller run keeps it. Usage: .venv/bin/python benchmarks/results/s35/es_learns_trajectory.py"""
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from test_es_learns import measure, train  # noqa: E402

from coevolve.engine.models import default_model_dir  # noqa: E402
from coevolve.engine.vllm_engine import Engine  # noqa: E402
from coevolve.es import ESConfig  # noqa: E402

engine = Engine(default_model_dir(), max_model_len=2048, max_num_seqs=64)
base = measure(engine)
print(f"base fitness {base[0]:.3f} finished {base[1]:.2f}", flush=True)
for population, generations in ((8, 4), (6, 4)):
    began = time.perf_counter()

    def report(g: int) -> None:
        fitness, finished = measure(engine)
        print(f"population {population} generation {g + 1}: fitness {fitness:.3f} finished {finished:.2f} "
              f"({time.perf_counter() - began:.0f} s)", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        train(engine, ESConfig(population=population, sigma=3e-3, sigma_end=1.5e-3, alpha=3e-3,
                               generations=generations), Path(tmp) / "history.jsonl", after=report)
    engine.reset()
engine.close()
