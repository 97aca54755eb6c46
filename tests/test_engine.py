"""The engine and ES core on the real embedded model and the real vLLM engine."""

from __future__ import annotations

import json
import math
import textwrap

import pytest

from coevolve.base.errors import ConfigError
from coevolve.engine.base import Sampling
from coevolve.engine.models import ModelError, count_checkpoint_parameters, resolve
from coevolve.es import ESConfig, ESOpt, history
from conftest import closest, run_python

pytestmark = pytest.mark.engine

PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write one sentence about the sea."}],
    [{"role": "user", "content": "List three fruits."}],
]
GREEDY = Sampling(temperature=0.0, max_tokens=24)


def greedy(engine) -> list[str]:
    return [c.text for c in engine.chat(PROMPTS, GREEDY)]


def test_every_checkpoint_parameter_is_perturbed(engine, model_dir):
    expected = count_checkpoint_parameters(model_dir)
    assert expected == 134_515_008
    assert engine.num_parameters() == expected
    touched = engine.perturb(7, 1e-3)
    engine.restore()
    assert touched == expected


def test_perturb_changes_output_and_restore_is_exact(engine):
    base_sum, base_text = engine.checksum(), greedy(engine)
    with engine.perturbed(123, 2e-2):
        assert engine.checksum() != base_sum
        assert greedy(engine) != base_text
    assert engine.checksum() == base_sum
    assert greedy(engine) == base_text


def test_generation_runs_packed_and_every_weight_write_drops_the_packed_copy(engine):
    # SmolLM2: 30 blocks x (qkv, o, gate_up, down) + lm_head (tied to the embedding, which only looks rows up)
    base = greedy(engine)
    assert engine._rpc("es_kernels") == {"layers": 121, "packed": True}
    engine.perturb(123, 2e-2)
    try:
        assert engine._rpc("es_kernels")["packed"] is False  # a stale packed copy would decode θ
        perturbed = greedy(engine)
        assert engine._rpc("es_kernels")["packed"] is True and perturbed != base
        # the independent fact: plain F.linear on the same weights decodes that model, not θ (the same
        # text where the two kernels round alike: conftest.closest)
        engine._rpc("es_set_packing", False)
        try:
            assert closest(greedy(engine), [perturbed, base]) == 0
            engine.restore()
            assert closest(greedy(engine), [base, perturbed]) == 0
        finally:
            engine._rpc("es_set_packing", True)
    finally:  # a failure must not leave the session's engine perturbed for the tests after it
        if engine._perturbation is not None:
            engine.restore()
    assert engine._rpc("es_kernels")["packed"] is False
    assert greedy(engine) == base


def test_many_cycles_leave_weights_bit_identical(engine):
    # bf16 add-then-subtract leaves 4-7% of the elements an ulp off after ONE cycle (NOTES), so 10
    # cycles (each its own seed) catch any restore that is not a re-cast of the master; each cycle draws
    # 134.5M normals (~0.6 s): 200 of them spent two minutes of the suite proving the same thing, 30 a
    # further 12 s.
    base = engine.checksum()
    for i in range(10):
        engine.perturb(1000 + i, 1e-3)
        engine.restore()
    assert engine.checksum() == base


