#!/usr/bin/env bash
# The base install on a served model (docs/serving.md): a fresh venv with the
# package but without the engine extra runs examples/tsp_aco_eoh.toml against
# a real vLLM server on loopback (started from the project's venv with the
# recommended CPU settings) to the end, and refuses an +esopt method with one
# line. Slow (a venv install, then ~5 min of serving on 2 cores); not part of
# `make test`, whose tests/test_serving.py covers the same path with vLLM and
# torch blocked from import. Run it under the heavy lock on shared machines.
# Usage: scripts/check_base_install.sh [OUT_DIR] [BUDGET]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ENGINE_PY=${COEVOLVE_VENV:-$ROOT/.venv}/bin/python
OUT=${1:-/tmp/coevolve-base-install}
BUDGET=${2:-200}
rm -rf "$OUT" && mkdir -p "$OUT"

python3 -m venv "$OUT/venv"
"$OUT/venv/bin/pip" install -q -c requirements/lock-cpu.txt -e "$ROOT"
if "$OUT/venv/bin/python" -c "import vllm" 2>/dev/null || "$OUT/venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "the base venv has vLLM or torch: not a base install" >&2; exit 1
fi

PORT=$("$ENGINE_PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
MODEL=$("$ENGINE_PY" -c "from coevolve.engine.models import default_model_dir; print(default_model_dir())")
DTYPE=$("$ENGINE_PY" -c "from coevolve.engine.vllm_engine import resolve_dtype; print(resolve_dtype('auto', 'cpu'))")
# docs/serving.md: no core reserved for the scheduler, the weight type "auto" picks
VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_NUM_OF_RESERVED_CPU=0 setsid "$ENGINE_PY" -m vllm.entrypoints.openai.api_server --model "$MODEL" \
  --served-model-name smollm2-135m --host 127.0.0.1 --port "$PORT" --max-model-len 2048 --dtype "$DTYPE" \
  --enforce-eager --no-enable-chunked-prefill --max-num-batched-tokens 65536 > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill -TERM -- -$SERVER 2>/dev/null || true' EXIT
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && break; sleep 1; done

CONFIG=$OUT/tsp_aco_eoh_endpoint.toml
{ cat examples/tsp_aco_eoh.toml
  printf '\n[endpoint]\nbase_url = "http://127.0.0.1:%s/v1"\nmodel = "smollm2-135m"\n' "$PORT"; } > "$CONFIG"
cd "$OUT"  # not the checkout: the venv's install is what runs
env -u PYTHONPATH -u OPENAI_API_KEY "$OUT/venv/bin/coevolve" run "$CONFIG" --budget "$BUDGET" --out "$OUT/eoh" --no-progress
set +e
env -u PYTHONPATH "$OUT/venv/bin/coevolve" run "$CONFIG" --method eoh+esopt --out "$OUT/esopt" 2> "$OUT/esopt.err"
status=$?
set -e
cat "$OUT/esopt.err"
if [ "$status" -ne 2 ] || ! grep -q "pip install 'coevolve\[cpu\]'" "$OUT/esopt.err" || [ -e "$OUT/esopt" ]; then
  echo "eoh+esopt was not refused with one line before anything started" >&2; exit 1
fi
if grep -q "CPU Generator does not use offset" "$OUT/server.log"; then
  echo "the server hit the chunked-prefill seed crash ($OUT/server.log)" >&2; exit 1
fi
echo "base install OK: eoh ran to the end on the served model, eoh+esopt refused"
