"""How much of the evaluation budget do proposals waste, and does the context
that learns (issue 25) win it back? Arms on the same budget, tasks and seeds:

    eoh              plain EoH: free decoding, no failures shown, clones scored
    +failures        failures in the next prompt, and the repair operator in the plan
    +constrain       the template's exact def line forced at decoding
    +fingerprint     clones of earlier candidates and of the template rejected unscored
    +trace2skill     eoh+trace2skill: a skill distilled from the run's candidates in every prompt
    all              everything above together, and the template seeded into the archive
                     (context.seed_template; runs before s27 had no seed)
    defaults         what `coevolve run` did without a [context] table until s28: plain EoH's plan
                     with failures shown, the def line forced and clones rejected (no seed, no repair)
    defaults-fingerprint  the same with clones scored instead of rejected: the defaults since s28
                     (benchmarks/results/s28/proposal_efficiency_defaults.md)
    +clone-retries   the defaults, and a program that clones the template or an earlier candidate
                     asked again free of T up to twice ([accounting] clone_retries = 2)
    +feedback        defaults-fingerprint with each valid parent's evaluation in the prompt
                     (context.feedback: per instance against the template; s39)

Every arm but +feedback has context.feedback off: they predate it, and keep what they measured.

Per arm (mean and standard deviation over seeds): the share of evaluations lost
to parse / signature / syntax / exception / invalid (timeouts, crashes and
memory count as invalid), the valid rate, rejected duplicates, evaluations to
the first program that beats the template, the best objective at the budget,
and seconds per evaluation. Every run is an ordinary run directory under
--out; a finished one is read back, an unfinished one resumed, so the same
command continues after a kill. One engine and one sandbox serve every run.
Runs go seed by seed (every task and arm of seed 0, then seed 1, ...), so a
benchmark stopped early leaves balanced partial results.

    python benchmarks/proposal_efficiency.py --lock /tmp/coevolve-heavy.lock --stop-at 20:40 \
        --tasks tsp_construct tsp_aco --seeds 0 1 2 --budget 96 --out runs/proposal-efficiency

--lock takes the machine's engine lock only while loading the engine and
during each run, so short engine jobs of others interleave between runs;
--stop-at starts no run after that UTC time (the table covers the finished ones).
The options, run directories, lock and table these share with
search_efficiency.py are in benchmarks/common.py.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import common  # noqa: E402  (after the repository root is on the path)
from coevolve.base.records import SearchSummary  # noqa: E402

OFF = {"failures": False, "constrain": False, "fingerprint": False, "seed_template": False, "feedback": False}
ARMS: dict[str, dict] = {
    "eoh": {"method": "eoh", "context": OFF, "repair": False},
    "+failures": {"method": "eoh", "context": {**OFF, "failures": True}, "repair": True},
    "+constrain": {"method": "eoh", "context": {**OFF, "constrain": True}, "repair": False},
    "+fingerprint": {"method": "eoh", "context": {**OFF, "fingerprint": True}, "repair": False},
    "+trace2skill": {"method": "eoh+trace2skill", "context": OFF, "repair": False},
    "all": {"method": "eoh+trace2skill", "context": {"failures": True, "constrain": True, "fingerprint": True,
                                                      "seed_template": True, "feedback": False}, "repair": True},
    "defaults": {"method": "eoh", "context": {"failures": True, "constrain": True, "fingerprint": True,
                                              "seed_template": False, "feedback": False}, "repair": False},
    "defaults-fingerprint": {"method": "eoh", "context": {"failures": True, "constrain": True, "fingerprint": False,
                                                          "seed_template": False, "feedback": False}, "repair": False},
    "+clone-retries": {"method": "eoh", "context": {"failures": True, "constrain": True, "fingerprint": False,
                                                    "seed_template": False, "feedback": False}, "repair": False,
                       "accounting": {"clone_retries": 2}},
    "+feedback": {"method": "eoh", "context": {"failures": True, "constrain": True, "fingerprint": False,
                                               "seed_template": False, "feedback": True}, "repair": False},
}
LOST = {"parse": "parse", "bad_signature": "signature", "missing_function": "signature", "syntax": "syntax",
        "exception": "exception", "invalid": "invalid", "timeout": "invalid", "crash": "invalid",
        "memory": "invalid"}
COLUMNS = ("parse", "signature", "syntax", "exception", "invalid")


def arm_config(arm: str, task: str, seed: int, budget: int, max_tokens: int, population: int) -> dict:
    spec = ARMS[arm]
    raw = common.search_config(spec["method"], task, seed, budget, max_tokens, population)
    raw["eoh"]["operators"] = ["e1", "e2", "m1", "m2"] + (["repair"] if spec["repair"] else [])
    raw["context"] = dict(spec["context"])
    raw["accounting"] = dict(spec.get("accounting", {}))
    raw["skill"] = {"every": 3, "analysts": 2, "successes": 1, "max_tokens": 128}
    return raw


def measures(directory: Path, summary: SearchSummary) -> dict:
    from coevolve.runstore import read_jsonl

    candidates = read_jsonl(directory / "candidates.jsonl")
    used = summary.evaluations
    lost = {name: 0 for name in COLUMNS}
    for c in candidates:
        if c["failure"] in LOST:
            lost[LOST[c["failure"]]] += 1
    template = (summary.context or {}).get("template_objective")
    direction = summary.train.direction
    first_beat = None
    if template is not None:
        for c in candidates:
            if c["objective"] is not None and (c["objective"] < template if direction == "min"
                                               else c["objective"] > template):
                first_beat = c["id"]
                break
    timing = json.loads((directory / "timing.json").read_text()) if (directory / "timing.json").exists() else {}
    proposals = len(candidates)
    echoes = sum(c["objective"] is not None and template is not None and abs(c["objective"] - template) < 1e-9
                 for c in candidates)
    return {**{f"lost_{k}": v / used for k, v in lost.items()},
            "valid_rate": sum(c["objective"] is not None for c in candidates) / proposals if proposals else 0.0,
            # valid programs that score exactly what the template scores: mostly the template echoed back
            "template_echo_rate": echoes / proposals if proposals else 0.0,
            # valid programs that score otherwise: what the search can actually select among
            "different_rate": (sum(c["objective"] is not None for c in candidates) - echoes) / proposals
            if proposals else 0.0,
            "rejected": sum(c["failure"] == "duplicate" for c in candidates),
            "reasks": summary.ledger.parse_retries + summary.ledger.clone_retries,  # free of T
            "first_beat": first_beat, "best": summary.best and summary.best.objective,
            "s_per_eval": timing.get("total_s", 0.0) / used if used else 0.0}


def fmt(values: list, digits: str = ".2f", percent: bool = False) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    scale = 100.0 if percent else 1.0
    mean = statistics.fmean(present) * scale
    text = f"{mean:{digits}}" + ("%" if percent else "")
    if len(present) > 1:
        text += f" ± {statistics.stdev(present) * scale:{digits}}"
    if len(present) < len(values):
        text += f" ({len(present)}/{len(values)})"
    return text


def table(rows: dict[tuple[str, str], list[dict]]) -> str:
    head = ("task", "arm", "seeds") + tuple(f"lost: {c}" for c in COLUMNS) + (
        "valid rate", "valid = template score", "valid and different", "rejected", "free re-asks",
        "evals to beat template", "best objective", "s / eval")
    body = []
    for (task, arm), ms in rows.items():
        cells = [task, arm, str(len(ms))]
        cells += [fmt([m[f"lost_{c}"] for m in ms], ".1f", percent=True) for c in COLUMNS]
        cells += [fmt([m["valid_rate"] for m in ms], ".1f", percent=True),
                  fmt([m["template_echo_rate"] for m in ms], ".1f", percent=True),
                  fmt([m["different_rate"] for m in ms], ".1f", percent=True), fmt([m["rejected"] for m in ms], ".1f"),
                  fmt([m["reasks"] for m in ms], ".1f"),
                  fmt([m["first_beat"] for m in ms], ".0f"), fmt([m["best"] for m in ms], ".4f"),
                  fmt([m["s_per_eval"] for m in ms], ".2f")]
        body.append(cells)
    return common.markdown_table(head, body)


def main(argv: list[str] | None = None) -> int:
    parser = common.make_parser(__doc__, ["tsp_construct", "tsp_aco"], "runs/proposal-efficiency", "--arms", list(ARMS))
    args = common.parse(parser, argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cells = common.cells(out, args.tasks, args.arms, args.seeds, folder=lambda arm: arm.replace("+", ""))

    def work(cell: common.Cell, engine, sandbox) -> str:
        raw = arm_config(cell.arm, cell.task, cell.seed, args.budget, args.max_tokens, args.population)
        m = measures(cell.directory, common.run_one(cell.directory, raw, engine, sandbox))
        return f"valid {m['valid_rate']:.0%}, best {m['best']}"

    began = time.perf_counter()
    if not args.analyse_only:
        common.work_through(args, [c for c in cells if common.finished(c.directory, args.budget) is None], work)
    rows: dict[tuple[str, str], list[dict]] = {}
    for cell in cells:
        summary = common.finished(cell.directory, args.budget)
        if summary is not None:
            rows.setdefault((cell.task, cell.arm), []).append(measures(cell.directory, summary))
    text = (f"proposal efficiency: budget {args.budget}, seeds {args.seeds}, population {args.population}, "
            f"max_tokens {args.max_tokens}, "
            + ("tabulated from the finished runs" if args.analyse_only else f"{time.perf_counter() - began:.0f} s in all")
            + f"\n\n{table(rows)}\n")
    common.publish(out, text, {f"{t}/{a}": ms for (t, a), ms in rows.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
