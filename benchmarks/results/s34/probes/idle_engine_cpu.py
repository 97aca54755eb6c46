import time, os, psutil, subprocess, sys, json, urllib.request
from coevolve.engine.vllm_engine import Engine
from coevolve.base.sampling import Sampling
e = Engine()
e.chat([[{"role":"user","content":"hi"}]], Sampling(max_tokens=8))
me = psutil.Process()
def cpu(p): 
    t = p.cpu_times(); return t.user + t.system
a = cpu(me); time.sleep(20); print("idle in-process engine: cores busy", round((cpu(me)-a)/20, 3), flush=True)
sys.path.insert(0, "tests")
from conftest_server import free_port, _models_ready
from coevolve.engine.models import default_model_dir
port = free_port()
p = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(default_model_dir()), "--port", str(port),
    "--max-model-len", "2048", "--dtype", "float32", "--enforce-eager", "--no-enable-chunked-prefill", "--max-num-batched-tokens", "65536"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}, start_new_session=True)
while not _models_ready(f"http://127.0.0.1:{port}/v1"): time.sleep(1)
time.sleep(5)
def group():
    tot = 0
    for q in psutil.process_iter():
        try:
            if os.getpgid(q.pid) == p.pid: tot += cpu(q)
        except Exception: pass
    return tot
a = group(); a2 = cpu(me); time.sleep(20); print("idle server group: cores busy", round((group()-a)/20, 3), "engine process", round((cpu(me)-a2)/20,3), flush=True)
os.killpg(p.pid, 9)
