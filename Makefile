# The two commands of the README. Both set everything up first (idempotent).
VENV ?= .venv

.PHONY: setup demo test
setup:
	bash scripts/setup.sh

demo: setup
	$(VENV)/bin/coevolve run examples/tsp_eoh_esopt.toml

test: setup
	$(VENV)/bin/python -m pytest -q -rs --durations=15
