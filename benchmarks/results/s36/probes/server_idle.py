import sys, time, os, subprocess
sys.path.insert(0, "tests")
import conftest_server as cs
from coevolve.engine.models import default_model_dir
port = cs.free_port()
cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(default_model_dir()), "--served-model-name", "m",
       "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--dtype", "float32", "--enforce-eager", *cs.SERVER_CPU_FLAGS]
p = subprocess.Popen(cmd, stdout=open("/tmp/srv.log", "wb"), stderr=subprocess.STDOUT, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}, start_new_session=True)
t0 = time.time()
while not cs._models_ready(f"http://127.0.0.1:{port}/v1"):
    time.sleep(1)
print("up in", round(time.time()-t0, 1), flush=True)
def group_cpu():
    total = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.getpgid(int(pid)) == p.pid:
                    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                    total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
            except Exception:
                pass
    return total
for i in range(2):
    c0, t = group_cpu(), time.time(); time.sleep(20)
    print(f"server idle: {group_cpu()-c0:.2f} CPU s over {time.time()-t:.1f} s", flush=True)
cs._stop(p)
