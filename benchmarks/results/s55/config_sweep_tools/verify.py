"""Rerun chosen sweep results as real subprocesses (`python -m coevolve ARGV` in a fresh folder) and
compare exit code and output with the forked run. Usage: verify.py [ID ...] (default: a seeded sample of 80).
Writes /tmp/sweep_tools/verify.jsonl."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, "/tmp/sweep_tools")
from sweep import MUTNAME, WORK, diff, snapshot  # noqa: E402

PY = "/work/main/.venv/bin/python"


def real(r: dict) -> dict:
    mut = Path(r["mutfile"])
    mut.write_text(r["text"], encoding="utf-8", newline="")
    cwd = WORK / f"verify_{r['id']}"
    cwd.mkdir(parents=True, exist_ok=True)
    before = snapshot()
    p = subprocess.run([PY, "-m", "coevolve", *r["argv"]], cwd=cwd, capture_output=True, text=True, timeout=180,
                       env={"PYTHONPATH": "/tmp/sweep", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    changes = [c for c in diff(before, snapshot()) if f"verify_{r['id']}" not in c]
    mut.unlink(missing_ok=True)
    if not any(cwd.iterdir()):
        cwd.rmdir()
    return {"id": r["id"], "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr, "changes": changes,
            "same_rc": p.returncode == r["rc"], "same_err": p.stderr.strip() == r["stderr"].strip(),
            "same_out": p.stdout.strip() == r["stdout"].strip()}


def main() -> None:
    results = {json.loads(l)["id"]: json.loads(l) for l in open("/tmp/sweep_tools/results.jsonl")}
    ids = sys.argv[1:] or random.Random(0).sample(sorted(results), min(80, len(results)))
    with open("/tmp/sweep_tools/verify.jsonl", "a") as f:
        for i in ids:
            v = real(results[i])
            f.write(json.dumps(v) + "\n")
            flag = "OK " if v["same_rc"] and v["same_err"] else "DIFF"
            print(flag, i, results[i]["rc"], v["rc"], results[i]["desc"][:60])
            if flag == "DIFF":
                print("   fork:", results[i]["stderr"].strip()[-300:])
                print("   real:", v["stderr"].strip()[-300:])


if __name__ == "__main__":
    main()
