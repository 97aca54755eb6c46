"""Mutation generators for the config sweep. Each mutation is a dict:
  id, base, cmd ("run" | "compare"), desc, expect ("invalid" | "maybe"), names (substrings the error
  should contain: the dotted field or the file), text (the mutated TOML) and, for value mutations,
  the TOML snippet that shows the change (snippet)."""
from __future__ import annotations

import copy
import datetime
import json
import math
import tomllib
from pathlib import Path

from tomlw import Raw, dumps, value

SCHEMA = json.load(open("/tmp/sweep_tools/schema.json"))
HUGE = 10 ** 18
INT64 = 9223372036854775807
DATE = datetime.date(2024, 1, 1)


def typo(k: str) -> str:
    """A plausible typo: the last letter doubled (sigma -> sigmaa)."""
    return k + k[-1]


def snippet(section_path: list[str], k: str, v) -> str:
    head = "[" + ".".join(section_path) + "]" if section_path else ""
    return (head + "\n" if head else "") + f"{k} = {value(v)}"


def bad_values(info: dict, current):
    """(label, value, expect) for one field given its schema info and the value it has now."""
    t = info.get("t")
    lo, hi, strict = info.get("lo"), info.get("hi"), info.get("lo_strict")
    out = []

    def bound_expect(x):
        if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
            return "invalid"
        if lo is not None and (x < lo or (strict and x == lo)):
            return "invalid"
        if hi is not None and x > hi:
            return "invalid"
        return "maybe"

    if t in ("int", "float"):
        out += [("string for number", "abc", "invalid"), ("list for scalar", [current if current is not None else 1], "invalid"),
                ("bool for number", True, "invalid"), ("table for scalar", {"a": 1}, "invalid"),
                ("date for number", DATE, "invalid")]
        if t == "int":
            out += [("float for int", 1.5, "invalid"), ("float 2.0 for int", 2.0, "invalid")]
        for label, x in (("negative", -1), ("zero", 0), ("huge int", HUGE), ("int64 max", INT64),
                         ("nan", float("nan")), ("inf", float("inf")), ("-inf", float("-inf"))):
            out.append((label, x, bound_expect(x)))
        if t == "float":
            out.append(("1e308", 1e308, bound_expect(1e308)))
            out.append(("negative float", -0.5, bound_expect(-0.5)))
    elif t == "bool":
        out += [("string for bool", "yes", "invalid"), ("int for bool", 1, "invalid"), ("list for bool", [True], "invalid")]
    elif t == "str":
        out += [("int for string", 5, "invalid"), ("list for string", [current or "x"], "invalid"),
                ("empty string", "", "maybe"), ("nonsense string", "zz_bogus", "maybe"),
                ("whitespace string", "   ", "maybe"), ("date for string", DATE, "invalid")]
    elif t == "literal":
        choices = info["choices"]
        strs = [c for c in choices if isinstance(c, str)]
        out += [("out-of-enum", "bogus_zz", "invalid"), ("int for enum", 7, "invalid"), ("empty enum", "", "invalid")]
        if strs:
            out.append(("upper-case enum", strs[0].upper(), "invalid" if strs[0].upper() not in choices else "maybe"))
            out.append(("enum with space", strs[0] + " ", "invalid"))
    elif t == "list":
        item = info.get("item")
        sample = current[0] if isinstance(current, list) and current else ("x" if item == "str" else 1)
        out += [("scalar for list", sample, "invalid"), ("empty list", [], "maybe"),
                ("wrong item type", [{"a": 1}], "invalid"), ("nested list", [[sample]], "invalid"),
                ("duplicate items", [sample, sample], "maybe")]
        if item == "str":
            out += [("empty string item", [""], "maybe"), ("int item", [3], "invalid")]
        if item in ("int", "float"):
            out += [("string item", ["abc"], "invalid"), ("nan item", [float("nan")], "invalid"),
                    ("negative item", [-5], "maybe")]
    elif t == "dict":
        out += [("scalar for table", 5, "invalid"), ("list for table", [1], "invalid"),
                ("empty-key table", {"": 1}, "maybe"), ("string-valued table", {"k": "v"}, "maybe"),
                ("nan-valued table", {"k": float("nan")}, "maybe"), ("date-valued table", {"k": DATE}, "maybe")]
    return out


