"""prompts.jsonl of every resumed scenario dir vs its reference: the last record per (step, slot, analyst) must
match the reference's (sha256), and every sha must have its messages somewhere in the file."""
import json, sys
from pathlib import Path
W = Path("/tmp/ks/work")

def last(p):
    recs = [json.loads(l) for l in p.read_text().splitlines() if l.strip()]
    d = {}
    for r in recs:
        d[(r.get("step"), r.get("slot"), bool(r.get("analyst")))] = r.get("sha256")
    have = {r.get("sha256") for r in recs if r.get("messages") is not None}
    missing = {s for s in d.values() if s not in have}
    return d, missing, len(recs)

bad = 0; n = 0
for s in sorted(W.glob("s_*")):
    name = s.name[2:]
    ref = next((W / f"ref_{c}" for c in ("tsp_eoh_t2s", "tsp_sample", "tsp_eoh", "aco_islands", "aco_map") if name.startswith(c + "_")), None)
    if ref is None or not (s / "prompts.jsonl").exists():
        continue
    a, ma, na = last(ref / "prompts.jsonl"); b, mb, nb = last(s / "prompts.jsonl"); n += 1
    if a != b or mb:
        bad += 1
        print(name, "DIFF", "keys ref", len(a), "got", len(b), "differing", sum(a.get(k) != b.get(k) for k in set(a) | set(b)), "missing messages", len(mb), "records", na, nb)
print(f"{n} scenario dirs checked, {bad} with prompts.jsonl differences")
