#!/bin/bash
# `coevolve report CMPDIR` in a loop while `coevolve compare` runs: does a partial report overwrite the final one?
cd /tmp/ks/work; R="env PYTHONPATH=/tmp/ks/src /work/main/.venv/bin/python -m coevolve"; D=${1:-crace}; rm -rf $D
$R compare /tmp/ks/cfg/cmp2.toml --out $D --no-progress > /tmp/ks/$D.out 2>&1 & A=$!
sleep 1
while kill -0 $A 2>/dev/null; do $R report $D > /dev/null 2>&1; done
wait $A; echo "compare rc=$?"
grep -o "Runs finished: [0-9]* of [0-9]*" $D/report.md
python3 -c "
import json; r=json.load(open('$D/results.json')); print('results.json keys', list(r)[:8])" 
grep -c "not compared yet\|not finished\|partial" $D/report.md
