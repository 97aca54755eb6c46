"""Wall time of a heuristic search against a slow endpoint, with and without
`[sandbox] overlap` (scoring each reply as it arrives), side by side in one run.

    .venv/bin/python benchmarks/endpoint_overlap.py [--latency 2.0] [--spread 0.5] [--budget 32] [--batch 8] [--repeats 2]

The endpoint is a loopback OpenAI-compatible server that stands in for a
hosted API: it answers each chat request after `--latency` seconds, times a
factor in [1 - spread, 1 + spread] drawn from the request's seed (a hosted
model's latency varies with the reply's length), with a
working tsp_aco prior that depends on the request's seed (so every program is
new and the sandbox really scores it, ~1 s each on the training set). No
model runs: what is measured is the loop's scheduling, generation waiting
on the network while the sandbox works. The two arms run alternately
(on, off, off, on, ...) with the same config and seeds; each run's candidates
must be the same in both arms (objectives included), which the script
checks before it prints the ratio of the arms' mean loop times
(timing.json total_s).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "slow-api"


def program(seed: int) -> str:
    power = 1.0 + random.Random(seed).random()  # a prior per seed: every reply is a new program
    return (f"{{closer cities, sharper by {power:.4f}}}\n```python\nimport numpy as np\n\n\n"
            f"def heuristics(distance_matrix):\n    return 1.0 / distance_matrix ** {power:.4f}\n```")


def serve(latency: float, spread: float) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def answer(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # the run's probe: /v1/models
            self.answer({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "benchmark"}]})

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            seed = int(request.get("seed", 0))
            time.sleep(latency * (1 + spread * (2 * random.Random(-seed).random() - 1)))
            text = program(seed)
            self.answer({"id": "x", "object": "chat.completion", "created": 0, "model": MODEL,
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": text}}],
                         "usage": {"prompt_tokens": 100, "completion_tokens": len(text.split()),
                                   "total_tokens": 100 + len(text.split())}})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def config(base_url: str, overlap: bool, budget: int, batch: int, concurrency: int) -> str:
    return f"""[run]
method = "sample"
task = "tsp_aco"
budget = {budget}
seed = 0

[sample]
batch = {batch}
population = 4

[sandbox]
timeout_s = 60
workers = 2
overlap = {str(overlap).lower()}

[context]
constrain = false

[endpoint]
base_url = "{base_url}"
model = "{MODEL}"
concurrency = {concurrency}
"""


def run(base_url: str, overlap: bool, args: argparse.Namespace, where: Path) -> tuple[float, list]:
    toml = where.with_suffix(".toml")
    toml.write_text(config(base_url, overlap, args.budget, args.batch, args.concurrency))
    done = subprocess.run([sys.executable, "-m", "coevolve.cli", "run", str(toml), "--out", str(where),
                           "--no-progress"], cwd=ROOT, capture_output=True, text=True,
                          env={"OPENAI_API_KEY": "none", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    if done.returncode != 0:
        raise SystemExit(f"run failed ({done.returncode}): {done.stderr[-2000:]}")
    timing = json.loads((where / "timing.json").read_text())
    candidates = [json.loads(line) for line in (where / "candidates.jsonl").read_text().splitlines()]
    return timing["total_s"], [(c["code"], c["objective"], c["failure"]) for c in candidates], timing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=2.0, help="seconds the endpoint takes per reply")
    parser.add_argument("--spread", type=float, default=0.0, help="latency varies by up to this share, by seed")
    parser.add_argument("--budget", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8, help="requests per step")
    parser.add_argument("--concurrency", type=int, default=4, help="[endpoint] concurrency")
    parser.add_argument("--repeats", type=int, default=2, help="runs per arm")
    args = parser.parse_args()
    server = serve(args.latency, args.spread)
    base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    seconds: dict[bool, list[float]] = {True: [], False: []}
    seen: dict[bool, list] = {}
    with tempfile.TemporaryDirectory() as scratch:
        order = [arm for i in range(args.repeats) for arm in ((True, False) if i % 2 == 0 else (False, True))]
        for i, overlap in enumerate(order):
            total, candidates, timing = run(base_url, overlap, args, Path(scratch) / f"run{i}")
            seconds[overlap].append(total)
            if seen.setdefault(overlap, candidates) != candidates:
                raise SystemExit("one arm's runs differ from each other")
            print(f"run {i}: overlap {'on ' if overlap else 'off'} loop {total:.1f} s (generate "
                  f"{timing.get('generate_s', 0):.1f} s, evaluate wait {timing.get('evaluate_s', 0):.1f} s, "
                  f"scored early {timing.get('overlapped', 0)})", flush=True)
    server.shutdown()
    if seen[True] != seen[False]:
        raise SystemExit("the arms' candidates differ: overlap changed what the run records")
    valid = sum(objective is not None for _, objective, _ in seen[True])
    on, off = statistics.mean(seconds[True]), statistics.mean(seconds[False])
    print(f"\nsample on tsp_aco, budget {args.budget}, {args.batch} requests per step, endpoint latency "
          f"{args.latency} s (± {args.spread:.0%}), concurrency {args.concurrency}, 2 sandbox workers; {valid} of {len(seen[True])} "
          "candidates valid, the same in both arms")
    print("| arm | runs | loop seconds (mean) |\n|---|---|---|")
    print(f"| overlap off | {len(seconds[False])} | {off:.1f} |\n| overlap on | {len(seconds[True])} | {on:.1f} |")
    print(f"ratio off / on: {off / on:.2f}x")


if __name__ == "__main__":
    main()
