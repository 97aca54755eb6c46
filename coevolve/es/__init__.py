"""Evolution strategies: the optimizer and its history (the noise generator is coevolve.base.noise)."""

from coevolve.es.config import ESConfig
from coevolve.es.optimizer import (ESOpt, Member, NoiseModeError, ReplayError, check_mode, engine_dtype, engine_options,
                                   normalise, replay, sigma_at)

__all__ = ["ESConfig", "ESOpt", "Member", "NoiseModeError", "ReplayError", "check_mode", "engine_dtype", "engine_options",
           "normalise", "replay", "sigma_at"]
