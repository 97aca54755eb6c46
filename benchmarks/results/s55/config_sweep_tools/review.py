"""The manual review of classify.py's output: overrides decided by reading each BAD/WEAK shape (the
reasons are in /tmp/sweep_findings.md), then counts and per-finding groups.
Writes /tmp/sweep_tools/final.jsonl and prints the counts and the finding groups."""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

COMPARE_BASES = ("examples/compare_", "examples/agents_compare", "examples/paper/tsp", "examples/paper/kp",
                 "examples/paper/asp", "examples/paper/table5", "docbases/compare", "docbases/agent_compare")
ARM_NOTE = re.compile(r"is a comparison; this is its arm")

# finding id -> (class, harm rank, title); assigned below by rules over desc / message
FINDINGS = {
    "B1": ("BAD", 1, "temperature > 2 accepted; vLLM refuses it at the first generation (traceback after the run directory and engine exist)"),
    "B2": ("BAD", 2, "sampling.stop = [\"\"] accepted; vLLM refuses an empty stop string at the first generation"),
    "B3": ("BAD", 3, "es.sigma / es.alpha with no upper bound: a dropped minus sign (1e3 for 1e-3) is accepted"),
    "B4": ("BAD", 4, "sandbox/test timeout_s >= ~1e10 accepted; the first scoring dies with OverflowError (traceback, run dir written)"),
    "B5": ("BAD", 5, "endpoint.timeout_s >= ~9.3e9 accepted; the first request dies with OverflowError (traceback, run dir written)"),
    "B6": ("BAD", 6, "sandbox/test memory_mb >= ~8.8e12 accepted; every candidate 'crashes' and the run ends exit 0 with 0% valid"),
    "B7": ("BAD", 7, "agent config with its task selector misspelt/missing: the error blames another key ([agent], task.turns, task.masked)"),
    "B8": ("BAD", 8, "comparison errors name run.budget (a key the file lacks) instead of compare.budgets / the arm"),
    "B9": ("BAD", 9, "`coevolve run --plan` of an agent comparison with methods = [\"base\"]: IndexError traceback"),
    "B10": ("BAD", 10, "sandbox/test workers huge: Sandbox() never returns (hang + memory) once the run starts"),
    "B11": ("BAD", 11, "eoh.m_multiplier huge (1e308): OverflowError traceback at --plan"),
    "B12": ("BAD", 12, "malformed ray:// address (no host, port 99999) accepted, exit 0 (run --plan: stdout warning; compare --plan: nothing)"),
    "B13": ("BAD", 13, "[eval] max_tokens >= model.max_len accepted in agent comparisons (sampling.max_tokens is refused for the same)"),
    "B14": ("BAD", 14, "absurd eoh.population/offspring/init/m_multiplier/es.population: refused as 'skill.every is longer than the run' (+trace2skill) or accepted"),
    "W1": ("WEAK", 20, "comparison keys named as the arm's run keys under `coevolve run --plan COMPARISON` (run.task, task.masked, skills.paths[0])"),
    "W2": ("WEAK", 21, "agent comparison with [compare] misspelt or kind misspelt: error blames [eval]"),
    "W3": ("WEAK", 22, "structural-mismatch refusal is several lines, after the plan was printed to stdout"),
    "W4": ("WEAK", 23, "a file/module that does not load is named without its key (run.task module:Class, compare.methods file)"),
    "W5": ("WEAK", 24, "task.problems_file of the wrong type: Python's TypeError text, names [task] not task.problems_file"),
    "W6": ("WEAK", 25, "UTF-8 byte-order mark: 'Invalid statement (at line 1, column 1)' with no word of the BOM"),
    "W7": ("WEAK", 26, "[[task]] (array of tables) in an agent config: 'task.name is not a known field (known: name)'"),
    "W8": ("WEAK", 27, "a note: line printed before the error line"),
    "W9": ("WEAK", 28, "ray:// address unreachable: only a warning on stdout (run --plan), nothing at all (compare --plan)"),
    "W10": ("WEAK", 29, "a run config given to `coevolve compare`: 'run is not a known section' with no pointer to `coevolve run`"),
    "W11": ("WEAK", 30, "model.path of spaces: the path is printed unquoted (invisible trailing spaces)"),
    "W12": ("WEAK", 31, "agent comparison switched to kind = \"heuristic\": error names the arm's method, not compare.kind"),
}


