"""The bad-config sweep: generate mutations of every example config, run each through
`coevolve run --plan` / `coevolve compare --plan` in a forked child of a process that has imported
coevolve once (exactly `python -m coevolve ...` minus the import time; checked against real
subprocesses by verify.py), and record exit code, stdout, stderr and any file created.

Usage: PYTHONPATH=/tmp/sweep python sweep.py [--limit N] [--only LABEL]
Writes /tmp/sweep_tools/results.jsonl (one line per mutation)."""
from __future__ import annotations

import argparse
import atexit
import hashlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, "/tmp/sweep_tools")
from mutate import Gen  # noqa: E402
from targeted import (AGENT_COMPARE, AGENT_RUN, HEURISTIC_COMPARE, HEURISTIC_RUN, MATH_TASK, SUDOKU_TASK,  # noqa: E402
                      add_targeted)

ROOT = Path("/tmp/sweep")
WORK = Path("/tmp/sweep_work")
CACHE = Path.home() / ".cache" / "coevolve"
RESULTS = Path("/tmp/sweep_tools/results.jsonl")
MUTNAME = "_sweep_mut.toml"
TIMEOUT = 90


def kind_of(path: Path) -> tuple[str, str]:
    import tomllib
    raw = tomllib.loads(path.read_text())
    if "compare" in raw:
        agent = isinstance(raw["compare"], dict) and raw["compare"].get("kind") == "agent"
        return "compare", "AgentCompareConfig" if agent else "CompareConfig"
    run = raw.get("run", {})
    task = run.get("task") or raw.get("task", {}).get("name", "")
    from tasks.registry import is_agent_task
    agent = is_agent_task(task) if task and not task.endswith(".py") else task == "env.py"
    return "run", "AgentRunConfig" if agent else "RunConfig"


def bases() -> list[Path]:
    found = sorted((ROOT / "examples").rglob("*.toml")) + sorted((ROOT / "docbases").glob("*.toml"))
    found += sorted((ROOT / "scaffolds").glob("*/config.toml"))
    found = [p for p in found if p.name != MUTNAME]
    # the deep ones first: a generic mutation runs on the first config of its class that has the key
    order = ["docbases/heuristic_all.toml", "examples/tsp_eoh_esopt.toml", "examples/compare_quick.toml",
             "docbases/agent_docs.toml", "examples/math_esopt.toml", "examples/agents_compare.toml",
             "scaffolds/myenv/config.toml", "examples/problems/bin_packing/config.toml"]
    rank = lambda p: order.index(str(p.relative_to(ROOT))) if str(p.relative_to(ROOT)) in order else len(order)
    return sorted(found, key=rank)


DEEP = {"examples/tsp_eoh_esopt.toml", "docbases/heuristic_all.toml", "examples/math_esopt.toml",
        "docbases/agent_docs.toml", "examples/compare_quick.toml", "examples/agents_compare.toml",
        "scaffolds/myenv/config.toml", "examples/problems/bin_packing/config.toml"}
TARGET_RUN = {"examples/tsp_eoh_esopt.toml", "docbases/heuristic_all.toml", "scaffolds/myprob/config.toml",
              "examples/tsp_aco_islands.toml", "docbases/map_elites.toml"}
TARGET_AGENT = {"examples/math_esopt.toml": MATH_TASK, "examples/sudoku_esopt_trace2skill.toml": SUDOKU_TASK,
                "docbases/agent_docs.toml": SUDOKU_TASK, "scaffolds/myenv/config.toml": []}
TARGET_COMPARE = {"examples/compare_quick.toml", "docbases/compare_arms.toml", "examples/paper/tsp.toml"}
TARGET_AGENT_COMPARE = {"examples/agents_compare.toml", "docbases/agent_compare_arms.toml"}


def generate() -> list[dict]:
    muts = []
    for path in bases():
        rel = str(path.relative_to(ROOT))
        cmd, cls = kind_of(path)
        g = Gen(path, cmd, cls, rel)
        g.cls = cls
        g.add("baseline (unchanged file)", "valid", [], text=g.text, snip="(unchanged)")
        g.add("baseline (rewritten by the sweep's writer)", "valid", [], raw=g.copy(), snip="(rewritten)")
        g.shallow()
        g.syntax()
        if rel in DEEP:
            g.deep()
        if rel in TARGET_RUN:
            add_targeted(g, HEURISTIC_RUN)
        if rel in TARGET_AGENT:
            add_targeted(g, AGENT_RUN)
            add_targeted(g, TARGET_AGENT[rel])
        if rel in TARGET_COMPARE:
            add_targeted(g, HEURISTIC_COMPARE)
            if rel == "examples/compare_quick.toml":  # the same through `coevolve run --plan` (one arm)
                add_targeted(g, HEURISTIC_COMPARE, cmd="run")
        if rel in TARGET_AGENT_COMPARE:
            add_targeted(g, AGENT_COMPARE)
            if rel == "examples/agents_compare.toml":
                add_targeted(g, AGENT_COMPARE, cmd="run")
        if cmd == "run" and rel in ("examples/tsp_eoh_esopt.toml", "examples/math_esopt.toml"):
            g.add("a run config given to `coevolve compare`", "invalid", ["@FILE", "compare", "run"], text=g.text,
                  snip="coevolve compare RUN_CONFIG --plan", cmd="compare")
        if cmd == "compare":  # a comparison run through `coevolve run --plan` (one arm) too
            g.add("baseline through run --plan", "valid", [], text=g.text, snip="(unchanged)", cmd="run")
        muts.extend(g.muts)
    seen, kinds, out = set(), set(), []
    for m in muts:  # the same text through the same command once; a generic mutation once per config class
        key = (m["base"], m["cmd"], hashlib.sha1(m["text"].encode()).hexdigest())
        if key in seen and not m["desc"].startswith("baseline"):
            continue
        generic = (m["cls"], m["cmd"], m["desc"].replace(" (added)", ""))
        if not m["desc"].startswith(("baseline", "targeted")):
            if generic in kinds:
                continue
            kinds.add(generic)
        seen.add(key)
        m["id"] = f"{len(out):05d}"
        out.append(m)
    return out


