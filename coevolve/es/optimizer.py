"""ESOpt: the Agentic ESOpt update θ ← θ + α/G Σ ẑ_i ε_i (no 1/σ, as in the
paper) with a σ schedule, driven through any engine that offers
`apply_update(seeds, coefficients, alpha)` and `checksum()`.

ask() hands out (seed, σ) members; the caller runs each perturbed model and
computes one scalar reward per member; tell() normalises, updates the engine
and appends the generation to history.jsonl.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from coevolve.base import noise
from coevolve.engine.base import WeightEngine
from coevolve.es import history
from coevolve.es.config import ESConfig

EPSILON = 1e-8  # added to the z-score's std


@dataclass(frozen=True)
class Member:
    index: int
    seed: int
    sigma: float  # signed: the second of an antithetic pair has -σ


def sigma_at(cfg: ESConfig, generation: int) -> float:
    """Cosine decay from sigma at step 0 to sigma_end at step generations − 1:
    σ_t = σ_end + (σ − σ_end)(1 + cos(π t / (G − 1))) / 2, the reference's
    `sigma_at_step` without warm-up. Our default σ_end > 0 keeps the last step
    exploring; σ_end = 0 is the reference's test-time schedule."""
    if cfg.schedule == "constant" or cfg.generations <= 1:
        return cfg.sigma
    t = min(max(generation, 0), cfg.generations - 1) / (cfg.generations - 1)
    return cfg.sigma_end + 0.5 * (cfg.sigma - cfg.sigma_end) * (1 + math.cos(math.pi * t))