def test_shared_prefixes_reuse_kv_only_under_the_weights_that_computed_it(engine):
    """Outside a shared_prefixes() block only the requests of one call share (and, in float32, sample
    what they sample alone); inside, a repeated prompt is reused across calls, until a weight write: a
    perturbed call then computes its prompt afresh and says what it says alone."""
    facts = " ".join(f"Item {i} weighs {i * 7 % 13} kg." for i in range(70))  # 671 tokens: several KV blocks
    long = [[{"role": "user", "content": f"{facts} Which item is the heaviest?"}]]
    sampling = Sampling(temperature=0.0, max_tokens=8)
    outside = [engine.chat(long, sampling)[0] for _ in range(2)]
    assert [c.cached_tokens for c in outside] == [0, 0] and outside[0].prompt_tokens > 600
    sampled = Sampling(temperature=1.0, max_tokens=24)
    together = engine.chat(long * 2, sampled, seeds=[1, 2])
    assert together[1].cached_tokens > 0 and together[0].text != together[1].text
    # float32 kernels gave each request its text alone; bf16 ones on CPU are not batch-invariant (the same
    # seeded request samples otherwise beside another: results/s37/batch_invariance.txt), so there the
    # shared call must repeat itself
    if engine.dtype == "float32":
        reference = [engine.chat(long, sampled, seeds=[s])[0].text for s in (1, 2)]
    else:
        reference = [c.text for c in engine.chat(long * 2, sampled, seeds=[1, 2])]
    assert [c.text for c in together] == reference
    assert engine.chat(long, sampling)[0].cached_tokens == 0  # that call's blocks stay its own
    with engine.perturbed(3, 2e-2):
        alone = engine.chat(long, sampling)[0]
    with engine.shared_prefixes():
        first, again = (engine.chat(long, sampling)[0] for _ in range(2))
        with engine.perturbed(3, 2e-2):
            perturbed = engine.chat(long, sampling)[0]
        after = engine.chat(long, sampling)[0]  # restored: θ again, but the cache was computed under θ+σε
    assert first.cached_tokens == 0 and again.cached_tokens > 0
    assert perturbed.cached_tokens == 0 and perturbed.text == alone.text
    assert after.cached_tokens == 0
    assert engine.chat(long, sampling)[0].cached_tokens == 0  # the block closed


def test_same_seed_same_weights_different_seed_different(engine):
    with engine.perturbed(5, 1e-2):
        first = engine.checksum()
    with engine.perturbed(5, 1e-2):
        again = engine.checksum()
    with engine.perturbed(6, 1e-2):
        other = engine.checksum()
    assert first == again
    assert first != other


def test_chat_batches_with_per_request_seeds(engine):
    sampling = Sampling(temperature=1.0, max_tokens=16)
    convs = [PROMPTS[1]] * 4
    a = engine.chat(convs, sampling, seeds=[1, 2, 3, 4])
    b = engine.chat(convs, sampling, seeds=[1, 2, 3, 4])
    assert [c.text for c in a] == [c.text for c in b]
    assert len({c.text for c in a}) > 1
    assert all(c.completion_tokens > 0 and c.prompt_tokens > 0 for c in a)
    stopped = engine.chat([PROMPTS[2]], Sampling(temperature=0.0, max_tokens=64, stop=("\n",)))
    assert "\n" not in stopped[0].text


def test_bad_input_is_rejected_and_weights_stay(engine, tmp_path):
    base = engine.checksum()
    with pytest.raises(ValueError, match="sigma"):
        engine.perturb(1, 0.0)
    with pytest.raises(ValueError, match="sigma"):
        engine.perturb(1, math.nan)
    with pytest.raises(ConfigError, match="es.sigma"):
        ESConfig(sigma=-1e-3)
    with pytest.raises(ConfigError, match="es.population"):
        ESConfig(population=1)
    es = ESOpt(ESConfig(population=2, generations=1), tmp_path / "history.jsonl")
    members = es.ask()
    with pytest.raises(ValueError, match="finite"):
        es.tell(engine, members, [1.0, math.nan])
    with pytest.raises(ValueError, match="finite"):
        engine.apply_update([1, 2], [1.0, math.inf], 1e-3)
    greedy = Sampling(temperature=0.0, max_tokens=4)
    with pytest.raises(ValueError, match="got 1 seeds for 2 conversations"):
        engine.chat([PROMPTS[1]] * 2, greedy, seeds=[1])
    with pytest.raises(ValueError, match="got 3 constraints for 2 conversations"):
        engine.chat([PROMPTS[1]] * 2, greedy, constraints=[None] * 3)
    assert engine.checksum() == base
    assert not (tmp_path / "history.jsonl").exists()
    with pytest.raises(ModelError, match="does not exist"):
        resolve(tmp_path / "missing")
    (tmp_path / "notamodel").mkdir()
    with pytest.raises(ModelError, match="config.json"):
        resolve(tmp_path / "notamodel")


