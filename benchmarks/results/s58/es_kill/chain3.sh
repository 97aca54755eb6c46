#!/bin/bash
# (c) again: SIGKILL the main process T s after launch, T drawn in 20-60 s (a whole run takes ~70-80 s here when
# the machine is quiet, ~20 s of it the engine start); then twice in a row; then (d) low-rank likewise
P=/work/main/.venv/bin/python; E=/tmp/s58es/es_kill.py; C=/tmp/ks/cfg/es.toml; L=/tmp/ks/cfg/es_lr.toml
for i in 1 2 3; do T=$(shuf -i 20-60 -n 1); echo "es_t$i: t:$T"
  flock /tmp/coevolve-engine.lock $P $E scen $C ref_es es_t$i t:$T run; done
T1=$(shuf -i 25-50 -n 1); T2=$(shuf -i 20-40 -n 1); echo "es_tt: t:$T1 t:$T2"
flock /tmp/coevolve-engine.lock $P $E scen $C ref_es es_tt t:$T1 t:$T2 run
T=$(shuf -i 20-60 -n 1); echo "es_d_t: t:$T"
flock /tmp/coevolve-engine.lock $P $E scen $L ref_es_lr es_d_t t:$T run
