"""What the sandbox does with values [sandbox] accepts: a huge timeout_s, a huge memory_mb (scoring the
task's template once), and a huge workers count (construction only). Library calls, no engine."""
import sys, time
from coevolve.sandbox import Sandbox
from tasks.registry import heuristic_task
which = sys.argv[1]
task = heuristic_task("tsp_construct")
if which == "workers":
    t = time.time()
    Sandbox(workers=int(sys.argv[2]), timeout_s=30)
    print("constructed in", round(time.time() - t, 2), "s")
else:
    kw = {"timeout_s": float(sys.argv[2])} if which == "timeout" else {"memory_mb": int(sys.argv[2])}
    with Sandbox(workers=1, **kw) as sb:
        r = sb.evaluate(task.template, task)
        print("result:", str(r)[:300])
