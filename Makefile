# The two commands of the README. Both set everything up first (idempotent).
VENV ?= .venv
export COEVOLVE_VENV := $(VENV)

.PHONY: setup demo test lock check-env
setup:
	bash scripts/setup.sh

demo: setup
	$(VENV)/bin/coevolve run examples/tsp_eoh_esopt.toml

# The environment must be the locked one before the suite says anything.
check-env:
	$(VENV)/bin/python scripts/envlock.py check

# PYTEST_ARGS: extra pytest flags, e.g. PYTEST_ARGS=--durations=0 for every test's time
PYTEST_ARGS ?=
test: setup check-env
	$(VENV)/bin/python -m pytest -q -rsx --durations=15 $(PYTEST_ARGS)

# Refresh both locks after the suite passed in $(VENV) with new versions:
# the CPU set is frozen from the venv, the CUDA set resolved by uv (not installed).
lock:
	$(VENV)/bin/python scripts/envlock.py freeze-cpu
	$(VENV)/bin/python scripts/envlock.py resolve-cuda
