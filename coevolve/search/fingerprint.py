"""Rename-invariant fingerprints of candidate programs, to reject clones before
they are scored.

Small models often hand back the template or an earlier candidate with new
names, a new docstring, reformatted literals or comments. The normal form
drops what cannot change behaviour: comments and formatting (the AST has
none), docstrings and other bare string statements, and the names the
program binds itself (functions, parameters, locals, import aliases), which
become v0, v1, ... in order of first appearance. Names it does not bind
(builtins, attributes such as `np.argmin`, globals of the task) are kept:
`min` and `max` must stay different. Two programs with the same normal form
are clones; `similarity` compares normal forms token by token for near-clones.
"""

from __future__ import annotations

import ast
import difflib
import functools
import hashlib
from dataclasses import dataclass


class _Binder(ast.NodeVisitor):
    """The names a program binds, in order of first appearance."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def bind(self, name: str | None) -> None:
        if name and name not in self.names:
            self.names[name] = f"v{len(self.names)}"

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.bind(node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.bind(node.name)
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        self.bind(node.arg)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.bind(node.id)

    def visit_alias(self, node: ast.alias) -> None:
        self.bind(node.asname or node.name.split(".")[0])

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self.bind(node.name)
        self.generic_visit(node)


class _Normaliser(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                        and isinstance(s.value.value, str))]
        return kept or [ast.Pass()]

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for field in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, field, None), list) and getattr(node, field):
                setattr(node, field, self._body(getattr(node, field)))
        return super().generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self.names.get(node.name, node.name)
        node.returns = None
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.name = self.names.get(node.name, node.name)
        return self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self.names.get(node.arg, node.arg)
        node.annotation = None  # type hints do not change what runs
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_alias(self, node: ast.alias) -> ast.AST:
        node.asname = self.names.get(node.asname or node.name.split(".")[0])
        return node

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        if node.name:
            node.name = self.names.get(node.name, node.name)
        return self.generic_visit(node)


def normal_form(code: str) -> str | None:
    """The program's normal form (an AST dump); None when it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    binder = _Binder()
    binder.visit(tree)
    tree = _Normaliser(binder.names).visit(tree)
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


@dataclass(frozen=True)
class Fingerprint:
    digest: str  # sha256 of the normal form: equal digests are clones
    tokens: tuple[str, ...]  # the normal form's tokens, for near-clone similarity


@functools.lru_cache(maxsize=256)  # a reply is fingerprinted for its re-ask and again as a candidate
def fingerprint(code: str) -> Fingerprint | None:
    form = normal_form(code)
    if form is None:
        return None
    tokens = tuple(t for t in form.replace("(", " ( ").replace(")", " ) ").replace(",", " ").split() if t)
    return Fingerprint(hashlib.sha256(form.encode()).hexdigest()[:20], tokens)


def similarity(a: Fingerprint, b: Fingerprint, at_least: float = 0.0) -> float:
    """Share of matching tokens between two normal forms, in [0, 1]; 0 as soon
    as a cheap upper bound shows it is below `at_least` (most pairs are far apart)."""
    if a.digest == b.digest:
        return 1.0
    matcher = difflib.SequenceMatcher(None, a.tokens, b.tokens, autojunk=False)
    if matcher.real_quick_ratio() < at_least or matcher.quick_ratio() < at_least:
        return 0.0
    return matcher.ratio()


class CloneIndex:
    """Fingerprints of the programs seen so far (key 0: the template). `find`
    returns the key of the first program the code clones, or None."""

    def __init__(self, threshold: float = 1.0) -> None:
        if not 0 < threshold <= 1:
            raise ValueError(f"similarity threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.by_digest: dict[str, int] = {}
        self.entries: list[tuple[int, Fingerprint]] = []

    def add(self, key: int, fp: Fingerprint) -> None:
        self.by_digest.setdefault(fp.digest, key)
        self.entries.append((key, fp))

    def find(self, fp: Fingerprint) -> int | None:
        if fp.digest in self.by_digest:
            return self.by_digest[fp.digest]
        if self.threshold >= 1:
            return None
        for key, other in self.entries:
            if similarity(fp, other, self.threshold) >= self.threshold:
                return key
        return None
