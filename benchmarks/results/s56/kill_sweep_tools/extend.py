"""--resume DIR --budget N: a finished tsp_eoh (24) extended to 32, with kills; compared with a fresh budget-32 run
(ref_tsp_eoh32; docs/search.md "More budget": a run without ES extended on a step boundary *is* that run).
Sessions: 'ext' = --resume --budget 32, 'res' = plain --resume; ':ev:K[:DELAY]' kill when events has K lines;
':crash:SPEC' injector."""
import json, subprocess, sys, signal
sys.path.insert(0, "/tmp/ks/tools")
import harness as H
from pathlib import Path

def go(name, specs):
    out = H.WORK / f"x_{name}"
    subprocess.run(["rm", "-rf", str(out)]); subprocess.run(["cp", "-a", str(H.WORK / "ref_tsp_eoh"), str(out)])
    sess = []
    for spec in specs:
        kind, _, rest = spec.partition(":")
        args = ["run", "--resume", str(out), "--no-progress"] + (["--budget", "32"] if kind == "ext" else [])
        kill = crash = None
        if rest.startswith("ev:"):
            p = rest.split(":"); kill = (int(p[1]), signal.SIGKILL, float(p[2]) if len(p) > 2 else 0.0)
        elif rest.startswith("crash:"):
            crash = rest[6:]
        s = H.launch(args, out, kill, crash)
        sess.append(f"{spec}->rc{s['rc']}{' TB' if s['traceback'] else ''} [{s['stderr_tail'].strip().splitlines()[-1][:220] if s['stderr_tail'].strip() else ''}]")
    v = H.compare_dirs(H.WORK / "ref_tsp_eoh32", out)
    # the extend event and the first end event are expected extras
    print(f"ext_{name}: steps/candidates {'SAME' if not ({'steps','candidates','summary.json'} & set(v['diffs'])) else 'DIFF'} | "
          f"{' ; '.join(sess)} | evals {v.get('evaluations')} | problems {v['problems']} | diffs {json.dumps(v['diffs'])[:600]} | types {v['event_types'][-5:]}")

go("plain", ["ext"])
go("kill_mid", ["ext:ev:11:0.3", "res"])
go("kill_mid_ext_again", ["ext:ev:11:0.3", "ext"])
go("kill_first_ext_step", ["ext:ev:10:0.2", "res"])
go("crash_config", ["ext:crash:write:config:after:1", "res", "ext"])
go("crash_before_config", ["ext:crash:write:config:before:1", "res"])
go("kill_end", ["ext:crash:write:summary:after:1", "res"])
