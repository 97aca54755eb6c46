#!/bin/bash
# a slow `coevolve report CMPDIR` (KS_CRASH=sleep: it pauses 8 s before writing its first file) started while
# `coevolve compare` runs arm 2; compare finishes meanwhile; which report.md/results.json stay?
cd /tmp/ks/work; D=crace_slow; rm -rf $D
PY="/work/main/.venv/bin/python"; export PYTHONPATH=/tmp/ks/tools/inject:/tmp/ks/src
$PY -m coevolve compare /tmp/ks/cfg/cmp2_slow.toml --out $D --no-progress > /tmp/ks/$D.out 2>&1 & A=$!
until [ -f $D/runs/tsp_construct/eoh-b16-s0/events.jsonl ]; do sleep 0.1; done
KS_CRASH=sleep:report:12 $PY -m coevolve report $D > /tmp/ks/$D.report.out 2>&1 & B=$!
wait $A; echo "compare rc=$? at $(date +%T)"; grep -o "Runs finished: [0-9]* of [0-9]*" $D/report.md
wait $B; echo "slow report rc=$? at $(date +%T)"; grep -o "Runs finished: [0-9]* of [0-9]*" $D/report.md
grep -c '"state": "partial"\|not compared yet' $D/report.md $D/results.json
