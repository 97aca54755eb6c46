import json, sys, collections, re
run = sys.argv[1]
kinds = collections.Counter(); examples = {}
for line in open(f"{run}/candidates.jsonl"):
    c = json.loads(line)
    if c.get("objective") is not None or c["id"] == 0:
        continue
    msg = (c.get("message") or "").strip()
    last = [l for l in msg.splitlines() if l.strip()]
    head = last[-1] if last else ""
    key = (c.get("failure"), re.sub(r"'[^']*'|\d+(\.\d+)?", "_", head)[:90])
    kinds[key] += 1
    examples.setdefault(key, (c["id"], c.get("operator"), head[:200]))
for key, n in kinds.most_common():
    print(n, key, examples[key])
