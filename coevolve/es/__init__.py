"""Evolution strategies: the optimizer and its history (the noise generator is coevolve.base.noise)."""

from coevolve.es.optimizer import ESConfig, ESOpt, Member, ReplayError, normalise, replay, sigma_at

__all__ = ["ESConfig", "ESOpt", "Member", "ReplayError", "normalise", "replay", "sigma_at"]
