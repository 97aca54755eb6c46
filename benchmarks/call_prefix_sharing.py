"""The main job with and without prompt-KV sharing inside one engine call, side by side on one engine.

A batch of proposals repeats the task's prompt (an EoH step sends its description, template and
signature to every offspring); outside a `shared_prefixes()` block the requests of one call share
their prompt blocks (one vLLM cache salt per call, docs/es.md). The "per request" arm gives every
request a salt of its own, as the engine did before (nothing shared). The arms alternate on one
low-rank engine (per call, per request, per request, per call, ...), each round running
examples/tsp_eoh_esopt.toml at the same budget and seed in a fresh directory, so both arms sample
the same candidates if sharing leaves the tokens as they were; the script checks that they do.

    python benchmarks/call_prefix_sharing.py --budget 24 --rounds 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=24, help="evaluations per run (the main job's is 48)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating pairs of arms")
    args = parser.parse_args(argv)

    from benchmarks.common import run_one
    from coevolve.engine.vllm_engine import Engine
    from coevolve.es.optimizer import engine_options
    from coevolve.sandbox import Sandbox

    raw = tomllib.loads((ROOT / "examples" / "tsp_eoh_esopt.toml").read_text())
    raw["run"]["budget"] = args.budget
    es = raw["es"]
    engine = Engine(**engine_options(es["noise"], es["rank"], es["population"]))
    generate = engine.llm.generate
    salts = itertools.count()

    def per_request(prompts, *rest, **kwargs):
        # the engine before this change: a salt of its own for every request
        return generate([{**p, "cache_salt": f"alone-{next(salts)}"} for p in prompts], *rest, **kwargs)

    def run(arm: str, root: Path, index: int, sandbox) -> tuple[float, float, list]:
        engine.reset()  # each run starts from θ0: the ES generations of the one before moved it
        engine.llm.generate = generate if arm == "per call" else per_request
        try:
            start = time.perf_counter()
            run_one(root / f"{index}", raw, engine, sandbox)
            seconds = time.perf_counter() - start
        finally:
            engine.llm.generate = generate
        timing = json.loads((root / f"{index}" / "timing.json").read_text())
        codes = [json.loads(line)["code"] for line in (root / f"{index}" / "candidates.jsonl").read_text().splitlines()]
        return seconds, timing["generate_s"], codes

    times: dict[str, list[float]] = {"per call": [], "per request": []}
    generating: dict[str, list[float]] = {"per call": [], "per request": []}
    candidates: set = set()
    with tempfile.TemporaryDirectory() as tmp, Sandbox(timeout_s=30) as sandbox:
        index = 0
        for r in range(args.rounds):
            for arm in (("per call", "per request") if r % 2 == 0 else ("per request", "per call")):
                seconds, gen_s, codes = run(arm, Path(tmp), index, sandbox)
                index += 1
                times[arm].append(seconds)
                generating[arm].append(gen_s)
                candidates.add(tuple(codes))
                print(f"round {r} {arm:>11}: {seconds:6.1f} s run, {gen_s:6.1f} s generating, "
                      f"{sum(c is not None for c in codes)} of {len(codes)} candidates with code", flush=True)
    shared, alone = statistics.median(times["per call"]), statistics.median(times["per request"])
    gen_shared, gen_alone = statistics.median(generating["per call"]), statistics.median(generating["per request"])
    print(f"median run: per call {shared:.1f} s, per request {alone:.1f} s, ratio {shared / alone:.2f}x")
    print(f"median generating: per call {gen_shared:.1f} s, per request {gen_alone:.1f} s, "
          f"ratio {gen_shared / gen_alone:.2f}x")
    print(f"every run sampled the same candidates: {len(candidates) == 1}")
    engine.close()
    return 0 if len(candidates) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
