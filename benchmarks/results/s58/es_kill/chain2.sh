#!/bin/bash
# (c) SIGKILL at a moment during generation (time after launch; and 4.3 s after step 0's event), then the
# low-rank reference and (d) its kills; every engine process under the lock, one at a time
P=/work/main/.venv/bin/python; E=/tmp/s58es/es_kill.py; C=/tmp/ks/cfg/es.toml; L=/tmp/ks/cfg/es_lr.toml
T=${T:-$(shuf -i 70-120 -n 1)}; echo "c: t:$T"
flock /tmp/coevolve-engine.lock $P $E scen $C ref_es es_c t:$T run
flock /tmp/coevolve-engine.lock $P $E scen $C ref_es es_c2 ev:2:KILL:4.3 run
flock /tmp/coevolve-engine.lock $P $E ref $L ref_es_lr
flock /tmp/coevolve-engine.lock $P $E scen $L ref_es_lr es_d_a crash:events_after:3 run
flock /tmp/coevolve-engine.lock $P $E scen $L ref_es_lr es_d_c ev:2:KILL:4.3 run
