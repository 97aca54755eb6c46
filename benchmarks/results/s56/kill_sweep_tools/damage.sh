#!/bin/bash
# damaged run directories (copies of ref_tsp_eoh, finished, or s_killed3, killed after step 1): what resume / report say
cd /tmp/ks/work; R="env PYTHONPATH=/tmp/ks/src /work/main/.venv/bin/python -m coevolve"
t() { # name src python-edit
  rm -rf d_$1 && cp -a $2 d_$1
  python3 - d_$1 "$3" <<'PY'
import sys, os, json, shutil
d, code = sys.argv[1], sys.argv[2]; exec(code)
PY
  $R run --resume d_$1 --no-progress > d_$1.out 2> d_$1.err; rc=$?
  $R report d_$1 > d_$1.rep 2>&1; rr=$?
  echo "== $1: resume rc=$rc tb=$(grep -c Traceback d_$1.err) :: $(grep -v '^$' d_$1.err | grep -v '^resuming' | head -2 | cut -c1-330) :: $(head -1 d_$1.out | cut -c1-120) || report rc=$rr $(grep -i 'error\|note\|warn' d_$1.rep | head -2 | cut -c1-250)"
}
EV='p=d+"/events.jsonl"; L=open(p).read().split("\n")'
t mid_garbage s_killed3 "$EV; L[1]=L[1][:50]+'XX'+L[1][60:]; open(p,'w').write('\n'.join(L))"
t dup_step s_killed3 "$EV; L.insert(2, L[1]); open(p,'w').write('\n'.join(L))"
t del_step s_killed3 "$EV; del L[1]; open(p,'w').write('\n'.join(L))"
t blank_line s_killed3 "$EV; L.insert(2, ''); open(p,'w').write('\n'.join(L))"
t events_emptied s_killed3 "open(d+'/events.jsonl','w').close()"
t events_deleted s_killed3 "os.remove(d+'/events.jsonl')"
t cands_deleted s_killed3 "os.remove(d+'/candidates.jsonl')"
t cands_garbage s_killed3 "open(d+'/candidates.jsonl','a').write('garbage\n')"
t clock_garbage s_killed3 "open(d+'/clock.json','w').write('{oops')"
t pop_deleted s_killed3 "shutil.rmtree(d+'/population')"
t lock_deleted s_killed3 "os.remove(d+'/.writer.lock')"
t endpoint_json_garbage s_killed3 "open(d+'/endpoint.json','w').write('{oops')"
t fin_best_deleted ref_tsp_eoh "os.remove(d+'/best.py')"
t fin_summary_deleted ref_tsp_eoh "os.remove(d+'/summary.json')"
t fin_summary_garbage ref_tsp_eoh "open(d+'/summary.json','w').write('{oops')"
t fin_cands_deleted ref_tsp_eoh "os.remove(d+'/candidates.jsonl')"
t fin_pop_deleted ref_tsp_eoh "shutil.rmtree(d+'/population')"
t fin_genealogy_deleted ref_tsp_eoh "os.remove(d+'/genealogy.json')"
t fin_end_torn ref_tsp_eoh "$EV; L[-2]=L[-2][:10]; open(p,'w').write('\n'.join(L[:-1]))"
