"""vLLM's OpenAI server on CPU with its default core reservation against none
(`VLLM_CPU_NUM_OF_RESERVED_CPU=0`), side by side in one run, one server at a
time, started as tests/conftest_server.py starts it: start time and tokens per
second for one 192-token reply and for `--batch` replies at once (each reply
runs to its cap: ignore_eos). vLLM keeps one core per rank off the model's
OpenMP threads for its scheduler process; on a 2-core machine the model then
runs on one. Usage: python benchmarks/server_cpu_reserve.py [--rounds N] [--batch N]."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import conftest_server as served  # noqa: E402  (the tests' server flags: one definition)

from coevolve.engine.models import default_model_dir  # noqa: E402
from coevolve.engine.vllm_engine import resolve_dtype  # noqa: E402

PROMPT = "Write a long Python function that sorts a list three ways."


def measure(env: dict[str, str], batch: int) -> dict[str, float]:
    port = served.free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(default_model_dir()),
               "--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048",
               "--dtype", resolve_dtype("auto", "cpu"), "--enforce-eager", *served.SERVER_CPU_FLAGS]
    log = Path(f"/tmp/server_cpu_reserve_{port}.log")
    started = time.perf_counter()
    with open(log, "wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                   start_new_session=True)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        while not served._models_ready(base):
            if process.poll() is not None:
                raise SystemExit(f"server exited:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)
        result = {"start_s": time.perf_counter() - started}

        def ask(seed: int) -> int:
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 192,
                               "temperature": 0.7, "seed": seed, "ignore_eos": True}).encode()
            request = urllib.request.Request(base + "/chat/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=600) as response:
                return json.load(response)["usage"]["completion_tokens"]

        ask(0)  # warm
        for n in (1, batch):
            t = time.perf_counter()
            with ThreadPoolExecutor(n) as pool:
                tokens = sum(pool.map(ask, range(1, n + 1)))
            result[f"tok_s_{n}"] = tokens / (time.perf_counter() - t)
        return result
    finally:
        served._stop(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1, help="pairs of servers (default 1)")
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    arms = {"vLLM default": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "reserve 0": dict(served.SERVER_CPU_ENV)}
    print(f"{os.cpu_count()} CPUs, dtype {resolve_dtype('auto', 'cpu')}")
    for r in range(args.rounds):
        got = {name: measure(env, args.batch) for name, env in arms.items()}
        for name, m in got.items():
            print(f"round {r} {name:13s} start {m['start_s']:5.1f} s  1 reply {m['tok_s_1']:5.1f} tok/s  "
                  f"{args.batch} at once {m[f'tok_s_{args.batch}']:5.1f} tok/s", flush=True)
        a, b = got["vLLM default"], got["reserve 0"]
        print(f"round {r} ratio reserve 0 / default: start {b['start_s'] / a['start_s']:.2f}  1 reply "
              f"{b['tok_s_1'] / a['tok_s_1']:.2f}x  {args.batch} at once "
              f"{b[f'tok_s_{args.batch}'] / a[f'tok_s_{args.batch}']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
