"""How many cases of the hostile battery (tests/test_sandbox_boundary.py) a
sandbox contains, case by case, with the same criteria as the test plus the
side effects: faked scores, files written outside, the owner's file read
back in a verdict, control characters in a verdict's text, shared memory,
signals to the owner, killed or replaced workers, leftover processes, an
exception in the caller. Run it against any checkout's sandbox to compare:

    PYTHONPATH=OTHER_CHECKOUT .venv/bin/python benchmarks/sandbox_battery.py

(the battery itself always comes from this checkout's tests/).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import coevolve.sandbox as sandbox_module  # noqa: E402
from coevolve.base.untrusted import clean  # noqa: E402
from test_sandbox import GOOD, GOOD_OBJECTIVE, TinyTSP, processes_with_mark  # noqa: E402
from test_sandbox_boundary import OPTIMUM, battery  # noqa: E402


def main() -> None:
    print("sandbox code from", os.path.dirname(sandbox_module.__file__))
    mark = os.environ.setdefault("COEVOLVE_SANDBOX_TEST_MARK", f"battery-{os.getpid()}")
    received: list[int] = []
    signal.signal(signal.SIGUSR1, lambda *args: received.append(1))
    outside = os.path.join(tempfile.mkdtemp(), "outside")
    contained = 0
    try:
        with sandbox_module.Sandbox(workers=1, timeout_s=6.0, memory_mb=512, output_limit=2000) as sandbox:
            sandbox.evaluate(GOOD, TinyTSP())
            cases = battery(outside, os.getpid(), sandbox.worker_pids(),
                            memory_counted=getattr(sandbox, "boundary", {}).get("memory_limit") != ["rlimit"],
                            hidden_view=getattr(sandbox, "boundary", {}).get("hidden_view", True))
            for label, code, expected in cases:
                shutil.rmtree(outside, ignore_errors=True)
                os.makedirs(outside)
                with open(os.path.join(outside, "keep"), "w") as keep:
                    keep.write("precious")
                received.clear()
                workers = sandbox.worker_pids()
                try:
                    result = sandbox.evaluate(code, TinyTSP())
                    good = sandbox.evaluate(GOOD, TinyTSP())
                except Exception as exc:
                    print(f"  {label:42s} NOT contained: the caller raised {type(exc).__name__}")
                    continue
                why = []
                if expected == "honest":
                    if result.ok and result.objective < OPTIMUM - 1e-9:
                        why.append(f"faked objective {result.objective:.3f}")
                elif result.failure not in (expected if isinstance(expected, tuple) else (expected,)):
                    why.append(f"verdict {result.failure.value if result.failure else 'ok'}")
                if not (good.ok and abs(good.objective - GOOD_OBJECTIVE) < 1e-9):
                    why.append("the next candidate failed")
                if sorted(os.listdir(outside)) != ["keep"] or open(os.path.join(outside, "keep")).read() != "precious":
                    why.append("wrote outside")
                if any("precious" in text for text in (result.message, result.output)):
                    why.append("read the owner's file")
                if any(clean(text) != text for text in (result.message, result.output)):
                    why.append("control characters in its text")
                if os.path.exists("/dev/shm/coevolve_pwned"):
                    why.append("shared memory")
                    os.unlink("/dev/shm/coevolve_pwned")
                if received:
                    why.append("signalled the owner")
                if sandbox.worker_pids() != workers:
                    why.append("its worker died")
                left = [p for p in processes_with_mark(mark) if p.pid not in sandbox.worker_pids() and p.pid != os.getpid()]
                if left:
                    why.append(f"{len(left)} processes left")
                    for process in left:
                        process.kill()
                contained += not why
                print(f"  {label:42s} {'contained' if not why else 'NOT contained: ' + ', '.join(why)}")
    except Exception as exc:  # closing the sandbox (its clean-up) raised in the caller
        print(f"  NOT contained: the sandbox raised {type(exc).__name__} in the caller after the last case")
        contained -= 1
    shutil.rmtree(os.path.dirname(outside), ignore_errors=True)
    print(f"contained {contained} of {len(cases)}")


if __name__ == "__main__":
    main()
