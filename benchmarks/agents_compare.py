"""Base vs ES-tuned vs skill vs both on held-out Sudoku, one engine, one run.

Each training method (esopt, trace2skill, esopt+trace2skill) gets the same
episode budget, the same train puzzles, the same population x batch rounds
and the same greedy held-out evaluation (`--eval-cases` puzzles of the eval
split); the engine is reset to the checkpoint between methods. "base" is the
held-out score before any training (round 0), which every method also
records: the three should agree, and the table shows it.

Fitness shaping is ON by default (`--shaping 0.5`: fitness = mean(reward +
0.5 x progress)): the embedded 135M model solves almost no puzzle, so binary
rewards alone give ES members equal fitness and no direction. Under constrained
decoding (the default) every reply is well-formed, so shaping moves a member's
fitness only through right cells (docs/agents.md). `--shaping 0`
is the paper's binary reward. The table's "solved" column is always the
binary held-out reward.

Skills are distilled online by default (`--distill online`: trace2skill after
every round, esopt+trace2skill every `--skill-every` generations), as this
comparison was written; `--distill posthoc` distils once after the last round,
the `[agent] distill` default of `coevolve run`.

    python benchmarks/agents_compare.py [--masked 2] [--budget 64] [--eval-cases 16]
        [--population 8] [--batch 4] [--shaping 0.5] [--skill-every 1] [--distill online]
        [--seed-skill skills/sudoku-basics] [--model DIR] [--out DIR]

Writes one run directory per method and results.json under --out
(default runs/agents_compare-<time>).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any
from pathlib import Path

METHODS = ("esopt", "trace2skill", "esopt+trace2skill")
LABELS = {"esopt": "ES-tuned", "trace2skill": "skill", "esopt+trace2skill": "both"}
COLUMNS = ("solved", "progress", "cells_right_fraction", "unparsed", "illegal_moves")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=4, choices=(4, 9), help="sudoku size (default 4)")
    p.add_argument("--masked", type=int, default=2, help="masked cells per puzzle (default 2)")
    p.add_argument("--budget", type=int, default=64, help="training episodes per method (default 64)")
    p.add_argument("--eval-cases", type=int, default=16, help="held-out puzzles (default 16)")
    p.add_argument("--population", type=int, default=8, help="ES members per generation (default 8)")
    p.add_argument("--batch", type=int, default=4, help="train puzzles per member (default 4)")
    p.add_argument("--shaping", type=float, default=0.5,
                   help="fitness = mean(reward + shaping x progress); default 0.5, 0 = binary reward")
    p.add_argument("--skill-every", type=int, default=1,
                   help="generations (rounds) per skill update with --distill online (default 1)")
    p.add_argument("--distill", choices=("online", "posthoc"), default="online",
                   help="online (default): trace2skill distils every round, esopt+trace2skill every --skill-every "
                        "generations; posthoc: once after the last round, best of [agent] distill_seeds")
    p.add_argument("--sigma", type=float, default=3e-3)
    p.add_argument("--sigma-end", type=float, default=1e-3)
    p.add_argument("--alpha", type=float, default=1.5e-3)
    p.add_argument("--max-tokens", type=int, default=12, help="tokens per turn (a move is ~6)")
    p.add_argument("--seed-skill", action="append", default=[], metavar="DIR",
                   help="a skill folder injected in every arm, base included (repeatable; default none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", help="HF checkpoint directory (default: the embedded model)")
    p.add_argument("--out", help="output directory (default runs/agents_compare-<time>)")
    return p.parse_args(argv)


def agent_config(args: argparse.Namespace, method: str):
    """The run config each arm uses: the same file `coevolve run` reads."""
    from coevolve.agents.runconfig import AgentRunConfig
    from coevolve.base.config import build_config

    return build_config(AgentRunConfig, {
        "run": {"method": method, "task": "sudoku" if args.size == 4 else "sudoku9", "budget": args.budget,
                "seed": args.seed},
        "task": {"masked": args.masked},
        "agent": {"population": args.population, "batch": args.batch, "eval_cases": args.eval_cases,
                  "eval_every": 10**9,  # held-out scores before and after training only
                  "skill_every": args.skill_every, "distill": args.distill, "history_turns": 1,
                  "shaping": args.shaping},
        "sampling": {"temperature": 1.0, "max_tokens": args.max_tokens},  # training rollouts, per turn
        "es": {"sigma": args.sigma, "sigma_end": args.sigma_end, "alpha": args.alpha},
        "skills": {"paths": list(args.seed_skill)},
    })


def row(label: str, scores: dict, episodes: int, updates: int, skill: str, seconds: float) -> dict:
    return {"arm": label, "episodes": episodes, "es_updates": updates, "skill": skill, "seconds": seconds,
            **{k: scores.get("mean_reward" if k == "solved" else k, float("nan")) for k in COLUMNS}}


def format_table(rows: list[dict]) -> str:
    header = ["arm", "train episodes", "ES updates", "skill", *COLUMNS, "seconds"]
    lines = [header]
    for r in rows:
        lines.append([r["arm"], str(r["episodes"]), str(r["es_updates"]), r["skill"],
                      *(f"{r[k]:.3f}" for k in COLUMNS), f"{r['seconds']:.0f}"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(line, widths)) + " |" for line in lines]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from coevolve.agents.es_agent import run_agent
    from coevolve.base.config import as_dict, dump_toml
    from coevolve.engine.vllm_engine import Engine
    from coevolve.runstore import RunStore

    configs = {method: agent_config(args, method) for method in METHODS}  # bad sizes fail here, before the engine
    out = Path(args.out or f"runs/agents_compare-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    print(f"{args.size}x{args.size} sudoku, {args.masked} masked, budget {args.budget} episodes per method, "
          f"population {args.population} x batch {args.batch}, {args.eval_cases} held-out puzzles, "
          f"fitness shaping {args.shaping} ({'on' if args.shaping else 'off: binary reward'}); output {out}",
          file=sys.stderr, flush=True)

    engine = Engine(args.model)
    rows: list[dict] = []
    summaries: dict[str, Any] = {}  # method: its AgentSummary
    try:
        checkpoint = engine.checksum()
        for method in METHODS:
            started = time.time()
            config = configs[method]
            store = RunStore.create(out / method.replace("+", "_"), dump_toml(as_dict(config)))
            summary = run_agent(config, store, engine, config.build_task())
            engine.reset()  # the next method starts from the checkpoint, bit for bit
            if engine.checksum() != checkpoint:
                raise RuntimeError("engine.reset() did not restore the checkpoint's weights")
            summaries[method] = summary
            if not rows:
                rows.append(row("base", summary.eval_first.to_json(), 0, 0, "-", 0.0))
            updates = summary.rounds if "esopt" in method else 0
            skill = Path(summary.skill).name if summary.skill else "-"
            rows.append(row(LABELS[method], summary.eval_last.to_json(), summary.ledger.used, updates, skill,
                            round(time.time() - started, 1)))
            print(f"{method}: held-out solved {summary.eval_first.mean_reward:.3f} -> "
                  f"{summary.eval_last.mean_reward:.3f} in {time.time() - started:.0f} s",
                  file=sys.stderr, flush=True)
    finally:
        engine.close()

    starts = {m: s.eval_first.mean_reward for m, s in summaries.items()}
    results = {"args": vars(args), "rows": rows, "base_per_method": starts,
               "summaries": {m: s.model_dump(mode="json", include={"rounds", "eval_first", "eval_last", "ledger",
                                                                   "skill"}) for m, s in summaries.items()}}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"\nHeld-out {args.size}x{args.size} Sudoku, {args.masked} masked, {args.eval_cases} puzzles, greedy; "
          f"{args.budget} training episodes per method; fitness shaping {args.shaping}")
    print(format_table(rows))
    print(f"\nbase held-out solved as each method saw it before training: {starts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
