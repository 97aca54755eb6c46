"""Kill/resume of `coevolve compare` (2 arms). python cmp_harness.py NAME SPEC...
SPEC: run | path:REL[:N]:SIG:DELAY (kill once file REL under OUT exists, with >= N lines if N given) | crash:INJ"""
import json, os, signal, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, "/tmp/ks/tools")
import harness as H

CFG = "/tmp/ks/cfg/cmp2.toml"
REF = H.WORK / "ref_cmp2"


def launch(out, spec):
    env = dict(H.ENV)
    kill = None
    if spec.startswith("crash:"):
        env["KS_CRASH"] = spec[6:]
    elif spec.startswith("path:"):
        parts = spec.split(":")
        kill = (parts[1], int(parts[2]) if parts[2] else 0, getattr(signal, "SIG" + parts[3]), float(parts[4]))
    t0 = time.time()
    p = subprocess.Popen([H.PY, "-m", "coevolve", "compare", CFG, "--out", str(out), "--no-progress"], cwd=H.WORK,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    killed = None
    if kill:
        rel, n, sig, delay = kill
        f = out / rel
        while p.poll() is None:
            if f.exists() and (not n or H.lines_in(f) >= n):
                time.sleep(delay)
                (os.killpg if sig == signal.SIGINT else os.kill)(p.pid, sig)
                killed = True
                break
            time.sleep(0.002)
    so, se = p.communicate(timeout=600)
    time.sleep(0.3)
    left = H.session_procs(p.pid)
    if left:
        os.killpg(p.pid, signal.SIGKILL)
    return {"spec": spec, "rc": p.returncode, "killed": killed, "secs": round(time.time() - t0, 1), "left": len(left),
            "traceback": "Traceback" in se, "stderr_tail": se[-1200:], "stdout_tail": so[-800:]}


def strip_times(x):
    if isinstance(x, dict):
        return {k: strip_times(v) for k, v in x.items() if not any(t in k for t in ("second", "time", "_s", "out", "wall", "when", "date"))}
    if isinstance(x, list):
        return [strip_times(v) for v in x]
    return x


name = sys.argv[1]
out = H.WORK / f"c_{name}"
subprocess.run(["rm", "-rf", str(out)])
before = H.stub_requests()
sessions = [launch(out, s) for s in sys.argv[2:]]
v = {"problems": [], "diffs": {}}
for arm in ("sample-b16-s0", "eoh-b16-s0"):
    r = H.compare_dirs(REF / "runs/tsp_construct" / arm, out / "runs/tsp_construct" / arm)
    if not r["ok"]:
        v["problems"].append({arm: [r["problems"], r["diffs"]]})
    for f in ("test.json",):
        a, b = REF / "runs/tsp_construct" / arm / f, out / "runs/tsp_construct" / arm / f
        if not b.exists():
            v["problems"].append(f"{arm}/{f} missing")
        else:
            d = H.diff(strip_times(json.loads(a.read_text())), strip_times(json.loads(b.read_text())), f)
            if d:
                v["diffs"][arm + "/" + f] = d
for f in ("results.json",):
    a, b = REF / f, out / f
    if not b.exists():
        v["problems"].append(f"{f} missing")
    else:
        d = H.diff(strip_times(json.loads(a.read_text())), strip_times(json.loads(b.read_text())), f)
        if d:
            v["diffs"][f] = d
for f in ("table.csv", "runs.csv", "report.md"):
    a, b = REF / f, out / f
    if not b.exists():
        v["problems"].append(f"{f} missing")
    elif a.read_text().replace(str(REF), "X") != b.read_text().replace(str(out), "X"):
        la, lb = a.read_text().replace(str(REF), "X").splitlines(), b.read_text().replace(str(out), "X").splitlines()
        v["diffs"][f] = [f"{x!r} | {y!r}" for x, y in zip(la, lb) if x != y][:6] + ([f"lines {len(la)} vs {len(lb)}"] if len(la) != len(lb) else [])
r = subprocess.run([H.PY, "-m", "coevolve", "report", str(out)], cwd=H.WORK, env=H.ENV, capture_output=True, text=True)
if r.returncode:
    v["problems"].append(f"report rc {r.returncode} {r.stderr[-300:]}")
v["dashboard"] = H.dashboard(out)
res = {"name": name, "sessions": sessions, "stub_requests": H.stub_requests() - before, "verdict": v}
Path(f"/tmp/ks/results/cmp_{name}.json").write_text(json.dumps(res, indent=1))
ss = "; ".join(f"{s['spec']}->rc{s['rc']}{' TB' if s['traceback'] else ''}{' left' if s['left'] else ''}" for s in sessions)
print(f"cmp_{name}: {'OK' if not v['problems'] and not v['diffs'] else 'DIFF'} | {ss} | req {res['stub_requests']} | {v['problems']} | {json.dumps(v['diffs'])[:700]} | dash {v['dashboard']}")
