#!/bin/bash
# usage: sweep.sh CFGNAME LASTSTEPLINE   (LASTSTEPLINE = lines in events.jsonl once every step is logged)
c=$1; L=$2; H="/work/main/.venv/bin/python /tmp/ks/tools/harness.py scen /tmp/ks/cfg/$c.toml"
$H ${c}_k1 ev:1 run                      # during the first step (start event only)
$H ${c}_k1d ev:1:KILL:0.4 run            # in the first step, 0.4 s in (requests/sandbox busy)
$H ${c}_k2 ev:2 run                      # right after step 0 logged
$H ${c}_k3m ev:3:KILL:0.3 run            # mid step 2
$H ${c}_kL ev:$L run                     # all steps logged, before end/summary
$H ${c}_int ev:3:INT:0.2 run             # Ctrl-C mid step
$H ${c}_term ev:2:TERM:0.2 run           # SIGTERM mid step
$H ${c}_twice ev:2:KILL:0.2 ev:4:KILL:0.2 run   # killed, resumed, killed again, resumed
$H ${c}_inresume ev:3 ev:3 run           # the resume itself killed at once (during startup/replay)
$H ${c}_inresume2 ev:3 ev:3:KILL:1.2 run   # the resume killed 1.2 s in (replaying or in its first live step)
$H ${c}_torn crash:events_torn:3 run     # torn line in events.jsonl
$H ${c}_candgap crash:cand_after:2 run   # between a step's candidates lines
$H ${c}_sum crash:write:summary:after:1 run   # summary.json written, best.py/end not yet
$H ${c}_sumb crash:write:summary:before:1 run # just before summary.json
$H ${c}_gen crash:write:gen_:before:2 run     # before a population snapshot
