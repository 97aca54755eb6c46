#!/bin/bash
# (d) again on a low-rank run whose weights move: ref_es_lr's rewards were all equal (3 flat updates), so this
# variant decodes unconstrained ([context] constrain = false: some replies hold no code, -1.0, next to failing
# programs, -0.6); the crash lands after the event of the first non-flat update's step, before history.jsonl holds it
P=/work/main/.venv/bin/python; E=/tmp/s58es/es_kill.py; L=/tmp/ks/cfg/es_lr2.toml
flock /tmp/coevolve-engine.lock $P $E ref $L ref_es_lr2
G=$(python3 -c "
import json
h=[json.loads(l) for l in open('/tmp/ks/work/ref_es_lr2/history.jsonl')]
print(next((r['generation'] for r in h if any(r['coefficients'])), 'none'))")
echo "first non-flat generation: $G"
[ "$G" = none ] && exit 0
flock /tmp/coevolve-engine.lock $P $E scen $L ref_es_lr2 es_d2_a crash:events_after:$((G + 2)) run
T=$(shuf -i 20-60 -n 1); echo "es_d2_t: t:$T"
flock /tmp/coevolve-engine.lock $P $E scen $L ref_es_lr2 es_d2_t t:$T run
