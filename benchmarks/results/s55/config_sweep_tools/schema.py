"""Dump the config schema (section -> field -> type info) for the sweep's mutation generator.
Run with PYTHONPATH=/tmp/sweep. Reads only."""
import json, typing, types
from coevolve.search.runconfig import RunConfig
from coevolve.agents.runconfig import AgentRunConfig
from coevolve.plan import CompareConfig, AgentCompareConfig
from coevolve.search.methods import declared_sections, BUILTIN
from coevolve.es.config import FullNoise, LowRankNoise
from coevolve.base.sampling import Sampling
import annotated_types as at

def kind_of(ann):
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Literal:
        return {"t": "literal", "choices": list(args)}
    if origin in (typing.Union, types.UnionType):
        non = [a for a in args if a is not type(None)]
        k = kind_of(non[0]); k["optional"] = True; return k
    if origin is typing.Annotated:
        return kind_of(args[0])
    if ann is bool: return {"t": "bool"}
    if ann is int: return {"t": "int"}
    if ann is float: return {"t": "float"}
    if ann is str: return {"t": "str"}
    if origin in (list, tuple): return {"t": "list", "item": kind_of(args[0])["t"] if args else "any"}
    if origin is dict: return {"t": "dict"}
    return {"t": "other", "repr": repr(ann)}

def fields(model):
    out = {}
    for name, f in getattr(model, "__pydantic_fields__", {}).items():
        if f.exclude: continue
        k = kind_of(f.annotation)
        lo = [m for m in f.metadata if isinstance(m, (at.Gt, at.Ge))]
        hi = [m for m in f.metadata if isinstance(m, (at.Lt, at.Le))]
        if lo: k["lo"] = getattr(lo[0], "gt", getattr(lo[0], "ge", None)); k["lo_strict"] = isinstance(lo[0], at.Gt)
        if hi: k["hi"] = getattr(hi[0], "lt", getattr(hi[0], "le", None))
        try:
            d = f.get_default(call_default_factory=True)
            json.dumps(d); k["default"] = d
        except Exception:
            pass
        out[name] = k
    return out

schema = {}
for cls in (RunConfig, AgentRunConfig, CompareConfig, AgentCompareConfig):
    secs = {}
    for s, f in cls.model_fields.items():
        if f.exclude: continue
        ann = f.annotation
        if s == "es":
            fs = fields(FullNoise); fs.update({"rank": {"t": "int", "lo": 1, "hi": 512, "lowrank_only": True}})
            fs["noise"] = {"t": "literal", "choices": ["full", "lowrank"]}
            secs[s] = fs
        elif hasattr(ann, "__pydantic_fields__"):
            secs[s] = fields(ann)
        else:
            secs[s] = {"__dict__": kind_of(ann)}
    schema[cls.__name__] = secs
methods = {}
for name in BUILTIN:
    for s, model in declared_sections([name]).items():
        methods[s] = fields(model)
schema["method_sections"] = methods
json.dump(schema, open("/tmp/sweep_tools/schema.json", "w"), indent=1, default=repr)
print({k: len(v) for k, v in schema.items()})
