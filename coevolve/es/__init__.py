"""Evolution strategies: the noise generator, the optimizer, the history."""

from coevolve.es.optimizer import ESConfig, ESOpt, Member, ReplayError, normalise, replay, sigma_at

__all__ = ["ESConfig", "ESOpt", "Member", "ReplayError", "normalise", "replay", "sigma_at"]
