"""EnginePool on a private Ray cluster on loopback: two real vLLM-CPU engines,
one core each. The single-engine reference runs the same ES generations on the
session's plain engine (both cores, a larger batch limit: what the pool must
match does not depend on how one engine is set up)."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from coevolve.base.config import build_config
from coevolve.base.errors import UsageError
from coevolve.base.sections import DistributedSection
from coevolve.engine.pool import DivergenceError, EnginePool, core_groups

GREEDY_SHORT = dict(temperature=0.0, max_tokens=16)
PROMPTS = ["Name a colour.", "What is 2 + 3?"]
POPULATION = 4
GENERATIONS = 2


def run_es(engine, history_path: str) -> dict:
    """Two ES generations through `generate_members` and ESOpt.tell. Reward:
    characters generated, which a large enough σ moves member to member."""
    from coevolve.engine.base import Sampling
    from coevolve.engine.vllm_engine import MemberJob
    from coevolve.es import ESConfig, ESOpt

    sampling = Sampling(**GREEDY_SHORT)
    conversations = [[{"role": "user", "content": p}] for p in PROMPTS]
    opt = ESOpt(ESConfig(population=POPULATION, sigma=1e-2, schedule="constant", alpha=1e-2,
                         generations=GENERATIONS), history_path, seed=7)
    out = {"rewards": [], "checksums": [], "texts": []}
    for _ in range(GENERATIONS):
        members = opt.ask()
        jobs = [MemberJob(m.seed, m.sigma, conversations, sampling, request_seeds=[1, 2]) for m in members]
        results = engine.generate_members(jobs)
        assert len(results) == len(jobs)
        rewards = [float(sum(len(c.text) for c in member)) for member in results]
        record = opt.tell(engine, members, rewards)
        out["rewards"].append(rewards)
        out["checksums"].append(record["checksum"])
        out["texts"].append([[c.text for c in member] for member in results])
    return out


def test_section_checks():
    assert not DistributedSection().uses_ray
    assert DistributedSection(engines=2).uses_ray
    assert build_config(DistributedSection, {"engines": 3, "address": "ray://10.0.0.1:10001"}, "distributed").engines == 3
    with pytest.raises(UsageError, match="distributed.engines"):
        build_config(DistributedSection, {"engines": 0}, "distributed")
    with pytest.raises(UsageError, match="distributed.address"):
        build_config(DistributedSection, {"address": "10.0.0.1:6379"}, "distributed")


def test_tensor_parallel_size_is_a_config_key_that_reaches_the_engine(monkeypatch):
    """[distributed] tensor_parallel_size is handed to each engine vLLM builds (one in-process engine, or
    every engine of a pool); 1 by default, as old run directories' configs hold no such key."""
    from coevolve.engine import pool as engine_pool

    built = []
    monkeypatch.setattr(engine_pool.vllm_engine, "Engine", lambda model, **kwargs: built.append(kwargs) or "engine")
    section = build_config(DistributedSection, {"tensor_parallel_size": 4}, "distributed")
    assert engine_pool.build_engine(None, section, dtype="auto") == "engine"
    assert built == [{"dtype": "auto", "tensor_parallel_size": 4}]
    engine_pool.build_engine(None, DistributedSection())
    assert built[-1] == {"tensor_parallel_size": 1}
    with pytest.raises(UsageError, match=r"^config error: distributed.tensor_parallel_size must be in 1\.\.64 \(got 0\)$"):
        build_config(DistributedSection, {"tensor_parallel_size": 0}, "distributed")


def test_tensor_parallelism_without_the_gpus_is_refused_before_the_run_directory(tmp_path, capsys):
    """This CPU machine has no CUDA GPU: `coevolve run` and its --plan refuse with one line naming the key,
    and nothing is written."""
    from coevolve.cli import main

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine can shard the model")
    config = tmp_path / "tp.toml"
    config.write_text('[run]\nmethod = "sample+esopt"\nbudget = 4\n[sample]\nbatch = 2\n'
                      '[distributed]\ntensor_parallel_size = 2\n')
    for plan in ([], ["--plan"]):
        capsys.readouterr()
        assert main(["run", str(config), "--out", str(tmp_path / "run"), "--no-progress", *plan]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["coevolve run: error: config error: distributed.tensor_parallel_size = 2 with "
                       "distributed.engines = 1 needs 2 CUDA GPUs on this machine, which has 0; on CPU each engine "
                       "is one process: add CPU engines with distributed.engines instead"], err
        assert not (tmp_path / "run").exists()


def test_core_groups():
    assert core_groups(1, [0, 1]) == ["0,1"]
    assert core_groups(2, [0, 1]) == ["0", "1"]
    assert core_groups(2, [0, 1, 2, 3, 4]) == ["0,1", "2,3,4"]
    assert core_groups(3, [4, 5]) == ["4", "5", "4"]
    with pytest.raises(ValueError):
        core_groups(0, [0])


@pytest.fixture(scope="module")
def reference(model_dir, _close_engines, tmp_path_factory):
    from conftest import plain_engine

    engine = plain_engine(model_dir)
    start = engine.checksum()
    try:
        out = run_es(engine, str(tmp_path_factory.mktemp("reference") / "history.jsonl"))
    finally:
        engine.reset()  # the session engine goes back as it was found
    return {**out, "start": start}


@pytest.fixture(scope="module")
def pool(reference):
    from conftest import loader_variables_as_the_session_began

    # the Ray cluster starts without the loader variables the session engine left in os.environ, as
    # `coevolve run` with [distributed] starts it (no engine in the driver)
    with loader_variables_as_the_session_began():
        p = EnginePool(2, max_num_seqs=8)
    with p:
        yield p


def _is_loopback(ip: str) -> bool:
    return ip in ("127.0.0.1", "::1", "::ffff:127.0.0.1")


# Fixture set-up (the reference on the session engine, then two pool engines) counts toward the
# first test's time limit; on a loaded 2-core machine that is minutes.
@pytest.mark.engine
@pytest.mark.timeout(1800)
def test_private_cluster_listens_on_loopback_only(pool):
    import os

    import psutil

    ray_pids = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
    assert {h.pid for h in pool.engines} <= ray_pids
    listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in ray_pids]
    assert listening, "found no Ray servers to check"
    outside = [(c.laddr.ip, c.laddr.port, psutil.Process(c.pid).name()) for c in listening if not _is_loopback(c.laddr.ip)]
    assert outside == []


