#!/bin/bash
C="/work/main/.venv/bin/python /tmp/ks/tools/cmp_harness.py"
A=runs/tsp_construct
$C arm1_mid path:$A/sample-b16-s0/events.jsonl:3:KILL:0.1 run          # mid arm 1
$C arm1_first path:$A/sample-b16-s0/events.jsonl:1:KILL:0.2 run        # arm 1, first step
$C arm2_start path:$A/eoh-b16-s0/events.jsonl:1:KILL:0 run             # arm 2 just started
$C arm2_mid_int path:$A/eoh-b16-s0/events.jsonl:3:INT:0.1 run          # Ctrl-C in arm 2
$C arm2_end path:$A/eoh-b16-s0/summary.json::KILL:0 run                # arm 2 summary written
$C testing path:$A/sample-b16-s0/test.json::KILL:0 run                 # during test scoring
$C results path:results.json::KILL:0 run                               # results.json there, report not yet?
$C crash_results crash:write:results:before:1 run
$C crash_report crash:write:report:before:1 run
$C crash_test crash:write:test:after:1 run
$C twice path:$A/sample-b16-s0/events.jsonl:3:KILL:0.1 path:$A/eoh-b16-s0/events.jsonl:3:KILL:0.1 run
$C torn crash:events_torn:4 run
