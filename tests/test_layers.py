"""The layering of docs/architecture.md, checked on the source: every import
(at module level or inside a function) of every module in coevolve/ and
tasks/ points to its own layer or one below, and no two packages import each
other. Reads the files with ast; imports nothing it checks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# module prefix -> layer, longest prefix wins (docs/architecture.md, "Layers")
LAYERS = {
    "coevolve.base": 1,  # errors, config machinery and shared sections, noise, durable files
    "coevolve.stats": 1,  # pure statistics (mean ± std, Mean@k / Pass@k intervals): comparisons and agent evals
    "coevolve.engine": 2,  # vLLM engine, worker extension, OpenAI client, Ray pool
    "coevolve.sandbox": 2,
    "coevolve.codeparse": 2,  # LLM text -> program (the sandbox reads template signatures with it)
    "tasks": 2,
    "coevolve.es": 3,
    "coevolve.runstore": 3,
    "coevolve.search.ledger": 3,
    "coevolve.search": 4,
    "coevolve.agents": 4,
    "coevolve.plan": 5,  # the comparison plan both compare and report import
    "coevolve.compare": 5,
    "coevolve.report": 5,
    "coevolve.commands": 6,
    "coevolve.cli": 6,
    "coevolve.dashboard": 6,  # reads run and comparison directories, never writes
    "coevolve.__main__": 6,
}
NAMES = {1: "base", 2: "engine/sandbox/tasks", 3: "es/runstore/ledger", 4: "search/agents",
         5: "compare/report", 6: "commands/cli"}

# Edges allowed against the rule, each with the reason and the issue that
# removes it (none today: compare<->report and report->commands/run.py went
# with coevolve/plan.py). An entry whose edge is gone fails the last test.
ALLOWED: set[tuple[str, str]] = set()

# Packages (for the no-cycle rule): within one layer, sandbox may use tasks'
# registry to build a task in its worker, but tasks never import the sandbox.
PACKAGES = ["coevolve.base", "coevolve.engine", "coevolve.sandbox", "coevolve.codeparse", "tasks", "coevolve.es",
            "coevolve.runstore", "coevolve.search", "coevolve.agents", "coevolve.plan", "coevolve.compare", "coevolve.report",
            "coevolve.stats", "coevolve.commands", "coevolve.cli", "coevolve.dashboard"]


def modules() -> dict[str, Path]:
    found = {}
    for top in ("coevolve", "tasks"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def layer_of(module: str) -> int | None:
    if module == "coevolve":
        return 1  # the package's own __init__ (a new module directly under coevolve/ must be placed)
    best = None
    for prefix, layer in LAYERS.items():
        if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    return None if best is None else best[1]


def package_of(module: str) -> str | None:
    matches = [p for p in PACKAGES if module == p or module.startswith(p + ".")]
    return max(matches, key=len) if matches else None


def imports(path: Path, module: str, known: set[str]) -> list[tuple[str, int]]:
    """(imported project module, line) for every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in dict.fromkeys(names):
            if name.split(".")[0] in ("coevolve", "tasks"):
                out.append((name, node.lineno))
    return out


def edges() -> list[tuple[str, str, int]]:
    found = modules()
    known = set(found)
    return [(module, target, line) for module, path in found.items() for target, line in imports(path, module, known)]


def test_every_module_has_a_layer():
    unplaced = [m for m in modules() if layer_of(m) is None]
    assert not unplaced, f"add these modules to LAYERS (and to docs/architecture.md): {unplaced}"


def test_no_module_imports_from_a_layer_above_it():
    upward = []
    for module, target, line in edges():
        if (module, target) in ALLOWED:
            continue
        mine, theirs = layer_of(module), layer_of(target)
        if theirs is not None and theirs > mine:
            upward.append(f"{module}:{line} ({NAMES[mine]}) imports {target} ({NAMES[theirs]})")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_two_packages_import_each_other():
    graph: dict[str, set[str]] = {}
    for module, target, _ in edges():
        if (module, target) in ALLOWED:
            continue
        a, b = package_of(module), package_of(target)
        if a and b and a != b:
            graph.setdefault(a, set()).add(b)
    cycles = sorted({tuple(sorted((a, b))) for a, targets in graph.items() for b in targets
                     if a in graph.get(b, set())})
    assert not cycles, f"packages importing each other: {cycles}"


def test_allowed_edges_still_exist():
    """An allowance for an edge that is gone must go too (else it hides a new one)."""
    present = {(module, target) for module, target, _ in edges()}
    stale = ALLOWED - present
    assert not stale, f"remove from ALLOWED (the import is gone): {sorted(stale)}"


@pytest.mark.parametrize("source, target, line", [
    ("from coevolve.cli import main\n", "coevolve.cli", 1),
    ("import tasks.registry\n", "tasks.registry", 1),
    ("def f():\n    from coevolve.base import noise\n", "coevolve.base.noise", 2),
])
def test_the_walker_sees_imports_of_every_form(tmp_path, source, target, line):
    path = tmp_path / "m.py"
    path.write_text(source)
    found = imports(path, "coevolve.base.m", set(modules()))
    assert found == [(target, line)]


def test_an_upward_import_is_caught(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("from coevolve.cli import main\n")
    (target, _), = imports(path, "coevolve.base.m", set(modules()))
    assert layer_of(target) > layer_of("coevolve.base.m")


def unexplained_imports(path: Path) -> list[tuple[str, int]]:
    """(function, line) of each project import inside a function with no comment on its line or the one
    above: the reason it is not at the top (a cycle, an optional dependency, a heavy import on a cold path)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for fn in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if not any(n.split(".")[0] in ("coevolve", "tasks") for n in names):
                continue
            said = "#" in "".join(lines[node.lineno - 1: node.end_lineno]) or lines[node.lineno - 2].lstrip().startswith("#")
            if not said:
                out.append((fn.name, node.lineno))
    return out


def test_project_imports_are_at_the_top_unless_a_comment_says_why():
    found = [f"{path.relative_to(ROOT)}:{line} in {fn}" for path in modules().values()
             for fn, line in unexplained_imports(path)]
    assert not found, "move these imports to the top, or say why they are inside:\n" + "\n".join(found)


def test_an_unexplained_import_is_caught(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from coevolve.base import noise\n\n\n"
                    "def g():\n    from coevolve.base import noise  # a reason\n")
    assert unexplained_imports(path) == [("f", 2)]