def normalise(rewards: Sequence[float], method: str = "zscore", epsilon: float = EPSILON, ddof: int = 1) -> np.ndarray:
    """The one reward normaliser. Equal rewards carry no direction: all zeros.
    `ddof` picks the z-score's std: 1 (sample std, the paper's worked example)
    or 0 (population std, what the paper's code computes)."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or r.size < 2:
        raise ValueError(f"need at least 2 rewards, got {r.size}")
    if not np.all(np.isfinite(r)):
        raise ValueError(f"rewards must be finite, got {r.tolist()}")
    if method == "zscore":
        std = r.std(ddof=ddof)
        if std == 0:
            return np.zeros_like(r)
        return (r - r.mean()) / (std + epsilon)
    if method == "rank":
        # centred ranks in [-0.5, 0.5]; ties share their mean rank
        order = r.argsort(kind="stable")
        ranks = np.empty_like(r)
        ranks[order] = np.arange(r.size, dtype=np.float64)
        for value in np.unique(r):
            tie = r == value
            ranks[tie] = ranks[tie].mean()
        return ranks / (r.size - 1) - 0.5
    raise ValueError(f"unknown normalisation {method!r}")


class ESOpt:
    """`cfg` is the run's [es] section with population and generations
    resolved (ESConfig.resolve); `seed` is the run's seed, from which every
    member's noise seed derives."""

    def __init__(self, cfg: ESConfig, history_path: str | Path, *, seed: int = 0, generation: int = 0,
                 flat: int = 0) -> None:
        cfg.check_resolved()
        self.cfg = cfg
        self.seed = seed
        self.history_path = Path(history_path)
        self.generation = generation
        # generations whose members all earned the same reward: every z-score is 0,
        # so the update moved nothing; summaries report it so a run that never
        # saw a reward difference does not pass for one that learned nothing
        self.flat = flat
        self.replayed: list[dict[str, Any]] = []  # the history records resume() re-applied, for its note

    @property
    def sigma(self) -> float:
        return sigma_at(self.cfg, self.generation)

    def ask(self, step: int | None = None) -> list[Member]:
        """The members of the next update. `step`: the σ schedule's step when it is
        not the update count (es.sigma_steps = "generation"); seeds always follow
        the update count, so a history replays the same directions."""
        sigma = self.sigma if step is None else sigma_at(self.cfg, step)
        g = self.cfg.population
        if self.cfg.antithetic:
            members = []
            for pair in range(g // 2):
                seed = noise.member_seed(self.seed, self.generation, pair)
                members += [Member(2 * pair, seed, sigma), Member(2 * pair + 1, seed, -sigma)]
            return members
        return [Member(i, noise.member_seed(self.seed, self.generation, i), sigma) for i in range(g)]

    def tell(
        self,
        engine: WeightEngine,
        members: Sequence[Member],
        rewards: Sequence[float],
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        if len(rewards) != len(members):
            raise ValueError(f"got {len(rewards)} rewards for {len(members)} members")
        check_mode(engine, self.cfg.noise, self.cfg.rank, "es config")
        z = normalise(rewards, self.cfg.normalise, EPSILON, self.cfg.ddof)  # raises before any change
        # the mirrored member of an antithetic pair (σ < 0) flips its direction; σ = 0
        # (the last step of a schedule to 0) keeps it, as the reference's update does
        coefficients = [float(zi) * (-1.0 if m.sigma < 0 else 1.0) for zi, m in zip(z, members)]
        seeds = [m.seed for m in members]
        started = time.time()
        engine.apply_update(seeds, coefficients, self.cfg.alpha)
        record = {
            "generation": self.generation,
            "seeds": seeds,
            "sigmas": [m.sigma for m in members],
            "rewards": [float(r) for r in rewards],
            "normalised": [float(v) for v in z],
            # the normaliser's settings, so `normalised` is checkable against `rewards` from the history alone
            # (ddof and epsilon are the z-score's; histories from before these fields replay all the same)
            "normalise": self.cfg.normalise,
            "ddof": self.cfg.ddof,
            "epsilon": EPSILON,
            "coefficients": coefficients,
            "sigma": abs(members[0].sigma),
            "alpha": self.cfg.alpha,
            "population": len(members),
            "noise_version": noise.NOISE_VERSION,
            "noise": self.cfg.noise,
            "rank": self.cfg.rank,
            "device": getattr(engine, "device", "unknown"),
            "dtype": getattr(engine, "dtype", "unknown"),
            "tp": getattr(engine, "tensor_parallel_size", 1),
            "checksum": engine.checksum(),
            "update_seconds": round(time.time() - started, 3),
            "time": time.time(),
        }
        if self.cfg.noise == "lowrank":
            record["frozen_elements"] = engine.noise_info().get("frozen_elements")
        if extra:
            record["extra"] = extra
        history.append(self.history_path, record)
        self.generation += 1
        self.flat += is_flat(record)
        return record

    @classmethod
    def resume(cls, cfg: ESConfig, history_path: str | Path, engine: WeightEngine, *, seed: int = 0,
               verify: bool = True, logged_updates: int | None = None,
               log_path: str | Path | None = None) -> "ESOpt":
        """Re-apply every recorded update to a fresh engine (bit-exact on the
        same device kind) and continue after the last one. `logged_updates`: the
        ES updates the run's log (`log_path`) says were made, checked against the
        history before any weight moves (replay)."""
        cfg.check_resolved()  # before any weight moves
        records = replay(history_path, engine, verify=verify, logged_updates=logged_updates, log_path=log_path)
        resumed = cls(cfg, history_path, seed=seed, generation=len(records), flat=sum(map(is_flat, records)))
        resumed.replayed = records
        return resumed


def is_flat(record: dict[str, Any]) -> bool:
    """True when a history record's update moved no weight (all coefficients 0)."""
    return not any(record.get("coefficients", [1.0]))


def engine_options(noise: str, rank: int, population: int) -> dict[str, Any]:
    """Engine keyword arguments an ES setting needs: low-rank noise runs the
    whole population in LoRA slots, so the engine must be built with them."""
    return {"noise": "lowrank", "rank": rank, "members": population} if noise == "lowrank" else {}


# what histories written before [model] dtype existed ran: every engine then was bfloat16
LEGACY_DTYPE = "bfloat16"


def recorded_dtype(history_path: str | Path) -> str | None:
    """The weight type a history's updates were made in (None: no history yet)."""
    return dtype_of(history.read(history_path))


def dtype_of(records: list[dict]) -> str | None:
    """The weight type of history records already read (None: none yet)."""
    return records[0].get("dtype", LEGACY_DTYPE) if records else None


def engine_dtype(requested: str, history_path: str | Path | None) -> str:
    """The dtype to build a run's engine with: "auto" resumes in the type the run's
    history was recorded in (its checksums hold only there), whatever this machine's CPU."""
    known = requested == "auto" and history_path is not None
    return dtype_for(requested, recorded_dtype(history_path) if known else None)


def dtype_for(requested: str, recorded: str | None) -> str:
    """engine_dtype for a recorded type already known."""
    if requested != "auto":
        return requested
    return recorded if recorded not in (None, "unknown") else requested


class ReplayError(RuntimeError):
    pass


class NoiseModeError(ReplayError):
    """An update or history in one noise mode meets an engine in another."""


def check_mode(engine: Any, mode: str, rank: int | None, source: str) -> None:
    """Refuse, before any weight moves, an update whose noise mode the engine
    does not apply: the same seeds mean different directions in each mode."""
    engine_mode = getattr(engine, "noise", "full")
    engine_rank = getattr(engine, "rank", None) if engine_mode == "lowrank" else None
    if (engine_mode, engine_rank) != (mode, rank):
        want = mode if mode == "full" else f"lowrank rank {rank}"
        have = engine_mode if engine_mode == "full" else f"lowrank rank {engine_rank}"
        raise NoiseModeError(f"{source} asks for {want} noise but the engine runs {have} noise; "
                          f"start the engine with es.noise/es.rank matching it")


UNREPLAYABLE = "the run cannot replay its weights"


def check_generations(history_path: str | Path, numbered: list[tuple[int, Any]]) -> list[dict[str, Any]]:
    """The records of a history read with line numbers (history.read_numbered),
    refused unless they are generations 0, 1, 2, ... in order. Replay applies
    records by position while the run goes on from their count, so a record lost
    from the middle (or one doubled or moved) would replay onto other weights; the
    checksum does not catch it where the lost update was flat (it moved nothing)."""
    records = []
    for expected, (line, record) in enumerate(numbered):
        if not isinstance(record, dict):
            raise ReplayError(f"{history_path}: line {line} is not an ES update record where generation {expected} "
                              f"was expected: the file was edited; {UNREPLAYABLE}")
        generation = record.get("generation")
        # type checked too: JSON's 1.0 and true compare equal to 1 in Python but are no generation
        if type(generation) is not int or generation != expected:
            held = "no generation" if generation is None else f"generation {json.dumps(generation)}"
            raise ReplayError(f"{history_path}: line {line} holds {held} where generation {expected} was expected: "
                              f"a record is missing or was edited; {UNREPLAYABLE}")
        records.append(record)
    return records


def check_logged_updates(history_path: str | Path, held: int, logged_updates: int,
                         log_path: str | Path | None) -> None:
    """Refuse a history holding more updates than the run's log says were made.
    The log is written before each update, so a kill leaves the history one short
    at most, and any tail it lacks is re-applied from the log's members and
    rewards; updates the log never made cannot be, and the run would go on from
    a generation its log does not hold."""
    if held > logged_updates:
        log = log_path if log_path is not None else "the run's log"
        raise ReplayError(f"{history_path} holds {held} ES updates but {log} logged {logged_updates}: "
                          f"the history has updates the log does not (the log lost steps, or the history "
                          f"is another run's); {UNREPLAYABLE}")


def replay(history_path: str | Path, engine: WeightEngine, verify: bool = True, *,
           logged_updates: int | None = None, log_path: str | Path | None = None) -> list[dict[str, Any]]:
    """Re-apply a history's updates to `engine`, after refusing (ReplayError, before
    any weight moves or the file is touched) one whose generations are not 0, 1, 2, ...
    in order, that holds more updates than `logged_updates` (when given: what the
    run's log `log_path` says were made), or that this engine cannot reproduce."""
    records = check_generations(history_path, history.read_numbered(history_path))
    if logged_updates is not None:
        check_logged_updates(history_path, len(records), logged_updates, log_path)
    device = getattr(engine, "device", None)
    tp = getattr(engine, "tensor_parallel_size", 1)
    for record in records:  # every record is checked before the first weight moves
        where = f"{history_path} (generation {record.get('generation')})"
        if record.get("noise_version", noise.NOISE_VERSION) != noise.NOISE_VERSION:
            raise ReplayError(f"{where} used noise v{record['noise_version']}, this code draws v{noise.NOISE_VERSION}")
        check_mode(engine, record.get("noise", "full"), record.get("rank"), where)
        recorded_device = record.get("device")
        if verify and recorded_device and device and recorded_device != device:
            raise ReplayError(
                f"{history_path} was recorded on {recorded_device}; noise streams differ on {device}, "
                "so replay cannot reproduce its weights"
            )
        recorded_type, engine_type = record.get("dtype", LEGACY_DTYPE), getattr(engine, "dtype", None)
        if verify and engine_type and recorded_type != "unknown" and recorded_type != engine_type:
            raise ReplayError(f"{history_path} was recorded in {recorded_type} weights; this engine runs "
                              f"{engine_type}, so replay cannot reproduce them: set [model] dtype = "
                              f'"{recorded_type}"')
        if verify and record.get("tp", 1) != tp:
            raise ReplayError(
                f"{history_path} was recorded with tensor_parallel_size={record.get('tp', 1)}; sharded noise "
                f"streams differ at tensor_parallel_size={tp}"
            )
    history.truncate_torn_tail(history_path)  # only once the history is known to replay
    for record in records:
        engine.apply_update(record["seeds"], record["coefficients"], record["alpha"])
        if verify and "checksum" in record and engine.checksum() != record["checksum"]:
            raise ReplayError(f"{history_path}: checksum mismatch after generation {record['generation']}")
    return records
