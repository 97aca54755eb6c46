"""Lines of the five config modules issue 21 names, per top-level definition (with the comment
lines right above it), and whole files: all lines and code lines (not blank, not comment-only, not a
docstring). Usage: python3 config_lines.py OLD_REV NEW_REV (run in the repository)."""
import ast
import subprocess
import sys

FILES = ("coevolve/base/config.py coevolve/base/sections.py coevolve/es/config.py "
         "coevolve/search/runconfig.py coevolve/agents/runconfig.py").split()


def code_lines(src, tree):
    doc = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                doc.update(range(first.lineno, first.end_lineno + 1))
    return sum(1 for i, line in enumerate(src.splitlines(), 1)
               if line.strip() and not line.strip().startswith("#") and i not in doc)


def measure(rev):
    defs, lines, code = {}, 0, 0
    for f in FILES:
        src = subprocess.run(["git", "show", f"{rev}:{f}"], capture_output=True, text=True, check=True).stdout
        text, tree = src.splitlines(), ast.parse(src)
        lines, code = lines + len(text), code + code_lines(src, tree)
        for n in tree.body:
            if isinstance(n, (ast.ClassDef, ast.FunctionDef)):
                s = min([d.lineno for d in n.decorator_list] + [n.lineno]) - 1
                while s - 1 >= 0 and text[s - 1].strip().startswith("#"):
                    s -= 1
                defs[("/".join(f.split("/")[-2:]), n.name)] = n.end_lineno - s + 1
    return defs, lines, code


(a, la, ca), (b, lb, cb) = measure(sys.argv[1]), measure(sys.argv[2])
for k in sorted(set(a) | set(b)):
    print(f"{k[0]:24s} {k[1]:28s} {a.get(k, '-'):>5} {b.get(k, '-'):>5}")
print("definitions total", sum(a.values()), sum(b.values()))
print("file total", la, lb)
print("code lines", ca, cb)
