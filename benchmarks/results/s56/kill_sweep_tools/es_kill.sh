#!/bin/bash
# ES (sample+esopt, full noise, real engine): killed right after step 1's event reached events.jsonl and before its
# ES update reached history.jsonl (KS_CRASH=events_after:3), then resumed; compared with ref_es. Each engine
# session under flock /tmp/coevolve-engine.lock.
cd /tmp/ks/work
while ! grep -q '"type": "end"' ref_es/events.jsonl 2>/dev/null; do sleep 5; done
rm -rf s_es_kill
export PYTHONPATH=/tmp/ks/tools/inject:/tmp/ks/src
date
KS_CRASH=events_after:3 flock /tmp/coevolve-engine.lock /work/main/.venv/bin/python -m coevolve run /tmp/ks/cfg/es.toml --out /tmp/ks/work/s_es_kill --no-progress > /tmp/ks/es_k1.out 2> /tmp/ks/es_k1.err
echo "killed session rc=$?"; date
wc -l s_es_kill/history.jsonl; grep -o '"type": "[a-z]*"' s_es_kill/events.jsonl | tr '\n' ' '; echo
flock /tmp/coevolve-engine.lock /work/main/.venv/bin/python -m coevolve run --resume /tmp/ks/work/s_es_kill --no-progress > /tmp/ks/es_k2.out 2> /tmp/ks/es_k2.err
echo "resume rc=$?"; date
grep -v "^INFO\|^WARNING\|^\[" /tmp/ks/es_k2.err | grep -i "weights\|resum\|error\|Traceback" | head -5
/work/main/.venv/bin/python -c "
import sys; sys.path.insert(0,'/tmp/ks/tools'); import harness, pathlib, json
v=harness.compare_dirs(pathlib.Path('/tmp/ks/work/ref_es'), pathlib.Path('/tmp/ks/work/s_es_kill'))
print('ES verdict', v['ok'], v['problems'], json.dumps(v['diffs'])[:1500], v['evaluations'], v['event_types'])"
