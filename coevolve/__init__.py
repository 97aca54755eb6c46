"""coevolve: co-evolve an LLM agent's context and weights under one budget."""

__version__ = "0.1.0"
