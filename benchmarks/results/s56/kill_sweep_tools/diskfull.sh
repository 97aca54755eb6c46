#!/bin/bash
# run tsp_eoh on a tiny tmpfs (sizes in k), then make room and resume; compare with the reference
cd /tmp/ks/work; R="env PYTHONPATH=/tmp/ks/src /work/main/.venv/bin/python -m coevolve"
for s in "$@"; do
  umount /tmp/ks/full 2>/dev/null; mount -t tmpfs -o size=${s}k tmpfs /tmp/ks/full
  $R run /tmp/ks/cfg/tsp_eoh.toml --out /tmp/ks/full/r --no-progress > /tmp/ks/df.out 2> /tmp/ks/df.err; rc=$?
  err=$(grep "error" /tmp/ks/df.err | head -1 | cut -c1-200); tb=$(grep -c Traceback /tmp/ks/df.err)
  mount -o remount,size=4m /tmp/ks/full
  $R run --resume /tmp/ks/full/r --no-progress > /tmp/ks/df2.out 2> /tmp/ks/df2.err; rc2=$?
  v=$(/work/main/.venv/bin/python -c "
import sys; sys.path.insert(0,'/tmp/ks/tools'); import harness, pathlib
v=harness.compare_dirs(pathlib.Path('/tmp/ks/work/ref_tsp_eoh'), pathlib.Path('/tmp/ks/full/r'))
print(v['ok'], v['problems'], list(v['diffs']), v.get('evaluations'))")
  echo "size ${s}k: rc=$rc tb=$tb [$err] -> resume rc=$rc2 $(grep -c Traceback /tmp/ks/df2.err)tb $(grep error /tmp/ks/df2.err | head -1 | cut -c1-200) :: $v"
done
umount /tmp/ks/full