@pytest.mark.engine
def test_two_engines_match_single_engine(pool, reference, tmp_path):
    assert len(pool.engines) == 2
    assert len({h.pid for h in pool.engines}) == 2
    assert pool.device == "cpu"
    assert pool.checksum() == reference["start"]
    # A real update happened: rewards differ within a generation and the weights moved.
    assert len(set(reference["rewards"][0])) > 1
    assert reference["checksums"][0] != reference["start"]

    out = run_es(pool, str(tmp_path / "history.jsonl"))

    assert out["texts"] == reference["texts"]
    assert out["rewards"] == reference["rewards"]
    assert out["checksums"] == reference["checksums"]
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [r["checksum"] for r in history] == reference["checksums"]


@pytest.mark.engine
def test_divergence_is_reported(pool):
    # One engine alone takes an update the other never saw.
    lone = pool.engines[1]
    import ray

    ray.get(lone.actor.call.remote("apply_update", [123], [1.0], 1e-2))
    with pytest.raises(DivergenceError, match=r"engine-0=.*engine-1="):
        pool.checksum()
    # Put both back at the same weights (the checkpoint) for the next test.
    pool.reset()
    pool.checksum()


@pytest.mark.engine
def test_a_prompt_too_long_for_an_engine_of_the_pool_is_the_engines_one_line(pool):
    """Raised in an actor, it arrives as the engine raised it (not in Ray's wrapper with the actor's
    traceback), and named by its place in the whole call: the call is split, request 3 is the second
    engine's request 1."""
    from coevolve.engine.base import ContextLengthError, Sampling

    short, long = [{"role": "user", "content": "hi"}], [{"role": "user", "content": "word " * 3000}]
    with pytest.raises(ContextLengthError) as caught:
        pool.chat([short, short, short, long], Sampling(temperature=0.0, max_tokens=4), seeds=[0, 1, 2, 3])
    message = str(caught.value)
    assert type(caught.value) is ContextLengthError and caught.value.index == 3, message
    assert re.fullmatch(r"a prompt of 30\d\d tokens does not fit the engine's context of 2048 tokens "
                        r"\(request 3 of the call\)", message), message
    assert len(pool.chat([short], Sampling(temperature=0.0, max_tokens=4), seeds=[0])) == 1  # the pool goes on
    # measured before it is asked, as one engine would (a search leans what does not fit: loop.py LEAN)
    lengths = pool.prompt_lengths([short, long])
    assert lengths[0] < 50 and re.fullmatch(r"30\d\d", str(lengths[1])) and lengths[1] >= 2048, lengths


@pytest.mark.engine
def test_engine_killed_mid_generation(pool, reference):
    from coevolve.engine.base import Sampling
    from coevolve.engine.vllm_engine import MemberJob
    from coevolve.search.ledger import Ledger
    import ray

    # Same first generation as the reference, from the checkpoint's weights.
    from coevolve.es import ESConfig, ESOpt

    members = ESOpt(ESConfig(population=POPULATION, sigma=1e-2, schedule="constant", alpha=1e-2,
                             generations=GENERATIONS), "/dev/null", seed=7).ask()
    conversations = [[{"role": "user", "content": p}] for p in PROMPTS]
    jobs = [MemberJob(m.seed, m.sigma, conversations, Sampling(**GREEDY_SHORT), request_seeds=[1, 2])
            for m in members]
    victim = pool.engines[1]
    outcome: dict = {}

    def generate():
        try:
            outcome["results"] = pool.generate_members(jobs)
        except BaseException as exc:  # reported by the assertions below
            outcome["error"] = exc

    worker = threading.Thread(target=generate)
    worker.start()
    deadline = time.time() + 120
    while victim.name not in pool.busy and time.time() < deadline:
        time.sleep(0.05)
    assert victim.name in pool.busy, "the victim engine never got a member"
    time.sleep(0.5)  # inside its perturb or generation, not just queued
    ray.kill(victim.actor)
    worker.join(timeout=600)

    assert "error" not in outcome, outcome.get("error")
    results = outcome["results"]
    assert [h.name for h in pool.engines] == ["engine-0"]
    # Exactly one result per job, each the one the single engine produced.
    assert len(results) == len(jobs)
    assert [[c.text for c in member] for member in results] == reference["texts"][0]
    ledger = Ledger(budget=len(jobs) * len(PROMPTS))
    for member in results:
        for completion in member:
            ledger.charge("evaluated")
        ledger.record_llm(member)
    assert ledger.used == ledger.budget and ledger.llm_requests == len(jobs) * len(PROMPTS)
    # The survivor still takes updates and checks itself.
    pool.apply_update([m.seed for m in members], [1.0, -1.0, 0.5, -0.5], 1e-2)
    assert pool.checksum() != reference["start"]
