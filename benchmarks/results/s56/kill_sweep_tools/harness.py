"""Kill/resume sweep harness. Library + CLI.

python harness.py ref CFG NAME            -> uninterrupted reference run in /tmp/ks/work/ref_NAME
python harness.py scen CFG NAME SPEC...   -> sessions; each SPEC is one session:
     run            : uninterrupted (first session runs CFG --out, later ones --resume)
     ev:K[:SIG]     : kill (SIGKILL default; INT = SIGINT to the process group like Ctrl-C, TERM) once events.jsonl
                      holds >= K lines
     crash:SPEC     : KS_CRASH injector (tools/inject/sitecustomize.py), e.g. crash:events_torn:3
   then compares with ref_NAME and prints a JSON verdict.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PY = "/work/main/.venv/bin/python"
WORK = Path("/tmp/ks/work")
ENV = {**os.environ, "PYTHONPATH": "/tmp/ks/tools/inject:/tmp/ks/src"}
ENV.pop("KS_CRASH", None)
ENV.pop("OPENAI_API_KEY", None)
STUBLOG = Path("/tmp/ks/stub_18901.log")


def stub_requests() -> int:
    try:
        return sum(1 for _ in STUBLOG.open())
    except FileNotFoundError:
        return 0


def lines_in(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def session_procs(pgid: int) -> list[str]:
    out = subprocess.run(["ps", "-o", "pid=,pgid=,args=", "-e"], capture_output=True, text=True).stdout
    return [l.strip() for l in out.splitlines() if l.split() and len(l.split()) > 1 and l.split()[1] == str(pgid)]


def launch(args: list[str], out: Path, kill: tuple | None, crash: str | None, timeout: float = 600) -> dict:
    env = dict(ENV)
    if crash:
        env["KS_CRASH"] = crash

    def pre():
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    t0 = time.time()
    p = subprocess.Popen([PY, "-m", "coevolve", *args], cwd=WORK, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=pre)
    killed = None
    if kill:
        k, sig, delay = kill
        ev = out / "events.jsonl"
        while p.poll() is None:
            if (k == "summary" and (out / "summary.json").exists() and lines_in(ev) and not (out / "best.py").exists()) \
                    or (isinstance(k, int) and lines_in(ev) >= k):
                if delay:
                    time.sleep(delay)
                if sig == signal.SIGINT:
                    os.killpg(p.pid, sig)  # Ctrl-C: the whole foreground group
                else:
                    os.kill(p.pid, sig)  # a crash: the main process alone
                killed = {"at_lines": lines_in(ev), "sig": int(sig)}
                break
            time.sleep(0.002)
    try:
        so, se = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        so, se = p.communicate()
    time.sleep(0.3)
    left = session_procs(p.pid)
    if left:
        os.killpg(p.pid, signal.SIGKILL)  # our own session's leftovers (sandbox workers)
    return {"args": args, "rc": p.returncode, "killed": killed, "crash": crash, "secs": round(time.time() - t0, 1),
            "leftover_procs": len(left), "stderr_tail": se[-1500:], "stdout_tail": so[-600:],
            "traceback": "Traceback" in se or "Traceback" in so}


IGNORE = {"seconds", "out"}


def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in IGNORE}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x


def diff(x, y, path="", out=None, limit=12):
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y), key=str):
            if k not in x or k not in y:
                out.append(f"{path}.{k}: only in {'ref' if k in x else 'got'}")
            else:
                diff(x[k], y[k], f"{path}.{k}", out, limit)
    elif isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            out.append(f"{path}: len ref {len(x)} got {len(y)}")
        for i, (u, v) in enumerate(zip(x, y)):
            diff(u, v, f"{path}[{i}]", out, limit)
    elif x != y:
        out.append(f"{path}: ref {repr(x)[:100]} got {repr(y)[:100]}")
    return out


def read_raw_jsonl(path: Path) -> tuple[list, list[str]]:
    problems, records = [], []
    if not path.exists():
        return [], [f"{path.name} missing"]
    raw = path.read_bytes()
    parts = raw.split(b"\n")
    if parts[-1]:
        problems.append(f"{path.name}: torn tail of {len(parts[-1])} bytes")
    for i, line in enumerate(parts[:-1], 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            problems.append(f"{path.name}: line {i} unreadable")
    return records, problems


def dashboard(d: Path) -> list[str]:
    code = ("import sys, json\nfrom coevolve.dashboard import reader\nfrom coevolve.dashboard.app import create_app\n"
            "from starlette.testclient import TestClient\n"
            "reg = reader.Registry.open([sys.argv[1]], stale_after=600)\nc = TestClient(create_app(reg))\n"
            "bad = []\nr = c.get('/api/runs'); bad += [] if r.status_code == 200 else ['runs %d' % r.status_code]\n"
            "for ident, e in reg.entries.items():\n"
            "    paths = [f'/api/compare/{ident}'] if e.kind == 'comparison' else [f'/api/run/{ident}{p}' for p in ['', '/candidates', '/tree', '/population']]\n"
            "    for p in paths:\n"
            "        r = c.get(p)\n"
            "        if r.status_code != 200: bad.append(f'{p} {r.status_code} {r.text[:200]}')\n"
            "    row = reader.summarise(e, 600.0)\n"
            "    print('STATE', json.dumps({k: row.get(k) for k in ('state', 'evaluations', 'used', 'best') if k in row}, default=str))\n"
            "print('BAD', json.dumps(bad))\n")
    r = subprocess.run([PY, "-c", code, str(d)], cwd=WORK, env=ENV, capture_output=True, text=True)
    res = [l for l in r.stdout.splitlines() if l.startswith(("STATE", "BAD"))]
    if r.returncode:
        res.append("dashboard rc %d %s" % (r.returncode, r.stderr[-400:]))
    return res


def compare_dirs(ref: Path, got: Path) -> dict:
    v: dict = {"problems": [], "diffs": {}}
    ev_ref, _ = read_raw_jsonl(ref / "events.jsonl")
    ev, probs = read_raw_jsonl(got / "events.jsonl")
    v["problems"] += probs
    v["event_types"] = [e.get("type") for e in ev]
    steps = [e for e in ev if e.get("type") == "step"]
    nums = [e["step"] for e in steps]
    if nums != list(range(len(nums))):
        v["problems"].append(f"step numbers {nums}")
    ref_steps = [e for e in ev_ref if e.get("type") == "step"]
    d = diff(strip(ref_steps), strip(steps), "steps")
    if d:
        v["diffs"]["steps"] = d
    others_ref = [strip(e) for e in ev_ref if e.get("type") != "step"]
    others = [strip(e) for e in ev if e.get("type") != "step"]
    d = diff(others_ref, others, "other_events")
    if d:
        v["diffs"]["other_events"] = d
    c_ref, _ = read_raw_jsonl(ref / "candidates.jsonl")
    c, probs = read_raw_jsonl(got / "candidates.jsonl")
    v["problems"] += probs
    ids = [x.get("id") for x in c]
    if len(ids) != len(set(ids)):
        v["problems"].append("duplicate candidate ids")
    d = diff(strip(c_ref), strip(c), "candidates")
    if d:
        v["diffs"]["candidates"] = d
    for name in ("summary.json", "genealogy.json", "endpoint.json"):
        a, b = ref / name, got / name
        if a.exists() != b.exists():
            v["problems"].append(f"{name}: exists ref {a.exists()} got {b.exists()}")
        elif a.exists():
            d = diff(strip(json.loads(a.read_text())), strip(json.loads(b.read_text())), name)
            if d:
                v["diffs"][name] = d
    for name in ("best.py",):
        a, b = ref / name, got / name
        if a.exists() != b.exists() or (a.exists() and a.read_bytes() != b.read_bytes()):
            v["problems"].append(f"{name} differs")
    pa = sorted(p.name for p in (ref / "population").glob("*.json"))
    pb = sorted(p.name for p in (got / "population").glob("*.json"))
    if pa != pb:
        v["problems"].append(f"population files ref {pa} got {pb}")
    for n in set(pa) & set(pb):
        d = diff(strip(json.loads((ref / "population" / n).read_text())),
                 strip(json.loads((got / "population" / n).read_text())), "population/" + n)
        if d:
            v["diffs"].setdefault("population", []).extend(d)
    # skills
    sa = sorted(str(p.relative_to(ref)) for p in ref.glob("skills/**/SKILL.md"))
    sb = sorted(str(p.relative_to(got)) for p in got.glob("skills/**/SKILL.md"))
    if sa != sb:
        v["problems"].append(f"skills ref {sa} got {sb}")
    for s in set(sa) & set(sb):
        if (ref / s).read_bytes() != (got / s).read_bytes():
            v["problems"].append(f"{s} differs")
    # ES history
    if (ref / "history.jsonl").exists() or (got / "history.jsonl").exists():
        h_ref, _ = read_raw_jsonl(ref / "history.jsonl")
        h, probs = read_raw_jsonl(got / "history.jsonl")
        v["problems"] += probs
        d = diff(strip(h_ref), strip(h), "history")
        if d:
            v["diffs"]["history"] = d
    # ledger
    try:
        s = json.loads((got / "summary.json").read_text())
        v["evaluations"] = s.get("evaluations")
        v["ledger"] = s.get("ledger")
    except Exception as exc:  # noqa
        v["problems"].append(f"summary unreadable: {exc}")
    # report
    r = subprocess.run([PY, "-m", "coevolve", "report", str(got)], cwd=WORK, env=ENV, capture_output=True, text=True)
    v["report_rc"] = r.returncode
    if r.returncode or "Traceback" in r.stderr:
        v["problems"].append(f"report rc {r.returncode}: {r.stderr[-300:]}")
    v["dashboard"] = dashboard(got)
    if any(l.startswith("BAD") and l != "BAD []" for l in v["dashboard"]) or any("rc" in l for l in v["dashboard"]):
        v["problems"].append("dashboard: " + " | ".join(v["dashboard"]))
    v["ok"] = not v["problems"] and not v["diffs"]
    return v


def scenario(cfg: str, name: str, specs: list[str], extra: list[str] | None = None) -> dict:
    out = WORK / f"s_{name}"
    subprocess.run(["rm", "-rf", str(out)])
    before = stub_requests()
    sessions = []
    for i, spec in enumerate(specs):
        args = (["run", cfg, "--out", str(out)] + (extra or []) if i == 0 else ["run", "--resume", str(out)])
        args.append("--no-progress")
        kill = crash = None
        if spec.startswith("ev:"):
            parts = spec.split(":")
            k = parts[1] if parts[1] == "summary" else int(parts[1])
            sig = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "KILL": signal.SIGKILL}[parts[2] if len(parts) > 2 else "KILL"]
            kill = (k, sig, float(parts[3]) if len(parts) > 3 else 0.0)
        elif spec.startswith("crash:"):
            crash = spec[len("crash:"):]
        sessions.append({"spec": spec, **launch(args, out, kill, crash)})
    res = {"name": name, "cfg": cfg, "sessions": sessions, "stub_requests": stub_requests() - before}
    res["verdict"] = compare_dirs(WORK / f"ref_{Path(cfg).stem}", out)
    return res


def reference(cfg: str) -> dict:
    out = WORK / f"ref_{Path(cfg).stem}"
    subprocess.run(["rm", "-rf", str(out)])
    before = stub_requests()
    r = launch(["run", cfg, "--out", str(out), "--no-progress"], out, None, None)
    r["stub_requests"] = stub_requests() - before
    r["events"] = lines_in(out / "events.jsonl")
    r["event_types"] = [json.loads(l)["type"] for l in (out / "events.jsonl").open()]
    return r


def brief(res: dict) -> str:
    v = res["verdict"]
    ss = "; ".join(f"{s['spec']}->rc{s['rc']}{' TB' if s['traceback'] else ''}"
                   f"{' left' + str(s['leftover_procs']) if s['leftover_procs'] else ''}" for s in res["sessions"])
    return (f"{res['name']}: {'OK' if v['ok'] else 'DIFF'} | {ss} | evals {v.get('evaluations')} "
            f"req {res['stub_requests']} | problems {v['problems']} | diffs {list(v['diffs'])}")


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "ref":
        print(json.dumps(reference(sys.argv[2]), indent=1))
    elif what == "scen":
        r = scenario(sys.argv[2], sys.argv[3], sys.argv[4:])
        Path(f"/tmp/ks/results").mkdir(exist_ok=True)
        Path(f"/tmp/ks/results/{sys.argv[3]}.json").write_text(json.dumps(r, indent=1))
        print(brief(r))
