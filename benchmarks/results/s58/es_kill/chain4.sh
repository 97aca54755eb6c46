#!/bin/bash
# the same two injector points at the run's one non-flat update (step 2: rewards differ there, in ref_es):
# a2: step 2's event logged, its update not in history.jsonl; b2: step 2's update in history.jsonl, no summary/end
P=/work/main/.venv/bin/python; E=/tmp/s58es/es_kill.py; C=/tmp/ks/cfg/es.toml
flock /tmp/coevolve-engine.lock $P $E scen $C ref_es es_a2 crash:events_after:4 run
flock /tmp/coevolve-engine.lock $P $E scen $C ref_es es_b2 crash:history_after:3 run
