"""Per run of the s41 Pareto comparison (DIR/runs/tsp_aco/{eoh,pareto}-b48-sS): valid programs, distinct
valid programs (by code), distinct parents drawn, the archive's size after the last step, and for Pareto the
instances its front's programs win. Usage: python pareto_measures.py DIR"""
import json
import sys
from pathlib import Path

root = Path(sys.argv[1]) / "runs" / "tsp_aco"
print("| run | valid | distinct valid programs | distinct parents drawn | archive after the last step | front: instances won |")
print("|---|---|---|---|---|---|")
for run in sorted(root.iterdir()):
    cands = [json.loads(line) for line in (run / "candidates.jsonl").read_text().splitlines()]
    valid = [c for c in cands if c["objective"] is not None]
    distinct = len({c["code"] for c in valid})
    parents = {p for c in cands for p in c["parents"]}
    last = json.loads(sorted((run / "population").glob("gen_*.json"))[-1].read_text())
    front = last.get("pareto")
    wins = ", ".join(f"#{w['id']}:{w['wins']}" for w in front["wins"]) if front else "-"
    print(f"| {run.name} | {len(valid)}/48 | {distinct} | {len(parents)} | {len(last['population'])} | {wins} |")
