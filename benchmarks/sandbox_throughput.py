"""Candidates scored per second: the warm sandbox pool vs one fresh Python
process per candidate (how EoH/LLM4AD-style evaluators run), on the same
candidates, same parallelism, in one run.

    .venv/bin/python benchmarks/sandbox_throughput.py [--task tsp_construct] [--candidates 40] [--workers 2]

Both sides score every candidate on the task's training set and must agree
on every objective; the ratio is warm / fresh candidates per second. Then
what the kernel confinement costs per candidate: a confined fork (PID, mount
and IPC namespaces, read-only mounts, capabilities dropped, seccomp) against
a plain fork, side by side in one process that looks like a warm worker;
and the second pass's stronger boundary (a view of only the Python
installation on a tmpfs with pivot_root, an unprivileged uid, a memory
cgroup made, joined and removed per candidate) against the first.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from coevolve.sandbox import Sandbox
from tasks.registry import get_task

# What a fresh-process evaluator does for every candidate: start Python,
# import numpy and the task, build the instances, run the code.
FRESH_SCRIPT = """
import json, sys
from tasks.base import evaluate_in_process
from tasks.registry import get_task
task = get_task(sys.argv[1])
instances = task.instances(*task.train)
namespace = {}
exec(sys.stdin.read(), namespace)
print(json.dumps(evaluate_in_process(task, namespace[task.function_name], instances)))
"""


# Runs in its own process: unshare(CLONE_NEWNET) must not touch this one.
FORK_COST_SCRIPT = """
import os, sys, tempfile, time
import numpy
from coevolve.sandbox import cgroup, confine
confine.isolate_network()
scratch = tempfile.mkdtemp()
os.chmod(scratch, 0o711)
reason, view = confine.probe(scratch)
if reason:
    print("unconfined: " + reason)
    raise SystemExit(0)
workdir = os.path.join(scratch, "w")
os.mkdir(workdir)
host_view = confine.View(False, view.root, [])
cgroups, why = cgroup.find()
def timed(fork, enter, count, memory=False):
    began = time.perf_counter()
    for _ in range(count):
        group = cgroups.create(256 << 20) if memory and cgroups else None
        pid = fork()
        if pid == 0:
            if group:
                cgroups.join(group)
            enter()
            os._exit(0)
        os.waitpid(pid, 0)
        if group:
            cgroups.remove(group)
    return (time.perf_counter() - began) / count
count = int(sys.argv[1])
forker = confine.forker()
totals = [0.0, 0.0, 0.0]
for _ in range(3):  # interleaved rounds: load changes hit all alike
    totals[0] += timed(os.fork, lambda: None, count)
    totals[1] += timed(forker, lambda: confine.enter(workdir, host_view), count)
    if view.hidden:
        totals[2] += timed(forker, lambda: confine.enter(workdir, view), count, memory=True)
print(" ".join(f"{t / 3 * 1000:.2f}" for t in totals), cgroups.kind.replace(" ", "") if cgroups else "rlimit",
      int(view.hidden))
"""


def fork_cost(count: int = 30) -> str:
    run = subprocess.run([sys.executable, "-c", FORK_COST_SCRIPT, str(count)], capture_output=True,
                         text=True, timeout=300, check=True)
    line = run.stdout.strip()
    if line.startswith("unconfined"):
        return line
    plain, host_view, hidden, memory, hidden_ok = line.split()
    plain_ms, host_ms, hidden_ms = float(plain), float(host_view), float(hidden)
    text = (f"confinement   : {host_ms - plain_ms:7.2f} ms per candidate with the read-only host view "
            f"(confined fork {host_ms:.2f} ms, plain fork {plain_ms:.2f} ms)")
    if hidden_ok == "1":
        text += (f"\nsecond pass   : {hidden_ms - plain_ms:7.2f} ms per candidate with the hidden view, "
                 f"unprivileged uid and a memory cgroup ({memory}): {hidden_ms - host_ms:+.2f} ms "
                 f"over the host view (confined fork {hidden_ms:.2f} ms)")
    return text


def tsp_candidates(count: int) -> list[str]:
    """Distinct select_next_node programs: distance minus a weighted pull
    towards the start, one weight each."""
    programs = []
    for index in range(count):
        weight = round(0.02 * index, 3)
        programs.append(
            "import numpy as np\n\n"
            "def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):\n"
            f"    score = distance_matrix[current_node][unvisited_nodes] - {weight} * distance_matrix[destination_node][unvisited_nodes]\n"
            "    return unvisited_nodes[np.argmin(score)]\n"
        )
    return programs


def fresh_process(code: str, task: str) -> float:
    run = subprocess.run([sys.executable, "-c", FRESH_SCRIPT, task], input=code, capture_output=True,
                         text=True, timeout=300, check=True)
    return float(json.loads(run.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="tsp_construct")
    parser.add_argument("--candidates", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    task = get_task(args.task)
    if args.task != "tsp_construct":
        programs = [task.template] * args.candidates
    else:
        programs = tsp_candidates(args.candidates)
    split, size = task.train
    print(f"{args.task} {split}{size}: {len(programs)} candidates, {args.workers} in parallel")

    # Workers start on first use, so their start-up is inside warm_s: the
    # comparison charges the pool for everything it does.
    warm_began = time.perf_counter()
    with Sandbox(workers=args.workers, timeout_s=300) as sandbox:
        results = sandbox.evaluate_many([(code, args.task, None, None) for code in programs])
        confined = sandbox.confined
        boundary = sandbox.boundary
    warm_s = time.perf_counter() - warm_began
    failed = [r for r in results if not r.ok]
    if failed:
        raise SystemExit(f"warm pool: {len(failed)} candidates failed, first: {failed[0].message}")
    per_candidate = sum(r.seconds for r in results) / len(results)

    fresh_began = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as threads:
        fresh = list(threads.map(lambda code: fresh_process(code, args.task), programs))
    fresh_s = time.perf_counter() - fresh_began

    mismatches = [i for i, (r, f) in enumerate(zip(results, fresh)) if abs(r.objective - f) > 1e-9 * abs(f)]
    if mismatches:
        raise SystemExit(f"objectives differ between the two ways for candidates {mismatches}")
    warm_rate, fresh_rate = len(programs) / warm_s, len(programs) / fresh_s
    print(f"warm pool     : {warm_rate:7.2f} candidates/s  ({warm_s:.2f} s, worker start-up included, "
          f"{'confined' if confined else 'NOT confined'}; hidden view {boundary['hidden_view']}, "
          f"memory limit {'/'.join(boundary['memory_limit'])})")
    print(f"fresh process : {fresh_rate:7.2f} candidates/s  ({fresh_s:.2f} s)")
    print(f"ratio         : {warm_rate / fresh_rate:7.2f}x")
    print(fork_cost())
    print(f"one evaluation (child + trusted scoring): {per_candidate * 1000:.0f} ms on average; "
          f"2000 candidates at this rate: {2000 / warm_rate / 60:.1f} min with {args.workers} workers")


if __name__ == "__main__":
    main()
