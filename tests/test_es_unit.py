"""ESOpt logic without an engine: normalisation, schedules, antithetic pairs,
history durability and replay guards. A tiny numpy engine stands in for the
weights; the real engine's tests are in test_engine.py."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from coevolve.base.errors import ConfigError
from coevolve.engine.vllm_engine import cpu_has_native_bf16, resolve_dtype
from coevolve.es import ESConfig, ESOpt, ReplayError, engine_dtype, history, normalise, replay, sigma_at
from coevolve.es.optimizer import recorded_dtype


class VectorEngine:
    device = "cpu"
    tensor_parallel_size = 1

    def __init__(self) -> None:
        self.theta = np.zeros(8)

    def apply_update(self, seeds, coefficients, alpha):
        step = sum(c * np.random.default_rng(s).standard_normal(8) for s, c in zip(seeds, coefficients))
        self.theta = self.theta + alpha / len(seeds) * step

    def checksum(self) -> str:
        return hashlib.sha256(self.theta.tobytes()).hexdigest()


def test_zscore_matches_the_papers_worked_example():
    # The paper's worked example prints, from its rounded mean 0.33 and s_R ~ 0.25,
    # R^ ~ (1.08, -0.12, -0.96). Our default (sample std) must land within that
    # rounding (its -0.96 is itself 0.03 off its own inputs); the population std
    # (0.2055) would give (1.30, -0.16, -1.14).
    paper = [1.08, -0.12, -0.96]
    assert normalise([0.6, 0.3, 0.1]) == pytest.approx(paper, abs=0.05)
    assert normalise([0.6, 0.3, 0.1], ddof=0).tolist() != pytest.approx(paper, abs=0.05)
    assert normalise([2.0, 2.0, 2.0]).tolist() == [0.0, 0.0, 0.0]


def test_zscore_ddof0_is_the_reference_codes_population_std():
    # The reference code z-scores with numpy's default std (ddof = 0): (r - mean) / (std + eps)
    # By hand: mean -0.1, deviations (0.5, -0.9, 0.2, 0.2), squares sum to 1.14;
    # population std sqrt(1.14 / 4) = 0.533854, sample std sqrt(1.14 / 3) = 0.616441.
    rewards = [0.4, -1.0, 0.1, 0.1]
    assert normalise(rewards, ddof=0) == pytest.approx([0.936586, -1.685854, 0.374634, 0.374634], abs=1e-6)
    assert normalise(rewards, ddof=1) == pytest.approx([0.811107, -1.459993, 0.324443, 0.324443], abs=1e-6)
    with pytest.raises(ConfigError, match="es.ddof"):
        ESConfig(ddof=2)


def test_rank_normalisation_is_centred_and_tie_aware():
    assert normalise([3.0, 1.0, 2.0], "rank").tolist() == [0.5, -0.5, 0.0]
    assert normalise([1.0, 1.0, 5.0, 7.0], "rank").tolist() == pytest.approx([-1 / 3, -1 / 3, 1 / 6, 1 / 2])


def test_cosine_schedule_ends_at_sigma_end_not_zero():
    cfg = ESConfig(sigma=1e-3, sigma_end=1e-4, generations=5)
    values = [sigma_at(cfg, g) for g in range(5)]
    assert values[0] == pytest.approx(1e-3) and values[-1] == pytest.approx(1e-4)
    assert all(a > b for a, b in zip(values, values[1:]))
    assert sigma_at(ESConfig(schedule="constant", generations=5), 4) == 1e-3


def test_cosine_schedule_at_interior_points():
    """Values worked out by hand, so a linear (or any other monotone) decay fails:
    σ_t = σ_end + (σ − σ_end)(1 + cos(π t / (G − 1))) / 2."""
    to_zero = ESConfig(sigma=1e-3, sigma_end=0.0, generations=25)  # the reference's test-time schedule
    # t/(G-1) = 1/4, 1/2, 3/4: (1 + cos) / 2 = 0.853553, 0.5, 0.146447 (linear: 0.75, 0.5, 0.25)
    assert sigma_at(to_zero, 6) == pytest.approx(8.53553e-4, rel=1e-5)
    assert sigma_at(to_zero, 12) == pytest.approx(5e-4, rel=1e-9)
    assert sigma_at(to_zero, 18) == pytest.approx(1.46447e-4, rel=1e-5)
    assert sigma_at(to_zero, 24) == 0.0 and sigma_at(to_zero, 0) == 1e-3
    # The example: T = 1000 EoH+ES, ES update 46 of 50. Stepped per update to
    # 1e-4: 1e-4 + 4.5e-4 (1 + cos(46π/49)) = 1.0830e-4. Stepped per EoH generation
    # (update 46 is generation 23 of 25) to 0: 5e-4 (1 + cos(23π/24)) = 4.28e-6.
    per_update = ESConfig(sigma=1e-3, sigma_end=1e-4, generations=50)
    assert sigma_at(per_update, 46) == pytest.approx(1.0830e-4, rel=1e-4)
    assert sigma_at(to_zero, 46 // 2) == pytest.approx(4.2776e-6, rel=1e-4)


@pytest.mark.parametrize(
    "field,value",
    [("population", 1), ("sigma", 0.0), ("sigma", -1.0), ("sigma_end", -1e-4),
     ("sigma_steps", "batch"), ("alpha", math.nan),
     ("schedule", "linear"), ("normalise", "minmax"), ("generations", -1), ("rank", 513),
     ("proposals_per_member", 0)],
)
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ConfigError, match=f"es.{field}"):
        ESConfig(**{field: value})


def test_esopt_refuses_what_the_run_has_not_resolved(tmp_path):
    # 0 means "set by the run": ESOpt needs the run's numbers, and resolve keeps what the config gives
    with pytest.raises(ConfigError, match="es.population must be >= 2 when ES runs"):
        ESOpt(ESConfig(generations=3), tmp_path / "h.jsonl")
    with pytest.raises(ConfigError, match="es.generations must be >= 1 when ES runs"):
        ESOpt(ESConfig(population=4), tmp_path / "h.jsonl")
    resolved = ESConfig(population=6).resolve(population=4, generations=3)
    assert (resolved.population, resolved.generations) == (6, 3)
    with pytest.raises(ConfigError, match="es.population must be even when antithetic"):
        ESConfig(antithetic=True).resolve(population=3, generations=1)


def test_antithetic_pairs_share_seeds_and_cancel_when_rewards_tie(tmp_path):
    es = ESOpt(ESConfig(population=4, antithetic=True, generations=2), tmp_path / "h.jsonl")
    members = es.ask()
    assert members[0].seed == members[1].seed and members[0].sigma == -members[1].sigma
    engine = VectorEngine()
    record = es.tell(engine, members, [1.0, 0.0, 0.5, 0.5])
    # a pair whose mirrored members score alike contributes nothing
    assert record["coefficients"][2] == pytest.approx(-record["coefficients"][3])


def test_nan_rewards_change_nothing(tmp_path):
    engine = VectorEngine()
    es = ESOpt(ESConfig(population=3, generations=1), tmp_path / "h.jsonl")
    with pytest.raises(ValueError, match="finite"):
        es.tell(engine, es.ask(), [1.0, float("nan"), 0.0])
    assert not engine.theta.any() and es.generation == 0
    assert not (tmp_path / "h.jsonl").exists()


def test_replay_reproduces_and_guards_device_and_layout(tmp_path):
    path = tmp_path / "h.jsonl"
    engine = VectorEngine()
    es = ESOpt(ESConfig(population=4, generations=3), path, seed=3)
    for g in range(3):
        es.tell(engine, es.ask(), [g, 1.0, 2.0, 0.5])
    fresh = VectorEngine()
    resumed = ESOpt.resume(es.cfg, path, fresh, seed=3)
    assert resumed.generation == 3 and fresh.checksum() == engine.checksum()
    assert resumed.ask() == es.ask()  # the run's seed carries over: the next generation's members match

    gpu = VectorEngine()
    gpu.device = "cuda"
    with pytest.raises(ReplayError, match="recorded on cpu"):
        replay(path, gpu)
    sharded = VectorEngine()
    sharded.tensor_parallel_size = 2
    with pytest.raises(ReplayError, match="tensor_parallel_size"):
        replay(path, sharded)


def test_a_history_replays_only_in_its_weight_type_and_auto_resumes_in_it(tmp_path):
    path = tmp_path / "h.jsonl"
    engine = VectorEngine()
    engine.dtype = "float32"
    es = ESOpt(ESConfig(population=4, generations=2), path, seed=3)
    es.tell(engine, es.ask(), [0.0, 1.0, 2.0, 0.5])
    assert history.read(path)[0]["dtype"] == "float32" == recorded_dtype(path)
    assert engine_dtype("auto", path) == "float32"  # a resumed run keeps its type on any CPU
    assert engine_dtype("bfloat16", path) == "bfloat16" and engine_dtype("auto", tmp_path / "none.jsonl") == "auto"
    other = VectorEngine()
    other.dtype = "bfloat16"
    with pytest.raises(ReplayError, match='recorded in float32 weights.*set \\[model\\] dtype = "float32"'):
        replay(path, other)
    assert other.checksum() == VectorEngine().checksum()  # refused before any weight moved
    # histories from before [model] dtype: every engine then ran bfloat16
    legacy = tmp_path / "legacy.jsonl"
    history.append(legacy, {k: v for k, v in history.read(path)[0].items() if k != "dtype"})
    assert recorded_dtype(legacy) == "bfloat16" == engine_dtype("auto", legacy)
    with pytest.raises(ReplayError, match="recorded in bfloat16"):
        replay(legacy, engine)


def test_auto_weight_type_is_bf16_only_where_the_cpu_computes_it_natively():
    avx2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
    avx512 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
    arm = "processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n"
    assert not cpu_has_native_bf16(avx2) and cpu_has_native_bf16(avx512) and cpu_has_native_bf16(arm)
    assert resolve_dtype("auto", "cuda") == "bfloat16"
    assert resolve_dtype("auto", "cpu") == ("bfloat16" if cpu_has_native_bf16() else "float32")
    assert resolve_dtype("float32", "cuda") == "float32"
    with pytest.raises(ValueError, match="model.dtype must be one of auto, bfloat16, float32"):
        resolve_dtype("float16", "cpu")


def test_torn_history_tail_is_dropped(tmp_path):
    path = tmp_path / "h.jsonl"
    history.append(path, {"generation": 0})
    with open(path, "a") as handle:
        handle.write('{"generation": 1, "se')  # killed mid-write
    assert [r["generation"] for r in history.read(path)] == [0]
    history.truncate_torn_tail(path)
    history.append(path, {"generation": 1})
    assert [r["generation"] for r in history.read(path)] == [0, 1]


def test_history_in_another_noise_mode_is_refused_before_any_update(tmp_path):
    from coevolve.es import ESConfig, ESOpt, NoiseModeError, history

    class Recorder:
        device, tensor_parallel_size = "cpu", 1

        def __init__(self, noise, rank):
            self.noise, self.rank, self.updates = noise, rank, []

        def apply_update(self, seeds, coefficients, alpha):
            self.updates.append(seeds)

        def checksum(self):
            return str(len(self.updates))

        def noise_info(self):
            return {"noise": self.noise, "rank": self.rank, "frozen_elements": 0}

    path = tmp_path / "history.jsonl"
    es = ESOpt(ESConfig(population=2, generations=2, noise="lowrank", rank=1), path)
    writer = Recorder("lowrank", 1)
    for _ in range(2):
        es.tell(writer, es.ask(), [0.0, 1.0])
    assert [(r["noise"], r["rank"]) for r in history.read(path)] == [("lowrank", 1)] * 2
    for noise, rank in (("full", None), ("lowrank", 8)):
        other = Recorder(noise, rank)
        with pytest.raises(NoiseModeError, match="generation 0"):
            ESOpt.resume(ESConfig(population=2, generations=2), path, other)
        assert other.updates == []
    same = Recorder("lowrank", 1)
    ESOpt.resume(ESConfig(population=2, generations=2, noise="lowrank"), path, same)
    assert len(same.updates) == 2


def test_generations_with_equal_rewards_are_counted_as_moving_nothing(tmp_path):
    from coevolve.base.records import ESCounts
    from coevolve.report import es_updates

    path = tmp_path / "h.jsonl"
    engine = VectorEngine()
    es = ESOpt(ESConfig(population=4, generations=3), path)
    es.tell(engine, es.ask(), [0.25] * 4)  # every member alike: z = 0, no move
    assert not engine.theta.any() and es.flat == 1
    es.tell(engine, es.ask(), [0.0, 1.0, 0.25, 0.25])
    assert engine.theta.any() and es.flat == 1
    assert ESOpt.resume(es.cfg, path, VectorEngine()).flat == 1  # counted again from the history
    assert es_updates(ESCounts(updates=2, flat=1)) == "2 (1 with every member's reward equal: no weight moved)"
    assert es_updates(ESCounts.model_validate({"updates": 2})) == "2"  # a summary written before the count existed
