"""`[start] programs`: files whose programs a heuristic run's archive starts with.

Each file holds a program defining the task's function (a heuristic of your
own, an earlier run's best.py); it is shaped as a reply's program is (the
template's imports added, statements that would run at import dropped),
scored in the sandbox before the first step and put into the method's
archive, free of T (the ledger's `seeded`, as `context.seed_template` seeds
the template). The programs are candidates -1, -2, ... in the order listed;
each is logged with its code in a "seed" event, so a resumed run needs the
files no more. Paths in a config count from the TOML's folder.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Sequence

from coevolve.base.errors import ConfigError
from coevolve.codeparse import extract

START_OPERATOR = "start"  # a starting program's operator and model kind in candidates and the genealogy


def read_programs(paths: Sequence[str], function_name: str, template: str) -> list[tuple[str, str]]:
    """(path, program) of each file; ConfigError naming start.programs[i] and the file when it cannot be
    read, is not Python, or defines no top-level `function_name`."""
    programs = []
    for index, path in enumerate(paths):
        where = f"config error: start.programs[{index}]"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            raise ConfigError(f"{where}: {path} is not valid Python (line {exc.lineno}: {exc.msg})") from None
        if not any(isinstance(node, ast.FunctionDef) and node.name == function_name for node in tree.body):
            raise ConfigError(f"{where}: {path} defines no top-level {function_name}(), the function the task "
                             "evolves")
        shaped = extract(text, function_name, template)
        if shaped is None:  # not reached for a file that parses and defines the function
            raise ConfigError(f"{where}: no program found in {path}")
        programs.append((path, shaped.code))
    return programs
