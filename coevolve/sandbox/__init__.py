"""Run untrusted, LLM-written code under limits and score it on a task.
See docs/sandbox.md for the design, what is enforced and what is not."""

from coevolve.sandbox.pool import Sandbox
from coevolve.sandbox.results import EvalResult, FailureKind, ToolResult

__all__ = ["Sandbox", "EvalResult", "FailureKind", "ToolResult"]
