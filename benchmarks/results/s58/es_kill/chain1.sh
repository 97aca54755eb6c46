#!/bin/bash
# determinism baseline, then scenarios (a) and (b); every engine process under the lock, one at a time
P=/work/main/.venv/bin/python; E=/tmp/s58es/es_kill.py; C=/tmp/ks/cfg/es.toml
flock /tmp/coevolve-engine.lock $P $E scen $C ref_es es_base run
flock /tmp/coevolve-engine.lock $P $E scen $C ref_es es_a crash:events_after:3 run
flock /tmp/coevolve-engine.lock $P $E scen $C ref_es es_b crash:history_after:2 run