class Gen:
    def __init__(self, base: Path, cmd: str, cls: str, label: str):
        self.base, self.cmd, self.cls, self.label = base, cmd, cls, label
        self.text = base.read_text()
        self.raw = tomllib.loads(self.text)
        self.muts: list[dict] = []

    def add(self, desc, expect, names, raw=None, text=None, snip="", cmd=None):
        if text is None:
            text = dumps(raw)
        self.muts.append({"base": str(self.base), "label": self.label, "cls": self.cls, "cmd": cmd or self.cmd, "desc": desc,
                          "expect": expect, "names": names, "text": text, "snippet": snip})

    def copy(self):
        return copy.deepcopy(self.raw)

    # ---------------------------------------------------------------- shallow: the keys the file has
    def shallow(self):
        raw = self.raw
        secs = SCHEMA[self.cls]
        for s, table in raw.items():
            if not isinstance(table, dict):
                continue
            # section as a scalar, as a list, misspelt, an unknown key in it
            r = self.copy(); r[s] = 5
            self.add(f"[{s}] given as a scalar", "invalid", [s], r, snip=f"{s} = 5")
            r = self.copy(); r[s] = [1, 2]
            self.add(f"[{s}] given as a list", "invalid", [s], r, snip=f"{s} = [1, 2]")
            r = self.copy(); r[typo(s)] = r.pop(s)
            self.add(f"section [{s}] misspelt [{typo(s)}]", "invalid", [typo(s)], r, snip=f"[{typo(s)}]")
            r = self.copy(); r[s.capitalize()] = r.pop(s)
            if s.capitalize() != s:
                self.add(f"section [{s}] capitalised", "invalid", [s.capitalize()], r, snip=f"[{s.capitalize()}]")
            r = self.copy(); r[s] = dict(r[s]); r[s]["zz_unknown"] = 1
            self.add(f"unknown key in [{s}]", "invalid", [f"{s}.zz_unknown"], r, snip=f"[{s}]\nzz_unknown = 1")
            r = self.copy(); del r[s]
            self.add(f"section [{s}] removed", "maybe", [s], r, snip=f"(no [{s}])")
            for k, v in table.items():
                if s == "task" and self.cls == "AgentCompareConfig":
                    continue  # [task.NAME] handled in targeted
                if s == "compare" and k == "arms":
                    continue
                r = self.copy(); r[s] = dict(r[s]); r[s][typo(k)] = r[s].pop(k)
                field_ok = not (s == "task" and self.cls == "AgentRunConfig" and False)
                self.add(f"key {s}.{k} misspelt {typo(k)}", "invalid", [f"{s}.{typo(k)}"], r,
                         snip=snippet([s], typo(k), v))
                r = self.copy(); r[s] = dict(r[s]); r[s][k.upper()] = r[s].pop(k)
                self.add(f"key {s}.{k} upper-cased", "invalid", [f"{s}.{k.upper()}"], r,
                         snip=snippet([s], k.upper(), v))
                r = self.copy(); del r[s][k]
                self.add(f"key {s}.{k} removed", "maybe", [f"{s}.{k}"], r, snip=f"(no {s}.{k})")
                info = secs.get(s, {}).get(k) or SCHEMA["method_sections"].get(s, {}).get(k)
                if info is None:
                    continue
                for label, x, expect in bad_values(info, v):
                    r = self.copy(); r[s] = dict(r[s]); r[s][k] = x
                    self.add(f"{s}.{k}: {label}", expect, [f"{s}.{k}"], r, snip=snippet([s], k, x))
        # top level
        r = self.copy(); r = {"budget": 10, **r}
        self.add("top-level key outside any section", "invalid", ["budget"], r, snip="budget = 10  # before any [section]")
        r = self.copy(); r = {"zz_section": {"a": 1}, **r}
        self.add("unknown section", "invalid", ["zz_section"], r, snip="[zz_section]\na = 1")

    # ---------------------------------------------------------------- deep: every schema field
    def deep(self, skip=()):
        secs = SCHEMA[self.cls]
        for s, fields in secs.items():
            if s in skip or "__dict__" in fields:
                continue
            for k, info in fields.items():
                if k in (self.raw.get(s) or {}):
                    continue  # covered by shallow
                cur = info.get("default")
                for label, x, expect in bad_values(info, cur):
                    r = self.copy()
                    table = dict(r.get(s, {})) if isinstance(r.get(s, {}), dict) else {}
                    table[k] = x
                    if s == "es" and k == "rank":
                        table["noise"] = "lowrank"
                    r[s] = table
                    self.add(f"{s}.{k} (added): {label}", expect, [f"{s}.{k}"], r, snip=snippet([s], k, x))

    # ---------------------------------------------------------------- TOML-level damage
    def syntax(self):
        name = self.base.name
        lines = self.text.splitlines()
        first_kv = next(i for i, l in enumerate(lines) if "=" in l and not l.lstrip().startswith("#"))
        kv = lines[first_kv]
        variants = {
            "duplicate key": lines[:first_kv + 1] + [kv] + lines[first_kv + 1:],
            "unclosed string": lines[:first_kv] + [kv.split("=")[0] + '= "unclosed'] + lines[first_kv + 1:],
            "missing value": lines[:first_kv] + [kv.split("=")[0] + "="] + lines[first_kv + 1:],
            "unclosed section header": [l.replace("]", "", 1) if l.startswith("[") else l for l in lines],
            "key without '='": lines[:first_kv] + [kv.replace("=", " ", 1)] + lines[first_kv + 1:],
            "python-style True": lines + ["", "[zz]", "flag = True"],
            "python-style None": lines[:first_kv] + [kv.split("=")[0] + "= None"] + lines[first_kv + 1:],
            "single-quoted list with trailing comma ok, but missing comma": lines[:first_kv] + [kv.split("=")[0] + '= [1 2]'] + lines[first_kv + 1:],
        }
        first_header = next((i for i, l in enumerate(lines) if l.startswith("[")), None)
        if first_header is not None:
            variants["duplicate section header"] = lines + ["", lines[first_header], "zz = 1"]
            variants["array-of-tables for a section"] = [("[" + l + "]" if i == first_header else l) for i, l in enumerate(lines)]
        for label, ls in variants.items():
            names = ["@FILE"]
            if label == "array-of-tables for a section":
                names = [lines[first_header].strip("[]").split(".")[0]]
            self.add(f"TOML syntax: {label}", "invalid", names, text="\n".join(ls) + "\n",
                     snip=label)
        self.add("UTF-8 BOM at start", "maybe", ["@FILE"], text="\ufeff" + self.text, snip="(file starts with EF BB BF)")
        self.add("CRLF line endings", "maybe", [], text=self.text.replace("\n", "\r\n"), snip="(CRLF)")
        self.add("empty file", "invalid", ["@FILE"], text="", snip="(0 bytes)")
        self.add("only comments", "invalid", ["@FILE"], text="# nothing\n", snip="# nothing")
        self.add("JSON instead of TOML", "invalid", ["@FILE"], text=json.dumps(self.raw, default=str), snip="{...json...}")
        self.add("NUL byte", "invalid", ["@FILE"], text=self.text + "\x00\n", snip="(NUL byte at end)")
