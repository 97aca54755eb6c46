"""Classify sweep results: GOOD / WEAK / BAD (and ACCEPTED for a 'maybe' mutation that ran, BASE for
baselines), with reasons; group by message shape. Usage: classify.py [--dump] -> classified.jsonl"""
from __future__ import annotations

import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

ALLOWED = re.compile(r"\b(does not exist|unknown|otherwise|has none of|is the comparison's|not listed|must|known|one of|allowed|expected|is required|not found|names no|give|is not|only|needs|"
                     r"cannot|no such|did you mean|leave it out|remove|instead|holds no|start from|is for|"
                     r"is read by|would|has no|isn't|not a|lists|nor|neither|takes)\b", re.I)
PREFIX = re.compile(r"^coevolve (run|compare): error: ")
DOTTED = re.compile(r"config error: ([A-Za-z_][A-Za-z0-9_.\[\]-]*)")


def shape(msg: str) -> str:
    s = PREFIX.sub("", msg)
    s = re.sub(r"\(got .*\)$", "(got V)", s)
    s = re.sub(r"/tmp/[^\s:;,'\")]+", "P", s)
    s = re.sub(r"'[^']*'", "'S'", s)
    s = re.sub(r'"[^"]*"', '"S"', s)
    s = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", s)
    s = re.sub(r"\(known: [^)]*\)", "(known: ...)", s)
    return s[:220]


# mutations the sweep generated as "maybe" that evidence outside --plan shows are invalid: what the run
# would do with them (sweep_findings.md, "Runtime evidence")
RUNTIME_INVALID = [
    (re.compile(r"(sampling|skill)\.temperature.*: (huge int|int64 max|1e308)$"), "vLLM SamplingParams refuses temperature > 2"),
    (re.compile(r"agent\.(teacher|eval)_temperature.*: (huge int|int64 max|1e308)$"), "vLLM SamplingParams refuses temperature > 2"),
    (re.compile(r"sampling\.stop.*: empty string item$"), "vLLM SamplingParams refuses an empty stop string"),
    (re.compile(r"(sandbox|test)\.timeout_s.*: (huge int|int64 max|1e308)$"), "the sandbox's select() overflows (>= 1e10 s)"),
    (re.compile(r"(sandbox|test)\.memory_mb.*: (huge int|int64 max)$"), "RLIMIT_AS overflows: every program crashes"),
    (re.compile(r"(sandbox|test)\.workers.*: (huge int|int64 max)$"), "Sandbox() queues that many slots: never returns"),
]


def expectation(r: dict) -> tuple[str, str]:
    if r["expect"] == "maybe":
        for pattern, why in RUNTIME_INVALID:
            if pattern.search(r["desc"]):
                return "invalid", why
    return r["expect"], ""


def classify(r: dict) -> tuple[str, list[str]]:
    expect, why = expectation(r)
    r = {**r, "expect": expect}
    cls, reasons = _classify(r)
    return cls, ([f"{reasons[0]} [{why}]"] + reasons[1:] if why and reasons else reasons)


def _classify(r: dict) -> tuple[str, list[str]]:
    err, out = r["stderr"].strip(), r["stdout"].strip()
    lines = [l for l in err.splitlines() if l.strip()]
    reasons: list[str] = []
    if r["rc"] is None:
        return "BAD", ["hang: killed after the timeout"]
    if "Traceback" in err:
        return "BAD", ["traceback"]
    changes = [c for c in r["changes"] if "/.cache/coevolve" not in c]
    cache = [c for c in r["changes"] if "/.cache/coevolve" in c]
    if changes:
        return "BAD", ["wrote files: " + ", ".join(changes[:5])]
    if r["expect"] == "valid":
        return ("BASE", []) if r["rc"] == 0 else ("BAD", [f"a shipped/documented config is refused (rc {r['rc']})"])
    if r["rc"] == 0:
        if r["expect"] == "invalid":
            return "BAD", ["accepted bad input (exit 0)"]
        return "ACCEPTED", (["cache written: " + ", ".join(cache[:3])] if cache else [])
    if r["rc"] != 2:
        return "BAD", [f"exit status {r['rc']}, not 2"]
    errlines = [l for l in lines if PREFIX.match(l)]
    msg = errlines[-1] if errlines else (lines[-1] if lines else "")
    extra = [l for l in lines if l is not msg]
    if not msg:
        return "BAD", ["exit 2 with no message"]
    if len(errlines) != 1:
        reasons.append("no 'coevolve CMD: error:' line" if not errlines else "several error lines")
    if extra:
        notes = all(x.startswith(("note:", "warning:")) for x in extra)
        reasons.append(("a note/warning line before the error: " if notes else "extra stderr lines: ")
                       + " | ".join(x[:120] for x in extra[:3]))
    if out:
        reasons.append("stdout not empty")
    names = [Path(r["mutfile"]).name if n == "@FILE" else n for n in r["names"]]
    named = not names or any(n in msg for n in names)
    if not named:
        m = DOTTED.search(msg)
        other = m.group(1) if m else None
        if other and not any(other.split("[")[0].startswith(n.split(".")[0]) for n in names):
            return "BAD", [f"names another field ({other}), expected {names}"] + reasons
        reasons.append(f"does not name {names}" + (f" (names {other})" if other else ""))
    if "@FILE" in r["names"] and "line" not in msg:
        reasons.append("TOML error without a line number")
    if not ALLOWED.search(PREFIX.sub("", msg)):
        reasons.append("does not say what is allowed")
    if cache:
        reasons.append("cache written: " + ", ".join(cache[:3]))
    return ("WEAK" if reasons else "GOOD"), reasons


def main() -> None:
    rows = [json.loads(l) for l in open("/tmp/sweep_tools/results.jsonl")]
    counts, by = Counter(), defaultdict(list)
    with open("/tmp/sweep_tools/classified.jsonl", "w") as f:
        for r in rows:
            cls, reasons = classify(r)
            err = [l for l in r["stderr"].strip().splitlines() if l.strip()]
            msg = next((l for l in reversed(err) if PREFIX.match(l)), err[-1] if err else "")
            r.update(cls=cls, reasons=reasons, msg=msg, shape=shape(msg) if msg else "")
            f.write(json.dumps(r) + "\n")
            counts[cls] += 1
            by[cls].append(r)
    print(counts)
    if "--dump" in sys.argv:
        for cls in ("BAD", "WEAK"):
            groups = defaultdict(list)
            for r in by[cls]:
                groups[(r["reasons"][0].split(":")[0] if r["reasons"] else "", r["shape"])].append(r)
            print(f"===== {cls}: {len(by[cls])} in {len(groups)} shapes")
            for (reason, shp), rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                r = rs[0]
                print(f"[{len(rs)}] {reason} :: {r['label']} :: {r['desc']} :: {r['snippet'][:100]!r}")
                print("     ", (r["msg"] or r["stderr"].strip()[-300:])[:400])
                if len(rs) > 1:
                    print("      also:", "; ".join(x["desc"][:50] for x in rs[1:6]))


if __name__ == "__main__":
    main()
