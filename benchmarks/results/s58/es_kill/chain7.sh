#!/bin/bash
# low-rank, weights moving: update 0 (non-flat) in history.jsonl, killed before step 1's event: replayed from history
P=/work/main/.venv/bin/python; E=/tmp/s58es/es_kill.py; L=/tmp/ks/cfg/es_lr2.toml
flock /tmp/coevolve-engine.lock $P $E scen $L ref_es_lr2 es_d2_b crash:history_after:1 run
