"""Tools agents call, built here (above the sandbox) and handed to the tasks
that use them: a task describes its world and never starts a sandbox."""

from __future__ import annotations

from typing import Any

from coevolve.sandbox import Sandbox
from coevolve.sandbox.results import ToolResult


class SandboxTool:
    """The Python tool, run in coevolve's sandbox (rlimits, timeout, no
    network, private temp dir), like heuristic candidates. The sandbox starts
    on first use and stops at close()."""

    def __init__(self, timeout_s: float = 10.0) -> None:
        self.timeout_s = timeout_s
        self._sandbox: Any = None

    def __call__(self, code: str) -> ToolResult:
        if self._sandbox is None:
            self._sandbox = Sandbox(workers=1, timeout_s=self.timeout_s).__enter__()
        return self._sandbox.run_python(code, timeout_s=self.timeout_s)

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.__exit__(None, None, None)
            self._sandbox = None
