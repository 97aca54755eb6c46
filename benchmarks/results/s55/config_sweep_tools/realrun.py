"""Real `coevolve run` (not --plan) of configs --plan accepts, on a context-only method whose [endpoint]
is the local stub (stub.py): no engine loads. Each case in a fresh folder under /tmp/sweep_real;
records exit code, the stderr tail and what was written. Usage: realrun.py [CASE ...]"""
import json, os, subprocess, sys, tomllib, copy, shutil
from pathlib import Path
sys.path.insert(0, "/tmp/sweep_tools")
from tomlw import dumps
BASE = tomllib.loads(Path("/tmp/sweep_real/base.toml").read_text())
CASES = {
    "out_existing_file": {"run": {"out": "/tmp/sweep/README.md"}},
    "out_proc": {"run": {"out": "/proc/coevolve_out"}},
    "tensorboard_dir_proc": {"log": {"tensorboard": True, "tensorboard_dir": "/proc/x"}},
    "mlflow_uri_bogus": {"log": {"mlflow": True, "mlflow_uri": "bogus://x"}},
    "endpoint_timeout_huge": {"endpoint": {"timeout_s": 1e308}},
    "api_key_env_is_a_key": {"endpoint": {"api_key_env": "sk-abc123 secret"}},
    "sandbox_timeout_1e10": {"sandbox": {"timeout_s": 1e10}},
    "sandbox_memory_int64": {"sandbox": {"memory_mb": 9223372036854775807}},
    "endpoint_concurrency_int64": {"endpoint": {"concurrency": 9223372036854775807}},
    "seed_int64": {"run": {"seed": 9223372036854775807}},
    "parents_huge_with_replacement": {"run": {"method": "eoh", "budget": 8}, "eoh": {"population": 2, "offspring": 2,
                                      "parents": 10 ** 18, "parents_with_replacement": True}},
    "stop_empty_endpoint": {"sampling": {"stop": [""]}},
    "temperature_7_endpoint": {"sampling": {"temperature": 7.0}},
}
def merge(a, b):
    a = copy.deepcopy(a)
    for k, v in b.items():
        a[k] = merge(a.get(k, {}), v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
    return a
out = {}
for name in (sys.argv[1:] or CASES):
    d = Path("/tmp/sweep_real") / name
    shutil.rmtree(d, ignore_errors=True); d.mkdir()
    cfg = d / "c.toml"; cfg.write_text(dumps(merge(BASE, CASES[name])))
    env = {**os.environ, "PYTHONPATH": "/tmp/sweep", "OPENAI_API_KEY": "dummy"}
    cmd = ["flock", "/tmp/coevolve-engine.lock", "timeout", "120", "/work/main/.venv/bin/python", "-m", "coevolve",
           "run", str(cfg), "--no-progress"]
    if name != "out_existing_file" and "out" not in CASES[name].get("run", {}):
        cmd += ["--out", str(d / "run")]
    p = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
    written = sorted(str(x.relative_to(d)) for x in d.rglob("*") if x.name != "c.toml")
    out[name] = {"rc": p.returncode, "stderr": p.stderr[-2500:], "stdout": p.stdout[-600:], "written": written[:12]}
    print("=====", name, "rc", p.returncode, "written:", written[:8])
    print("\n".join(p.stderr.strip().splitlines()[-6:]))
json.dump(out, open("/tmp/sweep_tools/realrun.json", "w"), indent=1)
