#!/bin/bash
# (c) at a random moment inside step 1 and inside step 2 (under load a kill timed from launch lands in step 0):
# SIGKILL D s after the previous step's event reached events.jsonl, D drawn in 1.0-15.0 s
P=/work/main/.venv/bin/python; E=/tmp/s58es/es_kill.py; C=/tmp/ks/cfg/es.toml
for K in 2 3; do D=$(python3 -c "import random; print(round(random.uniform(1, 15), 1))"); echo "es_r$K: ev:$K:KILL:$D"
  flock /tmp/coevolve-engine.lock $P $E scen $C ref_es es_r$K ev:$K:KILL:$D run; done
