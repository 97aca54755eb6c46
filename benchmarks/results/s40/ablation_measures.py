"""Per-arm proposal measures of a finished comparison (benchmarks/proposal_efficiency.py's `measures`
and `table`, read from each run directory), and the task notes the runs kept, for the context
ablation's record. Usage: .venv/bin/python benchmarks/results/s40/ablation_measures.py COMPARISON_DIR"""
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.proposal_efficiency import measures, table  # noqa: E402
from coevolve.base.records import read_summary  # noqa: E402
from coevolve.report.collecting import collect  # noqa: E402

root = Path(sys.argv[1])
config, cells = collect(root)
rows: dict = {}
notes: Counter = Counter()
for cell in cells:
    directory = root / cell.dir
    rows.setdefault((cell.task, cell.method), []).append(measures(directory, read_summary(directory / "summary.json")))
    for line in (directory / "candidates.jsonl").read_text().splitlines():
        note = json.loads(line).get("feedback")
        if note:
            notes[(cell.method, note.split(";")[0][:90])] += 1
print(table(rows))
print()
print("most frequent task notes kept (arm, first clause):")
for (arm, note), count in notes.most_common(8):
    print(f"  {count:3d}  {arm}: {note}")