def assign(r: dict) -> tuple[str, str | None]:
    """(final class, finding id or None)."""
    d, msg, cls, cmd, label = r["desc"], r["msg"], r["cls"], r["cmd"], r["label"]
    on_compare = label.startswith(COMPARE_BASES)
    accepted = r["rc"] == 0
    # B1: temperature above vLLM's [0, 2]
    if accepted and (re.search(r"temperature.*(huge int|int64 max|1e308)$", d) or re.search(r"temperature (2\.5|7|3)\b", d)):
        if cmd == "run" and on_compare and "arm:" in d:
            return "N/A", None
        return "BAD", "B1"
    if accepted and re.search(r"stop.*empty string", d) and not (cmd == "run" and on_compare and "arm:" in d):
        return "BAD", "B2"
    if accepted and re.search(r"es\.(sigma|alpha)( \(added\))?: (huge int|int64 max|1e308)$|es\.(sigma|alpha) .*typo", d):
        return "BAD", "B3"
    if accepted and re.search(r"(sandbox|test)\.timeout_s.*(huge int|int64 max|1e308|1e10)", d):
        return "BAD", "B4"
    if accepted and re.search(r"endpoint\.timeout_s.*(huge int|int64 max|1e308)$", d):
        return "BAD", "B5"
    if accepted and re.search(r"(sandbox|test)\.memory_mb.*(huge int|int64 max|int64)", d):
        return "BAD", "B6"
    if accepted and re.search(r"(sandbox|test)\.workers.*(huge int|int64 max|10\*\*18)", d):
        return "BAD", "B10"
    if accepted and "ray://" in d and ("empty" in d or "bad port" in d or "no host" in d):
        return "BAD", "B12"
    if accepted and "ray://" in d:
        return "WEAK", "W9"
    if accepted and "eval.max_tokens >= max_len" in d:
        return "BAD", "B13"
    if cmd == "run" and on_compare and accepted and re.search(r"arm:|test\.|compare\.out", d):
        return "N/A", None  # `run --plan` of a comparison runs its first arm only
    if "Traceback" in r["stderr"]:
        if "IndexError" in r["stderr"] and "only base" in d:
            return "BAD", "B9"
        if "m_multiplier" in d:
            return "BAD", "B11"
        return "BAD", "B?"
    if "skill.every is longer than the run" in msg and re.search(r"(population|offspring|init|m_multiplier).*(huge|int64)", d):
        return "BAD", "B14"
    if re.search(r"config error: (agent is not a known section|task\.(turns|masked) is not a known field \(known: name\))", msg) \
            and label in ("docbases/agent_docs.toml", "examples/math_esopt.toml", "examples/sudoku_esopt_trace2skill.toml",
                          "scaffolds/myenv/config.toml") and re.search(r"task", d) and "array-of-tables" not in d:
        return "BAD", "B7"
    if "config error: run.budget must be in" in msg and "compare.budgets" in d and cmd == "compare":
        return "BAD", "B8"
    if cmd == "compare" and "skill.every is longer than the run" in msg and "compare.methods removed" in d:
        return "BAD", "B8"
    if cmd == "run" and on_compare and cls in ("BAD", "WEAK") and r["rc"] == 2:
        others = [x for x in r["reasons"] if not x.startswith("extra stderr lines") or not ARM_NOTE.search(r["stderr"])]
        named = not any("names another field" in x or "does not name" in x for x in r["reasons"])
        if named and not [x for x in others if "allowed" not in x]:
            return "GOOD", None
        return "WEAK", "W1"
    if "eval is not a section of a heuristic comparison" in msg and label.startswith(("examples/agents_compare", "docbases/agent_compare")):
        return "WEAK", "W2"
    if "not structurally matched" in msg:
        return "WEAK", "W3"
    if r["rc"] == 2 and ("cannot import" in msg or "method file not found" in msg) and "config error: run.method" not in msg:
        return "WEAK", "W4"
    if "task options do not build" in msg:
        return "WEAK", "W5"
    if "BOM" in d:
        return "WEAK", "W6"
    if "array-of-tables" in d and "task.name is not a known field (known: name)" in msg:
        return "WEAK", "W7"
    if "task.masked is not a known field (known: name)" in msg and "task.name" in d:
        return "BAD", "B7"
    if "a run config given to" in d:
        return "WEAK", "W10"
    if "compare.arms.esopt-wide.method must be one of" in msg and "kind heuristic" in d:
        return "WEAK", "W12"
    if cls == "WEAK" and any(x.startswith("a note/warning line") for x in r["reasons"]):
        return "WEAK", "W8"
    if cls == "WEAK" and "model.path" in d and "whitespace" in d:
        return "WEAK", "W11"
    if cls == "WEAK" and all("does not say what is allowed" in x or "TOML error without a line" in x for x in r["reasons"]):
        return "GOOD", None  # read: each says why and what to do (caps.money, es.population, empty file, ...)
    if "arm: budget-dependent rule" in d and "paper/tsp" in label:
        return "N/A", None  # paper/tsp sets eoh.generations, so m_multiplier = 0 is valid there
    if "skill.temperature 3" in d and "skill.every is longer" in msg:
        return "N/A", None  # the scaffold's budget of 20 trips skill.every first: not a temperature result
    if cls == "BAD" and "eoh.m_multiplier" in msg and "budgets 1" in d:
        return "GOOD", None  # names eoh.m_multiplier = 0 and the budget, and what to do
    if cls == "ACCEPTED" and "distributed.engines" in d:
        return "ACCEPTED", None
    return cls, None


def main() -> None:
    rows = [json.loads(l) for l in open("/tmp/sweep_tools/classified.jsonl")]
    counts, groups = Counter(), defaultdict(list)
    with open("/tmp/sweep_tools/final.jsonl", "w") as f:
        for r in rows:
            final, finding = assign(r)
            r.update(final=final, finding=finding)
            f.write(json.dumps(r) + "\n")
            counts[final] += 1
            if finding:
                groups[finding].append(r)
            elif final in ("BAD", "WEAK"):
                groups[f"?{final}"].append(r)
    print(counts, sum(counts.values()))
    for key in sorted(groups, key=lambda k: FINDINGS.get(k, ("", 99))[1]):
        rs = groups[key]
        print(f"== {key} [{len(rs)}] {FINDINGS.get(key, ('', 0, ''))[2]}")
        for r in rs[:4]:
            print(f"   {r['id']} {r['cmd']} {r['label']} :: {r['desc']} :: {r['msg'][:160] or r['stderr'].strip()[-160:]}")


if __name__ == "__main__":
    main()