def test_a_prompt_longer_than_the_context_is_one_line_naming_its_length(engine):
    """vLLM's own refusal does not say which request nor that length is the cause (under a decoding
    constraint it read as a rejected constraint): the engine counts the prompts once a call fails."""
    from coevolve.base.errors import UsageError
    from coevolve.engine.base import ContextLengthError

    long = [{"role": "user", "content": "word " * 3000}]
    greedy = Sampling(temperature=0.0, max_tokens=4)
    text = engine.tokenizer.apply_chat_template(long, add_generation_prompt=True, tokenize=False)
    tokens = len(engine.tokenizer(text, add_special_tokens=False)["input_ids"])
    assert tokens > engine.max_model_len == 2048
    for constraints in (None, [None, "set [1-4] [1-4] [1-4]"]):
        with pytest.raises(ContextLengthError) as caught:
            engine.chat([PROMPTS[1], long], greedy, seeds=[0, 1], constraints=constraints)
        assert isinstance(caught.value, UsageError) and caught.value.index == 1
        assert str(caught.value) == (f"a prompt of {tokens} tokens does not fit the engine's context of 2048 tokens "
                                     "(request 1 of the call)")
    short = engine.chat([PROMPTS[1]], greedy, seeds=[0])[0]
    assert short.completion_tokens > 0  # the engine goes on
    # what a search measures before it asks, to lean a prompt that would not fit (loop.py LEAN): vLLM's count
    assert engine.prompt_lengths([PROMPTS[1], long]) == [short.prompt_tokens, tokens]

    # every too-long request is named, so a caller to whom a missing reply means nothing found (a skill
    # analyst) asks again without them: those become empty replies, the others are what they would be alone
    from coevolve.engine.base import REFUSED_LONG, answered_or_empty

    call = [PROMPTS[1], long, PROMPTS[2], long]
    with pytest.raises(ContextLengthError) as caught:
        engine.chat(call, greedy, seeds=[0, 1, 2, 3])
    assert caught.value.too_long == (1, 3)
    replies = answered_or_empty(lambda asked: engine.chat([call[i] for i in asked], greedy, seeds=asked), 4,
                                "nothing fits")
    alone = engine.chat([PROMPTS[1], PROMPTS[2]], greedy, seeds=[0, 2])
    assert [r.text for r in replies] == [alone[0].text, "", alone[1].text, ""]
    assert [r.finish_reason for r in replies[1::2]] == [REFUSED_LONG] * 2
    with pytest.raises(ContextLengthError, match="request 0 of the call.*: nothing fits"):
        answered_or_empty(lambda asked: engine.chat([long] * len(asked), greedy), 2, "nothing fits")


def test_a_context_error_keeps_its_place_when_pickled_and_shifted():
    """An engine pool's actors pickle the error; the pool then names the request by its place in the
    whole call (tests/test_distributed.py runs it through Ray)."""
    import pickle

    from coevolve.engine.base import ContextLengthError

    error = pickle.loads(pickle.dumps(ContextLengthError.prompt(3007, 2048, 1, [0, 1])))
    assert (error.index, error.tokens, error.limit, error.too_long) == (1, 3007, 2048, (0, 1))
    moved = error.shifted(2)
    assert moved.index == 3 and moved.too_long == (2, 3) and str(moved) == ("a prompt of 3007 tokens does not fit the engine's context of 2048 "
                                               "tokens (request 3 of the call)")
    worded = ContextLengthError("sudoku: an episode outgrew the engine's context", 1).shifted(4)
    assert (worded.index, str(worded)) == (5, "sudoku: an episode outgrew the engine's context")


