"""A real ES run on the real engine improves a real reward.

Property: a reply finished within 16 new tokens. The embedded model is chatty:
on these 16 everyday questions it mostly keeps going past 16 tokens, so the
property is mostly failed at base. The ES fitness is the dense version of the
same property (1 - tokens used / 16, averaged over the questions), so every
member gets a different score even before any reply finishes. Greedy decoding
makes the reward a deterministic function of the weights."""

from __future__ import annotations

import pytest

from coevolve.engine.base import Sampling
from coevolve.es import ESConfig, ESOpt, history

pytestmark = pytest.mark.engine

QUESTIONS = [
    "What is the capital of France?", "Name a primary color.", "What animal says moo?",
    "What is 3 times 4?", "Which planet is closest to the sun?", "What do bees make?",
    "What is the opposite of hot?", "How many legs does a spider have?",
    "What color is the sky on a clear day?", "What is frozen water called?",
    "Who wrote Romeo and Juliet?", "What is the largest ocean?", "What gas do plants absorb?",
    "What is 10 minus 7?", "What language is spoken in Spain?", "What is the fastest land animal?",
]
LIMIT = 16
GREEDY = Sampling(temperature=0.0, max_tokens=LIMIT)


def measure(engine) -> tuple[float, float]:
    """(dense fitness, fraction of replies finished within the limit)."""
    outs = engine.chat([[{"role": "user", "content": q}] for q in QUESTIONS], GREEDY)
    fitness = sum(1 - o.completion_tokens / LIMIT for o in outs) / len(outs)
    finished = sum(o.finish_reason == "stop" for o in outs) / len(outs)
    return fitness, finished


def train(engine, config: ESConfig, path, after=None) -> None:
    """Full-noise ES on the brevity fitness, members one after another; `after(generation)` after each update."""
    es = ESOpt(config, path, seed=0)
    for generation in range(config.generations):
        members = es.ask()
        rewards = []
        for m in members:
            with engine.perturbed(m.seed, m.sigma):
                rewards.append(measure(engine)[0])
        es.tell(engine, members, rewards)
        if after is not None:
            after(generation)


def test_es_makes_replies_shorter(engine, tmp_path):
    # 3: at 4 the last generation added 0.172 -> 0.176 (benchmarks/results/s35/es_learns_trajectory.txt);
    # not 2: measured in s57, two left float32 with 0.059 -> 0.090, too thin a margin for another CPU
    generations = 3
    base_fitness, base_finished = measure(engine)
    try:
        train(engine, ESConfig(population=8, sigma=3e-3, sigma_end=1.5e-3, alpha=3e-3, generations=generations),
              tmp_path / "history.jsonl")
        tuned_fitness, tuned_finished = measure(engine)
    finally:
        engine.reset()
    records = history.read(tmp_path / "history.jsonl")
    assert len(records) == generations
    print(f"\nES brevity: fitness {base_fitness:.3f} -> {tuned_fitness:.3f}, "
          f"finished within {LIMIT} tokens {base_finished:.2f} -> {tuned_finished:.2f}")
    assert base_finished <= 0.5  # the property is mostly failed at base
    assert tuned_fitness > base_fitness


def test_lowrank_es_makes_replies_shorter(lowrank_engine, tmp_path):
    """The twin: same reward, seeds and schedule shape; the population runs as one
    batch of rank-1 LoRA members and the update is the full-rank sum."""
    from coevolve.engine.base import MemberJob

    engine = lowrank_engine
    generations = 3
    conversations = [[{"role": "user", "content": q}] for q in QUESTIONS]
    base_fitness, base_finished = measure(engine)
    # About three times the full-rank twin's noise and step: a rank-1 factor pair per
    # matrix moves far fewer directions, and at 3e-3 a float32 engine's update
    # left every greedy reply unchanged (fitness 0.0586 -> 0.0586 in all four
    # generations; at 1e-2: 0.059 -> 0.238, finished 0.125 -> 0.56: results/s32/lowrank_calibration.txt).
    # 3 generations: measured (s57) float32 0.059 -> 0.055 -> 0.090 -> 0.199, bf16 0.027 -> 0.156;
    # after 2 the s32 float32 run had only 0.074.
    es = ESOpt(
        ESConfig(population=8, sigma=1e-2, sigma_end=5e-3, alpha=1e-2, generations=generations,
                 noise="lowrank", rank=1),
        tmp_path / "history.jsonl", seed=0,
    )
    try:
        for _ in range(generations):
            members = es.ask()
            outs = engine.generate_members([MemberJob(m.seed, m.sigma, conversations, GREEDY) for m in members])
            rewards = [sum(1 - o.completion_tokens / LIMIT for o in out) / len(out) for out in outs]
            es.tell(engine, members, rewards)
        tuned_fitness, tuned_finished = measure(engine)
    finally:
        engine.reset()
    records = history.read(tmp_path / "history.jsonl")
    assert [r["noise"] for r in records] == ["lowrank"] * generations
    print(f"\nlow-rank ES brevity: fitness {base_fitness:.3f} -> {tuned_fitness:.3f}, "
          f"finished within {LIMIT} tokens {base_finished:.2f} -> {tuned_finished:.2f}")
    assert base_finished <= 0.5
    assert tuned_fitness > base_fitness
