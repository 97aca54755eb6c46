"""Agent measurements on the embedded model (issue 13's "numbers to show").

    python benchmarks/agents_measure.py formats [--problems 16] [--k 2]
    python benchmarks/agents_measure.py ladder  [--problems 16] [--k 4]
    python benchmarks/agents_measure.py arms --task-option masked=1 --run RUN_DIR [--problems 32] [--k 4]
    python benchmarks/agents_measure.py all [--problems 32] [--budget 128] [--out DIR]

`formats`: free vs constrained decoding (vLLM structured outputs, the task's
action_pattern) on 4x4 Sudoku with 1 masked cell and on react_math, same
held-out problems, same seeds, the paper's sampling (T=1, top-p 1, top-k 40):
well-formed action rate and solved rate (Mean@k), side by side.
`ladder`: base Mean@k / Pass@k on the 4x4 ladder (1, 2, 4 masked; constrained), to pick
the easiest setting whose base solved rate lies strictly inside (0, 1).
`arms`: held-out Mean@k / Pass@k of base, ES-tuned, skill, both for a run
directory (its history.jsonl and distilled skill): the same code path as
`coevolve eval --task ... --run RUN_DIR`.
`all`: formats, then the ladder, then on the chosen setting one esopt run
and one trace2skill run (`coevolve run`, same budget and seed), then the
arms of each: the whole "numbers to show" in one process under one lock.

Run under the heavy lock: flock /tmp/coevolve-heavy.lock python benchmarks/agents_measure.py ...
Prints one table per part and writes results JSON to --out (default stdout only).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=("formats", "ladder", "arms", "all"))
    p.add_argument("--budget", type=int, default=128, help="all: training episodes per run (default 128)")
    p.add_argument("--skip-formats", action="store_true", help="all: leave out the free vs constrained part")
    p.add_argument("--masked", type=int, help="all: train on 4x4 with this many masked cells (skips the ladder)")
    p.add_argument("--population", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--problems", type=int, default=16, help="held-out problems (default 16; the paper: 100)")
    p.add_argument("--k", type=int, default=4, help="attempts per problem (default 4)")
    p.add_argument("--max-tokens", type=int, default=12, help="sudoku tokens per turn (a move is ~6)")
    p.add_argument("--math-max-tokens", type=int, default=96, help="react_math tokens per turn")
    p.add_argument("--task", default="sudoku")
    p.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--run", help="arms: an agent run directory (history.jsonl, skills/)")
    p.add_argument("--constrained", action="store_true", help="arms: decode under the action pattern")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write results JSON here")
    return p.parse_args(argv)


def print_rows(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)), flush=True)


def formats(engine, args) -> list[dict]:
    from coevolve.agents.evaluate import eval_sampling, evaluate_arm

    out = []
    settings = [("sudoku", {"masked": 1}, args.max_tokens), ("react_math", {}, args.math_max_tokens)]
    for name, options, max_tokens in settings:
        task = _task(name, options)
        heldout = task.cases("eval", args.problems, seed=args.seed)
        for constrained in (False, True):
            began = time.monotonic()
            r = evaluate_arm(engine, task, heldout, "base", args.k, eval_sampling(max_tokens), args.seed,
                             constrained=constrained)
            out.append({"task": name, **options, "decoding": "constrained" if constrained else "free",
                        **r.to_dict(), "seconds": round(time.monotonic() - began, 1)})
            print(f"  {name} {'constrained' if constrained else 'free'}: well-formed {r.well_formed:.3f}, "
                  f"Mean@{args.k} {r.mean_at_k} ({out[-1]['seconds']} s)", flush=True)
        close = getattr(task, "close", None)
        if close:
            close()
    print_rows(["task", "decoding", "well-formed", f"solved Mean@{args.k} [95% CI]", f"Pass@{args.k} [95% CI]"],
               [[o["task"], o["decoding"], f"{o['well_formed']:.3f}", _iv(o[f"mean@{args.k}"]),
                 _iv(o[f"pass@{args.k}"])] for o in out])
    return out


def ladder(engine, args) -> list[dict]:
    from coevolve.agents.evaluate import eval_sampling, evaluate_arm
    from tasks.sudoku import LADDERS

    out = []
    for masked in LADDERS[4]:
        task = _task("sudoku", {"masked": masked})
        heldout = task.cases("eval", args.problems, seed=args.seed)
        # constrained, as the runs and their held-out arms decode
        r = evaluate_arm(engine, task, heldout, "base", args.k, eval_sampling(args.max_tokens), args.seed,
                         constrained=True)
        out.append({"task": "sudoku", "masked": masked, **r.to_dict()})
        print(f"  4x4 masked {masked}: Mean@{args.k} {r.mean_at_k}", flush=True)
    print_rows(["setting", f"Mean@{args.k} [95% CI]", f"Pass@{args.k} [95% CI]", "well-formed"],
               [[f"4x4, {o['masked']} masked", _iv(o[f"mean@{args.k}"]), _iv(o[f"pass@{args.k}"]),
                 f"{o['well_formed']:.3f}"] for o in out])
    inside = [o for o in out if 0 < o[f"mean@{args.k}"]["mean"] < 1]
    if inside:
        print(f"easiest setting with base solved rate in (0, 1): 4x4, {inside[0]['masked']} masked")
    return out


def arms(engine, args) -> list[dict]:
    from coevolve.agents.evaluate import eval_sampling, evaluate_arms, run_inputs, table

    task = _task(args.task, _options(args.task_option))
    history, skills = run_inputs(args.run)
    heldout = task.cases("eval", args.problems, seed=args.seed)
    names = ([] if getattr(args, "skip_base", False) else ["base"]) + (["esopt"] if history else []) + (
        ["skill"] if skills else []) + (["both"] if history and skills else [])
    results = evaluate_arms(engine, task, heldout, names, args.k, eval_sampling(args.max_tokens), args.seed,
                            history=history, skills=skills, constrained=args.constrained,
                            on_arm=lambda r: print(f"  {r.arm}: Mean@{r.k} {r.mean_at_k}", flush=True))
    print(table(results))
    return [r.to_dict() for r in results]


def train_config(method: str, masked: int, args) -> str:
    """The `coevolve run` TOML of one training run on 4x4 Sudoku with `masked` cells."""
    es = "" if method != "esopt" else (
        "\n[es]\nsigma = 3e-3\nsigma_end = 1e-3\nschedule = \"cosine\"\nalpha = 1.5e-3\n"
        "noise = \"lowrank\"\nrank = 1\n")  # the population's episodes advance in one batch
    return (f"[run]\nmethod = \"{method}\"\ntask = \"sudoku\"\nbudget = {args.budget}\nseed = {args.seed}\n\n"
            f"[task]\nmasked = {masked}\n\n[agent]\npopulation = {args.population}\nbatch = {args.batch}\n"
            f"eval_cases = 8\neval_every = 1000\nhistory_turns = 1\nshaping = 0.5\nskill_successes = 2\n\n"
            f"[sampling]\ntemperature = 1.0\nmax_tokens = {args.max_tokens}\n{es}")


def everything(args) -> dict:
    import subprocess

    from coevolve.engine.vllm_engine import Engine

    out = Path(args.out or f"runs/agents_measure-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    if not args.skip_formats or args.masked is None:
        engine = Engine(None, max_model_len=2048, max_num_seqs=256)
        try:
            if not args.skip_formats:
                print("== free vs constrained", flush=True)
                results["formats"] = formats(engine, argparse.Namespace(**{**vars(args), "k": 2}))
            if args.masked is None:
                print("== 4x4 ladder, base", flush=True)
                results["ladder"] = ladder(engine, args)
        finally:
            engine.close()
    if args.masked is not None:
        masked = args.masked
    else:
        inside = [o for o in results["ladder"] if 0 < o[f"mean@{args.k}"]["mean"] < 1]
        masked = inside[0]["masked"] if inside else 1
    results["chosen_masked"] = masked
    print(f"== training on 4x4 with {masked} masked: esopt and trace2skill, budget {args.budget}", flush=True)
    runs = {}
    for method in ("esopt", "trace2skill"):
        config = out / f"{method}.toml"
        config.write_text(train_config(method, masked, args))
        run_dir = out / method
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "coevolve", "run", str(config), "--out", str(run_dir)],
                              capture_output=True, text=True)
        print(f"  {method}: exit {done.returncode} in {time.monotonic() - began:.0f} s", flush=True)
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-3000:], flush=True)
            continue
        runs[method] = str(run_dir)
    from coevolve.agents.evaluate import engine_options_for

    history = Path(runs["esopt"]) / "history.jsonl" if "esopt" in runs else None
    engine = Engine(None, max_model_len=2048, max_num_seqs=256, **engine_options_for(history))
    try:
        for i, (method, run_dir) in enumerate(runs.items()):
            # base weights without a skill are the same arm for every run (same held-out
            # problems, seeds and sampling): measured once, with the first run
            print(f"== held-out arms of the {method} run", flush=True)
            results[f"arms_{method}"] = arms(engine, argparse.Namespace(
                **{**vars(args), "task": "sudoku", "task_option": [f"masked={masked}"], "run": run_dir,
                   "constrained": True, "skip_base": i > 0}))
    finally:
        engine.close()
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"results: {out / 'results.json'}")
    return results


def _iv(d: dict) -> str:
    return f"{d['mean']:.3f} [{d['low']:.3f}, {d['high']:.3f}]"


def _options(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        out[key] = int(value) if value.lstrip("-").isdigit() else value
    return out


def _task(name: str, options: dict):
    from coevolve.agents.evaluate import build_task

    return build_task(name, options)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.part == "all":
        everything(args)
        return 0
    from coevolve.engine.vllm_engine import Engine

    began = time.monotonic()
    engine = Engine(None, max_model_len=2048, max_num_seqs=256)
    print(f"engine up in {time.monotonic() - began:.0f} s; part {args.part}, {args.problems} problems, k={args.k}",
          flush=True)
    try:
        result = {"formats": formats, "ladder": ladder, "arms": arms}[args.part](engine, args)
    finally:
        engine.close()
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"args": vars(args), "results": result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
