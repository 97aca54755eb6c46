"""The engine room: the only code that knows about vLLM and model weights."""

from coevolve.engine.base import Completion, Generator, Message, Sampling

__all__ = ["Completion", "Generator", "Message", "Sampling"]
