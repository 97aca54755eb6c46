import cProfile, pstats, time
import vllm  # noqa: F401  (imported to time it apart from Engine())
from coevolve.engine.models import default_model_dir
from coevolve.engine.vllm_engine import Engine
pr = cProfile.Profile(); pr.enable()
e = Engine(default_model_dir(), max_model_len=2048, max_num_seqs=64)
pr.disable()
t=time.perf_counter(); e.close(); print("close", time.perf_counter()-t)
st = pstats.Stats(pr); st.sort_stats("cumulative").print_stats(45)
