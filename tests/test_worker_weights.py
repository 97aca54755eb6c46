"""The worker extension's weight operations in each weight type the engine may run
([model] dtype), on a small torch model mounted as vLLM's worker would hold it: the
session engine runs one type per machine (bf16 where the CPU computes it natively,
float32 elsewhere), so the other type is checked here on every machine."""

from __future__ import annotations

import pytest
import torch

from coevolve.engine.worker_ext import WeightsExtension


class Runner:
    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model


def mounted(dtype: torch.dtype) -> WeightsExtension:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).to(dtype)
    ext = WeightsExtension()
    ext.model_runner = Runner(model)
    assert ext.es_init() == 16 * 32 + 32 + 32 * 8 + 8
    return ext


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_perturb_restore_and_update_keep_theta_apart_from_the_live_weights(dtype):
    ext = mounted(dtype)
    base = ext.es_checksum()
    master = {name: ext.es_tensor(name, master=True) for name, _ in ext._params()}
    ext.es_perturb(123, 2e-2)
    assert ext.es_checksum() != base
    # θ is a copy: the perturbation did not reach it (a float32 master that aliased the live tensor would)
    assert all(torch.equal(ext.es_tensor(name, master=True), m) for name, m in master.items())
    ext.es_restore()
    assert ext.es_checksum() == base
    for seed in range(5):
        ext.es_perturb(1000 + seed, 1e-3)
        ext.es_restore()
    assert ext.es_checksum() == base
    ext.es_update([7, 8], [1.0, -1.0], 1e-2)
    for name, p in ext._params():
        theta = ext.es_tensor(name, master=True)
        assert not torch.equal(theta, master[name])  # the step landed on θ, in float32
        assert torch.equal(ext.es_tensor(name, master=False), theta.to(dtype))  # live = cast(θ)
