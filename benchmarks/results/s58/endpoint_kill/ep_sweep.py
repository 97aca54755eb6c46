"""Endpoint kill/resume at HEAD (answered.jsonl): s56's harness, references made anew at HEAD."""
import json, sys
sys.path.insert(0, "/tmp/ks/tools")
import harness
out = []
for cfg in ("tsp_eoh", "tsp_eoh_t2s"):
    path = f"/tmp/ks/cfg/{cfg}.toml"
    ref = harness.reference(path)
    print(f"ref_{cfg}: rc {ref['rc']} stub {ref['stub_requests']} events {ref['events']}", flush=True)
    for name, specs in (("k1d", ["ev:1:KILL:0.4", "run"]), ("k3m", ["ev:3:KILL:0.3", "run"]),
                        ("int", ["ev:3:INT:0.2", "run"]), ("term", ["ev:2:TERM:0.2", "run"]),
                        ("twice", ["ev:2:KILL:0.2", "ev:4:KILL:0.2", "run"]),
                        ("inresume2", ["ev:3", "ev:3:KILL:1.2", "run"])):
        r = harness.scenario(path, f"h58_{cfg}_{name}", specs)
        v = r["verdict"]
        ok = not v["problems"] and not v["diffs"]
        line = (f"{cfg} {name}: {'OK' if ok else 'DIFF'} | stub requests {r['stub_requests']} (reference "
                f"{ref['stub_requests']}) | sessions " + ", ".join(f"{s['spec']}->rc{s.get('rc')}" for s in r["sessions"])
                + ("" if ok else f" | problems {v['problems']} diffs {json.dumps(v['diffs'])[:800]}"))
        print(line, flush=True)
        out.append(line)
