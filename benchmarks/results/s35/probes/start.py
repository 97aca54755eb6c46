import time; t0=time.perf_counter()
from coevolve.engine.models import default_model_dir
from coevolve.engine.vllm_engine import Engine
t1=time.perf_counter(); print("import", round(t1-t0,1), flush=True)
import vllm; t2=time.perf_counter(); print("vllm import", round(t2-t1,1), flush=True)
e = Engine(default_model_dir(), max_model_len=2048, max_num_seqs=64)
t3=time.perf_counter(); print("engine", round(t3-t2,1), flush=True)
from coevolve.base.sampling import Sampling
e.chat([[{"role":"user","content":"hi"}]], Sampling(max_tokens=4), seeds=[0])
t4=time.perf_counter(); print("first chat", round(t4-t3,1), flush=True)
e.close()
