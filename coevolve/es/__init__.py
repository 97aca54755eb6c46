"""Evolution strategies: the noise generator, the optimizer, the history."""

from coevolve.es.optimizer import (ESConfig, ESOpt, Member, NoiseModeError, ReplayError, check_mode, engine_options, normalise,
                                   replay, sigma_at)

__all__ = ["ESConfig", "ESOpt", "Member", "NoiseModeError", "ReplayError", "check_mode", "engine_options", "normalise", "replay",
           "sigma_at"]