# ------------------------------------------------------------------------------------------ runner
def snapshot() -> dict[str, tuple[int, int]]:
    out = {}
    for top in (ROOT, WORK, CACHE, Path("/tmp/sweep_nonexistent")):
        if not top.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            out[dirpath + "/"] = (0, 0)
            for f in filenames:
                if f == MUTNAME or f.endswith(".pyc"):
                    continue
                p = os.path.join(dirpath, f)
                try:
                    st = os.lstat(p)
                except FileNotFoundError:
                    continue
                out[p] = (st.st_mtime_ns, st.st_size)
    return out


def diff(a: dict, b: dict) -> list[str]:
    changes = [f"+{p}" for p in b if p not in a] + [f"-{p}" for p in a if p not in b]
    changes += [f"~{p}" for p in b if p in a and a[p] != b[p] and not p.endswith("/")]
    return sorted(changes)


def run_forked(argv: list[str], cwd: Path, timeout: float = TIMEOUT) -> tuple[int | None, str, str, float]:
    from coevolve.cli import main
    out_path, err_path = cwd.parent / (cwd.name + ".out"), cwd.parent / (cwd.name + ".err")
    sys.stdout.flush(); sys.stderr.flush()
    t0 = time.time()
    pid = os.fork()
    if pid == 0:  # the child: as `python -m coevolve ARGV` would run
        code = 1
        try:
            os.setsid()
            os.chdir(cwd)
            fo = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            fe = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fo, 1); os.dup2(fe, 2)
            sys.argv = ["/tmp/sweep/coevolve/__main__.py", *argv]
            try:
                code = main(argv)
                code = 0 if code is None else code
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
                code = 1
            try:
                atexit._run_exitfuncs()
            except BaseException:
                pass
            sys.stdout.flush(); sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)
    rc = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.time() - t0 > timeout:
            try:
                os.killpg(pid, signal.SIGKILL)  # the child's own session: only what it started
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            rc = None
            break
        time.sleep(0.02)
    wall = time.time() - t0
    out = out_path.read_text(errors="replace") if out_path.exists() else ""
    err = err_path.read_text(errors="replace") if err_path.exists() else ""
    out_path.unlink(missing_ok=True); err_path.unlink(missing_ok=True)
    return rc, out, err, wall


def run_one(m: dict) -> dict:
    base = Path(m["base"])
    mut = base.parent / MUTNAME
    mut.write_text(m["text"], encoding="utf-8", newline="")
    cwd = WORK / f"cwd_{m['id']}"
    cwd.mkdir(parents=True, exist_ok=True)
    before = snapshot()
    argv = [m["cmd"], str(mut), "--plan"]
    rc, out, err, wall = run_forked(argv, cwd)
    after = snapshot()
    changes = [c for c in diff(before, after) if not c.endswith(f"cwd_{m['id']}/")]
    mut.unlink(missing_ok=True)
    leftovers = list(cwd.rglob("*"))
    if not leftovers:
        cwd.rmdir()
    return {**m, "argv": argv, "rc": rc, "stdout": out, "stderr": err, "wall": round(wall, 2), "changes": changes,
            "mutfile": str(mut)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int)
    ap.add_argument("--only")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    import coevolve.cli
    coevolve.cli.build_parser()  # every command module imported once, before the forks
    import coevolve.plan, coevolve.compare, coevolve.report  # noqa: F401
    muts = generate()
    if a.only:
        muts = [m for m in muts if a.only in m["label"] or a.only in m["desc"]]
    if a.limit:
        muts = muts[:a.limit]
    if a.list:
        from collections import Counter
        print(len(muts), Counter(m["label"] for m in muts).most_common())
        return
    done = set()
    if a.resume and RESULTS.exists():
        done = {json.loads(l)["id"] for l in RESULTS.open()}
    WORK.mkdir(exist_ok=True)
    mode = "a" if a.resume else "w"
    t0 = time.time()
    with RESULTS.open(mode) as f:
        for i, m in enumerate(muts):
            if m["id"] in done:
                continue
            r = run_one(m)
            f.write(json.dumps(r, default=str) + "\n"); f.flush()
            if i % 50 == 0:
                print(f"{i}/{len(muts)} {time.time() - t0:.0f}s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