def test_history_replays_bit_for_bit_and_export_reloads(engine, tmp_path):
    """Three ES generations, then (in a fresh interpreter) a fresh engine replays
    history.jsonl to the same checksum, and the exported checkpoint reloads in
    vLLM with the same greedy outputs. The engine is put back afterwards."""
    path = tmp_path / "history.jsonl"
    base = engine.checksum()
    # two members a generation: each member costs a 134.5M-normal draw here and again in the replay
    es = ESOpt(ESConfig(population=2, sigma=1e-2, alpha=5e-3, generations=3), path, seed=11)
    for _ in range(3):
        members = es.ask()
        es.tell(engine, members, [float(i % 3) for i in range(len(members))])
    tuned = engine.checksum()
    assert tuned != base
    assert len(history.read(path)) == 3
    tuned_text = greedy(engine)
    export_dir = engine.export(tmp_path / "exported")
    engine.reset()
    assert engine.checksum() == base

    script = textwrap.dedent(
        f"""
        import json
        from coevolve.engine.vllm_engine import Engine
        from coevolve.engine.base import Sampling
        from coevolve.es import ESConfig, ESOpt
        fresh = Engine()
        ESOpt.resume(ESConfig(population=2, generations=3), {str(path)!r}, fresh)
        replayed = fresh.checksum()
        fresh.close()
        reloaded = Engine({str(export_dir)!r})
        texts = [c.text for c in reloaded.chat({PROMPTS!r}, Sampling(temperature=0.0, max_tokens=24))]
        print("RESULT" + json.dumps({{"replayed": replayed, "texts": texts}}))
        """
    )
    proc = run_python(script, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")]
    assert lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT"):])
    assert result["replayed"] == tuned
    assert result["texts"] == tuned_text


def _noise(seed: int, name: str, numel: int):
    """ε of one parameter, regenerated here from the noise definition alone
    (docs/es.md: a torch CPU generator seeded with the first 8 bytes of
    sha256("coevolve-noise-v1:<seed>:<name>"), little-endian, top bit cleared;
    fp32 standard normals), not through coevolve.base.noise."""
    import hashlib

    import torch

    digest = hashlib.sha256(f"coevolve-noise-v1:{seed}:{name}".encode()).digest()
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    return torch.randn(numel, generator=gen, dtype=torch.float32)


def test_member_and_update_match_independently_regenerated_noise(engine, tmp_path):
    """On the real model: a member's live weights are exactly cast(θ + σε), and an
    update moves θ by exactly α/G Σ z_i ε_i, with z worked out by hand."""
    import torch

    names = ["model.norm.weight", "model.layers.0.mlp.down_proj.weight"]  # one small, one large (< a chunk)
    theta0 = {n: engine.parameter(n, master=True) for n in names}
    alpha, sigma = 0.05, 1e-2  # large, so a wrong scale moves many bf16 ulps
    live = getattr(torch, engine.dtype)  # the weight type "auto" chose for this machine
    es = ESOpt(ESConfig(population=3, generations=1, sigma=sigma, alpha=alpha, ddof=0), tmp_path / "h.jsonl", seed=11)
    members = es.ask()
    try:
        with engine.perturbed(members[1].seed, members[1].sigma):
            for n in names:
                eps = _noise(members[1].seed, n, theta0[n].numel()).view_as(theta0[n])
                expected = (eps * sigma + theta0[n]).to(live)
                assert torch.equal(engine.parameter(n), expected), n
        es.tell(engine, members, [0.6, 0.3, 0.1])
        # z by hand (population std): mean 1/3, deviations (0.26667, -0.03333, -0.23333),
        # std sqrt(0.126667 / 3) = 0.205480: z = (1.297771, -0.162221, -1.135550)
        z = [1.297771, -0.162221, -1.135550]
        for n in names:
            eps = [_noise(m.seed, n, theta0[n].numel()).double() for m in members]
            moved = (engine.parameter(n, master=True).double() - theta0[n].double()).view(-1)
            expected = alpha / 3 * sum(zi * e for zi, e in zip(z, eps))
            assert torch.allclose(moved, expected, rtol=1e-5, atol=1e-6), n
            assert moved.abs().max() > 1e-3  # it did move
            assert torch.equal(engine.parameter(n), engine.parameter(n, master=True).to(live))
    finally:
        engine.reset()
